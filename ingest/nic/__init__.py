"""An RDMA NIC of a Linux host: sysfs counters and hw_counters, ``ethtool -S`` (ioctl or binary),
``rdma statistic``, read into one snapshot per device per poll (README.md)."""
