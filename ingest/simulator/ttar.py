"""Extract a ttar archive (the plain-text tree format of prometheus/procfs test fixtures).

The sysfs fixture is a ttar file so a real ``/sys/class/infiniband`` tree can be rebuilt in a
temporary directory and read by the same code that reads the live one.

Format (the subset our fixture uses): records separated by ``# ttar - - -`` lines, each either
``Directory: <path>`` or ``Path: <path>``, ``Lines: <n>`` and n content lines (a last line ending in
``EOF`` has no trailing newline), then ``Mode: <octal>``. Anything else is refused rather than guessed.
"""

from __future__ import annotations

from pathlib import Path


def extract_ttar(archive: Path, dest: Path) -> None:
    """Rebuild the tree of ``archive`` under ``dest``."""
    lines = archive.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("Directory: "):
            _target(dest, line).mkdir(parents=True, exist_ok=True)
        elif line.startswith("Path: "):
            i = _extract_file(lines, i, _target(dest, line))
        elif line and not line.startswith(("Mode: ", "# ttar")):
            raise ValueError(f"{archive.name} line {i + 1}: unexpected {line!r}")
        i += 1


def _target(dest: Path, line: str) -> Path:
    relative = Path(line.split(": ", 1)[1])
    if relative.is_absolute() or ".." in relative.parts:
        raise ValueError(f"ttar path escapes the destination: {relative}")
    return dest / relative


def _extract_file(lines: list[str], i: int, path: Path) -> int:
    """Write the file whose ``Path:`` header is at ``lines[i]``; return the index of its last line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    kind, _, arg = lines[i + 1].partition(": ")
    if kind != "Lines":
        raise ValueError(f"line {i + 2}: expected 'Lines:', got {lines[i + 1]!r}")
    count = int(arg)
    body = lines[i + 2 : i + 2 + count]
    text = "".join(f"{line}\n" for line in body)
    if body and body[-1].endswith("EOF"):
        text = text[: -len("EOF\n")]
    path.write_text(text, encoding="utf-8")
    return i + 1 + count
