"""What several test modules share: waits on conditions, the streaming and store harnesses, real
servers the tests start (a gNMI target), builders of polls and fixtures' paths. Imported as
``helpers.<module>`` (``pythonpath`` in pyproject.toml puts ``tests/`` on the path)."""
