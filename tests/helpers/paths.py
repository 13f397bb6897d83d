"""Where the repository's parts are, for tests in any folder under ``tests/``."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
"""Real tool output, one copy (sources in ``FIXTURES / "SOURCES.md"``)."""
SCENARIOS = ROOT / "scenarios"
DOCS = ROOT / "docs"
