"""A SONiC switch: COUNTERS_DB (ports, queues, priority groups, watermarks, the PFC watchdog) and
its refresh intervals out of the switch's Redis, and its LLDP neighbours from APPL_DB (README.md)."""
