"""The 3D check from motion: is a moving face a rigid plane or a rigid 3D face? (docs/motion3d.md)

A printed photo, a flat paper mask or a cut-out is a plane, and however a plane moves in front of a
pinhole camera, its image motion is a homography. A real face is not a plane: when the head turns, the
nose tip (2-3 cm in front of the eyes and mouth) and the cheeks and jaw (5-10 cm behind) move in ways
no homography explains. This module needs no model: it takes landmark tracks (from face/mesh.py, or
synthetic points in tests) and decides.

For each frame t against the first frame:
- ``residual``: the best least-squares homography from the first frame's rigid landmarks to frame t's;
  the RMS of what it leaves, over the best ``TRIM`` share of the points, in units of the outer-eye-corner
  distance (IOD). Only rigid points take part: eye corners, nose, cheeks, forehead and the face outline,
  not the lips, eyelids or brows, whose motion when talking or blinking is not 3D evidence.
- ``face_turn``: the out-of-plane rotation (yaw and pitch; roll excluded) of the landmarks' own 3D
  shape between the two frames (Kabsch on the centred, scale-normalised x, y, z). For a real head this
  is its turn. For a tilted print it reads little, because the mesh pulls any face towards a face
  shape: that is why the mesh's depth is used only to see that a head turned, never as 3D evidence.
- ``rigid_ratio``: how much better a rigid 3D face explains the motion than a plane does: the residual
  of the best perspective pose (PnP, pinhole camera of focal length ``focal`` x the image's longer side,
  principal point at the centre) of the first frame's landmarks back-projected to the mesh's depth,
  over the homography residual. A turning head's landmarks follow its own 3D shape (0.2-0.5 on the
  development clips); noise, a bent sheet or a face that changes shape fit neither model better (~1).

The burst's statistics are robust to one bad frame: the second largest per-frame value of each (the
largest for bursts of three frames or fewer). Verdict:
- ``CANNOT_JUDGE``: the face did not turn by ``min_turn`` (reason ``NO_TURN``: an approach, a sideways
  slide, a roll or a still face do not separate a plane from a head; a print tilted in the hand reads
  1-5 degrees), or it turned but neither a plane nor a rigid head explains its motion (reason
  ``NOT_RIGID``: ``rigid_ratio`` over ``max_rigid_ratio``; a face series holds it against liveness).
- ``FLAT``: it turned, and a homography explains the motion to within ``max_flat_residual``.
- ``THREE_D``: it turned, no homography explains the motion, and a rigid 3D face does.

Where a client asked for a turn (capture bundles), only ``THREE_D`` is evidence of a real head:
"cannot judge" then means the person did not turn or the thing in front of the camera is not a head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

import cv2
import numpy as np

# MediaPipe face-mesh indices of points that move rigidly with the skull: outer and inner eye corners,
# the nose ridge, tip, wings and base, cheekbones, forehead and the face outline (chin and jaw included:
# with the mouth closed or not, the jaw outline moves less than the lips). Lips, eyelids, brows excluded.
RIGID_POINTS: tuple[int, ...] = (
    # eye corners
    33, 133, 362, 263,
    # nose ridge, tip, wings, base
    168, 6, 197, 195, 5, 4, 1, 19, 94, 98, 327, 129, 358, 64, 294, 48, 278,
    # cheekbones and cheeks
    50, 280, 117, 346, 123, 352, 187, 411, 205, 425, 116, 345, 147, 376,
    # forehead
    10, 151, 9, 108, 337, 67, 69, 299,
    # face outline
    338, 297, 332, 284, 251, 389, 356, 454, 323, 361, 288, 397, 365, 379, 378, 400, 377, 152,
    148, 176, 149, 150, 136, 172, 58, 132, 93, 234, 127, 162, 21, 54, 103, 109,
)  # fmt: skip
RIGHT_EYE_OUTER, LEFT_EYE_OUTER = 33, 263
TRIM = 0.9  # share of the rigid points (the best fitted) that the residual is measured on


class Verdict(StrEnum):
    THREE_D = "3d"
    FLAT = "flat"
    CANNOT_JUDGE = "cannot_judge"


class Unjudged(StrEnum):
    """Why a burst is ``CANNOT_JUDGE``: it did not turn enough, or it turned and neither a plane nor a
    rigid head explains its motion (what a tilted print or a flexing sheet most often shows)."""

    NO_TURN = "no_turn"
    NOT_RIGID = "not_rigid"


# How a face series uses the check (``VERILIVE_FACE_MOTION3D``, docs/motion3d.md): ``off`` runs none;
# ``use`` holds a flat verdict and a turn that is neither flat nor rigid against the series; ``require``
# holds anything but a 3D verdict against it (no check, no turn, not one face).
SeriesMode = Literal["off", "use", "require"]


@dataclass(frozen=True)
class Thresholds:
    """Decision thresholds; chosen on the development clips and simulated attacks (docs/motion3d.md)."""

    min_turn: float = 8.0  # degrees of head turn (mesh pose) that make a burst judgeable
    max_flat_residual: float = 0.02  # IOD units: at or under this, a homography explains the motion
    # At or under this, the rigid 3D fit explains the motion well enough to call it a head.
    max_rigid_ratio: float = 0.8
    focal: float = 0.9  # assumed focal length, times the image's longer side


@dataclass(frozen=True)
class Motion3D:
    """The outcome of the check for one burst; angles in degrees, residual in IOD units."""

    verdict: Verdict
    residual: float
    face_turn: float
    rigid_ratio: float
    frames: int
    residuals: tuple[float, ...] = ()
    # Set only for CANNOT_JUDGE: no turn, or turned but not rigid.
    reason: Unjudged | None = None

    @property
    def not_rigid(self) -> bool:
        """It turned, and neither a plane nor a rigid head explains the motion."""
        return self.verdict is Verdict.CANNOT_JUDGE and self.reason is Unjudged.NOT_RIGID

    def as_details(self) -> dict[str, float]:
        return {
            "motion3d_residual": round(self.residual, 5),
            "motion3d_turn": round(self.face_turn, 3),
            "motion3d_rigid_ratio": round(min(self.rigid_ratio, 1e3), 4),
            "motion3d_frames": float(self.frames),
            "motion3d_flat": 1.0 if self.verdict is Verdict.FLAT else 0.0,
            "motion3d_judged": 0.0 if self.verdict is Verdict.CANNOT_JUDGE else 1.0,
            "motion3d_not_rigid": 1.0 if self.not_rigid else 0.0,
        }


def series_counts_against(result: Motion3D | None, mode: SeriesMode) -> bool:
    """Whether a face series' 3D check caps its score (at FLAT_SCORE, face/engine.py); ``result`` is
    None when the check did not run on it (fewer than 3 frames, not one face, frames of two sizes)."""
    if mode == "off":
        return False
    if mode == "require":
        return result is None or result.verdict is not Verdict.THREE_D
    return result is not None and (result.verdict is Verdict.FLAT or result.not_rigid)


def _robust_max(values: list[float]) -> float:
    """The second largest value (the largest for three values or fewer): one bad frame cannot decide."""
    if not values:
        return 0.0
    s = sorted(values, reverse=True)
    return s[1] if len(s) > 3 else s[0]


def homography_residual(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, float]:
    """The least-squares homography src -> dst (N x 2 each) and its trimmed RMS residual in pixels."""
    h, _ = cv2.findHomography(src.astype(np.float64), dst.astype(np.float64), 0)
    if h is None or not np.all(np.isfinite(h)):
        return np.eye(3), float("inf")
    proj = cv2.perspectiveTransform(src.reshape(-1, 1, 2).astype(np.float64), h).reshape(-1, 2)
    err = np.sum((proj - dst) ** 2, axis=1)
    keep = np.sort(err)[: max(4, math.ceil(TRIM * len(err)))]
    return h, float(math.sqrt(float(np.mean(keep))))


def out_of_plane_angle(rot: np.ndarray) -> float:
    """Degrees by which ``rot`` turns the viewing axis (z): yaw and pitch together, roll ignored."""
    return math.degrees(math.acos(float(np.clip(rot[2, 2], -1.0, 1.0))))


def shape_rotation(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The rotation taking the 3D point set ``a`` onto ``b`` (Kabsch, after centring and scaling each
    to unit RMS size)."""
    pa = a - a.mean(axis=0)
    pb = b - b.mean(axis=0)
    pa /= max(float(np.sqrt(np.mean(np.sum(pa**2, axis=1)))), 1e-9)
    pb /= max(float(np.sqrt(np.mean(np.sum(pb**2, axis=1)))), 1e-9)
    u, _, vt = np.linalg.svd(pa.T @ pb)
    d = np.sign(np.linalg.det(u @ vt))
    return (u @ np.diag([1.0, 1.0, d]) @ vt).T


def shape_turn(a: np.ndarray, b: np.ndarray) -> float:
    """Out-of-plane rotation (degrees) of the 3D point set ``b`` against ``a``."""
    return out_of_plane_angle(shape_rotation(a, b))


def camera(width: int, height: int, focal: float) -> np.ndarray:
    """The assumed pinhole camera: focal ``focal`` x the longer side, principal point at the centre."""
    f = focal * max(width, height)
    return np.array([[f, 0.0, width / 2.0], [0.0, f, height / 2.0], [0.0, 0.0, 1.0]])


def rigid_residual(first: np.ndarray, later: np.ndarray, k: np.ndarray) -> float:
    """Trimmed RMS (pixels) of the best perspective pose of the 3D shape seen in ``first`` ((N, 3):
    image x, y and depth z in pixels) explaining the image points ``later`` (N x 2).

    The shape is ``first`` back-projected through camera ``k`` to depth f + z (object units: pixels at
    depth f), so that its pose at the first frame reproduces the first frame exactly."""
    f = k[0, 0]
    z = first[:, 2] - first[:, 2].mean()
    obj = np.column_stack([(first[:, 0] - k[0, 2]) * (f + z) / f, (first[:, 1] - k[1, 2]) * (f + z) / f, z])
    centre = obj.mean(axis=0)
    obj = np.ascontiguousarray(obj - centre)
    img = np.ascontiguousarray(later, dtype=np.float64)
    rvec = np.zeros((3, 1))
    tvec = np.array([[centre[0]], [centre[1]], [f + centre[2]]])
    try:
        ok, rvec, tvec = cv2.solvePnP(obj, img, k, None, rvec, tvec, True, flags=cv2.SOLVEPNP_ITERATIVE)
    except cv2.error:
        return float("inf")
    if not ok:
        return float("inf")
    proj, _ = cv2.projectPoints(obj, rvec, tvec, k, None)
    err = np.sum((proj.reshape(-1, 2) - img) ** 2, axis=1)
    keep = np.sort(err)[: max(4, math.ceil(TRIM * len(err)))]
    return float(math.sqrt(float(np.mean(keep))))


def judge(
    points: np.ndarray,
    width: int,
    height: int,
    thresholds: Thresholds = Thresholds(),
    rigid: tuple[int, ...] | None = RIGID_POINTS,
) -> Motion3D:
    """The verdict for a burst: ``points`` is (frames, N, 3) x, y, z per landmark (x, y in image pixels
    of a ``width`` x ``height`` image; z the landmark model's relative depth in the same pixel scale,
    larger is farther), one face, in time order. ``rigid`` selects the landmarks used (None: all)."""
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 3 or pts.shape[2] != 3:
        raise ValueError(f"expected (frames, points, 3), got {pts.shape}")
    frames = pts.shape[0]
    if frames < 2:
        raise ValueError("the 3D check needs at least two frames")
    named = rigid is RIGID_POINTS
    sel = pts[:, list(rigid), :] if rigid is not None else pts
    if sel.shape[1] < 8:
        raise ValueError("the 3D check needs at least 8 landmarks")
    if not np.all(np.isfinite(sel)):
        raise ValueError("landmarks must be finite")
    k = camera(width, height, thresholds.focal)
    residuals, rigids, turns = [], [], []
    for t in range(1, frames):
        _, rms = homography_residual(sel[0, :, :2], sel[t, :, :2])
        if named:
            iod = 0.5 * sum(_iod(pts[i]) for i in (0, t))
        else:
            iod = 0.5 * sum(_spread(sel[i, :, :2]) for i in (0, t))
        iod = max(iod, 1e-6)
        residuals.append(rms / iod)
        rigids.append(rigid_residual(sel[0], sel[t, :, :2], k) / iod)
        turns.append(shape_turn(sel[0], sel[t]))
    residual, turn = _robust_max(residuals), _robust_max(turns)
    ratio = _robust_max(rigids) / max(residual, 1e-9)
    reason = None
    if turn < thresholds.min_turn:
        verdict, reason = Verdict.CANNOT_JUDGE, Unjudged.NO_TURN
    elif residual <= thresholds.max_flat_residual:
        verdict = Verdict.FLAT
    elif ratio <= thresholds.max_rigid_ratio:
        verdict = Verdict.THREE_D
    else:
        verdict, reason = Verdict.CANNOT_JUDGE, Unjudged.NOT_RIGID
    return Motion3D(verdict, residual, turn, ratio, frames, tuple(residuals), reason)


def _iod(p: np.ndarray) -> float:
    return float(np.hypot(*(p[LEFT_EYE_OUTER, :2] - p[RIGHT_EYE_OUTER, :2])))


def _spread(p: np.ndarray) -> float:
    """A size for point sets without named eye corners: their RMS distance from the centroid."""
    return float(np.sqrt(np.mean(np.sum((p - p.mean(axis=0)) ** 2, axis=1))))
