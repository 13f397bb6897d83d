"""The report's incident list over a store that holds several runs (a module of its own: chdb
holds one store per process, and test_report.py keeps its replayed store open)."""

from __future__ import annotations


def test_a_store_holding_two_runs_lists_the_incidents_of_both(tmp_path):
    """Found: the same fault in two runs has the same fingerprint; the report listed and shaded only
    the later one, though the earlier one was in its charts."""
    from fabricwatch.schemas.messages import Anomaly, RootCause
    from fabricwatch.storage import queries
    from fabricwatch.storage.sink import Sink
    from fabricwatch.storage.store import Store

    root = RootCause("leaf01", "Ethernet8", 3)
    runs = [1_800_000_000 * 10**9, 1_800_003_600 * 10**9]  # the same scenario an hour apart
    with Store.open(tmp_path / "store") as store:
        with Sink(store) as sink:
            for start in runs:
                for status, t in (("firing", start), ("resolved", start + 30 * 10**9)):
                    end = t if status == "resolved" else None
                    sink.add(
                        Anomaly(
                            "fp-incast", "incast", "critical", status, start, t, root, "incast", end_ns=end
                        )
                    )
        found = queries.incidents(store, runs[0] - 10**9, runs[1] + 60 * 10**9)
    assert [(i.start_ns, i.status) for i in found] == [(runs[0], "resolved"), (runs[1], "resolved")]
