"""The house rules of docs/architecture.md, checked on the source: who may import whom, no import
loops, a core free of Kafka, Faust, ClickHouse and HTTP, every package folder installed, one copy
of every file (no symlinks), tests that mirror the rooms, collectors on one frame."""

from __future__ import annotations

import ast
import subprocess
import tomllib
from pathlib import Path

from helpers.paths import ROOT

ROOMS = {
    "fabricwatch.schemas": "schemas",
    "fabricwatch.ingest": "ingest",
    "fabricwatch.collectors": "collectors",
    "fabricwatch.detectors": "detectors",
    "fabricwatch.streams": "streams",
    "fabricwatch.storage": "storage",
    "fabricwatch.alerts": "alerts",
    "fabricwatch.dashboards": "dashboards",
    "fabricwatch.local": "local",
    "fabricwatch": "app",
}
"""Each package and its folder; ``fabricwatch`` (the app: the command line and what only it runs)
is ``app/``: no folder of the repository bears the import root's name
(``test_no_folder_in_the_root_shadows_the_installed_package``)."""

MAY_IMPORT = {
    "fabricwatch.schemas": set(),
    "fabricwatch.ingest": {"fabricwatch.schemas"},
    "fabricwatch.detectors": {"fabricwatch.schemas"},
    "fabricwatch.streams": {"fabricwatch.schemas", "fabricwatch.detectors"},
    "fabricwatch.collectors": {"fabricwatch.schemas", "fabricwatch.ingest", "fabricwatch.streams"},
    "fabricwatch.storage": {"fabricwatch.schemas", "fabricwatch.detectors", "fabricwatch.streams"},
    "fabricwatch.alerts": {"fabricwatch.schemas", "fabricwatch.detectors", "fabricwatch.streams"},
    "fabricwatch.dashboards": {"fabricwatch.schemas", "fabricwatch.detectors", "fabricwatch.storage"},
    "fabricwatch.local": set(),
}
"""Besides itself and the root's ``__version__``: the rooms below it in the data flow. The app may
import everything; nothing imports the app."""

CORE = ("fabricwatch.schemas", "fabricwatch.ingest", "fabricwatch.detectors")
SHELL_LIBRARIES = {
    "kafka",
    "aiokafka",
    "faust",
    "mode",
    "clickhouse_driver",
    "chdb",
    "requests",
    "urllib3",
    "http",
    "aiohttp",
}


def _modules() -> dict[str, Path]:
    """Every module of the installed package by dotted name."""
    out = {}
    for package, folder in ROOMS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def _imports(name: str, path: Path, known: set[str] | None = None) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function, absolute or relative.
    ``from package import submodule`` imports the submodule; the package's own ``__init__`` counts
    only when a name is taken from it (given ``known``, the modules that exist)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], base]).strip(".")
            subs = {f"{base}.{a.name}" for a in node.names}
            found |= subs
            if known is None or not subs <= known:
                found.add(base)
    return found


def _room(module: str) -> str | None:
    rooms = [r for r in ROOMS if r != "fabricwatch" and (module == r or module.startswith(r + "."))]
    if rooms:
        return rooms[0]
    return "fabricwatch" if module == "fabricwatch" or module.startswith("fabricwatch.") else None


def test_no_room_imports_one_above_it_in_the_data_flow():
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        own = _room(name)
        if own == "fabricwatch":
            continue
        for target in _imports(name, path):
            room = _room(target)
            if room is None or room == own:
                continue
            if room not in MAY_IMPORT[own]:
                wrong.append(f"{path.relative_to(ROOT)}: {target}")
    assert not wrong, "imports against docs/architecture.md:\n" + "\n".join(sorted(set(wrong)))


def test_the_core_imports_no_kafka_faust_clickhouse_or_http():
    wrong = [
        f"{path.relative_to(ROOT)}: {target}"
        for name, path in _modules().items()
        if name.startswith(CORE)
        for target in _imports(name, path)
        if target.split(".")[0] in SHELL_LIBRARIES
    ]
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_no_import_loops():
    modules = _modules()
    graph = {
        name: {t for t in _imports(name, path, set(modules)) if t in modules and t != name}
        for name, path in modules.items()
    }
    loops = [scc for scc in _strongly_connected(graph) if len(scc) > 1]
    assert not loops, "import loops: " + "; ".join(" <-> ".join(sorted(s)) for s in loops)


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative (the graph is a few hundred modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                scc = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    scc.add(member)
                    if member == node:
                        break
                out.append(scc)
    return out


def test_every_package_folder_is_installed():
    """A new sub-package must be listed in pyproject.toml, or the wheel silently leaves it out."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    dirs = config["package-dir"]
    found = set()
    for package, folder in dirs.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]))
    assert found == listed


def test_one_copy_of_everything_no_symlinks():
    files = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True)
    links = [line.split("\t")[1] for line in files.stdout.splitlines() if line.startswith("120000")]
    assert not links, f"symlinks in the repository: {links}"


def test_no_folder_in_the_root_shadows_the_installed_package():
    """``python -m`` puts the current directory first on ``sys.path``: a folder named like an
    installed top-level package in the clone's root would be imported instead of the installed one
    by whatever is started there, a partial package in which the other rooms cannot be found."""
    installed = {name.split(".")[0] for name in ROOMS}
    shadowing = [d.name for d in ROOT.iterdir() if d.is_dir() and d.name in installed]
    assert not shadowing, f"folders named like the installed package: {shadowing}"


def test_no_benchmark_or_module_of_ours_edits_sys_path():
    """What a benchmark needs lives in the package or in ``bench/``: a script that puts the
    repository or the test tree on ``sys.path`` works only from a clone and hides a missing module."""
    files = [*(ROOT / "bench").glob("*.py"), *_modules().values()]
    wrong = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in files
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    ]
    assert not wrong, "sys.path used in: " + ", ".join(wrong)


def test_no_source_file_is_over_600_lines():
    """A module past 600 lines holds more than one thing: split it where the things part."""
    files = [*_modules().values(), *(ROOT / "bench").glob("*.py")]
    long = {
        str(p.relative_to(ROOT)): n
        for p in files
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600
    }
    assert not long, long


def test_every_library_the_package_imports_is_declared():
    """What arrives only through another package's dependencies can leave with its next release."""
    import importlib.metadata
    import re
    import sys

    declared = {
        re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower().replace("_", "-")
        for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    distributions = importlib.metadata.packages_distributions()
    missing = set()
    for name, path in _modules().items():
        for target in _imports(name, path):
            top = target.split(".")[0]
            if top in sys.stdlib_module_names or top in ("fabricwatch", "__future__"):
                continue
            owners = {d.lower().replace("_", "-") for d in distributions.get(top, [top])}
            if not owners & declared:
                missing.add(f"{top} ({', '.join(sorted(owners))}), imported by {path.relative_to(ROOT)}")
    assert not missing, "imported but not in pyproject.toml's dependencies:\n" + "\n".join(sorted(missing))


def test_tests_mirror_the_rooms_and_import_no_other_test_module():
    """A room's tests are in ``tests/<room>/`` (this file, about every room, is the one at the top);
    what tests share is in ``tests/helpers/``, never imported from another test module."""
    tests = ROOT / "tests"
    misplaced = [
        str(path.relative_to(tests))
        for path in tests.rglob("test_*.py")
        if (path.parent == tests and path.name != "test_architecture.py")
        or (path.parent != tests and path.parent.name not in set(ROOMS.values()))
    ]
    assert not misplaced, f"tests outside tests/<room>/: {misplaced}"
    borrowing = [
        f"{path.relative_to(tests)}: {target}"
        for path in tests.rglob("*.py")
        for target in _imports("", path)
        if target.split(".")[0].startswith("test_") or target.split(".")[0] == "conftest"
    ]
    assert not borrowing, (
        "test modules importing others (put what is shared in tests/helpers/):\n" + "\n".join(borrowing)
    )


COLLECTING = ("collect", "phases", "ingest")
"""The command modules of collectors."""


def test_no_daemon_loop_in_the_command_line_and_no_collector_in_the_app_root():
    """The command line parses options and calls a collector; collectors run on
    ``collectors/frame.py``, which alone opens their trace writers and publishers."""
    cli = ROOT / "app" / "cli"
    looping = [
        f"{path.name}: {needle}"
        for path in sorted(cli.glob("*.py"))
        for needle in ("TraceWriter(", "Publisher(", "MetricsServer(", "while not ")
        if needle in path.read_text(encoding="utf-8")
        and path.name.startswith(("collect", "phases", "ingest"))
    ]
    assert not looping, f"collector runtime in app/cli: {looping}"
    own_outputs = [
        path.name
        for path in sorted((ROOT / "collectors").glob("*.py"))
        if path.name not in ("frame.py", "job_marks.py", "switch_assignments.py")
        and any(n in path.read_text(encoding="utf-8") for n in ("Publisher(", "MetricsServer("))
    ]
    assert not own_outputs, f"collectors opening their own publisher or web server: {own_outputs}"
    in_root = {p.stem for p in (ROOT / "app").glob("*.py")} & {
        "collector_metrics",
        "phase_metrics",
        "gnmi_ingest",
        "switch_assignments",
    }
    assert not in_root, f"collector runtime in the app root: {sorted(in_root)}"
