"""The anti-spoofing model's Whisper branch inputs and the fusion weights learned out of source
(train/antispoof/fusion.py; docs/antispoof.md, Model)."""

from __future__ import annotations

import numpy as np
from train.antispoof.fusion import fit_weights

from verilive.voice.antispoof import SR, whisper_input, whisper_stats


def test_whisper_stats_are_mean_then_std_per_depth() -> None:
    rng = np.random.default_rng(0)
    layers = rng.normal(size=(7, 40, 512)).astype(np.float32)
    s = whisper_stats(layers)
    assert s.shape == (7 * 512 * 2,) and s.dtype == np.float32
    per_depth = s.reshape(7, 2, 512)
    assert np.allclose(per_depth[3, 0], layers[3].mean(axis=0), atol=1e-6)
    assert np.allclose(per_depth[3, 1], layers[3].std(axis=0), atol=1e-6)


def test_whisper_input_trims_and_pads_like_the_front_statistics() -> None:
    rng = np.random.default_rng(1)
    speech = (0.1 * rng.standard_normal(SR // 5)).astype(np.float32)  # 0.2 s of signal
    x = np.concatenate([np.zeros(SR, np.float32), speech, np.zeros(SR, np.float32)])
    y = whisper_input(x)
    assert y.size == SR // 2  # the silence trimmed, then padded to 0.5 s
    assert np.abs(y[: SR // 5 - 400]).max() > 0.05 and not np.any(y[SR // 5 + 400 :])
    long = (0.1 * rng.standard_normal(12 * SR)).astype(np.float32)
    assert whisper_input(long).size == 8 * SR  # the first 8 s, as the CAM++ front output


def _scores(rng: np.random.Generator, sources: int = 6, n: int = 60) -> tuple[np.ndarray, ...]:
    """Three branches' log-odds on several sources: the first separates every source, the second
    only the first source (noise elsewhere), the third nothing."""
    z, bona, group = [], [], []
    for s in range(sources):
        y = np.arange(n) % 2 == 0
        sign = np.where(y, 1.0, -1.0)
        good = 2.0 * sign + rng.normal(0, 1.0, n)
        local = (3.0 * sign if s == 0 else 0.0) + rng.normal(0, 2.0, n)
        noise = rng.normal(0, 2.0, n)
        z.append(np.stack([good, local, noise], axis=1))
        bona.append(y)
        group.append(np.full(n, f"src{s}"))
    return np.concatenate(z), np.concatenate(bona), np.concatenate(group)


def test_fusion_weights_favour_the_branch_that_generalises() -> None:
    z, bona, group = _scores(np.random.default_rng(2))
    w = fit_weights(z, bona, group)
    assert w.shape == (3,) and np.all(w >= 0) and np.isclose(w.sum(), 3.0)
    assert w[0] > 2.0 * w[1] and w[0] > 2.0 * w[2], w
    # a branch that separates nothing gets (almost) no weight
    assert w[2] < 0.3, w


def test_fusion_weights_fall_back_to_equal_when_nothing_separates() -> None:
    z = np.zeros((200, 4))  # every branch undecided on every clip
    bona = np.arange(200) % 2 == 0
    w = fit_weights(z, bona, np.array(["a"] * 200))
    assert np.array_equal(w, np.ones(4))
