"""Voice endpoints of diarization, attributes and anti-spoofing: real models, both variants, bad input."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient

from tests.helpers import assert_error
from verilive.audio import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE
from verilive.config import Settings
from verilive.server.app import create_service_app
from verilive.voice.diarization import DiarizationConfig

pytestmark = pytest.mark.slow  # every test runs the service on the real models

OCTET = {"content-type": "application/octet-stream"}
LIBRI = "data/voice/librispeech_251spk_gender"


@pytest.fixture(scope="module")
def voice(models_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_service_app("voice", models_settings), raise_server_exceptions=False) as c:
        yield c


def wav(x: np.ndarray, sr: int) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, sr, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def libri(shared_dir: Path, name: str) -> tuple[np.ndarray, int]:
    return sf.read(shared_dir / LIBRI / name, dtype="int16")


def test_diarization_two_speakers_both_variants(voice: TestClient, shared_dir: Path) -> None:
    a, sr = libri(shared_dir, "103-1240-0000.flac")  # F
    b, _ = libri(shared_dir, "1034-121119-0000.flac")  # M
    x = np.concatenate([a[: 8 * sr], np.zeros(sr // 2, np.int16), b[: 8 * sr]])
    r1 = voice.post(
        f"/diarization_engine/get_segmentation_from_samples?sample_rate={sr}",
        content=x.astype("<i2").tobytes(),
        headers=OCTET,
    )
    r2 = voice.post(
        "/diarization_engine/get_segmentation_from_file", files={"wav_file": ("a.wav", wav(x, sr))}
    )
    assert r1.status_code == r2.status_code == 200, r1.text
    assert r1.json() == r2.json()
    turns = r1.json()
    assert sorted(turns) == ["0", "1"]
    first = turns["0"][0]
    assert set(first) == {"startSample", "endSample", "startTime", "endTime", "sampleRate"}
    assert first["startTime"] < turns["1"][0]["startTime"]  # keys in order of first appearance
    # Speaker "1" starts near the switch at 8.5 s.
    assert abs(turns["1"][0]["startTime"] - 8500) < 1000
    forced = voice.post(
        f"/diarization_engine/get_segmentation_from_samples?sample_rate={sr}&num_speakers=1",
        content=x.astype("<i2").tobytes(),
        headers=OCTET,
    ).json()
    assert sorted(forced) == ["0"]


def test_diarization_silence_is_empty(voice: TestClient) -> None:
    r = voice.post(
        "/diarization_engine/get_segmentation_from_samples?sample_rate=16000",
        content=np.zeros(16000 * 2, "<i2").tobytes(),
        headers=OCTET,
    )
    assert r.status_code == 200 and r.json() == {}


@pytest.mark.parametrize(
    ("query", "body", "code"),
    [
        ("sample_rate=16000&num_speakers=0", b"\0\1" * 8000, "INVALID_PARAMETER"),
        ("sample_rate=16000&num_speakers=-2", b"\0\1" * 8000, "INVALID_PARAMETER"),
        ("sample_rate=16000&num_speakers=100000", b"\0\1" * 8000, "INVALID_PARAMETER"),
        ("sample_rate=16000&num_speakers=two", b"\0\1" * 8000, "INVALID_PARAMETER"),
        ("sample_rate=16000", b"", "EMPTY_BODY"),
        ("sample_rate=1000", b"\0\1" * 8000, "INVALID_PARAMETER"),
        ("sample_rate=16000", b"\0\1\0", "INVALID_AUDIO"),
    ],
)
def test_diarization_bad_input(voice: TestClient, query: str, body: bytes, code: str) -> None:
    r = voice.post(f"/diarization_engine/get_segmentation_from_samples?{query}", content=body, headers=OCTET)
    assert_error(r, 400, code)


def test_published_ranges_are_the_accepted_ones(voice: TestClient) -> None:
    """The OpenAPI document's bounds of sample_rate and num_speakers are exactly what the server
    accepts, so a client generated from it never sends a value that is refused."""
    doc = voice.get("/openapi.json").json()
    op = doc["paths"]["/diarization_engine/get_segmentation_from_samples"]["post"]
    params = {p["name"]: p["schema"] for p in op["parameters"]}
    rate, count = params["sample_rate"], params["num_speakers"]["anyOf"][0]
    assert (rate["minimum"], rate["maximum"]) == (MIN_SAMPLE_RATE, MAX_SAMPLE_RATE)
    assert (count["minimum"], count["maximum"]) == (1, DiarizationConfig().max_speakers)
    url = "/diarization_engine/get_segmentation_from_samples"
    silence = np.zeros(MIN_SAMPLE_RATE, "<i2").tobytes()
    for query, status in [
        (f"sample_rate={MIN_SAMPLE_RATE}", 200),
        (f"sample_rate={MIN_SAMPLE_RATE - 1}", 400),
        (f"sample_rate={MAX_SAMPLE_RATE}", 200),
        (f"sample_rate={MAX_SAMPLE_RATE + 1}", 400),
        (f"sample_rate=16000&num_speakers={count['maximum']}", 200),
        (f"sample_rate=16000&num_speakers={count['maximum'] + 1}", 400),
    ]:
        r = voice.post(f"{url}?{query}", content=silence, headers=OCTET)
        assert r.status_code == status, (query, r.text)
        if status == 400:
            assert_error(r, 400, "INVALID_PARAMETER")
    for path in (
        "/antispoof_engine/is_spoof_samples",
        "/attributes_estimator/estimate_with_samples",
        "/voice_template_factory/create_voice_template_from_samples",
    ):
        sr = {p["name"]: p["schema"] for p in doc["paths"][path]["post"]["parameters"]}["sample_rate"]
        assert (sr["minimum"], sr["maximum"]) == (MIN_SAMPLE_RATE, MAX_SAMPLE_RATE), path


def test_diarization_file_bad_input(voice: TestClient) -> None:
    url = "/diarization_engine/get_segmentation_from_file"
    assert_error(voice.post(url, files={"wav_file": ("a.wav", b"not audio at all")}), 400, "INVALID_AUDIO")
    assert_error(
        voice.post(url + "?num_speakers=0", files={"wav_file": ("a.wav", b"x")}), 400, "INVALID_PARAMETER"
    )


def test_attributes_gender(voice: TestClient, shared_dir: Path) -> None:
    for name, gender in (("103-1240-0000.flac", "FEMALE"), ("1034-121119-0000.flac", "MALE")):
        x, sr = libri(shared_dir, name)
        r1 = voice.post(
            f"/attributes_estimator/estimate_with_samples?sample_rate={sr}",
            content=x.astype("<i2").tobytes(),
            headers=OCTET,
        )
        r2 = voice.post("/attributes_estimator/estimate_with_file", files={"wav_file": ("a.wav", wav(x, sr))})
        assert r1.status_code == r2.status_code == 200, r1.text
        body = r1.json()
        assert body == r2.json()
        assert body["gender"] == gender
        assert 0.5 <= body["genderScore"] <= 1.0
        assert body["phoneCallParticipant"] == "UNDEFINED"  # no operator/customer templates configured


def test_attributes_bad_input(voice: TestClient) -> None:
    url = "/attributes_estimator/estimate_with_samples?sample_rate=16000"
    assert_error(voice.post(url, content=b"", headers=OCTET), 400, "EMPTY_BODY")
    assert_error(voice.post(url, content=np.zeros(32000, "<i2").tobytes(), headers=OCTET), 400, "NO_SPEECH")
    assert_error(
        voice.post("/attributes_estimator/estimate_with_file", files={"wav_file": ("a", b"??")}), 400
    )


# ------------------------------------------------------------------ anti-spoofing


def test_antispoof_both_variants_agree_and_are_probabilities(voice: TestClient, shared_dir: Path) -> None:
    x, sr = libri(shared_dir, "103-1240-0000.flac")
    x = x[: 6 * sr]
    r1 = voice.post(
        f"/antispoof_engine/is_spoof_samples?sample_rate={sr}",
        content=x.astype("<i2").tobytes(),
        headers=OCTET,
    )
    r2 = voice.post("/antispoof_engine/is_spoof_file", files={"wav_file": ("a.wav", wav(x, sr))})
    assert r1.status_code == r2.status_code == 200, r1.text
    body = r1.json()
    assert set(body) == {"score", "scoreReplay", "scoreTts", "scoreVc", "unsuitableInputMessage"}
    assert body["unsuitableInputMessage"] is None
    scores = [body[k] for k in ("score", "scoreReplay", "scoreTts", "scoreVc")]
    assert all(0.0 <= s <= 1.0 for s in scores) and abs(sum(scores) - 1.0) < 1e-4
    for k, v in body.items():
        assert v == pytest.approx(r2.json()[k], abs=1e-5) if v is not None else r2.json()[k] is None


def test_antispoof_unsuitable_input_is_explained(voice: TestClient) -> None:
    url = "/antispoof_engine/is_spoof_samples?sample_rate=16000"
    r = voice.post(url, content=np.zeros(32000, "<i2").tobytes(), headers=OCTET)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["score"] is None and body["scoreTts"] is None
    assert body["unsuitableInputMessage"] == "No speech detected."
    full = np.full(32000, 32767, "<i2")
    full[::2] = -32768  # a square wave at full scale: clipped
    r = voice.post(url, content=full.tobytes(), headers=OCTET)
    assert r.status_code == 200 and r.json()["unsuitableInputMessage"].startswith("Clipped audio")


@pytest.mark.parametrize(
    ("query", "body", "code"),
    [
        ("sample_rate=16000", b"", "EMPTY_BODY"),
        ("", b"\0\1" * 8000, "MISSING_PARAMETER"),
        ("sample_rate=1000", b"\0\1" * 8000, "INVALID_PARAMETER"),
        ("sample_rate=16000", b"\0\1\0", "INVALID_AUDIO"),
    ],
)
def test_antispoof_bad_input(voice: TestClient, query: str, body: bytes, code: str) -> None:
    r = voice.post(f"/antispoof_engine/is_spoof_samples?{query}", content=body, headers=OCTET)
    assert_error(r, 400, code)


def test_antispoof_file_bad_input(voice: TestClient) -> None:
    url = "/antispoof_engine/is_spoof_file"
    assert_error(voice.post(url, files={"wav_file": ("a.wav", b"not audio at all")}), 400, "INVALID_AUDIO")
    assert_error(voice.post(url, files={"wav_file": ("a.wav", b"")}), 400)
    assert_error(voice.post(url, files={"other": ("a.wav", b"RIFF")}), 400, "MISSING_PART")
    truncated = wav(np.zeros(16000, np.int16), 16000)[:30]
    assert_error(voice.post(url, files={"wav_file": ("a.wav", truncated)}), 400, "INVALID_AUDIO")


# ------------------------------------------------------------------ bad input on every endpoint above

SAMPLES_URLS = (
    "/diarization_engine/get_segmentation_from_samples",
    "/attributes_estimator/estimate_with_samples",
    "/antispoof_engine/is_spoof_samples",
)
FILE_URLS = (
    "/diarization_engine/get_segmentation_from_file",
    "/attributes_estimator/estimate_with_file",
    "/antispoof_engine/is_spoof_file",
)


@pytest.mark.parametrize("url", SAMPLES_URLS)
def test_samples_endpoints_refuse_bad_input(voice: TestClient, url: str) -> None:
    speechless = np.zeros(1600, "<i2").tobytes()
    assert_error(voice.post(url, content=speechless, headers=OCTET), 400, "MISSING_PARAMETER")
    assert_error(
        voice.post(f"{url}?sample_rate=abc", content=speechless, headers=OCTET), 400, "INVALID_PARAMETER"
    )
    assert_error(
        voice.post(f"{url}?sample_rate=0", content=speechless, headers=OCTET), 400, "INVALID_PARAMETER"
    )
    assert_error(voice.post(f"{url}?sample_rate=16000", content=b"", headers=OCTET), 400, "EMPTY_BODY")
    assert_error(
        voice.post(f"{url}?sample_rate=16000", content=b"\0\1\0", headers=OCTET), 400, "INVALID_AUDIO"
    )


@pytest.mark.parametrize("url", FILE_URLS)
def test_file_endpoints_refuse_bad_input(voice: TestClient, url: str) -> None:
    good = wav(np.zeros(1600, np.int16), 16000)
    assert_error(voice.post(url, files={"other": ("a.wav", good)}), 400, "MISSING_PART")
    assert_error(voice.post(url), 415, "UNSUPPORTED_MEDIA_TYPE")  # no body, no content type
    assert_error(voice.post(url, content=good, headers=OCTET), 415, "UNSUPPORTED_MEDIA_TYPE")
    assert_error(voice.post(url, files={"wav_file": ("a.wav", b"")}), 400)
    assert_error(voice.post(url, files={"wav_file": ("a.wav", b"%PDF-1.4 not audio")}), 400, "INVALID_AUDIO")
    assert_error(voice.post(url, files={"wav_file": ("a.wav", good[:30])}), 400, "INVALID_AUDIO")
    # the service still answers after all of that
    assert voice.get("/core/get_expiration_date").status_code == 200


def test_limits_on_every_endpoint(models_settings: Settings) -> None:
    settings = models_settings.model_copy(update={"max_body_bytes": 100_000, "max_audio_seconds": 1.0})
    with TestClient(create_service_app("voice", settings), raise_server_exceptions=False) as c:
        huge = b"\0" * 200_000  # over the body limit
        long = np.zeros(32000, "<i2")  # 2 s: within the body limit, over the audio limit
        for url in SAMPLES_URLS:
            r = c.post(f"{url}?sample_rate=16000", content=huge, headers=OCTET)
            assert_error(r, 413, "PAYLOAD_TOO_LARGE")
            r = c.post(f"{url}?sample_rate=16000", content=long.tobytes(), headers=OCTET)
            assert_error(r, 413, "AUDIO_TOO_LONG")
        for url in FILE_URLS:
            assert_error(c.post(url, files={"wav_file": ("a.wav", huge)}), 413, "PAYLOAD_TOO_LARGE")
            assert_error(c.post(url, files={"wav_file": ("a.wav", wav(long, 16000))}), 413, "AUDIO_TOO_LONG")
