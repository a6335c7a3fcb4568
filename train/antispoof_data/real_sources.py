"""Real deepfakes of other labs with the real recordings beside them (shared/data/voice/spoof_*)."""

from __future__ import annotations

import csv
from pathlib import Path

from train.antispoof_data.clips import SHARED_VOICE, SR, Raw, Spoof, load

# Real deepfakes made by other labs, with the real recordings beside them (shared/data/voice/spoof_*;
# each folder's README.txt gives source, licence and how labels were decided). A whole folder is
# one *source*: another lab's generators, recording chain and speakers. Leave-one-source-out
# (``python -m train.antispoof --loso``) leaves a folder out at a time. The clips are kept as published
# (resampled to 16 kHz, never "finished"): their codec copies (channels.py, builder.build_codec) add
# the channel variety, so that the measurement is on the real clips themselves.
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
