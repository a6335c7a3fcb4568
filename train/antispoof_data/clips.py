"""The clip record, paths and audio helpers that every kind of anti-spoofing data shares."""

from __future__ import annotations

import csv
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

SR = 16000
REPO = Path(__file__).resolve().parents[2]
SHARED_VOICE = Path(os.environ.get("VERILIVE_SHARED_DIR", REPO.parent / "shared")) / "data" / "voice"
DEFAULT_CACHE = Path(os.environ.get("VERILIVE_TRAIN_CACHE", "/tmp/verilive-antispoof"))
# Generators no model is trained on: the shipped model's own check against a generator it never saw
# (leave-one-generator-out measures short fold trainings instead). The LPC vocoder in training moved
# the leave-one-generator-out errors between generators without lowering the mean, so it was not
# adopted (docs/antispoof.md, "What we tried").
EVAL_ONLY = frozenset({"lpc-vocoder"})


@dataclass
class Clip:
    id: str
    path: str  # relative to the cache dir
    label: str  # bonafide | replay | tts | vc
    generator: str
    speaker: str  # split group: speaker (bona fide and derived spoofs) or voice (TTS)
    source: str  # where the speech (or its source) comes from
    licence: str
    train_ok: int  # 1 if the shipped model may be trained on it
    channel: str  # finishing applied
    duration_s: float


@dataclass
class Raw:
    """A bona fide piece before finishing (source for derived spoofs too)."""

    id: str
    wave: np.ndarray
    speaker: str
    source: str
    licence: str
    train_ok: int


@dataclass
class Spoof:
    id: str
    wave: np.ndarray
    label: str
    generator: str
    speaker: str
    source: str
    licence: str


def rng_for(key: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(key.encode()))


def load(path: Path, sr: int = SR) -> np.ndarray:
    x, fs = sf.read(path, dtype="float32", always_2d=True)
    x = x.mean(axis=1)
    if fs != sr:
        x = soxr.resample(x, fs, sr, quality="HQ").astype(np.float32)
    return np.ascontiguousarray(x, dtype=np.float32)


def chunks(x: np.ndarray, seconds: float = 5.0, min_seconds: float = 2.0) -> Iterator[np.ndarray]:
    n, m = int(seconds * SR), int(min_seconds * SR)
    for s in range(0, x.size, n):
        piece = x[s : s + n]
        if piece.size >= m:
            yield piece


def trim(x: np.ndarray, db: float = 45.0) -> np.ndarray:
    """Drop leading/trailing stretches more than ``db`` below the loudest 20 ms frame."""
    hop = 320
    if x.size < hop * 3:
        return x
    frames = x[: x.size // hop * hop].reshape(-1, hop)
    e = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    keep = np.flatnonzero(e > e.max() - db)
    if keep.size == 0:
        return x
    a, b = max(0, keep[0] - 5), min(len(e), keep[-1] + 6)
    return x[a * hop : b * hop]


def for_training(clips: list[Clip]) -> list[Clip]:
    """The clips a model may see in training, validation or its in-domain test: all but ``EVAL_ONLY``."""
    return [c for c in clips if c.generator not in EVAL_ONLY]


def read_manifest(cache: Path = DEFAULT_CACHE) -> list[Clip]:
    """Rows of ``cache/manifest.csv`` (or of the CSV file ``cache`` itself)."""
    with open(cache if cache.suffix == ".csv" else cache / "manifest.csv") as f:
        return [
            Clip(**{**row, "train_ok": int(row["train_ok"]), "duration_s": float(row["duration_s"])})
            for row in csv.DictReader(f)
        ]
