"""Storage in ClickHouse: DDL and migrations, backends (chdb, server), the sink, read queries."""
