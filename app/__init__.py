"""fabricwatch: streaming telemetry and anomaly detection for AI training fabrics."""

__version__ = "0.1.0"
