"""segmentation-3.0: the project's own PyanNet against pyannote's golden outputs, torch and ONNX.

The golden file (../shared/models/golden/pyannote_segmentation_3.0.npz) holds pyannote.audio 4.0.7's
outputs for a real AMI chunk, white noise and digital silence. Tolerances are those the models README
gives for a faithful implementation: probabilities within 1e-4, log-probabilities within 2e-3 where
p > 1e-3, and the same most likely class on every frame.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from verilive.config import Settings
from verilive.models.sessions import ModelRegistry
from verilive.voice.segmentation import (
    CHUNK_SAMPLES,
    FRAME_CENTRE0,
    FRAME_SIZE,
    FRAME_STEP,
    N_FRAMES,
    POWERSET,
    Segmenter,
    chunk_starts,
)

GOLDEN = "models/golden/pyannote_segmentation_3.0.npz"
CHECKPOINT = "models/upstream/pyannote_segmentation_3.0.bin"


@pytest.fixture(scope="module")
def golden(shared_dir: Path) -> Any:
    return np.load(shared_dir / GOLDEN)


@pytest.fixture(scope="module")
def segmenter(models_settings: Settings) -> Segmenter:
    return Segmenter.from_registry(ModelRegistry(models_settings))


@pytest.fixture(scope="module")
def torch_model(shared_dir: Path) -> Any:
    pytest.importorskip("torch")
    from verilive.models.convert.pyannote_segmentation import load_model

    return load_model(shared_dir / CHECKPOINT)


def assert_matches(log_probs: np.ndarray, want: np.ndarray) -> None:
    p, q = np.exp(log_probs), np.exp(want)
    assert log_probs.shape == want.shape
    np.testing.assert_allclose(p, q, atol=1e-4, rtol=0)
    likely = q > 1e-3
    np.testing.assert_allclose(log_probs[likely], want[likely], atol=2e-3, rtol=0)
    np.testing.assert_array_equal(np.argmax(log_probs, -1), np.argmax(want, -1))


def test_golden_file_is_what_we_think(golden: Any) -> None:
    assert list(golden["input_names"]) == ["ami_trn00_16s", "noise", "silence"]
    np.testing.assert_array_equal(golden["powerset_mapping"].astype(bool), POWERSET)
    assert int(golden["num_frames"]) == N_FRAMES
    assert int(golden["receptive_field_step_samples"]) == FRAME_STEP
    assert int(golden["receptive_field_size_samples"]) == FRAME_SIZE
    assert int(golden["receptive_field_center0_samples"]) == FRAME_CENTRE0


@pytest.mark.slow
def test_torch_module_matches_golden(torch_model: Any, golden: Any) -> None:
    import torch

    from verilive.models.convert.pyannote_segmentation import num_frames

    assert num_frames(CHUNK_SAMPLES) == N_FRAMES
    np.testing.assert_array_equal(torch_model.sincnet.filters.numpy(), golden["sinc_filters"])
    with torch.no_grad():
        for i in range(3):
            out = torch_model(torch.from_numpy(golden["inputs"][i : i + 1])).numpy()
            assert_matches(out[0], golden["log_probs"][i])
        batch = torch_model(torch.from_numpy(golden["inputs"])).numpy()
    assert_matches(batch, golden["log_probs_batch3"])


@pytest.mark.slow
def test_torch_stages_match_intermediates(torch_model: Any, shared_dir: Path, golden: Any) -> None:
    """The SincNet output and the LSTM output of the AMI chunk, so a mismatch points at its stage."""
    import torch

    mids = np.load(shared_dir / "models/golden/pyannote_segmentation_3.0_intermediates.npz")
    with torch.no_grad():
        x = torch.from_numpy(golden["inputs"][:1])
        feats = torch_model.sincnet(x)
        lstm, _ = torch_model.lstm(feats.transpose(1, 2))
    np.testing.assert_allclose(feats[0].numpy(), mids["sincnet.block2"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(lstm[0].numpy(), mids["lstm"], atol=1e-5, rtol=0)


def test_checkpoint_loads_without_pyannote(shared_dir: Path) -> None:
    pytest.importorskip("torch")
    from verilive.models.convert.pyannote_segmentation import load_state_dict

    state = load_state_dict(shared_dir / CHECKPOINT)
    assert len(state) == 54
    assert sum(v.numel() for v in state.values()) == 1_473_515


@pytest.mark.slow
def test_installed_onnx_matches_golden(segmenter: Segmenter, golden: Any) -> None:
    x = golden["inputs"][:, 0, :]
    for i in range(3):
        assert_matches(segmenter.log_probs(x[i : i + 1])[0], golden["log_probs"][i])
    lp = segmenter.log_probs(x)
    assert_matches(lp, golden["log_probs_batch3"])
    np.testing.assert_array_equal(Segmenter.active(lp), golden["multilabel_hard"].astype(bool))


@pytest.mark.slow
def test_onnx_matches_torch_on_other_lengths(segmenter: Segmenter, torch_model: Any, golden: Any) -> None:
    """The graph keeps batch and length dynamic; 3 s of the AMI chunk as well as 10 s."""
    import torch

    x = golden["inputs"][:1, :, :48000]
    (got,) = segmenter.session.run(["log_probs"], {"waveform": x})
    with torch.no_grad():
        want = torch_model(torch.from_numpy(x)).numpy()
    assert got.shape == want.shape == (1, 175, 7)
    np.testing.assert_allclose(np.exp(got), np.exp(want), atol=1e-4, rtol=0)


@pytest.mark.slow
def test_log_probs_rejects_other_shapes(segmenter: Segmenter) -> None:
    for bad in (np.zeros(CHUNK_SAMPLES, np.float32), np.zeros((1, 1000), np.float32)):
        with pytest.raises(ValueError, match="chunks"):
            segmenter.log_probs(bad)


def test_chunk_starts_cover_the_audio() -> None:
    assert chunk_starts(0, 16000).tolist() == [0]
    assert chunk_starts(CHUNK_SAMPLES, 16000).tolist() == [0]
    s = chunk_starts(25 * 16000, 5 * 16000)
    assert s.tolist() == [0, 80000, 160000, 240000]  # the last one ends at the end
    s = chunk_starts(CHUNK_SAMPLES + 1, 16000)
    assert s.tolist() == [0, 1]
    with pytest.raises(ValueError):
        chunk_starts(100, 0)


@pytest.mark.slow
def test_sliding_reads_bounded_chunks(segmenter: Segmenter, golden: Any) -> None:
    wave = np.concatenate([golden["inputs"][0, 0], np.zeros(30000, np.float32)])
    reads: list[tuple[int, int]] = []

    def read(a: int, b: int) -> np.ndarray:
        reads.append((a, b))
        return wave[a:b]

    starts, active = segmenter.sliding(read, wave.size, step=20000, batch=2)
    assert starts.tolist() == [0, 20000, 30000]
    assert active.shape == (3, N_FRAMES, 3) and active.dtype == bool
    assert all(b - a == CHUNK_SAMPLES for a, b in reads)
    np.testing.assert_array_equal(active[0], golden["multilabel_hard"][0].astype(bool))
