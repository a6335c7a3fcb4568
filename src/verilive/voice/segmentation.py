"""Speaker segmentation with pyannote segmentation-3.0: who is active in each 17 ms frame of a 10 s chunk.

    seg = Segmenter.from_registry(registry)
    starts, active = seg.sliding(read, n_samples, step=...)   # (C,) chunk starts, (C, 589, 3) bool

The model (docs/model-segmentation.md) sees exactly 10 s of 16 kHz audio and answers, per frame, one of
seven powerset classes: nobody, one of three *local* speakers, or two of them at once. Local speakers are
numbered independently in every chunk (the model was trained permutation-invariant), so "speaker #1" of
one chunk has nothing to do with "speaker #1" of the next; linking them is the diarizer's job.

Contract:
- Input scale is int16 / 32768, as trained; the waveform's instance norm makes the model nearly
  insensitive to gain, except near digital silence (eps 1e-5), where a gain of 0.01 changes 30 % of
  the frames (docs/model-segmentation.md). Audio is passed through unchanged.
- Chunks are always 10 s. Audio shorter than that is zero-padded at the end, as pyannote does; the
  last chunk of longer audio ends at the audio's end (as senko does), so no chunk holds padding.
- Frame i of a chunk covers chunk samples [270 i, 270 i + 991); its centre is 270 i + 495.

Thread-safe: no per-call state on ``self``; ``InferenceSession.run`` may be called concurrently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from verilive.models.sessions import ModelRegistry

__all__ = [
    "CHUNK_SAMPLES",
    "FRAME_CENTRE0",
    "FRAME_SIZE",
    "FRAME_STEP",
    "MODEL_ID",
    "N_FRAMES",
    "POWERSET",
    "SR",
    "TELEPHONE_MODEL_ID",
    "Segmenter",
    "chunk_starts",
]

MODEL_ID = "pyannote_segmentation"
#: segmentation-3.0 adapted to telephone lines (train/segmentation_student.py); same contract.
TELEPHONE_MODEL_ID = "pyannote_segmentation_tel"
INPUT_NAME = "waveform"
OUTPUT_NAME = "log_probs"
SR = 16000
CHUNK_SAMPLES = 160000  # 10 s, the training duration
N_FRAMES = 589  # output frames per chunk
FRAME_STEP = 270  # samples between frames (16.875 ms)
FRAME_SIZE = 991  # receptive field in samples (61.9 ms)
FRAME_CENTRE0 = 495  # centre of frame 0, in chunk samples
# Powerset classes (pyannote's Powerset(3, 2) order): rows are classes, columns local speakers.
POWERSET = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [1, 0, 1], [0, 1, 1]], dtype=bool)
MAX_LOCAL = POWERSET.shape[1]


def chunk_starts(n_samples: int, step: int) -> np.ndarray:
    """Start samples of the 10 s chunks covering ``n_samples``: every ``step``, then one ending at the end.

    One chunk (start 0, zero-padded) when the audio is at most 10 s long.
    """
    if step < 1:
        raise ValueError(f"step must be >= 1 sample, got {step}")
    if n_samples <= CHUNK_SAMPLES:
        return np.zeros(1, np.int64)
    starts = np.arange(0, n_samples - CHUNK_SAMPLES + 1, step, dtype=np.int64)
    if starts[-1] + CHUNK_SAMPLES < n_samples:
        starts = np.append(starts, n_samples - CHUNK_SAMPLES)
    return starts


class Segmenter:
    """segmentation-3.0 on onnxruntime; see the module docstring for the contract."""

    def __init__(self, session: Any) -> None:
        inputs = [i.name for i in session.get_inputs()]
        outputs = [o.name for o in session.get_outputs()]
        if inputs != [INPUT_NAME] or outputs != [OUTPUT_NAME]:
            raise ValueError(f"not a segmentation-3.0 session: inputs {inputs}, outputs {outputs}")
        self.session = session

    @classmethod
    def from_registry(cls, registry: ModelRegistry, model_id: str = MODEL_ID) -> Segmenter:
        """``model_id``: ``pyannote_segmentation``, or ``pyannote_segmentation_tel`` (the same network
        adapted to telephone lines)."""
        if model_id not in (MODEL_ID, TELEPHONE_MODEL_ID):
            raise ValueError(f"not a segmentation model: {model_id!r}")
        return cls(registry.session(model_id))

    def log_probs(self, chunks: np.ndarray) -> np.ndarray:
        """(B, 589, 7) float32 log-probabilities of the powerset classes for (B, 160000) chunks."""
        x = np.ascontiguousarray(chunks, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != CHUNK_SAMPLES:
            raise ValueError(f"expected chunks of shape (B, {CHUNK_SAMPLES}), got {x.shape}")
        (out,) = self.session.run([OUTPUT_NAME], {INPUT_NAME: x[:, None, :]})
        return np.asarray(out, np.float32)

    @staticmethod
    def active(log_probs: np.ndarray) -> np.ndarray:
        """(..., 589, 3) bool: local speakers of each frame's most likely class (pyannote's hard decision)."""
        return POWERSET[np.argmax(log_probs, axis=-1)]

    def sliding(
        self,
        read: Callable[[int, int], np.ndarray],
        n_samples: int,
        step: int,
        batch: int = 8,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Chunk starts (C,) and local activity (C, 589, 3) bool over audio given by ``read(start, end)``.

        ``read`` returns 16 kHz samples [start, end) (it may return fewer at the end; they are
        zero-padded). Only ``batch`` chunks are in memory at a time: about 5 MB of input at 8, plus 1.8 KB
        of answer per chunk.
        """
        starts = chunk_starts(n_samples, step)
        active = np.empty((starts.size, N_FRAMES, MAX_LOCAL), bool)
        for b0 in range(0, starts.size, batch):
            group = starts[b0 : b0 + batch]
            x = np.zeros((group.size, CHUNK_SAMPLES), np.float32)
            for j, s in enumerate(group):
                a = np.asarray(read(int(s), int(s) + CHUNK_SAMPLES), np.float32)[:CHUNK_SAMPLES]
                x[j, : a.size] = np.nan_to_num(a, nan=0.0, posinf=0.0, neginf=0.0)
            active[b0 : b0 + group.size] = self.active(self.log_probs(x))
        return starts, active
