"""Quality factors on real faces: blur, exposure, face size and pose move the right factor the right way."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import cv2
import numpy as np
import pytest

from verilive.config import Settings
from verilive.face.detector import Face, FaceDetector
from verilive.face.quality import (
    QualityFactors,
    exposure,
    inner_face_gray,
    quality_factors,
    sharpness,
)
from verilive.models.sessions import ModelRegistry
from verilive.models.store import ModelStore

PHOTOS = [
    "real_faces_misc/face_recognition/obama.jpg",
    "real_faces_misc/face_recognition/biden.jpg",
    "real_faces_misc/insightface/Tom_Hanks_54745.png",
    "pad_silentface/image_T1.jpg",
    "pad_silentface/image_T2.jpg",
]


@pytest.fixture(scope="module")
def detector(shared_dir: Path) -> FaceDetector:
    settings = Settings()
    store = ModelStore(settings.models_dir, mirror=settings.model_mirror or shared_dir / "models/upstream")
    store.pull("centerface")
    return FaceDetector.from_registry(ModelRegistry(settings, ids=["centerface"], store=store))


@pytest.fixture(scope="module")
def faces(shared_dir: Path, detector: FaceDetector) -> dict[str, tuple[np.ndarray, Face]]:
    out = {}
    for name in PHOTOS:
        img = cv2.imread(str(shared_dir / "data/face" / name), cv2.IMREAD_COLOR)
        assert img is not None, name
        out[name] = (img, detector.detect(img)[0])
    return out


def factors(img: np.ndarray, face: Face, **kw: float) -> QualityFactors:
    angles = {"yaw": face.yaw, "pitch": face.pitch, "roll": face.roll, **kw}
    return quality_factors(img, face.box, face.landmarks, occlusion_score=0.0, **angles)


@pytest.mark.slow
@pytest.mark.parametrize("name", PHOTOS)
def test_clean_faces_score_well_and_stay_in_range(
    name: str, faces: dict[str, tuple[np.ndarray, Face]]
) -> None:
    img, face = faces[name]
    q = factors(img, face)
    for v in (q.size, q.sharpness, q.exposure, q.pose, q.occlusion, q.overall):
        assert 0.0 <= v <= 1.0
    assert q.sharpness > 0.7 and q.exposure > 0.8 and q.occlusion == 1.0
    assert q.overall > 0.6


@pytest.mark.slow
@pytest.mark.parametrize("name", PHOTOS)
def test_blur_lowers_sharpness_monotonically(name: str, faces: dict[str, tuple[np.ndarray, Face]]) -> None:
    img, face = faces[name]
    # Sigma in pixels of the 128-px face crop the measure uses, converted to source pixels.
    k = face.height * 0.8 / 128
    raws = [sharpness(inner_face_gray(img, face.box))]
    facs = [factors(img, face).sharpness]
    for sigma in (0.7, 1.5, 3.0):
        blurred = cv2.GaussianBlur(img, (0, 0), sigma * k)
        raws.append(sharpness(inner_face_gray(blurred, face.box)))
        facs.append(factors(blurred, face).sharpness)
    assert all(a > b for a, b in pairwise(raws)), raws
    assert all(a >= b for a, b in pairwise(facs)) and facs[0] - facs[-1] > 0.5, facs
    assert facs[-1] < 0.4  # the 112-px Tom Hanks crop keeps the most edge energy (0.37)


@pytest.mark.slow
@pytest.mark.parametrize("name", PHOTOS)
def test_dark_and_overexposed_lower_exposure(name: str, faces: dict[str, tuple[np.ndarray, Face]]) -> None:
    img, face = faces[name]
    base = factors(img, face).exposure
    # A bright face may first improve when darkened a little; from a mean level below 90 it only gets worse.
    levels = [factors((img * gain).astype(np.uint8), face).exposure for gain in (0.4, 0.25, 0.12)]
    assert all(a >= b for a, b in pairwise(levels)) and levels[-1] < min(0.2, base - 0.5), levels
    bright = np.clip(img.astype(np.float32) * 1.8 + 60, 0, 255).astype(np.uint8)
    assert factors(bright, face).exposure < min(0.3, base - 0.5)


def test_exposure_of_plain_levels() -> None:
    assert exposure(np.full((50, 50), 128, np.uint8)) == 1.0
    assert exposure(np.zeros((50, 50), np.uint8)) == 0.0
    assert exposure(np.full((50, 50), 255, np.uint8)) == 0.0
    half = np.full((50, 50), 128, np.uint8)
    half[:20] = 255  # 40 % clipped highlights
    assert exposure(half) < 0.1


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["real_faces_misc/face_recognition/obama.jpg", "pad_silentface/image_T2.jpg"]
)
def test_small_faces_lower_size(
    name: str, faces: dict[str, tuple[np.ndarray, Face]], detector: FaceDetector
) -> None:
    img, face = faces[name]
    sizes = [factors(img, face).size]
    for scale in (0.3, 0.15, 0.08):
        small = cv2.resize(img, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        found = detector.detect(small)
        assert found, scale
        sizes.append(factors(small, found[0]).size)
    assert sizes[0] == 1.0
    assert all(a >= b for a, b in pairwise(sizes)) and sizes[-1] < 0.5, sizes


@pytest.mark.slow
def test_large_yaw_lowers_pose(faces: dict[str, tuple[np.ndarray, Face]]) -> None:
    img, face = faces["real_faces_misc/face_recognition/obama.jpg"]
    poses = [factors(img, face, yaw=y, pitch=0.0, roll=0.0).pose for y in (0.0, 15.0, 30.0, 45.0, 60.0)]
    assert poses[0] == 1.0
    assert all(a > b for a, b in pairwise(poses)) and poses[-1] < 0.1, poses
    assert factors(img, face, yaw=-30.0, pitch=0.0, roll=0.0).pose == pytest.approx(poses[2])


@pytest.mark.slow
def test_turned_face_in_a_real_photo_has_a_low_pose(shared_dir: Path, detector: FaceDetector) -> None:
    img = cv2.imread(str(shared_dir / "data/face/real_faces_misc/insightface/t1.jpg"), cv2.IMREAD_COLOR)
    found = detector.detect(img)
    turned = max(found, key=lambda f: abs(f.yaw))
    frontal = min(found, key=lambda f: abs(f.yaw) + abs(f.pitch))
    assert factors(img, turned).pose < 0.3 < factors(img, frontal).pose


def test_overall_combines_factors() -> None:
    ideal = QualityFactors(1.0, 1.0, 1.0, 1.0, 1.0)
    assert ideal.overall == 1.0
    assert QualityFactors(1.0, 1.0, 1.0, 1.0, 0.0).overall == 0.0
    q = QualityFactors(0.5, 1.0, 1.0, 1.0, 1.0)
    assert q.overall == pytest.approx(0.5 ** (1 / 5))
    assert 0.0 <= QualityFactors(0.2, 0.3, 0.9, 0.4, 0.7).overall <= 1.0


@pytest.mark.slow
def test_occlusion_score_enters_as_its_complement(faces: dict[str, tuple[np.ndarray, Face]]) -> None:
    img, face = faces["pad_silentface/image_T1.jpg"]
    a = quality_factors(img, face.box, face.landmarks, 0.0, 0.0, 0.0, 0.2)
    b = quality_factors(img, face.box, face.landmarks, 0.0, 0.0, 0.0, 0.9)
    assert a.occlusion == pytest.approx(0.8) and b.occlusion == pytest.approx(0.1)
    assert a.overall > b.overall
