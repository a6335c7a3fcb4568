"""Speaker verification over telephone lines (issue 30; docs/telephone.md).

    python -m eval.telephone [--corpora libri,cv,so] [--cache DIR] [--no-docs]

Every snippet of the dev trials is turned into templates by the shipped ``VoiceEngine`` in
several *views*: the wideband original with the default ``channel_type`` (what an integrator
who does not read the docs sends), with ``TEL`` and with ``MIXED``, and the snippet sent through
each telephone line of ``LINES`` (common/telephone.py: 8 kHz, the line's band, the codec; a seed
per snippet and line), uploaded at 8 kHz with the default ``channel_type``. A scenario pairs an
enrolment view with a verification view; both sides of a telephone-to-telephone trial go through
the same kind of line with their own seeds.

Trials, per corpus (speaker-disjoint across corpora):

* ``libri``: the dev trials of eval/trials.py (LibriSpeech halves and thirds, SpeechBrain pairs).
* ``cv``: Common Voice Spanish (Central-Mexican accent), one clip per speaker, cut into halves:
  A and B of one clip are a target trial, A of one clip and B of another a non-target one (the
  pairs its README lists as possibly the same speaker left out).
* ``so``: speechocean762 (Mandarin-speaking children and adults reading English), the same way.

Prints the EER of every scenario per corpus and pooled, writes docs/telephone_det.png and the
results section of docs/telephone.md unless ``--no-docs``. The unit embeddings of every view are
cached (``--cache``, default /tmp/verilive-telephone) for the compensation and calibration work.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from common.metrics import det_curve, eer
from common.repo import REPO, data_root, replace_section
from common.telephone import LINES, telephone

from eval.trials import Snippet, Trial, build_trials, snippets_of

if TYPE_CHECKING:
    from common.metrics import DetCurve

    from verilive.voice.engine import VoiceEngine

DOCS_MD = REPO / "docs" / "telephone.md"
OUT_PNG = REPO / "docs" / "telephone_det.png"
CV_DIR = "voice/age_cv_es_mx"
SO_DIR = "voice/age_speechocean762"

#: Prefix of the views whose telephone side is made by the telephone-adapted CAM++ (``campplus_tel``,
#: train/telephone_student.py), as the shipped engine makes them; unprefixed: the plain CAM++.
S = "s:"


@dataclass(frozen=True)
class Scenario:
    name: str
    enrol: str
    verify: str


def scenarios() -> list[Scenario]:
    """Wideband enrolment against each line: as version-1 templates compared it (the wideband
    view against the line), with the telephone view alone, and as version 2 does (MIC-TEL: the
    mean direction of both views, ``templates.cross_view``); then each line against itself."""
    out = [Scenario("wideband / wideband", "wb", "wb")]
    for line in LINES:
        out.append(Scenario(f"wideband, v1 default / {line}", "wb", line))
        out.append(Scenario(f"wideband, telephone view / {line}", "wb-TEL", line))
        out.append(Scenario(f"wideband, both views / {line}", "wb-MIXED", line))
        out.append(Scenario(f"wideband, v2 (MIC-TEL, mapped) / {line}", "wb-MIXED+map", f"{line}+map"))
        out.append(Scenario(f"wideband view / {line} student", "wb", f"{S}{line}"))
        out.append(Scenario(f"wideband view / {line} student, mapped", "wb", f"{S}{line}+map"))
        out.append(
            Scenario(f"wideband, v2 student (MIC-TEL, mapped) / {line}", f"{S}wb-MIXED+map", f"{S}{line}+map")
        )
    for line in LINES:
        out.append(Scenario(f"{line} / {line}", line, line))
        out.append(Scenario(f"{line} / {line}, v2 (TEL-TEL, mapped)", f"{line}+map", f"{line}+map"))
        out.append(Scenario(f"{line} / {line}, student", f"{S}{line}", f"{S}{line}"))
        out.append(
            Scenario(f"{line} / {line}, v2 student (TEL-TEL, mapped)", f"{S}{line}+map", f"{S}{line}+map")
        )
    return out


#: The scenarios of each channel pair, as version 2 compares them: what its calibration is fitted on.
def pair_scenarios() -> dict[str, list[Scenario]]:
    return {
        "MIC-MIC": [Scenario("wideband / wideband", "wb", "wb")],
        "MIC-TEL": [Scenario(f"v2 / {line}", f"{S}wb-MIXED+map", f"{S}{line}+map") for line in LINES],
        "TEL-TEL": [Scenario(f"{line} / {line}", f"{S}{line}+map", f"{S}{line}+map") for line in LINES],
    }


def _halves_trials(root: Path, folder: str, tag: str, skip_pairs: set[frozenset[str]]) -> list[Trial]:
    import soundfile as sf

    with open(root / folder / "labels.csv", newline="") as fh:
        rows = sorted(csv.DictReader(fh), key=lambda r: r["file"])
    halves = []
    for row in rows:
        rel = f"{folder}/{row['file']}"
        info = sf.info(str(root / rel))
        n, sr = int(info.frames), int(info.samplerate)
        spk = row["speaker"]
        halves.append((Snippet(rel, 0, n // 2, sr, spk), Snippet(rel, n // 2, n, sr, spk)))
    trials = [Trial(a, b, True, f"{tag}-half") for a, b in halves]
    for i in range(len(halves)):
        for j in range(i + 1, len(halves)):
            pair = frozenset({Path(halves[i][0].file).stem, Path(halves[j][0].file).stem})
            if pair not in skip_pairs:
                trials.append(Trial(halves[i][0], halves[j][1], False, f"{tag}-nontarget"))
    return trials


def corpus_trials(corpus: str, root: Path) -> list[Trial]:
    if corpus == "libri":
        return build_trials(root)
    if corpus == "cv":
        with open(root / CV_DIR / "possible_same_speaker.csv", newline="") as fh:
            skip = {frozenset({Path(r["file_a"]).stem, Path(r["file_b"]).stem}) for r in csv.DictReader(fh)}
        return _halves_trials(root, CV_DIR, "cv", skip)
    if corpus == "so":
        return _halves_trials(root, SO_DIR, "so", set())
    raise SystemExit(f"unknown corpus {corpus!r}: libri, cv or so")


def seed_of(view: str, snippet: Snippet) -> int:
    return zlib.crc32(f"{view}/{snippet.key}".encode())


def code_digest() -> str:
    """Changes when anything that shapes the embeddings changes (not unrelated edits of the engine)."""
    import inspect

    from verilive.voice import channel, engine

    h = hashlib.sha256()
    for rel in ("common/telephone.py", "src/verilive/voice/campplus.py", "src/verilive/voice/vad.py"):
        h.update((REPO / rel).read_bytes())
    import json

    models = json.loads((REPO / "src/verilive/models/manifest.json").read_text())["models"]
    used = [m for m in models if m["id"] in ("campplus", "silero_vad")]
    h.update(json.dumps(used, sort_keys=True).encode())
    for part in (inspect.getsource(channel.telephone_band), inspect.getsource(channel.highpass),
                 repr(engine.TEMPLATE_VAD), engine.INIT_DATA_ID, str(engine.EMBED_RELU)):  # fmt: skip
        h.update(part.encode())
    return h.hexdigest()[:12]


def student_digest() -> str:
    """:func:`code_digest` plus the adapted tensors and their store entry."""
    import json

    models = json.loads((REPO / "src/verilive/models/manifest.json").read_text())["models"]
    h = hashlib.sha256(code_digest().encode())
    h.update((REPO / "src/verilive/voice/campplus_tel.npz").read_bytes())
    h.update(json.dumps([m for m in models if m["id"] == "campplus_tel"], sort_keys=True).encode())
    return h.hexdigest()[:12]


def _engine(student: bool = False) -> VoiceEngine:
    from verilive.config import Settings
    from verilive.models.sessions import ModelRegistry
    from verilive.voice.campplus import CamPlusPlus
    from verilive.voice.engine import MatchCalibration, VoiceEngine
    from verilive.voice.vad import SileroVad

    reg = ModelRegistry(Settings())
    neutral = MatchCalibration(1.0, 0.0)  # scores only: independent of calibration.json
    tel = CamPlusPlus.from_registry(reg, "campplus_tel") if student else None
    return VoiceEngine(
        SileroVad.from_registry(reg), CamPlusPlus.from_registry(reg), neutral, tel_embedder=tel
    )


def _cached(view: str, cache: Path) -> tuple[Path, dict[str, np.ndarray]]:
    digest = student_digest() if view.startswith(S) else code_digest()
    path = cache / f"{view.removeprefix(S)}{'-student' if view.startswith(S) else ''}-{digest}.npz"
    return path, (dict(np.load(path)) if path.exists() else {})


def embed_views(snippets: list[Snippet], root: Path, cache: Path) -> dict[str, dict[str, np.ndarray]]:
    """Unit embeddings of every snippet in every view, cached per view. ``wb``: the wideband view
    of the default template of the original; ``wb-TEL``: that template's telephone-band view (the
    template ``channel_type=TEL`` makes of it); ``wb-MIXED``: their mean (what ``MIXED`` gave
    before issue 30); a line: the template of the 8 kHz copy through it."""
    from verilive.audio import Audio
    from verilive.voice.engine import NoSpeech

    cache.mkdir(parents=True, exist_ok=True)
    out: dict[str, dict[str, np.ndarray]] = {}
    plain = [*LINES, "wb"]
    for view in [*plain, *(S + v for v in plain)]:
        student = view.startswith(S)
        base = view.removeprefix(S)
        names = ([S + "wb-TEL"] if student else ["wb", "wb-TEL"]) if base == "wb" else [view]
        files = {n: _cached(n, cache) for n in names}
        todo = [s for s in snippets if any(s.key not in files[n][1] for n in names)]
        eng = _engine(student) if todo else None
        for k, s in enumerate(todo):
            x = s.load(root)
            if base in LINES:
                wave, sr = telephone(x, s.sample_rate, LINES[base], seed_of(base, s)), 8000
            else:
                wave, sr = x, s.sample_rate
            try:
                assert eng is not None
                t = eng.create_template(Audio(np.ascontiguousarray(wave[:, None], np.float32), sr))
                units = (
                    [t.unit()] if base in LINES else [_unit(t.tel)] if student else [t.unit(), _unit(t.tel)]
                )
            except NoSpeech:
                units = [np.full(192, np.nan, np.float32)] * len(names)
            for n, u in zip(names, units, strict=True):
                files[n][1][s.key] = u
            if (k + 1) % 200 == 0 or k + 1 == len(todo):
                print(f"  {view}: {k + 1}/{len(todo)}", flush=True)
                for path, have in files.values():
                    np.savez(path, **have)
        out.update({n: files[n][1] for n in names})
    for p in ("", S):
        out[f"{p}wb-MIXED"] = {k: _unit(out["wb"][k] + out[f"{p}wb-TEL"][k]) for k in out["wb"]}
    return out


def _unit(v: np.ndarray | None) -> np.ndarray:
    if v is None:
        return np.full(192, np.nan, np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


def score(trials: list[Trial], enrol: dict[str, np.ndarray], verify: dict[str, np.ndarray]) -> np.ndarray:
    a = np.stack([enrol[t.a.key] for t in trials])
    b = np.stack([verify[t.b.key] for t in trials])
    return np.nan_to_num(np.sum(a * b, axis=1), nan=-1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpora", default="libri,cv,so")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/verilive-telephone"))
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument(
        "--calibrate", action="store_true", help="write the per-pair calibration into calibration.json"
    )
    ap.add_argument("--write-map", action="store_true", help="fit the telephone map on all corpora, write it")
    args = ap.parse_args()
    root = data_root(None)
    corpora = args.corpora.split(",")
    trials = {c: corpus_trials(c, root) for c in corpora}
    snippets = snippets_of([t for ts in trials.values() for t in ts])
    emb = embed_views(snippets, root, args.cache)
    add_mapped_views(emb, trials)
    if args.write_map:
        write_map(emb, trials)
    results: dict[str, dict[str, float]] = {}
    curves: dict[str, DetCurve] = {}
    for sc in scenarios():
        row = {}
        pooled_s, pooled_y = [], []
        for c, ts in trials.items():
            s = score(ts, emb[sc.enrol], emb[sc.verify])
            y = np.array([t.target for t in ts])
            row[c] = eer(s, y)[0]
            pooled_s.append(s)
            pooled_y.append(y)
        s, y = np.concatenate(pooled_s), np.concatenate(pooled_y)
        row["pooled"] = eer(s, y)[0]
        results[sc.name] = row
        curves[sc.name] = det_curve(s, y)
        print(f"{sc.name:<34} " + "  ".join(f"{k} {v:6.2%}" for k, v in row.items()), flush=True)
    counts = {c: (sum(t.target for t in ts), sum(not t.target for t in ts)) for c, ts in trials.items()}
    calibration = calibrate(trials, emb, write=args.calibrate)
    if not args.no_docs:
        write_docs(results, counts, curves, calibration)


MAP_LAMBDA = 10.0  # ridge towards the identity; 1 and 100 were worse leaving one corpus out
MAP_VIEWS = ("wb-TEL", *LINES)  # telephone views mapped onto the wideband view of the same recording
MAP_NPY = REPO / "src" / "verilive" / "voice" / "telephone_map.npy"


def fit_map(
    emb: dict[str, dict[str, np.ndarray]], keys: list[str], lam: float = MAP_LAMBDA, prefix: str = S
) -> np.ndarray:
    """W minimising |X W - Y|^2 + lam |W - I|^2: X the unit telephone views (the telephone band of
    the original and every line's copy), Y the unit wideband view of the same recording."""
    xs, ys = [], []
    for k in keys:
        y = emb["wb"][k]
        for v in MAP_VIEWS:
            x = emb[prefix + v][k]
            if np.all(np.isfinite(x)) and np.all(np.isfinite(y)):
                xs.append(x)
                ys.append(y)
    x, y = np.array(xs, np.float64), np.array(ys, np.float64)
    d = x.shape[1]
    return np.linalg.solve(x.T @ x + lam * np.eye(d), x.T @ y + lam * np.eye(d)).astype(np.float32)


def _keys(ts: list[Trial], skip: frozenset[str] | set[str] = frozenset()) -> list[str]:
    return sorted({s.key for t in ts for s in (t.a, t.b) if s.speaker not in skip})


def add_mapped_views(emb: dict[str, dict[str, np.ndarray]], trials: dict[str, list[Trial]]) -> None:
    """``<line>+map`` and ``wb-MIXED+map``: the views as version 2 compares them, each corpus's
    snippets mapped by a map fitted **without that corpus** (leave one corpus out; the identity
    when only one corpus is run)."""
    for p in ("", S):
        for view in [*LINES, "wb-MIXED"]:
            emb[f"{p}{view}+map"] = {}
        for c, ts in trials.items():
            others = [t for o, tt in trials.items() if o != c for t in tt]
            w = fit_map(emb, _keys(others), prefix=p) if others else np.eye(192, dtype=np.float32)
            for k in _keys(ts):
                for line in LINES:
                    emb[f"{p}{line}+map"][k] = _unit(_unit(emb[p + line][k]) @ w)
                emb[f"{p}wb-MIXED+map"][k] = _unit(
                    _unit(emb["wb"][k]) + _unit(_unit(emb[p + "wb-TEL"][k]) @ w)
                )


def write_map(emb: dict[str, dict[str, np.ndarray]], trials: dict[str, list[Trial]]) -> None:
    """The shipped map (on the student's telephone views, as the engine makes them): fitted on every
    corpus but the speakers held aside for the tests."""
    aside = held_aside(trials)
    w = fit_map(emb, _keys([t for ts in trials.values() for t in ts], aside))
    np.save(MAP_NPY, w.astype("<f4"))
    dist = float(np.linalg.norm(w - np.eye(w.shape[0])))
    print(f"wrote {MAP_NPY} ({w.shape[0]} x {w.shape[1]}, |W - I| = {dist:.3f})")


def calibrate(
    trials: dict[str, list[Trial]], emb: dict[str, dict[str, np.ndarray]], write: bool
) -> dict[str, dict[str, float]]:
    """Per channel pair: (a, b) fitted on every corpus's trials of that pair (MIC-MIC keeps the
    shipped parameters of eval/calibrate_matching.py), and the ECE of probabilities cross-validated
    by speaker (each trial scored by a fit without its speakers' fold)."""
    import json

    from common import metrics

    from eval.calibrate_matching import CALIBRATION_JSON, N_BINS, cross_validated, fit_logistic, predict

    record = json.loads(CALIBRATION_JSON.read_text())
    out: dict[str, dict[str, float]] = {}
    aside = held_aside(trials)
    # the held-aside speakers never fit the calibration: tests/test_telephone_voice.py uses them
    pooled = [t for ts in trials.values() for t in ts if not set(t.speakers) & aside]
    for pair, scs in pair_scenarios().items():
        s = np.concatenate([score(pooled, emb[sc.enrol], emb[sc.verify]) for sc in scs])
        ts = pooled * len(scs)
        y = np.array([t.target for t in ts])
        p_cv, _ = cross_validated(s, ts)
        if pair == "MIC-MIC":
            a, b = float(record["a"]), float(record["b"])
            p_all = predict(a, b, s)
        else:
            a, b = fit_logistic(s, y)
            p_all = p_cv
        ece_cv = metrics.reliability(p_cv, y, N_BINS).ece
        ece_shipped = metrics.reliability(p_all, y, N_BINS).ece
        out[pair] = {"a": a, "b": b, "ece_cv": ece_cv, "ece": ece_shipped, "eer": eer(s, y)[0],
                     "target": int(y.sum()), "nontarget": int((~y).sum())}  # fmt: skip
        n_t, n_n = int(y.sum()), int((~y).sum())
        print(
            f"{pair}: a {a:.3f} b {b:.3f}  EER {out[pair]['eer']:.2%}  ECE cross-validated {ece_cv:.4f}"
            f"  ECE of the shipped parameters {ece_shipped:.4f}  ({n_t} / {n_n})"
        )
        _reliability_data[pair] = (p_all if pair == "MIC-MIC" else p_cv, y)
    if write:
        record["pairs"] = {
            pair: {
                "a": round(v["a"], 6),
                "b": round(v["b"], 6),
                "target": v["target"],
                "nontarget": v["nontarget"],
                "ece_cross_validated": round(v["ece_cv"], 5),
            }
            for pair, v in out.items()
            if pair != "MIC-MIC"
        }
        record["pairs_held_aside"] = sorted(aside)
        record["pairs_trials"] = (
            "eval/telephone.py: libri, cv and so trials, the wideband side through every line of LINES "
            "(MIC-TEL) or both sides (TEL-TEL); python -m eval.telephone --calibrate"
        )
        CALIBRATION_JSON.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
        print(f"wrote the MIC-TEL and TEL-TEL parameters into {CALIBRATION_JSON}")
    return out


_reliability_data: dict[str, tuple[np.ndarray, np.ndarray]] = {}
HELD_ASIDE = 12  # LibriSpeech speakers left out of the pair calibrations, for the tests


def held_aside(trials: dict[str, list[Trial]]) -> set[str]:
    """The last HELD_ASIDE LibriSpeech speakers by name (none without the libri corpus)."""
    libri = sorted({s for t in trials.get("libri", []) for s in t.speakers if s.startswith("ls:")})
    return set(libri[-HELD_ASIDE:])


def write_docs(
    results: dict[str, dict[str, float]],
    counts: dict[str, tuple[int, int]],
    curves: dict[str, DetCurve],
    calibration: dict[str, dict[str, float]],
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from common import metrics

    cols = list(next(iter(results.values())))
    lines = ["| enrolment / verification | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for name, row in results.items():
        lines.append(f"| {name} | " + " | ".join(f"{v:.2%}".replace("%", " %") for v in row.values()) + " |")
    trials_line = ", ".join(f"{c}: {t} target / {n} non-target" for c, (t, n) in counts.items())
    lines += ["", f"Trials: {trials_line}. `python -m eval.telephone`.", ""]
    lines += [
        "| channel pair | a | b | EER (pooled) | ECE, cross-validated by speaker | ECE, shipped (a, b) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for pair, v in calibration.items():
        lines.append(
            f"| {pair} | {v['a']:.2f} | {v['b']:.2f} | {v['eer']:.2%} | {v['ece_cv']:.4f} | {v['ece']:.4f} |"
        )
    replace_section(DOCS_MD, "telephone-results", "\n".join(lines) + "\n")
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 6.5))
    shown = [n for n in curves if n.startswith("wideband / wideband") or "v2 student (" in n]  # as shipped
    colours = plt.get_cmap("tab20")(np.linspace(0, 1, len(shown)))
    for name, colour in zip(shown, colours, strict=True):
        c = curves[name]
        style = "--" if "TEL-TEL" in name else "-"
        ax.plot(c.x, c.y, style, color=colour, label=f"{name} (EER {results[name]['pooled']:.2%})")
    ticks = [0.001, 0.01, 0.05, 0.2, 0.5]
    ax.set_xlim(metrics.probit(np.array(5e-4)), metrics.probit(np.array(0.6)))
    ax.set_ylim(metrics.probit(np.array(5e-4)), metrics.probit(np.array(0.6)))
    ax.set_xticks(metrics.probit(np.array(ticks)), [f"{t:.1%}" for t in ticks])
    ax.set_yticks(metrics.probit(np.array(ticks)), [f"{t:.1%}" for t in ticks])
    ax.set_xlabel("false accepts")
    ax.set_ylabel("false rejects")
    ax.set_title("DET, pooled dev trials (libri, cv, so); dashed: telephone / telephone")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    for pair, (p, y) in _reliability_data.items():
        r = metrics.reliability(p, y, 10)
        bx.plot(r.mean_pred, r.frac_pos, "o-", label=f"{pair} (ECE {r.ece:.4f})")
    bx.plot([0, 1], [0, 1], "k:", lw=1)
    bx.set_xlabel("predicted P(same speaker)")
    bx.set_ylabel("observed fraction of same-speaker trials")
    bx.set_title("Reliability per pair (MIC-TEL, TEL-TEL: cross-validated by speaker)")
    bx.legend(fontsize=8)
    bx.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(OUT_PNG, dpi=100)
    print(f"wrote {OUT_PNG} and {DOCS_MD}")


if __name__ == "__main__":
    main()
