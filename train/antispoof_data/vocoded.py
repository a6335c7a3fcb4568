"""Vocoded and converted spoofs: NII vocoders, neural and MLSA resynthesis, WORLD, Griffin-Lim, LPC."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from scipy import signal

from train.antispoof_data.clips import SHARED_VOICE, SR, Raw, Spoof, chunks, load, rng_for, trim
from train.antispoof_data.real_sources import REAL_SOURCES

# Per-generator sizes (clips); the derived spoofs draw their sources from the trainable bona fide pool.
N_WORLD = 320
N_GRIFFIN_LIM = 320
N_LPC = 240
# Families added for issue 29 (train/spoof_families.py): neural and source-filter resynthesis of the
# trainable pool and of every real source's bona fide (a matched spoof of the same speaker and
# sentence). Each is one generator, so leave-one-generator-out leaves the family out.
N_LYRA = 300
N_HIFIGAN = 160
N_MLSA = 240
RESYNTH_FAMILIES = ("lyra", "hifigan-lj", "mlsa")


def gen_nii() -> list[Spoof]:
    root = SHARED_VOICE / "nii_vocoded_spoof"
    out = []
    with open(root / "labels.csv") as f:
        for row in csv.DictReader(f):
            if row["label"] != "spoof":
                continue
            path = root / row["file"]
            x = load(path if path.exists() else path.with_suffix(".flac"))
            gen = row["attack"].replace("vocoded_copy_synthesis_", "nii-").replace("vocoded_", "nii-")
            spk = f"arctic-{row['arctic_speaker']}" if row["arctic_speaker"].isalpha() else "nii-11463"
            for i, c in enumerate(chunks(x, 6.0, 1.5)):
                out.append(
                    Spoof(
                        f"{gen}-{Path(row['file']).stem}-{i}",
                        c,
                        "vc",
                        gen,
                        spk,
                        "nii_vocoded_spoof",
                        "BSD-3-Clause",
                    )
                )
    return out


def gen_resynth(pool: list[Raw], family: str) -> list[Spoof]:
    """Copy-synthesis of each clip of ``pool`` by one of :data:`RESYNTH_FAMILIES` (label ``vc``)."""
    from train import spoof_families as fam

    out = []
    for r in pool:
        rng = rng_for(f"{family}/{r.id}")
        x = trim(r.wave)[: int(5.0 * SR)]
        if family == "lyra":
            kbps = float(rng.choice(fam.LYRA_KBPS))
            y, how = fam.lyra(x, kbps), f"Lyra v2 at {kbps} kbit/s"
        elif family == "hifigan-lj":
            y, how = fam.hifigan_lj(x), "HiFi-GAN V3 (LJ Speech) copy-synthesis"
        else:
            ratio = 1.0 if rng.uniform() < 0.5 else float(rng.uniform(0.8, 1.25))
            y, how = fam.mlsa(x, rng, ratio), f"MLSA copy-synthesis, f0 x{ratio:.2f}"
        source = r.source if r.source in REAL_SOURCES else f"{how} of {r.source}"
        out.append(Spoof(f"{family}-{r.id}", y, "vc", family, r.speaker, source, r.licence))
    return out


def warp_envelope(sp: np.ndarray, alpha: float) -> np.ndarray:
    """Scale the frequency axis of a spectral envelope by ``alpha`` (formants move up if > 1)."""
    k = np.arange(sp.shape[1], dtype=np.float64)
    src = np.clip(k / alpha, 0, sp.shape[1] - 1)
    return np.stack([np.interp(src, k, row) for row in sp])


def gen_world(pool: list[Raw]) -> list[Spoof]:
    import pyworld as pw

    out = []
    for r in pool:
        rng = rng_for("world/" + r.id)
        x = r.wave.astype(np.float64)
        f0, t = pw.dio(x, SR, frame_period=5.0)
        f0 = pw.stonemask(x, f0, t, SR)
        sp = pw.cheaptrick(x, f0, t, SR)
        ap = pw.d4c(x, f0, t, SR)
        if rng.uniform() < 0.2:
            ratio, alpha = 1.0, 1.0
        else:
            ratio, alpha = float(rng.uniform(0.7, 1.45)), float(rng.uniform(0.88, 1.14))
            sp = warp_envelope(sp, alpha)
        y = pw.synthesize(f0 * ratio, sp, ap, SR, 5.0).astype(np.float32)
        out.append(
            Spoof(
                f"world-{r.id}",
                y,
                "vc",
                "world",
                r.speaker,
                f"WORLD resynthesis of {r.source} (f0 x{ratio:.2f}, formant x{alpha:.2f})",
                r.licence,
            )
        )
    return out


def griffin_lim(mag: np.ndarray, n_fft: int, hop: int, iters: int, rng: np.random.Generator) -> np.ndarray:
    phase = np.exp(2j * np.pi * rng.uniform(size=mag.shape))
    win = signal.get_window("hann", n_fft)
    y = np.zeros(1)
    for _ in range(iters):
        _, y = signal.istft(mag * phase, SR, win, n_fft, n_fft - hop)
        _, _, spec = signal.stft(y, SR, win, n_fft, n_fft - hop)
        spec = spec[:, : mag.shape[1]]
        if spec.shape[1] < mag.shape[1]:
            spec = np.pad(spec, ((0, 0), (0, mag.shape[1] - spec.shape[1])))
        phase = np.exp(1j * np.angle(spec))
    _, y = signal.istft(mag * phase, SR, win, n_fft, n_fft - hop)
    return y


def mel_matrix(n_mels: int, n_fft: int) -> np.ndarray:
    def hz2mel(f: np.ndarray) -> np.ndarray:
        return 2595 * np.log10(1 + f / 700)

    edges = 700 * (10 ** (np.linspace(0, hz2mel(np.array(SR / 2)), n_mels + 2) / 2595) - 1)
    freqs = np.linspace(0, SR / 2, n_fft // 2 + 1)
    m = np.zeros((n_mels, freqs.size))
    for i in range(n_mels):
        lo, c, hi = edges[i : i + 3]
        m[i] = np.clip(np.minimum((freqs - lo) / (c - lo), (hi - freqs) / (hi - c)), 0, None)
    return m


def resynthesise(wave: np.ndarray, key: str) -> tuple[np.ndarray, str]:
    """Griffin-Lim from the (mel-)magnitude of ``wave``; random settings seeded by ``key``."""
    rng = rng_for(key)
    n_fft = int(rng.choice([512, 1024]))
    hop = n_fft // 4
    iters = int(rng.integers(16, 64))
    win = signal.get_window("hann", n_fft)
    _, _, spec = signal.stft(wave.astype(np.float64), SR, win, n_fft, n_fft - hop)
    mag = np.abs(spec)
    how = "linear magnitude"
    if rng.uniform() < 0.5:  # through an 80-band mel spectrogram, as a mel TTS front end gives
        m = mel_matrix(80, n_fft)
        mag = np.clip(np.linalg.pinv(m) @ (m @ mag), 0, None)
        how = "80-band mel magnitude"
    y = griffin_lim(mag, n_fft, hop, iters, rng)[: wave.size].astype(np.float32)
    return y, f"Griffin-Lim ({iters} it, n_fft {n_fft}, {how})"


def gen_griffin_lim(pool: list[Raw]) -> list[Spoof]:
    out = []
    for r in pool:
        y, how = resynthesise(r.wave, "gl/" + r.id)
        out.append(Spoof(f"gl-{r.id}", y, "vc", "griffin-lim", r.speaker, f"{how} of {r.source}", r.licence))
    return out


def lpc_frames(x: np.ndarray, order: int, win: int, hop: int) -> tuple[np.ndarray, np.ndarray]:
    """All-pole coefficients ``a`` (frames, order + 1; a[0] = 1) and residual RMS per hop, by the
    autocorrelation method on Hann windows centred on each hop."""
    from scipy.linalg import solve_toeplitz

    pad = np.pad(x.astype(np.float64), (win // 2, win))
    w = signal.get_window("hann", win)
    n = x.size // hop + 1
    a = np.zeros((n, order + 1))
    g = np.zeros(n)
    for i in range(n):
        fr = pad[i * hop : i * hop + win] * w
        r = np.correlate(fr, fr, "full")[win - 1 : win + order]
        if r[0] < 1e-10:
            a[i, 0] = 1.0
            continue
        r[0] *= 1.0 + 1e-4  # white-noise correction keeps the filter stable
        c = solve_toeplitz(r[:order], r[1 : order + 1])
        a[i] = np.concatenate([[1.0], -c])
        g[i] = np.sqrt(max(r[0] - c @ r[1 : order + 1], 1e-12) / np.sum(w**2))
    return a, g


def lpc_vocode(
    x: np.ndarray, key: str, f0_track: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, str]:
    """Source-filter resynthesis with an LPC envelope and a synthetic excitation (pulses at the F0
    where voiced, noise elsewhere, optionally mixed), the classic vocoder of codecs and early voice
    conversion; random order, frame length, pitch shift and excitation seeded by ``key``.
    ``f0_track``: (frame times in s, F0 in Hz with 0 = unvoiced) of the source; WORLD's DIO and
    StoneMask (pyworld) track it when it is not given."""
    rng = rng_for(key)
    order = int(rng.integers(12, 25))
    win = int(rng.choice([320, 400, 512]))
    hop = int(rng.choice([80, 160]))
    ratio = 1.0 if rng.uniform() < 0.3 else float(rng.uniform(0.75, 1.35))
    mix = float(rng.uniform(0.0, 0.5))  # noise share in voiced frames
    xd = x.astype(np.float64)
    a, g = lpc_frames(xd, order, win, hop)
    if f0_track is None:
        import pyworld as pw

        f0, t = pw.dio(xd, SR, frame_period=1000 * hop / SR)
        f0 = pw.stonemask(xd, f0, t, SR)
    else:  # the nearest frame's value at each hop
        times, hz = f0_track
        at = np.arange(len(a)) * hop / SR
        f0 = np.asarray(hz, np.float64)[np.abs(at[:, None] - np.asarray(times)[None, :]).argmin(axis=1)]
    n = min(len(a), len(f0))
    f0s = np.repeat(f0[:n] * ratio, hop)
    phase = np.cumsum(np.where(f0s > 0, f0s, 0.0) / SR)
    pulses = (np.diff(np.floor(phase), prepend=0.0) > 0).astype(np.float64)
    noise = rng.standard_normal(n * hop)
    y = np.zeros(n * hop)
    zi = np.zeros(order)
    for i in range(n):
        seg = slice(i * hop, (i + 1) * hop)
        if f0[i] > 0:
            p = pulses[seg] * np.sqrt(SR / (f0[i] * ratio))  # unit power per sample
            e = np.sqrt(1 - mix) * p + np.sqrt(mix) * noise[seg]
        else:
            e = noise[seg]
        y[seg], zi = signal.lfilter([g[i]], a[i], e, zi=zi * (g[i] > 0))
    y = y[: x.size]
    y = y / (np.max(np.abs(y)) + 1e-9) * np.max(np.abs(x))
    how = f"LPC vocoder (order {order}, window {win}, hop {hop}, f0 x{ratio:.2f}, noise mix {mix:.2f})"
    return y.astype(np.float32), how


def gen_lpc(pool: list[Raw]) -> list[Spoof]:
    out = []
    for r in pool:
        y, how = lpc_vocode(r.wave, "lpc/" + r.id)
        out.append(Spoof(f"lpc-{r.id}", y, "vc", "lpc-vocoder", r.speaker, f"{how} of {r.source}", r.licence))
    return out
