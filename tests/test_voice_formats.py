"""Voice template and identification list formats: round trips, test vectors, corruption."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from verilive.errors import InvalidParameter
from verilive.voice.idlist import IdentificationList, ListError, matched_indexes, quantise
from verilive.voice.templates import TemplateError, TemplateMismatch, VoiceTemplate, cosine, merge

ID = "verilive-campplus-v1"
# docs/templates.md: the test vector of format version 1.
VECTOR = VoiceTemplate(
    ID, np.array([0.6, -0.8, 0.0, 0.25], np.float32), merge_count=2, speech_ms=5250.0, channel=1
)
VECTOR_STRING = "VkxWVAEBAgAAAAAAAAAAgrRABAAUdmVyaWxpdmUtY2FtcHBsdXMtdjGamRk/zcxMvwAAAAAAAIA+I+S4tg=="


def rand_template(rng: np.random.Generator, speech_ms: float = 3000.0, dim: int = 192) -> VoiceTemplate:
    v = rng.standard_normal(dim).astype(np.float32)
    return VoiceTemplate(ID, v / np.linalg.norm(v), 1, speech_ms, 1)


def test_template_test_vector() -> None:
    assert VECTOR.encode() == VECTOR_STRING
    t = VoiceTemplate.decode(VECTOR_STRING)
    assert t.init_data_id == ID and t.merge_count == 2 and t.speech_ms == 5250.0 and t.channel == 1
    np.testing.assert_array_equal(t.embedding, VECTOR.embedding)


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
    raw[4] = 2
    with pytest.raises(TemplateError, match="version 2"):
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
