"""CPU per byte received of the image decoder and of the face service, for ordinary and hostile
images (issue 44).

    python -m bench.hostile [--repeats 5] [--http] [--http-repeats 3]

Inputs: an ordinary camera JPEG (a development selfie, 480x640, as a phone sends it) and the worst
found for each way of making the decoder work without sending bytes:
- big camera-like JPEGs (12 Mpx and 40 Mpx, the pixel limit; detail added so that they are dense);
- progressive JPEGs: libjpeg's own (10 scans) and one padded to the 32-scan limit with 13-byte scans,
  and the review's bomb (18,000 scans);
- flat pictures (one grey, the most pixels a byte can carry): baseline and progressive JPEG at the
  pixel limit, PNG and WebP at 16 Mpx, a 1080p JPEG (the size that always decodes in full);
- a real selfie blown up to 31 Mpx (sparse: decoded at half size).

In process (default): ``face.image.decode_image``, one thread, median process CPU of ``repeats``.
``--http``: the same bytes POSTed to /check_liveness of a `verilive serve face` on loopback; the
server's CPU per request (from /proc) and the client's wall time; the issue asks for at most 1 s.
Ratios are CPU per byte as a multiple of the ordinary selfie's.
"""

from __future__ import annotations

import argparse
import os
import struct
import time

import cv2
import httpx
import numpy as np

from bench._common import SHARED, server
from verilive.face.image import FULL_DECODE_PIXELS, MAX_JPEG_SCANS, ImageError, decode_image

PHOTO = SHARED / "data" / "face" / "pad_silentface" / "image_T1.jpg"
SCAN = b"\xff\xda" + struct.pack(">H", 8) + bytes([1, 1, 0x00, 1, 63, 0x10]) + b"\x00"


def encode(bgr: np.ndarray, ext: str = ".jpg", *params: int) -> bytes:
    ok, buf = cv2.imencode(ext, bgr, list(params))
    assert ok
    return buf.tobytes()


def jpeg(bgr: np.ndarray, quality: int = 90, progressive: bool = False) -> bytes:
    return encode(
        bgr, ".jpg", cv2.IMWRITE_JPEG_QUALITY, quality, cv2.IMWRITE_JPEG_PROGRESSIVE, int(progressive)
    )


def padded(data: bytes, scans: int) -> bytes:
    eoi = data.rfind(b"\xff\xd9")
    return data[:eoi] + SCAN * scans + data[eoi:]


def grey(width: int, height: int) -> np.ndarray:
    return np.full((height, width, 3), 128, np.uint8)


def dense(photo: np.ndarray, width: int, height: int) -> np.ndarray:
    """The photo at ``width`` x ``height`` with sensor-like noise, so that it weighs what a camera's does."""
    big = cv2.resize(photo, (width, height), interpolation=cv2.INTER_CUBIC)
    noise = np.random.default_rng(0).normal(0, 6, big.shape[:2])[..., None]
    return np.clip(big + noise, 0, 255).astype(np.uint8)


def cases() -> dict[str, bytes]:
    """The inputs, the ordinary selfie first."""
    photo = decode_image(PHOTO.read_bytes()).bgr
    p12 = dense(photo, 3000, 4000)
    flat40 = grey(6320, 6320)
    return {
        "camera JPEG (selfie, 480x640)": PHOTO.read_bytes(),
        "camera-like JPEG (12 Mpx)": jpeg(p12, 92),
        "camera-like JPEG (40 Mpx, the pixel limit)": jpeg(dense(photo, 5000, 7900), 92),
        "progressive, libjpeg (10 scans, 12 Mpx)": jpeg(p12, 92, progressive=True),
        f"progressive padded to {MAX_JPEG_SCANS} scans (12 Mpx)": padded(
            jpeg(p12, 92, progressive=True), MAX_JPEG_SCANS - 10
        ),
        "the review's bomb (18,000 scans, 1024x1024)": padded(
            jpeg(cv2.resize(photo, (1024, 1024)), 90, progressive=True), 18_000
        ),
        "selfie blown up to 31 Mpx (sparse)": jpeg(
            cv2.resize(photo, (4800, 6400), interpolation=cv2.INTER_CUBIC), 75
        ),
        "flat JPEG at the pixel limit (6320x6320)": jpeg(flat40, 90),
        "flat progressive JPEG (6320x6320)": jpeg(flat40, 90, progressive=True),
        f"flat progressive, {MAX_JPEG_SCANS} scans, 1080p": padded(
            jpeg(grey(1920, 1080), 90, progressive=True), MAX_JPEG_SCANS - 10
        ),
        "flat PNG (4000x4000)": encode(grey(4000, 4000), ".png", cv2.IMWRITE_PNG_COMPRESSION, 9),
        "flat WebP (4000x4000)": encode(grey(4000, 4000), ".webp", cv2.IMWRITE_WEBP_QUALITY, 50),
        "flat PNG, 1080p (decoded in full)": encode(grey(1920, 1080), ".png", cv2.IMWRITE_PNG_COMPRESSION, 9),
        f"flat progressive, {MAX_JPEG_SCANS} scans, VGA": padded(
            jpeg(grey(640, 480), 90, progressive=True), MAX_JPEG_SCANS - 10
        ),
    }


def cpu_ms(data: bytes, repeats: int) -> tuple[float, str]:
    """Median process CPU time of one decode, and what happened."""
    times, outcome = [], ""
    for _ in range(repeats):
        t0 = time.process_time()
        try:
            img = decode_image(data)
            outcome = f"decoded {img.width}x{img.height}" + (
                f" at 1/{img.reduction}" if img.reduction > 1 else ""
            )
        except ImageError as exc:
            outcome = f"refused: {exc.message}"
        times.append(1000.0 * (time.process_time() - t0))
    return float(np.median(times)), outcome


def server_cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def in_process(inputs: dict[str, bytes], repeats: int) -> None:
    print(f"decoder in process, one thread; full decode up to {FULL_DECODE_PIXELS} pixels")
    print(f"{'input':48s} {'bytes':>10s} {'CPU ms':>8s} {'ms/MB':>8s} {'x selfie':>8s}  outcome")
    base = None
    for name, data in inputs.items():
        ms, outcome = cpu_ms(data, repeats)
        per_mb = ms / (len(data) / 1e6)
        base = per_mb if base is None else base
        print(f"{name:48s} {len(data):10d} {ms:8.1f} {per_mb:8.1f} {per_mb / base:8.1f}  {outcome[:70]}")


def over_http(inputs: dict[str, bytes], repeats: int) -> None:
    print("\nPOST /check_liveness, `verilive serve face` on loopback (server CPU per request, from /proc)")
    print(
        f"{'input':48s} {'bytes':>10s} {'CPU ms':>8s} {'wall ms':>8s} {'ms/MB':>9s} {'x selfie':>8s}  answer"
    )
    with server("face") as (url, pid), httpx.Client(base_url=url, timeout=120) as client:
        base, worst = None, 0.0
        for name, data in inputs.items():
            cpus, walls = [], []
            for _ in range(repeats + 1):  # the first warms the models up
                c0, t0 = server_cpu(pid), time.perf_counter()
                r = client.post("/check_liveness", files=[("image", ("a.jpg", data, "image/jpeg"))])
                walls.append(1000 * (time.perf_counter() - t0))
                cpus.append(1000 * (server_cpu(pid) - c0))
            cpu, wall = float(np.median(cpus[1:])), float(max(walls[1:]))
            worst = max(worst, wall)
            body = r.json()
            answer = f"{r.status_code} " + (
                f"p={body['probability']:.2f}" if "probability" in body else str(body.get("error_code"))
            )
            per_mb = cpu / (len(data) / 1e6)
            base = per_mb if base is None else base
            print(
                f"{name:48s} {len(data):10d} {cpu:8.0f} {wall:8.0f} {per_mb:9.0f} "
                f"{per_mb / base:8.2f}  {answer}"
            )
        print(
            f"slowest request: {worst:.0f} ms wall (target: at most 1000 ms); {os.getloadavg()[0]:.2f} load"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--http", action="store_true", help="also send each input to a face service")
    ap.add_argument("--http-repeats", type=int, default=3)
    args = ap.parse_args()
    cv2.setNumThreads(1)
    inputs = cases()
    in_process(inputs, args.repeats)
    if args.http:
        over_http(inputs, args.http_repeats)


if __name__ == "__main__":
    main()
