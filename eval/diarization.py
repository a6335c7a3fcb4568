"""Diarization accuracy and speed on the AMI dev excerpts (docs/diarization.md).

    python -m eval.diarization [--data DIR] [--no-docs] [--long-minutes 10]

For every excerpt of ``voice/ami_diarization_dev`` (10 AMI excerpts of 30 s with RTTM and UEM, and
the 30 s two-speaker sample, scored on its whole length) it runs ``Diarizer.diarize`` with the number
of speakers estimated and with the reference number given (oracle), and scores both with
pyannote.metrics: DER (missed speech, false alarm, confusion) and JER, overall and per file, with a
0.25 s forgiveness collar. It also reports the speaker-count accuracy, a leave-one-out estimate of
the clustering threshold's tuning bias, and the real-time factor. It rewrites the "Results" section
of docs/diarization.md and docs/diarization_der.png unless ``--no-docs``.

Collar convention. "Collar 0.25 s" here means what it means for NIST md-eval and dscore: 0.25 s on
each side of every reference boundary is not scored. pyannote.metrics' ``collar`` argument is the
total width of that zone (it removes collar / 2 on each side), so :func:`score` passes 2 x collar_s.
Checked on the ES2014c pair from SpeechBrain, whose md-eval result is known (tests/test_diarization.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pyannote.core import Annotation, Timeline

DOCS = Path(__file__).resolve().parents[1] / "docs"
DEV = "voice/ami_diarization_dev"
COLLAR_S = 0.25
# Clustering thresholds tried by the leave-one-out estimate of the tuning bias.
THRESHOLD_GRID = tuple(round(float(t), 3) for t in np.arange(0.25, 0.5501, 0.025))
# A speaker with less speech than this in an excerpt cannot fill the windows a cluster needs; the
# count accuracy is also given against the speakers above it.
FINDABLE_S = 2.0
# Overlap thresholds reported for sensitivity (the shipped one comes from the detector's own
# simulated validation data, not from these files).
OVERLAP_GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


# ------------------------------------------------------------------------------ reading labels


def read_rttm(path: str | os.PathLike[str]) -> dict[str, Annotation]:
    """SPEAKER lines of an RTTM file as one pyannote Annotation per file id."""
    from pyannote.core import Annotation, Segment

    out: dict[str, Annotation] = {}
    for line in Path(path).read_text().splitlines():
        f = line.split()
        if not f or f[0] != "SPEAKER":
            continue
        uri, start, dur, who = f[1], float(f[3]), float(f[4]), f[7]
        ann = out.setdefault(uri, Annotation(uri=uri))
        ann[Segment(start, start + dur), len(ann)] = who
    return out


def read_uem(path: str | os.PathLike[str]) -> dict[str, Timeline]:
    """UEM lines (uri channel start end) as one scored Timeline per file id."""
    from pyannote.core import Segment, Timeline

    out: dict[str, Timeline] = {}
    for line in Path(path).read_text().splitlines():
        f = line.split()
        if len(f) >= 4:
            out.setdefault(f[0], Timeline(uri=f[0])).add(Segment(float(f[2]), float(f[3])))
    return out


def turns_to_annotation(
    turns: Mapping[str, Iterable[tuple[int, int]]], sample_rate: int, uri: str
) -> Annotation:
    """Diarizer output (sample intervals per speaker key) as a pyannote Annotation."""
    from pyannote.core import Annotation, Segment

    ann = Annotation(uri=uri)
    for key, spans in turns.items():
        for i, (s, e) in enumerate(spans):
            ann[Segment(s / sample_rate, e / sample_rate), f"{key}.{i}"] = key
    return ann


# ------------------------------------------------------------------------------ scoring


@dataclass
class Score:
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

    def __iadd__(self, other: Score) -> Score:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self


def score(
    reference: Annotation,
    hypothesis: Annotation,
    uem: Timeline | None = None,
    collar_s: float = COLLAR_S,
    skip_overlap: bool = False,
) -> Score:
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
    return Score(
        total=d["total"],
        missed=d["missed detection"],
        false_alarm=d["false alarm"],
        confusion=d["confusion"],
        jer_sum=j["speaker error"],
        jer_n=j["speaker count"],
    )


# ------------------------------------------------------------------------------ the dev set


@dataclass(frozen=True)
class Excerpt:
    uri: str
    audio: Path
    reference: Annotation
    uem: Timeline
    ami: bool  # an AMI excerpt (scored in the headline) or the extra two-speaker sample

    @property
    def n_speakers(self) -> int:
        return len(self.reference.crop(self.uem).labels())

    @property
    def n_findable(self) -> int:
        ref = self.reference.crop(self.uem)
        return sum(ref.label_duration(label) >= FINDABLE_S for label in ref.labels())


def dev_excerpts(data: Path) -> list[Excerpt]:
    """The AMI excerpts listed in debug.train.lst (with their UEM), then the two-speaker sample."""
    import soundfile as sf
    from pyannote.core import Segment, Timeline

    root = data / DEV
    proto = root / "debug_protocol"
    refs, uems = read_rttm(proto / "debug.train.rttm"), read_uem(proto / "debug.train.uem")
    out = [
        Excerpt(uri, proto / f"{uri}.flac", refs[uri], uems[uri], True)
        for uri in (proto / "debug.train.lst").read_text().split()
    ]
    sample = root / "sample" / "sample.flac"
    duration = sf.info(str(sample)).duration
    uem = Timeline([Segment(0.0, duration)], uri="sample")
    out.append(Excerpt("sample", sample, read_rttm(root / "sample" / "sample.rttm")["sample"], uem, False))
    return out


# ------------------------------------------------------------------------------ running


@dataclass
class FileResult:
    uri: str
    ami: bool
    n_ref: int
    n_findable: int
    n_est: int
    est: Score
    oracle: Score
    est_pyannote_collar: Score  # pyannote collar=0.25 (0.125 s each side), for comparison
    est_no_collar: Score
    est_no_overlap: Score  # the same diarizer without overlap detection (one speaker per instant)
    est_by_overlap_threshold: dict[float, Score]  # estimated count, other overlap thresholds
    bound_our_vad: Score  # every speech frame of our VAD given the right (dominant) reference speaker
    bound_perfect_vad: Score  # the same on the reference speech: the best one-speaker-per-instant answer
    seconds: float  # wall time of diarize with the estimated count
    cpu_seconds: float
    duration: float


def run_file(diarizer: Any, ex: Excerpt, threshold: float | None = None) -> FileResult:
    import soundfile as sf

    wave, sr = sf.read(str(ex.audio), dtype="float32")
    if threshold is not None:
        diarizer = diarizer.replace(threshold=threshold)
    t, c = time.perf_counter(), time.process_time()
    est = diarizer.diarize(wave, sr)
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    regions = vad_regions(diarizer, wave, sr)
    oracle = diarizer.diarize(wave, sr, num_speakers=ex.n_speakers)
    no_overlap = diarizer.replace(overlap=False).diarize(wave, sr)
    by_threshold = (
        {
            t: score(
                ex.reference,
                turns_to_annotation(diarizer.replace(overlap_threshold=t).diarize(wave, sr), sr, ex.uri),
                ex.uem,
            )
            for t in OVERLAP_GRID
        }
        if diarizer.overlap is not None
        else {}
    )
    h_est = turns_to_annotation(est, sr, ex.uri)
    h_orc = turns_to_annotation(oracle, sr, ex.uri)
    return FileResult(
        uri=ex.uri,
        ami=ex.ami,
        n_ref=ex.n_speakers,
        n_findable=ex.n_findable,
        n_est=len(est),
        est=score(ex.reference, h_est, ex.uem),
        oracle=score(ex.reference, h_orc, ex.uem),
        est_pyannote_collar=score(ex.reference, h_est, ex.uem, collar_s=COLLAR_S / 2),
        est_no_collar=score(ex.reference, h_est, ex.uem, collar_s=0.0),
        est_no_overlap=score(ex.reference, turns_to_annotation(no_overlap, sr, ex.uri), ex.uem),
        est_by_overlap_threshold=by_threshold,
        bound_our_vad=score(ex.reference, single_speaker_bound(ex, regions, sr), ex.uem),
        bound_perfect_vad=score(ex.reference, single_speaker_bound(ex, None, sr), ex.uem),
        seconds=seconds,
        cpu_seconds=cpu,
        duration=wave.shape[0] / sr,
    )


def vad_regions(diarizer: Any, wave: np.ndarray, sr: int) -> list[tuple[int, int]]:
    from verilive.voice.vad import segments_from_probabilities

    probs, _ = diarizer.vad.probabilities(wave, sr)
    return segments_from_probabilities(probs, wave.shape[0], sr, diarizer.config.vad)


def single_speaker_bound(ex: Excerpt, regions: list[tuple[int, int]] | None, sr: int) -> Annotation:
    """The best answer with one speaker per instant, from the reference: every 10 ms frame of speech
    (``regions`` in samples, or the reference's own speech when None) gets the active reference
    speaker who speaks most in the file (any speaker where the reference has nobody: false alarm)."""
    from pyannote.core import Annotation, Segment

    ref = ex.reference
    order = sorted(ref.labels(), key=lambda lab: -ref.label_duration(lab))
    n = int(np.ceil(max(ex.uem.extent().end, ref.get_timeline().extent().end) * 100))
    active = np.zeros((len(order), n), bool)
    for seg, _, lab in ref.itertracks(yield_label=True):
        active[order.index(lab), round(seg.start * 100) : round(seg.end * 100)] = True
    speech = active.any(axis=0)
    if regions is not None:
        speech = np.zeros(n, bool)
        for s, e in regions:
            speech[round(s / sr * 100) : round(e / sr * 100)] = True
    who = np.where(speech, np.argmax(active, axis=0), -1)  # argmax: the first (most talkative) active
    ann = Annotation(uri=ex.uri)
    edges = np.concatenate([[0], np.flatnonzero(np.diff(who)) + 1, [n]])
    for a, b in itertools.pairwise(edges):
        if who[a] >= 0:
            ann[Segment(a / 100, b / 100)] = order[who[a]]
    return ann


def total(results: Iterable[FileResult], attr: str) -> Score:
    acc = Score()
    for r in results:
        acc += getattr(r, attr)
    return acc


def leave_one_out(diarizer: Any, excerpts: list[Excerpt]) -> tuple[Score, dict[str, float]]:
    """DER when each AMI file's threshold is the one best on the other nine (estimated count)."""
    import soundfile as sf

    grid: dict[float, dict[str, Score]] = {t: {} for t in THRESHOLD_GRID}
    for ex in excerpts:
        if not ex.ami:
            continue
        wave, sr = sf.read(str(ex.audio), dtype="float32")
        probs, _ = diarizer.vad.probabilities(wave, sr)
        for t in THRESHOLD_GRID:
            d = diarizer.replace(threshold=t)
            turns = d.diarize_probabilities(wave, sr, probs)
            grid[t][ex.uri] = score(ex.reference, turns_to_annotation(turns, sr, ex.uri), ex.uem)
    uris = [ex.uri for ex in excerpts if ex.ami]
    default = diarizer.config.threshold
    held = Score()
    chosen: dict[str, float] = {}
    for u in uris:
        # Ties go to the threshold nearest the shipped default.
        def others_der(t: float, u: str = u) -> float:
            acc = Score()
            for v in uris:
                if v != u:
                    acc += grid[t][v]
            return acc.der

        best = min(THRESHOLD_GRID, key=lambda t: (round(others_der(t), 6), abs(t - default)))
        chosen[u] = best
        held += grid[best][u]
    return held, chosen


def long_rtf(diarizer: Any, excerpts: list[Excerpt], minutes: float) -> tuple[float, float]:
    """RTF on ``minutes`` of audio made by joining the dev excerpts over and over (the long-input path)."""
    import soundfile as sf

    pieces = [sf.read(str(ex.audio), dtype="float32")[0] for ex in excerpts]
    one = np.concatenate(pieces)
    n = int(minutes * 60 * 16000)
    wave = np.resize(one, n)
    t, c = time.perf_counter(), time.process_time()
    diarizer.diarize(wave, 16000)
    return (time.perf_counter() - t) / (n / 16000), (time.process_time() - c) / (n / 16000)


# ------------------------------------------------------------------------------ report


def der_interval(
    scores: list[Score], n_boot: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the overall DER when the files are redrawn with replacement: how much
    the figure depends on which recordings happen to be in the set."""
    err = np.array([s.missed + s.false_alarm + s.confusion for s in scores])
    ref = np.array([s.total for s in scores])
    picks = np.random.default_rng(seed).integers(0, len(scores), (n_boot, len(scores)))
    ders = err[picks].sum(axis=1) / np.maximum(ref[picks].sum(axis=1), 1e-9)
    tail = (1 - level) / 2
    return float(np.quantile(ders, tail)), float(np.quantile(ders, 1 - tail))


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def results_markdown(
    results: list[FileResult],
    loo: tuple[Score, dict[str, float]] | None,
    rtf_long: tuple[float, float, float] | None,
    load: tuple[float, float],
) -> str:
    ami = [r for r in results if r.ami]
    lines = [
        "| file | speakers ref / ≥ 2 s / est. | DER est. | miss | FA | conf. | JER est. "
        "| DER oracle n | JER oracle n |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        e, o = r.est, r.oracle
        lines.append(
            f"| {r.uri} | {r.n_ref} / {r.n_findable} / {r.n_est} | {pct(e.der)} | {e.missed:.1f} s | "
            f"{e.false_alarm:.1f} s | {e.confusion:.1f} s | {pct(e.jer)} | {pct(o.der)} | {pct(o.jer)} |"
        )
    for name, rs in (("**AMI overall (10 files)**", ami), ("all 11 files", results)):
        e, o = total(rs, "est"), total(rs, "oracle")
        lines.append(
            f"| {name} | | **{pct(e.der)}** | {e.missed:.1f} s | {e.false_alarm:.1f} s | "
            f"{e.confusion:.1f} s | **{pct(e.jer)}** | **{pct(o.der)}** | **{pct(o.jer)}** |"
        )
    out = ["\n".join(lines), ""]
    lo, hi = der_interval([r.est for r in ami])
    out.append(
        f"How much the AMI figure depends on which excerpts are in the set: redrawing the "
        f"{len(ami)} files with replacement (2,000 times), 95 % of the overall DERs fall in "
        f"{pct(lo)}–{pct(hi)}."
    )
    ami_pc, ami_nc = total(ami, "est_pyannote_collar"), total(ami, "est_no_collar")
    out.append(
        "AMI overall, estimated count, under other collars: pyannote's `collar=0.25` (0.125 s each "
        f"side) DER {pct(ami_pc.der)}, JER {pct(ami_pc.jer)}; no collar DER {pct(ami_nc.der)}, "
        f"JER {pct(ami_nc.jer)}."
    )
    nov = total(ami, "est_no_overlap")
    out.append(
        f"Without overlap detection (one speaker per instant, `overlap=False`): AMI DER {pct(nov.der)} "
        f"(missed {nov.missed:.1f} s, false alarm {nov.false_alarm:.1f} s, confusion {nov.confusion:.1f} s), "
        f"JER {pct(nov.jer)}; all 11 files DER {pct(total(results, 'est_no_overlap').der)}."
    )
    if ami and ami[0].est_by_overlap_threshold:
        parts = []
        for t in OVERLAP_GRID:
            acc = Score()
            for r in ami:
                acc += r.est_by_overlap_threshold[t]
            parts.append(f"{t:g}: {pct(acc.der)}")
        out.append(
            "AMI DER at other overlap thresholds (sensitivity only; the shipped threshold is the "
            f"detector's own): {', '.join(parts)}."
        )
    bv, bp = total(ami, "bound_our_vad"), total(ami, "bound_perfect_vad")
    out.append(
        "Bounds for any system that gives one speaker per instant (AMI, collar 0.25 s): with perfect "
        f"speech detection DER {pct(bp.der)} (all of it overlapped speech missed, {bp.missed:.1f} s); "
        f"with this VAD's speech and perfect speaker labels DER {pct(bv.der)} (missed "
        f"{bv.missed:.1f} s, false alarm {bv.false_alarm:.1f} s)."
    )
    exact = sum(r.n_est == r.n_ref for r in ami)
    near = sum(abs(r.n_est - r.n_ref) <= 1 for r in ami)
    findable = sum(r.n_est == max(r.n_findable, 1) for r in ami)
    mae = np.mean([abs(r.n_est - r.n_ref) for r in ami])
    out.append(
        f"Speaker count (AMI, estimated): exactly the reference count on {exact}/{len(ami)} files, within "
        f"one on {near}/{len(ami)} (mean absolute error {mae:.1f}); equal to the number of speakers with "
        f"at least {FINDABLE_S:g} s of speech (at least 1) on {findable}/{len(ami)}."
    )
    if loo is not None:
        held, chosen = loo
        ts = sorted(set(chosen.values()))
        out.append(
            "Leave-one-out over the clustering threshold "
            f"(grid {THRESHOLD_GRID[0]:g}–{THRESHOLD_GRID[-1]:g} in steps of 0.025; "
            "each AMI file scored with the threshold that is best on the other nine, chosen: "
            f"{', '.join(f'{t:g}' for t in ts)}): DER {pct(held.der)}, JER {pct(held.jer)}."
        )
    secs = sum(r.seconds for r in results)
    cpu = sum(r.cpu_seconds for r in results)
    dur = sum(r.duration for r in results)
    speed = (
        f"Speed (`diarize` with the estimated count, VAD included, default onnxruntime threads, 2 cores, "
        f"load average {load[0]:.1f} before the run and {load[1]:.1f} at its end, this job included): "
        "the 11 files, "
        f"{dur:.0f} s of audio, took {secs:.1f} s: RTF {secs / dur:.3f} wall clock, "
        f"{cpu / dur:.3f} CPU seconds per second of audio."
    )
    if rtf_long is not None:
        speed += (
            f" {rtf_long[0]:g} min of the excerpts joined: RTF {rtf_long[1]:.3f} wall clock, "
            f"{rtf_long[2]:.3f} CPU."
        )
    out.append(speed)
    return "\n\n".join(out) + "\n"


def plot(results: list[FileResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.uri for r in results]
    x = np.arange(len(results))
    fig, ax = plt.subplots(figsize=(9, 4))
    bottom = np.zeros(len(results))
    for attr, label, colour in (
        ("missed", "missed speech", "#4c72b0"),
        ("false_alarm", "false alarm", "#dd8452"),
        ("confusion", "speaker confusion", "#c44e52"),
    ):
        v = np.array([100 * getattr(r.est, attr) / r.est.total if r.est.total else 0.0 for r in results])
        ax.bar(x - 0.2, v, 0.4, bottom=bottom, label=f"{label} (estimated count)", color=colour)
        bottom += v
    ax.bar(x + 0.2, [100 * r.oracle.der for r in results], 0.4, label="DER, oracle count", color="#8c8c8c")
    ax.scatter(
        x - 0.2,
        [100 * r.bound_perfect_vad.der for r in results],
        marker="_",
        s=300,
        color="k",
        label="best one-speaker-per-instant answer (overlap)",
        zorder=3,
    )
    for i, r in enumerate(results):
        ax.text(i - 0.2, bottom[i] + 1, f"{r.n_est}/{r.n_ref}", ha="center", fontsize=7)
    ax.axhline(20, color="k", lw=0.8, ls="--", label="target 20 %")
    ax.set_xticks(x, names)
    ax.set_ylabel("DER % (collar 0.25 s each side)")
    ax.set_title("verilive diarization per file (labels: estimated / reference speakers)")
    ax.set_ylim(0, max(100.0, float(bottom.max()) + 8))
    ax.legend(fontsize=7, loc="upper center", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_docs(section: str) -> None:
    path = DOCS / "diarization.md"
    text = path.read_text()
    start, end = "<!-- results:start -->", "<!-- results:end -->"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    path.write_text(pattern.sub(lambda _: f"{start}\n{section}{end}", text))


def main() -> None:
    from eval.trials import data_root
    from verilive.config import Settings
    from verilive.models.sessions import ModelRegistry
    from verilive.voice.diarization import Diarizer
    from verilive.voice.engine import VoiceEngine

    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None)
    ap.add_argument("--no-docs", action="store_true", help="print only; write neither docs nor plot")
    ap.add_argument("--no-loo", action="store_true", help="skip the leave-one-out threshold estimate")
    ap.add_argument("--long-minutes", type=float, default=10.0, help="0 skips the long-input RTF")
    args = ap.parse_args()

    excerpts = dev_excerpts(data_root(args.data))
    diarizer = Diarizer.from_engine(VoiceEngine.from_registry(ModelRegistry(Settings())))
    # Warm-up: the first ONNX calls allocate and are not representative of the speed.
    diarizer.diarize(np.zeros(16000, np.float32) + 0.01 * np.sin(np.arange(16000)), 16000)
    load0 = os.getloadavg()[0]
    results = [run_file(diarizer, ex) for ex in excerpts]
    rtf = None
    if args.long_minutes > 0:
        rtf = (args.long_minutes, *long_rtf(diarizer, excerpts, args.long_minutes))
    load1 = os.getloadavg()[0]
    loo = None if args.no_loo else leave_one_out(diarizer, excerpts)
    section = results_markdown(results, loo, rtf, (load0, load1))
    print(section)
    if not args.no_docs:
        write_docs(section)
        plot(results, DOCS / "diarization_der.png")
        print(f"wrote {DOCS / 'diarization.md'} and {DOCS / 'diarization_der.png'}")


if __name__ == "__main__":
    main()
