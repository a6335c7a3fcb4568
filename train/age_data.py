"""The age training's data: labelled clips and groups, the held-aside split, folds, cached embeddings."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from train.voice_attributes import CACHE_DIR, embed_files, embeddings_cache, hash_order
from verilive.unionfind import find_root

SO_DIR = "voice/age_speechocean762"
CV_DIR = "voice/age_cv_es_mx"
SO, CV = "so762", "cv_es_mx"
SOURCES = (SO, CV)
SOURCE_NAME = {SO: "speechocean762", CV: "Common Voice es-MX"}

SEED = 20241124
HELD_FRACTION = 0.2
N_FOLDS = 5
#: The pieces of each clip: the whole clip and crops (train.voice_attributes.CROPS_S).
PIECES = ("full", "4s", "2s", "1s")

#: Age brackets: Common Voice's (as grouped by the corpus author) plus two below 20.
BRACKETS = ("6-12", "13-19", "20-29", "30-49", "50-69")
ADULT_BRACKETS = ("20-29", "30-49", "50-69")
MIDPOINT = {"20-29": 24.5, "30-49": 39.5, "50-69": 59.5}
CHILD_MAX, ADULT_MIN = 12, 20

LICENCES = {
    SO: "Apache-2.0",
    CV: "CC0-1.0",
}
ATTRIBUTIONS = {
    SO: "speechocean762: Junbo Zhang, Zhiwen Zhang, Yongqing Wang, Zhiyong Yan, Qiong Song, Yukai Huang, "
    "Ke Li, Daniel Povey, Yujun Wang, 'speechocean762: An Open-Source Non-native English Speech Corpus "
    "For Pronunciation Assessment', Interspeech 2021 (arXiv 2104.01378; OpenSLR SLR101); Apache-2.0. "
    "From github.com/jimbozhang/speechocean762@613968e3.",
    CV: "Mozilla Common Voice (Spanish) clips, CC0-1.0, as collected in github.com/JazminPS/"
    "VoiceCorpusProject@2efa81fa (Common Voice part only).",
}


@dataclass(frozen=True)
class Clip:
    file: str  # relative to the data root
    speaker: str
    group: str  # speakers that may be one person (possible_same_speaker.csv) share a group
    source: str
    bracket: str
    age: float | None  # exact years (speechocean762) or None (a bracket only)
    male: bool

    @property
    def years(self) -> float:
        """The exact age, or the bracket's midpoint."""
        return self.age if self.age is not None else MIDPOINT[self.bracket]


def bracket_of(age: float) -> str:
    for b in BRACKETS:
        lo, hi = (int(x) for x in b.split("-"))
        if lo <= age <= hi:
            return b
    raise ValueError(f"age {age} outside {BRACKETS}")


def _groups(names: Sequence[str], pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Union-find over the listed pairs; each group is named by its smallest member."""
    parent = {n: n for n in names}

    def root(n: str) -> str:
        return find_root(parent, n)

    for a, b in pairs:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {n: root(n) for n in names}


def read_clips(root: Path) -> list[Clip]:
    clips: list[Clip] = []
    with (root / SO_DIR / "labels.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            age = float(r["age"])
            male = r["gender"] == "male"
            clips.append(
                Clip(f"{SO_DIR}/{r['file']}", r["speaker"], r["speaker"], SO, bracket_of(age), age, male)
            )
    with (root / CV_DIR / "labels.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    # The pair list names clips by stem with a .flac suffix; the audio is the source MP3.
    with (root / CV_DIR / "possible_same_speaker.csv").open(newline="") as f:
        pairs = [(Path(r["file_a"]).stem, Path(r["file_b"]).stem) for r in csv.DictReader(f)]
    stems = [Path(r["file"]).stem for r in rows]
    unknown = {s for p in pairs for s in p} - set(stems)
    if unknown:
        raise ValueError(f"possible_same_speaker.csv names unknown clips: {sorted(unknown)}")
    group = _groups(stems, pairs)
    for r, stem in zip(rows, stems, strict=True):
        if r["age"] not in MIDPOINT:
            raise ValueError(f"{r['file']}: unexpected bracket {r['age']!r}")
        male = r["gender"] == "male"
        clips.append(
            Clip(f"{CV_DIR}/{r['file']}", r["speaker"], f"cves_{group[stem]}", CV, r["age"], None, male)
        )
    return sorted(clips, key=lambda c: c.file)


def _order(key: str) -> str:
    return hash_order(SEED, key)


def _strata(clips: Iterable[Clip]) -> dict[tuple[str, str], list[str]]:
    """Groups by (source, bracket of the group's first clip), sorted; a group crossing brackets
    (possible_same_speaker.csv) is stratified by its first clip."""
    first: dict[str, Clip] = {}
    for c in sorted(clips, key=lambda c: c.file):
        first.setdefault(c.group, c)
    out: dict[tuple[str, str], list[str]] = {}
    for g, c in sorted(first.items()):
        out.setdefault((c.source, c.bracket), []).append(g)
    return out


def split_held(clips: Sequence[Clip]) -> tuple[list[Clip], list[Clip]]:
    """(development, held aside): per source and bracket, the first HELD_FRACTION of the groups in
    sha256(seed:group) order."""
    held: set[str] = set()
    for groups in _strata(clips).values():
        ranked = sorted(groups, key=_order)
        held.update(ranked[: round(HELD_FRACTION * len(ranked))])
    return [c for c in clips if c.group not in held], [c for c in clips if c.group in held]


def group_folds(clips: Iterable[Clip], k: int, salt: str) -> dict[str, int]:
    """Groups dealt to k folds in hash order, stratified by source and bracket."""
    fold: dict[str, int] = {}
    offset = 0
    for key in sorted(s := _strata(clips)):
        ranked = sorted(s[key], key=lambda g: _order(f"{salt}:{g}"))
        for i, g in enumerate(ranked):
            fold[g] = (i + offset) % k
        offset += len(ranked)
    return fold


@dataclass
class Embeddings:
    units: np.ndarray  # (n, 192) float32
    file: np.ndarray  # (n,) str, the clip
    condition: np.ndarray  # (n,) str, "<piece>/<channel>"
    speech_ms: np.ndarray  # (n,) float, the template's speech length

    def take(self, mask: np.ndarray) -> Embeddings:
        return Embeddings(self.units[mask], self.file[mask], self.condition[mask], self.speech_ms[mask])


def crop_start(clip_file: str, length_s: float, frames: int, crop_frames: int) -> int:
    seed = int(_order(f"crop:{clip_file}:{length_s}")[:8], 16)
    return int(np.random.default_rng(seed).integers(0, frames - crop_frames + 1))


def embed_clips(clips: Sequence[Clip], root: Path, log: bool = True) -> Embeddings:
    """Every piece of every clip through both channels, cached under $VERILIVE_EVAL_CACHE."""
    names = [c.file for c in clips]
    cache = embeddings_cache("age", SEED, names)
    if cache.exists():
        z = np.load(cache)
        return Embeddings(z["units"], z["clip"], z["condition"], z["speech_ms"])

    units, files, cond, speech = [], [], [], []
    for i, condition, t in embed_files([root / n for n in names], names, crop_start, "clips", 50, log):
        units.append(t.unit())
        files.append(clips[i].file)
        cond.append(condition)
        speech.append(t.speech_ms)
    emb = Embeddings(
        np.stack(units).astype(np.float32),
        np.array(files),
        np.array(cond),
        np.array(speech, dtype=np.float64),
    )
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    # "clip", not "file": np.savez's own first parameter is called file
    np.savez(cache, units=emb.units, clip=emb.file, condition=emb.condition, speech_ms=emb.speech_ms)
    return emb


@dataclass
class Rows:
    """The embeddings of one channel with their clips' labels, row for row."""

    units: np.ndarray
    speech_ms: np.ndarray
    piece: np.ndarray  # full, 4s, 2s, 1s
    clips: list[Clip]
    source: np.ndarray
    bracket: np.ndarray
    years: np.ndarray  # exact age or bracket midpoint
    group: np.ndarray

    @classmethod
    def of(cls, emb: Embeddings, clips: Sequence[Clip], channel: str) -> Rows:
        by_file = {c.file: c for c in clips}
        m = np.array(
            [f in by_file and c.endswith("/" + channel) for f, c in zip(emb.file, emb.condition, strict=True)]
        )
        e = emb.take(m)
        cs = [by_file[f] for f in e.file]
        return cls(
            units=e.units,
            speech_ms=e.speech_ms,
            piece=np.array([c.split("/")[0] for c in e.condition]),
            clips=cs,
            source=np.array([c.source for c in cs]),
            bracket=np.array([c.bracket for c in cs]),
            years=np.array([c.years for c in cs], dtype=np.float64),
            group=np.array([c.group for c in cs]),
        )

    def take(self, mask: np.ndarray) -> Rows:
        idx = np.flatnonzero(mask)
        return Rows(
            self.units[idx],
            self.speech_ms[idx],
            self.piece[idx],
            [self.clips[i] for i in idx],
            self.source[idx],
            self.bracket[idx],
            self.years[idx],
            self.group[idx],
        )

    def __len__(self) -> int:
        return len(self.years)

    def folds(self, salt: str) -> np.ndarray:
        fold_of = group_folds(self.clips, N_FOLDS, salt)
        return np.array([fold_of[g] for g in self.group])
