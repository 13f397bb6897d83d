"""A paced recorder (``spec.Recorder``) driven poll by poll as stage 1 drives it."""

from __future__ import annotations

from fabricwatch.detectors.spec import Poll, Recorder
from fabricwatch.schemas.messages import Symptom


def as_stage1_runs(detector: Recorder, poll: Poll) -> list[Symptom]:
    """Every poll noted; the detector asked what it says only when the device is due."""
    detector.record(poll)
    return detector.update(poll) if detector.due(poll.frame.device, poll.frame.ts_ns) else []
