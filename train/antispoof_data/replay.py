"""Simulated rooms: loudspeaker replay of bona fide speech, and its far-field recording."""

from __future__ import annotations

import numpy as np
from scipy import signal

from train.antispoof_data.clips import SR, Raw, Spoof, rng_for
from train.antispoof_data.finishing import coloured_noise
from train.antispoof_data.vocoded import resynthesise

N_FAR_FIELD = 160  # sources recorded again far from the microphone: as bona fide, and Griffin-Lim of it
N_REPLAY_PER_CONDITION = 180


REPLAY = {
    # loudspeaker high-pass / low-pass (Hz), drive of the soft clipper, room RT60 (s), room size (m)
    "replay-phone": dict(hp=(300, 650), lp=(4500, 7000), drive=(1.5, 4.0), rt60=(0.15, 0.45), size=(3, 5)),
    "replay-laptop": dict(hp=(150, 320), lp=(6000, 7800), drive=(1.0, 2.5), rt60=(0.25, 0.6), size=(3, 7)),
    "replay-hifi": dict(hp=(45, 110), lp=(7600, 7900), drive=(0.3, 1.0), rt60=(0.3, 0.9), size=(4, 10)),
}


def room_rirs(cond: str, n: int, params: dict[str, tuple[float, float]] | None = None) -> list[np.ndarray]:
    """``n`` image-source room impulse responses, seeded by ``cond``; rooms of ``REPLAY[cond]``
    unless ``params`` gives rt60, size and, optionally, the source-microphone distance (m)."""
    import pyroomacoustics as pra

    p = params or REPLAY[cond]
    rng = rng_for("rir/" + cond)
    out = []
    while len(out) < n:
        dims = np.array([rng.uniform(*p["size"]), rng.uniform(*p["size"]), rng.uniform(2.4, 3.2)])
        rt60 = rng.uniform(*p["rt60"])
        try:
            e_abs, max_order = pra.inverse_sabine(rt60, dims)
        except ValueError:
            continue
        room = pra.ShoeBox(dims, fs=SR, materials=pra.Material(e_abs), max_order=min(max_order, 12))
        src = dims * rng.uniform(0.2, 0.8, 3)
        d = rng.uniform(*p.get("distance", (0.3, 2.0)))
        direction = rng.standard_normal(3)
        mic = np.clip(src + d * direction / np.linalg.norm(direction), 0.1, dims - 0.1)
        room.add_source(src)
        room.add_microphone(mic)
        room.compute_rir()
        h = np.asarray(room.rir[0][0], dtype=np.float64)
        out.append(h / (np.max(np.abs(h)) + 1e-12))
    return out


def peaking(f0: float, gain_db: float, q: float) -> tuple[np.ndarray, np.ndarray]:
    a = 10 ** (gain_db / 40)
    w = 2 * np.pi * f0 / SR
    alpha = np.sin(w) / (2 * q)
    b = np.array([1 + alpha * a, -2 * np.cos(w), 1 - alpha * a])
    den = np.array([1 + alpha / a, -2 * np.cos(w), 1 - alpha / a])
    return b / den[0], den / den[0]


def replay_one(x: np.ndarray, cond: str, rir: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    p = REPLAY[cond]
    y = x.astype(np.float64) / (np.max(np.abs(x)) + 1e-9)
    hp, lp = rng.uniform(*p["hp"]), rng.uniform(*p["lp"])
    y = signal.sosfilt(signal.butter(int(rng.integers(2, 5)), hp, "highpass", fs=SR, output="sos"), y)
    y = signal.sosfilt(signal.butter(int(rng.integers(3, 7)), lp, "lowpass", fs=SR, output="sos"), y)
    for _ in range(int(rng.integers(1, 4))):  # cone/cabinet resonances
        b, a = peaking(rng.uniform(hp * 1.5, min(lp, 7000)), rng.uniform(-7, 7), rng.uniform(1.0, 4.0))
        y = signal.lfilter(b, a, y)
    g = rng.uniform(*p["drive"])
    y = np.tanh(g * y / (np.max(np.abs(y)) + 1e-9)) / np.tanh(g)
    y = y + rng.uniform(0, 0.05) * y**2  # even-order distortion
    y = signal.fftconvolve(y, rir)[: x.size]
    y = signal.sosfilt(signal.butter(2, rng.uniform(40, 120), "highpass", fs=SR, output="sos"), y)
    snr = rng.uniform(15, 40)
    n = coloured_noise(y.size, rng)
    return (y + n * np.sqrt(np.mean(y**2) / 10 ** (snr / 10))).astype(np.float32)


def gen_replay(pool: list[Raw], cond: str) -> list[Spoof]:
    rirs = room_rirs(cond, 40)
    out = []
    for r in pool:
        rng = rng_for(cond + "/" + r.id)
        y = replay_one(r.wave, cond, rirs[int(rng.integers(len(rirs)))], rng)
        out.append(
            Spoof(
                f"{cond}-{r.id}", y, "replay", cond, r.speaker, f"simulated replay of {r.source}", r.licence
            )
        )
    return out


FAR_FIELD = dict(rt60=(0.2, 0.8), size=(3, 8), distance=(0.7, 3.0))


def gen_far_field(pool: list[Raw]) -> list[Spoof]:
    """Real speech as a distant microphone in a room hears it (bona fide, generator ``far-field``),
    and Griffin-Lim of that recording (``griffin-lim``). Meeting speech has its phase smeared by the
    room already, so phase reconstruction changes it less than it changes close-talk speech; with
    both sides from the same rooms, the room itself is no cue."""
    rirs = room_rirs("far-field", 40, FAR_FIELD)
    out = []
    for r in pool:
        rng = rng_for("far-field/" + r.id)
        y = signal.fftconvolve(r.wave.astype(np.float64), rirs[int(rng.integers(len(rirs)))])[: r.wave.size]
        y = (y / (np.max(np.abs(y)) + 1e-9) * np.max(np.abs(r.wave))).astype(np.float32)
        src = f"{r.source} through a simulated room (far-field microphone)"
        out.append(Spoof(f"room-{r.id}", y, "bonafide", "far-field", r.speaker, src, r.licence))
        g, how = resynthesise(y, "gl/room-" + r.id)
        out.append(Spoof(f"gl-room-{r.id}", g, "vc", "griffin-lim", r.speaker, f"{how} of {src}", r.licence))
    return out
