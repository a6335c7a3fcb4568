"""The metrics of eval/ and train/: EER, DCF and DET, calibration, DER, and the numeric helpers.

Conventions: a higher score means "more likely the same speaker" (or bona fide, or live); a trial
is accepted when its score is at or above the threshold. ``labels`` are booleans, True for a target
(same-speaker, bona fide) trial. Error rates are fractions in [0, 1], not percentages.

**One EER definition** (``eer``; ``eer_between`` for two score sets): miss and false-alarm rates at
every threshold that changes a decision, and their crossing, linearly interpolated between the two
operating points either side of it. The other definition the repository used until issue 45 (the
anti-spoofing training script, ``eval/antispoof_lofo.py``, ``eval/antispoof_whisper_probe.py`` and
``train/antispoof_stats_cv.py``) took the nearest point: the threshold where |miss - false alarm| is
smallest, and the mean of the two rates there. The interpolated one is kept because it is the crossing
of the error curve itself, symmetric in the two error types and not tied to which sampled threshold
happens to lie nearest (on a source with a few dozen clips the two differ by up to half a step of
1/n); it also gives a threshold between two scores, which the evals use for ``rates_at``; and most
published figures (verification, telephone, face, the anti-spoofing end-to-end and leave-one-source-out
evals) were already computed with it, so unifying on it changes the fewest of them. docs/antispoof.md
says which of its figures were measured with the nearest point, and by how much they differ.

DER: ``der_score`` (pyannote.metrics, collar on each side of a boundary), ``DerScore`` (components in
seconds, accumulated over files) and ``der_interval`` (files redrawn with replacement).

Numeric helpers: ``logit``, ``sigmoid``, ``sigmoid_array`` and ``softmax`` are the runtime's
(``verilive.numeric``), re-exported here so that eval/ and train/ take every metric and helper from
this one module; src/ never imports common/.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import ndtri

from verilive.numeric import logit, sigmoid, sigmoid_array, softmax

if TYPE_CHECKING:
    from pyannote.core import Annotation, Timeline

__all__ = [
    "DER_COLLAR_S",
    "P_TARGET_DCF",
    "DerScore",
    "DetCurve",
    "ErrorCurve",
    "Reliability",
    "bootstrap_eer",
    "brier",
    "cllr",
    "dcf_at",
    "der_interval",
    "der_score",
    "det_curve",
    "eer",
    "eer_between",
    "error_curve",
    "log_loss",
    "logit",
    "min_dcf",
    "probit",
    "rates_at",
    "reliability",
    "sigmoid",
    "sigmoid_array",
    "softmax",
]

P_TARGET_DCF = 0.01


@dataclass(frozen=True)
class ErrorCurve:
    """Miss and false-alarm rates at every distinct threshold, thresholds increasing.

    ``thresholds[k]`` accepts the trials with score >= it; the last entry (+inf) accepts none.
    """

    thresholds: np.ndarray
    p_miss: np.ndarray  # increasing
    p_fa: np.ndarray  # decreasing
    n_target: int
    n_nontarget: int


def _check(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels).astype(bool).ravel()
    if s.shape != y.shape:
        raise ValueError(f"scores and labels differ in length: {s.size} vs {y.size}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    if y.all() or not y.any():
        raise ValueError("need both target and non-target trials")
    return s, y


def error_curve(scores: np.ndarray, labels: np.ndarray) -> ErrorCurve:
    """Miss / false-alarm rates for every threshold that changes a decision."""
    s, y = _check(scores, labels)
    order = np.argsort(s, kind="mergesort")
    s, y = s[order], y[order]
    n_t, n_n = int(y.sum()), int((~y).sum())
    # Rejecting the k lowest scores, k = 0..N; only k at a boundary between distinct scores is a threshold.
    miss = np.concatenate([[0], np.cumsum(y)])
    rejected_non = np.concatenate([[0], np.cumsum(~y)])
    k = np.concatenate([[0], np.flatnonzero(np.diff(s) > 0) + 1, [s.size]])
    thresholds = np.concatenate([s[k[:-1]], [np.inf]])
    return ErrorCurve(
        thresholds=thresholds,
        p_miss=miss[k] / n_t,
        p_fa=(n_n - rejected_non[k]) / n_n,
        n_target=n_t,
        n_nontarget=n_n,
    )


def eer(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Equal error rate and its threshold, linearly interpolated between the two nearest operating points."""
    c = error_curve(scores, labels)
    i = int(np.argmax(c.p_miss >= c.p_fa))  # first point where misses catch up with false alarms
    if i == 0:
        return float(c.p_fa[0]), float(c.thresholds[0])
    m0, m1, f0, f1 = c.p_miss[i - 1], c.p_miss[i], c.p_fa[i - 1], c.p_fa[i]
    alpha = (f0 - m0) / ((m1 - m0) - (f1 - f0))
    t0, t1 = c.thresholds[i - 1], c.thresholds[i]
    thr = t0 if not np.isfinite(t1) else t0 + alpha * (t1 - t0)
    return float(m0 + alpha * (m1 - m0)), float(thr)


def eer_between(target: np.ndarray, nontarget: np.ndarray) -> float:
    """:func:`eer` of ``target`` scores (bona fide, same speaker) against ``nontarget`` scores; NaN
    when either set is empty or holds a NaN (a figure that cannot be measured)."""
    t = np.asarray(target, dtype=np.float64).ravel()
    n = np.asarray(nontarget, dtype=np.float64).ravel()
    if t.size == 0 or n.size == 0 or np.isnan(t).any() or np.isnan(n).any():
        return float("nan")
    return eer(np.concatenate([t, n]), np.r_[np.ones(t.size, bool), np.zeros(n.size, bool)])[0]


def _dcf_norm(p_target: float, c_miss: float, c_fa: float) -> float:
    return min(c_miss * p_target, c_fa * (1.0 - p_target))


def min_dcf(
    scores: np.ndarray,
    labels: np.ndarray,
    p_target: float = P_TARGET_DCF,
    c_miss: float = 1.0,
    c_fa: float = 1.0,
) -> tuple[float, float]:
    """Normalised minimum detection cost (NIST SRE style) and the threshold that reaches it."""
    c = error_curve(scores, labels)
    dcf = (c_miss * p_target * c.p_miss + c_fa * (1 - p_target) * c.p_fa) / _dcf_norm(p_target, c_miss, c_fa)
    i = int(np.argmin(dcf))
    return float(dcf[i]), float(c.thresholds[i])


def dcf_at(
    scores: np.ndarray,
    labels: np.ndarray,
    threshold: float,
    p_target: float = P_TARGET_DCF,
    c_miss: float = 1.0,
    c_fa: float = 1.0,
) -> float:
    """Normalised detection cost of the decisions made at a fixed threshold (the "actual" DCF)."""
    s, y = _check(scores, labels)
    p_miss = float(np.mean(s[y] < threshold))
    p_fa = float(np.mean(s[~y] >= threshold))
    return (c_miss * p_target * p_miss + c_fa * (1 - p_target) * p_fa) / _dcf_norm(p_target, c_miss, c_fa)


def rates_at(scores: np.ndarray, labels: np.ndarray, threshold: float) -> tuple[float, float]:
    """(miss rate, false-alarm rate) when accepting scores >= threshold."""
    s, y = _check(scores, labels)
    return float(np.mean(s[y] < threshold)), float(np.mean(s[~y] >= threshold))


def probit(p: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Inverse standard normal CDF, with p clipped to [eps, 1 - eps] so 0 and 1 stay finite."""
    return ndtri(np.clip(np.asarray(p, dtype=np.float64), eps, 1 - eps))


@dataclass(frozen=True)
class DetCurve:
    p_fa: np.ndarray
    p_miss: np.ndarray
    x: np.ndarray  # probit(p_fa)
    y: np.ndarray  # probit(p_miss)


def det_curve(scores: np.ndarray, labels: np.ndarray, eps: float | None = None) -> DetCurve:
    """DET points on probit axes. ``eps`` defaults to half of one error of the smaller class."""
    c = error_curve(scores, labels)
    if eps is None:
        eps = 0.5 / max(c.n_target, c.n_nontarget)
    return DetCurve(c.p_fa, c.p_miss, probit(c.p_fa, eps), probit(c.p_miss, eps))


@dataclass(frozen=True)
class Reliability:
    """Reliability diagram: per bin, number of trials, mean predicted probability, observed target rate."""

    edges: np.ndarray
    counts: np.ndarray
    mean_pred: np.ndarray  # NaN for empty bins
    frac_pos: np.ndarray  # NaN for empty bins
    ece: float


def reliability(
    probs: np.ndarray, labels: np.ndarray, n_bins: int = 10, strategy: str = "uniform"
) -> Reliability:
    """Bins of predicted probability and the expected calibration error.

    ``strategy="uniform"``: equal-width bins on [0, 1]; ``"quantile"``: equal-count bins.
    ECE = sum over bins of (bin count / N) * |observed target rate - mean predicted probability|.
    """
    p = np.asarray(probs, dtype=np.float64).ravel()
    y = np.asarray(labels).astype(bool).ravel()
    if p.shape != y.shape or p.size == 0:
        raise ValueError("probs and labels must be non-empty and of one length")
    if np.any((p < 0) | (p > 1)) or not np.all(np.isfinite(p)):
        raise ValueError("probabilities must lie in [0, 1]")
    if strategy == "uniform":
        edges = np.linspace(0.0, 1.0, n_bins + 1)
    elif strategy == "quantile":
        edges = np.quantile(p, np.linspace(0.0, 1.0, n_bins + 1))
        edges[0], edges[-1] = 0.0, 1.0
    else:
        raise ValueError(f"unknown strategy {strategy!r}")
    idx = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, n_bins - 1)
    counts = np.bincount(idx, minlength=n_bins)
    sum_p = np.bincount(idx, weights=p, minlength=n_bins)
    sum_y = np.bincount(idx, weights=y.astype(np.float64), minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_pred = np.where(counts > 0, sum_p / counts, np.nan)
        frac_pos = np.where(counts > 0, sum_y / counts, np.nan)
    ece = float(np.sum(np.abs(sum_y - sum_p)) / p.size)
    return Reliability(edges, counts, mean_pred, frac_pos, ece)


def brier(probs: np.ndarray, labels: np.ndarray) -> float:
    p = np.asarray(probs, dtype=np.float64)
    return float(np.mean((p - np.asarray(labels, dtype=np.float64)) ** 2))


def log_loss(probs: np.ndarray, labels: np.ndarray, eps: float = 1e-15) -> float:
    """Mean negative log-likelihood in nats."""
    p = np.clip(np.asarray(probs, dtype=np.float64), eps, 1 - eps)
    y = np.asarray(labels).astype(bool)
    return float(-np.mean(np.where(y, np.log(p), np.log1p(-p))))


def cllr(llr: np.ndarray, labels: np.ndarray) -> float:
    """Log-likelihood-ratio cost in bits (0 = perfect, 1 = uninformative) of natural-log LLRs."""
    s, y = _check(llr, labels)
    c_t = np.mean(np.logaddexp(0.0, -s[y]))
    c_n = np.mean(np.logaddexp(0.0, s[~y]))
    return float((c_t + c_n) / (2 * np.log(2)))


def bootstrap_eer(
    scores: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile interval of the EER under a cluster bootstrap: whole groups (speakers, voices)
    are redrawn with replacement, targets and non-targets separately, because clips of one
    speaker are not independent trials. Returns (low, high) at ``level``."""
    scores, labels = _check(scores, labels)
    groups = np.asarray(groups).ravel()
    if groups.shape != scores.shape:
        raise ValueError("groups must have one entry per score")
    rng = np.random.default_rng(seed)
    # per class, the clip indices of each group
    members = [
        [np.flatnonzero((groups == g) & cls) for g in np.unique(groups[cls])] for cls in (labels, ~labels)
    ]
    values = np.empty(n_boot)
    for b in range(n_boot):
        idx = np.concatenate(
            [np.concatenate([m[k] for k in rng.integers(0, len(m), len(m))]) for m in members]
        )
        values[b] = eer(scores[idx], labels[idx])[0]
    tail = (1 - level) / 2
    return float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))


# ------------------------------------------------------------------------------ diarization (DER)

DER_COLLAR_S = 0.25  # forgiveness on each side of every reference boundary, seconds (md-eval's -c)


@dataclass
class DerScore:
    """DER components in seconds of scored speaker time, and JER, for one file or accumulated."""

    total: float = 0.0  # reference speaker time scored (overlap counts once per speaker)
    missed: float = 0.0
    false_alarm: float = 0.0
    confusion: float = 0.0
    jer_sum: float = 0.0  # pyannote's JER accumulates per-speaker Jaccard errors
    jer_n: float = 0.0

    @property
    def der(self) -> float:
        return (self.missed + self.false_alarm + self.confusion) / self.total if self.total else 0.0

    @property
    def jer(self) -> float:
        return self.jer_sum / self.jer_n if self.jer_n else 0.0

    def __iadd__(self, other: DerScore) -> DerScore:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self


def der_score(
    reference: Annotation,
    hypothesis: Annotation,
    uem: Timeline | None = None,
    collar_s: float = DER_COLLAR_S,
    skip_overlap: bool = False,
) -> DerScore:
    """DER and JER of one file with pyannote.metrics.

    ``collar_s`` is the forgiveness on **each side** of every reference boundary (md-eval's ``-c``);
    pyannote's own ``collar`` is the total width, hence the factor 2. ``uem`` limits scoring to the
    annotated part (the whole reference and hypothesis extent when None, as pyannote does).
    """
    from pyannote.metrics.diarization import DiarizationErrorRate, JaccardErrorRate

    d = DiarizationErrorRate(collar=2 * collar_s, skip_overlap=skip_overlap)(
        reference, hypothesis, uem=uem, detailed=True
    )
    j = JaccardErrorRate(collar=2 * collar_s, skip_overlap=skip_overlap)(
        reference, hypothesis, uem=uem, detailed=True
    )
    return DerScore(
        total=d["total"],
        missed=d["missed detection"],
        false_alarm=d["false alarm"],
        confusion=d["confusion"],
        jer_sum=j["speaker error"],
        jer_n=j["speaker count"],
    )


def der_interval(
    scores: list[DerScore], n_boot: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the overall DER when the files are redrawn with replacement: how much
    the figure depends on which recordings happen to be in the set."""
    err = np.array([s.missed + s.false_alarm + s.confusion for s in scores])
    ref = np.array([s.total for s in scores])
    picks = np.random.default_rng(seed).integers(0, len(scores), (n_boot, len(scores)))
    ders = err[picks].sum(axis=1) / np.maximum(ref[picks].sum(axis=1), 1e-9)
    tail = (1 - level) / 2
    return float(np.quantile(ders, tail)), float(np.quantile(ders, 1 - tail))
