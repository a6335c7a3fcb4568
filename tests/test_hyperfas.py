"""HyperFAS: converter (own PyTorch module, ONNX export), crop rule and runtime wrapper.

The reference numbers in tests/fixtures/hyperfas_keras_golden.json were computed by Keras itself
(tensorflow-cpu 2.21.0 + Keras 3.15.1 loading the unchanged upstream .h5; docs/model-hyperfas.md). The images
are read from ../shared at run time. Tests of the PyTorch module and of a fresh conversion skip when torch or
h5py (the convert extra) is missing; everything else runs on the installed model.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import cv2
import numpy as np
import pytest
from train.hyperfas import (
    FEATURE_DIM,
    INPUT_SIZE,
    MODEL_ID,
    UPSTREAM_THRESHOLD,
    HyperFAS,
    crop,
    crop_box,
    preprocess,
)

from verilive.config import Settings
from verilive.models.manifest import default_manifest
from verilive.models.sessions import ModelRegistry
from verilive.models.store import ModelStore

SOURCE = "models/upstream/hyperfas_fas.h5"
GOLDEN = Path(__file__).parent / "fixtures/hyperfas_keras_golden.json"
IMAGES = "data/face/pad_silentface"
P_ATOL = 1e-5  # P(live); measured ONNX vs Keras: 6e-8
F_ATOL = 1e-4  # features (|values| up to 10); measured ONNX vs Keras: 4.8e-6
SUM_ATOL = 1e-3  # sum and L2 norm of all 1024 features


def max_abs(a: Any, b: Any) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def check_input() -> np.ndarray:
    """The manifest's check input (seeded NHWC draw in [-1, 1)), which the golden check rows are for."""
    spec = default_manifest().get(MODEL_ID).check
    assert spec is not None
    return spec.feeds()["input"]


def assert_rows_match(
    p_live: np.ndarray, features: np.ndarray, rows: list[dict[str, Any]], step: int
) -> None:
    assert p_live.shape == (len(rows),) and features.shape == (len(rows), FEATURE_DIM)
    for i, row in enumerate(rows):
        assert abs(float(p_live[i]) - row["p_live"]) <= P_ATOL, (i, p_live[i], row["p_live"])
        assert max_abs(features[i, ::step], row["features_every_7th"]) <= F_ATOL, i
        f = features[i].astype(np.float64)
        assert abs(f.sum() - row["features_sum"]) <= SUM_ATOL, i
        assert abs(np.linalg.norm(f) - row["features_l2"]) <= SUM_ATOL, i


@pytest.fixture(scope="module")
def torch_model(shared_dir: Path) -> Any:
    pytest.importorskip("torch")
    pytest.importorskip("h5py")
    from verilive.models.convert.hyperfas import load_model

    return load_model(shared_dir / SOURCE)


@pytest.fixture(scope="module")
def fresh_onnx(shared_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh conversion with the current converter code (it verifies itself against torch)."""
    pytest.importorskip("torch")
    pytest.importorskip("h5py")
    from verilive.models.convert.hyperfas import convert

    dest = tmp_path_factory.mktemp("hyperfas") / "hyperfas.onnx"
    convert(shared_dir / SOURCE, dest)
    return dest


@pytest.fixture(scope="module")
def net(shared_dir: Path) -> HyperFAS:
    """The wrapper on the model installed by the store (pulled from the shared mirror when missing)."""
    settings = Settings()
    store = ModelStore(settings.models_dir, mirror=settings.model_mirror or shared_dir / "models/upstream")
    store.pull(MODEL_ID)
    return HyperFAS.from_registry(ModelRegistry(settings, ids=[MODEL_ID], store=store))


def read_image(shared_dir: Path, name: str) -> np.ndarray:
    image = cv2.imread(str(shared_dir / IMAGES / name))
    assert image is not None, name
    return image


# --- (a) the Keras file and the PyTorch module ------------------------------------------------------------


def test_same_pads_follow_tensorflow() -> None:
    pytest.importorskip("torch")
    from verilive.models.convert.hyperfas import same_pads

    # Stride 2 on an even side: the extra pixel goes after (right/bottom), none before.
    assert same_pads(224, 3, 2) == (0, 1)
    assert same_pads(14, 3, 2) == (0, 1)
    # Stride 2 on an odd side (the 7x7 map of the last stage) pads one pixel on both sides.
    assert same_pads(7, 3, 2) == (1, 1)
    assert same_pads(112, 3, 1) == (1, 1)
    assert same_pads(4, 1, 1) == (0, 0)


def test_config_parses_to_the_documented_layout(shared_dir: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("h5py")
    from verilive.models.convert.hyperfas import parse_config, read_h5

    config, weights = read_h5(shared_dir / SOURCE)
    arch = parse_config(config)
    assert arch.stem.conv.out_ch == 16 and arch.stem.conv.stride == 2 and arch.stem.conv.pads == (0, 1, 0, 1)
    assert len(arch.blocks) == 13
    assert [pw.conv.out_ch for _, pw in arch.blocks] == [32, 64, 64, 128, 128, *[256] * 6, 512, 512]
    strided = [i for i, (dw, _) in enumerate(arch.blocks) if dw.conv.stride == 2]
    assert strided == [1, 3, 5, 11, 12]
    assert [arch.blocks[i][0].conv.pads for i in strided] == [(0, 1, 0, 1)] * 4 + [(1, 1, 1, 1)]
    assert {b.eps for pair in arch.blocks for b in pair} | {arch.stem.eps} == {1e-3}
    assert (arch.head.out_ch, arch.head_size, arch.feature_dim) == (64, 4, 1024)
    assert sum(a.size for layer in weights.values() for a in layer.values()) == 863_393


def test_other_layouts_are_refused(shared_dir: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("h5py")
    from verilive.errors import ModelError
    from verilive.models.convert.hyperfas import parse_config, read_h5

    config, _ = read_h5(shared_dir / SOURCE)
    layers = config["config"]["layers"]

    def edited(index: int, **changes: Any) -> dict[str, Any]:
        c = copy.deepcopy(config)
        c["config"]["layers"][index]["config"].update(changes)
        return c

    act = next(i for i, layer in enumerate(layers) if layer["class_name"] == "Activation")
    with pytest.raises(ModelError, match="expected relu"):
        parse_config(edited(act, activation="relu6"))
    with pytest.raises(ModelError, match="padding"):
        parse_config(edited(1, padding="causal"))
    with pytest.raises(ModelError, match="input"):
        parse_config(edited(0, batch_input_shape=[None, 112, 112, 3]))
    dense = len(layers) - 1
    with pytest.raises(ModelError, match="Dense"):
        parse_config(edited(dense, units=2))
    branchy = copy.deepcopy(config)
    branchy["config"]["layers"][5]["inbound_nodes"] = [[["input_1", 0, 0, {}]]]
    with pytest.raises(ModelError, match="chain"):
        parse_config(branchy)


def test_non_hdf5_file_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("h5py")
    from verilive.errors import ModelError
    from verilive.models.convert.hyperfas import load_model

    bad = tmp_path / "fas.h5"
    bad.write_bytes(b"not an HDF5 file")
    with pytest.raises(ModelError, match="HDF5"):
        load_model(bad)


@pytest.mark.slow
def test_torch_module_matches_keras(
    torch_model: Any, golden: dict[str, Any], check_input: np.ndarray, shared_dir: Path
) -> None:
    import torch

    with torch.no_grad():
        p_live, features = (t.numpy() for t in torch_model(torch.from_numpy(check_input)))
    assert_rows_match(p_live, features, golden["check_rows"], golden["feature_step"])
    crops = np.stack([crop(read_image(shared_dir, r["file"]), r["box_xyxy"]) for r in golden["images"]])
    with torch.no_grad():
        p_live, features = (t.numpy() for t in torch_model(torch.from_numpy(preprocess(crops))))
    assert_rows_match(p_live, features, golden["images"], golden["feature_step"])


@pytest.mark.slow
def test_features_are_in_keras_flatten_order(torch_model: Any, check_input: np.ndarray) -> None:
    import torch

    maps: list[np.ndarray] = []
    hook = torch_model.head.register_forward_hook(lambda _m, _i, out: maps.append(out.detach().numpy()))
    try:
        with torch.no_grad():
            p_live, features = (t.numpy() for t in torch_model(torch.from_numpy(check_input)))
    finally:
        hook.remove()
    head = maps[0]  # (N, 64, 4, 4), NCHW
    assert head.shape == (2, 64, 4, 4)
    # Keras (channels_last) flattens (row, column, channel): feature 64 * (4 * row + col) + channel.
    np.testing.assert_array_equal(features, head.transpose(0, 2, 3, 1).reshape(2, -1))
    assert features[0, 64 * (4 * 2 + 1) + 5] == head[0, 5, 2, 1]
    assert max_abs(features, head.reshape(2, -1)) > 0.1  # the NCHW order is a different vector
    # P(live) is the Dense layer on exactly these features.
    w = torch_model.dense.weight.detach().numpy()[0].astype(np.float64)
    b = float(torch_model.dense.bias.detach().numpy()[0])
    np.testing.assert_allclose(p_live, 1 / (1 + np.exp(-(features.astype(np.float64) @ w + b))), atol=1e-6)


# --- (b) ONNX export and the installed model --------------------------------------------------------------


@pytest.mark.slow
def test_fresh_onnx_interface_and_graph(fresh_onnx: Path) -> None:
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(fresh_onnx))
    assert model.opset_import[0].version == 17
    ops = {n.op_type for n in model.graph.node}
    # The exporter's Pad chains are folded into the convolutions and the BatchNorms into their weights.
    assert "Pad" not in ops and "BatchNormalization" not in ops and "Slice" not in ops
    pads = [
        list(a.ints) for n in model.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "pads"
    ]
    assert pads.count([0, 0, 1, 1]) == 5 and pads.count([1, 1, 1, 1]) == 9
    sess = ort.InferenceSession(str(fresh_onnx), providers=["CPUExecutionProvider"])
    (inp,) = sess.get_inputs()
    assert inp.name == "input" and inp.type == "tensor(float)"
    assert isinstance(inp.shape[0], str) and inp.shape[1:] == [224, 224, 3]
    outs = {o.name: o.shape for o in sess.get_outputs()}
    assert list(outs) == ["p_live", "features"]
    assert isinstance(outs["p_live"][0], str) and len(outs["p_live"]) == 1
    assert outs["features"][0] == outs["p_live"][0] and outs["features"][1] == 1024


@pytest.mark.slow
def test_fresh_onnx_matches_keras_and_torch(
    fresh_onnx: Path, torch_model: Any, golden: dict[str, Any], check_input: np.ndarray
) -> None:
    import onnxruntime as ort
    import torch

    sess = ort.InferenceSession(str(fresh_onnx), providers=["CPUExecutionProvider"])
    p_live, features = sess.run(["p_live", "features"], {"input": check_input})
    assert_rows_match(p_live, features, golden["check_rows"], golden["feature_step"])
    x3 = np.concatenate([check_input, check_input[:1]])  # an odd batch
    p3, f3 = sess.run(["p_live", "features"], {"input": x3})
    with torch.no_grad():
        tp, tf = (t.numpy() for t in torch_model(torch.from_numpy(x3)))
    assert max_abs(p3, tp) <= 1e-5 and max_abs(f3, tf) <= 1e-4
    assert max_abs(f3[:2], features) <= 1e-5 and max_abs(f3[2], features[0]) <= 1e-5


@pytest.mark.slow
def test_installed_model_matches_keras_on_real_crops(
    net: HyperFAS, golden: dict[str, Any], shared_dir: Path
) -> None:
    crops = []
    for row in golden["images"]:
        image = read_image(shared_dir, row["file"])
        assert list(image.shape[:2]) == row["image_hw"], row["file"]  # EXIF rotation applied by imread
        assert list(crop_box(image.shape[1], image.shape[0], row["box_xyxy"])) == row["crop_box"]
        c = net.crop(image, row["box_xyxy"])
        # The golden crops were made with opencv-python-headless 5.0.0 (its JPEG decoder and resize).
        assert hashlib.sha256(c.tobytes()).hexdigest() == row["crop_sha256"], row["file"]
        crops.append(c)
    p_live, features = net.predict(np.stack(crops))
    assert p_live.dtype == features.dtype == np.float32
    assert_rows_match(p_live, features, golden["images"], golden["feature_step"])
    singles = [net.predict(c[None]) for c in crops]
    assert max_abs(np.concatenate([s[0] for s in singles]), p_live) <= 1e-6
    assert max_abs(np.concatenate([s[1] for s in singles]), features) <= 1e-5


@pytest.mark.slow
def test_live_image_scores_above_printed_attack(net: HyperFAS, shared_dir: Path) -> None:
    detector_mod = pytest.importorskip("verilive.face.detector")
    settings = Settings()
    store = ModelStore(settings.models_dir, mirror=settings.model_mirror or shared_dir / "models/upstream")
    store.pull("centerface")
    detector = detector_mod.FaceDetector.from_registry(
        ModelRegistry(settings, ids=["centerface"], store=store)
    )
    p = {}
    for name in ("image_T1.jpg", "image_F1.jpg"):
        image = read_image(shared_dir, name)
        faces = detector.detect(image)
        assert len(faces) == 1, name
        p_live, _ = net.predict(net.crop(image, faces[0].box)[None])  # the raw CenterFace box
        p[name] = float(p_live[0])
    # Measured: 0.9986 (live) vs 0.0183 (printed photo). Upstream's demo calls a face live above 0.95.
    assert p["image_T1.jpg"] > UPSTREAM_THRESHOLD > 0.1 > p["image_F1.jpg"], p


# --- (c) crop rule ----------------------------------------------------------------------------------------


def test_crop_box_rule_by_hand() -> None:
    # Square box 100 x 100 centred at (150, 150): r = int(0.6 * 100) = 60.
    assert crop_box(1000, 1000, (100, 100, 200, 200)) == (90, 90, 210, 210)
    # The longer side sets r (int(0.6 * 160) = 96); the centre uses integer division.
    assert crop_box(1000, 1000, (100, 100, 200, 260)) == (54, 84, 246, 276)
    # Corners are truncated first (as upstream's astype('int32')), then r is truncated: int(60.6) = 60.
    assert crop_box(1000, 1000, (100.9, 100.9, 200.9, 200.9)) == (90, 90, 210, 210)
    assert crop_box(1000, 1000, np.array([100.0, 100.0, 201.0, 201.0])) == (90, 90, 210, 210)


def test_crop_box_at_the_image_edges() -> None:
    # Top-left: clipped at 0, not shifted, so the crop loses its square shape (110 x 110, not 120 x 120).
    assert crop_box(1000, 1000, (0, 0, 100, 100)) == (0, 0, 110, 110)
    assert crop_box(1000, 1000, (10, 20, 110, 120)) == (0, 10, 120, 130)
    # A CenterFace box reaching past the top-left: clipped to the image before the centre is taken.
    assert crop_box(1000, 1000, (-30, -20, 70, 80)) == (0, 0, 83, 88)
    # Bottom-right, past the edge: the box is clipped to W-1, H-1 and the crop ends at W-2, H-2 (exclusive).
    assert crop_box(300, 200, (250, 150, 320, 230)) == (245, 145, 298, 198)
    # A face filling a portrait frame: the crop is clipped on every side.
    assert crop_box(480, 640, (-10, -10, 490, 650)) == (0, 0, 478, 638)


@pytest.mark.parametrize(
    "box",
    [
        (10, 10, 10, 40),  # no width
        (500, 500, 600, 600),  # entirely outside a 300 x 200 image
        (-50, -50, -10, -10),
        (float("nan"), 0, 10, 10),
        (1, 2, 3),
    ],
)
def test_crop_box_refuses_degenerate_boxes(box: tuple[float, ...]) -> None:
    with pytest.raises(ValueError):
        crop_box(300, 200, box)


def test_crop_box_refuses_tiny_images() -> None:
    with pytest.raises(ValueError, match="too small"):
        crop_box(2, 100, (0, 0, 1, 50))


def test_crop_is_the_resized_exclusive_patch() -> None:
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)
    box = (150.5, 100.2, 230.7, 190.9)
    left, top, right, bottom = crop_box(400, 300, box)
    assert (left, top, right, bottom) == (136, 91, 244, 199)  # 108 x 108: 2 * int(0.6 * 90)
    expected = cv2.resize(image[top:bottom, left:right], (224, 224), interpolation=cv2.INTER_LINEAR)
    got = crop(image, box)
    assert got.shape == (224, 224, 3) and got.dtype == np.uint8
    np.testing.assert_array_equal(got, expected)
    assert crop(image, box, size=32).shape == (32, 32, 3)
    with pytest.raises(ValueError, match="BGR"):
        crop(image[..., 0], box)


# --- (d) runtime wrapper ----------------------------------------------------------------------------------


def test_preprocess_is_upstreams_normalisation() -> None:
    crops = np.arange(256, dtype=np.uint8)[None, None, :, None].repeat(224, 1)[:, :, :224].repeat(3, 3)
    x = preprocess(crops)
    assert x.dtype == np.float32 and x.shape == (1, 224, 224, 3)
    want = ((crops.astype(np.float64) - 127.5) / 127.5).astype(np.float32)
    np.testing.assert_array_equal(x, want)
    assert x.min() == -1.0 and x.max() == pytest.approx(223 / 127.5 - 1, abs=1e-7)
    np.testing.assert_array_equal(preprocess(crops.astype(np.float32)), x)  # float 0..255 works the same


@pytest.mark.slow
@pytest.mark.parametrize(
    "shape", [(224, 224, 3), (1, 3, 224, 224), (1, 223, 224, 3), (2, 224, 224, 4), (1, 80, 80, 3)]
)
def test_bad_crop_shapes_raise(net: HyperFAS, shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="crops of shape"):
        net.predict(np.zeros(shape, np.uint8))


@pytest.mark.slow
def test_empty_batch_and_wrong_session(net: HyperFAS) -> None:
    p_live, features = net.predict(np.zeros((0, INPUT_SIZE, INPUT_SIZE, 3), np.uint8))
    assert p_live.shape == (0,) and features.shape == (0, FEATURE_DIM)
    other = SimpleNamespace(
        get_inputs=lambda: [SimpleNamespace(name="input")],
        get_outputs=lambda: [SimpleNamespace(name="logits")],
    )
    with pytest.raises(ValueError, match="not a HyperFAS session"):
        HyperFAS(other)
