"""Bursts for the 3D check's end-to-end tests (docs/motion3d.md): a real head turn from a development
clip, and a real printed photo moved as a plane (the motion simulated, common/flat_motion_sim.py)."""

from __future__ import annotations

import csv
from pathlib import Path

import cv2
import numpy as np
from common.capture_samples import turn_frames
from common.flat_motion_sim import flat_burst

from verilive.config import Settings
from verilive.face.detector import FaceDetector
from verilive.face.engine import FaceEngine
from verilive.models.sessions import ModelRegistry

TURN_CLIP = "data/face/video_motion/antispoof_tranvanluyt/real.mp4"
FENI = "data/face/pad_feni_sfas"


def clip_frames(shared_dir: Path, start_s: float, stop_s: float, fps: float) -> list[np.ndarray]:
    """Frames of the head-turn clip from ``start_s`` to ``stop_s``, ``fps`` per second."""
    return turn_frames(shared_dir, start_s, stop_s, fps, scale=1.0)


def jpeg(bgr: np.ndarray, quality: int = 90) -> bytes:
    ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.tobytes()


def print_burst(shared_dir: Path, settings: Settings, frames: int = 10) -> list[np.ndarray]:
    """A real printed photo held in the hand and tilted by 10-30 degrees (simulated motion): the first
    print whose frames mostly pass the face validation (many prints are FACE_IS_OCCLUDED)."""
    with open(shared_dir / FENI / "labels.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r["attack_type"].startswith("print")]
    registry = ModelRegistry(settings)
    det = FaceDetector.from_registry(registry)
    engine = FaceEngine.from_registry(registry, settings.model_copy(update={"face_motion3d": "off"}))
    try:
        for i, row in enumerate(rows[:40]):
            img = cv2.imread(str(shared_dir / FENI / row["file"]))
            faces = det.detect(img) if img is not None else []
            if not faces or faces[0].width < 80:
                continue
            rng = np.random.default_rng(i)
            burst = flat_burst(img, faces[0].box, rng, shape="flat", motion="hand_tilt", frames=frames).frames
            if sum(r.ok for r in engine.check_images([jpeg(f) for f in burst])) >= frames // 2:
                return burst
    finally:
        engine.close()
    raise AssertionError("no usable print photo in the development data")
