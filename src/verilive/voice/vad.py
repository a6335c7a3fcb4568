"""Voice activity detection with Silero VAD v6 (ONNX), in numpy and onnxruntime only.

The model scores one window of 32 ms at a time: 512 samples at 16 kHz or 256 at 8 kHz, each fed
together with the last 64 (16 kHz) or 32 (8 kHz) samples of the window before it, plus an LSTM state
of shape (2, batch, 128) carried from window to window. Every other sample rate is resampled with
soxr first (to 16 kHz, or to 8 kHz when the rate is below 16 kHz), so a window is always 32 ms.

``SileroVad`` turns a whole signal into per-window probabilities and speech intervals; it keeps no
per-call state on ``self``, so one instance (and its onnxruntime session) can serve many threads.
See docs/vad.md for the rules and measured accuracy and speed.

Only the LSTM step carries state from window to window; the STFT and convolutional encoder before
it see one window (with its context) at a time. Built from the model file (``from_registry``), the
VAD reads each sample-rate branch's weights from the graph once and runs the STFT and encoder on a
block of windows as a few matrix products in numpy, then the LSTM cell and 1x1 decoder window by
window (issue 49: 313 single onnxruntime runs for 10 s took 38 ms, this 11 ms). Probabilities equal
the per-window model's within float rounding; that is checked against the model on a probe signal
when the parts are built, and a mismatch falls back to running the model window by window.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from verilive.audio.resample import resample
from verilive.audio.samples import as_mono, check_rate

__all__ = [
    "MODEL_ID",
    "WINDOW_SECONDS",
    "SileroVad",
    "VadConfig",
    "model_rate",
    "segments_from_probabilities",
    "segments_to_mask",
]

log = logging.getLogger(__name__)

MODEL_ID = "silero_vad"
# 512 samples at 16 kHz and 256 at 8 kHz: every window (and hop) is 32 ms at either model rate.
WINDOW_SECONDS = 0.032
_WINDOW = {8000: 256, 16000: 512}
_CONTEXT = {8000: 32, 16000: 64}
_STATE_UNITS = 128
# The graph's sample-rate switch: ``If_0`` takes its then-branch for sr == 16000, else 8 kHz.
_IF_NODE = "If_0"
_BRANCH = {16000: "then_branch", 8000: "else_branch"}
_ENCODER_STRIDES = (1, 2, 2, 1)
# Windows encoded per batch: bounds the intermediate arrays to ~3 MB at 16 kHz.
_BATCH_WINDOWS = 128
_WEIGHTS = (
    "stft.forward_basis_buffer",
    *(f"encoder.{k}.reparam_conv.{p}" for k in range(4) for p in ("weight", "bias")),
    "decoder.rnn.weight_ih", "decoder.rnn.weight_hh", "decoder.rnn.bias_ih", "decoder.rnn.bias_hh",
    "decoder.decoder.2.weight", "decoder.decoder.2.bias",
)  # fmt: skip
# Largest difference in probability the batched parts may show against the per-window model on
# the probe signal; float rounding gives ~3e-7.
_PARTS_TOLERANCE = 1e-4
# Windows are framed this many at a time (~1.2 MB at 16 kHz), so memory stays bounded
# for hour-long input while numpy, not Python, does the slicing and sanitising.
_BLOCK_WINDOWS = 512


def model_rate(sample_rate: int) -> int:
    """The rate the model runs at for input at ``sample_rate``: 8 and 16 kHz natively, else resampled."""
    return 8000 if sample_rate < 16000 else 16000


@dataclass(frozen=True)
class VadConfig:
    """Rules that turn per-window speech probabilities into speech intervals (docs/vad.md).

    threshold: a window with p >= threshold starts (or continues) speech.
    neg_threshold: speech ends at the first window with p < neg_threshold; windows in between keep the
        current state (hysteresis), so a probability hovering around ``threshold`` does not flicker.
    min_speech_ms: speech runs shorter than this (after merging) are dropped as blips.
    min_silence_ms: gaps inside speech shorter than this are merged into the speech around them.
    speech_pad_ms: each interval is widened by this much on both sides, clipped to the signal; when
        two padded neighbours would overlap they meet at the middle of the gap between them.
    """

    threshold: float = 0.5
    neg_threshold: float = 0.35
    min_speech_ms: float = 250.0
    min_silence_ms: float = 100.0
    speech_pad_ms: float = 30.0

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if not 0.0 < self.neg_threshold <= self.threshold:
            raise ValueError(
                f"neg_threshold must be in (0, threshold={self.threshold}], got {self.neg_threshold}"
            )
        for name in ("min_speech_ms", "min_silence_ms", "speech_pad_ms"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v}")


# --------------------------------------------------------------------------------- input handling


def _at_model_rate(wave: np.ndarray, sample_rate: int) -> tuple[np.ndarray, int]:
    x = as_mono(wave, "VAD input")
    rate = check_rate(sample_rate)
    mr = model_rate(rate)
    return (x if rate == mr else resample(x, rate, mr)), mr


def _consecutive_frames(x: np.ndarray, first: int, count: int, window: int, context: int) -> np.ndarray:
    """Model inputs for the ``count`` consecutive windows from window ``first``: [count, context + window].

    One zero-padded, sanitised copy of the samples they cover, viewed as overlapping rows (read-only).
    Samples before 0 or past the end are zeros: the first window's context and the last partial
    window's padding. Non-finite samples become 0 so one bad sample cannot poison the LSTM state.
    """
    start = first * window - context
    buf = np.zeros(context + count * window, dtype=np.float32)
    lo, hi = max(start, 0), min(start + buf.shape[0], x.shape[0])
    if hi > lo:
        buf[lo - start : hi - start] = x[lo:hi]
    if not np.isfinite(buf).all():
        buf[~np.isfinite(buf)] = 0.0
    return np.lib.stride_tricks.sliding_window_view(buf, context + window)[::window]


# --------------------------------------------------------------------------------- segmentation


def segments_from_probabilities(
    probs: np.ndarray, n_samples: int, sample_rate: int, config: VadConfig = VadConfig()
) -> list[tuple[int, int]]:
    """Speech intervals [start, end) in samples at ``sample_rate`` from per-window probabilities.

    Window i covers [i, i + 1) * WINDOW_SECONDS; ``n_samples`` is the signal length the intervals are
    clipped to. The rules are applied in this order: hysteresis, merge short gaps, drop short runs, pad.
    """
    p = np.nan_to_num(np.asarray(probs, dtype=np.float64).ravel(), nan=0.0)
    if p.size == 0 or n_samples <= 0:
        return []
    # Hysteresis, vectorised: each window is 'on' (p >= threshold), 'off' (p < neg_threshold) or
    # 'keep'; a 'keep' window takes the state of the last decided window before it (off at the start).
    decided = (p >= config.threshold) | (p < config.neg_threshold)
    last = np.maximum.accumulate(np.where(decided, np.arange(p.size), -1))
    speech = np.where(last >= 0, p[np.maximum(last, 0)] >= config.threshold, False)

    edges = np.flatnonzero(np.diff(np.concatenate([[0], speech.astype(np.int8), [0]])))
    runs = [(float(a) * WINDOW_SECONDS, float(b) * WINDOW_SECONDS) for a, b in edges.reshape(-1, 2)]

    min_silence = config.min_silence_ms / 1000.0
    merged: list[list[float]] = []
    for a, b in runs:
        # The small epsilon keeps "gap == min_silence" from flipping on float rounding of k * 0.032.
        if merged and a - merged[-1][1] < min_silence - 1e-9:
            merged[-1][1] = b
        else:
            merged.append([a, b])

    min_speech = config.min_speech_ms / 1000.0
    kept = [(a, b) for a, b in merged if b - a >= min_speech - 1e-9]

    duration = n_samples / sample_rate
    pad = config.speech_pad_ms / 1000.0
    padded = [[max(0.0, a - pad), min(duration, b + pad)] for a, b in kept]
    for i in range(1, len(padded)):
        if padded[i][0] < padded[i - 1][1]:
            # Padding may not make neighbours overlap: both stop at the middle of the original gap.
            mid = 0.5 * (kept[i - 1][1] + kept[i][0])
            padded[i - 1][1] = mid
            padded[i][0] = mid

    out: list[tuple[int, int]] = []
    for a, b in padded:
        s = min(n_samples, round(a * sample_rate))
        e = min(n_samples, round(b * sample_rate))
        if e > s:
            out.append((s, e))
    return out


def segments_to_mask(segments: list[tuple[int, int]], n_samples: int, hop: int = 1) -> np.ndarray:
    """Boolean speech mask: per sample (``hop`` = 1) or per frame of ``hop`` samples.

    Frame j covers samples [j * hop, (j + 1) * hop) and is speech when its centre sample is inside an
    interval, so a frame counts once even when an interval edge cuts it.
    """
    if hop < 1:
        raise ValueError(f"hop must be >= 1, got {hop}")
    n_frames = -(-max(n_samples, 0) // hop)
    mask = np.zeros(n_frames, dtype=bool)
    if n_frames == 0:
        return mask
    for s, e in segments:
        # Frame j is in [s, e) when s <= j * hop + (hop - 1) / 2 < e; doubled to stay in integers, and
        # solved for j so no per-frame array is built (an hour at hop 1 would be 460 MB of centres).
        lo = min(n_frames, max(0, -(-(2 * s - hop + 1) // (2 * hop))))
        hi = min(n_frames, max(0, -(-(2 * e - hop + 1) // (2 * hop))))
        mask[lo:hi] = True
    return mask


# --------------------------------------------------------------------------------- the model


class SileroVad:
    """Whole-signal Silero VAD over one shared onnxruntime session.

    Thread-safe: every call builds its own state and context; ``self`` holds only the session and
    a frozen config.
    """

    RATES = (8000, 16000)

    def __init__(
        self,
        session: Any,
        config: VadConfig = VadConfig(),
        model_path: Path | None = None,
    ) -> None:
        """``session``: the whole model, run one window at a time. With ``model_path`` (the same
        model's file) the batched parts are built from its weights on first use and used instead."""
        self.session = session
        self.config = config
        self.model_path = model_path
        self._parts: dict[int, _BatchedSilero] | None = None
        self._parts_lock = threading.Lock()

    @classmethod
    def from_registry(cls, registry: Any, config: VadConfig = VadConfig()) -> SileroVad:
        """A VAD over ``registry.session("silero_vad")`` (loaded on first use, shared), with the
        batched parts read from the same verified model file."""
        session = registry.session(MODEL_ID)
        return cls(session, config, registry.path(MODEL_ID))

    def batched_parts(self) -> dict[int, _BatchedSilero] | None:
        """The batched parts per model rate, built once; None without a model file, or when the
        parts do not reproduce the per-window model (then every call runs window by window)."""
        if self.model_path is None:
            return None
        if self._parts is None:
            with self._parts_lock:
                if self._parts is None:
                    self._parts = self._build_parts(self.model_path)
        return self._parts or None

    def _build_parts(self, model_path: Path) -> dict[int, _BatchedSilero]:
        try:
            data = model_path.read_bytes()
            parts = {mr: _BatchedSilero.from_model(data, mr) for mr in _BRANCH}
            probe = _probe_signal()
            for mr, part in parts.items():
                x = probe if mr == 16000 else probe[::2].copy()
                diff = float(np.max(np.abs(part.probabilities(x) - self._window_by_window(x, mr))))
                if not diff <= _PARTS_TOLERANCE:
                    raise RuntimeError(f"batched {mr} Hz parts differ from the model by {diff:.2e}")
            return parts
        except Exception as e:  # a different graph layout: stay correct, only slower
            log.warning("Silero VAD runs window by window: batched parts not built (%s)", e)
            return {}

    # --- probabilities ---------------------------------------------------------------------------

    def probabilities(self, wave: np.ndarray, sample_rate: int) -> tuple[np.ndarray, float]:
        """Speech probability of every 32 ms window, and the window hop in seconds (WINDOW_SECONDS).

        ``wave`` is float mono in [-1, 1] at any rate. Window i covers [i, i + 1) * hop seconds of the
        input; the last window is zero-padded, so there are ceil(duration / hop) windows at the model
        rate (0 for empty input). Each call starts from a zero state and zero context.
        """
        x, mr = _at_model_rate(wave, sample_rate)
        return self._probabilities(x, mr), WINDOW_SECONDS

    def _probabilities(self, x: np.ndarray, mr: int) -> np.ndarray:
        parts = self.batched_parts()
        if parts:
            return parts[mr].probabilities(x)
        return self._window_by_window(x, mr)

    def _window_by_window(self, x: np.ndarray, mr: int) -> np.ndarray:
        """One ``session.run`` per window (B = 1), the state carried from each window to the next."""
        window, context = _WINDOW[mr], _CONTEXT[mr]
        n_windows = -(-x.shape[0] // window)
        out = np.empty(n_windows, dtype=np.float32)
        feed: dict[str, Any] = {
            "input": None,
            "state": np.zeros((2, 1, _STATE_UNITS), dtype=np.float32),
            "sr": np.array(mr, dtype=np.int64),
        }
        run = self.session.run
        for b0 in range(0, n_windows, _BLOCK_WINDOWS):
            b1 = min(n_windows, b0 + _BLOCK_WINDOWS)
            frames = _consecutive_frames(x, b0, b1 - b0, window, context)
            for i in range(b1 - b0):
                feed["input"] = frames[i : i + 1]
                prob, feed["state"] = run(None, feed)
                out[b0 + i] = prob[0, 0]
        return out

    # --- decisions -------------------------------------------------------------------------------

    def segments(self, wave: np.ndarray, sample_rate: int) -> list[tuple[int, int]]:
        """Speech intervals [start, end) in samples of the input rate, after ``self.config``'s rules."""
        x, mr = _at_model_rate(wave, sample_rate)
        probs = self._probabilities(x, mr)
        return segments_from_probabilities(
            probs, int(np.shape(wave)[0]), check_rate(sample_rate), self.config
        )

    def speech_mask(self, wave: np.ndarray, sample_rate: int, hop: int = 1) -> np.ndarray:
        """:func:`segments_to_mask` of :meth:`segments`: per sample, or per frame of ``hop`` samples."""
        return segments_to_mask(self.segments(wave, sample_rate), int(np.shape(wave)[0]), hop)


# --------------------------------------------------------------------------------- batched parts


def _probe_signal() -> np.ndarray:
    """1.5 s at 16 kHz that moves the VAD: noise, then a voiced buzz with a moving pitch."""
    rng = np.random.default_rng(49)
    t = np.arange(24000) / 16000.0
    f0 = 120.0 + 40.0 * np.sin(2 * np.pi * 1.5 * t)
    buzz = sum(np.sin(2 * np.pi * k * np.cumsum(f0) / 16000.0) / k for k in range(1, 12))
    x = 0.02 * rng.standard_normal(t.size) + np.where(t > 0.5, 0.2 * buzz, 0.0)
    return x.astype(np.float32)


class _BatchedSilero:
    """One sample-rate branch of Silero in numpy: the STFT and the four encoder convolutions over
    a block of windows at once (a few matrix products), then the LSTM cell window by window and the
    1x1 decoder. The weights are the branch's constants, read once through onnxruntime."""

    def __init__(self, weights: dict[str, np.ndarray], mr: int) -> None:
        self.mr = mr
        self.window, self.context = _WINDOW[mr], _CONTEXT[mr]
        basis = np.asarray(weights["stft.forward_basis_buffer"], dtype=np.float32)
        self.n_fft = basis.shape[2]
        self.hop, self.pad = self.n_fft // 2, self.n_fft // 4
        self.bins = basis.shape[0] // 2
        self.basis_t = np.ascontiguousarray(basis[:, 0, :].T)  # (n_fft, 2 * bins): real, then imaginary
        # Conv1d weights (out, in, 3) as (in * 3, out) for products with (in, 3) windows of frames.
        self.convs = [
            (
                np.ascontiguousarray(
                    weights[f"encoder.{k}.reparam_conv.weight"]
                    .reshape(weights[f"encoder.{k}.reparam_conv.weight"].shape[0], -1)
                    .T,
                    dtype=np.float32,
                ),
                np.asarray(weights[f"encoder.{k}.reparam_conv.bias"], dtype=np.float32),
                stride,
            )
            for k, stride in enumerate(_ENCODER_STRIDES)
        ]
        w_ih, w_hh = weights["decoder.rnn.weight_ih"], weights["decoder.rnn.weight_hh"]
        n = _STATE_UNITS
        if w_ih.shape != (4 * n, n) or w_hh.shape != (4 * n, n):
            raise ValueError(f"unexpected LSTM weights {w_ih.shape}, {w_hh.shape}")
        # Gates in PyTorch's order (input, forget, cell, output). sigmoid(z) = (1 + tanh(z / 2)) / 2,
        # so the sigmoid gates' rows are halved and one tanh per step covers all four gates.
        scale = np.full((4 * n, 1), 0.5, dtype=np.float32)
        scale[2 * n : 3 * n] = 1.0
        self.w_ih_t = np.ascontiguousarray((w_ih * scale).T, dtype=np.float32)
        self.w_hh_t = np.ascontiguousarray((w_hh * scale).T, dtype=np.float32)
        bias = (weights["decoder.rnn.bias_ih"] + weights["decoder.rnn.bias_hh"]) * scale[:, 0]
        self.bias = bias.astype(np.float32)
        self.w_out = np.asarray(weights["decoder.decoder.2.weight"], dtype=np.float32).reshape(n)
        self.b_out = float(np.asarray(weights["decoder.decoder.2.bias"]).reshape(()))

    @classmethod
    def from_model(cls, data: bytes, mr: int) -> _BatchedSilero:
        from verilive.models.onnx_graph import branch_nodes, cut_subgraph
        from verilive.models.sessions import cpu_session

        branch = _BRANCH[mr]
        outputs = [
            o for _, op, outs in branch_nodes(data, _IF_NODE, branch) if op == "Constant" for o in outs
        ]
        found = {w: [o for o in outputs if o.endswith("__" + w)] for w in _WEIGHTS}
        if any(len(v) != 1 for v in found.values()):
            raise ValueError(f"{branch}: weights not found: {[w for w, v in found.items() if len(v) != 1]}")
        names = [v[0] for v in found.values()]
        consts = cpu_session(cut_subgraph(data, names, f"silero_weights_{mr}", (_IF_NODE, branch)), 1)
        return cls(dict(zip(_WEIGHTS, consts.run(names, {}), strict=True)), mr)

    def _encode(self, frames: np.ndarray) -> np.ndarray:
        """(B, context + window) model inputs -> (B, 128) encoder output (one time step each)."""
        b = frames.shape[0]
        # The model's STFT: reflect-pad the right end, frames of n_fft at hop n_fft / 2, magnitude.
        x = np.pad(frames, ((0, 0), (0, self.pad)), mode="reflect")
        spec = np.lib.stride_tricks.sliding_window_view(x, self.n_fft, axis=1)[:, :: self.hop]
        t = spec.shape[1]
        z = spec.reshape(b * t, self.n_fft) @ self.basis_t
        h = np.sqrt(z[:, : self.bins] ** 2 + z[:, self.bins :] ** 2).reshape(b, t, self.bins)
        for w, bias, stride in self.convs:  # kernel 3, padding 1, then ReLU; h is (B, T, C)
            hp = np.pad(h, ((0, 0), (1, 1), (0, 0)))
            cols = np.lib.stride_tricks.sliding_window_view(hp, 3, axis=1)[:, ::stride]  # (B, T', C, 3)
            t = cols.shape[1]
            h = np.maximum(cols.reshape(b * t, -1) @ w + bias, 0.0).reshape(b, t, -1)
        if h.shape[1] != 1 or h.shape[2] != _STATE_UNITS:
            # the model averages over time after the decoder: the same as here only for one step
            raise RuntimeError(f"unexpected Silero encoder output {h.shape}")
        return h[:, 0, :]

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """Speech probability per window of ``x`` (float32 at this branch's rate), from a zero state."""
        n_windows = -(-x.shape[0] // self.window)
        out = np.empty(n_windows, dtype=np.float32)
        n = _STATE_UNITS
        h = np.zeros(n, dtype=np.float32)
        c = np.zeros(n, dtype=np.float32)
        w_hh_t, tanh = self.w_hh_t, np.tanh
        for b0 in range(0, n_windows, _BATCH_WINDOWS):
            b1 = min(n_windows, b0 + _BATCH_WINDOWS)
            frames = _consecutive_frames(x, b0, b1 - b0, self.window, self.context)
            gates_in = self._encode(frames) @ self.w_ih_t + self.bias
            hs = np.empty((b1 - b0, n), dtype=np.float32)
            for i in range(b1 - b0):
                z = tanh(gates_in[i] + h @ w_hh_t)
                c = (0.5 + 0.5 * z[n : 2 * n]) * c + (0.5 + 0.5 * z[:n]) * z[2 * n : 3 * n]
                h = (0.5 + 0.5 * z[3 * n :]) * tanh(c)
                hs[i] = h
            logits = np.maximum(hs, 0.0) @ self.w_out + self.b_out
            out[b0:b1] = 1.0 / (1.0 + np.exp(-logits))
        return out
