"""The shipped Grafana dashboards' queries, run on a store the way Grafana runs them: template
variables resolved in order, Grafana's and the ClickHouse plugin's macros expanded."""

from __future__ import annotations

from fabricwatch.dashboards.grafana import load_dashboards
from fabricwatch.dashboards.macros import ALL, QueryContext, expand

DASHBOARDS = {d["uid"]: d for d in load_dashboards()}
INTERVAL_S = 5.0
"""What Grafana picks for a three-minute range on a wide panel (range / max data points, rounded)."""


def stored_span(store) -> tuple[int, int]:
    """The time range the panels are shown for (ns), as a Grafana range around the stored polls
    would be: from the start of the 10 s rollup bucket of the first poll to the second after the
    last one (the plugin's ``$__timeFilter`` compares whole seconds, and a rollup row is stamped with
    its bucket's start)."""
    lo, hi = store.query("SELECT min(ts_ns), max(ts_ns) FROM rates_raw")[0]
    return int(lo) // 10**10 * 10**10, (int(hi) // 10**9 + 1) * 10**9


def resolve_variables(store, dash: dict, span: tuple[int, int], pick_all: bool) -> tuple[dict, dict]:
    """Run each query variable in order (later ones may use earlier ones, as in Grafana) and select
    "All" or the first option; custom variables take their saved value."""
    chosen: dict = {}
    options: dict = {}
    for var in dash["templating"]["list"]:
        if var["type"] == "custom":
            chosen[var["name"]] = var["current"]["value"]
            continue
        rows = store.query(expand(var["query"], QueryContext(*span, INTERVAL_S, chosen, options)))
        options[var["name"]] = [str(r[0]) for r in rows]
        if var["includeAll"] and pick_all:
            chosen[var["name"]] = ALL
        elif var["multi"]:
            chosen[var["name"]] = options[var["name"]][:1]
        else:
            chosen[var["name"]] = options[var["name"]][0] if rows else ""
    return chosen, options


def queries(dash: dict) -> list[tuple[str, str]]:
    out = [(p["title"], t["rawSql"]) for p in dash["panels"] for t in p["targets"]]
    out += [(a["name"], a["target"]["rawSql"]) for a in dash["annotations"]["list"] if "target" in a]
    return out


def run_panel(store, span, uid: str, title: str, **variables) -> list[tuple]:
    dash = DASHBOARDS[uid]
    chosen, options = resolve_variables(store, dash, span, pick_all=True)
    chosen.update(variables)
    sql = next(sql for t, sql in queries(dash) if t == title)
    return store.query(expand(sql, QueryContext(*span, INTERVAL_S, chosen, options)))
