"""The voice template format (docs/templates.md).

A template is an opaque JSON string: standard base64 of a small binary record with a magic,
a format version, the init-data id (which embedding space it lives in), how many recordings
were merged into it, their total speech length, and the embedding. A CRC32 catches corruption.

The stored embedding is the speech-length-weighted mean of L2-normalised embeddings, not
re-normalised, so merging is exactly associative and commutative; matching normalises.
"""

from __future__ import annotations

import binascii
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pybase64

from verilive.errors import InvalidInput

MAGIC = b"VLVT"
VERSION = 1
# magic, version, flags, merge count, speech ms, dim, id length
_HEAD = struct.Struct("<4sBBIdHB")
MAX_ID_LEN = 255


class TemplateError(InvalidInput):
    code = "INVALID_TEMPLATE"


class TemplateMismatch(InvalidInput):
    code = "TEMPLATE_MISMATCH"


@dataclass(frozen=True)
class VoiceTemplate:
    init_data_id: str
    embedding: np.ndarray  # float32 (dim,), weighted mean of unit vectors, norm <= 1
    merge_count: int = 1
    speech_ms: float = 0.0
    channel: int = 0  # flags byte: 0 = unknown, 1 = MIC, 2 = TEL, 3 = MIXED (informational)

    def unit(self) -> np.ndarray:
        n = float(np.linalg.norm(self.embedding))
        if not np.isfinite(n) or n == 0.0:
            raise TemplateError("Voice template has a zero or non-finite embedding")
        return (self.embedding / n).astype(np.float32)

    def encode(self) -> str:
        ident = self.init_data_id.encode("utf-8")
        if len(ident) > MAX_ID_LEN:
            raise ValueError("init data id too long")
        emb = np.ascontiguousarray(self.embedding, dtype="<f4")
        head = _HEAD.pack(
            MAGIC, VERSION, self.channel, self.merge_count, float(self.speech_ms), emb.size, len(ident)
        )
        body = head + ident + emb.tobytes()
        return pybase64.b64encode(body + struct.pack("<I", zlib.crc32(body))).decode("ascii")

    @classmethod
    def decode(cls, text: object, what: str = "voice template") -> VoiceTemplate:
        if not isinstance(text, str) or not text:
            raise TemplateError(f"The {what} must be a non-empty string")
        try:
            raw = pybase64.b64decode(text.strip(), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise TemplateError(f"The {what} is not valid base64") from exc
        if len(raw) < _HEAD.size + 4 or raw[:4] != MAGIC:
            raise TemplateError(f"The {what} is not a verilive voice template")
        body, (crc,) = raw[:-4], struct.unpack("<I", raw[-4:])
        _, version, channel, count, speech_ms, dim, id_len = _HEAD.unpack_from(body)
        if version != VERSION:
            raise TemplateError(
                f"The {what} has format version {version}; this server reads version {VERSION}"
            )
        if zlib.crc32(body) != crc:
            raise TemplateError(f"The {what} is corrupted (checksum mismatch)")
        if len(body) != _HEAD.size + id_len + 4 * dim or dim == 0 or count == 0:
            raise TemplateError(f"The {what} is corrupted (inconsistent length)")
        ident = body[_HEAD.size : _HEAD.size + id_len].decode("utf-8", errors="replace")
        emb = np.frombuffer(body, dtype="<f4", count=dim, offset=_HEAD.size + id_len).astype(np.float32)
        if not np.all(np.isfinite(emb)) or not np.isfinite(speech_ms) or speech_ms < 0:
            raise TemplateError(f"The {what} holds non-finite values")
        return cls(ident, emb, count, speech_ms, channel)


def merge(templates: Sequence[VoiceTemplate]) -> VoiceTemplate:
    """Speech-length-weighted mean; every recording counts by its speech length."""
    if not templates:
        raise InvalidInput("Give at least one voice template to merge", code="EMPTY_LIST")
    require_same_space(templates)
    # A fixed summation order makes merge([a, b]) and merge([b, a]) bit-identical.
    ordered = sorted(templates, key=lambda t: (t.speech_ms, t.embedding.tobytes()))
    weights = np.array([t.speech_ms for t in ordered], dtype=np.float64)
    if weights.sum() <= 0:
        weights = np.ones_like(weights)
    stacked = np.stack([t.embedding.astype(np.float64) for t in ordered])
    mean = (weights[:, None] * stacked).sum(axis=0) / weights.sum()
    total_ms = float(sum(t.speech_ms for t in ordered))
    channels = {t.channel for t in templates}
    return VoiceTemplate(
        init_data_id=templates[0].init_data_id,
        embedding=mean.astype(np.float32),
        merge_count=sum(t.merge_count for t in templates),
        speech_ms=total_ms,
        channel=channels.pop() if len(channels) == 1 else 3,
    )


def require_same_space(templates: Sequence[VoiceTemplate], expected: str | None = None) -> None:
    ids = {t.init_data_id for t in templates}
    if expected is not None:
        ids.add(expected)
    if len(ids) > 1:
        raise TemplateMismatch(
            "Voice templates were created with different init data and cannot be compared: "
            + ", ".join(sorted(ids))
        )
    dims = {t.embedding.size for t in templates}
    if len(dims) > 1:
        raise TemplateMismatch("Voice templates have different embedding sizes")


def cosine(a: VoiceTemplate, b: VoiceTemplate) -> float:
    require_same_space([a, b])
    return float(np.clip(np.dot(a.unit(), b.unit()), -1.0, 1.0))
