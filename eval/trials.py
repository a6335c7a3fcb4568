"""Deterministic speaker-verification dev trials built from the shared development data.

Two sources (see /work/shared/data/README.md):

* ``voice/librispeech_251spk_gender``: 251 speakers with one read utterance each (1.7-17.2 s).
  Every utterance is cut into two halves, A = [0, n/2) and B = [n/2, n) samples.

  - Same-speaker ("target") trials: A vs B of the same utterance (251 trials). Utterances long
    enough that each third lasts at least :data:`MIN_THIRD_S` seconds are also cut into thirds
    T1, T2, T3, which add the three pairs T1-T2, T1-T3 and T2-T3 (more target trials, so the
    EER is not decided by a handful of targets; the thirds are shorter than the halves, which
    makes these targets slightly harder, never easier).
  - Different-speaker ("non-target") trials: every unordered pair of different speakers
    (i < j in file-name order), the A half of i against the B half of j: C(251, 2) = 31,375.

  Halves of one utterance share recording session, channel and text topic, so the target
  trials are easier than target trials across sessions would be; the numbers are a dev
  check, not a claim about cross-session performance.

* ``voice/speechbrain_samples/two_speaker_sentences``: 2 speakers x 6 whole utterances, all
  C(12, 2) = 66 pairs: 30 same-speaker, 36 different-speaker (labels.csv of that folder).

A snippet is named by (file relative to the data root, first sample, end sample), at the
file's own sample rate (16 kHz for both sources), so any system can score the same audio.

Run ``python -m eval.trials`` to print the counts, ``--tsv FILE`` to write the trial list,
``--write-docs`` to refresh the trial-set section of docs/verification.md.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import sys
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import soundfile as sf
from common.repo import REPO, data_root, replace_section

DOCS_MD = REPO / "docs" / "verification.md"

LIBRI_DIR = "voice/librispeech_251spk_gender"
SB_DIR = "voice/speechbrain_samples/two_speaker_sentences"

#: Minimum length of each third for an utterance to also be cut into thirds.
MIN_THIRD_S = 4.0

#: Subset tags of the trials.
LS_HALF = "ls-half"  # LibriSpeech A/B halves of one utterance (target)
LS_THIRD = "ls-third"  # LibriSpeech thirds of one utterance (target)
LS_NONTARGET = "ls-nontarget"  # LibriSpeech A half of one speaker vs B half of another
SB = "sb"  # SpeechBrain 2 x 6 whole utterances, all pairs


@dataclass(frozen=True, order=True)
class Snippet:
    """A piece of one audio file: samples [start, end) at the file's sample rate."""

    file: str  # relative to the data root, POSIX separators
    start: int
    end: int
    sample_rate: int
    speaker: str

    @property
    def key(self) -> str:
        return f"{self.file}@{self.start}-{self.end}"

    @property
    def duration_s(self) -> float:
        return (self.end - self.start) / self.sample_rate

    def load(self, root: Path) -> np.ndarray:
        """Mono float32 samples of the snippet, at :attr:`sample_rate`."""
        return _load_file(str(root / self.file))[self.start : self.end]


@dataclass(frozen=True)
class Trial:
    a: Snippet
    b: Snippet
    target: bool
    subset: str

    @property
    def speakers(self) -> tuple[str, ...]:
        return tuple(sorted({self.a.speaker, self.b.speaker}))


@lru_cache(maxsize=64)
def _load_file(path: str) -> np.ndarray:
    wave, _ = sf.read(path, dtype="float32", always_2d=True)
    out = wave.mean(axis=1).astype(np.float32) if wave.shape[1] > 1 else wave[:, 0].copy()
    out.setflags(write=False)
    return out


def _frames(path: Path) -> tuple[int, int]:
    info = sf.info(str(path))
    return int(info.frames), int(info.samplerate)


def _libri_trials(root: Path) -> list[Trial]:
    folder = root / LIBRI_DIR
    with open(folder / "labels.csv", newline="") as fh:
        rows = sorted(csv.DictReader(fh), key=lambda r: r["file"])
    halves: list[tuple[Snippet, Snippet]] = []
    targets: list[Trial] = []
    for row in rows:
        rel = f"{LIBRI_DIR}/{row['file']}"
        spk = f"ls:{row['speaker_id']}"
        n, sr = _frames(root / rel)
        mid = n // 2
        a = Snippet(rel, 0, mid, sr, spk)
        b = Snippet(rel, mid, n, sr, spk)
        halves.append((a, b))
        targets.append(Trial(a, b, True, LS_HALF))
        if n // 3 >= MIN_THIRD_S * sr:
            cuts = [0, n // 3, (2 * n) // 3, n]
            thirds = [Snippet(rel, cuts[k], cuts[k + 1], sr, spk) for k in range(3)]
            for i in range(3):
                for j in range(i + 1, 3):
                    targets.append(Trial(thirds[i], thirds[j], True, LS_THIRD))
    nontargets = [
        Trial(halves[i][0], halves[j][1], False, LS_NONTARGET)
        for i in range(len(halves))
        for j in range(i + 1, len(halves))
    ]
    return targets + nontargets


def _sb_trials(root: Path) -> list[Trial]:
    folder = root / SB_DIR
    with open(folder / "labels.csv", newline="") as fh:
        rows = sorted(csv.DictReader(fh), key=lambda r: r["file"])
    snippets = []
    for row in rows:
        # labels.csv names the original .wav files; the shared copy is lossless FLAC.
        rel = f"{SB_DIR}/{Path(row['file']).stem}.flac"
        n, sr = _frames(root / rel)
        snippets.append(Snippet(rel, 0, n, sr, f"sb:{row['speaker_id']}"))
    return [
        Trial(snippets[i], snippets[j], snippets[i].speaker == snippets[j].speaker, SB)
        for i in range(len(snippets))
        for j in range(i + 1, len(snippets))
    ]


def build_trials(root: str | os.PathLike[str] | None = None) -> list[Trial]:
    """All dev trials, in a fixed order (LibriSpeech targets, LibriSpeech non-targets, SpeechBrain)."""
    r = data_root(root)
    return _libri_trials(r) + _sb_trials(r)


def snippets_of(trials: list[Trial]) -> list[Snippet]:
    """Distinct snippets of the trials, in first-use order."""
    seen: dict[str, Snippet] = {}
    for t in trials:
        for s in (t.a, t.b):
            seen.setdefault(s.key, s)
    return list(seen.values())


def trials_digest(trials: list[Trial]) -> str:
    """sha256 over the trial list (snippet keys and labels): identifies the exact trial set."""
    h = hashlib.sha256()
    for t in trials:
        h.update(f"{t.a.key}\t{t.b.key}\t{int(t.target)}\t{t.subset}\n".encode())
    return h.hexdigest()


def labels_of(trials: list[Trial]) -> np.ndarray:
    return np.array([t.target for t in trials], dtype=bool)


def summary(trials: list[Trial]) -> dict[str, object]:
    """Counts and durations, for the docs."""
    snips = snippets_of(trials)
    by_subset = Counter((t.subset, t.target) for t in trials)
    durs = {
        name: np.array(
            sorted({s.key: s.duration_s for t in trials if t.subset == name for s in (t.a, t.b)}.values())
        )
        for name in (LS_HALF, LS_THIRD, SB)
    }
    return {
        "trials": len(trials),
        "targets": int(sum(t.target for t in trials)),
        "nontargets": int(sum(not t.target for t in trials)),
        "snippets": len(snips),
        "speakers": len({s.speaker for s in snips}),
        "by_subset": {f"{k[0]}/{'target' if k[1] else 'nontarget'}": v for k, v in sorted(by_subset.items())},
        "durations": durs,
        "total_audio_s": float(sum(s.duration_s for s in snips)),
        "digest": trials_digest(trials),
    }


def _dur_row(name: str, d: np.ndarray) -> str:
    return (
        f"| {name} | {d.size} | {d.min():.2f} | {np.median(d):.2f} | {d.mean():.2f} | {d.max():.2f} |"
        if d.size
        else f"| {name} | 0 | | | | |"
    )


def markdown(trials: list[Trial]) -> str:
    s = summary(trials)
    sub = s["by_subset"]
    assert isinstance(sub, dict)
    durs = s["durations"]
    assert isinstance(durs, dict)
    lines = [
        "Built by `eval/trials.py` (deterministic; no randomness) from the shared development data.",
        "",
        "| subset | what | target trials | non-target trials |",
        "|---|---|---:|---:|",
        f"| `{LS_HALF}` | LibriSpeech utterance cut in halves, A vs B "
        f"| {sub.get(LS_HALF + '/target', 0)} | |",
        f"| `{LS_THIRD}` | utterances with thirds of at least {MIN_THIRD_S:g} s "
        f"(≥ {3 * MIN_THIRD_S:g} s long): thirds T1-T2, T1-T3, T2-T3 "
        f"| {sub.get(LS_THIRD + '/target', 0)} | |",
        f"| `{LS_NONTARGET}` | A half of speaker i vs B half of speaker j, all i < j | "
        f"| {sub.get(LS_NONTARGET + '/nontarget', 0):,} |",
        f"| `{SB}` | SpeechBrain 2 speakers × 6 whole utterances, all pairs | {sub.get(SB + '/target', 0)} "
        f"| {sub.get(SB + '/nontarget', 0)} |",
        f"| **all** | | **{s['targets']:,}** | **{s['nontargets']:,}** |",
        "",
        f"{s['trials']:,} trials over {s['snippets']:,} distinct snippets of {s['speakers']} speakers "
        f"({float(s['total_audio_s']) / 60:.1f} min of snippet audio, overlapping halves and thirds counted "
        f"separately). Target prior of the whole set: π0 = {s['targets']} / {s['trials']} = "
        f"{int(s['targets']) / int(s['trials']):.4f}. Trial-list sha256: `{s['digest'][:16]}…`.",
        "",
        "Snippet durations (seconds):",
        "",
        "| snippets | count | min | median | mean | max |",
        "|---|---:|---:|---:|---:|---:|",
        _dur_row("LibriSpeech halves", durs[LS_HALF]),
        _dur_row("LibriSpeech thirds", durs[LS_THIRD]),
        _dur_row("SpeechBrain utterances", durs[SB]),
        "",
        "Caveats: the two halves (or thirds) of one utterance share session, microphone and text topic, so",
        "target trials are same-session and easier than cross-session ones; every LibriSpeech non-target",
        "trial reuses the same 502 halves. Seven utterances are shorter than 3 s (halves under 1.5 s).",
        "The LibriSpeech speakers come from train-clean-100 (the files are Resemblyzer's demo data): a",
        "model trained on LibriSpeech train-clean-100 has heard them, and neither the Resemblyzer nor the",
        "CAM++ package documents its training set precisely enough to rule that out.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--data", help="shared data folder (default: $VERILIVE_SHARED_DIR/data)")
    p.add_argument("--tsv", help="write the trial list to this TSV file")
    p.add_argument(
        "--write-docs", action="store_true", help="refresh the trial section of docs/verification.md"
    )
    args = p.parse_args(argv)
    trials = build_trials(args.data)
    if args.tsv:
        with open(args.tsv, "w", newline="") as fh:
            w = csv.writer(fh, delimiter="\t", lineterminator="\n")
            w.writerow(
                [
                    "file_a",
                    "start_a",
                    "end_a",
                    "file_b",
                    "start_b",
                    "end_b",
                    "sample_rate",
                    "target",
                    "subset",
                ]
            )
            for t in trials:
                w.writerow(
                    [
                        t.a.file,
                        t.a.start,
                        t.a.end,
                        t.b.file,
                        t.b.start,
                        t.b.end,
                        t.a.sample_rate,
                        int(t.target),
                        t.subset,
                    ]
                )
    print(markdown(trials))
    if args.write_docs:
        replace_section(DOCS_MD, "trials", markdown(trials), "Trial set")
    return 0


if __name__ == "__main__":
    sys.exit(main())
