"""Codec and channel chains (CODECS: MP3, Opus, GSM, A-/mu-law, narrow band, resampling, RawBoost)."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np
import soundfile as sf
import soxr
from scipy import signal

from train.antispoof_data.clips import SR
from train.antispoof_data.finishing import coloured_noise

CODECS = ("mp3", "opus", "gsm", "alaw", "ulaw", "amr-band", "resample", "rawboost", "codec2")


def _roundtrip(x: np.ndarray, sr: int, **kw: Any) -> np.ndarray:
    buf = io.BytesIO()
    sf.write(buf, np.clip(x, -1, 1), sr, **kw)
    buf.seek(0)
    y, _ = sf.read(buf, dtype="float32")
    return y.astype(np.float32)


def _at(x: np.ndarray, sr: int, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    y = soxr.resample(x, SR, sr, quality="HQ").astype(np.float32)
    return soxr.resample(fn(y), sr, SR, quality="HQ").astype(np.float32)[: x.size]


def rawboost(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """RawBoost-style (Tak et al. 2022) channel noise: a random multi-notch/peak FIR filter
    (linear convolutive), a mild memoryless polynomial (non-linear), sparse impulses and stationary
    coloured noise at 10-40 dB SNR."""
    taps = int(rng.integers(16, 64)) | 1
    h = np.zeros(taps)
    for _ in range(int(rng.integers(2, 6))):
        lo = rng.uniform(0.02, 0.9)
        band = signal.firwin(taps, [lo, min(0.99, lo + rng.uniform(0.02, 0.2))], pass_zero=False)
        h += rng.uniform(-0.6, 0.6) * band
    h[taps // 2] += 1.0
    y = signal.lfilter(h, [1.0], x)
    peak = np.max(np.abs(y)) + 1e-9
    y = y / peak
    y = (y + rng.uniform(-0.15, 0.15) * y**2 + rng.uniform(-0.2, 0.2) * y**3) * peak
    spikes = rng.uniform(size=y.size) < rng.uniform(0.0005, 0.005)
    y = y + spikes * rng.uniform(-1, 1, y.size) * rng.uniform(0.05, 0.3) * peak
    p = float(np.mean(y**2)) + 1e-12
    snr = rng.uniform(10, 40)
    y = y + coloured_noise(y.size, rng) * np.sqrt(p / 10 ** (snr / 10))
    return y.astype(np.float32)


def codec_chain(x: np.ndarray, name: str, rng: np.random.Generator) -> np.ndarray:
    """``x`` (16 kHz) through one channel of :data:`CODECS`, back at 16 kHz and its own length."""
    x = x.astype(np.float32)
    if name == "mp3":
        y = _roundtrip(x, SR, format="MP3", subtype="MPEG_LAYER_III", compression_level=rng.uniform(0.3, 1.0))
    elif name == "opus":
        y = _roundtrip(x, SR, format="OGG", subtype="OPUS", compression_level=rng.uniform(0.3, 1.0))
    elif name in ("gsm", "alaw", "ulaw"):
        sub = {"gsm": "GSM610", "alaw": "ALAW", "ulaw": "ULAW"}[name]
        sos = signal.butter(4, [rng.uniform(200, 350), 3400], btype="band", fs=8000, output="sos")
        y = _at(x, 8000, lambda z: _roundtrip(signal.sosfilt(sos, z), 8000, format="WAV", subtype=sub))
    elif name == "amr-band":  # narrow-band speech codec stand-in: 8 kHz, 300-3400 Hz, 13-bit, noisy
        sos = signal.butter(6, [300, 3400], btype="band", fs=8000, output="sos")

        def narrow(z: np.ndarray) -> np.ndarray:
            z = signal.sosfilt(sos, z)
            z = np.round(z * 4096) / 4096
            return (z + rng.normal(0, 10 ** (-rng.uniform(45, 60) / 20), z.size)).astype(np.float32)

        y = _at(x, 8000, narrow)
    elif name == "resample":
        sr = int(rng.choice([8000, 11025, 22050, 44100, 12000]))
        y = _at(x, sr, lambda z: z)
    elif name == "codec2":  # a channel genuine speech crosses too (radios): never a spoof cue
        from train.spoof_families import CODEC2_MODES, codec2

        y = codec2(x, str(rng.choice(CODEC2_MODES)))
    else:
        y = rawboost(x, rng)
    y = np.asarray(y, dtype=np.float32)[: x.size]
    if y.size < x.size:
        y = np.pad(y, (0, x.size - y.size))
    return y * np.float32(10 ** (rng.uniform(-12, 6) / 20))
