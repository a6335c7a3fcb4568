"""Which statistics of the CAM++ front output the anti-spoofing regression branch uses, chosen by
speaker-grouped cross-validation on the training and validation speakers only (docs/antispoof.md).

    .venv/bin/python -m train.antispoof_stats_cv [--cache DIR] [--folds 5]

Needs the clips (``python -m train.antispoof_data``) and the cached front output
(``<cache>/fcm_frames.npz``, written by ``train.antispoof``). For each set of statistics and
inverse L2 strength C it prints the cross-validated EER of the regression alone (bona fide against
all spoofs, and per generator), and the same with each of six generators left out of training
(the regression's share of the leave-one-generator-out test). The held-out test speakers are not
read.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from common.metrics import eer_between

from train.antispoof.features import fcm_stats
from train.antispoof.split import crc, split_of
from train.antispoof_data import DEFAULT_CACHE, for_training, read_manifest
from verilive.voice.antispoof import CLASSES

LOGO_GENERATORS = ("world", "griffin-lim", "festival", "espeak-ng", "piper-vits", "replay-phone")
MIN_FRAMES = 50


def mean_std(h: np.ndarray) -> np.ndarray:
    """The statistics shipped before: per channel mean and standard deviation over time."""
    x = np.asarray(h, np.float64)
    return np.concatenate([x.mean(axis=1), x.std(axis=1)])


VARIANTS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "mean, std": mean_std,
    "mean, std, change (shipped)": fcm_stats,
}


def bona_odds(x_tr: np.ndarray, y_tr: np.ndarray, x_te: np.ndarray, c: float) -> np.ndarray:
    from sklearn.linear_model import LogisticRegression

    mu, sd = x_tr.mean(axis=0), x_tr.std(axis=0) + 1e-6
    lr = LogisticRegression(C=c, class_weight="balanced", max_iter=3000).fit((x_tr - mu) / sd, y_tr)
    lp = lr.predict_log_proba((x_te - mu) / sd)
    return lp[:, 0] - np.logaddexp.reduce(lp[:, 1:], axis=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--c", type=float, nargs="+", default=[0.003, 0.01, 0.03])
    args = ap.parse_args()
    t0 = time.time()
    clips = for_training(read_manifest(args.cache))
    store = args.cache / "fcm_frames.npz"
    if not store.exists():
        raise SystemExit(f"no {store}: run python -m train.antispoof first")
    with np.load(store, allow_pickle=False) as z:
        if list(z["ids"]) != [c.id for c in clips]:
            raise SystemExit(f"{store} does not match the clips; rerun python -m train.antispoof")
        off, frames = z["offsets"], z["X"]
    split = split_of(clips)
    keep = [
        i
        for i, c in enumerate(clips)
        if split[c.speaker] in ("train", "val") and off[i + 1] - off[i] >= MIN_FRAMES
    ]
    lab = np.array([CLASSES.index(clips[i].label) for i in keep])
    gen = np.array([clips[i].generator for i in keep])
    fold = np.array([crc("cv/" + clips[i].speaker) % args.folds for i in keep])  # by speaker or voice
    print(f"{len(keep)} training and validation clips, {args.folds} folds by speaker")
    for name, stats in VARIANTS.items():
        x = np.stack([stats(frames[:, off[i] : off[i + 1]]) for i in keep])
        for c in args.c:
            odds = np.zeros(len(keep))
            for k in range(args.folds):
                odds[fold == k] = bona_odds(x[fold != k], lab[fold != k], x[fold == k], c)
            bona = odds[lab == 0]
            per = " ".join(f"{g} {100 * eer_between(bona, odds[gen == g]):.1f}" for g in LOGO_GENERATORS)
            print(
                f"{name:<28} C={c:<6g} pooled {100 * eer_between(bona, odds[lab != 0]):5.2f} %  ({per})",
                flush=True,
            )
        logo = {}
        for g in LOGO_GENERATORS:
            odds = np.zeros(len(keep))
            for k in range(args.folds):
                tr = (fold != k) & (gen != g)
                odds[fold == k] = bona_odds(x[tr], lab[tr], x[fold == k], 0.01)
            logo[g] = eer_between(odds[lab == 0], odds[gen == g])
        per = " ".join(f"{g} {100 * v:.1f}" for g, v in logo.items())
        mean = 100 * np.mean(list(logo.values()))
        print(f"{name:<28} C=0.01   generator left out: mean {mean:5.2f} %  ({per})")
    print(f"total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
