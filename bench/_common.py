"""Helpers shared by the benchmarks: a real server process, free ports, RSS, statistics."""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from common.repo import shared_root

SHARED = shared_root()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def server(service: str, env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """Start `verilive serve <service>` on a free loopback port; yield (base url, pid)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "verilive.cli", "serve", service, "--port", str(port)],
        env={**os.environ, "VERILIVE_LOG_LEVEL": "WARNING", **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}")
            time.sleep(0.1)
        yield url, proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def rss_mb(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) in MiB from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def server_ms(response: httpx.Response) -> float:
    timing = response.headers.get("server-timing", "")
    return float(timing.split("dur=")[1]) if "dur=" in timing else float("nan")


def summary(values: list[float]) -> str:
    qs = statistics.quantiles(values, n=20) if len(values) >= 2 else values * 19
    return f"median {statistics.median(values):.2f}, p5 {qs[0]:.2f}, p95 {qs[-1]:.2f} (n={len(values)})"
