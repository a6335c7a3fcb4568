"""The 3D check from motion: synthetic geometry (no model), then the face mesh and the burst checker on
real frames (docs/motion3d.md)."""

from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np
import pytest
from common.video import read_video

from verilive.config import Settings
from verilive.face.burst import BurstChecker
from verilive.face.detector import FaceDetector
from verilive.face.mesh import LEFT_EYE_OUTER, RIGHT_EYE_OUTER, FaceMesh, roi_from_face
from verilive.face.motion3d import (
    Motion3D,
    Thresholds,
    Unjudged,
    Verdict,
    camera,
    judge,
    out_of_plane_angle,
    rigid_residual,
    series_counts_against,
    shape_turn,
)
from verilive.models.sessions import ModelRegistry
from verilive.models.store import ModelStore

W, H, F = 640, 480, 600.0


def _head(n: int = 120, seed: int = 0, flat: bool = False) -> np.ndarray:
    """Points (cm) on the front of an ellipsoid head 15 cm wide and 20 cm high, or on its plane."""
    rng = np.random.default_rng(seed)
    u = rng.uniform(-1, 1, (n, 2))
    u = u[np.sum(u**2, axis=1) < 0.95][:n]
    x, y = 7.5 * u[:, 0], 10.0 * u[:, 1]
    z = np.zeros_like(x) if flat else -6.0 * np.sqrt(np.maximum(1.0 - u[:, 0] ** 2 - u[:, 1] ** 2, 0.0))
    return np.column_stack([x, y, z])


def _rot_y(deg: float) -> np.ndarray:
    a = math.radians(deg)
    return np.array([[math.cos(a), 0, math.sin(a)], [0, 1, 0], [-math.sin(a), 0, math.cos(a)]])


def _burst(obj: np.ndarray, yaws: list[float], dists: list[float], jitter: float = 0.0) -> np.ndarray:
    """(frames, N, 3): image x, y under a pinhole camera and the rotated shape's depth in pixels."""
    rng = np.random.default_rng(1)
    out = []
    for yaw, d in zip(yaws, dists, strict=True):
        p = obj @ _rot_y(yaw).T + np.array([0.0, 0.0, d])
        xy = F * p[:, :2] / p[:, 2:3] + np.array([W / 2, H / 2])
        xy = xy + rng.normal(0, jitter, xy.shape)
        out.append(np.column_stack([xy, F * (p[:, 2] - d) / d]))
    return np.stack(out)


TURN = [0, 3, 6, 9, 12, 14, 12, 9, 6, 3]
STILL = [50.0] * 10


def test_rigid_3d_points_turning_are_3d() -> None:
    r = judge(_burst(_head(), TURN, STILL), W, H, rigid=None)
    assert r.verdict is Verdict.THREE_D
    assert r.face_turn == pytest.approx(12.0, abs=0.5)  # robust max: the second largest turn
    assert r.residual > 1.5 * Thresholds().max_flat_residual


def test_the_same_points_on_a_plane_are_flat() -> None:
    r = judge(_burst(_head(flat=True), TURN, STILL, jitter=0.3), W, H, rigid=None)
    assert r.verdict is Verdict.FLAT
    assert r.residual < Thresholds().max_flat_residual / 2


def test_identical_frames_cannot_be_judged() -> None:
    pts = np.repeat(_burst(_head(), [0.0], [50.0]), 10, axis=0)
    r = judge(pts, W, H, rigid=None)
    assert r.verdict is Verdict.CANNOT_JUDGE and r.reason is Unjudged.NO_TURN and not r.not_rigid
    assert r.residual < 1e-6 and r.face_turn < 1e-3


def test_approach_alone_cannot_be_judged() -> None:
    r = judge(_burst(_head(), [0.0] * 10, list(np.linspace(60, 40, 10))), W, H, rigid=None)
    assert r.verdict is Verdict.CANNOT_JUDGE and r.reason is Unjudged.NO_TURN


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="two frames"):
        judge(np.zeros((1, 20, 3)), W, H, rigid=None)
    with pytest.raises(ValueError, match="frames, points, 3"):
        judge(np.zeros((5, 20, 2)), W, H, rigid=None)
    with pytest.raises(ValueError, match="8 landmarks"):
        judge(np.zeros((5, 5, 3)), W, H, rigid=None)


def test_shape_turn_ignores_roll_and_reads_yaw() -> None:
    pts = _head()
    roll = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    assert shape_turn(pts, pts @ roll.T) < 1e-3
    assert shape_turn(pts, pts @ _rot_y(20.0).T) == pytest.approx(20.0, abs=1e-6)
    assert out_of_plane_angle(np.eye(3)) == 0.0


def test_rigid_fit_explains_a_turning_head_but_not_a_tilting_plane() -> None:
    k = camera(W, H, F / W)
    head = _burst(_head(), [0.0, 20.0], [50.0, 50.0])
    assert rigid_residual(head[0], head[0, :, :2], k) < 1e-3  # the first frame reproduces itself
    # The shape's own turn: near exact (the mesh's depth has no absolute offset, so the shape is
    # back-projected about its mean depth: ~0.3 px here, on a face ~180 px wide).
    assert rigid_residual(head[0], head[1, :, :2], k) < 0.5
    plane = _burst(_head(flat=True), [0.0, 20.0], [50.0, 50.0])
    # A plane "seen" with a head's depth: the turn that explains its foreshortening moves the
    # depth-shifted points wrongly, so the rigid head fits it worse than its own homography (~0).
    fake = plane.copy()
    fake[:, :, 2] = head[0, :, 2]
    assert rigid_residual(fake[0], fake[1, :, :2], k) > 1.0


def test_a_head_turn_is_explained_better_by_the_rigid_fit() -> None:
    r = judge(_burst(_head(), TURN, STILL, jitter=0.3), W, H, rigid=None)
    assert r.verdict is Verdict.THREE_D
    assert r.rigid_ratio < 0.5 * Thresholds().max_rigid_ratio


def test_non_rigid_motion_cannot_be_judged() -> None:
    # Each frame's points wander independently (noise larger than the turn's parallax): no plane and
    # no rigid head explains it, so it is not evidence of a head.
    pts = _burst(_head(), TURN, STILL)
    rng = np.random.default_rng(3)
    pts[1:, :, :2] += rng.normal(0, 6.0, pts[1:, :, :2].shape)
    r = judge(pts, W, H, rigid=None)
    assert r.face_turn >= Thresholds().min_turn
    assert r.residual > Thresholds().max_flat_residual
    assert r.rigid_ratio > Thresholds().max_rigid_ratio
    assert r.verdict is Verdict.CANNOT_JUDGE
    # ... but it turned: the reason says so, and a face series holds it against liveness.
    assert r.reason is Unjudged.NOT_RIGID and r.not_rigid
    assert r.as_details()["motion3d_not_rigid"] == 1.0


def test_judged_bursts_carry_no_reason() -> None:
    assert judge(_burst(_head(), TURN, STILL), W, H, rigid=None).reason is None
    assert judge(_burst(_head(flat=True), TURN, STILL, jitter=0.3), W, H, rigid=None).reason is None


def _m(verdict: Verdict, reason: Unjudged | None = None) -> Motion3D:
    return Motion3D(verdict, 0.05, 12.0 if reason is not Unjudged.NO_TURN else 2.0, 1.0, 10, (), reason)


@pytest.mark.parametrize(
    ("result", "off", "use", "require"),
    [
        (_m(Verdict.THREE_D), False, False, False),
        (_m(Verdict.FLAT), False, True, True),
        (_m(Verdict.CANNOT_JUDGE, Unjudged.NOT_RIGID), False, True, True),
        (_m(Verdict.CANNOT_JUDGE, Unjudged.NO_TURN), False, False, True),
        (None, False, False, True),  # the check did not run: fewer than 3 frames, not one face
    ],
)
def test_the_series_rule_of_each_mode(result: Motion3D | None, off: bool, use: bool, require: bool) -> None:
    assert series_counts_against(result, "off") is off
    assert series_counts_against(result, "use") is use
    assert series_counts_against(result, "require") is require


def test_non_finite_landmarks_are_refused() -> None:
    pts = _burst(_head(), TURN, STILL)
    pts[3, 0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        judge(pts, W, H, rigid=None)


# --- the face mesh and the burst checker on real frames --------------------------------------------------

OBAMA = "data/face/real_faces_misc/face_recognition/obama.jpg"
TURN_CLIP = "data/face/video_motion/antispoof_tranvanluyt/real.mp4"


@pytest.fixture(scope="module")
def registry(models_settings: Settings) -> ModelRegistry:
    store = ModelStore.from_settings(models_settings)
    if store.missing(["face_mesh"]):
        store.pull("face_mesh")
    return ModelRegistry(models_settings)


@pytest.fixture(scope="module")
def checker(registry: ModelRegistry) -> BurstChecker:
    return BurstChecker(FaceDetector.from_registry(registry), FaceMesh.from_registry(registry))


@pytest.mark.slow
def test_mesh_finds_the_eye_corners_of_a_real_face(checker: BurstChecker, shared_dir: Path) -> None:
    img = cv2.imread(str(shared_dir / OBAMA))
    face = checker.detector.detect(img)[0]
    mesh = checker.mesh.fit(img, roi_from_face(face))
    assert mesh.presence > 0.9
    assert mesh.points.shape == (468, 3)
    # The outer eye corners lie just outside CenterFace's eye centres, on the same side each.
    eyes = np.asarray(face.landmarks[:2], dtype=np.float64)
    ipd = float(np.hypot(*(eyes[1] - eyes[0])))
    for corner, eye, side in ((RIGHT_EYE_OUTER, eyes[0], -1), (LEFT_EYE_OUTER, eyes[1], 1)):
        p = mesh.points[corner, :2]
        assert abs(p[1] - eye[1]) < 0.25 * ipd
        assert 0.1 * ipd < side * (p[0] - eye[0]) < 0.6 * ipd
    noise = np.random.default_rng(0).integers(0, 255, img.shape, dtype=np.uint8)
    assert checker.mesh.fit(noise, roi_from_face(face)).presence < 0.5


@pytest.mark.slow
def test_still_photo_series_cannot_be_judged(checker: BurstChecker, shared_dir: Path) -> None:
    img = cv2.imread(str(shared_dir / OBAMA))
    res = checker.check([img] * 6)
    assert res.result is not None and res.verdict is Verdict.CANNOT_JUDGE
    assert res.result.face_turn < 3.0  # the tracked crop moves a little; the mesh with it


@pytest.mark.slow
def test_burst_refuses_what_is_not_one_burst(checker: BurstChecker, shared_dir: Path) -> None:
    img = cv2.imread(str(shared_dir / OBAMA))
    assert checker.check([img, img]).skipped == "fewer than 3 frames"
    small = cv2.resize(img, None, fx=0.5, fy=0.5)
    assert checker.check([img, small, img]).skipped == "the frames differ in size"
    blank = np.zeros_like(img)
    assert checker.check([blank] * 4).skipped == "the face was found in fewer than three frames"


@pytest.mark.slow
def test_a_real_head_turn_is_judged_3d(checker: BurstChecker, shared_dir: Path) -> None:
    frames, _ = read_video(shared_dir / TURN_CLIP)
    # 10 frames at 5 fps (every 6th of 30 fps) over the clip's first deliberate turn, from 0.6 s.
    res = checker.check(frames[18:78:6])
    assert res.result is not None, res.skipped
    assert res.verdict is Verdict.THREE_D
    assert res.result.face_turn >= Thresholds().min_turn
