"""The occlusion model on real faces (CenterFace landmarks) with occluders drawn in each face's own frame.

The faces are the live single-face photos in ../shared/data/face; the occluders are a hand-sized patch of
real skin (cut from another person's cheek, shifted to this face's skin colour) over one eye and the
nose, a pleated surgical mask (light blue, and white) over nose and mouth, and dark sunglasses. They are
drawn here, by other code than the training's synthetic occluders (train/face_occlusion.py), so they are
a held-out check of what the model learnt; its figures on real covered and uncovered photos of
collections it never trained on are in docs/face-quality.md.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import cv2
import numpy as np
import pytest

from verilive.config import Settings
from verilive.face.detector import LEFT_EYE, RIGHT_EYE, Face, FaceDetector
from verilive.face.occlusion import (
    DEFAULT_THRESHOLD,
    META_KEY,
    REGIONS,
    Occlusion,
    OcclusionModel,
    canonical_face,
    to_input,
)
from verilive.models.sessions import ModelRegistry
from verilive.models.store import ModelStore

SINGLE_FACE_PHOTOS = [
    "real_faces_misc/face_recognition/obama.jpg",
    "real_faces_misc/face_recognition/obama2.jpg",
    "real_faces_misc/face_recognition/obama3.jpg",
    "real_faces_misc/face_recognition/obama_partial_face.jpg",
    "real_faces_misc/face_recognition/obama_partial_face2.jpg",
    "real_faces_misc/face_recognition/biden.jpg",
    "real_faces_misc/face_recognition/32bit.png",
    "real_faces_misc/insightface/Tom_Hanks_54745.png",
    "pad_silentface/image_T1.jpg",
    "pad_silentface/image_T2.jpg",
]
SKIN_SOURCE = "pad_silentface/image_T2.jpg"  # a high-resolution cheek for the hand patch


@pytest.fixture(scope="module")
def detector(shared_dir: Path) -> FaceDetector:
    settings = Settings()
    store = ModelStore(settings.models_dir, mirror=settings.model_mirror or shared_dir / "models/upstream")
    store.pull("centerface")
    return FaceDetector.from_registry(ModelRegistry(settings, ids=["centerface"], store=store))


@pytest.fixture(scope="module")
def faces(shared_dir: Path, detector: FaceDetector) -> dict[str, tuple[np.ndarray, Face]]:
    out = {}
    for name in SINGLE_FACE_PHOTOS:
        img = cv2.imread(str(shared_dir / "data/face" / name), cv2.IMREAD_COLOR)
        assert img is not None, name
        found = detector.detect(img)
        assert len(found) == 1, name
        out[name] = (img, found[0])
    return out


# --- occluders, drawn in the face frame: u along the eye line, v down, both in interpupillary distances ---


def to_image(face: Face, uv: np.ndarray) -> np.ndarray:
    lm = face.landmarks.astype(np.float64)
    centre = (lm[RIGHT_EYE] + lm[LEFT_EYE]) / 2
    ex = lm[LEFT_EYE] - lm[RIGHT_EYE]
    ipd = float(np.hypot(*ex))
    ex /= ipd
    ey = np.array([-ex[1], ex[0]])
    uv = np.asarray(uv, dtype=np.float64).reshape(-1, 2)
    return centre + ipd * (uv[:, :1] * ex + uv[:, 1:] * ey)


def ipd(face: Face) -> float:
    return face.interpupillary_distance


def eye_angle(face: Face) -> float:
    d = face.landmarks[LEFT_EYE] - face.landmarks[RIGHT_EYE]
    return float(np.degrees(np.arctan2(d[1], d[0])))


def blend(img: np.ndarray, cover: np.ndarray, mask: np.ndarray) -> np.ndarray:
    a = mask.astype(np.float32)[..., None] / 255.0
    return (img * (1.0 - a) + cover * a).astype(np.uint8)


def pt(p: np.ndarray) -> tuple[int, int]:
    return round(float(p[0])), round(float(p[1]))


def skin_patch(img: np.ndarray, face: Face) -> np.ndarray:
    """A square of real cheek skin (subject's right cheek), as large as the cheek allows."""
    c = to_image(face, [-0.62, 0.62])[0]
    h = int(0.3 * ipd(face))
    return img[int(c[1]) - h : int(c[1]) + h, int(c[0]) - h : int(c[0]) + h].copy()


def hand(img: np.ndarray, face: Face, skin: np.ndarray) -> np.ndarray:
    """An elliptical skin patch (~40 % of the face box) over the subject's right eye and the nose."""
    size = ipd(face)
    mask = np.zeros(img.shape[:2], np.uint8)
    centre = pt(to_image(face, [-0.35, 0.3])[0])
    cv2.ellipse(mask, centre, (int(0.85 * size), int(0.75 * size)), eye_angle(face), 0, 360, 255, -1)
    x, y, w, h = cv2.boundingRect(mask)
    tex = cv2.resize(skin, (w, h), interpolation=cv2.INTER_CUBIC)
    # Shift the patch's colour to this face's skin (its other cheek), so colour alone cannot tell.
    c = to_image(face, [0.6, 0.6])[0]
    r = max(2, int(0.12 * size))
    ref = img[max(0, int(c[1]) - r) : int(c[1]) + r, max(0, int(c[0]) - r) : int(c[0]) + r]
    ref_lab = cv2.cvtColor(ref, cv2.COLOR_BGR2LAB).reshape(-1, 3).astype(np.float32).mean(0)
    lab = cv2.cvtColor(tex, cv2.COLOR_BGR2LAB).astype(np.float32)
    lab += ref_lab - lab.reshape(-1, 3).mean(0)
    tex = cv2.cvtColor(np.clip(lab, 0, 255).astype(np.uint8), cv2.COLOR_LAB2BGR)
    cover = img.copy()
    cover[y : y + h, x : x + w] = tex
    # Darker towards the rim, as a rounded hand is.
    depth = cv2.distanceTransform((mask > 0).astype(np.uint8), cv2.DIST_L2, 3)
    shade = np.clip(0.75 + depth / (0.4 * size) * 0.25, 0.75, 1.0)[..., None]
    cover = np.clip(cover * shade, 0, 255).astype(np.uint8)
    return blend(img, cover, cv2.GaussianBlur(mask, (3, 3), 0))


def surgical_mask(img: np.ndarray, face: Face, colour: tuple[int, int, int]) -> np.ndarray:
    """A pleated mask from the nose bridge to under the chin, reaching past both cheeks."""
    outline = [[-0.15, 0.22], [0.15, 0.22], [0.95, 0.45], [0.9, 1.35], [0.35, 1.8], [-0.35, 1.8]]
    outline += [[-0.9, 1.35], [-0.95, 0.45]]
    mask = np.zeros(img.shape[:2], np.uint8)
    cv2.fillPoly(mask, [np.round(to_image(face, outline)).astype(np.int32)], 255, cv2.LINE_AA)
    cover = np.empty_like(img)
    cover[:] = colour
    pleat = tuple(int(v * 0.85) for v in colour)
    for v in (0.75, 1.05, 1.35):
        a, b = to_image(face, [[-0.9, v], [0.9, v]])
        cv2.line(cover, pt(a), pt(b), pleat, max(1, int(0.03 * ipd(face))), cv2.LINE_AA)
    return blend(img, cover, mask)


def sunglasses(img: np.ndarray, face: Face) -> np.ndarray:
    """Two dark elliptical lenses joined by a bridge, with a small reflection."""
    size = ipd(face)
    mask = np.zeros(img.shape[:2], np.uint8)
    for uv in ([-0.5, 0.05], [0.5, 0.05]):
        c = pt(to_image(face, uv)[0])
        cv2.ellipse(
            mask, c, (int(0.42 * size), int(0.3 * size)), eye_angle(face), 0, 360, 255, -1, cv2.LINE_AA
        )
    a, b = to_image(face, [[-0.2, -0.05], [0.2, -0.05]])
    cv2.line(mask, pt(a), pt(b), 255, max(2, int(0.07 * size)), cv2.LINE_AA)
    cover = np.empty_like(img)
    cover[:] = (28, 24, 22)
    cv2.circle(cover, pt(to_image(face, [-0.6, -0.1])[0]), max(1, int(0.06 * size)), (90, 90, 90), -1)
    return blend(img, cover, mask)


@cache
def model() -> OcclusionModel:
    return OcclusionModel.load()


def check(img: np.ndarray, face: Face) -> Occlusion:
    return model().check(img, face.landmarks)


# --- tests ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", SINGLE_FACE_PHOTOS)
def test_unoccluded_faces_are_not_flagged(name: str, faces: dict[str, tuple[np.ndarray, Face]]) -> None:
    img, face = faces[name]
    occ = check(img, face)
    assert set(occ.regions) == set(REGIONS)
    assert all(0.0 <= v <= 1.0 for v in occ.regions.values())
    assert not occ.occluded, occ
    assert occ.score < 0.3, occ


@pytest.mark.slow
@pytest.mark.parametrize("name", SINGLE_FACE_PHOTOS)
def test_hand_over_eye_and_nose_is_flagged_at_that_eye(
    name: str, faces: dict[str, tuple[np.ndarray, Face]], shared_dir: Path, detector: FaceDetector
) -> None:
    src = cv2.imread(str(shared_dir / "data/face" / SKIN_SOURCE), cv2.IMREAD_COLOR)
    skin = skin_patch(src, detector.detect(src)[0])
    img, face = faces[name]
    occ = check(hand(img, face, skin), face)
    assert occ.occluded, occ
    # The covered eye (subject's right) is flagged; the visible one is not.
    assert occ.regions["right_eye"] >= DEFAULT_THRESHOLD
    assert occ.regions["left_eye"] < DEFAULT_THRESHOLD


@pytest.mark.slow
@pytest.mark.parametrize("colour", [(225, 195, 150), (235, 238, 240)], ids=["light_blue", "white"])
@pytest.mark.parametrize("name", SINGLE_FACE_PHOTOS)
def test_surgical_mask_is_flagged_at_nose_or_mouth(
    name: str, colour: tuple[int, int, int], faces: dict[str, tuple[np.ndarray, Face]]
) -> None:
    img, face = faces[name]
    occ = check(surgical_mask(img, face, colour), face)
    assert occ.occluded, occ
    assert occ.regions["nose_mouth"] == max(occ.regions.values())
    assert occ.worst == "nose and mouth"
    assert max(occ.regions["right_eye"], occ.regions["left_eye"]) < DEFAULT_THRESHOLD


@pytest.mark.slow
@pytest.mark.parametrize("name", SINGLE_FACE_PHOTOS)
def test_sunglasses_are_flagged_at_the_eyes(name: str, faces: dict[str, tuple[np.ndarray, Face]]) -> None:
    img, face = faces[name]
    occ = check(sunglasses(img, face), face)
    assert occ.occluded, occ
    top = max(occ.regions.values())
    assert occ.regions["right_eye"] == top or occ.regions["left_eye"] == top
    assert min(occ.regions["right_eye"], occ.regions["left_eye"]) >= DEFAULT_THRESHOLD
    assert occ.regions["nose_mouth"] < DEFAULT_THRESHOLD


@pytest.mark.slow
def test_threshold_sets_the_flag(faces: dict[str, tuple[np.ndarray, Face]]) -> None:
    img, face = faces["pad_silentface/image_T1.jpg"]
    covered = sunglasses(img, face)
    occ = check(covered, face)
    assert occ.occluded
    assert not model().check(covered, face.landmarks, threshold=min(occ.score + 0.01, 1.01)).occluded


@pytest.mark.slow
def test_canonical_face_puts_the_eyes_level_and_apart(faces: dict[str, tuple[np.ndarray, Face]]) -> None:
    # A rotated copy of a photo must give (nearly) the same canonical face as the original.
    img, face = faces["real_faces_misc/face_recognition/obama.jpg"]
    h, w = img.shape[:2]
    rot = cv2.getRotationMatrix2D((w / 2, h / 2), 25.0, 1.0)
    turned = cv2.warpAffine(img, rot, (w, h))
    lm = np.hstack([face.landmarks, np.ones((5, 1), np.float32)]) @ rot.T
    a = canonical_face(img, face.landmarks).astype(np.float32)
    b = canonical_face(turned, lm).astype(np.float32)
    assert float(np.mean(np.abs(a - b))) < 6.0
    # ... and a different face position gives a different crop (the check above can fail).
    c = canonical_face(img, face.landmarks + np.float32([40.0, 0.0])).astype(np.float32)
    assert float(np.mean(np.abs(a - c))) > 15.0


def test_rejects_bad_image() -> None:
    with pytest.raises(ValueError):
        model().check(np.zeros((10, 10), np.uint8), np.zeros((5, 2)))


def test_packaged_model_reproduces_its_training_output() -> None:
    # The metadata keeps the trained graph's logits for a flat grey face; onnxruntime must give them.
    m = model()
    assert m.meta["outputs"] == list(REGIONS)
    assert 0.0 < m.meta["threshold"] < 1.0
    (logits,) = m.session.run(None, {"face": to_input(np.full((1, 96, 96, 3), 128, np.uint8))})
    np.testing.assert_allclose(logits[0], m.meta["check_logits"], atol=1e-4)
    # The chosen threshold sits at 0.5 of the region scores.
    t = m.meta["threshold"]
    assert m.offset == pytest.approx(np.log(t / (1 - t)))


def test_refuses_a_model_without_metadata(tmp_path: Path) -> None:
    import onnx

    from verilive.models.store import packaged_path

    proto = onnx.load(str(packaged_path("occlusion")))
    assert any(p.key == META_KEY and json.loads(p.value)["threshold"] for p in proto.metadata_props)
    del proto.metadata_props[:]
    path = tmp_path / "bare.onnx"
    onnx.save(proto, str(path))
    with pytest.raises(ValueError, match="metadata"):
        OcclusionModel.load(path)
