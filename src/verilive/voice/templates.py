"""The voice template format (docs/templates.md).

A template is an opaque JSON string: standard base64 of a small binary record with a magic,
a format version, the init-data id (which embedding space it lives in), how many recordings
were merged into it, their total speech length, and the embedding. A CRC32 catches corruption.

The stored embedding is the speech-length-weighted mean of L2-normalised embeddings, not
re-normalised, so merging is exactly associative and commutative; matching normalises.

Version 2 (issue 30) carries *views*: a template made from wideband audio holds its wideband
embedding and the embedding of its telephone-band version, so that it can be matched against a
template from a phone line in the conditions of the line (docs/telephone.md). Version 1
templates still load and match as before.
"""

from __future__ import annotations

import binascii
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pybase64

from verilive.errors import InvalidInput

MAGIC = b"VLVT"
VERSION = 2
READS = (1, 2)
# magic, version, flags, merge count, speech ms, dim, id length
_HEAD = struct.Struct("<4sBBIdHB")
# version 2, after the id: the view mask, then per view its speech ms (float64) and embedding
_MASK = struct.Struct("<B")
_VIEW_MS = struct.Struct("<d")
WIDE, TEL = 1, 2  # view bits: the wideband view, the telephone-band view
MAX_ID_LEN = 255
MIC, TEL_CHANNEL, MIXED = 1, 2, 3  # the channel byte


class TemplateError(InvalidInput):
    code = "INVALID_TEMPLATE"


class TemplateMismatch(InvalidInput):
    code = "TEMPLATE_MISMATCH"


def unit_vector(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    if not np.isfinite(n) or n == 0.0:
        raise TemplateError("Voice template has a zero or non-finite embedding")
    return (v / n).astype(np.float32)


@dataclass(frozen=True)
class VoiceTemplate:
    """``embedding``: the primary view (weighted mean of unit vectors, norm <= 1): the wideband
    view, or for a template of telephone audio only (``channel`` 2) its telephone-band view.
    ``telephone``: version 2's telephone-band view beside a wideband one, weighted by
    ``speech_ms``; ``embedding_ms`` is the primary view's weight when it differs (a merge of
    wideband and telephone templates)."""

    init_data_id: str
    embedding: np.ndarray
    merge_count: int = 1
    speech_ms: float = 0.0
    channel: int = 0  # 0 = unknown, 1 = MIC, 2 = TEL, 3 = MIXED (MIXED request, or a merge of both)
    telephone: np.ndarray | None = None
    embedding_ms: float | None = None
    version: int = VERSION

    def unit(self) -> np.ndarray:
        return unit_vector(self.embedding)

    @property
    def wide(self) -> np.ndarray | None:
        """The wideband view, None for a template of telephone audio only."""
        return None if self.version >= 2 and self.channel == TEL_CHANNEL else self.embedding

    @property
    def tel(self) -> np.ndarray | None:
        """The telephone-band view, None where the template has none (version 1, most of them)."""
        if self.version < 2:
            return self.embedding if self.channel == TEL_CHANNEL else None
        return self.embedding if self.channel == TEL_CHANNEL else self.telephone

    @property
    def wide_ms(self) -> float:
        return self.speech_ms if self.embedding_ms is None else self.embedding_ms

    def encode(self) -> str:
        ident = self.init_data_id.encode("utf-8")
        if len(ident) > MAX_ID_LEN:
            raise ValueError("init data id too long")
        emb = np.ascontiguousarray(self.embedding, dtype="<f4")
        head = _HEAD.pack(
            MAGIC, self.version, self.channel, self.merge_count, float(self.speech_ms), emb.size, len(ident)
        )
        if self.version == 1:
            body = head + ident + emb.tobytes()
        else:
            parts = [head, ident]
            wide, tel = self.wide, self.tel
            mask = (WIDE if wide is not None else 0) | (TEL if tel is not None else 0)
            parts.append(_MASK.pack(mask))
            if wide is not None:
                parts += [_VIEW_MS.pack(float(self.wide_ms)), np.ascontiguousarray(wide, "<f4").tobytes()]
            if tel is not None:
                parts += [_VIEW_MS.pack(float(self.speech_ms)), np.ascontiguousarray(tel, "<f4").tobytes()]
            body = b"".join(parts)
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
        if version not in READS:
            raise TemplateError(
                f"The {what} has format version {version}; this server reads versions "
                + " and ".join(map(str, READS))
            )
        if zlib.crc32(body) != crc:
            raise TemplateError(f"The {what} is corrupted (checksum mismatch)")
        bad_length = TemplateError(f"The {what} is corrupted (inconsistent length)")
        if dim == 0 or count == 0 or len(body) < _HEAD.size + id_len:
            raise bad_length
        ident = body[_HEAD.size : _HEAD.size + id_len].decode("utf-8", errors="replace")
        off = _HEAD.size + id_len
        if not np.isfinite(speech_ms) or speech_ms < 0:
            raise TemplateError(f"The {what} holds non-finite values")
        if version == 1:
            if len(body) != off + 4 * dim:
                raise bad_length
            emb = np.frombuffer(body, dtype="<f4", count=dim, offset=off).astype(np.float32)
            if not np.all(np.isfinite(emb)):
                raise TemplateError(f"The {what} holds non-finite values")
            return cls(ident, emb, count, speech_ms, channel, version=1)
        if len(body) < off + 1:
            raise bad_length
        (mask,) = _MASK.unpack_from(body, off)
        n_views = bin(mask).count("1")
        if mask & ~(WIDE | TEL) or n_views == 0 or len(body) != off + 1 + n_views * (8 + 4 * dim):
            raise bad_length
        views: dict[int, tuple[float, np.ndarray]] = {}
        at = off + 1
        for bit in (WIDE, TEL):
            if mask & bit:
                (ms,) = _VIEW_MS.unpack_from(body, at)
                emb = np.frombuffer(body, dtype="<f4", count=dim, offset=at + 8).astype(np.float32)
                if not np.all(np.isfinite(emb)) or not np.isfinite(ms) or ms < 0:
                    raise TemplateError(f"The {what} holds non-finite values")
                views[bit] = (ms, emb)
                at += 8 + 4 * dim
        if WIDE not in views:  # telephone audio only
            if channel != TEL_CHANNEL:
                raise TemplateError(f"The {what} is corrupted (views do not fit its channel)")
            return cls(ident, views[TEL][1], count, speech_ms, channel)
        if channel == TEL_CHANNEL:
            raise TemplateError(f"The {what} is corrupted (views do not fit its channel)")
        wide_ms, wide = views[WIDE]
        tel = views[TEL][1] if TEL in views else None
        return cls(ident, wide, count, speech_ms, channel, tel, None if wide_ms == speech_ms else wide_ms)


def merge(templates: Sequence[VoiceTemplate]) -> VoiceTemplate:
    """Speech-length-weighted mean; every recording counts by its speech length. Version 2: each
    view is the mean over the templates that have it. A merge with a version-1 template gives
    version 1 (one embedding, as before)."""
    if not templates:
        raise InvalidInput("Give at least one voice template to merge", code="EMPTY_LIST")
    require_same_space(templates)
    if all(t.version >= 2 for t in templates):
        return _merge_views(templates)
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
        version=1,
    )


def _weighted(pairs: list[tuple[float, np.ndarray]]) -> tuple[float, np.ndarray]:
    # a fixed summation order makes merges bit-identical whatever the argument order
    pairs = sorted(pairs, key=lambda p: (p[0], p[1].tobytes()))
    w = np.array([p[0] for p in pairs], np.float64)
    total = float(w.sum())
    if total <= 0:
        w = np.ones_like(w)
    stacked = np.stack([p[1].astype(np.float64) for p in pairs])
    return total, ((w[:, None] * stacked).sum(axis=0) / w.sum()).astype(np.float32)


def _merge_views(templates: Sequence[VoiceTemplate]) -> VoiceTemplate:
    wides = [(t.wide_ms, t.wide) for t in templates if t.wide is not None]
    tels = [(t.speech_ms, t.tel) for t in templates if t.tel is not None]
    channels = {t.channel for t in templates}
    channel = channels.pop() if len(channels) == 1 else MIXED
    count = sum(t.merge_count for t in templates)
    total_ms = float(sum(t.speech_ms for t in templates))
    ident = templates[0].init_data_id
    if not wides:  # telephone templates only
        _, tel = _weighted(tels)  # type: ignore[arg-type]
        return VoiceTemplate(ident, tel, count, total_ms, TEL_CHANNEL)
    wide_ms, wide = _weighted(wides)  # type: ignore[arg-type]
    # the telephone view covers every recording only if each one has it; else it is left out
    tel = _weighted(tels)[1] if len(tels) == len(templates) else None  # type: ignore[arg-type]
    return VoiceTemplate(ident, wide, count, total_ms, channel, tel, None if wide_ms == total_ms else wide_ms)


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


PAIRS = ("MIC-MIC", "MIC-TEL", "TEL-TEL")


def pair_views(
    a: VoiceTemplate, b: VoiceTemplate, tel_map: Callable[[np.ndarray], np.ndarray] | None = None
) -> tuple[str, np.ndarray, np.ndarray]:
    """The channel pair two templates are compared as, and the unit vectors compared
    (docs/telephone.md): both with a wideband view, their wideband views (MIC-MIC); both of
    telephone audio, their telephone views (TEL-TEL); one of each, the telephone view of the
    telephone template against the wideband template's wideband and telephone views together
    (MIC-TEL). ``tel_map`` (``channel_map.TelephoneMap``) maps every telephone view towards the
    wideband space first. A version-1 template is compared as before issue 30: its one
    embedding, MIC-MIC."""
    require_same_space([a, b])
    if a.version < 2 or b.version < 2:
        return "MIC-MIC", a.unit(), b.unit()
    if a.wide is not None and b.wide is not None:
        return "MIC-MIC", unit_vector(a.wide), unit_vector(b.wide)
    if a.wide is None and b.wide is None:
        assert a.tel is not None and b.tel is not None
        return "TEL-TEL", tel_view(a, tel_map), tel_view(b, tel_map)
    wide, phone = (a, b) if a.wide is not None else (b, a)
    cross, tel = cross_view(wide, tel_map), tel_view(phone, tel_map)
    return ("MIC-TEL", cross, tel) if wide is a else ("MIC-TEL", tel, cross)


def tel_view(t: VoiceTemplate, tel_map: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """The telephone view as compared: mapped by ``tel_map`` when given, unit length."""
    assert t.tel is not None
    v = unit_vector(t.tel)
    return unit_vector(tel_map(v)) if tel_map is not None else v


def cross_view(t: VoiceTemplate, tel_map: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """What a wideband template shows a telephone template: the mean direction of its wideband
    and (mapped) telephone-band views (the wideband view alone where it has no telephone one)."""
    assert t.wide is not None
    if t.tel is None:
        return unit_vector(t.wide)
    return unit_vector(unit_vector(t.wide) + tel_view(t, tel_map))
