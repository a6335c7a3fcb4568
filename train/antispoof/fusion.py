"""Fusion and calibration: regression branches, per-branch calibration, weights, the fused model."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from train.antispoof.features import fcm_stats
from train.antispoof.networks import (
    MEMBER_SEED_STEP,
    TrainConfig,
    average,
    predict,
    predict_fcm,
    split_oc,
    train_fcm_net,
    train_net,
)
from train.antispoof.split import Data
from verilive.voice.antispoof import CLASSES


@dataclass
class Linear:
    """An affine map ``x @ w.T + b``."""

    w: np.ndarray
    b: np.ndarray

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, np.float64) @ self.w.T + self.b


def log_softmax(z: np.ndarray) -> np.ndarray:
    top = z.max(axis=1, keepdims=True)
    return z - top - np.log(np.exp(z - top).sum(axis=1, keepdims=True))


def fit_calibration(z: np.ndarray, labels: np.ndarray) -> Linear:
    """Multinomial logistic regression (class-balanced, mild L2) from logits to the 4 classes."""
    from sklearn.linear_model import LogisticRegression

    y = np.array([CLASSES.index(x) for x in labels])
    lr = LogisticRegression(C=10.0, class_weight="balanced", max_iter=5000).fit(z, y)
    return Linear(lr.coef_, lr.intercept_)


FCM_C = 0.01  # inverse L2 strength of the front-statistics regression (0.003-0.03 close: antispoof_stats_cv)


def fit_fcm_linear(d: Data, idx: np.ndarray) -> Linear:
    """Multinomial logistic regression (class-balanced) from the front statistics to the 4 classes,
    standardisation folded into the weights."""
    from sklearn.linear_model import LogisticRegression

    assert d.fcm is not None
    x = np.stack([fcm_stats(d.fcm[i]) for i in idx])
    mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-6
    y = np.array([CLASSES.index(v) for v in d.lab[idx]])
    lr = LogisticRegression(C=FCM_C, class_weight="balanced", max_iter=5000).fit((x - mu) / sd, y)
    w = lr.coef_ / sd
    return Linear(w, lr.intercept_ - w @ mu)


WHISPER_C = 0.01  # as the frozen probe (C 0.001-0.1 traded mean against worst source: docs/antispoof.md)


def fit_whisper_linear(d: Data, idx: np.ndarray) -> Linear:
    """Multinomial logistic regression (class-balanced) from the Whisper layer statistics to the 4
    classes, standardisation folded into the weights."""
    from sklearn.linear_model import LogisticRegression

    assert d.whisper is not None
    x = d.whisper[idx].astype(np.float64)
    mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-6
    y = np.array([CLASSES.index(v) for v in d.lab[idx]])
    lr = LogisticRegression(C=WHISPER_C, class_weight="balanced", max_iter=3000).fit((x - mu) / sd, y)
    w = lr.coef_ / sd
    return Linear(w, lr.intercept_ - w @ mu)


def bona_log_odds(logp: np.ndarray) -> np.ndarray:
    """log P(bona fide) - log P(any attack) of 4-way logits or log-probabilities (the same: the
    softmax normaliser cancels). The bona fide score of every table and of the fusion."""
    rest = logp[:, 1:]
    top = rest.max(axis=1)
    return logp[:, 0] - top - np.log(np.exp(rest - top[:, None]).sum(axis=1))


def fit_affine(x: np.ndarray, labels: np.ndarray) -> Linear:
    """Class-balanced logistic regression of bona fide vs spoof on one score: a monotone map."""
    from sklearn.linear_model import LogisticRegression

    lr = LogisticRegression(C=10.0, class_weight="balanced", max_iter=5000)
    lr.fit(x[:, None], (labels == "bonafide").astype(int))
    return Linear(lr.coef_, lr.intercept_)


@dataclass
class Fusion:
    """Sum of calibrated experts. Each branch's logits are calibrated alone on the validation clips;
    the bona fide score is the sum of the branches' log-odds of bona fide, mapped by one affine
    calibration (``bona``), so the ranking of clips has no parameter fitted across branches. The
    split of the attack probability between replay, TTS and VC comes from the recalibrated sum of
    the branches' log-probabilities (``out``). Output: four logits whose softmax gives P(bona fide)
    = sigmoid(calibrated log-odds) and the attack classes in the ``out`` proportions."""

    cals: list[Linear]
    out: Linear
    bona: Linear
    weights: np.ndarray | None = None  # per branch, on its log-odds (None: all 1)

    def w(self) -> np.ndarray:
        return np.ones(len(self.cals)) if self.weights is None else self.weights

    def __call__(self, *z: np.ndarray) -> np.ndarray:
        logp = [log_softmax(c(x)) for c, x in zip(self.cals, z, strict=True)]
        odds = sum(wk * bona_log_odds(lp) for wk, lp in zip(self.w(), logp, strict=True))
        attack = log_softmax(self.out(sum(logp))[:, 1:])
        return np.concatenate([self.bona(np.asarray(odds)[:, None]), attack], axis=1)


def fit_fusion(branches: list[np.ndarray], labels: np.ndarray, weights: np.ndarray | None = None) -> Fusion:
    """Fit the fusion on clips no branch was trained on; ``weights`` (per branch) come from
    :func:`fit_weights` on leave-one-source-out scores, never from these clips."""
    cals = [fit_calibration(z, labels) for z in branches]
    logp = [log_softmax(c(z)) for c, z in zip(cals, branches, strict=True)]
    w = np.ones(len(branches)) if weights is None else np.asarray(weights, np.float64)
    odds = sum(wk * bona_log_odds(lp) for wk, lp in zip(w, logp, strict=True))
    return Fusion(cals, fit_calibration(sum(logp), labels), fit_affine(np.asarray(odds), labels), weights)


def fit_weights(z: np.ndarray, is_bona: np.ndarray, group: np.ndarray, l2: float = 1e-2) -> np.ndarray:
    """Non-negative weights of the branches' calibrated log-odds ``z`` (clips, branches): a logistic
    regression of bona fide against spoof, each class half the weight, and within a class each
    ``group`` (the source) weighted by the square root of its size. Fitted on out-of-source scores
    (each clip scored by the fold that left its source out), so the weights favour the branches that
    generalise to sources they never saw, not those that fit the training sources best."""
    from scipy.optimize import minimize

    sw = np.zeros(len(z))
    for cls in (True, False):
        m = is_bona == cls
        gs, counts = np.unique(group[m], return_counts=True)
        share = np.sqrt(counts) / np.sqrt(counts).sum()
        for g, c, sh in zip(gs, counts, share, strict=True):
            sw[m & (group == g)] = 0.5 * sh / c
    y = np.where(is_bona, 1.0, -1.0)

    def loss(p: np.ndarray) -> tuple[float, np.ndarray]:
        m = y * (z @ p[:-1] + p[-1])
        e = np.exp(-np.logaddexp(0.0, m))  # sigmoid(-m)
        f = float(np.sum(sw * np.logaddexp(0.0, -m)) + 0.5 * l2 * np.sum(p[:-1] ** 2))
        g = -(sw * y * e)
        return f, np.concatenate([z.T @ g + l2 * p[:-1], [g.sum()]])

    k = z.shape[1]
    res = minimize(loss, np.r_[np.ones(k), 0.0], jac=True, method="L-BFGS-B",
                   bounds=[(0.0, None)] * k + [(None, None)])  # fmt: skip
    w = res.x[:-1]
    if not np.all(np.isfinite(w)) or w.sum() <= 0:  # no branch separates these clips: fall back to equal
        return np.ones(k)
    return w / w.sum() * k  # scale-free: the affine calibration follows; sum k like equal weights


def fit_product(branches: list[np.ndarray], labels: np.ndarray) -> Callable[..., np.ndarray]:
    """The previous rule, for the report: the summed log-probabilities recalibrated 4-way (a 4x4
    regression fitted on the validation clips, which can reorder clips)."""
    cals = [fit_calibration(z, labels) for z in branches]
    out = fit_calibration(sum(log_softmax(c(z)) for c, z in zip(cals, branches, strict=True)), labels)
    return lambda *z: out(sum(log_softmax(c(x)) for c, x in zip(cals, z, strict=True)))


BRANCHES = (
    "network (spectrogram + cues)",
    "CAM++ front network",
    "CAM++ front statistics regression",
    "Whisper statistics regression",
)


@dataclass
class Model:
    """The spectrogram-and-cues network, the front-output network, the front-statistics regression,
    the Whisper-statistics regression and the fusion of the four."""

    net: Any
    fcm_net: Any
    fcm_linear: Linear
    whisper_linear: Linear
    fusion: Fusion

    def branches(self, d: Data, idx: np.ndarray, max_frames: int = 800) -> list[np.ndarray]:
        assert d.fcm is not None and d.whisper is not None
        stats = np.stack([fcm_stats(d.fcm[i]) for i in idx])
        net, net_oc = split_oc(predict(self.net, d, idx, max_frames))
        fcm, fcm_oc = split_oc(predict_fcm(self.fcm_net, d, idx))
        wh = self.whisper_linear(d.whisper[idx])
        # the one-class scores, when trained, are experts of their own (one column each)
        return [net, fcm, self.fcm_linear(stats), wh, *net_oc, *fcm_oc]

    def logits(self, d: Data, idx: np.ndarray, max_frames: int = 800) -> np.ndarray:
        return self.fusion(*self.branches(d, idx, max_frames))

    def branch_odds(self, d: Data, idx: np.ndarray) -> np.ndarray:
        """(branches, clips): each branch's calibrated log-odds of bona fide, before the weights."""
        zs = self.branches(d, idx)
        return np.stack([bona_log_odds(log_softmax(c(z))) for c, z in zip(self.fusion.cals, zs, strict=True)])

    def alternatives(self, d: Data, va: np.ndarray, idx: np.ndarray) -> list[np.ndarray]:
        """For the report (``ALTERNATIVES``): each branch alone with its calibration, the same fusion
        of the two networks only, of the three branches without Whisper (the model before), and of
        all four with equal weights, and the older rule (the summed log-probabilities recalibrated
        4-way), all fitted on ``va`` like the fusion."""
        zs, vs = self.branches(d, idx), self.branches(d, va)
        alone = [c(z) for c, z in zip(self.fusion.cals, zs, strict=True)]
        two = fit_fusion(vs[:2], d.lab[va])(*zs[:2])
        three = fit_fusion(vs[:3], d.lab[va])(*zs[:3])
        equal = fit_fusion(vs[:4], d.lab[va])(*zs[:4])
        product = fit_product(vs[:4], d.lab[va])(*zs[:4])
        return [*alone[:4], two, three, equal, product, *alone[4:]]


ALTERNATIVES = (
    *(f"{b} alone" for b in BRANCHES),
    "the two networks only, same fusion",
    "the three branches without Whisper (the model before), same fusion",
    "all four branches, equal weights",
    "product recalibrated 4-way (an older rule)",
)
OC_ALTERNATIVES = ("network one-class score alone", "front network one-class score alone")


def alternative_names(n: int) -> tuple[str, ...]:
    """Names of ``Model.alternatives``' ``n`` outputs."""
    return (ALTERNATIVES + OC_ALTERNATIVES)[:n]


def train_model(
    d: Data, tr: np.ndarray, va: np.ndarray, cfg: TrainConfig, fcm_cfg: TrainConfig, seed: int,
    log: str = "", members: int = 1,
) -> Model:  # fmt: skip
    """The branches on ``tr`` (each network the average of ``members`` seeds); their fusion on ``va``."""
    seeds = [seed + k * MEMBER_SEED_STEP for k in range(members)]
    tag = (lambda k: f"{log}[member {k + 1}] ") if members > 1 else (lambda k: log)
    net = average([train_net(d, tr, cfg, s, tag(k)) for k, s in enumerate(seeds)])
    fcm_net = average([train_fcm_net(d, tr, fcm_cfg, s, tag(k)) for k, s in enumerate(seeds)])
    t = time.time()
    wl = fit_whisper_linear(d, tr)
    print(f"  {log}Whisper regression fitted ({time.time() - t:.0f} s)", flush=True)
    return fused_model(d, va, net, fcm_net, fit_fcm_linear(d, tr), wl)


def fused_model(
    d: Data, va: np.ndarray, net: Any, fcm_net: Any, fcm_linear: Linear, whisper_linear: Linear,
    weights: np.ndarray | None = None,
) -> Model:  # fmt: skip
    unfitted = Fusion([], Linear(np.eye(4), np.zeros(4)), Linear(np.eye(1), np.zeros(1)))
    m = Model(net, fcm_net, fcm_linear, whisper_linear, unfitted)
    m.fusion = fit_fusion(m.branches(d, va), d.lab[va], weights)
    return m


def member_models(d: Data, va: np.ndarray, m: Model) -> list[Model]:
    """Each seed's pair of networks alone with the same regression, fused on ``va`` (for the report)."""
    if not hasattr(m.net, "members"):
        return []
    pairs = zip(m.net.members, m.fcm_net.members, strict=True)
    return [fused_model(d, va, n, f, m.fcm_linear, m.whisper_linear, m.fusion.weights) for n, f in pairs]
