"""Face engine without HTTP: each validation code triggered by an image made to trigger it, and the
order of precedence (docs/face.md#validation)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from verilive.config import Settings
from verilive.face.engine import (
    ErrorCode,
    FaceEngine,
    ImageResult,
    Validation,
    face_extent,
    sigmoid,
)
from verilive.face.image import decode_image
from verilive.face.pipelines import Calibration, Domain
from verilive.models.sessions import ModelRegistry

OBAMA = "data/face/real_faces_misc/face_recognition/obama.jpg"  # frontal, face box ~234x331 in 910x1137
GROUP = "data/face/real_faces_misc/insightface/t1.jpg"
PAD = "data/face/pad_silentface"


@pytest.fixture(scope="module")
def engine(models_settings: Settings) -> FaceEngine:
    return FaceEngine.from_registry(ModelRegistry(models_settings), models_settings)


@pytest.fixture(scope="module")
def portrait(shared_dir: Path) -> np.ndarray:
    img = cv2.imread(str(shared_dir / OBAMA))
    assert img is not None
    return img


def png(img: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".png", img)
    assert ok
    return buf.tobytes()


def code_of(engine: FaceEngine, img: np.ndarray, domain: Domain = Domain.GENERAL) -> str | None:
    return engine.check(png(img), domain=domain).error_code


def canvas(h: int, w: int) -> np.ndarray:
    return np.full((h, w, 3), 200, np.uint8)


@pytest.mark.slow
def test_clean_portrait_passes(engine: FaceEngine, portrait: np.ndarray) -> None:
    r = engine.check(png(portrait))
    assert r.ok, r.error
    assert r.score is not None
    assert r.probability == pytest.approx(sigmoid(r.score + engine.offset("ensemble", Calibration.REGULAR)))
    assert r.quality is not None and 0.0 <= r.quality <= 1.0
    assert (r.width, r.height) == (910, 1137)


@pytest.mark.slow
def test_one_image_gets_the_same_score_with_the_backbone_on_the_second_worker(
    engine: FaceEngine, portrait: np.ndarray
) -> None:
    """The shipped ensemble runs the EfficientNet-Lite0 branch; for one image it runs beside the
    other branches (assess, check) and must give exactly what the serial path gives."""
    assert "backbone" in engine.fusion["ensemble"].needs and engine.backbone is not None
    data = png(portrait)
    _, checked = engine._prepare(data, Domain.GENERAL)
    serial = float(engine.raw_scores([checked], "ensemble")[0])  # type: ignore[list-item]
    assert engine.assess(data).score == pytest.approx(serial, abs=1e-9)
    assert engine.check(data).score == pytest.approx(serial, abs=1e-9)
    # In a batch (split across the workers by images, not branches) the same image scores the same.
    batch = engine.check_images([data] * 5)
    assert all(r.score == pytest.approx(serial, abs=1e-6) for r in batch)


@pytest.mark.slow
def test_face_not_found(engine: FaceEngine) -> None:
    assert code_of(engine, canvas(480, 640)) == ErrorCode.FACE_NOT_FOUND
    noise = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    assert code_of(engine, noise) == ErrorCode.FACE_NOT_FOUND


@pytest.mark.slow
def test_too_many_faces(engine: FaceEngine, shared_dir: Path, portrait: np.ndarray) -> None:
    group = cv2.imread(str(shared_dir / GROUP))
    assert len(engine.detector.detect(group)) == 6
    assert code_of(engine, group) == ErrorCode.TOO_MANY_FACES
    assert code_of(engine, np.hstack([portrait, portrait])) == ErrorCode.TOO_MANY_FACES
    # A much smaller face beside the main one (a poster, a passer-by) does not count.
    small = cv2.resize(portrait, None, fx=0.25, fy=0.25)
    img = portrait.copy()
    img[-small.shape[0] :, -small.shape[1] :] = small
    assert code_of(engine, img) != ErrorCode.TOO_MANY_FACES


@pytest.mark.slow
def test_face_too_small(engine: FaceEngine, portrait: np.ndarray) -> None:
    img = canvas(1137, 910)
    small = cv2.resize(portrait, None, fx=0.15, fy=0.15)  # face ~50 px high
    y, x = 500, 400
    img[y : y + small.shape[0], x : x + small.shape[1]] = small
    r = engine.check(png(img))
    assert r.error_code == ErrorCode.FACE_TOO_SMALL, r.error
    assert "too small" in (r.error or "")
    # Smaller relative to the image only: the relative rule.
    v = Validation(min_face_px=10, min_interpupillary_px=5)
    big = np.full((4000, 4000, 3), 200, np.uint8)
    half = cv2.resize(portrait, None, fx=0.5, fy=0.5)
    big[1800 : 1800 + half.shape[0], 1800 : 1800 + half.shape[1]] = half
    assert (
        FaceEngine(
            engine.detector,
            engine.models,
            engine.facepad,
            validation=v,
            backbone=engine.backbone,
        )
        .check(cv2.imencode(".jpg", big, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes())
        .error_code
        == ErrorCode.FACE_TOO_SMALL
    )
    # A flat 16 Mpx PNG carries too few bytes for its pixels to be decoded (docs/security.md).
    assert engine.check(png(big)).error_code == ErrorCode.FAILED_TO_READ_IMAGE


@pytest.mark.slow
@pytest.mark.parametrize("shift", [450, 500])
def test_face_cropped(engine: FaceEngine, portrait: np.ndarray, shift: int) -> None:
    # The face spans x 373..607: cutting 450 or 500 px off the left cuts into it.
    assert code_of(engine, portrait[:, shift:]) == ErrorCode.FACE_CROPPED
    assert code_of(engine, portrait[:, : 910 - shift + 60][:, ::-1].copy()) == ErrorCode.FACE_CROPPED


@pytest.mark.slow
def test_face_cropped_real_partial_faces(engine: FaceEngine, shared_dir: Path) -> None:
    for name in ("obama_partial_face.jpg", "obama_partial_face2.jpg"):
        data = (shared_dir / "data/face/real_faces_misc/face_recognition" / name).read_bytes()
        assert engine.check(data).error_code == ErrorCode.FACE_CROPPED


@pytest.mark.slow
def test_face_close_to_border(engine: FaceEngine, portrait: np.ndarray) -> None:
    face = engine.detector.detect(portrait)[0]
    x1 = face_extent(face)[0]
    width = face_extent(face)[2] - x1
    # The default margin is 0 (issue 47): a face 10 px from the edge is judged ...
    near = portrait[:, int(x1) - 10 :]
    assert code_of(engine, near) is None
    # ... one that reaches past it by 5 % of its width is not (by more than 10 %: FACE_CROPPED).
    past = portrait[:, int(x1 + 0.05 * width) :]
    assert code_of(engine, past) == ErrorCode.FACE_CLOSE_TO_BORDER
    assert code_of(engine, past, Domain.DESKTOP) == ErrorCode.FACE_CLOSE_TO_BORDER
    # An operator's margin: 0.15 refuses the near face; DESKTOP halves it, so a face 10 % of its width
    # from the edge passes there only.
    strict = FaceEngine(
        engine.detector,
        engine.models,
        engine.facepad,
        validation=Validation(border_margin=0.15),
        backbone=engine.backbone,
        occlusion=engine.occlusion,
    )
    assert code_of(strict, near) == ErrorCode.FACE_CLOSE_TO_BORDER
    tenth = portrait[:, int(x1 - 0.1 * width) :]
    assert code_of(strict, tenth) == ErrorCode.FACE_CLOSE_TO_BORDER
    assert code_of(strict, tenth, Domain.DESKTOP) is None


@pytest.mark.slow
@pytest.mark.parametrize("angle", [-50, 50])
def test_face_angle_too_large(engine: FaceEngine, portrait: np.ndarray, angle: float) -> None:
    big = cv2.copyMakeBorder(portrait, 300, 300, 300, 300, cv2.BORDER_CONSTANT, value=(200, 200, 200))
    h, w = big.shape[:2]
    m = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.0)
    rotated = cv2.warpAffine(big, m, (w, h), borderValue=(200, 200, 200))
    r = engine.check(png(rotated))
    assert r.error_code == ErrorCode.FACE_ANGLE_TOO_LARGE, r.error
    assert "roll" in (r.error or "")
    # A small tilt is fine.
    m = cv2.getRotationMatrix2D((w / 2, h / 2), angle / 5, 1.0)
    assert engine.check(png(cv2.warpAffine(big, m, (w, h), borderValue=(200, 200, 200)))).ok


@pytest.mark.slow
def test_face_is_occluded(engine: FaceEngine, portrait: np.ndarray) -> None:
    face = engine.detector.detect(portrait)[0]
    lm = face.landmarks
    img = portrait.copy()
    d = float(np.hypot(*(lm[1] - lm[0])))
    for eye in lm[:2]:  # dark glasses
        cv2.ellipse(
            img, (int(eye[0]), int(eye[1])), (int(0.42 * d), int(0.3 * d)), 0, 0, 360, (20, 20, 20), -1
        )
    cv2.line(
        img, tuple(int(v) for v in lm[0]), tuple(int(v) for v in lm[1]), (20, 20, 20), max(2, int(d / 15))
    )
    r = engine.check(png(img))
    assert r.error_code == ErrorCode.FACE_IS_OCCLUDED, r.error


@pytest.mark.slow
def test_image_too_small(engine: FaceEngine, portrait: np.ndarray) -> None:
    small = cv2.resize(portrait, None, fx=0.2, fy=0.2)  # 182x227: the face (~66 px) passes every face rule
    r = engine.check(png(small))
    assert r.error_code == ErrorCode.IMAGE_TOO_SMALL, r.error


@pytest.mark.slow
def test_precedence(engine: FaceEngine, portrait: np.ndarray) -> None:
    # Too small and cropped at once: FACE_TOO_SMALL comes first.
    tiny = cv2.resize(portrait[:, 450:], None, fx=0.12, fy=0.12)
    assert code_of(engine, tiny) == ErrorCode.FACE_TOO_SMALL
    # Two faces, one cut off: TOO_MANY_FACES comes first.
    assert code_of(engine, np.hstack([portrait, portrait[:, :500]])) == ErrorCode.TOO_MANY_FACES


@pytest.mark.slow
def test_unreadable_input_is_a_rejection_not_an_exception(engine: FaceEngine) -> None:
    for data in (b"", b"GIF89a....", b"\xff\xd8\xff\xe0" + b"\0" * 100):
        r = engine.check(data)
        assert isinstance(r, ImageResult) and r.error_code == ErrorCode.FAILED_TO_READ_IMAGE


@pytest.mark.slow
def test_calibration_offsets_order_the_probabilities(engine: FaceEngine, shared_dir: Path) -> None:
    data = (shared_dir / PAD / "image_F2.jpg").read_bytes()
    res = {c: engine.check(data, calibration=c) for c in Calibration}
    assert len({r.score for r in res.values()}) == 1
    assert res[Calibration.HARDENED].probability < res[Calibration.REGULAR].probability  # type: ignore[operator]
    assert res[Calibration.REGULAR].probability < res[Calibration.SOFT].probability  # type: ignore[operator]
    s = res[Calibration.REGULAR].score
    assert s is not None
    for c, r in res.items():
        assert r.probability == pytest.approx(sigmoid(s + engine.offset("ensemble", c)))


@pytest.mark.slow
def test_batch_equals_single(engine: FaceEngine, shared_dir: Path) -> None:
    datas = [(shared_dir / PAD / n).read_bytes() for n in ("image_T1.jpg", "image_F2.jpg", "image_T2.jpg")]
    batch = engine.check_images([*datas, *datas, b"junk"])  # 6 valid: the models' batch is split
    for data, r in zip(datas + datas, batch, strict=False):
        assert r.score == pytest.approx(engine.check(data).score, abs=1e-4)
    assert batch[-1].error_code == ErrorCode.FAILED_TO_READ_IMAGE


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientations_match_pillow(orientation: int, portrait: np.ndarray) -> None:
    from io import BytesIO

    from PIL import Image, ImageOps

    small = cv2.resize(portrait, (91, 57))[:, :, ::-1]  # RGB, not square so rotations show
    im = Image.fromarray(np.ascontiguousarray(small))
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = BytesIO()
    im.save(buf, format="JPEG", exif=exif, quality=95)
    data = buf.getvalue()
    want = np.asarray(ImageOps.exif_transpose(Image.open(BytesIO(data))).convert("RGB"))[:, :, ::-1]
    got = decode_image(data).bgr
    assert got.shape == want.shape
    assert np.mean(np.abs(got.astype(int) - want.astype(int))) < 3  # two JPEG decoders
