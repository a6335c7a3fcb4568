"""Fit verilive's gender model: L2-regularised logistic regression on CAM++ unit embeddings.

    python -m train.gender                  # embed (cached), cross-validate, fit, write results
    python -m train.gender --no-write       # the same, printing only
    python -m train.gender --external       # also check the fitted model on other real voices
    python -m train.gender --external-only  # check the committed model on other real voices

**Data.** The 251 LibriSpeech train-clean-100 speakers of
``../shared/data/voice/librispeech_251spk_gender`` (one read utterance each; gender from
LibriSpeech's SPEAKERS.TXT; CC BY 4.0, LibriSpeech by Vassil Panayotov, Guoguo Chen, Daniel
Povey and Sanjeev Khudanpur, from LibriVox recordings).

**Features.** ``VoiceEngine.create_template(audio, ChannelType.TEL).unit()``: the L2-normalised
CAM++ embedding of the speech through the telephone channel processing (docs/voice.md), exactly
what ``verilive.voice.attributes`` feeds the model whatever the input's sample rate. Every
utterance gives up to 4 embeddings: the whole utterance and crops of 1, 2 and 4 s (seeded random
position; a crop longer than the utterance is skipped, a crop without speech too); the crops are
augmentation, so the model also sees short speech. The MIC embeddings of the same pieces are
computed too, for the channel comparison only. A speaker's embeddings are always on one side of
every split.

**Protocol** (split by speaker throughout):

1. 50 speakers (25 F, 25 M), the first of each gender in the order of sha256(seed:speaker), are
   put aside as a test set. Nothing is fitted or chosen on them; the committed model is checked
   on them once here, and again by tests/test_attributes.py.
2. On the other 201 development speakers: 5-fold cross-validation by speaker (gender-stratified);
   inside each outer training part the L2 strength is chosen by an inner 5-fold speaker CV
   (log-loss). The out-of-fold probabilities give the accuracies, the calibration and the plot.
   The same nested CV of a model fitted on MIC embeddings is the channel comparison.
3. The final model: L2 strength chosen by 5-fold speaker CV on all development speakers, fitted
   on all of them, written to ``src/verilive/voice/gender_model.json`` with its provenance.

Outputs: gender_model.json, docs/gender_cv.png, the generated sections of docs/model-gender.md.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import soundfile as sf
from common import metrics
from common.repo import data_root, replace_section

from train.gender_data import (
    ATTRIBUTION,
    LIBRI_DIR,
    LICENCE,
    N_TEST_PER_GENDER,
    SEED,
    Embeddings,
    Speaker,
    embed_speakers,
    read_speakers,
    speaker_folds,
    split_test,
)
from train.voice_attributes import (
    CHANNELS,
    CROPS_S,
    LinearFit,
    choose_l2_by_cv,
    hash_order,
    make_engine,
    read_audio,
    standardisation,
)

if TYPE_CHECKING:
    from verilive.voice.attributes import GenderModel

REPO = Path(__file__).resolve().parents[1]
MODEL_JSON = REPO / "src" / "verilive" / "voice" / "gender_model.json"
CARD_MD = REPO / "docs" / "model-gender.md"
CV_PNG = REPO / "docs" / "gender_cv.png"
COMMAND = "python -m train.gender"

AUDIOMNIST_DIR = "voice/speechbrain_samples/audiomnist_age_gender"
SB_DIR = "voice/speechbrain_samples/two_speaker_sentences"

N_FOLDS = 5
#: The model reads the embedding of the speech through the telephone channel processing, whatever
#: the input's rate: on the development speakers it separates gender better than the wideband
#: (MIC) embedding at every speech length (docs/model-gender.md, "Why the telephone band").
FEATURE_CHANNEL = "TEL"
LENGTHS = ("1s", "2s", "4s", "full")
CONDITIONS = tuple(f"{c}/{ch}" for c in ("full", *(f"{s:g}s" for s in CROPS_S)) for ch in CHANNELS)
LAMBDAS = tuple(float(x) for x in 10.0 ** np.arange(-1.0, 4.01, 0.5))

# Other real voices (--external). Asterisk voice folders are named lang_COUNTRY_g_Name, g = f/m,
# and the Debian copyright files credit the speakers (Allison Smith, June Wallack, Carlo Flora,
# Paola Dal Zot for it_IT_f_Menardi, ivrvoice.ru).
ASTERISK_DIR = Path("/usr/share/asterisk/sounds")
KLETTRES_PT_BR = Path("/usr/share/klettres/pt_BR")  # credits: "Father" and "Son" (9 years): male
EXTERNAL_PER_VOICE = 60
EXTERNAL_MIN_S = 1.0


# ---------------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Fitted(LinearFit):
    def p_male(self, units: np.ndarray) -> np.ndarray:
        return 0.5 * (1.0 + np.tanh(0.5 * self.score(units)))  # the logistic function, overflow-free


def _objective(design: np.ndarray, y: np.ndarray, theta: np.ndarray, l2: float) -> float:
    z = design @ theta
    return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * l2 * np.sum(theta[:-1] ** 2))


def fit(units: np.ndarray, male: np.ndarray, l2: float, iters: int = 100) -> Fitted:
    """Minimise Σ log-loss + l2/2 · ||w||² (bias not penalised) on standardised features:
    Newton's method with step halving; the objective is strictly convex."""
    x = np.asarray(units, dtype=np.float64)
    y = np.asarray(male, dtype=np.float64)
    if not (0 < y.sum() < y.size):
        raise ValueError("need both genders")
    mean, scale = standardisation(x)
    design = np.hstack([(x - mean) / scale, np.ones((x.shape[0], 1))])
    d = design.shape[1]
    reg = l2 * np.eye(d)
    reg[-1, -1] = 0.0
    theta = np.zeros(d)
    theta[-1] = math.log(y.mean() / (1.0 - y.mean()))
    f = _objective(design, y, theta, l2)
    for _ in range(iters):
        p = 0.5 * (1.0 + np.tanh(0.5 * (design @ theta)))
        grad = design.T @ (p - y) + reg @ theta
        hess = (design * (p * (1.0 - p))[:, None]).T @ design + reg + 1e-9 * np.eye(d)
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while True:
            cand = theta - t * step
            fc = _objective(design, y, cand, l2)
            if fc <= f or t < 1e-8:
                break
            t /= 2.0
        done = f - fc < 1e-10 * max(1.0, abs(f))
        theta, f = cand, fc
        if done:
            break
    return Fitted(mean, scale, theta[:-1].copy(), float(theta[-1]), l2)


def choose_l2(emb: Embeddings, salt: str) -> tuple[float, dict[float, float]]:
    """L2 strength with the lowest out-of-fold log-loss in a 5-fold CV by speaker (ties: stronger)."""
    speakers = [Speaker("", s, bool(m)) for s, m in sorted(set(zip(emb.speaker, emb.male, strict=True)))]
    fold_of = speaker_folds(speakers, N_FOLDS, salt)
    folds = np.array([fold_of[s] for s in emb.speaker])
    return choose_l2_by_cv(
        emb.units,
        emb.male,
        folds,
        N_FOLDS,
        LAMBDAS,
        fit,
        Fitted.p_male,
        lambda p: metrics.log_loss(p, emb.male),
    )


def cross_validate(emb: Embeddings, log: bool = True) -> tuple[np.ndarray, list[float]]:
    """Out-of-fold p(male) of every embedding (nested: L2 chosen inside each training part)."""
    speakers = [Speaker("", s, bool(m)) for s, m in sorted(set(zip(emb.speaker, emb.male, strict=True)))]
    fold_of = speaker_folds(speakers, N_FOLDS, "outer")
    folds = np.array([fold_of[s] for s in emb.speaker])
    p = np.empty(len(folds))
    chosen = []
    for k in range(N_FOLDS):
        train = emb.take(folds != k)
        l2, _ = choose_l2(train, f"inner{k}")
        chosen.append(l2)
        p[folds == k] = fit(train.units, train.male, l2).p_male(emb.units[folds == k])
        if log:
            print(f"  outer fold {k}: l2 = {l2:g}", file=sys.stderr)
    return p, chosen


# ---------------------------------------------------------------------------------- metrics


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    ph = k / n
    den = 1 + z * z / n
    centre = (ph + z * z / (2 * n)) / den
    half = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / den
    return (max(0.0, centre - half), min(1.0, centre + half))


def condition_table(emb: Embeddings, p_male: np.ndarray) -> dict[str, dict[str, float]]:
    """Accuracy (with Wilson 95 % interval), log-loss and ECE of genderScore per condition."""
    out: dict[str, dict[str, float]] = {}
    correct = (p_male >= 0.5) == emb.male
    for cond in (*(c for c in CONDITIONS if c in set(emb.condition)), "all"):
        m = np.ones(len(correct), bool) if cond == "all" else emb.condition == cond
        n, k = int(m.sum()), int(correct[m].sum())
        if n == 0:
            continue
        lo, hi = wilson(k, n)
        score = np.maximum(p_male[m], 1 - p_male[m])
        out[cond] = {
            "n": n,
            "errors": n - k,
            "accuracy": round(k / n, 4),
            "ci95": [round(lo, 4), round(hi, 4)],
            "log_loss": round(metrics.log_loss(p_male[m], emb.male[m]), 4),
            "ece_gender_score": round(metrics.reliability(score, correct[m]).ece, 4),
        }
    return out


# ---------------------------------------------------------------------------------- outputs


def model_json(
    final: Fitted,
    dev: Sequence[Speaker],
    test: Sequence[Speaker],
    n_train: int,
    cv: dict[str, dict[str, float]],
    cv_l2: list[float],
    held: dict[str, dict[str, float]],
    mic_cv: dict[str, dict[str, float]],
) -> dict[str, object]:
    return {
        "model": "logistic regression (L2), numpy runtime in verilive.voice.attributes",
        "formula": "p_male = 1 / (1 + exp(-(weights . ((u - mean) / scale) + bias)))",
        "input": "u = VoiceEngine.create_template(audio, channel).unit(): L2-normalised CAM++ embedding",
        "channel": FEATURE_CHANNEL,
        "gender_score": "probability of the returned gender, max(p_male, 1 - p_male); MALE if p_male >= 0.5",
        **final.model_fields(),
        "training": {
            "data": f"shared/data/{LIBRI_DIR}: LibriSpeech train-clean-100, one utterance per speaker",
            "licence": LICENCE,
            "attribution": ATTRIBUTION,
            "speakers": len(dev),
            "female": sum(not s.male for s in dev),
            "male": sum(s.male for s in dev),
            "embeddings": n_train,
            "augmentation": "whole utterance + crops of 1, 2, 4 s (seeded position), all via the TEL channel",
            "test_speakers_excluded": sorted((s.speaker for s in test), key=int),
            "test_split": f"first {N_TEST_PER_GENDER} of each gender in sha256('{SEED}:' + speaker) order",
        },
        "cross_validation": {
            "split": f"by speaker, {N_FOLDS} folds stratified by gender, nested L2 choice; "
            f"{len(dev)} development speakers",
            "l2_chosen_per_fold": cv_l2,
            "by_condition": cv,
        },
        "test": {"speakers": len(test), "by_condition": held},
        "channel_comparison": {
            "what": "the same nested CV with the model fitted on and applied to MIC embeddings",
            "by_condition": mic_cv,
        },
        "date": dt.date.today().isoformat(),
        "command": COMMAND,
    }


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _speech(cond: str) -> str:
    length = cond.split("/")[0]
    return "whole utterance" if length == "full" else f"{length} crop"


def results_markdown(data: dict[str, Any]) -> str:
    cv = data["cross_validation"]["by_condition"]
    held = data["test"]["by_condition"]
    mic = data["channel_comparison"]["by_condition"]
    tr = data["training"]
    per_fold = ", ".join(f"{x:g}" for x in data["cross_validation"]["l2_chosen_per_fold"])
    lines = [
        f"Generated by `{COMMAND}` on {data['date']}. Input: the {data['channel']} embedding. "
        f"Development: {tr['speakers']} speakers ({tr['female']} F / {tr['male']} M), "
        f"{tr['embeddings']} embeddings; test: {data['test']['speakers']} speakers never used for "
        f"fitting or choosing anything (listed in gender_model.json). L2 strength of the final model: "
        f"{data['l2']:g} (chosen per outer fold: {per_fold}).",
        "",
        "| speech | CV accuracy (dev, 95 % CI) | CV errors / n | CV log-loss | ECE of genderScore"
        " | test accuracy (final model) | test errors / n |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for length in LENGTHS:
        cond = f"{length}/{data['channel']}"
        if cond not in cv:
            continue
        c, h = cv[cond], held.get(cond, {})
        test_n = f"{h['errors']} / {h['n']}" if h else "–"
        lines.append(
            f"| {_speech(cond)} | {_pct(c['accuracy'])} ({_pct(c['ci95'][0])}–{_pct(c['ci95'][1])}) | "
            f"{c['errors']} / {c['n']} | {c['log_loss']:.3f} | {c['ece_gender_score']:.3f} | "
            f"{_pct(h['accuracy']) if h else '–'} | {test_n} |"
        )
    a = cv["all"]
    lines += [
        f"| all of the above | {_pct(a['accuracy'])} ({_pct(a['ci95'][0])}–{_pct(a['ci95'][1])}) | "
        f"{a['errors']} / {a['n']} | {a['log_loss']:.3f} | {a['ece_gender_score']:.3f} | "
        f"{_pct(held['all']['accuracy'])} | {held['all']['errors']} / {held['all']['n']} |",
        "",
        "Channel comparison (development CV, same protocol; the MIC model is fitted on and applied to "
        "MIC embeddings):",
        "",
        "| speech | MIC model | TEL model (shipped) |",
        "|---|---:|---:|",
    ]
    for length in LENGTHS:
        m, t = mic.get(f"{length}/MIC"), cv.get(f"{length}/TEL")
        if m and t:
            lines.append(
                f"| {_speech(length)} | {_pct(m['accuracy'])} ({m['errors']} / {m['n']}) | "
                f"{_pct(t['accuracy'])} ({t['errors']} / {t['n']}) |"
            )
    return "\n".join(lines)


def _accuracy_ci(emb: Embeddings, p: np.ndarray, cond: str) -> tuple[float, float, float]:
    m = emb.condition == cond
    ok = (p[m] >= 0.5) == emb.male[m]
    lo, hi = wilson(int(ok.sum()), int(m.sum()))
    a = float(ok.mean())
    return 100 * a, 100 * (a - lo), 100 * (hi - a)


def plot(
    emb: Embeddings,
    p_oof: np.ndarray,
    test_emb: Embeddings,
    p_test: np.ndarray,
    mic_emb: Embeddings,
    p_mic: np.ndarray,
    path: Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ch = FEATURE_CHANNEL
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    ax = axes[0]
    full = emb.condition == f"full/{ch}"
    bins = np.linspace(0, 1, 41)
    ax.hist(p_oof[full & ~emb.male], bins=bins, alpha=0.7, label=f"female ({int((full & ~emb.male).sum())})")
    ax.hist(p_oof[full & emb.male], bins=bins, alpha=0.7, label=f"male ({int((full & emb.male).sum())})")
    ax.axvline(0.5, color="k", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xlabel("out-of-fold p(male)")
    ax.set_ylabel("development speakers")
    ax.set_title(f"Whole utterance ({ch} embedding): out-of-fold p(male)")
    ax.legend()

    ax = axes[1]
    x = np.arange(len(LENGTHS))
    tel = np.array([_accuracy_ci(emb, p_oof, f"{n}/{ch}") for n in LENGTHS])
    mic = np.array([_accuracy_ci(mic_emb, p_mic, f"{n}/MIC") for n in LENGTHS])
    held = np.array([_accuracy_ci(test_emb, p_test, f"{n}/{ch}") for n in LENGTHS])
    ax.errorbar(
        x - 0.05,
        tel[:, 0],
        yerr=tel[:, 1:].T,
        fmt="o-",
        color="C0",
        capsize=3,
        label=f"{ch} model: dev CV (95 % CI)",
    )
    ax.plot(x + 0.05, held[:, 0], "x", color="C0", ms=9, label=f"{ch} model: 50 held-out speakers")
    ax.errorbar(
        x + 0.1,
        mic[:, 0],
        yerr=mic[:, 1:].T,
        fmt="s--",
        color="C3",
        capsize=3,
        alpha=0.7,
        label="MIC model (not shipped): dev CV",
    )
    ax.axhline(97, color="k", lw=0.8, ls=":", label="target 97 %")
    ax.set_xticks(x, ["1 s crop", "2 s crop", "4 s crop", "whole"])
    ax.set_ylabel("accuracy, %")
    ax.set_title("Accuracy by speech length")
    ax.legend(fontsize=8, loc="lower right")

    ax = axes[2]
    score = np.maximum(p_oof, 1 - p_oof)
    correct = (p_oof >= 0.5) == emb.male
    rel = metrics.reliability(score, correct, n_bins=10)
    keep = rel.counts > 0
    centres = 0.5 * (rel.edges[:-1] + rel.edges[1:])
    ax.plot([0.5, 1], [0.5, 1], "k--", lw=0.8)
    ax.plot(rel.mean_pred[keep], rel.frac_pos[keep], "o-")
    for c, n, y in zip(centres[keep], rel.counts[keep], rel.frac_pos[keep], strict=True):
        ax.annotate(str(int(n)), (c, y), textcoords="offset points", xytext=(0, -12), ha="center", fontsize=7)
    ax.set_xlim(0.48, 1.01)
    ax.set_ylim(0.3, 1.02)
    ax.set_xlabel("genderScore (probability of the returned gender)")
    ax.set_ylabel("observed accuracy")
    ax.set_title(f"Reliability, all conditions, out-of-fold (ECE {rel.ece:.3f})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------- other voices


@dataclass(frozen=True)
class ExternalSet:
    name: str
    label_source: str
    male: bool | None  # None: gender not documented, predictions only
    files: list[Path]


def _pick(files: list[Path], n: int, min_s: float) -> list[Path]:
    long_enough = [f for f in files if sf.info(str(f)).duration >= min_s]
    return sorted(sorted(long_enough, key=lambda f: hash_order(SEED, str(f)))[:n])


def external_sets(root: Path) -> list[ExternalSet]:
    sets: list[ExternalSet] = []
    am = root / AUDIOMNIST_DIR
    with (am / "labels.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            path = am / Path(r["file"]).with_suffix(".flac")
            sets.append(
                ExternalSet(
                    f"AudioMNIST speaker {r['speaker_id']} (age {r['age']}, one digit, 48 kHz)",
                    "labels.csv / audioMNIST_meta.txt",
                    r["gender"] == "male",
                    [path],
                )
            )
    if ASTERISK_DIR.is_dir():
        for d in sorted(p for p in ASTERISK_DIR.iterdir() if p.is_dir() and not p.is_symlink()):
            parts = d.name.split("_")
            if len(parts) < 4 or parts[2] not in ("f", "m"):
                continue
            files = _pick(sorted(d.rglob("*.wav")), EXTERNAL_PER_VOICE, EXTERNAL_MIN_S)
            sets.append(
                ExternalSet(
                    f"Asterisk prompts {d.name} (8 kHz)",
                    "voice folder name lang_COUNTRY_g_Name + Debian copyright credits",
                    parts[2] == "m",
                    files,
                )
            )
    if KLETTRES_PT_BR.is_dir():
        files = _pick(sorted(KLETTRES_PT_BR.rglob("*.ogg")), EXTERNAL_PER_VOICE, EXTERNAL_MIN_S)
        sets.append(
            ExternalSet(
                "KLettres pt_BR letters/syllables (a man and his 9-year-old son)",
                "KLettres handbook credits: 'Father' and 'Son 09 years'",
                True,
                files,
            )
        )
    sb = sorted((root / SB_DIR).glob("spk*_snt*.flac"))
    for spk in ("spk1", "spk2"):
        sets.append(
            ExternalSet(
                f"SpeechBrain two_speaker_sentences {spk}",
                "gender not documented (corpus not stated)",
                None,
                [f for f in sb if f.name.startswith(spk + "_")],
            )
        )
    return sets


def run_external(model: GenderModel, root: Path) -> list[dict[str, object]]:
    """Every file through ``AttributesEstimator.estimate``, as a request would go."""
    from verilive.voice.attributes import AttributesEstimator
    from verilive.voice.engine import NoSpeech
    from verilive.voice.schemas import Gender

    estimator = AttributesEstimator(make_engine(), gender_model=model)
    rows: list[dict[str, object]] = []
    for s in external_sets(root):
        p = []
        for f in s.files:
            try:
                a = estimator.estimate(read_audio(f))
            except NoSpeech:
                continue
            p.append(a.gender_score if a.gender is Gender.MALE else 1.0 - a.gender_score)
        pm = np.array(p)
        row: dict[str, object] = {"set": s.name, "labels": s.label_source, "files": len(pm)}
        if s.male is None:
            row["predicted_male_share"] = float((pm >= 0.5).mean())
        else:
            ok = (pm >= 0.5) == s.male
            row["truth"] = "M" if s.male else "F"
            row["correct"] = int(ok.sum())
            row["mean_p_truth"] = float(np.mean(pm if s.male else 1 - pm))
        rows.append(row)
        print(f"  {row}", file=sys.stderr)
    return rows


def external_markdown(rows: list[dict[str, object]], flag: str = "--external") -> str:
    lines = [
        f"Generated by `{COMMAND} {flag}` on {dt.date.today().isoformat()} with the model in "
        "gender_model.json. Each file is one request (`AttributesEstimator.estimate`); Asterisk and "
        f"KLettres: up to {EXTERNAL_PER_VOICE} files of ≥ {EXTERNAL_MIN_S:g} s per voice, chosen by hash.",
        "",
        "| voice | label from | truth | files | correct | mean p(truth) |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        if "truth" in r:
            lines.append(
                f"| {r['set']} | {r['labels']} | {r['truth']} | {r['files']} | {r['correct']} "
                f"| {r['mean_p_truth']:.3f} |"
            )
    unl = [r for r in rows if "truth" not in r]
    if unl:
        lines += [
            "",
            "Not scored (gender not documented): "
            + "; ".join(f"{r['set']} ({r['files']} files)" for r in unl)
            + ".",
        ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="shared data folder (default $VERILIVE_DATA_DIR or ../shared/data)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--external", action="store_true", help="also check on other real voices")
    ap.add_argument(
        "--external-only", action="store_true", help="only check the committed model on other voices"
    )
    args = ap.parse_args(argv)
    root = data_root(args.data)
    write = not args.no_write

    if not args.external_only:
        speakers = read_speakers(root)
        dev, test = split_test(speakers)
        print(f"{len(dev)} development speakers, {len(test)} test speakers", file=sys.stderr)
        emb = embed_speakers(speakers, root)
        is_test = np.isin(emb.speaker, [s.speaker for s in test])
        channel = np.array([c.split("/")[1] for c in emb.condition])
        dev_emb, test_emb = (
            emb.take(~is_test & (channel == FEATURE_CHANNEL)),
            emb.take(is_test & (channel == FEATURE_CHANNEL)),
        )
        p_oof, cv_l2 = cross_validate(dev_emb)
        cv = condition_table(dev_emb, p_oof)
        mic_emb = emb.take(~is_test & (channel == "MIC"))
        p_mic, _ = cross_validate(mic_emb)
        mic_cv = condition_table(mic_emb, p_mic)
        l2, _ = choose_l2(dev_emb, "final")
        final = fit(dev_emb.units, dev_emb.male, l2)
        p_test = final.p_male(test_emb.units)
        held = condition_table(test_emb, p_test)
        data = model_json(final, dev, test, len(dev_emb.units), cv, cv_l2, held, mic_cv)
        print(results_markdown(data))
        if write:
            MODEL_JSON.write_text(json.dumps(data, indent=1) + "\n")
            plot(dev_emb, p_oof, test_emb, p_test, mic_emb, p_mic, CV_PNG)
            replace_section(CARD_MD, "gender-results", results_markdown(data), "Results")
            written = (MODEL_JSON, CV_PNG, CARD_MD)
            print("wrote " + ", ".join(str(p.relative_to(REPO)) for p in written))
    if args.external or args.external_only:
        from verilive.voice.attributes import GenderModel

        model = GenderModel.from_dict(json.loads(MODEL_JSON.read_text()) if args.external_only else data)
        rows = run_external(model, root)
        text = external_markdown(rows, "--external-only" if args.external_only else "--external")
        print(text)
        if write:
            replace_section(CARD_MD, "gender-external", text, "Other real voices")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
