"""Voice anti-spoofing: leave one new generator family out, with the shipped fusion weights.

    python -m train.antispoof --logo-only --no-loso --logo \\
        --logo-generators lyra,hifigan-lj,mlsa,flite,kokoro --write --candidate /tmp/lofo
    python -m eval.antispoof_lofo [--cache DIR] [--model ONNX] [--no-docs]

The training run leaves each family of ``train.antispoof_data.NEW_FAMILIES`` out in turn and keeps,
per fold, each branch's calibrated logits on the test-split bona fide and on the family's clips
(``<cache>/logo_scores.npz``). This script fuses them with the fusion weights in the shipped model's
metadata (learned on leave-one-source-out scores of the real sources, never on these families) and
prints the EER per family, the mean, each branch alone and the equal-weight sum; it writes
docs/antispoof_lofo.png unless ``--no-docs``. The families are made here: a figure on our own
generators, optimistic by the card's rule (docs/antispoof.md, Protocol).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

DOCS = Path(__file__).resolve().parents[1] / "docs"
MODEL = Path(__file__).resolve().parents[1] / "src" / "verilive" / "voice" / "antispoof_model.onnx"


def fused(branches: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted sum of the branches' bona fide log-odds; ``branches`` (branches, clips, 4) logits."""
    from train.antispoof.fusion import bona_log_odds

    return sum(w * bona_log_odds(z) for w, z in zip(weights, branches, strict=False))  # type: ignore[return-value]


def main() -> None:
    import onnx
    from common.metrics import eer_between
    from train.antispoof.fusion import BRANCHES
    from train.antispoof_data import DEFAULT_CACHE, NEW_FAMILIES

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    meta = json.loads(
        next(p.value for p in onnx.load(str(args.model)).metadata_props if p.key == "verilive_antispoof")
    )
    weights = np.asarray(meta["fusion_weights"], np.float64)
    z = np.load(args.cache / "logo_scores.npz")
    rows: dict[str, list[float]] = {}
    names = ["shipped weights", "equal weights", *(f"{b} alone" for b in BRANCHES)]
    print(f"Leave one new family out; shipped fusion weights {np.round(weights, 2).tolist()}")
    print("| family | spoofs | bona fide | " + " | ".join(names) + " |")
    print("|---|---:|---:|" + "---:|" * len(names))
    for fam in NEW_FAMILIES:
        if f"branches_{fam}" not in z:
            continue
        br = z[f"branches_{fam}"]
        nb = len(z[f"bona_without_{fam}"])
        k = len(weights)
        scores = [fused(br, weights), fused(br, np.ones(k))]
        scores += [fused(br[i : i + 1], np.ones(1)) for i in range(k)]
        rows[fam] = [eer_between(s[:nb], s[nb:]) for s in scores]
        cells = " | ".join(f"{100 * e:.1f} %" for e in rows[fam])
        print(f"| {fam} | {br.shape[1] - nb} | {nb} | {cells} |")
    if not rows:
        raise SystemExit(f"no leave-one-family-out folds in {args.cache / 'logo_scores.npz'}")
    mean = np.mean(list(rows.values()), axis=0)
    print("| **mean** | | | " + " | ".join(f"**{100 * e:.1f} %**" for e in mean) + " |")
    if args.no_docs:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    fams = list(rows)
    width = 0.8 / 3
    for j, (label, col) in enumerate(((names[0], 0), (names[1], 1), ("Whisper regression alone", 5))):
        ax.bar(np.arange(len(fams)) + (j - 1) * width, [100 * rows[f][col] for f in fams], width, label=label)
    ax.set_xticks(range(len(fams)), fams)
    ax.axhline(15, color="k", ls="--", lw=0.8)
    ax.set_ylabel("EER, %")
    ax.set_title("Leave one new family out (families made here: optimistic); dashed: 15 %")
    ax.legend()
    fig.tight_layout()
    out = DOCS / "antispoof_lofo.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
