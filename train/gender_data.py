"""The gender training's data: the LibriSpeech speakers, the test split, folds, cached embeddings."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from train.voice_attributes import CACHE_DIR, embed_files, embeddings_cache, hash_order

LIBRI_DIR = "voice/librispeech_251spk_gender"

SEED = 20241121
N_TEST_PER_GENDER = 25

LICENCE = "CC BY 4.0"
ATTRIBUTION = (
    "LibriSpeech ASR corpus (train-clean-100), Vassil Panayotov, Guoguo Chen, Daniel Povey, "
    "Sanjeev Khudanpur; derived from LibriVox public-domain audiobooks; licensed CC BY 4.0 "
    "(openslr.org/12). Subset of 251 speakers x 1 utterance as redistributed in the Resemblyzer "
    "repository (audio_data/librispeech_train-clean-100)."
)


@dataclass(frozen=True)
class Speaker:
    file: str  # relative to the data root
    speaker: str
    male: bool


def read_speakers(root: Path) -> list[Speaker]:
    with (root / LIBRI_DIR / "labels.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    out = [Speaker(f"{LIBRI_DIR}/{r['file']}", r["speaker_id"], r["gender"] == "M") for r in rows]
    if {r["gender"] for r in rows} != {"M", "F"}:
        raise ValueError("labels.csv: gender must be M or F")
    return sorted(out, key=lambda s: s.file)


def _order(key: str) -> str:
    return hash_order(SEED, key)


def split_test(speakers: Sequence[Speaker]) -> tuple[list[Speaker], list[Speaker]]:
    """(development, test): the test set is the first N_TEST_PER_GENDER of each gender in hash order."""
    test: set[str] = set()
    for male in (False, True):
        ranked = sorted((s for s in speakers if s.male == male), key=lambda s: _order(s.speaker))
        test.update(s.speaker for s in ranked[:N_TEST_PER_GENDER])
    return [s for s in speakers if s.speaker not in test], [s for s in speakers if s.speaker in test]


def speaker_folds(speakers: Sequence[Speaker], k: int, salt: str) -> dict[str, int]:
    """Gender-stratified assignment of speakers to k folds (dealt in hash order)."""
    fold: dict[str, int] = {}
    for male in (False, True):
        ranked = sorted((s for s in speakers if s.male == male), key=lambda s: _order(f"{salt}:{s.speaker}"))
        offset = len(fold)
        for i, s in enumerate(ranked):
            fold[s.speaker] = (i + offset) % k
    return fold


@dataclass
class Embeddings:
    units: np.ndarray  # (n, 192) float32
    speaker: np.ndarray  # (n,) str
    male: np.ndarray  # (n,) bool
    condition: np.ndarray  # (n,) str, "<piece>/<channel>" (train.gender.CONDITIONS)

    def take(self, mask: np.ndarray) -> Embeddings:
        return Embeddings(self.units[mask], self.speaker[mask], self.male[mask], self.condition[mask])


def crop_start(speaker: str, length_s: float, frames: int, crop_frames: int) -> int:
    """Where a crop of ``length_s`` seconds of the speaker's utterance starts (seeded)."""
    rng = np.random.default_rng([SEED, int(speaker), int(length_s * 1000)])
    return int(rng.integers(0, frames - crop_frames + 1))


def embed_speakers(speakers: Sequence[Speaker], root: Path, log: bool = True) -> Embeddings:
    """Every condition of every utterance, cached under $VERILIVE_EVAL_CACHE."""
    cache = embeddings_cache("gender", SEED, [s.file for s in speakers])
    if cache.exists():
        z = np.load(cache)
        return Embeddings(z["units"], z["speaker"], z["male"], z["condition"])

    units, spk, male, cond = [], [], [], []
    paths, keys = [root / s.file for s in speakers], [s.speaker for s in speakers]
    for i, condition, t in embed_files(paths, keys, crop_start, "utterances", 25, log):
        units.append(t.unit())
        spk.append(speakers[i].speaker)
        male.append(speakers[i].male)
        cond.append(condition)
    emb = Embeddings(
        np.stack(units).astype(np.float32), np.array(spk), np.array(male, dtype=bool), np.array(cond)
    )
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    np.savez(cache, units=emb.units, speaker=emb.speaker, male=emb.male, condition=emb.condition)
    return emb
