"""``ethtool -S`` without a fork: the ``SIOCETHTOOL`` ioctl, through pyroute2's ethtool structures.

Forking ``ethtool`` costs milliseconds per NIC per poll; three ioctls cost microseconds. The names
(``ETHTOOL_GSTRINGS``) are read once per device and kept; each poll asks the size of the set
(``ETHTOOL_GSSET_INFO``, one cheap ioctl) and re-reads the names when it changed, because drivers
change their set at run time (mlx5 adds ``rx_prio{n}_*`` when PFC is turned on for a priority, a
driver reload can reorder it). The values (``ETHTOOL_GSTATS``) go into a buffer with room to spare:
the kernel writes as many values as the driver has *now*, whatever the caller's buffer holds, so a
set that grew between the two ioctls must not write past its end. A driver that answers with fewer
values than names is reported and only the values it gave are taken.

pyroute2's ``IoctlEthtool.get_statistics`` does the same three calls but sizes the buffer exactly
and never looks at how many values came back; so this module uses its structures and calls, and
does those two checks itself.
"""

from __future__ import annotations

import ctypes
import errno
from dataclasses import dataclass, field
from typing import Any

from fabricwatch.ingest.nic.device import EthtoolError
from fabricwatch.ingest.nic.parsers import EthtoolStats

IFNAMSIZ = 16
SLACK = 64
"""Values of room beyond the names' count in each GSTATS buffer."""


@dataclass
class _Device:
    io: Any  # pyroute2 IoctlEthtool bound to the interface
    names: list[str] = field(default_factory=list)
    buffer: Any = None


class EthtoolIoctl:
    """Reads ``ethtool -S`` statistics of many interfaces; one socket and name list per interface."""

    def __init__(self) -> None:
        self._devices: dict[str, _Device] = {}

    def read(self, netdev: str) -> EthtoolStats:
        """Every statistic of ``netdev`` by name; raises EthtoolError when it has none to give."""
        from pyroute2.ethtool.ioctl import NoSuchDevice, NotSupportedError

        if not 0 < len(netdev.encode()) < IFNAMSIZ:
            raise EthtoolError(f"{netdev!r}: not a network interface name (1 to {IFNAMSIZ - 1} bytes)")
        try:
            return self._read(self._device(netdev))
        except (OSError, NoSuchDevice, NotSupportedError) as exc:
            self.forget(netdev)
            raise EthtoolError(_explain(netdev, exc)) from None

    def forget(self, netdev: str) -> None:
        dev = self._devices.pop(netdev, None)
        if dev is not None:
            dev.io.close()

    def close(self) -> None:
        for netdev in list(self._devices):
            self.forget(netdev)

    def __enter__(self) -> EthtoolIoctl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _device(self, netdev: str) -> _Device:
        dev = self._devices.get(netdev)
        if dev is None:
            from pyroute2.ethtool.ioctl import IoctlEthtool

            dev = self._devices[netdev] = _Device(IoctlEthtool(netdev))
        return dev

    def _read(self, dev: _Device) -> EthtoolStats:
        from pyroute2.ethtool.ioctl import ETH_SS_STATS, ETHTOOL_GSTATS, generate_EthtoolGStats

        count = dev.io.get_stringset_length(ETH_SS_STATS)
        if count == 0:
            raise OSError(errno.EOPNOTSUPP, "no statistics")
        if count != len(dev.names):
            dev.names = [name.strip() for name in dev.io.get_stringset(set_id=ETH_SS_STATS)]
            dev.buffer = generate_EthtoolGStats(len(dev.names) + SLACK)()
        dev.buffer.cmd = ETHTOOL_GSTATS
        dev.buffer.size = len(dev.names)
        dev.io.ifreq.gstats = ctypes.cast(ctypes.byref(dev.buffer), ctypes.POINTER(None))
        dev.io.ioctl()
        given = dev.buffer.size
        names, problems = dev.names[:given], []
        if given != len(dev.names):
            problems.append(f"the driver gave {given} values for {len(dev.names)} names")
            dev.names = []  # read the names again next time
        return _by_name(names, list(dev.buffer.data[: len(names)]), problems)


def _by_name(names: list[str], values: list[int], problems: list[str]) -> EthtoolStats:
    """Values by name; a name the driver lists twice keeps neither value, as in ``ethtool -S``'s parser."""
    out: dict[str, int] = {}
    twice: set[str] = set()
    for name, value in zip(names, values, strict=False):
        if name in out or name in twice:
            twice.add(name)
        else:
            out[name] = value
    for name in sorted(twice):
        del out[name]
        problems.append(f"counter {name!r} appears twice; both values dropped")
    return EthtoolStats(out, problems)


def _explain(netdev: str, exc: Exception) -> str:
    from pyroute2.ethtool.ioctl import NoSuchDevice, NotSupportedError

    code = getattr(exc, "errno", None)
    if isinstance(exc, NoSuchDevice) or code == errno.ENODEV:
        return f"{netdev}: no such network interface"
    if isinstance(exc, NotSupportedError) or code in (errno.EOPNOTSUPP, errno.ENOTSUP):
        return f"{netdev}: its driver gives no ethtool statistics"
    return f"{netdev}: the ethtool ioctl failed: {getattr(exc, 'strerror', None) or exc}"
