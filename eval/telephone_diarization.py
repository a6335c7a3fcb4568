"""Diarization per line and per set, the speaker count left out, and two-party calls (issue 48).

    python -m eval.telephone_diarization [--public /tmp/vl-diar] [--no-docs]

**Sets.** ``ami``: the 10 AMI dev excerpts of 30 s; ``sample``: the 30 s two-speaker sample (both from
eval/diarization.py); ``public``: the real recordings with references that
``python -m train.diarization_sources build`` makes (``--public``; skipped when absent); ``calls:<source>``:
conversations mixed by ``train.conversations`` from the *calls* part of four real read-speech sources
(voices the telephone segmentation student never heard): two-party calls of 60 s mostly, some with one
and some with three speakers, so the count is tested on 1-3 speakers. Their references are made here
(speech activity of clean read speech), not by people.

**Channels.** Wideband as recorded, and each line of eval/telephone.py (common/telephone.py; a seed per
recording and line), uploaded at 8 kHz as an integrator would send a recorded call. Lines are diarized
with the segmentation the service picks for telephone audio (``pyannote_segmentation_tel``) and, for
comparison, with the wideband segmentation-3.0.

**Choices left out.** The clustering threshold and the smallest speaker cluster (the speaker-count
criterion) are chosen on a grid for every recording with the recordings of *other groups* only (a
group: one AMI excerpt, one public recording, the sample, or one call source; every channel pooled),
so each figure under "left out" is for a recording whose group took no part in the choice. DER as
eval/diarization.py scores it (collar 0.25 s each side, overlap scored); speaker count right means
the estimated number equals the reference's.

Local segmentation and embeddings are cached per recording, channel and model under ``--cache``, so
a second run only re-clusters. Writes the "telephone-diarization" section of docs/diarization.md and
docs/telephone_diarization.png unless ``--no-docs``.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import itertools
import pickle
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import soundfile as sf
from common.repo import REPO, data_root, replace_section
from common.telephone import LINES, telephone

from eval.diarization import FINDABLE_S, Score, dev_excerpts, score, turns_to_annotation

if TYPE_CHECKING:
    from pyannote.core import Annotation, Timeline

DOCS_MD = REPO / "docs" / "diarization.md"
OUT_PNG = REPO / "docs" / "telephone_diarization.png"
CACHE = Path("/tmp/verilive-diar-cache")
CHANNELS = ("wideband", *LINES)
# The model sets compared on lines (wideband audio always goes through the wideband models).
BEFORE = "wideband models"
TEL_EMBEDDINGS = "telephone CAM++ only"
SHIPPED = "telephone models"
#: (clustering threshold, smallest speaker cluster, its smallest share of the embeddings): the
#: speaker-count criterion's grid.
GRID = tuple(
    itertools.product(
        (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7), (1, 2, 3, 5), (0.0, 0.01, 0.02, 0.04)
    )
)
Setting = tuple[float, int, float]
#: speakers per call, cycled: mostly two-party calls, some one-speaker (voicemail) and three-party ones
CALL_SPEAKERS = (2, 2, 1, 2, 3, 2)


@dataclass
class Recording:
    set: str
    group: str  # what is left out together
    uri: str
    wave: np.ndarray
    sr: int
    reference: Annotation
    uem: Timeline

    @property
    def n_speakers(self) -> int:
        return len(self.reference.crop(self.uem).labels())

    @property
    def n_findable(self) -> int:
        """Speakers with at least 2 s of speech (at least 1): a voice heard for a word or two is
        rarely found by any diarizer; eval/diarization.py reports the count against this too."""
        ref = self.reference.crop(self.uem)
        return max(1, sum(ref.label_duration(label) >= FINDABLE_S for label in ref.labels()))


def _annotation(turns: Iterable[tuple[Any, float, float]], uri: str) -> Annotation:
    from pyannote.core import Annotation, Segment

    ann = Annotation(uri=uri)
    for i, (who, s, e) in enumerate(turns):
        ann[Segment(s, e), i] = str(who)
    return ann


def _whole(uri: str, seconds: float) -> Timeline:
    from pyannote.core import Segment, Timeline

    return Timeline([Segment(0.0, seconds)], uri=uri)


def dev_recordings(data: Path) -> list[Recording]:
    out = []
    for ex in dev_excerpts(data):
        x, sr = sf.read(str(ex.audio), dtype="float32")
        s = "ami" if ex.ami else "sample"
        out.append(Recording(s, f"{s}/{ex.uri}", ex.uri, x, sr, ex.reference, ex.uem))
    return out


def public_recordings(folder: Path | None) -> list[Recording]:
    """The recordings of ``train.diarization_sources build`` (index.csv, WAV and RTTM per recording)."""
    from eval.diarization import read_rttm

    if folder is None or not (folder / "index.csv").exists():
        return []
    out = []
    with open(folder / "index.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            x, sr = sf.read(str(folder / r["audio"]), dtype="float32")
            ref = next(iter(read_rttm(folder / r["rttm"]).values()))
            uri = r["recording"]
            ref.uri = uri
            out.append(Recording("public", f"public/{uri}", uri, x, sr, ref, _whole(uri, x.size / sr)))
    return out


def call_recordings(data: Path, per_source: int, seconds: float, long: bool = False) -> list[Recording]:
    """``per_source`` calls of ``seconds`` per call source; ``long``: the set of long two-party calls
    (``long:<source>``, left out with the same source's short calls)."""
    from train.conversations import CALL_SOURCES, SR, conversation, pick_voices, speech_pools

    pools = speech_pools(data, "calls")
    out = []
    for src in CALL_SOURCES:
        if src not in pools:
            continue
        for i in range(per_source):
            k = 2 if long else CALL_SPEAKERS[i % len(CALL_SPEAKERS)]
            if k > len(pools[src]):
                continue
            tag = "long" if long else "calls"
            rng = np.random.default_rng(zlib.crc32(f"{tag}/{src}/{i}".encode()))
            wave, ref = conversation(pick_voices(pools, rng, k, src), rng, seconds, overlap_p=0.1)
            uri = f"{src}-{i:02d}-{k}spk" + ("-long" if long else "")
            out.append(
                Recording(
                    f"{tag}:{src}",
                    f"calls:{src}",
                    uri,
                    wave,
                    SR,
                    _annotation(ref, uri),
                    _whole(uri, wave.size / SR),
                )
            )
    return out


def channel_copy(rec: Recording, channel: str) -> tuple[np.ndarray, int]:
    if channel == "wideband":
        return rec.wave, rec.sr
    return telephone(rec.wave, rec.sr, LINES[channel], zlib.crc32(f"{channel}/{rec.uri}".encode())), 8000


@dataclass
class Result:
    """One recording through one channel with one segmentation model."""

    rec: Recording
    channel: str
    model: str
    grid: dict[Setting, tuple[Score, int]] = field(default_factory=dict)  # -> (score, n_est)
    given: Score = field(default_factory=Score)


def local_cached(
    diarizer: Any, rec: Recording, channel: str, model: str, cache: Path
) -> tuple[Any, int, int]:
    """LocalSpeakers of ``rec`` through ``channel`` (cached), the input length and its rate."""
    from verilive.voice.diarization import LocalSpeakers

    x, sr = channel_copy(rec, channel)
    cfg = diarizer.config
    key = hashlib.sha256(
        f"{rec.set}/{rec.uri}/{channel}/{model}/{_model_digest(model)}/{cfg.speech_threshold}/{cfg.overlap_threshold}/"
        f"{cfg.min_clean_s}/{cfg.step_s}/{hashlib.sha256(x.tobytes()).hexdigest()}".encode()
    ).hexdigest()[:24]
    path = cache / f"{key}.npz"
    if path.exists():
        # the telephone flag is what local_speakers decides for that input: lines go in at 8 kHz
        tel = channel != "wideband" and model != BEFORE
        with np.load(path) as z:
            local = LocalSpeakers(z["offsets"], z["active"], z["embeddings"], int(z["n_frames"]), tel)
            return local, x.size, sr
    local = diarizer.local_speakers(x, sr)
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(path, offsets=local.offsets, active=local.active, embeddings=local.embeddings,
             n_frames=local.n_frames)  # fmt: skip
    return local, x.size, sr


def _model_digest(model: str) -> str:
    """The telephone model changes with its packaged tensors: cached answers of another one are stale."""
    if model != SHIPPED:
        return ""
    path = REPO / "src" / "verilive" / "voice" / "segmentation_tel.npz"
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12] if path.exists() else "none"


def run(diarizers: dict[str, Any], recs: list[Recording], cache: Path) -> list[Result]:
    out = []
    for rec in recs:
        for ch in CHANNELS:
            for model, d in diarizers.items():
                if ch == "wideband" and model != BEFORE:
                    continue
                if rec.set.startswith("long:") and (model != SHIPPED) == (ch != "wideband"):
                    continue  # long calls: only what the service runs (the wideband models on wideband)
                local, n, sr = local_cached(d, rec, ch, model, cache)
                res = Result(rec, ch, model)
                embedded = local.embedded
                tree = d.tree(local.embeddings[embedded]) if embedded.any() else None
                for th, mcs, frac in GRID:
                    rules = {"threshold": th, "min_cluster_size": mcs, "min_cluster_fraction": frac}
                    dk = d.replace(**rules, **{f"telephone_{k}": v for k, v in rules.items()})
                    turns = dk.link(local, n, sr, tree=tree)
                    hyp = turns_to_annotation(turns, sr, rec.uri)
                    res.grid[(th, mcs, frac)] = (score(rec.reference, hyp, rec.uem), len(turns))
                given = d.link(local, n, sr, rec.n_speakers)
                res.given = score(rec.reference, turns_to_annotation(given, sr, rec.uri), rec.uem)
                out.append(res)
        print(f"  {rec.set} {rec.uri}: done", flush=True)
    return out


def choose(results: list[Result], left_out: str | None, model: str, lines: bool) -> Setting:
    """The grid setting of lowest pooled DER over the recordings of other groups than ``left_out``:
    for wideband audio (``lines`` False) or every line pooled (True), with ``model``'s results."""
    pool = [
        r
        for r in results
        if r.rec.group != left_out and r.model == model and (r.channel != "wideband") == lines
    ]

    def der(k: Setting) -> float:
        acc = Score()
        for r in pool:
            acc += r.grid[k][0]
        return round(acc.der, 6)

    return min(GRID, key=der)


@dataclass
class Row:
    est: Score = field(default_factory=Score)
    left_out: Score = field(default_factory=Score)
    given: Score = field(default_factory=Score)
    count_right: int = 0
    count_right_shipped: int = 0
    count_findable: int = 0  # estimate equal to the speakers with at least 2 s
    count_abs_error: int = 0
    n: int = 0


def table(results: list[Result], shipped: dict[bool, Setting]) -> dict[tuple[str, str, str], Row]:
    """(set, channel, model) -> figures; sets of calls also pooled as "calls" (long ones as "long").
    ``shipped``: the
    configured setting for wideband audio (False) and for lines (True)."""
    keys = {(r.rec.group, r.model, r.channel != "wideband") for r in results}
    chosen = {k: choose(results, *k) for k in sorted(keys)}
    rows: dict[tuple[str, str, str], Row] = {}
    for r in results:
        lines = r.channel != "wideband"
        k, ship = chosen[(r.rec.group, r.model, lines)], shipped[lines]
        pooled = [p for p in ("calls", "long") if r.rec.set.startswith(p + ":")]
        for s in [r.rec.set, *pooled]:
            row = rows.setdefault((s, r.channel, r.model), Row())
            row.est += r.grid[ship][0]
            row.left_out += r.grid[k][0]
            row.given += r.given
            row.count_right += int(r.grid[k][1] == r.rec.n_speakers)
            row.count_findable += int(r.grid[k][1] == r.rec.n_findable)
            row.count_abs_error += abs(r.grid[k][1] - r.rec.n_speakers)
            row.count_right_shipped += int(r.grid[ship][1] == r.rec.n_speakers)
            row.n += 1
    return rows


def main() -> None:
    from verilive.config import Settings
    from verilive.models.sessions import ModelRegistry
    from verilive.voice.campplus import CamPlusPlus
    from verilive.voice.diarization import DiarizationConfig, Diarizer
    from verilive.voice.engine import VoiceEngine
    from verilive.voice.segmentation import Segmenter

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--public", type=Path, default=Path("/tmp/vl-diar"))
    ap.add_argument("--calls-per-source", type=int, default=6)
    ap.add_argument("--call-seconds", type=float, default=60.0)
    ap.add_argument("--long-calls-per-source", type=int, default=1)
    ap.add_argument("--long-call-seconds", type=float, default=300.0)
    ap.add_argument("--cache", type=Path, default=CACHE)
    ap.add_argument("--sets", default="ami,sample,public,calls,long")
    ap.add_argument("--models", default=f"{BEFORE},{TEL_EMBEDDINGS},{SHIPPED}", help="model sets to run")
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    root = data_root(args.data)
    wanted = set(args.sets.split(","))
    recs = [r for r in dev_recordings(root) if r.set in wanted]
    if "public" in wanted:
        recs += public_recordings(args.public)
    if "calls" in wanted:
        recs += call_recordings(root, args.calls_per_source, args.call_seconds)
    if "long" in wanted:
        recs += call_recordings(root, args.long_calls_per_source, args.long_call_seconds, long=True)
    reg = ModelRegistry(Settings())
    wseg, cam = Segmenter.from_registry(reg), CamPlusPlus.from_registry(reg)
    cfg = DiarizationConfig()
    diarizers = {}
    for name in args.models.split(","):
        if name == BEFORE:  # the models of the service before issue 48, for every channel
            diarizers[name] = Diarizer(wseg, cam, cfg)
        elif name == TEL_EMBEDDINGS:  # the wideband segmentation, the telephone CAM++ on lines
            diarizers[name] = Diarizer(wseg, cam, cfg, None, CamPlusPlus.from_registry(reg, "campplus_tel"))
        elif name == SHIPPED:
            diarizers[name] = VoiceEngine.from_registry(reg).diarizer
        else:
            raise SystemExit(f"unknown models {name!r}; one of {BEFORE}, {TEL_EMBEDDINGS}, {SHIPPED}")
    results = run(diarizers, recs, args.cache)
    with open(args.cache / "results.pkl", "wb") as fh:
        pickle.dump(results, fh)
    shipped = {False: (cfg.threshold, cfg.min_cluster_size, cfg.min_cluster_fraction),
               True: (cfg.telephone_threshold, cfg.telephone_min_cluster_size,
                      cfg.telephone_min_cluster_fraction)}  # fmt: skip
    rows = table(results, shipped)
    everywhere = {
        m: (choose(results, None, BEFORE, False), choose(results, None, m, True)) for m in diarizers
    }
    print(f"shipped settings {shipped}; chosen on everything (wideband, lines) {everywhere}")
    text = markdown(rows, shipped, everywhere, len(recs))
    print(text)
    if not args.no_docs:
        replace_section(DOCS_MD, "telephone-diarization", text)
        plot(rows)


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def markdown(
    rows: dict[tuple[str, str, str], Row],
    shipped: dict[bool, Setting],
    best: dict[str, tuple[Setting, Setting]],
    n_recs: int,
) -> str:
    lines = [
        "| set | channel | models | DER, left out | missed | false alarm | confusion | "
        "DER, shipped setting | DER, count given | count right, left out | count = speakers ≥ 2 s |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    order = sorted(rows, key=lambda k: (":" in k[0], k[0], CHANNELS.index(k[1]), k[2]))
    for key in order:
        s, ch, model = key
        r = rows[key]
        e = r.left_out
        lines.append(
            f"| {s} | {ch} | {model} | {pct(e.der)} | {pct(e.missed / e.total)} | "
            f"{pct(e.false_alarm / e.total)} | {pct(e.confusion / e.total)} | {pct(r.est.der)} | "
            f"{pct(r.given.der)} | {r.count_right}/{r.n} | {r.count_findable}/{r.n} |"
        )
    lines += [
        "",
        f"{n_recs} recordings. Left out: clustering threshold, smallest speaker cluster and its smallest "
        f"share of the embeddings chosen without the recording's group (grid of {len(GRID)} settings; one "
        f"choice for wideband audio, one for all lines pooled; long calls are left out with their source's "
        f"short calls). Shipped settings (threshold, smallest cluster, share): wideband {shipped[False]}, "
        f"telephone {shipped[True]}; chosen on everything: "
        + "; ".join(f"{m}: wideband {w}, lines {t}" for m, (w, t) in best.items())
        + ". Collar 0.25 s each side, overlap scored. `python -m eval.telephone_diarization`.",
    ]
    return "\n".join(lines) + "\n"


def plot(rows: dict[tuple[str, str, str], Row]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = [s for s in ("ami", "public", "calls", "long") if any(k[0] == s for k in rows)]
    fig, axes = plt.subplots(1, len(sets), figsize=(4.5 * len(sets), 4.5), sharey=True, squeeze=False)
    for ax, s in zip(axes[0], sets, strict=True):
        y = np.arange(len(CHANNELS))
        for j, (model, off) in enumerate(((BEFORE, -0.2), (SHIPPED, 0.2))):
            v = [
                rows[(s, ch, model)].left_out.der * 100 if (s, ch, model) in rows else np.nan
                for ch in CHANNELS
            ]
            ax.barh(y + off, v, 0.4, label=model, color=f"C{j}")
        ax.set_yticks(y, CHANNELS)
        ax.invert_yaxis()
        ax.set_title(f"{s}: DER % (left out)")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Diarization per line (8 kHz upload), collar 0.25 s")
    fig.tight_layout()
    fig.savefig(OUT_PNG, dpi=100)
    print(f"wrote {OUT_PNG} and {DOCS_MD}")


if __name__ == "__main__":
    main()
