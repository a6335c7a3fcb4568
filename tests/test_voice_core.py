"""The voice endpoints this release fully delivers, and bad input on every voice endpoint kind."""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterator

import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient

import verilive
from tests.helpers import assert_error
from verilive.config import Settings
from verilive.server.app import create_service_app

pytestmark = pytest.mark.slow  # every test runs the service on the real models


@pytest.fixture
def voice(models_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_service_app("voice", models_settings), raise_server_exceptions=False) as c:
        yield c


def wav_bytes(x: np.ndarray, rate: int, subtype: str = "PCM_16", fmt: str = "WAV") -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, rate, subtype=subtype, format=fmt)
    return buf.getvalue()


def tone(seconds: float, rate: int, freq: float = 440.0, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    x = 0.5 * np.sin(2 * np.pi * freq * t)
    if channels == 1:
        return x.astype(np.float32)
    return np.stack([x * (c + 1) / channels for c in range(channels)], axis=1).astype(np.float32)


# ------------------------------------------------------------------ read_as_pcm16_samples


def test_read_as_pcm16_mono(voice: TestClient) -> None:
    x = tone(0.5, 16000)
    data = wav_bytes(x, 16000)
    r = voice.post("/core/read_as_pcm16_samples", files={"wav_file": ("a.wav", data, "audio/wav")})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"audioInfo", "pcm16Samples"}
    assert body["audioInfo"] == {"samplesNum": 8000, "sampleRate": 16000, "channelsNum": 1}
    pcm = np.frombuffer(base64.b64decode(body["pcm16Samples"]), dtype="<i2")
    expected, _ = sf.read(io.BytesIO(data), dtype="int16")
    np.testing.assert_array_equal(pcm, expected)


def test_read_as_pcm16_stereo_is_interleaved(voice: TestClient) -> None:
    x = tone(0.25, 8000, channels=2)
    data = wav_bytes(x, 8000, subtype="PCM_24")
    r = voice.post("/core/read_as_pcm16_samples", files={"wav_file": ("s.wav", data)})
    body = r.json()
    assert body["audioInfo"] == {"samplesNum": 2000, "sampleRate": 8000, "channelsNum": 2}
    pcm = np.frombuffer(base64.b64decode(body["pcm16Samples"]), dtype="<i2").reshape(-1, 2)
    expected, _ = sf.read(io.BytesIO(data), dtype="int16")
    np.testing.assert_array_equal(pcm, expected)


@pytest.mark.parametrize("subtype", ["PCM_U8", "PCM_32", "FLOAT", "ALAW", "ULAW", "IMA_ADPCM", "MS_ADPCM"])
def test_read_as_pcm16_formats(voice: TestClient, subtype: str) -> None:
    data = wav_bytes(tone(0.3, 8000), 8000, subtype=subtype)
    r = voice.post("/core/read_as_pcm16_samples", files={"wav_file": ("a.wav", data)})
    assert r.status_code == 200, r.text
    pcm = np.frombuffer(base64.b64decode(r.json()["pcm16Samples"]), dtype="<i2")
    assert abs(len(pcm) - 2400) <= 512  # ADPCM pads to whole blocks
    ref = (tone(0.3, 8000) * 32767).astype(np.int16)
    n = min(len(ref), len(pcm))
    assert np.corrcoef(ref[:n], pcm[:n])[0, 1] > 0.98


def test_read_as_pcm16_ogg_opus(voice: TestClient) -> None:
    data = wav_bytes(tone(1.0, 48000), 48000, subtype="OPUS", fmt="OGG")
    r = voice.post("/core/read_as_pcm16_samples", files={"wav_file": ("a.ogg", data, "audio/ogg")})
    assert r.status_code == 200, r.text
    info = r.json()["audioInfo"]
    assert info["sampleRate"] == 48000 and info["channelsNum"] == 1
    assert abs(info["samplesNum"] - 48000) < 4800


@pytest.mark.parametrize(
    ("kwargs", "status", "code"),
    [
        ({}, 415, "UNSUPPORTED_MEDIA_TYPE"),
        ({"files": {"other": ("a.wav", b"RIFF")}}, 400, "MISSING_PART"),
        ({"data": {"wav_file": "just text"}, "files": {"x": ("x", b"1")}}, 400, None),
        ({"files": {"wav_file": ("a.wav", b"")}}, 400, "EMPTY_PART"),
        ({"files": {"wav_file": ("a.wav", b"definitely not audio" * 10)}}, 400, "INVALID_AUDIO"),
        ({"files": {"wav_file": ("a.ogg", b"RIFF0000WAVEfmt ", "audio/ogg")}}, 400, "INVALID_AUDIO"),
        ({"json": {"wav_file": "x"}}, 415, "UNSUPPORTED_MEDIA_TYPE"),
        (
            {
                "content": b'--b\r\nContent-Disposition: form-data; name="wav_file"',
                "headers": {"content-type": "multipart/form-data; boundary=b"},
            },
            400,
            None,
        ),
    ],
    ids=[
        "no-body",
        "missing-part",
        "text-part",
        "empty",
        "garbage",
        "wav-as-ogg",
        "json",
        "malformed-multipart",
    ],
)
def test_read_as_pcm16_bad_input(voice: TestClient, kwargs: dict, status: int, code: str | None) -> None:
    assert_error(voice.post("/core/read_as_pcm16_samples", **kwargs), status, code)


def test_read_as_pcm16_truncated_wav(voice: TestClient) -> None:
    data = wav_bytes(tone(0.5, 16000), 16000)
    r = voice.post("/core/read_as_pcm16_samples", files={"wav_file": ("a.wav", data[:30])})
    assert_error(r, 400, "INVALID_AUDIO")
    # Cut mid-stream: either the frames that are there, or a clean 400.
    r = voice.post("/core/read_as_pcm16_samples", files={"wav_file": ("a.wav", data[: len(data) // 2])})
    assert r.status_code in (200, 400)
    if r.status_code == 200:
        assert 0 < r.json()["audioInfo"]["samplesNum"] <= 8000


def test_read_as_pcm16_too_long(models_settings: Settings) -> None:
    settings = models_settings.model_copy(update={"max_audio_seconds": 1.0})
    with TestClient(create_service_app("voice", settings), raise_server_exceptions=False) as c:
        data = wav_bytes(tone(2.0, 8000), 8000)
        assert_error(
            c.post("/core/read_as_pcm16_samples", files={"wav_file": ("a.wav", data)}), 413, "AUDIO_TOO_LONG"
        )


# ------------------------------------------------------------------ info endpoints


def test_build_info(voice: TestClient) -> None:
    body = voice.get("/core/get_build_info").json()
    assert set(body) == {"version", "components", "gitInfo", "licenseInfo", "licenseExpirationDate"}
    assert body["version"] == verilive.__version__
    assert "onnxruntime" in body["components"] and "silero_vad" in body["components"]
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", body["gitInfo"]), body["gitInfo"]
    assert "Apache-2.0" in body["licenseInfo"] and "MIT" in body["licenseInfo"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", body["licenseExpirationDate"])


def test_minimum_sample_rate(voice: TestClient) -> None:
    r = voice.get("/voice_template_factory/get_minimum_audio_sample_rate")
    assert r.status_code == 200 and r.json() == 8000
    assert voice.get("/voice_template_factory/get_minimum_audio_sample_rate?configuration=x").json() == 8000


# ------------------------------------------------------------------ bad input on samples and JSON endpoints

SAMPLES = "/antispoof_engine/is_spoof_samples"
OCTET = {"content-type": "application/octet-stream"}


@pytest.mark.parametrize(
    ("query", "body", "headers", "status", "code"),
    [
        ("", b"\0\0" * 100, OCTET, 400, "MISSING_PARAMETER"),
        ("?sample_rate=abc", b"\0\0" * 100, OCTET, 400, "INVALID_PARAMETER"),
        ("?sample_rate=0", b"\0\0" * 100, OCTET, 400, "INVALID_PARAMETER"),
        ("?sample_rate=100", b"\0\0" * 100, OCTET, 400, "INVALID_PARAMETER"),
        ("?sample_rate=99999999999", b"\0\0" * 100, OCTET, 400, "INVALID_PARAMETER"),
        ("?sample_rate=16000", b"", OCTET, 400, "EMPTY_BODY"),
        ("?sample_rate=16000", b"\0\0\0", OCTET, 400, "INVALID_AUDIO"),
        ("?sample_rate=16000", b"{}", {"content-type": "application/json"}, 415, "UNSUPPORTED_MEDIA_TYPE"),
    ],
    ids=["no-rate", "rate-not-int", "rate-zero", "rate-too-low", "rate-huge", "empty", "odd-bytes", "json"],
)
def test_samples_bad_input(
    voice: TestClient, query: str, body: bytes, headers: dict, status: int, code: str
) -> None:
    assert_error(voice.post(SAMPLES + query, content=body, headers=headers), status, code)


def test_samples_valid_input_reaches_the_engine(voice: TestClient) -> None:
    pcm = (tone(0.5, 16000) * 32767).astype("<i2").tobytes()
    r = voice.post(SAMPLES + "?sample_rate=16000", content=pcm, headers=OCTET)
    # A pure tone is valid input: the engine answers 200 (it cannot judge it: no speech).
    assert r.status_code == 200, r.text
    assert r.json()["score"] is None and r.json()["unsuitableInputMessage"]


@pytest.mark.parametrize(
    ("path", "kwargs", "code"),
    [
        (
            "/voice_template_matcher/match_voice_templates",
            {"content": b"{bad", "headers": {"content-type": "application/json"}},
            "INVALID_JSON",
        ),
        ("/voice_template_matcher/match_voice_templates", {"json": {"template1": "a"}}, "MISSING_FIELD"),
        ("/voice_template_matcher/match_voice_templates", {"json": ["a", "b"]}, "INVALID_BODY"),
        ("/voice_template_factory/merge_voice_templates", {"json": "not a list"}, "INVALID_BODY"),
        ("/voice_template_factory/get_voice_template_init_data_id", {"json": 12}, "INVALID_BODY"),
        (
            "/identification_engine/identify?acceptance_level=high",
            {"json": {"voice_template": "a", "identification_list": "b"}},
            "INVALID_PARAMETER",
        ),
        ("/quality_check/get_recommended_thresholds?scenario=NOPE", {}, "INVALID_PARAMETER"),
        (
            "/quality_check/check_quality_from_samples?sample_rate=16000",
            {"content": b"\0\0", "headers": OCTET},
            "MISSING_PARAMETER",
        ),
    ],
)
def test_json_and_query_bad_input(voice: TestClient, path: str, kwargs: dict, code: str) -> None:
    method = "GET" if "get_recommended" in path else "POST"
    assert_error(voice.request(method, path, **kwargs), 400, code)


def test_channel_type_enum(voice: TestClient) -> None:
    data = wav_bytes(tone(0.5, 16000), 16000)
    r = voice.post(
        "/voice_template_factory/create_voice_template_from_file?channel_type=RADIO",
        files={"wav_file": ("a.wav", data)},
    )
    assert_error(r, 400, "INVALID_PARAMETER")


def test_the_band_check_by_blocks_gives_the_one_pass_value() -> None:
    """``high_band_db`` sums the spectrum FRAME_BLOCK frames at a time (memory); the value is the
    mean power spectrum over every frame at once, as before."""
    from verilive.voice import channel

    rng = np.random.default_rng(8)
    assert channel.high_band_db(rng.normal(0, 0.1, 600), 16000) == 0.0  # under one frame: no verdict
    for n in (1024, 16000 * 3 + 77):
        x = rng.normal(0, 0.1, n)
        frames = np.lib.stride_tricks.sliding_window_view(x, 1024)[::512]
        spec = np.mean(np.abs(np.fft.rfft(frames * np.hanning(1024), axis=1)) ** 2, axis=0)
        f = np.fft.rfftfreq(1024, 1 / 16000)
        want = 10 * np.log10(spec[(f >= 4200) & (f <= 7600)].sum() / spec[(f >= 300) & (f <= 3400)].sum())
        assert channel.high_band_db(x, 16000) == pytest.approx(want, abs=1e-9)
