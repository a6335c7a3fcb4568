"""Fusion, calibration and the learning curve of the anti-spoofing model over the public-repository
sources, every figure leaving a whole source out (issue 46).

    python -m train.antispoof_refit ...         # the five extractions of its docstring
    python -m train.antispoof_calibration \
        --branches /tmp/vl-sources.npz /tmp/vl-sources-aug.npz /tmp/vl-shared.npz /tmp/vl-shared-aug.npz \
        --sources /tmp/vl-sources /tmp/vl-sources /tmp/vl-shared /tmp/vl-shared [--write pooled] [--no-docs]

The branches (two networks, the CAM++ front regression, the Whisper regression) were trained on the
eight sources of ``shared/data/voice`` only; none of these sources is in them. What is fitted here:

* the issue-29 fusion (the graph's own bona fide logit): P(bona fide) 0.5 for every channel, or a
  threshold per channel chosen on the other sources.
* ``fusion``: the four branch log-odds reweighted, with a bias, by a logistic regression on the other
  sources (each source and class weighs the same), pulled towards the issue-29 weights; one fusion per
  channel ("wideband", and "telephone" = what ``voice/channel.resolve_channel`` calls a phone line:
  8 kHz, or nothing above 4 kHz). A fusion and its calibration may use choose-only sources.
* ``head``: a logistic regression per channel on the four branch log-odds and ``PCA_DIMS`` principal
  components of the Whisper and CAM++ front statistics (PCA fitted in the fold). A *trained* part:
  the shipped one is fitted on train-role rows only; the one on every source is a measurement.

Thresholds are chosen per channel on the other sources' bona fide clips (:func:`threshold`): ``every``
rejects at most 5 % of each other source's genuine clips on each line of the channel, ``pooled`` at most
5 % of all of them together. The threshold is a log-odds offset folded into the head's bias, so 0.5
stays the documented default.

Prints, and unless ``--no-docs`` writes to the "antispoof-one-threshold" section of docs/antispoof.md
and docs/antispoof_loso_sources.png: leaving one source out, the pooled EER over all held-aside sources
(one threshold per channel), the per-source mean and worst, the 2023-26 sources, genuine rejection per
channel and source. ``--curve-only``: the learning curve instead (4, 8, 16, 32, all sources in
training, ``DRAWS`` draws each; section "antispoof-curve", docs/antispoof_curve.png). With ``--write
pooled`` (or ``every``) the head fitted on every train-role source, each channel's threshold chosen by
that rule on every source, goes into the shipped model as its ``channel_logits`` output, which
``AntiSpoof`` uses per channel. Results and ``--write`` take about 15 min on 2 cores, the curve 10.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from common.metrics import eer_between
from common.repo import REPO, replace_section

from train.antispoof_refit import SPOOF_LINES, branch_graph

DOCS_MD = REPO / "docs" / "antispoof.md"
SOURCES_MD = REPO / "docs" / "antispoof-sources.md"
OUT_PNG = REPO / "docs" / "antispoof_curve.png"
SOURCES_PNG = REPO / "docs" / "antispoof_loso_sources.png"
MAX_REJECTED = 0.05
MIN_BONA = 5  # a source's channel needs this many judged genuine clips to bound the threshold
MIN_EER = 3  # clips of each class for a source's own EER
PCA_DIMS = 64
DRAWS = 5
CURVE = (4, 8, 16, 32)
SEED = 46
HEAD_TRAIN = "head trained on train-role sources only"
HEAD = "head trained on every source (not shippable: choose-only sources inside)"
SHIPPED = f"**{HEAD_TRAIN}, pooled (shipped)**"
ODDS = slice(1, 5)
STATS = slice(5, None)


@dataclass
class Rows:
    x: np.ndarray  # (n, 1 + 4 + stats): fused logit, branch log-odds, statistics
    source: np.ndarray
    bona: np.ndarray
    channel: np.ndarray  # wideband or the line's name
    tel: np.ndarray  # judged as a telephone channel by the service
    new: np.ndarray  # a source of the 2023-26 generation
    trainable: np.ndarray  # role "train": its licence allows training shipped weights

    def take(self, m: np.ndarray) -> Rows:
        return Rows(*(getattr(self, f)[m] for f in Rows.__dataclass_fields__))


def new_generation() -> set[str]:
    """Repositories whose table row in docs/antispoof-sources.md dates from 2023 or later."""
    out = set()
    for line in SOURCES_MD.read_text().splitlines():
        m = re.match(r"\| `([^`]+)`[^|]*\| ([^|]+) \|", line)
        years = [int(y) for y in re.findall(r"20\d\d", m.group(2))] if m else []
        if m and years and max(years) >= 2023:
            out.add(m.group(1).replace("/", "+"))
    return out


def load_all(branches: list[Path], sources: list[Path]) -> Rows:
    """Rows of several extractions (public sources; the shared held-out bona fide), one after another."""
    parts = [load(b, s) for b, s in zip(branches, sources, strict=True)]
    return Rows(*(np.concatenate([getattr(p, f) for p in parts]) for f in Rows.__dataclass_fields__))


def load(branches: Path, sources: Path) -> Rows:
    from verilive.audio.decode import decode_file
    from verilive.voice.channel import resolve_channel
    from verilive.voice.schemas import ChannelType

    z = np.load(branches)
    index = list(csv.DictReader((sources / "index.csv").open()))
    narrow = np.zeros(len(index), bool)
    for i, r in enumerate(index if "tel" not in z.files else []):
        if int(r["sample_rate_in"]) <= 8000:
            narrow[i] = True
        else:
            a = decode_file((sources / r["path"]).read_bytes())
            narrow[i] = resolve_channel(None, a.sample_rate, a.mono()) is ChannelType.TEL
    ok = ~np.isnan(z["x"][:, 0])
    channel = z["channel"]
    # what the service would tell (stored by newer extractions; else: every line, and narrow clips)
    tel = z["tel"] if "tel" in z.files else (channel != "wideband") | narrow[z["clip"]]
    gen = new_generation()
    new = np.array([s in gen for s in z["source"]])
    rows = Rows(
        z["x"].astype(np.float64),
        z["source"],
        z["label"] == "bonafide",
        channel,
        tel,
        new,
        z["role"] == "train",
    )
    return rows.take(ok)


def balanced_weights(r: Rows) -> np.ndarray:
    """Each (source, class) group present weighs 1 in all, however many clips it has."""
    w = np.zeros(len(r.bona))
    for s in np.unique(r.source):
        for b in (True, False):
            m = (r.source == s) & (r.bona == b)
            if m.any():
                w[m] = 1.0 / m.sum()
    return w


Scorer = Callable[[Rows], np.ndarray]


def shipped_fusion(path: Path | None = None) -> np.ndarray:
    """(5,) the shipped graph's bona fide logit as bias + weights . branch log-odds."""
    import onnx
    from onnx import numpy_helper

    from verilive.voice.antispoof import MODEL_FILE

    model = onnx.load(str(path or REPO / "src" / "verilive" / "voice" / MODEL_FILE))
    g = branch_graph(model)
    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    a = float(init[g.bona_weight].ravel()[0])
    return np.array([float(init[g.bona_bias].ravel()[0]), *(a * float(init[w]) for w in g.weights)])


def logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray, prior: np.ndarray, lam: float) -> np.ndarray:
    """Weighted logistic regression of ``y`` on [1, x] by Newton steps, with an L2 pull of strength
    ``lam`` towards ``prior`` (the bias is pulled a thousand times less)."""
    a = np.hstack([np.ones((len(x), 1)), x])
    pen = np.full(a.shape[1], lam)
    pen[0] = lam * 1e-3
    beta = prior.copy()
    t = y.astype(np.float64)
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-np.clip(a @ beta, -30, 30)))
        grad = a.T @ (w * (p - t)) + pen * (beta - prior)
        hess = (a * (w * p * (1 - p))[:, None]).T @ a + np.diag(pen)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return beta


FUSION_LAMBDA = 1.0  # the pull towards the shipped fusion, against one (source, class) group's weight


def fit_fusion(r: Rows, lam: float = FUSION_LAMBDA) -> Scorer:
    """Per channel, bona fide log-odds = b + w . branch log-odds, pulled towards the shipped fusion
    (fitted leaving the eight shared sources out) by ``lam``."""
    prior = shipped_fusion()
    models = {}
    for t in (False, True):
        m = r.tel == t
        models[t] = logistic(r.x[m, ODDS], r.bona[m], balanced_weights(r.take(m)), prior, lam)

    def score(q: Rows) -> np.ndarray:
        out = np.empty(len(q.bona))
        for t, beta in models.items():
            m = q.tel == t
            if m.any():
                out[m] = beta[0] + q.x[m, ODDS] @ beta[1:]
        return out

    score.models = models  # type: ignore[attr-defined]
    return score


def fit_head(r: Rows) -> Scorer:
    """Per channel, a logistic regression on the branch log-odds and ``PCA_DIMS`` principal components
    of the standardised statistics (PCA fitted on the training rows alone)."""
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LogisticRegression

    models = {}
    for t in (False, True):
        m = r.tel == t
        s = r.x[m, STATS]
        mu, sd = s.mean(axis=0), s.std(axis=0) + 1e-6
        pca = PCA(PCA_DIMS, svd_solver="randomized", random_state=SEED).fit((s - mu) / sd)
        proj = pca.transform((s - mu) / sd)
        scale = proj.std(axis=0) + 1e-6
        lr = LogisticRegression(C=1.0, max_iter=2000)
        lr.fit(np.hstack([r.x[m, ODDS], proj / scale]), r.bona[m], sample_weight=balanced_weights(r.take(m)))
        models[t] = (mu, sd, pca, scale, lr)

    def score(q: Rows) -> np.ndarray:
        out = np.empty(len(q.bona))
        for t, (mu, sd, pca, scale, lr) in models.items():
            m = q.tel == t
            if m.any():
                proj = pca.transform((q.x[m, STATS] - mu) / sd) / scale
                out[m] = lr.decision_function(np.hstack([q.x[m, ODDS], proj]))
        return out

    score.models = models  # type: ignore[attr-defined]
    return score


def fit_shipped(r: Rows) -> Scorer:
    return lambda q: q.x[:, 0]


def threshold(r: Rows, score: np.ndarray, tel: bool, rule: str = "every") -> float:
    """The log-odds threshold of channel ``tel`` chosen on ``r``'s genuine clips. ``every``: the
    highest that rejects at most 5 % of each source's genuine clips on each line of the channel
    (sources with at least MIN_BONA judged clips on that line); ``pooled``: at most 5 % of all of
    them together."""
    m = r.bona & (r.tel == tel)
    if rule == "pooled":
        return float(np.quantile(score[m], MAX_REJECTED)) if m.any() else 0.0
    qs = []
    for s in np.unique(r.source[m]):
        for c in np.unique(r.channel[m & (r.source == s)]):
            g = score[m & (r.source == s) & (r.channel == c)]
            if g.size >= MIN_BONA:
                qs.append(np.quantile(g, MAX_REJECTED))
    return float(min(qs)) if qs else 0.0


@dataclass
class Held:
    """Every row scored by a fold that never saw its source, and the fold's threshold per channel
    applied (log-odds minus threshold: below 0 is a spoof)."""

    rows: Rows
    score: np.ndarray  # fold log-odds
    margin: np.ndarray  # score minus the fold's threshold for the row's channel


RULES = ("fixed", "every", "pooled")


def held_out_rules(
    r: Rows, fit: Callable[[Rows], Scorer], folds: list[np.ndarray], fit_rows: np.ndarray | None = None
) -> dict[str, Held]:
    """Score each fold's rows (boolean masks, disjoint) by a model fitted on the rest (and, with
    ``fit_rows``, only on those of the rest), under each threshold rule: ``fixed`` is log-odds 0 (the
    documented default 0.5), ``every`` and ``pooled`` are chosen on the rest (:func:`threshold`;
    always on every other source, whatever ``fit_rows`` says)."""
    score = np.full(len(r.bona), np.nan)
    margin = {rule: np.full(len(r.bona), np.nan) for rule in RULES}
    for test in folds:
        train = r.take(~test)
        f = fit(train if fit_rows is None else r.take(~test & fit_rows))
        s_train, s_test = f(train), f(r.take(test))
        score[test] = s_test
        for t in (False, True):
            m = np.flatnonzero(test)[r.tel[test] == t]
            for rule in RULES:
                th = 0.0 if rule == "fixed" else threshold(train, s_train, t, rule)
                margin[rule][m] = score[m] - th
    return {rule: Held(r, score, margin[rule]) for rule in RULES}


def held_out(
    r: Rows, fit: Callable[[Rows], Scorer], folds: list[np.ndarray], fixed: bool = False, rule: str = "every"
) -> Held:
    """:func:`held_out_rules` under one rule (``fixed``: log-odds 0)."""
    return held_out_rules(r, fit, folds)["fixed" if fixed else rule]


@dataclass
class Summary:
    pooled: float
    mean: float
    worst: float
    worst_source: str
    new_worst: float
    rejected: dict[str, float]  # genuine rejected per channel, pooled
    rejected_worst: dict[str, tuple[float, str]]  # the worst source per channel
    accepted: dict[str, float]  # spoofs accepted per channel
    per_source: dict[str, float]


def summarise(h: Held, sources: np.ndarray | None = None) -> Summary:
    r = h.rows
    keep = np.ones(len(r.bona), bool) if sources is None else np.isin(r.source, sources)
    wide = keep & (r.channel == "wideband")
    pooled = eer_between(h.margin[wide & r.bona], h.margin[wide & ~r.bona])
    per_source = {}
    for s in np.unique(r.source[wide]):
        b, f = h.margin[wide & r.bona & (r.source == s)], h.margin[wide & ~r.bona & (r.source == s)]
        if b.size >= MIN_EER and f.size >= MIN_EER:
            per_source[s] = eer_between(b, f)
    new = [e for s, e in per_source.items() if r.new[r.source == s][0]]
    rejected, rejected_worst, accepted = {}, {}, {}
    for c in np.unique(r.channel):
        m = keep & (r.channel == c)
        rejected[c] = float(np.mean(h.margin[m & r.bona] < 0))
        accepted[c] = float(np.mean(h.margin[m & ~r.bona] >= 0))
        worst = (0.0, "")
        for s in np.unique(r.source[m & r.bona]):
            g = h.margin[m & r.bona & (r.source == s)]
            if g.size >= MIN_BONA and np.mean(g < 0) > worst[0]:
                worst = (float(np.mean(g < 0)), str(s))
        rejected_worst[c] = worst
    ws = max(per_source, key=per_source.get)  # type: ignore[arg-type]
    return Summary(
        pooled,
        float(np.mean(list(per_source.values()))),
        per_source[ws],
        ws,
        max(new) if new else float("nan"),
        rejected,
        rejected_worst,
        accepted,
        per_source,
    )


def source_folds(r: Rows, sources: np.ndarray) -> list[np.ndarray]:
    return [r.source == s for s in sources]


def learning_curve(
    r: Rows, fit: Callable[[Rows], Scorer], loso: Held
) -> list[tuple[int, float, float, float, float]]:
    """(k, pooled EER, per-source mean, worst, draws): train on k sources drawn at random, score every
    other source; mean over DRAWS draws. The last point (k = n - 1) is ``loso``, leave one source out."""
    rng = np.random.default_rng(SEED)
    sources = np.unique(r.source)
    out = []
    for k in (*[k for k in CURVE if k < len(sources) - 1], len(sources) - 1):
        vals = []
        for _ in range(DRAWS if k < len(sources) - 1 else 1):
            if k == len(sources) - 1:
                vals.append(_curve_point(loso, sources))
                continue
            # a draw must hold both classes
            while True:
                pick = rng.choice(sources, k, replace=False)
                train = np.isin(r.source, pick)
                if r.bona[train].any() and (~r.bona[train]).any():
                    break
            h = held_out(r, fit, [~train], rule="pooled")
            vals.append(_curve_point(h, sources[~np.isin(sources, pick)]))
        a = np.array(vals)
        out.append((k, *a.mean(axis=0), len(vals)))
        print(f"k={k}: pooled {a[:, 0].mean():.1%}, mean {a[:, 1].mean():.1%}, worst {a[:, 2].mean():.1%}")
    return out


def _curve_point(h: Held, held: np.ndarray) -> tuple[float, float, float]:
    s = summarise(h, held)
    return s.pooled, s.mean, s.worst


def pct(v: float) -> str:
    return "–" if np.isnan(v) else f"{100 * v:.1f} %"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--branches", type=Path, nargs="+", required=True, help="train.antispoof_refit extract files"
    )
    ap.add_argument("--sources", type=Path, nargs="+", required=True, help="their sources folders, in order")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--curve-only", action="store_true", help="only the learning curve (its own section)")
    ap.add_argument(
        "--write",
        choices=RULES[1:],
        help="put the head (train-role sources) in the model, its thresholds by this rule",
    )
    args = ap.parse_args()
    r = load_all(args.branches, args.sources)
    sources = np.unique(r.source)
    print(f"{len(r.bona)} judged rows, {len(sources)} sources")
    folds = source_folds(r, sources)
    if args.curve_only:
        curve(r, folds, args.no_docs)
        return
    shipped = held_out_rules(r, fit_shipped, folds)
    fusion = held_out_rules(r, fit_fusion, folds)
    head_train = held_out_rules(r, fit_head, folds, fit_rows=r.trainable)
    head_all = held_out_rules(r, fit_head, folds)
    results = {
        "issue-29 fusion, threshold 0.5 (the model before)": shipped["fixed"],
        "issue-29 fusion, per-channel threshold, every source": shipped["every"],
        "issue-29 fusion, per-channel threshold, pooled": shipped["pooled"],
        "fusion refit, every source": fusion["every"],
        "fusion refit, pooled": fusion["pooled"],
        f"{HEAD_TRAIN}, every source": head_train["every"],
        SHIPPED: head_train["pooled"],
        f"{HEAD}, every source": head_all["every"],
        f"{HEAD}, pooled": head_all["pooled"],
    }
    lines: list[str] = []

    def say(s: str = "") -> None:
        print(s)
        lines.append(s)

    channels = ["wideband", *sorted(c for c in np.unique(r.channel) if c != "wideband")]
    say(
        "| variant | pooled EER | per-source mean | worst source | worst 2023–26 source | "
        + " | ".join(f"genuine rejected {c} (worst source)" for c in channels)
        + " | spoofs accepted, wideband |"
    )
    say("|---|---|---|---|---|" + "---|" * len(channels) + "---|")
    summaries = {}
    for name, h in results.items():
        s = summarise(h)
        summaries[name] = s
        cells = [f"{pct(s.rejected[c])} ({pct(s.rejected_worst[c][0])})" for c in channels]
        say(
            f"| {name} | {pct(s.pooled)} | {pct(s.mean)} | {pct(s.worst)} ({s.worst_source}) | "
            f"{pct(s.new_worst)} | " + " | ".join(cells) + f" | {pct(s.accepted['wideband'])} |"
        )
    say()
    say("Per source, EER leaving the source out (the shipped head; the model before):")
    say()
    base = summaries["issue-29 fusion, threshold 0.5 (the model before)"].per_source
    shipped_s = summaries[SHIPPED].per_source
    say(
        ", ".join(f"{k} {pct(v)} ({pct(base[k])})" for k, v in sorted(shipped_s.items(), key=lambda t: -t[1]))
    )
    if args.write:
        write_head(r, args.write)
    if args.no_docs:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 7))
    names = sorted(shipped_s, key=shipped_s.get)  # type: ignore[arg-type]
    ax.barh(range(len(names)), [100 * base[n] for n in names], color="lightgray", label="the model before")
    ax.barh(range(len(names)), [100 * shipped_s[n] for n in names], height=0.4, color="tab:red",
            label="shipped: head, train-role sources")  # fmt: skip
    ax.set_yticks(range(len(names)), names, fontsize=6)
    ax.set_xlabel("EER, %, leaving the source out")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(SOURCES_PNG, dpi=100)
    preamble = [
        "Measured by `python -m train.antispoof_calibration` (module docstring: how to build the inputs)",
        f"on {len(sources)} sources: the public repositories of docs/antispoof-sources.md and the shipped",
        "model's held-out bona fide of `shared/` (LibriSpeech, AMI, Common Voice Spanish; genuine only).",
        "Every row is scored by a fold that never saw its source: not in the head, not in the PCA, not in",
        'the threshold. EERs are over the clips as published ("wideband" rows, each judged with the',
        "channel the service would tell); the genuine-rejection columns give the pooled share and, in",
        f"brackets, the worst source with at least {MIN_BONA} clips on that line. Lines are",
        "`common/telephone.py`'s, at 8 kHz; every bona fide clip goes through all five, each spoof",
        f"through {SPOOF_LINES} drawn at random; room, codec2 and MP3 are the augmented channels",
        "(`train.antispoof_refit --augmented`). PCA size and regularisation were set before any figure",
        f"was seen and not tuned on this table. Figure: `{SOURCES_PNG.name}`.",
        "",
    ]
    replace_section(
        DOCS_MD, "antispoof-one-threshold", "\n".join(preamble + lines), "One threshold across sources"
    )
    print(f"wrote {SOURCES_PNG} and the section of {DOCS_MD}")


def curve(r: Rows, folds: list[np.ndarray], no_docs: bool) -> None:
    """The learning curve (pooled threshold rule), printed and, unless ``no_docs``, written to its
    section of the card and to docs/antispoof_curve.png."""
    lines = [
        "| sources in training | fusion: pooled / mean / worst | fusion + head: pooled / mean / worst |",
        "|---|---|---|",
    ]
    curves = {
        "fusion": learning_curve(r, fit_fusion, held_out(r, fit_fusion, folds, rule="pooled")),
        "head": learning_curve(r, fit_head, held_out(r, fit_head, folds, rule="pooled")),
    }
    for a, b in zip(curves["fusion"], curves["head"], strict=True):
        lines.append(
            f"| {a[0]} | {' / '.join(pct(v) for v in a[1:4])} | {' / '.join(pct(v) for v in b[1:4])} |"
        )
    print("\n".join(lines))
    if no_docs:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for name, c in curves.items():
        k = [p[0] for p in c]
        ax.plot(k, [100 * p[1] for p in c], "o-", label=f"{name}: pooled")
        ax.plot(k, [100 * p[2] for p in c], "s--", label=f"{name}: per-source mean")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sources in training (networks frozen; every source, choose-only too)")
    ax.set_ylabel("EER on held-aside sources, %")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT_PNG, dpi=100)
    preamble = [
        "Measured by `python -m train.antispoof_calibration --curve-only` on the same rows as the",
        "table above. The networks are frozen (trained on the eight `shared/` sources); what is trained",
        f"on k sources drawn at random ({DRAWS} draws per k) is the fusion alone, or the fusion with the",
        "statistics head, on every source including choose-only ones (a measurement, not a shipped",
        "model); every other source is scored, with the pooled threshold rule. The last point is leave",
        f"one source out. Figure: `{OUT_PNG.name}`.",
        "",
    ]
    replace_section(DOCS_MD, "antispoof-curve", "\n".join(preamble + lines), "Learning curve")
    print(f"wrote {OUT_PNG} and the section of {DOCS_MD}")


def head_weights(models: dict) -> tuple[np.ndarray, np.ndarray]:
    """The fitted head of each channel as one linear map: (4 + stats, 2) weights and (2,) biases on
    [branch log-odds, CAM++ front statistics, Whisper statistics] (columns: wideband, telephone)."""
    cols, biases = [], []
    for t in (False, True):
        mu, sd, pca, scale, lr = models[t]
        coef, b0 = lr.coef_[0].astype(np.float64), float(lr.intercept_[0])
        v = pca.components_.T @ (coef[4:] / scale)
        cols.append(np.concatenate([coef[:4], v / sd]))
        biases.append(b0 - float((mu / sd + pca.mean_) @ v))
    return np.stack(cols, axis=1), np.array(biases)


def write_head(r: Rows, rule: str, path: Path | None = None) -> None:
    """The head fitted on every train-role source, each channel's threshold chosen by ``rule`` on
    every source and folded into its bias, into the shipped model as its ``channel_logits`` output."""
    import onnx
    from onnx import helper, numpy_helper

    from verilive.voice.antispoof import MODEL_FILE

    f = fit_head(r.take(r.trainable))
    models = f.models  # type: ignore[attr-defined]
    w, b = head_weights(models)
    s = f(r)
    lin = np.hstack([r.x[:, ODDS], r.x[:, STATS]]) @ w + b
    for k, t in enumerate((False, True)):  # the folded map is the head
        m = r.tel == t
        assert np.abs(lin[m, k] - s[m]).max() < 1e-6
    th = np.array([threshold(r, s, t, rule) for t in (False, True)])
    path = path or REPO / "src" / "verilive" / "voice" / MODEL_FILE
    model = onnx.load(str(path))
    head = ("branch_odds", "head_in", "head_mm", "channel_logits")
    # a head written before is replaced, so that --write can run again on the shipped file
    keep_nodes = [n for n in model.graph.node if not set(n.output) & set(head)]
    del model.graph.node[:]
    model.graph.node.extend(keep_nodes)
    keep_init = [i for i in model.graph.initializer if i.name not in ("head_w", "head_b")]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep_init)
    keep_out = [o for o in model.graph.output if o.name not in head]
    del model.graph.output[:]
    model.graph.output.extend(keep_out)
    g = branch_graph(model)
    model.graph.initializer.extend(
        [
            numpy_helper.from_array(w.astype(np.float32), "head_w"),
            numpy_helper.from_array((b - th).astype(np.float32), "head_b"),
        ]
    )
    model.graph.node.extend(
        [
            helper.make_node("Concat", list(g.odds), ["branch_odds"], axis=1),
            helper.make_node("Concat", ["branch_odds", g.fcm_stats, "whisper"], ["head_in"], axis=1),
            helper.make_node("MatMul", ["head_in", "head_w"], ["head_mm"]),
            helper.make_node("Add", ["head_mm", "head_b"], ["channel_logits"]),
        ]
    )
    model.graph.output.extend(
        [
            helper.make_tensor_value_info("branch_odds", onnx.TensorProto.FLOAT, [None, 4]),
            helper.make_tensor_value_info("channel_logits", onnx.TensorProto.FLOAT, [None, 2]),
        ]
    )
    onnx.checker.check_model(model)
    (entry,) = [p for p in model.metadata_props if p.key == "verilive_antispoof"]
    meta = json.loads(entry.value)
    meta["channel_logits"] = ["wideband", "telephone"]
    meta["channel_head"] = {
        "trained_on": sorted(set(r.source[r.trainable].tolist())),
        "pca_dims": PCA_DIMS,
        "threshold_rule": rule,
        "thresholds": {"wideband": float(th[0]), "telephone": float(th[1])},
    }
    entry.value = json.dumps(meta)
    onnx.save(model, str(path))
    print(f"wrote channel_logits (thresholds {th.round(3).tolist()}) into {path}")


if __name__ == "__main__":
    main()
