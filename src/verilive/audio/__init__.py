"""Audio input layer: decode request bodies to numpy arrays and resample them.

Pure numpy/libsndfile/soxr code with no HTTP knowledge; see docs/audio.md.
"""

from __future__ import annotations

from verilive.audio.decode import (
    ACCEPTED_CONTAINERS,
    MAX_SAMPLE_RATE,
    MIN_SAMPLE_RATE,
    Audio,
    decode_file,
    decode_file_pcm16,
    decode_pcm16,
    to_pcm16,
)
from verilive.audio.resample import SOXR_QUALITY, resample

__all__ = [
    "ACCEPTED_CONTAINERS",
    "MAX_SAMPLE_RATE",
    "MIN_SAMPLE_RATE",
    "SOXR_QUALITY",
    "Audio",
    "decode_file",
    "decode_file_pcm16",
    "decode_pcm16",
    "resample",
    "to_pcm16",
]
