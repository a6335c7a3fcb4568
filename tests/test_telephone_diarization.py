"""The telephone segmentation model (``pyannote_segmentation_tel``, train/segmentation_student.py) and
diarization of two-party calls through phone lines (issue 48; docs/diarization.md).

The calls are mixed by train.conversations from voices of the *calls* split, which the student never
heard (speechocean762 and Common Voice speakers); the references are those voices' own speech activity.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path

import numpy as np
import pytest
from common.telephone import LINES, telephone
from eval.diarization import score, turns_to_annotation
from eval.telephone_diarization import _annotation, _whole

from verilive.config import Settings
from verilive.models.sessions import ModelRegistry
from verilive.voice.diarization import Diarizer
from verilive.voice.engine import VoiceEngine

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "src/verilive/models/manifest.json"
PARAMS = ROOT / "src/verilive/voice/segmentation_tel.npz"


def _spec(model_id: str) -> dict:
    return next(m for m in json.loads(MANIFEST.read_text())["models"] if m["id"] == model_id)


def test_version_names_its_packaged_tensors() -> None:
    """The store re-converts only on a new version: a retrained segmentation_tel.npz must come with one."""
    spec, base = _spec("pyannote_segmentation_tel"), _spec("pyannote_segmentation")
    digest = hashlib.sha256(PARAMS.read_bytes()).hexdigest()[:12]
    assert spec["version"] == f"3.0-senko0.2.2-tel-{digest}"
    assert spec["source"] == base["source"] and spec["sha256"] == base["sha256"]
    assert spec["convert"] == "verilive.models.convert.pyannote_segmentation:convert_telephone"


def test_student_changes_only_the_front_and_the_first_lstm_layer() -> None:
    from train.segmentation_student import trainable

    with np.load(PARAMS) as p:
        names = list(p.files)
        assert all(np.all(np.isfinite(p[n])) for n in names)
    assert names and all(trainable(n) for n in names)
    assert "lstm.weight_ih_l0" in names and "lstm.weight_ih_l0_reverse" in names
    assert not any(n.startswith(("classifier.", "linear.")) or "_l1" in n for n in names)
    assert not any("low_hz_" in n or "band_hz_" in n for n in names)  # the sinc cut-offs stay


def test_adapted_tensors_must_fit_the_checkpoint(shared_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from verilive.errors import ModelError
    from verilive.models.convert.pyannote_segmentation import load_adapted

    bad = tmp_path / "bad.npz"
    np.savez(bad, **{"lstm.weight_ih_l0": np.zeros((3, 3), np.float32)})
    with pytest.raises(ModelError, match="does not fit"):
        load_adapted(shared_dir / "models/upstream/pyannote_segmentation_3.0.bin", bad)


@pytest.fixture(scope="module")
def engine(models_settings: Settings) -> VoiceEngine:
    return VoiceEngine.from_registry(ModelRegistry(models_settings))


@pytest.fixture(scope="module")
def diarizer(engine: VoiceEngine) -> Diarizer:
    return engine.diarizer


def held_aside_call(shared_dir: Path, source: str, k: int, seconds: float, seed: int):
    """A conversation of ``k`` voices of ``source``'s calls split: wave, reference, scored extent."""
    from train.conversations import conversation, pick_voices, speech_pools

    pools = speech_pools(shared_dir / "data", "calls")
    rng = np.random.default_rng(seed)
    wave, ref = conversation(pick_voices(pools, rng, k, source), rng, seconds, overlap_p=0.1)
    uri = f"{source}-{seed}"
    return wave, _annotation(ref, uri), _whole(uri, wave.size / 16000), uri


@pytest.fixture(scope="module")
def call(shared_dir: Path):
    return held_aside_call(shared_dir, "librispeech", 2, 60.0, 4801)


@pytest.mark.slow
def test_installed_model_matches_torch_on_a_call(shared_dir: Path, models_settings: Settings, call) -> None:
    """The converted graph against the adapted PyTorch model, on a held-aside call through AMR-NB."""
    pytest.importorskip("torch")
    import torch

    from verilive.audio.resample import resample
    from verilive.models.convert.pyannote_segmentation import load_adapted
    from verilive.voice.segmentation import TELEPHONE_MODEL_ID, Segmenter

    wave = call[0]
    y = resample(telephone(wave[:160000], 16000, LINES["amr-nb-7.4"], 3), 8000, 16000)[None, :160000]
    got = np.exp(Segmenter.from_registry(ModelRegistry(models_settings), TELEPHONE_MODEL_ID).log_probs(y))
    model = load_adapted(shared_dir / "models/upstream/pyannote_segmentation_3.0.bin", PARAMS)
    with torch.no_grad():
        want = model(torch.from_numpy(y[:, None, :].astype(np.float32))).exp().numpy()
    assert got.shape == (1, 589, 7)
    np.testing.assert_allclose(got, want, atol=2e-4)


@pytest.mark.slow
def test_telephone_audio_goes_to_the_telephone_model(diarizer: Diarizer, call) -> None:
    from verilive.voice.channel import telephone_band

    wave = call[0]
    y8 = telephone(wave, 16000, LINES["g711u"], 1)
    assert diarizer.telephone_segmenter is not None
    assert diarizer.segmenter_for(y8, 8000) is diarizer.telephone_segmenter
    # a call uploaded at 16 kHz keeps nothing above 4 kHz: telephone too
    assert diarizer.segmenter_for(telephone_band(wave, 16000), 16000) is diarizer.telephone_segmenter
    assert diarizer.segmenter_for(wave, 16000) is diarizer.segmenter


@pytest.mark.slow
@pytest.mark.parametrize("line", ["g711u", "amr-nb-7.4"])
def test_speech_recall_through_a_line_within_two_points(diarizer: Diarizer, call, line: str) -> None:
    wave, ref, uem, uri = call
    wide = score(ref, turns_to_annotation(diarizer.diarize(wave, 16000), 16000, uri), uem)
    y = telephone(wave, 16000, LINES[line], zlib.crc32(line.encode()))
    tel = score(ref, turns_to_annotation(diarizer.diarize(y, 8000), 8000, uri), uem)
    missed_wide, missed_tel = wide.missed / wide.total, tel.missed / tel.total
    assert missed_wide < 0.08
    assert missed_tel - missed_wide <= 0.02, (missed_wide, missed_tel)


@pytest.mark.slow
@pytest.mark.parametrize("line", ["g711u", "bad-line"])
def test_two_speakers_given_on_a_line(diarizer: Diarizer, call, line: str) -> None:
    wave, ref, uem, uri = call
    y = telephone(wave, 16000, LINES[line], zlib.crc32(line.encode()))
    turns = diarizer.diarize(y, 8000, num_speakers=2)
    assert len(turns) == 2
    assert score(ref, turns_to_annotation(turns, 8000, uri), uem).der <= 0.10


# The count target of issue 48 is missed (docs/diarization.md): on 30 s excerpts the wideband
# clustering still merges a third voice or splits one voice in two. Strict, so a fix shows.
MISSED_COUNT = pytest.mark.xfail(strict=True, reason="speaker count on short excerpts: target missed")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("source", "k", "seed"),
    [
        ("librispeech", 1, 4811),
        ("cv_es_mx", 2, 4812),
        pytest.param("librispeech", 3, 4813, marks=MISSED_COUNT),
        pytest.param("cv_es_mx", 1, 4811, marks=MISSED_COUNT),
        pytest.param("cv_es_mx", 3, 4813, marks=MISSED_COUNT),
    ],
)
def test_speaker_count_on_short_held_aside_excerpts(
    diarizer: Diarizer, shared_dir: Path, source: str, k: int, seed: int
) -> None:
    """30 s recordings of 1-3 voices of the calls split (not recordings of the evaluation): the
    estimated count is right, wideband and through G.711."""
    wave, ref, _, _ = held_aside_call(shared_dir, source, k, 30.0, seed)
    assert len(ref.labels()) == k
    assert len(diarizer.diarize(wave, 16000)) == k
    y = telephone(wave, 16000, LINES["g711u"], seed)
    assert len(diarizer.diarize(y, 8000)) == k
