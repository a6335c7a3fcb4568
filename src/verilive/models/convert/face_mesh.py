"""MediaPipe face mesh (``face_landmark.tflite`` of mediapipe 0.10.14) converted from TFLite to ONNX.

The TFLite graph is small and uses seven operators only: DEQUANTIZE (float16 weights to float32),
CONV_2D, DEPTHWISE_CONV_2D, PRELU, ADD, MAX_POOL_2D and PAD (zero channels appended before a
residual ADD). This converter reads the flatbuffer with the ``tflite`` schema package and writes the
same computation as an ONNX graph, weights dequantised to float32 once at conversion time:

- the graph keeps TFLite's interface: input ``input_1`` float32 [N, 192, 192, 3] (RGB, 0..1), outputs
  ``conv2d_21`` [N, 1, 1, 1404] (468 x (x, y, z) in input pixels) and ``conv2d_31`` [N, 1, 1, 1]
  (face-presence logit); inside it runs NCHW, so one Transpose at each end;
- TFLite's SAME padding is TensorFlow's (any odd pad goes at the end): ONNX ``auto_pad=SAME_UPPER``;
- TFLite kernels are [out, kh, kw, in] (CONV_2D) and [1, kh, kw, channels] (DEPTHWISE_CONV_2D);
  ONNX wants [out, in/group, kh, kw].

The store runs the manifest's check vector (made with TFLite's own interpreter) on the result.
Needs the ``tflite`` package (convert extra) and ``onnx``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from verilive.errors import ModelError

INPUT = "input_1"
OUTPUTS = ("conv2d_21", "conv2d_31")
SIDE = 192
# tflite.Padding and tflite.ActivationFunctionType values used by this model.
_SAME, _VALID = 0, 1
_NO_ACTIVATION = 0


def _tensor_array(model: Any, graph: Any, index: int) -> np.ndarray:
    import tflite

    t = graph.Tensors(index)
    buf = model.Buffers(t.Buffer())
    if buf.DataLength() == 0:
        raise ModelError(f"face_mesh: tensor {t.Name().decode()} has no constant data")
    dtypes = {tflite.TensorType.FLOAT32: np.float32, tflite.TensorType.FLOAT16: np.float16}
    dtypes[tflite.TensorType.INT32] = np.int32
    if t.Type() not in dtypes:
        raise ModelError(f"face_mesh: unsupported constant type {t.Type()} of {t.Name().decode()}")
    shape = [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []
    return np.frombuffer(buf.DataAsNumpy().tobytes(), dtype=dtypes[t.Type()]).reshape(shape)


def _options(op: Any, cls: Any) -> Any:
    table = op.BuiltinOptions()
    opts = cls()
    opts.Init(table.Bytes, table.Pos)
    return opts


def build_onnx(tflite_bytes: bytes) -> Any:
    """The ONNX ModelProto of the face-mesh TFLite flatbuffer ``tflite_bytes``."""
    import onnx
    import tflite
    from onnx import TensorProto, helper, numpy_helper

    model = tflite.Model.GetRootAsModel(tflite_bytes, 0)
    if model.SubgraphsLength() != 1:
        raise ModelError("face_mesh: expected one subgraph")
    graph = model.Subgraphs(0)
    op_names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}

    def tname(i: int) -> str:
        return graph.Tensors(i).Name().decode()

    inputs = [tname(int(i)) for i in graph.InputsAsNumpy()]
    outputs = [tname(int(i)) for i in graph.OutputsAsNumpy()]
    if inputs != [INPUT] or sorted(outputs) != sorted(OUTPUTS):
        raise ModelError(f"face_mesh: unexpected interface {inputs} -> {outputs}")

    consts: dict[str, np.ndarray] = {}  # name -> float32 value (dequantised)
    nodes: list[Any] = []
    inits: list[Any] = []
    # The NCHW tensor that stands for each TFLite activation tensor.
    nchw: dict[str, str] = {INPUT: "input_nchw"}
    nodes.append(helper.make_node("Transpose", [INPUT], ["input_nchw"], perm=[0, 3, 1, 2]))

    def add_init(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def const(i: int) -> np.ndarray:
        name = tname(i)
        if name not in consts:
            consts[name] = _tensor_array(model, graph, i).astype(np.float32)
        return consts[name]

    for k in range(graph.OperatorsLength()):
        op = graph.Operators(k)
        code = model.OperatorCodes(op.OpcodeIndex())
        kind = op_names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "?")
        ins = [int(i) for i in op.InputsAsNumpy()]
        out = tname(int(op.OutputsAsNumpy()[0]))
        if kind == "DEQUANTIZE":
            consts[out] = _tensor_array(model, graph, ins[0]).astype(np.float32)
            continue
        tflite_out, out = out, out + "/nchw"
        if kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            depthwise = kind == "DEPTHWISE_CONV_2D"
            cls = tflite.DepthwiseConv2DOptions if depthwise else tflite.Conv2DOptions
            o = _options(op, cls)
            if o.FusedActivationFunction() != _NO_ACTIVATION or o.DilationHFactor() != 1:
                raise ModelError(f"face_mesh: {out}: fused activation or dilation not supported")
            w = const(ins[1])  # [out, kh, kw, in] or [1, kh, kw, C]
            b = const(ins[2]) if len(ins) > 2 and ins[2] >= 0 else np.zeros(w.shape[-1], np.float32)
            if depthwise:
                if o.DepthMultiplier() != 1:
                    raise ModelError(f"face_mesh: {out}: depth multiplier {o.DepthMultiplier()}")
                wt = w.transpose(3, 0, 1, 2)  # [C, 1, kh, kw]
                group = w.shape[-1]
            else:
                wt = w.transpose(0, 3, 1, 2)
                group = 1
            attrs: dict[str, Any] = {
                "strides": [o.StrideH(), o.StrideW()],
                "kernel_shape": list(wt.shape[2:]),
                "group": group,
                "auto_pad": "SAME_UPPER" if o.Padding() == _SAME else "VALID",
            }
            wn = add_init(tflite_out + "/W", np.ascontiguousarray(wt))
            bn = add_init(tflite_out + "/B", b)
            nodes.append(helper.make_node("Conv", [nchw[tname(ins[0])], wn, bn], [out], **attrs))
        elif kind == "PRELU":
            alpha = const(ins[1])  # [1, 1, C]
            an = add_init(tflite_out + "/alpha", alpha.reshape(-1, 1, 1))
            nodes.append(helper.make_node("PRelu", [nchw[tname(ins[0])], an], [out]))
        elif kind == "ADD":
            o = _options(op, tflite.AddOptions)
            if o.FusedActivationFunction() != _NO_ACTIVATION:
                raise ModelError(f"face_mesh: {out}: fused activation not supported")
            nodes.append(helper.make_node("Add", [nchw[tname(ins[0])], nchw[tname(ins[1])]], [out]))
        elif kind == "MAX_POOL_2D":
            o = _options(op, tflite.Pool2DOptions)
            if o.FusedActivationFunction() != _NO_ACTIVATION:
                raise ModelError(f"face_mesh: {out}: fused activation not supported")
            nodes.append(
                helper.make_node(
                    "MaxPool",
                    [nchw[tname(ins[0])]],
                    [out],
                    kernel_shape=[o.FilterHeight(), o.FilterWidth()],
                    strides=[o.StrideH(), o.StrideW()],
                    auto_pad="SAME_UPPER" if o.Padding() == _SAME else "VALID",
                )
            )
        elif kind == "PAD":
            pads = _tensor_array(model, graph, ins[1]).astype(np.int64)  # NHWC [[before, after]] x 4
            nchw_pads = pads[[0, 3, 1, 2]]
            pn = add_init(tflite_out + "/pads", np.concatenate([nchw_pads[:, 0], nchw_pads[:, 1]]))
            nodes.append(helper.make_node("Pad", [nchw[tname(ins[0])], pn], [out], mode="constant"))
        else:
            raise ModelError(f"face_mesh: operator {kind} is not supported by this converter")
        nchw[tflite_out] = out

    for name in OUTPUTS:  # [N, C, 1, 1] -> TFLite's layout [N, 1, 1, C], under TFLite's name
        nodes.append(helper.make_node("Transpose", [nchw[name]], [name], perm=[0, 2, 3, 1]))
    g = helper.make_graph(
        nodes,
        "face_mesh",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["N", SIDE, SIDE, 3])],
        [
            helper.make_tensor_value_info(OUTPUTS[0], TensorProto.FLOAT, ["N", 1, 1, 1404]),
            helper.make_tensor_value_info(OUTPUTS[1], TensorProto.FLOAT, ["N", 1, 1, 1]),
        ],
        inits,
    )
    onnx_model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="verilive")
    onnx_model.ir_version = 8
    onnx.checker.check_model(onnx_model)
    return onnx_model


def convert(source: Path, dest: Path) -> None:
    """Write the ONNX face mesh converted from the TFLite file ``source`` to ``dest``."""
    import onnx

    proto = build_onnx(source.read_bytes())
    tmp = dest.with_name(dest.name + ".tmp")
    onnx.save(proto, str(tmp))
    tmp.replace(dest)
