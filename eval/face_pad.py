"""Face PAD on real prints and replays and on simulated masks, cut-outs and mannequins: APCER per attack
family and BPCER, on subjects/sessions held aside, per calibration; leave one family out; live photos of
people outside the training data; and the same through the service.

    python -m train.face_pad_data && python -m train.face_pad
    python -m train.face_pad_backbone --write-scores && python -m train.face_pad_fusion
    python -m eval.face_pad              # prints the tables, writes docs/face_pad_det.png and the
                                         # face-pad section of docs/face-eval.md
    python -m eval.face_pad --no-docs    # prints only

Every figure in the first three tables is out of fold: the face-only branch scoring a fold never trained
on it, and the fusion scoring a half of the folds it was not learnt on (train.face_pad_fusion). The
thresholds of those tables are set on the same held-aside live photos at each calibration's target BPCER,
so APCER is read at a known BPCER. The "through the service" table runs the shipped engine, whose
face-only branch and fusion were trained on all of pad_feni_sfas: its pad_feni_sfas rows are in-sample
and labelled so; only the outside live photos there are unseen.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from common import metrics
from common.repo import REPO, data_root, replace_section
from train.face_pad_data import CACHE, Item, load
from train.face_pad_fusion import FUSION_OUT, bpcer_threshold, fit, session_weights

from verilive.config import Settings
from verilive.face.engine import FaceEngine
from verilive.face.fusion import load_fusion
from verilive.face.pipelines import Calibration
from verilive.models.sessions import ModelRegistry

DOCS_MD = REPO / "docs" / "face-eval.md"
DOCS_PNG = REPO / "docs" / "face_pad_det.png"
SECTION = "face-pad"
FAMILIES = ("print", "replay", "mask", "cutout", "mannequin")
CALS = (Calibration.SOFT, Calibration.REGULAR, Calibration.HARDENED)


def _pct(v: float) -> str:
    return "–" if np.isnan(v) else f"{100 * v:.1f} %"


def apcer_at(
    z: np.ndarray, y: np.ndarray, fam: np.ndarray, w: np.ndarray, bpcer: float
) -> tuple[dict[str, float], float]:
    """APCER per family at the threshold giving ``bpcer`` on the live scores among ``z`` (live photos
    weighted per session, train.face_pad_fusion.session_weights), and the BPCER reached."""
    live = y > 0.5
    thr = bpcer_threshold(z[live], bpcer, w[live])
    out = {f: float((z[fam == f] >= thr).mean()) if (fam == f).any() else float("nan") for f in FAMILIES}
    return out, float(np.sum(w[live] * (z[live] < thr)) / w[live].sum())


def held_aside_table(scores: dict[str, np.ndarray], items: list[Item], pipe_names: dict[str, str]) -> str:
    y = np.array([it.label == "live" for it in items], np.float64)
    fam = np.array([it.family for it in items])
    ins = np.array([it.fold >= 0 for it in items])
    w = session_weights(items)
    targets = load_fusion()["ensemble"].target_bpcer
    rows = [
        "| pipeline | calibration (target BPCER) | BPCER | " + " | ".join(FAMILIES) + " | EER |",
        "|---|---|---:|" + "---:|" * len(FAMILIES) + "---:|",
    ]
    for label, key in pipe_names.items():
        z = scores[f"fused_{key}"][ins]
        eer, _ = metrics.eer(z, y[ins])
        for c in CALS:
            ap, bp = apcer_at(z, y[ins], fam[ins], w[ins], targets[c])
            rows.append(
                f"| {label} | {c.value} ({_pct(targets[c])}) | {_pct(bp)} | "
                + " | ".join(_pct(ap[f]) for f in FAMILIES)
                + f" | {_pct(eer) if c is Calibration.REGULAR else ''} |"
            )
    return "\n".join(rows)


def lofo_table(scores: dict[str, np.ndarray], items: list[Item], candidate: str) -> str:
    """Each family scored by a face-only branch and a fusion that never saw it (two halves of the folds)."""
    y = np.array([it.label == "live" for it in items], np.float64)
    fam = np.array([it.family for it in items])
    folds = np.array([it.fold for it in items])
    w = session_weights(items)
    targets = load_fusion()["ensemble"].target_bpcer
    base = {k[len("branch_") :]: v for k, v in scores.items() if k.startswith("branch_")}
    rows = [
        "| family left out | n | APCER at SOFT | at REGULAR | at HARDENED | with it in training (REGULAR) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    zin = scores[f"fused_{candidate}"]
    ins = folds >= 0
    a_in, _ = apcer_at(zin[ins], y[ins], fam[ins], w[ins], targets[Calibration.REGULAR])
    for f in FAMILIES:
        gone = (fam == f) | (fam == f + "_sim")
        lofo = {**base, "facepad": scores[f"facepad_lofo_{f}"]}
        if f"backbone_lofo_{f}" in scores:  # issue 32's branch, never trained on f either
            lofo["backbone"] = scores[f"backbone_lofo_{f}"]
        ap: dict[Calibration, list[bool]] = {c: [] for c in CALS}
        for a, b in (([0, 1], [2, 3]), ([2, 3], [0, 1])):
            # The fusion is learnt without family f, on the training half's out-of-fold scores; it then
            # scores the other half with the face-only model that never saw f.
            fu = fit(base, candidate, np.isin(folds, a) & ~gone, y)
            te = np.isin(folds, b)
            z = fu.score(lofo)
            live = te & (y > 0.5)
            for c in CALS:
                thr = bpcer_threshold(z[live], targets[c], w[live])
                ap[c].extend((z[te & (fam == f)] >= thr).tolist())
        n = len(ap[Calibration.REGULAR])
        rows.append(
            f"| {f} | {n} | "
            + " | ".join(_pct(float(np.mean(ap[c]))) for c in CALS)
            + f" | {_pct(a_in[f])} |"
        )
    return "\n".join(rows)


def _shipped(pipeline: str = "ensemble") -> str:
    return str(json.loads(FUSION_OUT.read_text())["pipelines"][pipeline]["candidate"])


def outside_and_service(items: list[Item], cache: Path) -> str:
    """The shipped engine on every image, through validation: rates per group and calibration."""
    settings = Settings()
    engine = FaceEngine.from_registry(ModelRegistry(settings), settings)
    root = data_root()
    groups: dict[str, list[tuple[str, float | None]]] = {}
    for it in items:
        base = cache if it.path.startswith("sim/") else root
        r = engine.check((base / it.path).read_bytes(), "ensemble", Calibration.REGULAR)
        where = (
            "outside pad_feni_sfas (unseen)"
            if it.fold < 0
            else "pad_feni_sfas and its simulations (in training)"
        )
        groups.setdefault(f"{where}: {it.family}", []).append((it.label, r.score if r.ok else None))
    rows = [
        "| group | images | passed validation | judged live: SOFT | REGULAR | HARDENED |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for g in sorted(groups):
        rs = groups[g]
        ok_s = [s for _, s in rs if s is not None]
        cells = []
        for c in CALS:
            off = engine.offset("ensemble", c)
            cells.append(
                _pct(float(np.mean([metrics.sigmoid(s + off) >= 0.5 for s in ok_s]))) if ok_s else "–"
            )
        rows.append(f"| {g} | {len(rs)} | {len(ok_s)} | " + " | ".join(cells) + " |")
    engine.close()
    return "\n".join(rows)


def det_plot(scores: dict[str, np.ndarray], items: list[Item], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y = np.array([it.label == "live" for it in items], np.float64)
    fam = np.array([it.family for it in items])
    ins = np.array([it.fold >= 0 for it in items])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for ax, fams, title in (
        (axes[0], ("print", "replay"), "real prints and replays (pad_feni_sfas)"),
        (axes[1], ("mask", "cutout", "mannequin"), "simulated masks, cut-outs, mannequins"),
    ):
        sel = ins & ((y > 0.5) | np.isin(fam, fams))
        for label, key in (
            ("MiniFASNet mean (before)", "minifasnet mean (before)"),
            ("ensemble before the backbone", "v2 + v1se + facepad, minifasnet mean guard"),
            ("shipped ensemble", _shipped()),
        ):
            d = metrics.det_curve(scores[f"fused_{key}"][sel], y[sel])
            ax.plot(100 * d.p_fa, 100 * d.p_miss, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("APCER (%)")
        ax.set_ylabel("BPCER (%)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Face PAD, held-aside sessions, out of fold")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=str(CACHE))
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--no-service", action="store_true", help="skip the run through the engine")
    ap.add_argument("--compare", nargs="*", default=[], help="other fusion candidates to tabulate")
    args = ap.parse_args()
    cache = Path(args.cache)
    items, _ = load(cache)
    scores = dict(np.load(cache / "scores.npz"))
    scores.update({k: v for k, v in np.load(cache / "facepad_scores.npz").items()})
    if (cache / "backbone_scores.npz").exists():
        scores.update({k: v for k, v in np.load(cache / "backbone_scores.npz").items()})
    if args.compare:
        from train.face_pad_fusion import BACKBONE_CANDIDATES, CANDIDATES

        CANDIDATES.update(BACKBONE_CANDIDATES)
        for name in args.compare:
            print(f"### {name}\n")
            print(held_aside_table(scores, items, {name: name}))
            print()
            print(lofo_table(scores, items, name))
            print()
        return
    shipped, fast = _shipped("ensemble"), _shipped("fast")
    parts = [
        "### Leave one attack family out (the headline)\n",
        "Face-only and backbone branches and the fusion trained without the family on two folds, scored "
        "on the other two.\n",
        lofo_table(scores, items, shipped),
        "\n### Held-aside sessions, out of fold\n",
        "APCER per attack family at each calibration's target BPCER; `print` and `replay` are real "
        "attacks, the other three simulated.\n",
        held_aside_table(
            scores,
            items,
            {
                "before: MiniFASNet mean": "minifasnet mean (before)",
                f"ensemble: {shipped}": shipped,
                f"fast: {fast}": fast,
            },
        ),
    ]
    if not args.no_service:
        parts += [
            "\n### Through the service (`ensemble`, shipped models)\n",
            outside_and_service(items, cache),
        ]
    body = "\n".join(parts)
    print(body)
    if not args.no_docs:
        det_plot(scores, items, DOCS_PNG)
        replace_section(
            DOCS_MD, SECTION, body, title="Real and simulated attacks: face PAD (python -m eval.face_pad)"
        )
        print(f"wrote {DOCS_PNG} and the {SECTION} section of {DOCS_MD}")


if __name__ == "__main__":
    main()
