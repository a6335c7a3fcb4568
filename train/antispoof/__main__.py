"""Command line of ``python -m train.antispoof``: train and measure the model, or the GMM baseline.

.venv/bin/python -m train.antispoof_data                 # build the clips once (~20 min)
.venv/bin/python -m train.antispoof --write              # train, measure, write model + docs (~2 h)
.venv/bin/python -m train.antispoof --gmm-baseline       # the LFCC-GMM baseline, for comparison
options: --cache DIR, --no-loso (skip leave-one-source-out), --loso-sources A,B (only these
folds), --logo (also leave-one-generator-out), --logo-only (only the folds, for the model
already written), --logo-epochs N, --logo-seed N (another seed for the fold trainings),
--members N (each network the average of N seeds; shipped: 1), --logo-members N (the same in
the folds; default: --members), --oc-weight W (a one-class loss on both networks' embeddings,
its scores as two more experts; tried, not shipped: docs/antispoof.md), --logo-generators
A,B (only these folds: a quick probe), --candidate DIR (with --write: the outputs into DIR)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from train.antispoof.baseline import run_gmm_baseline
from train.antispoof.export import Outputs
from train.antispoof.networks import MEMBERS, OC_WEIGHT
from train.antispoof.pipeline import train_and_measure
from train.antispoof.split import SEED
from train.antispoof_data import DEFAULT_CACHE


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--logo-epochs", type=int, default=8)
    ap.add_argument("--logo-seed", type=int, default=SEED + 1, help="seed of the fold trainings")
    ap.add_argument("--members", type=int, default=MEMBERS, help="seeds averaged per network")
    ap.add_argument("--logo-members", type=int, default=None, help="the same, in the folds")
    ap.add_argument("--write", action="store_true", help="write the model, DET plot and result tables")
    ap.add_argument("--logo-only", action="store_true", help="only leave-one-generator-out (model exists)")
    ap.add_argument("--gmm-baseline", action="store_true", help="only the LFCC-GMM baseline (in-domain)")
    ap.add_argument("--oc-weight", type=float, default=OC_WEIGHT, help="weight of the one-class loss")
    ap.add_argument("--logo-generators", default="", help="comma-separated: only these folds (a probe)")
    ap.add_argument("--logo", action="store_true", help="also leave-one-generator-out (the older protocol)")
    ap.add_argument("--no-loso", action="store_true", help="skip leave-one-source-out")
    ap.add_argument("--loso-sources", default="", help="comma-separated: only these folds (a probe)")
    ap.add_argument(
        "--candidate", type=Path, default=None,
        help="with --write: write the model, plot and card tables into this folder, not the repository",
    )  # fmt: skip
    args = ap.parse_args()
    outputs = Outputs()
    if args.candidate is not None:  # a recipe under comparison: nothing in the repository changes
        args.candidate.mkdir(parents=True, exist_ok=True)
        outputs = Outputs.under(args.candidate)
    if args.gmm_baseline:
        run_gmm_baseline(args.cache)
    else:
        train_and_measure(
            args.cache,
            args.logo,
            args.logo_epochs,
            args.write,
            args.logo_only,
            args.logo_seed,
            args.members,
            args.logo_members,
            args.oc_weight,
            frozenset(g for g in args.logo_generators.split(",") if g),
            not args.no_loso,
            frozenset(g for g in args.loso_sources.split(",") if g),
            outputs,
        )


if __name__ == "__main__":
    main()
