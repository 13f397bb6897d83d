"""The Faust app behind ``fabricwatch worker``: stage 1 and stage 2 as two thin agents.

This module builds the app and what its parts share (``Worker``); the parts are wired in
``stage1_agent`` (counters in, rates and symptoms out), ``stage2_agent`` (symptoms in, anomalies
out), ``job_agent`` (each job's calls against the fabric's incidents), ``broadcast`` (topology
and phases, read by every worker) and ``web`` (health pages).

What survives a restart or a rebalance is decided in ``docs/streaming.md``: nothing is
changelogged; a device's state is rebuilt from its next snapshots.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka

from fabricwatch.streams import broadcast, handover, job_agent, stage1_agent, stage2_agent, web
from fabricwatch.streams.health import Progress
from fabricwatch.streams.kafka_io import BrokerSettings
from fabricwatch.streams.stages import Stage1Worker, Stage2Worker
from fabricwatch.streams.worker_context import Worker, WorkerOptions


def make_app(opts: WorkerOptions) -> faust.App:
    """A Faust app wired to the pure stages; ``fabricwatch worker`` runs it with ``faust.Worker``."""
    _limit_fetch_wait(opts.fetch_max_wait_ms)
    app = _app(opts)
    worker = Worker(
        opts,
        app,
        Progress(stall_after_s=opts.stall_after_s),
        Stage1Worker(opts.config, opts.outliers, opts.max_message_bytes),
        Stage2Worker(opts.config, stall_after_s=max(opts.stall_source_s, 2 * opts.session_timeout_s)),
    )
    stage1_agent.wire(worker, _aiokafka_kwargs(opts.broker))
    stage2_agent.wire(worker)
    broadcast.wire(worker, _aiokafka_kwargs(opts.broker))
    handover.wire(worker, _aiokafka_kwargs(opts.broker))
    job_agent.wire(worker, _aiokafka_kwargs(opts.broker))
    web.wire(worker)
    return app


def _app(opts: WorkerOptions) -> faust.App:
    timeout = opts.session_timeout_s
    return faust.App(
        opts.app_id,
        broker=[f"kafka://{b}" for b in opts.broker.bootstrap.split(",")],
        broker_credentials=_credentials(opts.broker),
        key_serializer="raw",
        value_serializer="raw",
        store="memory://",
        datadir=str(opts.datadir),
        topic_disable_leader=True,
        topic_allow_declare=False,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=timeout,
        broker_heartbeat_interval=max(timeout / 6, 0.5),
        broker_rebalance_timeout=timeout,
        broker_max_poll_interval=max(timeout, 30.0),
        producer_linger=0.005,
        producer_max_request_size=opts.max_message_bytes + 1024 * 1024,
        web_bind=opts.web_bind,
        web_port=opts.web_port,
        web_host=socket.gethostname(),
    )


def _limit_fetch_wait(ms: int) -> None:
    """Faust fixes its consumer's fetch wait at 1.5 s. Kafka answers a fetch as soon as data
    arrives, but some Kafka-protocol brokers (Tansu, the embedded one) hold it for the whole wait,
    which puts up to 1.5 s on each of the two hops between a snapshot and its anomaly. Faust has no
    setting for it, so the consumer it creates gets ours before it starts."""
    thread = faust_aiokafka.AIOKafkaConsumerThread
    original = getattr(thread, "_fabricwatch_original", thread._create_worker_consumer)

    def create(self: Any, transport: Any) -> Any:
        consumer = original(self, transport)
        consumer._fetch_max_wait_ms = ms
        return consumer

    thread._fabricwatch_original = original
    thread._create_worker_consumer = create


def _credentials(settings: BrokerSettings) -> Any:
    context = _ssl_context(settings)
    if settings.sasl_mechanism:
        return faust.SASLCredentials(
            username=settings.sasl_username,
            password=settings.sasl_password,
            mechanism=settings.sasl_mechanism,
            ssl_context=context,
        )
    return faust.SSLCredentials(context) if context is not None else None


def _aiokafka_kwargs(settings: BrokerSettings) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap.split(","),
        "security_protocol": settings.security_protocol,
        "ssl_context": _ssl_context(settings),
    }
    if settings.sasl_mechanism:
        kw.update(
            sasl_mechanism=settings.sasl_mechanism,
            sasl_plain_username=settings.sasl_username,
            sasl_plain_password=settings.sasl_password,
        )
    return kw


def _ssl_context(settings: BrokerSettings) -> ssl.SSLContext | None:
    if "SSL" not in settings.security_protocol:
        return None
    return ssl.create_default_context(cafile=settings.ssl_cafile)
