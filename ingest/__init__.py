"""Collectors, vendor-name mapping, the fabric simulator, and trace record/replay."""
