"""Overlapped-speech detector: where two or more people speak at once (docs/model-overlap.md).

    det = OverlapDetector()
    p = det.probabilities(wave16k)    # (n_frames,) probability of overlap per 20 ms frame

A small dilated convolutional network trained by the project (train/overlap.py) on simulated
conversations of LibriSpeech speakers. Input: the CAM++ front end (80 Kaldi log-mel bins every
10 ms, each bin's mean removed over an 8 s chunk). Output: speech and overlap logits every 20 ms.
Long audio is read in 8 s chunks every 4 s; a frame seen by two chunks averages them, weighted
towards each chunk's middle where the network sees context on both sides.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np

from verilive.models.sessions import cpu_session
from verilive.voice.campplus import kaldi_log_mel, normalise

__all__ = ["CHUNK_S", "FRAME_S", "MODEL_FILE", "SR", "OverlapDetector"]

MODEL_FILE = "overlap_model.onnx"
SR = 16000
FRAME_S = 0.02  # one output frame per 20 ms (two fbank frames)
CHUNK_S = 8.0  # what the network was trained on
_FRAME = round(FRAME_S * SR)
# Kaldi fbank gives 1 + (n - 400) // 160 frames; this many extra samples make it 2 per output frame.
_TAIL = 240


def chunk_features(chunk: np.ndarray) -> np.ndarray:
    """(2 * n_frames, 80) network input for a 16 kHz chunk of n_frames * 320 samples."""
    x = np.concatenate([np.asarray(chunk, np.float32), np.zeros(_TAIL, np.float32)])
    return normalise(kaldi_log_mel(x))


class OverlapDetector:
    """Overlap probabilities per 20 ms; thread-safe (no per-call state on ``self``)."""

    def __init__(self, model_path: str | Path | None = None, intra_op_threads: int = 0) -> None:
        source = Path(model_path) if model_path is not None else files("verilive.voice") / MODEL_FILE
        self.session = cpu_session(source.read_bytes(), intra_op_threads)
        meta: dict[str, Any] = json.loads(
            self.session.get_modelmeta().custom_metadata_map.get("verilive_overlap", "{}")
        )
        if meta.get("frame_s") != FRAME_S or meta.get("chunk_s") != CHUNK_S:
            raise ValueError(f"unexpected overlap model framing {meta}")
        self.threshold = float(meta["threshold"])
        self.meta = meta

    def probabilities(self, wave16k: np.ndarray, batch: int = 8) -> np.ndarray:
        """(len(wave16k) // 320,) float32 overlap probability of each 20 ms frame of 16 kHz audio."""
        x = np.asarray(wave16k, np.float32)
        return self.probabilities_from(lambda a, b: x[a:b], x.size, batch)

    def probabilities_from(
        self, read: Callable[[int, int], np.ndarray], n_samples: int, batch: int = 8
    ) -> np.ndarray:
        """:meth:`probabilities` of audio given by ``read(start, end)`` (16 kHz samples [start, end)),
        ``n_samples`` long: only one batch of chunks is in memory at a time, whatever the length."""
        n = n_samples // _FRAME
        if n < 2:
            return np.zeros(max(n, 0), np.float32)
        size = round(CHUNK_S / FRAME_S)
        if n <= size:
            starts = [0]
            size = n
        else:
            starts = [*range(0, n - size, size // 2), n - size]
        # Hann-like weights, never zero, so the first and last frames of the audio still count.
        w = (np.sin(np.pi * (np.arange(size) + 0.5) / size) + 0.05).astype(np.float32)
        acc = np.zeros(n, np.float32)
        norm = np.zeros(n, np.float32)
        for b0 in range(0, len(starts), batch):
            group = starts[b0 : b0 + batch]
            chunks = [read(s * _FRAME, (s + size) * _FRAME) for s in group]
            feats = np.stack(
                [chunk_features(np.nan_to_num(c, nan=0.0, posinf=0.0, neginf=0.0)) for c in chunks]
            )
            (logits,) = self.session.run(["logits"], {"fbank": feats})
            p = 1.0 / (1.0 + np.exp(-np.clip(logits[:, :size, 1], -30.0, 30.0)))
            for s, row in zip(group, p, strict=True):
                acc[s : s + size] += w * row
                norm[s : s + size] += w
        return acc / norm
