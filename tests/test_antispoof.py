"""Voice anti-spoofing (verilive.voice.antispoof) with the committed model.

Bona fide clips are LibriSpeech speakers the shipped model never saw (the held-out speakers listed in
the model's metadata); spoof clips are NII neural-vocoder clips of the held-out ARCTIC speaker (also
never trained on), espeak-ng speech generated here (Debian's espeak-ng, installed by
scripts/install-test-deps.sh; docs/antispoof.md), and real deepfakes of other labs (shared/data/voice/spoof_*)
of held-aside speakers and sentences, compared with the real recordings beside them. The thresholds
are loose on purpose: this checks that the committed model works, not its measured error rates
(those, leave-one-source-out, are in docs/antispoof.md).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
import soundfile as sf
from scipy.signal import stft

from tests.servers import missing_message
from verilive.audio import Audio, resample
from verilive.config import Settings
from verilive.models.sessions import ModelRegistry
from verilive.models.store import ModelStore
from verilive.voice.antispoof import (
    CLASSES,
    FCM_SECONDS,
    MIN_FRAMES,
    AntiSpoof,
    FrontEnd,
    clipped_fraction,
    fcm_input,
    features,
    log_spectrogram,
)
from verilive.voice.utterance_cues import FEATURE_NAMES, utterance_features
from verilive.voice.vad import MODEL_ID, SileroVad

VOICE = "data/voice"
MODEL = Path(__file__).resolve().parents[1] / "src" / "verilive" / "voice" / "antispoof_model.onnx"


def audio(x: np.ndarray, sr: int) -> Audio:
    x = np.ascontiguousarray(x, dtype=np.float32)
    return Audio(x.reshape(-1, 1) if x.ndim == 1 else x, sr)


def load(path: Path, seconds: float = 6.0) -> tuple[np.ndarray, int]:
    if not path.exists():
        pytest.fail(f"development data {path} is missing (see ../shared/data/README.md)")
    x, sr = sf.read(path, dtype="float32")
    return x[: int(seconds * sr)], int(sr)


@pytest.fixture(scope="module")
def vad() -> SileroVad:
    settings = Settings()
    store = ModelStore.from_settings(settings)
    if store.missing([MODEL_ID]):
        store.pull(MODEL_ID)
    return SileroVad.from_registry(ModelRegistry(settings, ids=[MODEL_ID]))


@pytest.fixture(scope="module")
def anti(vad: SileroVad) -> AntiSpoof:
    return AntiSpoof(registry=ModelRegistry(Settings()), vad=vad)


@pytest.fixture(scope="module")
def held_out(anti: AntiSpoof) -> list[str]:
    return list(anti.meta["test_speakers"])


def espeak_ng() -> str:
    exe = shutil.which("espeak-ng")
    if exe is None:
        pytest.fail(missing_message("espeak-ng", "espeak-ng"))
    return exe


# ------------------------------------------------------------------------------------- the model


@pytest.mark.slow
def test_committed_model_is_small_and_consistent(anti: AntiSpoof, shared_dir: Path) -> None:
    assert MODEL.stat().st_size < 2 * 1024 * 1024
    assert anti.meta["classes"] == list(CLASSES)
    assert FrontEnd(**anti.meta["frontend"]) == anti.frontend == FrontEnd()
    # the held-out speakers the tests rely on are recorded with the model
    assert any(s.startswith("libri-") for s in anti.meta["test_speakers"])
    assert any(s.startswith("arctic-") for s in anti.meta["test_speakers"])
    assert anti.meta["cues"] == list(FEATURE_NAMES)
    assert anti.meta["fcm_seconds"] == anti.fcm_seconds > 0
    assert anti.meta["fcm"] == "frames"
    # any length of spectrogram and front output gives four logits, with cues measured,
    # unmeasurable (NaN) or absurd
    x = load(shared_dir / VOICE / "librispeech_251spk_gender/103-1240-0000.flac")[0]
    cues, fcm = utterance_features(x), anti.fcm_frames(x)
    # the shipped model carries the Whisper branch (issue 29)
    assert anti.whisper_id == "whisper_base_encoder"
    w = anti.whisper_features(x)
    for frames in (MIN_FRAMES, 333, 1200):
        for c in (cues, np.full(len(FEATURE_NAMES), np.nan), np.full(len(FEATURE_NAMES), 1e30)):
            for h in (fcm, fcm[:, :1], np.tile(fcm, 3)):
                z = anti.logits(np.zeros((2, FrontEnd().bins, frames), np.float32) - 40, c, h, w)
                assert z.shape == (4,) and np.all(np.isfinite(z))


def test_model_for_another_front_input_is_refused(tmp_path: Path) -> None:
    """A model file whose metadata does not match the runtime's feature paths fails at load with a
    clear message, rather than running on inputs it was not trained on."""
    import json

    import onnx

    for key, value, message in (
        ("fcm", "statistics", "another CAM\\+\\+ front input"),
        ("cues", ["exc_f0_spread"], "other utterance cues"),
        ("classes", ["bonafide", "spoof"], "unexpected anti-spoofing classes"),
    ):
        model = onnx.load(str(MODEL))
        entry = next(e for e in model.metadata_props if e.key == "verilive_antispoof")
        meta = json.loads(entry.value)
        meta[key] = value
        entry.value = json.dumps(meta)
        path = tmp_path / f"{key}.onnx"
        onnx.save(model, str(path))
        with pytest.raises(ValueError, match=message):
            AntiSpoof(path, registry=ModelRegistry(Settings()))


def test_fcm_input_is_trimmed_and_bounded() -> None:
    rng = np.random.default_rng(3)
    speech = (0.1 * rng.standard_normal(16000 * 3)).astype(np.float32)
    x = np.concatenate([np.zeros(16000, np.float32), speech, np.zeros(8000, np.float32)])
    y = fcm_input(x)
    # the silence at either end is gone, up to the frames that straddle the edges
    assert speech.size <= y.size < speech.size + 2 * FrontEnd().win
    assert np.count_nonzero(y == 0) < 2 * FrontEnd().win
    assert fcm_input(np.tile(speech, 5)).size == int(FCM_SECONDS * 16000)  # at most FCM_SECONDS
    assert fcm_input(np.zeros(100, np.float32)).size == 100
    assert fcm_input(np.zeros(16000 * 20, np.float32)).size == int(FCM_SECONDS * 16000)


@pytest.mark.slow
def test_fcm_frames(anti: AntiSpoof, shared_dir: Path) -> None:
    """The CAM++ front output: 320 finite values per 10 ms frame of the trimmed first
    ``FCM_SECONDS``, the same for the same signal at another level (the fbank is mean-normalised per
    clip), different for another recording."""
    a = load(shared_dir / VOICE / "librispeech_251spk_gender/103-1240-0000.flac")[0]
    h = anti.fcm_frames(a)
    assert h.dtype == np.float32 and np.all(np.isfinite(h))
    assert h.shape[0] == 320 and 100 * a.size / 16000 - 50 <= h.shape[1] <= 100 * a.size / 16000
    assert FCM_SECONDS * 100 - 3 <= anti.fcm_frames(np.tile(a, 3)).shape[1] <= FCM_SECONDS * 100
    diff = np.abs(anti.fcm_frames(0.3 * a) - h)  # only the fbank floor in the quietest frames moves
    assert diff.mean() < 0.005 * np.abs(h).max() and np.quantile(diff, 0.999) < 0.05 * np.abs(h).max()
    other = np.random.default_rng(5).standard_normal(a.size).astype(np.float32) * 0.05
    g = anti.fcm_frames(other)
    assert np.abs(g.mean(axis=1) - h.mean(axis=1)).max() > 0.2 * np.abs(h.mean(axis=1)).max()


def test_features_are_level_invariant_and_trimmed() -> None:
    rng = np.random.default_rng(0)
    noise = (0.1 * rng.standard_normal(16000)).astype(np.float32)
    x = np.concatenate([np.zeros(8000, np.float32), noise, np.zeros(8000, np.float32)])
    f = features(x)
    assert f.shape[:2] == (2, FrontEnd().bins) and f.dtype == np.float32
    assert 95 <= f.shape[2] <= 106  # the silent 0.5 s at either end are trimmed
    np.testing.assert_allclose(f, features(x * 0.01), atol=1e-3)
    assert np.all(np.abs(f[1]) <= 1.0)  # squashed group delay
    np.testing.assert_array_equal(log_spectrogram(x), f[0])
    assert features(np.zeros(100, np.float32)).shape == (2, FrontEnd().bins, 0)
    assert features(np.zeros(16000, np.float32)).shape == (2, FrontEnd().bins, 0)


def test_clipped_fraction() -> None:
    t = np.arange(16000) / 16000
    clean = 0.9 * np.sin(2 * np.pi * 220 * t) * np.hanning(t.size)
    assert clipped_fraction(clean) == 0.0
    clipped = np.clip(3 * clean, -1, 1)
    assert clipped_fraction(clipped) > 0.05
    assert clipped_fraction(0.5 * clipped) > 0.05  # clipped, then turned down: still a plateau
    assert clipped_fraction(np.zeros(0)) == 0.0


# ------------------------------------------------------------------------------------- separation


def _bona_fide(shared_dir: Path, held_out: list[str]) -> list[tuple[np.ndarray, int]]:
    root = shared_dir / VOICE / "librispeech_251spk_gender"
    speakers = sorted(s.removeprefix("libri-") for s in held_out if s.startswith("libri-"))[:12]
    return [load(next(root.glob(f"{spk}-*.flac"))) for spk in speakers]


def _nii(shared_dir: Path, held_out: list[str]) -> list[tuple[np.ndarray, int]]:
    root = shared_dir / VOICE / "nii_vocoded_spoof" / "nsf_copy_synthesis"
    arctic = [s.removeprefix("arctic-") for s in held_out if s.startswith("arctic-")]
    return [load(p) for spk in arctic for p in sorted(root.glob(f"*/{spk}_arctic_*.flac"))]


def _espeak() -> list[tuple[np.ndarray, int]]:
    exe = espeak_ng()
    texts = [
        ("en-us", "Please transfer two hundred dollars to my savings account today."),
        ("en+f3", "My voice is my password, please verify my identity now."),
        ("en-gb+m3", "The weather in the north will be cold and windy this evening."),
        ("de", "Seven, four, two, nine, one, eight, three, and then five."),
        ("fr+f2", "Yes, I confirm the payment of forty euros for the order."),
        ("en-us+klatt", "She sells sea shells by the sea shore every summer morning."),
    ]
    out = []
    with tempfile.TemporaryDirectory() as td:
        for i, (voice, text) in enumerate(texts):
            wav = Path(td) / f"{i}.wav"
            subprocess.run([exe, "-v", voice, "-w", str(wav), text], check=True, capture_output=True)
            x, sr = sf.read(wav, dtype="float32")
            out.append((x, int(sr)))
    return out


@pytest.mark.slow
def test_separates_held_out_bona_fide_from_spoofs(
    anti: AntiSpoof, shared_dir: Path, held_out: list[str]
) -> None:
    bona = [anti.evaluate(audio(x, sr)) for x, sr in _bona_fide(shared_dir, held_out)]
    nii = [anti.evaluate(audio(x, sr)) for x, sr in _nii(shared_dir, held_out)]
    esp = [anti.evaluate(audio(x, sr)) for x, sr in _espeak()]
    assert len(bona) >= 8 and len(nii) >= 8 and len(esp) == 6
    for r in [*bona, *nii, *esp]:
        assert r.unsuitable is None and r.score is not None
    sb = np.array([r.score for r in bona])
    ss = np.array([r.score for r in [*nii, *esp]])
    # ranking: most (bona fide, spoof) pairs are ordered right. 0.85, not 0.9: issue 46's head,
    # trained on public sources, trades this in-domain ranking (0.89; the fusion before it: >= 0.9)
    # for the sources it never saw (pooled EER 28.4 -> 15.5 %, docs/antispoof.md)
    auc = np.mean(sb[:, None] > ss[None, :])
    assert auc >= 0.85, (sb, ss)
    assert np.median(sb) > 0.5, sb
    assert np.median([r.score for r in esp]) < 0.5, ss  # NII: the strict xfail below
    # the attack class of generated TTS is mostly recognised as TTS
    tts_top = [
        max(("replay", r.replay), ("tts", r.tts), ("vc", r.vc), key=lambda t: t[1] or 0)[0] for r in esp
    ]
    assert tts_top.count("tts") >= 4, tts_top


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="known regression of issue 46's head: the NII vocoder copies of the held-out ARCTIC speaker "
    "are accepted at 0.5 (median P 0.68; the issue-29 fusion rejected them). The head never saw the "
    "shared sources; it was kept for 28.4 -> 15.5 % pooled EER on 40 unseen sources (docs/antispoof.md)",
)
def test_nii_vocoder_copies_are_rejected_at_the_default_threshold(
    anti: AntiSpoof, shared_dir: Path, held_out: list[str]
) -> None:
    nii = [anti.evaluate(audio(x, sr)) for x, sr in _nii(shared_dir, held_out)]
    assert len(nii) >= 8
    assert np.median([cast(float, r.score) for r in nii]) < 0.5


@pytest.mark.slow
def test_separates_phase_reconstruction_from_its_source(
    anti: AntiSpoof, shared_dir: Path, held_out: list[str]
) -> None:
    """Griffin-Lim keeps the magnitude spectrogram of held-out bona fide speech and loses its phase;
    the utterance cues (relative harmonic phase) must see it: each resynthesis scores below its
    own source."""
    from train.antispoof_data import griffin_lim

    rng = np.random.default_rng(7)
    pairs = []
    for x, sr in _bona_fide(shared_dir, held_out)[:8]:
        x16 = resample(x, sr, 16000)
        _, _, spec = stft(x16, 16000, "hann", 512, 512 - 128)
        y = griffin_lim(np.abs(spec), 512, 128, 32, rng)[: x16.size].astype(np.float32)
        y *= np.abs(x16).max() / (np.abs(y).max() + 1e-9)
        pairs.append((anti.evaluate(audio(x16, 16000)), anti.evaluate(audio(y, 16000))))
    src = np.array([cast(float, a.score) for a, _ in pairs])
    gl = np.array([cast(float, b.score) for _, b in pairs])
    assert np.sum(gl < src) >= 7, (src, gl)
    assert np.median(src) > 0.5, src
    spoof_class = [max(("replay", b.replay or 0), ("tts", b.tts or 0), ("vc", b.vc or 0),
                       key=lambda t: t[1])[0] for _, b in pairs]  # fmt: skip
    assert spoof_class.count("vc") >= 6, spoof_class  # taken for VC, not replay/TTS


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="known regression of the model trained with the real sources: Griffin-Lim of held-out speech "
    "is accepted at 0.5 (median P 0.94 with the model of issue 29, 0.82 before it, 0.43 before the real "
    "sources; docs/antispoof.md, weaknesses)",
)
def test_phase_reconstruction_is_rejected_at_the_default_threshold(
    anti: AntiSpoof, shared_dir: Path, held_out: list[str]
) -> None:
    from train.antispoof_data import griffin_lim

    rng = np.random.default_rng(7)
    scores = []
    for x, sr in _bona_fide(shared_dir, held_out)[:8]:
        x16 = resample(x, sr, 16000)
        _, _, spec = stft(x16, 16000, "hann", 512, 512 - 128)
        y = griffin_lim(np.abs(spec), 512, 128, 32, rng)[: x16.size].astype(np.float32)
        y *= np.abs(x16).max() / (np.abs(y).max() + 1e-9)
        scores.append(cast(float, anti.evaluate(audio(y, 16000)).score))
    assert np.median(scores) < 0.5, np.round(scores, 2)


@pytest.mark.slow
def test_separates_lpc_vocoding_from_its_source(
    anti: AntiSpoof, shared_dir: Path, held_out: list[str]
) -> None:
    """Held-out speech through an LPC vocoder (its own envelope and pitch track, a synthetic
    pulse/noise excitation; train/antispoof_data/vocoded.py), a generator no model is trained on
    (``EVAL_ONLY``): each resynthesis scores below its source (measured 8 of 8), and most are
    turned away at the stricter accept threshold 0.8 of the card (measured 6 of 8; 4 of 8 at 0.5:
    the default threshold is lenient, docs/antispoof.md)."""
    from train.antispoof_data import lpc_vocode

    from verilive.voice.utterance_cues import F0_HOP, F0_WIN, VOICED_R, f0_track

    pairs = []
    for i, (x, sr) in enumerate(_bona_fide(shared_dir, held_out)[:8]):
        x16 = resample(x, sr, 16000)
        f0, strength = f0_track(x16)
        times = (np.arange(f0.size) * F0_HOP + F0_WIN / 2) / 16000
        y, _ = lpc_vocode(x16, f"test/{i}", (times, np.where(strength > VOICED_R, f0, 0.0)))
        pairs.append((anti.evaluate(audio(x16, 16000)), anti.evaluate(audio(y, 16000))))
    src = np.array([cast(float, a.score) for a, _ in pairs])
    voc = np.array([cast(float, b.score) for _, b in pairs])
    assert np.sum(voc < src) >= 7, (src, voc)
    assert np.median(src) > 0.8 and np.sum(voc < 0.8) >= 5, (src, voc)


def _statistical_room(x: np.ndarray, rt60: float, drr_db: float, rng: np.random.Generator) -> np.ndarray:
    """``x`` (16 kHz) heard from across a room: the direct sound plus an exponentially decaying noise
    tail (``rt60`` seconds, direct-to-reverberant ratio ``drr_db``). A different room model from the
    image-source rooms of the training data (train/antispoof_data/replay.py, far-field part)."""
    n = int(rt60 * 16000)
    tail = rng.standard_normal(n) * np.exp(-6.91 * np.arange(n) / n)
    tail[:48] = 0.0  # the first reflections arrive a few ms after the direct sound
    tail *= np.sqrt(10 ** (-drr_db / 10) / np.sum(tail**2))
    tail[0] = 1.0
    y = np.convolve(x, tail)[: x.size]
    return (y * np.abs(x).max() / np.abs(y).max()).astype(np.float32)


@pytest.mark.slow
def test_distant_microphone_bona_fide_is_not_flatly_rejected(
    anti: AntiSpoof, shared_dir: Path, held_out: list[str]
) -> None:
    """Held-out speakers heard from across a room (RT60 0.4-0.8 s, more reverberant than direct
    sound) are genuine speech. The model before the far-field training data rejected all 12 of
    these (P(bona fide) 0.00, taken for VC), the one trained with the real sources too; the model
    of issue 29 accepts 4 (docs/antispoof.md, weaknesses). The threshold guards against going
    back, and stays loose because the rate is low."""
    rng = np.random.default_rng(3)
    scores = []
    for x, sr in _bona_fide(shared_dir, held_out):
        x16 = resample(x, sr, 16000)
        far = _statistical_room(x16, rng.uniform(0.4, 0.8), rng.uniform(-6, 0), rng)
        r = anti.evaluate(audio(far, 16000))
        assert r.unsuitable is None
        scores.append(cast(float, r.score))
    assert len(scores) == 12
    assert sum(s >= 0.5 for s in scores) >= 3, np.round(scores, 2)


@pytest.mark.slow
def test_outputs_are_probabilities(anti: AntiSpoof, shared_dir: Path, held_out: list[str]) -> None:
    x, sr = _bona_fide(shared_dir, held_out)[0]
    for a in (
        audio(x, sr),
        audio(resample(x, sr, 8000), 8000),
        audio(resample(x, sr, 44100), 44100),
        audio(np.stack([x, x], axis=1), sr),
    ):
        r = anti.evaluate(a)
        ps = [r.score, r.replay, r.tts, r.vc]
        assert all(p is not None and 0.0 <= p <= 1.0 for p in ps)
        assert abs(sum(cast(float, p) for p in ps) - 1.0) < 1e-4
        assert r.unsuitable is None
    # stereo of identical channels is the same as mono
    assert anti.evaluate(audio(np.stack([x, x], axis=1), sr)).score == pytest.approx(
        anti.evaluate(audio(x, sr)).score, abs=1e-5
    )


# ------------------------------------------------------------------------------------- real sources


def _held_out_groups(held_out: list[str], source: str) -> set[str]:
    return {s for s in held_out if s.startswith(source + ":")}


def _real_rows(shared_dir: Path, source: str) -> list[dict[str, str]]:
    import csv

    path = shared_dir / VOICE / source / "labels.csv"
    if not path.exists():
        pytest.fail(f"development data {path} is missing (see ../shared/data/README.md)")
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
@pytest.mark.parametrize("source", ["spoof_mobilespeech", "spoof_tortoise", "spoof_vocos", "spoof_vstts"])
def test_held_aside_real_bona_fide_scores_above_its_own_spoofs(
    anti: AntiSpoof, shared_dir: Path, held_out: list[str], source: str
) -> None:
    """Real deepfakes made by other labs, of held-aside speakers and sentences (never trained on): each
    real recording is compared with the spoofs made of the same speaker or sentence, and most such
    pairs must be ordered right."""
    from train.antispoof_data import group_key

    groups = _held_out_groups(held_out, source)
    assert groups, f"the model records no held-aside {source} speakers or sentences"
    rows = [r for r in _real_rows(shared_dir, source) if group_key(source, r) in groups]

    def score(r: dict[str, str]) -> float:
        x, sr = load(shared_dir / VOICE / source / r["file"], 8.0)
        res = anti.evaluate(audio(x, sr))
        assert res.score is not None, res.unsuitable
        return res.score

    scores = {r["file"]: score(r) for r in rows}
    pairs = [
        (scores[b["file"]], scores[s["file"]])
        for b in rows
        if b["label"] == "bonafide"
        for s in rows
        if s["label"] == "spoof" and group_key(source, s) == group_key(source, b)
    ]
    assert len(pairs) >= 4, (source, len(pairs))
    right = np.mean([b > s for b, s in pairs])
    assert right >= 0.75, (source, right, pairs)


def _generators(shared_dir: Path) -> Path:
    root = shared_dir / "models" / "generators"
    if not (root / "lyragan.tflite").exists():
        pytest.fail(f"{root} lacks the generator files (shared/models/generators/README.md)")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("family", ["lyra", "hifigan-lj"])
def test_bona_fide_scores_above_its_neural_resynthesis(
    anti: AntiSpoof, shared_dir: Path, held_out: list[str], family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held-out speakers' clips resynthesised by a neural codec (Lyra v2, 3.2 kbit/s and 9.2 kbit/s) or a
    neural vocoder (HiFi-GAN V3, LJ Speech): the same speaker and sentence, the waveform regenerated.
    Each genuine clip must score above its own resynthesis (the families are in training, these
    speakers are not)."""
    import train.spoof_families as fam

    monkeypatch.setattr(fam, "GENERATORS", _generators(shared_dir))
    pairs = []
    for i, (x, sr) in enumerate(_bona_fide(shared_dir, held_out)[:8]):
        x16 = resample(x, sr, 16000)
        y = fam.lyra(x16, (3.2, 9.2)[i % 2]) if family == "lyra" else fam.hifigan_lj(x16)
        a, b = anti.evaluate(audio(x16, 16000)), anti.evaluate(audio(y.astype(np.float32), 16000))
        assert a.score is not None and b.score is not None, (a.unsuitable, b.unsuitable)
        pairs.append((a.score, b.score))
    bona, spoof = np.array(pairs).T
    assert np.sum(bona > spoof) >= MIN_PAIRS_RIGHT[family], np.round(pairs, 3)
    assert np.median(bona) >= 0.5, np.round(bona, 3)


# Of 8 pairs (measured with the committed model: docs/antispoof.md, Tests).
MIN_PAIRS_RIGHT = {"lyra": 7, "hifigan-lj": 7, "kokoro": 7}


@pytest.mark.slow
def test_bona_fide_scores_above_kokoro_speech(anti: AntiSpoof, shared_dir: Path, held_out: list[str]) -> None:
    """Kokoro-82M (a modern neural TTS) in its held-out voice, reading sentences of our own, paired with
    held-out speakers' English read speech: each genuine clip scores above its Kokoro partner."""
    import train.spoof_families as fam

    if shutil.which("espeak-ng") is None:
        pytest.fail(missing_message("espeak-ng", "espeak-ng"))
    # the voices the model held out; a model trained without Kokoro holds them all out
    trained = "kokoro" in anti.meta.get("subclasses", [])
    voices = sorted(s.removeprefix("kokoro-") for s in held_out if s.startswith("kokoro-"))
    voices = voices if trained else list(fam.kokoro_voices())
    assert voices, "the model records no held-out Kokoro voice"
    sentences = [
        "Please transfer two hundred dollars to my savings account today.",
        "I would like to check the balance of my current account.",
        "My date of birth is the fourteenth of March, nineteen eighty two.",
        "Could you read me the last three transactions on my card?",
        "I lost my bank card yesterday evening and need a new one.",
        "The meeting has been moved to Thursday afternoon at three.",
        "Yes, that is correct, my postcode has not changed.",
        "Thank you, I will call back later if I have more questions.",
    ]
    pairs = []
    for i, (x, sr) in enumerate(_bona_fide(shared_dir, held_out)[:8]):
        y = fam.kokoro(sentences[i], {voices[i % len(voices)]: 1.0}, speed=1.0)
        a, b = anti.evaluate(audio(resample(x, sr, 16000), 16000)), anti.evaluate(audio(y, 16000))
        assert a.score is not None and b.score is not None, (a.unsuitable, b.unsuitable)
        pairs.append((a.score, b.score))
    bona, spoof = np.array(pairs).T
    assert np.sum(bona > spoof) >= MIN_PAIRS_RIGHT["kokoro"], np.round(pairs, 3)


@pytest.mark.slow
@pytest.mark.parametrize("channel", ["codec2", "gsm", "opus", "amr-band"])
def test_codec_round_trip_of_bona_fide_stays_above_the_threshold(
    anti: AntiSpoof, shared_dir: Path, held_out: list[str], channel: str
) -> None:
    """A codec is a channel, not an attack: held-out speakers' clips through codec2 (1300 bit/s, the
    vocoder of digital radio), GSM, Opus or a narrow-band telephone chain stay above the default
    threshold in most cases (the model before rejected 20 of 20 codec2 clips)."""
    from train.antispoof_data import codec_chain

    rng = np.random.default_rng(17)
    scores = []
    for x, sr in _bona_fide(shared_dir, held_out)[:8]:
        x16 = resample(x, sr, 16000)
        if channel == "codec2":
            if shutil.which("c2enc") is None:
                pytest.fail(missing_message("c2enc", "codec2"))
            import train.spoof_families as fam

            y = fam.codec2(x16, "1300")
        else:
            y = codec_chain(x16, channel, rng)
        r = anti.evaluate(audio(np.asarray(y, np.float32), 16000))
        assert r.score is not None, r.unsuitable
        scores.append(r.score)
    accepted = int(np.sum(np.array(scores) >= 0.5))
    if channel == "codec2" and anti.whisper_id is None and accepted < MIN_CODEC_ACCEPTED[channel]:
        # the model before issue 29's data (no Whisper branch) never saw codec2 carry bona fide speech
        pytest.xfail(f"known weakness of the model before issue 29: codec2 bona fide accepted {accepted}/8")
    assert accepted >= MIN_CODEC_ACCEPTED[channel], np.round(scores, 3)


MIN_CODEC_ACCEPTED = {"codec2": 6, "gsm": 6, "opus": 6, "amr-band": 6}  # of 8


@pytest.mark.slow
def test_judges_1_2_seconds_of_speech(anti: AntiSpoof, shared_dir: Path, held_out: list[str]) -> None:
    """Short attacks are 1-3 s long: 1.2 s cut from running speech is judged, not declined."""
    for x, sr in _bona_fide(shared_dir, held_out)[:6]:
        probs, _ = anti.vad.probabilities(x, sr) if anti.vad else (None, None)
        assert probs is not None
        first = int(np.argmax(probs > 0.5)) * int(0.032 * sr)
        cut = x[first : first + int(1.2 * sr)]
        assert cut.size == int(1.2 * sr)
        r = anti.evaluate(audio(cut, sr))
        assert r.score is not None and 0.0 <= r.score <= 1.0, r.unsuitable


@pytest.mark.slow
def test_telephone_and_mp3_versions_of_bona_fide_stay_above_the_threshold(
    anti: AntiSpoof, shared_dir: Path, held_out: list[str]
) -> None:
    """Genuine speech over a telephone channel (8 kHz, 300-3400 Hz, mu-law) or as MP3 is still genuine:
    held-out speakers' clips stay above the default threshold 0.5 after either round trip."""
    from train.antispoof_data import codec_chain, telephone

    rng = np.random.default_rng(11)
    versions: dict[str, list[float]] = {"as recorded": [], "telephone": [], "mp3": []}
    for x, sr in _bona_fide(shared_dir, held_out)[:8]:
        x16 = resample(x, sr, 16000)
        for name, y in (
            ("as recorded", x16),
            ("telephone", telephone(x16.astype(np.float64), rng).astype(np.float32)),
            ("mp3", codec_chain(x16, "mp3", rng)),
        ):
            r = anti.evaluate(audio(y, 16000))
            assert r.score is not None, (name, r.unsuitable)
            versions[name].append(r.score)
    for name, scores in versions.items():
        assert min(scores) >= 0.5, (name, np.round(scores, 3))


@pytest.mark.slow
def test_exported_model_matches_the_trained_one(anti: AntiSpoof) -> None:
    """The training run kept the trained graph's logits for a fixed input in the model's metadata."""
    from train.antispoof.export import check_input

    check = anti.meta["check"]
    dims = check.get("whisper_dims", 0)
    x, c, h, *w = check_input(anti.frontend.bins, check["seed"], check["frames"], dims)
    got = anti.logits(x[0], c[0], h[0], w[0][0] if w else None)
    assert np.allclose(got, check["logits"], atol=1e-3), (got, check["logits"])


# ------------------------------------------------------------------------------------- unsuitable


def _unsuitable(r: Any) -> str:
    assert r.score is None and r.replay is None and r.tts is None and r.vc is None
    assert isinstance(r.unsuitable, str) and r.unsuitable
    return cast(str, r.unsuitable)


@pytest.mark.slow
def test_unsuitable_inputs(anti: AntiSpoof, shared_dir: Path, held_out: list[str]) -> None:
    x, sr = _bona_fide(shared_dir, held_out)[0]
    assert "No audio" in _unsuitable(anti.evaluate(audio(np.zeros(0, np.float32), sr)))
    assert "No speech" in _unsuitable(anti.evaluate(audio(np.zeros(3 * sr, np.float32), sr)))
    noise = np.random.default_rng(1).standard_normal(3 * sr).astype(np.float32) * 1e-3
    assert "No speech" in _unsuitable(anti.evaluate(audio(noise, sr)))
    # a third of a second of speech inside silence: found, but below MIN_SPEECH_S
    probs, _ = anti.vad.probabilities(x, sr) if anti.vad else (None, None)
    assert probs is not None
    first = int(np.argmax(probs > 0.5)) * int(0.032 * sr)
    short = np.zeros(3 * sr, np.float32)
    short[sr : sr + sr // 3] = x[first : first + sr // 3]
    assert "Too little speech" in _unsuitable(anti.evaluate(audio(short, sr)))
    # clipped: driven 20 dB into full scale
    clipped = np.clip(x / np.abs(x).max() * 10, -1, 1)
    assert "Clipped" in _unsuitable(anti.evaluate(audio(clipped, sr)))
    # a few full-scale peaks are not clipping
    touched = x / np.abs(x).max()
    assert anti.evaluate(audio(touched, sr)).unsuitable is None
    nan = x.copy()
    nan[100] = np.nan
    assert "No audio" in _unsuitable(anti.evaluate(audio(nan, sr)))
    # only the judged first 30 s count: speech after them does not make their silence judgeable,
    # even when the caller's VAD measured it over the whole input
    late = np.concatenate([np.zeros(int(anti.frontend.max_seconds * sr), np.float32), x])
    assert "No speech" in _unsuitable(anti.evaluate(audio(late, sr)))
    assert "No speech" in _unsuitable(anti.evaluate(audio(late, sr), speech_seconds=x.size / sr))
    # ... and clipping after them does not refuse the speech before them
    tail = np.concatenate([x, np.zeros(int(anti.frontend.max_seconds * sr) - x.size, np.float32), clipped])
    assert anti.evaluate(audio(tail, sr)).score is not None


@pytest.mark.slow
def test_without_vad_energy_rule(shared_dir: Path, held_out: list[str]) -> None:
    plain = AntiSpoof(registry=ModelRegistry(Settings()))
    x, sr = _bona_fide(shared_dir, held_out)[0]
    assert plain.evaluate(audio(x, sr)).score is not None
    assert "No speech" in _unsuitable(plain.evaluate(audio(np.zeros(2 * sr, np.float32), sr)))
    assert "Too little speech" in _unsuitable(plain.evaluate(audio(x[: sr // 4], sr)))


@pytest.mark.slow
def test_from_engine_shares_the_vad_and_campplus(vad: SileroVad, anti: AntiSpoof) -> None:
    engine = SimpleNamespace(vad=vad, embedder=anti.embedder)
    a = AntiSpoof.from_engine(cast(Any, engine), anti.registry)
    assert a.vad is vad and a.embedder is anti.embedder


@pytest.mark.slow
def test_sessions_do_not_spin(anti: AntiSpoof) -> None:
    # the model's own session and the CAM++ front cut out at run time both come from cpu_session
    for sess in (anti.session, anti.embedder.fcm_session()):
        assert sess.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"
