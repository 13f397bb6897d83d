"""A worker's web pages: ``/ready`` and ``/healthz`` for the orchestrator, ``/metrics`` for
Prometheus. What they answer is decided in ``health.Progress``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabricwatch.streams.worker_context import Worker


def wire(w: Worker) -> None:
    app = w.app

    @app.on_partitions_assigned.connect
    async def on_assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
        w.progress.joined.add("stage2")

    @app.page("/ready")
    async def ready(web: Any, request: Any) -> Any:
        ok, detail = w.progress.readiness()
        return web.json({"ready": ok, "detail": detail}, status=200 if ok else 503)

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        ok, detail = w.progress.liveness(await w.lag())
        return web.json(
            {
                "healthy": ok,
                "detail": detail,
                "dead_letters": dict(w.progress.dead_letters),
                "stages": w.progress.delays(),
            },
            status=200 if ok else 503,
        )

    @app.page("/metrics")
    async def metrics(web: Any, request: Any) -> Any:
        from prometheus_client import CONTENT_TYPE_LATEST

        return web.bytes(w.progress.prometheus(await w.lag()), headers={"Content-Type": CONTENT_TYPE_LATEST})
