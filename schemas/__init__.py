"""Message models, the counter vocabulary, vendor mappings, the trace format and topic names."""
