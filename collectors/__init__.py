"""The collector daemons: each source family's runtime (``nic``, ``sonic``, ``gnmi`` and its
``gnmi_translator`` for gnmic and Telegraf, ``nccl_logs``, ``job_marks`` inside a training job)
on one frame (``frame.py``: outputs, ``/metrics`` and ``/healthz``, stopping, what it says). The
parsers they run are the pure core's, in ``ingest/<family>/``; the command line only parses
options into a collector's settings and a frame."""
