"""The macro expander matches the grafana-clickhouse-datasource plugin: backend macros as its Go
``macros.go`` writes them, ``$__conditionalAll`` and variable formatting as its frontend does."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fabricwatch.dashboards.macros import ALL, QueryContext, expand


def ns(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000) * 1_000_000


# The plugin's own test range: 2014-11-12T11:45:26.371Z to 2015-11-12T11:45:26.371Z, 20 s interval.
CTX = QueryContext(ns("2014-11-12T11:45:26.371"), ns("2015-11-12T11:45:26.371"), 20.0)


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("$__timeFilter(ts)", "ts >= toDateTime(1415792726) AND ts <= toDateTime(1447328726)"),
        (
            "$__timeFilter_ms(ts)",
            "ts >= fromUnixTimestamp64Milli(1415792726371) AND ts <= fromUnixTimestamp64Milli(1447328726371)",
        ),
        ("$__dateFilter(d)", "d >= toDate('2014-11-12') AND d <= toDate('2015-11-12')"),
        (
            "$__dateTimeFilter(d, t)",
            "(d >= toDate('2014-11-12') AND d <= toDate('2015-11-12')) AND "
            "(t >= toDateTime(1415792726) AND t <= toDateTime(1447328726))",
        ),
        ("$__fromTime", "toDateTime(1415792726)"),
        ("$__toTime", "toDateTime(1447328726)"),
        ("$__fromTime_ms", "fromUnixTimestamp64Milli(1415792726371)"),
        ("$__toTime_ms", "fromUnixTimestamp64Milli(1447328726371)"),
        ("$__timeInterval(col)", "toStartOfInterval(toDateTime(col), INTERVAL 20 second)"),
        ("$__timeInterval_ms(col)", "toStartOfInterval(toDateTime64(col, 3), INTERVAL 20000 millisecond)"),
        ("INTERVAL $__interval_s second", "INTERVAL 20 second"),
        ("$__from - $__to", "1415792726371 - 1447328726371"),
    ],
)
def test_backend_macros_as_the_plugin_writes_them(sql, want):
    assert expand(sql, CTX) == want


def test_interval_is_at_least_one_second():
    short = QueryContext(CTX.from_ns, CTX.to_ns, 0.2)
    assert expand("$__interval_s", short) == "1"
    assert expand("$__timeInterval(ts)", short).endswith("INTERVAL 1 second)")


def test_macro_arguments_may_nest_parentheses():
    got = expand("$__timeFilter(toDateTime(x / 1000))", CTX)
    assert got.startswith("toDateTime(x / 1000) >= toDateTime(1415792726)")


def test_wrong_argument_counts_are_errors():
    with pytest.raises(ValueError, match="timeFilter takes 1"):
        expand("$__timeFilter()", CTX)
    with pytest.raises(ValueError, match="unbalanced"):
        expand("$__timeFilter(ts", CTX)


def vars_ctx(**variables) -> QueryContext:
    return QueryContext(CTX.from_ns, CTX.to_ns, 20.0, variables, {"device": ["a", "b", "c"]})


def test_conditional_all_drops_the_condition_for_all_or_empty():
    sql = "WHERE $__conditionalAll(device IN ($device), $device) AND x"
    assert expand(sql, vars_ctx(device=ALL)) == "WHERE 1=1 AND x"
    assert expand(sql, vars_ctx(device="")) == "WHERE 1=1 AND x"
    assert expand(sql, vars_ctx(device=["a", "b"])) == "WHERE device IN ('a','b') AND x"
    nested = "$__conditionalAll(hasAny(jobs, [${job}]), ${job})"
    assert expand(nested, vars_ctx(job=["j1"])) == "hasAny(jobs, ['j1'])"
    assert expand(nested, vars_ctx(job=ALL)) == "1=1"


def test_variable_formats():
    ctx = vars_ctx(device=["a", "b"], one="x'y", top="20")
    assert expand("IN ($device)", ctx) == "IN ('a','b')"
    assert expand("LIMIT $top", ctx) == "LIMIT 20", "a single value is written as it is"
    assert expand("'${one}' [[top]]", ctx) == "'x'y' 20"
    assert expand("${one:sqlstring}", ctx) == "'x''y'"
    assert expand("${device:csv}", ctx) == "a,b"
    assert expand("IN ($device)", vars_ctx(device=ALL)) == "IN ('a','b','c')", "All lists every option"
    assert expand("$unknown and $__timeFilter_not", ctx) == "$unknown and $__timeFilter_not"
