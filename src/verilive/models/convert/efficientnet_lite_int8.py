"""EfficientNet-Lite0 int8: the float ONNX of :mod:`efficientnet_lite`, statically quantized with
activation ranges shipped in the package (issue 47).

Static quantization needs the range of every activation it quantizes. Those ranges were measured once
on calibration crops (``python -m train.face_pad_quant``, face photos of the training role, the
service's crop rule) and are committed as ``verilive/face/backbone_int8_ranges.json`` (tensor name ->
[min, max] in float32). So the model store builds the int8 model on any machine, without development
data: the pinned checkpoint -> the verified float ONNX (as ``efficientnet_lite0``) -> onnxruntime's
shape-inference pre-processing -> onnxruntime's QOperator quantizer fed those ranges.

Choices (docs/model-efficientnet-lite.md):

* **QOperator** (QLinearConv, QLinearAdd, ...): the integer kernels run back to back; the float graph's
  Pad, Clip and residual Add stay in int8 between convolutions.
* **uint8 activations, int8 weights per output channel** (onnxruntime's fast pair on x86). On CPUs
  without VNNI (AVX2 only) the u8s8 matrix kernels add products in pairs into 16 bits, which saturate
  when large activations meet large weights: measured on the calibration crops, it happens in the stem
  and in the project convolutions of blocks 0 and 3 (the features' median cosine to float falls from
  0.98 to 0.90 with 8-bit weights everywhere). So the stem (3 input channels, 3 % of the compute)
  stays float32 and ``REDUCED`` gets 7-bit weights (which cannot saturate); every other convolution
  keeps 8-bit weights. A VNNI machine never saturates, so its numbers differ little from an AVX2
  machine's: the golden vector's tolerance allows it.
* Only Conv, Add, Pad and Clip are quantized: the texture statistics (mean and deviation of three
  blocks: Sub, Mul, ReduceMean, Sqrt), the pooled features and the ImageNet logits stay float32 on
  dequantized inputs.

Imports onnx and onnxruntime.quantization (and torch through the float converter): conversion only.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from verilive.errors import ModelError
from verilive.models.convert.common import cpu_session, write_verified

RANGES_PACKAGE = "verilive.face"
RANGES_FILE = "backbone_int8_ranges.json"
OP_TYPES = ("Conv", "Add", "Pad", "Clip")
FLOAT_NODES = ("/_conv_stem/Conv",)  # left in float32 (module docstring)
REDUCED = ("/_blocks.0/_project_conv/Conv", "/_blocks.3/_project_conv/Conv")  # 7-bit weights
# Against the float model on the seeded check images (uniform noise: far from what it was calibrated
# on, so the loosest case); real face crops are much closer (tests/test_backbone_int8.py).
VERIFY_MIN_COSINE = 0.8
VERIFY_BATCH = 2
VERIFY_SEED = 47


def load_ranges(path: Path | None = None) -> dict[str, tuple[float, float]]:
    """Tensor name -> (min, max) from the packaged ranges file (or ``path``)."""
    if path is None:
        text = (resources.files(RANGES_PACKAGE) / RANGES_FILE).read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    data = json.loads(text)
    ranges = data["ranges"] if isinstance(data, dict) and "ranges" in data else data
    out: dict[str, tuple[float, float]] = {}
    for name, pair in ranges.items():
        lo, hi = (float(v) for v in pair)
        if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
            raise ModelError(f"{RANGES_FILE}: bad range for {name!r}: {pair}")
        out[name] = (lo, hi)
    if not out:
        raise ModelError(f"{RANGES_FILE}: no ranges")
    return out


def pre_process(float_path: Path, dest: Path) -> None:
    """onnxruntime's quantization pre-processing: symbolic shape inference, the basic graph
    optimisations (constant folding of the SAME-padding arithmetic), onnx shape inference. The range
    file's tensor names are those of this graph."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    quant_pre_process(str(float_path), str(dest))


def quantize(prepared: Path, dest: Path, ranges: Mapping[str, tuple[float, float]]) -> None:
    """QOperator int8 model of the pre-processed float graph with the given activation ranges."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantType
    from onnxruntime.quantization.calibrate import TensorsData
    from onnxruntime.quantization.onnx_quantizer import ONNXQuantizer
    from onnxruntime.quantization.quant_utils import QuantizationMode, load_model_with_shape_infer

    model = load_model_with_shape_infer(Path(prepared))
    names = {v for n in model.graph.node for v in (*n.input, *n.output)}
    nodes = {n.name: n for n in model.graph.node}
    missing = [n for n in (*FLOAT_NODES, *REDUCED) if n not in nodes]
    if missing:
        raise ModelError(f"EfficientNet-Lite0 int8: the float graph has no node {missing}")
    overrides = {nodes[n].input[1]: [{"axis": 0, "reduce_range": True}] for n in REDUCED}
    unknown = sorted(set(ranges) - names)
    if unknown:
        raise ModelError(
            f"{RANGES_FILE} names {len(unknown)} tensors the float graph does not have (e.g. {unknown[:3]}): "
            "the float export or onnxruntime's pre-processing changed; rerun train.face_pad_quant"
        )
    data = {
        k: (np.array(lo, dtype=np.float32), np.array(hi, dtype=np.float32))
        for k, (lo, hi) in sorted(ranges.items())
    }
    # Keywords, not positions: onnxruntime has added parameters to this constructor before.
    quantizer = ONNXQuantizer(
        model=model,
        per_channel=True,
        reduce_range=False,  # 8-bit weights, but 7-bit in REDUCED (the overrides)
        mode=QuantizationMode.QLinearOps,
        static=True,
        weight_qType=QuantType.QInt8,
        activation_qType=QuantType.QUInt8,
        tensors_range=TensorsData(CalibrationMethod.MinMax, data),
        nodes_to_quantize=[],  # empty: every node of OP_TYPES
        nodes_to_exclude=list(FLOAT_NODES),
        op_types_to_quantize=list(OP_TYPES),
        extra_options={"TensorQuantOverrides": overrides},
    )
    quantizer.quantize_model()
    onnx.save_model(quantizer.model.model, str(dest))


def float_session_outputs(path: Path, x: np.ndarray) -> list[Any]:
    return cpu_session(path).run(["features", "texture"], {"image": x})


def verify_int8(float_path: Path, int8_path: Path) -> float:
    """The int8 model against the float one on seeded 0..255 images: the same outputs and shapes, finite,
    and the features' cosine at least VERIFY_MIN_COSINE. Returns the smallest cosine, or ModelError."""
    from verilive.models.convert.efficientnet_lite import FEATURES, INPUT_SIZE, TEXTURE

    x = (np.random.default_rng(VERIFY_SEED).random((VERIFY_BATCH, 3, INPUT_SIZE, INPUT_SIZE)) * 255.0).astype(
        np.float32
    )
    want_f = float_session_outputs(float_path, x)[0]
    sess = cpu_session(int8_path)
    got_f, got_t, logits = sess.run(["features", "texture", "logits"], {"image": x})
    for name, got, shape in (
        ("features", got_f, (VERIFY_BATCH, FEATURES)),
        ("texture", got_t, (VERIFY_BATCH, TEXTURE)),
        ("logits", logits, (VERIFY_BATCH, 1000)),
    ):
        if got.shape != shape or not np.all(np.isfinite(got)):
            raise ModelError(f"EfficientNet-Lite0 int8: {name} is wrong: shape {got.shape}, expected {shape}")
    worst = 1.0
    for a, b in zip(got_f, want_f, strict=True):
        cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))
        worst = min(worst, cos)
    if worst < VERIFY_MIN_COSINE:
        raise ModelError(
            f"EfficientNet-Lite0 int8: features cosine {worst:.3f} < {VERIFY_MIN_COSINE} against float"
        )
    return worst


def build(float_path: Path, dest: Path, ranges: Mapping[str, tuple[float, float]] | None = None) -> None:
    """Verified int8 model at ``dest`` from the float ONNX at ``float_path`` (packaged ranges by default)."""
    ranges = load_ranges() if ranges is None else ranges
    with tempfile.TemporaryDirectory(dir=Path(dest).parent) as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        pre_process(Path(float_path), prepared)
        write_verified(
            Path(dest),
            lambda p: quantize(prepared, p, ranges),
            lambda p: verify_int8(Path(float_path), p),
        )


def convert(source: Path, dest: Path) -> None:
    """Converter for the model store: ``efficientnet-lite0-57934424.pth`` -> the verified float ONNX (as
    for ``efficientnet_lite0``) -> the verified int8 ONNX."""
    from verilive.models.convert.efficientnet_lite import export_onnx, load_model, verify_onnx

    model = load_model(Path(source))
    with tempfile.TemporaryDirectory(dir=Path(dest).parent) as tmp:
        float_path = Path(tmp) / "efficientnet_lite0.onnx"
        export_onnx(model, float_path)
        verify_onnx(model, float_path)
        build(float_path, Path(dest))
