"""The LFCC-GMM baseline (in-domain only, kept for comparison, not shipped)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from train.antispoof.report import Report, in_domain_tables
from train.antispoof.split import SEED, crc, load_data
from verilive.voice.antispoof import CLASSES, SR


def lfcc(x: np.ndarray, n_filters: int = 30, n_ceps: int = 20, select_db: float = 40.0) -> np.ndarray:
    """LFCC + deltas + delta-deltas (frames, 60)^T of the frames within ``select_db`` of the loudest."""
    win, hop, n_fft = 320, 160, 512
    x = np.append(x[0], x[1:] - 0.97 * x[:-1]).astype(np.float64)
    n = 1 + (x.size - win) // hop
    frames = x[np.arange(win)[None, :] + hop * np.arange(n)[:, None]] * np.hamming(win)
    power = np.abs(np.fft.rfft(frames, n_fft)) ** 2
    freqs = np.linspace(0, SR / 2, n_fft // 2 + 1)
    edges = np.linspace(0, SR / 2, n_filters + 2)
    fb = np.stack(
        [
            np.clip(np.minimum((freqs - lo) / (c - lo), (hi - freqs) / (hi - c)), 0, None)
            for lo, c, hi in zip(edges, edges[1:], edges[2:], strict=False)
        ]
    )
    k = np.arange(n_ceps)[:, None]
    dct = np.cos(np.pi * k * (2 * np.arange(n_filters)[None, :] + 1) / (2 * n_filters))
    ceps = np.log(power @ fb.T + 1e-10) @ dct.T

    def delta(c: np.ndarray) -> np.ndarray:
        p = np.pad(c, ((2, 2), (0, 0)), mode="edge")
        return (p[3:-1] - p[1:-3] + 2 * (p[4:] - p[:-4])) / 10

    f = np.concatenate([ceps, delta(ceps), delta(delta(ceps))], axis=1)
    energy = 10 * np.log10(power.sum(axis=1) + 1e-10)
    keep = energy > energy.max() - select_db
    f = f[keep]
    f[:, 0] -= f[:, 0].max()
    return f.T.astype(np.float32)


def run_gmm_baseline(cache: Path) -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.mixture import GaussianMixture

    d = load_data(cache, lfcc, "lfcc", 10)
    tr = np.flatnonzero((d.part == "train") | (d.part == "val"))
    te = np.flatnonzero(d.part == "test")
    allf = np.concatenate([d.feats[i] for i in tr], axis=1).T
    mu, sd = allf.mean(axis=0), allf.std(axis=0) + 1e-6

    def fit(idx: np.ndarray, seed: int) -> list[GaussianMixture]:
        gmms = []
        for k, cls in enumerate(CLASSES):
            x = np.concatenate([(d.feats[i].T - mu) / sd for i in idx if d.lab[i] == cls])
            x = x[np.random.default_rng(seed + k).choice(len(x), min(len(x), 60000), replace=False)]
            gmms.append(
                GaussianMixture(
                    64, covariance_type="diag", max_iter=60, reg_covar=1e-3, random_state=seed + k
                ).fit(x)
            )
        return gmms

    def scores(gmms: list[GaussianMixture], idx: np.ndarray) -> np.ndarray:
        return np.array([[g.score((d.feats[i].T - mu) / sd) for g in gmms] for i in idx])

    fold = np.array([crc("fold/" + d.clips[i].speaker) % 3 for i in tr])
    oof = np.zeros((len(tr), 4))
    for k in range(3):
        oof[fold == k] = scores(fit(tr[fold != k], SEED + 10 * k), tr[fold == k])
    y = np.array([CLASSES.index(x) for x in d.lab[tr]])
    cal = LogisticRegression(class_weight="balanced", max_iter=2000).fit(oof[:, 1:] - oof[:, :1], y)
    s = scores(fit(tr, SEED), te)
    logits = cal.decision_function(s[:, 1:] - s[:, :1])
    out = Report()
    out("## LFCC-GMM baseline, in-domain (held-out speakers)\n")
    in_domain_tables(d, te, logits, out)
