"""Quality checks and speech summary on telephone audio (issue 30; docs/telephone.md).

    python -m eval.telephone_quality [--clips 120] [--no-docs]

Whole LibriSpeech utterances (one speaker each, read speech), as recorded (16 kHz) and through
telephone lines of common/telephone.py uploaded at 8 kHz: the engine's speech length, SNR and
multiple-speaker score, and the decisions of the recommended thresholds of the verification
scenarios (``quality.RECOMMENDED``). A threshold that holds on wideband audio and fails the same
speech over a phone line would turn callers away for the channel, not for their speech.
Prints a table per channel and writes it into docs/telephone.md unless ``--no-docs``.
"""

from __future__ import annotations

import argparse
import csv
import zlib

import numpy as np
import soundfile as sf
from common.repo import REPO, data_root, replace_section
from common.telephone import Line, telephone

DOCS_MD = REPO / "docs" / "telephone.md"
COMMAND = "python -m eval.telephone_quality"
COMMAND = "python -m eval.telephone_quality"
CHANNELS = {
    "wideband (16 kHz)": None,
    "G.711": Line("g711u"),
    "AMR-NB 7.4": Line("amr-nb", 7.4),
    "bad line (AMR-NB 4.75, 3 % loss, noise 15 dB)": Line("amr-nb", 4.75, loss=0.03, snr_db=15.0),
}


def main() -> None:
    from verilive.audio import Audio
    from verilive.config import Settings
    from verilive.models.sessions import ModelRegistry
    from verilive.voice.engine import VoiceEngine
    from verilive.voice.quality import RECOMMENDED, QualityShortDescription, decide
    from verilive.voice.schemas import Scenario

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clips", type=int, default=120)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    folder = data_root(None) / "voice/librispeech_251spk_gender"
    with open(folder / "labels.csv", newline="") as fh:
        files = sorted(r["file"] for r in csv.DictReader(fh))[: args.clips]
    engine = VoiceEngine.from_registry(ModelRegistry(Settings()))
    scenarios = (
        Scenario.VERIFY_TI_ENROLLMENT,
        Scenario.VERIFY_TI_VERIFICATION,
        Scenario.VERIFY_TD_VERIFICATION,
    )
    rows = []
    for name, line in CHANNELS.items():
        speech, snr, ms, ok = [], [], [], {s: 0 for s in scenarios}
        for f in files:
            x, sr = sf.read(folder / f, dtype="float32")
            if line is not None:
                x, sr = telephone(x, sr, line, seed=zlib.crc32(f.encode())), 8000
            a = engine.analyse(Audio(np.ascontiguousarray(x[:, None]), sr))
            m = engine.quality(a)
            speech.append(m.speech_ms / (x.size / sr * 1000))
            snr.append(m.snr_db)
            ms.append(m.multiple_speakers)
            for s in scenarios:
                ok[s] += decide(m, RECOMMENDED[s]) is QualityShortDescription.OK
        n = len(files)
        row = (
            name,
            float(np.median(speech)),
            float(np.median(snr)),
            float(np.percentile(snr, 10)),
            float(np.mean(np.array(ms) > 0.5)),
            *(ok[s] / n for s in scenarios),
        )
        rows.append(row)
        oks = " ".join(f"{v:.0%}" for v in row[5:])
        print(
            f"{name:<48} speech {row[1]:.2f}  SNR median {row[2]:.1f} dB (p10 {row[3]:.1f})  "
            f"multi-speaker > 0.5: {row[4]:.1%}  OK: {oks}",
            flush=True,
        )
    if not args.no_docs:
        head = (
            "| channel | speech / duration (median) | SNR dB, median (p10) | multi-speaker score > 0.5 | "
            + " | ".join(f"OK for {s.value}" for s in scenarios)
            + " |"
        )
        lines = [head, "|---|" + "---:|" * (3 + len(scenarios))]
        for r in rows:
            lines.append(
                f"| {r[0]} | {r[1]:.2f} | {r[2]:.1f} ({r[3]:.1f}) | {r[4]:.1%} | "
                + " | ".join(f"{v:.0%}" for v in r[5:])
                + " |"
            )
        lines.append(f"\n{len(files)} whole LibriSpeech utterances, one speaker each. `{COMMAND}`.")
        replace_section(DOCS_MD, "telephone-quality", "\n".join(lines))
        print(f"wrote {DOCS_MD}")


if __name__ == "__main__":
    main()
