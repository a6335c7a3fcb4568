"""Fit verilive's age model: ridge regression of log(age) on CAM++ unit embeddings, and the rule
that decides when its estimate is answered.

    python -m train.age              # embed (cached), cross-validate, choose the rule, fit, write
    python -m train.age --no-write   # the same, printing only

**Data** (``../shared/data``, real age labels; README.txt of each folder):

- ``voice/age_speechocean762``: 250 speakers aged 6-43 (exact ages), one English utterance each,
  all Mandarin L1 (speechocean762, Zhang et al. 2021, Apache-2.0).
- ``voice/age_cv_es_mx``: 294 Mozilla Common Voice clips (Spanish, Central-Mexican accent; CC0),
  age brackets 20-29 / 30-49 / 50-69 only. The 14 pairs of ``possible_same_speaker.csv`` are
  joined into groups (280 groups); a group is always on one side of every split. Bracket labels
  count as their midpoints (24.5 / 39.5 / 59.5 years) where a number is needed.

**Features.** ``VoiceEngine.create_template(audio, channel).unit()`` for both channels (MIC, TEL),
the exact runtime path, of the whole clip and of crops of 1, 2 and 4 s (seeded position; a crop
longer than the clip, or without speech, is skipped). The crops are augmentation and let the
rule be measured on short speech. The template's speech length (VAD) is kept with each embedding.

**Protocol** (split by group throughout):

1. Held aside first: 20 % of the groups of each source and bracket, the first in
   sha256(seed:group) order. Nothing is fitted or chosen on them; the final model is checked on
   them once here, by ``python -m eval.age`` and by tests/test_age.py.
2. Development groups, 5 folds stratified by source and bracket:
   - within each source: a model fitted on the other folds of that source only;
   - across sources: fitted on all development clips of one source, tested on the other's;
   - pooled (the shipped model): fitted on the other folds of both sources.
   The ridge strength is chosen inside every training part by an inner 5-fold group CV (squared
   error of log age), so no reported figure profits from that choice.
3. The answering rule is chosen on the pooled out-of-fold estimates (below), for both channels;
   the channel is chosen on the same figures.
4. The final model: ridge strength by 5-fold group CV on all development clips, fitted on all of
   them, written to ``src/verilive/voice/age_model.json`` with the rule and its provenance.

**The rule.** An estimate ŷ is answered (rounded to whole years) only when the speech lasts at
least ``min_speech_ms`` and ŷ ≤ ``max_estimate_years``; otherwise ``age`` is null. Chosen on the
grid below as the pair that answers the most out-of-fold development embeddings while, in every
speech-length band with at least 10 answers, at least 90 % of the answers are within ±3 years of
the truth (ties: the longer minimum speech, then the lower age limit). Adults are not answered:
their estimates are no better than the mean across sources (docs/model-age.md).

Outputs: age_model.json and the generated sections of docs/model-age.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from common.repo import data_root, replace_section

from train.age_data import (
    ADULT_BRACKETS,
    ATTRIBUTIONS,
    BRACKETS,
    CV,
    CV_DIR,
    HELD_FRACTION,
    LICENCES,
    N_FOLDS,
    PIECES,
    SEED,
    SO,
    SO_DIR,
    SOURCE_NAME,
    SOURCES,
    Clip,
    Embeddings,
    Rows,
    embed_clips,
    read_clips,
    split_held,
)

# bracket_of, make_engine and read_audio are re-exported: eval/age.py and tests/test_age.py use train.age.X
from train.age_data import bracket_of as bracket_of
from train.voice_attributes import CHANNELS, LinearFit, choose_l2_by_cv, standardisation
from train.voice_attributes import make_engine as make_engine
from train.voice_attributes import read_audio as read_audio

REPO = Path(__file__).resolve().parents[1]
MODEL_JSON = REPO / "src" / "verilive" / "voice" / "age_model.json"
CARD_MD = REPO / "docs" / "model-age.md"
COMMAND = "python -m train.age"

#: The shipped model reads the wideband (MIC) embedding: on the pooled development CV it answers
#: more children within ±3 years than the telephone-band one (docs/model-age.md, "Channel").
FEATURE_CHANNEL = "MIC"
#: Narrowband input lacks the band above 4 kHz the MIC model was fitted on: no age below this rate.
MIN_SAMPLE_RATE = 16000
LAMBDAS = tuple(float(x) for x in 10.0 ** np.arange(1.0, 4.51, 0.5))

#: Child-vs-adult call from the estimate: halfway between the oldest child and the youngest adult.
CHILD_CUT_YEARS = 16.0
#: The youngest age in the training data; answers are not extrapolated below it.
YOUNGEST = 6

# The answering rule: grid, tolerance and the share of answers that must be within it.
MIN_SPEECH_GRID_MS = (1000.0, 1500.0, 2000.0, 3000.0)
MAX_ESTIMATE_GRID = tuple(float(x) for x in np.arange(8.0, 14.01, 0.5))
TOLERANCE_YEARS = 3.0
WITHIN_SHARE = 0.9
SPEECH_BANDS_MS = (0.0, 2000.0, 4000.0, float("inf"))
MIN_BAND_ANSWERS = 10


# ---------------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Fitted(LinearFit):  # bias in log years
    def predict_years(self, units: np.ndarray) -> np.ndarray:
        return np.exp(self.score(units))


def fit(units: np.ndarray, years: np.ndarray, l2: float) -> Fitted:
    """Ridge regression of log(years) on standardised features, closed form (bias not penalised).
    Log age: an error of a year matters more at 7 than at 40, and children are what the rule
    answers."""
    x = np.asarray(units, dtype=np.float64)
    t = np.log(np.asarray(years, dtype=np.float64))
    mean, scale = standardisation(x)
    z = (x - mean) / scale
    bias = float(t.mean())
    w = np.linalg.solve(z.T @ z + l2 * np.eye(z.shape[1]), z.T @ (t - bias))
    return Fitted(mean, scale, w, bias, l2)


def choose_l2(rows: Rows, salt: str) -> tuple[float, dict[float, float]]:
    """Ridge strength with the lowest out-of-fold squared error of log age (5-fold group CV;
    ties: stronger)."""

    def loss(p: np.ndarray) -> float:
        return float(np.mean((np.log(p) - np.log(rows.years)) ** 2))

    folds = rows.folds(salt)
    return choose_l2_by_cv(rows.units, rows.years, folds, N_FOLDS, LAMBDAS, fit, Fitted.predict_years, loss)


def fit_chosen(rows: Rows, salt: str) -> Fitted:
    l2, _ = choose_l2(rows, salt)
    return fit(rows.units, rows.years, l2)


def source_means(rows: Rows) -> dict[str, float]:
    return {s: float(rows.years[rows.source == s].mean()) for s in SOURCES if (rows.source == s).any()}


def cross_validate(rows: Rows, salt: str, log: bool = False) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Out-of-fold estimates of every row (nested: ridge strength chosen inside each training part)
    and the baseline: the mean age of the training part's clips of the same source."""
    folds = rows.folds(salt)
    pred, base = np.empty(len(rows)), np.empty(len(rows))
    chosen = []
    for k in range(N_FOLDS):
        train, test = folds != k, folds == k
        part = rows.take(train)
        model = fit_chosen(part, f"{salt}:inner{k}")
        chosen.append(model.l2)
        pred[test] = model.predict_years(rows.units[test])
        means = source_means(part)
        base[test] = [means[s] for s in rows.source[test]]
        if log:
            print(f"  {salt} fold {k}: l2 = {model.l2:g}", file=sys.stderr)
    return pred, base, chosen


# ---------------------------------------------------------------------------------- the rule


@dataclass(frozen=True)
class Rule:
    min_speech_ms: float
    max_estimate_years: float

    def answered(self, pred: np.ndarray, speech_ms: np.ndarray) -> np.ndarray:
        return (speech_ms >= self.min_speech_ms) & (pred <= self.max_estimate_years)

    def answer(self, pred: np.ndarray) -> np.ndarray:
        return np.maximum(np.round(pred), YOUNGEST)


def _rule_ok(rule: Rule, pred: np.ndarray, rows: Rows) -> tuple[bool, int]:
    a = rule.answered(pred, rows.speech_ms)
    if not a.any():
        return False, 0
    within = np.abs(rule.answer(pred) - rows.years) <= TOLERANCE_YEARS
    for lo, hi in itertools.pairwise(SPEECH_BANDS_MS):
        band = a & (rows.speech_ms >= lo) & (rows.speech_ms < hi)
        if band.sum() >= MIN_BAND_ANSWERS and within[band].mean() < WITHIN_SHARE:
            return False, int(a.sum())
    return bool(within[a].mean() >= WITHIN_SHARE), int(a.sum())


def choose_rule(pred: np.ndarray, rows: Rows) -> tuple[Rule, list[dict[str, float]]]:
    """The grid pair answering the most rows under the tolerance (see the module docstring)."""
    grid: list[dict[str, float]] = []
    best: tuple[int, float, float] | None = None
    for s in MIN_SPEECH_GRID_MS:
        for tau in MAX_ESTIMATE_GRID:
            ok, n = _rule_ok(Rule(s, tau), pred, rows)
            grid.append({"min_speech_ms": s, "max_estimate_years": tau, "answered": n, "ok": ok})
            if ok and (best is None or (n, s, -tau) > best):
                best = (n, s, -tau)
    if best is None:
        raise RuntimeError("no rule on the grid meets the tolerance")
    return Rule(best[1], -best[2]), grid


# ---------------------------------------------------------------------------------- metrics


def _r(x: float, nd: int = 3) -> float:
    return float(round(float(x), nd))


def regression_metrics(rows: Rows, pred: np.ndarray, base: np.ndarray) -> dict[str, Any]:
    """MAE (years; bracket midpoints for Common Voice) against the baseline, bracket accuracy on
    Common Voice, child-vs-adult accuracy on speechocean762 (teens left out)."""
    out: dict[str, Any] = {"n": len(rows)}
    if not len(rows):
        return out
    out["mae"] = _r(np.mean(np.abs(pred - rows.years)))
    out["mae_baseline"] = _r(np.mean(np.abs(base - rows.years)))
    adult = np.isin(rows.bracket, ADULT_BRACKETS)
    if (rows.source == CV).any():
        m = rows.source == CV
        called = np.where(pred[m] < 30, "20-29", np.where(pred[m] < 50, "30-49", "50-69"))
        truth = rows.bracket[m]
        out["bracket_accuracy"] = _r(np.mean(called == truth))
        out["bracket_majority"] = _r(max(Counter(truth).values()) / m.sum())
        out["bracket_n"] = int(m.sum())
    kids = rows.bracket == "6-12"
    m = (rows.source == SO) & (kids | adult)
    if kids.any() and m.any():
        ok = (pred[m] < CHILD_CUT_YEARS) == kids[m]
        out["child_adult_accuracy"] = _r(ok.mean())
        out["child_adult_majority"] = _r(max(kids[m].mean(), 1 - kids[m].mean()))
        out["child_adult_n"] = int(m.sum())
    return out


def rule_metrics(
    rows: Rows, pred: np.ndarray, base: np.ndarray, rule: Rule, child_age: float
) -> dict[str, Any]:
    """What the rule answers and how wrong the answers are; ``child_age``: the constant a mere
    child detector would answer (the development children's mean age), for comparison."""
    a = rule.answered(pred, rows.speech_ms)
    eligible = rows.speech_ms >= rule.min_speech_ms
    err = np.abs(rule.answer(pred) - rows.years)
    out: dict[str, Any] = {
        "n": len(rows),
        "long_enough": int(eligible.sum()),
        "answered": int(a.sum()),
        "answered_share": _r(a.mean() if len(rows) else 0.0),
    }
    for b in BRACKETS:
        m = rows.bracket == b
        if m.any():
            out[f"answered_{b}"] = f"{int((a & m).sum())}/{int(m.sum())}"
    if a.any():
        out |= {
            "mae": _r(err[a].mean()),
            "mae_baseline": _r(np.abs(base - rows.years)[a].mean()),
            "mae_constant_child_age": _r(np.abs(child_age - rows.years)[a].mean()),
            "within_tolerance": _r(np.mean(err[a] <= TOLERANCE_YEARS)),
            "p90_error": _r(np.percentile(err[a], 90), 1),
            "max_error": _r(err[a].max(), 1),
            "answered_adults": int((a & (rows.years >= 18)).sum()),
            "answered_true_ages": {str(int(k)): int(v) for k, v in sorted(Counter(rows.years[a]).items())},
        }
    return out


def by_source(rows: Rows, pred: np.ndarray, base: np.ndarray, piece: str = "full") -> dict[str, Any]:
    out = {}
    for s in SOURCES:
        m = (rows.source == s) & (rows.piece == piece)
        if m.any():
            out[s] = regression_metrics(rows.take(m), pred[m], base[m])
    return out


def rule_by_piece(
    rows: Rows, pred: np.ndarray, base: np.ndarray, rule: Rule, child_age: float
) -> dict[str, Any]:
    out = {"all": rule_metrics(rows, pred, base, rule, child_age)}
    for p in PIECES:
        m = rows.piece == p
        if m.any():
            out[p] = rule_metrics(rows.take(m), pred[m], base[m], rule, child_age)
    for s in SOURCES:
        m = rows.source == s
        if m.any():
            out[s] = rule_metrics(rows.take(m), pred[m], base[m], rule, child_age)
    return out


# ---------------------------------------------------------------------------------- evaluation


@dataclass
class ChannelResult:
    channel: str
    rows: Rows  # development rows of this channel
    pred: np.ndarray  # pooled out-of-fold estimates
    base: np.ndarray
    l2: list[float]
    rule: Rule
    grid: list[dict[str, float]]


def dev_child_age(dev: Sequence[Clip]) -> float:
    """Mean age of the development children (6-12), rounded: what a mere child detector would say."""
    return float(round(np.mean([c.years for c in dev if c.bracket == "6-12"])))


def pooled_cv(emb: Embeddings, dev: Sequence[Clip], channel: str) -> ChannelResult:
    rows = Rows.of(emb, dev, channel)
    pred, base, l2 = cross_validate(rows, f"pooled-{channel}")
    rule, grid = choose_rule(pred, rows)
    return ChannelResult(channel, rows, pred, base, l2, rule, grid)


def within_source(rows: Rows, rule: Rule, child_age: float) -> dict[str, Any]:
    """Fitted and tested inside one source (nested group CV)."""
    out = {}
    for s in SOURCES:
        part = rows.take(rows.source == s)
        pred, base, l2 = cross_validate(part, f"within-{s}")
        full = part.piece == "full"
        out[s] = {
            "l2_per_fold": l2,
            "whole_clips": regression_metrics(part.take(full), pred[full], base[full]),
            "rule": rule_metrics(part, pred, base, rule, child_age),
        }
    return out


def across_sources(rows: Rows, rule: Rule, child_age: float) -> dict[str, Any]:
    """Fitted on all development clips of one source, tested on the other's."""
    out = {}
    for train_src in SOURCES:
        test_src = next(s for s in SOURCES if s != train_src)
        train, test = rows.take(rows.source == train_src), rows.take(rows.source == test_src)
        model = fit_chosen(train, f"across-{train_src}")
        pred = model.predict_years(test.units)
        base = np.full(len(test), float(train.years.mean()))
        full = test.piece == "full"
        res: dict[str, Any] = {
            "l2": model.l2,
            "whole_clips": regression_metrics(test.take(full), pred[full], base[full]),
            "rule": rule_metrics(test, pred, base, rule, child_age),
        }
        if test_src == SO:
            adults = full & np.isin(test.bracket, ADULT_BRACKETS)
            res["whole_clips_adults"] = regression_metrics(test.take(adults), pred[adults], base[adults])
            adult_brackets = test.bracket[adults]
            called = np.where(pred[adults] < 30, "20-29", "30-49")  # speechocean762 adults are 20-43
            res["adult_bracket_accuracy"] = _r(np.mean(called == adult_brackets))
            res["adult_bracket_majority"] = _r(max(Counter(adult_brackets).values()) / adults.sum())
            kids = full & (test.bracket == "6-12")
            res["children_median_estimate"] = _r(np.median(pred[kids]), 1)
        out[f"{train_src}->{test_src}"] = res
    return out


def held_aside(
    predict_years: Callable[[np.ndarray], np.ndarray],
    emb: Embeddings,
    held: Sequence[Clip],
    dev_rows: Rows,
    rule: Rule,
    child_age: float,
) -> dict[str, Any]:
    """A fitted model (``predict_years`` of unit embeddings) on every held-aside piece."""
    rows = Rows.of(emb, held, FEATURE_CHANNEL)
    pred = predict_years(rows.units)
    means = source_means(dev_rows)
    base = np.array([means[s] for s in rows.source])
    return {
        "whole_clips": by_source(rows, pred, base),
        "rule": rule_by_piece(rows, pred, base, rule, child_age),
    }


# ---------------------------------------------------------------------------------- outputs


def model_json(
    final: Fitted,
    rule: Rule,
    dev: Sequence[Clip],
    held: Sequence[Clip],
    n_train: int,
    results: dict[str, Any],
) -> dict[str, Any]:
    def counts(clips: Sequence[Clip]) -> dict[str, Any]:
        return {
            s: {
                "clips": sum(c.source == s for c in clips),
                "groups": len({c.group for c in clips if c.source == s}),
                "by_bracket": {b: sum(c.source == s and c.bracket == b for c in clips) for b in BRACKETS},
            }
            for s in SOURCES
        }

    return {
        "model": "ridge regression of log(age) (L2), numpy runtime in verilive.voice.age",
        "formula": "age_years = exp(weights . ((u - mean) / scale) + bias)",
        "input": "u = VoiceEngine.create_template(audio, channel).unit(): L2-normalised CAM++ embedding",
        "channel": FEATURE_CHANNEL,
        **final.model_fields(),
        "rule": {
            "what": "age = max(round(estimate), youngest_answer_years) when speech_ms >= min_speech_ms, "
            "sample_rate >= min_sample_rate and estimate <= max_estimate_years; otherwise null",
            "min_speech_ms": rule.min_speech_ms,
            "max_estimate_years": rule.max_estimate_years,
            "min_sample_rate": MIN_SAMPLE_RATE,
            "youngest_answer_years": YOUNGEST,
            "chosen_by": f"on the pooled nested {N_FOLDS}-fold group CV: the most out-of-fold answers with "
            f"at least {WITHIN_SHARE:.0%} of them within ±{TOLERANCE_YEARS:g} y in every speech band of "
            f"at least {MIN_BAND_ANSWERS} answers",
        },
        "training": {
            "data": {s: f"shared/data/{d}" for s, d in ((SO, SO_DIR), (CV, CV_DIR))},
            "licences": LICENCES,
            "attributions": ATTRIBUTIONS,
            "development": counts(dev),
            "embeddings": n_train,
            "augmentation": "whole clip + crops of 1, 2, 4 s (seeded position)",
            "labels": "speechocean762 exact ages; Common Voice brackets as midpoints 24.5 / 39.5 / 59.5",
            "held_aside": counts(held),
            "held_aside_groups": sorted({c.group for c in held}),
            "held_aside_split": f"first {HELD_FRACTION:.0%} of the groups of each source and bracket in "
            f"sha256('{SEED}:' + group) order",
        },
        "results": results,
        "date": dt.date.today().isoformat(),
        "command": COMMAND,
    }


def _f(x: Any, nd: int = 2) -> str:
    return "–" if x is None else f"{x:.{nd}f}"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def results_markdown(data: dict[str, Any], grid: Sequence[dict[str, float]] = ()) -> str:
    res = data["results"]
    rule = data["rule"]
    dv = data["training"]["development"]
    hv = data["training"]["held_aside"]
    lines = [
        f"Generated by `{COMMAND}` on {data['date']}. Input: the {data['channel']} embedding. "
        f"Development: {dv[SO]['clips']} speechocean762 speakers and {dv[CV]['clips']} Common Voice clips "
        f"({dv[CV]['groups']} groups), {data['training']['embeddings']} embeddings; held aside: "
        f"{hv[SO]['clips']} + {hv[CV]['clips']} clips never used for fitting or choosing anything "
        f"(listed in age_model.json). Ridge strength of the final model: {data['l2']:g}.",
        "",
        "**Estimates on whole clips** (MAE in years; Common Voice against bracket midpoints; baseline: "
        "predicting the training mean of the same source, or across sources the training source's mean):",
        "",
        "| protocol | tested on | n | MAE | MAE of the mean | brackets (CV) | majority "
        "| child vs adult (so762) | majority |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def row(proto: str, src: str, m: dict[str, Any]) -> str:
        return (
            f"| {proto} | {SOURCE_NAME[src]} | {m['n']} | {_f(m.get('mae'))} | {_f(m.get('mae_baseline'))} | "
            f"{_pct(m.get('bracket_accuracy'))} | {_pct(m.get('bracket_majority'))} | "
            f"{_pct(m.get('child_adult_accuracy'))} | {_pct(m.get('child_adult_majority'))} |"
        )

    for s in SOURCES:
        lines.append(row("within source, 5-fold", s, res["within_source"][s]["whole_clips"]))
    for key, r in res["across_sources"].items():
        a, b = key.split("->")
        lines.append(row(f"across: trained on {SOURCE_NAME[a]}", b, r["whole_clips"]))
    x = res["across_sources"][f"{CV}->{SO}"]
    lines.append(row(f"across: trained on {SOURCE_NAME[CV]}, adults only", SO, x["whole_clips_adults"]))
    for s in SOURCES:
        lines.append(row("pooled, 5-fold (shipped recipe)", s, res["pooled_cv"]["whole_clips"][s]))
    for s in SOURCES:
        lines.append(row("held aside, final model", s, res["held_aside"]["whole_clips"][s]))
    lines += [
        "",
        f"Trained on Common Voice adults, speechocean762 adults are put in the right bracket (20-29 / 30-49) "
        f"{_pct(x['adult_bracket_accuracy'])} of the time (majority {_pct(x['adult_bracket_majority'])}); "
        f"its children get a median estimate of {x['children_median_estimate']:g} years (no child in its "
        "training data).",
        "",
        f"**The answering rule**: answer when speech ≥ {rule['min_speech_ms']:g} ms and the estimate ≤ "
        f"{rule['max_estimate_years']:g} years (and the input rate ≥ {rule['min_sample_rate']} Hz); "
        f"otherwise null. Chosen {rule['chosen_by']}.",
        "",
        "| protocol | set | embeddings | answered | answered children (6-12) | answered teens (13-19) "
        "| answered adults | MAE of answers | MAE of the mean | MAE of a constant child age | within ±3 y "
        "| 90th pct. error | max error |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def rrow(proto: str, name: str, m: dict[str, Any]) -> str:
        adults = sum(int(m.get(f"answered_{b}", "0/0").split("/")[0]) for b in ADULT_BRACKETS)
        adults_n = sum(int(m.get(f"answered_{b}", "0/0").split("/")[1]) for b in ADULT_BRACKETS)
        return (
            f"| {proto} | {name} | {m['n']} | {m['answered']} ({_pct(m['answered_share'])}) | "
            f"{m.get('answered_6-12', '–')} | {m.get('answered_13-19', '–')} | {adults}/{adults_n} | "
            f"{_f(m.get('mae'))} | {_f(m.get('mae_baseline'))} | {_f(m.get('mae_constant_child_age'))} | "
            f"{_pct(m.get('within_tolerance'))} | {_f(m.get('p90_error'), 1)} | {_f(m.get('max_error'), 1)} |"
        )

    pooled = res["pooled_cv"]["rule"]
    for k in ("all", *PIECES):
        if k in pooled:
            lines.append(rrow("pooled CV", "all pieces" if k == "all" else f"{k} pieces", pooled[k]))
    for s in SOURCES:
        lines.append(rrow("within source CV", SOURCE_NAME[s], res["within_source"][s]["rule"]))
    for key, r in res["across_sources"].items():
        a, b = key.split("->")
        lines.append(rrow(f"across: trained on {SOURCE_NAME[a]}", SOURCE_NAME[b], r["rule"]))
    held = res["held_aside"]["rule"]
    for k in ("all", *PIECES):
        if k in held:
            lines.append(
                rrow("held aside, final model", "all pieces" if k == "all" else f"{k} pieces", held[k])
            )
    lines += [
        "",
        "Channel comparison (pooled nested CV, each channel with its own rule chosen the same way):",
        "",
        "| channel | rule | answered | answered children | MAE of answers | within ±3 y | answered adults |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for ch, c in res["channels"].items():
        m = c["rule_metrics"]
        lines.append(
            f"| {ch}{' (shipped)' if ch == data['channel'] else ''} | "
            f"speech ≥ {c['rule']['min_speech_ms']:g} ms, estimate ≤ {c['rule']['max_estimate_years']:g} y | "
            f"{m['answered']}/{m['n']} | "
            f"{m.get('answered_6-12', '–')} | {_f(m.get('mae'))} | {_pct(m.get('within_tolerance'))} | "
            f"{m.get('answered_adults', 0)} |"
        )
    if grid:
        taus = sorted({g["max_estimate_years"] for g in grid})
        lines += [
            "",
            f"The rule grid ({data['channel']}, pooled out-of-fold development embeddings answered; "
            f"✗: fewer than {WITHIN_SHARE:.0%} of the answers within ±{TOLERANCE_YEARS:g} y "
            "in some speech band):",
            "",
            "| min speech / max estimate | " + " | ".join(f"{t:g}" for t in taus) + " |",
            "|---|" + "---:|" * len(taus),
        ]
        for sp in sorted({g["min_speech_ms"] for g in grid}):
            cells = {g["max_estimate_years"]: g for g in grid if g["min_speech_ms"] == sp}
            lines.append(
                f"| {sp:g} ms | "
                + " | ".join(f"{int(cells[t]['answered'])}{'' if cells[t]['ok'] else ' ✗'}" for t in taus)
                + " |"
            )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- main


def evaluate(emb: Embeddings, dev: Sequence[Clip], log: bool = True) -> tuple[dict[str, Any], ChannelResult]:
    """Every cross-validated figure (no held-aside clip is touched); the shipped channel's result."""
    channels = {}
    for ch in CHANNELS:
        channels[ch] = pooled_cv(emb, dev, ch)
        if log:
            c = channels[ch]
            print(f"  {ch}: rule {c.rule}, l2 per fold {c.l2}", file=sys.stderr)
    shipped = channels[FEATURE_CHANNEL]
    rows, rule = shipped.rows, shipped.rule
    child_age = dev_child_age(dev)
    results: dict[str, Any] = {
        "channels": {
            ch: {
                "rule": {
                    "min_speech_ms": c.rule.min_speech_ms,
                    "max_estimate_years": c.rule.max_estimate_years,
                },
                "rule_metrics": rule_metrics(c.rows, c.pred, c.base, c.rule, child_age),
                "l2_per_fold": c.l2,
            }
            for ch, c in channels.items()
        },
        "pooled_cv": {
            "whole_clips": by_source(rows, shipped.pred, shipped.base),
            "rule": rule_by_piece(rows, shipped.pred, shipped.base, rule, child_age),
            "l2_per_fold": shipped.l2,
        },
        "within_source": within_source(rows, rule, child_age),
        "across_sources": across_sources(rows, rule, child_age),
    }
    return results, shipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="shared data folder (default $VERILIVE_DATA_DIR or ../shared/data)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    root = data_root(args.data)

    clips = read_clips(root)
    dev, held = split_held(clips)
    print(f"{len(dev)} development clips, {len(held)} held aside", file=sys.stderr)
    emb = embed_clips(clips, root)
    results, shipped = evaluate(emb, dev)
    final = fit_chosen(shipped.rows, "final")
    results["held_aside"] = held_aside(
        final.predict_years, emb, held, shipped.rows, shipped.rule, dev_child_age(dev)
    )
    data = model_json(final, shipped.rule, dev, held, len(shipped.rows), results)
    text = results_markdown(data, shipped.grid)
    print(text)
    if not args.no_write:
        MODEL_JSON.write_text(json.dumps(data, indent=1) + "\n")
        replace_section(CARD_MD, "age-results", text, "Results")
        print("wrote " + ", ".join(str(p.relative_to(REPO)) for p in (MODEL_JSON, CARD_MD)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
