"""A genuine capture with a bound burst, made from a real head-turn clip of the development data
(../shared/data/face/video_motion): the still is the clip's frame at the start of the turn, at full
resolution, and the burst is the turn at 5 fps with ``still_index`` 0, as the capture libraries send
it. For tests, benchmarks and the image check, where the service requires a 3D burst by default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np

from common.video import read_video, sample

TURN_CLIP = "data/face/video_motion/antispoof_tranvanluyt/real.mp4"
# The clip is 368x656; a capture's still needs 480 px on its shorter side.
UPSCALE = 1.4


def turn_frames(
    shared_dir: Path, start_s: float = 0.6, stop_s: float = 2.6, fps: float = 5.0, scale: float = UPSCALE
) -> list[np.ndarray]:
    """BGR frames of the clip from ``start_s`` to ``stop_s``, ``fps`` a second, scaled by ``scale``."""
    frames, src_fps = read_video(shared_dir / TURN_CLIP)
    picked = sample(frames, src_fps, fps, start_s, stop_s)
    return [cv2.resize(f, None, fx=scale, fy=scale) for f in picked] if scale != 1.0 else picked


def genuine_bundle(public_key_b64: str, shared_dir: Path, *, mirror: bool = False, **kwargs: Any) -> bytes:
    """A bundle of the head turn, bound as the libraries bind it. ``mirror`` flips every frame: another
    burst of a real head (new bytes, new movement), for callers that need two genuine captures."""
    from verilive.capture.client import IMAGE_QUALITY, build_bundle

    frames = turn_frames(shared_dir)
    if mirror:
        frames = [np.ascontiguousarray(f[:, ::-1]) for f in frames]
    ok, still = cv2.imencode(".jpg", frames[0], [cv2.IMWRITE_JPEG_QUALITY, IMAGE_QUALITY])
    assert ok
    return build_bundle(public_key_b64, None, still.tobytes(), burst=frames, still_index=0, **kwargs)
