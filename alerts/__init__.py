"""Alert delivery: anomaly lifecycle events in, Alertmanager-compatible webhook notifications out.

The pure core (``routing``, ``silences``, ``alerter``, ``payload``) takes anomalies and a ``now`` and
says which notifications are due; the shell (``delivery``, ``service``, ``consumer``) owns threads,
HTTP and Kafka. See ``docs/alerts.md``.
"""
