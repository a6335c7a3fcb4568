"""Time of the 3D check from motion on one burst, in process (no HTTP), and a burst bundle's size.

    python -m bench.motion3d [--repeats 50] [--frames 10]

The burst is ``--frames`` frames at 5 fps over a real head turn (shared/data/face/video_motion,
antispoof_tranvanluyt/real.mp4 from 3.4 s), encoded as the capture libraries send them (JPEG quality
80, 368x656 here). Prints the median and p95 of ``BurstChecker.check_encoded`` (decode, detection on
the first frame, two mesh runs per frame, the geometry) and of its parts, and the size of a Python
client bundle with a 1280x720 image and a 12-frame 640x480 burst. Also the binding of the burst to
its still and the replay keys (capture/binding.py) on top of the check: what a capture pays for them.
"""

from __future__ import annotations

import argparse
import time

import cv2
import numpy as np
from common.video import read_video

from bench._common import SHARED, summary
from verilive.capture import bundle as B
from verilive.capture.binding import bind, burst_replays
from verilive.capture.client import build_bundle, burst_frames
from verilive.capture.replay import SqliteReplayStore
from verilive.face.burst import BurstChecker
from verilive.face.detector import FaceDetector
from verilive.face.image import decode_image
from verilive.face.mesh import FaceMesh
from verilive.face.motion3d import judge
from verilive.models.sessions import ModelRegistry

CLIP = SHARED / "data" / "face" / "video_motion" / "antispoof_tranvanluyt" / "real.mp4"


def clip(start_s: float, n: int, fps: float = 5.0) -> list[np.ndarray]:
    frames, src = read_video(CLIP)
    return [frames[round((start_s + i / fps) * src)] for i in range(n)]


def timed(fn, repeats: int) -> list[float]:  # type: ignore[no-untyped-def]
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--frames", type=int, default=10)
    args = ap.parse_args()
    reg = ModelRegistry()
    checker = BurstChecker(FaceDetector.from_registry(reg), FaceMesh.from_registry(reg))
    frames = clip(3.4, args.frames)
    encoded = burst_frames(frames)
    result = checker.check_encoded(encoded)
    assert result.result is not None, result.skipped
    print(f"burst: {len(encoded)} frames {frames[0].shape[1]}x{frames[0].shape[0]}, "
          f"{sum(map(len, encoded)) / 1024:.0f} KiB; verdict {result.verdict.value}")  # fmt: skip
    print("check_encoded (all), ms:", summary(timed(lambda: checker.check_encoded(encoded), args.repeats)))

    def decode_all() -> list[np.ndarray]:
        return [cv2.imdecode(np.frombuffer(e, np.uint8), cv2.IMREAD_COLOR) for e in encoded]

    decoded = decode_all()
    print("  decode only, ms:", summary(timed(decode_all, args.repeats)))
    print("  detection + mesh track, ms:", summary(timed(lambda: checker.meshes(decoded), args.repeats)))
    meshes = checker.meshes(decoded)
    pts = np.stack([m.points for m in meshes if m is not None])
    h, w = decoded[0].shape[:2]
    print("  geometry (judge), ms:", summary(timed(lambda: judge(pts, w, h), args.repeats)))

    key_id, pem, pub = B.generate_key()
    still = cv2.resize(frames[0], (1280, 720))
    ok, jpg = cv2.imencode(".jpg", still, [cv2.IMWRITE_JPEG_QUALITY, 92])
    assert ok
    burst = [cv2.resize(f, (640, 480)) for f in clip(3.4, 12)]
    size = len(build_bundle(pub, key_id, jpg.tobytes(), burst=burst, still_index=0))
    plain = len(build_bundle(pub, key_id, jpg.tobytes()))
    print(f"bundle: {size / 1e6:.2f} MB with a 12-frame 640x480 burst, {plain / 1e6:.2f} MB without")

    # The binding: a bundle as the libraries make it (the still is frame 0 at 1.4x, 515x918).
    big = [cv2.resize(f, None, fx=1.4, fy=1.4) for f in frames]
    ok, still_jpg = cv2.imencode(".jpg", big[0], [cv2.IMWRITE_JPEG_QUALITY, 95])
    assert ok
    ring = B.KeyRing.from_pem({key_id: pem})
    bundle = ring.decrypt(build_bundle(pub, key_id, still_jpg.tobytes(), burst=big, still_index=0))
    image = decode_image(bundle.image)
    check = checker.check_encoded(bundle.burst)
    bound = bind(bundle, image, check.track, checker)
    assert bound.bound, bound.problems
    store = SqliteReplayStore(":memory:")
    print("binding (still vs frame, continuity, 3D check on the linked frames), ms:",
          summary(timed(lambda: bind(bundle, image, check.track, checker), args.repeats)))  # fmt: skip
    print("replay keys (digest and movement, in-memory SQLite), ms:",
          summary(timed(lambda: burst_replays(bundle, check.track, store, 3600.0, time.time()),
                        args.repeats)))  # fmt: skip


if __name__ == "__main__":
    main()
