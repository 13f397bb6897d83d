"""A gNMI target for tests: a real gRPC server on loopback, built from the same gNMI protos the
collector uses (pygnmi's compiled ``gnmi.proto``), that streams OpenConfig interface counters
moving at fixed rates. SAMPLE subscriptions get every counter of every interface each sample
interval; ON_CHANGE subscriptions get a leaf when it changes. Optionally TLS with a self-signed
certificate made here, and a user name and password checked from the call's metadata."""

from __future__ import annotations

import datetime
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

COUNTERS = "/interfaces/interface/state/counters"
QUEUES = "/qos/interfaces/interface/output/queues/queue/state"


@dataclass
class Interface:
    name: str
    out_octets_per_s: int
    in_octets_per_s: int
    ecn_marks: int = 0
    """Queue 3's ECN-marked packets, a leaf that changes only when the test says so."""
    oper_status: str = "UP"
    """OpenConfig's ``oper-status``, sent when a SAMPLE subscription asks for it."""
    rx_power_dbm: float | None = None
    """Its transceiver's received power, one lane (``double_val``), with a low alarm threshold of
    -13.5 dBm (``decimal_val``, as older targets send decimal64), sent when asked for transceivers."""


@dataclass
class Target(gnmi_pb2_grpc.gNMIServicer):
    interfaces: list[Interface]
    username: str = ""
    password: str = ""
    t0_ns: int = field(default_factory=time.time_ns)
    subscriptions: list = field(default_factory=list)
    changed: threading.Event = field(default_factory=threading.Event)

    def Subscribe(self, request_iterator, context):
        metadata = dict(context.invocation_metadata())
        if self.username and (metadata.get("username"), metadata.get("password")) != (
            self.username,
            self.password,
        ):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad user name or password")
        request = next(request_iterator)
        self.subscriptions.append(request.subscribe)
        sample = [
            s for s in request.subscribe.subscription if s.mode == gnmi_pb2.SubscriptionMode.Value("SAMPLE")
        ]
        on_change = [
            s
            for s in request.subscribe.subscription
            if s.mode == gnmi_pb2.SubscriptionMode.Value("ON_CHANGE")
        ]
        states = any(e.name == "oper-status" for s in sample for e in s.path.elem)
        optics = any(e.name == "transceiver" for s in sample for e in s.path.elem)
        interval_s = sample[0].sample_interval / 1e9 if sample else 0.5
        sent_marks: dict[str, int] = {}
        yield gnmi_pb2.SubscribeResponse(sync_response=True)
        while context.is_active():
            now = time.time_ns()
            if sample:
                for interface in self.interfaces:
                    yield self._counters(interface, now)
                    if states:
                        yield self._state(interface, now)
                    if optics and interface.rx_power_dbm is not None:
                        yield self._optics(interface, now)
            if on_change:
                for interface in self.interfaces:
                    if sent_marks.get(interface.name) != interface.ecn_marks:
                        sent_marks[interface.name] = interface.ecn_marks
                        yield self._marks(interface, now)
            self.changed.wait(interval_s)
            self.changed.clear()

    def _counters(self, interface: Interface, now: int) -> gnmi_pb2.SubscribeResponse:
        elapsed = (now - self.t0_ns) / 1e9
        values = {
            "out-octets": int(interface.out_octets_per_s * elapsed),
            "in-octets": int(interface.in_octets_per_s * elapsed),
        }
        prefix = _path(f"interfaces/interface[name={interface.name}]/state/counters", origin="openconfig")
        updates = [
            gnmi_pb2.Update(path=_path(leaf), val=gnmi_pb2.TypedValue(uint_val=v))
            for leaf, v in values.items()
        ]
        updates.append(
            gnmi_pb2.Update(path=_path("in-errors"), val=gnmi_pb2.TypedValue(json_ietf_val=b'"7"'))
        )
        notification = gnmi_pb2.Notification(timestamp=now, prefix=prefix, update=updates)
        return gnmi_pb2.SubscribeResponse(update=notification)

    def _state(self, interface: Interface, now: int) -> gnmi_pb2.SubscribeResponse:
        prefix = _path(f"interfaces/interface[name={interface.name}]/state", origin="openconfig")
        state = gnmi_pb2.TypedValue(string_val=interface.oper_status)
        update = gnmi_pb2.Update(path=_path("oper-status"), val=state)
        notification = gnmi_pb2.Notification(timestamp=now, prefix=prefix, update=[update])
        return gnmi_pb2.SubscribeResponse(update=notification)

    def _optics(self, interface: Interface, now: int) -> gnmi_pb2.SubscribeResponse:
        component = f"{interface.name}-transceiver"
        updates = [
            gnmi_pb2.Update(
                path=_path(f"interfaces/interface[name={interface.name}]/state/transceiver"),
                val=gnmi_pb2.TypedValue(string_val=component),
            ),
            gnmi_pb2.Update(
                path=_path(
                    f"components/component[name={component}]/transceiver/physical-channels/"
                    "channel[index=1]/state/input-power/instant"
                ),
                val=gnmi_pb2.TypedValue(double_val=interface.rx_power_dbm),
            ),
            gnmi_pb2.Update(
                path=_path(
                    f"components/component[name={component}]/transceiver/thresholds/"
                    "threshold[severity=CRITICAL]/state/input-power-lower"
                ),
                val=gnmi_pb2.TypedValue(decimal_val=gnmi_pb2.Decimal64(digits=-1350, precision=2)),
            ),
        ]
        notification = gnmi_pb2.Notification(
            timestamp=now, prefix=_path("", origin="openconfig"), update=updates
        )
        return gnmi_pb2.SubscribeResponse(update=notification)

    def _marks(self, interface: Interface, now: int) -> gnmi_pb2.SubscribeResponse:
        path = _path(
            f"qos/interfaces/interface[interface-id={interface.name}]/output/queues/queue[name=UC3]/state/ecn-marked-pkts"
        )
        update = gnmi_pb2.Update(path=path, val=gnmi_pb2.TypedValue(uint_val=interface.ecn_marks))
        return gnmi_pb2.SubscribeResponse(update=gnmi_pb2.Notification(timestamp=now, update=[update]))


def _path(text: str, origin: str = "") -> gnmi_pb2.Path:
    elems = []
    for part in _split(text):
        name, _, rest = part.partition("[")
        keys = dict(kv.split("=", 1) for kv in rest.rstrip("]").split("][")) if rest else {}
        elems.append(gnmi_pb2.PathElem(name=name, key=keys))
    return gnmi_pb2.Path(origin=origin, elem=elems)


def _split(text: str) -> list[str]:
    """Path elements, with the ``/`` inside keys (``Ethernet1/1``) kept."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "/" and not depth:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


class Server:
    """The target served on 127.0.0.1 (plain text, or TLS when ``tls_dir`` is given)."""

    def __init__(self, target: Target, tls_dir: Path | None = None) -> None:
        self.target = target
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        gnmi_pb2_grpc.add_gNMIServicer_to_server(target, self._server)
        if tls_dir is None:
            self.port = self._server.add_insecure_port("127.0.0.1:0")
            self.ca_file = None
        else:
            key, cert = _self_signed(tls_dir)
            credentials = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
            self.port = self._server.add_secure_port("127.0.0.1:0", credentials)
            self.ca_file = cert
        self.address = f"127.0.0.1:{self.port}"

    def __enter__(self) -> Server:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=0.5).wait(5)


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A key and a certificate for ``localhost`` and 127.0.0.1, valid for a day."""
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "leaf1.test")])
    now = datetime.datetime.now(datetime.UTC)
    alt = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(alt, critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_path, cert_path = directory / "target.key", directory / "target.pem"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path
