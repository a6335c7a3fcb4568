"""Leave one generator out: fold models without each spoof generator, against a same-schedule control."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from common.metrics import eer_between

from train.antispoof.fusion import ALTERNATIVES, alternative_names, bona_log_odds, fit_fusion, train_model
from train.antispoof.networks import FCM_CFG, TrainConfig
from train.antispoof.report import Report, pct
from train.antispoof.split import Data
from verilive.voice.antispoof import CLASSES

LOGO_FCM_EPOCHS = 10


def leave_one_generator_out(
    d: Data, out: Report, epochs: int, seed: int, members: int, cfg_oc: float,
    generators: frozenset[str], weights: Any, store: Path | None,
) -> None:  # fmt: skip
    """For each spoof generator (or only ``generators``), the branches trained without its clips and
    fused with ``weights`` (the ones learned out of source; None: equal), scored on it against the
    held-out bona fide; the table into ``out``, each fold's scores into ``store`` (if given)."""
    tr, va, te = (np.flatnonzero(d.part == p) for p in ("train", "val", "test"))
    logo_scores: dict[str, np.ndarray] = {}
    bona_te = te[d.lab[te] == "bonafide"]
    n_alt = len(ALTERNATIVES) + (2 if cfg_oc else 0)
    out(
        f"## Leave-one-generator-out EER (generator never trained on; vs held-out bona fide; "
        f"networks {epochs} and {LOGO_FCM_EPOCHS} epochs, {members} seed(s) each)\n"
    )
    out(
        "| class | held-out generator | clips | EER, generator left out | "
        + " | ".join(alternative_names(n_alt))
        + " | EER, in-domain, same schedule |"
    )
    out("|---|---|---|---|" + "---|" * n_alt + "---|")
    rows = []
    near: list[tuple[str, float]] = []  # EERs without the far-field part of the data
    bona_near = np.array([d.gen[i] != "far-field" for i in bona_te])
    lcfg = TrainConfig(epochs=epochs, oc_weight=cfg_oc)
    lfcm = replace(FCM_CFG, epochs=LOGO_FCM_EPOCHS, oc_weight=cfg_oc)
    # control: the same short schedule with every generator seen (held-out speakers only)
    if os.environ.get("VERILIVE_LOGO_NO_CONTROL"):  # a probe: no in-domain column (NaN)
        ctl_te = np.full(len(te), np.nan)
    else:
        ctl = train_model(d, tr, va, lcfg, lfcm, seed, "[control] ", members)
        ctl_te = bona_log_odds(ctl.logits(d, te))
    ctl_bona = ctl_te[d.lab[te] == "bonafide"]
    for g in sorted(set(d.gen[d.lab != "bonafide"])):
        if generators and g not in generators:
            continue
        gi = np.flatnonzero(d.gen == g)
        keep, va_g = tr[d.gen[tr] != g], va[d.gen[va] != g]
        m = train_model(d, keep, va_g, lcfg, lfcm, seed, f"[-{g}] ", members)
        # the shipped rule: the weights learned out of source (never on g's clips: the leave-one-
        # source-out scores are of the real sources' clips as published), from this run or the
        # shipped model's metadata
        if weights is not None:
            m.fusion = fit_fusion(m.branches(d, va_g), d.lab[va_g], weights)
        both = np.concatenate([bona_te, gi])
        z = bona_log_odds(m.logits(d, both))
        bona, sp = z[: len(bona_te)], z[len(bona_te) :]
        alternatives = m.alternatives(d, va_g, both)
        branch = [eer_between(o[: len(bona_te)], o[len(bona_te) :]) for o in map(bona_log_odds, alternatives)]
        e = eer_between(bona, sp)
        e_in = eer_between(ctl_bona, ctl_te[d.gen[te] == g])
        sp_near = np.array([not d.clips[i].id.startswith("gl-room-") for i in gi])
        near.append((g, eer_between(bona[bona_near], sp[sp_near])))
        rows.append((str(d.lab[gi[0]]), g, e, e_in, *branch))
        logo_scores[g] = sp
        logo_scores[f"bona_without_{g}"] = bona
        # each branch's calibrated 4-way logits on the fold's test clips (bona fide first) and
        # validation clips, for trying other fusion rules without retraining
        logo_scores[f"branches_{g}"] = np.stack(alternatives[:4])
        cal_va = zip(m.fusion.cals, m.branches(d, va_g), strict=True)
        logo_scores[f"val_branches_{g}"] = np.stack([c(z) for c, z in cal_va])
        logo_scores[f"val_labels_{g}"] = d.lab[va_g]
        out(f"| {d.lab[gi[0]]} | {g} | {len(gi)} | {pct(e)} | " + " | ".join(pct(b) for b in branch)
            + f" | {pct(e_in)} |")  # fmt: skip
        if store is not None:  # each fold's spoof scores and its own held-out bona fide scores
            np.savez(store, **logo_scores)

    def means(sel: list[tuple[Any, ...]]) -> str:
        m = [float(np.nanmean([r[k] for r in sel])) for k in (2, *range(4, len(sel[0])), 3)]
        return " | ".join(pct(v) for v in m)

    for cls in sorted({r[0] for r in rows}, key=CLASSES.index):
        out(f"| {cls} | mean over its generators | – | {means([r for r in rows if r[0] == cls])} |")
    out(f"| all | mean over {len(rows)} generators | – | {means(rows)} |")
    worst = [pct(float(np.max([r[k] for r in rows]))) for k in (2, *range(4, len(rows[0])))]
    out(f"| all | worst generator | – | {' | '.join(worst)} | – |")
    out()
    out(
        "Against the held-out bona fide without the far-field part of the data (the test set before "
        "it), and without Griffin-Lim of far-field recordings: mean "
        f"{pct(float(np.nanmean([e for _, e in near])))} over {len(near)} generators ("
        + ", ".join(f"{g} {pct(e)}" for g, e in near)
        + ")."
    )
    out()
