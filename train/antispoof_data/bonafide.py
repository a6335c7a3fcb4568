"""Bona fide speech: shared corpora (trainable), Debian prompts (evaluation only) and more real speech."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from train.antispoof_data.clips import SHARED_VOICE, SR, Raw, Spoof, chunks, load, rng_for, trim

ASTERISK = Path("/usr/share/asterisk/sounds")
KLETTRES = Path("/usr/share/klettres")
N_ASTERISK_PER_VOICE = 60
N_KLETTRES_PER_LANG = 12


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
