"""Checks of raw sample arrays and rates that the audio engines share (VAD, diarization, resampling)."""

from __future__ import annotations

import numpy as np

from verilive.errors import InvalidParameter


def check_rate(rate: object, name: str = "sample rate") -> int:
    """``rate`` as an int; InvalidParameter unless it is a positive whole number of Hz."""
    # bool is an int subclass; True Hz is a bug, not a rate.
    if isinstance(rate, bool) or not isinstance(rate, int | np.integer) or int(rate) <= 0:
        raise InvalidParameter(f"{name} must be a positive whole number of Hz, got {rate!r}")
    return int(rate)


def as_mono(wave: np.ndarray, what: str) -> np.ndarray:
    """Contiguous float32 mono samples of ``wave`` (1-D or (frames, 1)); InvalidParameter, naming ``what``
    (e.g. "VAD input"), for more channels or integer samples."""
    arr = np.asarray(wave)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise InvalidParameter(f"{what} must be mono: 1-D or (frames, 1), got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.floating):
        # int16 PCM would be 32768 times too loud; the caller must scale it to [-1, 1].
        raise InvalidParameter(f"{what} must be floating point in [-1, 1], got {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.float32)
