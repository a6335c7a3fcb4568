"""Voice activity detection with Silero VAD v6 (ONNX), in numpy and onnxruntime only.

The model scores one window of 32 ms at a time: 512 samples at 16 kHz or 256 at 8 kHz, each fed
together with the last 64 (16 kHz) or 32 (8 kHz) samples of the window before it, plus an LSTM state
of shape (2, batch, 128) carried from window to window. Every other sample rate is resampled with
soxr first (to 16 kHz, or to 8 kHz when the rate is below 16 kHz), so a window is always 32 ms.

``SileroVad`` turns a whole signal into per-window probabilities and speech intervals; it keeps no
per-call state on ``self``, so one instance (and its onnxruntime session) can serve many threads.
See docs/vad.md for the rules and measured accuracy and speed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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

MODEL_ID = "silero_vad"
# 512 samples at 16 kHz and 256 at 8 kHz: every window (and hop) is 32 ms at either model rate.
WINDOW_SECONDS = 0.032
_WINDOW = {8000: 256, 16000: 512}
_CONTEXT = {8000: 32, 16000: 64}
_STATE_UNITS = 128
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

    def __init__(self, session: Any, config: VadConfig = VadConfig()) -> None:
        self.session = session
        self.config = config

    @classmethod
    def from_registry(cls, registry: Any, config: VadConfig = VadConfig()) -> SileroVad:
        """A VAD over ``registry.session("silero_vad")`` (loaded on first use, shared)."""
        return cls(registry.session(MODEL_ID), config)

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
