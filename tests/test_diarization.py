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
    LocalSpeakers,
    _average_linkage,
    _cut_given,
    _fill_nearest,
)
from verilive.voice.engine import VoiceEngine
from verilive.voice.segmentation import Segmenter

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
    return engine.diarizer


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


def test_fill_nearest_gives_the_nearest_other_speaker() -> None:
    # Speaker 0 on frames 0-9, speaker 1 on 10-19, speaker 2 on 40-49. Two speakers are counted on
    # frames 8-11 (a turn change) and on 30-31 (nobody linked there).
    out = np.zeros((50, 3), bool)
    out[0:10, 0] = out[10:20, 1] = out[40:50, 2] = True
    count = out.sum(axis=1)
    count[8:12] = 2
    count[30:32] = 1
    got = _fill_nearest(out.copy(), count)
    assert got[8:10, 1].all() and got[10:12, 0].all()  # the neighbour across the turn change
    assert not got[8:12, 2].any()  # farther away in time: not chosen
    assert got[30:32, 2].all()  # 8 frames from speaker 2, 10 from speaker 1
    assert (got.sum(axis=1) == count).all()
    # Nothing missing: unchanged.
    assert (_fill_nearest(out.copy(), out.sum(axis=1)) == out).all()


def test_given_count_ignores_a_stray_embedding() -> None:
    """Two voices of six embeddings each and one stray embedding far from both: asked for two
    speakers, the two voices come back, not "the stray one against everyone else"."""
    rng = np.random.default_rng(0)
    a, b, stray = np.eye(8)[0], np.eye(8)[1], np.eye(8)[2]
    x = np.stack([v + 0.1 * rng.standard_normal(8) for v in [a] * 6 + [b] * 6] + [stray])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    merges = _average_linkage(x)
    n_merges = int(np.sum(merges[:, 2] >= 0.5))
    labels, speakers = _cut_given(merges, 13, n_merges, 2, 3)
    assert len(speakers) == 2
    assert len(set(labels[:6])) == 1 and len(set(labels[6:12])) == 1 and labels[0] != labels[6]
    assert {labels[0], labels[6]} == set(speakers)
    # Three asked: only two clusters have three members, so the tree is cut at three, stray included.
    labels, speakers = _cut_given(merges, 13, n_merges, 3, 3)
    assert len(speakers) == 3 and labels[12] in speakers


def test_smallest_speaker_share_drops_stray_clusters_of_long_audio() -> None:
    """Two voices of 200 embeddings each (a long call) and three stray clumps of 3: a fixed smallest
    cluster of 2 keeps the clumps as speakers, a smallest share of 2 % (9 embeddings) does not.
    Rules cut one tree: cutting a tree made beforehand gives the same speakers."""
    rng = np.random.default_rng(1)
    basis = np.eye(16)
    x = np.stack(
        [basis[0] + 0.15 * rng.standard_normal(16) for _ in range(200)]
        + [basis[1] + 0.15 * rng.standard_normal(16) for _ in range(200)]
        + [basis[2 + k] + 0.05 * rng.standard_normal(16) for k in range(3) for _ in range(3)]
    ).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    cfg = DiarizationConfig(
        telephone_threshold=0.5, telephone_min_cluster_size=2, telephone_min_cluster_fraction=0.0
    )
    fixed = Diarizer(None, None, cfg)  # type: ignore[arg-type]
    assert fixed.cluster(x, telephone=True).shape == (5, 16)
    share = fixed.replace(telephone_min_cluster_fraction=0.02)
    cents = share.cluster(x, telephone=True)
    assert cents.shape == (2, 16)
    assert sorted(int(np.argmax(c)) for c in cents) == [0, 1]
    np.testing.assert_array_equal(share.cluster(x, telephone=True, tree=share.tree(x)), cents)
    # the wideband rules have their own share, and a count given ignores it
    assert fixed.replace(threshold=0.5, min_cluster_size=2).cluster(x).shape == (5, 16)
    assert fixed.replace(threshold=0.5, min_cluster_fraction=0.02).cluster(x).shape == (2, 16)
    assert share.cluster(x, num_speakers=3, telephone=True).shape == (3, 16)


def test_unembedded_local_speaker_joins_the_co_active_speaker() -> None:
    """Chunk 0 links its local speaker 0 to speaker 1 on frames 0-299. Chunk 1 (20 frames later) has
    the same voice as local speaker 2 without an embedding, and speaker 0 linked as local speaker 0:
    the unembedded one joins speaker 1, never speaker 0 of its own chunk."""
    act = np.zeros((2, 589, 3), bool)
    act[0, :300, 0] = True
    act[0, 400:, 1] = True
    act[1, :280, 2] = True
    act[1, 380:, 0] = True
    local = LocalSpeakers(np.array([0, 20]), act, np.zeros((2, 3, 192), np.float32), 609)
    speaker = np.array([[1, 0, -1], [0, -1, -1]])
    linked = np.zeros((609 + 589, 2), np.float32)
    linked[:300, 1] = 1
    linked[400:589, 0] = 1
    linked[400:609, 0] += 1
    extra = Diarizer.co_active(local, speaker, linked)
    assert extra[20:300, 1].all() and not extra[:, 0].any()


@pytest.mark.slow
def test_local_decision_thresholds(diarizer: Diarizer) -> None:
    """P(nobody) below the speech threshold gives the most likely local speaker; P(two) above the
    overlap threshold adds the second most likely."""
    p = np.zeros((4, 7), np.float32)
    p[0] = [0.9, 0.05, 0.05, 0, 0, 0, 0]  # silence
    p[1] = [0.55, 0.05, 0.4, 0, 0, 0, 0]  # quiet speech of #2: below 0.6 nobody
    p[2] = [0.1, 0.6, 0.05, 0, 0.25, 0, 0]  # #1, and #1+#2 above 0.2
    p[3] = [0.1, 0.8, 0.0, 0.0, 0.0, 0.0, 0.1]  # #1 alone: P(two) 0.1
    act = diarizer.replace(speech_threshold=0.6, overlap_threshold=0.2).decide(p)
    np.testing.assert_array_equal(act, [[0, 0, 0], [0, 1, 0], [1, 1, 0], [1, 0, 0]])
    assert not diarizer.replace(speech_threshold=0.5).decide(p)[1].any()


@pytest.mark.slow
def test_overlap_in_a_dev_excerpt_gives_two_overlapping_turns(diarizer: Diarizer, shared_dir: Path) -> None:
    """trn00 of the AMI dev excerpts: 3 speakers, several seconds of two people at once. Some of that
    comes out as turns of two keys at the same time, and overlap is not reported where it is not."""
    proto = shared_dir / DEV / "debug_protocol"
    x, sr = sf.read(proto / "trn00.flac", dtype="float32")
    ref = read_rttm(proto / "debug.train.rttm")["trn00"]
    step = 0.01
    n = int(x.size / sr / step)
    ref_count = np.zeros(n, int)
    for seg, _ in ref.itertracks():
        ref_count[round(seg.start / step) : round(seg.end / step)] += 1
    turns = diarizer.diarize(x, sr)
    check_turns(turns, x.size)
    ours = np.zeros(n, int)
    for spans in turns.values():
        for s, e in spans:
            ours[round(s / sr / step) : round(e / sr / step)] += 1
    found = (ours >= 2) & (ref_count >= 2)
    assert found.sum() * step >= 1.0, "at least a second of the reference overlap has two speakers"
    near = np.convolve(ref_count >= 2, np.ones(51), mode="same") > 0  # within 0.25 s of overlap
    assert ((ours >= 2) & ~near).sum() <= 0.25 * (ours >= 2).sum()
    # With one speaker per instant there is none.
    single = diarizer.replace(overlap_threshold=1.0).diarize(x, sr)
    flat = np.zeros(n, int)
    for spans in single.values():
        for s, e in spans:
            flat[round(s / sr / step) : round(e / sr / step)] += 1
    assert flat.max() <= 1


@pytest.mark.slow
def test_two_joined_speakers_at_once(diarizer: Diarizer, shared_dir: Path) -> None:
    """Read speech: A alone 0-8 s, A and B mixed 8-11 s, B alone 11-19 s."""
    a = sf.read(shared_dir / LIBRI / "1246-124548-0000.flac", dtype="float32")[0][: 11 * 16000]
    b = sf.read(shared_dir / LIBRI / "1235-135883-0000.flac", dtype="float32")[0][: 11 * 16000]
    x = np.concatenate([a[: 8 * 16000], a[8 * 16000 :] + b[: 3 * 16000], b[3 * 16000 :]])
    turns = diarizer.diarize(x, 16000)
    check_turns(turns, x.size)
    assert len(turns) == 2
    act = np.zeros((2, x.size // 160), bool)  # 10 ms frames
    for j, spans in enumerate(turns.values()):
        for s, e in spans:
            act[j, s // 160 : e // 160] = True
    t = np.flatnonzero(act.all(axis=0)) * 0.01
    assert t.size * 0.01 >= 0.5  # at least half a second of the 3 s found
    assert t.min() >= 7.5 and t.max() <= 11.5  # and nowhere else


def test_config_validation() -> None:
    for bad in (
        {"step_s": 0},
        {"step_s": 11.0},
        {"threshold": 2.0},
        {"max_cluster_items": 1},
        {"overlap_threshold": 1.5},
        {"speech_threshold": -0.1},
        {"min_clean_s": 0.0},
        {"min_cluster_size": 0},
        {"given_min_size": 0},
        {"min_cluster_fraction": 1.0},
        {"telephone_min_cluster_fraction": -0.01},
    ):
        with pytest.raises(ValueError):
            DiarizationConfig(**bad)
    assert DiarizationConfig().step_frames == 59  # 1 s in whole 16.875 ms frames


# ------------------------------------------------------------------------------ on real speech


@pytest.mark.slow
def test_two_speakers_found_on_the_dev_sample(diarizer: Diarizer, sample: tuple[np.ndarray, int]) -> None:
    x, sr = sample
    turns = diarizer.diarize(x, sr)
    assert len(turns) == 2
    check_turns(turns, x.size)


@pytest.mark.slow
def test_silence_and_noise_give_no_speakers(diarizer: Diarizer) -> None:
    assert diarizer.diarize(np.zeros(5 * 16000, np.float32), 16000) == {}
    assert diarizer.diarize(np.zeros(0, np.float32), 16000) == {}
    assert diarizer.diarize(np.zeros(8000, np.float32), 8000, num_speakers=2) == {}
    noise = 0.01 * np.random.default_rng(0).standard_normal(10 * 16000)
    assert diarizer.diarize(noise.astype(np.float32), 16000) == {}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["103-1240-0000.flac", "1040-133433-0000.flac", "198-126831-0000.flac"])
def test_one_librispeech_speaker_is_one_key(diarizer: Diarizer, shared_dir: Path, name: str) -> None:
    x, sr = sf.read(shared_dir / LIBRI / name, dtype="float32")
    turns = diarizer.diarize(x, sr)
    assert list(turns) == ["0"]
    check_turns(turns, x.size)


@pytest.mark.slow
def test_keys_in_order_of_first_appearance(diarizer: Diarizer, three: np.ndarray) -> None:
    turns = diarizer.diarize(three, 16000)
    assert len(turns) == 3
    check_turns(turns, three.size)
    # Speaker i of the recording is key str(i): the key with the most time inside part i.
    for i in range(3):
        a, b = i * PART_S * 16000, (i + 1) * PART_S * 16000
        time_in = {k: sum(max(0, min(e, b) - max(s, a)) for s, e in spans) for k, spans in turns.items()}
        assert max(time_in, key=time_in.__getitem__) == str(i)


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2, 3])
def test_num_speakers_is_honoured(diarizer: Diarizer, three: np.ndarray, k: int) -> None:
    turns = diarizer.diarize(three, 16000, num_speakers=k)
    assert len(turns) == k
    check_turns(turns, three.size)


@pytest.mark.slow
def test_more_speakers_asked_than_heard(diarizer: Diarizer, three: np.ndarray) -> None:
    """Four asked of three voices: a split-off fourth speaker gets turns only where it leads."""
    turns = diarizer.diarize(three, 16000, num_speakers=4)
    assert 3 <= len(turns) <= 4
    check_turns(turns, three.size)


@pytest.mark.slow
def test_sample_forced_to_one_speaker(diarizer: Diarizer, sample: tuple[np.ndarray, int]) -> None:
    x, sr = sample
    assert list(diarizer.diarize(x, sr, num_speakers=1)) == ["0"]


@pytest.mark.slow
@pytest.mark.parametrize("bad", [0, -1, 11, 2.0, True, "2", np.nan])
def test_invalid_num_speakers_raises(diarizer: Diarizer, bad: Any) -> None:
    assert diarizer.config.max_speakers == 10
    with pytest.raises(InvalidParameter, match="num_speakers"):
        diarizer.diarize(np.zeros(16000, np.float32), 16000, num_speakers=bad)


@pytest.mark.slow
def test_numpy_integer_num_speakers_is_accepted(diarizer: Diarizer, three: np.ndarray) -> None:
    assert len(diarizer.diarize(three, 16000, num_speakers=np.int64(2))) == 2


@pytest.mark.slow
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


@pytest.mark.slow
def test_chunks_and_embeddings_are_batched(engine: VoiceEngine, sample: tuple[np.ndarray, int]) -> None:
    x, sr = sample  # 30 s: 22 chunks of 10 s, 21 every 59 frames and one ending at the end
    seg = CountingSession(engine.diarizer.segmenter.session)
    emb = CountingSession(engine.embedder.session)
    d = Diarizer(Segmenter(seg), CamPlusPlus(emb), DiarizationConfig(batch_size=8))
    turns = d.diarize(x, sr)
    assert len(turns) == 2
    assert seg.batches == [8, 8, 6]
    assert len(emb.batches) < sum(seg.batches)  # several local speakers per CAM++ call
    assert max(emb.batches) <= 16
    # A different batch size groups the same work differently; the answer stays the same.
    seg.batches.clear()
    other = Diarizer(Segmenter(seg), CamPlusPlus(emb), DiarizationConfig(batch_size=3)).diarize(x, sr)
    assert seg.batches == [3] * 7 + [1]
    assert len(other) == 2
    same = sum(min(e, f) - max(s, g) for (s, e), (g, f) in zip(other["0"], turns["0"], strict=False))
    assert same >= 0.95 * sum(e - s for s, e in turns["0"])


@pytest.mark.slow
def test_embed_batch_matches_single_embeddings(engine: VoiceEngine, sample: tuple[np.ndarray, int]) -> None:
    x, _ = sample
    cam = engine.embedder
    feats = [cam.features(x[a : a + n]) for a, n in ((0, 32000), (48000, 36000), (96000, 16000))]
    got = cam.embed_batch(feats, batch_size=2)
    want = np.stack([cam.embed_features(f) for f in feats])
    # Equal lengths (or one per batch) give the same embedding; tiling within 25 % moves it a little.
    cos = np.sum(got * want, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() > 0.97
    np.testing.assert_allclose(got[2], want[2], atol=1e-4)  # the shortest is alone in its batch
    with pytest.raises(ValueError):
        cam.embed_batch([np.zeros((10, 40), np.float32)])
    assert cam.embed_batch([]).shape == (0, 192)


@pytest.mark.slow
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
    # Measured 21 MB: one batch of chunks, 600 chunks' activity and embeddings, the
    # clustering sample. A copy of the input alone would be 38 MB.
    assert peak < 30e6, f"peak extra memory {peak / 1e6:.1f} MB"


def test_der_interval_over_files() -> None:
    same = [Score(total=10.0, missed=1.0, false_alarm=0.5, confusion=0.5)] * 5
    assert der_interval(same, n_boot=200) == pytest.approx((0.2, 0.2))
    mixed = [Score(total=10.0, missed=m) for m in (0.0, 1.0, 2.0, 4.0, 8.0)]  # per-file DER 0-80 %
    lo, hi = der_interval(mixed, n_boot=500)
    overall = sum(s.missed for s in mixed) / 50.0
    assert 0.0 <= lo < overall < hi <= 0.8
