"""What we start finds the installed package whatever the current directory holds, and a child
that exits is reported by its last words."""

from __future__ import annotations

import subprocess

from fabricwatch.local.processes import ChildExited, fabricwatch_command, last_lines

PARTIAL = 'raise ImportError("the fabricwatch folder of the current directory was imported")\n'


def test_a_child_ignores_a_fabricwatch_folder_in_the_current_directory(tmp_path):
    """``python -m`` alone would import ``./fabricwatch`` (a clone's partial package, as in the
    repository root of earlier builds) instead of the installed package."""
    (tmp_path / "fabricwatch").mkdir()
    (tmp_path / "fabricwatch" / "__init__.py").write_text(PARTIAL)
    done = subprocess.run(
        fabricwatch_command("worker", "--help"), cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--broker" in done.stdout


def test_the_last_lines_of_a_childs_output_are_one_line_without_terminal_codes(tmp_path):
    log = tmp_path / "worker.log"
    log.write_text(
        "starting\n" * 5000
        + "\x1b[31mTraceback (most recent call last):\x1b[0m\n"
        + '  File "x.py", line 1\n\n'
        + "ModuleNotFoundError: No module named 'fabricwatch.detectors'\n"
    )
    said = last_lines(log)
    assert said == (
        'Traceback (most recent call last): | File "x.py", line 1 | '
        "ModuleNotFoundError: No module named 'fabricwatch.detectors'"
    )
    assert last_lines(log, chars=40) == "... No module named 'fabricwatch.detectors'"
    assert last_lines(tmp_path / "missing.log") == ""


def test_a_child_that_exited_says_its_code_and_reason_in_one_line():
    assert str(ChildExited("the worker (port 1)", 2, "bad.yaml: detectors: unknown key")) == (
        "the worker (port 1) exited with code 2: bad.yaml: detectors: unknown key"
    )
    assert str(ChildExited("the worker (port 1)", -9, "")) == (
        "the worker (port 1) exited with code -9 (it wrote nothing)"
    )
