"""Diarization accuracy and speed on the AMI dev excerpts (docs/diarization.md).

    python -m eval.diarization [--data DIR] [--no-docs] [--long-minutes 10]

For every excerpt of ``voice/ami_diarization_dev`` (10 AMI excerpts of 30 s with RTTM and UEM, and
the 30 s two-speaker sample, scored on its whole length) it runs the shipped ``Diarizer`` with the
number of speakers estimated and with the reference number given (oracle), and scores both with
pyannote.metrics: DER (missed speech, false alarm, confusion) and JER, overall and per file, with a
0.25 s forgiveness collar. The settings were chosen on these files, so it also reports a
leave-one-excerpt-out figure: every AMI file scored with the settings (speech and overlap thresholds,
clustering threshold) that are best on the other nine, with the two-speaker sample as a guard. Then
the speaker-count accuracy and the real-time factor. It rewrites the "Results" section of
docs/diarization.md and docs/diarization_der.png unless ``--no-docs``.

Collar convention. "Collar 0.25 s" here means what it means for NIST md-eval and dscore: 0.25 s on
each side of every reference boundary is not scored. pyannote.metrics' ``collar`` argument is the
total width of that zone (it removes collar / 2 on each side), so :func:`score` passes 2 x collar_s.
Checked on the ES2014c pair from SpeechBrain, whose md-eval result is known (tests/test_diarization.py).
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import resource
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from common.metrics import DER_COLLAR_S, der_interval
from common.metrics import DerScore as Score  # the DER helpers live in common/metrics.py
from common.metrics import der_score as score

if TYPE_CHECKING:
    from pyannote.core import Annotation, Timeline

DOCS = Path(__file__).resolve().parents[1] / "docs"
DEV = "voice/ami_diarization_dev"
COLLAR_S = DER_COLLAR_S
# The settings grid of the leave-one-excerpt-out estimate: (speech, overlap) thresholds of the
# local decision, and the clustering threshold.
DECISION_GRID = tuple(itertools.product((0.5, 0.6, 0.7), (0.1, 0.2, 0.3)))
THRESHOLD_GRID = (0.35, 0.4, 0.45, 0.5, 0.55, 0.6)
# The leave-one-out choice must keep the two-speaker sample (not AMI) under this DER.
SAMPLE_GUARD = 0.10
# A speaker with less speech than this in an excerpt is hard to find; the count accuracy is also
# given against the speakers above it.
FINDABLE_S = 2.0
# The pipeline before segmentation-3.0 (Silero VAD windows, CAM++ clustering, a home-trained overlap
# detector), AMI overall on these files with the same scoring; from docs/diarization.md at commit
# e4bd16f (python -m eval.diarization then).
PREVIOUS = {"der": 0.212, "missed": 23.7, "false_alarm": 5.1, "confusion": 3.8, "jer": 0.586}

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
    est_no_overlap: Score  # the same diarizer with one speaker per instant (overlap_threshold=1)
    grid: dict[tuple[float, float, float], Score]  # (speech, overlap, clustering threshold) -> score
    seconds: float  # wall time of diarize with the estimated count
    cpu_seconds: float
    duration: float


def run_file(diarizer: Any, ex: Excerpt, grid: bool = True) -> FileResult:
    import soundfile as sf

    wave, sr = sf.read(str(ex.audio), dtype="float32")
    t, c = time.perf_counter(), time.process_time()
    est = diarizer.diarize(wave, sr)
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    oracle = diarizer.diarize(wave, sr, num_speakers=ex.n_speakers)
    no_overlap = diarizer.replace(overlap_threshold=1.0).diarize(wave, sr)
    scores: dict[tuple[float, float, float], Score] = {}
    if grid:
        for sp, ov in DECISION_GRID:
            d = diarizer.replace(speech_threshold=sp, overlap_threshold=ov)
            local = d.local_speakers(wave, sr)
            for th in THRESHOLD_GRID:
                turns = d.replace(threshold=th).link(local, wave.shape[0], sr)
                scores[(sp, ov, th)] = score(ex.reference, turns_to_annotation(turns, sr, ex.uri), ex.uem)
    h_est = turns_to_annotation(est, sr, ex.uri)
    return FileResult(
        uri=ex.uri,
        ami=ex.ami,
        n_ref=ex.n_speakers,
        n_findable=ex.n_findable,
        n_est=len(est),
        est=score(ex.reference, h_est, ex.uem),
        oracle=score(ex.reference, turns_to_annotation(oracle, sr, ex.uri), ex.uem),
        est_pyannote_collar=score(ex.reference, h_est, ex.uem, collar_s=COLLAR_S / 2),
        est_no_collar=score(ex.reference, h_est, ex.uem, collar_s=0.0),
        est_no_overlap=score(ex.reference, turns_to_annotation(no_overlap, sr, ex.uri), ex.uem),
        grid=scores,
        seconds=seconds,
        cpu_seconds=cpu,
        duration=wave.shape[0] / sr,
    )


def total(results: Iterable[FileResult], attr: str) -> Score:
    acc = Score()
    for r in results:
        acc += getattr(r, attr)
    return acc


Setting = tuple[float, float, float]


def leave_one_out(results: list[FileResult], default: Setting) -> tuple[Score, dict[str, Setting]]:
    """Each AMI file scored with the grid setting of lowest AMI DER on the other nine files, among
    those that keep the two-speaker sample under SAMPLE_GUARD. Ties go to the shipped default."""
    ami = [r for r in results if r.ami]
    guard = {k for r in results if not r.ami for k, v in r.grid.items() if v.der > SAMPLE_GUARD}
    settings = [k for k in ami[0].grid if k not in guard]
    held = Score()
    chosen: dict[str, Setting] = {}
    for r in ami:

        def others(k: Setting, u: str = r.uri) -> float:
            acc = Score()
            for o in ami:
                if o.uri != u:
                    acc += o.grid[k]
            return round(acc.der, 6)

        best = min(settings, key=lambda k: (others(k), k != default))
        chosen[r.uri] = best
        held += r.grid[best]
    return held, chosen


def long_run(diarizer: Any, excerpts: list[Excerpt], minutes: float) -> tuple[float, float, float, int]:
    """RTF (wall, CPU), peak traced Python/numpy memory (MB) and speakers found on ``minutes`` of audio
    made by joining the dev excerpts over and over (the long-input path)."""
    import tracemalloc

    import soundfile as sf

    pieces = [sf.read(str(ex.audio), dtype="float32")[0] for ex in excerpts]
    n = int(minutes * 60 * 16000)
    wave = np.resize(np.concatenate(pieces), n)
    tracemalloc.start()
    t, c = time.perf_counter(), time.process_time()
    turns = diarizer.diarize(wave, 16000)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return wall / (n / 16000), cpu / (n / 16000), peak, len(turns)


# ------------------------------------------------------------------------------ report


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def setting_text(k: Setting) -> str:
    return f"speech {k[0]:g} / overlap {k[1]:g} / clustering {k[2]:g}"


def results_markdown(
    results: list[FileResult],
    loo: tuple[Score, dict[str, Setting]] | None,
    long: list[tuple[float, float, float, float, int]],
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
    e = total(ami, "est")
    out.append(
        f"AMI overall as rates of the {e.total:.1f} s of scored reference speech: missed speech "
        f"{pct(e.missed / e.total)}, false alarm {pct(e.false_alarm / e.total)}, confusion "
        f"{pct(e.confusion / e.total)} (tuned on these files; the leave-one-out figure is below)."
    )
    if loo is not None:
        held, chosen = loo
        picks = sorted({setting_text(k) for k in chosen.values()})
        out.append(
            "**Leave one excerpt out**: each AMI file scored with the settings that are best on the other "
            f"nine ({len(DECISION_GRID)} local decisions x {len(THRESHOLD_GRID)} clustering thresholds, "
            f"keeping the two-speaker sample under {pct(SAMPLE_GUARD)} DER): **DER {pct(held.der)}**, "
            f"missed {pct(held.missed / held.total)}, false alarm {pct(held.false_alarm / held.total)}, "
            f"confusion {pct(held.confusion / held.total)}, JER {pct(held.jer)}. Settings chosen: "
            f"{'; '.join(picks)}."
        )
    p = PREVIOUS
    out.append(
        f"The previous pipeline (Silero VAD windows, CAM++ clustering, a home-trained overlap detector) "
        f"on the same files and scoring: DER {pct(p['der'])} (missed {p['missed']:.1f} s, false alarm "
        f"{p['false_alarm']:.1f} s, confusion {p['confusion']:.1f} s), JER {pct(p['jer'])}."
    )
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
        "With one speaker per instant (`overlap_threshold=1`): AMI DER "
        f"{pct(nov.der)} (missed {nov.missed:.1f} s, false alarm {nov.false_alarm:.1f} s, confusion "
        f"{nov.confusion:.1f} s)."
    )
    if ami[0].grid:
        rows = ["| speech / overlap threshold | " + " | ".join(f"{t:g}" for t in THRESHOLD_GRID) + " |"]
        rows.append("|---|" + "---:|" * len(THRESHOLD_GRID))
        for sp, ov in DECISION_GRID:
            cells = []
            for th in THRESHOLD_GRID:
                acc = Score()
                for r in ami:
                    acc += r.grid[(sp, ov, th)]
                sample = next((r.grid[(sp, ov, th)].der for r in results if not r.ami), 0.0)
                mark = "†" if sample > SAMPLE_GUARD else ""
                cells.append(f"{pct(acc.der)}{mark}")
            rows.append(f"| {sp:g} / {ov:g} | " + " | ".join(cells) + " |")
        out.append(
            "AMI DER over the settings grid (columns: clustering threshold; † the two-speaker sample "
            f"is above {pct(SAMPLE_GUARD)} DER there, its two voices merged):\n\n" + "\n".join(rows)
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
    secs = sum(r.seconds for r in results)
    cpu = sum(r.cpu_seconds for r in results)
    dur = sum(r.duration for r in results)
    speed = (
        "Speed (`diarize` with the estimated count, default onnxruntime threads, 2 cores, "
        f"load average {load[0]:.1f} before the run and {load[1]:.1f} at its end, this job included): "
        f"the 11 files, {dur:.0f} s of audio, took {secs:.1f} s: RTF {secs / dur:.3f} wall clock, "
        f"{cpu / dur:.3f} CPU seconds per second of audio."
    )
    for minutes, wall, c, peak, k in long:
        speed += (
            f" {minutes:g} min of the excerpts joined: RTF {wall:.3f} wall clock, {c:.3f} CPU, "
            f"peak traced memory {peak:.0f} MB, {k} speakers."
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
    for i, r in enumerate(results):
        ax.text(i - 0.2, bottom[i] + 1, f"{r.n_est}/{r.n_ref}", ha="center", fontsize=7)
    ax.axhline(14, color="k", lw=0.8, ls="--", label="target 14 % (AMI overall)")
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
    from common.repo import data_root

    from verilive.config import Settings
    from verilive.models.sessions import ModelRegistry
    from verilive.voice.engine import VoiceEngine

    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None)
    ap.add_argument("--no-docs", action="store_true", help="print only; write neither docs nor plot")
    ap.add_argument("--no-loo", action="store_true", help="skip the settings grid and leave-one-out")
    ap.add_argument(
        "--long-minutes", type=float, nargs="*", default=[10.0, 60.0], help="long-input runs; none: skip"
    )
    args = ap.parse_args()

    excerpts = dev_excerpts(data_root(args.data))
    diarizer = VoiceEngine.from_registry(ModelRegistry(Settings())).diarizer
    # Warm-up: the first ONNX calls allocate and are not representative of the speed.
    diarizer.diarize(np.zeros(16000, np.float32) + 0.01 * np.sin(np.arange(16000)), 16000)
    load0 = os.getloadavg()[0]
    results = [run_file(diarizer, ex, grid=not args.no_loo) for ex in excerpts]
    long = [(m, *long_run(diarizer, excerpts, m)) for m in args.long_minutes]
    load1 = os.getloadavg()[0]
    c = diarizer.config
    loo = (
        None
        if args.no_loo
        else leave_one_out(results, (c.speech_threshold, c.overlap_threshold, c.threshold))
    )
    section = results_markdown(results, loo, long, (load0, load1))
    print(section)
    print(f"max resident set size {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if not args.no_docs:
        write_docs(section)
        plot(results, DOCS / "diarization_der.png")
        print(f"wrote {DOCS / 'diarization.md'} and {DOCS / 'diarization_der.png'}")


if __name__ == "__main__":
    main()
