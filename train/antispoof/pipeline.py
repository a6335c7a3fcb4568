"""Train and evaluate the anti-spoofing model: an LCNN on spectrograms plus a cue branch, in ONNX.

    .venv/bin/python -m train.antispoof_data                 # build the clips once (~20 min)
    .venv/bin/python -m train.antispoof --write              # train, measure, write model + docs
    .venv/bin/python -m train.antispoof --gmm-baseline       # the LFCC-GMM baseline, for comparison
    options: --cache DIR, --no-loso (skip leave-one-source-out), --loso-sources A,B (only these
    folds), --logo (also leave-one-generator-out), --logo-only (only the folds, for the model
    already written), --logo-epochs N, --logo-seed N (another seed for the fold trainings),
    --members N (each network the average of N seeds; shipped: 1), --logo-members N (the same in
    the folds; default: --members), --oc-weight W (a one-class loss on both networks' embeddings,
    its scores as two more experts; tried, not shipped: docs/antispoof.md), --logo-generators
    A,B (only these folds: a quick probe)

Steps (seeded: a rerun on the same cache gives the same split and, up to floating-point
non-determinism of multi-threaded CPU kernels, the same numbers):

1. Split by speaker (``split_of``): 25 % of the bona fide speakers, and every spoof made from their
   speech, are held out for testing; TTS voices and the NII/ARCTIC speakers, which have no bona fide
   side, are held out per generator (every 4th voice in a fixed hash order, at least one). Debian
   bona fide (Asterisk, KLettres) is never trained on (licence) and is an unseen-domain test set.
   One training speaker in six is set aside for validation (calibration). The generators of
   ``antispoof_data.EVAL_ONLY`` are left out entirely (``eval/antispoof.py`` scores them).
2. The network on the runtime front end (``verilive.voice.antispoof.features``, 1-4 s random crops,
   SpecAugment masks) and the runtime utterance cues (``verilive.voice.utterance_cues``, whole
   clip, cached in ``<cache>/cues.npz``), class-balanced sampling, one output per generator
   family (``subclass_of``). Beside it, a small network on the frozen CAM++ front output
   (``AntiSpoof.fcm_frames``, cached in ``<cache>/fcm_frames.npz``), trained on the same clips
   the same way, and a logistic regression on that output's statistics over time
   (``fcm_stats``; which statistics: ``train.antispoof_stats_cv``). On the validation clips each
   branch is calibrated alone; the bona fide score is the sum of their log-odds, calibrated by
   one affine map, and the attack class split comes from their recalibrated summed
   log-probabilities (``Fusion``); everything is folded into one exported graph.
3. In-domain EER on the held-out speakers (whole clips), per class and per generator; rejection of
   the unseen-domain bona fide.
4. Leave-one-source-out (the figure that counts; ``run_loso``): for each real source (a whole
   ``shared/data/voice`` folder of another lab, ``LOSO_SOURCES``) both networks and the regression
   are trained without any clip of it (fewer epochs) and fused on the other sources' validation
   clips; its clips as published are scored against its own bona fide (or the pooled out-of-fold
   bona fide), with 1-2 s and 2-4 s crops and telephone-band and MP3 versions (``variant_data``).
   The fold scores go to ``<cache>/loso_scores.npz`` (``eval/antispoof_loso.py`` reads them).
   ``--logo`` adds the older leave-one-generator-out over the generators made here.
5. ``--write``: src/verilive/voice/antispoof_model.onnx, docs/antispoof_det.png, and the result
   tables into docs/antispoof.md (between its result markers) and ``<cache>/results.md``.

The LFCC-GMM baseline (``--gmm-baseline``: 20 LFCC + deltas, 64-component diagonal GMM per class,
calibrated on out-of-fold scores) is kept for comparison; it is not shipped.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import zlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from train.antispoof_data import (
    DEFAULT_CACHE,
    NEW_FAMILIES,
    REAL_SOURCES,
    Clip,
    for_training,
    read_manifest,
)
from verilive.voice.antispoof import (
    CLASSES,
    FCM_SECONDS,
    MODEL_FILE,
    SR,
    FrontEnd,
    as_pcm16,
    features,
    whisper_input,
    whisper_stats,
)
from verilive.voice.campplus import FCM_CHANNELS
from verilive.voice.utterance_cues import FEATURE_NAMES, utterance_features

REPO = Path(__file__).resolve().parents[1]
OUT_MODEL = REPO / "src" / "verilive" / "voice" / MODEL_FILE
OUT_DET = REPO / "docs" / "antispoof_det.png"
OUT_CARD = REPO / "docs" / "antispoof.md"  # the tables go between these markers:
BEGIN, END = "<!-- results: begin (written by train/antispoof.py) -->", "<!-- results: end -->"
SEED = 20240611


# ------------------------------------------------------------------------------------- split & metrics


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


def eer(bona: np.ndarray, spoof: np.ndarray) -> float:
    """Equal error rate; a higher score means more bona fide."""
    if len(bona) == 0 or len(spoof) == 0:
        return float("nan")
    far, frr = det_points(bona, spoof)
    i = int(np.argmin(np.abs(frr - far)))
    return float((frr[i] + far[i]) / 2)


def det_points(bona: np.ndarray, spoof: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    th = np.sort(np.concatenate([bona, spoof]))
    frr = np.searchsorted(np.sort(bona), th, side="left") / len(bona)
    far = 1 - np.searchsorted(np.sort(spoof), th, side="left") / len(spoof)
    return far, frr


def pct(x: float) -> str:
    return "–" if np.isnan(x) else f"{100 * x:.2f} %"


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def bona_logodds(logits: np.ndarray) -> np.ndarray:
    """log P(bona fide) / P(spoof) from 4-way logits."""
    spoof = logits[:, 1:]
    top = spoof.max(axis=1)
    return logits[:, 0] - (top + np.log(np.exp(spoof - top[:, None]).sum(axis=1)))


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


def _cue_worker(path: str) -> np.ndarray:
    x, sr = sf.read(path, dtype="float32")
    assert sr == SR
    return utterance_features(x)


_FCM_ANTI: Any = None


def _fcm_worker(path: str) -> np.ndarray:
    global _FCM_ANTI
    from verilive.voice.antispoof import AntiSpoof

    if _FCM_ANTI is None:
        _FCM_ANTI = AntiSpoof(intra_op_threads=1)
    x, sr = sf.read(path, dtype="float32")
    assert sr == SR
    return _FCM_ANTI.fcm_frames(x).astype(np.float16)


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


class Report:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, s: str = "") -> None:
        print(s, flush=True)
        self.lines.append(s)


def data_table(d: Data, out: Report) -> None:
    out("| class | generator | train | val | test | unseen-domain | minutes | speakers/voices | licence |")
    out("|---|---|---|---|---|---|---|---|---|")
    for cls in CLASSES:
        for g in sorted(set(d.gen[d.lab == cls])):
            idx = np.flatnonzero((d.lab == cls) & (d.gen == g))
            mins = sum(d.clips[i].duration_s for i in idx) / 60
            n = {p: int(np.sum(d.part[idx] == p)) for p in ("train", "val", "test", "ood")}
            spk = len({d.clips[i].speaker for i in idx})
            lic = ", ".join(sorted({d.clips[i].licence for i in idx}))
            out(
                f"| {cls} | {g} | {n['train']} | {n['val']} | {n['test']} | {n['ood']} | {mins:.1f} | {spk} "
                f"| {lic} |"
            )
    out()


def in_domain_tables(d: Data, te: np.ndarray, logits: np.ndarray, out: Report) -> None:
    score = bona_logodds(logits)
    lab, gen = d.lab[te], d.gen[te]
    spoof = lab != "bonafide"
    bona = score[~spoof]
    out("| attack set | test clips | EER |")
    out("|---|---|---|")
    out(f"| all spoofs pooled | {spoof.sum()} | {pct(eer(bona, score[spoof]))} |")
    for cls in CLASSES[1:]:
        m = lab == cls
        out(f"| class {cls} | {m.sum()} | {pct(eer(bona, score[m]))} |")
    for cls in CLASSES[1:]:
        for g in sorted(set(gen[lab == cls])):
            m = gen == g
            out(f"| {cls} / {g} | {m.sum()} | {pct(eer(bona, score[m]))} |")
    n_spk = len({d.clips[i].speaker for i in te[~spoof]})
    out(f"\n(held-out bona fide: {len(bona)} clips of {n_spk} speakers)\n")
    p = softmax(logits)
    pred = np.array(CLASSES)[p.argmax(axis=1)]
    out(
        f"4-way accuracy {np.mean(pred == lab):.3f}; at P(bona fide) >= 0.5: bona fide rejected "
        f"{np.mean(p[~spoof, 0] < 0.5):.3f}, spoofs accepted {np.mean(p[spoof, 0] >= 0.5):.3f}\n"
    )
    out("| true \\ predicted | " + " | ".join(CLASSES) + " |")
    out("|---|" + "---|" * len(CLASSES))
    for cls in CLASSES:
        row = [int(np.sum((lab == cls) & (pred == c2))) for c2 in CLASSES]
        out(f"| {cls} | " + " | ".join(map(str, row)) + " |")
    out()


def ood_table(
    d: Data, ood: np.ndarray, logits_ood: np.ndarray, te: np.ndarray, logits_te: np.ndarray, out: Report
) -> None:
    p = softmax(logits_ood)
    s_ood, s_te = bona_logodds(logits_ood), bona_logodds(logits_te)
    spoof_te = s_te[d.lab[te] != "bonafide"]
    pred = np.array(CLASSES)[p.argmax(axis=1)]
    out(
        "| set | clips | rejected at P(bona fide) < 0.5 | most often taken for | EER vs all held-out spoofs |"
    )
    out("|---|---|---|---|---|")
    for g in sorted(set(d.gen[ood])):
        m = d.gen[ood] == g
        vals, counts = np.unique(pred[m & (pred != "bonafide")], return_counts=True)
        top = vals[counts.argmax()] if counts.size else "–"
        out(f"| {g} | {m.sum()} | {np.mean(p[m, 0] < 0.5):.3f} | {top} | {pct(eer(s_ood[m], spoof_te))} |")
    out()


# ------------------------------------------------------------------------------------- LCNN


def build_net(
    mean: np.ndarray, std: np.ndarray, cues: np.ndarray, sub_class: list[int], oc: bool = False
) -> Any:
    """LCNN on the spectrogram plus a small branch on the utterance cues (``cues``: training rows,
    for the NaN fill and the standardisation folded into the network). ``sub_class[j]``: the class
    of output unit j; class logits are the log-sum-exp of their units, then calibrated. ``oc``: a
    one-class bona fide direction on the embedding (``oc_loss``), its scaled cosine appended to the
    output as a fifth column."""
    import torch
    from torch import nn

    med = np.nanmedian(cues, axis=0)
    filled = np.where(np.isnan(cues), med, cues)
    c_mean, c_std = filled.mean(axis=0), filled.std(axis=0) + 1e-6
    member = np.zeros((len(sub_class), len(CLASSES)), np.float32)
    member[np.arange(len(sub_class)), sub_class] = 1.0

    class MFM(nn.Module):
        """Max-feature-map: the element-wise max of the two halves of the channels."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a, b = torch.chunk(x, 2, dim=1)
            return torch.maximum(a, b)

    class LCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, 2, -1, 1))
            self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, 2, -1, 1))
            self.register_buffer("c_med", torch.tensor(med, dtype=torch.float32).view(1, -1))
            self.register_buffer("c_mean", torch.tensor(c_mean, dtype=torch.float32).view(1, -1))
            self.register_buffer("c_std", torch.tensor(c_std, dtype=torch.float32).view(1, -1))
            self.register_buffer("member", torch.tensor(member))
            self.cue_drop = 0.0  # training: probability of hiding a clip's cues (as if unmeasurable)
            # A strided first layer and early pooling keep it cheap (~27 M multiply-adds per 2 s).
            self.body = nn.Sequential(
                nn.Conv2d(2, 24, 5, stride=2, padding=2), MFM(), nn.MaxPool2d(2),
                nn.Conv2d(12, 32, 3, padding=1), MFM(), nn.BatchNorm2d(16), nn.MaxPool2d(2),
                nn.Conv2d(16, 48, 3, padding=1), MFM(), nn.BatchNorm2d(24), nn.MaxPool2d(2),
                nn.Conv2d(24, 64, 3, padding=1), MFM(), nn.BatchNorm2d(32),
            )  # fmt: skip
            self.head = nn.Sequential(nn.Dropout(0.4), nn.Linear(32 * 16 * 2, 80), MFM())
            self.cue_branch = nn.Sequential(
                nn.Linear(len(med), 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 32), nn.ReLU()
            )
            self.out = nn.Sequential(nn.Dropout(0.2), nn.Linear(40 + 32, len(sub_class)))
            self.cal = nn.Linear(4, 4)
            with torch.no_grad():
                self.cal.weight.copy_(torch.eye(4))
                self.cal.bias.zero_()
            # created last, and only when used, so the other weights draw the same initial values
            self.oc_w = nn.Parameter(torch.randn(40 + 32)) if oc else None

        def embed(self, x: torch.Tensor) -> torch.Tensor:
            h = self.body((x - self.mean) / self.std)  # (B, 32, 16, T')
            h = h.flatten(1, 2)
            return torch.cat([h.mean(dim=2), h.std(dim=2)], dim=1)

        def embedding(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
            c = torch.where(torch.isnan(c), self.c_med, c)
            if self.training and self.cue_drop > 0:
                hide = torch.rand(c.shape[0], 1) < self.cue_drop
                c = torch.where(hide, self.c_med.expand_as(c), c)
            c = torch.clamp((c - self.c_mean) / self.c_std, -6.0, 6.0)  # odd input stays in range
            return torch.cat([self.head(self.embed(x)), self.cue_branch(c)], dim=1)

        def sub_from(self, e: torch.Tensor) -> torch.Tensor:
            return self.out(e)

        def sub_logits(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
            return self.sub_from(self.embedding(x, c))

        def class_logits(self, z: torch.Tensor) -> torch.Tensor:
            top = z.max(dim=1, keepdim=True).values
            return torch.log(torch.exp(z - top) @ self.member + 1e-30) + top

        def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
            e = self.embedding(x, c)
            y = self.cal(self.class_logits(self.sub_from(e)))
            if self.oc_w is None:
                return y
            return torch.cat([y, OC_ALPHA * oc_cosine(e, self.oc_w)[:, None]], dim=1)

    return LCNN()


def build_fcm_net(
    mean: np.ndarray, std: np.ndarray, sub_class: list[int], width: int = 128, oc: bool = False
) -> Any:
    """A small time-convolutional network on the frozen CAM++ front output (320 rows per 10 ms
    frame): a 1x1 projection, two dilated convolutions (receptive field 13 frames), mean and
    standard deviation over time, one output per generator family summed per class as in the LCNN.
    About 0.14 M multiply-adds per frame."""
    import torch
    from torch import nn

    member = np.zeros((len(sub_class), len(CLASSES)), np.float32)
    member[np.arange(len(sub_class)), sub_class] = 1.0

    class FrontNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1))
            self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1))
            self.register_buffer("member", torch.tensor(member))
            self.body = nn.Sequential(
                nn.Dropout(0.2),
                nn.Conv1d(len(mean), width, 1), nn.BatchNorm1d(width), nn.ReLU(),
                nn.Conv1d(width, width, 3, padding=2, dilation=2), nn.BatchNorm1d(width), nn.ReLU(),
                nn.Conv1d(width, width, 3, padding=4, dilation=4), nn.BatchNorm1d(width), nn.ReLU(),
            )  # fmt: skip
            self.head = nn.Sequential(nn.Dropout(0.3), nn.Linear(2 * width, len(sub_class)))
            self.oc_w = nn.Parameter(torch.randn(2 * width)) if oc else None  # as in the LCNN

        def embedding(self, h: torch.Tensor) -> torch.Tensor:
            z = self.body((h - self.mean) / self.std)
            mu = z.mean(dim=2)
            sd = torch.sqrt(((z - mu[:, :, None]) ** 2).mean(dim=2) + 1e-6)  # defined for one frame too
            return torch.cat([mu, sd], dim=1)

        def sub_from(self, e: torch.Tensor) -> torch.Tensor:
            return self.head(e)

        def sub_logits(self, h: torch.Tensor) -> torch.Tensor:
            return self.sub_from(self.embedding(h))

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            e = self.embedding(h)
            z = self.sub_from(e)
            top = z.max(dim=1, keepdim=True).values
            y = torch.log(torch.exp(z - top) @ self.member + 1e-30) + top
            if self.oc_w is None:
                return y
            return torch.cat([y, OC_ALPHA * oc_cosine(e, self.oc_w)[:, None]], dim=1)

    return FrontNet()


@dataclass
class TrainConfig:
    epochs: int = 60  # 20 -> 60: validation EER 6.2 -> 4.0 % (network alone, docs/antispoof.md)
    steps_per_epoch: int = 50
    batch: int = 32
    crop: int = 400  # longest training crop, frames (4 s)
    crop_min: int = 100  # shortest (1 s): each batch draws its crop length in [crop_min, crop]
    lr: float = 2e-3
    weight_decay: float = 1e-3
    oc_weight: float = 0.0  # weight of the one-class loss (``oc_loss``); 0: none, and no fifth output


# One-class softmax (Zhang, Jiang and Li, 2021): bona fide embeddings are pulled to within an angle
# of cos 0.9 of a learnt direction, spoofs pushed beyond cos 0.2, so "bona fide" is learnt as a
# narrow region rather than as "not like the spoofs seen". Margins and scale are the paper's.
OC_ALPHA, OC_M_BONA, OC_M_SPOOF = 20.0, 0.9, 0.2


def oc_cosine(e: Any, w: Any) -> Any:
    """Cosine of each row of ``e`` with the direction ``w`` (torch tensors)."""
    import torch

    return (e @ w) / (torch.linalg.vector_norm(e, dim=1) * torch.linalg.vector_norm(w) + 1e-9)


def oc_loss(cos: Any, bona: Any) -> Any:
    """Mean one-class softmax loss of cosines ``cos`` with boolean ``bona`` targets."""
    import torch

    margin = torch.where(bona, OC_M_BONA - cos, cos - OC_M_SPOOF)
    return torch.nn.functional.softplus(OC_ALPHA * margin).mean()


FCM_CFG = TrainConfig(epochs=30, weight_decay=1e-2)  # the front-output network (fast: ~5 s per epoch)
LOGO_FCM_EPOCHS = 10


def sample_weights(d: Data, idx: np.ndarray) -> np.ndarray:
    """Each class equally likely; within a class, generators weighted by sqrt of their size."""
    w = np.zeros(len(idx))
    for cls in CLASSES:
        m = d.lab[idx] == cls
        gens, counts = np.unique(d.gen[idx][m], return_counts=True)
        gw = np.sqrt(counts) / np.sqrt(counts).sum()
        for g, c, share in zip(gens, counts, gw, strict=True):
            w[m & (d.gen[idx] == g)] = share / c
    return w / w.sum()


def crop_batch(
    feats: list[np.ndarray], picks: np.ndarray, crop: int, rng: np.random.Generator, augment: bool
) -> np.ndarray:
    out = np.empty((len(picks), *feats[0].shape[:2], crop), np.float32)
    for k, i in enumerate(picks):
        f = feats[i]
        if f.shape[2] < crop:
            f = np.tile(f, (1, 1, -(-crop // f.shape[2])))
        s = int(rng.integers(0, f.shape[2] - crop + 1))
        x = f[:, :, s : s + crop].astype(np.float32)
        if augment:
            if rng.uniform() < 0.5:  # frequency mask (both channels)
                w = int(rng.integers(1, 25))
                b = int(rng.integers(0, x.shape[1] - w))
                x[:, b : b + w] = x[:, b : b + w].mean(axis=(1, 2), keepdims=True)
            if rng.uniform() < 0.5:  # time mask
                w = int(rng.integers(1, 25))
                b = int(rng.integers(0, crop - w))
                x[:, :, b : b + w] = x[:, :, b : b + w].mean(axis=(1, 2), keepdims=True)
            x[0] += rng.normal(0, 1.0)  # small level offset, dB
        out[k] = x
    return out


def fit_net(
    net: Any, d: Data, tr: np.ndarray, cfg: TrainConfig, rng: np.random.Generator,
    inputs: Callable[[np.ndarray], tuple[Any, ...]], log: str,
) -> Any:  # fmt: skip
    """The shared training loop: class-balanced batches, AdamW with a one-cycle schedule, label
    smoothing, one target per generator family. ``inputs(picks)``: the network's input tensors."""
    import torch

    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    total = cfg.epochs * cfg.steps_per_epoch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=total, pct_start=0.15)
    w = sample_weights(d, tr)
    names = [s for s, _ in subclasses(d)]
    y_all = np.array([names.index(subclass_of(lab, g)) for lab, g in zip(d.lab, d.gen, strict=True)])
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.05)
    is_bona = torch.from_numpy(d.lab == "bonafide")
    t = time.time()
    net.train()
    for ep in range(cfg.epochs):
        run = 0.0
        for _ in range(cfg.steps_per_epoch):
            picks = rng.choice(tr, size=cfg.batch, p=w)
            opt.zero_grad()
            e = net.embedding(*inputs(picks))
            loss = loss_fn(net.sub_from(e), torch.from_numpy(y_all[picks]))
            if cfg.oc_weight > 0:
                loss = loss + cfg.oc_weight * oc_loss(oc_cosine(e, net.oc_w), is_bona[picks])
            loss.backward()
            opt.step()
            sched.step()
            run += loss.item()
        print(
            f"  {log}epoch {ep + 1}/{cfg.epochs} loss {run / cfg.steps_per_epoch:.3f} "
            f"({time.time() - t:.0f} s)",
            flush=True,
        )
    net.eval()
    return net


def train_net(d: Data, tr: np.ndarray, cfg: TrainConfig, seed: int, log: str = "") -> Any:
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    assert d.cues is not None
    cues = d.cues
    sub = rng.choice(tr, size=min(len(tr), 400), replace=False)
    allf = np.concatenate([d.feats[i].astype(np.float32) for i in sub], axis=2)
    net = build_net(
        allf.mean(axis=2), allf.std(axis=2) + 1e-3, cues[tr], [CLASSES.index(c) for _, c in subclasses(d)],
        oc=cfg.oc_weight > 0,
    )  # fmt: skip
    net.cue_drop = 0.1

    def inputs(picks: np.ndarray) -> tuple[Any, ...]:
        crop = int(rng.integers(cfg.crop_min, cfg.crop + 1))
        x = torch.from_numpy(crop_batch(d.feats, picks, crop, rng, augment=True))
        return x, torch.from_numpy(cues[picks].astype(np.float32))

    return fit_net(net, d, tr, cfg, rng, inputs, log)


def train_fcm_net(d: Data, tr: np.ndarray, cfg: TrainConfig, seed: int, log: str = "") -> Any:
    """The network on the CAM++ front output: random 1-4 s crops, no masking (the front module is
    frozen, so the crops are the only augmentation)."""
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    fcm = d.fcm
    assert fcm is not None
    sub = rng.choice(tr, size=min(len(tr), 400), replace=False)
    allh = np.concatenate([fcm[i].astype(np.float32) for i in sub], axis=1)
    classes = [CLASSES.index(c) for _, c in subclasses(d)]
    net = build_fcm_net(allh.mean(axis=1), allh.std(axis=1) + 1e-3, classes, oc=cfg.oc_weight > 0)

    def inputs(picks: np.ndarray) -> tuple[Any, ...]:
        crop = int(rng.integers(cfg.crop_min, cfg.crop + 1))
        out = np.empty((len(picks), fcm[0].shape[0], crop), np.float32)
        for k, i in enumerate(picks):
            h = fcm[i]
            if h.shape[1] < crop:
                h = np.tile(h, (1, -(-crop // h.shape[1])))
            s = int(rng.integers(0, h.shape[1] - crop + 1))
            out[k] = h[:, s : s + crop]
        return (torch.from_numpy(out),)

    return fit_net(net, d, tr, cfg, rng, inputs, f"{log}[front] ")


OC_WEIGHT = 0.0  # the one-class loss (--oc-weight); see docs/antispoof.md
MEMBERS = 1  # networks per branch (--members): two seeds averaged gained nothing measurable (card)
MEMBER_SEED_STEP = 1000  # member k is trained with seed + k * MEMBER_SEED_STEP


def average(nets: list[Any]) -> Any:
    """One module whose output is the mean of its members' class logits. A network trained on a few
    hundred clips depends on its seed (which crops, which masks, which initial weights); the mean of
    several such networks varies less and ranks clips more steadily. One member is returned as is."""
    if len(nets) == 1:
        return nets[0]
    import torch
    from torch import nn

    class Mean(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.members = nn.ModuleList(nets)

        def forward(self, *x: torch.Tensor) -> torch.Tensor:
            return torch.stack([m(*x) for m in self.members]).mean(dim=0)

    return Mean().eval()


def out_width(net: Any) -> int:
    """4 class logits, and a fifth column (the one-class score) when the network has one."""
    first = net.members[0] if hasattr(net, "members") else net
    return 4 if getattr(first, "oc_w", None) is None else 5


def split_oc(z: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """A network's output as its class logits and, if present, its one-class score column."""
    return z[:, :4], [z[:, 4:]] if z.shape[1] > 4 else []


def predict(net: Any, d: Data, idx: np.ndarray, max_frames: int = 800) -> np.ndarray:
    """Logits of whole clips (the first ``max_frames``), batched by equal length."""
    import torch

    assert d.cues is not None
    feats = d.feats

    out = np.zeros((len(idx), out_width(net)))
    lengths = np.array([min(feats[i].shape[2], max_frames) for i in idx])
    with torch.no_grad():
        for n in np.unique(lengths):
            pos = np.flatnonzero(lengths == n)
            for s in range(0, len(pos), 32):
                p = pos[s : s + 32]
                x = np.stack([feats[idx[k]][:, :, :n] for k in p]).astype(np.float32)
                c = d.cues[idx[p]].astype(np.float32)
                out[p] = net(torch.from_numpy(x), torch.from_numpy(c)).numpy()
    return out


def predict_fcm(net: Any, d: Data, idx: np.ndarray) -> np.ndarray:
    """Class logits of the front-output network on whole clips (at most ``FCM_SECONDS``)."""
    import torch

    fcm = d.fcm
    assert fcm is not None
    out = np.zeros((len(idx), out_width(net)))
    lengths = np.array([fcm[i].shape[1] for i in idx])
    with torch.no_grad():
        for n in np.unique(lengths):
            pos = np.flatnonzero(lengths == n)
            for s in range(0, len(pos), 32):
                p = pos[s : s + 32]
                h = np.stack([fcm[idx[k]] for k in p]).astype(np.float32)
                out[p] = net(torch.from_numpy(h)).numpy()
    return out


@dataclass
class Linear:
    """An affine map ``x @ w.T + b``."""

    w: np.ndarray
    b: np.ndarray

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, np.float64) @ self.w.T + self.b


def log_softmax(z: np.ndarray) -> np.ndarray:
    top = z.max(axis=1, keepdims=True)
    return z - top - np.log(np.exp(z - top).sum(axis=1, keepdims=True))


def fit_calibration(z: np.ndarray, labels: np.ndarray) -> Linear:
    """Multinomial logistic regression (class-balanced, mild L2) from logits to the 4 classes."""
    from sklearn.linear_model import LogisticRegression

    y = np.array([CLASSES.index(x) for x in labels])
    lr = LogisticRegression(C=10.0, class_weight="balanced", max_iter=5000).fit(z, y)
    return Linear(lr.coef_, lr.intercept_)


FCM_C = 0.01  # inverse L2 strength of the front-statistics regression (0.003-0.03 close: antispoof_stats_cv)


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


def fit_fcm_linear(d: Data, idx: np.ndarray) -> Linear:
    """Multinomial logistic regression (class-balanced) from the front statistics to the 4 classes,
    standardisation folded into the weights."""
    from sklearn.linear_model import LogisticRegression

    assert d.fcm is not None
    x = np.stack([fcm_stats(d.fcm[i]) for i in idx])
    mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-6
    y = np.array([CLASSES.index(v) for v in d.lab[idx]])
    lr = LogisticRegression(C=FCM_C, class_weight="balanced", max_iter=5000).fit((x - mu) / sd, y)
    w = lr.coef_ / sd
    return Linear(w, lr.intercept_ - w @ mu)


WHISPER_C = 0.01  # as the frozen probe (C 0.001-0.1 traded mean against worst source: docs/antispoof.md)


def fit_whisper_linear(d: Data, idx: np.ndarray) -> Linear:
    """Multinomial logistic regression (class-balanced) from the Whisper layer statistics to the 4
    classes, standardisation folded into the weights."""
    from sklearn.linear_model import LogisticRegression

    assert d.whisper is not None
    x = d.whisper[idx].astype(np.float64)
    mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-6
    y = np.array([CLASSES.index(v) for v in d.lab[idx]])
    lr = LogisticRegression(C=WHISPER_C, class_weight="balanced", max_iter=3000).fit((x - mu) / sd, y)
    w = lr.coef_ / sd
    return Linear(w, lr.intercept_ - w @ mu)


def bona_log_odds(logp: np.ndarray) -> np.ndarray:
    """log P(bona fide) - log P(any attack) of 4-way log-probabilities."""
    rest = logp[:, 1:]
    top = rest.max(axis=1)
    return logp[:, 0] - top - np.log(np.exp(rest - top[:, None]).sum(axis=1))


def fit_affine(x: np.ndarray, labels: np.ndarray) -> Linear:
    """Class-balanced logistic regression of bona fide vs spoof on one score: a monotone map."""
    from sklearn.linear_model import LogisticRegression

    lr = LogisticRegression(C=10.0, class_weight="balanced", max_iter=5000)
    lr.fit(x[:, None], (labels == "bonafide").astype(int))
    return Linear(lr.coef_, lr.intercept_)


@dataclass
class Fusion:
    """Sum of calibrated experts. Each branch's logits are calibrated alone on the validation clips;
    the bona fide score is the sum of the branches' log-odds of bona fide, mapped by one affine
    calibration (``bona``), so the ranking of clips has no parameter fitted across branches. The
    split of the attack probability between replay, TTS and VC comes from the recalibrated sum of
    the branches' log-probabilities (``out``). Output: four logits whose softmax gives P(bona fide)
    = sigmoid(calibrated log-odds) and the attack classes in the ``out`` proportions."""

    cals: list[Linear]
    out: Linear
    bona: Linear
    weights: np.ndarray | None = None  # per branch, on its log-odds (None: all 1)

    def w(self) -> np.ndarray:
        return np.ones(len(self.cals)) if self.weights is None else self.weights

    def __call__(self, *z: np.ndarray) -> np.ndarray:
        logp = [log_softmax(c(x)) for c, x in zip(self.cals, z, strict=True)]
        odds = sum(wk * bona_log_odds(lp) for wk, lp in zip(self.w(), logp, strict=True))
        attack = log_softmax(self.out(sum(logp))[:, 1:])
        return np.concatenate([self.bona(np.asarray(odds)[:, None]), attack], axis=1)


def fit_fusion(branches: list[np.ndarray], labels: np.ndarray, weights: np.ndarray | None = None) -> Fusion:
    """Fit the fusion on clips no branch was trained on; ``weights`` (per branch) come from
    :func:`fit_weights` on leave-one-source-out scores, never from these clips."""
    cals = [fit_calibration(z, labels) for z in branches]
    logp = [log_softmax(c(z)) for c, z in zip(cals, branches, strict=True)]
    w = np.ones(len(branches)) if weights is None else np.asarray(weights, np.float64)
    odds = sum(wk * bona_log_odds(lp) for wk, lp in zip(w, logp, strict=True))
    return Fusion(cals, fit_calibration(sum(logp), labels), fit_affine(np.asarray(odds), labels), weights)


def fit_weights(z: np.ndarray, is_bona: np.ndarray, group: np.ndarray, l2: float = 1e-2) -> np.ndarray:
    """Non-negative weights of the branches' calibrated log-odds ``z`` (clips, branches): a logistic
    regression of bona fide against spoof, each class half the weight, and within a class each
    ``group`` (the source) weighted by the square root of its size. Fitted on out-of-source scores
    (each clip scored by the fold that left its source out), so the weights favour the branches that
    generalise to sources they never saw, not those that fit the training sources best."""
    from scipy.optimize import minimize

    sw = np.zeros(len(z))
    for cls in (True, False):
        m = is_bona == cls
        gs, counts = np.unique(group[m], return_counts=True)
        share = np.sqrt(counts) / np.sqrt(counts).sum()
        for g, c, sh in zip(gs, counts, share, strict=True):
            sw[m & (group == g)] = 0.5 * sh / c
    y = np.where(is_bona, 1.0, -1.0)

    def loss(p: np.ndarray) -> tuple[float, np.ndarray]:
        m = y * (z @ p[:-1] + p[-1])
        e = np.exp(-np.logaddexp(0.0, m))  # sigmoid(-m)
        f = float(np.sum(sw * np.logaddexp(0.0, -m)) + 0.5 * l2 * np.sum(p[:-1] ** 2))
        g = -(sw * y * e)
        return f, np.concatenate([z.T @ g + l2 * p[:-1], [g.sum()]])

    k = z.shape[1]
    res = minimize(loss, np.r_[np.ones(k), 0.0], jac=True, method="L-BFGS-B",
                   bounds=[(0.0, None)] * k + [(None, None)])  # fmt: skip
    w = res.x[:-1]
    if not np.all(np.isfinite(w)) or w.sum() <= 0:  # no branch separates these clips: fall back to equal
        return np.ones(k)
    return w / w.sum() * k  # scale-free: the affine calibration follows; sum k like equal weights


def fit_product(branches: list[np.ndarray], labels: np.ndarray) -> Callable[..., np.ndarray]:
    """The previous rule, for the report: the summed log-probabilities recalibrated 4-way (a 4x4
    regression fitted on the validation clips, which can reorder clips)."""
    cals = [fit_calibration(z, labels) for z in branches]
    out = fit_calibration(sum(log_softmax(c(z)) for c, z in zip(cals, branches, strict=True)), labels)
    return lambda *z: out(sum(log_softmax(c(x)) for c, x in zip(cals, z, strict=True)))


BRANCHES = (
    "network (spectrogram + cues)",
    "CAM++ front network",
    "CAM++ front statistics regression",
    "Whisper statistics regression",
)


@dataclass
class Model:
    """The spectrogram-and-cues network, the front-output network, the front-statistics regression,
    the Whisper-statistics regression and the fusion of the four."""

    net: Any
    fcm_net: Any
    fcm_linear: Linear
    whisper_linear: Linear
    fusion: Fusion

    def branches(self, d: Data, idx: np.ndarray, max_frames: int = 800) -> list[np.ndarray]:
        assert d.fcm is not None and d.whisper is not None
        stats = np.stack([fcm_stats(d.fcm[i]) for i in idx])
        net, net_oc = split_oc(predict(self.net, d, idx, max_frames))
        fcm, fcm_oc = split_oc(predict_fcm(self.fcm_net, d, idx))
        wh = self.whisper_linear(d.whisper[idx])
        # the one-class scores, when trained, are experts of their own (one column each)
        return [net, fcm, self.fcm_linear(stats), wh, *net_oc, *fcm_oc]

    def logits(self, d: Data, idx: np.ndarray, max_frames: int = 800) -> np.ndarray:
        return self.fusion(*self.branches(d, idx, max_frames))

    def branch_odds(self, d: Data, idx: np.ndarray) -> np.ndarray:
        """(branches, clips): each branch's calibrated log-odds of bona fide, before the weights."""
        zs = self.branches(d, idx)
        return np.stack([bona_log_odds(log_softmax(c(z))) for c, z in zip(self.fusion.cals, zs, strict=True)])

    def alternatives(self, d: Data, va: np.ndarray, idx: np.ndarray) -> list[np.ndarray]:
        """For the report (``ALTERNATIVES``): each branch alone with its calibration, the same fusion
        of the two networks only, of the three branches without Whisper (the model before), and of
        all four with equal weights, and the older rule (the summed log-probabilities recalibrated
        4-way), all fitted on ``va`` like the fusion."""
        zs, vs = self.branches(d, idx), self.branches(d, va)
        alone = [c(z) for c, z in zip(self.fusion.cals, zs, strict=True)]
        two = fit_fusion(vs[:2], d.lab[va])(*zs[:2])
        three = fit_fusion(vs[:3], d.lab[va])(*zs[:3])
        equal = fit_fusion(vs[:4], d.lab[va])(*zs[:4])
        product = fit_product(vs[:4], d.lab[va])(*zs[:4])
        return [*alone[:4], two, three, equal, product, *alone[4:]]


ALTERNATIVES = (
    *(f"{b} alone" for b in BRANCHES),
    "the two networks only, same fusion",
    "the three branches without Whisper (the model before), same fusion",
    "all four branches, equal weights",
    "product recalibrated 4-way (an older rule)",
)
OC_ALTERNATIVES = ("network one-class score alone", "front network one-class score alone")


def alternative_names(n: int) -> tuple[str, ...]:
    """Names of ``Model.alternatives``' ``n`` outputs."""
    return (ALTERNATIVES + OC_ALTERNATIVES)[:n]


def train_model(
    d: Data, tr: np.ndarray, va: np.ndarray, cfg: TrainConfig, fcm_cfg: TrainConfig, seed: int,
    log: str = "", members: int = 1,
) -> Model:  # fmt: skip
    """The branches on ``tr`` (each network the average of ``members`` seeds); their fusion on ``va``."""
    seeds = [seed + k * MEMBER_SEED_STEP for k in range(members)]
    tag = (lambda k: f"{log}[member {k + 1}] ") if members > 1 else (lambda k: log)
    net = average([train_net(d, tr, cfg, s, tag(k)) for k, s in enumerate(seeds)])
    fcm_net = average([train_fcm_net(d, tr, fcm_cfg, s, tag(k)) for k, s in enumerate(seeds)])
    t = time.time()
    wl = fit_whisper_linear(d, tr)
    print(f"  {log}Whisper regression fitted ({time.time() - t:.0f} s)", flush=True)
    return fused_model(d, va, net, fcm_net, fit_fcm_linear(d, tr), wl)


def fused_model(
    d: Data, va: np.ndarray, net: Any, fcm_net: Any, fcm_linear: Linear, whisper_linear: Linear,
    weights: np.ndarray | None = None,
) -> Model:  # fmt: skip
    unfitted = Fusion([], Linear(np.eye(4), np.zeros(4)), Linear(np.eye(1), np.zeros(1)))
    m = Model(net, fcm_net, fcm_linear, whisper_linear, unfitted)
    m.fusion = fit_fusion(m.branches(d, va), d.lab[va], weights)
    return m


def member_models(d: Data, va: np.ndarray, m: Model) -> list[Model]:
    """Each seed's pair of networks alone with the same regression, fused on ``va`` (for the report)."""
    if not hasattr(m.net, "members"):
        return []
    pairs = zip(m.net.members, m.fcm_net.members, strict=True)
    return [fused_model(d, va, n, f, m.fcm_linear, m.whisper_linear, m.fusion.weights) for n, f in pairs]


CHECK_SEED, CHECK_FRAMES = 20261124, 150


def check_input(
    bins: int, seed: int = CHECK_SEED, frames: int = CHECK_FRAMES, whisper_dims: int = 0
) -> tuple[np.ndarray, ...]:
    """A fixed model input (spectrogram-like features, cues, front output and, with ``whisper_dims``,
    Whisper statistics), float32, batch of one."""
    rng = np.random.default_rng(seed)
    x = np.stack([rng.normal(-40, 15, (bins, frames)), np.tanh(rng.normal(0, 1, (bins, frames)))])
    c = rng.normal(0, 1, (1, len(FEATURE_NAMES)))
    h = rng.normal(0, 1, (1, FCM_CHANNELS, frames))
    out = [x[None].astype(np.float32), c.astype(np.float32), h.astype(np.float32)]
    if whisper_dims:  # drawn after the others, so the first three stay as they were
        out.append(np.abs(rng.normal(0, 1, (1, whisper_dims))).astype(np.float32))
    return tuple(out)


def export(model: Model, fe: FrontEnd, meta: dict[str, Any], path: Path) -> None:
    import onnx
    import torch
    from torch import nn

    def linear(m: Linear) -> nn.Linear:
        lin = nn.Linear(m.w.shape[1], m.w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.tensor(m.w, dtype=torch.float32))
            lin.bias.copy_(torch.tensor(m.b, dtype=torch.float32))
        return lin

    class Fused(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            f = model.fusion
            self.net, self.fcm_net, self.fcm_linear = model.net, model.fcm_net, linear(model.fcm_linear)
            self.whisper_linear = linear(model.whisper_linear)
            self.cals = nn.ModuleList([linear(c) for c in f.cals])
            self.out, self.bona = linear(f.out), linear(f.bona)
            self.register_buffer("weights", torch.tensor(f.w(), dtype=torch.float32))

        def forward(self, x: torch.Tensor, c: torch.Tensor, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            mu = h.mean(dim=2)
            d = h[:, :, 1:] - h[:, :, :-1]
            n = torch.ones_like(d[:, :1, :]).sum(dim=2).clamp(min=1.0)  # frames - 1, at least 1
            dm = d.sum(dim=2) / n
            stats = torch.cat(
                [
                    mu,
                    torch.sqrt(((h - mu[:, :, None]) ** 2).mean(dim=2)),
                    d.abs().sum(dim=2) / n,
                    torch.sqrt(((d - dm[:, :, None]) ** 2).sum(dim=2) / n),
                ],
                dim=1,
            )  # as fcm_stats
            zn, zf = self.net(x, c), self.fcm_net(h)
            z = [zn[:, :4], zf[:, :4], self.fcm_linear(stats), self.whisper_linear(w)]
            z += [zn[:, 4:]] if zn.shape[1] > 4 else []  # as Model.branches
            z += [zf[:, 4:]] if zf.shape[1] > 4 else []
            logp = [torch.log_softmax(cal(b), dim=1) for cal, b in zip(self.cals, z, strict=True)]
            odds = sum(
                self.weights[k] * (lp[:, :1] - torch.logsumexp(lp[:, 1:], dim=1, keepdim=True))
                for k, lp in enumerate(logp)
            )
            attack = torch.log_softmax(self.out(sum(logp))[:, 1:], dim=1)
            return torch.cat([self.bona(odds), attack], dim=1)

    fused = Fused().eval()
    dims = model.whisper_linear.w.shape[1]
    # the trained graph's answer to a fixed input, kept with the model: a test checks the ONNX file
    # against it (tests/test_antispoof.py)
    with torch.no_grad():
        ref = fused(*(torch.from_numpy(a) for a in check_input(fe.bins, whisper_dims=dims)))
    meta = {
        **meta,
        "check": {
            "seed": CHECK_SEED,
            "frames": CHECK_FRAMES,
            "whisper_dims": dims,
            "logits": ref[0].tolist(),
        },
    }
    x = torch.zeros(1, 2, fe.bins, 300)
    c = torch.zeros(1, len(FEATURE_NAMES))
    h = torch.zeros(1, FCM_CHANNELS, 300)
    w = torch.zeros(1, dims)
    tmp = path.with_suffix(".tmp.onnx")
    torch.onnx.export(
        fused, (x, c, h, w), str(tmp), input_names=["features", "cues", "fcm", "whisper"],
        output_names=["logits"],
        dynamic_axes={"features": {3: "frames"}, "fcm": {2: "fcm_frames"}}, opset_version=17, dynamo=False,
    )  # fmt: skip
    model = onnx.load(str(tmp))
    tmp.unlink()
    entry = model.metadata_props.add()
    entry.key, entry.value = "verilive_antispoof", json.dumps(meta)
    onnx.save(model, str(path))


def run_lcnn(
    cache: Path, logo: bool, logo_epochs: int, write: bool, logo_only: bool = False,
    logo_seed: int = SEED + 1, members: int = MEMBERS, logo_members: int | None = None,
    cfg_oc: float = OC_WEIGHT, logo_generators: frozenset[str] = frozenset(),
    loso: bool = True, loso_sources: frozenset[str] = frozenset(),
) -> None:  # fmt: skip
    import torch

    torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "2")))
    t0 = time.time()
    fe = FrontEnd()
    d = load_data(cache, lambda x: features(x, fe).astype(np.float16), "feats2", 50)
    d.cues = load_cues(cache, d.clips)
    d.fcm = load_fcm(cache, d.clips)
    d.whisper = load_whisper(cache, d.clips)
    tr, va, te, ood = (np.flatnonzero(d.part == p) for p in ("train", "val", "test", "ood"))
    out = Report()
    if not logo_only:
        out("## Data\n")
        data_table(d, out)
    cfg = TrainConfig(oc_weight=cfg_oc)
    loso_out = Report()
    loso_run: tuple[Data, dict[str, np.ndarray]] | None = None
    fold_weights: list[float] | None = None  # --logo-only: the shipped model's fusion weights

    def run_loso_once() -> tuple[Data, dict[str, np.ndarray]]:
        """Leave one source out (its tables into ``loso_out``), once: the fusion weights come from it."""
        nonlocal loso_run
        if loso_run is None:
            origin = np.array([origin_of(c) for c in d.clips])
            # The source's own clips as published (see loso_scores).
            raw = np.array(
                [not c.id.startswith("codec-") and c.generator not in NEW_FAMILIES for c in d.clips]
            )
            aux_bona = (origin == "") & raw & (d.lab == "bonafide") & (d.part == "test")
            dv = variant_data(cache, d, np.flatnonzero(((origin != "") & raw) | aux_bona))
            loso_run = dv, run_loso(d, dv, tr, va, te, logo_seed, loso_out, loso_sources)
        return loso_run

    if logo_only:  # the shipped model's scores, from the ONNX file
        from verilive.voice.antispoof import AntiSpoof

        shipped = AntiSpoof(OUT_MODEL)
        fold_weights = shipped.meta.get("fusion_weights")

        def scorer(dd: Data, idx: np.ndarray) -> np.ndarray:
            assert dd.cues is not None and dd.fcm is not None and dd.whisper is not None
            return np.stack(
                [
                    shipped.logits(
                        dd.feats[i].astype(np.float32),
                        dd.cues[i],
                        dd.fcm[i].astype(np.float32),
                        dd.whisper[i],
                    )
                    for i in idx
                ]
            )

        lt, lo = scorer(d, te), scorer(d, ood)
    else:
        model = train_model(d, tr, va, cfg, replace(FCM_CFG, oc_weight=cfg_oc), SEED, members=members)
        if loso:  # the fusion weights, learned on the out-of-source scores; the calibration on va
            weights = run_loso_once()[1]["weights"]
            model.fusion = fit_fusion(model.branches(d, va), d.lab[va], weights)
        lt, lo = model.logits(d, te), model.logits(d, ood)
        scorer = model.logits
        out(f"## In-domain EER (held-out speakers; score = calibrated P(bona fide)); {cfg.epochs} epochs\n")
        in_domain_tables(d, te, lt, out)
        bona = d.lab[te] == "bonafide"
        out(
            "Each branch alone, and other fusion rules (not shipped; fitted on the validation clips), "
            "pooled EER:"
        )
        alts = model.alternatives(d, va, te)
        for name, z in zip(alternative_names(len(alts)), alts, strict=True):
            out(f"* {name}: {pct(eer(bona_logodds(z)[bona], bona_logodds(z)[~bona]))}")
        far = np.array([d.gen[i] == "far-field" or d.clips[i].id.startswith("gl-room-") for i in te])
        sb = bona_logodds(lt)
        out(
            f"* the shipped fusion without the far-field part of the test split (the test set before it; "
            f"{np.sum(bona & ~far)} bona fide, {np.sum(~bona & ~far)} spoofs): "
            f"{pct(eer(sb[bona & ~far], sb[~bona & ~far]))}"
        )
        for k, mk in enumerate(member_models(d, va, model)):
            z = bona_logodds(mk.logits(d, te))
            out(
                f"* member {k + 1} alone (seed {SEED + k * MEMBER_SEED_STEP}: both networks of "
                f"that seed, same regression and fusion): {pct(eer(z[bona], z[~bona]))}"
            )
        out()
        out("## Unseen-domain bona fide (Debian speech packages, never trained on)\n")
        ood_table(d, ood, lo, te, lt, out)
        print(f"main model done ({time.time() - t0:.0f} s)", flush=True)
        if write:
            meta = {
                "frontend": asdict(fe), "classes": list(CLASSES), "seed": SEED, "epochs": cfg.epochs,
                "cues": list(FEATURE_NAMES), "subclasses": [s for s, _ in subclasses(d)],
                "fcm_seconds": FCM_SECONDS, "fcm": "frames", "fcm_epochs": FCM_CFG.epochs,
                "whisper": WHISPER_MODEL, "whisper_c": WHISPER_C, "fusion_weights": model.fusion.w().tolist(),
                "members": members, **({"oc_weight": cfg_oc} if cfg_oc else {}),
                "test_speakers": sorted(s for s, p in d.split.items() if p == "test"),
            }  # fmt: skip
            export(model, fe, meta, OUT_MODEL)
            torch.save(
                {"net": model.net.state_dict(), "fcm_net": model.fcm_net.state_dict()},
                cache / "model_nets.pt",
            )
            print(f"wrote {OUT_MODEL} ({OUT_MODEL.stat().st_size / 1024:.0f} KiB)", flush=True)
            check_export(model, d, te[:20])
    if loso:
        dv, loso_scores = run_loso_once()
        channel_table(d, dv, te, ood, lt, lo, scorer, out)
        out.lines.append(
            f"## Leave-one-source-out (source never trained on; networks {LOSO_EPOCHS} and "
            f"{LOSO_FCM_EPOCHS} epochs)\n"
        )
        out.lines.extend(loso_out.lines)
        np.savez(cache / "loso_scores.npz", ids=np.array([c.id for c in d.clips]),
                 v_ids=np.array([c.id for c in dv.clips]), **loso_scores)  # fmt: skip
    logo_scores: dict[str, np.ndarray] = {}
    bona_te = te[d.lab[te] == "bonafide"]
    logo_members = members if logo_members is None else logo_members
    if logo:
        out(
            f"## Leave-one-generator-out EER (generator never trained on; vs held-out bona fide; "
            f"networks {logo_epochs} and {LOGO_FCM_EPOCHS} epochs, {logo_members} seed(s) each)\n"
        )
        out(
            "| class | held-out generator | clips | EER, generator left out | "
            + " | ".join(alternative_names(len(ALTERNATIVES) + (2 if cfg_oc else 0)))
            + " | EER, in-domain, same schedule |"
        )
        out("|---|---|---|---|" + "---|" * (len(ALTERNATIVES) + (2 if cfg_oc else 0)) + "---|")
        rows = []
        near: list[tuple[str, float]] = []  # EERs without the far-field part of the data
        bona_near = np.array([d.gen[i] != "far-field" for i in bona_te])
        lcfg = TrainConfig(epochs=logo_epochs, oc_weight=cfg_oc)
        lfcm = replace(FCM_CFG, epochs=LOGO_FCM_EPOCHS, oc_weight=cfg_oc)
        # control: the same short schedule with every generator seen (held-out speakers only)
        if os.environ.get("VERILIVE_LOGO_NO_CONTROL"):  # a probe: no in-domain column (NaN)
            ctl_te = np.full(len(te), np.nan)
        else:
            ctl = train_model(d, tr, va, lcfg, lfcm, logo_seed, "[control] ", logo_members)
            ctl_te = bona_logodds(ctl.logits(d, te))
        ctl_bona = ctl_te[d.lab[te] == "bonafide"]
        for g in sorted(set(d.gen[d.lab != "bonafide"])):
            if logo_generators and g not in logo_generators:
                continue
            gi = np.flatnonzero(d.gen == g)
            keep, va_g = tr[d.gen[tr] != g], va[d.gen[va] != g]
            m = train_model(d, keep, va_g, lcfg, lfcm, logo_seed, f"[-{g}] ", logo_members)
            # the shipped rule: the weights learned out of source (never on g's clips: the leave-one-
            # source-out scores are of the real sources' clips as published), from this run or the
            # shipped model's metadata
            if loso_run is not None or fold_weights is not None:
                w = loso_run[1]["weights"] if loso_run is not None else fold_weights
                m.fusion = fit_fusion(m.branches(d, va_g), d.lab[va_g], w)
            both = np.concatenate([bona_te, gi])
            z = bona_logodds(m.logits(d, both))
            bona, sp = z[: len(bona_te)], z[len(bona_te) :]
            alternatives = m.alternatives(d, va_g, both)
            branch = [eer(o[: len(bona_te)], o[len(bona_te) :]) for o in map(bona_logodds, alternatives)]
            e = eer(bona, sp)
            e_in = eer(ctl_bona, ctl_te[d.gen[te] == g])
            sp_near = np.array([not d.clips[i].id.startswith("gl-room-") for i in gi])
            near.append((g, eer(bona[bona_near], sp[sp_near])))
            rows.append((str(d.lab[gi[0]]), g, e, e_in, *branch))
            logo_scores[g] = sp
            logo_scores[f"bona_without_{g}"] = bona
            # each branch's calibrated 4-way logits on the fold's test clips (bona fide first) and
            # validation clips, for trying other fusion rules without retraining
            logo_scores[f"branches_{g}"] = np.stack(alternatives[:4])
            cal_va = zip(m.fusion.cals, m.branches(d, va_g), strict=True)
            logo_scores[f"val_branches_{g}"] = np.stack([c(z) for c, z in cal_va])
            logo_scores[f"val_labels_{g}"] = d.lab[va_g]
            out(
                f"| {d.lab[gi[0]]} | {g} | {len(gi)} | {pct(e)} | "
                + " | ".join(pct(b) for b in branch)
                + f" | {pct(e_in)} |"
            )
            if write:  # each fold's spoof scores and its own held-out bona fide scores
                np.savez(cache / "logo_scores.npz", **logo_scores)

        def means(sel: list[tuple[Any, ...]]) -> str:
            m = [float(np.nanmean([r[k] for r in sel])) for k in (2, *range(4, len(sel[0])), 3)]
            return " | ".join(pct(v) for v in m)

        for cls in sorted({r[0] for r in rows}, key=CLASSES.index):
            out(f"| {cls} | mean over its generators | – | {means([r for r in rows if r[0] == cls])} |")
        out(f"| all | mean over {len(rows)} generators | – | {means(rows)} |")
        worst = [pct(float(np.max([r[k] for r in rows]))) for k in (2, *range(4, len(rows[0])))]
        out(f"| all | worst generator | – | {' | '.join(worst)} | – |")
        out()
        out(
            "Against the held-out bona fide without the far-field part of the data (the test set before "
            "it), and without Griffin-Lim of far-field recordings: mean "
            f"{pct(float(np.nanmean([e for _, e in near])))} over {len(near)} generators ("
            + ", ".join(f"{g} {pct(e)}" for g, e in near)
            + ")."
        )
        out()
    if write:
        text = "\n".join(out.lines) + "\n"
        tables = cache / "results.md"
        if logo_only and tables.exists():
            text = tables.read_text().split(POST_MAIN)[0] + text
        tables.write_text(text)
        write_card_tables(text)
        plot_det(d, te, lt, parse_logo_rows(text))
    print(f"total {time.time() - t0:.0f} s")


# ------------------------------------------------------------------------------------- leave one source out

LJ = "ljspeech_bonafide"
NII = "nii_vocoded_spoof"
# Folds of leave-one-source-out: every real-source folder, the NII vocoded clips and LJ Speech. A
# source's EER is against its own bona fide when it has at least MIN_OWN_BONA clips of it, else
# against the pooled bona fide of all folds, each clip scored by the fold that left its own source out.
LOSO_SOURCES = (*REAL_SOURCES, NII, LJ)
MIN_OWN_BONA = 5
LOSO_EPOCHS, LOSO_FCM_EPOCHS = 10, 10
# Variants scored in the folds: random crops of the trimmed clip in two duration bands, and the
# telephone band and MP3 versions of the clip (channel robustness).
BANDS = {"1-2 s": (1.0, 2.0), "2-4 s": (2.0, 4.0)}
CHANNELS = ("telephone", "mp3")
THRESHOLD = 0.5  # the default accept threshold on P(bona fide): log-odds 0


def origin_of(c: Clip) -> str:
    """The leave-one-source-out source of a clip ('' for speech made or recorded elsewhere). Spoofs
    made here from LJ Speech or from the NII recordings (WORLD, Griffin-Lim, replay, far field)
    belong to that source too: its fold must not train on its speakers' speech in any form."""
    if c.source in REAL_SOURCES:
        return c.source
    if c.source.startswith(NII) or c.speaker.startswith("arctic-") or c.speaker == "nii-11463":
        return NII
    return LJ if c.source == LJ or c.speaker == "lj" else ""


def _variant_worker(job: tuple[str, str, str]) -> tuple[np.ndarray, ...] | None:
    from train.antispoof_data import codec_chain, rng_for, telephone, trim

    global _FCM_ANTI
    from verilive.voice.antispoof import AntiSpoof

    if _FCM_ANTI is None:
        _FCM_ANTI = AntiSpoof(intra_op_threads=1)
    path, kind, key = job
    x, sr = sf.read(path, dtype="float32")
    assert sr == SR
    rng = rng_for(f"variant/{kind}/{key}")
    if kind in BANDS:
        lo, hi = BANDS[kind]
        x = trim(x)
        n = int(rng.uniform(lo, hi) * SR)
        if x.size < int(lo * SR):
            return None
        start = int(rng.integers(0, max(1, x.size - n + 1)))
        x = x[start : start + n]
    elif kind == "telephone":
        x = telephone(x.astype(np.float64), rng).astype(np.float32)
    else:
        x = codec_chain(x, "mp3", rng)
    x = as_pcm16(x)  # as the runtime does, and as the training clips are stored
    f = features(x).astype(np.float16)
    if f.shape[2] < 50:
        return None
    return (
        f,
        utterance_features(x).astype(np.float32),
        _FCM_ANTI.fcm_frames(x).astype(np.float16),
        clip_whisper(x),
    )


def variant_data(cache: Path, d: Data, idx: np.ndarray, workers: int = 2) -> Data:
    """Duration-band crops and channel versions of the clips ``idx`` (runtime front ends), cached
    in ``<cache>/variants.npz``; ids ``<clip id>#<variant>``, channel = the variant."""
    from concurrent.futures import ProcessPoolExecutor

    jobs = [(i, kind) for i in idx for kind in (*BANDS, *CHANNELS)]
    ids = [f"{d.clips[i].id}#{k}" for i, k in jobs]
    store = cache / "variants.npz"
    got: list[Any] | None = None
    if store.exists():
        with np.load(store, allow_pickle=False) as z:
            if list(z["ids"]) == ids:
                ok, fo, ho, f, c, h, w = (z[k] for k in ("ok", "f_off", "h_off", "F", "C", "H", "W"))
                row = np.cumsum(ok) - 1  # C and W hold the usable variants only
                got = [
                    (f[..., fo[k] : fo[k + 1]], c[row[k]], h[:, ho[k] : ho[k + 1]], w[row[k]])
                    if ok[k]
                    else None
                    for k in range(len(ids))
                ]
    if got is None:
        t = time.time()
        args = [(str(cache / d.clips[i].path), k, d.clips[i].id) for i, k in jobs]
        with ProcessPoolExecutor(workers) as ex:
            got = list(ex.map(_variant_worker, args, chunksize=8))
        have = [g for g in got if g is not None]
        np.savez(
            store, ids=np.array(ids), ok=np.array([g is not None for g in got]),
            f_off=np.cumsum([0] + [g[0].shape[2] if g else 0 for g in got]),
            h_off=np.cumsum([0] + [g[2].shape[1] if g else 0 for g in got]),
            F=np.concatenate([g[0] for g in have], axis=2), C=np.stack([g[1] for g in have]),
            H=np.concatenate([g[2] for g in have], axis=1), W=np.stack([g[3] for g in have]),
        )  # fmt: skip
        print(f"{len(have)} variants of {len(idx)} clips in {time.time() - t:.0f} s", flush=True)
    keep = [k for k, g in enumerate(got) if g is not None]
    clips = [replace(d.clips[jobs[k][0]], id=ids[k], channel=jobs[k][1]) for k in keep]
    return Data(
        clips,
        [got[k][0] for k in keep],
        np.array(["variant"] * len(keep)),
        np.array([c.label for c in clips]),
        np.array([c.generator for c in clips]),
        {},
        np.stack([got[k][1] for k in keep]),
        [got[k][2] for k in keep],
        np.stack([got[k][3] for k in keep]),
    )


def _share(x: np.ndarray) -> str:
    return "–" if len(x) == 0 else f"{100 * float(np.mean(x)):.1f} %"


POST_MAIN = "## Bona fide rejected at the default threshold"  # the first heading after the main model's


def channel_table(
    d: Data, dv: Data, te: np.ndarray, ood: np.ndarray, lt: np.ndarray, lo: np.ndarray,
    scorer: Callable[[Data, np.ndarray], np.ndarray], out: Report,
) -> None:  # fmt: skip
    """Bona fide of the other corpora (held-out speakers; Debian speech never trained on) rejected at
    the default threshold by the shipped model, as recorded and in telephone-band and MP3 versions."""
    origin = np.array([origin_of(c) for c in dv.clips])
    aux = np.flatnonzero(origin == "")
    kinds = np.array([dv.clips[i].channel for i in aux])
    vz = bona_logodds(scorer(dv, aux)) if len(aux) else np.zeros(0)
    z, zo = bona_logodds(lt), bona_logodds(lo)
    out(f"{POST_MAIN} (shipped model; held-out speakers)\n")
    out("| bona fide corpus | clips | as recorded | telephone band | MP3 |")
    out("|---|---|---|---|---|")
    for g in sorted({c.generator for c in dv.clips if origin_of(c) == ""}):
        sel = (
            (d.gen[te] == g)
            & (d.lab[te] == "bonafide")
            & np.array([not d.clips[i].id.startswith("codec-") for i in te])
        )
        gk = np.array([dv.clips[i].generator == g for i in aux])
        rej = " | ".join(_share(vz[gk & (kinds == k)] < 0) for k in CHANNELS)
        out(f"| {g} | {int(sel.sum())} | {_share(z[sel] < 0)} | {rej} |")
    for g in sorted(set(d.gen[ood])):
        sel = d.gen[ood] == g
        out(f"| {g} (Debian, never trained on) | {int(sel.sum())} | {_share(zo[sel] < 0)} | – | – |")
    out()


def run_loso(
    d: Data, dv: Data, tr: np.ndarray, va: np.ndarray, te: np.ndarray, seed: int, out: Report,
    only: frozenset[str] = frozenset(),
) -> dict[str, np.ndarray]:  # fmt: skip
    """Leave-one-source-out: for each of :data:`LOSO_SOURCES` both networks are trained without any
    clip of that source (its bona fide, its spoofs and their codec copies) and fused on the other
    sources' validation clips; the source's clips as published, and their variants, are scored."""
    origin = np.array([origin_of(c) for c in d.clips])
    v_origin = np.array([origin_of(c) for c in dv.clips])
    # Scored as the source's own clips: as published, not codec copies and not the new families'
    # resynthesis of its bona fide (those are measured by leave-one-generator-out).
    raw = np.array([not c.id.startswith("codec-") and c.generator not in NEW_FAMILIES for c in d.clips])
    lcfg = TrainConfig(epochs=LOSO_EPOCHS)
    lfcm = replace(FCM_CFG, epochs=LOSO_FCM_EPOCHS)
    pool = np.concatenate([tr, te])
    score = np.full(len(d.clips), np.nan)
    v_score = np.full(len(dv.clips), np.nan)
    branch_scores: np.ndarray | None = None
    nb = len(BRANCHES)
    v_branch = np.full((nb, len(dv.clips)), np.nan)
    fold_va: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for src in LOSO_SOURCES:
        if only and src not in only:
            continue
        va_s = va[origin[va] != src]
        m = train_model(d, pool[origin[pool] != src], va_s, lcfg, lfcm, seed, f"[-{src}] ")
        own = np.flatnonzero((origin == src) & raw)
        score[own] = bona_logodds(m.logits(d, own))
        # each branch alone and the other fusion rules (ALTERNATIVES), for choosing a rule by this table
        alts = m.alternatives(d, va_s, own)
        if branch_scores is None:
            branch_scores = np.full((len(alts), len(d.clips)), np.nan)
        branch_scores[:, own] = np.stack([bona_logodds(z) for z in alts])
        fold_va[src] = (m.branch_odds(d, va_s)[:nb], d.lab[va_s])
        vi = np.flatnonzero(v_origin == src)
        if len(vi):
            v_score[vi] = bona_logodds(m.logits(dv, vi))
            v_branch[:, vi] = m.branch_odds(dv, vi)[:nb]
        print(f"fold {src}: {len(own)} clips, {len(vi)} variants", flush=True)
    lab, vlab = d.lab == "bonafide", dv.lab == "bonafide"
    # Fusion weights learned on these out-of-source scores. The table below scores each source with
    # weights fitted without it (nested), then the fold's own validation calibration, as shipped.
    weights = np.ones(nb)
    score_equal = score.copy()
    if branch_scores is not None and len(fold_va) > 1:
        z_all = branch_scores[:nb].T
        have = ~np.isnan(z_all[:, 0])
        weights = fit_weights(z_all[have], lab[have], origin[have])
        out(f"Fusion weights learned on the out-of-source scores ({', '.join(BRANCHES)}): "
            + ", ".join(f"{w:.2f}" for w in weights) + "; per fold, without its source:\n")  # fmt: skip
        for src, (zva, lva) in fold_va.items():
            w_s = fit_weights(
                z_all[have & (origin != src)], lab[have & (origin != src)], origin[have & (origin != src)]
            )
            aff = fit_affine(zva.T @ w_s, lva)
            own = np.flatnonzero((origin == src) & raw)
            score[own] = aff((z_all[own] @ w_s)[:, None])[:, 0]
            vi = np.flatnonzero(v_origin == src)
            if len(vi):
                v_score[vi] = aff((v_branch[:, vi].T @ w_s)[:, None])[:, 0]
            out(f"* without {src}: " + ", ".join(f"{w:.2f}" for w in w_s))
        out()
    pooled = score[lab & ~np.isnan(score)]
    kinds = np.array([c.channel for c in dv.clips])

    def pair(src: str, s: np.ndarray, is_bona: np.ndarray, sel: np.ndarray, all_bona: np.ndarray):
        own = s[sel & is_bona & ~np.isnan(s)]
        spoof = s[sel & ~is_bona & ~np.isnan(s)]
        return (own if len(own) >= MIN_OWN_BONA else all_bona), spoof, len(own) >= MIN_OWN_BONA

    rows = []
    out("| source | bona fide (own) | spoofs | EER | bona fide against | 1-2 s crops | 2-4 s crops "
        "| clips > 4 s | spoofs accepted at 0.5 |")  # fmt: skip
    out("|---|---|---|---|---|---|---|---|---|")
    long_ = np.array([c.duration_s > 4.0 for c in d.clips])
    for src in LOSO_SOURCES:
        if only and src not in only:
            continue
        sel = origin == src
        bona, spoof, own = pair(src, score, lab, sel, pooled)
        if len(spoof) == 0:
            continue
        e = eer(bona, spoof)
        band = []
        for k in BANDS:
            vsel = (v_origin == src) & (kinds == k)
            vb_all = v_score[(kinds == k) & vlab & ~np.isnan(v_score)]
            vb, vs, _ = pair(src, v_score, vlab, vsel, vb_all)
            band.append(eer(vb, vs) if len(vs) and len(vb) else float("nan"))
        lb, ls, _ = pair(src, score, lab, sel & long_, pooled[pooled == pooled])
        band.append(eer(lb, ls) if len(ls) and len(lb) else float("nan"))
        rows.append((src, e, *band))
        out(f"| {src} | {int(np.sum(sel & lab & raw))} | {len(spoof)} | {pct(e)} | "
            f"{'own' if own else 'pooled'} | " + " | ".join(pct(b) for b in band)
            + f" | {_share(spoof > 0)} |")  # fmt: skip
    for name, f in (("mean", np.nanmean), ("worst", np.nanmax)):
        out(f"| **{name}** | | | **{pct(float(f([r[1] for r in rows])))}** | | "
            + " | ".join(pct(float(f([r[k] for r in rows]))) for k in (2, 3, 4)) + " | |")  # fmt: skip
    out()
    out("Per generator (each against its source's bona fide as above):\n")
    out("| source | generator | class | clips | EER | accepted at 0.5 |")
    out("|---|---|---|---|---|---|")
    for src in LOSO_SOURCES:
        sel = origin == src
        bona, _, own = pair(src, score, lab, sel, pooled)
        for g in sorted(set(d.gen[sel & ~lab])):
            s = score[sel & (d.gen == g) & raw]
            s = s[~np.isnan(s)]
            if len(s):
                out(f"| {src} | {g.split('/')[-1]} | {d.lab[sel & (d.gen == g)][0]} | {len(s)} | "
                    f"{pct(eer(bona, s))} | {_share(s > 0)} |")  # fmt: skip
    out()
    out("Bona fide rejected at the default threshold (P(bona fide) < 0.5), each clip scored by the fold "
        "that left its source out:\n")  # fmt: skip
    out("| bona fide source | clips | as published | telephone band | MP3 |")
    out("|---|---|---|---|---|")
    for src in LOSO_SOURCES:
        b = score[(origin == src) & lab & raw]
        b = b[~np.isnan(b)]
        if len(b) == 0:
            continue
        ch = [v_score[(v_origin == src) & vlab & (kinds == k)] for k in CHANNELS]
        rej = " | ".join(_share(c[~np.isnan(c)] < 0) for c in ch)
        out(f"| {src} | {len(b)} | {_share(b < 0)} | {rej} |")
    out()
    if branch_scores is not None:
        out("Each branch alone and other fusion rules in the same folds (mean / worst source EER):\n")
        for name, z in zip(alternative_names(len(branch_scores)), branch_scores, strict=True):
            es = []
            for src in LOSO_SOURCES:
                bona, spoof, _ = pair(src, z, lab, origin == src, z[lab & ~np.isnan(z)])
                if len(spoof):
                    es.append(eer(bona, spoof))
            out(f"* {name}: {pct(float(np.mean(es)))} / {pct(float(np.max(es)))}")
        out()
    return {
        "score": score, "v_score": v_score, "origin": origin, "v_origin": v_origin, "kinds": kinds,
        "branches": np.zeros((0, len(score))) if branch_scores is None else branch_scores,
        "v_branches": v_branch, "score_equal": score_equal, "weights": weights,
    }  # fmt: skip


def write_card_tables(text: str) -> None:
    """Replace the result block of the model card (its headings demoted one level)."""
    body = text.replace("\n## ", "\n### ").replace("## ", "### ", 1) if text.startswith("## ") else text
    card = OUT_CARD.read_text() if OUT_CARD.exists() else f"{BEGIN}\n{END}\n"
    head, rest = card.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    OUT_CARD.write_text(f"{head}{BEGIN}\n\n{body.strip()}\n\n{END}{tail}")
    print(f"wrote the result tables into {OUT_CARD}")


def check_export(model: Model, d: Data, idx: np.ndarray) -> None:
    """The ONNX file gives the same logits as the torch network and the regressions."""
    from verilive.voice.antispoof import AntiSpoof

    a = AntiSpoof(OUT_MODEL)
    assert d.cues is not None and d.fcm is not None
    fcm = d.fcm
    ref = model.logits(d, idx, max_frames=10**6)
    assert d.whisper is not None
    wh = d.whisper
    got = np.stack(
        [a.logits(d.feats[i].astype(np.float32), d.cues[i], fcm[i].astype(np.float32), wh[i]) for i in idx]
    )
    err = float(np.abs(ref - got).max())
    print(f"ONNX vs torch: max |logit difference| {err:.2e}")
    assert err < 1e-3


# ------------------------------------------------------------------------------------- GMM baseline


def lfcc(x: np.ndarray, n_filters: int = 30, n_ceps: int = 20, select_db: float = 40.0) -> np.ndarray:
    """LFCC + deltas + delta-deltas (frames, 60)^T of the frames within ``select_db`` of the loudest."""
    win, hop, n_fft = 320, 160, 512
    x = np.append(x[0], x[1:] - 0.97 * x[:-1]).astype(np.float64)
    n = 1 + (x.size - win) // hop
    frames = x[np.arange(win)[None, :] + hop * np.arange(n)[:, None]] * np.hamming(win)
    power = np.abs(np.fft.rfft(frames, n_fft)) ** 2
    freqs = np.linspace(0, SR / 2, n_fft // 2 + 1)
    edges = np.linspace(0, SR / 2, n_filters + 2)
    fb = np.stack(
        [
            np.clip(np.minimum((freqs - lo) / (c - lo), (hi - freqs) / (hi - c)), 0, None)
            for lo, c, hi in zip(edges, edges[1:], edges[2:], strict=False)
        ]
    )
    k = np.arange(n_ceps)[:, None]
    dct = np.cos(np.pi * k * (2 * np.arange(n_filters)[None, :] + 1) / (2 * n_filters))
    ceps = np.log(power @ fb.T + 1e-10) @ dct.T

    def delta(c: np.ndarray) -> np.ndarray:
        p = np.pad(c, ((2, 2), (0, 0)), mode="edge")
        return (p[3:-1] - p[1:-3] + 2 * (p[4:] - p[:-4])) / 10

    f = np.concatenate([ceps, delta(ceps), delta(delta(ceps))], axis=1)
    energy = 10 * np.log10(power.sum(axis=1) + 1e-10)
    keep = energy > energy.max() - select_db
    f = f[keep]
    f[:, 0] -= f[:, 0].max()
    return f.T.astype(np.float32)


def run_gmm_baseline(cache: Path) -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.mixture import GaussianMixture

    d = load_data(cache, lfcc, "lfcc", 10)
    tr = np.flatnonzero((d.part == "train") | (d.part == "val"))
    te = np.flatnonzero(d.part == "test")
    allf = np.concatenate([d.feats[i] for i in tr], axis=1).T
    mu, sd = allf.mean(axis=0), allf.std(axis=0) + 1e-6

    def fit(idx: np.ndarray, seed: int) -> list[GaussianMixture]:
        gmms = []
        for k, cls in enumerate(CLASSES):
            x = np.concatenate([(d.feats[i].T - mu) / sd for i in idx if d.lab[i] == cls])
            x = x[np.random.default_rng(seed + k).choice(len(x), min(len(x), 60000), replace=False)]
            gmms.append(
                GaussianMixture(
                    64, covariance_type="diag", max_iter=60, reg_covar=1e-3, random_state=seed + k
                ).fit(x)
            )
        return gmms

    def scores(gmms: list[GaussianMixture], idx: np.ndarray) -> np.ndarray:
        return np.array([[g.score((d.feats[i].T - mu) / sd) for g in gmms] for i in idx])

    fold = np.array([crc("fold/" + d.clips[i].speaker) % 3 for i in tr])
    oof = np.zeros((len(tr), 4))
    for k in range(3):
        oof[fold == k] = scores(fit(tr[fold != k], SEED + 10 * k), tr[fold == k])
    y = np.array([CLASSES.index(x) for x in d.lab[tr]])
    cal = LogisticRegression(class_weight="balanced", max_iter=2000).fit(oof[:, 1:] - oof[:, :1], y)
    s = scores(fit(tr, SEED), te)
    logits = cal.decision_function(s[:, 1:] - s[:, :1])
    out = Report()
    out("## LFCC-GMM baseline, in-domain (held-out speakers)\n")
    in_domain_tables(d, te, logits, out)


# ------------------------------------------------------------------------------------- plot


def parse_logo_rows(text: str) -> list[tuple[str, str, float, float]]:
    """(class, generator, EER left out, EER in-domain) rows of the leave-one-generator-out table."""
    rows = []
    if "## Leave-one-generator-out" not in text:
        return rows
    for line in text.split("## Leave-one-generator-out", 1)[1].splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) >= 10 and cells[0] in CLASSES and cells[2] != "–":

            def num(c: str) -> float:
                return float(c.rstrip(" %")) / 100 if c != "–" else float("nan")

            rows.append((cells[0], cells[1], num(cells[3]), num(cells[-1])))
    return rows


def plot_det(
    d: Data, te: np.ndarray, logits: np.ndarray, logo_rows: list[tuple[str, str, float, float]]
) -> None:
    """Left: DET curves of the shipped model on held-out speakers. Right: leave-one-generator-out EERs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy.stats import norm

    score = bona_logodds(logits)
    lab = d.lab[te]
    bona = score[lab == "bonafide"]
    ticks = [0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8]
    lim = norm.ppf([0.0005, 0.9])
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 6), gridspec_kw={"width_ratios": [1, 1.1]})
    ax.set_title("DET, shipped model, held-out speakers (in-domain)")
    ax.set_xlabel("spoofs accepted (FAR)")
    ax.set_ylabel("bona fide rejected (FRR)")
    ax.set_xticks(norm.ppf(ticks), [f"{100 * t:g}%" for t in ticks])
    ax.set_yticks(norm.ppf(ticks), [f"{100 * t:g}%" for t in ticks])
    ax.set_xlim(*lim)
    ax.set_ylim(*lim)
    ax.grid(True, alpha=0.3)
    ax.plot(lim, lim, "k:", lw=0.8)

    def curve(b: np.ndarray, s: np.ndarray, name: str, **kw: Any) -> None:
        far, frr = det_points(b, s)
        far, frr = np.clip(far, 1e-4, 1 - 1e-4), np.clip(frr, 1e-4, 1 - 1e-4)
        ax.plot(norm.ppf(far), norm.ppf(frr), label=f"{name} (EER {100 * eer(b, s):.1f}%)", **kw)

    curve(bona, score[lab != "bonafide"], "all spoofs", lw=2.5, color="k")
    for cls in CLASSES[1:]:
        curve(bona, score[lab == cls], cls)
    ax.legend(fontsize=8, loc="upper right")
    bx.set_title("EER per spoof generator: left out of training vs seen in training")
    if logo_rows:
        names = [f"{c} / {g}" for c, g, _, _ in logo_rows]
        y = np.arange(len(names))
        bx.barh(
            y - 0.2, [100 * e for *_, e, _ in logo_rows], 0.4, label="generator left out", color="tab:red"
        )
        bx.barh(
            y + 0.2,
            [100 * e for *_, e in logo_rows],
            0.4,
            label="in-domain (same schedule)",
            color="tab:gray",
        )
        bx.set_yticks(y, names, fontsize=8)
        bx.invert_yaxis()
        bx.axvline(10, color="k", ls="--", lw=0.8, label="target 10 %")
        bx.set_xlabel("EER (%) vs held-out bona fide")
        bx.legend(fontsize=8, loc="center right")
        bx.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(OUT_DET, dpi=100)
    print(f"wrote {OUT_DET}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--no-logo", action="store_true", help="skip leave-one-generator-out")
    ap.add_argument("--logo-epochs", type=int, default=8)
    ap.add_argument("--logo-seed", type=int, default=SEED + 1, help="seed of the fold trainings")
    ap.add_argument("--members", type=int, default=MEMBERS, help="seeds averaged per network")
    ap.add_argument("--logo-members", type=int, default=None, help="the same, in the folds")
    ap.add_argument("--write", action="store_true", help="write the model, DET plot and result tables")
    ap.add_argument("--logo-only", action="store_true", help="only leave-one-generator-out (model exists)")
    ap.add_argument("--gmm-baseline", action="store_true", help="only the LFCC-GMM baseline (in-domain)")
    ap.add_argument("--oc-weight", type=float, default=OC_WEIGHT, help="weight of the one-class loss")
    ap.add_argument("--logo-generators", default="", help="comma-separated: only these folds (a probe)")
    ap.add_argument("--logo", action="store_true", help="also leave-one-generator-out (the older protocol)")
    ap.add_argument("--no-loso", action="store_true", help="skip leave-one-source-out")
    ap.add_argument("--loso-sources", default="", help="comma-separated: only these folds (a probe)")
    ap.add_argument(
        "--candidate", type=Path, default=None,
        help="with --write: write the model, plot and card tables into this folder, not the repository",
    )  # fmt: skip
    args = ap.parse_args()
    if args.candidate is not None:  # a recipe under comparison: nothing in the repository changes
        global OUT_MODEL, OUT_DET, OUT_CARD
        args.candidate.mkdir(parents=True, exist_ok=True)
        OUT_MODEL, OUT_DET = args.candidate / MODEL_FILE, args.candidate / OUT_DET.name
        OUT_CARD = args.candidate / OUT_CARD.name
    if args.gmm_baseline:
        run_gmm_baseline(args.cache)
    else:
        run_lcnn(
            args.cache,
            args.logo and not args.no_logo,
            args.logo_epochs,
            args.write,
            args.logo_only,
            args.logo_seed,
            args.members,
            args.logo_members,
            args.oc_weight,
            frozenset(g for g in args.logo_generators.split(",") if g),
            not args.no_loso,
            frozenset(g for g in args.loso_sources.split(",") if g),
        )


if __name__ == "__main__":
    main()
