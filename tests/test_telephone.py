"""The telephone simulation of eval/ and train/ (common/telephone.py) on real speech."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from common.telephone import (
    AMR_KBPS,
    CODECS,
    FRAME,
    RATE,
    Line,
    active_level,
    amr_frames,
    available,
    lost_packets,
    telephone,
)
from scipy import signal

from tests.servers import missing_message

CLIP = "data/voice/librispeech_251spk_gender/103-1240-0000.flac"


@pytest.fixture(scope="module")
def speech(shared_dir: Path) -> tuple[np.ndarray, int]:
    x, sr = sf.read(shared_dir / CLIP, dtype="float64")
    return x[: 6 * sr], sr


PACKAGES = {"amr-nb": "libopencore-amrnb0", "opus": "libopus0"}


def _need(codec: str) -> None:
    if not available(codec):
        pytest.fail(missing_message(f"the {codec} codec library", PACKAGES.get(codec, "libsndfile1")))


def _log_spectra(y: np.ndarray) -> np.ndarray:
    _, _, z = signal.stft(y, RATE, nperseg=256)
    return np.log(np.abs(z) + 1e-5)


@pytest.mark.parametrize(
    "line",
    [Line("g711u"), Line("g711a"), Line("gsm"), Line("amr-nb", 4.75), Line("amr-nb", 12.2), Line("opus", 6.0),
     Line("opus", 12.0)],
    ids=lambda line: line.name,
)  # fmt: skip
def test_each_codec_round_trips_and_keeps_the_duration(speech: tuple[np.ndarray, int], line: Line) -> None:
    _need(line.codec)
    x, sr = speech
    clean = telephone(x, sr, Line("pcm"), seed=5)
    y = telephone(x, sr, line, seed=5)
    assert y.dtype == np.float32 and y.size == clean.size == round(x.size * RATE / sr)
    # the same speech, aligned (each codec's delay removed): spectrogram close to the clean line's
    corr = np.corrcoef(_log_spectra(clean).ravel(), _log_spectra(y).ravel())[0, 1]
    assert corr > 0.8, corr
    lag = np.argmax(signal.correlate(y, clean, mode="full", method="fft")) - (clean.size - 1)
    assert lag == 0
    # waveform codecs keep the waveform; G.711 is about 37 dB, the vocoders are not waveform-exact
    snr = 10 * np.log10(np.sum(clean**2) / np.sum((y - clean) ** 2))
    assert snr > (30 if line.codec.startswith("g711") else 3), snr
    # level of a phone line: active speech near -26 dBov, nothing clipped
    assert -29 < 10 * np.log10(active_level(y) / 0.5) < -23
    assert np.max(np.abs(y)) < 1.0


def test_the_line_keeps_the_telephone_band(speech: tuple[np.ndarray, int]) -> None:
    x, sr = speech
    y = telephone(x, sr, Line("g711u"), seed=1)
    f, p = signal.welch(y, RATE, nperseg=512)
    inside = p[(f > 500) & (f < 3000)].mean()
    assert p[f < 150].mean() < inside * 1e-2  # the high-pass near 300 Hz
    assert p[f > 3700].mean() < inside * 1e-2  # the low-pass near 3.4 kHz
    wide = telephone(x, sr, Line("pcm", band=False), seed=1)
    f, q = signal.welch(wide, RATE, nperseg=512)
    assert q[f < 150].mean() > p[f < 150].mean() * 10  # band=False leaves the low end


def test_same_seed_same_line_other_seed_other_line(speech: tuple[np.ndarray, int]) -> None:
    _need("amr-nb")
    x, sr = speech
    line = Line("amr-nb", 7.4, loss=0.05, snr_db=15)
    a, b = telephone(x, sr, line, seed=3), telephone(x, sr, line, seed=3)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, telephone(x, sr, line, seed=4))


def test_noise_at_the_requested_snr(speech: tuple[np.ndarray, int]) -> None:
    x, sr = speech
    clean = telephone(x, sr, Line("pcm", band=False), seed=2)
    for snr in (10.0, 20.0):
        noisy = telephone(x, sr, Line("pcm", band=False, snr_db=snr), seed=2)
        # same level scaling on both: the difference is the noise, scaled with the speech
        k = np.dot(noisy, clean) / np.dot(clean, clean)
        measured = 10 * np.log10(active_level(k * clean) / np.mean((noisy - k * clean) ** 2))
        assert abs(measured - snr) < 1.5, (snr, measured)


def test_packet_loss_rate_and_bursts() -> None:
    rng = np.random.default_rng(0)
    lost = lost_packets(50_000, 0.05, 2.0, rng)
    assert 0.04 < lost.mean() < 0.06
    starts = np.sum(lost[1:] & ~lost[:-1])
    assert 1.7 < lost.sum() / starts < 2.3  # mean run length = burst
    assert not lost_packets(100, 0.0, 1.5, rng).any()


@pytest.mark.parametrize("codec", ["g711u", "amr-nb", "opus"])
def test_lost_packets_are_concealed_not_left_as_they_were(speech: tuple[np.ndarray, int], codec: str) -> None:
    _need(codec)
    x, sr = speech
    kbps = {"amr-nb": 7.4, "opus": 8.0}.get(codec)
    y0 = telephone(x, sr, Line(codec, kbps), seed=9)
    y1 = telephone(x, sr, Line(codec, kbps, loss=0.2), seed=9)
    # the mask telephone() draws: the seed's first two draws are the band edges, then the packets
    rng = np.random.default_rng(9)
    rng.uniform(), rng.uniform()
    lost = lost_packets(-(-y0.size // FRAME), 0.2, 1.5, rng)
    assert 0.1 < lost.mean() < 0.3
    frames0 = np.pad(y0, (0, lost.size * FRAME - y0.size)).reshape(-1, FRAME)
    frames1 = np.pad(y1, (0, lost.size * FRAME - y1.size)).reshape(-1, FRAME)
    changed = np.abs(frames1 - frames0).max(axis=1) > 1e-4
    assert changed[lost].mean() > 0.9  # the lost packets are replaced
    # and not by silence everywhere: the concealment fills most lost frames with signal
    speechy = np.sqrt(np.mean(frames0**2, axis=1)) > 0.01
    assert np.mean(np.sqrt(np.mean(frames1[lost & speechy] ** 2, axis=1)) > 1e-3) > 0.5


def test_amr_packet_sizes_follow_the_mode(speech: tuple[np.ndarray, int]) -> None:
    _need("amr-nb")
    x, sr = speech
    y = telephone(x, sr, Line("pcm"), seed=0)
    # storage format: one mode byte, then the mode's bits (3GPP TS 26.101): 95 bits at 4.75, 244 at 12.2
    sizes = {k: {len(f) for f in amr_frames(y[:1600], k)} for k in AMR_KBPS}
    assert sizes[4.75] == {13} and sizes[12.2] == {32}
    assert all(len(s) == 1 for s in sizes.values())


def test_bad_lines_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown codec"):
        Line("g729")
    with pytest.raises(ValueError, match="AMR-NB rates"):
        Line("amr-nb", 8.0)
    with pytest.raises(ValueError, match="loss"):
        Line("g711u", loss=1.0)
    assert set(CODECS) >= {"g711u", "g711a", "gsm", "amr-nb", "opus"}
    assert telephone(np.zeros(0), 16000).size == 0
