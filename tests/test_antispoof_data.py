"""The LPC vocoder of the anti-spoofing data (train.antispoof_data.vocoded; evaluation only, EVAL_ONLY)."""

from __future__ import annotations

import re

import numpy as np
from scipy import signal
from train.antispoof_data import SR, lpc_frames, lpc_vocode

from verilive.voice.utterance_cues import f0_track

FORMANTS = [1.0, -1.3, 0.8]  # an all-pole filter with a resonance near 1.9 kHz


def test_lpc_frames_recover_an_all_pole_filter() -> None:
    rng = np.random.default_rng(0)
    x = signal.lfilter([0.5], FORMANTS, rng.standard_normal(2 * SR))
    a, g = lpc_frames(x, order=2, win=512, hop=160)
    assert a.shape == (2 * SR // 160 + 1, 3)
    inner = slice(4, -4)  # frames that lie wholly inside the signal
    np.testing.assert_allclose(np.median(a[inner], axis=0), FORMANTS, atol=0.05)
    assert abs(np.median(g[inner]) - 0.5) < 0.05  # the residual is the scaled white noise


def test_lpc_frames_of_silence_are_a_pass_through() -> None:
    a, g = lpc_frames(np.zeros(SR // 2), order=16, win=400, hop=80)
    assert np.all(a[:, 0] == 1.0) and np.all(a[:, 1:] == 0.0) and np.all(g == 0.0)


def _vowel(f0: float, seconds: float = 1.5) -> np.ndarray:
    n = int(seconds * SR)
    pulses = np.zeros(n)
    pulses[:: int(SR / f0)] = 1.0
    return signal.lfilter([1.0], FORMANTS, pulses).astype(np.float32)


def test_lpc_vocoder_keeps_the_envelope_and_moves_the_pitch() -> None:
    x = _vowel(125.0)
    track = (np.arange(0, 1.6, 0.005), np.full(320, 125.0))
    key = next(f"t{i}" for i in range(100) if "f0 x1.00" not in lpc_vocode(x, f"t{i}", track)[1])
    y, how = lpc_vocode(x, key, track)
    ratio = float(re.search(r"f0 x([0-9.]+)", how).group(1))  # type: ignore[union-attr]
    mix = float(re.search(r"noise mix ([0-9.]+)", how).group(1))  # type: ignore[union-attr]
    assert y.shape == x.shape and y.dtype == np.float32 and np.all(np.isfinite(y))
    assert np.isclose(np.abs(y).max(), np.abs(x).max(), rtol=1e-5)  # the source's peak level
    # the pitch is the source's times the drawn ratio
    f0, strength = f0_track(y[SR // 4 : -SR // 4])
    voiced = strength > (0.5 if mix < 0.3 else 0.3)
    assert voiced.mean() > 0.5
    assert abs(np.median(f0[voiced]) / (125.0 * ratio) - 1) < 0.03, (np.median(f0[voiced]), ratio)
    # the spectral envelope is the source's: a 2nd-order fit to the output finds the source's filter
    a, _ = lpc_frames(y, order=2, win=512, hop=160)
    np.testing.assert_allclose(np.median(a[4:-4], axis=0), FORMANTS, atol=0.03)
    # seeded by the key
    assert np.array_equal(y, lpc_vocode(x, key, track)[0])
    assert not np.array_equal(y, lpc_vocode(x, key + "-other", track)[0])


def test_lpc_vocoder_leaves_unvoiced_frames_as_noise() -> None:
    x = _vowel(125.0, 1.0)
    unvoiced = (np.arange(0, 1.1, 0.005), np.zeros(220))
    y, _ = lpc_vocode(x, "t0", unvoiced)
    _, strength = f0_track(y)
    assert np.median(strength) < 0.3  # no pulses: no periodicity
