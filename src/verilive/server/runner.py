"""Runs the service apps under uvicorn: in this process, or in several worker processes.

One worker (the default) serves every app of ``verilive serve`` on one event loop in this process.
With ``workers > 1`` this process binds the listening sockets once, starts that many worker
processes (spawned, so no onnxruntime state is forked) that each build the apps and serve the
shared sockets, forwards SIGTERM/SIGINT to them and restarts a worker that a signal killed
(docs/deployment.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING

import anyio.to_thread
import uvicorn

from verilive.config import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

    from verilive.models.sessions import ModelRegistry

log = logging.getLogger("verilive.runner")

M_ARENA_MAX = -8  # glibc's mallopt parameter number


def limit_malloc_arenas(arenas: int) -> bool:
    """Cap the number of glibc malloc arenas of this process (0: leave glibc's default); True when it
    took effect. With one arena per thread, each request thread keeps the large blocks it freed (the
    anti-spoofing front ends of a 30 s clip) for itself; one shared arena lets the next call reuse
    them: two concurrent 30 s anti-spoofing calls peak at about 420 instead of 470-490 MiB, at the
    same throughput (docs/benchmarks.md). Call it before any thread starts; other C libraries
    (musl) have no mallopt and are left alone."""
    if arenas <= 0 or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))


# Extra time the supervisor gives workers beyond the graceful timeout (lifespan shutdown, exit).
_EXIT_MARGIN_S = 10.0


@dataclass(frozen=True)
class ServerOptions:
    """uvicorn settings of every server a process runs."""

    log_level: str = "info"
    graceful_timeout_s: float = 30.0
    limit_concurrency: int = 0  # 0: no limit
    backlog: int = 2048
    keep_alive_s: float = 75.0
    threadpool_size: int = 0  # 0: anyio's default (40)
    root_path: str = ""  # the prefix a gateway routes to these services (uvicorn's --root-path)

    @classmethod
    def from_settings(cls, settings: Settings) -> ServerOptions:
        return cls(
            log_level=settings.log_level,
            graceful_timeout_s=settings.graceful_timeout_s,
            limit_concurrency=settings.limit_concurrency,
            backlog=settings.backlog,
            keep_alive_s=settings.keep_alive_s,
            threadpool_size=settings.threadpool_size,
            root_path=settings.root_path,
        )

    def uvicorn_config(self, app: FastAPI, host: str, port: int) -> uvicorn.Config:
        return uvicorn.Config(
            app,
            host=host,
            port=port,
            log_config=None,  # keep our structured logging
            log_level=self.log_level.lower(),
            access_log=False,
            # uvicorn types these as int; round up so a fractional setting never shortens them.
            timeout_graceful_shutdown=max(1, int(-(-self.graceful_timeout_s // 1))),
            timeout_keep_alive=max(1, int(-(-self.keep_alive_s // 1))),
            limit_concurrency=self.limit_concurrency or None,
            backlog=self.backlog,
            root_path=self.root_path,
        )


class _Server(uvicorn.Server):
    # Several servers share one loop; signals are handled once, for all of them, in serve_apps.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def configure_threadpool(size: int) -> None:
    """Size the thread pool that run_in_threadpool (inference, decoding, database) uses.

    Must run inside the event loop: anyio keeps one default limiter per loop.
    """
    if size > 0:
        anyio.to_thread.current_default_thread_limiter().total_tokens = size


async def serve_apps(
    apps: list[tuple[FastAPI, str, int]],
    options: ServerOptions | str = "info",
    sockets: list[socket.socket] | None = None,
) -> None:
    """Serve ``apps`` on one loop until SIGTERM/SIGINT; in-flight requests finish first.

    ``sockets`` (one per app, already listening) replaces binding ``host:port``; worker processes
    use it to share the supervisor's sockets.
    """
    if isinstance(options, str):  # the old signature: serve_apps(apps, log_level)
        options = ServerOptions(log_level=options)
    if sockets is not None and len(sockets) != len(apps):
        raise ValueError("give one socket per app")
    configure_threadpool(options.threadpool_size)
    servers = [_Server(options.uvicorn_config(app, host, port)) for app, host, port in apps]
    loop = asyncio.get_running_loop()

    def stop() -> None:
        if not any(s.should_exit for s in servers):
            log.info("shutting down (pid %d): finishing the requests in flight", os.getpid())
        for s in servers:
            s.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop)
    announce = asyncio.create_task(_announce(servers, apps, options.root_path))
    try:
        await asyncio.gather(
            *(s.serve(sockets=[sockets[i]] if sockets is not None else None) for i, s in enumerate(servers))
        )
    finally:
        announce.cancel()
    if all(s.started for s in servers):
        log.info("stopped (pid %d)", os.getpid())
    if not all(s.started for s in servers):
        raise RuntimeError("a service failed to start (is its port already in use?)")


async def _announce(servers: list[_Server], apps: list[tuple[FastAPI, str, int]], root_path: str) -> None:
    """One line when every server of this process listens (uvicorn's own lines are filtered out)."""
    while not all(s.started for s in servers):
        if any(s.should_exit for s in servers):
            return
        await asyncio.sleep(0.05)
    where = ", ".join(
        f"{app.title.removeprefix('verilive ').split()[0]} on http://{host}:{port}{root_path}"
        for app, host, port in apps
    )
    log.info("serving %s (pid %d)", where, os.getpid())


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    # uvicorn picks uvloop itself only when it owns the loop; here we own it. uvloop reads a
    # 26 MB request body about twice as fast as the default loop (docs/benchmarks.md).
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_apps(
    apps: list[tuple[FastAPI, str, int]],
    options: ServerOptions | str = "info",
    sockets: list[socket.socket] | None = None,
) -> None:
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(serve_apps(apps, options, sockets))


def build_apps(
    names: list[str], settings: Settings, registry: ModelRegistry | None = None
) -> list[tuple[FastAPI, str, int]]:
    from verilive.server.app import create_service_app

    return [(create_service_app(n, settings, registry), settings.host, settings.port_of(n)) for n in names]


def bind_socket(host: str, port: int, backlog: int) -> socket.socket:
    """A listening TCP socket, as uvicorn would bind it (IPv6 when ``host`` has a colon)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


def _worker_main(names: list[str], settings: Settings, sockets: list[socket.socket]) -> None:
    # A fresh interpreter (spawn): set up logging again, then build and serve the apps.
    from verilive.server.logs import configure_logging

    limit_malloc_arenas(settings.malloc_arenas)
    configure_logging(settings.log_level, settings.log_json)
    try:
        run_apps(build_apps(names, settings), ServerOptions.from_settings(settings), sockets)
    except RuntimeError as exc:
        log.error("worker %d failed: %s", os.getpid(), exc)
        raise SystemExit(1) from exc


def run_workers(names: list[str], settings: Settings) -> int:
    """Run ``settings.workers`` worker processes on shared sockets; return the exit code.

    SIGTERM/SIGINT: every worker gets SIGTERM, stops accepting, finishes its in-flight requests
    (up to ``graceful_timeout_s``), closes its engines and exits; then this returns 0. A worker
    killed by a signal (OOM killer, crash) is replaced; one that exits by itself (a startup
    failure such as a broken model) stops them all and its exit code is returned.
    """
    sockets = [bind_socket(settings.host, settings.port_of(n), settings.backlog) for n in names]
    ctx = multiprocessing.get_context("spawn")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        with contextlib.suppress(OSError):  # the pipe is full: a wake-up is already pending
            os.write(wake_w, b"x")

    def start() -> BaseProcess:
        p = ctx.Process(target=_worker_main, args=(names, settings, sockets), name="verilive-worker")
        p.start()
        log.info("worker %d started", p.pid)
        return p

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    exit_code = 0
    procs: list[BaseProcess] = []
    try:
        procs = [start() for _ in range(settings.workers)]
        while not stopping:
            ready = wait([wake_r, *(p.sentinel for p in procs)])
            if stopping:
                break
            for p in [p for p in procs if p.sentinel in ready]:
                p.join()
                code = p.exitcode if p.exitcode is not None else 1
                if code < 0:
                    log.error("worker %d killed by signal %d; starting a new one", p.pid, -code)
                    procs[procs.index(p)] = start()
                else:
                    log.error("worker %d exited with code %d; stopping", p.pid, code)
                    exit_code, stopping = code or 1, True
                    break
    finally:
        _stop_workers(procs, settings.graceful_timeout_s + _EXIT_MARGIN_S)
        for sock in sockets:
            sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(wake_r)
        os.close(wake_w)
    return exit_code


def _stop_workers(procs: list[BaseProcess], timeout_s: float) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()  # SIGTERM: graceful shutdown in the worker
    deadline = time.monotonic() + timeout_s  # one grace period for all, not one each
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            log.error("worker %d did not stop in %.0f s; killing it", p.pid, timeout_s)
            p.kill()
            p.join()
