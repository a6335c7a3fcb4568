"""Split and data loading: which speaker trains, validates or tests, and the cached clip features."""

from __future__ import annotations

import time
import zlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from train.antispoof_data import Clip, for_training, read_manifest
from verilive.voice.antispoof import CLASSES, SR

SEED = 20240611


def crc(s: str) -> int:
    return zlib.crc32(s.encode())


def split_of(clips: list[Clip]) -> dict[str, str]:
    """Speaker -> 'train' | 'val' | 'test' | 'ood' (never trained on)."""
    bona = {c.speaker for c in clips if c.label == "bonafide" and c.train_ok}
    split = {s: ("test" if crc(s) % 4 == 0 else "train") for s in bona}
    for s in {c.speaker for c in clips if not c.train_ok}:
        split[s] = "ood"
    by_gen: dict[str, set[str]] = defaultdict(set)
    for c in clips:
        if c.speaker not in split:
            by_gen[c.generator].add(c.speaker)
    for spk in by_gen.values():
        order = sorted(spk, key=crc)
        n_test = max(1, len(order) // 4) if len(order) > 1 else 0
        for i, s in enumerate(order):
            split[s] = "test" if i < n_test else "train"
    for s, p in split.items():
        if p == "train" and crc("val/" + s) % 6 == 0:
            split[s] = "val"
    return split


@dataclass
class Data:
    clips: list[Clip]
    feats: list[np.ndarray]
    part: np.ndarray  # train | val | test | ood
    lab: np.ndarray
    gen: np.ndarray
    split: dict[str, str]
    cues: np.ndarray | None = None  # (clips, len(FEATURE_NAMES)) utterance cues
    fcm: list[np.ndarray] | None = None  # per clip (320, frames) CAM++ front output, float16
    whisper: np.ndarray | None = None  # (clips, depths * dims * 2) Whisper layer statistics


def subclass_of(label: str, generator: str) -> str:
    """Training target: the generator (NII vocoders merged); the network's outputs are summed per
    class, so one class can hold spoofs whose cues point in opposite directions (WORLD, Griffin-Lim)."""
    if label == "bonafide":
        return "bonafide"
    return "nii" if generator.startswith("nii-") else generator


def subclasses(d: Data) -> list[tuple[str, str]]:
    """(subclass, class) pairs, in class order."""
    pairs = {(subclass_of(lab, g), str(lab)) for lab, g in zip(d.lab, d.gen, strict=True)}
    return sorted(pairs, key=lambda p: (CLASSES.index(p[1]), p[0]))


def load_data(cache: Path, extract: Callable[[np.ndarray], np.ndarray], name: str, min_frames: int) -> Data:
    clips = read_manifest(cache)
    store = cache / f"{name}.npz"
    ids = [c.id for c in clips]
    feats: list[np.ndarray] | None = None
    if store.exists():
        with np.load(store, allow_pickle=False) as z:
            if list(z["ids"]) == ids:
                off = z["offsets"]
                allf = z["feats"]
                feats = [allf[..., off[i] : off[i + 1]] for i in range(len(ids))]
    if feats is None:
        t = time.time()
        feats = []
        for c in clips:
            x, sr = sf.read(cache / c.path, dtype="float32")
            assert sr == SR
            feats.append(extract(x))
        offsets = np.cumsum([0] + [f.shape[-1] for f in feats])
        np.savez(store, ids=np.array(ids), offsets=offsets, feats=np.concatenate(feats, axis=-1))
        print(f"{name} features of {len(clips)} clips in {time.time() - t:.0f} s", flush=True)
    trainable = {c.id for c in for_training(clips)}
    ok = [i for i, f in enumerate(feats) if f.shape[-1] >= min_frames and clips[i].id in trainable]
    clips, feats = [clips[i] for i in ok], [feats[i] for i in ok]
    split = split_of(clips)
    return Data(
        clips,
        feats,
        np.array([split[c.speaker] for c in clips]),
        np.array([c.label for c in clips]),
        np.array([c.generator for c in clips]),
        split,
    )
