"""The identification list format (docs/identification.md).

A list is standard base64 of: a header (magic, version, dtype, init-data id, count, dim), an
int8 matrix of L2-normalised embeddings (one row per template), one float32 scale per row,
and a CRC32 of everything before it. int8 with a per-row scale keeps a 100,000-template list
at ~19 MB of binary (26 MB as base64) and scores it in tens of milliseconds; the quantisation
error of a cosine score is below 0.002 (measured in tests/test_voice_formats.py).
"""

from __future__ import annotations

import binascii
import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pybase64

from verilive.errors import InvalidParameter
from verilive.voice.templates import TemplateError, TemplateMismatch, VoiceTemplate

MAGIC = b"VLIL"
VERSION = 1
DTYPE_INT8 = 1
# magic, version, dtype, reserved, count, dim, id length
_HEAD = struct.Struct("<4sBBHIHB")
_BLOCK = 2048  # rows converted to float32 at a time: stays in cache (4x faster than 16k)


class ListError(TemplateError):
    code = "INVALID_IDENTIFICATION_LIST"


@dataclass(frozen=True)
class IdentificationList:
    init_data_id: str
    codes: np.ndarray  # int8 (count, dim)
    scales: np.ndarray  # float32 (count,)

    @property
    def count(self) -> int:
        return int(self.codes.shape[0])

    @classmethod
    def empty(cls, init_data_id: str, dim: int) -> IdentificationList:
        return cls(init_data_id, np.zeros((0, dim), np.int8), np.zeros(0, np.float32))

    @classmethod
    def from_templates(cls, templates: Sequence[VoiceTemplate], init_data_id: str) -> IdentificationList:
        if not templates:
            raise ListError("Give at least one voice template", code="EMPTY_LIST")
        for t in templates:
            if t.init_data_id != init_data_id:
                raise TemplateMismatch(
                    f"Voice template of init data '{t.init_data_id}' cannot join a list of '{init_data_id}'"
                )
        units = np.stack([t.unit() for t in templates])
        codes, scales = quantise(units)
        return cls(init_data_id, codes, scales)

    def extend(self, templates: Sequence[VoiceTemplate]) -> IdentificationList:
        if not templates:
            raise ListError("Give at least one voice template to add", code="EMPTY_LIST")
        more = IdentificationList.from_templates(templates, self.init_data_id)
        if more.codes.shape[1] != self.codes.shape[1]:
            raise TemplateMismatch("Voice templates and list have different embedding sizes")
        return IdentificationList(
            self.init_data_id,
            np.concatenate([self.codes, more.codes]),
            np.concatenate([self.scales, more.scales]),
        )

    def scores(self, probe: VoiceTemplate) -> np.ndarray:
        """Cosine similarity of the probe with every row."""
        if probe.init_data_id != self.init_data_id:
            raise TemplateMismatch(
                f"Voice template of init data '{probe.init_data_id}' cannot be searched in a list of "
                f"'{self.init_data_id}'"
            )
        q = probe.unit()
        if q.size != self.codes.shape[1]:
            raise TemplateMismatch("Voice template and list have different embedding sizes")
        out = np.empty(self.count, np.float32)
        for start in range(0, self.count, _BLOCK):
            block = self.codes[start : start + _BLOCK].astype(np.float32)
            out[start : start + _BLOCK] = block @ q
        out *= self.scales
        return np.clip(out, -1.0, 1.0)

    def encode(self) -> str:
        ident = self.init_data_id.encode("utf-8")
        head = _HEAD.pack(MAGIC, VERSION, DTYPE_INT8, 0, self.count, self.codes.shape[1], len(ident))
        body = b"".join(
            [head, ident, np.ascontiguousarray(self.codes).tobytes(), self.scales.astype("<f4").tobytes()]
        )
        return pybase64.b64encode(body + struct.pack("<I", zlib.crc32(body))).decode("ascii")

    @classmethod
    def decode(cls, text: object) -> IdentificationList:
        if not isinstance(text, str) or not text:
            raise ListError("The identification list must be a non-empty string")
        try:
            raw = pybase64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ListError("The identification list is not valid base64") from exc
        if len(raw) < _HEAD.size + 4 or raw[:4] != MAGIC:
            raise ListError("The identification list is not a verilive identification list")
        body, (crc,) = memoryview(raw)[:-4], struct.unpack("<I", raw[-4:])
        _, version, dtype, _, count, dim, id_len = _HEAD.unpack_from(body)
        if version != VERSION or dtype != DTYPE_INT8:
            raise ListError(
                f"The identification list has format version {version}/{dtype}; expected {VERSION}"
            )
        if zlib.crc32(body) != crc:
            raise ListError("The identification list is corrupted (checksum mismatch)")
        off = _HEAD.size + id_len
        if dim == 0 or len(body) != off + count * dim + 4 * count:
            raise ListError("The identification list is corrupted (inconsistent length)")
        ident = bytes(body[_HEAD.size : off]).decode("utf-8", errors="replace")
        codes = np.frombuffer(raw, dtype=np.int8, count=count * dim, offset=off).reshape(count, dim)
        scales = np.frombuffer(raw, dtype="<f4", count=count, offset=off + count * dim)
        if not np.all(np.isfinite(scales)):
            raise ListError("The identification list holds non-finite values")
        return cls(ident, codes, scales.astype(np.float32))


def quantise(units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per row: row ≈ codes * scale."""
    peak = np.abs(units).max(axis=1)
    scales = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    codes = np.clip(np.rint(units / scales[:, None]), -127, 127).astype(np.int8)
    return codes, scales


def matched_indexes(scores: list[float], threshold: float) -> list[int]:
    """Indexes whose score reaches the threshold, best first (ties by index)."""
    if not math.isfinite(threshold):
        raise InvalidParameter("threshold must be a finite number")
    arr = np.asarray(scores, dtype=np.float64)
    if arr.size and not np.all(np.isfinite(arr)):
        raise InvalidParameter("scores must be finite numbers")
    idx = np.flatnonzero(arr >= threshold)
    return [int(i) for i in idx[np.lexsort((idx, -arr[idx]))]]
