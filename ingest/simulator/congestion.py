"""The fluid congestion model: from the flows on and the faults in force to per-link rates and queues.

The fabric is solved in equilibrium for each distinct state (set of activities on, fault stages) and
the answer is cached: queues fill and DCQCN converges in micro- to milliseconds, far below any poll
interval, so between two events (an activity edge, a burst edge, a storm hop) the fabric is in a
steady state. All traffic rides the lossless priority 3, as RoCE deployments configure it.

Simplifications, each chosen because detectors only see counters at poll resolution:
- Rate allocation is one pass of proportional throttling: a flow gets its demand times the smallest
  ``capacity / offered`` along its path. Feasible (no link over capacity) though not max-min fair.
- DCQCN is not simulated packet by packet: an overloaded egress queue settles between ECN Kmin and the
  PFC XOFF threshold, higher the more it is overloaded; beyond ``dcqcn_overload_limit`` DCQCN cannot
  hold it and PFC pauses the ingress ports feeding it for the share of time the excess needs.
- A stalled NIC (PFC storm) pauses its leaf port all the time; each hop the pause tree grows by the
  ingress links carrying traffic into a paused link, and anything crossing a paused link stops. A
  stalled switch egress (a deadlock) grows the same tree from its own link, which holds its queue
  and sends nothing without being paused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fabricwatch.ingest.simulator.fabric import Fabric
from fabricwatch.ingest.simulator.faults import Condition
from fabricwatch.ingest.simulator.traffic import Flows

HEADER_BYTES = 62  # Ethernet + FCS + IPv4 + UDP + BTH + ICRC around each RoCEv2 payload
IDLE_QUEUE_BYTES = 8 * 1024  # a queue below line rate holds a few packets at most
STALL_HEADROOM = 1.1  # a queue behind a permanent pause sits just above XOFF
CNP_PER_QP_PER_S = 1 / 50e-6  # the notification point sends at most one CNP per QP per 50 us
PAUSE_QUANTA_BITS = 65535 * 512  # a maximal pause; switches refresh it at half its length
ACK_TIMEOUT_SHARE = 0.02
SYMBOLS_PER_BAD_FRAME = 3  # losses at the tail of a message are recovered by timeout, not NAK
HEALTHY_PRE_FEC_BER = 1e-9  # SONiC fec-stats of sound links read 1e-12 to 2e-9; FEC still corrects
LOSSY_PRE_FEC_BER = 2.4e-4  # a link losing frames after FEC is past the RS(544,514) limit
HEALTHY_TX_MW = 0.9  # a sound optic's laser (-0.5 dBm), at the bias it was made to run at
HEALTHY_BIAS_MA = 7.0
FAILING_BIAS_MA = 10.5  # an ageing laser draws ever more current to hold its power, past its alarm
HOST_BOUND_PAUSE = 0.1  # a NIC its host cannot drain pauses its leaf in short spells, not a storm


@dataclass(frozen=True)
class FabricState:
    """Steady-state rates (per second) of one fabric state; per directed link unless named per NIC."""

    bps: np.ndarray
    pps: np.ndarray
    util: np.ndarray
    queue: np.ndarray  # bytes in the egress queue feeding the link (switch egress only)
    marks: np.ndarray  # ECN-marked packets/s at that queue
    drops: np.ndarray
    pause: np.ndarray  # share of time the receiver pauses the link
    pause_fps: np.ndarray  # pause frames/s the receiver sends while pausing all the time
    errors: np.ndarray  # corrupted packets/s seen by the link's receiver
    symbols: np.ndarray  # symbol errors/s at the link's receiver: a bad link corrupts idles too
    ingress_drops: np.ndarray  # lossless packets/s the link's receiving switch drops at ingress
    corrected_bits: np.ndarray  # bits/s FEC corrects at the link's receiver (idles too)
    speed_bps: np.ndarray  # the speed the link came up at (below line rate after a downshift)
    tx_mw: np.ndarray  # optical power the link's transmitter sends
    bias_ma: np.ndarray  # its laser's bias current
    nic_ecn: np.ndarray
    nic_cnp_sent: np.ndarray
    nic_cnp_received: np.ndarray
    nic_oos: np.ndarray
    nic_seq_err: np.ndarray
    nic_ack_timeout: np.ndarray
    nic_pcie_stalled: np.ndarray  # share of seconds the NIC's PCIe transfers stall (host-bound)
    flow_rate: np.ndarray  # bytes/s each flow gets through (its demand where nothing holds it back)


def solve(fabric: Fabric, flows: Flows, active: list[tuple[Condition, int]]) -> FabricState:
    """Equilibrium of ``flows`` on ``fabric`` under the fault conditions ``active`` (with their stages)."""
    spec = fabric.spec
    n_links, n_nics = fabric.n_links, fabric.n_nics
    wire = spec.mtu + HEADER_BYTES
    cap = fabric.link_cap.copy()
    loss = np.zeros(n_links + 1)
    dropped = np.zeros(n_links + 1)
    resent = np.zeros(n_nics)  # share of each NIC's sends it resends for reasons of its own
    host_bound = np.zeros(n_nics)  # share of time a NIC pauses its leaf, its host draining slowly
    demand = flows.demand.copy()
    paused = np.zeros(n_links + 1, dtype=bool)
    down = np.zeros(n_links + 1, dtype=bool)
    ber = np.full(n_links, HEALTHY_PRE_FEC_BER)
    speed = fabric.link_cap * 8.0
    tx_mw = np.full(n_links, HEALTHY_TX_MW)
    bias_ma = np.full(n_links, HEALTHY_BIAS_MA)
    unpaused_roots: list[int] = []  # stalled switch egresses: blocked, but nobody pauses them
    # -1 pads the paths; point it at an extra, idle link so gathers need no masks.
    paths = np.where(flows.paths < 0, n_links, flows.paths)
    for cond, stage in active:
        if cond.kind in ("slow", "pcie"):
            cap[[fabric.nic_up[cond.nic], fabric.nic_down[cond.nic]]] *= cond.amount
            if cond.kind == "pcie":
                host_bound[cond.nic] = HOST_BOUND_PAUSE
        elif cond.kind == "loss":
            loss[list(cond.links)] = cond.amount
            ber[list(cond.links)] = LOSSY_PRE_FEC_BER
        elif cond.kind == "degrade":
            ber[list(cond.links)] = cond.amount
        elif cond.kind == "optic":
            tx_mw[list(cond.links)] = cond.amount
            bias_ma[list(cond.links)] = FAILING_BIAS_MA
        elif cond.kind == "downshift":
            cap[list(cond.links)] *= cond.amount
            speed[list(cond.links)] *= cond.amount
        elif cond.kind == "drop":
            dropped[list(cond.links)] = cond.amount
        elif cond.kind == "retransmit":
            resent[cond.nic] = cond.amount
        elif cond.kind == "down":
            down[list(cond.links)] = True
        elif cond.kind == "stall":
            demand[flows.src == cond.nic] = 0.0
            paused[_pause_tree(paths, demand, int(fabric.nic_down[cond.nic]), stage)] = True
        elif cond.kind == "switch_stall":
            # The stuck queue fills in microseconds and pauses its feeders at once: hop 1 at start.
            paused[_pause_tree(paths, demand, cond.links[0], stage + 1)] = True
            unpaused_roots.append(cond.links[0])

    blocked = paused[paths].any(axis=1) | down[paths].any(axis=1)
    live = np.where(blocked, 0.0, demand)
    offered = _per_link(paths, live, n_links)
    rho = offered / cap
    scale = np.append(np.minimum(1.0, 1.0 / np.maximum(rho, 1e-300)), 1.0)
    rate = live * scale[paths].min(axis=1)
    bps = _per_link(paths, rate, n_links)
    switch_tx = fabric.link_switch >= 0

    queue, congestion_pause = _queues(fabric, rho, switch_tx)
    wanted = _per_link(paths, demand, n_links)
    stalled = paused[:-1] & switch_tx & (wanted > 0)
    queue[stalled] = spec.pfc_xoff_kb * 1024 * STALL_HEADROOM
    queue, drop_bps = _overflow(fabric, queue, np.maximum(offered - cap, 0.0))

    pause = _feeders_pause(paths, live, congestion_pause, n_links)
    pause[paused[:-1]] = 1.0
    pause[unpaused_roots] = 0.0
    pause[fabric.nic_down] = np.maximum(pause[fabric.nic_down], host_bound)
    mark_p = np.where(
        switch_tx, _red(queue, spec.ecn_kmin_kb * 1024, spec.ecn_kmax_kb * 1024, spec.ecn_pmax), 0.0
    )

    pps = bps / wire
    flow_pkts = rate / wire
    flow_marked = flow_pkts * (1.0 - np.prod(1.0 - np.append(mark_p, 0.0)[paths], axis=1))
    flow_cnp = np.minimum(flow_marked, flows.qps * CNP_PER_QP_PER_S)
    flow_lost = flow_pkts * (1.0 - np.prod((1.0 - loss[paths]) * (1.0 - dropped[paths]), axis=1))
    seq_err = np.bincount(flows.src, flow_lost, n_nics) + resent * pps[fabric.nic_up]
    return FabricState(
        bps=bps,
        pps=pps,
        util=bps / cap,
        queue=queue,
        marks=mark_p * pps,
        # A switch drops what is routed to a link that is down until its senders give up.
        drops=(drop_bps + np.where(down[:-1] & switch_tx, wanted, 0.0)) / wire,
        pause=pause,
        pause_fps=2 * fabric.link_cap * 8 / PAUSE_QUANTA_BITS,
        errors=pps * loss[:-1],
        ingress_drops=pps * dropped[:-1],
        symbols=cap / wire * loss[:-1] * SYMBOLS_PER_BAD_FRAME,
        corrected_bits=speed * ber,
        speed_bps=speed,
        tx_mw=tx_mw,
        bias_ma=bias_ma,
        nic_ecn=np.bincount(flows.dst, flow_marked, n_nics),
        nic_cnp_sent=np.bincount(flows.dst, flow_cnp, n_nics),
        nic_cnp_received=np.bincount(flows.src, flow_cnp, n_nics),
        nic_oos=np.bincount(flows.dst, flow_lost, n_nics),
        nic_seq_err=seq_err,
        nic_ack_timeout=seq_err * ACK_TIMEOUT_SHARE,
        nic_pcie_stalled=(host_bound > 0).astype(float),
        flow_rate=rate,
    )


def _per_link(paths: np.ndarray, weight: np.ndarray, n_links: int) -> np.ndarray:
    """Sum a per-flow quantity over every link the flow crosses."""
    per = np.bincount(paths.ravel(), np.repeat(weight, paths.shape[1]), n_links + 1)
    return per[:n_links]


def _pause_tree(paths: np.ndarray, demand: np.ndarray, root_link: int, hops: int) -> np.ndarray:
    """Links paused ``hops`` hops after ``root_link`` stopped: feeders of paused links, hop by hop."""
    paused = np.zeros(paths.max(initial=root_link) + 1, dtype=bool)
    paused[root_link] = True
    wanting = paths[demand > 0]
    for _ in range(hops):
        into = paused[wanting[:, 1:]]
        feeders = wanting[:, :-1][into]
        grown = paused.copy()
        grown[feeders] = True
        if (grown == paused).all():
            break
        paused = grown
    return np.flatnonzero(paused)


def _queues(fabric: Fabric, rho: np.ndarray, switch_tx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Equilibrium occupancy of each switch egress queue and the pause share it asks of its feeders."""
    spec = fabric.spec
    kmin, xoff = spec.ecn_kmin_kb * 1024, spec.pfc_xoff_kb * 1024
    shed = 1.0 - 1.0 / np.maximum(rho, 1.0)  # share of the offered load the queue must turn away
    shed_limit = 1.0 - 1.0 / spec.dcqcn_overload_limit
    # Squared: DCQCN keeps a mild overload near Kmin and lets the queue climb only as it gets severe.
    climb = np.minimum(shed / shed_limit, 1.0) ** 2
    queue = np.where(rho <= 1.0, IDLE_QUEUE_BYTES * rho**4, kmin + (xoff - kmin) * climb)
    pause = np.clip((shed - shed_limit) / (1.0 - shed_limit), 0.0, 0.98)
    return np.where(switch_tx, queue, 0.0), np.where(switch_tx, pause, 0.0)


def _overflow(fabric: Fabric, queue: np.ndarray, excess_bps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Squeeze queues into each switch's shared buffer; what does not fit is dropped (lossless or not)."""
    buffer = fabric.spec.buffer_mb * 2**20
    sw = fabric.link_switch
    on_switch = sw >= 0
    used = np.bincount(sw[on_switch], queue[on_switch], len(fabric.switches))
    fit = np.minimum(1.0, buffer / np.maximum(used, 1.0))
    squeeze = np.where(on_switch, fit[np.maximum(sw, 0)], 1.0)
    return queue * squeeze, excess_bps * (1.0 - squeeze)


def _feeders_pause(paths: np.ndarray, live: np.ndarray, egress_pause: np.ndarray, n_links: int) -> np.ndarray:
    """PFC goes to the ingress links whose traffic fills a queue past XOFF: the hop before it on a path."""
    pause = np.zeros(n_links + 1)
    want = np.append(egress_pause, 0.0)
    flowing = paths[live > 0]
    for k in range(1, paths.shape[1]):
        asked = want[flowing[:, k]]
        hit = asked > 0
        np.maximum.at(pause, flowing[hit, k - 1], asked[hit])
    return pause[:n_links]


def _red(queue: np.ndarray, kmin: float, kmax: float, pmax: float) -> np.ndarray:
    """WRED/ECN marking probability: none below Kmin, linear to Pmax at Kmax, every packet above."""
    p = np.clip((queue - kmin) / (kmax - kmin), 0.0, 1.0) * pmax
    return np.where(queue > kmax, 1.0, p)
