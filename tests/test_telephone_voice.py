"""Voice templates across telephone lines (issue 30; docs/telephone.md), with the real models on
LibriSpeech speakers held aside from the pair calibrations (``pairs_held_aside`` of
calibration.json)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
from common.telephone import Line, telephone

from verilive.audio import Audio
from verilive.config import Settings
from verilive.models.sessions import ModelRegistry
from verilive.voice.engine import VoiceEngine
from verilive.voice.identification import IdentificationList
from verilive.voice.schemas import ChannelType
from verilive.voice.templates import VoiceTemplate

LIBRI = "data/voice/librispeech_251spk_gender"
CALIBRATION = Path(__file__).resolve().parents[1] / "src/verilive/voice/calibration.json"


@pytest.fixture(scope="module")
def engine(models_settings: Settings) -> VoiceEngine:
    return VoiceEngine.from_registry(ModelRegistry(models_settings))


@pytest.fixture(scope="module")
def halves(shared_dir: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """First and second half of the utterance of each held-aside speaker (16 kHz)."""
    aside = {s.removeprefix("ls:") for s in json.loads(CALIBRATION.read_text())["pairs_held_aside"]}
    assert len(aside) >= 10
    out = {}
    with open(shared_dir / LIBRI / "labels.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["speaker_id"] in aside:
                x, sr = sf.read(shared_dir / LIBRI / row["file"], dtype="float32")
                assert sr == 16000
                out[row["speaker_id"]] = (x[: x.size // 2], x[x.size // 2 :])
    return out


def _template(
    engine: VoiceEngine, x: np.ndarray, sr: int, channel: ChannelType | None = None
) -> VoiceTemplate:
    return engine.create_template(Audio(np.ascontiguousarray(x[:, None], np.float32), sr), channel)


@pytest.mark.slow
@pytest.mark.parametrize(
    "line", [Line("g711u"), Line("gsm"), Line("amr-nb", 7.4)], ids=lambda line: line.name
)
def test_wideband_enrolment_matches_a_phone_call_of_the_same_speaker(
    engine: VoiceEngine, halves: dict[str, tuple[np.ndarray, np.ndarray]], line: Line
) -> None:
    """Enrolled from wideband audio with the default channel_type, verified over a phone line at
    8 kHz with the default channel_type: same speaker above the default threshold, others below.
    Measured with campplus_tel and the shipped map: 12, 11 and 11 of 12 same-speaker pairs at or
    above 0.5 (G.711, GSM, AMR-NB), all of the others below; the bound checks that it
    works, not the error rate (docs/telephone.md has those)."""
    speakers = sorted(halves)
    enrol = {s: _template(engine, halves[s][0], 16000) for s in speakers}
    calls = {
        s: _template(engine, telephone(halves[s][1], 16000, line, seed=i), 8000)
        for i, s in enumerate(speakers)
    }
    assert all(enrol[s].wide is not None and enrol[s].tel is not None for s in speakers)
    assert all(calls[s].wide is None and calls[s].channel == 2 for s in speakers)
    same = [engine.compare(enrol[s], calls[s])[1] for s in speakers]
    other = [engine.compare(enrol[s], calls[t])[1] for s in speakers for t in speakers if s != t]
    assert sum(p >= 0.5 for p in same) >= len(same) - 2, np.round(same, 3)
    assert np.mean(np.array(other) < 0.5) >= 0.97, sorted(other)[-5:]


@pytest.mark.slow
def test_phone_to_phone_and_identification_agree(
    engine: VoiceEngine, halves: dict[str, tuple[np.ndarray, np.ndarray]]
) -> None:
    """Telephone enrolment and telephone verification (G.711, independent lines), and a list of
    mixed wideband and telephone rows: identify's common scale gives each row the probability that
    match gives the pair."""
    speakers = sorted(halves)
    line = Line("g711u")
    first = {
        s: _template(engine, telephone(halves[s][0], 16000, line, seed=100 + i), 8000)
        for i, s in enumerate(speakers)
    }
    second = {
        s: _template(engine, telephone(halves[s][1], 16000, line, seed=200 + i), 8000)
        for i, s in enumerate(speakers)
    }
    same = [engine.compare(first[s], second[s])[1] for s in speakers]
    assert sum(p >= 0.5 for p in same) >= len(same) - 1, np.round(same, 3)
    rows = [first[s] if i % 2 else _template(engine, halves[s][0], 16000) for i, s in enumerate(speakers)]
    list_text = engine.create_list([r.encode() for r in rows])
    assert IdentificationList.decode(list_text).version == 2
    for probe in (second[speakers[0]], _template(engine, halves[speakers[1]][1], 16000)):
        scores, threshold = engine.identify(probe.encode(), list_text, 0.5)
        for row, s in zip(rows, scores, strict=True):
            _, p = engine.compare(probe, row)
            assert (s >= threshold) == (p >= 0.5) or abs(p - 0.5) < 0.02
            assert engine.calibration.probability(float(s)) == pytest.approx(p, abs=0.01)


@pytest.mark.slow
def test_a_call_uploaded_at_16khz_is_taken_for_telephone_audio(
    engine: VoiceEngine, halves: dict[str, tuple[np.ndarray, np.ndarray]]
) -> None:
    x = halves[sorted(halves)[0]][1]
    call = soxr.resample(telephone(x, 16000, Line("g711u"), seed=1), 8000, 16000)
    t = _template(engine, call, 16000)
    assert t.channel == 2 and t.wide is None
    assert _template(engine, x, 16000).channel == 1  # the wideband original stays MIC
    assert _template(engine, call, 16000, ChannelType.MIC).channel == 1  # an explicit channel wins


@pytest.mark.slow
def test_version_1_templates_still_match_as_before(
    engine: VoiceEngine, halves: dict[str, tuple[np.ndarray, np.ndarray]]
) -> None:
    s = sorted(halves)[0]
    a, b = (_template(engine, h, 16000) for h in halves[s])
    old_a = VoiceTemplate(a.init_data_id, a.embedding, a.merge_count, a.speech_ms, a.channel, version=1)
    back = VoiceTemplate.decode(old_a.encode())
    assert back.version == 1
    score, p = engine.match(old_a.encode(), b.encode())
    assert score == pytest.approx(float(np.dot(a.unit(), b.unit())), abs=1e-6)
    assert p == pytest.approx(engine.calibration.probability(score), abs=1e-9) and p > 0.5


# --- the telephone-adapted CAM++ (campplus_tel, train/telephone_student.py) ---------------------------

MANIFEST = Path(__file__).resolve().parents[1] / "src/verilive/models/manifest.json"
PARAMS = Path(__file__).resolve().parents[1] / "src/verilive/voice/campplus_tel.npz"


def test_campplus_tel_version_names_its_packaged_tensors() -> None:
    """The store re-converts only on a new version: a retrained campplus_tel.npz must come with one."""
    import hashlib

    spec = next(m for m in json.loads(MANIFEST.read_text())["models"] if m["id"] == "campplus_tel")
    digest = hashlib.sha256(PARAMS.read_bytes()).hexdigest()[:12]
    assert spec["version"] == f"senko0.2.2-tel-{digest}"
    base = next(m for m in json.loads(MANIFEST.read_text())["models"] if m["id"] == "campplus")
    assert spec["source"] == base["source"] and spec["sha256"] == base["sha256"]


def test_campplus_tel_changes_only_the_front_and_batchnorm_affine_tensors() -> None:
    from train.telephone_student import trainable

    with np.load(PARAMS) as p:
        names = list(p.files)
        assert all(np.all(np.isfinite(p[n])) for n in names)
    assert names and all(trainable(n) for n in names)
    assert not any("running_" in n for n in names)  # BatchNorm statistics stay the teacher's
    assert sum(n.startswith("head.") for n in names) >= 10


def test_adapted_tensors_must_fit_the_checkpoint(shared_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from verilive.errors import ModelError
    from verilive.models.convert.campplus import load_adapted

    bad = tmp_path / "bad.npz"
    np.savez(bad, **{"head.conv1.weight": np.zeros((3, 3), np.float32)})
    with pytest.raises(ModelError, match="does not fit"):
        load_adapted(shared_dir / "models/upstream/campplus_cn_en_common.pt", bad)


def test_telephone_views_come_from_the_adapted_model(
    engine: VoiceEngine, halves: dict[str, tuple[np.ndarray, np.ndarray]]
) -> None:
    """A TEL template is campplus_tel's embedding of the telephone band; the wideband view stays
    campplus's, so version-1 and wideband templates are unaffected."""
    from verilive.voice.channel import telephone_band

    x = next(iter(halves.values()))[0]
    t = _template(engine, x, 16000)
    speech = engine.analyse(Audio(np.ascontiguousarray(x[:, None], np.float32), 16000)).speech_only()
    tel_in = telephone_band(speech, 16000)
    want_tel = engine.tel_embedder.embed(tel_in)
    plain_tel = engine.embedder.embed(tel_in)
    want_wide = engine.embedder.embed(speech)
    assert engine.tel_embedder is not engine.embedder
    assert t.tel is not None and t.wide is not None
    assert float(np.dot(t.tel, want_tel / np.linalg.norm(want_tel))) > 0.9999
    assert float(np.dot(t.wide, want_wide / np.linalg.norm(want_wide))) > 0.9999
    # the adaptation moved the telephone view, but it is still the same voice's embedding
    moved = float(np.dot(want_tel, plain_tel) / np.linalg.norm(want_tel) / np.linalg.norm(plain_tel))
    assert 0.5 < moved < 0.999
