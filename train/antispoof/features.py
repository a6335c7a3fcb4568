"""Per-clip features beside the spectrogram: utterance cues, CAM++ front output, Whisper statistics."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from train.antispoof_data import Clip
from verilive.voice.antispoof import SR, whisper_input, whisper_stats
from verilive.voice.utterance_cues import FEATURE_NAMES, utterance_features


def _cue_worker(path: str) -> np.ndarray:
    x, sr = sf.read(path, dtype="float32")
    assert sr == SR
    return utterance_features(x)


_FCM_ANTI: Any = None


def antispoof_engine(path: Path | None = None, intra_op_threads: int = 0) -> Any:
    """The runtime ``AntiSpoof`` on the model at ``path`` (default: the packaged one), its CAM++ model
    and Whisper encoder from the installed model store."""
    from verilive.models.sessions import ModelRegistry
    from verilive.voice.antispoof import AntiSpoof
    from verilive.voice.campplus import MODEL_ID

    registry = ModelRegistry(ids=[MODEL_ID, WHISPER_MODEL])
    return AntiSpoof(path, registry=registry, intra_op_threads=intra_op_threads)


def front_antispoof() -> Any:
    """This process's ``AntiSpoof`` on one intra-op thread, for its CAM++ front output (workers)."""
    global _FCM_ANTI
    if _FCM_ANTI is None:
        _FCM_ANTI = antispoof_engine(intra_op_threads=1)
    return _FCM_ANTI


def _fcm_worker(path: str) -> np.ndarray:
    anti = front_antispoof()
    x, sr = sf.read(path, dtype="float32")
    assert sr == SR
    return anti.fcm_frames(x).astype(np.float16)


# The Whisper encoder of the fourth branch: base (its frozen probe was better left out of sources
# than tiny.en's, 24.7 against 27.6 % mean; docs/antispoof.md, "What we tried").
WHISPER_MODEL = "whisper_base_encoder"
_WHISPER: Any = None


def whisper_encoder(threads: int = 1) -> Any:
    """The store's Whisper encoder on ``threads`` intra-op threads (training workers use one each)."""
    from verilive.models.sessions import ModelRegistry, cpu_session
    from verilive.voice.whisper import WhisperEncoder

    path = ModelRegistry(ids=[WHISPER_MODEL]).store.model_path(WHISPER_MODEL)
    return WhisperEncoder(cpu_session(path, threads))


def clip_whisper(x: np.ndarray) -> np.ndarray:
    """The runtime's Whisper statistics of one 16 kHz clip (``AntiSpoof.whisper_features``)."""
    global _WHISPER
    if _WHISPER is None:
        _WHISPER = whisper_encoder()
    return whisper_stats(_WHISPER.layers(whisper_input(x)))


def _whisper_worker(path: str) -> np.ndarray:
    x, sr = sf.read(path, dtype="float32")
    assert sr == SR
    return clip_whisper(x)


def load_whisper(cache: Path, clips: list[Clip], workers: int = 2) -> np.ndarray:
    """Whisper layer statistics of every clip (the runtime function), cached in
    ``<cache>/whisper_<model>.npz``."""
    from concurrent.futures import ProcessPoolExecutor

    store = cache / f"whisper_{WHISPER_MODEL}.npz"
    ids = [c.id for c in clips]
    if store.exists():
        with np.load(store, allow_pickle=False) as z:
            if list(z["ids"]) == ids:
                return z["X"]
    t = time.time()
    with ProcessPoolExecutor(workers) as ex:
        x = np.stack(list(ex.map(_whisper_worker, [str(cache / c.path) for c in clips], chunksize=16)))
    np.savez(store, ids=np.array(ids), X=x)
    print(f"Whisper statistics of {len(clips)} clips in {time.time() - t:.0f} s", flush=True)
    return x


def load_fcm(cache: Path, clips: list[Clip], workers: int = 2) -> list[np.ndarray]:
    """CAM++ front output (320, frames) of every clip (the runtime function), cached in
    ``<cache>/fcm_frames.npz``."""
    from concurrent.futures import ProcessPoolExecutor

    store = cache / "fcm_frames.npz"
    ids = [c.id for c in clips]
    if store.exists():
        with np.load(store, allow_pickle=False) as z:
            if list(z["ids"]) == ids:
                off, x = z["offsets"], z["X"]
                return [x[:, off[i] : off[i + 1]] for i in range(len(ids))]
    t = time.time()
    with ProcessPoolExecutor(workers) as ex:
        hs = list(ex.map(_fcm_worker, [str(cache / c.path) for c in clips], chunksize=16))
    offsets = np.cumsum([0] + [h.shape[1] for h in hs])
    np.savez(store, ids=np.array(ids), offsets=offsets, X=np.concatenate(hs, axis=1))
    print(f"CAM++ front output of {len(clips)} clips in {time.time() - t:.0f} s", flush=True)
    return hs


def load_cues(cache: Path, clips: list[Clip], workers: int = 2) -> np.ndarray:
    """Utterance cues of every clip (the runtime function), cached in ``<cache>/cues.npz``."""
    from concurrent.futures import ProcessPoolExecutor

    store = cache / "cues.npz"
    ids = [c.id for c in clips]
    if store.exists():
        with np.load(store, allow_pickle=False) as z:
            if list(z["ids"]) == ids and list(z["names"]) == list(FEATURE_NAMES):
                return z["X"]
    t = time.time()
    with ProcessPoolExecutor(workers) as ex:
        x = np.stack(list(ex.map(_cue_worker, [str(cache / c.path) for c in clips], chunksize=16)))
    np.savez(store, ids=np.array(ids), names=np.array(FEATURE_NAMES), X=x)
    print(f"utterance cues of {len(clips)} clips in {time.time() - t:.0f} s", flush=True)
    return x


def fcm_stats(h: np.ndarray) -> np.ndarray:
    """(1280,) statistics over time of one (320, frames) front output: per channel the mean and
    standard deviation, and the mean absolute value and standard deviation of its frame-to-frame
    change (how fast each channel moves; a single frame counts as no change). The change statistics
    were chosen by speaker-grouped cross-validation on the training speakers
    (``python -m train.antispoof_stats_cv``), not on the test split."""
    x = np.asarray(h, np.float64)
    d = np.diff(x, axis=1)
    n = max(d.shape[1], 1)
    dm = d.sum(axis=1) / n
    dstd = np.sqrt(((d - dm[:, None]) ** 2).sum(axis=1) / n)
    return np.concatenate([x.mean(axis=1), x.std(axis=1), np.abs(d).sum(axis=1) / n, dstd])
