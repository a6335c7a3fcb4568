"""The identification list format (docs/identification.md).

A list is standard base64 of: a header (magic, version, dtype, init-data id, count, dim), an
int8 matrix of L2-normalised embeddings (one row per template), one float32 scale per row,
and a CRC32 of everything before it. int8 with a per-row scale keeps a 100,000-template list
at ~19 MB of binary (26 MB as base64) and scores it in tens of milliseconds; the quantisation
error of a cosine score is below 0.002 (measured in tests/test_voice_formats.py).

Version 2 (issue 30) keeps, per row, a view mask and, for rows of wideband templates, a second
int8 row: the direction a telephone probe is compared with (``templates.cross_view``). Scores
are then those of ``templates.pair_views``, row by row. Version 1 lists still load and score.
"""

from __future__ import annotations

import binascii
import math
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pybase64

from verilive.base64text import DecodedBase64
from verilive.errors import InvalidParameter
from verilive.voice.templates import (
    TEL,
    WIDE,
    TemplateError,
    TemplateMismatch,
    VoiceTemplate,
    cross_view,
    tel_view,
)

TelMap = Callable[[np.ndarray], np.ndarray]  # the engine's TelephoneMap (voice/channel_map.py)

MAGIC = b"VLIL"
VERSION = 2
READS = (1, 2)
DTYPE_INT8 = 1
# magic, version, dtype, reserved, count, dim, id length
_HEAD = struct.Struct("<4sBBHIHB")
_BLOCK = 2048  # rows converted to float32 at a time: stays in cache (4x faster than 16k)


class ListError(TemplateError):
    code = "INVALID_IDENTIFICATION_LIST"


@dataclass(frozen=True)
class IdentificationList:
    """Rows: ``codes`` x ``scales``, each template's primary direction (its wideband view, or the
    telephone view of a template of telephone audio). Version 2 adds ``masks`` (the views each
    row's template has) and, for rows with both, ``cross_codes`` x ``cross_scales``: the
    direction a telephone probe meets (zero rows elsewhere)."""

    init_data_id: str
    codes: np.ndarray  # int8 (count, dim)
    scales: np.ndarray  # float32 (count,)
    masks: np.ndarray | None = None  # uint8 (count,), version 2
    cross_codes: np.ndarray | None = None  # int8 (count, dim), version 2
    cross_scales: np.ndarray | None = None  # float32 (count,), version 2

    @property
    def count(self) -> int:
        return int(self.codes.shape[0])

    @property
    def version(self) -> int:
        return 1 if self.masks is None else 2

    @classmethod
    def empty(cls, init_data_id: str, dim: int) -> IdentificationList:
        z8, zf = np.zeros((0, dim), np.int8), np.zeros(0, np.float32)
        return cls(init_data_id, z8, zf, np.zeros(0, np.uint8), z8, zf)

    @classmethod
    def from_templates(
        cls, templates: Sequence[VoiceTemplate], init_data_id: str, tel_map: TelMap | None = None
    ) -> IdentificationList:
        """Version 2 rows: wideband templates by their wideband view and their cross direction,
        telephone templates by their telephone view, both through ``tel_map`` (the engine's
        ``TelephoneMap``) as ``templates.pair_views`` compares them."""
        if not templates:
            raise ListError("Give at least one voice template", code="EMPTY_LIST")
        for t in templates:
            if t.init_data_id != init_data_id:
                raise TemplateMismatch(
                    f"Voice template of init data '{t.init_data_id}' cannot join a list of '{init_data_id}'"
                )
        if any(t.version < 2 for t in templates):  # a version-1 template: a version-1 list, as before
            return cls(init_data_id, *quantise(np.stack([t.unit() for t in templates])))
        units = np.stack([t.unit() if t.wide is not None else tel_view(t, tel_map) for t in templates])
        codes, scales = quantise(units)
        masks = np.array([_mask(t) for t in templates], np.uint8)
        zero = np.zeros_like(units[0])
        cross = np.stack([cross_view(t, tel_map) if _mask(t) == WIDE | TEL else zero for t in templates])
        cross_codes, cross_scales = quantise(cross)
        return cls(init_data_id, codes, scales, masks, cross_codes, cross_scales)

    def extend(self, templates: Sequence[VoiceTemplate], tel_map: TelMap | None = None) -> IdentificationList:
        if not templates:
            raise ListError("Give at least one voice template to add", code="EMPTY_LIST")
        more = IdentificationList.from_templates(templates, self.init_data_id, tel_map)
        if more.codes.shape[1] != self.codes.shape[1]:
            raise TemplateMismatch("Voice templates and list have different embedding sizes")
        codes = np.concatenate([self.codes, more.codes])
        scales = np.concatenate([self.scales, more.scales])
        if self.masks is None or more.masks is None:  # a version-1 list stays version 1
            return IdentificationList(self.init_data_id, codes, scales)
        assert self.cross_codes is not None and more.cross_codes is not None
        assert self.cross_scales is not None and more.cross_scales is not None
        return IdentificationList(
            self.init_data_id,
            codes,
            scales,
            np.concatenate([self.masks, more.masks]),
            np.concatenate([self.cross_codes, more.cross_codes]),
            np.concatenate([self.cross_scales, more.cross_scales]),
        )

    def scores(self, probe: VoiceTemplate) -> np.ndarray:
        """Cosine similarity of the probe with every row (version 1, or a version-1 probe)."""
        return self.pair_scores(probe)[0]

    def pair_scores(
        self, probe: VoiceTemplate, tel_map: TelMap | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The score of the probe against every row, and each row's channel pair (an index into
        ``templates.PAIRS``), as ``templates.pair_views`` compares two templates."""
        if probe.init_data_id != self.init_data_id:
            raise TemplateMismatch(
                f"Voice template of init data '{probe.init_data_id}' cannot be searched in a list of "
                f"'{self.init_data_id}'"
            )
        q = probe.unit()
        if q.size != self.codes.shape[1]:
            raise TemplateMismatch("Voice template and list have different embedding sizes")
        pairs = np.zeros(self.count, np.uint8)
        if self.masks is None or probe.version < 2:
            return _product(self.codes, self.scales, q), pairs
        assert self.cross_codes is not None and self.cross_scales is not None
        row_wide = (self.masks & WIDE) > 0
        if probe.wide is not None:
            # wideband probe: wideband rows by their wideband view, telephone rows against the
            # probe's cross view
            out = _product(self.codes, self.scales, q)
            tel_rows = np.flatnonzero(~row_wide)
            if tel_rows.size:
                pq = cross_view(probe, tel_map) if probe.tel is not None else q
                out[tel_rows] = _product(self.codes[tel_rows], self.scales[tel_rows], pq)
                pairs[tel_rows] = 1
            return out, pairs
        # telephone probe: telephone rows by their telephone view, wideband rows by their cross view
        t = tel_view(probe, tel_map)
        pairs[:] = 2
        cross_rows = row_wide & ((self.masks & TEL) > 0)
        if cross_rows.all():  # every row has both views (the common list): one product, no copies
            out = _product(self.cross_codes, self.cross_scales, t)
        else:
            out = _product(self.codes, self.scales, t)
            wide_rows = np.flatnonzero(cross_rows)
            if wide_rows.size:
                out[wide_rows] = _product(self.cross_codes[wide_rows], self.cross_scales[wide_rows], t)
        pairs[np.flatnonzero(row_wide)] = 1
        return out, pairs

    def encode(self) -> str:
        ident = self.init_data_id.encode("utf-8")
        head = _HEAD.pack(MAGIC, self.version, DTYPE_INT8, 0, self.count, self.codes.shape[1], len(ident))
        parts = [head, ident, np.ascontiguousarray(self.codes).tobytes(), self.scales.astype("<f4").tobytes()]
        if self.masks is not None:
            assert self.cross_codes is not None and self.cross_scales is not None
            parts += [
                self.masks.astype(np.uint8).tobytes(),
                np.ascontiguousarray(self.cross_codes).tobytes(),
                self.cross_scales.astype("<f4").tobytes(),
            ]
        body = b"".join(parts)
        return pybase64.b64encode(body + struct.pack("<I", zlib.crc32(body))).decode("ascii")

    @classmethod
    def decode(cls, text: object) -> IdentificationList:
        """The list from its base64 text, or from that text already decoded by the server's JSON
        reader (:class:`DecodedBase64`, only ever made from valid base64: same checks after it)."""
        if isinstance(text, DecodedBase64):
            raw = text.data
        else:
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
        if version not in READS or dtype != DTYPE_INT8:
            raise ListError(
                f"The identification list has format version {version}/{dtype}; this server reads "
                + " and ".join(f"{v}/{DTYPE_INT8}" for v in READS)
            )
        if zlib.crc32(body) != crc:
            raise ListError("The identification list is corrupted (checksum mismatch)")
        off = _HEAD.size + id_len
        block = count * dim + 4 * count
        if dim == 0 or len(body) != off + block + (0 if version == 1 else count + block):
            raise ListError("The identification list is corrupted (inconsistent length)")
        ident = bytes(body[_HEAD.size : off]).decode("utf-8", errors="replace")
        codes = np.frombuffer(raw, dtype=np.int8, count=count * dim, offset=off).reshape(count, dim)
        scales = np.frombuffer(raw, dtype="<f4", count=count, offset=off + count * dim)
        if not np.all(np.isfinite(scales)):
            raise ListError("The identification list holds non-finite values")
        if version == 1:
            return cls(ident, codes, scales.astype(np.float32))
        at = off + block
        masks = np.frombuffer(raw, dtype=np.uint8, count=count, offset=at)
        cross_codes = np.frombuffer(raw, dtype=np.int8, count=count * dim, offset=at + count).reshape(
            count, dim
        )
        cross_scales = np.frombuffer(raw, dtype="<f4", count=count, offset=at + count + count * dim)
        if np.any(masks & ~np.uint8(WIDE | TEL)) or np.any(masks == 0):
            raise ListError("The identification list is corrupted (unknown row views)")
        if not np.all(np.isfinite(cross_scales)):
            raise ListError("The identification list holds non-finite values")
        return cls(
            ident, codes, scales.astype(np.float32), masks, cross_codes, cross_scales.astype(np.float32)
        )


def _mask(t: VoiceTemplate) -> int:
    return (WIDE if t.wide is not None else 0) | (TEL if t.tel is not None else 0)


def _product(codes: np.ndarray, scales: np.ndarray, q: np.ndarray) -> np.ndarray:
    out = np.empty(codes.shape[0], np.float32)
    for start in range(0, codes.shape[0], _BLOCK):
        block = codes[start : start + _BLOCK].astype(np.float32)
        out[start : start + _BLOCK] = block @ q
    out *= scales
    return np.clip(out, -1.0, 1.0)


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
