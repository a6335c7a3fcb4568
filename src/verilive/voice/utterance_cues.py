"""Utterance-level excitation and phase cues for voice anti-spoofing (numpy only).

Resynthesis (a vocoder such as WORLD, or phase reconstruction such as Griffin-Lim) keeps the
short-time magnitude of speech but not its phase, so a magnitude spectrogram barely shows it. These
32 statistics of one utterance measure what it changes (docs/antispoof.md):

* ``spec`` (6): spectral flatness of 4-8 kHz and 0.1-4 kHz, level of 4-8 kHz relative to 0-4 kHz;
* ``exc`` (7): autocorrelation F0 and voicing (voiced fraction, voicing strength, an HNR-like
  ratio, jitter, log-F0 spread, H1-H2);
* ``rps`` (10): relative phase shift RPS_k = phi_k - k * phi_1 of harmonics 2..6: its stability
  between adjacent voiced frames and its concentration over the utterance (a glottal pulse keeps
  these phases in a fixed relation; Griffin-Lim loses it, a pulse-train vocoder makes it too rigid);
* ``ifd`` (5): instantaneous-frequency deviation at the strongest spectral peaks (phase advance
  between frames against the interpolated peak frequency): reconstructed phase is inconsistent;
* ``mod`` (4): modulation spectrum of band energies, fast and mid against slow modulation.

A value that cannot be measured (e.g. no voiced frames) is NaN; the model replaces it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

__all__ = ["FEATURE_NAMES", "utterance_features"]

SR = 16000
N_FFT, HOP = 512, 128  # 32 ms Hann, 75 % overlap: phase advance per hop is unambiguous near peaks
# 50 ms frames, 10 ms hop: the window-corrected autocorrelation is reliable up to about a third of
# the window (Boersma), so the lowest F0 is 70 Hz (lag 229 of 800).
F0_WIN, F0_HOP = 800, 160
F0_MIN, F0_MAX = 70.0, 400.0
VOICED_R = 0.45  # normalised autocorrelation peak above this: voiced (chosen on the validation speakers)
OCTAVE_COST = 0.02  # per octave of lag (as in Boersma's tracker): prefer one period to two
N_HARM = 6
MAX_IFD_FRAMES = 300  # the IF deviation is sampled on at most this many frames per utterance
STFT_CHUNK = 200  # STFT frames analysed at a time
F0_CHUNK = 200  # F0 frames analysed at a time (a 30 s clip at once held about 120 MiB; 400: +6 MiB)

FEATURE_NAMES: tuple[str, ...] = (
    *("flat_hi_mean", "flat_hi_std", "flat_lo_mean", "hi_ratio_mean", "hi_ratio_std", "hi_ratio_p90"),
    *("ifd_lo_median", "ifd_lo_wmean", "ifd_lo_frac_big", "ifd_hi_median", "ifd_hi_frac_big"),
    *("mod_mid_lo", "mod_fast_lo", "mod_mid_hi", "mod_fast_hi"),
    *("voiced_frac", "v_mean", "v_std", "hnr_mean", "jitter", "f0_logstd", "h1h2_mean"),
    *(f"rps{k}_{s}" for k in range(2, N_HARM + 1) for s in ("stab", "conc")),
)


def princarg(p: np.ndarray) -> np.ndarray:
    return np.angle(np.exp(1j * p))


def frames(x: np.ndarray, win: int, hop: int) -> np.ndarray:
    n = 1 + max(0, x.size - win) // hop
    return np.lib.stride_tricks.as_strided(x, (n, win), (x.strides[0] * hop, x.strides[0]), writeable=False)


def active(energy_db: np.ndarray, below: float) -> np.ndarray:
    return energy_db > energy_db.max() - below


def spec_frame_values(p: np.ndarray) -> np.ndarray:
    """(frames, 3): upper-band flatness, lower-band flatness and upper/lower level ratio (dB) of
    each frame of ``p``, power (frames, bins)."""
    lo, hi = np.ascontiguousarray(p[:, 3:128]), np.ascontiguousarray(p[:, 128:256])  # ~100 Hz-4 kHz, 4-8 kHz
    eps = 1e-12
    flat_hi = np.exp(np.mean(np.log(hi + eps), axis=1)) / (np.mean(hi, axis=1) + eps)
    flat_lo = np.exp(np.mean(np.log(lo + eps), axis=1)) / (np.mean(lo, axis=1) + eps)
    ratio = 10 * np.log10((hi.sum(axis=1) + eps) / (lo.sum(axis=1) + eps))
    return np.stack([flat_hi, flat_lo, ratio], axis=1)


def spec_features(values: np.ndarray, act: np.ndarray) -> dict[str, float]:
    """Flatness and level of the upper band over the active frames (``values``: spec_frame_values)."""
    flat_hi, flat_lo, ratio = (np.ascontiguousarray(values[act, i]) for i in range(3))
    return {
        "flat_hi_mean": float(np.mean(flat_hi)),
        "flat_hi_std": float(np.std(flat_hi)),
        "flat_lo_mean": float(np.mean(flat_lo)),
        "hi_ratio_mean": float(np.mean(ratio)),
        "hi_ratio_std": float(np.std(ratio)),
        "hi_ratio_p90": float(np.percentile(ratio, 90)),
    }


def ifd_features(spectra: Callable[[np.ndarray], np.ndarray], act: np.ndarray) -> dict[str, float]:
    """Phase-vocoder frequency vs interpolated peak frequency (in bins) at the strongest peaks;
    ``spectra(rows)``: the spectrum of those STFT frames (only the sampled frames are computed)."""
    t_idx = np.flatnonzero(act[1:] & act[:-1]) + 1  # frame t and t-1 both active
    t_idx = t_idx[:: max(1, len(t_idx) // MAX_IFD_FRAMES)]
    names = ("ifd_lo_median", "ifd_lo_wmean", "ifd_lo_frac_big", "ifd_hi_median", "ifd_hi_frac_big")
    if t_idx.size == 0:
        return dict.fromkeys(names, np.nan)
    cur, prev = spectra(t_idx), spectra(t_idx - 1)
    m = np.log(np.abs(cur) + 1e-9)  # (frames, bins)
    top = m.max(axis=1, keepdims=True)
    inner = m[:, 2:-2]
    peak = (inner > m[:, 1:-3]) & (inner >= m[:, 3:-1]) & (inner > top - 3.0 * 2.3)  # within 30 dB
    # the 20 strongest peaks of each frame (fewer if it has fewer)
    ranked = np.where(peak, inner, -np.inf)
    order = np.argsort(-ranked, axis=1, kind="stable")[:, :20]
    valid = np.take_along_axis(peak, order, axis=1)
    k = order + 2
    rows = np.arange(len(t_idx))[:, None]
    a, b, c = m[rows, k - 1], m[rows, k], m[rows, k + 1]
    den = a - 2 * b + c
    delta = np.where(np.abs(den) > 1e-9, 0.5 * (a - c) / np.where(den == 0, 1, den), 0.0)
    dphi = princarg(
        np.angle(np.take_along_axis(cur, k, axis=1))
        - np.angle(np.take_along_axis(prev, k, axis=1))
        - 2 * np.pi * k * HOP / N_FFT
    )
    f_phase = k + dphi * N_FFT / (2 * np.pi * HOP)
    dev = np.abs(f_phase - (k + np.clip(delta, -0.5, 0.5)))
    low = valid & (k < 128)
    high = valid & (k >= 128)
    lo, hi, w = dev[low], dev[high], np.exp(b - top)[low]
    if not valid.any():
        return dict.fromkeys(names, np.nan)
    return {
        "ifd_lo_median": float(np.median(lo)) if lo.size else np.nan,
        "ifd_lo_wmean": float(np.sum(lo * w) / (np.sum(w) + 1e-12)) if lo.size else np.nan,
        "ifd_lo_frac_big": float(np.mean(lo > 0.25)) if lo.size else np.nan,
        "ifd_hi_median": float(np.median(hi)) if hi.size else np.nan,
        "ifd_hi_frac_big": float(np.mean(hi > 0.25)) if hi.size else np.nan,
    }


BAND_EDGES = (3, 16, 32, 64, 96, 128, 176, 256)  # ~100 Hz .. 8 kHz


def band_sums(p: np.ndarray) -> np.ndarray:
    """(frames, 7) power of each modulation band in each frame of ``p``, power (frames, bins)."""
    return np.stack(
        [np.ascontiguousarray(p[:, a:b]).sum(axis=1) for a, b in itertools.pairwise(BAND_EDGES)], 1
    )


def mod_features(sums: np.ndarray, act: np.ndarray) -> dict[str, float]:
    """Modulation spectrum of 7 band log energies over the active stretch (frame rate 125 Hz);
    ``sums``: :func:`band_sums` of every frame."""
    idx = np.flatnonzero(act)
    seg = sums[idx[0] : idx[-1] + 1]
    if seg.shape[0] < 64:
        return {k: np.nan for k in ("mod_mid_lo", "mod_fast_lo", "mod_mid_hi", "mod_fast_hi")}
    bands = np.log(np.ascontiguousarray(seg.T) + 1e-10)
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


def f0_track(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(F0 Hz, voicing strength) of 50 ms frames every 10 ms; normalised autocorrelation
    (Boersma's correction for the window's own autocorrelation), octave cost, parabolic peak
    interpolation. Frames are taken F0_CHUNK at a time, so memory does not grow with the clip."""
    fr = frames(x, F0_WIN, F0_HOP)
    w = np.hanning(F0_WIN)
    n = 1152  # >= F0_WIN + the longest lag used (SR / F0_MIN + 1): no circular wrap-around
    rw = np.fft.irfft(np.abs(np.fft.rfft(w, n)) ** 2, n)[:F0_WIN]
    lo, hi = int(SR / F0_MAX), int(SR / F0_MIN)
    # Octave cost: a periodic signal correlates as well at two periods as at one; prefer the shorter lag.
    cost = OCTAVE_COST * np.log2(np.arange(lo, hi + 1) / lo)
    f0, strength = np.empty(len(fr)), np.empty(len(fr))
    for start in range(0, len(fr), F0_CHUNK):
        xf = windowed(fr[start : start + F0_CHUNK], w)
        r = np.fft.irfft(np.abs(np.fft.rfft(xf, n, axis=1)) ** 2, n, axis=1)[:, :F0_WIN]
        r = r / (r[:, :1] + 1e-12) / (rw / rw[0])
        k = np.argmax(r[:, lo : hi + 1] - cost, axis=1) + lo
        rows = np.arange(len(k))
        a, b, c = r[rows, k - 1], r[rows, k], r[rows, np.minimum(k + 1, F0_WIN - 1)]
        den = a - 2 * b + c
        delta = np.clip(
            np.where(np.abs(den) > 1e-9, 0.5 * (a - c) / np.where(den == 0, 1, den), 0.0), -0.5, 0.5
        )
        f0[start : start + len(k)] = SR / (k + delta)
        strength[start : start + len(k)] = np.clip(b - 0.25 * (a - c) * delta, 0, 1)
    return f0, strength


def windowed(fr: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Frames with their mean removed, times the window."""
    return (fr - fr.mean(axis=1, keepdims=True)) * w


def exc_rps_features(x: np.ndarray) -> dict[str, float]:
    f0, v = f0_track(x)
    fr = frames(x, F0_WIN, F0_HOP)
    # a block of frames at a time: fr**2 of a 30 s clip at once was 15 MiB
    power = np.empty(len(fr))
    for a in range(0, len(fr), F0_CHUNK):
        power[a : a + F0_CHUNK] = np.mean(fr[a : a + F0_CHUNK] ** 2, axis=1)
    e = 10 * np.log10(power + 1e-12)
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
    # harmonic k: step**k (one cos/sin, not six); single precision is ample for phases
    hk = np.empty((vi.size, N_HARM), np.complex64)
    w = np.hanning(F0_WIN)
    for start in range(0, vi.size, F0_CHUNK):
        rows = vi[start : start + F0_CHUNK]
        theta = ((2 * np.pi / SR) * f0[rows, None] * n[None, :]).astype(np.float32)
        step = np.empty(theta.shape, np.complex64)
        step.real, step.imag = np.cos(theta), -np.sin(theta)
        term = windowed(fr[rows], w).astype(np.complex64)
        for j in range(N_HARM):
            term *= step
            hk[start : start + len(rows), j] = term.sum(axis=1)
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


def feature_dict(x: np.ndarray) -> dict[str, float]:
    """The cues of one mono 16 kHz utterance by name (NaN where not measurable)."""
    x = np.asarray(x, dtype=np.float64)
    if x.size < F0_WIN:  # shorter than one analysis frame: pad with silence
        x = np.pad(x, (0, F0_WIN - x.size))
    x = x - x.mean()
    x = x / (np.sqrt(np.mean(x**2)) + 1e-9)  # level-invariant
    fr = frames(x, N_FFT, HOP)
    window = np.hanning(N_FFT)

    def spectra(rows: np.ndarray | slice) -> np.ndarray:
        return np.fft.rfft(fr[rows] * window, axis=1)

    # The STFT a block of frames at a time, keeping only what the cues need of each frame: a
    # 30 s clip at once held about 50 MiB (issue 46).
    energy, values, sums = np.empty(len(fr)), np.empty((len(fr), 3)), np.empty((len(fr), 7))
    for a in range(0, len(fr), STFT_CHUNK):
        p = np.abs(spectra(slice(a, a + STFT_CHUNK))) ** 2
        energy[a : a + len(p)] = p.sum(axis=1)
        values[a : a + len(p)] = spec_frame_values(p)
        sums[a : a + len(p)] = band_sums(p)
    act = active(10 * np.log10(energy + 1e-12), 40.0)
    return (
        spec_features(values, act)
        | ifd_features(spectra, act)
        | mod_features(sums, act)
        | exc_rps_features(x)
    )


def utterance_features(wave16k: np.ndarray) -> np.ndarray:
    """(32,) float32 cues of one mono 16 kHz utterance, in :data:`FEATURE_NAMES` order."""
    d = feature_dict(wave16k)
    return np.array([d.get(k, np.nan) for k in FEATURE_NAMES], dtype=np.float32)
