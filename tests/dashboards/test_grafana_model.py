"""Every shipped dashboard read through Grafana's own dashboard model (``grafana-foundation-sdk``,
Grafana Labs' typed model, at Grafana 11.6) and written back loses nothing: a key Grafana's model
has no place for (a table's cell option on a time series, a misspelt option) is a setting Grafana
ignores, so the panel does not show what its JSON says. The fake Grafana (``test_grafana.py``)
checks the HTTP side; this checks the model."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard
from helpers.dashboard_queries import DASHBOARDS

KNOWN_GAPS = re.compile(r"^/templating/list\[\d+\]/definition$|^/annotations/list\[\d+\]/target/")
"""Keys Grafana itself writes that the model does not carry: a query variable's display text, and
the plugin query of an annotation drawn from a datasource (the model types ``target`` for
Grafana's built-in annotations only)."""


def dropped(before: Any, after: Any, path: str = "") -> list[str]:
    """Paths of ``before`` missing or changed in ``after``, list indexes as ``[i]``."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for key, value in before.items():
            out += dropped(value, after[key], f"{path}/{key}") if key in after else [f"{path}/{key}"]
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [
            p
            for i, (b, a) in enumerate(zip(before, after, strict=True))
            for p in dropped(b, a, f"{path}[{i}]")
        ]
    return [] if before == after else [path]


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_a_dashboard_survives_grafanas_model(uid):
    register_default_plugins()
    doc = DASHBOARDS[uid]
    back = json.loads(json.dumps(Dashboard.from_json(doc), cls=JSONEncoder))
    lost = [p for p in dropped(doc, back) if not KNOWN_GAPS.search(p)]
    assert lost == [], f"{uid}: Grafana's model has no place for {lost}"
    assert len(back["panels"]) == len(doc["panels"])


def test_a_setting_the_model_has_no_place_for_is_found():
    """The check itself: a table's cell alignment on a time series (found in link-health)."""
    register_default_plugins()
    doc = json.loads(json.dumps(DASHBOARDS["fw-link-health"]))
    series = next(p for p in doc["panels"] if p["type"] == "timeseries")
    series["fieldConfig"]["defaults"]["custom"] = {"align": "auto"}
    back = json.loads(json.dumps(Dashboard.from_json(doc), cls=JSONEncoder))
    assert any(p.endswith("/fieldConfig/defaults/custom/align") for p in dropped(doc, back))
