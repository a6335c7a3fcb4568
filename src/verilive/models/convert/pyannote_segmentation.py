"""pyannote segmentation-3.0 (PyanNet, MIT): own PyTorch definition, checkpoint loader and ONNX converter.

Written from the architecture facts in docs/model-segmentation.md (no pyannote.audio, no asteroid). The
parameter names match the checkpoint's ``state_dict`` so it loads with ``strict=True``.

Input ``waveform`` float32 (B, 1, N): 16 kHz mono scaled as int16 / 32768; the model was trained on
N = 160000 (10 s). Output ``log_probs`` float32 (B, frames, 7): log-softmax over the powerset classes
{none, #1, #2, #3, #1+#2, #1+#3, #2+#3}; 589 frames for 10 s, one every 270 samples.

The sinc filters are a function of 80 learned cut-off values; they are computed once when the model is
built, so the exported graph holds a plain convolution.

Needs torch (``verilive[convert]``), like the other converters.
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from verilive.errors import ModelError
from verilive.models.convert.common import check_close, cpu_session, export_legacy, write_verified

SAMPLE_RATE = 16000
CHUNK_SAMPLES = 160000
N_CLASSES = 7
INPUT_NAME = "waveform"
OUTPUT_NAME = "log_probs"
# Sinc front end (asteroid ParamSincFB(80, 251, stride=10, min_low_hz=50, min_band_hz=50)).
N_SINC = 40  # learned (low, band) pairs; each gives a cos and a sin filter
KERNEL = 251
SINC_STRIDE = 10
MIN_LOW_HZ = 50.0
MIN_BAND_HZ = 50.0
LEAKY_SLOPE = 0.01  # F.leaky_relu's default, which PyanNet uses
NORM_EPS = 1e-5
VERIFY_ATOL = 1e-4  # probabilities, ONNX against torch


def sinc_filters(low_hz_: torch.Tensor, band_hz_: torch.Tensor) -> torch.Tensor:
    """(80, 1, 251) band-pass filters from the learned (40, 1) cut-offs: 40 cos (even), then 40 sin (odd).

    The half-window buffers are recomputed rather than read, in the order that reproduces the stored
    ones bit for bit (division before the 2π factor).
    """
    half = KERNEL // 2
    n_ = (2 * np.pi * (torch.arange(-half, 0.0) / SAMPLE_RATE)).view(1, -1)
    window_ = torch.from_numpy(np.hamming(KERNEL)[:half].astype(np.float32))
    low = MIN_LOW_HZ + torch.abs(low_hz_)
    high = torch.clamp(low + MIN_BAND_HZ + torch.abs(band_hz_), MIN_LOW_HZ, SAMPLE_RATE / 2)
    band = (high - low)[:, 0]
    cos_left = (torch.sin(high * n_) - torch.sin(low * n_)) / (n_ / 2) * window_
    cos = torch.cat([cos_left, 2 * band.view(-1, 1), cos_left.flip(dims=[1])], dim=1)
    sin_left = (torch.cos(low * n_) - torch.cos(high * n_)) / (n_ / 2) * window_
    sin = torch.cat([sin_left, torch.zeros_like(band.view(-1, 1)), -sin_left.flip(dims=[1])], dim=1)
    filters = torch.cat([cos, sin], dim=0) / (2 * torch.cat([band, band]).view(-1, 1))
    return filters.unsqueeze(1)


def shifted_instance_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Instance norm over time, computed two-pass after subtracting each row's first value.

    Mathematically F.instance_norm. onnxruntime's InstanceNormalization turns a constant row (digital
    silence gives whole constant channels) into rounding noise times 1/sqrt(eps) ≈ 316, which moved
    the silence golden output by 1.5e-4; shifted, a constant row is exactly zero and the ONNX graph is
    within 1.1e-5 of the reference on all three golden inputs, as close as float64 is.
    """
    x = x - x[..., :1]
    d = x - x.mean(dim=-1, keepdim=True)
    var = (d * d).mean(dim=-1, keepdim=True)
    return d / torch.sqrt(var + NORM_EPS) * weight.view(1, -1, 1) + bias.view(1, -1, 1)


class _Filterbank(nn.Module):
    """Holds the checkpoint's sinc parameters and buffers under their own names."""

    def __init__(self) -> None:
        super().__init__()
        self.low_hz_ = nn.Parameter(torch.zeros(N_SINC, 1))
        self.band_hz_ = nn.Parameter(torch.zeros(N_SINC, 1))
        self.register_buffer("window_", torch.zeros(KERNEL // 2))
        self.register_buffer("n_", torch.zeros(1, KERNEL // 2))


class _SincConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.filterbank = _Filterbank()


class SincNet(nn.Module):
    """Waveform instance norm, sinc conv (abs), two learned convs; each block pool → norm → leaky ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.wav_norm1d = nn.InstanceNorm1d(1, affine=True)
        self.conv1d = nn.ModuleList([_SincConv(), nn.Conv1d(80, 60, 5), nn.Conv1d(60, 60, 5)])
        self.norm1d = nn.ModuleList([nn.InstanceNorm1d(c, affine=True) for c in (80, 60, 60)])
        self.register_buffer("filters", torch.zeros(2 * N_SINC, 1, KERNEL), persistent=False)
        self.shifted_norm = False  # True in the exported graph; see shifted_instance_norm

    def bake_filters(self) -> None:
        """Compute the sinc conv weights from the loaded cut-offs (call after loading a state dict)."""
        fb = self.conv1d[0].filterbank
        with torch.no_grad():
            self.filters = sinc_filters(fb.low_hz_, fb.band_hz_)

    def _norm(self, x: torch.Tensor, norm: nn.InstanceNorm1d) -> torch.Tensor:
        if not self.shifted_norm:
            return F.instance_norm(x, weight=norm.weight, bias=norm.bias, eps=NORM_EPS)
        return shifted_instance_norm(x, norm.weight, norm.bias)

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        x = self._norm(waveform, self.wav_norm1d)
        x = torch.abs(F.conv1d(x, self.filters, stride=SINC_STRIDE))
        x = F.leaky_relu(self._norm(F.max_pool1d(x, 3, 3), self.norm1d[0]), LEAKY_SLOPE)
        for conv, norm in zip(self.conv1d[1:], self.norm1d[1:], strict=True):
            x = F.leaky_relu(self._norm(F.max_pool1d(conv(x), 3, 3), norm), LEAKY_SLOPE)
        return x


class PyanNet(nn.Module):
    """SincNet → 4-layer BiLSTM(128) → 2 × (Linear(128) → leaky ReLU) → Linear(7) → log-softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.sincnet = SincNet()
        self.lstm = nn.LSTM(60, 128, num_layers=4, bidirectional=True, batch_first=True, dropout=0.5)
        self.linear = nn.ModuleList([nn.Linear(256, 128), nn.Linear(128, 128)])
        self.classifier = nn.Linear(128, N_CLASSES)

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        x, _ = self.lstm(self.sincnet(waveform).transpose(1, 2))
        for layer in self.linear:
            x = F.leaky_relu(layer(x), LEAKY_SLOPE)
        return F.log_softmax(self.classifier(x), dim=-1)


def num_frames(n_samples: int) -> int:
    """Output frames for ``n_samples`` of input (589 for 10 s): the conv and pool arithmetic above."""
    n = (n_samples - KERNEL) // SINC_STRIDE + 1
    n = (n - 3) // 3 + 1
    n = (n - 4 - 3) // 3 + 1
    return (n - 4 - 3) // 3 + 1


# --- loading the pickle without pyannote.audio ------------------------------------------------------------


class _Opaque:
    """Stands in for pyannote's task classes in the checkpoint's metadata; the weights do not need them."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __setstate__(self, state: object) -> None:
        pass

    def __call__(self, *args: object, **kwargs: object) -> _Opaque:
        return self


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "pyannote" or module.startswith("pyannote."):
            return _Opaque
        return super().find_class(module, name)


def _pickle_module() -> ModuleType:
    mod = ModuleType("verilive_pyannote_pickle")
    mod.Unpickler = _Unpickler  # type: ignore[attr-defined]
    mod.load = pickle.load  # type: ignore[attr-defined]
    mod.__name__ = "pickle"
    return mod


def load_state_dict(source: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's state dict (the Lightning ``state_dict`` entry, or a plain dict of tensors)."""
    try:
        ck = torch.load(source, map_location="cpu", weights_only=True)
    except Exception:
        ck = torch.load(source, map_location="cpu", weights_only=False, pickle_module=_pickle_module())
    state = ck.get("state_dict", ck) if isinstance(ck, dict) else None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelError(f"{source}: not a segmentation-3.0 checkpoint (no state dict of tensors)")
    return dict(state)


def load_model(source: Path) -> PyanNet:
    """The model in eval mode, every checkpoint key matched (``strict=True``) and the filters baked."""
    model = PyanNet()
    try:
        model.load_state_dict(load_state_dict(source), strict=True)
    except RuntimeError as exc:
        raise ModelError(f"{source}: state dict does not match PyanNet: {exc}") from exc
    model.sincnet.bake_filters()
    return model.eval()


# --- ONNX ------------------------------------------------------------------------------------------------


def export_onnx(model: PyanNet, dest: Path) -> None:
    """Write the ONNX file (opset 17, dynamic batch and length), with :func:`shifted_instance_norm`."""
    model = copy.deepcopy(model)
    model.sincnet.shifted_norm = True
    export_legacy(
        model,
        torch.zeros(1, 1, CHUNK_SAMPLES),
        dest,
        input_names=[INPUT_NAME],
        output_names=[OUTPUT_NAME],
        dynamic_axes={INPUT_NAME: {0: "batch", 2: "samples"}, OUTPUT_NAME: {0: "batch", 1: "frames"}},
        ignore=None,  # the legacy exporter's deprecation and LSTM batch_first notes
    )


def verify_onnx(model: PyanNet, path: Path) -> float:
    """onnxruntime against torch on a speech-like random batch; returns the max probability difference."""
    sess = cpu_session(path)
    rng = np.random.default_rng(0)
    # Noise bursts of two levels, so the frames are not all one class.
    x = (rng.standard_normal((2, 1, CHUNK_SAMPLES)) * 0.05).astype(np.float32)
    x[:, :, 40000:90000] *= 0.1
    worst = 0.0
    for n in (CHUNK_SAMPLES, 48000):
        xi = x[:, :, :n]
        with torch.no_grad():
            want = model(torch.from_numpy(xi)).exp().numpy()
        (got,) = sess.run([OUTPUT_NAME], {INPUT_NAME: xi})
        what = f"segmentation ONNX export for {n} samples"
        shape = (2, num_frames(n), N_CLASSES)
        worst = max(worst, check_close(np.exp(got), want, VERIFY_ATOL, what, shape))
    return worst


def convert(source: Path, dest: Path) -> None:
    """Converter for the model store: checkpoint → verified ONNX at ``dest``; nothing written on failure."""
    model = load_model(Path(source))
    write_verified(dest, lambda p: export_onnx(model, p), lambda p: verify_onnx(model, p))


# --- the telephone student (train/segmentation_student.py) ---------------------------------------------

TELEPHONE_PARAMS_ID = "segmentation_tel_params"  # packaged tensors of verilive's distillation


def load_adapted(source: Path, params: Path) -> PyanNet:
    """The checkpoint with the adapted tensors of ``params`` (an ``.npz`` of state-dict entries) put in.
    Every name must exist in the checkpoint with the same shape; the rest stays as shipped."""
    model = load_model(source)
    state = model.state_dict()
    with np.load(params) as adapted:
        for name in adapted.files:
            if name not in state or tuple(state[name].shape) != adapted[name].shape:
                raise ModelError(f"{params}: tensor {name!r} does not fit the segmentation-3.0 checkpoint")
            state[name] = torch.from_numpy(adapted[name].astype(np.float32))
    model.load_state_dict(state, strict=True)
    model.sincnet.bake_filters()
    return model.eval()


def convert_telephone(source: Path, dest: Path) -> None:
    """Converter for ``pyannote_segmentation_tel``: checkpoint + packaged telephone tensors -> ONNX."""
    from verilive.models.store import packaged_path

    model = load_adapted(Path(source), packaged_path(TELEPHONE_PARAMS_ID))
    write_verified(dest, lambda p: export_onnx(model, p), lambda p: verify_onnx(model, p))
