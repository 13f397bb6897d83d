"""Running a host tool (``ethtool``, ``lldpcli``) the collector falls back on or relies on."""

from __future__ import annotations

import shutil
import subprocess


def run_tool(argv: list[str], what: str, timeout_s: float, not_installed: str, error: type[Exception]) -> str:
    """``argv``'s output as text (bytes that are not UTF-8 become U+FFFD, for the parser to report).

    ``what`` names the command in errors; ``not_installed`` says what to do when ``argv[0]`` is
    not on PATH. Any failure raises ``error`` with the command, the exit status and its stderr."""
    exe = shutil.which(argv[0])
    if exe is None:
        raise error(not_installed)
    try:
        proc = subprocess.run([exe, *argv[1:]], capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise error(f"{what} did not answer within {timeout_s} s") from None
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise error(f"{what} failed (exit {proc.returncode}): {err}")
    return proc.stdout.decode(errors="replace")
