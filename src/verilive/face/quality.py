"""How suitable a face image is for a liveness decision: the `quality` value of the face service.

Five factors, each 0..1 with 1 = ideal: face size (pixels between the eyes), sharpness (variance of the
Laplacian of the face at a fixed size), exposure (mean level and clipped shares), pose (yaw, pitch, roll)
and occlusion (1 - occlusion score). ``overall`` is their geometric mean, so one factor at 0 makes the
image unusable while small shortfalls in several factors add up gently. Constants and how they were
measured: docs/face-quality.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

# Sharpness: variance of the Laplacian of the inner face resized to SHARP_SIZE x SHARP_SIZE, mapped on a
# log scale between SHARP_LO (factor 0: a Gaussian blur of sigma ~3 px at that size) and SHARP_HI
# (factor 1: sharp portraits).
SHARP_SIZE = 128
INNER = 0.8  # the central share of the face box, so that background and hair count less
SHARP_LO = 4.0
SHARP_HI = 150.0
# Exposure: mean level (0..255) of the inner face is ideal within LEVEL_OK, falls linearly to 0 at
# LEVEL_ZERO; pixels at or below DARK_CLIP / at or above BRIGHT_CLIP are clipped, and a clipped share of
# CLIP_ZERO makes the factor 0.
LEVEL_OK = (90.0, 180.0)
LEVEL_ZERO = (25.0, 240.0)
DARK_CLIP = 10
BRIGHT_CLIP = 245
CLIP_ZERO = 0.4
# Size: the face scale (interpupillary distance, or eye-to-mouth distance / 1.15 when the head is turned)
# is 0 at half the minimum for FACE_TOO_SMALL and 1 at SIZE_IDEAL_FACTOR x that minimum.
SIZE_IDEAL_FACTOR = 3.0
EYE_MOUTH_IPD = 1.15
# Pose: exp(-0.5 * sum((angle / scale)^2)); yaw 25 deg alone gives 0.61, yaw 45 deg 0.2.
POSE_SCALE_DEG = {"yaw": 25.0, "pitch": 20.0, "roll": 45.0}


@dataclass(frozen=True)
class QualityFactors:
    """Quality factors of one face, each 0..1 (1 = ideal)."""

    size: float
    sharpness: float
    exposure: float
    pose: float
    occlusion: float

    @property
    def overall(self) -> float:
        """Geometric mean of the five factors, 0..1."""
        vals = [self.size, self.sharpness, self.exposure, self.pose, self.occlusion]
        if min(vals) <= 0.0:
            return 0.0
        return float(math.exp(sum(math.log(min(v, 1.0)) for v in vals) / len(vals)))


def _ramp(x: float, lo: float, hi: float) -> float:
    return float(np.clip((x - lo) / (hi - lo), 0.0, 1.0))


def sharpness(face_gray: np.ndarray) -> float:
    """Variance of the 3x3 Laplacian of a grey face crop resized to SHARP_SIZE x SHARP_SIZE (raw, >= 0).

    The fixed size makes the value independent of the face's pixel size: a sharp face stays sharp after
    downscaling, while blur in the source shows at any size.
    """
    g = np.asarray(face_gray)
    if g.ndim != 2 or g.size == 0:
        raise ValueError(f"expected a non-empty 2-D grey image, got {g.shape}")
    small = cv2.resize(g, (SHARP_SIZE, SHARP_SIZE), interpolation=cv2.INTER_AREA).astype(np.float32)
    return float(cv2.Laplacian(small, cv2.CV_32F, ksize=1).var())


def sharpness_factor(raw: float) -> float:
    """Raw :func:`sharpness` to 0..1 on a log scale between SHARP_LO and SHARP_HI."""
    if raw <= SHARP_LO:
        return 0.0
    return _ramp(math.log(raw), math.log(SHARP_LO), math.log(SHARP_HI))


def exposure(face_gray: np.ndarray) -> float:
    """0..1 from the mean level and the shares of clipped dark and bright pixels of a grey face crop."""
    g = np.asarray(face_gray)
    if g.ndim != 2 or g.size == 0:
        raise ValueError(f"expected a non-empty 2-D grey image, got {g.shape}")
    mean = float(g.mean())
    if mean < LEVEL_OK[0]:
        level = _ramp(mean, LEVEL_ZERO[0], LEVEL_OK[0])
    else:
        level = _ramp(mean, LEVEL_ZERO[1], LEVEL_OK[1])
    clipped = float(np.mean(g <= DARK_CLIP) + np.mean(g >= BRIGHT_CLIP))
    return level * (1.0 - _ramp(clipped, 0.0, CLIP_ZERO))


def pose_factor(yaw: float, pitch: float, roll: float) -> float:
    """exp(-0.5 * ((yaw/25)^2 + (pitch/20)^2 + (roll/45)^2)), angles in degrees."""
    s = POSE_SCALE_DEG
    q = (yaw / s["yaw"]) ** 2 + (pitch / s["pitch"]) ** 2 + (roll / s["roll"]) ** 2
    return float(math.exp(-0.5 * q))


def size_factor(landmarks: np.ndarray, min_interpupillary_px: float) -> float:
    """0 at half the minimum interpupillary distance, 1 at SIZE_IDEAL_FACTOR x the minimum."""
    p = np.asarray(landmarks, dtype=np.float64).reshape(5, 2)
    ipd = float(np.hypot(*(p[1] - p[0])))
    # A turned head shortens the eye distance but not the eye-to-mouth distance.
    eye_mouth = float(np.hypot(*((p[3] + p[4]) / 2 - (p[0] + p[1]) / 2))) / EYE_MOUTH_IPD
    scale = max(ipd, eye_mouth)
    lo = 0.5 * min_interpupillary_px
    hi = max(SIZE_IDEAL_FACTOR * min_interpupillary_px, lo + 1.0)
    return _ramp(scale, lo, hi)


def inner_face_gray(image_bgr: np.ndarray, box: tuple[float, float, float, float]) -> np.ndarray:
    """Grey crop of the central INNER share of the face box, clipped to the image (at least 1 x 1)."""
    h, w = image_bgr.shape[:2]
    x1, y1, x2, y2 = box
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    hw, hh = (x2 - x1) * INNER / 2, (y2 - y1) * INNER / 2
    a = int(np.clip(round(cx - hw), 0, w - 1))
    b = int(np.clip(round(cy - hh), 0, h - 1))
    c = int(np.clip(round(cx + hw), a + 1, w))
    d = int(np.clip(round(cy + hh), b + 1, h))
    return cv2.cvtColor(np.ascontiguousarray(image_bgr[b:d, a:c]), cv2.COLOR_BGR2GRAY)


def quality_factors(
    image_bgr: np.ndarray,
    box: tuple[float, float, float, float],
    landmarks: np.ndarray,
    yaw: float,
    pitch: float,
    roll: float,
    occlusion_score: float,
    *,
    min_interpupillary_px: float = 20.0,
) -> QualityFactors:
    """All five factors for one detected face in an H x W x 3 uint8 BGR image."""
    img = np.asarray(image_bgr)
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise ValueError(f"expected an HxWx3 uint8 BGR image, got {img.shape} {img.dtype}")
    gray = inner_face_gray(img, box)
    return QualityFactors(
        size=size_factor(landmarks, min_interpupillary_px),
        sharpness=sharpness_factor(sharpness(gray)),
        exposure=exposure(gray),
        pose=pose_factor(yaw, pitch, roll),
        occlusion=float(np.clip(1.0 - occlusion_score, 0.0, 1.0)),
    )
