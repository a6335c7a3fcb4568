"""The sentences the text-to-speech generators read (seeded per generator)."""

from __future__ import annotations

import json

from train.antispoof_data.clips import SHARED_VOICE, rng_for

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
