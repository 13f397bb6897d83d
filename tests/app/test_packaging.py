"""The wheel installs one import root, ``fabricwatch``, beside PyPI's unrelated packages that share
our folder names.

PyPI has ``schemas`` (Python 2 code: it cannot be imported on 3.11 by anyone) and ``detectors`` (a
package of its own, whose dependencies are torch and more), and ``alerts``, whose only release
needs Python 3.12, so it cannot be installed here. The test installs the two that install, then our
wheel, into a fresh venv (``--system-site-packages`` for our dependencies, so nothing large is
downloaded), and checks that each name still resolves to its own package, unchanged, and that
``fabricwatch demo`` runs.
"""

from __future__ import annotations

import hashlib
import subprocess
import venv
import zipfile
from pathlib import Path

import pytest

PYPI_NEIGHBOURS = ("schemas", "detectors")
NAMES = ("schemas", "detectors", "fabricwatch", "fabricwatch.schemas", "fabricwatch.detectors")

pytestmark = pytest.mark.processes  # builds a wheel, makes a venv, downloads two packages


def test_the_wheel_has_one_top_level_name(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert z.read(top_level).decode().split() == ["fabricwatch"]
    roots = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert roots == {"fabricwatch"}
    for data in (
        "fabricwatch/schemas/data/vendor_map.csv",
        "fabricwatch/scenarios/demo.yaml",
        "fabricwatch/scenarios/eval/storm_1s_64h.yaml",
        "fabricwatch/dashboards/grafana/dashboards/fabric-overview.json",
        "fabricwatch/dashboards/grafana/provisioning/datasources/fabricwatch-clickhouse.yaml",
    ):
        assert data in names


def test_installed_beside_pypis_namesakes_both_sides_stay_whole(wheel, tmp_path):
    env = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(env)
    python = env / "bin" / "python"
    pip = [python, "-m", "pip", "install", "-q", "--no-deps"]
    fetched = subprocess.run([*pip, *PYPI_NEIGHBOURS], capture_output=True, text=True)
    if fetched.returncode != 0:
        pytest.skip(f"PyPI unreachable: {fetched.stderr.strip()[-300:]}")
    before = _files(python, PYPI_NEIGHBOURS)
    subprocess.run([*pip, wheel], check=True, capture_output=True)
    assert _files(python, PYPI_NEIGHBOURS) == before  # our install overwrote none of their files

    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    where = subprocess.run(
        [
            python,
            "-c",
            "import importlib.util as u, fabricwatch.detectors.pipeline, fabricwatch.schemas.messages\n"
            f"for n in {NAMES!r}:\n"
            "    print(n, u.find_spec(n).origin)",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.split("\n")
    origins = dict(line.split(" ", 1) for line in where if line)
    assert origins["schemas"] == f"{site}/schemas/__init__.py"
    assert origins["detectors"] == f"{site}/detectors/__init__.py"
    assert origins["fabricwatch"] == f"{site}/fabricwatch/__init__.py"
    assert origins["fabricwatch.schemas"] == f"{site}/fabricwatch/schemas/__init__.py"
    assert origins["fabricwatch.detectors"] == f"{site}/fabricwatch/detectors/__init__.py"

    demo = subprocess.run(
        [env / "bin" / "fabricwatch", "demo", "--no-store", "--quiet"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert demo.returncode == 0, demo.stderr[-2000:]
    assert "pfc_storm" in demo.stdout and "incast" in demo.stdout


def _files(python: Path, packages: tuple[str, ...]) -> dict[str, str]:
    """Every file of the installed ``packages`` with its content hash."""
    listing = subprocess.run(
        [python, "-m", "pip", "show", "-f", *packages], capture_output=True, text=True, check=True
    ).stdout
    location = next(line.split(": ", 1)[1] for line in listing.splitlines() if line.startswith("Location:"))
    files = [line.strip() for line in listing.splitlines() if line.startswith("  ")]
    return {
        f: hashlib.sha256((Path(location) / f).read_bytes()).hexdigest()
        for f in files
        if (Path(location) / f).is_file()
    }
