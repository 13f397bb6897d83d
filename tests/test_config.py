"""Detector configuration: the documented example is the defaults, and mistakes name the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from detectors.config import ConfigError, DetectorConfig, load_config

DOC = Path(__file__).resolve().parent.parent / "docs" / "detectors.md"


def test_documented_configuration_is_the_defaults(tmp_path):
    block = re.search(r"```yaml\n(.*?)```", DOC.read_text(), re.S).group(1)
    (tmp_path / "c.yaml").write_text(block)
    assert load_config(tmp_path / "c.yaml") == DetectorConfig()


def test_unknown_key_is_named(tmp_path):
    (tmp_path / "c.yaml").write_text("detectors:\n  ecmp:\n    max_entropy: 0.9\n")
    with pytest.raises(ConfigError, match=r"max_entropy.*\$\.ecmp|\$\.ecmp.*max_entropy"):
        load_config(tmp_path / "c.yaml")


def test_unreadable_yaml_names_the_file(tmp_path):
    (tmp_path / "c.yaml").write_text("detectors: [unclosed\n")
    with pytest.raises(ConfigError, match=r"c\.yaml"):
        load_config(tmp_path / "c.yaml")
