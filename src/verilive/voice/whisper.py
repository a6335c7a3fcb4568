"""OpenAI Whisper's audio encoders (ONNX): log-mel front end in numpy, encoder on onnxruntime.

The one wrapper of the ``whisper_tiny_en_encoder`` and ``whisper_base_encoder`` models
(docs/model-whisper.md). The front end is
Whisper's: 16 kHz mono, a 400-point STFT (25 ms periodic Hann window, 10 ms hop, centred with reflect
padding; the last frame dropped), power spectrum, 80 Slaney-scale mel bands from 0 to 8 kHz with
Slaney area normalisation, log10 floored at 1e-10 and at 8 below the clip's maximum, then
(x + 4) / 4. Whisper was trained on 30 s windows padded with zeros; this wrapper feeds the clip
unpadded (3.5x faster on short clips), a shift from training that the probes are trained under.

``WhisperEncoder`` keeps no per-call state on ``self``: one instance serves many threads.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from verilive.errors import InvalidParameter

__all__ = ["BASE_MODEL_ID", "SAMPLE_RATE", "TINY_EN_MODEL_ID", "WhisperEncoder", "log_mel", "mel_filters"]

TINY_EN_MODEL_ID = "whisper_tiny_en_encoder"  # 4 layers, 384 dims; what the probes compared
BASE_MODEL_ID = "whisper_base_encoder"  # 6 layers, 512 dims; the same front end and outputs
SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160
N_MELS = 80
MAX_FRAMES = 3000  # the encoder's 1500 positions, after its stride-2 convolution: 30 s


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above (27 mels per
    factor 6.4)."""
    f = np.asarray(f, dtype=np.float64)
    lin = f * 3.0 / 200.0
    return np.where(f < 1000.0, lin, 15.0 + 27.0 * np.log(np.maximum(f, 1e-9) / 1000.0) / np.log(6.4))


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    return np.where(m < 15.0, m * 200.0 / 3.0, 1000.0 * np.exp((m - 15.0) * np.log(6.4) / 27.0))


@lru_cache(maxsize=4)
def mel_filters(
    sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS, fmax: float | None = None
) -> np.ndarray:
    """[n_mels, n_fft // 2 + 1] triangular filters on the Slaney scale from 0 Hz to ``fmax`` (default
    Nyquist), each scaled by 2 / its bandwidth (equal area)."""
    top = sample_rate / 2.0 if fmax is None else fmax
    edges = _mel_to_hz(np.linspace(0.0, float(_hz_to_mel(np.array(top))), n_mels + 2))
    bins = np.fft.rfftfreq(n_fft, 1.0 / sample_rate)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins[None, :] - lo) / (mid - lo)
    falling = (hi - bins[None, :]) / (hi - mid)
    tri = np.clip(np.minimum(rising, falling), 0.0, None)
    out = tri * (2.0 / (hi - lo))
    out.setflags(write=False)
    return out.astype(np.float32)


def log_mel(audio: np.ndarray) -> np.ndarray:
    """Whisper's log-mel of 16 kHz mono float audio: [80, frames], 100 frames per second."""
    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    if x.size < N_FFT // 2 + 1:
        raise InvalidParameter(f"audio too short for the Whisper front end: {x.size} samples")
    padded = np.pad(x, N_FFT // 2, mode="reflect")
    count = 1 + (padded.size - N_FFT) // HOP
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP][:count]
    window = (0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(N_FFT) / N_FFT)).astype(np.float32)
    power = np.abs(np.fft.rfft(frames * window, axis=-1)) ** 2
    mel = mel_filters() @ power[:-1].T.astype(np.float32)
    logs = np.log10(np.maximum(mel, 1e-10))
    logs = np.maximum(logs, logs.max() - 8.0)
    return ((logs + 4.0) / 4.0).astype(np.float32)


class WhisperEncoder:
    """The encoder on onnxruntime: log-mel [B, 80, frames] -> (encoded, layers)."""

    def __init__(self, session: Any) -> None:
        inputs = [i.name for i in session.get_inputs()]
        outputs = [o.name for o in session.get_outputs()]
        if inputs != ["mel"] or outputs != ["encoded", "layers"]:
            raise ValueError(f"not a Whisper encoder session: inputs {inputs}, outputs {outputs}")
        self.session = session

    @classmethod
    def from_registry(cls, registry: Any, model_id: str) -> WhisperEncoder:
        """The encoder ``model_id`` names (the anti-spoofing model's metadata says which it uses)."""
        if model_id not in (TINY_EN_MODEL_ID, BASE_MODEL_ID):
            raise ValueError(f"not a Whisper encoder model: {model_id!r}")
        return cls(registry.session(model_id))

    def run(self, mel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``encoded`` [B, frames/2, dims] and ``layers`` [B, layers+1, frames/2, dims] of a log-mel
        batch [B, 80, frames] (frames even, at most 3000)."""
        m = np.asarray(mel, dtype=np.float32)
        if m.ndim != 3 or m.shape[1] != N_MELS or not 2 <= m.shape[2] <= MAX_FRAMES:
            raise InvalidParameter(f"expected a log-mel [batch, 80, 2..{MAX_FRAMES}], got {m.shape}")
        encoded, layers = self.session.run(None, {"mel": m})
        return encoded, layers

    def layers(self, audio: np.ndarray) -> np.ndarray:
        """[depths, steps, dims] of one 16 kHz clip of up to 30 s: the residual stream after the
        convolutions and after each block (5 x 384 for tiny.en, 7 x 512 for base)."""
        mel = log_mel(audio)
        mel = mel[:, : min(MAX_FRAMES, mel.shape[1] - mel.shape[1] % 2)]
        return self.run(mel[None])[1][0]
