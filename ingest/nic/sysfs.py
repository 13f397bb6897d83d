"""Reading a port's ``counters/`` and ``hw_counters/`` every poll with files kept open.

Opening, reading and closing ~50 small files per port through pathlib cost ~2.4 ms per NIC per
poll (``bench/bench_collector.py``), more than everything else the collector does. A sysfs
attribute is regenerated on every read from offset 0, so each file is opened once and then read
with ``pread(fd, 64, 0)``: one system call per counter. The listing of a directory is kept too;
when a read fails because the device went away (a driver reload, a hot unplug), that port's files
are closed and listed again on its next read.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from fabricwatch.ingest.nic.parsers import MAX_U64

_GONE = {errno.ENODEV, errno.ENOENT, errno.ESTALE, errno.ENXIO}
_READ_BYTES = 64


class SysfsPorts:
    """Open counter files per port directory; ``read`` gives ``(counters, hw_counters)`` by name."""

    def __init__(self) -> None:
        self._open: dict[Path, tuple[dict[str, int], dict[str, int]]] = {}

    def read(self, port_dir: Path) -> tuple[dict[str, int], dict[str, int]]:
        """Like ``parsers.read_sysfs_port``: files that cannot be read or do not hold one unsigned
        64-bit integer are left out (drivers expose unsupported counters as files failing EINVAL)."""
        fds = self._open.get(port_dir)
        if fds is None:
            fds = self._open[port_dir] = (
                _open_all(port_dir / "counters"),
                _open_all(port_dir / "hw_counters"),
            )
            if not fds[0] and not fds[1]:
                del self._open[port_dir]
                raise ValueError(
                    f"{port_dir}: no counters/ or hw_counters/ directory; not an InfiniBand port"
                )
        try:
            return _read_all(fds[0]), _read_all(fds[1])
        except OSError:  # the device went away: list and open again next time
            self.forget(port_dir)
            raise

    def forget(self, port_dir: Path) -> None:
        for fds in self._open.pop(port_dir, ({}, {})):
            for fd in fds.values():
                os.close(fd)

    def close(self) -> None:
        for port_dir in list(self._open):
            self.forget(port_dir)

    def __enter__(self) -> SysfsPorts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_all(directory: Path) -> dict[str, int]:
    if not directory.is_dir():
        return {}
    fds = {}
    for name in sorted(os.listdir(directory)):
        try:
            fds[name] = os.open(directory / name, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue  # not readable (a write-only setting): never a counter
    return fds


def _read_all(fds: dict[str, int]) -> dict[str, int]:
    values = {}
    for name, fd in fds.items():
        try:
            raw = os.pread(fd, _READ_BYTES, 0)
        except OSError as exc:
            if exc.errno in _GONE:
                raise
            continue  # EINVAL and friends: a counter this firmware does not support
        text = raw.strip()
        if text.isdigit() and int(text) <= MAX_U64:
            values[name] = int(text)
    return values
