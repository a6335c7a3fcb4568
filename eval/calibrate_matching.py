"""Fit the calibration of verilive's match score: p(same speaker) = sigmoid(a * score + b).

    python -m eval.calibrate_matching

The score is ``VoiceEngine.match``'s score (cosine similarity of two templates made by
``VoiceEngine.create_template``) on every dev trial of :mod:`eval.trials`. The fit is plain
maximum-likelihood logistic regression on all trials as they are (no class weights), so the
probability is a posterior at the trial set's own target prior π0 = targets / trials.

Honest evaluation: cross-validation split BY SPEAKER. Speakers are dealt into K folds; every
trial is scored by a calibration fitted only on trials that share no fold with any of the
trial's speakers (a same-fold trial: fitted without that fold; a trial across folds i and j:
fitted without folds i and j). The out-of-fold probabilities give the reliability diagram
(docs/matching_reliability.png), the ECE, Brier score and log-loss printed and written into
docs/verification.md. The parameters written to src/verilive/voice/calibration.json are fitted
on all trials.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from common import metrics
from common.repo import REPO, data_root, replace_section

from eval.trials import DOCS_MD, Trial, build_trials, labels_of, trials_digest
from eval.verification import DEFAULT_CACHE, FAIL_SCORE, all_systems, score_trials

CALIBRATION_JSON = REPO / "src" / "verilive" / "voice" / "calibration.json"
RELIABILITY_PNG = REPO / "docs" / "matching_reliability.png"
COMMAND = "python -m eval.calibrate_matching"
N_FOLDS = 5
FOLD_SEED = 20240601
N_BINS = 10


# ---------------------------------------------------------------------------------- the fit


def _log_likelihood(design: np.ndarray, t: np.ndarray, w: np.ndarray) -> float:
    z = design @ w
    return float(np.sum(t * z - np.logaddexp(0.0, z)))


def fit_logistic(x: np.ndarray, y: np.ndarray, iters: int = 200, tol: float = 1e-10) -> tuple[float, float]:
    """Maximum-likelihood (a, b) of p = sigmoid(a x + b): Newton's method with step halving.

    The log-likelihood is concave, but plain Newton steps overshoot on well-separated scores;
    each step is halved until the log-likelihood does not decrease. A tiny ridge (1e-9) on
    the Hessian only guards against a singular matrix, it does not regularise. Perfectly
    separable data has no finite optimum and raises.
    """
    x = np.asarray(x, dtype=np.float64)
    t = np.asarray(y, dtype=np.float64)
    if not (0 < t.sum() < t.size):
        raise ValueError("need both target and non-target trials")
    prior = t.mean()
    w = np.array([0.0, math.log(prior / (1 - prior))])  # start at the prior
    design = np.stack([x, np.ones_like(x)], axis=1)
    ll = _log_likelihood(design, t, w)
    for _ in range(iters):
        p = metrics.sigmoid_array(design @ w)
        grad = design.T @ (t - p)
        hess = (design * (p * (1 - p))[:, None]).T @ design + 1e-9 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        alpha = 1.0
        while alpha > 1e-10:
            w_new = w + alpha * step
            ll_new = _log_likelihood(design, t, w_new)
            if ll_new >= ll - 1e-12 * abs(ll):
                break
            alpha /= 2
        done = abs(ll_new - ll) <= tol * (1 + abs(ll)) and np.max(np.abs(alpha * step)) < 1e-8 * (
            1 + np.max(np.abs(w))
        )
        w, ll = w_new, ll_new
        if done:
            break
    if not np.all(np.isfinite(w)) or abs(w[0]) > 1e6:
        raise ValueError("logistic fit diverged (are the classes perfectly separated?)")
    return float(w[0]), float(w[1])


def predict(a: float, b: float, x: np.ndarray) -> np.ndarray:
    return metrics.sigmoid_array(a * np.asarray(x, dtype=np.float64) + b)


# ---------------------------------------------------------------------------------- speaker folds


def speaker_folds(trials: list[Trial], k: int = N_FOLDS, seed: int = FOLD_SEED) -> dict[str, int]:
    """Deal the speakers into k folds: sorted, shuffled by a fixed seed, then round-robin."""
    speakers = sorted({s for t in trials for s in t.speakers})
    order = np.random.default_rng(seed).permutation(len(speakers))
    return {speakers[j]: i % k for i, j in enumerate(order)}


def cross_validated(
    scores: np.ndarray, trials: list[Trial], k: int = N_FOLDS, seed: int = FOLD_SEED
) -> tuple[np.ndarray, list[tuple[frozenset[int], float, float, int]]]:
    """Out-of-fold probabilities; also (folds held out, a, b, training trials) of every fit."""
    y = labels_of(trials)
    fold_of = speaker_folds(trials, k, seed)
    trial_folds = [frozenset(fold_of[s] for s in t.speakers) for t in trials]
    out = np.full(len(trials), np.nan)
    fits = []
    for held in sorted(set(trial_folds), key=sorted):
        test = np.array([f == held for f in trial_folds])
        train = np.array([not (f & held) for f in trial_folds])
        a, b = fit_logistic(scores[train], y[train])
        out[test] = predict(a, b, scores[test])
        fits.append((held, a, b, int(train.sum())))
    return out, fits


# ---------------------------------------------------------------------------------- reporting


@dataclass(frozen=True)
class CalibrationQuality:
    ece: float
    ece_quantile: float
    brier: float
    log_loss: float
    cllr: float  # of the LLR implied by the probability and the prior
    act_dcf: float  # DCF at p_target 0.01 of Bayes decisions from that LLR
    min_dcf: float


def quality(p: np.ndarray, y: np.ndarray, prior: float) -> CalibrationQuality:
    llr = metrics.logit(p, eps=1e-15) - metrics.logit(prior)
    bayes_thr = -float(metrics.logit(metrics.P_TARGET_DCF))  # accept when LLR >= log(99)
    return CalibrationQuality(
        ece=metrics.reliability(p, y, N_BINS).ece,
        ece_quantile=metrics.reliability(p, y, N_BINS, "quantile").ece,
        brier=metrics.brier(p, y),
        log_loss=metrics.log_loss(p, y),
        cllr=metrics.cllr(llr, y),
        act_dcf=metrics.dcf_at(llr, y, bayes_thr),
        min_dcf=metrics.min_dcf(llr, y)[0],
    )


def wilson(k: np.ndarray, n: np.ndarray, z: float = 1.96) -> tuple[np.ndarray, np.ndarray]:
    """95 % Wilson score interval of a binomial proportion k / n (n > 0)."""
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    phat = k / n
    centre = (phat + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return np.clip(centre - half, 0.0, phat), np.clip(centre + half, phat, 1.0)


def plot_reliability(
    p_cv: np.ndarray,
    p_in: np.ndarray,
    scores: np.ndarray,
    y: np.ndarray,
    ab: tuple[float, float],
    path: Path,
    title: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, axs, axh) = plt.subplots(1, 3, figsize=(17, 5.5))
    ax.plot([0, 1], [0, 1], ":", color="grey", lw=1, label="perfect calibration")
    for p, name, marker in (
        (p_in, "fitted on all trials (in-sample)", "s"),
        (p_cv, "cross-validated by speaker", "o"),
    ):
        r = metrics.reliability(p, y, N_BINS)
        m = r.counts > 0
        label = f"{name}: ECE {r.ece:.4f}"
        if p is p_cv:
            lo, hi = wilson(np.round(r.frac_pos[m] * r.counts[m]), r.counts[m])
            yerr = np.stack([r.frac_pos[m] - lo, hi - r.frac_pos[m]])
            ax.errorbar(
                r.mean_pred[m], r.frac_pos[m], yerr=yerr, fmt=marker + "-", ms=5, capsize=3, label=label
            )
            for xm, fp, c in zip(r.mean_pred[m], r.frac_pos[m], r.counts[m], strict=True):
                ax.annotate(f"n={c}", (xm, fp), textcoords="offset points", xytext=(5, -12), fontsize=7)
        else:
            ax.plot(r.mean_pred[m], r.frac_pos[m], marker + "--", ms=4, alpha=0.6, label=label)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("predicted same-speaker probability (bin mean)")
    ax.set_ylabel("observed fraction of same-speaker trials")
    ax.set_title(f"Reliability ({N_BINS} equal-width bins, 95 % Wilson intervals)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)

    # Score domain: empirical same-speaker rate in score bins where both classes occur, and the fit.
    a, b = ab
    edges = np.linspace(scores.min(), scores.max(), 41)
    idx = np.clip(np.searchsorted(edges, scores, side="right") - 1, 0, edges.size - 2)
    n = np.bincount(idx, minlength=edges.size - 1)
    k = np.bincount(idx, weights=y.astype(np.float64), minlength=edges.size - 1)
    mid = 0.5 * (edges[1:] + edges[:-1])
    m = n > 0
    lo, hi = wilson(k[m], n[m])
    frac = k[m] / n[m]
    axs.errorbar(
        mid[m],
        frac,
        yerr=np.stack([frac - lo, hi - frac]),
        fmt="o",
        ms=4,
        capsize=2,
        label="observed rate per score bin (95 % CI)",
    )
    grid = np.linspace(edges[0], edges[-1], 400)
    axs.plot(grid, predict(a, b, grid), "-", lw=1.8, label=f"sigmoid({a:.2f}·score {b:+.2f})")
    axs.set_xlabel("match score (cosine similarity)")
    axs.set_ylabel("P(same speaker)")
    axs.set_title("Fitted calibration in the score domain (all trials)")
    axs.grid(True, alpha=0.3)
    axs.legend(loc="upper left", fontsize=8)

    bins = np.linspace(0, 1, 41)
    axh.hist(p_cv[~y], bins=bins, alpha=0.6, label="different speaker", log=True)
    axh.hist(p_cv[y], bins=bins, alpha=0.6, label="same speaker", log=True)
    axh.set_xlabel("cross-validated probability")
    axh.set_ylabel("trials (log scale)")
    axh.set_title("Distribution of the calibrated probability")
    axh.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _shift(prior_from: float, prior_to: float) -> float:
    return float(metrics.logit(prior_to) - metrics.logit(prior_from))


def docs_markdown(
    a: float,
    b: float,
    prior: float,
    n_t: int,
    n_n: int,
    n_failed: int,
    q_cv: CalibrationQuality,
    q_in: CalibrationQuality,
    fits: list[tuple[frozenset[int], float, float, int]],
    n_mid: int,
) -> str:
    a_vals = [f[1] for f in fits]
    b_vals = [f[2] for f in fits]
    rows = []
    for pi in (prior, 0.5, 0.1, 0.01, 0.001):
        shift = _shift(prior, pi)
        thr = (0.0 - b - shift) / a  # score where p = 0.5 at prior pi
        rows.append(f"| {pi:.4g} | {shift:+.3f} | {thr:.4f} |")
    return "\n".join(
        [
            f"Command: `{COMMAND}` ({time.strftime('%Y-%m-%d')}). Fitted parameters: "
            "`src/verilive/voice/calibration.json`, read by the engine's `MatchCalibration`.",
            "",
            "Model: p(same speaker | score) = sigmoid(a · score + b), where score is `VoiceEngine.match`'s "
            "cosine similarity. Plain maximum-likelihood logistic regression on all dev trials as they are "
            f"({n_t:,} target, {n_n:,} non-target; {n_failed} trials with a failed template excluded), "
            "no class weighting. Fitted on all trials:",
            "",
            f"**a = {a:.4f}, b = {b:.4f}**; the probability is 0.5 at score {-b / a:.4f}.",
            "",
            "**Target prior.** Because nothing was re-weighted, p is a posterior at the dev set's own "
            f"target prior π0 = {n_t} / {n_t + n_n} = **{prior:.4f}** (about 1 same-speaker trial in "
            f"{(n_t + n_n) / n_t:.0f}). To use it at another prior π, add "
            "log(π/(1−π)) − log(π0/(1−π0)) to the logit: p_π = sigmoid(a · score + b + log(π/(1−π)) − "
            "log(π0/(1−π0))). Equivalently, a · score + b − log(π0/(1−π0)) is a log-likelihood ratio, "
            "to which the log prior odds of the application are added.",
            "",
            "| prior π | add to logit | score at which p = 0.5 |",
            "|---:|---:|---:|",
            *rows,
            "",
            f"**Cross-validation by speaker** ({N_FOLDS} folds of speakers, seed {FOLD_SEED}; each trial "
            "scored by a fit that saw none of the speaker folds of its speakers, "
            f"{len(fits)} fits, a ∈ [{min(a_vals):.3f}, {max(a_vals):.3f}], b ∈ [{min(b_vals):.3f}, "
            f"{max(b_vals):.3f}]):",
            "",
            "| probabilities | ECE (10 equal-width bins) | ECE (10 equal-count bins) | Brier "
            "| log-loss (nats) | Cllr (bits) | actDCF / minDCF (p_target 0.01) |",
            "|---|---:|---:|---:|---:|---:|---:|",
            f"| cross-validated by speaker | **{q_cv.ece:.5f}** | {q_cv.ece_quantile:.5f} "
            f"| {q_cv.brier:.5f} | {q_cv.log_loss:.4f} | {q_cv.cllr:.4f} "
            f"| {q_cv.act_dcf:.4f} / {q_cv.min_dcf:.4f} |",
            f"| in-sample (fitted on all) | {q_in.ece:.5f} | {q_in.ece_quantile:.5f} | {q_in.brier:.5f} | "
            f"{q_in.log_loss:.4f} | {q_in.cllr:.4f} | {q_in.act_dcf:.4f} / {q_in.min_dcf:.4f} |",
            "",
            " ".join(
                [
                    "Reliability diagram: `docs/matching_reliability.png`. Cllr and actDCF use the LLR",
                    "implied by the probability (logit(p) − logit(π0)); actDCF takes the Bayes decision at",
                    "p_target 0.01 (accept when LLR ≥ log 99). Caveats: almost all trials sit near p = 0, so",
                    f"the equal-width ECE is dominated by the non-target mass: only {n_mid} trials get a",
                    "cross-validated p between 0.05 and 0.95, and the slope a (see its spread across folds)",
                    "rests on them. The target trials are same-session halves and thirds: on cross-session",
                    "audio same-speaker scores will be lower and these probabilities optimistic.",
                ]
            ),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Fit the match-score calibration (see module docstring).")
    p.add_argument("--data", help="shared data folder (default: $VERILIVE_SHARED_DIR/data)")
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE), help="template cache folder")
    p.add_argument("--no-write", action="store_true", help="print only: write no json, png or docs")
    args = p.parse_args(argv)

    root = data_root(args.data)
    all_trials = build_trials(root)
    system = all_systems()["verilive"]
    scores_all = score_trials(system, all_trials, root, Path(args.cache_dir))
    keep = scores_all != FAIL_SCORE
    trials = [t for t, k in zip(all_trials, keep, strict=True) if k]
    scores = scores_all[keep]
    y = labels_of(trials)
    n_t, n_n, n_failed = int(y.sum()), int((~y).sum()), int((~keep).sum())
    prior = n_t / (n_t + n_n)

    a, b = fit_logistic(scores, y)
    p_in = predict(a, b, scores)
    p_cv, fits = cross_validated(scores, trials)
    q_in, q_cv = quality(p_in, y, prior), quality(p_cv, y, prior)

    print(f"trials: {n_t} target, {n_n} non-target, {n_failed} excluded (failed template); prior {prior:.5f}")
    n_mid = int(np.sum((p_cv > 0.05) & (p_cv < 0.95)))
    print(f"fit on all trials: a = {a:.5f}, b = {b:.5f} (p = 0.5 at score {-b / a:.4f})")
    print(f"cross-validated p between 0.05 and 0.95: {n_mid} trials")
    for name, q in (("cross-validated by speaker", q_cv), ("in-sample", q_in)):
        print(
            f"{name:28s} ECE {q.ece:.5f} (equal-count bins {q.ece_quantile:.5f})  Brier {q.brier:.5f}  "
            f"log-loss {q.log_loss:.5f}  Cllr {q.cllr:.4f}  actDCF {q.act_dcf:.4f} / minDCF {q.min_dcf:.4f}"
        )
    if args.no_write:
        return 0

    from verilive.voice import engine as engine_mod

    record = {
        "a": round(a, 6),
        "b": round(b, 6),
        "formula": "p_same = 1 / (1 + exp(-(a * score + b)))",
        "score": (
            "VoiceEngine.match score: cosine similarity of the two templates' embeddings (templates from "
            "VoiceEngine.create_template: Silero VAD speech, CAM++ embedding)"
        ),
        "init_data_id": getattr(engine_mod, "INIT_DATA_ID", None),
        "embed_relu": getattr(engine_mod, "EMBED_RELU", None),
        "prior": round(prior, 6),
        "prior_shift": "for target prior pi add log(pi/(1-pi)) - log(prior/(1-prior)) to a * score + b",
        "trials": {
            "target": n_t,
            "nontarget": n_n,
            "excluded_failed_template": n_failed,
            "set": "eval/trials.py dev trials (LibriSpeech 251 speakers halves/thirds + SpeechBrain 2x6)",
            "sha256": trials_digest(all_trials),
        },
        "cross_validation": {
            "split": f"by speaker, {N_FOLDS} folds, seed {FOLD_SEED}",
            "ece": round(q_cv.ece, 6),
            "brier": round(q_cv.brier, 6),
            "log_loss": round(q_cv.log_loss, 6),
        },
        "date": time.strftime("%Y-%m-%d"),
        "command": COMMAND,
    }
    # the channel-pair parameters are eval/telephone.py's (issue 30): kept as they are
    if CALIBRATION_JSON.exists():
        old = json.loads(CALIBRATION_JSON.read_text())
        record.update({k: v for k, v in old.items() if k.startswith("pairs")})
    CALIBRATION_JSON.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    plot_reliability(
        p_cv,
        p_in,
        scores,
        y,
        (a, b),
        RELIABILITY_PNG,
        f"verilive match-score calibration, sigmoid({a:.2f}·score {b:+.2f}); "
        f"{n_t} target / {n_n:,} non-target dev trials, prior {prior:.4f}: {COMMAND}",
    )
    replace_section(
        DOCS_MD,
        "calibration",
        docs_markdown(a, b, prior, n_t, n_n, n_failed, q_cv, q_in, fits, n_mid),
        "Calibration",
    )
    written = (CALIBRATION_JSON, RELIABILITY_PNG, DOCS_MD)
    print("wrote " + ", ".join(str(w.relative_to(REPO)) for w in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
