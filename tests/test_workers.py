"""Production worker settings: uvicorn options, thread pool size, multi-process serving.

The process tests run `verilive serve voice --workers 2` with an empty models folder and
VERILIVE_REQUIRE_MODELS=false, so workers start in seconds; the route they call needs no model.
They wait on events (log lines, a 100 Continue) with generous deadlines, never on sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio.to_thread
import httpx
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from verilive.cli import app as cli_app
from verilive.config import Settings
from verilive.server.runner import ServerOptions, bind_socket, configure_threadpool

DEADLINE_S = 120.0
ROUTE = "/identification_result/get_indexes_of_matched_templates"


# ---------------------------------------------------------------- settings and options


def test_worker_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERILIVE_WORKERS", "4")
    monkeypatch.setenv("VERILIVE_THREADPOOL_SIZE", "3")
    monkeypatch.setenv("VERILIVE_GRACEFUL_TIMEOUT_S", "12.5")
    monkeypatch.setenv("VERILIVE_LIMIT_CONCURRENCY", "200")
    s = Settings()
    assert (s.workers, s.threadpool_size, s.graceful_timeout_s, s.limit_concurrency) == (4, 3, 12.5, 200)
    monkeypatch.setenv("VERILIVE_WORKERS", "0")
    with pytest.raises(ValidationError):
        Settings()


def test_server_options_reach_uvicorn() -> None:
    s = Settings(graceful_timeout_s=12.5, limit_concurrency=0, backlog=64, keep_alive_s=20, log_level="ERROR")
    cfg = ServerOptions.from_settings(s).uvicorn_config(None, "127.0.0.1", 0)  # type: ignore[arg-type]
    assert cfg.timeout_graceful_shutdown == 13  # rounded up, never shorter than asked
    assert cfg.limit_concurrency is None  # 0 means no limit
    assert cfg.backlog == 64
    assert cfg.timeout_keep_alive == 20
    assert cfg.log_config is None  # our structured logging stays in charge
    cfg = ServerOptions(limit_concurrency=5).uvicorn_config(None, "127.0.0.1", 0)  # type: ignore[arg-type]
    assert cfg.limit_concurrency == 5


def test_configure_threadpool_sets_the_loop_limiter() -> None:
    async def tokens_after(size: int) -> float:
        configure_threadpool(size)
        return anyio.to_thread.current_default_thread_limiter().total_tokens

    default = asyncio.run(tokens_after(0))
    assert default == 40  # anyio's default, untouched at 0
    assert asyncio.run(tokens_after(3)) == 3


def test_cli_rejects_zero_workers() -> None:
    res = CliRunner().invoke(cli_app, ["serve", "voice", "--workers", "0"])
    assert res.exit_code == 2
    assert "workers" in res.output.lower()


# ---------------------------------------------------------------- worker processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, what: Callable[[str], bool], label: str) -> None:
        end = time.monotonic() + DEADLINE_S
        while time.monotonic() < end:
            if what(self.text()):
                return
            if self.proc.poll() is not None and not what(self.text()):
                raise AssertionError(f"server exited ({self.proc.returncode}) before {label}:\n{self.text()}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {label}:\n{self.text()}")

    def workers(self) -> list[int]:
        kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        out = []
        for pid in map(int, kids):
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"resource_tracker" not in cmd:  # multiprocessing's helper, not a worker
                out.append(pid)
        return out


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    port = _free_port()
    log = tmp_path / "serve.log"
    env = {
        **os.environ,
        "VERILIVE_MODELS_DIR": str(tmp_path / "models"),
        "VERILIVE_REQUIRE_MODELS": "false",
        "VERILIVE_LOG_JSON": "false",
        "VERILIVE_GRACEFUL_TIMEOUT_S": "60",
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "verilive.cli", "serve", "voice", "--workers", "2", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )
    s = Served(proc, port, log)
    try:
        s.wait_for(lambda t: t.count("serving voice on") >= 2, "two workers")
        yield s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_two_workers_serve_one_port(served: Served) -> None:
    assert len(served.workers()) == 2
    url = f"http://127.0.0.1:{served.port}{ROUTE}"
    r = httpx.post(url, json={"scores": [0.1, 0.9, 0.5], "threshold": 0.5})
    assert r.status_code == 200
    assert r.json() == [1, 2]


@pytest.mark.slow
def test_sigterm_finishes_the_request_in_flight(served: Served) -> None:
    body = json.dumps({"scores": [0.3, 0.8, 0.1, 0.8], "threshold": 0.2}).encode()
    head = (
        f"POST {ROUTE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", served.port), timeout=DEADLINE_S) as c:
        c.sendall(head)
        # 100 Continue comes when the app starts reading the body: the request is now in a worker.
        assert c.recv(4096).startswith(b"HTTP/1.1 100")
        served.proc.send_signal(signal.SIGTERM)
        served.wait_for(lambda t: t.count("shutting down (pid") >= 2, "both workers to begin shutdown")
        c.sendall(body)
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.endswith(b"]"):
            chunk = c.recv(4096)
            if not chunk:
                break
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200"), reply
    assert reply.split(b"\r\n\r\n", 1)[1] == b"[1,3,0]"
    assert served.proc.wait(timeout=DEADLINE_S) == 0
    assert served.text().count("stopped (pid") >= 2  # each worker ran its shutdown to the end
    # The port is released: nobody listens any more.
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", served.port), timeout=5):
        pass


@pytest.mark.slow
def test_a_killed_worker_is_replaced(served: Served) -> None:
    victim = served.workers()[0]
    os.kill(victim, signal.SIGKILL)
    served.wait_for(lambda t: f"worker {victim} killed by signal 9" in t, "the supervisor to notice")
    served.wait_for(lambda t: t.count("serving voice on") >= 3, "the replacement worker")
    workers = served.workers()
    assert len(workers) == 2 and victim not in workers
    for _ in range(4):  # both workers answer; any of them may take each connection
        r = httpx.post(f"http://127.0.0.1:{served.port}{ROUTE}", json={"scores": [1.0], "threshold": 0.5})
        assert r.json() == [0]


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    taken = bind_socket("127.0.0.1", 0, 8)
    port = taken.getsockname()[1]
    env = {**os.environ, "VERILIVE_MODELS_DIR": str(tmp_path), "VERILIVE_REQUIRE_MODELS": "false"}
    try:
        res = subprocess.run(
            [sys.executable, "-m", "verilive.cli", "serve", "voice", "--workers", "2", "--port", str(port)],
            capture_output=True,
            env=env,
            cwd=tmp_path,
            timeout=DEADLINE_S,
        )
    finally:
        taken.close()
    assert res.returncode == 1
    assert b"cannot listen" in res.stderr


def test_malloc_arenas_are_capped_by_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """One glibc arena by default (memory freed by one request thread is reused by the next); 0
    leaves glibc alone; off Linux nothing is called."""
    import sys

    from verilive.config import Settings
    from verilive.server import runner

    assert Settings().malloc_arenas == 1
    monkeypatch.setenv("VERILIVE_MALLOC_ARENAS", "0")
    assert Settings().malloc_arenas == 0
    assert runner.limit_malloc_arenas(0) is False
    assert runner.limit_malloc_arenas(1) is (sys.platform.startswith("linux"))
    calls: list[tuple[int, int]] = []

    class Libc:
        def mallopt(self, param: int, value: int) -> int:
            calls.append((param, value))
            return 1

    class Fn:  # ctypes function stand-in: argtypes/restype are set on it
        def __init__(self) -> None:
            self.argtypes: list[object] = []
            self.restype: object = None

        def __call__(self, param: int, value: int) -> int:
            return Libc().mallopt(param, value)

    monkeypatch.setattr(runner.ctypes, "CDLL", lambda name: type("L", (), {"mallopt": Fn()})())
    monkeypatch.setattr(runner.sys, "platform", "linux")
    assert runner.limit_malloc_arenas(2) is True
    assert calls == [(runner.M_ARENA_MAX, 2)]
    monkeypatch.setattr(runner.sys, "platform", "darwin")
    assert runner.limit_malloc_arenas(2) is False
    assert len(calls) == 1


def test_release_free_memory_returns_freed_heap_pages() -> None:
    """What start-up frees stays in glibc's heap (and in the RSS) until malloc_trim: blocks below
    the mmap threshold, freed under one that is kept, are returned by release_free_memory."""
    import sys

    import numpy as np

    from verilive.server.memory import release_free_memory

    if not sys.platform.startswith("linux"):
        assert release_free_memory() is False
        return

    def rss_mib() -> float:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024

    release_free_memory()
    blocks = [np.ones(8192) for _ in range(2000)]  # 64 KiB each: from the heap, 125 MiB in all
    keep = np.ones(8192)  # allocated last: the heap's top stays in use, so free() cannot shrink it
    del blocks
    before = rss_mib()
    assert release_free_memory() is True
    assert before - rss_mib() > 60, (before, rss_mib())
    assert keep.sum() == 8192
