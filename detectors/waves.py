"""A batch's polls in waves: the first poll of each device, then the second of each, and so on.

Per-device state is folded in one numpy pass per wave, where a poll's result starts from its
device's previous poll: within a wave every device appears once, and the waves keep each device's
order (the rate engine, the silence watch)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable


def waves(devices: Iterable[Hashable]) -> list[list[int]]:
    """The positions of ``devices`` by wave, each wave in the batch's order."""
    out: list[list[int]] = []
    seen: dict[Hashable, int] = {}
    for k, device in enumerate(devices):
        wave = seen.get(device, 0)
        seen[device] = wave + 1
        if wave == len(out):
            out.append([])
        out[wave].append(k)
    return out
