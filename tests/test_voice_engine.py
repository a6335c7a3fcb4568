"""The voice engine on real models and real speech: summary, SNR, quality, templates, matching."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from verilive.audio import Audio
from verilive.config import Settings
from verilive.models.sessions import ModelRegistry
from verilive.voice.engine import INIT_DATA_ID, NoSpeech, VoiceEngine
from verilive.voice.quality import QualityMetrics, QualityThresholds, decide
from verilive.voice.schemas import ChannelType, QualityShortDescription
from verilive.voice.snr import snr_db

LIBRI = "data/voice/librispeech_251spk_gender"


@pytest.fixture(scope="module")
def engine(models_settings: Settings) -> VoiceEngine:
    return VoiceEngine.from_registry(ModelRegistry(models_settings))


def load(shared_dir: Path, name: str) -> tuple[np.ndarray, int]:
    x, sr = sf.read(shared_dir / LIBRI / name, dtype="float32")
    return x, sr


def audio(x: np.ndarray, sr: int) -> Audio:
    return Audio(x.reshape(-1, 1).astype(np.float32), sr)


def band_noise(n: int, sr: int, rng: np.random.Generator) -> np.ndarray:
    """White noise limited to 300–3400 Hz, so its band power equals its total power."""
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / sr)
    spec[(f < 300) | (f > 3400)] = 0
    return np.fft.irfft(spec, n=n).astype(np.float32)


# ------------------------------------------------------------------ speech summary


@pytest.mark.slow
def test_speech_summary_covers_the_audio(engine: VoiceEngine, shared_dir: Path) -> None:
    x, sr = load(shared_dir, "103-1240-0000.flac")
    padded = np.concatenate([np.zeros(2 * sr, np.float32), x, np.zeros(sr, np.float32)])
    s = engine.speech_summary(audio(padded, sr))
    ev = s.events
    assert ev[0][0] is False and ev[0][1] == 0
    assert ev[-1][2] == padded.size
    for a, b in itertools.pairwise(ev):
        assert a[2] == b[1] and a[0] != b[0]
    first_speech = next(e for e in ev if e[0])
    unpadded = next(e for e in engine.speech_summary(audio(x, sr)).events if e[0])
    assert unpadded[1] / sr > 0.3  # this utterance opens with ~0.45 s of silence
    assert abs(first_speech[1] - (2 * sr + unpadded[1])) / sr < 0.1
    assert s.sample_rate == sr
    assert s.total_ms == pytest.approx(1000 * padded.size / sr)
    assert s.speech_ms == pytest.approx(1000 * sum(e - b for v, b, e in ev if v) / sr)
    assert 0.6 * 1000 * x.size / sr < s.speech_ms <= 1000 * x.size / sr + 200


@pytest.mark.slow
def test_silence_has_no_speech(engine: VoiceEngine) -> None:
    s = engine.speech_summary(audio(np.zeros(16000 * 3, np.float32), 16000))
    assert s.speech_ms == 0
    assert [e[0] for e in s.events] == [False]


# ------------------------------------------------------------------ SNR


@pytest.mark.slow
def test_snr_tracks_added_noise(engine: VoiceEngine, shared_dir: Path) -> None:
    x, sr = load(shared_dir, "1034-121119-0000.flac")
    clean = np.concatenate([np.zeros(sr, np.float32), x, np.zeros(sr, np.float32)])
    segments = engine.analyse(audio(clean, sr)).segments
    assert engine.snr(audio(clean, sr)) > 35
    rng = np.random.default_rng(0)
    # Speech power in the voice band over the speech segments defines the true SNR.
    speech_band = band_noise_free_power(clean, sr, segments)
    measured = []
    for target in (0, 5, 10, 20):
        noise = band_noise(clean.size, sr, rng)
        noise *= np.sqrt(speech_band / 10 ** (target / 10) / np.mean(noise**2))
        got = engine.snr(audio(clean + noise, sr))
        measured.append(got)
        assert abs(got - target) < 3.0, (target, got)
    assert measured == sorted(measured)


def band_noise_free_power(x: np.ndarray, sr: int, segments: list[tuple[int, int]]) -> float:
    spec = np.fft.rfft(np.concatenate([x[s:e] for s, e in segments]))
    f = np.fft.rfftfreq(sum(e - s for s, e in segments), 1 / sr)
    spec[(f < 300) | (f > 3400)] = 0
    y = np.fft.irfft(spec)
    return float(np.mean(y**2))


@pytest.mark.slow
def test_snr_without_speech_is_zero(engine: VoiceEngine) -> None:
    rng = np.random.default_rng(1)
    assert engine.snr(audio(np.zeros(16000 * 2, np.float32), 16000)) == 0.0
    assert engine.snr(audio(0.01 * rng.standard_normal(32000).astype(np.float32), 16000)) == 0.0
    assert snr_db(np.zeros(0, np.float32), 16000, []) == 0.0


# ------------------------------------------------------------------ quality rules


def test_quality_decision_order() -> None:
    t = QualityThresholds(10, 3000, 0.5, 0.4)
    good = QualityMetrics(20, 5000, 0.8, 0.1)
    assert decide(good, t) is QualityShortDescription.OK
    all_bad = QualityMetrics(5, 1000, 0.1, 0.9)
    assert decide(all_bad, t) is QualityShortDescription.TOO_SMALL_SPEECH_TOTAL_LENGTH
    assert (
        decide(QualityMetrics(5, 5000, 0.1, 0.9), t)
        is QualityShortDescription.TOO_SMALL_SPEECH_RELATIVE_LENGTH
    )
    assert decide(QualityMetrics(5, 5000, 0.8, 0.9), t) is QualityShortDescription.TOO_NOISY
    assert decide(QualityMetrics(20, 5000, 0.8, 0.9), t) is QualityShortDescription.MULTIPLE_SPEAKERS_DETECTED
    assert (
        decide(all_bad, QualityThresholds()) is QualityShortDescription.OK
    )  # nothing asked, nothing checked


@pytest.mark.slow
def test_multiple_speakers_score_separates(engine: VoiceEngine, shared_dir: Path) -> None:
    a, sr = load(shared_dir, "103-1240-0000.flac")  # F
    b, _ = load(shared_dir, "1034-121119-0000.flac")  # M
    one = engine.quality(engine.analyse(audio(a, sr))).multiple_speakers
    two = engine.quality(
        engine.analyse(audio(np.concatenate([a[: 6 * sr], b[: 6 * sr]]), sr))
    ).multiple_speakers
    assert 0.0 <= one < 0.5 < two <= 1.0, (one, two)


@pytest.mark.slow
def test_multiple_speakers_refined_by_diarization(engine: VoiceEngine, shared_dir: Path) -> None:
    a, sr = load(shared_dir, "103-1240-0000.flac")  # F
    b, _ = load(shared_dir, "1034-121119-0000.flac")  # M
    one = engine.analyse(audio(a, sr))
    assert engine.second_speaker_seconds(one) < 1.5
    assert engine.multiple_speakers_score(one) == engine.window_score(one)  # nothing to add
    # A dialogue of 3 s turns: the diarizer finds the other voice's turns.
    turns = np.concatenate([w[t * 3 * sr : (t + 1) * 3 * sr] for t in range(3) for w in (a, b)])
    two = engine.analyse(audio(turns, sr))
    assert engine.second_speaker_seconds(two) >= 4.0
    assert engine.multiple_speakers_score(two) == 1.0


# ------------------------------------------------------------------ templates and matching


@pytest.mark.slow
def test_same_speaker_scores_above_different_speakers(engine: VoiceEngine, shared_dir: Path) -> None:
    files = sorted((shared_dir / LIBRI).glob("*.flac"))[:8]
    halves = []
    for f in files:
        x, sr = sf.read(f, dtype="float32")
        mid = x.size // 2
        halves.append(
            (engine.create_template(audio(x[:mid], sr)), engine.create_template(audio(x[mid:], sr)))
        )
    same = [engine.match(a.encode(), b.encode())[0] for a, b in halves]
    diff = [
        engine.match(halves[i][0].encode(), halves[j][1].encode())[0]
        for i in range(len(halves))
        for j in range(len(halves))
        if i != j
    ]
    assert min(same) > max(diff), (min(same), max(diff))
    p_same = [engine.match(a.encode(), b.encode())[1] for a, b in halves]
    assert min(p_same) > 0.5


@pytest.mark.slow
def test_template_metadata(engine: VoiceEngine, shared_dir: Path) -> None:
    x, sr = load(shared_dir, "103-1240-0000.flac")
    t = engine.create_template(audio(x, sr), ChannelType.MIC)
    assert t.init_data_id == INIT_DATA_ID == engine.init_data_id
    assert t.merge_count == 1 and t.channel == 1
    assert 0.6 * 1000 * x.size / sr < t.speech_ms <= 1000 * x.size / sr
    assert np.linalg.norm(t.embedding) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("channel", [ChannelType.TEL, ChannelType.MIXED, None])
def test_channel_types_still_verify(
    engine: VoiceEngine, shared_dir: Path, channel: ChannelType | None
) -> None:
    x, sr = load(shared_dir, "1069-133699-0000.flac")
    y, _ = load(shared_dir, "1081-125237-0000.flac")
    mid = x.size // 2
    a = engine.create_template(audio(x[:mid], sr), channel).encode()
    b = engine.create_template(audio(x[mid:], sr), channel).encode()
    c = engine.create_template(audio(y, sr), channel).encode()
    assert engine.match(a, b)[0] > engine.match(a, c)[0] + 0.2


@pytest.mark.slow
def test_8khz_input(engine: VoiceEngine, shared_dir: Path) -> None:
    from verilive.audio import resample

    x, sr = load(shared_dir, "1069-133699-0000.flac")
    narrow = resample(x, sr, 8000)
    t = engine.create_template(audio(narrow, 8000))
    assert t.channel == 2  # narrowband input defaults to TEL processing
    wide = engine.create_template(audio(x, sr), ChannelType.TEL)
    assert engine.match(t.encode(), wide.encode())[0] > 0.8


@pytest.mark.slow
def test_no_speech_is_refused(engine: VoiceEngine) -> None:
    with pytest.raises(NoSpeech):
        engine.create_template(audio(np.zeros(32000, np.float32), 16000))
