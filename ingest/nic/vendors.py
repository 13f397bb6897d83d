"""The RDMA NIC families the host collector knows, from ``schemas/data/nic_vendors.csv``: which
``vendor_map.csv`` sources read each one, and how a device's driver or name tells its family.

One table, so that a new family is one row (and its mapping rows): the collector's detection,
its ``--vendor`` help and error messages, and the tests' vendor lists all read it."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources


@dataclass(frozen=True)
class NicVendor:
    name: str
    hw_counters: str | None
    ethtool: str | None
    pma: str
    drivers: tuple[str, ...]
    name_prefixes: tuple[str, ...]
    about: str

    @property
    def sources(self) -> tuple[str | None, str | None, str]:
        """Its ``vendor_map.csv`` sources in a snapshot's order of precedence."""
        return self.hw_counters, self.ethtool, self.pma


@cache
def nic_vendors() -> dict[str, NicVendor]:
    """Every family by name, in the table's order."""
    text = resources.files("fabricwatch.schemas").joinpath("data", "nic_vendors.csv").read_text("utf-8")
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return {
        r["vendor"]: NicVendor(
            r["vendor"],
            r["hw_counters"] or None,
            r["ethtool"] or None,
            r["pma"],
            tuple(r["drivers"].split()),
            tuple(r["name_prefixes"].split()),
            r["about"],
        )
        for r in rows
    }


def vendor_names() -> str:
    """The families' names for a message: ``mlx5, bnxt, ...``."""
    return ", ".join(nic_vendors())


def vendor_help() -> str:
    """Each family and what it is, for the collector's ``--vendor`` help."""
    return "; ".join(f"{v.name}: {v.about}" for v in nic_vendors().values())


def vendor_by_driver(driver: str) -> str | None:
    return next((v.name for v in nic_vendors().values() if driver in v.drivers), None)


def vendor_by_name(device: str) -> str | None:
    return next((v.name for v in nic_vendors().values() if device.startswith(v.name_prefixes)), None)
