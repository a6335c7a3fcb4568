"""Issue 47: face validation and PAD leaving one collection out, as plots.

    python -m train.face_pad_sources build --mirrors /work/.mirror --out /tmp/vl-faces
    python -m train.face_pad_sources --manifest train/face_occlusion_sources.csv build \\
        --mirrors /work/.mirror --out /tmp/vl-occ
    python -m train.face_pad_loco extract --index /tmp/vl-faces/index.csv --index /tmp/vl-occ/index.csv \\
        --out /tmp/vl-faces-all.npz
    git show 9b1f060:src/verilive/face/fusion.json > /tmp/fusion_before.json     # the build before
    python -m train.face_pad_loco report --scores /tmp/vl-faces-all.npz --before /tmp/fusion_before.json
    python -m eval.face_loco --scores /tmp/vl-faces-all.npz --before /tmp/fusion_before.json

Left: the share of uncovered live faces that image validation refuses, per live collection, before issue
47 (the service's codes as extracted: border margin 0.15, the hand-made occlusion cues) and now (border
margin 0, the occlusion model, each collection's occlusion threshold chosen without it). Right: BPCER per
live collection and APCER per attack type at REGULAR, the pipeline before issue 47 (its validation and
thresholds) against the shipped one (the same head and fusion; validation and thresholds of issue 47,
each collection's thresholds set without it; ``*.recal.npz`` of the report); validation refusals
count as rejections of live faces.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from common.repo import REPO
from train.face_pad_loco import (
    CANDIDATES,
    CHOSEN,
    Scores,
    is_covered,
    load_scores,
    occlusion_loco,
    revalidate,
    shipped,
)

from verilive.face.engine import Validation


def refusals(sc: Scores) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Live collections, and the share of their uncovered faces refused before and now."""
    import dataclasses

    flag, _ = occlusion_loco(sc, None)
    now = revalidate(sc, dataclasses.replace(Validation(), **CANDIDATES[CHOSEN]), flag)
    covered, doubtful = is_covered(sc)
    live = (sc["label"] == "live") & ~covered & ~doubtful
    colls = sorted(set(sc["collection"][live]))
    before = np.array([np.mean(sc["codes"][live & (sc["collection"] == c)] != "OK") for c in colls])
    after = np.array([np.mean(now[live & (sc["collection"] == c)] != "OK") for c in colls])
    return colls, before, after


def decisions(sc: Scores, ok: np.ndarray, lo: dict[str, np.ndarray], pipe: str) -> np.ndarray:
    return ok & (lo[f"{pipe}_score"] >= lo[f"{pipe}_regular"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scores", type=Path, required=True)
    ap.add_argument("--pipeline", default="ensemble")
    ap.add_argument("--before", type=Path, default=None, help="fusion.json of the build before issue 47")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "face_loco.png")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sc = load_scores(args.scores)
    colls, before, after = refusals(sc)
    with np.load(args.scores.with_suffix(".recal.npz")) as f:
        lo = {k: f[k] for k in f.files}
    ok_now = lo.pop("ok")
    base = shipped(sc, args.before)
    ok_before = sc["codes"] == "OK"
    label, coll, at = sc["label"], sc["collection"], sc["attack_type"]
    covered, doubtful = is_covered(sc)
    live = (label == "live") & ~covered & ~doubtful
    acc_before = decisions(sc, ok_before, base, args.pipeline)
    acc_now = decisions(sc, ok_now, lo, args.pipeline)
    bp_before = np.array([np.mean(~acc_before[live & (coll == c)]) for c in colls])
    bp_now = np.array([np.mean(~acc_now[live & (coll == c)]) for c in colls])
    types = sorted(set(at[label == "attack"]))
    ap_before = np.array([np.mean(acc_before[(label == "attack") & (at == t) & ok_before]) for t in types])
    ap_now = np.array([np.mean(acc_now[(label == "attack") & (at == t) & ok_now]) for t in types])

    print(f"{'live collection':<52} {'refused before':>14} {'now':>6} {'BPCER before':>12} {'now':>6}")
    for c, a, b, d, e in zip(colls, before, after, bp_before, bp_now, strict=True):
        print(f"{c:<52} {100 * a:>13.1f}% {100 * b:>5.1f}% {100 * d:>11.1f}% {100 * e:>5.1f}%")
    print(
        f"validation refusals: worst {100 * before.max():.1f} -> {100 * after.max():.1f} %, pooled "
        f"{100 * np.mean(sc['codes'][live] != 'OK'):.1f} %; BPCER mean {100 * bp_before.mean():.1f} -> "
        f"{100 * bp_now.mean():.1f} %, worst {100 * bp_before.max():.1f} -> {100 * bp_now.max():.1f} %"
    )
    for t, a, b in zip(types, ap_before, ap_now, strict=True):
        print(f"APCER {t:<12} {100 * a:>5.1f} -> {100 * b:>5.1f} %")
    print(
        f"APCER mean over attack types {100 * np.nanmean(ap_before):.1f} -> {100 * np.nanmean(ap_now):.1f} %"
    )

    fig, axes = plt.subplots(1, 2, figsize=(14, 0.28 * len(colls) + 2.5))
    yy = np.arange(len(colls))
    short = [c[:40] for c in colls]
    ax = axes[0]
    ax.barh(yy - 0.2, 100 * before, 0.4, label="validation before (margin 0.15, cue rule)", color="#c44")
    ax.barh(yy + 0.2, 100 * after, 0.4, label="validation now (margin 0, occlusion model)", color="#48c")
    ax.barh(yy + 0.2, 100 * bp_now, 0.15, label=f"BPCER now, {args.pipeline}, REGULAR (refusals counted)",
            color="#222")  # fmt: skip
    ax.set_yticks(yy, short, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("% of uncovered live faces")
    ax.axvline(2, color="grey", lw=0.8, ls="--")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("Live collections, each left out")
    ax = axes[1]
    xt = np.arange(len(types))
    ax.bar(xt - 0.2, 100 * ap_before, 0.4, label="before issue 47", color="#c44")
    ax.bar(xt + 0.2, 100 * ap_now, 0.4, label="issue 47: thresholds set without the collection", color="#48c")
    ax.set_xticks(xt, types)
    ax.set_ylabel(f"APCER at REGULAR, % of validated attacks ({args.pipeline})")
    ax.axhline(25, color="grey", lw=0.8, ls="--")
    ax.legend(fontsize=8)
    ax.set_title("Attack types")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
