"""Topic names, shared by publishers, workers, the trace format and replay."""

COUNTERS = "fabric.counters"
PHASES = "fabric.phases"
TOPOLOGY = "fabric.topology"
RATES = "fabric.rates"
SYMPTOMS = "fabric.symptoms"
ANOMALIES = "fabric.anomalies"
PROGRESS = "fabric.progress"
"""How far each stage 2 has judged, per symptoms partition it owns (a ``Watermark`` each, its
anomalies published before it): the job stage moves with the slowest (``streams/job_worker.py``)."""
DEADLETTER = "fabric.deadletter"
SWITCHES = "fabric.switches"
"""The switch collectors' assignments: one record per switch, keyed by its name."""
STATE = "fabric.state"
"""Stage 1's detector windows per device (``WindowState``), in the partition number of the device's
``fabric.counters`` partition, so the worker given that partition finds them there."""
LABELS = "fabric.labels"
"""Ground truth in traces only; never published to a broker."""
