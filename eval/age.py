"""Age from the voice: the cross-validated figures and the committed model end to end (docs/model-age.md).

    python -m eval.age [--data DIR] [--no-docs]

Printed:

1. The cross-validated figures of ``train.age`` (recomputed from the cached embeddings, nothing
   written): MAE in years against the training mean, bracket accuracy against the majority
   class, child-vs-adult accuracy, speaker-disjoint within each source, across the two sources
   and pooled; what the answering rule answers and how wrong the answers are. The held-aside rows
   use the committed ``age_model.json``.
2. The committed model end to end: every held-aside clip through ``AttributesEstimator.estimate``
   as a request would go (at its own rate, and resampled to 8 kHz), and the adults of two corpora
   the model never saw (LibriSpeech, 251 speakers; AudioMNIST, 6 speakers): how many are answered,
   the error of the answers, the raw estimates.

Writes docs/age_eval.png (estimate against true age, answered or not; answered share by age
group) and the "End to end" section of docs/model-age.md unless ``--no-docs``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from common.repo import data_root, replace_section
from train import age as T

if TYPE_CHECKING:
    from verilive.audio import Audio
    from verilive.voice.age import AgeModel

PLOT_PNG = T.REPO / "docs" / "age_eval.png"
COMMAND = "python -m eval.age"
LIBRI_DIR = "voice/librispeech_251spk_gender"
AUDIOMNIST_DIR = "voice/speechbrain_samples/audiomnist_age_gender"
TEL_RATE = 8000


@dataclass(frozen=True)
class Result:
    """One request's outcome."""

    name: str
    years: float  # true age (bracket midpoint for Common Voice)
    bracket: str
    source: str
    speech_ms: float
    estimate: float  # raw estimate from the MIC embedding, whatever the rule says
    age: int | None  # the answered attribute


def committed() -> tuple[AgeModel, dict[str, Any]]:
    from verilive.voice.age import AgeModel

    data = json.loads(T.MODEL_JSON.read_text())
    return AgeModel.from_dict(data), data


def _resample(audio: Audio, rate: int) -> Audio:
    from verilive.audio import Audio
    from verilive.audio.resample import resample

    return Audio(resample(audio.mono(), audio.sample_rate, rate)[:, None].copy(), rate)


def run_requests(
    items: Sequence[tuple[str, Path, float, str, str]], model: AgeModel, rate: int | None = None
) -> list[Result]:
    """Each (name, path, years, bracket, source) through ``AttributesEstimator.estimate``; the raw
    estimate is read from the same speech through the model's channel. ``rate``: resample first."""
    from verilive.voice.attributes import AttributesEstimator
    from verilive.voice.engine import NoSpeech

    engine = T.make_engine()
    estimator = AttributesEstimator(engine, age_model=model)
    out = []
    for name, path, years, bracket, source in items:
        audio = T.read_audio(path)
        if rate is not None:
            audio = _resample(audio, rate)
        try:
            attrs = estimator.estimate(audio)
        except NoSpeech:
            continue
        analysis = engine.analyse(audio)
        unit = engine.create_template(audio, model.channel, analysis=analysis).unit()
        if attrs.age != model.estimate(unit, analysis.speech_ms, analysis.sample_rate):
            raise AssertionError(f"{name}: the estimator's age differs from the model's own rule")
        out.append(
            Result(name, years, bracket, source, analysis.speech_ms, model.estimate_years(unit), attrs.age)
        )
    return out


def held_items(held: Sequence[T.Clip], root: Path) -> list[tuple[str, Path, float, str, str]]:
    return [(c.file, root / c.file, c.years, c.bracket, c.source) for c in held]


def unseen_adults(root: Path) -> list[tuple[str, Path, float, str, str]]:
    """Adults of corpora the model never saw: LibriSpeech (age unknown, adult readers) and
    AudioMNIST (ages 24-41 in its metadata)."""
    items: list[tuple[str, Path, float, str, str]] = []
    with (root / LIBRI_DIR / "labels.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            items.append((r["file"], root / LIBRI_DIR / r["file"], float("nan"), "adult", "LibriSpeech"))
    with (root / AUDIOMNIST_DIR / "labels.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            path = root / AUDIOMNIST_DIR / Path(r["file"]).with_suffix(".flac")
            items.append((r["file"], path, float(r["age"]), T.bracket_of(float(r["age"])), "AudioMNIST"))
    return items


def summary(name: str, results: Sequence[Result]) -> dict[str, Any]:
    answered = [r for r in results if r.age is not None]
    err = np.array([abs(r.age - r.years) for r in answered if r.age is not None and np.isfinite(r.years)])
    kids = [r for r in results if r.bracket == "6-12"]
    adults = [r for r in results if r.bracket in (*T.ADULT_BRACKETS, "adult")]
    return {
        "set": name,
        "clips": len(results),
        "answered": len(answered),
        "children_answered": f"{sum(r.age is not None for r in kids)}/{len(kids)}" if kids else "–",
        "adults_answered": f"{sum(r.age is not None for r in adults)}/{len(adults)}" if adults else "–",
        "mae": float(err.mean()) if err.size else None,
        "within_3y": f"{int((err <= T.TOLERANCE_YEARS).sum())}/{err.size}" if err.size else "–",
        "max_error": float(err.max()) if err.size else None,
        "median_estimate_children": float(np.median([r.estimate for r in kids])) if kids else None,
        "median_estimate_adults": float(np.median([r.estimate for r in adults])) if adults else None,
    }


def end_to_end_markdown(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| set | clips | answered | children answered | adults answered | MAE of answers | within ±3 y "
        "| max error | median raw estimate, children | median raw estimate, adults |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['set']} | {r['clips']} | {r['answered']} | {r['children_answered']} | "
            f"{r['adults_answered']} | "
            f"{T._f(r['mae'])} | {r['within_3y']} | {T._f(r['max_error'], 0)} | "
            f"{T._f(r['median_estimate_children'], 1)} | {T._f(r['median_estimate_adults'], 1)} |"
        )
    return "\n".join(lines)


def _age_groups() -> list[tuple[str, Any]]:
    def exact(lo: int, hi: int) -> Any:
        return lambda source, years, bracket: source == T.SO and lo <= years <= hi

    return [
        ("6-7", exact(6, 7)),
        ("8-9", exact(8, 9)),
        ("10-12", exact(10, 12)),
        ("13-15", exact(13, 15)),
        ("19-29", exact(19, 29)),
        ("30-43", exact(30, 43)),
        ("CV 20-29", lambda s, y, b: s == T.CV and b == "20-29"),
        ("CV 30-49", lambda s, y, b: s == T.CV and b == "30-49"),
        ("CV 50-69", lambda s, y, b: s == T.CV and b == "50-69"),
    ]


def plot(shipped: T.ChannelResult, rule: T.Rule, held: Sequence[Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(T.SEED)
    fig, axes = plt.subplots(1, 3, figsize=(17, 5))

    def scatter(
        ax: Any, source: np.ndarray, years: np.ndarray, est: np.ndarray, answered: np.ndarray
    ) -> None:
        x = years + np.where(source == T.CV, rng.uniform(-4, 4, years.size), 0.0)  # spread the midpoints
        for src, marker in ((T.SO, "o"), (T.CV, "s")):
            for ans, colour, label in ((False, "0.6", "not answered"), (True, "C3", "answered")):
                m = (source == src) & (answered == ans)
                if m.any():
                    ax.scatter(
                        x[m], est[m], s=14 if ans else 9, marker=marker, c=colour, alpha=0.8 if ans else 0.45,
                        label=f"{T.SOURCE_NAME[src]}, {label} ({int(m.sum())})",
                    )  # fmt: skip
        ax.plot([0, 70], [0, 70], "k--", lw=0.7)
        ax.axhline(rule.max_estimate_years, color="C3", lw=0.8, ls=":")
        ax.text(
            22,
            rule.max_estimate_years - 3.5,
            f"answered at or below {rule.max_estimate_years:g} y",
            color="C3",
        )
        ax.set_xlim(0, 70)
        ax.set_ylim(0, 70)
        ax.set_xlabel("true age, years (Common Voice: bracket midpoint, spread ±4)")
        ax.set_ylabel("estimate, years")
        ax.legend(fontsize=7, loc="upper left")

    rows = shipped.rows
    full = rows.piece == "full"
    answered = rule.answered(shipped.pred, rows.speech_ms)
    scatter(axes[0], rows.source[full], rows.years[full], shipped.pred[full], answered[full])
    axes[0].set_title(f"Development, pooled 5-fold CV, whole clips ({int(full.sum())})")

    hs = np.array([r.source for r in held])
    scatter(
        axes[1],
        hs,
        np.array([r.years for r in held]),
        np.array([r.estimate for r in held]),
        np.array([r.age is not None for r in held]),
    )
    axes[1].set_title(f"Held aside, committed model, end to end ({len(held)} clips)")

    ax = axes[2]
    groups = _age_groups()
    cv_share, held_share, cv_n, held_n = [], [], [], []
    for _, test in groups:
        m = np.array([test(s, y, b) for s, y, b in zip(rows.source, rows.years, rows.bracket, strict=True)])
        cv_share.append(answered[m].mean() if m.any() else 0.0)
        cv_n.append(int(m.sum()))
        hm = [r for r in held if test(r.source, r.years, r.bracket)]
        held_share.append(np.mean([r.age is not None for r in hm]) if hm else 0.0)
        held_n.append(len(hm))
    x = np.arange(len(groups))
    ax.bar(x - 0.2, 100 * np.array(cv_share), 0.4, label="development CV, all pieces (1-8 s)")
    ax.bar(x + 0.2, 100 * np.array(held_share), 0.4, label="held aside, whole clips, end to end")
    for i in range(len(groups)):
        ax.annotate(str(cv_n[i]), (x[i] - 0.2, 100 * cv_share[i]), ha="center", va="bottom", fontsize=7)
        ax.annotate(str(held_n[i]), (x[i] + 0.2, 100 * held_share[i]), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, [g for g, _ in groups], rotation=30)
    ax.set_ylabel("answered, % (counts above the bars)")
    ax.set_title("Who gets an age: share answered by true age")
    ax.set_xlabel("true age (speechocean762 exact ages; CV: Common Voice brackets)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="shared data folder (default: $VERILIVE_SHARED_DIR/data)")
    ap.add_argument("--no-docs", action="store_true", help="write neither the plot nor the card section")
    args = ap.parse_args(argv)
    root = data_root(args.data)
    model, data = committed()
    rule = T.Rule(model.min_speech_ms, model.max_estimate_years)

    clips = T.read_clips(root)
    dev, held = T.split_held(clips)
    if sorted({c.group for c in held}) != data["training"]["held_aside_groups"]:
        raise SystemExit("the held-aside split differs from the one recorded in age_model.json")
    emb = T.embed_clips(clips, root)
    results, shipped = T.evaluate(emb, dev, log=False)
    if shipped.rule != rule:
        print(
            f"note: the rule chosen now ({shipped.rule}) differs from the committed one ({rule})",
            file=sys.stderr,
        )

    def predict(units: np.ndarray) -> np.ndarray:
        return np.array([model.estimate_years(u) for u in units])

    results["held_aside"] = T.held_aside(predict, emb, held, shipped.rows, rule, T.dev_child_age(dev))
    print("## Cross-validated figures (committed model on the held-aside rows)\n")
    print(T.results_markdown(data | {"results": results}))

    print("\n## The committed model end to end (AttributesEstimator.estimate, one request per clip)\n")
    print("running the requests ...", file=sys.stderr)
    held_native = run_requests(held_items(held, root), model)
    held_narrow = run_requests(held_items(held, root), model, rate=TEL_RATE)
    adults = run_requests(unseen_adults(root), model)
    mnist = [r for r in adults if r.source == "AudioMNIST"]
    rows = [
        summary("held aside, own rate (16 kHz speechocean762, 32/48 kHz Common Voice)", held_native),
        summary("held aside, speechocean762 only", [r for r in held_native if r.source == T.SO]),
        summary("held aside, Common Voice only", [r for r in held_native if r.source == T.CV]),
        summary("held aside, resampled to 8 kHz", held_narrow),
        summary("LibriSpeech, 251 adults (never seen)", [r for r in adults if r.source == "LibriSpeech"]),
        summary("AudioMNIST, 6 adults aged 24-41 (never seen, one digit each)", mnist),
    ]
    wide = {r.name: r for r in held_native}
    shift = [
        r.estimate - wide[r.name].estimate for r in held_narrow if r.bracket == "6-12" and r.name in wide
    ]
    answers = sorted((r for r in held_native if r.age is not None), key=lambda r: r.years)
    lines = [
        f"Generated by `{COMMAND}` on {dt.date.today().isoformat()} with the model in age_model.json.",
        "",
        end_to_end_markdown(rows),
        "",
        "The held-aside answers (clip: true age → answer): "
        + "; ".join(f"{Path(r.name).stem} {r.years:g} → {r.age}" for r in answers)
        + ".",
        "",
        f"Resampled to 8 kHz, the raw estimate of the held-aside children moves by {np.median(shift):+.1f} "
        f"years (median), and the rule answers nothing below {model.min_sample_rate} Hz.",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_docs:
        plot(shipped, rule, held_native, PLOT_PNG)
        replace_section(T.CARD_MD, "age-end-to-end", text, "End to end")
        print(f"wrote {PLOT_PNG.relative_to(T.REPO)}, {T.CARD_MD.relative_to(T.REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
