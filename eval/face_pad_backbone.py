"""Issue 32: the pretrained-backbone branch in the face PAD fusion, against the ensemble before it.

    python -m train.face_pad_data && python -m train.face_pad    # data and the face-only branch
    python -m train.face_pad_backbone --write-scores             # the backbone head's scores
    python -m train.face_pad_fusion            # the fusion candidates' cross-fitted scores (scores.npz)
    python -m eval.face_pad_backbone           # prints the tables, writes docs/face_pad_backbone.png

For each candidate: APCER per family on held-aside sessions (cross-fitted fusion, out-of-fold branches)
and with each family left out, at the REGULAR BPCER (2.5 %, per session), and on **other cameras**
(train.face_pad_backbone.camera_set, never trained on): BPCER of live photos and video frames, APCER of
their attacks. For other cameras every branch is the one trained on all folds (the shipped face-only
model, the backbone head trained on all folds), the fusion is learnt on all out-of-fold scores and the
thresholds are set on its scores of the live photos held aside, as the shipped calibrations are.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from common.repo import REPO, data_root
from train.face_pad_backbone import camera_set
from train.face_pad_data import CACHE, face_xywh_from_box, load_items
from train.face_pad_fusion import (
    BACKBONE_CANDIDATES,
    CANDIDATES,
    TARGET_BPCER,
    _logit,
    bpcer_threshold,
    fit,
    session_weights,
)

from eval.face_pad import apcer_at, lofo_table
from verilive.config import Settings
from verilive.face import facepad
from verilive.face.detector import FaceDetector
from verilive.face.minifasnet import SCALES, V1SE, V2, MiniFASNet
from verilive.face.minifasnet import crop as mini_crop
from verilive.models.sessions import ModelRegistry

DOCS_PNG = REPO / "docs" / "face_pad_backbone.png"
SHIPPED = "v2 + v1se + facepad + backbone, minifasnet mean guard"  # fusion.json's ensemble since issue 32
FAMILIES = ("print", "replay", "mask", "cutout", "mannequin")
COMPARED = (
    "v2 + v1se + facepad, minifasnet mean guard",  # the ensemble before issue 32
    *BACKBONE_CANDIDATES,
)


def camera_branches(
    cache: Path,
) -> tuple[list[tuple[str, str, bool, np.ndarray, list[float]]], dict[str, np.ndarray]]:
    reg = ModelRegistry(Settings())
    cams = camera_set(data_root(), FaceDetector.from_registry(reg))
    out: dict[str, np.ndarray] = {}
    p_mean = np.zeros(len(cams))
    for mid, name in ((V2, "minifasnet_v2"), (V1SE, "minifasnet_v1se")):
        crops = np.stack([mini_crop(img, face_xywh_from_box(box), SCALES[mid]) for _, _, _, img, box in cams])
        logits = MiniFASNet.from_registry(reg, mid).logits(crops)
        out[name] = MiniFASNet.live_log_odds(logits)
        z = logits - logits.max(axis=1, keepdims=True)
        p_mean += (np.exp(z) / np.exp(z).sum(axis=1, keepdims=True))[:, 1] / 2
    out["minifasnet_mean"] = _logit(p_mean)
    out["facepad"] = facepad.FacePAD.load().live_log_odds(
        np.stack([facepad.crop(img, box) for _, _, _, img, box in cams])
    )
    out["backbone"] = np.load(cache / "backbone_scores.npz")["backbone_cameras"]
    return cams, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=str(CACHE))
    ap.add_argument("--no-png", action="store_true")
    args = ap.parse_args()
    cache = Path(args.cache)
    CANDIDATES.update(BACKBONE_CANDIDATES)
    items = load_items(cache)
    scores = dict(np.load(cache / "scores.npz"))
    scores.update(dict(np.load(cache / "facepad_scores.npz")))
    scores.update(dict(np.load(cache / "backbone_scores.npz")))
    base = {k[len("branch_") :]: v for k, v in scores.items() if k.startswith("branch_")}
    y = np.array([it.label == "live" for it in items], np.float64)
    fam = np.array([it.family for it in items])
    folds = np.array([it.fold for it in items])
    ins = folds >= 0
    w = session_weights(items)
    cams, cam_s = camera_branches(cache)
    subsets = np.array([c[1] for c in cams])
    results: dict[str, dict[str, float]] = {}
    for name in COMPARED:
        row: dict[str, float] = {}
        held, bp = apcer_at(scores[f"fused_{name}"][ins], y[ins], fam[ins], w[ins], TARGET_BPCER["REGULAR"])
        row.update({f"held {f}": held[f] for f in FAMILIES})
        row["held BPCER"] = bp
        lofo = lofo_table(scores, items, name)
        for line in lofo.splitlines()[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            row[f"lofo {cells[0]}"] = float(cells[3].rstrip(" %")) / 100
        f = fit(base, name, ins, y)
        live = ins & (y > 0.5)
        thr = {c: bpcer_threshold(f.score(base)[live], t, w[live]) for c, t in TARGET_BPCER.items()}
        z = f.score(cam_s)
        for sub in sorted(set(subsets)):
            m = subsets == sub
            if cams[int(np.flatnonzero(m)[0])][2]:
                row[f"{sub} BPCER REGULAR"] = float((z[m] < thr["REGULAR"]).mean())
                row[f"{sub} BPCER HARDENED"] = float((z[m] < thr["HARDENED"]).mean())
            else:
                row[f"{sub} APCER REGULAR"] = float((z[m] >= thr["REGULAR"]).mean())
        results[name] = row
    keys = list(next(iter(results.values())))
    counts = {str(sub): int((subsets == sub).sum()) for sub in sorted(set(subsets))}
    print(f"other cameras: {counts}\n")
    print("| measure | " + " | ".join(COMPARED) + " |")
    print("|---|" + "---:|" * len(COMPARED))
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{100 * results[n][k]:.1f} %" for n in COMPARED) + " |")
    if not args.no_png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(11, 4.5))
        width = 0.8 / len(COMPARED)
        for i, n in enumerate(COMPARED):
            label = f"{n} (before)" if n == COMPARED[0] else (f"{n} (shipped)" if n == SHIPPED else n)
            ax.bar(np.arange(len(keys)) + i * width, [100 * results[n][k] for k in keys], width, label=label)
        ax.set_xticks(np.arange(len(keys)) + 0.4 - width / 2, keys, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("% (APCER for attacks, BPCER for live)")
        ax.set_title("Face PAD with the EfficientNet-Lite0 branch (issue 32), REGULAR unless stated")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(DOCS_PNG, dpi=110)
        print(f"wrote {DOCS_PNG}")


if __name__ == "__main__":
    main()
