"""Soak run: the three services under steady load for minutes, their memory (RSS) sampled.

    python -m bench.soak [--minutes 10] [--services voice,face,capture] [--clients 2]
                         [--max-rps 8] [--sample-s 5] [--warmup-s 60]
                         [--plot docs/soak.png] [--json soak.json]

One real server process per service (one worker each, so the RSS of that process is the whole
service) on loopback, all running at once. Each service gets `clients` concurrent clients, capped
together at `max-rps` requests per second so that the run leaves CPU to other jobs:
  voice    alternately create_voice_template_from_samples (raw PCM16 body) and
           create_voice_template_from_file (multipart WAV upload), 3 s clips
  face     /check_liveness, 640x480 JPEG uploads (64 different files)
  capture  /check_capture_liveness, a fresh bundle per request (new nonce, new image hash)
Every `sample-s` seconds the RSS (VmRSS) of each server and its request count are recorded.
After `warmup-s` seconds, a least-squares line of RSS against requests served gives the growth in
MiB per 1,000 requests (and per minute); a leak from repeated model calls or uploads shows as a
steady positive slope, while a flat line means memory is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import sys
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf

from bench._common import rss_mb
from bench.load import (
    SERVICES,
    CaptureBundles,
    Request,
    capture_request,
    expected_body,
    face_frame,
    face_request,
    face_variants,
    load_avg,
    running,
    send,
    voice_bodies,
    voice_request,
)


@dataclass
class Tally:
    """What one service's clients saw so far."""

    count: int = 0
    unexpected: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)


@dataclass
class ServiceSoak:
    service: str
    requests: int
    statuses: dict[str, int]
    unexpected: int
    rss_start_mib: float  # first sample after warm-up
    rss_end_mib: float
    rss_max_mib: float
    rss_first_mib: float  # first sample of the run, right after the server's own warm-up
    slope_mib_per_1k: float
    slope_mib_per_min: float
    # The second half alone: warm-up steps (allocator arenas, caches) stop early, a leak does not.
    slope_last_half_mib_per_1k: float
    p50_ms: float
    p99_ms: float


class Source:
    """Endless requests of one service, varied the way real traffic varies."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.i = 0
        if service == "voice":
            pcm = voice_bodies(40)
            self.voice_raw = [voice_request(b) for b in pcm]
            self.voice_wav = [self._wav_request(b) for b in pcm]
        elif service == "face":
            self.face = [face_request(b) for b in face_variants(face_frame(), 64)]
        else:
            self.bundles = CaptureBundles(face_frame())

    @staticmethod
    def _wav_request(pcm: bytes) -> Request:
        buf = io.BytesIO()
        sf.write(buf, np.frombuffer(pcm, dtype="<i2"), 16000, format="WAV", subtype="PCM_16")
        return Request(
            "/voice_template_factory/create_voice_template_from_file?channel_type=MIC",
            files={"wav_file": ("clip.wav", buf.getvalue(), "audio/wav")},
        )

    async def next(self) -> Request:
        self.i += 1
        if self.service == "voice":
            pool = self.voice_raw if self.i % 2 else self.voice_wav
            return pool[self.i % len(pool)]
        if self.service == "face":
            return self.face[self.i % len(self.face)]
        # Built now, off the event loop: its timestamp must be fresh and its nonce new.
        return capture_request(await asyncio.to_thread(self.bundles.next))


async def drive(
    url: str, source: Source, clients: int, max_rps: float, deadline: float, tally: Tally
) -> None:
    """`clients` concurrent clients until `deadline`, together at most `max_rps` requests/s."""
    interval = clients / max_rps if max_rps > 0 else 0.0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:

        async def one_client() -> None:
            while time.monotonic() < deadline:
                req = await source.next()
                t0 = time.monotonic()
                try:
                    r = await send(client, req)
                    tally.statuses[str(r.status_code)] += 1
                    if r.status_code == 200 and not expected_body(source.service, r.json()):
                        tally.unexpected += 1
                except httpx.TransportError:
                    tally.statuses["transport"] += 1
                elapsed = time.monotonic() - t0
                tally.latencies.append(1000 * elapsed)
                tally.count += 1
                if interval > elapsed:
                    await asyncio.sleep(interval - elapsed)

        await asyncio.gather(*(one_client() for _ in range(clients)))


async def sample(
    pids: dict[str, int],
    stats: dict[str, Tally],
    t_start: float,
    deadline: float,
    every_s: float,
    out: list[dict[str, float]],
) -> None:
    while True:
        now = time.monotonic()
        point: dict[str, float] = {"t": now - t_start, "load1": os.getloadavg()[0]}
        for s, pid in pids.items():
            point[f"{s}_rss"] = rss_mb(pid)[0]
            point[f"{s}_n"] = float(stats[s].count)
        out.append(point)
        if now >= deadline:
            return
        await asyncio.sleep(min(every_s, max(0.0, deadline - now)))


def slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of y against x (nan with fewer than 3 distinct x)."""
    if len(np.unique(x)) < 3:
        return float("nan")
    return float(np.polyfit(x, y, 1)[0])


def summarise(service: str, samples: list[dict[str, float]], tally: Tally, warmup_s: float) -> ServiceSoak:
    t = np.array([p["t"] for p in samples])
    rss = np.array([p[f"{service}_rss"] for p in samples])
    n = np.array([p[f"{service}_n"] for p in samples])
    after = t >= warmup_s
    late = t >= t[-1] / 2
    p50, p99 = np.percentile(tally.latencies, [50, 99]) if tally.latencies else (float("nan"),) * 2
    return ServiceSoak(
        service=service,
        requests=tally.count,
        statuses=dict(sorted(tally.statuses.items())),
        unexpected=tally.unexpected,
        rss_start_mib=round(float(rss[after][0]), 1),
        rss_end_mib=round(float(rss[-1]), 1),
        rss_max_mib=round(float(rss.max()), 1),
        rss_first_mib=round(float(rss[0]), 1),
        slope_mib_per_1k=round(1000 * slope(n[after], rss[after]), 3),
        slope_mib_per_min=round(60 * slope(t[after], rss[after]), 3),
        slope_last_half_mib_per_1k=round(1000 * slope(n[late], rss[late]), 3),
        p50_ms=round(float(p50), 1),
        p99_ms=round(float(p99), 1),
    )


def plot(samples: list[dict[str, float]], services: list[str], warmup_s: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.array([p["t"] for p in samples]) / 60
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=[3, 1])
    for s in services:
        ax.plot(t, [p[f"{s}_rss"] for p in samples], label=f"{s} RSS")
        ax2.plot(t, np.array([p[f"{s}_n"] for p in samples]) / 1000, label=s)
    for a in (ax, ax2):
        a.axvline(warmup_s / 60, color="grey", linestyle=":", linewidth=1)
        a.grid(alpha=0.3)
    ax.set_ylabel("RSS (MiB)")
    ax.set_title("verilive soak: server memory under steady load (dotted: end of warm-up)")
    ax.legend(loc="lower right")
    ax2.set_ylabel("requests (k)")
    ax2.set_xlabel("minutes")
    ax2.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


async def soak(
    urls: dict[str, str],
    pids: dict[str, int],
    sources: dict[str, Source],
    args: argparse.Namespace,
) -> tuple[list[dict[str, float]], dict[str, Tally]]:
    stats = {s: Tally() for s in urls}
    samples: list[dict[str, float]] = []
    t_start = time.monotonic()
    deadline = t_start + 60 * args.minutes
    await asyncio.gather(
        sample(pids, stats, t_start, deadline, args.sample_s, samples),
        *(drive(urls[s], sources[s], args.clients, args.max_rps, deadline, stats[s]) for s in urls),
    )
    return samples, stats


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--services", default=",".join(SERVICES))
    p.add_argument("--clients", type=int, default=2, help="concurrent clients per service")
    p.add_argument("--max-rps", type=float, default=8.0, help="cap per service (0: none)")
    p.add_argument("--sample-s", type=float, default=5.0)
    p.add_argument("--warmup-s", type=float, default=60.0)
    p.add_argument("--plot", type=Path)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    services = args.services.split(",")
    sources = {s: Source(s) for s in services}
    print(f"load average before: {load_avg()}", flush=True)
    with ExitStack() as stack:
        urls: dict[str, str] = {}
        pids: dict[str, int] = {}
        for s in services:
            urls[s], pids[s] = stack.enter_context(running(s))
        with httpx.Client(timeout=300) as c:  # the server's own first-call warm-up, not measured
            for s in services:
                for _ in range(3):
                    req = asyncio.run(sources[s].next())
                    c.post(urls[s] + req.path, content=req.content, files=req.files, headers=req.headers)
        samples, stats = asyncio.run(soak(urls, pids, sources, args))
    print(f"load average after: {load_avg()}", flush=True)
    results = [summarise(s, samples, stats[s], args.warmup_s) for s in services]
    print(
        "| service | requests | statuses | 5xx | unexpected 200 | RSS first / after warm-up / end / max MiB "
        "| slope MiB per 1k requests | slope MiB per min | slope, last half, MiB per 1k | p50 / p99 ms |"
    )
    print("|---|---:|---|---:|---:|---|---:|---:|---:|---|")
    for r in results:
        st = ", ".join(f"{k}: {v}" for k, v in r.statuses.items())
        five = sum(v for k, v in r.statuses.items() if k.startswith("5") or k == "transport")
        print(
            f"| {r.service} | {r.requests} | {st} | {five} | {r.unexpected} | {r.rss_first_mib:.0f} / "
            f"{r.rss_start_mib:.0f} / {r.rss_end_mib:.0f} / {r.rss_max_mib:.0f} | "
            f"{r.slope_mib_per_1k:+.2f} | {r.slope_mib_per_min:+.2f} | {r.slope_last_half_mib_per_1k:+.2f} | "
            f"{r.p50_ms:.0f} / {r.p99_ms:.0f} |"
        )
    loads = [pt["load1"] for pt in samples]
    print(f"1-min load average during the run: min {min(loads):.2f}, max {max(loads):.2f}")
    if args.plot:
        plot(samples, services, args.warmup_s, args.plot)
    if args.json:
        args.json.write_text(json.dumps({"results": [asdict(r) for r in results], "samples": samples}))
    if any(k.startswith("5") or k == "transport" for r in results for k in r.statuses):
        sys.exit(1)


if __name__ == "__main__":
    main()
