"""Runs one or several service apps under uvicorn in this process."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator

import uvicorn
from fastapi import FastAPI


class _Server(uvicorn.Server):
    # Several servers share one loop; signals are handled once, for all of them, in serve_apps.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_apps(apps: list[tuple[FastAPI, str, int]], log_level: str = "info") -> None:
    servers = [
        _Server(
            uvicorn.Config(
                app,
                host=host,
                port=port,
                log_config=None,  # keep our structured logging
                log_level=log_level.lower(),
                access_log=False,
                timeout_graceful_shutdown=30,
            )
        )
        for app, host, port in apps
    ]
    loop = asyncio.get_running_loop()

    def stop() -> None:
        for s in servers:
            s.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop)
    await asyncio.gather(*(s.serve() for s in servers))
    if not all(s.started for s in servers):
        raise RuntimeError("a service failed to start (is its port already in use?)")


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    # uvicorn picks uvloop itself only when it owns the loop; here we own it. uvloop reads a
    # 26 MB request body about twice as fast as the default loop (docs/benchmarks.md).
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_apps(apps: list[tuple[FastAPI, str, int]], log_level: str = "info") -> None:
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(serve_apps(apps, log_level))
