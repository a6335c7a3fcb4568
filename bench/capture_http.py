"""Capture liveness benchmarks (real models, loopback HTTP, docs/capture.md#measurements).

    python -m bench.capture_http decrypt [--repeats 200]
    python -m bench.capture_http latency [--requests 40] [--scale 1.0]
    python -m bench.capture_http overhead [--repeats 40]
    python -m bench.capture_http placement [--requests 200]

decrypt: in-process time of KeyRing.decrypt (header, ECDH, HKDF, AES-GCM, framing, meta JSON,
         three SHA-256 digests) of a bundle of about 1 MB.
latency: server time (Server-Timing header) of /check_capture_liveness on fresh bundles against
         face /check_liveness on the same images, requests interleaved, one process per service.
overhead: in-process, interleaved: FaceEngine.check against decrypt + CaptureEngine.check on the
          same image, and the per-pair difference (what the capture service adds to face liveness).
placement: POST /sdk/placement with the SDK's preview copy (240x320 JPEG, quality 70) over loopback:
           server time (Server-Timing) and round trip, one request at a time, as the SDK sends them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import cv2
import httpx
import numpy as np

from bench._common import SHARED, server, server_ms, summary
from verilive.capture.bundle import KeyRing, public_key_b64
from verilive.capture.client import build_bundle
from verilive.face.image import decode_image

KEY = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "capture_test_key.pem"
FACE = SHARED / "data/face/pad_silentface/image_T1.jpg"


def megabyte_image() -> bytes:
    """A JPEG of about 1 MB: a real face with sensor-like noise (noise defeats compression)."""
    img = decode_image(FACE.read_bytes()).bgr
    img = cv2.resize(img, (960, 1280), interpolation=cv2.INTER_CUBIC)
    rng = np.random.default_rng(0)
    noisy = np.clip(img.astype(np.int16) + rng.integers(-24, 25, img.shape), 0, 255).astype(np.uint8)
    for q in (97, 95, 92, 90, 85):
        data = cv2.imencode(".jpg", noisy, [cv2.IMWRITE_JPEG_QUALITY, q])[1].tobytes()
        if len(data) <= 1_100_000:
            return data
    return data


def decrypt(repeats: int) -> None:
    ring = KeyRing.from_entries([str(KEY)])
    blob = build_bundle(public_key_b64(KEY.read_bytes()), None, megabyte_image())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ring.decrypt(blob)
        times.append(1000.0 * (time.perf_counter() - t0))
    print(f"bundle {len(blob) / 1e6:.2f} MB; decrypt + parse ms: {summary(times)}")


def variant(img: np.ndarray, i: int) -> bytes:
    """A camera-like JPEG; one pixel differs per request so that no image hash repeats."""
    out = img.copy()
    out[i % out.shape[0], 0] = (i % 256, (i * 7) % 256, (i * 13) % 256)
    return cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, 92])[1].tobytes()


def latency(requests: int, scale: float) -> None:
    img = decode_image(FACE.read_bytes()).bgr
    if scale != 1.0:
        img = cv2.resize(img, None, fx=scale, fy=scale, interpolation=cv2.INTER_CUBIC)
    public = public_key_b64(KEY.read_bytes())
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "VERILIVE_CAPTURE_PRIVATE_KEYS": json.dumps([str(KEY)]),
            "VERILIVE_CAPTURE_REPLAY_URL": f"{tmp}/replay.sqlite3",
            "VERILIVE_BI_DATABASE_URL": f"{tmp}/bi.sqlite3",
            "VERILIVE_CAPTURE_DEVICE_CAPTURES_PER_MINUTE": "100000",
            "VERILIVE_CAPTURE_MOTION3D": "use",  # still images: the same path as before require
        }
        with server("face", env) as (face_url, _), server("capture", env) as (cap_url, _):
            face_ms, cap_ms, rejected = [], [], 0
            with httpx.Client(timeout=120) as c:
                for i in range(requests + 3):  # the first 3 warm both services up
                    data = variant(img, i)
                    blob = build_bundle(public, None, data)
                    rf = c.post(face_url + "/check_liveness", files={"image": ("a.jpg", data, "image/jpeg")})
                    rc = c.post(
                        cap_url + "/check_capture_liveness",
                        content=blob,
                        headers={"content-type": "application/octet-stream"},
                    )
                    rf.raise_for_status()
                    rc.raise_for_status()
                    if i < 3:
                        continue
                    rejected += bool(rc.json()["capture_liveness"]["rejection"])
                    face_ms.append(server_ms(rf))
                    cap_ms.append(server_ms(rc))
    h, w = img.shape[:2]
    print(f"image {w}x{h}, bundle {len(blob) / 1e3:.0f} kB, {rejected} of {requests} rejected")
    print(f"face /check_liveness ms:            {summary(face_ms)}")
    print(f"capture /check_capture_liveness ms: {summary(cap_ms)}")
    diffs = [c - f for c, f in zip(cap_ms, face_ms, strict=True)]
    print(f"capture - face, per pair ms:        {summary(diffs)}")


def overhead(repeats: int) -> None:
    from verilive.capture.engine import CaptureConfig, CaptureEngine
    from verilive.capture.replay import SqliteReplayStore
    from verilive.capture.sdk_allowlist import build_allowlist
    from verilive.config import Settings
    from verilive.face.engine import FaceEngine
    from verilive.models.sessions import ModelRegistry

    settings = Settings()
    face = FaceEngine.from_registry(ModelRegistry(settings), settings)
    ring = KeyRing.from_entries([str(KEY)])
    public = public_key_b64(KEY.read_bytes())
    img = decode_image(FACE.read_bytes()).bgr
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteReplayStore(f"{tmp}/replay.sqlite3")
        engine = CaptureEngine(
            face, store, build_allowlist(), CaptureConfig(device_captures_per_minute=10**9)
        )
        face_ms, cap_ms = [], []
        for i in range(repeats + 3):
            data = variant(img, i)
            blob = build_bundle(public, None, data)
            t0 = time.perf_counter()
            face.check(data)
            t1 = time.perf_counter()
            engine.check(ring.decrypt(blob))
            t2 = time.perf_counter()
            if i >= 3:
                face_ms.append(1000.0 * (t1 - t0))
                cap_ms.append(1000.0 * (t2 - t1))
        store.close()
    print(f"face engine ms:              {summary(face_ms)}")
    print(f"decrypt + capture engine ms: {summary(cap_ms)}")
    print(f"difference per pair ms:      {summary([c - f for c, f in zip(cap_ms, face_ms, strict=True)])}")


def placement(requests: int) -> None:
    img = decode_image(FACE.read_bytes()).bgr
    h, w = img.shape[:2]
    cw = min(w, round(h * 0.75))
    crop = img[:, (w - cw) // 2 : (w - cw) // 2 + cw]
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "VERILIVE_CAPTURE_PRIVATE_KEYS": json.dumps([str(KEY)]),
            "VERILIVE_CAPTURE_REPLAY_URL": f"{tmp}/replay.sqlite3",
            "VERILIVE_BI_DATABASE_URL": f"{tmp}/bi.sqlite3",
        }
        with server("capture", env) as (url, _), httpx.Client(timeout=60) as c:
            server_times, round_trips, sizes = [], [], []
            for i in range(requests + 3):  # the first 3 warm the detector up
                small = cv2.resize(crop, (240, 320), interpolation=cv2.INTER_AREA)
                small[i % 320, 0] = (i % 256, 0, 0)  # no two frames alike
                data = cv2.imencode(".jpg", small, [cv2.IMWRITE_JPEG_QUALITY, 70])[1].tobytes()
                t0 = time.perf_counter()
                r = c.post(url + "/sdk/placement", content=data, headers={"content-type": "image/jpeg"})
                rtt = 1000 * (time.perf_counter() - t0)
                r.raise_for_status()
                assert len(r.json()["faces"]) == 1
                if i >= 3:
                    server_times.append(server_ms(r))
                    round_trips.append(rtt)
                    sizes.append(len(data))
    print(f"frame 240x320 JPEG, {statistics.median(sizes) / 1e3:.1f} kB")
    print(f"/sdk/placement server ms: {summary(server_times)}")
    print(f"/sdk/placement round trip ms: {summary(round_trips)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("decrypt")
    d.add_argument("--repeats", type=int, default=200)
    lat = sub.add_parser("latency")
    lat.add_argument("--requests", type=int, default=40)
    lat.add_argument("--scale", type=float, default=1.0)
    ov = sub.add_parser("overhead")
    ov.add_argument("--repeats", type=int, default=40)
    pl = sub.add_parser("placement")
    pl.add_argument("--requests", type=int, default=200)
    args = p.parse_args()
    if args.cmd == "decrypt":
        decrypt(args.repeats)
    elif args.cmd == "overhead":
        overhead(args.repeats)
    elif args.cmd == "placement":
        placement(args.requests)
    else:
        latency(args.requests, args.scale)


if __name__ == "__main__":
    main()
