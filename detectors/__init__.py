"""Pure detection logic over numpy: rates, per-device detectors, correlation. No I/O in here."""
