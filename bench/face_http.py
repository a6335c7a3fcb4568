"""HTTP benchmarks of one face liveness service process (loopback, real models).

    python -m bench.face_http [--requests 200] [--batch 32] [--batch-runs 7] [--backbone float|int8]

latency:    sequential POST /check_liveness of one 640x480 JPEG (a real portrait cropped to a
            selfie framing, face about half the frame height), after warm-up, for each pipeline:
            client wall time p50/p95, server time (Server-Timing) and server CPU time per request.
throughput: POST /check_liveness_batch with `batch` such JPEGs (brightness and JPEG quality varied
            so that no two are the same bytes): images per second, median of `batch-runs` runs.
RSS:        the server's resident memory now and at its peak (VmHWM), after everything above.

``--backbone`` starts the server with VERILIVE_FACE_BACKBONE_MODEL (the EfficientNet-Lite0 build of
the ensemble's backbone branch; default: the setting's default).

Other jobs on the machine share the CPU: the script prints the load average before and after,
and the CPU time the server itself used per request, which other load does not inflate much.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import cv2
import httpx
import numpy as np

from bench._common import SHARED, rss_mb, server, server_ms, summary
from verilive.config import Settings
from verilive.face.detector import FaceDetector
from verilive.face.pipelines import PIPELINES
from verilive.models.sessions import ModelRegistry

PORTRAIT = SHARED / "data/face/real_faces_misc/face_recognition/obama.jpg"
WIDTH, HEIGHT = 640, 480
FACE_FRACTION = 0.5  # face box height / frame height: a phone selfie at arm's length


def selfie_frame(path: Path = PORTRAIT) -> np.ndarray:
    """A 640x480 frame cut from a real portrait around its face, the face ~half the height."""
    img = cv2.imread(str(path))
    if img is None:
        raise FileNotFoundError(path)
    settings = Settings()
    face = FaceDetector.from_registry(ModelRegistry(settings)).detect(img)[0]
    x1, y1, x2, y2 = face.box
    crop_h = (y2 - y1) / FACE_FRACTION
    crop_w = crop_h * WIDTH / HEIGHT
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    h, w = img.shape[:2]
    if crop_w > w or crop_h > h:  # pad with the image's own edge colour rather than fail
        pad = int(max(crop_w - w, crop_h - h)) + 1
        img = cv2.copyMakeBorder(img, pad, pad, pad, pad, cv2.BORDER_REPLICATE)
        cx, cy = cx + pad, cy + pad
        h, w = img.shape[:2]
    a = int(np.clip(cx - crop_w / 2, 0, w - crop_w))
    b = int(np.clip(cy - crop_h / 2, 0, h - crop_h))
    crop = img[b : b + int(crop_h), a : a + int(crop_w)]
    return cv2.resize(crop, (WIDTH, HEIGHT), interpolation=cv2.INTER_AREA)


def jpeg_bytes(img: np.ndarray, quality: int = 90) -> bytes:
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError("JPEG encoding failed")
    return buf.tobytes()


def variants(img: np.ndarray, n: int) -> list[bytes]:
    """n different JPEGs of the same frame: brightness 0.9-1.1 and quality 80-95."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        f = (img.astype(np.float32) * rng.uniform(0.9, 1.1)).clip(0, 255).astype(np.uint8)
        out.append(jpeg_bytes(f, int(rng.integers(80, 96))))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (fields 14 and 15 of stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--batch-runs", type=int, default=7)
    ap.add_argument("--backbone", choices=("float", "int8"), default=None, help="the backbone build")
    args = ap.parse_args()
    env = {} if args.backbone is None else {"VERILIVE_FACE_BACKBONE_MODEL": args.backbone}

    frame = selfie_frame()
    single = jpeg_bytes(frame)
    batch = variants(frame, args.batch)
    print(f"image: {WIDTH}x{HEIGHT} JPEG, {len(single) / 1024:.0f} KiB, from {PORTRAIT.name}")
    print(f"backbone: {args.backbone or Settings().face_backbone_model}")
    print(f"before: {load()}")
    with server("face", env) as (url, pid), httpx.Client(base_url=url, timeout=120) as c:
        for pipeline in PIPELINES:
            path = f"/check_liveness?pipeline={pipeline}"
            files = {"image": ("selfie.jpg", single, "image/jpeg")}
            for _ in range(args.warmup):
                r = c.post(path, files=files)
                r.raise_for_status()
                if "probability" not in r.json():
                    raise RuntimeError(f"the benchmark image was rejected: {r.json()}")
            wall, srv = [], []
            cpu0 = cpu_seconds(pid)
            for _ in range(args.requests):
                t0 = time.perf_counter()
                r = c.post(path, files=files)
                wall.append(1000 * (time.perf_counter() - t0))
                r.raise_for_status()
                srv.append(server_ms(r))
            cpu = 1000 * (cpu_seconds(pid) - cpu0) / args.requests
            print(
                f"[{pipeline}] single image, {args.requests} sequential requests: client ms p50 "
                f"{percentile(wall, 50):.1f}, p95 {percentile(wall, 95):.1f} (max {max(wall):.1f}); "
                f"server ms {summary(srv)}; server CPU {cpu:.1f} ms per request"
            )
        for pipeline in PIPELINES:
            path = f"/check_liveness_batch?pipeline={pipeline}"
            files_b = [("images", (f"img{i:02d}.jpg", b, "image/jpeg")) for i, b in enumerate(batch)]
            r = c.post(path, files=files_b)  # warm-up
            r.raise_for_status()
            entries = r.json()
            ok = sum("probability" in e for e in entries)
            if len(entries) != args.batch or ok != args.batch:
                raise RuntimeError(f"batch answered {len(entries)} entries, {ok} judged")
            rates, cpus = [], []
            for _ in range(args.batch_runs):
                cpu0 = cpu_seconds(pid)
                t0 = time.perf_counter()
                c.post(path, files=files_b).raise_for_status()
                rates.append(args.batch / (time.perf_counter() - t0))
                cpus.append(1000 * (cpu_seconds(pid) - cpu0) / args.batch)
            print(
                f"[{pipeline}] batch of {args.batch}: {statistics.median(rates):.1f} images/s median "
                f"(min {min(rates):.1f}, max {max(rates):.1f}, {args.batch_runs} runs); "
                f"server CPU {statistics.median(cpus):.1f} ms per image"
            )
        rss, peak = rss_mb(pid)
    print(f"server RSS: {rss:.0f} MiB now, {peak:.0f} MiB peak")
    print(f"after: {load()}")


if __name__ == "__main__":
    main()
