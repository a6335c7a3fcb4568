"""Voice anti-spoofing, leave one source out: the figure that counts (docs/antispoof.md, Protocol).

    python -m train.antispoof --write       # trains the folds, writes <cache>/loso_scores.npz
    python -m eval.antispoof_loso [--cache DIR] [--no-docs]

Reads the fold scores that ``train.antispoof`` keeps (each clip of a real source scored by the fold
that never saw any clip of that source) and prints, per source, the EER against the source's own bona
fide (or against the pooled out-of-fold bona fide when it has fewer than ``MIN_OWN_BONA`` clips), with
its 95 % interval when the clips are redrawn by speaker, the mean and the worst source, and the same
for the 1-2 s and 2-4 s crops. Writes docs/antispoof_loso_det.png: a DET curve per source and the
pooled one, unless ``--no-docs``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from common.metrics import bootstrap_eer, det_curve, eer, probit

OUT_PNG = Path(__file__).resolve().parents[1] / "docs" / "antispoof_loso_det.png"


def main() -> None:
    from train.antispoof.loso import BANDS, LOSO_SOURCES, MIN_OWN_BONA
    from train.antispoof_data import DEFAULT_CACHE, read_manifest

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    store = args.cache / "loso_scores.npz"
    if not store.exists():
        raise SystemExit(f"no fold scores in {store}: run python -m train.antispoof first")
    z = np.load(store, allow_pickle=False)
    by_id = {c.id: c for c in read_manifest(args.cache)}
    ids, score, origin = list(z["ids"]), z["score"], z["origin"]
    v_ids, v_score, v_origin, kinds = list(z["v_ids"]), z["v_score"], z["v_origin"], z["kinds"]
    bona = np.array([by_id[i].label == "bonafide" for i in ids])
    who = np.array([by_id[i].speaker for i in ids])
    v_bona = np.array([by_id[i.split("#")[0]].label == "bonafide" for i in v_ids])
    scored = ~np.isnan(score)
    pooled = scored & bona

    def trials(s: np.ndarray, b: np.ndarray, sel: np.ndarray, pool: np.ndarray) -> tuple[np.ndarray, ...]:
        own = sel & b & ~np.isnan(s)
        spoof = sel & ~b & ~np.isnan(s)
        use = own if own.sum() >= MIN_OWN_BONA else pool
        keep = use | spoof
        return s[keep], b[keep], keep

    rows = []
    curves = []
    print("source                      bona  spoof   EER     95 % interval     1-2 s    2-4 s")
    for src in LOSO_SOURCES:
        sel = origin == src
        if not np.any(sel & ~bona & scored):
            continue
        s, y, keep = trials(score, bona, sel, pooled)
        e = eer(s, y)[0]
        lo, hi = bootstrap_eer(s, y, who[keep])
        band = []
        for k in BANDS:
            vp = (kinds == k) & v_bona & ~np.isnan(v_score)
            vs, vy, _ = trials(v_score, v_bona, (v_origin == src) & (kinds == k), vp)
            band.append(eer(vs, vy)[0] if vy.any() and (~vy).any() else np.nan)
        rows.append((src, e, *band))
        curves.append((src, s, y))
        print(f"{src:<26} {y.sum():5d} {(~y).sum():5d}  {e:6.2%}  {lo:6.2%}-{hi:6.2%}   "
              f"{band[0]:6.2%}  {band[1]:6.2%}")  # fmt: skip
    arr = np.array([r[1:] for r in rows], float)
    print(f"{'mean':<26} {'':11}  {np.nanmean(arr[:, 0]):6.2%}  {'':17}  "
          f"{np.nanmean(arr[:, 1]):6.2%}  {np.nanmean(arr[:, 2]):6.2%}")  # fmt: skip
    print(f"{'worst':<26} {'':11}  {np.nanmax(arr[:, 0]):6.2%}  {'':17}  "
          f"{np.nanmax(arr[:, 1]):6.2%}  {np.nanmax(arr[:, 2]):6.2%}")  # fmt: skip
    all_s = score[scored]
    all_y = bona[scored]
    print(f"all sources pooled (out-of-fold scores): EER {eer(all_s, all_y)[0]:6.2%}")

    if not args.no_docs:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 6))
        ticks = np.array([0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8])
        d = det_curve(all_s, all_y)
        ax.plot(d.x, d.y, c="k", lw=2, label=f"all sources pooled (EER {eer(all_s, all_y)[0]:.1%})")
        for k, (src, s, y) in enumerate(curves):
            d = det_curve(s, y)
            ax.plot(d.x, d.y, c=f"C{k}", lw=1.2, label=f"{src} (EER {eer(s, y)[0]:.1%})")
        ax.set_xticks(probit(ticks), [f"{t:g}" for t in 100 * ticks])
        ax.set_yticks(probit(ticks), [f"{t:g}" for t in 100 * ticks])
        lim = probit(np.array([0.005, 0.95]))
        ax.set(xlim=lim, ylim=lim, xlabel="spoofs accepted (%)", ylabel="bona fide rejected (%)")
        ax.set_title("Leave one source out: each source scored by a model that never saw it")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
        fig.tight_layout()
        fig.savefig(OUT_PNG, dpi=100)
        print(f"wrote {OUT_PNG}")


if __name__ == "__main__":
    main()
