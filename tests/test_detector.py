"""CenterFace detector (verilive.face.detector) and its shape-fixing converter, on the real model.

Photos come from ../shared/data/face/real_faces_misc (see its README.txt): t1.jpg is a group photo of
six people, the face_recognition images and the Tom Hanks crop show one face each. Pose tolerances are
wide on purpose: the landmarks of this model jitter by a few pixels, which moves the angles by up to
about 8 degrees (docs/model-centerface.md, "Head pose").
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from verilive.config import Settings
from verilive.face.detector import (
    LEFT_EYE,
    LEFT_MOUTH,
    NOSE,
    RIGHT_EYE,
    RIGHT_MOUTH,
    Face,
    FaceDetector,
    head_pose,
)
from verilive.models.convert.centerface import INPUT_NAME, OUTPUTS, convert
from verilive.models.sessions import ModelRegistry

FACES = "data/face/real_faces_misc"
GROUP = "insightface/t1.jpg"
SINGLES = [
    "face_recognition/obama.jpg",
    "face_recognition/obama2.jpg",
    "face_recognition/obama3.jpg",
    "face_recognition/biden.jpg",
    "face_recognition/32bit.png",
    "face_recognition/obama_partial_face.jpg",
    "face_recognition/obama_partial_face2.jpg",
    "insightface/Tom_Hanks_54745.png",
]
# Upright, uncropped portraits for the rotation test.
PORTRAITS = ["face_recognition/obama.jpg", "face_recognition/obama3.jpg", "face_recognition/biden.jpg"]

# A frontal mean face in (x, y) image pixels, IPD 100, nose at NOSE_T0 of the eye-to-mouth distance.
FRONTAL = np.array([[-50, 0], [50, 0], [0, 61.6], [-40, 110], [40, 110]], dtype=np.float64)


@pytest.fixture(scope="module")
def detector(models_settings: Settings) -> FaceDetector:
    return FaceDetector.from_registry(ModelRegistry(models_settings, ids=["centerface"]))


@pytest.fixture(scope="module")
def photos(shared_dir: Path) -> dict[str, np.ndarray]:
    out = {}
    for name in [GROUP, *SINGLES]:
        img = cv2.imread(str(shared_dir / FACES / name), cv2.IMREAD_COLOR)
        if img is None:
            pytest.fail(f"development photo {shared_dir / FACES / name} is missing or unreadable")
        out[name] = img
    return out


def rotate(img: np.ndarray, centre: tuple[float, float], degrees: float) -> np.ndarray:
    m = cv2.getRotationMatrix2D(centre, degrees, 1.0)
    return cv2.warpAffine(img, m, (img.shape[1], img.shape[0]), borderMode=cv2.BORDER_REPLICATE)


def centre(face: Face) -> tuple[float, float]:
    return (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2


# --- converter -----------------------------------------------------------------------------------------


def test_converter_makes_shapes_dynamic(shared_dir: Path, tmp_path: Path) -> None:
    import onnx
    import onnxruntime as ort

    source = shared_dir / "models/upstream/centerface.onnx"
    original = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match=r"(?i)dimension|shape"):  # the upstream graph is fixed at 32x32
        original.run(None, {INPUT_NAME: np.zeros((1, 3, 64, 96), np.float32)})

    dest = tmp_path / "centerface.onnx"
    convert(source, dest)
    graph = onnx.load(str(dest)).graph
    assert [i.name for i in graph.input] == [INPUT_NAME]  # weights are constants, not inputs
    dims = [d.dim_param or d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["N", 3, "H", "W"]

    sess = ort.InferenceSession(str(dest), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).uniform(0, 255, (2, 3, 64, 96)).astype(np.float32)
    outs = sess.run(list(OUTPUTS), {INPUT_NAME: x})
    assert [o.shape for o in outs] == [(2, c, 16, 24) for c in OUTPUTS.values()]
    # Same function as upstream where upstream can run: batch 10 at 32x32.
    x = np.random.default_rng(2).uniform(0, 255, (10, 3, 32, 32)).astype(np.float32)
    for a, b in zip(
        sess.run(list(OUTPUTS), {INPUT_NAME: x}), original.run(list(OUTPUTS), {INPUT_NAME: x}), strict=True
    ):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)


# --- detection counts --------------------------------------------------------------------------------


@pytest.mark.slow
def test_group_photo_has_six_faces(detector: FaceDetector, photos: dict[str, np.ndarray]) -> None:
    faces = detector.detect(photos[GROUP])
    assert len(faces) == 6
    assert all(f.score >= 0.5 for f in faces)
    areas = [f.area for f in faces]
    assert areas == sorted(areas, reverse=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", SINGLES)
def test_single_face_photos_have_one_face(
    name: str, detector: FaceDetector, photos: dict[str, np.ndarray]
) -> None:
    (face,) = detector.detect(photos[name])
    h, w = photos[name].shape[:2]
    cx, cy = centre(face)
    assert 0 < cx < w and 0 < cy < h
    assert face.width > 0.1 * min(h, w)


@pytest.mark.slow
def test_blank_and_noise_images_have_no_face(detector: FaceDetector) -> None:
    rng = np.random.default_rng(3)
    assert detector.detect(np.zeros((480, 640, 3), np.uint8)) == []
    assert detector.detect(np.full((480, 640, 3), 200, np.uint8)) == []
    assert detector.detect(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)) == []
    assert detector.detect(rng.integers(0, 256, (7, 5, 3), dtype=np.uint8)) == []


@pytest.mark.slow
def test_small_face_found_by_second_pass(detector: FaceDetector, photos: dict[str, np.ndarray]) -> None:
    # A 40 px face in a 1280x960 image is 10 px in the 320-wide first pass, too small for the model;
    # the second pass at 640 sees it at 20 px.
    img = photos["face_recognition/obama.jpg"]
    (face,) = detector.detect(img)
    x1, y1, x2, y2 = (round(v) for v in face.box)
    s = 40 / (x2 - x1)
    small = cv2.resize(
        img[y1 - 30 : y2 + 30, x1 - 30 : x2 + 30], None, fx=s, fy=s, interpolation=cv2.INTER_AREA
    )
    canvas = np.full((960, 1280, 3), 120, np.uint8)
    canvas[500 : 500 + small.shape[0], 700 : 700 + small.shape[1]] = small
    assert detector.detect_at(canvas, 320) == []
    (found,) = detector.detect(canvas)
    assert 690 < centre(found)[0] < 700 + small.shape[1] and 490 < centre(found)[1] < 500 + small.shape[0]
    assert 25 < found.width < 60


# --- geometry -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_coordinates_follow_padding_and_scaling(
    detector: FaceDetector, photos: dict[str, np.ndarray]
) -> None:
    img = photos["face_recognition/obama.jpg"]
    (face,) = detector.detect(img)
    padded = cv2.copyMakeBorder(img, 100, 0, 60, 0, cv2.BORDER_REPLICATE)  # shift by (+60, +100)
    (moved,) = detector.detect(padded)
    tol = 0.06 * face.width  # the resize differs, so the network sees slightly different pixels
    np.testing.assert_allclose(moved.box, np.add(face.box, (60, 100, 60, 100)), atol=tol)
    np.testing.assert_allclose(moved.landmarks, np.add(face.landmarks, (60, 100)), atol=tol)
    half = cv2.resize(img, None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA)
    (smaller,) = detector.detect(half)
    np.testing.assert_allclose(np.multiply(smaller.box, 2), face.box, atol=2 * tol)


@pytest.mark.slow
def test_landmarks_inside_box_and_in_order(detector: FaceDetector, photos: dict[str, np.ndarray]) -> None:
    for name, img in photos.items():
        for f in detector.detect(img):
            assert f.landmarks.shape == (5, 2) and f.landmarks.dtype == np.float32
            x, y = f.landmarks[:, 0], f.landmarks[:, 1]
            assert np.all((x >= f.box[0]) & (x <= f.box[2]) & (y >= f.box[1]) & (y <= f.box[3])), name
            # Subject's right eye and mouth corner are on the image's left; eyes above nose above mouth.
            assert x[RIGHT_EYE] < x[LEFT_EYE] and x[RIGHT_MOUTH] < x[LEFT_MOUTH], name
            assert max(y[RIGHT_EYE], y[LEFT_EYE]) < y[NOSE] < min(y[RIGHT_MOUTH], y[LEFT_MOUTH]), name
            assert 0.2 * f.width < f.interpupillary_distance < 0.7 * f.width, name


# --- head pose -----------------------------------------------------------------------------------------


def test_head_pose_math_on_a_synthetic_face() -> None:
    yaw, pitch, roll = head_pose(FRONTAL)
    assert abs(yaw) < 1e-9 and abs(pitch) < 0.01 and abs(roll) < 1e-9
    for deg in (-35.0, -20.0, 7.0, 20.0):
        a = math.radians(deg)
        # Counter-clockwise on screen: y points down, so the rotation matrix has flipped sine terms.
        rot = np.array([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]])
        y2, p2, r2 = head_pose(FRONTAL @ rot.T + (300, 200))
        assert r2 == pytest.approx(deg, abs=1e-9)
        assert y2 == pytest.approx(yaw, abs=1e-9) and p2 == pytest.approx(pitch, abs=1e-9)
    turned = FRONTAL.copy()
    turned[NOSE, 0] += 20  # nose to the image's right: subject turned towards their left
    assert head_pose(turned)[0] == pytest.approx(math.degrees(math.atan(0.2 / 0.5)))
    mirrored = turned[[LEFT_EYE, RIGHT_EYE, NOSE, LEFT_MOUTH, RIGHT_MOUTH]] * (-1, 1)
    assert head_pose(mirrored)[0] == pytest.approx(-head_pose(turned)[0])
    up = FRONTAL.copy()
    up[NOSE, 1] -= 10  # nose tip towards the eyes: chin up
    assert head_pose(up)[1] > 10


@pytest.mark.slow
@pytest.mark.parametrize("name", PORTRAITS)
@pytest.mark.parametrize("degrees", [-20.0, 20.0])
def test_roll_follows_rotation(
    name: str, degrees: float, detector: FaceDetector, photos: dict[str, np.ndarray]
) -> None:
    img = photos[name]
    (face,) = detector.detect(img)
    (turned,) = detector.detect(rotate(img, centre(face), degrees))
    assert turned.roll - face.roll == pytest.approx(degrees, abs=10.0)


@pytest.mark.slow
def test_horizontal_flip_flips_yaw_and_roll(detector: FaceDetector, photos: dict[str, np.ndarray]) -> None:
    checked = 0
    for name, img in photos.items():
        faces = detector.detect(img)
        flipped = detector.detect(np.ascontiguousarray(img[:, ::-1]))
        assert len(flipped) == len(faces), name
        w = img.shape[1]
        for f in faces:
            g = min(flipped, key=lambda q: abs(w - centre(q)[0] - centre(f)[0]))
            assert abs(f.yaw + g.yaw) <= 12.0, name
            assert abs(f.roll + g.roll) <= 8.0, name
            if abs(f.yaw) >= 10.0:
                assert math.copysign(1, g.yaw) == -math.copysign(1, f.yaw), name
                checked += 1
    assert checked >= 5  # enough clearly turned faces for the sign check to mean something


@pytest.mark.slow
def test_turned_faces_in_group_photo(detector: FaceDetector, photos: dict[str, np.ndarray]) -> None:
    # In t1.jpg the man standing at the back (the highest face) looks far to the image's left; the
    # others face the camera more.
    faces = detector.detect(photos[GROUP])
    standing = min(faces, key=lambda f: centre(f)[1])
    assert standing.yaw < -30
    assert sum(abs(f.yaw) < 30 for f in faces) >= 4


# --- input checks --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_rejects_bad_input(detector: FaceDetector) -> None:
    for bad in (
        np.zeros((10, 10), np.uint8),
        np.zeros((10, 10, 4), np.uint8),
        np.zeros((10, 10, 3), np.float32),
    ):
        with pytest.raises(ValueError):
            detector.detect(bad)
    with pytest.raises(ValueError):
        FaceDetector(_FakeSession(["x"]))


class _FakeSession:
    def __init__(self, inputs: list[str]) -> None:
        self._inputs = inputs

    def get_inputs(self) -> list[Any]:
        return [type("I", (), {"name": n})() for n in self._inputs]

    def get_outputs(self) -> list[Any]:
        return []
