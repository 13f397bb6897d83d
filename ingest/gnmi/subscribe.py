"""Subscribe to a switch's gNMI server directly, for sites that run neither gnmic nor Telegraf.

One STREAM subscription per target over grpcio, with the gNMI service's compiled protos as pygnmi
ships them (``pygnmi.spec.v080``): SAMPLE subscriptions of the counter paths at the poll interval
(or ON_CHANGE, or TARGET_DEFINED), PROTO encoding asked for and JSON or JSON_IETF values read as
well. Plain text, or TLS with the site's CA (and a client certificate where the switch wants one);
user name and password travel as gRPC metadata, as gNMI servers expect them.

Notifications become the same points as gnmic's and Telegraf's messages
(``ingest/gnmi/messages.py``), and the same assembler makes snapshots of them.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import grpc
import msgspec
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from fabricwatch.ingest.gnmi.messages import TRANSCEIVER, Point, points_of, split_path
from fabricwatch.ingest.lldp.fabric import SiteSettings
from fabricwatch.ingest.nic.poll import ProblemLog

COUNTER_PATHS = (
    "/interfaces/interface/state/counters",
    "/interfaces/interface/ethernet/state/counters",
    "/qos/interfaces/interface/output/queues/queue/state",
    "/interfaces/interface/state/oper-status",
    "/interfaces/interface/state/admin-status",
    "/interfaces/interface/ethernet/state/negotiated-port-speed",
    "/interfaces/interface/state/transceiver",
    "/components/component/transceiver/physical-channels/channel/state",
    "/components/component/transceiver/thresholds",
    "/components/component/state/temperature",
)
"""What is subscribed when a target names no paths: the OpenConfig counters vendor_map.csv maps,
each port's state and speed (``messages.STATE_LEAVES``), and its transceiver's diagnostics
(``messages.OPTIC_LEAVES``, joined to the port by its ``transceiver`` reference)."""


class GnmiTarget(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One switch of the ``gnmi:`` section's ``targets`` list."""

    name: str
    """Its device id in the fabric (what the snapshots are keyed by)."""
    address: str
    """HOST:PORT of its gNMI server."""
    paths: list[str] = msgspec.field(default_factory=lambda: list(COUNTER_PATHS))
    mode: Literal["sample", "on_change", "target_defined"] = "sample"
    origin: str = "openconfig"
    tls: bool = False
    ca_file: str = ""
    """CA certificate (PEM) the switch's certificate is checked against (default: the system's)."""
    cert_file: str = ""
    key_file: str = ""
    """A client certificate and key, for switches that ask for one."""
    server_name: str = ""
    """The name the switch's certificate carries, when it is not the address's host."""
    username: str = ""
    password_file: str = ""
    """A file holding the password (a secret is never a config value): a mounted Kubernetes secret."""


class GnmiError(Exception):
    """The subscription ended; the caller reconnects."""


def subscribe(
    target: GnmiTarget,
    interval_s: float,
    on_problem: Callable[[str], None],
    calls: list[Any] | None = None,
    timeout_s: float = 5.0,
) -> Iterator[list[Point]]:
    """The points of each notification the target streams, until the stream ends (GnmiError).
    A notification that cannot be read goes to ``on_problem``; the open call is put in ``calls``
    so that another thread can cancel it."""
    channel = _channel(target)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
        stub = gnmi_pb2_grpc.gNMIStub(channel)
        responses = stub.Subscribe(iter([_request(target, interval_s)]), metadata=_metadata(target))
        if calls is not None:
            calls.append(responses)
        for response in responses:
            if response.HasField("update"):
                try:
                    yield notification_points(target.name, response.update)
                except ValueError as exc:
                    on_problem(str(exc))
            elif response.HasField("error"):
                raise GnmiError(f"{target.address}: the target says {response.error.message}")
        raise GnmiError(f"{target.address}: the target ended the subscription")
    except grpc.FutureTimeoutError:
        raise GnmiError(f"{target.address}: no gNMI server answered within {timeout_s:g} s") from None
    except grpc.RpcError as exc:
        raise GnmiError(f"{target.address}: {exc.code().name}: {exc.details()}") from None
    finally:
        channel.close()


def stream_targets(
    targets: list[GnmiTarget], interval_s: float, stop: threading.Event, problems: ProblemLog
) -> Iterator[list[Point]]:
    """Points from every target, each streamed by a thread of its own that reconnects after a
    failure (1 s, doubling to 30 s); an empty list at least every 0.2 s so that the caller can
    close samples on time. Ends when ``stop`` is set, cancelling the open streams."""
    arrived: queue.Queue[list[Point]] = queue.Queue(maxsize=10_000)
    calls: list[Any] = []
    threads = [
        threading.Thread(target=_follow, args=(t, interval_s, stop, problems, arrived, calls), daemon=True)
        for t in targets
    ]
    for thread in threads:
        thread.start()
    try:
        while not stop.is_set():
            try:
                yield arrived.get(timeout=0.2)
            except queue.Empty:
                yield []
    finally:
        stop.set()
        for call in calls:
            call.cancel()
        for thread in threads:
            thread.join(timeout=5)


def _follow(
    target: GnmiTarget,
    interval_s: float,
    stop: threading.Event,
    problems: ProblemLog,
    arrived: queue.Queue[list[Point]],
    calls: list[Any],
) -> None:
    backoff = 1.0
    while not stop.is_set():
        try:
            for points in subscribe(
                target, interval_s, lambda text: problems.failed(target.name, "data", text), calls
            ):
                problems.ok(target.name, "stream")
                backoff = 1.0
                arrived.put(points)
                if stop.is_set():
                    return
        except GnmiError as exc:
            if stop.is_set():
                return
            problems.failed(target.name, "stream", f"{exc}; subscribing again in {backoff:g} s")
        stop.wait(backoff)
        backoff = min(backoff * 2, 30.0)


def notification_points(device: str, notification: Any) -> list[Point]:
    """The counters of one gNMI Notification, prefix and path joined, keys taken out."""
    base, base_keys = _path(notification.prefix)
    ts_ns = notification.timestamp
    if ts_ns <= 0:
        raise ValueError("a notification without a timestamp")
    points: list[Point] = []
    for update in notification.update:
        path, keys = _path(update.path)
        full = base.rstrip("/") + path if base != "/" else path
        value = _value(update.val)
        if value is not None:
            found = points_of(device, ts_ns, full, {**base_keys, **keys}, value)
            # counters, optics, and the interface's transceiver (the only text the assembler reads)
            points.extend(p for p in found if not isinstance(p.value, str) or p.path == TRANSCEIVER)
    return points


def _path(path: Any) -> tuple[str, dict[str, str]]:
    names, keys = [], {}
    for elem in path.elem:
        name = elem.name.rpartition(":")[2]
        names.append(name)
        for key, value in elem.key.items():
            keys[f"{name}_{key}"] = value
    return "/" + "/".join(names), keys


def _value(val: Any) -> Any:
    kind = val.WhichOneof("value")
    if kind in ("uint_val", "int_val", "double_val", "float_val"):
        return getattr(val, kind)
    if kind == "decimal_val":  # deprecated, still sent for decimal64 leaves by older targets
        return val.decimal_val.digits / 10**val.decimal_val.precision
    if kind in ("json_val", "json_ietf_val"):
        try:
            return json.loads(getattr(val, kind))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
    if kind in ("string_val", "ascii_val"):
        return getattr(val, kind)  # uint64 as a decimal string: read if it is one
    return None


def _request(target: GnmiTarget, interval_s: float) -> Any:
    mode = {"sample": "SAMPLE", "on_change": "ON_CHANGE", "target_defined": "TARGET_DEFINED"}[target.mode]
    subscriptions = [
        gnmi_pb2.Subscription(
            path=_proto_path(p),
            mode=gnmi_pb2.SubscriptionMode.Value(mode),
            sample_interval=int(interval_s * 1e9) if mode == "SAMPLE" else 0,
        )
        for p in target.paths
    ]
    return gnmi_pb2.SubscribeRequest(
        subscribe=gnmi_pb2.SubscriptionList(
            prefix=gnmi_pb2.Path(origin=target.origin) if target.origin else None,
            subscription=subscriptions,
            mode=gnmi_pb2.SubscriptionList.Mode.Value("STREAM"),
            encoding=gnmi_pb2.Encoding.Value("PROTO"),
        )
    )


def _proto_path(text: str) -> Any:
    schema, keys = split_path(text)
    elems = []
    for name in schema.strip("/").split("/"):
        own = {k.removeprefix(f"{name}_"): v for k, v in keys.items() if k.startswith(f"{name}_")}
        elems.append(gnmi_pb2.PathElem(name=name, key=own))
    return gnmi_pb2.Path(elem=elems)


def _channel(target: GnmiTarget) -> grpc.Channel:
    if not target.tls:
        return grpc.insecure_channel(target.address)
    credentials = grpc.ssl_channel_credentials(
        _pem(target.ca_file), _pem(target.key_file), _pem(target.cert_file)
    )
    options = [("grpc.ssl_target_name_override", target.server_name)] if target.server_name else []
    return grpc.secure_channel(target.address, credentials, options)


def _pem(path: str) -> bytes | None:
    return Path(path).read_bytes() if path else None


def _metadata(target: GnmiTarget) -> list[tuple[str, str]]:
    if not target.username:
        return []
    password = Path(target.password_file).read_text().strip() if target.password_file else ""
    return [("username", target.username), ("password", password)]


class GnmiSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The ``gnmi:`` section of a config file; a command-line option wins over its key."""

    interval_s: float = 1.0
    """The SAMPLE interval asked of every target."""
    window_s: float = 0.25
    grace_s: float = 2.0
    targets: list[GnmiTarget] = msgspec.field(default_factory=list)
    web_bind: str = "127.0.0.1"
    web_port: int | None = None
    """Port of /metrics and /healthz (default: 6070 when publishing; 0: none)."""
    site: SiteSettings = msgspec.field(default_factory=SiteSettings)
    """What LLDP does not say, for the topology ``ingest gnmic|telegraf`` reports from ``/lldp``."""

    def __post_init__(self) -> None:
        if not 0.05 <= self.interval_s <= 60:
            raise ValueError(f"interval_s {self.interval_s}: must be between 0.05 and 60 seconds")
        names = [t.name for t in self.targets]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"targets: {', '.join(twice)} listed more than once")
