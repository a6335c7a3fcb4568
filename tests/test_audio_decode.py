"""Tests for verilive.audio: every input is written here with soundfile, then decoded."""

from __future__ import annotations

import contextlib
import io
import math
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from verilive.audio import (
    MAX_SAMPLE_RATE,
    MIN_SAMPLE_RATE,
    Audio,
    decode_file,
    decode_file_pcm16,
    decode_pcm16,
    resample,
    to_pcm16,
)
from verilive.errors import AudioDecodeError, InvalidParameter, PayloadTooLarge

SPEECHBRAIN = Path(__file__).resolve().parents[2] / "shared" / "data" / "voice" / "speechbrain_samples"


# --- helpers ---


def sine(freq: float, rate: int, seconds: float, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(rate * seconds)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def multi_tone(rate: int, seconds: float, channels: int) -> np.ndarray:
    """Channel c carries a distinct frequency and amplitude, so channel order is checkable."""
    cols = [sine(440 + 110 * c, rate, seconds, amp=0.2 + 0.05 * c) for c in range(channels)]
    return np.stack(cols, axis=1)


def write(data: np.ndarray, rate: int, fmt: str = "WAV", subtype: str | None = "PCM_16") -> bytes:
    buf = io.BytesIO()
    sf.write(buf, data, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


def snr_db(ref: np.ndarray, test: np.ndarray) -> float:
    noise = test - ref
    return 10 * math.log10(float(np.sum(ref.astype(np.float64) ** 2)) / float(np.sum(noise**2) + 1e-20))


def best_corr(ref: np.ndarray, test: np.ndarray, max_lag: int = 400) -> float:
    """Highest normalised correlation over small lags (lossy codecs may shift the signal)."""
    n = min(len(ref), len(test)) - max_lag
    best = -1.0
    for lag in range(max_lag):
        a, b = ref[:n], test[lag : lag + n]
        best = max(best, float(np.corrcoef(a, b)[0, 1]))
    return best


def peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / rate)[int(np.argmax(spectrum))])


# --- Ogg page CRC, to build an Opus file whose OpusHead names a non-Opus input rate ---


def _ogg_crc(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else (crc << 1)
            crc &= 0xFFFFFFFF
    return crc


def patch_opus_input_rate(data: bytes, rate: int) -> bytes:
    d = bytearray(data)
    at = d.index(b"OpusHead")
    struct.pack_into("<I", d, at + 12, rate)
    n_seg = d[26]
    end = 27 + n_seg + sum(d[27 : 27 + n_seg])  # first page holds only OpusHead
    d[22:26] = b"\0\0\0\0"
    struct.pack_into("<I", d, 22, _ogg_crc(bytes(d[:end])))
    return bytes(d)


# --- lossless WAV encodings ---

# subtype -> max abs error vs the float source (quantisation step of the encoding)
EXACTISH = {
    "PCM_U8": 1 / 128,
    "PCM_16": 1 / 32768,
    "PCM_24": 1 / 2**23,
    "PCM_32": 1e-7,
    "FLOAT": 1e-7,
    "DOUBLE": 1e-7,
}


@pytest.mark.parametrize("subtype", sorted(EXACTISH))
def test_wav_lossless_encodings(subtype: str) -> None:
    src = sine(440, 16000, 0.5)
    audio = decode_file(write(src, 16000, "WAV", subtype))
    assert audio.sample_rate == 16000
    assert audio.channels == 1
    assert audio.frames == len(src)
    assert audio.samples.dtype == np.float32
    assert audio.samples.shape == (len(src), 1)
    assert audio.samples.flags.c_contiguous
    assert np.max(np.abs(audio.samples[:, 0] - src)) <= EXACTISH[subtype] + 1e-9
    assert audio.duration_s == pytest.approx(0.5)


def test_pcm16_wav_decodes_to_exact_quantised_values() -> None:
    ints = np.array([0, 1, -1, 16384, -16384, 32767, -32768], dtype=np.int16)
    audio = decode_file(write(ints, 8000, "WAV", "PCM_16"))
    np.testing.assert_array_equal(audio.samples[:, 0], ints.astype(np.float32) / 32768)
    np.testing.assert_array_equal(to_pcm16(audio.samples), ints.reshape(-1, 1))


# --- lossy WAV codecs ---


@pytest.mark.parametrize(
    ("subtype", "rate", "min_snr"),
    [("ALAW", 16000, 30.0), ("ULAW", 16000, 30.0)],
)
def test_wav_companded(subtype: str, rate: int, min_snr: float) -> None:
    src = sine(440, rate, 0.5)
    audio = decode_file(write(src, rate, "WAV", subtype))
    assert (audio.sample_rate, audio.channels, audio.frames) == (rate, 1, len(src))
    assert snr_db(src, audio.samples[:, 0]) > min_snr


@pytest.mark.parametrize(
    ("subtype", "rate", "channels"),
    [
        ("IMA_ADPCM", 16000, 1),
        ("IMA_ADPCM", 16000, 2),
        ("MS_ADPCM", 16000, 1),
        ("MS_ADPCM", 16000, 2),
        ("GSM610", 8000, 1),  # GSM 6.10 is 8 kHz mono only
    ],
)
def test_wav_adpcm_and_gsm(subtype: str, rate: int, channels: int) -> None:
    src = multi_tone(rate, 0.5, channels)
    audio = decode_file(write(src, rate, "WAV", subtype))
    assert audio.sample_rate == rate
    assert audio.channels == channels
    # Block codecs pad the last block with silence: never fewer frames, at most one block more.
    assert len(src) <= audio.frames < len(src) + 2048
    for c in range(channels):
        assert best_corr(src[:, c], audio.samples[:, c]) > 0.98


def test_long_file_is_read_in_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    import verilive.audio.decode as decode_module

    monkeypatch.setattr(decode_module, "_BLOCK_SAMPLES", 1000)  # force many small blocks
    src = multi_tone(16000, 0.77, 3)
    for subtype in ("PCM_16", "FLOAT"):
        data = write(src, 16000, "WAV", subtype)
        audio = decode_file(data)
        np.testing.assert_allclose(audio.samples, src, atol=1 / 32768 + 1e-9)
        ints, _ = decode_file_pcm16(data)
        np.testing.assert_array_equal(ints, to_pcm16(audio.samples))


# --- channels and containers ---


@pytest.mark.parametrize("channels", range(2, 9))
@pytest.mark.parametrize("subtype", ["PCM_16", "FLOAT"])
def test_multichannel(channels: int, subtype: str) -> None:
    src = multi_tone(16000, 0.25, channels)
    audio = decode_file(write(src, 16000, "WAV", subtype))
    assert audio.channels == channels
    assert audio.frames == src.shape[0]
    np.testing.assert_allclose(audio.samples, src, atol=1 / 32768 + 1e-9)


@pytest.mark.parametrize("fmt", ["WAVEX", "RF64", "W64", "FLAC", "AIFF", "AU", "CAF", "NIST"])
def test_other_accepted_containers(fmt: str) -> None:
    src = multi_tone(22050, 0.25, 2)
    data = write(src, 22050, fmt, "PCM_16")
    assert sf.info(io.BytesIO(data)).format == fmt
    audio = decode_file(data, "audio/wav")
    assert (audio.sample_rate, audio.channels, audio.frames) == (22050, 2, src.shape[0])
    np.testing.assert_allclose(audio.samples, src, atol=1 / 32768 + 1e-9)


@pytest.mark.parametrize(("fmt", "subtype"), [("MP3", None), ("VOC", "PCM_16"), ("IRCAM", "PCM_16")])
def test_unaccepted_containers_are_refused(fmt: str, subtype: str | None) -> None:
    data = write(sine(440, 16000, 0.5), 16000, fmt, subtype)
    with pytest.raises(AudioDecodeError, match=f"{fmt} files are not accepted"):
        decode_file(data)


# --- int16 path (/core/read_as_pcm16_samples) ---

INTEGER_CODED = [
    ("WAV", "PCM_U8", 16000, 1),
    ("WAV", "PCM_16", 16000, 2),
    ("WAV", "PCM_24", 16000, 3),
    ("WAV", "PCM_32", 16000, 1),
    ("WAV", "ALAW", 16000, 1),
    ("WAV", "ULAW", 16000, 2),
    ("WAV", "IMA_ADPCM", 16000, 2),
    ("WAV", "MS_ADPCM", 16000, 1),
    ("WAV", "GSM610", 8000, 1),
    ("FLAC", "PCM_24", 16000, 1),
    ("RF64", "PCM_16", 16000, 8),
]


@pytest.mark.parametrize(("fmt", "subtype", "rate", "channels"), INTEGER_CODED)
def test_pcm16_path_matches_libsndfile_for_integer_coded(
    fmt: str, subtype: str, rate: int, channels: int
) -> None:
    data = write(multi_tone(rate, 0.3, channels), rate, fmt, subtype)
    ints, got_rate = decode_file_pcm16(data)
    expected, expected_rate = sf.read(io.BytesIO(data), dtype="int16", always_2d=True)
    assert got_rate == expected_rate == rate
    assert ints.dtype == np.int16
    assert ints.shape == (expected.shape[0], channels)
    np.testing.assert_array_equal(ints, expected)


@pytest.mark.parametrize(("fmt", "subtype"), [("WAV", "FLOAT"), ("WAV", "DOUBLE"), ("OGG", "OPUS")])
def test_pcm16_path_scales_float_coded(fmt: str, subtype: str) -> None:
    # libsndfile's own int16 read does not scale float WAVs (0.5 -> 0); ours must.
    src = sine(440, 48000, 0.5)
    data = write(src, 48000, fmt, subtype)
    ints, rate = decode_file_pcm16(data)
    floats, _ = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    assert rate == 48000
    np.testing.assert_array_equal(ints, to_pcm16(floats))
    if subtype != "OPUS":
        np.testing.assert_array_equal(ints[:, 0], to_pcm16(src))
    # Level check: a 0.5 sine has an RMS of 0.5/sqrt(2) full scale (lossy codecs: within 10%).
    rms = float(np.sqrt(np.mean(ints[4800:-4800].astype(np.float64) ** 2)))
    assert rms == pytest.approx(0.5 / math.sqrt(2) * 32768, rel=0.1)


def test_pcm16_path_float_nan_inf_and_overrange() -> None:
    src = np.array([0.25, np.nan, np.inf, -np.inf, 3.0, -3.0, -0.5], dtype=np.float32)
    ints, _ = decode_file_pcm16(write(src, 16000, "WAV", "FLOAT"))
    np.testing.assert_array_equal(ints[:, 0], [8192, 0, 0, 0, 32767, -32768, -16384])


def test_pcm16_path_lossy_overshoot_does_not_wrap() -> None:
    # A full-scale square wave makes Opus overshoot past 1.0; libsndfile's int16 read wraps
    # those samples to the opposite sign. Ours clips: the sign always follows the float signal.
    rate = 48000
    square = (0.999 * np.sign(np.sin(2 * np.pi * 200 * np.arange(rate) / rate))).astype(np.float32)
    data = write(square, rate, "OGG", "OPUS")
    ints, _ = decode_file_pcm16(data, "audio/ogg")
    floats, _ = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    loud = np.abs(floats) > 0.5
    assert np.all(np.sign(ints[loud]) == np.sign(floats[loud]))


# --- floats: NaN/inf and over-range ---


def test_float_wav_nan_inf_become_zero_and_overrange_is_clipped() -> None:
    src = np.array([0.5, np.nan, np.inf, -np.inf, 3.0, -3.0, -0.25], dtype=np.float32)
    for subtype in ("FLOAT", "DOUBLE"):
        audio = decode_file(write(src, 16000, "WAV", subtype))
        np.testing.assert_array_equal(audio.samples[:, 0], [0.5, 0.0, 0.0, 0.0, 1.0, -1.0, -0.25])
        assert np.isfinite(audio.samples).all()


# --- downmix and resampling ---


def test_stereo_downmix_is_mean_of_channels() -> None:
    left = sine(440, 16000, 0.5, amp=0.6)
    right = sine(1000, 16000, 0.5, amp=0.2)
    audio = decode_file(write(np.stack([left, right], axis=1), 16000, "WAV", "FLOAT"))
    mono = audio.mono()
    assert mono.dtype == np.float32
    assert mono.shape == (len(left),)
    np.testing.assert_allclose(mono, (left + right) / 2, atol=1e-7)


def test_mono_of_mono_is_the_channel() -> None:
    src = sine(440, 16000, 0.1)
    audio = decode_file(write(src, 16000, "WAV", "FLOAT"))
    np.testing.assert_array_equal(audio.mono(), src)
    assert audio.mono().flags.c_contiguous


def test_resample_48k_to_16k_keeps_frequency_and_length_ratio() -> None:
    src = sine(1000, 48000, 1.0)
    out = resample(src, 48000, 16000)
    assert out.dtype == np.float32
    assert len(out) == len(src) // 3
    assert peak_hz(out, 16000) == pytest.approx(1000, abs=2)
    # HQ soxr: passband tone keeps its amplitude and stays clean after the filter settles.
    mid = out[2000:-2000]
    assert np.max(np.abs(mid)) == pytest.approx(0.5, abs=0.01)
    np.testing.assert_allclose(mid, sine(1000, 16000, 1.0)[2000:-2000], atol=2e-3)


def test_mono_at_resamples_the_downmix() -> None:
    stereo = np.stack([sine(1000, 48000, 0.5), sine(1000, 48000, 0.5)], axis=1)
    audio = decode_file(write(stereo, 48000, "WAV", "FLOAT"))
    out = audio.mono_at(16000)
    assert out.shape == (8000,)
    assert peak_hz(out, 16000) == pytest.approx(1000, abs=3)
    np.testing.assert_array_equal(audio.mono_at(48000), audio.mono())


def test_resample_edge_cases() -> None:
    x = sine(440, 16000, 0.1)
    assert resample(x, 16000, 16000) is x  # no-op for equal rates on float32 input
    same = resample(x.astype(np.float64), 16000, 16000)
    assert same.dtype == np.float32
    stereo = resample(np.stack([x, x], axis=1), 16000, 8000)
    assert stereo.shape == (800, 2)
    assert stereo.dtype == np.float32
    assert resample(np.zeros(0, np.float32), 48000, 16000).shape == (0,)
    for bad in (0, -16000, 16000.0, True):
        with pytest.raises(InvalidParameter):
            resample(x, bad, 8000)  # type: ignore[arg-type]
        with pytest.raises(InvalidParameter):
            resample(x, 16000, bad)  # type: ignore[arg-type]


# --- Ogg Opus ---


@pytest.mark.parametrize("content_type", ["audio/ogg", "AUDIO/OGG; codecs=opus", " audio/Ogg ;codecs=opus"])
def test_ogg_opus_with_ogg_content_type(content_type: str) -> None:
    src = sine(440, 48000, 1.0)
    audio = decode_file(write(src, 48000, "OGG", "OPUS"), content_type)
    assert audio.sample_rate == 48000
    assert audio.channels == 1
    assert abs(audio.frames - len(src)) <= 960
    assert best_corr(src, audio.samples[:, 0]) > 0.95


def test_ogg_opus_stereo_and_pcm16_path() -> None:
    src = multi_tone(48000, 0.5, 2)
    data = write(src, 48000, "OGG", "OPUS")
    audio = decode_file(data, "audio/ogg")
    assert (audio.sample_rate, audio.channels) == (48000, 2)
    for c in range(2):
        assert best_corr(src[:, c], audio.samples[:, c]) > 0.95
    ints, rate = decode_file_pcm16(data, "audio/ogg")
    assert rate == 48000
    assert ints.shape == audio.samples.shape


def test_opus_rate_is_the_opushead_rate_rounded_up_to_an_opus_rate() -> None:
    # libsndfile decodes at the input rate stored in OpusHead, rounded up to 8/12/16/24/48 kHz.
    data = write(sine(440, 16000, 0.5), 16000, "OGG", "OPUS")
    assert decode_file(data, "audio/ogg").sample_rate == 16000
    assert decode_file(patch_opus_input_rate(data, 44100), "audio/ogg").sample_rate == 48000
    assert decode_file(patch_opus_input_rate(data, 22050), "audio/ogg").sample_rate == 24000


def test_ogg_vorbis_and_ogg_without_content_type_are_accepted() -> None:
    src = sine(440, 16000, 0.5)
    vorbis = decode_file(write(src, 16000, "OGG", "VORBIS"), "audio/ogg")
    assert vorbis.sample_rate == 16000
    assert best_corr(src, vorbis.samples[:, 0]) > 0.95
    opus = decode_file(write(src, 16000, "OGG", "OPUS"))  # lenient: container auto-detected
    assert opus.sample_rate == 16000


def test_audio_ogg_that_is_really_wav_is_refused() -> None:
    wav = write(sine(440, 16000, 0.5), 16000)
    with pytest.raises(AudioDecodeError, match=r"audio/ogg.*WAV"):
        decode_file(wav, "audio/ogg")
    with pytest.raises(AudioDecodeError, match="audio/ogg"):
        decode_file_pcm16(wav, "audio/ogg; codecs=opus")


def test_audio_ogg_garbage_is_refused() -> None:
    rng = np.random.default_rng(1)
    with pytest.raises(AudioDecodeError, match="not an Ogg stream"):
        decode_file(rng.bytes(4000), "audio/ogg")
    # Starts like Ogg, then garbage: libsndfile refuses it, we say so plainly.
    with pytest.raises(AudioDecodeError, match="could not decode the Ogg file"):
        decode_file(b"OggS" + rng.bytes(4000), "audio/ogg")
    # A FLAC file declared as audio/ogg.
    flac = write(sine(440, 16000, 0.5), 16000, "FLAC", "PCM_16")
    with pytest.raises(AudioDecodeError, match="FLAC"):
        decode_file(flac, "audio/ogg")


# --- bad file inputs ---


@pytest.mark.parametrize("decoder", [decode_file, decode_file_pcm16])
def test_empty_file(decoder) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(AudioDecodeError, match="empty"):
        decoder(b"")
    with pytest.raises(AudioDecodeError, match="empty"):
        decoder(b"", "audio/ogg")


@pytest.mark.parametrize("seed", range(5))
def test_random_bytes(seed: int) -> None:
    data = np.random.default_rng(seed).bytes(5000)
    with pytest.raises(AudioDecodeError, match="could not decode"):
        decode_file(data)
    with pytest.raises(AudioDecodeError):
        decode_file_pcm16(data)


def test_truncated_header() -> None:
    wav = write(sine(440, 16000, 0.5), 16000)
    with pytest.raises(AudioDecodeError, match="could not decode"):
        decode_file(wav[:20])  # cut inside the fmt chunk
    with pytest.raises(AudioDecodeError):
        decode_file(wav[:6])
    with pytest.raises(AudioDecodeError, match="0 frames"):
        decode_file(wav[:44])  # complete header, no samples


@pytest.mark.parametrize(
    ("fmt", "subtype", "rate"),
    [
        ("WAV", "PCM_16", 16000),
        ("WAV", "PCM_24", 16000),
        ("WAV", "FLOAT", 16000),
        ("WAV", "IMA_ADPCM", 16000),
        ("WAV", "MS_ADPCM", 16000),
        ("WAV", "GSM610", 8000),
        ("WAV", "ULAW", 8000),
        ("FLAC", "PCM_16", 16000),
        ("OGG", "OPUS", 48000),
    ],
)
def test_file_cut_in_half(fmt: str, subtype: str, rate: int) -> None:
    src = sine(440, rate, 1.0)
    data = write(src, rate, fmt, subtype)
    ct = "audio/ogg" if fmt == "OGG" else None
    for cut in (len(data) // 2, len(data) // 2 + 1, len(data) - 1):
        for decoder in (decode_file, decode_file_pcm16):
            try:
                result = decoder(data[:cut], ct)
            except AudioDecodeError:
                continue
            samples = result.samples if isinstance(result, Audio) else result[0]
            assert 0 < samples.shape[0] <= len(src) + 2048


def test_mutated_headers_fail_cleanly() -> None:
    # Random byte flips in the first 64 bytes of several formats: decode or AudioDecodeError only.
    rng = np.random.default_rng(7)
    sources = [
        write(sine(440, 16000, 0.2), 16000, "WAV", "PCM_16"),
        write(sine(440, 16000, 0.2), 16000, "WAV", "IMA_ADPCM"),
        write(sine(440, 16000, 0.2), 16000, "FLAC", "PCM_16"),
        write(sine(440, 48000, 0.2), 48000, "OGG", "OPUS"),
    ]
    for data in sources:
        for _ in range(60):
            d = bytearray(data)
            for pos in rng.integers(0, 64, size=3):
                d[pos] = int(rng.integers(0, 256))
            with contextlib.suppress(AudioDecodeError, PayloadTooLarge):
                decode_file(bytes(d), max_seconds=60)


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_corrupt_header_asking_for_negative_seek_is_quiet() -> None:
    # This corrupt AIFF chunk size makes libsndfile seek before the start of the data; that
    # must end as AudioDecodeError or a decode, without an exception inside soundfile's callback.
    data = bytearray(write(sine(440, 16000, 0.25), 16000, "AIFF", "PCM_16"))
    data[40] = 152
    with contextlib.suppress(AudioDecodeError):
        decode_file(bytes(data))


@pytest.mark.parametrize("rate", [4000, 7999, 192001, 384000])
def test_file_sample_rate_outside_range(rate: int) -> None:
    data = write(sine(100, rate, 0.1), rate, "WAV", "PCM_16")
    with pytest.raises(AudioDecodeError, match=rf"{rate} Hz.*{MIN_SAMPLE_RATE} to {MAX_SAMPLE_RATE}"):
        decode_file(data)
    with pytest.raises(AudioDecodeError):
        decode_file_pcm16(data)


@pytest.mark.parametrize("rate", [MIN_SAMPLE_RATE, MAX_SAMPLE_RATE])
def test_file_sample_rate_bounds_are_inclusive(rate: int) -> None:
    assert decode_file(write(sine(100, rate, 0.1), rate)).sample_rate == rate


def test_file_too_long() -> None:
    data = write(sine(440, 16000, 2.0), 16000)
    with pytest.raises(PayloadTooLarge) as info:
        decode_file(data, max_seconds=1.5)
    assert info.value.code == "AUDIO_TOO_LONG"
    assert info.value.status == 413
    assert "2.00 s" in info.value.message
    with pytest.raises(PayloadTooLarge):
        decode_file_pcm16(data, max_seconds=1.5)
    assert decode_file(data, max_seconds=2.0).frames == 32000


def test_file_too_long_is_refused_before_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    data = write(sine(440, 16000, 2.0), 16000, "FLAC", "PCM_16")

    def no_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("samples were decoded before the length check")

    monkeypatch.setattr(sf.SoundFile, "read", no_read)
    with pytest.raises(PayloadTooLarge):
        decode_file(data, max_seconds=1.0)


def test_default_limit_comes_from_settings() -> None:
    from verilive.config import get_settings

    limit = get_settings().max_audio_seconds
    frames = int(limit * 8000) + 8000
    with pytest.raises(PayloadTooLarge):
        decode_pcm16(b"\0\0" * frames, 8000)


def test_invalid_max_seconds() -> None:
    for bad in (0, -1.0, math.nan):
        with pytest.raises(InvalidParameter):
            decode_pcm16(b"\0\0", 8000, max_seconds=bad)
    assert decode_pcm16(b"\0\0" * 10, 8000, max_seconds=math.inf).frames == 10


# --- raw PCM16 bodies ---


def test_decode_pcm16_values() -> None:
    ints = np.array([0, 16384, -32768, 32767, -1], dtype="<i2")
    audio = decode_pcm16(ints.tobytes(), 16000)
    assert audio.sample_rate == 16000
    assert audio.samples.shape == (5, 1)
    assert audio.samples.dtype == np.float32
    np.testing.assert_array_equal(audio.samples[:, 0], [0.0, 0.5, -1.0, 32767 / 32768, -1 / 32768])
    np.testing.assert_array_equal(to_pcm16(audio.samples)[:, 0], ints)


def test_decode_pcm16_is_little_endian() -> None:
    assert decode_pcm16(b"\x00\x40", 8000).samples[0, 0] == 0.5


def test_decode_pcm16_roundtrip_sine() -> None:
    src = sine(440, 16000, 0.5)
    audio = decode_pcm16(to_pcm16(src).astype("<i2").tobytes(), 16000)
    assert audio.frames == len(src)
    assert np.max(np.abs(audio.mono() - src)) <= 0.5 / 32768 + 1e-9


def test_decode_pcm16_empty_and_odd() -> None:
    with pytest.raises(AudioDecodeError, match="empty"):
        decode_pcm16(b"", 16000)
    with pytest.raises(AudioDecodeError, match=r"odd number of bytes.*truncated"):
        decode_pcm16(b"\x00\x01\x02", 16000)


@pytest.mark.parametrize("rate", [0, -1, 7999, 192001, 10**9, 16000.0, "16000", None, True])
def test_decode_pcm16_bad_sample_rate(rate: object) -> None:
    with pytest.raises(InvalidParameter, match=f"between {MIN_SAMPLE_RATE} and {MAX_SAMPLE_RATE}") as info:
        decode_pcm16(b"\0\0" * 100, rate)  # type: ignore[arg-type]
    assert info.value.code == "INVALID_PARAMETER"


def test_decode_pcm16_accepts_numpy_int_rate() -> None:
    assert decode_pcm16(b"\0\0", np.int32(8000)).sample_rate == 8000  # type: ignore[arg-type]


def test_decode_pcm16_too_long() -> None:
    with pytest.raises(PayloadTooLarge) as info:
        decode_pcm16(b"\0\0" * 16001, 16000, max_seconds=1.0)
    assert info.value.code == "AUDIO_TOO_LONG"
    assert decode_pcm16(b"\0\0" * 16000, 16000, max_seconds=1.0).duration_s == 1.0


# --- to_pcm16 and Audio ---


def test_to_pcm16_rounding_and_clipping() -> None:
    x = np.array([0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 1.4 / 32768, 1.6 / 32768, np.nan, np.inf])
    np.testing.assert_array_equal(to_pcm16(x), [0, 16384, -16384, 32767, -32768, 32767, -32768, 1, 2, 0, 0])
    assert to_pcm16(np.zeros((3, 2), np.float32)).shape == (3, 2)
    with pytest.raises(TypeError):
        to_pcm16(np.zeros(3, np.int16))


def test_audio_validates_its_fields() -> None:
    with pytest.raises(TypeError):
        Audio(np.zeros((3, 1), np.float64), 16000)
    with pytest.raises(ValueError):
        Audio(np.zeros(3, np.float32), 16000)
    with pytest.raises(ValueError):
        Audio(np.zeros((3, 1), np.float32), 0)
    a = Audio(np.zeros((16000, 2), np.float32), 16000)
    assert (a.channels, a.frames, a.duration_s) == (2, 16000, 1.0)


# --- real recordings ---


def _real_files(pattern: str) -> list[Path]:
    if not SPEECHBRAIN.is_dir():
        pytest.skip(f"{SPEECHBRAIN} is not available")
    files = sorted(SPEECHBRAIN.glob(pattern))
    if not files:
        pytest.skip(f"no {pattern} under {SPEECHBRAIN}")
    return files


def test_real_flac_and_sphere_files() -> None:
    files = [*_real_files("two_speaker_sentences/*.flac")[:2], *_real_files("single_mic/*.sph")]
    for path in files:
        data = path.read_bytes()
        expected, rate = sf.read(path, dtype="float32", always_2d=True)
        audio = decode_file(data)
        assert audio.sample_rate == rate == 16000
        np.testing.assert_array_equal(audio.samples, expected)
        ints, _ = decode_file_pcm16(data)
        np.testing.assert_array_equal(ints, sf.read(path, dtype="int16", always_2d=True)[0])
        assert audio.duration_s > 1.0
        assert 0.005 < float(np.sqrt(np.mean(audio.mono() ** 2))) < 0.5  # real speech, not silence


def test_real_speech_as_wav_and_resampled() -> None:
    # 48 kHz AudioMNIST recording, re-wrapped as a PCM_16 WAV the way a client would upload it.
    path = _real_files("audiomnist_age_gender/*/*.flac")[0]
    src, rate = sf.read(path, dtype="int16")
    assert rate == 48000
    wav = write(src, rate, "WAV", "PCM_16")
    audio = decode_file(wav, "audio/wav")
    np.testing.assert_array_equal(to_pcm16(audio.samples)[:, 0], src)
    ints, got_rate = decode_file_pcm16(wav)
    assert got_rate == 48000
    np.testing.assert_array_equal(ints[:, 0], src)
    at16 = audio.mono_at(16000)
    assert abs(len(at16) - len(src) / 3) <= 1
    # Speech energy survives resampling: the 16 kHz copy keeps nearly all of the signal power
    # (speech has little energy above 8 kHz).
    assert float(np.mean(at16**2)) == pytest.approx(float(np.mean(audio.mono() ** 2)), rel=0.1)


@pytest.fixture
def small_sample_budget(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from verilive.config import get_settings

    monkeypatch.setenv("VERILIVE_MAX_AUDIO_SAMPLES", "40000")
    get_settings.cache_clear()  # settings are read once per process
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


@pytest.mark.usefixtures("small_sample_budget")
def test_decoded_sample_budget() -> None:
    mono = sine(440, 16000, 2.0)  # 32,000 samples: within the budget
    assert decode_file(write(mono, 16000)).frames == 32000
    stereo = np.stack([mono, mono], axis=1)  # 64,000 samples: over it, refused from the header
    with pytest.raises(PayloadTooLarge) as info:
        decode_file(write(stereo, 16000))
    assert info.value.code == "AUDIO_TOO_LONG" and "64000 samples" in info.value.message
    with pytest.raises(PayloadTooLarge):
        decode_pcm16(np.zeros(48000, "<i2").tobytes(), 16000)
