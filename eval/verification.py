"""Score the dev verification trials with verilive and with baselines; EER, minDCF, DET curves.

    python -m eval.verification                      # every system that can run here
    python -m eval.verification --systems resemblyzer,campplus-pre

Systems (``--systems``, comma-separated; default: all):

* ``verilive``: :class:`verilive.voice.engine.VoiceEngine` as the service runs it:
  ``create_template`` on each snippet (Silero VAD speech only, CAM++), then ``match`` -> score.
* ``campplus-pre`` / ``campplus-post``: CAM++ embedding of the whole snippet (no VAD), taken
  before / after the ReLU that follows the model's last BatchNorm; cosine similarity.
* ``campplus-vad-pre`` / ``campplus-vad-post``: the same on the Silero VAD speech of the
  snippet only (speech intervals concatenated, as the engine does).
* ``resemblyzer``: Resemblyzer 0.1.4 GE2E encoder with its own preprocessing
  (``preprocess_wav``: volume normalisation, webrtcvad silence trimming), cosine similarity.

Embeddings (templates for ``verilive``) are cached per snippet under ``--cache-dir`` (default
$VERILIVE_EVAL_CACHE or /tmp/verilive-eval-cache); a cache folder's name carries a hash of the
code and model manifest it depends on, so a changed model or engine is scored afresh.

A snippet for which a system cannot produce a template (e.g. no speech found) gets a score
below every real score: its trials count as rejected (a miss for a target trial). The count
of such snippets is reported.

Writes the results table into docs/verification.md and the DET plot docs/verification_det.png
(``--no-docs`` to skip both).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from common import metrics
from common.repo import REPO, data_root, replace_section, source_hash

from eval.trials import (
    DOCS_MD,
    LS_HALF,
    LS_NONTARGET,
    LS_THIRD,
    SB,
    Snippet,
    Trial,
    build_trials,
    labels_of,
    snippets_of,
    trials_digest,
)

DET_PNG = REPO / "docs" / "verification_det.png"
DEFAULT_CACHE = Path(os.environ.get("VERILIVE_EVAL_CACHE", "/tmp/verilive-eval-cache"))
FAIL_SCORE = -2.0  # below any cosine similarity
COMMAND = "python -m eval.verification"

# Product target: EER <= 2 % on these trials and below a third of Resemblyzer's.
TARGET_EER = 0.02
TARGET_RATIO = 1 / 3
MIN_SNIPPET_S = 2.0


MANIFEST = REPO / "src" / "verilive" / "models" / "manifest.json"


# ---------------------------------------------------------------------------------- systems


@dataclass
class System:
    """Something that turns a snippet into a representation and two representations into a score."""

    name: str
    label: str
    cache_id: Callable[[], str]
    represent: Callable[[np.ndarray, int], Any]  # (wave, sample_rate) -> ndarray | str; raise to fail
    score_pairs: Callable[[list[Any], list[Any]], np.ndarray] | None = None  # default: cosine
    failures: dict[str, str] = field(default_factory=dict)


def _cosine_pairs(a: list[Any], b: list[Any]) -> np.ndarray:
    x = np.stack([np.asarray(v, dtype=np.float64) for v in a])
    y = np.stack([np.asarray(v, dtype=np.float64) for v in b])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    return np.einsum("ij,ij->i", x, y)


class _Lazy:
    """Shared lazily built model objects (one registry, one VAD, one CAM++, one Resemblyzer)."""

    def __init__(self) -> None:
        self._objs: dict[str, Any] = {}

    def get(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._objs:
            self._objs[key] = make()
        return self._objs[key]


LAZY = _Lazy()


def _registry() -> Any:
    from verilive.models.sessions import ModelRegistry

    return LAZY.get("registry", ModelRegistry)


def _campplus() -> Any:
    from verilive.voice.campplus import CamPlusPlus

    return LAZY.get("campplus", lambda: CamPlusPlus.from_registry(_registry()))


def _vad() -> Any:
    from verilive.voice.vad import SileroVad

    return LAZY.get("vad", lambda: SileroVad.from_registry(_registry()))


def _wave_key(wave: np.ndarray, sr: int) -> str:
    return f"{sr}:{hashlib.sha1(np.ascontiguousarray(wave).tobytes()).hexdigest()}"


_SPEECH: dict[str, np.ndarray] = {}
_PRE_RELU: dict[tuple[bool, str], np.ndarray] = {}


def _speech_only(wave: np.ndarray, sr: int) -> np.ndarray:
    """The VAD speech intervals of ``wave`` concatenated, as the engine does (memoised per run)."""
    key = _wave_key(wave, sr)
    if key not in _SPEECH:
        segs = _vad().segments(wave, sr)
        if not segs:
            raise ValueError("no speech found by the VAD")
        _SPEECH[key] = np.concatenate([wave[s:e] for s, e in segs])
    return _SPEECH[key]


def _campplus_system(vad: bool, relu: bool) -> System:
    def cache_id() -> str:
        mods = ["verilive.voice.campplus"] + (["verilive.voice.vad"] if vad else [])
        return source_hash(*mods, extra=[MANIFEST])

    def represent(wave: np.ndarray, sr: int) -> np.ndarray:
        if sr != 16000:
            raise ValueError("CAM++ raw path expects 16 kHz snippets")
        # The post-ReLU embedding is max(0, pre-ReLU) (CamPlusPlus.embed_features): run the model once
        # per snippet and variant, keep the pre-ReLU output for the post-ReLU system of this run.
        key = (vad, _wave_key(wave, sr))
        if key not in _PRE_RELU:
            x = _speech_only(wave, sr) if vad else wave
            _PRE_RELU[key] = np.asarray(_campplus().embed(x, relu=False), dtype=np.float32)
        pre = _PRE_RELU[key]
        return np.maximum(pre, 0.0) if relu else pre

    name = f"campplus{'-vad' if vad else ''}-{'post' if relu else 'pre'}"
    label = f"CAM++ raw, {'VAD speech' if vad else 'whole snippet'}, {'post' if relu else 'pre'}-ReLU"
    return System(name, label, cache_id, represent)


def _engine() -> Any:
    def make() -> Any:
        from verilive.voice.campplus import CamPlusPlus
        from verilive.voice.engine import MatchCalibration, VoiceEngine
        from verilive.voice.vad import SileroVad

        reg = _registry()
        # Scores do not depend on the calibration; a neutral one keeps this independent of calibration.json.
        return VoiceEngine(
            SileroVad.from_registry(reg), CamPlusPlus.from_registry(reg), MatchCalibration(1.0, 0.0)
        )

    return LAZY.get("engine", make)


def _verilive_system() -> System:
    def cache_id() -> str:
        return source_hash(
            "verilive.voice.engine",
            "verilive.voice.campplus",
            "verilive.voice.vad",
            "verilive.voice.channel",
            "verilive.voice.templates",
            extra=[MANIFEST],
        )

    def represent(wave: np.ndarray, sr: int) -> str:
        from verilive.audio import Audio

        t = _engine().create_template(Audio(np.ascontiguousarray(wave[:, None], dtype=np.float32), sr))
        return t.encode()

    def score_pairs(a: list[Any], b: list[Any]) -> np.ndarray:
        eng = _engine()
        return np.array([eng.match(x, y)[0] for x, y in zip(a, b, strict=True)], dtype=np.float64)

    return System(
        "verilive", "verilive VoiceEngine (VAD + CAM++, match score)", cache_id, represent, score_pairs
    )


def _resemblyzer_system() -> System:
    def encoder() -> Any:
        import torch
        from resemblyzer import VoiceEncoder

        torch.set_num_threads(1)  # more threads oversubscribe a 2-core machine: 30x slower here
        return VoiceEncoder("cpu", verbose=False)

    def cache_id() -> str:
        return "rz" + importlib.metadata.version("resemblyzer").replace(".", "")

    def represent(wave: np.ndarray, sr: int) -> np.ndarray:
        from resemblyzer import preprocess_wav

        x = preprocess_wav(np.asarray(wave, dtype=np.float32), source_sr=sr)
        if x.size == 0:
            raise ValueError("Resemblyzer's silence trimming left no audio")
        return np.asarray(LAZY.get("resemblyzer", encoder).embed_utterance(x), dtype=np.float32)

    return System("resemblyzer", "Resemblyzer 0.1.4 (GE2E, own preprocessing)", cache_id, represent)


def all_systems() -> dict[str, System]:
    systems = [
        _verilive_system(),
        _campplus_system(vad=False, relu=False),
        _campplus_system(vad=False, relu=True),
        _campplus_system(vad=True, relu=False),
        _campplus_system(vad=True, relu=True),
        _resemblyzer_system(),
    ]
    return {s.name: s for s in systems}


# ---------------------------------------------------------------------------------- scoring


_CACHE_IDS: dict[str, str] = {}


def cache_folder(cache_dir: Path, system: System) -> Path:
    """The system's cache folder; its code hash is taken once per run, so files edited mid-run
    (by someone else) cannot spread one run's results over two folders."""
    if system.name not in _CACHE_IDS:
        _CACHE_IDS[system.name] = system.cache_id()
    return cache_dir / f"{system.name}-{_CACHE_IDS[system.name]}"


def _cache_path(cache_dir: Path, system: System, snip: Snippet) -> Path:
    return cache_folder(cache_dir, system) / hashlib.sha1(snip.key.encode()).hexdigest()[:20]


def represent_all(
    system: System, snippets: list[Snippet], root: Path, cache_dir: Path | None, log: bool = True
) -> dict[str, Any]:
    """Representation of every snippet (None where the system failed), read from or written to the cache."""
    out: dict[str, Any] = {}
    t0 = time.monotonic()
    computed = 0
    for i, s in enumerate(snippets):
        base = _cache_path(cache_dir, system, s) if cache_dir else None
        if base is not None:
            if base.with_suffix(".npy").exists():
                out[s.key] = np.load(base.with_suffix(".npy"))
                continue
            if base.with_suffix(".txt").exists():
                out[s.key] = base.with_suffix(".txt").read_text()
                continue
            if base.with_suffix(".fail").exists():
                system.failures[s.key] = base.with_suffix(".fail").read_text()
                out[s.key] = None
                continue
        try:
            rep = system.represent(s.load(root), s.sample_rate)
        except (ImportError, ModuleNotFoundError):
            raise
        except Exception as exc:  # a failed template is a result, not a crash
            system.failures[s.key] = f"{type(exc).__name__}: {exc}"
            rep = None
        computed += 1
        out[s.key] = rep
        if base is not None:
            base.parent.mkdir(parents=True, exist_ok=True)
            if rep is None:
                base.with_suffix(".fail").write_text(system.failures[s.key])
            elif isinstance(rep, str):
                base.with_suffix(".txt").write_text(rep)
            else:
                np.save(base.with_suffix(".npy"), rep)
        if log and computed % 100 == 0:
            rate = computed / (time.monotonic() - t0)
            print(f"  {system.name}: {i + 1}/{len(snippets)} snippets ({rate:.1f}/s)", file=sys.stderr)
    return out


def score_trials(
    system: System, trials: list[Trial], root: Path, cache_dir: Path | None, log: bool = True
) -> np.ndarray:
    """One score per trial; trials with a failed snippet get :data:`FAIL_SCORE`."""
    reps = represent_all(system, snippets_of(trials), root, cache_dir, log)
    ok = np.array([reps[t.a.key] is not None and reps[t.b.key] is not None for t in trials])
    scores = np.full(len(trials), FAIL_SCORE)
    idx = np.flatnonzero(ok)
    if idx.size:
        a = [reps[trials[i].a.key] for i in idx]
        b = [reps[trials[i].b.key] for i in idx]
        scores[idx] = (system.score_pairs or _cosine_pairs)(a, b)
    return scores


# ---------------------------------------------------------------------------------- reporting


@dataclass(frozen=True)
class Result:
    name: str
    label: str
    eer: float
    eer_threshold: float
    min_dcf: float
    min_dcf_threshold: float
    eer_halves: float
    eer_thirds: float
    eer_sb: float
    eer_min2s: float  # trials whose two snippets both last at least 2 s
    d_prime: float  # (mean target - mean non-target) / sqrt of the mean of the two variances
    misses_at_eer: int  # target trials rejected at the EER threshold
    false_accepts_at_eer: int  # non-target trials accepted at the EER threshold
    failed_snippets: int
    failed_trials: int


def views(trials: list[Trial]) -> dict[str, np.ndarray]:
    """Boolean masks of the trial subsets metrics are reported on."""
    sub = np.array([t.subset for t in trials])
    return {
        "all": np.ones(len(trials), dtype=bool),
        "halves": np.isin(sub, [LS_HALF, LS_NONTARGET]),
        "thirds": np.isin(sub, [LS_THIRD, LS_NONTARGET]),
        "sb": sub == SB,
        "min2s": np.array([min(t.a.duration_s, t.b.duration_s) >= MIN_SNIPPET_S for t in trials]),
    }


def evaluate(system: System, trials: list[Trial], scores: np.ndarray) -> Result:
    y = labels_of(trials)
    v = views(trials)
    e, et = metrics.eer(scores, y)
    d, dt = metrics.min_dcf(scores, y, metrics.P_TARGET_DCF)
    p_miss, p_fa = metrics.rates_at(scores, y, et)
    return Result(
        name=system.name,
        label=system.label,
        eer=e,
        eer_threshold=et,
        min_dcf=d,
        min_dcf_threshold=dt,
        eer_halves=metrics.eer(scores[v["halves"]], y[v["halves"]])[0],
        eer_thirds=metrics.eer(scores[v["thirds"]], y[v["thirds"]])[0],
        eer_sb=metrics.eer(scores[v["sb"]], y[v["sb"]])[0],
        eer_min2s=metrics.eer(scores[v["min2s"]], y[v["min2s"]])[0],
        d_prime=float(
            (scores[y].mean() - scores[~y].mean()) / np.sqrt((scores[y].var() + scores[~y].var()) / 2)
        ),
        misses_at_eer=round(p_miss * int(y.sum())),
        false_accepts_at_eer=round(p_fa * int((~y).sum())),
        failed_snippets=len(system.failures),
        failed_trials=int(np.sum(scores == FAIL_SCORE)),
    )


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def results_markdown(results: list[Result], trials: list[Trial], command: str) -> str:
    y = labels_of(trials)
    v = views(trials)
    lines = [
        f"Command: `{command}` (trial-list sha256 `{trials_digest(trials)[:16]}…`, "
        f"{int(y.sum()):,} target / {int((~y).sum()):,} non-target trials, {time.strftime('%Y-%m-%d')}).",
        "",
        "| system | EER (all) | EER threshold | minDCF (p_target 0.01) | misses / false accepts at EER "
        "threshold | d′ | EER halves | EER thirds | EER SpeechBrain | EER both snippets ≥ 2 s "
        "| failed snippets |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.label} (`{r.name}`) | **{_pct(r.eer)}** | {r.eer_threshold:.4f} | {r.min_dcf:.4f} "
            f"| {r.misses_at_eer} / {r.false_accepts_at_eer} | {r.d_prime:.2f} "
            f"| {_pct(r.eer_halves)} | {_pct(r.eer_thirds)} | {_pct(r.eer_sb)} | {_pct(r.eer_min2s)} "
            f"| {r.failed_snippets} |"
        )
    lines += [
        "",
        " ".join(
            [
                "EER halves: `ls-half` targets against the LibriSpeech non-targets;",
                "EER thirds: `ls-third` targets against the same non-targets;",
                "EER SpeechBrain: the 66 SpeechBrain trials alone (30 targets: one error is 3.3 %);",
                f"EER both ≥ {MIN_SNIPPET_S:g} s: trials whose two snippets both last at least",
                f"{MIN_SNIPPET_S:g} s ({int(v['min2s'].sum()):,} trials,",
                f"{int(y[v['min2s']].sum())} targets).",
                "minDCF is normalised (C_miss = C_fa = 1). Thresholds are on each system's own score",
                "(cosine similarity). d′ = (mean target − mean non-target) / sqrt(mean of the two variances)",
                "is a threshold-free separation, steadier than an EER made of a handful of errors:",
                f"one target trial is {100 / int(y.sum()):.2f} % of miss rate here.",
            ]
        ),
    ]
    by = {r.name: r for r in results}
    if "verilive" in by and "resemblyzer" in by:
        ve, rz = by["verilive"], by["resemblyzer"]
        ok = ve.eer <= TARGET_EER and ve.eer < TARGET_RATIO * rz.eer
        lines += [
            "",
            f"Product target (EER ≤ {_pct(TARGET_EER)} and below a third of Resemblyzer's, i.e. < "
            f"{_pct(TARGET_RATIO * rz.eer)}): verilive {_pct(ve.eer)} → **{'met' if ok else 'NOT met'}** "
            f"(ratio {ve.eer / rz.eer:.3f})."
            if rz.eer > 0
            else "",
        ]
    return "\n".join(lines)


def plot_det(curves: dict[str, tuple[str, np.ndarray]], trials: list[Trial], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y = labels_of(trials)
    ticks = np.array([0.0001, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4])
    tick_labels = ["0.01", "0.1", "0.5", "1", "2", "5", "10", "20", "40"]
    main = [n for n in ("verilive", "resemblyzer") if n in curves]
    diag = [n for n in curves if n.startswith("campplus")]
    if "resemblyzer" in curves and diag:
        diag.append("resemblyzer")
    panels = [(p, t) for p, t in ((main, "verilive vs Resemblyzer"), (diag, "CAM++ variants")) if p]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 6), squeeze=False)
    eps = 0.5 / max(int(y.sum()), int((~y).sum()))
    lim = metrics.probit(np.array([eps, 0.45]))
    for ax, (names, title) in zip(axes[0], panels, strict=True):
        for n in names:
            label, scores = curves[n]
            d = metrics.det_curve(scores, y, eps)
            e, _ = metrics.eer(scores, y)
            (line,) = ax.plot(d.x, d.y, label=f"{label}: EER {_pct(e)}", lw=1.6)
            pe = metrics.probit(np.array([e]), eps)[0]
            ax.plot([pe], [pe], "o", color=line.get_color(), ms=5)
        ax.plot(lim, lim, ":", color="grey", lw=0.8)
        pt = metrics.probit(ticks)
        ax.set_xticks(pt, tick_labels)
        ax.set_yticks(pt, tick_labels)
        ax.set_xlim(metrics.probit(np.array([0.0001, 0.45])))
        ax.set_ylim(metrics.probit(np.array([0.0005, 0.45])))
        ax.set_xlabel("false acceptance rate (%)")
        ax.set_ylabel("false rejection rate (%)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    fig.suptitle(
        f"DET, dev trials ({int(y.sum())} target / {int((~y).sum()):,} non-target): {COMMAND}", fontsize=10
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_system(
    system: System, trials: list[Trial], root: Path, cache_dir: Path | None
) -> tuple[np.ndarray | None, str | None]:
    """Scores of a system, or (None, reason) when its code or model is not available here."""
    try:
        if cache_dir is not None:
            cache_folder(cache_dir, system)  # imports the system's modules: fails early if missing
        else:
            system.cache_id()
        return score_trials(system, trials, root, cache_dir), None
    except (ImportError, ModuleNotFoundError, AttributeError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    except Exception as exc:
        if type(exc).__name__ in ("ModelNotInstalled", "ModelMissing", "MissingModel"):
            return None, f"{type(exc).__name__}: {exc}"
        raise


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Score the dev verification trials (see module docstring).")
    p.add_argument("--systems", default=",".join(all_systems()), help="comma-separated system names")
    p.add_argument("--data", help="shared data folder (default: $VERILIVE_SHARED_DIR/data)")
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE), help="embedding cache folder")
    p.add_argument("--no-cache", action="store_true", help="compute everything afresh, write no cache")
    p.add_argument("--no-docs", action="store_true", help="do not write docs/verification.md nor the DET png")
    p.add_argument("--scores", help="also write every system's scores to this .npz")
    args = p.parse_args(argv)

    root = data_root(args.data)
    cache_dir = None if args.no_cache else Path(args.cache_dir)
    trials = build_trials(root)
    systems = all_systems()
    wanted = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [w for w in wanted if w not in systems]
    if unknown:
        p.error(f"unknown systems {unknown}; known: {', '.join(systems)}")

    y = labels_of(trials)
    print(f"{len(trials):,} trials ({int(y.sum())} target, {int((~y).sum()):,} non-target)")
    results: list[Result] = []
    curves: dict[str, tuple[str, np.ndarray]] = {}
    skipped: dict[str, str] = {}
    for name in wanted:
        system = systems[name]
        t0 = time.monotonic()
        scores, reason = run_system(system, trials, root, cache_dir)
        if scores is None:
            skipped[name] = reason or "unavailable"
            print(f"{name:20s} skipped: {reason}")
            continue
        r = evaluate(system, trials, scores)
        results.append(r)
        curves[name] = (system.label, scores)
        print(
            f"{name:20s} EER {_pct(r.eer):>8s} (thr {r.eer_threshold:+.4f})  minDCF0.01 {r.min_dcf:.4f}  "
            f"EER halves {_pct(r.eer_halves)}  thirds {_pct(r.eer_thirds)}  SB {_pct(r.eer_sb)}  "
            f"misses/FA at EER thr {r.misses_at_eer}/{r.false_accepts_at_eer}  "
            f"failed snippets {r.failed_snippets}  [{time.monotonic() - t0:.0f} s]"
        )
        for key, why in list(system.failures.items())[:5]:
            print(f"    failed: {key}: {why}")

    if args.scores:
        np.savez_compressed(
            args.scores,
            labels=y,
            subsets=np.array([t.subset for t in trials]),
            **{k: v[1] for k, v in curves.items()},
        )
    command = COMMAND + ("" if set(wanted) == set(systems) else f" --systems {','.join(wanted)}")
    if results and not args.no_docs:
        body = results_markdown(results, trials, command)
        if skipped:
            body += "\n\nNot scored in this run: " + "; ".join(f"`{k}` ({v})" for k, v in skipped.items())
        replace_section(DOCS_MD, "results", body, "Results")
        plot_det(curves, trials, DET_PNG)
        print(f"wrote {DOCS_MD.relative_to(REPO)} and {DET_PNG.relative_to(REPO)}")
    summary = {r.name: {"eer": r.eer, "min_dcf": r.min_dcf} for r in results}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
