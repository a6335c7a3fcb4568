"""Issue 47: a live photo of a collection no model trained on stays live at REGULAR when softened the way
phones and messengers soften photos, and a print of it, made here, scores below it.

The photos are the `face_recognition` portraits of ../shared/data (no branch, head or fusion trained on
them; the calibrations only count them among the live photos they are set on). The print is simulated:
the photo squeezed into a paper's tonal range and gamut, with paper grain and a halftone screen, then held
in front of a room at a slight angle and photographed again (perspective, camera blur, JPEG).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest

from verilive.config import Settings
from verilive.face.engine import FaceEngine
from verilive.models.sessions import ModelRegistry

pytestmark = pytest.mark.slow

PHOTOS = [
    "data/face/real_faces_misc/face_recognition/biden.jpg",
    "data/face/real_faces_misc/face_recognition/obama.jpg",
]


@pytest.fixture(scope="module")
def engine(models_settings: Settings) -> FaceEngine:
    return FaceEngine.from_registry(ModelRegistry(models_settings), models_settings)


def jpeg(img: np.ndarray, quality: int = 92) -> bytes:
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.tobytes()


def blur(img: np.ndarray) -> np.ndarray:
    return cv2.GaussianBlur(img, (0, 0), 1.5)


def downscale(img: np.ndarray) -> np.ndarray:
    h, w = img.shape[:2]
    return cv2.resize(img, (w // 2, h // 2), interpolation=cv2.INTER_AREA)


def recompress(img: np.ndarray) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(jpeg(img, 35), np.uint8), cv2.IMREAD_COLOR)


def beauty(img: np.ndarray) -> np.ndarray:
    """A skin-smoothing filter as selfie apps apply: edge-preserving smoothing, a little brighter."""
    smooth = cv2.bilateralFilter(img, 9, 40, 9)
    return cv2.convertScaleAbs(smooth, alpha=1.05, beta=8)


SOFTENINGS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "blur": blur,
    "downscale": downscale,
    "jpeg35": recompress,
    "beauty": beauty,
}


def printed(img: np.ndarray, seed: int = 47) -> np.ndarray:
    """The photo printed on paper and photographed in a room."""
    rng = np.random.default_rng(seed)
    h, w = img.shape[:2]
    x = img.astype(np.float32)
    # Paper's range: no deep black, no pure white, less saturated colour.
    grey = x.mean(axis=2, keepdims=True)
    x = grey + 0.7 * (x - grey)
    x = 28.0 + 0.78 * x
    # Halftone screen and paper grain.
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    x *= (1.0 + 0.05 * np.sin(xx * 1.9) * np.sin(yy * 1.9))[..., None]
    x += rng.normal(0.0, 4.0, (h, w, 1)).astype(np.float32)
    paper = np.clip(x, 0, 255).astype(np.uint8)
    # Held in a room: the sheet at 80 % of the frame, turned slightly in depth, on a wall and desk.
    room = np.empty_like(img)
    room[:] = (150, 160, 170)
    room[int(0.7 * h) :] = (90, 110, 130)
    src = np.float32([[0, 0], [w, 0], [w, h], [0, h]])
    m = 0.1
    dst = np.float32(
        [[m * w, 0.08 * h], [(1 - m) * w, 0.12 * h], [(1 - m + 0.02) * w, 0.92 * h], [m * w, 0.9 * h]]
    )
    warp = cv2.getPerspectiveTransform(src, dst)
    sheet = cv2.warpPerspective(paper, warp, (w, h))
    mask = cv2.warpPerspective(np.full((h, w), 255, np.uint8), warp, (w, h))
    out = np.where(mask[..., None] > 127, sheet, room)
    out = cv2.GaussianBlur(out, (0, 0), 0.8)
    return cv2.imdecode(np.frombuffer(jpeg(out, 85), np.uint8), cv2.IMREAD_COLOR)


@pytest.mark.parametrize("name", PHOTOS)
def test_softened_live_photo_stays_live_and_a_print_of_it_scores_below(
    engine: FaceEngine, shared_dir: Path, name: str
) -> None:
    img = cv2.imread(str(shared_dir / name))
    assert img is not None
    original = engine.check(jpeg(img))
    assert original.ok and original.probability is not None and original.probability >= 0.5, original
    for kind, soften in SOFTENINGS.items():
        r = engine.check(jpeg(soften(img)))
        assert r.ok, (kind, r.error_code, r.error)
        assert r.probability is not None and r.probability >= 0.5, (kind, r.probability)
    p = engine.check(jpeg(printed(img)))
    assert p.ok, (p.error_code, p.error)
    assert p.score is not None and original.score is not None
    # Below the live photo it was printed from (at REGULAR one of the two prints still passes: the
    # calibration accepts about 30 % of attacks of collections it never saw; docs/model-facepad.md).
    assert p.score < original.score, (p.score, original.score)
