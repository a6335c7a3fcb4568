"""Voice template and identification list formats: round trips, test vectors, corruption."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from verilive.errors import InvalidParameter
from verilive.voice.identification import IdentificationList, ListError, matched_indexes, quantise
from verilive.voice.templates import TemplateError, TemplateMismatch, VoiceTemplate, cosine, merge

ID = "verilive-campplus-v1"
# docs/templates.md: the test vectors of format versions 1 and 2.
VECTOR = VoiceTemplate(
    ID, np.array([0.6, -0.8, 0.0, 0.25], np.float32), merge_count=2, speech_ms=5250.0, channel=1, version=1
)
VECTOR_STRING = "VkxWVAEBAgAAAAAAAAAAgrRABAAUdmVyaWxpdmUtY2FtcHBsdXMtdjGamRk/zcxMvwAAAAAAAIA+I+S4tg=="
VECTOR_V2 = VoiceTemplate(
    ID,
    np.array([0.6, -0.8, 0.0, 0.25], np.float32),
    merge_count=2,
    speech_ms=5250.0,
    channel=1,
    telephone=np.array([0.0, 0.6, 0.8, 0.0], np.float32),
)
VECTOR_V2_STRING = (
    "VkxWVAIBAgAAAAAAAAAAgrRABAAUdmVyaWxpdmUtY2FtcHBsdXMtdjEDAAAAAACCtECamRk/zcxMvwAAAAAAAIA+AAAAAACCtEAAAA"
    "AAmpkZP83MTD8AAAAAtiLSGA=="
)


def rand_template(rng: np.random.Generator, speech_ms: float = 3000.0, dim: int = 192) -> VoiceTemplate:
    v = rng.standard_normal(dim).astype(np.float32)
    return VoiceTemplate(ID, v / np.linalg.norm(v), 1, speech_ms, 1)


def test_template_test_vector() -> None:
    assert VECTOR.encode() == VECTOR_STRING
    t = VoiceTemplate.decode(VECTOR_STRING)
    assert t.init_data_id == ID and t.merge_count == 2 and t.speech_ms == 5250.0 and t.channel == 1
    assert t.version == 1 and t.tel is None
    np.testing.assert_array_equal(t.embedding, VECTOR.embedding)


def test_template_test_vector_v2() -> None:
    assert VECTOR_V2.encode() == VECTOR_V2_STRING
    t = VoiceTemplate.decode(VECTOR_V2_STRING)
    assert (t.version, t.channel, t.merge_count, t.speech_ms, t.embedding_ms) == (2, 1, 2, 5250.0, None)
    assert t.wide is not None and t.tel is not None
    np.testing.assert_array_equal(t.wide, VECTOR_V2.embedding)
    np.testing.assert_array_equal(t.tel, np.array([0.0, 0.6, 0.8, 0.0], np.float32))
    # the size cost of the second view: 8 + 4 * dim bytes and the mask byte (192-d: 813 -> 1,598 bytes)
    assert len(base64.b64decode(VECTOR_V2_STRING)) - len(base64.b64decode(VECTOR_STRING)) == 1 + 2 * 8 + 4 * 4


def _v2(rng: np.random.Generator, channel: int, speech_ms: float = 3000.0) -> VoiceTemplate:
    w, t = rng.standard_normal((2, 192)).astype(np.float32)
    w, t = w / np.linalg.norm(w), t / np.linalg.norm(t)
    if channel == 2:
        return VoiceTemplate(ID, t, 1, speech_ms, 2)
    return VoiceTemplate(ID, w, 1, speech_ms, channel, telephone=t)


def test_v2_views_round_trip_for_each_channel() -> None:
    rng = np.random.default_rng(7)
    for channel in (1, 2, 3):
        t = _v2(rng, channel, 1500.0)
        back = VoiceTemplate.decode(t.encode())
        assert (back.channel, back.version, back.speech_ms, back.merge_count) == (channel, 2, 1500.0, 1)
        for view in ("wide", "tel"):
            a, b = getattr(t, view), getattr(back, view)
            assert (a is None) == (b is None)
            if a is not None:
                np.testing.assert_array_equal(a, b)
    assert _v2(rng, 2).wide is None and _v2(rng, 1).wide is not None


def test_v2_merge_keeps_each_view_associative() -> None:
    rng = np.random.default_rng(8)
    a, b, c = _v2(rng, 1, 1000.0), _v2(rng, 2, 3000.0), _v2(rng, 1, 500.0)
    abc = merge([a, b, c])
    assert abc.channel == 3 and abc.version == 2 and abc.speech_ms == 4500.0
    # the wideband view from the wideband recordings only, with their weight; the telephone view from all
    assert abc.wide_ms == 1500.0
    np.testing.assert_allclose(abc.wide, (1000 * a.wide + 500 * c.wide) / 1500, atol=1e-6)
    np.testing.assert_allclose(abc.tel, (1000 * a.tel + 3000 * b.tel + 500 * c.tel) / 4500, atol=1e-6)
    for other in (merge([merge([a, b]), c]), merge([a, merge([b, c])]), merge([c, b, a])):
        np.testing.assert_allclose(other.wide, abc.wide, atol=1e-6)
        np.testing.assert_allclose(other.tel, abc.tel, atol=1e-6)
        assert other.wide_ms == abc.wide_ms
    back = VoiceTemplate.decode(abc.encode())
    assert back.wide_ms == 1500.0 and back.speech_ms == 4500.0
    tel_only = merge([b, _v2(rng, 2, 1000.0)])
    assert tel_only.channel == 2 and tel_only.wide is None
    # a merge with a version-1 template stays version 1: one embedding, as before issue 30
    old = merge([a, VECTOR_V1_192])
    assert old.version == 1 and old.tel is None


VECTOR_V1_192 = VoiceTemplate(ID, np.eye(192, dtype=np.float32)[0], 1, 1000.0, 1, version=1)


@pytest.mark.parametrize(
    "patch",
    [
        lambda raw: raw[:41] + b"\x04" + raw[42:],  # unknown view bit
        lambda raw: raw[:41] + b"\x00" + raw[42:],  # no view
        lambda raw: raw[:41] + b"\x01" + raw[42:],  # a view missing for the length
        lambda raw: raw[:5] + b"\x02" + raw[6:],  # TEL channel with a wideband view
        lambda raw: raw[:-10],  # truncated
    ],
)
def test_corrupted_v2_templates_are_refused(patch: object) -> None:
    import struct
    import zlib

    raw = base64.b64decode(VECTOR_V2_STRING)[:-4]
    bad = patch(raw)  # type: ignore[operator]
    text = base64.b64encode(bad + struct.pack("<I", zlib.crc32(bad))).decode()
    with pytest.raises(TemplateError):
        VoiceTemplate.decode(text)


def test_template_round_trip() -> None:
    rng = np.random.default_rng(1)
    t = rand_template(rng, 1234.5)
    back = VoiceTemplate.decode(t.encode())
    np.testing.assert_array_equal(back.embedding, t.embedding)
    assert (back.init_data_id, back.merge_count, back.speech_ms) == (ID, 1, 1234.5)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "not base64 !!",
        base64.b64encode(b"short").decode(),
        base64.b64encode(b"XXXX" + b"\0" * 64).decode(),
        VECTOR_STRING[:-8] + "AAAAAA==",  # checksum broken
        VECTOR_STRING[:40],  # truncated
    ],
)
def test_corrupted_templates_are_refused(bad: str) -> None:
    with pytest.raises(TemplateError):
        VoiceTemplate.decode(bad)


def test_every_single_byte_flip_is_caught() -> None:
    raw = bytearray(base64.b64decode(VECTOR_STRING))
    for i in range(len(raw)):
        flipped = bytearray(raw)
        flipped[i] ^= 0x40
        with pytest.raises(TemplateError):
            VoiceTemplate.decode(base64.b64encode(bytes(flipped)).decode())


def test_other_version_is_refused() -> None:
    raw = bytearray(base64.b64decode(VECTOR_STRING))
    raw[4] = 3
    with pytest.raises(TemplateError, match="version 3"):
        VoiceTemplate.decode(base64.b64encode(bytes(raw)).decode())


def test_merge_is_weighted_commutative_and_associative() -> None:
    rng = np.random.default_rng(2)
    a, b, c = rand_template(rng, 1000), rand_template(rng, 3000), rand_template(rng, 6000)
    ab = merge([a, b])
    np.testing.assert_allclose(ab.embedding, (1000 * a.embedding + 3000 * b.embedding) / 4000, atol=1e-6)
    assert ab.merge_count == 2 and ab.speech_ms == 4000
    assert merge([a, b]).encode() == merge([b, a]).encode()
    np.testing.assert_allclose(
        merge([merge([a, b]), c]).embedding, merge([a, merge([b, c])]).embedding, atol=1e-6
    )
    np.testing.assert_allclose(merge([a, b, c]).embedding, merge([merge([a, b]), c]).embedding, atol=1e-6)


def test_different_init_data_cannot_be_compared() -> None:
    rng = np.random.default_rng(3)
    a = rand_template(rng)
    other = VoiceTemplate("another-model", a.embedding, 1, 1000.0)
    with pytest.raises(TemplateMismatch):
        cosine(a, other)
    with pytest.raises(TemplateMismatch):
        merge([a, other])


def test_list_round_trip_and_quantisation_error() -> None:
    rng = np.random.default_rng(4)
    templates = [rand_template(rng) for _ in range(500)]
    ident = IdentificationList.from_templates(templates, ID)
    back = IdentificationList.decode(ident.encode())
    assert back.count == 500 and back.init_data_id == ID
    probe = rand_template(rng)
    exact = np.array([cosine(probe, t) for t in templates])
    assert np.max(np.abs(back.scores(probe) - exact)) < 0.002
    assert back.scores(templates[7])[7] == pytest.approx(1.0, abs=0.002)


def test_list_enrich_appends_in_order() -> None:
    rng = np.random.default_rng(5)
    first = [rand_template(rng) for _ in range(3)]
    more = [rand_template(rng) for _ in range(2)]
    ident = IdentificationList.decode(IdentificationList.from_templates(first, ID).encode()).extend(more)
    assert ident.count == 5
    assert int(np.argmax(ident.scores(more[1]))) == 4


def test_corrupted_lists_are_refused() -> None:
    rng = np.random.default_rng(6)
    text = IdentificationList.from_templates([rand_template(rng) for _ in range(3)], ID).encode()
    raw = bytearray(base64.b64decode(text))
    raw[30] ^= 1
    for bad in ("", "@@@", VECTOR_STRING, base64.b64encode(bytes(raw)).decode(), text[:-12]):
        with pytest.raises(ListError):
            IdentificationList.decode(bad)


def test_list_of_100000_templates() -> None:
    rng = np.random.default_rng(7)
    units = rng.standard_normal((100_000, 192)).astype(np.float32)
    units /= np.linalg.norm(units, axis=1, keepdims=True)
    templates = [VoiceTemplate(ID, u, 1, 1000.0) for u in units[:10]]
    ident = IdentificationList.from_templates(templates, ID)

    codes, scales = quantise(units)
    big = IdentificationList(ID, codes, scales)
    text = big.encode()
    assert len(text) < 27_000_000
    back = IdentificationList.decode(text)
    scores = back.scores(VoiceTemplate(ID, units[4242], 1, 1000.0))
    assert scores.shape == (100_000,) and int(np.argmax(scores)) == 4242
    assert ident.count == 10


def test_matched_indexes() -> None:
    assert matched_indexes([0.1, 0.9, 0.5, 0.9, 0.49], 0.5) == [1, 3, 2]
    assert matched_indexes([], 0.3) == []
    with pytest.raises(InvalidParameter):
        matched_indexes([0.1], float("nan"))


def test_pair_views_pick_the_views_that_fit_the_channels() -> None:
    from verilive.voice.templates import cross_view, pair_views

    rng = np.random.default_rng(11)
    mic, mic2, tel, tel2 = _v2(rng, 1), _v2(rng, 3), _v2(rng, 2), _v2(rng, 2)
    pair, u, v = pair_views(mic, mic2)
    assert pair == "MIC-MIC" and np.dot(u, v) == pytest.approx(np.dot(mic.wide, mic2.wide), abs=1e-6)
    pair, u, v = pair_views(tel, tel2)
    assert pair == "TEL-TEL" and np.dot(u, v) == pytest.approx(np.dot(tel.tel, tel2.tel), abs=1e-6)
    for a, b in ((mic, tel), (tel, mic)):
        pair, u, v = pair_views(a, b)
        assert pair == "MIC-TEL"
        expected = (mic.wide + mic.tel) / np.linalg.norm(mic.wide + mic.tel)
        np.testing.assert_allclose(cross_view(mic), expected, atol=1e-6)
        assert np.dot(u, v) == pytest.approx(np.dot(expected, tel.tel), abs=1e-6)
    # a version-1 template is compared as before: its one embedding, MIC-MIC
    pair, u, v = pair_views(VECTOR_V1_192, tel)
    assert pair == "MIC-MIC" and np.dot(u, v) == pytest.approx(tel.embedding[0], abs=1e-6)


def test_list_v2_scores_every_row_as_match_would() -> None:
    from verilive.voice.channel_map import TelephoneMap
    from verilive.voice.templates import PAIRS, pair_views

    rng = np.random.default_rng(12)
    # a telephone map, as the engine passes it, must reach every telephone view on both sides
    tel_map = TelephoneMap(
        np.eye(192, dtype=np.float32) + 0.3 * rng.standard_normal((192, 192)).astype(np.float32)
    )
    # mixed rows, and rows that all have both views (a telephone probe: the one-product path)
    for kinds in ((1, 2, 3, 2, 1, 1, 2), (3, 3, 3, 3, 3)):
        rows = [_v2(rng, c) for c in kinds]
        ident = IdentificationList.decode(IdentificationList.from_templates(rows, ID, tel_map).encode())
        assert ident.version == 2 and ident.count == len(kinds)
        for probe in (_v2(rng, 1), _v2(rng, 2), _v2(rng, 3)):
            scores, pairs = ident.pair_scores(probe, tel_map)
            for i, row in enumerate(rows):
                pair, u, v = pair_views(probe, row, tel_map)
                assert PAIRS[pairs[i]] == pair
                assert scores[i] == pytest.approx(np.dot(u, v), abs=0.002)
    rows = [_v2(rng, c) for c in (1, 2, 3, 2, 1, 1, 2)]
    ident = IdentificationList.from_templates(rows, ID, tel_map)
    # adding rows keeps version 2; a version-1 template makes (and keeps) a version-1 list, as before
    more = ident.extend([_v2(rng, 2)])
    assert more.version == 2 and more.count == 8
    old = IdentificationList.from_templates([VECTOR_V1_192, rows[0]], ID)
    assert old.version == 1 and IdentificationList.decode(old.encode()).version == 1


def test_list_v2_with_unknown_row_views_is_refused() -> None:
    import struct
    import zlib

    rng = np.random.default_rng(13)
    ident = IdentificationList.from_templates([_v2(rng, 1), _v2(rng, 2)], ID)
    raw = bytearray(base64.b64decode(ident.encode())[:-4])
    at = 15 + len(ID) + 2 * 192 + 4 * 2  # the mask bytes follow codes and scales
    assert raw[at] == 3 and raw[at + 1] == 2
    raw[at + 1] = 0x10
    text = base64.b64encode(bytes(raw) + struct.pack("<I", zlib.crc32(bytes(raw)))).decode()
    with pytest.raises(ListError, match="unknown row views"):
        IdentificationList.decode(text)


def test_calibration_per_pair_and_one_threshold_for_a_list() -> None:
    from verilive.voice.engine import MatchCalibration

    cal = MatchCalibration(36.0, -19.0, {"MIC-TEL": (30.0, -14.0), "TEL-TEL": (28.0, -12.0)})
    assert cal.probability(0.5) == pytest.approx(1 / (1 + np.exp(-(36 * 0.5 - 19))))
    assert cal.probability(0.5, "TEL-TEL") == pytest.approx(1 / (1 + np.exp(-(28 * 0.5 - 12))))
    scores = np.array([0.5, 0.5, 0.5], np.float32)
    common = cal.common_scale(scores, np.array([0, 1, 2]))
    # on the common scale, MIC-MIC's calibration gives each row its own pair's probability
    for s, pair in zip(common, ("MIC-MIC", "MIC-TEL", "TEL-TEL"), strict=True):
        assert cal.probability(float(s)) == pytest.approx(cal.probability(0.5, pair), rel=1e-5)
    # a pair without its own parameters is calibrated as MIC-MIC (calibration.json before issue 30)
    plain = MatchCalibration(36.0, -19.0)
    assert plain.probability(0.4, "TEL-TEL") == plain.probability(0.4)
