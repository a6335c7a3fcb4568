"""Issue 44: the worst audio inputs found by bench.hostile_audio are refused or bounded; speech passes."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from bench.hostile_audio import opus_empty_frames
from fastapi.testclient import TestClient

from tests.helpers import assert_error
from verilive.audio import decode as dec
from verilive.audio import decode_file, decode_file_pcm16
from verilive.audio.resample import resample
from verilive.config import Settings
from verilive.errors import AudioDecodeError
from verilive.server.app import create_service_app

LIBRI = "data/voice/librispeech_251spk_gender"


def encode(x: np.ndarray, rate: int, fmt: str, subtype: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, rate, format=fmt, subtype=subtype, **kw)
    return buf.getvalue()


def silence(rate: int, seconds: float, channels: int = 1) -> np.ndarray:
    return np.zeros((int(rate * seconds), channels), np.float32)


@pytest.fixture(scope="module")
def speech(shared_dir: Path) -> np.ndarray:
    """6 s of real read speech at 16 kHz."""
    x, sr = sf.read(shared_dir / LIBRI / "103-1240-0000.flac", dtype="float32")
    assert sr == 16000
    return x[: 16000 * 6]


# The worst input found for each decoder whose bytes-per-second is not fixed by the codec.
WORST: dict[str, Callable[[], bytes]] = {
    "flac_silence_16k": lambda: encode(silence(16000, 60), 16000, "FLAC", "PCM_16"),
    "flac_silence_192k_8ch": lambda: encode(silence(192000, 3, 8), 192000, "FLAC", "PCM_16"),
    "alac_silence_192k_8ch": lambda: encode(silence(192000, 3, 8), 192000, "CAF", "ALAC_16"),
    "vorbis_silence_48k": lambda: encode(silence(48000, 20), 48000, "OGG", "VORBIS"),
    "vorbis_silence_192k_8ch": lambda: encode(silence(192000, 3, 8), 192000, "OGG", "VORBIS"),
    "opus_empty_frames": lambda: opus_empty_frames(60),
    "opus_empty_frames_stereo": lambda: opus_empty_frames(60, channels=2),
}


@pytest.mark.parametrize("name", sorted(WORST))
def test_worst_input_is_refused(name: str) -> None:
    data = WORST[name]()
    with pytest.raises(AudioDecodeError, match="more audio per byte than speech") as exc:
        decode_file(data)
    assert exc.value.status == 400
    with pytest.raises(AudioDecodeError, match="more audio per byte"):
        decode_file_pcm16(data)


def test_refused_while_decoding_never_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The block reader stops one frame past the bound, whatever the header said (it is a backstop:
    soundfile reads no further than the header's frame count, which is checked before decoding)."""
    data = encode(silence(16000, 120), 16000, "FLAC", "PCM_16")
    cap = dec._max_frames_for_bytes(len(data), "FLAC", "PCM_16", 16000, 1)
    assert cap < 16000 * 10
    frames_read: list[int] = []
    real_read = sf.SoundFile.read

    def spy(self: sf.SoundFile, frames: int = -1, *args: object, **kw: object) -> np.ndarray:
        out = real_read(self, frames, *args, **kw)
        frames_read.append(len(out))
        return out

    monkeypatch.setattr(sf.SoundFile, "read", spy)
    with sf.SoundFile(io.BytesIO(data)) as f, pytest.raises(AudioDecodeError, match="more audio per byte"):
        dec._read_blocks(f, "float32", 16000, float("inf"), cap, len(data), "PCM_16")
    assert sum(frames_read) == cap + 1


# Fixed-rate codecs: bytes per second are set by the codec, so their worst input (the most
# channels at the highest rate they take) decodes, and at most 5 samples per byte.
FIXED_RATE = [
    ("WAV", "PCM_16", 192000, 8),
    ("WAV", "PCM_U8", 192000, 8),
    ("WAV", "ULAW", 192000, 8),
    ("WAV", "ALAW", 192000, 8),
    ("WAV", "IMA_ADPCM", 192000, 2),
    ("WAV", "MS_ADPCM", 192000, 2),
    ("WAV", "GSM610", 8000, 1),
    ("WAV", "G721_32", 48000, 1),
    ("WAV", "NMS_ADPCM_16", 48000, 1),
    ("AU", "G723_24", 48000, 1),
    ("AIFF", "PCM_16", 192000, 8),
    ("NIST", "PCM_16", 192000, 8),
]


@pytest.mark.parametrize(("fmt", "subtype", "rate", "channels"), FIXED_RATE)
def test_fixed_rate_worst_input_is_bounded(fmt: str, subtype: str, rate: int, channels: int) -> None:
    data = encode(silence(rate, 1, channels), rate, fmt, subtype)
    audio = decode_file(data)
    assert audio.sample_rate == rate and audio.channels == channels
    assert audio.frames * audio.channels / len(data) <= 5


def _speech_in(codec: str, x: np.ndarray) -> bytes:
    x8 = resample(x, 16000, 8000)
    x48 = resample(x, 16000, 48000)
    quiet = np.concatenate([x[: 16000 * 2], np.zeros(16000 * 10, np.float32)])  # 2 s speech, 10 s zeros
    return {
        "wav_pcm16": lambda: encode(x, 16000, "WAV", "PCM_16"),
        "wav_ulaw_8k": lambda: encode(x8, 8000, "WAV", "ULAW"),
        "wav_alaw_8k": lambda: encode(x8, 8000, "WAV", "ALAW"),
        "wav_ima_adpcm": lambda: encode(x, 16000, "WAV", "IMA_ADPCM"),
        "wav_ms_adpcm": lambda: encode(x, 16000, "WAV", "MS_ADPCM"),
        "wav_gsm610": lambda: encode(x8, 8000, "WAV", "GSM610"),
        "flac": lambda: encode(x, 16000, "FLAC", "PCM_16"),
        "flac_8bit": lambda: encode(x, 16000, "FLAC", "PCM_S8"),
        "flac_mostly_digital_silence": lambda: encode(quiet, 16000, "FLAC", "PCM_16"),
        "alac": lambda: encode(x, 16000, "CAF", "ALAC_16"),
        "vorbis_lowest_quality": lambda: encode(x, 16000, "OGG", "VORBIS", compression_level=1.0),
        "opus_16k": lambda: encode(x, 16000, "OGG", "OPUS"),
        "opus_48k_6kbps": lambda: encode(x48, 48000, "OGG", "OPUS", compression_level=1.0),
        "opus_48k_6kbps_stereo": lambda: encode(
            np.stack([x48, x48], axis=1), 48000, "OGG", "OPUS", compression_level=1.0
        ),
    }[codec]()


SPEECH_CODECS = [
    "wav_pcm16",
    "wav_ulaw_8k",
    "wav_alaw_8k",
    "wav_ima_adpcm",
    "wav_ms_adpcm",
    "wav_gsm610",
    "flac",
    "flac_8bit",
    "flac_mostly_digital_silence",
    "alac",
    "vorbis_lowest_quality",
    "opus_16k",
    "opus_48k_6kbps",
    "opus_48k_6kbps_stereo",
]


@pytest.mark.parametrize("codec", SPEECH_CODECS)
def test_real_speech_still_decodes(codec: str, speech: np.ndarray) -> None:
    data = _speech_in(codec, speech)
    audio = decode_file(data)
    assert audio.duration_s == pytest.approx(12.0 if codec == "flac_mostly_digital_silence" else 6.0, abs=0.1)


def test_opus_6kbps_is_under_the_floor(speech: np.ndarray) -> None:
    """The floor sits well below the lowest real speech codec (6 kbit/s Opus, about 750 B/s)."""
    data = _speech_in("opus_48k_6kbps", speech)
    assert len(data) / 6.0 > 3 * dec._MIN_BYTES_PER_SECOND


# --- through the voice service ---


@pytest.fixture(scope="module")
def voice(models_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_service_app("voice", models_settings), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.slow
@pytest.mark.parametrize("name", ["flac_silence_16k", "opus_empty_frames", "vorbis_silence_192k_8ch"])
def test_worst_input_is_400_over_http(voice: TestClient, name: str) -> None:
    ctype = "audio/ogg" if name.startswith(("opus", "vorbis")) else "audio/flac"
    r = voice.post("/core/read_as_pcm16_samples", files={"wav_file": ("a", WORST[name](), ctype)})
    body = assert_error(r, 400, "INVALID_AUDIO")
    assert "more audio per byte" in str(body)


@pytest.mark.slow
def test_speech_file_is_200_over_http(voice: TestClient, speech: np.ndarray) -> None:
    data = _speech_in("opus_48k_6kbps", speech)
    r = voice.post("/core/read_as_pcm16_samples", files={"wav_file": ("a.opus", data, "audio/ogg")})
    assert r.status_code == 200, r.text
    assert r.json()["audioInfo"]["sampleRate"] == 48000
