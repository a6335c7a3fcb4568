"""Experiment (not shipped): does another kind of vocoder in training help against WORLD unseen?

    .venv/bin/python -m train.antispoof_lpc_probe [--cache DIR] [--clips 320] [--epochs 8]

Leave-one-generator-out shows that the shipped recipe, trained without WORLD, accepts WORLD more
often than bona fide (docs/antispoof.md). This script adds one more resynthesis family, an LPC
vocoder made here (order-18 all-pole envelope every 5 ms, pulse train at the pyworld F0 in voiced
frames and white noise elsewhere, frame gains from the prediction error), built from training
speakers' bona fide pieces only and finished like every other clip. It trains the shipped recipe
(short schedule) without WORLD, with and without the LPC clips, and prints the EER of all WORLD
clips against the held-out bona fide, plus the in-domain EER of the held-out LPC clips.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from scipy import signal
from scipy.linalg import solve_toeplitz

from train.antispoof import (
    SEED,
    TrainConfig,
    bona_logodds,
    eer,
    load_cues,
    load_data,
    pct,
    predict,
    train_net,
)
from train.antispoof_data import DEFAULT_CACHE, SR, Clip, _pick, bonafide_shared, finish, rng_for
from verilive.voice.antispoof import FrontEnd, features
from verilive.voice.utterance_cues import utterance_features

ORDER, HOP, WIN = 18, 80, 400  # 5 ms frames of 25 ms


def lpc_resynth(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    import pyworld as pw

    x = x.astype(np.float64)
    f0, t = pw.dio(x, SR, frame_period=1000 * HOP / SR)
    f0 = pw.stonemask(x, f0, t, SR)
    pad = np.pad(x, (WIN // 2, WIN))
    win = np.hanning(WIN)
    phase, out, zi = 0.0, np.zeros(x.size), np.zeros(ORDER)
    ratio = float(rng.uniform(0.8, 1.25))  # a pitch change, as a conversion would make
    for i in range(min(len(f0), x.size // HOP)):
        seg = pad[i * HOP : i * HOP + WIN] * win
        r = np.correlate(seg, seg, "full")[WIN - 1 : WIN + ORDER]
        if r[0] <= 1e-10:
            continue
        r[0] *= 1.0 + 1e-6  # white-noise correction keeps the filter stable
        a = solve_toeplitz(r[:ORDER], -r[1 : ORDER + 1])
        err = max(float(r[0] + a @ r[1 : ORDER + 1]), 1e-12) / np.sum(win**2)
        n = np.arange(HOP)
        if f0[i] > 0:
            inc = f0[i] * ratio / SR
            ph = phase + inc * (n + 1)
            exc = (np.floor(ph) > np.floor(np.concatenate([[phase], ph[:-1]]))).astype(float)
            exc *= np.sqrt(1.0 / inc)  # unit power per sample
            phase = float(ph[-1] % 1.0)
        else:
            exc = rng.standard_normal(HOP)
        y, zi = signal.lfilter([np.sqrt(err)], np.concatenate([[1.0], a]), exc, zi=zi)
        out[i * HOP : (i + 1) * HOP] = y
    return out


def _job(item: tuple[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    rid, wave = item
    y = lpc_resynth(wave, rng_for("lpc/" + rid))
    y, _ = finish(y, "lpc-" + rid)
    return features(y).astype(np.float16), utterance_features(y)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--clips", type=int, default=320)
    ap.add_argument("--epochs", type=int, default=8)
    args = ap.parse_args()
    fe = FrontEnd()
    d = load_data(args.cache, lambda x: features(x, fe).astype(np.float16), "feats2", 50)
    d.cues = load_cues(args.cache, d.clips)
    tr, te = (np.flatnonzero(d.part == p) for p in ("train", "test"))
    bona_te = te[d.lab[te] == "bonafide"]
    world = np.flatnonzero(d.gen == "world")
    pool = [r for r in bonafide_shared() if d.split.get(r.speaker) in ("train", "test")]
    picked = _pick(pool, args.clips, "lpc-probe")
    t = time.time()
    with ProcessPoolExecutor(2) as ex:
        res = list(ex.map(_job, [(r.id, r.wave) for r in picked], chunksize=8))
    print(f"{len(res)} LPC clips in {time.time() - t:.0f} s", flush=True)
    n0 = len(d.clips)
    for r, (f, c) in zip(picked, res, strict=True):
        d.clips.append(Clip(f"lpc-{r.id}", "", "vc", "lpc", r.speaker, r.source, r.licence, 1, "", 0.0))
        d.feats.append(f)
        d.cues = np.concatenate([d.cues, c[None]])
    part = np.array([d.split[r.speaker] for r in picked])
    d.part = np.concatenate([d.part, part])
    d.lab = np.concatenate([d.lab, ["vc"] * len(picked)])
    d.gen = np.concatenate([d.gen, ["lpc"] * len(picked)])
    lpc_tr = n0 + np.flatnonzero(part == "train")
    lpc_te = n0 + np.flatnonzero(part == "test")
    cfg = TrainConfig(epochs=args.epochs)
    keep = tr[d.gen[tr] != "world"]
    for name, idx in (("without WORLD", keep), ("without WORLD, with LPC", np.concatenate([keep, lpc_tr]))):
        net = train_net(d, idx, cfg, SEED + 1, log=f"[{name}] ")
        b = bona_logodds(predict(net, d, bona_te))
        w = bona_logodds(predict(net, d, world))
        lp = bona_logodds(predict(net, d, lpc_te))
        print(f"{name}: WORLD (never trained on) EER {pct(eer(b, w))}; LPC test {pct(eer(b, lp))}")


if __name__ == "__main__":
    main()
