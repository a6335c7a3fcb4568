"""The training run: load every feature, train and measure the shipped model, then the folds, then write."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from common.metrics import eer_between

from train.antispoof.export import Outputs, check_export, export
from train.antispoof.features import WHISPER_MODEL, antispoof_engine, load_cues, load_fcm, load_whisper
from train.antispoof.fusion import (
    WHISPER_C,
    alternative_names,
    bona_log_odds,
    fit_fusion,
    member_models,
    train_model,
)
from train.antispoof.logo import leave_one_generator_out
from train.antispoof.loso import (
    LOSO_EPOCHS,
    LOSO_FCM_EPOCHS,
    POST_MAIN,
    channel_table,
    origin_of,
    run_loso,
    variant_data,
)
from train.antispoof.networks import FCM_CFG, MEMBER_SEED_STEP, MEMBERS, OC_WEIGHT, TrainConfig
from train.antispoof.report import (
    Report,
    data_table,
    in_domain_tables,
    ood_table,
    parse_logo_rows,
    pct,
    plot_det,
    write_card_tables,
)
from train.antispoof.split import SEED, Data, load_data, subclasses
from train.antispoof_data import NEW_FAMILIES
from verilive.voice.antispoof import CLASSES, FCM_SECONDS, FrontEnd, features
from verilive.voice.utterance_cues import FEATURE_NAMES

Scorer = Callable[[Data, np.ndarray], np.ndarray]


@dataclass
class Run:
    """What the steps of one run share: the clips with every feature, the split, the report, and the
    leave-one-source-out result once it has been computed (the fusion weights come from it)."""

    cache: Path
    fe: FrontEnd
    d: Data
    out: Report
    loso_seed: int
    loso_sources: frozenset[str]
    loso_out: Report = field(default_factory=Report)
    loso: tuple[Data, dict[str, np.ndarray]] | None = None

    def idx(self, part: str) -> np.ndarray:
        return np.flatnonzero(self.d.part == part)

    def loso_once(self) -> tuple[Data, dict[str, np.ndarray]]:
        """Leave one source out (its tables into ``loso_out``), once."""
        if self.loso is None:
            d = self.d
            origin = np.array([origin_of(c) for c in d.clips])
            # The source's own clips as published (see loso_scores).
            raw = np.array(
                [not c.id.startswith("codec-") and c.generator not in NEW_FAMILIES for c in d.clips]
            )
            aux_bona = (origin == "") & raw & (d.lab == "bonafide") & (d.part == "test")
            dv = variant_data(self.cache, d, np.flatnonzero(((origin != "") & raw) | aux_bona))
            tr, va, te = self.idx("train"), self.idx("val"), self.idx("test")
            self.loso = dv, run_loso(d, dv, tr, va, te, self.loso_seed, self.loso_out, self.loso_sources)
        return self.loso


def load_run(cache: Path, loso_seed: int, loso_sources: frozenset[str]) -> Run:
    """The clips with the spectrogram features, utterance cues, CAM++ front output and Whisper
    statistics (each cached in ``cache``)."""
    fe = FrontEnd()
    d = load_data(cache, lambda x: features(x, fe).astype(np.float16), "feats2", 50)
    d.cues = load_cues(cache, d.clips)
    d.fcm = load_fcm(cache, d.clips)
    d.whisper = load_whisper(cache, d.clips)
    return Run(cache, fe, d, Report(), loso_seed, loso_sources)


def shipped_scorer(path: Path) -> tuple[Scorer, list[float] | None]:
    """The logits of the model already written (``--logo-only``) and its fusion weights."""
    shipped = antispoof_engine(path)

    def scorer(dd: Data, idx: np.ndarray) -> np.ndarray:
        assert dd.cues is not None and dd.fcm is not None and dd.whisper is not None
        return np.stack(
            [
                shipped.logits(
                    dd.feats[i].astype(np.float32),
                    dd.cues[i],
                    dd.fcm[i].astype(np.float32),
                    dd.whisper[i],
                )
                for i in idx
            ]
        )

    return scorer, shipped.meta.get("fusion_weights")


def main_model(
    run: Run, members: int, cfg_oc: float, loso: bool, write: bool, outputs: Outputs, t0: float
) -> tuple[Scorer, np.ndarray, np.ndarray]:
    """Train the four branches and their fusion (weights from leave one source out, unless ``loso``
    is off), measure them in-domain and on the unseen domain, and with ``write`` export the model.
    Returns the model's logits function and its logits of the test and unseen-domain clips."""
    import torch

    d, out = run.d, run.out
    tr, va, te, ood = (run.idx(p) for p in ("train", "val", "test", "ood"))
    cfg = TrainConfig(oc_weight=cfg_oc)
    model = train_model(d, tr, va, cfg, replace(FCM_CFG, oc_weight=cfg_oc), SEED, members=members)
    if loso:  # the fusion weights, learned on the out-of-source scores; the calibration on va
        weights = run.loso_once()[1]["weights"]
        model.fusion = fit_fusion(model.branches(d, va), d.lab[va], weights)
    lt, lo = model.logits(d, te), model.logits(d, ood)
    out(f"## In-domain EER (held-out speakers; score = calibrated P(bona fide)); {cfg.epochs} epochs\n")
    in_domain_tables(d, te, lt, out)
    bona = d.lab[te] == "bonafide"
    out(
        "Each branch alone, and other fusion rules (not shipped; fitted on the validation clips), pooled EER:"
    )
    alts = model.alternatives(d, va, te)
    for name, z in zip(alternative_names(len(alts)), alts, strict=True):
        out(f"* {name}: {pct(eer_between(bona_log_odds(z)[bona], bona_log_odds(z)[~bona]))}")
    far = np.array([d.gen[i] == "far-field" or d.clips[i].id.startswith("gl-room-") for i in te])
    sb = bona_log_odds(lt)
    out(
        f"* the shipped fusion without the far-field part of the test split (the test set before it; "
        f"{np.sum(bona & ~far)} bona fide, {np.sum(~bona & ~far)} spoofs): "
        f"{pct(eer_between(sb[bona & ~far], sb[~bona & ~far]))}"
    )
    for k, mk in enumerate(member_models(d, va, model)):
        z = bona_log_odds(mk.logits(d, te))
        out(
            f"* member {k + 1} alone (seed {SEED + k * MEMBER_SEED_STEP}: both networks of "
            f"that seed, same regression and fusion): {pct(eer_between(z[bona], z[~bona]))}"
        )
    out()
    out("## Unseen-domain bona fide (Debian speech packages, never trained on)\n")
    ood_table(d, ood, lo, te, lt, out)
    print(f"main model done ({time.time() - t0:.0f} s)", flush=True)
    if write:
        meta = {
            "frontend": asdict(run.fe), "classes": list(CLASSES), "seed": SEED, "epochs": cfg.epochs,
            "cues": list(FEATURE_NAMES), "subclasses": [s for s, _ in subclasses(d)],
            "fcm_seconds": FCM_SECONDS, "fcm": "frames", "fcm_epochs": FCM_CFG.epochs,
            "whisper": WHISPER_MODEL, "whisper_c": WHISPER_C, "fusion_weights": model.fusion.w().tolist(),
            "members": members, **({"oc_weight": cfg_oc} if cfg_oc else {}),
            "test_speakers": sorted(s for s, p in d.split.items() if p == "test"),
        }  # fmt: skip
        export(model, run.fe, meta, outputs.model)
        torch.save(
            {"net": model.net.state_dict(), "fcm_net": model.fcm_net.state_dict()},
            run.cache / "model_nets.pt",
        )
        print(f"wrote {outputs.model} ({outputs.model.stat().st_size / 1024:.0f} KiB)", flush=True)
        check_export(model, d, te[:20], outputs.model)
    return model.logits, lt, lo


def loso_tables(run: Run, scorer: Scorer, lt: np.ndarray, lo: np.ndarray) -> None:
    """The bona fide rejection per channel, then the leave-one-source-out tables, into the report;
    the fold scores into ``<cache>/loso_scores.npz`` (``eval/antispoof_loso.py`` reads them)."""
    d = run.d
    te, ood = run.idx("test"), run.idx("ood")
    dv, loso_scores = run.loso_once()
    channel_table(d, dv, te, ood, lt, lo, scorer, run.out)
    run.out.lines.append(
        f"## Leave-one-source-out (source never trained on; networks {LOSO_EPOCHS} and "
        f"{LOSO_FCM_EPOCHS} epochs)\n"
    )
    run.out.lines.extend(run.loso_out.lines)
    np.savez(run.cache / "loso_scores.npz", ids=np.array([c.id for c in d.clips]),
             v_ids=np.array([c.id for c in dv.clips]), **loso_scores)  # fmt: skip


def write_results(run: Run, lt: np.ndarray, logo_only: bool, outputs: Outputs) -> None:
    """The report into ``<cache>/results.md`` (after the main model's part of the last run, with
    ``logo_only``), the model card's result block, and the DET plot."""
    text = "\n".join(run.out.lines) + "\n"
    tables = run.cache / "results.md"
    if logo_only and tables.exists():
        text = tables.read_text().split(POST_MAIN)[0] + text
    tables.write_text(text)
    write_card_tables(text, outputs.card)
    plot_det(run.d, run.idx("test"), lt, parse_logo_rows(text), outputs.det)


def train_and_measure(
    cache: Path, logo: bool, logo_epochs: int, write: bool, logo_only: bool = False,
    logo_seed: int = SEED + 1, members: int = MEMBERS, logo_members: int | None = None,
    cfg_oc: float = OC_WEIGHT, logo_generators: frozenset[str] = frozenset(),
    loso: bool = True, loso_sources: frozenset[str] = frozenset(), outputs: Outputs | None = None,
) -> None:  # fmt: skip
    """The whole run of ``python -m train.antispoof``: the shipped model (or, with ``logo_only``, the
    one already written) with its in-domain tables, leave one source out, optionally leave one
    generator out, and with ``write`` the model, the result tables and the plot in ``outputs``."""
    import torch

    outputs = outputs or Outputs()
    torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "2")))
    t0 = time.time()
    run = load_run(cache, logo_seed, loso_sources)
    if not logo_only:
        run.out("## Data\n")
        data_table(run.d, run.out)
    fold_weights: list[float] | None = None  # --logo-only: the shipped model's fusion weights
    if logo_only:  # the shipped model's scores, from the ONNX file
        scorer, fold_weights = shipped_scorer(outputs.model)
        lt, lo = scorer(run.d, run.idx("test")), scorer(run.d, run.idx("ood"))
    else:
        scorer, lt, lo = main_model(run, members, cfg_oc, loso, write, outputs, t0)
    if loso:
        loso_tables(run, scorer, lt, lo)
    if logo:
        if run.loso is not None:  # the shipped rule: the weights learned out of source
            fold_weights = run.loso[1]["weights"]
        leave_one_generator_out(
            run.d, run.out, logo_epochs, logo_seed, members if logo_members is None else logo_members,
            cfg_oc, logo_generators, fold_weights, run.cache / "logo_scores.npz" if write else None,
        )  # fmt: skip
    if write:
        write_results(run, lt, logo_only, outputs)
    print(f"total {time.time() - t0:.0f} s")
