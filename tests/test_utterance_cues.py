"""Utterance cues for anti-spoofing (verilive.voice.utterance_cues): names, robustness and physics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

from verilive.voice.utterance_cues import FEATURE_NAMES, SR, feature_dict, utterance_features

LIBRI = "data/voice/librispeech_251spk_gender/103-1240-0000.flac"


def harmonic_tone(f0: float, seconds: float, phase_jitter: float, seed: int = 0) -> np.ndarray:
    """Eight harmonics of ``f0`` with a fixed pulse shape; with ``phase_jitter`` > 0 each harmonic's
    phase is redrawn every 10 ms (so the relation between harmonics is lost, as in phase
    reconstruction), the magnitudes staying the same."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SR)
    t = np.arange(n) / SR
    seg = SR // 100
    x = np.zeros(n)
    for k in range(1, 9):
        base = rng.uniform(0, 2 * np.pi)
        jumps = np.repeat(rng.uniform(-np.pi, np.pi, n // seg + 1) * phase_jitter, seg)[:n]
        x += np.cos(2 * np.pi * k * f0 * t + base + jumps) / k
    return (0.3 * x / np.max(np.abs(x))).astype(np.float32)


def test_names_and_shape() -> None:
    assert len(FEATURE_NAMES) == 32 == len(set(FEATURE_NAMES))
    f = utterance_features(harmonic_tone(140.0, 2.0, 0.0))
    assert f.shape == (32,) and f.dtype == np.float32
    # every named cue is produced (and nothing else)
    assert set(feature_dict(harmonic_tone(140.0, 2.0, 0.0))) == set(FEATURE_NAMES)


def test_unmeasurable_input_gives_nan_not_errors() -> None:
    for x in (np.zeros(0), np.zeros(10), np.zeros(SR), np.full(SR, 0.5)):
        f = utterance_features(x)
        assert f.shape == (32,)
        assert np.isnan(f[FEATURE_NAMES.index("rps2_conc")])  # no voiced frames: not measurable
    noise = np.random.default_rng(1).standard_normal(2 * SR).astype(np.float32) * 0.1
    f = utterance_features(noise)
    assert f[FEATURE_NAMES.index("voiced_frac")] < 0.1  # white noise is not voiced


def test_level_invariant(shared_dir: Path) -> None:
    x, sr = sf.read(shared_dir / LIBRI, dtype="float32")
    assert sr == SR
    x = x[: 5 * SR]
    a, b = utterance_features(x), utterance_features(x * 0.01)
    np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)


def test_relative_phase_shift_sees_phase_reconstruction() -> None:
    """A fixed pulse shape keeps RPS concentrated; redrawn phases (same magnitudes) scatter it."""
    fixed = feature_dict(harmonic_tone(130.0, 3.0, 0.0))
    scrambled = feature_dict(harmonic_tone(130.0, 3.0, 1.0))
    for k in (2, 3):
        assert fixed[f"rps{k}_conc"] > 0.9
        assert fixed[f"rps{k}_stab"] > 0.9
        assert scrambled[f"rps{k}_conc"] < 0.5
    assert fixed["voiced_frac"] > 0.9


def test_real_speech_values_in_range(shared_dir: Path) -> None:
    x, _ = sf.read(shared_dir / LIBRI, dtype="float32")
    d = feature_dict(x[: 6 * SR])
    assert 0.3 < d["voiced_frac"] < 1.0
    assert 0.45 <= d["v_mean"] <= 1.0
    assert 0.0 < d["jitter"] < 0.05  # read speech: a few % of pitch change per 10 ms at most
    assert np.isfinite(d["h1h2_mean"]) and np.isfinite(d["mod_mid_lo"])
    for k in range(2, 7):
        assert 0.0 <= d[f"rps{k}_conc"] <= 1.0 and 0.0 <= d[f"rps{k}_stab"] <= 1.0
    assert 0.0 <= d["flat_hi_mean"] <= 1.0 and 0.0 <= d["flat_lo_mean"] <= 1.0
    assert 0.0 <= d["ifd_lo_frac_big"] <= 1.0
