"""Speaker diarization on the real models and real speech, and the DER wrapper of eval/diarization.py.

The development data lives in ../shared (tests/conftest.py: a missing folder is a failure, not a skip).
"""

from __future__ import annotations

import itertools
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from eval.diarization import Score, der_interval, read_rttm, read_uem, score, turns_to_annotation

from verilive.config import Settings
from verilive.errors import InvalidParameter
from verilive.models.sessions import ModelRegistry
from verilive.voice.campplus import CamPlusPlus
from verilive.voice.diarization import (
    DiarizationConfig,
    Diarizer,
    _absorb_short_runs,
    _average_linkage,
    _majority_filter,
    add_overlap,
)
from verilive.voice.engine import VoiceEngine

LIBRI = "data/voice/librispeech_251spk_gender"
DEV = "data/voice/ami_diarization_dev"
# Three LibriSpeech speakers (F, M, F), 8 s of each, joined: a clean three-speaker recording.
THREE = ["103-1240-0000.flac", "1040-133433-0000.flac", "1069-133699-0000.flac"]
PART_S = 8


@pytest.fixture(scope="module")
def engine(models_settings: Settings) -> VoiceEngine:
    return VoiceEngine.from_registry(ModelRegistry(models_settings))


@pytest.fixture(scope="module")
def diarizer(engine: VoiceEngine) -> Diarizer:
    return Diarizer.from_engine(engine)


@pytest.fixture(scope="module")
def sample(shared_dir: Path) -> tuple[np.ndarray, int]:
    x, sr = sf.read(shared_dir / DEV / "sample/sample.flac", dtype="float32")
    return x, sr


@pytest.fixture(scope="module")
def three(shared_dir: Path) -> np.ndarray:
    parts = [sf.read(shared_dir / LIBRI / n, dtype="float32")[0][: PART_S * 16000] for n in THREE]
    return np.concatenate(parts)


def check_turns(turns: dict[str, list[tuple[int, int]]], n_samples: int) -> None:
    """Keys "0".."n-1" by first appearance; intervals sorted, disjoint within a speaker, inside the input."""
    assert list(turns) == [str(i) for i in range(len(turns))]
    firsts = [spans[0][0] for spans in turns.values()]
    assert firsts == sorted(firsts)
    for spans in turns.values():
        assert spans, "a key without turns"
        for s, e in spans:
            assert isinstance(s, int) and isinstance(e, int)
            assert 0 <= s < e <= n_samples
        for (_, e0), (s1, _) in itertools.pairwise(spans):
            assert e0 < s1  # touching turns of one speaker are merged


# ------------------------------------------------------------------------------ DER wrapper


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_der_wrapper_on_a_hand_made_case(tmp_path: Path) -> None:
    # Reference: A speaks 0-10 s, B 10-20 s. Hypothesis: X 0-12 s, Y 12-20 s, X again 21-22 s (nobody
    # speaks there). Scored 0-25 s. Best mapping A->X, B->Y: 2 s confusion (10-12), 1 s false alarm.
    ref = read_rttm(
        write(
            tmp_path / "ref.rttm",
            "SPEAKER f 1 0.0 10.0 <NA> <NA> A <NA> <NA>\nSPEAKER f 1 10.0 10.0 <NA> <NA> B <NA> <NA>\n",
        )
    )["f"]
    hyp = read_rttm(
        write(
            tmp_path / "hyp.rttm",
            "SPEAKER f 1 0.0 12.0 <NA> <NA> X <NA> <NA>\n"
            "SPEAKER f 1 12.0 8.0 <NA> <NA> Y <NA> <NA>\n"
            "SPEAKER f 1 21.0 1.0 <NA> <NA> X <NA> <NA>\n",
        )
    )["f"]
    uem = read_uem(write(tmp_path / "f.uem", "f 1 0.0 25.0\n"))["f"]

    s = score(ref, hyp, uem, collar_s=0.0)
    assert s.total == pytest.approx(20.0)
    assert (s.missed, s.false_alarm, s.confusion) == pytest.approx((0.0, 1.0, 2.0))
    assert s.der == pytest.approx(3.0 / 20.0)
    # JER: A vs X: 10 s shared of a 13 s union; B vs Y: 8 of 10. Mean of (3/13, 2/10).
    assert s.jer == pytest.approx((3 / 13 + 2 / 10) / 2)

    # 0.25 s each side of the reference boundaries at 0, 10 and 20 s is not scored: 19 s remain, and
    # the confusion shrinks to 10.25-12 s. The false alarm at 21-22 s is outside every collar.
    c = score(ref, hyp, uem, collar_s=0.25)
    assert c.total == pytest.approx(19.0)
    assert (c.missed, c.false_alarm, c.confusion) == pytest.approx((0.0, 1.0, 1.75))
    assert c.der == pytest.approx(2.75 / 19.0)


def test_der_wrapper_collar_matches_md_eval(shared_dir: Path) -> None:
    # SpeechBrain documents md-eval's result for this pair with a 0.25 s collar and overlap ignored:
    # DER 7.16923618 %. Agreement shows the collar is applied on each side, as md-eval does.
    d = shared_dir / "data/voice/speechbrain_samples/ami_rttm_only"
    ref = read_rttm(d / "ES2014c.ref.rttm")["ES2014c"]
    hyp = read_rttm(d / "ES2014c.sys.rttm")["ES2014c"]
    with pytest.warns(UserWarning, match="uem"):  # no UEM: pyannote scores the union of both extents
        s = score(ref, hyp, collar_s=0.25, skip_overlap=True)
    assert 100 * s.der == pytest.approx(7.169, abs=0.01)
    assert s.missed == 0.0 and s.false_alarm == 0.0


def test_turns_to_annotation_uses_seconds() -> None:
    ann = turns_to_annotation({"0": [(8000, 16000)], "1": [(16000, 48000)]}, 16000, "u")
    assert ann.label_duration("0") == pytest.approx(0.5)
    assert ann.label_duration("1") == pytest.approx(2.0)


# ------------------------------------------------------------------------------ building blocks


def test_average_linkage_matches_scipy() -> None:
    from scipy.cluster.hierarchy import linkage

    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 8))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ours = 1.0 - _average_linkage(x)[:, 2]
    theirs = linkage(x, method="average", metric="cosine")[:, 2]
    np.testing.assert_allclose(ours, theirs, atol=1e-9)
    assert np.all(np.diff(ours) >= -1e-12)  # no inversions: a threshold cut is a prefix


def test_smoothing_helpers() -> None:
    lab = np.array([0, 0, 0, 1, 0, 0, 0, 2, 2, 2, 2, 2, 1, 1])
    np.testing.assert_array_equal(_majority_filter(lab, 3, 3), [0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 1, 1])
    # The 1-frame run of 1 joins the longer neighbour; then the two 0 runs are one run.
    out = _absorb_short_runs(lab, 3)
    np.testing.assert_array_equal(out, [0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2])


def test_add_overlap_gives_the_nearest_other_speaker() -> None:
    # Speaker 0 talks 0-2 s, speaker 1 2-4 s, speaker 2 8-10 s; overlap flagged 1.8-2.2 s (a turn
    # change), 6.0-6.5 s (nobody speaks: ignored) and 3.0-3.04 s (too short: ignored).
    turns = [[(0.0, 2.0)], [(2.0, 4.0)], [(8.0, 10.0)]]
    p = np.zeros(500, np.float32)
    p[90:110] = 0.9
    p[300:325] = 0.9
    p[150:152] = 0.9
    out = add_overlap(turns, p, 0.5, 0.02, 5)
    assert out[0] == [(0.0, 2.0), (2.0, 2.2)]  # speaker 0 finishes late, over speaker 1
    assert out[1] == [(2.0, 4.0), (1.8, 2.0)]  # speaker 1 starts early, over speaker 0
    assert out[2] == [(8.0, 10.0)]  # farther away in time: not chosen
    assert turns[0] == [(0.0, 2.0)]  # the input is not modified
    # Below the threshold, or one speaker only: unchanged.
    assert add_overlap(turns, p, 0.95, 0.02, 5) == turns
    assert add_overlap([[(0.0, 4.0)]], p, 0.5, 0.02, 5) == [[(0.0, 4.0)]]


def test_overlapped_speech_gets_both_speakers(diarizer: Diarizer, shared_dir: Path) -> None:
    """Two validation speakers of train/overlap.py: A alone 0-8 s, A and B together 8-11 s, B alone
    11-19 s. With overlap detection some of 8-11 s has both keys; without it, nothing does."""
    a = sf.read(shared_dir / LIBRI / "1246-124548-0000.flac", dtype="float32")[0][: 11 * 16000]
    b = sf.read(shared_dir / LIBRI / "1235-135883-0000.flac", dtype="float32")[0][: 11 * 16000]
    x = np.concatenate([a[: 8 * 16000], a[8 * 16000 :] + b[: 3 * 16000], b[3 * 16000 :]])

    def both(turns: dict[str, list[tuple[int, int]]]) -> np.ndarray:
        assert len(turns) == 2
        act = np.zeros((2, x.size // 160), bool)  # 10 ms frames
        for j, spans in enumerate(turns.values()):
            for s, e in spans:
                act[j, s // 160 : e // 160] = True
        return np.flatnonzero(act.all(axis=0)) * 0.01

    with_overlap = diarizer.diarize(x, 16000)
    check_turns(with_overlap, x.size)
    t = both(with_overlap)
    assert t.size * 0.01 >= 0.5  # at least half a second of the 3 s found
    assert t.min() >= 7.5 and t.max() <= 11.5  # and nowhere else
    assert both(diarizer.replace(overlap=False).diarize(x, 16000)).size == 0


def test_committed_overlap_model_is_small_and_described() -> None:
    """The detector is part of the package (no download), with the metadata the runtime relies on."""
    from importlib.resources import files

    from verilive.voice.overlap import CHUNK_S, FRAME_S, MODEL_FILE, OverlapDetector

    blob = files("verilive.voice") / MODEL_FILE
    assert blob.is_file() and len(blob.read_bytes()) < 4 * 1024 * 1024
    det = OverlapDetector()
    assert det.meta["frame_s"] == FRAME_S and det.meta["chunk_s"] == CHUNK_S
    assert 0.2 <= det.threshold <= 0.9  # the grid train/overlap.py searches
    assert [i.name for i in det.session.get_inputs()] == ["fbank"]


def test_overlap_detector_on_a_simulated_mixture(shared_dir: Path) -> None:
    """Two validation speakers of train/overlap.py (never trained on), spoken one at a time and then
    together. Clean read speech only: eval/overlap.py measures the detector on AMI meetings."""
    from verilive.voice.overlap import OverlapDetector

    det = OverlapDetector()
    a = sf.read(shared_dir / LIBRI / "1246-124548-0000.flac", dtype="float32")[0][: 6 * 16000]
    b = sf.read(shared_dir / LIBRI / "1235-135883-0000.flac", dtype="float32")[0][: 6 * 16000]
    solo = np.concatenate([a, b])  # 12 s, one at a time
    mixed = np.concatenate(
        [a[: 3 * 16000], a[3 * 16000 :] + b[: 3 * 16000], b[3 * 16000 :]]
    )  # 9 s, 3 s overlap
    p_solo, p_mixed = det.probabilities(solo), det.probabilities(mixed)
    assert p_solo.shape == (600,) and p_mixed.shape == (450,)
    assert np.all((p_solo >= 0) & (p_solo <= 1))
    both = p_mixed[160:290]  # 3.2-5.8 s, inside the overlapped stretch
    assert np.median(both) > det.threshold
    assert np.mean(p_solo >= det.threshold) < 0.1
    assert np.median(both) > np.percentile(p_solo, 95)
    # Short, empty, silent and non-finite input.
    assert det.probabilities(np.zeros(100, np.float32)).shape == (0,)
    assert np.all(det.probabilities(np.zeros(16000, np.float32)) < det.threshold)
    bad = mixed.copy()
    bad[1000:2000] = np.nan
    assert np.all(np.isfinite(det.probabilities(bad)))


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        DiarizationConfig(hop_s=0)
    with pytest.raises(ValueError):
        DiarizationConfig(threshold=2.0)
    with pytest.raises(ValueError):
        DiarizationConfig(max_cluster_windows=1)
    with pytest.raises(ValueError):
        DiarizationConfig(overlap_threshold=1.5)
    assert DiarizationConfig().window_frames == 148  # 1.5 s at 16 kHz, Kaldi snip_edges framing


# ------------------------------------------------------------------------------ on real speech


def test_two_speakers_found_on_the_dev_sample(diarizer: Diarizer, sample: tuple[np.ndarray, int]) -> None:
    x, sr = sample
    turns = diarizer.diarize(x, sr)
    assert len(turns) == 2
    check_turns(turns, x.size)


def test_silence_and_noise_give_no_speakers(diarizer: Diarizer) -> None:
    assert diarizer.diarize(np.zeros(5 * 16000, np.float32), 16000) == {}
    assert diarizer.diarize(np.zeros(0, np.float32), 16000) == {}
    assert diarizer.diarize(np.zeros(8000, np.float32), 8000, num_speakers=2) == {}
    noise = 0.01 * np.random.default_rng(0).standard_normal(10 * 16000)
    assert diarizer.diarize(noise.astype(np.float32), 16000) == {}


@pytest.mark.parametrize("name", ["103-1240-0000.flac", "1040-133433-0000.flac", "198-126831-0000.flac"])
def test_one_librispeech_speaker_is_one_key(diarizer: Diarizer, shared_dir: Path, name: str) -> None:
    x, sr = sf.read(shared_dir / LIBRI / name, dtype="float32")
    turns = diarizer.diarize(x, sr)
    assert list(turns) == ["0"]
    check_turns(turns, x.size)


def test_keys_in_order_of_first_appearance(diarizer: Diarizer, three: np.ndarray) -> None:
    turns = diarizer.diarize(three, 16000)
    assert len(turns) == 3
    check_turns(turns, three.size)
    # Speaker i of the recording is key str(i): the key with the most time inside part i.
    for i in range(3):
        a, b = i * PART_S * 16000, (i + 1) * PART_S * 16000
        time_in = {k: sum(max(0, min(e, b) - max(s, a)) for s, e in spans) for k, spans in turns.items()}
        assert max(time_in, key=time_in.__getitem__) == str(i)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_num_speakers_is_honoured(diarizer: Diarizer, three: np.ndarray, k: int) -> None:
    turns = diarizer.diarize(three, 16000, num_speakers=k)
    assert len(turns) == k
    check_turns(turns, three.size)


def test_sample_forced_to_one_speaker(diarizer: Diarizer, sample: tuple[np.ndarray, int]) -> None:
    x, sr = sample
    assert list(diarizer.diarize(x, sr, num_speakers=1)) == ["0"]


@pytest.mark.parametrize("bad", [0, -1, 11, 2.0, True, "2", np.nan])
def test_invalid_num_speakers_raises(diarizer: Diarizer, bad: Any) -> None:
    assert diarizer.config.max_speakers == 10
    with pytest.raises(InvalidParameter, match="num_speakers"):
        diarizer.diarize(np.zeros(16000, np.float32), 16000, num_speakers=bad)


def test_numpy_integer_num_speakers_is_accepted(diarizer: Diarizer, three: np.ndarray) -> None:
    assert len(diarizer.diarize(three, 16000, num_speakers=np.int64(2))) == 2


def test_other_sample_rates(diarizer: Diarizer, sample: tuple[np.ndarray, int]) -> None:
    import soxr

    x, sr = sample
    for rate in (8000, 44100):
        y = soxr.resample(x, sr, rate).astype(np.float32)
        turns = diarizer.diarize(y.reshape(-1, 1), rate)  # (frames, 1) is accepted too
        assert len(turns) == 2
        check_turns(turns, y.size)


class CountingSession:
    """An onnxruntime session that counts its runs and the batch sizes."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.batches: list[int] = []

    def get_inputs(self) -> Any:
        return self.session.get_inputs()

    def get_outputs(self) -> Any:
        return self.session.get_outputs()

    def run(self, names: Any, feed: dict[str, np.ndarray]) -> Any:
        self.batches.append(next(iter(feed.values())).shape[0])
        return self.session.run(names, feed)


def test_windows_are_batched(engine: VoiceEngine, sample: tuple[np.ndarray, int]) -> None:
    x, sr = sample
    counting = CountingSession(engine.embedder.session)
    d = Diarizer(engine.vad, CamPlusPlus(counting), DiarizationConfig(batch_size=64))
    turns = d.diarize(x, sr)
    assert len(turns) == 2
    assert len(counting.batches) == 1 and counting.batches[0] > 20  # all windows of 30 s in one call
    n_windows = counting.batches[0]

    for size in (16, 8):  # the default, and a smaller one
        counting.batches.clear()
        small = Diarizer(engine.vad, CamPlusPlus(counting), DiarizationConfig(batch_size=size))
        assert small.diarize(x, sr) == turns  # batching does not change the answer
        assert counting.batches == [size] * (n_windows // size) + (
            [n_windows % size] if n_windows % size else []
        )


def test_long_input_runs_in_bounded_memory(diarizer: Diarizer, sample: tuple[np.ndarray, int]) -> None:
    x, sr = sample
    long = np.resize(x, 10 * 60 * sr)  # 10 min of the two-speaker sample, tiled (38 MB of float32)
    tracemalloc.start()
    try:
        turns = diarizer.diarize(long, sr)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 1 <= len(turns) <= 3
    check_turns(turns, long.size)
    # Measured about 8 MB: VAD frames, one feature batch, ~800 embeddings and the clustering sample.
    # A copy of the input alone would be 38 MB; an all-pairs affinity over hour-long input, 180 MB.
    assert peak < 20e6, f"peak extra memory {peak / 1e6:.1f} MB"


def test_der_interval_over_files() -> None:
    same = [Score(total=10.0, missed=1.0, false_alarm=0.5, confusion=0.5)] * 5
    assert der_interval(same, n_boot=200) == pytest.approx((0.2, 0.2))
    mixed = [Score(total=10.0, missed=m) for m in (0.0, 1.0, 2.0, 4.0, 8.0)]  # per-file DER 0-80 %
    lo, hi = der_interval(mixed, n_boot=500)
    overall = sum(s.missed for s in mixed) / 50.0
    assert 0.0 <= lo < overall < hi <= 0.8
