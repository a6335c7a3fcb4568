"""Long clips in bounded memory (issue 46): the spectrogram, the utterance cues and the F0 track are
computed a block of frames at a time with results identical to one pass, and the spectrogram network
judges a long clip in windows of the length it was trained on."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from verilive.audio.decode import Audio
from verilive.config import Settings
from verilive.models.sessions import ModelRegistry
from verilive.voice import antispoof as A
from verilive.voice import utterance_cues as U
from verilive.voice.antispoof import AntiSpoof

SPEECH = "data/voice/librispeech_251spk_gender"


@pytest.fixture(scope="module")
def speech(shared_dir: Path) -> np.ndarray:
    """30 s of real speech at 16 kHz (LibriSpeech utterances one after another)."""
    parts, have = [], 0
    for path in sorted((shared_dir / SPEECH).glob("*.flac")):
        x, sr = sf.read(path, dtype="float32")
        assert sr == 16000
        parts.append(x)
        have += x.size
        if have >= 30 * 16000:
            break
    return A.as_pcm16(np.concatenate(parts)[: 30 * 16000])


@pytest.mark.parametrize("seconds", [0.02, 0.7, 12.3, 30.0])
def test_blockwise_features_equal_one_pass(
    monkeypatch: pytest.MonkeyPatch, speech: np.ndarray, seconds: float
) -> None:
    x = speech[: int(seconds * 16000)]
    monkeypatch.setattr(A, "FEATURE_CHUNK", 10**9)
    monkeypatch.setattr(U, "STFT_CHUNK", 10**9)
    monkeypatch.setattr(U, "F0_CHUNK", 10**9)
    whole = A.features(x), U.utterance_features(x)
    monkeypatch.setattr(A, "FEATURE_CHUNK", 37)
    monkeypatch.setattr(U, "STFT_CHUNK", 41)
    monkeypatch.setattr(U, "F0_CHUNK", 29)
    blocks = A.features(x), U.utterance_features(x)
    assert whole[0].shape == blocks[0].shape and np.array_equal(whole[0], blocks[0])
    assert np.array_equal(whole[1], blocks[1], equal_nan=True)
    if seconds > 1:
        assert whole[0].shape[2] > 60 and np.isfinite(whole[1][:6]).all()


@pytest.fixture(scope="module")
def anti() -> AntiSpoof:
    return AntiSpoof(registry=ModelRegistry(Settings()))


@pytest.mark.slow
def test_long_clips_are_judged_in_windows(
    anti: AntiSpoof, speech: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clip of at most WINDOW_FRAMES is one window (unchanged); a 30 s clip is the mean of its
    windows' logits, and is judged; a 1.2 s clip is judged too."""
    short = speech[: 7 * 16000]
    feats, cues = A.features(short), U.utterance_features(short)
    fcm, whisper = anti.fcm_frames(short), anti.whisper_features(short)
    assert feats.shape[2] <= A.WINDOW_FRAMES
    monkeypatch.setattr(A, "WINDOW_FRAMES", 10**6)
    one = anti.logits(feats, cues, fcm, whisper)
    monkeypatch.undo()
    assert np.array_equal(anti.logits(feats, cues, fcm, whisper), one)

    feats = A.features(speech)
    cues, fcm, whisper = U.utterance_features(speech), anti.fcm_frames(speech), anti.whisper_features(speech)
    assert feats.shape[2] > 3 * A.WINDOW_FRAMES
    parts = -(-feats.shape[2] // A.WINDOW_FRAMES)
    bounds = np.linspace(0, feats.shape[2], parts + 1).round().astype(int)
    by_hand = np.mean(
        [anti.logits(feats[:, :, a:b], cues, fcm, whisper) for a, b in itertools.pairwise(bounds)],
        axis=0,
    )
    np.testing.assert_allclose(anti.logits(feats, cues, fcm, whisper), by_hand, rtol=0, atol=1e-9)
    for seconds in (30.0, 1.2):
        scores = anti.evaluate(Audio(speech[: int(seconds * 16000), None].copy(), 16000))
        assert scores.unsuitable is None and 0.0 <= scores.score <= 1.0, scores
        total = scores.score + scores.replay + scores.tts + scores.vc
        assert abs(total - 1.0) < 1e-6
