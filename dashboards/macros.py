"""Expand a dashboard query the way Grafana and the grafana-clickhouse-datasource plugin do, so the
shipped dashboards' SQL can run against a real ClickHouse schema without a Grafana server.

Two passes, in Grafana's order:

1. Frontend (the plugin's ``applyTemplateVariables``): ``$__conditionalAll(condition, $var)``
   becomes ``1=1`` when ``$var`` is "All" (or empty), else the condition; then template variables
   are replaced (``$var``, ``${var}``, ``${var:format}``, ``[[var]]``). A multi-value variable is
   written as ``'a','b'`` (the plugin's own formatter); a single value is written as it is, so SQL
   quotes it itself (``'$storm'``). Grafana's global ``$__from``/``$__to`` (epoch ms) and
   ``$__interval_ms`` are replaced here too.
2. Backend (the plugin's Go ``macros.go``): ``$__timeFilter(col)`` →
   ``col >= toDateTime(from_s) AND col <= toDateTime(to_s)``, ``$__timeFilter_ms(col)`` with
   ``fromUnixTimestamp64Milli``, ``$__dateFilter(col)`` with ``toDate('YYYY-MM-DD')``,
   ``$__dateTimeFilter(date, time)`` / ``$__dt``, ``$__fromTime``/``$__toTime`` (``toDateTime(s)``),
   ``$__fromTime_ms``/``$__toTime_ms``, ``$__timeInterval(col)`` →
   ``toStartOfInterval(toDateTime(col), INTERVAL n second)``, ``$__timeInterval_ms(col)`` and
   ``$__interval_s`` (the interval in whole seconds, at least 1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

ALL = "$__all"
"""The value Grafana stores for a variable whose "All" option is selected."""


@dataclass(frozen=True)
class QueryContext:
    """The time range (ns since the epoch), the interval and the variables' selected values
    (a list for a multi-value variable, ``ALL`` for "All", a string otherwise)."""

    from_ns: int
    to_ns: int
    interval_s: float = 10.0
    variables: dict[str, str | list[str]] = field(default_factory=dict)
    all_values: dict[str, list[str]] = field(default_factory=dict)
    """Every option of a variable: what "All" expands to when the variable has no custom all value."""


def expand(sql: str, ctx: QueryContext) -> str:
    """The SQL Grafana would send to ClickHouse for this dashboard query."""
    sql = _conditional_all(sql, ctx)
    sql = _template_variables(sql, ctx)
    return _backend_macros(sql, ctx)


# -- frontend -----------------------------------------------------------------------------------

_VAR_IN_ARG = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def _conditional_all(sql: str, ctx: QueryContext) -> str:
    macro = "$__conditionalAll("
    while (at := sql.rfind(macro)) != -1:
        args, end = _macro_args(sql, at + len(macro) - 1)
        if len(args) != 2:
            raise ValueError(f"$__conditionalAll takes 2 arguments, got {len(args)}: {sql[at:end]}")
        phrase = args[0]
        m = _VAR_IN_ARG.search(args[1].strip())
        if m:
            value = ctx.variables.get(m.group(1) or m.group(2))
            if value in ("", ALL, None) or value == [ALL]:
                phrase = "1=1"
        sql = sql[:at] + phrase + sql[end:]
    return sql


_VARIABLE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\[\[(\w+)\]\]|\$(\w+)")


def _template_variables(sql: str, ctx: QueryContext) -> str:
    globals_ = {
        "__from": str(ctx.from_ns // 1_000_000),
        "__to": str(ctx.to_ns // 1_000_000),
        "__interval_ms": str(int(ctx.interval_s * 1000)),
    }

    def replace(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3) or m.group(4)
        if name in globals_:
            return globals_[name]
        if name not in ctx.variables:
            return m.group(0)  # not a variable: a backend macro ($__timeFilter) or literal text
        value = ctx.variables[name]
        if value == ALL or value == [ALL]:
            value = ctx.all_values.get(name, [])
        return _format(value, m.group(2))

    return _VARIABLE.sub(replace, sql)


def _format(value: str | list[str], fmt: str | None) -> str:
    values = [value] if isinstance(value, str) else value
    if fmt in ("singlequote", "sqlstring"):
        return ",".join("'" + v.replace("'", "''" if fmt == "sqlstring" else "\\'") + "'" for v in values)
    if fmt == "csv":
        return ",".join(values)
    if fmt not in (None, "raw"):
        raise ValueError(f"unsupported variable format :{fmt}")
    if isinstance(value, list):
        return "'" + "','".join(values) + "'"  # the plugin's formatter for multi-value variables
    return value


# -- backend --------------------------------------------------------------------------------------


def _seconds(ns: int) -> int:
    return ns // 1_000_000_000


def _date(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%d")


def _backend_macros(sql: str, ctx: QueryContext) -> str:
    f_s, t_s = _seconds(ctx.from_ns), _seconds(ctx.to_ns)
    f_ms, t_ms = ctx.from_ns // 1_000_000, ctx.to_ns // 1_000_000
    step_s = max(int(ctx.interval_s), 1)
    step_ms = max(int(ctx.interval_s * 1000), 1)

    def time_filter(c: str) -> str:
        return f"{c} >= toDateTime({f_s}) AND {c} <= toDateTime({t_s})"

    def date_filter(c: str) -> str:
        return f"{c} >= toDate('{_date(ctx.from_ns)}') AND {c} <= toDate('{_date(ctx.to_ns)}')"

    def date_time_filter(d: str, t: str) -> str:
        return f"({date_filter(d)}) AND ({time_filter(t)})"

    macros = {
        "fromTime": (0, lambda: f"toDateTime({f_s})"),
        "toTime": (0, lambda: f"toDateTime({t_s})"),
        "fromTime_ms": (0, lambda: f"fromUnixTimestamp64Milli({f_ms})"),
        "toTime_ms": (0, lambda: f"fromUnixTimestamp64Milli({t_ms})"),
        "timeFilter": (1, time_filter),
        "timeFilter_ms": (
            1,
            lambda c: f"{c} >= fromUnixTimestamp64Milli({f_ms}) AND {c} <= fromUnixTimestamp64Milli({t_ms})",
        ),
        "dateFilter": (1, date_filter),
        "dateTimeFilter": (2, date_time_filter),
        "dt": (2, date_time_filter),
        "timeInterval": (1, lambda c: f"toStartOfInterval(toDateTime({c}), INTERVAL {step_s} second)"),
        "timeInterval_ms": (
            1,
            lambda c: f"toStartOfInterval(toDateTime64({c}, 3), INTERVAL {step_ms} millisecond)",
        ),
        "interval_s": (0, lambda: str(step_s)),
    }
    pattern = re.compile(r"\$__(" + "|".join(sorted(macros, key=len, reverse=True)) + r")\b")
    out, pos = [], 0
    while m := pattern.search(sql, pos):
        name = m.group(1)
        arity, render = macros[name]
        out.append(sql[pos : m.start()])
        args: list[str] = []
        end = m.end()
        if end < len(sql) and sql[end] == "(":
            args, end = _macro_args(sql, end)
            args = [a.strip() for a in args if a.strip()]
        if len(args) != arity:
            raise ValueError(f"$__{name} takes {arity} argument(s), got {len(args)}: {sql[m.start() : end]}")
        out.append(render(*args))
        pos = end
    out.append(sql[pos:])
    return "".join(out)


def _macro_args(sql: str, open_at: int) -> tuple[list[str], int]:
    """Arguments of the call whose ``(`` is at ``open_at`` (split at top-level commas) and the
    index after its ``)``."""
    depth, start, args = 0, open_at + 1, []
    for i in range(open_at, len(sql)):
        ch = sql[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append(sql[start:i])
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append(sql[start:i])
            start = i + 1
    raise ValueError(f"unbalanced parentheses after {sql[max(0, open_at - 20) : open_at + 1]!r}")
