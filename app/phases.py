"""Mark a training job's collectives from the job itself: ``import fabricwatch.phases``.

This is the public name of ``fabricwatch.collectors.job_marks``, which lives with the other
collectors; see its docstring for the calls and what they cost the training loop."""

from fabricwatch.collectors.job_marks import ApiStats, collective, pending, start, stats, step, stop

__all__ = ["ApiStats", "collective", "pending", "start", "stats", "step", "stop"]
