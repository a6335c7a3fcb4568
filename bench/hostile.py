"""CPU per byte received of the image decoder, for ordinary and hostile JPEGs (issue 44).

    python -m bench.hostile [--repeats 5]

In process, one thread: ``face.image.decode_image`` (the path of every image input) on
- an ordinary camera JPEG: a development selfie at its own size, and the same photo upscaled to 12 Mpx;
- progressive JPEGs: libjpeg's own (10 scans) and one padded to the limit of 32 scans with 13-byte
  refinement scans, and the review's bomb (18,000 scans, refused before decoding);
- a flat picture at the pixel limit (40 Mpx of one grey, a few hundred kB: decompression cost without
  the bytes).
Prints CPU milliseconds, bytes, and CPU per byte as a multiple of the ordinary camera JPEG's; the
issue's bound is 5x.
"""

from __future__ import annotations

import argparse
import struct
import time

import cv2
import numpy as np

from bench._common import SHARED
from verilive.face.image import MAX_JPEG_SCANS, ImageError, decode_image

PHOTO = SHARED / "data" / "face" / "pad_silentface" / "image_T1.jpg"
SCAN = b"\xff\xda" + struct.pack(">H", 8) + bytes([1, 1, 0x00, 1, 63, 0x10]) + b"\x00"


def jpeg(bgr: np.ndarray, quality: int = 90, progressive: bool = False) -> bytes:
    ok, buf = cv2.imencode(
        ".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality, cv2.IMWRITE_JPEG_PROGRESSIVE, int(progressive)]
    )
    assert ok
    return buf.tobytes()


def padded(data: bytes, scans: int) -> bytes:
    eoi = data.rfind(b"\xff\xd9")
    return data[:eoi] + SCAN * scans + data[eoi:]


def cpu_ms(data: bytes, repeats: int) -> tuple[float, str]:
    """Median process CPU time of one decode, and what happened."""
    times, outcome = [], ""
    for _ in range(repeats):
        t0 = time.process_time()
        try:
            img = decode_image(data)
            outcome = f"decoded {img.width}x{img.height}"
        except ImageError as exc:
            outcome = f"refused: {exc.message}"
        times.append(1000.0 * (time.process_time() - t0))
    return float(np.median(times)), outcome


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    cv2.setNumThreads(1)
    photo = decode_image(PHOTO.read_bytes()).bgr
    big = cv2.resize(photo, (3000, 4000), interpolation=cv2.INTER_CUBIC)
    cases = {
        "camera JPEG (selfie, 480x640)": PHOTO.read_bytes(),
        "camera JPEG (12 Mpx)": jpeg(big, 92),
        "progressive, libjpeg (10 scans, 12 Mpx)": jpeg(big, 92, progressive=True),
        f"progressive padded to {MAX_JPEG_SCANS} scans (12 Mpx)": padded(
            jpeg(big, 92, progressive=True), MAX_JPEG_SCANS - 10
        ),
        "the review's bomb (18,000 scans, 1024x1024)": padded(
            jpeg(cv2.resize(photo, (1024, 1024)), 90, progressive=True), 18_000
        ),
        "flat grey at the pixel limit (6320x6320)": jpeg(np.full((6320, 6320, 3), 128, np.uint8), 90),
    }
    base = None
    print(f"{'input':50s} {'bytes':>10s} {'CPU ms':>9s} {'ms/MB':>9s} {'x camera':>9s}  outcome")
    for name, data in cases.items():
        ms, outcome = cpu_ms(data, args.repeats)
        per_mb = ms / (len(data) / 1e6)
        base = per_mb if base is None else base  # the selfie, as a camera or browser sends it
        ratio = per_mb / base
        print(f"{name:50s} {len(data):10d} {ms:9.1f} {per_mb:9.1f} {ratio:9.1f}  {outcome[:60]}")


if __name__ == "__main__":
    main()
