"""Every detector, declared once in its own module (``spec.py`` says what a declaration holds):
adding a detector is its module and one line in ``DETECTORS``. One piece of stage 2 is still the
correlator's own code rather than a declaration, older than the registry: a PFC storm's sticky
pause-tree membership (``Correlator.storm_membership``). Retransmitting NICs fold into the incident
of a kind that declares it ``loses_frames`` (``_fold_retransmission_echoes``).

``Registry`` checks the declarations as a whole when it is made (a symptom that joins an incident
kind nobody declares, two kinds of one name, a device detector without its devices): a
half-declared detector fails at import, in every test, not silently in production.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import msgspec

from fabricwatch.detectors import (
    capacity,
    drops,
    ecmp,
    host_bound,
    incast,
    job_hangs,
    job_slowdown,
    link_degrading,
    link_errors,
    link_speed,
    link_state,
    microbursts,
    nic_bursts,
    nic_congestion,
    optics,
    pfc_storm,
    retransmissions,
    silence,
    stragglers,
    traffic_rhythm,
)
from fabricwatch.detectors.outliers import detector as outliers
from fabricwatch.detectors.spec import Detector, IncidentKind, SymptomKind
from fabricwatch.schemas import vocabulary

DETECTORS: tuple[Detector, ...] = (
    pfc_storm.WATCHDOG,
    pfc_storm.STALLED_EGRESS,
    incast.DETECTOR,
    ecmp.DETECTOR,
    pfc_storm.NIC_PAUSE_STORM,
    nic_congestion.DETECTOR,
    link_errors.DETECTOR,
    link_degrading.DETECTOR,
    link_speed.DETECTOR,
    optics.DETECTOR,
    link_state.DETECTOR,
    drops.DETECTOR,
    retransmissions.DETECTOR,
    host_bound.DETECTOR,
    capacity.DETECTOR,
    microbursts.DETECTOR,
    nic_bursts.DETECTOR,
    traffic_rhythm.DETECTOR,
    outliers.DETECTOR,
    silence.DETECTOR,
    job_slowdown.DETECTOR,
    stragglers.DETECTOR,
    job_hangs.DETECTOR,
)
"""In the order stage 1 runs them on a device (the order of a poll's symptoms)."""

DEVICE_KINDS = frozenset({"nic", "switch"})


class RegistryError(ValueError):
    """Declarations that do not fit together; the message names the detector and the problem."""


class Registry:
    """The declarations in force. ``register`` adds one (a test's toy detector; ``added`` for the
    length of a ``with``). Stage 1 builds its device detectors when it is made, so stages made
    after a registration run the new detector; stage 2, the describer, the evaluation and the report
    read the registry when they are asked. ``DetectorConfig`` is assembled from the shipped
    detectors at import: a detector registered later gets its defaults, not a config section."""

    def __init__(self, detectors: Sequence[Detector]) -> None:
        self._index(tuple(detectors))

    def register(self, detector: Detector) -> None:
        self._index((*self.detectors, detector))

    def unregister(self, detector: Detector) -> None:
        self._index(tuple(d for d in self.detectors if d is not detector))

    @contextmanager
    def added(self, detector: Detector) -> Iterator[Registry]:
        self.register(detector)
        try:
            yield self
        finally:
            self.unregister(detector)

    def _index(self, detectors: tuple[Detector, ...]) -> None:
        """Check the declarations as a whole, then put them in force (nothing changes on an error)."""
        symptoms: dict[str, SymptomKind] = {}
        incidents: dict[str, IncidentKind] = {}
        sections: dict[str, type[msgspec.Struct]] = {}
        names: set[str] = set()
        for d in detectors:
            if d.name in names:
                raise RegistryError(f"detector {d.name!r} is registered twice")
            names.add(d.name)
            for sym in d.symptoms:
                _add(symptoms, sym.name, sym, d, "symptom kind")
            for inc in d.incidents:
                _add(incidents, inc.name, inc, d, "incident kind")
            if d.config is not None:
                _add(sections, d.config[0], d.config[1], d, "config section")
            _check_device_side(d)
        for d in detectors:
            for sym in d.symptoms:
                if sym.incident is not None and sym.incident not in incidents:
                    raise RegistryError(
                        f"detector {d.name!r}: symptom {sym.name!r} joins incident kind {sym.incident!r}, "
                        "which no detector declares"
                    )
                if sym.incident is not None and sym.root is None:
                    raise RegistryError(
                        f"detector {d.name!r}: symptom {sym.name!r} makes incidents but has no root rule"
                    )
        self.detectors, self.symptoms, self.incidents, self.sections = (
            detectors,
            symptoms,
            incidents,
            sections,
        )
        self.device = tuple(d for d in detectors if d.make is not None)
        """The device detectors stage 1 builds, in running order."""

    def kinds(self, needs_model: bool | None = None) -> frozenset[str]:
        """Incident kinds (all, or those that need a learned model or not)."""
        return frozenset(
            name for name, k in self.incidents.items() if needs_model is None or k.needs_model == needs_model
        )

    def calm_signals(self, device_kind: str) -> frozenset[str] | None:
        """The counters whose all being zero (with no streak open) lets stage 1 skip a device's poll,
        or None when some detector of that device kind reads every poll."""
        signals: set[str] = set()
        for d in self.device:
            if device_kind in d.device_kinds and not d.paced:
                if d.signals is None:
                    return None
                signals |= d.signals
        return frozenset(signals)


def _add(table: dict, name: str, value: object, detector: Detector, what: str) -> None:
    """Shared declarations (one symptom kind emitted by two detectors) are the same object."""
    if name in table and table[name] is not value:
        raise RegistryError(f"detector {detector.name!r}: {what} {name!r} is declared twice, differently")
    table[name] = value


def _check_device_side(d: Detector) -> None:
    if d.make is None:
        return
    if not d.device_kinds or not d.device_kinds <= DEVICE_KINDS:
        raise RegistryError(f"detector {d.name!r}: device_kinds must be some of {sorted(DEVICE_KINDS)}")
    if d.records and not d.paced:
        raise RegistryError(f"detector {d.name!r}: records every poll but is not paced (it would judge none)")
    unknown = sorted((d.signals or frozenset()) - set(vocabulary.canonical()))
    if unknown:
        raise RegistryError(f"detector {d.name!r}: signals {unknown} are not counters of the vocabulary")


REGISTRY = Registry(DETECTORS)
