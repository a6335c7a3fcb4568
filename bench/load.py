"""Bounded load runs against each service's main endpoint (real models, loopback only).

    python -m bench.load [--services voice,face,capture] [--clients 8,32,64] [--requests 300]
                         [--warmup 8] [--workers 1] [--json results.json]

For every service the script starts a real `verilive serve <service>` on a free loopback port,
warms it up, then for each concurrency level sends exactly `requests` requests from that many
concurrent keep-alive clients (asyncio + httpx; each client sends its next request as soon as its
previous answer arrives) and reports throughput, client-side latency p50/p95/p99, and the count of
answers by status. Zero 5xx is expected; the script exits 1 when any 5xx or transport error occurs.

Main endpoints and bodies:
  voice    POST /voice_template_factory/create_voice_template_from_samples, 3 s of PCM16 speech
  face     POST /check_liveness, one 640x480 JPEG selfie (multipart part `image`)
  capture  POST /check_capture_liveness, a fresh bundle per request (new nonce, one pixel changed
           so that no image hash repeats) around the same 640x480 frame; the bundles of a level are
           built before it starts so that client-side encryption does not compete for the CPU.

The capture server runs with VERILIVE_CAPTURE_DEVICE_CAPTURES_PER_MINUTE=1000000: every request comes from the
same Python client "device", and the default limit (10 a minute) would rightly call that
suspicious. Other jobs may share the machine: the load average is printed around every level.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import cv2
import httpx
import numpy as np

from bench._common import rss_mb, server

KEY = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "capture_test_key.pem"
VOICE_PATH = "/voice_template_factory/create_voice_template_from_samples?sample_rate=16000"
FACE_PATH = "/check_liveness"
CAPTURE_PATH = "/check_capture_liveness"
SERVICES = ("voice", "face", "capture")


@dataclass
class Request:
    """One prepared request: everything httpx needs, built before the clock starts."""

    path: str
    content: bytes | None = None
    files: dict[str, tuple[str, bytes, str]] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class LevelResult:
    service: str
    clients: int
    requests: int
    seconds: float
    throughput: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    statuses: dict[str, int]
    unexpected: int  # 2xx answers whose body is not the expected result (e.g. a capture rejection)
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    rss_mib: float

    @property
    def errors(self) -> int:
        return sum(n for s, n in self.statuses.items() if not s.startswith("2"))

    @property
    def server_errors(self) -> int:
        return sum(n for s, n in self.statuses.items() if s.startswith("5") or s == "transport")


# --- request bodies ------------------------------------------------------------------------------


def voice_bodies(n: int = 50) -> list[bytes]:
    from bench.voice_http import clips

    return clips(n, seconds=3.0)


def face_frame() -> np.ndarray:
    from bench.face_http import selfie_frame

    return selfie_frame()


def jpeg(img: np.ndarray, quality: int = 90) -> bytes:
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError("JPEG encoding failed")
    return buf.tobytes()


def face_variants(frame: np.ndarray, n: int) -> list[bytes]:
    """n different JPEGs of one frame (brightness and quality varied), as real uploads differ."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        f = (frame.astype(np.float32) * rng.uniform(0.92, 1.08)).clip(0, 255).astype(np.uint8)
        out.append(jpeg(f, int(rng.integers(82, 96))))
    return out


class CaptureBundles:
    """Fresh capture bundles: a new nonce and timestamp each, and an image whose hash is new."""

    def __init__(self, frame: np.ndarray) -> None:
        from verilive.capture.bundle import public_key_b64

        self.frame = frame
        self.public = public_key_b64(KEY.read_bytes())
        self.counter = 0

    def next(self) -> bytes:
        from verilive.capture.client import build_bundle

        self.counter += 1
        i = self.counter
        img = self.frame.copy()
        # One pixel differs per bundle: the replay store remembers image hashes (UNTRUSTED_CONTENT).
        img[i % img.shape[0], (i // img.shape[0]) % img.shape[1]] = (i % 256, (i >> 8) % 256, 7)
        return build_bundle(self.public, None, jpeg(img, 92))


def voice_request(body: bytes) -> Request:
    return Request(VOICE_PATH, content=body, headers={"content-type": "application/octet-stream"})


def face_request(image: bytes) -> Request:
    return Request(FACE_PATH, files={"image": ("selfie.jpg", image, "image/jpeg")})


def capture_request(bundle: bytes) -> Request:
    return Request(CAPTURE_PATH, content=bundle, headers={"content-type": "application/octet-stream"})


def expected_body(service: str, body: Any) -> bool:
    """Whether a 200 answer is the real result, not a refusal dressed as success."""
    if service == "voice":
        return isinstance(body, str) and len(body) > 100  # an encoded template
    if not isinstance(body, dict):
        return False
    if service == "face":
        return "probability" in body
    cap = body.get("capture_liveness") or {}
    return cap.get("rejection") in (None, "", []) and "face_liveness" in body


class Workload:
    """Prepared requests of one service; `make(n)` returns n requests for one level."""

    def __init__(self, service: str) -> None:
        self.service = service
        if service == "voice":
            bodies = voice_bodies()
            self.make: Callable[[int], list[Request]] = lambda n: [
                voice_request(bodies[i % len(bodies)]) for i in range(n)
            ]
        elif service == "face":
            images = face_variants(face_frame(), 64)
            self.make = lambda n: [face_request(images[i % len(images)]) for i in range(n)]
        elif service == "capture":
            bundles = CaptureBundles(face_frame())
            self.make = lambda n: [capture_request(bundles.next()) for _ in range(n)]
        else:
            raise ValueError(f"unknown service {service!r}")


def server_env(service: str, tmp: str, workers: int) -> dict[str, str]:
    env = {
        "VERILIVE_BI_DATABASE_URL": f"{tmp}/bi.sqlite3",
        "VERILIVE_WORKERS": str(workers),
    }
    if service == "capture":
        env |= {
            "VERILIVE_CAPTURE_PRIVATE_KEYS": json.dumps([str(KEY)]),
            "VERILIVE_CAPTURE_REPLAY_URL": f"{tmp}/replay.sqlite3",
            "VERILIVE_CAPTURE_DEVICE_CAPTURES_PER_MINUTE": "1000000",  # one client "device" sends everything
            # Still images only, as before the 3D check was required: the load is the still's path.
            "VERILIVE_CAPTURE_MOTION3D": "use",
        }
    return env


@contextmanager
def running(service: str, workers: int = 1) -> Iterator[tuple[str, int]]:
    """A real server of `service` on loopback with throwaway BI and replay databases."""
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"verilive-load-{service}-"))
        yield stack.enter_context(server(service, server_env(service, tmp, workers)))


# --- the load loop -------------------------------------------------------------------------------


async def send(client: httpx.AsyncClient, req: Request) -> httpx.Response:
    return await client.post(req.path, content=req.content, files=req.files, headers=req.headers)


async def run_level(
    url: str, service: str, requests: list[Request], clients: int
) -> tuple[list[float], Counter[str], int, float]:
    """Send all `requests` from `clients` concurrent clients; (latencies ms, statuses, unexpected, s)."""
    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    unexpected = 0
    queue = iter(requests)  # shared: each client takes the next request when it is free
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:

        async def one_client() -> None:
            nonlocal unexpected
            for req in queue:
                t0 = time.perf_counter()
                try:
                    r = await send(client, req)
                except httpx.TransportError:
                    statuses["transport"] += 1
                    continue
                latencies.append(1000 * (time.perf_counter() - t0))
                statuses[str(r.status_code)] += 1
                if r.status_code == 200 and not expected_body(service, r.json()):
                    unexpected += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
        wall = time.perf_counter() - t0
    return latencies, statuses, unexpected, wall


def load_avg() -> tuple[float, float, float]:
    a, b, c = os.getloadavg()
    return round(a, 2), round(b, 2), round(c, 2)


def bench_service(
    service: str, levels: list[int], n_requests: int, warmup: int, workers: int
) -> list[LevelResult]:
    work = Workload(service)
    results = []
    with running(service, workers) as (url, pid), httpx.Client(base_url=url, timeout=300) as c:
        for req in work.make(warmup):  # first calls build sessions and caches
            r = c.post(req.path, content=req.content, files=req.files, headers=req.headers)
            if r.status_code != 200 or not expected_body(service, r.json()):
                raise RuntimeError(f"{service} warm-up: {r.status_code} {r.text[:300]}")
        for clients in levels:
            reqs = work.make(n_requests)
            before = load_avg()
            lat, statuses, unexpected, wall = asyncio.run(run_level(url, service, reqs, clients))
            after = load_avg()
            p50, p95, p99 = np.percentile(lat, [50, 95, 99]) if lat else (float("nan"),) * 3
            res = LevelResult(
                service=service,
                clients=clients,
                requests=n_requests,
                seconds=round(wall, 2),
                throughput=round(n_requests / wall, 2),
                p50_ms=round(float(p50), 1),
                p95_ms=round(float(p95), 1),
                p99_ms=round(float(p99), 1),
                max_ms=round(max(lat, default=float("nan")), 1),
                statuses=dict(sorted(statuses.items())),
                unexpected=unexpected,
                load_before=before,
                load_after=after,
                rss_mib=round(rss_mb(pid)[0], 1) if workers == 1 else float("nan"),
            )
            print(row(res), flush=True)
            results.append(res)
    return results


HEADER = (
    "| service | clients | requests | req/s | p50 ms | p95 ms | p99 ms | max ms | statuses | "
    "5xx | unexpected 200 | load avg before → after (1 min) | server RSS MiB |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|"
)


def row(r: LevelResult) -> str:
    statuses = ", ".join(f"{k}: {v}" for k, v in r.statuses.items())
    return (
        f"| {r.service} | {r.clients} | {r.requests} | {r.throughput:.1f} | {r.p50_ms:.0f} | "
        f"{r.p95_ms:.0f} | {r.p99_ms:.0f} | {r.max_ms:.0f} | {statuses} | {r.server_errors} | "
        f"{r.unexpected} | {r.load_before[0]:.2f} → {r.load_after[0]:.2f} | {r.rss_mib:.0f} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--services", default=",".join(SERVICES))
    p.add_argument("--clients", default="8,32,64", help="comma-separated concurrency levels")
    p.add_argument("--requests", type=int, default=300, help="requests per level (bounded)")
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--workers", type=int, default=1, help="VERILIVE_WORKERS of each server")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args()
    levels = [int(x) for x in args.clients.split(",")]
    print(f"{os.cpu_count()} CPUs; workers per server: {args.workers}; load average {load_avg()}")
    print(HEADER, flush=True)
    results: list[LevelResult] = []
    for service in args.services.split(","):
        results += bench_service(service, levels, args.requests, args.warmup, args.workers)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    bad = [r for r in results if r.server_errors]
    if bad:
        print(f"5xx or transport errors in {len(bad)} level(s)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
