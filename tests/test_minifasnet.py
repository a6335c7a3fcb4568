"""MiniFASNetV2 / MiniFASNetV1SE: own PyTorch modules, ONNX export, crop rule and runtime wrapper.

The golden files were computed with the unmodified upstream code of Silent-Face-Anti-Spoofing at commit
b6d5f04 (see ../shared/models/README.md, "MiniFASNet"). Tests of the PyTorch modules and of a fresh
conversion skip when torch (the convert extra) is missing; everything else runs on the installed models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from verilive.config import Settings
from verilive.face.minifasnet import (
    SCALES,
    V1SE,
    V2,
    MiniFASNet,
    crop,
    crop_box,
    retinaface_like_box,
)
from verilive.models.sessions import ModelRegistry
from verilive.models.store import ModelStore
from verilive.numeric import softmax

ARCH = {V2: "MiniFASNetV2", V1SE: "MiniFASNetV1SE"}
CHECKPOINT = {
    V2: "models/upstream/2.7_80x80_MiniFASNetV2.pth",
    V1SE: "models/upstream/4_0_0_80x80_MiniFASNetV1SE.pth",
}
LOGIT_ATOL = 1e-4
INTERMEDIATES = ["conv1", "conv_23", "conv_3", "conv_4", "conv_5", "conv_6_dw", "conv_6_flatten", "prob"]
MODELS = [V2, V1SE]


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def load_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def golden(shared_dir: Path) -> dict[str, np.ndarray]:
    return load_npz(shared_dir / "models/golden/minifasnet_golden.npz")


@pytest.fixture(scope="module")
def crop_golden(shared_dir: Path) -> dict[str, np.ndarray]:
    return load_npz(shared_dir / "models/golden/minifasnet_crop_golden.npz")


@pytest.fixture(scope="module")
def torch_models(shared_dir: Path) -> dict[str, Any]:
    pytest.importorskip("torch")
    from verilive.models.convert.minifasnet import load_model

    return {mid: load_model(shared_dir / CHECKPOINT[mid], ARCH[mid]) for mid in MODELS}


@pytest.fixture(scope="module")
def fresh_sessions(shared_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Sessions on a fresh conversion with the current converter code (it verifies itself against torch)."""
    pytest.importorskip("torch")
    import onnxruntime as ort

    from verilive.models.convert.minifasnet import convert_v1se, convert_v2

    out = tmp_path_factory.mktemp("minifasnet")
    sessions = {}
    for mid, conv in ((V2, convert_v2), (V1SE, convert_v1se)):
        dest = out / f"{mid}.onnx"
        conv(shared_dir / CHECKPOINT[mid], dest)
        sessions[mid] = ort.InferenceSession(str(dest), providers=["CPUExecutionProvider"])
    return sessions


@pytest.fixture(scope="module")
def nets(shared_dir: Path) -> dict[str, MiniFASNet]:
    """The wrappers on the models installed by the store (pulled from the shared mirror when missing)."""
    settings = Settings()
    store = ModelStore(settings.models_dir, mirror=settings.model_mirror or shared_dir / "models/upstream")
    for mid in MODELS:
        store.pull(mid)
    registry = ModelRegistry(settings, ids=MODELS, store=store)
    return {mid: MiniFASNet.from_registry(registry, mid) for mid in MODELS}


def golden_crops(golden: dict[str, np.ndarray], mid: str) -> np.ndarray:
    """Rows 0-3 of the golden model inputs as (4, 80, 80, 3) uint8 crops (they are whole numbers)."""
    x = golden[f"{ARCH[mid]}_inputs"]
    crops = x.transpose(0, 2, 3, 1).astype(np.uint8)
    np.testing.assert_array_equal(crops.transpose(0, 3, 1, 2).astype(np.float32), x)
    return crops


# --- (a) PyTorch modules --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mid", MODELS)
def test_torch_module_reproduces_golden_logits(
    mid: str, golden: dict[str, np.ndarray], torch_models: dict[str, Any]
) -> None:
    import torch

    x = torch.from_numpy(golden[f"{ARCH[mid]}_inputs"])
    with torch.no_grad():
        rows = np.concatenate([torch_models[mid](x[i : i + 1]).numpy() for i in range(4)])
    assert rows.shape == (4, 3)
    assert max_abs(rows, golden[f"{ARCH[mid]}_logits"]) <= LOGIT_ATOL
    assert max_abs(rows, golden[f"{ARCH[mid]}_logits_float64"]) <= LOGIT_ATOL


@pytest.mark.slow
@pytest.mark.parametrize("mid", MODELS)
def test_torch_module_reproduces_intermediates(
    mid: str, shared_dir: Path, torch_models: dict[str, Any]
) -> None:
    import torch

    gold = load_npz(shared_dir / "models/golden/minifasnet_intermediates.npz")
    model = torch_models[mid]
    modules = dict(model.named_modules())
    acts: dict[str, np.ndarray] = {}
    hooks = [
        modules[name].register_forward_hook(
            lambda _m, _i, out, name=name: acts.__setitem__(name, out[0].detach().numpy())
        )
        for name in INTERMEDIATES
    ]
    try:
        with torch.no_grad():
            model(torch.from_numpy(gold[f"{ARCH[mid]}_input"])[None])
    finally:
        for h in hooks:
            h.remove()
    for name in INTERMEDIATES:
        want = gold[f"{ARCH[mid]}.{name}"]
        assert acts[name].shape == want.shape, name
        assert max_abs(acts[name], want) <= 1e-4, name


def test_checkpoint_of_the_other_architecture_is_refused(shared_dir: Path) -> None:
    pytest.importorskip("torch")
    from verilive.errors import ModelError
    from verilive.models.convert.minifasnet import load_model

    # Same stage layout, different widths and no SE modules: a strict load must fail, not half-load.
    with pytest.raises(ModelError, match="not a MiniFASNetV2 checkpoint"):
        load_model(shared_dir / CHECKPOINT[V1SE], "MiniFASNetV2")


# --- (b) ONNX export -------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mid", MODELS)
def test_fresh_onnx_matches_golden(mid: str, golden: dict[str, np.ndarray], fresh_sessions: Any) -> None:
    sess = fresh_sessions[mid]
    (inp,) = sess.get_inputs()
    (out,) = sess.get_outputs()
    assert inp.name == "input" and inp.type == "tensor(float)"
    assert isinstance(inp.shape[0], str) and inp.shape[1:] == [3, 80, 80]
    assert out.name == "logits" and out.shape[1] == 3
    x = golden[f"{ARCH[mid]}_inputs"]
    rows = np.concatenate([sess.run(["logits"], {"input": x[i : i + 1]})[0] for i in range(4)])
    assert max_abs(rows, golden[f"{ARCH[mid]}_logits"]) <= LOGIT_ATOL


@pytest.mark.slow
@pytest.mark.parametrize("mid", MODELS)
def test_installed_model_matches_golden(
    mid: str, golden: dict[str, np.ndarray], nets: dict[str, MiniFASNet]
) -> None:
    net = nets[mid]
    crops = golden_crops(golden, mid)
    rows = np.concatenate([net.logits(crops[i : i + 1]) for i in range(4)])
    assert rows.dtype == np.float32 and rows.shape == (4, 3)
    assert max_abs(rows, golden[f"{ARCH[mid]}_logits"]) <= LOGIT_ATOL
    assert max_abs(softmax(rows), golden[f"{ARCH[mid]}_softmax"]) <= 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("mid", MODELS)
def test_dynamic_batch_equals_single_runs(
    mid: str, golden: dict[str, np.ndarray], nets: dict[str, MiniFASNet]
) -> None:
    net = nets[mid]
    crops = golden_crops(golden, mid)
    batch = net.logits(crops)
    singles = np.concatenate([net.logits(crops[i : i + 1]) for i in range(4)])
    assert batch.shape == (4, 3)
    assert max_abs(batch, singles) <= 1e-5
    # Order is kept: reversing the batch reverses the rows.
    assert max_abs(net.logits(crops[::-1]), singles[::-1]) <= 1e-5


@pytest.mark.slow
def test_combined_decision_matches_upstream(
    golden: dict[str, np.ndarray], nets: dict[str, MiniFASNet]
) -> None:
    # test.py sums the two softmaxes; label = argmax, score = sum[label] / 2.
    total = sum(softmax(nets[mid].logits(golden_crops(golden, mid))) for mid in MODELS)
    labels = np.argmax(total, axis=1)
    np.testing.assert_array_equal(labels, golden["combined_label"])
    assert max_abs(total[np.arange(4), labels] / 2, golden["combined_score"]) <= 1e-5


# --- (c) crop rule ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mid", MODELS)
def test_crop_boxes_and_crops_match_upstream(mid: str, crop_golden: dict[str, np.ndarray]) -> None:
    arch = ARCH[mid]
    assert float(crop_golden[f"{arch}_scale"]) == pytest.approx(SCALES[mid])
    for i in range(3):
        image = crop_golden[f"image{i}_bgr_uint8"]
        bbox = crop_golden["bbox_xywh"][i]
        box = crop_box(image.shape[1], image.shape[0], bbox, SCALES[mid])
        assert box == tuple(int(v) for v in crop_golden[f"{arch}_crop_box_ltrb"][i]), i
        assert box == crop_box(image.shape[1], image.shape[0], tuple(int(v) for v in bbox), SCALES[mid])
        got = crop(image, bbox, SCALES[mid])
        assert got.shape == (80, 80, 3) and got.dtype == np.uint8
        # Another OpenCV build may round a bilinear sample differently; measured: identical.
        assert max_abs(got, crop_golden[f"{arch}_crop_bgr_uint8"][i]) <= 1, i


def test_crop_box_rule_by_hand() -> None:
    # Centred, no clamping: 2.7 x 100 = 270 around the centre (450, 450).
    assert crop_box(1000, 1000, (400, 400, 100, 100), 2.7) == (315, 315, 585, 585)
    # Near the top-left corner the box is shifted into the image, keeping its size.
    assert crop_box(1000, 1000, (0, 10, 100, 100), 2.7) == (0, 0, 270, 270)
    # Near the bottom-right corner: right = W - 1, left shifted by the overhang.
    assert crop_box(1000, 800, (900, 700, 100, 100), 2.0) == (799, 599, 999, 799)
    # Scale clamped by the width: (W - 1) / w = 2.0, so the crop spans the whole width.
    left, top, right, bottom = crop_box(201, 1000, (50, 400, 100, 100), 4.0)
    assert (left, right) == (0, 200) and bottom - top == 200
    # int() truncation of non-integer corners: centre 50.5, half size 38.25 -> 12.25 and 88.75.
    assert crop_box(1000, 1000, (25, 25, 51, 51), 1.5) == (12, 12, 88, 88)
    with pytest.raises(ValueError, match="positive"):
        crop_box(100, 100, (10, 10, 0, 20), 2.7)


def test_crop_is_the_resized_inclusive_patch() -> None:
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (300, 200, 3), dtype=np.uint8)
    left, top, right, bottom = crop_box(200, 300, (60, 100, 40, 40), 2.0)
    patch = image[top : bottom + 1, left : right + 1]
    assert patch.shape == (81, 81, 3)  # inclusive: 40 * 2 + 1 pixels
    expected = cv2.resize(patch, (80, 80), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(crop(image, (60, 100, 40, 40), 2.0), expected)
    np.testing.assert_array_equal(crop(image, (60, 100, 40, 40), 2.0, size=32).shape, (32, 32, 3))
    with pytest.raises(ValueError, match="BGR"):
        crop(image[..., 0], (60, 100, 40, 40), 2.0)


# --- (d) runtime wrapper ---------------------------------------------------------------------------------


def test_live_log_odds() -> None:
    logits = np.array([[-4.3636, 4.4966, -0.1358], [0.5834, -3.5567, 2.975], [0.0, 0.0, 0.0]])
    p = softmax(logits)[:, 1]
    np.testing.assert_allclose(MiniFASNet.live_log_odds(logits), np.log(p) - np.log1p(-p), atol=1e-9)
    assert MiniFASNet.live_log_odds(logits)[2] == pytest.approx(np.log(0.5))
    # Stays finite where the softmax saturates to exactly 0 or 1.
    extreme = MiniFASNet.live_log_odds(np.array([[0.0, 1000.0, 0.0], [0.0, -1000.0, 0.0]]))
    np.testing.assert_allclose(extreme, [1000.0 - np.log(2.0), -1000.0 - np.log(2.0)])
    with pytest.raises(ValueError, match="logits of shape"):
        MiniFASNet.live_log_odds(np.zeros(3))


@pytest.mark.slow
def test_wrapper_attributes_and_input_checks(nets: dict[str, MiniFASNet]) -> None:
    assert (nets[V2].model_id, nets[V2].scale) == ("minifasnet_v2", 2.7)
    assert (nets[V1SE].model_id, nets[V1SE].scale) == ("minifasnet_v1se", 4.0)
    assert nets[V2].logits(np.zeros((0, 80, 80, 3), np.uint8)).shape == (0, 3)
    with pytest.raises(ValueError, match="crops of shape"):
        nets[V2].logits(np.zeros((80, 80, 3), np.uint8))
    with pytest.raises(ValueError, match="crops of shape"):
        nets[V2].logits(np.zeros((1, 3, 80, 80), np.uint8))
    with pytest.raises(ValueError, match="unknown MiniFASNet"):
        MiniFASNet(nets[V2].session, "campplus")


@pytest.mark.slow
@pytest.mark.parametrize("mid", MODELS)
def test_live_image_scores_above_printed_attack(
    mid: str, shared_dir: Path, golden: dict[str, np.ndarray], nets: dict[str, MiniFASNet]
) -> None:
    folder = shared_dir / "data/face/pad_silentface"
    net = nets[mid]
    odds = {}
    # Golden bboxes: rows 0 and 1 of the golden set are these two images (upstream RetinaFace boxes).
    for name, bbox in (("image_T1.jpg", (106, 147, 207, 213)), ("image_F1.jpg", (178, 136, 223, 225))):
        image = cv2.imread(str(folder / name))  # applies the EXIF rotation, as upstream's decode does
        assert image is not None and image.shape == (640, 480, 3)
        logits = net.logits(net.crop(image, bbox)[None])
        odds[name] = float(net.live_log_odds(logits)[0])
    # Measured: V2 4.62 vs -6.62, V1SE 5.78 vs -1.79.
    assert odds["image_T1.jpg"] > 0 > odds["image_F1.jpg"], odds
    assert odds["image_T1.jpg"] - odds["image_F1.jpg"] > 5.0, odds


# --- (e) CenterFace boxes -> RetinaFace-like boxes -------------------------------------------------------


def xywh_iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    iw = max(0.0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
    return iw * ih / (a[2] * a[3] + b[2] * b[3] - iw * ih)


def test_retinaface_like_box_by_hand() -> None:
    # 100 x 130 box centred at (150, 165): width x1.19, height x0.91, centre 0.06 x 130 = 7.8 px lower.
    assert retinaface_like_box((100.0, 100.0, 200.0, 230.0)) == (90, 114, 119, 118)
    assert retinaface_like_box(np.array([100, 100, 200, 230])) == (90, 114, 119, 118)
    with pytest.raises(ValueError, match="positive"):
        retinaface_like_box((10, 10, 10, 40))


def test_centerface_boxes_adapted_towards_upstream_boxes(
    crop_golden: dict[str, np.ndarray], shared_dir: Path
) -> None:
    detector_mod = pytest.importorskip("verilive.face.detector")
    settings = Settings()
    store = ModelStore(settings.models_dir, mirror=settings.model_mirror or shared_dir / "models/upstream")
    store.pull("centerface")
    detector = detector_mod.FaceDetector.from_registry(
        ModelRegistry(settings, ids=["centerface"], store=store)
    )
    for i in range(3):
        image = crop_golden[f"image{i}_bgr_uint8"]
        faces = detector.detect(image)
        assert len(faces) == 1, i
        x1, y1, x2, y2 = faces[0].box
        upstream = tuple(float(v) for v in crop_golden["bbox_xywh"][i])
        raw = xywh_iou((x1, y1, x2 - x1, y2 - y1), upstream)
        adapted = xywh_iou(tuple(float(v) for v in retinaface_like_box(faces[0].box)), upstream)
        # Measured: raw 0.74 / 0.71 / 0.79, adapted 0.91 / 0.93 / 0.84.
        assert adapted > raw + 0.04 and adapted >= 0.8, (i, raw, adapted)
