"""Diarization over telephone lines (issue 30; docs/telephone.md).

    python -m eval.telephone_diarization [--no-docs]

The AMI dev excerpts and the two-speaker sample of eval/diarization.py, each sent through the lines
of eval/telephone.py (common/telephone.py; a seed per excerpt and line) and diarized at 8 kHz as an
integrator would upload a recorded call, with the shipped ``Diarizer`` (its clustering embeddings
from the plain CAM++, and, for comparison, from the telephone-adapted ``campplus_tel``). DER and JER
as eval/diarization.py scores them (0.25 s forgiveness collar each side, overlap scored), with the
number of speakers estimated and given (oracle). The diarization settings were chosen on the
wideband versions of these same excerpts, so every figure here is in-domain for the settings;
only the channel is new. Writes the "telephone-diarization" section of docs/telephone.md and
docs/telephone_diarization.png unless ``--no-docs``.
"""

from __future__ import annotations

import argparse
import zlib

import numpy as np
import soundfile as sf
from common.repo import REPO, data_root, replace_section
from common.telephone import LINES, telephone

from eval.diarization import Score, dev_excerpts, score, turns_to_annotation
from eval.telephone import DOCS_MD

OUT_PNG = REPO / "docs" / "telephone_diarization.png"
COMPARE_ADAPTED = ("g711u", "amr-nb-7.4")  # lines also diarized with campplus_tel's embeddings


def main() -> None:
    from verilive.config import Settings
    from verilive.models.sessions import ModelRegistry
    from verilive.voice.campplus import CamPlusPlus
    from verilive.voice.diarization import Diarizer
    from verilive.voice.engine import VoiceEngine

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    excerpts = dev_excerpts(data_root(args.data))
    reg = ModelRegistry(Settings())
    plain = VoiceEngine.from_registry(reg).diarizer
    adapted = Diarizer(plain.segmenter, CamPlusPlus.from_registry(reg, "campplus_tel"), plain.config)
    rows: dict[str, dict[str, Score]] = {}
    counts: dict[str, list[tuple[int, int]]] = {}
    channels = ["wideband", *LINES]
    for ch in channels:
        for name, d in (("campplus", plain), ("campplus_tel", adapted)):
            if name == "campplus_tel" and ch not in COMPARE_ADAPTED:
                continue
            key = f"{ch} / {name}"
            est, ora = Score(), Score()
            counts[key] = []
            for ex in excerpts:
                if not ex.ami:
                    continue
                x, sr = sf.read(str(ex.audio), dtype="float32")
                if ch != "wideband":
                    x, sr = telephone(x, sr, LINES[ch], zlib.crc32(f"{ch}/{ex.uri}".encode())), 8000
                turns = d.diarize(x, sr)
                est += score(ex.reference, turns_to_annotation(turns, sr, ex.uri), ex.uem)
                oturns = d.diarize(x, sr, num_speakers=ex.n_speakers)
                ora += score(ex.reference, turns_to_annotation(oturns, sr, ex.uri), ex.uem)
                counts[key].append((ex.n_speakers, len(turns)))
            rows[key] = {"estimated": est, "oracle": ora}
            right = sum(a == b for a, b in counts[key])
            print(
                f"{key:<28} DER {est.der:6.1%} (missed {est.missed / est.total:5.1%}, false alarm "
                f"{est.false_alarm / est.total:5.1%}, confusion {est.confusion / est.total:5.1%}; "
                f"JER {est.jer:6.1%})"
                f"  oracle DER {ora.der:6.1%}"
                f"  count right {right}/{len(counts[key])}",
                flush=True,
            )
    if not args.no_docs:
        write_docs(rows, counts)


def write_docs(rows: dict[str, dict[str, Score]], counts: dict[str, list[tuple[int, int]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = [
        "| channel / clustering embeddings | DER, speakers estimated | missed | false alarm | confusion "
        "| JER | DER, count given | count right |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, r in rows.items():
        right = sum(a == b for a, b in counts[key])
        e = r["estimated"]
        lines.append(
            f"| {key} | {e.der:.1%} | {e.missed / e.total:.1%} | {e.false_alarm / e.total:.1%} "
            f"| {e.confusion / e.total:.1%} | {e.jer:.1%} | {r['oracle'].der:.1%} "
            f"| {right}/{len(counts[key])} |".replace("%", " %")
        )
    lines += ["", "10 AMI dev excerpts of 30 s, collar 0.25 s each side, overlap scored. "
              "`python -m eval.telephone_diarization`."]  # fmt: skip
    replace_section(DOCS_MD, "telephone-diarization", "\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(9, 4.5))
    keys = list(rows)
    y = np.arange(len(keys))
    ax.barh(y - 0.2, [rows[k]["estimated"].der * 100 for k in keys], 0.4, label="speakers estimated")
    ax.barh(y + 0.2, [rows[k]["oracle"].der * 100 for k in keys], 0.4, label="count given")
    ax.set_yticks(y, keys, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("DER % (AMI dev excerpts, collar 0.25 s)")
    ax.set_title("Diarization through telephone lines (8 kHz upload)")
    ax.legend()
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(OUT_PNG, dpi=100)
    print(f"wrote {OUT_PNG} and {DOCS_MD}")


if __name__ == "__main__":
    main()
