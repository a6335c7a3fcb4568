"""Leave one source out: folds without each real source, duration and channel variants, tables."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from common.metrics import eer_between

from train.antispoof.features import clip_whisper, front_antispoof
from train.antispoof.fusion import (
    BRANCHES,
    alternative_names,
    bona_log_odds,
    fit_affine,
    fit_weights,
    train_model,
)
from train.antispoof.networks import FCM_CFG, TrainConfig
from train.antispoof.report import Report, pct
from train.antispoof.split import Data
from train.antispoof_data import NEW_FAMILIES, REAL_SOURCES, Clip
from verilive.voice.antispoof import SR, as_pcm16, features
from verilive.voice.utterance_cues import utterance_features

LJ = "ljspeech_bonafide"
NII = "nii_vocoded_spoof"
# Folds of leave-one-source-out: every real-source folder, the NII vocoded clips and LJ Speech. A
# source's EER is against its own bona fide when it has at least MIN_OWN_BONA clips of it, else
# against the pooled bona fide of all folds, each clip scored by the fold that left its own source out.
LOSO_SOURCES = (*REAL_SOURCES, NII, LJ)
MIN_OWN_BONA = 5
LOSO_EPOCHS, LOSO_FCM_EPOCHS = 10, 10
# Variants scored in the folds: random crops of the trimmed clip in two duration bands, and the
# telephone band and MP3 versions of the clip (channel robustness).
BANDS = {"1-2 s": (1.0, 2.0), "2-4 s": (2.0, 4.0)}
CHANNELS = ("telephone", "mp3")
THRESHOLD = 0.5  # the default accept threshold on P(bona fide): log-odds 0


def origin_of(c: Clip) -> str:
    """The leave-one-source-out source of a clip ('' for speech made or recorded elsewhere). Spoofs
    made here from LJ Speech or from the NII recordings (WORLD, Griffin-Lim, replay, far field)
    belong to that source too: its fold must not train on its speakers' speech in any form."""
    if c.source in REAL_SOURCES:
        return c.source
    if c.source.startswith(NII) or c.speaker.startswith("arctic-") or c.speaker == "nii-11463":
        return NII
    return LJ if c.source == LJ or c.speaker == "lj" else ""


def _variant_worker(job: tuple[str, str, str]) -> tuple[np.ndarray, ...] | None:
    from train.antispoof_data import codec_chain, rng_for, telephone, trim

    anti = front_antispoof()
    path, kind, key = job
    x, sr = sf.read(path, dtype="float32")
    assert sr == SR
    rng = rng_for(f"variant/{kind}/{key}")
    if kind in BANDS:
        lo, hi = BANDS[kind]
        x = trim(x)
        n = int(rng.uniform(lo, hi) * SR)
        if x.size < int(lo * SR):
            return None
        start = int(rng.integers(0, max(1, x.size - n + 1)))
        x = x[start : start + n]
    elif kind == "telephone":
        x = telephone(x.astype(np.float64), rng).astype(np.float32)
    else:
        x = codec_chain(x, "mp3", rng)
    x = as_pcm16(x)  # as the runtime does, and as the training clips are stored
    f = features(x).astype(np.float16)
    if f.shape[2] < 50:
        return None
    return (
        f,
        utterance_features(x).astype(np.float32),
        anti.fcm_frames(x).astype(np.float16),
        clip_whisper(x),
    )


def variant_data(cache: Path, d: Data, idx: np.ndarray, workers: int = 2) -> Data:
    """Duration-band crops and channel versions of the clips ``idx`` (runtime front ends), cached
    in ``<cache>/variants.npz``; ids ``<clip id>#<variant>``, channel = the variant."""
    from concurrent.futures import ProcessPoolExecutor

    jobs = [(i, kind) for i in idx for kind in (*BANDS, *CHANNELS)]
    ids = [f"{d.clips[i].id}#{k}" for i, k in jobs]
    store = cache / "variants.npz"
    got: list[Any] | None = None
    if store.exists():
        with np.load(store, allow_pickle=False) as z:
            if list(z["ids"]) == ids:
                ok, fo, ho, f, c, h, w = (z[k] for k in ("ok", "f_off", "h_off", "F", "C", "H", "W"))
                row = np.cumsum(ok) - 1  # C and W hold the usable variants only
                got = [
                    (f[..., fo[k] : fo[k + 1]], c[row[k]], h[:, ho[k] : ho[k + 1]], w[row[k]])
                    if ok[k]
                    else None
                    for k in range(len(ids))
                ]
    if got is None:
        t = time.time()
        args = [(str(cache / d.clips[i].path), k, d.clips[i].id) for i, k in jobs]
        with ProcessPoolExecutor(workers) as ex:
            got = list(ex.map(_variant_worker, args, chunksize=8))
        have = [g for g in got if g is not None]
        np.savez(
            store, ids=np.array(ids), ok=np.array([g is not None for g in got]),
            f_off=np.cumsum([0] + [g[0].shape[2] if g else 0 for g in got]),
            h_off=np.cumsum([0] + [g[2].shape[1] if g else 0 for g in got]),
            F=np.concatenate([g[0] for g in have], axis=2), C=np.stack([g[1] for g in have]),
            H=np.concatenate([g[2] for g in have], axis=1), W=np.stack([g[3] for g in have]),
        )  # fmt: skip
        print(f"{len(have)} variants of {len(idx)} clips in {time.time() - t:.0f} s", flush=True)
    keep = [k for k, g in enumerate(got) if g is not None]
    clips = [replace(d.clips[jobs[k][0]], id=ids[k], channel=jobs[k][1]) for k in keep]
    return Data(
        clips,
        [got[k][0] for k in keep],
        np.array(["variant"] * len(keep)),
        np.array([c.label for c in clips]),
        np.array([c.generator for c in clips]),
        {},
        np.stack([got[k][1] for k in keep]),
        [got[k][2] for k in keep],
        np.stack([got[k][3] for k in keep]),
    )


def _share(x: np.ndarray) -> str:
    return "–" if len(x) == 0 else f"{100 * float(np.mean(x)):.1f} %"


POST_MAIN = "## Bona fide rejected at the default threshold"  # the first heading after the main model's


def channel_table(
    d: Data, dv: Data, te: np.ndarray, ood: np.ndarray, lt: np.ndarray, lo: np.ndarray,
    scorer: Callable[[Data, np.ndarray], np.ndarray], out: Report,
) -> None:  # fmt: skip
    """Bona fide of the other corpora (held-out speakers; Debian speech never trained on) rejected at
    the default threshold by the shipped model, as recorded and in telephone-band and MP3 versions."""
    origin = np.array([origin_of(c) for c in dv.clips])
    aux = np.flatnonzero(origin == "")
    kinds = np.array([dv.clips[i].channel for i in aux])
    vz = bona_log_odds(scorer(dv, aux)) if len(aux) else np.zeros(0)
    z, zo = bona_log_odds(lt), bona_log_odds(lo)
    out(f"{POST_MAIN} (shipped model; held-out speakers)\n")
    out("| bona fide corpus | clips | as recorded | telephone band | MP3 |")
    out("|---|---|---|---|---|")
    for g in sorted({c.generator for c in dv.clips if origin_of(c) == ""}):
        sel = (
            (d.gen[te] == g)
            & (d.lab[te] == "bonafide")
            & np.array([not d.clips[i].id.startswith("codec-") for i in te])
        )
        gk = np.array([dv.clips[i].generator == g for i in aux])
        rej = " | ".join(_share(vz[gk & (kinds == k)] < 0) for k in CHANNELS)
        out(f"| {g} | {int(sel.sum())} | {_share(z[sel] < 0)} | {rej} |")
    for g in sorted(set(d.gen[ood])):
        sel = d.gen[ood] == g
        out(f"| {g} (Debian, never trained on) | {int(sel.sum())} | {_share(zo[sel] < 0)} | – | – |")
    out()


def run_loso(
    d: Data, dv: Data, tr: np.ndarray, va: np.ndarray, te: np.ndarray, seed: int, out: Report,
    only: frozenset[str] = frozenset(),
) -> dict[str, np.ndarray]:  # fmt: skip
    """Leave-one-source-out: for each of :data:`LOSO_SOURCES` both networks are trained without any
    clip of that source (its bona fide, its spoofs and their codec copies) and fused on the other
    sources' validation clips; the source's clips as published, and their variants, are scored."""
    origin = np.array([origin_of(c) for c in d.clips])
    v_origin = np.array([origin_of(c) for c in dv.clips])
    # Scored as the source's own clips: as published, not codec copies and not the new families'
    # resynthesis of its bona fide (those are measured by leave-one-generator-out).
    raw = np.array([not c.id.startswith("codec-") and c.generator not in NEW_FAMILIES for c in d.clips])
    lcfg = TrainConfig(epochs=LOSO_EPOCHS)
    lfcm = replace(FCM_CFG, epochs=LOSO_FCM_EPOCHS)
    pool = np.concatenate([tr, te])
    score = np.full(len(d.clips), np.nan)
    v_score = np.full(len(dv.clips), np.nan)
    branch_scores: np.ndarray | None = None
    nb = len(BRANCHES)
    v_branch = np.full((nb, len(dv.clips)), np.nan)
    fold_va: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for src in LOSO_SOURCES:
        if only and src not in only:
            continue
        va_s = va[origin[va] != src]
        m = train_model(d, pool[origin[pool] != src], va_s, lcfg, lfcm, seed, f"[-{src}] ")
        own = np.flatnonzero((origin == src) & raw)
        score[own] = bona_log_odds(m.logits(d, own))
        # each branch alone and the other fusion rules (ALTERNATIVES), for choosing a rule by this table
        alts = m.alternatives(d, va_s, own)
        if branch_scores is None:
            branch_scores = np.full((len(alts), len(d.clips)), np.nan)
        branch_scores[:, own] = np.stack([bona_log_odds(z) for z in alts])
        fold_va[src] = (m.branch_odds(d, va_s)[:nb], d.lab[va_s])
        vi = np.flatnonzero(v_origin == src)
        if len(vi):
            v_score[vi] = bona_log_odds(m.logits(dv, vi))
            v_branch[:, vi] = m.branch_odds(dv, vi)[:nb]
        print(f"fold {src}: {len(own)} clips, {len(vi)} variants", flush=True)
    lab, vlab = d.lab == "bonafide", dv.lab == "bonafide"
    # Fusion weights learned on these out-of-source scores. The table below scores each source with
    # weights fitted without it (nested), then the fold's own validation calibration, as shipped.
    weights = np.ones(nb)
    score_equal = score.copy()
    if branch_scores is not None and len(fold_va) > 1:
        z_all = branch_scores[:nb].T
        have = ~np.isnan(z_all[:, 0])
        weights = fit_weights(z_all[have], lab[have], origin[have])
        out(f"Fusion weights learned on the out-of-source scores ({', '.join(BRANCHES)}): "
            + ", ".join(f"{w:.2f}" for w in weights) + "; per fold, without its source:\n")  # fmt: skip
        for src, (zva, lva) in fold_va.items():
            w_s = fit_weights(
                z_all[have & (origin != src)], lab[have & (origin != src)], origin[have & (origin != src)]
            )
            aff = fit_affine(zva.T @ w_s, lva)
            own = np.flatnonzero((origin == src) & raw)
            score[own] = aff((z_all[own] @ w_s)[:, None])[:, 0]
            vi = np.flatnonzero(v_origin == src)
            if len(vi):
                v_score[vi] = aff((v_branch[:, vi].T @ w_s)[:, None])[:, 0]
            out(f"* without {src}: " + ", ".join(f"{w:.2f}" for w in w_s))
        out()
    pooled = score[lab & ~np.isnan(score)]
    kinds = np.array([c.channel for c in dv.clips])

    def pair(src: str, s: np.ndarray, is_bona: np.ndarray, sel: np.ndarray, all_bona: np.ndarray):
        own = s[sel & is_bona & ~np.isnan(s)]
        spoof = s[sel & ~is_bona & ~np.isnan(s)]
        return (own if len(own) >= MIN_OWN_BONA else all_bona), spoof, len(own) >= MIN_OWN_BONA

    rows = []
    out("| source | bona fide (own) | spoofs | EER | bona fide against | 1-2 s crops | 2-4 s crops "
        "| clips > 4 s | spoofs accepted at 0.5 |")  # fmt: skip
    out("|---|---|---|---|---|---|---|---|---|")
    long_ = np.array([c.duration_s > 4.0 for c in d.clips])
    for src in LOSO_SOURCES:
        if only and src not in only:
            continue
        sel = origin == src
        bona, spoof, own = pair(src, score, lab, sel, pooled)
        if len(spoof) == 0:
            continue
        e = eer_between(bona, spoof)
        band = []
        for k in BANDS:
            vsel = (v_origin == src) & (kinds == k)
            vb_all = v_score[(kinds == k) & vlab & ~np.isnan(v_score)]
            vb, vs, _ = pair(src, v_score, vlab, vsel, vb_all)
            band.append(eer_between(vb, vs) if len(vs) and len(vb) else float("nan"))
        lb, ls, _ = pair(src, score, lab, sel & long_, pooled[pooled == pooled])
        band.append(eer_between(lb, ls) if len(ls) and len(lb) else float("nan"))
        rows.append((src, e, *band))
        out(f"| {src} | {int(np.sum(sel & lab & raw))} | {len(spoof)} | {pct(e)} | "
            f"{'own' if own else 'pooled'} | " + " | ".join(pct(b) for b in band)
            + f" | {_share(spoof > 0)} |")  # fmt: skip
    for name, f in (("mean", np.nanmean), ("worst", np.nanmax)):
        out(f"| **{name}** | | | **{pct(float(f([r[1] for r in rows])))}** | | "
            + " | ".join(pct(float(f([r[k] for r in rows]))) for k in (2, 3, 4)) + " | |")  # fmt: skip
    out()
    out("Per generator (each against its source's bona fide as above):\n")
    out("| source | generator | class | clips | EER | accepted at 0.5 |")
    out("|---|---|---|---|---|---|")
    for src in LOSO_SOURCES:
        sel = origin == src
        bona, _, own = pair(src, score, lab, sel, pooled)
        for g in sorted(set(d.gen[sel & ~lab])):
            s = score[sel & (d.gen == g) & raw]
            s = s[~np.isnan(s)]
            if len(s):
                out(f"| {src} | {g.split('/')[-1]} | {d.lab[sel & (d.gen == g)][0]} | {len(s)} | "
                    f"{pct(eer_between(bona, s))} | {_share(s > 0)} |")  # fmt: skip
    out()
    out("Bona fide rejected at the default threshold (P(bona fide) < 0.5), each clip scored by the fold "
        "that left its source out:\n")  # fmt: skip
    out("| bona fide source | clips | as published | telephone band | MP3 |")
    out("|---|---|---|---|---|")
    for src in LOSO_SOURCES:
        b = score[(origin == src) & lab & raw]
        b = b[~np.isnan(b)]
        if len(b) == 0:
            continue
        ch = [v_score[(v_origin == src) & vlab & (kinds == k)] for k in CHANNELS]
        rej = " | ".join(_share(c[~np.isnan(c)] < 0) for c in ch)
        out(f"| {src} | {len(b)} | {_share(b < 0)} | {rej} |")
    out()
    if branch_scores is not None:
        out("Each branch alone and other fusion rules in the same folds (mean / worst source EER):\n")
        for name, z in zip(alternative_names(len(branch_scores)), branch_scores, strict=True):
            es = []
            for src in LOSO_SOURCES:
                bona, spoof, _ = pair(src, z, lab, origin == src, z[lab & ~np.isnan(z)])
                if len(spoof):
                    es.append(eer_between(bona, spoof))
            out(f"* {name}: {pct(float(np.mean(es)))} / {pct(float(np.max(es)))}")
        out()
    return {
        "score": score, "v_score": v_score, "origin": origin, "v_origin": v_origin, "kinds": kinds,
        "branches": np.zeros((0, len(score))) if branch_scores is None else branch_scores,
        "v_branches": v_branch, "score_equal": score_equal, "weights": weights,
    }  # fmt: skip
