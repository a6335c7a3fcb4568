"""MiniFASNetV2 and MiniFASNetV1SE face anti-spoofing models: own PyTorch definitions and ONNX converters.

The modules are written from the architecture facts in docs/model-minifasnet.md (Silent-Face-Anti-Spoofing,
minivision-ai, Apache-2.0). Their parameter names match the upstream checkpoints after the ``module.`` prefix
of ``nn.DataParallel`` is stripped, so the state dicts load with ``strict=True``.

Input ``input`` float32 (N, 3, 80, 80): an 80x80 face crop in **BGR** order with values 0..255 (no scaling,
no mean/std), as upstream feeds it. Output ``logits`` float32 (N, 3): raw class scores, index 1 = real face,
0 = 2-D fake, 2 = 3-D fake.

This module imports torch; it is needed only for conversion (``verilive[convert]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from verilive.errors import ModelError
from verilive.models.convert.common import check_close, cpu_session, export_legacy, write_verified

INPUT_SIZE = 80
NUM_CLASSES = 3
EMBEDDING_DIM = 128
INPUT_NAME = "input"
OUTPUT_NAME = "logits"
# Batch sizes the export is checked at: 1 and an odd size, so a batch baked in at export time fails.
VERIFY_BATCHES = (1, 3)
VERIFY_ATOL = 1e-4
# Prefix nn.DataParallel puts on every checkpoint key.
DATA_PARALLEL_PREFIX = "module."


@dataclass(frozen=True)
class Widths:
    """Hidden (expanded) channel counts of every inverted-residual block; upstream calls these keep lists.

    ``conv_23``, ``conv_34`` and ``conv_45`` are the downsampling blocks; ``conv_3``, ``conv_4`` and
    ``conv_5`` list the residual blocks of each stage. Stage outputs are fixed: 64, 128, 128.
    """

    conv_23: int
    conv_3: tuple[int, ...]
    conv_34: int
    conv_4: tuple[int, ...]
    conv_45: int
    conv_5: tuple[int, ...]


# Keep list '1.8M_' (MiniFASNetV2) and '1.8M' (MiniFASNetV1SE), read off the checkpoint shapes
# (../shared/models/keys_*.txt).
WIDTHS_V2 = Widths(103, (13, 13, 13, 13), 231, (231, 52, 26, 77, 26, 26), 308, (26, 26))
WIDTHS_V1SE = Widths(103, (13, 26, 13, 52), 231, (154, 52, 26, 52, 26, 26), 308, (26, 26))
SE_REDUCTION = 4


class LinearBlock(nn.Module):
    """Conv (no bias) -> BatchNorm, no activation (projections and the global depthwise conv)."""

    def __init__(
        self, in_ch: int, out_ch: int, kernel: int = 1, stride: int = 1, padding: int = 0, groups: int = 1
    ) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, kernel, stride, padding, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(out_ch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


class ConvBlock(LinearBlock):
    """Conv (no bias) -> BatchNorm -> PReLU (one slope per channel)."""

    def __init__(
        self, in_ch: int, out_ch: int, kernel: int = 1, stride: int = 1, padding: int = 0, groups: int = 1
    ) -> None:
        super().__init__(in_ch, out_ch, kernel, stride, padding, groups)
        self.prelu = nn.PReLU(out_ch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.prelu(super().forward(x))


class SEModule(nn.Module):
    """Squeeze-and-excitation gate: global mean -> 1x1 conv + BN + ReLU -> 1x1 conv + BN -> sigmoid."""

    def __init__(self, channels: int, reduction: int) -> None:
        super().__init__()
        hidden = channels // reduction
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, hidden, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(hidden)
        self.relu = nn.ReLU(inplace=False)
        self.fc2 = nn.Conv2d(hidden, channels, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.sigmoid = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = self.relu(self.bn1(self.fc1(self.avg_pool(x))))
        return x * self.sigmoid(self.bn2(self.fc2(g)))


class DepthWise(nn.Module):
    """Inverted residual: 1x1 expand (PReLU) -> 3x3 depthwise (PReLU, carries the stride) -> 1x1 project.

    With ``residual`` the input is added to the output (stride 1, same channels); with ``se`` the projected
    output passes an SE gate before that addition.
    """

    def __init__(
        self, in_ch: int, hidden: int, out_ch: int, stride: int, residual: bool, se: bool = False
    ) -> None:
        super().__init__()
        self.residual = residual
        self.conv = ConvBlock(in_ch, hidden, 1)
        self.conv_dw = ConvBlock(hidden, hidden, 3, stride, 1, groups=hidden)
        self.project = LinearBlock(hidden, out_ch, 1)
        self.se_module: nn.Module | None = SEModule(out_ch, SE_REDUCTION) if se else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.project(self.conv_dw(self.conv(x)))
        if self.se_module is not None:
            y = self.se_module(y)
        return x + y if self.residual else y


class Residual(nn.Module):
    """A stage of residual DepthWise blocks at constant size; with ``se`` only the last block has SE."""

    def __init__(self, channels: int, hidden: Sequence[int], se: bool) -> None:
        super().__init__()
        last = len(hidden) - 1
        self.model = nn.Sequential(
            *(DepthWise(channels, h, channels, 1, True, se=se and i == last) for i, h in enumerate(hidden))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


class MiniFASNet(nn.Module):
    """MiniFASNet on 80x80 input: (N, 3, 80, 80) BGR 0..255 -> logits (N, 3).

    Spatial sizes: 80 -> 40 (conv1, stride 2) -> 20 (conv_23) -> 10 (conv_34) -> 5 (conv_45); a 5x5
    depthwise conv then reduces 5x5 to 1x1 (upstream's ``conv6_kernel = ((80 + 15) // 16,) * 2``).
    Dropout (``drop``) is the identity in eval mode and is kept only so module paths match upstream.
    """

    def __init__(self, widths: Widths, se: bool, drop_p: float) -> None:
        super().__init__()
        kernel6 = (INPUT_SIZE + 15) // 16
        self.conv1 = ConvBlock(3, 32, 3, 2, 1)
        self.conv2_dw = ConvBlock(32, 32, 3, 1, 1, groups=32)
        self.conv_23 = DepthWise(32, widths.conv_23, 64, 2, residual=False)
        self.conv_3 = Residual(64, widths.conv_3, se)
        self.conv_34 = DepthWise(64, widths.conv_34, 128, 2, residual=False)
        self.conv_4 = Residual(128, widths.conv_4, se)
        self.conv_45 = DepthWise(128, widths.conv_45, 128, 2, residual=False)
        self.conv_5 = Residual(128, widths.conv_5, se)
        self.conv_6_sep = ConvBlock(128, 512, 1)
        self.conv_6_dw = LinearBlock(512, 512, kernel6, groups=512)
        self.conv_6_flatten = nn.Flatten()
        self.linear = nn.Linear(512, EMBEDDING_DIM, bias=False)
        self.bn = nn.BatchNorm1d(EMBEDDING_DIM)
        self.drop = nn.Dropout(drop_p)
        self.prob = nn.Linear(EMBEDDING_DIM, NUM_CLASSES, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv2_dw(self.conv1(x))
        x = self.conv_3(self.conv_23(x))
        x = self.conv_4(self.conv_34(x))
        x = self.conv_5(self.conv_45(x))
        x = self.conv_6_flatten(self.conv_6_dw(self.conv_6_sep(x)))
        return self.prob(self.drop(self.bn(self.linear(x))))


def minifasnet_v2() -> MiniFASNet:
    """MiniFASNetV2: keep list '1.8M_', no SE, dropout 0.2 (training only)."""
    return MiniFASNet(WIDTHS_V2, se=False, drop_p=0.2)


def minifasnet_v1se() -> MiniFASNet:
    """MiniFASNetV1SE: keep list '1.8M', SE (reduction 4) in the last block of stages 3-5, dropout 0.75."""
    return MiniFASNet(WIDTHS_V1SE, se=True, drop_p=0.75)


BUILDERS = {"MiniFASNetV2": minifasnet_v2, "MiniFASNetV1SE": minifasnet_v1se}


def strip_data_parallel(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop the ``module.`` prefix of a DataParallel state dict (keys without it are kept as they are)."""
    n = len(DATA_PARALLEL_PREFIX)
    return {(k[n:] if k.startswith(DATA_PARALLEL_PREFIX) else k): v for k, v in state.items()}


def load_model(source: Path, architecture: str) -> MiniFASNet:
    """``architecture`` ('MiniFASNetV2' or 'MiniFASNetV1SE') in eval mode, checkpoint loaded strictly."""
    if architecture not in BUILDERS:
        raise ModelError(f"unknown MiniFASNet architecture {architecture!r}; known: {', '.join(BUILDERS)}")
    state = torch.load(source, map_location="cpu", weights_only=True)
    if not isinstance(state, Mapping):
        raise ModelError(f"{source}: expected a state-dict, got {type(state).__name__}")
    model = BUILDERS[architecture]()
    try:
        model.load_state_dict(strip_data_parallel(state), strict=True)
    except RuntimeError as e:  # missing/unexpected keys or shapes: not this architecture's checkpoint
        raise ModelError(f"{source} is not a {architecture} checkpoint: {e}") from e
    return model.eval()


def export_onnx(model: MiniFASNet, dest: Path) -> None:
    """Write the ONNX file (opset 17, dynamic batch); onnxruntime folds the BatchNorms itself at load."""
    export_legacy(
        model,
        torch.zeros(1, 3, INPUT_SIZE, INPUT_SIZE),
        dest,
        input_names=[INPUT_NAME],
        output_names=[OUTPUT_NAME],
        dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
    )


def verify_onnx(model: MiniFASNet, path: Path, batches: Sequence[int] = VERIFY_BATCHES) -> float:
    """Compare onnxruntime with torch on random 0..255 crops; returns the max |diff| or raises ModelError."""
    sess = cpu_session(path)
    rng = np.random.default_rng(0)
    worst = 0.0
    for n in batches:
        x = rng.integers(0, 256, (n, 3, INPUT_SIZE, INPUT_SIZE)).astype(np.float32)
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        (got,) = sess.run([OUTPUT_NAME], {INPUT_NAME: x})
        worst = max(worst, check_close(got, want, VERIFY_ATOL, f"MiniFASNet ONNX export at batch {n}"))
    return worst


def convert_architecture(source: Path, dest: Path, architecture: str) -> None:
    """Checkpoint -> verified ONNX at ``dest``; nothing is written at ``dest`` when verification fails."""
    model = load_model(Path(source), architecture)
    write_verified(dest, lambda p: export_onnx(model, p), lambda p: verify_onnx(model, p))


def convert_v2(source: Path, dest: Path) -> None:
    """Converter for the model store: ``2.7_80x80_MiniFASNetV2.pth`` -> ONNX."""
    convert_architecture(source, dest, "MiniFASNetV2")


def convert_v1se(source: Path, dest: Path) -> None:
    """Converter for the model store: ``4_0_0_80x80_MiniFASNetV1SE.pth`` -> ONNX."""
    convert_architecture(source, dest, "MiniFASNetV1SE")
