"""What the age and gender trainings share: the engine, the audio, seeded order and cached CAM++ pieces.

Both fit a small model on ``VoiceEngine.create_template(audio, channel).unit()`` of a whole
recording and of crops of 1, 2 and 4 s, through both channels (MIC, TEL), cached under
``$VERILIVE_EVAL_CACHE``; both split by hashing ``seed:key`` with their own seed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import soundfile as sf
from common.repo import source_hash

if TYPE_CHECKING:
    from verilive.audio import Audio
    from verilive.voice.engine import VoiceEngine
    from verilive.voice.templates import VoiceTemplate

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "src" / "verilive" / "models" / "manifest.json"
CACHE_DIR = Path(os.environ.get("VERILIVE_EVAL_CACHE", "/tmp/verilive-eval-cache"))
CROPS_S = (1.0, 2.0, 4.0)
CHANNELS = ("MIC", "TEL")

M = TypeVar("M")


def make_engine() -> VoiceEngine:  # imported lazily: only the embedding steps need the models
    from verilive.config import Settings
    from verilive.models.sessions import ModelRegistry
    from verilive.voice.engine import VoiceEngine

    return VoiceEngine.from_registry(ModelRegistry(Settings(require_models=True)))


def read_audio(path: Path) -> Audio:
    from verilive.audio import Audio

    wave, sr = sf.read(str(path), dtype="float32", always_2d=True)
    return Audio(np.ascontiguousarray(wave), int(sr))


def hash_order(seed: int, key: str) -> str:
    """The sort key of ``key`` in sha256(seed:key) order."""
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def embeddings_key(seed: int, files: Sequence[str]) -> str:
    """Cache key of the embeddings of ``files``: the runtime code and models that make them, the
    seed, the crops and the channels."""
    return hashlib.sha256(
        json.dumps(
            [
                source_hash(
                    "verilive.voice.engine",
                    "verilive.voice.campplus",
                    "verilive.voice.vad",
                    "verilive.voice.channel",
                    extra=[MANIFEST],
                ),
                seed,
                CROPS_S,
                CHANNELS,
                list(files),
            ]
        ).encode()
    ).hexdigest()[:16]


def embeddings_cache(kind: str, seed: int, files: Sequence[str]) -> Path:
    """Where the embeddings of ``files`` for the ``kind`` training ("age", "gender") are cached."""
    return CACHE_DIR / f"{kind}-embeddings-{embeddings_key(seed, files)}.npz"


def embed_files(
    paths: Sequence[Path],
    crop_keys: Sequence[str],
    crop_start: Callable[[str, float, int, int], int],
    noun: str,
    every: int,
    log: bool = True,
) -> Iterator[tuple[int, str, VoiceTemplate]]:
    """``(index, "<piece>/<channel>", template)`` of every piece of every recording of ``paths``
    (:func:`templates`; ``crop_start(crop_keys[index], ...)`` places its crops), with one engine; with
    ``log``, the progress on stderr every ``every`` recordings, counted as ``noun``."""
    engine = make_engine()
    t0 = time.time()
    for i, (path, key) in enumerate(zip(paths, crop_keys, strict=True)):
        for condition, t in templates(engine, read_audio(path), partial(crop_start, key)):
            yield i, condition, t
        if log and (i + 1) % every == 0:
            print(f"  embedded {i + 1}/{len(paths)} {noun} ({time.time() - t0:.0f} s)", file=sys.stderr)


def pieces(audio: Audio, crop_start: Callable[[float, int, int], int]) -> list[tuple[str, Audio]]:
    """``("full", audio)`` and a crop of each of :data:`CROPS_S` that fits (``"1s"``, ``"2s"``,
    ``"4s"``); ``crop_start(length_s, frames, crop_frames)`` places each crop."""
    out = [("full", audio)]
    n = audio.frames
    for length in CROPS_S:
        m = round(length * audio.sample_rate)
        if m > n:
            continue
        start = crop_start(length, n, m)
        crop = type(audio)(np.ascontiguousarray(audio.samples[start : start + m]), audio.sample_rate)
        out.append((f"{length:g}s", crop))
    return out


def templates(
    engine: VoiceEngine, audio: Audio, crop_start: Callable[[float, int, int], int]
) -> Iterator[tuple[str, VoiceTemplate]]:
    """``("<piece>/<channel>", template)`` of every piece of ``audio`` through each of :data:`CHANNELS`;
    a piece without speech gives none."""
    from verilive.voice.engine import NoSpeech
    from verilive.voice.schemas import ChannelType

    for name, piece in pieces(audio, crop_start):
        analysis = engine.analyse(piece)
        for ch in CHANNELS:
            try:
                # plain CAM++ views: the attribute models are fitted and served on them
                t = engine.create_template(piece, ChannelType(ch), analysis=analysis, adapted_telephone=False)
            except NoSpeech:
                continue
            yield f"{name}/{ch}", t


def rounded(a: np.ndarray) -> list[float]:
    """Seven significant digits, for the model JSON files."""
    return [float(f"{v:.7g}") for v in np.asarray(a, dtype=np.float64)]


@dataclass(frozen=True)
class LinearFit:
    """A linear model on standardised embeddings: ``score(u) = ((u − mean) / scale) · weights + bias``
    (the age model maps the score to years, the gender model to P(male)); ``l2`` the strength it was
    fitted with."""

    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float
    l2: float

    def score(self, units: np.ndarray) -> np.ndarray:
        return ((units - self.mean) / self.scale) @ self.weights + self.bias

    def model_fields(self) -> dict[str, Any]:
        """The model JSON's entries for the embedding space and the parameters, in the file's order."""
        from verilive.voice.engine import EMBED_RELU, INIT_DATA_ID

        return {
            "init_data_id": INIT_DATA_ID,
            "embed_relu": EMBED_RELU,
            "dim": int(self.weights.size),
            "mean": rounded(self.mean),
            "scale": rounded(self.scale),
            "weights": rounded(self.weights),
            "bias": float(f"{self.bias:.7g}"),
            "l2": self.l2,
        }


def standardisation(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and standard deviation (at least 1e-6) of the rows of ``x``."""
    return x.mean(axis=0), np.maximum(x.std(axis=0), 1e-6)


def choose_l2_by_cv(
    units: np.ndarray,
    targets: np.ndarray,
    folds: np.ndarray,
    n_folds: int,
    lambdas: Sequence[float],
    fit: Callable[[np.ndarray, np.ndarray, float], M],
    predict: Callable[[M, np.ndarray], np.ndarray],
    loss: Callable[[np.ndarray], float],
) -> tuple[float, dict[float, float]]:
    """The strength of ``lambdas`` whose out-of-fold predictions (each of folds ``0..n_folds-1`` predicted
    by ``fit`` on the others) have the lowest ``loss`` (ties: the stronger); and every strength's loss."""
    losses: dict[float, float] = {}
    for l2 in lambdas:
        p = np.empty(len(folds))
        for k in range(n_folds):
            m = fit(units[folds != k], targets[folds != k], l2)
            p[folds == k] = predict(m, units[folds == k])
        losses[l2] = loss(p)
    best = min(losses.values())
    return max(l2 for l2, v in losses.items() if v <= best + 1e-12), losses
