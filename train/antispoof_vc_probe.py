"""Experiment (not shipped): can cheap phase/excitation features detect WORLD and Griffin-Lim resynthesis?

    .venv/bin/python -m train.antispoof_vc_probe [--cache DIR] [--workers 2] [--max-per-gen N]

On the cache built by ``train.antispoof_data`` and the speaker split of ``train.antispoof``
(``split_of``), every clip gets ~40 utterance-level features in five groups:

* ``spec``: spectral flatness and energy ratio in 4-8 kHz vs 0-4 kHz (resynthesis often changes the
  noise-like upper band);
* ``exc``: autocorrelation F0 / voicing strength, jitter, HNR-like ratio (excitation regularity);
* ``rps``: relative phase shift (RPS) of harmonics 2..6 w.r.t. the first, from a numpy F0 estimate:
  stability between consecutive voiced frames and spread over the utterance (glottal pulse shape);
* ``ifd``: instantaneous-frequency deviation at spectral peaks (phase-vocoder frequency from the phase
  advance between frames vs the magnitude-interpolated peak frequency): Griffin-Lim phase is not
  consistent across frames;
* ``mod``: modulation spectrum of band energies (fast vs slow modulation).

A class-balanced logistic regression is fitted on the training speakers for bona fide vs VC and
bona fide vs all spoofs (plus per-generator models for WORLD and Griffin-Lim). It prints held-out
EERs per generator, the rejection of the unseen-domain bona fide (Asterisk, KLettres) at the EER
threshold, and a late fusion with the shipped LCNN score (fusion weights fitted on the validation
speakers). Features are cached in ``<cache>/vcprobe.npz``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import soundfile as sf

from train.antispoof import crc, eer, pct, split_of
from train.antispoof_data import DEFAULT_CACHE, Clip, read_manifest

SR = 16000
N_FFT, HOP = 512, 128  # 32 ms Hann, 75 % overlap: phase advance per hop is unambiguous near peaks
F0_WIN, F0_HOP = 640, 160  # 40 ms frames (two periods at 60 Hz), 10 ms hop
F0_MIN, F0_MAX = 60.0, 400.0
VOICED_R = 0.45  # normalised autocorrelation peak above this: voiced
N_HARM = 6
GROUPS = ("spec", "exc", "rps", "ifd", "mod")


# ------------------------------------------------------------------------------------- features


def princarg(p: np.ndarray) -> np.ndarray:
    return np.angle(np.exp(1j * p))


def frames(x: np.ndarray, win: int, hop: int) -> np.ndarray:
    n = 1 + max(0, x.size - win) // hop
    return np.lib.stride_tricks.as_strided(x, (n, win), (x.strides[0] * hop, x.strides[0]), writeable=False)


def active(energy_db: np.ndarray, below: float) -> np.ndarray:
    return energy_db > energy_db.max() - below


def spec_features(p: np.ndarray, act: np.ndarray) -> dict[str, float]:
    """Flatness and level of the upper band; ``p``: power (frames, bins) of active frames."""
    lo, hi = p[act, 3:128], p[act, 128:256]  # ~100 Hz-4 kHz, 4-8 kHz
    eps = 1e-12
    flat_hi = np.exp(np.mean(np.log(hi + eps), axis=1)) / (np.mean(hi, axis=1) + eps)
    flat_lo = np.exp(np.mean(np.log(lo + eps), axis=1)) / (np.mean(lo, axis=1) + eps)
    ratio = 10 * np.log10((hi.sum(axis=1) + eps) / (lo.sum(axis=1) + eps))
    return {
        "flat_hi_mean": float(np.mean(flat_hi)),
        "flat_hi_std": float(np.std(flat_hi)),
        "flat_lo_mean": float(np.mean(flat_lo)),
        "hi_ratio_mean": float(np.mean(ratio)),
        "hi_ratio_std": float(np.std(ratio)),
        "hi_ratio_p90": float(np.percentile(ratio, 90)),
    }


def ifd_features(spec: np.ndarray, act: np.ndarray) -> dict[str, float]:
    """Phase-vocoder frequency vs interpolated peak frequency (in bins) at the strongest peaks."""
    mag = np.log(np.abs(spec) + 1e-9)
    phase = np.angle(spec)
    t_idx = np.flatnonzero(act[1:] & act[:-1]) + 1  # frame t and t-1 both active
    devs_lo: list[np.ndarray] = []
    devs_hi: list[np.ndarray] = []
    weights_lo: list[np.ndarray] = []
    for t in t_idx[:: max(1, len(t_idx) // 300)]:  # at most ~300 frames per clip
        m = mag[t]
        k = np.flatnonzero((m[2:-2] > m[1:-3]) & (m[2:-2] >= m[3:-1]) & (m[2:-2] > m.max() - 3.0 * 2.3)) + 2
        if k.size == 0:
            continue
        k = k[np.argsort(m[k])[::-1][:20]]
        a, b, c = m[k - 1], m[k], m[k + 1]
        den = a - 2 * b + c
        delta = np.where(np.abs(den) > 1e-9, 0.5 * (a - c) / np.where(den == 0, 1, den), 0.0)
        dphi = princarg(phase[t, k] - phase[t - 1, k] - 2 * np.pi * k * HOP / N_FFT)
        f_phase = k + dphi * N_FFT / (2 * np.pi * HOP)
        dev = np.abs(f_phase - (k + np.clip(delta, -0.5, 0.5)))
        low = k < 128
        devs_lo.append(dev[low])
        devs_hi.append(dev[~low])
        weights_lo.append(np.exp(b[low] - m.max()))
    if not devs_lo:
        return {
            k: np.nan
            for k in ("ifd_lo_median", "ifd_lo_wmean", "ifd_lo_frac_big", "ifd_hi_median", "ifd_hi_frac_big")
        }
    lo, hi, w = np.concatenate(devs_lo), np.concatenate(devs_hi), np.concatenate(weights_lo)
    return {
        "ifd_lo_median": float(np.median(lo)) if lo.size else np.nan,
        "ifd_lo_wmean": float(np.sum(lo * w) / (np.sum(w) + 1e-12)) if lo.size else np.nan,
        "ifd_lo_frac_big": float(np.mean(lo > 0.25)) if lo.size else np.nan,
        "ifd_hi_median": float(np.median(hi)) if hi.size else np.nan,
        "ifd_hi_frac_big": float(np.mean(hi > 0.25)) if hi.size else np.nan,
    }


def mod_features(p: np.ndarray, act: np.ndarray) -> dict[str, float]:
    """Modulation spectrum of 7 band log energies over the active stretch (frame rate 125 Hz)."""
    edges = [3, 16, 32, 64, 96, 128, 176, 256]  # ~100 Hz .. 8 kHz
    idx = np.flatnonzero(act)
    seg = p[idx[0] : idx[-1] + 1]
    if seg.shape[0] < 64:
        return {k: np.nan for k in ("mod_mid_lo", "mod_fast_lo", "mod_mid_hi", "mod_fast_hi")}
    bands = np.stack([np.log(seg[:, a:b].sum(axis=1) + 1e-10) for a, b in itertools.pairwise(edges)])
    bands -= bands.mean(axis=1, keepdims=True)
    ms = np.abs(np.fft.rfft(bands * np.hanning(bands.shape[1]), axis=1)) ** 2
    fr = np.fft.rfftfreq(bands.shape[1], HOP / SR)
    slow = ms[:, (fr >= 1) & (fr < 4)].sum(axis=1) + 1e-10
    mid = ms[:, (fr >= 4) & (fr < 16)].sum(axis=1) + 1e-10
    fast = ms[:, (fr >= 16) & (fr < 40)].sum(axis=1) + 1e-10
    return {
        "mod_mid_lo": float(np.mean(np.log(mid[:4] / slow[:4]))),
        "mod_fast_lo": float(np.mean(np.log(fast[:4] / slow[:4]))),
        "mod_mid_hi": float(np.mean(np.log(mid[4:] / slow[4:]))),
        "mod_fast_hi": float(np.mean(np.log(fast[4:] / slow[4:]))),
    }


def f0_track(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(frame start, F0 Hz, voicing strength) of 40 ms frames; normalised autocorrelation (Boersma's
    correction for the window's own autocorrelation), parabolic peak interpolation."""
    fr = frames(x, F0_WIN, F0_HOP)
    w = np.hanning(F0_WIN)
    n = 2048
    xf = (fr - fr.mean(axis=1, keepdims=True)) * w
    r = np.fft.irfft(np.abs(np.fft.rfft(xf, n, axis=1)) ** 2, n, axis=1)[:, :F0_WIN]
    rw = np.fft.irfft(np.abs(np.fft.rfft(w, n)) ** 2, n)[:F0_WIN]
    r = r / (r[:, :1] + 1e-12) / (rw / rw[0])
    lo, hi = int(SR / F0_MAX), int(SR / F0_MIN)
    seg = r[:, lo : hi + 1]
    k = np.argmax(seg, axis=1) + lo
    rows = np.arange(len(k))
    a, b, c = r[rows, k - 1], r[rows, k], r[rows, np.minimum(k + 1, F0_WIN - 1)]
    den = a - 2 * b + c
    delta = np.clip(np.where(np.abs(den) > 1e-9, 0.5 * (a - c) / np.where(den == 0, 1, den), 0.0), -0.5, 0.5)
    lag = k + delta
    strength = np.clip(b - 0.25 * (a - c) * delta, 0, 1)
    return np.arange(len(k)) * F0_HOP, SR / lag, strength


def exc_rps_features(x: np.ndarray) -> dict[str, float]:
    _, f0, v = f0_track(x)
    fr = frames(x, F0_WIN, F0_HOP)
    e = 10 * np.log10(np.mean(fr**2, axis=1) + 1e-12)
    act = active(e, 35.0)
    voiced = act & (v > VOICED_R)
    out: dict[str, float] = {"voiced_frac": float(voiced.sum() / max(1, act.sum()))}
    nan_keys = ["v_mean", "v_std", "hnr_mean", "jitter", "f0_logstd", "h1h2_mean"]
    nan_keys += [f"rps{k}_stab" for k in range(2, N_HARM + 1)] + [
        f"rps{k}_conc" for k in range(2, N_HARM + 1)
    ]
    if voiced.sum() < 5:
        return out | {k: np.nan for k in nan_keys}
    vv = v[voiced]
    out["v_mean"] = float(vv.mean())
    out["v_std"] = float(vv.std())
    out["hnr_mean"] = float(np.mean(10 * np.log10(np.clip(vv, 1e-3, 0.999) / (1 - np.clip(vv, 1e-3, 0.999)))))
    lf = np.log(f0)
    pair = voiced[1:] & voiced[:-1]
    dl = np.abs(np.diff(lf))[pair]
    dl = dl[dl < 0.2]  # octave jumps are tracking errors, not jitter
    out["jitter"] = float(np.median(dl)) if dl.size else np.nan
    out["f0_logstd"] = float(np.std(lf[voiced]))
    # RPS: harmonic phases at k*F0 by a direct DFT of the Hann-windowed frame; RPS_k = phi_k - k*phi_1
    # does not depend on where the frame starts within the period, so plain 10 ms frames suffice.
    vi = np.flatnonzero(voiced)
    n = np.arange(F0_WIN)
    ks = np.arange(1, N_HARM + 1)
    basis = np.exp(-2j * np.pi * (f0[vi, None, None] * ks[None, :, None]) * n[None, None, :] / SR)
    xw = (fr[vi] - fr[vi].mean(axis=1, keepdims=True)) * np.hanning(F0_WIN)
    hk = np.einsum("tkn,tn->tk", basis, xw)
    amp = np.abs(hk) + 1e-12
    out["h1h2_mean"] = float(np.mean(20 * np.log10(amp[:, 0] / amp[:, 1])))
    ph = np.angle(hk)
    rps = princarg(ph[:, 1:] - ks[1:] * ph[:, :1])
    consec = np.flatnonzero(np.diff(vi) == 1)  # pairs of adjacent voiced frames
    for j, k in enumerate(range(2, N_HARM + 1)):
        d = rps[consec + 1, j] - rps[consec, j]
        out[f"rps{k}_stab"] = float(np.abs(np.mean(np.exp(1j * d)))) if consec.size else np.nan
        out[f"rps{k}_conc"] = float(np.abs(np.mean(np.exp(1j * rps[:, j]))))
    return out


def clip_features(x: np.ndarray) -> dict[str, float]:
    x = x.astype(np.float64)
    x = x - x.mean()
    x = x / (np.sqrt(np.mean(x**2)) + 1e-9)  # level-invariant
    fr = frames(x, N_FFT, HOP) * np.hanning(N_FFT)
    spec = np.fft.rfft(fr, axis=1)
    p = np.abs(spec) ** 2
    act = active(10 * np.log10(p.sum(axis=1) + 1e-12), 40.0)
    return spec_features(p, act) | ifd_features(spec, act) | mod_features(p, act) | exc_rps_features(x)


def group_of(name: str) -> str:
    if name.startswith(("flat_", "hi_ratio")):
        return "spec"
    if name.startswith("ifd_"):
        return "ifd"
    if name.startswith("mod_"):
        return "mod"
    if name.startswith("rps"):
        return "rps"
    return "exc"


_ANTI = None


def _worker(path: str) -> tuple[dict[str, float], float]:
    """Features and the shipped LCNN's log P(bona fide)/P(spoof) of one clip."""
    global _ANTI
    if _ANTI is None:
        from verilive.voice.antispoof import AntiSpoof

        _ANTI = AntiSpoof(intra_op_threads=1)
    x, sr = sf.read(path, dtype="float32")
    assert sr == SR
    p = _ANTI.class_probabilities(x, sr)
    lcnn = float(np.log(p[0] + 1e-9) - np.log(1 - p[0] + 1e-9)) if p is not None else np.nan
    return clip_features(x), lcnn


def compute(cache: Path, clips: list[Clip], workers: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    store = cache / "vcprobe.npz"
    ids = [c.id for c in clips]
    if store.exists():
        with np.load(store, allow_pickle=False) as z:
            if list(z["ids"]) == ids:
                return list(z["names"]), z["X"], z["lcnn"]
    t = time.time()
    paths = [str(cache / c.path) for c in clips]
    with ProcessPoolExecutor(workers) as ex:
        res = list(ex.map(_worker, paths, chunksize=16))
    names = list(res[0][0])
    x = np.array([[r[0].get(n, np.nan) for n in names] for r in res])
    lcnn = np.array([r[1] for r in res])
    np.savez(store, ids=np.array(ids), names=np.array(names), X=x, lcnn=lcnn)
    print(f"features of {len(clips)} clips in {time.time() - t:.0f} s", flush=True)
    return names, x, lcnn


# ------------------------------------------------------------------------------------- experiment


def fit_lr(x: np.ndarray, y: np.ndarray, c: float = 1.0) -> Callable[[np.ndarray], np.ndarray]:
    """Class-balanced logistic regression; returns the decision function (higher = bona fide)."""
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    m = make_pipeline(
        SimpleImputer(strategy="median"),
        StandardScaler(),
        LogisticRegression(C=c, class_weight="balanced", max_iter=5000),
    ).fit(x, y)
    return lambda z: m.decision_function(z)


def eer_threshold(bona: np.ndarray, spoof: np.ndarray) -> float:
    th = np.sort(np.concatenate([bona, spoof]))
    frr = np.array([np.mean(bona < t) for t in th])
    far = np.array([np.mean(spoof >= t) for t in th])
    return float(th[int(np.argmin(np.abs(frr - far)))])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-per-gen", type=int, default=0, help="subsample each generator (0: all clips)")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    clips = read_manifest(args.cache)
    if args.max_per_gen:  # deterministic subsample by id hash
        keep: list[Clip] = []
        for g in sorted({c.generator for c in clips}):
            gc = sorted((c for c in clips if c.generator == g), key=lambda c: crc(c.id))
            keep += gc[: args.max_per_gen]
        clips = keep
    split = split_of(read_manifest(args.cache))
    names, x, lcnn = compute(args.cache, clips, args.workers)
    part = np.array([split[c.speaker] for c in clips])
    lab = np.array([c.label for c in clips])
    gen = np.array([c.generator for c in clips])
    fam = np.where(np.char.startswith(gen.astype(str), "nii-"), "nii (all 5)", gen)
    bona = lab == "bonafide"
    tr, va, te, ood = (part == p for p in ("train", "val", "test", "ood"))
    print(f"{len(clips)} clips: train {tr.sum()}, val {va.sum()}, test {te.sum()}, unseen-domain {ood.sum()}")
    print(
        f"{len(names)} features: " + ", ".join(f"{g} {sum(group_of(n) == g for n in names)}" for g in GROUPS)
    )

    def report(tag: str, score: np.ndarray, ref_spoof: np.ndarray) -> None:
        """EERs per target on test; unseen-domain rejection at the EER threshold vs ``ref_spoof``."""
        b = score[te & bona]
        cells = [pct(eer(b, score[te & (fam == f)])) for f in ("world", "griffin-lim", "nii (all 5)")]
        cells.append(pct(eer(b, score[te & (lab == "vc")])))
        cells.append(pct(eer(b, score[te & ~bona])))
        th = eer_threshold(b, score[te & ref_spoof])
        for g in ("asterisk-core-sounds", "klettres-data"):
            m = ood & (gen == g)
            cells.append(f"{np.mean(score[m] < th):.2f}")
        print(f"| {tag} | " + " | ".join(cells) + " |", flush=True)

    print(
        "\n| model (features -> target) | WORLD | Griffin-Lim | NII | VC pooled | all spoofs | "
        "Asterisk rejected | KLettres rejected |"
    )
    print("|---|---|---|---|---|---|---|---|")
    vc = lab == "vc"
    fit_tr = tr | va  # the feature models never see the test or unseen-domain speakers
    scores: dict[str, np.ndarray] = {}
    for grp in (*GROUPS, "all"):
        cols = [i for i, n in enumerate(names) if grp == "all" or group_of(n) == grp]
        m = fit_tr & (bona | vc)
        f = fit_lr(x[m][:, cols], bona[m].astype(int))
        scores[f"{grp}/vc"] = f(x[:, cols])
        report(f"{grp} -> bona vs VC", scores[f"{grp}/vc"], vc)
    for g in ("world", "griffin-lim"):
        m = fit_tr & (bona | (gen == g))
        f = fit_lr(x[m], bona[m].astype(int))
        report(f"all -> bona vs {g} only", f(x), gen == g)
    f_all = fit_lr(x[fit_tr], bona[fit_tr].astype(int))
    scores["all/all"] = f_all(x)
    report("all -> bona vs all spoofs", scores["all/all"], ~bona)
    report("shipped LCNN alone", lcnn, ~bona)
    report("shipped LCNN (threshold vs VC)", lcnn, vc)

    # Late fusion: LCNN log-odds + feature-model score, weights fitted on the validation speakers
    # only (the LCNN saw the training speakers, so its scores there are optimistic).
    from sklearn.linear_model import LogisticRegression

    # The feature models were fitted on train+val; for an honest fusion refit them on train only.
    for target, sel in (("vc", vc), ("all", ~bona)):
        m = tr & (bona | sel)
        f = fit_lr(x[m], bona[m].astype(int))
        z = np.column_stack([np.nan_to_num(lcnn), f(x)])
        fv = va & (bona | sel)
        fus = LogisticRegression(class_weight="balanced").fit(z[fv], bona[fv].astype(int))
        s = fus.decision_function(z)
        print(f"fusion weights ({target}): LCNN {fus.coef_[0, 0]:.3f}, features {fus.coef_[0, 1]:.3f}")
        report(f"fusion LCNN + all features ({target} model; threshold vs all spoofs)", s, ~bona)
    # Specialists: one model per resynthesis generator (each alone is generator-specific, see the
    # table), fused with the LCNN and the all-spoofs feature model, again weighted on validation.
    cols_z = [np.nan_to_num(lcnn)]
    for sel in (gen == "world", gen == "griffin-lim", ~bona):
        m = tr & (bona | sel)
        cols_z.append(fit_lr(x[m], bona[m].astype(int))(x))
    z = np.column_stack(cols_z)
    fus = LogisticRegression(class_weight="balanced").fit(z[va], bona[va].astype(int))
    w = ", ".join(f"{n} {c:.3f}" for n, c in zip(("LCNN", "WORLD", "GL", "all"), fus.coef_[0], strict=True))
    print(f"fusion weights (LCNN + specialists): {w}")
    report("fusion LCNN + WORLD/GL specialists + all-spoofs features", fus.decision_function(z), ~bona)
    print()
    # Which single features separate best (test EER of the raw feature, either sign), for the write-up.
    for g in ("world", "griffin-lim"):
        rows = []
        for i, n in enumerate(names):
            v = x[:, i]
            b, s = v[te & bona], v[te & (gen == g)]
            b, s = b[np.isfinite(b)], s[np.isfinite(s)]
            e = min(eer(b, s), eer(-b, -s))
            rows.append((e, n))
        rows.sort()
        print(f"best single features vs {g}: " + ", ".join(f"{n} {pct(e)}" for e, n in rows[:6]))


if __name__ == "__main__":
    main()
