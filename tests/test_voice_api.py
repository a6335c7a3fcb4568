"""Voice endpoints end to end on real models, both samples and file variants, and bad input."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient

from tests.helpers import assert_error
from verilive.config import Settings
from verilive.server.app import create_service_app
from verilive.voice.engine import INIT_DATA_ID
from verilive.voice.schemas import Scenario

pytestmark = pytest.mark.slow  # every test runs the service on the real models

LIBRI = "data/voice/librispeech_251spk_gender"
OCTET = {"content-type": "application/octet-stream"}


@pytest.fixture(scope="module")
def voice(models_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_service_app("voice", models_settings), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="module")
def speech(shared_dir: Path) -> dict[str, tuple[np.ndarray, int]]:
    out = {}
    for name in ("103-1240-0000.flac", "1034-121119-0000.flac", "1069-133699-0000.flac"):
        x, sr = sf.read(shared_dir / LIBRI / name, dtype="int16")
        out[name.split("-")[0]] = (x, sr)
    return out


def wav(x: np.ndarray, sr: int) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, sr, format="WAV", subtype="PCM_16")
    return buf.getvalue()


JSONH = {"content-type": "application/json"}


def from_samples(c: TestClient, x: np.ndarray, sr: int, query: str = "") -> str:
    r = c.post(
        f"/voice_template_factory/create_voice_template_from_samples?sample_rate={sr}{query}",
        content=x.astype("<i2").tobytes(),
        headers=OCTET,
    )
    assert r.status_code == 200, r.text
    return r.json()


def from_file(c: TestClient, x: np.ndarray, sr: int, query: str = "") -> str:
    r = c.post(
        f"/voice_template_factory/create_voice_template_from_file{query}",
        files={"wav_file": ("a.wav", wav(x, sr), "audio/wav")},
    )
    assert r.status_code == 200, r.text
    return r.json()


def match(c: TestClient, a: str, b: str) -> dict:
    r = c.post("/voice_template_matcher/match_voice_templates", json={"template1": a, "template2": b})
    assert r.status_code == 200, r.text
    return r.json()


def test_templates_match_and_merge(voice: TestClient, speech: dict) -> None:
    x, sr = speech["103"]
    y, _ = speech["1034"]
    half = x.size // 2
    a = from_samples(voice, x[:half], sr, "&channel_type=MIC")
    b = from_file(voice, x[half:], sr, "?channel_type=MIC")
    c = from_samples(voice, y, sr, "&channel_type=MIC")
    same, diff = match(voice, a, b), match(voice, a, c)
    assert set(same) == {"probability", "score"}
    assert same["score"] > diff["score"] + 0.3
    assert same["probability"] > 0.9 and diff["probability"] < 0.1
    merged = voice.post("/voice_template_factory/merge_voice_templates", json=[a, b])
    assert merged.status_code == 200
    assert match(voice, merged.json(), a)["score"] > same["score"]
    ids = {
        voice.post("/voice_template_factory/get_voice_template_init_data_id", json=t).json()
        for t in (a, merged.json())
    }
    assert ids == {INIT_DATA_ID} == {voice.get("/voice_template_factory/get_init_data_id").json()}


def test_default_channel_of_file_endpoint_is_tel(voice: TestClient, speech: dict) -> None:
    x, sr = speech["1069"]
    default = from_file(voice, x, sr)
    tel = from_file(voice, x, sr, "?channel_type=TEL")
    assert match(voice, default, tel)["score"] == pytest.approx(1.0, abs=1e-5)


def test_identification_flow(voice: TestClient, speech: dict) -> None:
    enrol = {k: from_samples(voice, x[: x.size // 2], sr) for k, (x, sr) in speech.items()}
    probes = {k: from_samples(voice, x[x.size // 2 :], sr) for k, (x, sr) in speech.items()}
    keys = list(enrol)
    r = voice.post(
        "/identification_engine/create_identification_list", json={"voice_templates": [enrol[keys[0]]]}
    )
    assert r.status_code == 200
    r = voice.post(
        "/identification_engine/enrich_identification_list",
        json={"identification_list": r.json(), "voice_templates": [enrol[k] for k in keys[1:]]},
    )
    assert r.status_code == 200
    ident_list = r.json()
    for i, k in enumerate(keys):
        res = voice.post(
            "/identification_engine/identify?acceptance_level=0.5",
            json={"voice_template": probes[k], "identification_list": ident_list},
        )
        assert res.status_code == 200, res.text
        body = res.json()
        assert set(body) == {"scores", "threshold"} and len(body["scores"]) == len(keys)
        assert int(np.argmax(body["scores"])) == i
        idx = voice.post("/identification_result/get_indexes_of_matched_templates", json=body)
        assert idx.status_code == 200 and idx.json() == [i]
    strict = voice.post(
        "/identification_engine/identify?acceptance_level=0.999999",
        json={"voice_template": probes[keys[0]], "identification_list": ident_list},
    ).json()
    lax = voice.post(
        "/identification_engine/identify?acceptance_level=0.000001",
        json={"voice_template": probes[keys[0]], "identification_list": ident_list},
    ).json()
    assert strict["threshold"] > lax["threshold"]


@pytest.mark.slow
def test_identification_with_a_list_over_a_megabyte(voice: TestClient, speech: dict) -> None:
    """A list of 3,000 rows (~1.6 MB of base64) is decoded straight from the request bytes (issue 49):
    the same scores as the same list sent with escaped slashes (which takes the ordinary JSON parse),
    and a list corrupted in the middle gets the same error either way."""
    from verilive.voice.templates import VoiceTemplate

    rng = np.random.default_rng(5)
    filler = []
    for _ in range(3000):
        wide, tel = rng.standard_normal((2, 192)).astype(np.float32)
        t = VoiceTemplate(INIT_DATA_ID, wide / np.linalg.norm(wide), 1, 4000.0, 1, tel / np.linalg.norm(tel))
        filler.append(t.encode())
    enrol = {k: from_samples(voice, x[: x.size // 2], sr) for k, (x, sr) in speech.items()}
    keys = list(enrol)
    r = voice.post("/identification_engine/create_identification_list", json={"voice_templates": filler})
    assert r.status_code == 200, r.text[:300]
    assert len(r.json()) > 2**20  # over server.uploads.LARGE_STRING: the enrich reads it from the bytes
    r = voice.post(
        "/identification_engine/enrich_identification_list",
        json={"identification_list": r.json(), "voice_templates": [enrol[k] for k in keys]},
    )
    assert r.status_code == 200, r.text[:300]
    listed = r.json()
    assert "/" in listed
    for i, k in enumerate(keys):
        x, sr = speech[k]
        probe = from_samples(voice, x[x.size // 2 :], sr)
        plain = f'{{"voice_template": "{probe}", "identification_list": "{listed}"}}'
        escaped = plain.replace("/", "\\/")  # as PHP's json_encode writes it: the ordinary parse
        fast = voice.post("/identification_engine/identify", content=plain, headers=JSONH)
        slow = voice.post("/identification_engine/identify", content=escaped, headers=JSONH)
        assert fast.status_code == slow.status_code == 200, (fast.text[:300], slow.text[:300])
        assert fast.json() == slow.json()
        scores = fast.json()["scores"]
        assert len(scores) == 3000 + len(keys) and int(np.argmax(scores)) == 3000 + i
    mid = len(listed) // 2
    broken = listed[:mid] + ("B" if listed[mid] == "A" else "A") + listed[mid + 1 :]  # still base64
    for text in (broken, listed[:mid] + "*" + listed[mid + 1 :]):
        body = f'{{"voice_template": "{probe}", "identification_list": "{text}"}}'
        a = voice.post("/identification_engine/identify", content=body, headers=JSONH)
        b = voice.post("/identification_engine/identify", content=body.replace("/", "\\/"), headers=JSONH)
        ea, eb = assert_error(a, a.status_code), assert_error(b, b.status_code)
        assert a.status_code == b.status_code and 400 <= a.status_code < 500
        assert (ea["error_code"], ea["message"]) == (eb["error_code"], eb["message"])


def test_summary_snr_quality_both_variants(voice: TestClient, speech: dict) -> None:
    x, sr = speech["1034"]
    padded = np.concatenate([np.zeros(sr, np.int16), x, np.zeros(sr, np.int16)])
    body = padded.astype("<i2").tobytes()
    s1 = voice.post(
        f"/speech_summary_engine/get_speech_summary_from_samples?sample_rate={sr}",
        content=body,
        headers=OCTET,
    )
    s2 = voice.post(
        "/speech_summary_engine/get_speech_summary_from_file", files={"wav_file": ("a.wav", wav(padded, sr))}
    )
    assert s1.status_code == s2.status_code == 200
    assert s1.json() == s2.json()
    assert set(s1.json()) == {"speechInfo", "speechEvents"}
    n1 = voice.post(
        f"/snr_computer/compute_with_samples?sample_rate={sr}", content=body, headers=OCTET
    ).json()
    n2 = voice.post("/snr_computer/compute_with_file", files={"wav_file": ("a.wav", wav(padded, sr))}).json()
    assert n1 == n2 and n1 > 30
    # This utterance has a 3 s pause: about 4 s of speech in 9.9 s.
    q = "minimum_snr_db=10&minimum_speech_length_ms=3000&minimum_speech_relative_length=0.3"
    q1 = voice.post(
        f"/quality_check/check_quality_from_samples?sample_rate={sr}&{q}", content=body, headers=OCTET
    )
    q2 = voice.post(
        f"/quality_check/check_quality_from_file?{q}", files={"audio_file": ("a.wav", wav(padded, sr))}
    )
    assert q1.status_code == q2.status_code == 200, q1.text
    assert q1.json() == q2.json()
    assert q1.json()["qualityCheckShortDescription"] == "OK"
    assert set(q1.json()) == {
        "snrDb",
        "speechLengthMs",
        "speechRelativeLength",
        "multipleSpeakersDetectorScore",
        "qualityCheckShortDescription",
    }
    q = "minimum_snr_db=10&minimum_speech_length_ms=60000"
    q3 = voice.post(
        f"/quality_check/check_quality_from_samples?sample_rate={sr}&{q}", content=body, headers=OCTET
    )
    assert q3.json()["qualityCheckShortDescription"] == "TOO_SMALL_SPEECH_TOTAL_LENGTH"


def test_checked_creation_reports_thresholds_and_still_returns_template(
    voice: TestClient, speech: dict
) -> None:
    x, sr = speech["103"]
    q = "minimum_snr_db=10&minimum_speech_length_ms=60000&maximumMultipleSpeakersDetectorScore=0.5"
    r = voice.post(
        f"/voice_template_factory/create_voice_template_checked_from_samples?sample_rate={sr}&{q}",
        content=x.astype("<i2").tobytes(),
        headers=OCTET,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    spoof = body["antispoofResult"]
    assert set(spoof) == {"score", "scoreReplay", "scoreTts", "scoreVc", "unsuitableInputMessage"}
    assert spoof["unsuitableInputMessage"] is None and 0.0 <= spoof["score"] <= 1.0
    qr = body["qualityCheckResult"]
    assert qr["qualityShortDescription"] == "TOO_SMALL_SPEECH_TOTAL_LENGTH"
    assert qr["thresholdValues"] == {
        "minimumSnrDb": 10.0,
        "minimumSpeechLengthMs": 60000.0,
        "maximumMultipleSpeakersDetectorScore": 0.5,
    }
    assert set(qr["obtainedValues"]) == {
        "snrDb",
        "speechLengthMs",
        "speechRelativeLength",
        "multipleSpeakersDetectorScore",
    }
    assert body["qualityCheckEngineResult"]["qualityCheckShortDescription"] == "TOO_SMALL_SPEECH_TOTAL_LENGTH"
    plain = from_samples(voice, x, sr)
    assert match(voice, body["voiceTemplate"], plain)["score"] > 0.99
    f = voice.post(
        f"/voice_template_factory/create_voice_template_checked_from_file?{q}",
        files={"wav_file": ("a.wav", wav(x, sr))},
    )
    assert f.status_code == 200 and f.json()["qualityCheckResult"] == qr


@pytest.mark.parametrize("scenario", list(Scenario))
def test_recommended_thresholds(voice: TestClient, scenario: Scenario) -> None:
    r = voice.get(f"/quality_check/get_recommended_thresholds?scenario={scenario.value}")
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {
        "minimumSnrDb",
        "minimumSpeechLengthMs",
        "minimumSpeechRelativeLength",
        "maximumMultipleSpeakersDetectorScore",
    }
    assert body["minimumSpeechLengthMs"] >= 1000 and 0 < body["minimumSpeechRelativeLength"] < 1


# ------------------------------------------------------------------ bad input


CREATE = "/voice_template_factory/create_voice_template_from_samples"


@pytest.mark.parametrize(
    ("url", "body", "status", "code"),
    [
        (f"{CREATE}?sample_rate=16000", b"", 400, "EMPTY_BODY"),
        (f"{CREATE}?sample_rate=16000", b"\0\0" * 32000, 400, "NO_SPEECH"),
        (f"{CREATE}?sample_rate=4000", b"\0\1" * 8000, 400, "INVALID_PARAMETER"),
        (f"{CREATE}?sample_rate=16000", b"\0\1" * 8000 + b"\0", 400, "INVALID_AUDIO"),
        (f"{CREATE}", b"\0\1" * 8000, 400, "MISSING_PARAMETER"),
        (f"{CREATE}?sample_rate=16000&channel_type=RADIO", b"\0\1" * 8000, 400, "INVALID_PARAMETER"),
        (f"{CREATE}?sample_rate=16000&configuration=turbo", b"\0\1" * 8000, 400, "INVALID_PARAMETER"),
        (
            "/quality_check/check_quality_from_samples?sample_rate=16000&minimum_snr_db=nan&minimum_speech_length_ms=1",
            b"\0\1" * 8000,
            400,
            "INVALID_PARAMETER",
        ),
        (
            "/voice_template_factory/create_voice_template_checked_from_samples?sample_rate=16000&minimum_snr_db=NaN",
            b"\0\1" * 8000,
            400,
            "INVALID_PARAMETER",
        ),
    ],
    ids=[
        "empty",
        "no-speech",
        "rate-under-min",
        "odd-bytes",
        "no-rate",
        "bad-channel",
        "bad-config",
        "nan",
        "nan-checked",
    ],
)
def test_bad_audio_requests(voice: TestClient, url: str, body: bytes, status: int, code: str) -> None:
    assert_error(voice.post(url, content=body, headers=OCTET), status, code)


@pytest.mark.parametrize("declared", [8000, 16000])
def test_a_wav_file_sent_as_samples_is_400_naming_both_rates(
    voice: TestClient, speech: dict, declared: int
) -> None:
    """A 16 kHz WAV posted to a samples endpoint (sample_rate=8000 or 16000): its header is
    recognised instead of being read as a voice at the wrong rate, and the answer names both rates."""
    x, sr = speech["103"]
    r = voice.post(f"{CREATE}?sample_rate={declared}", content=wav(x, sr), headers=OCTET)
    assert_error(r, 400, "INVALID_AUDIO")
    assert f"header says {sr} Hz; sample_rate says {declared} Hz" in r.json()["message"]
    for url in (
        "/snr_computer/compute_with_samples",
        "/speech_summary_engine/get_speech_summary_from_samples",
    ):
        assert_error(
            voice.post(f"{url}?sample_rate={declared}", content=wav(x, sr), headers=OCTET),
            400,
            "INVALID_AUDIO",
        )


def test_raw_16khz_samples_declared_as_8khz_do_not_match_their_speaker(
    voice: TestClient, speech: dict
) -> None:
    """Raw samples carry no rate, so 16 kHz audio declared as 8 kHz cannot be refused: it is read as a
    voice an octave lower and twice as slow. It fails safe: the template does not match the same
    speaker's template made at the right rate (docs/telephone.md)."""
    x, sr = speech["103"]
    right = from_samples(voice, x, sr)
    wrong = from_samples(voice, x, 8000)
    r = voice.post(
        "/voice_template_matcher/match_voice_templates", json={"template1": right, "template2": wrong}
    )
    assert r.status_code == 200, r.text
    assert r.json()["probability"] < 0.5, r.json()


def test_no_speech_file_is_400(voice: TestClient) -> None:
    silent = wav(np.zeros(16000 * 2, np.int16), 16000)
    r = voice.post(
        "/voice_template_factory/create_voice_template_from_file", files={"wav_file": ("s.wav", silent)}
    )
    assert_error(r, 400, "NO_SPEECH")


def test_corrupted_templates_and_lists(voice: TestClient, speech: dict) -> None:
    x, sr = speech["103"]
    good = from_samples(voice, x, sr)
    broken = good[:20] + ("A" if good[20] != "A" else "B") + good[21:]
    for bad in (broken, "garbage!", ""):
        r = voice.post(
            "/voice_template_matcher/match_voice_templates", json={"template1": good, "template2": bad}
        )
        assert_error(r, 400, "INVALID_TEMPLATE")
    assert_error(
        voice.post("/voice_template_factory/merge_voice_templates", json=[good, broken]),
        400,
        "INVALID_TEMPLATE",
    )
    assert_error(voice.post("/voice_template_factory/merge_voice_templates", json=[]), 400, "EMPTY_LIST")
    assert_error(
        voice.post("/voice_template_factory/get_voice_template_init_data_id", json="nope"),
        400,
        "INVALID_TEMPLATE",
    )
    r = voice.post(
        "/identification_engine/identify", json={"voice_template": good, "identification_list": good}
    )
    assert_error(r, 400, "INVALID_IDENTIFICATION_LIST")
    ok_list = voice.post(
        "/identification_engine/create_identification_list", json={"voice_templates": [good]}
    ).json()
    r = voice.post(
        "/identification_engine/enrich_identification_list",
        json={"identification_list": ok_list[:-10] + "AAAAAAAAAA", "voice_templates": [good]},
    )
    assert_error(r, 400, "INVALID_IDENTIFICATION_LIST")
    for level in ("0", "1", "nan", "-3"):
        r = voice.post(
            f"/identification_engine/identify?acceptance_level={level}",
            json={"voice_template": good, "identification_list": ok_list},
        )
        assert_error(r, 400, "INVALID_PARAMETER")
    r = voice.post("/identification_engine/create_identification_list", json={"voice_templates": []})
    assert_error(r, 400, "EMPTY_LIST")


def test_templates_of_other_init_data_are_refused(voice: TestClient, speech: dict) -> None:
    from verilive.voice.templates import VoiceTemplate

    x, sr = speech["103"]
    good = from_samples(voice, x, sr)
    t = VoiceTemplate.decode(good)
    alien = VoiceTemplate("some-other-model", t.embedding, 1, t.speech_ms).encode()
    r = voice.post(
        "/voice_template_matcher/match_voice_templates", json={"template1": good, "template2": alien}
    )
    body = assert_error(r, 400, "TEMPLATE_MISMATCH")
    assert "some-other-model" in body["message"]
    r = voice.post("/identification_engine/create_identification_list", json={"voice_templates": [alien]})
    assert_error(r, 400, "TEMPLATE_MISMATCH")
