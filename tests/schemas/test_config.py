"""Detector configuration: the documented example is the defaults, and mistakes name the key."""

from __future__ import annotations

import re

import pytest
from helpers.paths import DOCS

from fabricwatch.cli.main import main
from fabricwatch.detectors.config import DetectorConfig, load_config
from fabricwatch.schemas.config import ConfigError
from fabricwatch.streams.kafka_io import load_broker_settings

DOC = DOCS / "detectors.md"


def test_documented_configuration_is_the_defaults(tmp_path):
    block = re.search(r"```yaml\n(.*?)```", DOC.read_text(), re.S).group(1)
    (tmp_path / "c.yaml").write_text(block)
    assert load_config(tmp_path / "c.yaml") == DetectorConfig()


def test_unknown_key_is_named(tmp_path):
    (tmp_path / "c.yaml").write_text("detectors:\n  ecmp:\n    max_entropy: 0.9\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: detectors\.ecmp\.max_entropy: unknown key \(known: "):
        load_config(tmp_path / "c.yaml")


def test_unreadable_yaml_names_the_file(tmp_path):
    (tmp_path / "c.yaml").write_text("detectors: [unclosed\n")
    with pytest.raises(ConfigError, match=r"c\.yaml"):
        load_config(tmp_path / "c.yaml")


def test_near_miss_key_gets_a_suggestion(tmp_path):
    (tmp_path / "c.yaml").write_text("detectors:\n  incast:\n    ecn_kmin_byte: 50000\n")
    with pytest.raises(ConfigError) as exc:
        load_config(tmp_path / "c.yaml")
    assert str(exc.value) == (
        f"{tmp_path / 'c.yaml'}: detectors.incast.ecn_kmin_byte: unknown key (did you mean `ecn_kmin_bytes`?)"
    )
    assert (exc.value.key, exc.value.problem) == (
        "detectors.incast.ecn_kmin_byte",
        str(exc.value).split(": ")[-1],
    )


def test_near_miss_section_gets_a_suggestion(tmp_path):
    (tmp_path / "c.yaml").write_text("detector:\n  incast: {}\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: detector: unknown key \(did you mean `detectors`\?\)"):
        load_config(tmp_path / "c.yaml")


def test_wrong_type_names_the_key_path(tmp_path):
    (tmp_path / "c.yaml").write_text("detectors:\n  pfc_storm:\n    detection_time_s: soon\n")
    with pytest.raises(ConfigError, match=r"detectors\.pfc_storm\.detection_time_s: Expected `float`"):
        load_config(tmp_path / "c.yaml")


def test_a_file_with_other_sections_only_gives_the_detector_defaults(tmp_path):
    """One file serves every component: an alerts-only file is not an error for the detectors."""
    (tmp_path / "c.yaml").write_text("alerts:\n  receivers: []\n  route: {receiver: x}\n")
    assert load_config(tmp_path / "c.yaml") == DetectorConfig()


def test_broker_section_errors_name_the_file_and_line(tmp_path):
    (tmp_path / "b.yaml").write_text("broker:\n  bootstrap: [unclosed\n")
    with pytest.raises(ConfigError, match=r"b\.yaml: line \d+: invalid YAML"):
        load_broker_settings(tmp_path / "b.yaml", {})
    (tmp_path / "b.yaml").write_text("broker:\n  bootstrp: h:9092\n")
    with pytest.raises(ConfigError, match=r"broker\.bootstrp: unknown key \(did you mean `bootstrap`\?\)"):
        load_broker_settings(tmp_path / "b.yaml", {})


def test_not_utf8_and_missing_files_are_config_errors(tmp_path):
    (tmp_path / "c.yaml").write_bytes(b"detectors:\n  default_link_gbps: 4\xff00\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: not UTF-8"):
        load_config(tmp_path / "c.yaml")
    with pytest.raises(ConfigError, match=r"nope\.yaml: No such file"):
        load_config(tmp_path / "nope.yaml")


def test_record_with_a_broken_broker_config_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("broker: {bootstrap: [\n")
    rc = main(["record", "--broker-config", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "t.trace")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("fabricwatch record: ") and "bad.yaml: line" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("section", "said"),
    [
        (
            "detectors:\n  incast:\n    ecn_kmin_bytes: 2000000\n",
            "detectors.incast: need 0 <= ecn_kmin_bytes < ecn_kmax_bytes",
        ),
        (
            "detectors:\n  ecmp:\n    min_hot_utilisation: 1.5\n",
            "detectors.ecmp.min_hot_utilisation: Expected `float` <= 1.0",
        ),
        (
            "detectors:\n  ecmp:\n    hold_max_over_mean: 2\n",
            "detectors.ecmp: need 1 < hold_max_over_mean <= max_over_mean (the hold is the lower level)",
        ),
        (
            "detectors:\n  pfc_storm:\n    detection_time_s: 0\n",
            "detectors.pfc_storm.detection_time_s: Expected `float` > 0.0",
        ),
        (
            "detectors:\n  incast:\n    sustain_polls: 0\n",
            "detectors.incast.sustain_polls: Expected `int` >= 1",
        ),
    ],
)
def test_settings_out_of_their_range_are_refused_naming_the_key(tmp_path, section, said):
    """A Kmax below Kmin (or a share above one) made detectors that can never fire, accepted silently."""
    path = tmp_path / "site.yaml"
    path.write_text(section)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert str(refused.value) == f"{path}: {said}"


def test_a_topic_with_no_partitions_is_refused(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text("broker:\n  partitions: {fabric.counters: -3}\n")
    with pytest.raises(ConfigError, match=r"broker.partitions\[...\]: Expected `int` >= 1"):
        load_broker_settings(path)


def test_a_value_outside_a_fixed_set_is_refused_with_the_set(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text("broker:\n  compression: snappy\n")
    with pytest.raises(ConfigError) as refused:
        load_broker_settings(path, {})
    assert str(refused.value) == f"{path}: broker.compression: 'snappy' is not one of: gzip, lz4, none, zstd"
    path.write_text("broker:\n  sasl_mechanism: GSSAPI\n")  # a choice that may be left out
    with pytest.raises(ConfigError, match=r"broker\.sasl_mechanism: .GSSAPI. is not one of: PLAIN, SCRAM-"):
        load_broker_settings(path, {})
    assert load_broker_settings(None, {}).compression == "zstd"
