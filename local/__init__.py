"""Local process supervision: the embedded broker, a ClickHouse server, worker processes."""
