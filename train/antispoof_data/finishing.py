"""The finishing every clip goes through: a random level, noise floor, telephone channel or noise."""

from __future__ import annotations

import numpy as np
import soxr
from scipy import signal

from train.antispoof_data.clips import SR, rng_for


def telephone(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    y = soxr.resample(x, SR, 8000, quality="HQ")
    sos = signal.butter(4, [rng.uniform(250, 350), 3400], btype="band", fs=8000, output="sos")
    y = signal.sosfilt(sos, y)
    mu = 255.0
    peak = max(1e-6, float(np.max(np.abs(y))))
    z = np.sign(y / peak) * np.log1p(mu * np.abs(y / peak)) / np.log1p(mu)
    z = np.round(z * 127) / 127
    y = peak * np.sign(z) * ((1 + mu) ** np.abs(z) - 1) / mu
    return soxr.resample(y.astype(np.float32), 8000, SR, quality="HQ")


def coloured_noise(n: int, rng: np.random.Generator) -> np.ndarray:
    w = rng.standard_normal(n)
    slope = rng.choice([0.0, 0.5, 1.0])  # white, "pinkish", brown-ish spectra
    if slope == 0.0:
        return w
    spec = np.fft.rfft(w)
    f = np.arange(spec.size) + 1.0
    y = np.fft.irfft(spec / f ** (slope / 2), n)
    return y / (np.std(y) + 1e-12)


def finish(x: np.ndarray, key: str) -> tuple[np.ndarray, str]:
    rng = rng_for("finish/" + key)
    x = x.astype(np.float64)
    x = x - x.mean()
    tags = []
    u = rng.uniform()
    if u < 0.15:
        x = telephone(x, rng)
        tags.append("tel")
    elif u < 0.30:
        snr = rng.uniform(10, 30)
        n = coloured_noise(x.size, rng)
        p = np.mean(x**2) + 1e-12
        x = x + n * np.sqrt(p / 10 ** (snr / 10))
        tags.append(f"noise{snr:.0f}dB")
    peak = 10 ** (rng.uniform(-20, -1) / 20)
    x = x * peak / (np.max(np.abs(x)) + 1e-9)
    if rng.uniform() < 0.5:
        floor = 10 ** (rng.uniform(-80, -55) / 20)
        x = x + floor * coloured_noise(x.size, rng)
        tags.append("floor")
    return np.clip(x, -1, 1).astype(np.float32), "+".join(tags) or "clean"
