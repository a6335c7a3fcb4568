"""How verification accuracy depends on speech length and on noise: the evidence behind the
recommended quality-check thresholds (docs/voice.md#recommended-thresholds).

    python -m eval.quality_thresholds [--data DIR]

On the LibriSpeech half trials of eval/trials.py (251 targets, 31,375 non-targets):
- length: both halves cut to their first D seconds, EER per D;
- noise: the B half (the probe) gets voice-band white noise at a given SNR, the A half
  (enrolment) stays clean; EER per SNR, and the SNR verilive measures on the noisy probes.
Writes docs/quality_thresholds.png and prints the tables.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from common.metrics import eer
from common.repo import data_root

from eval.trials import Snippet, build_trials
from verilive.audio import Audio
from verilive.config import Settings
from verilive.models.sessions import ModelRegistry
from verilive.voice.engine import NoSpeech, VoiceEngine

DURATIONS_S = (1.0, 1.5, 2.0, 3.0, 5.0)
SNRS_DB = (0.0, 5.0, 10.0, 15.0, 20.0)
DOCS = Path(__file__).resolve().parents[1] / "docs"


def voice_band_noise(n: int, sr: int, rng: np.random.Generator) -> np.ndarray:
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / sr)
    spec[(f < 300) | (f > 3400)] = 0
    return np.fft.irfft(spec, n=n).astype(np.float32)


def band_power(x: np.ndarray, sr: int) -> float:
    spec = np.fft.rfft(x)
    f = np.fft.rfftfreq(x.size, 1 / sr)
    spec[(f < 300) | (f > 3400)] = 0
    return float(np.mean(np.fft.irfft(spec, n=x.size) ** 2))


def unit(engine: VoiceEngine, x: np.ndarray, sr: int) -> np.ndarray | None:
    try:
        t = engine.create_template(Audio(x.reshape(-1, 1), sr))
    except NoSpeech:
        return None
    return t.unit()


def scores_for(pairs: list[tuple[int, int, bool]], a: dict[int, np.ndarray], b: dict[int, np.ndarray]):
    s, y = [], []
    for i, j, target in pairs:
        if i in a and j in b:
            s.append(float(a[i] @ b[j]))
            y.append(target)
    return np.array(s), np.array(y, bool)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None)
    args = ap.parse_args()
    root = data_root(args.data)
    trials = [t for t in build_trials(root) if t.subset in ("ls-half", "ls-nontarget")]
    halves_a = sorted({t.a for t in trials})
    halves_b = sorted({t.b for t in trials})
    idx_a = {s: k for k, s in enumerate(halves_a)}
    idx_b = {s: k for k, s in enumerate(halves_b)}
    pairs = [(idx_a[t.a], idx_b[t.b], t.target) for t in trials]
    engine = VoiceEngine.from_registry(ModelRegistry(Settings()))
    wave = {s: s.load(root) for s in (*halves_a, *halves_b)}

    def embed_all(snips: list[Snippet], transform) -> dict[int, np.ndarray]:
        out = {}
        for k, s in enumerate(snips):
            x = transform(wave[s], s.sample_rate)
            if x is None:
                continue
            u = unit(engine, x, s.sample_rate)
            if u is not None:
                out[k] = u
        return out

    length_rows = []
    for d in DURATIONS_S:

        def cut(x: np.ndarray, sr: int, d: float = d) -> np.ndarray | None:
            n = int(d * sr)
            return x[:n] if x.size >= n else None

        s, y = scores_for(pairs, embed_all(halves_a, cut), embed_all(halves_b, cut))
        length_rows.append((d, 100 * eer(s, y)[0], int(y.sum()), int((~y).sum())))
        print(
            f"length {d:4.1f} s: EER {length_rows[-1][1]:.2f} % ({length_rows[-1][2]} / {length_rows[-1][3]})"
        )

    clean_a = embed_all(halves_a, lambda x, sr: x)
    rng = np.random.default_rng(20240601)
    snr_rows = []
    for snr in (*SNRS_DB, None):
        measured = []

        def noisy(
            x: np.ndarray, sr: int, snr: float | None = snr, measured: list[float] = measured
        ) -> np.ndarray:
            if snr is None:
                return x
            noise = voice_band_noise(x.size, sr, rng)
            noise *= np.sqrt(band_power(x, sr) / 10 ** (snr / 10) / np.mean(noise**2))
            y = x + noise
            measured.append(engine.snr(Audio(y.reshape(-1, 1), sr)))
            return y

        s, y = scores_for(pairs, clean_a, embed_all(halves_b, noisy))
        label = "clean" if snr is None else f"{snr:.0f} dB"
        med = float(np.median(measured)) if measured else float("nan")
        snr_rows.append((label, 100 * eer(s, y)[0], med))
        print(f"probe SNR {label:>6}: EER {snr_rows[-1][1]:.2f} %, verilive measures median {med:.1f} dB")

    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].plot([r[0] for r in length_rows], [r[1] for r in length_rows], "o-")
    ax[0].set(xlabel="speech per side (s)", ylabel="EER (%)", title="EER against speech length")
    ax[0].grid(True, alpha=0.3)
    xs = [r[2] if r[0] != "clean" else 40 for r in snr_rows]
    ax[1].plot(xs, [r[1] for r in snr_rows], "o-")
    ax[1].set(xlabel="probe SNR measured by verilive (dB; clean plotted at 40)", ylabel="EER (%)")
    ax[1].set_title("EER against probe noise (clean enrolment)")
    ax[1].grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(DOCS / "quality_thresholds.png", dpi=120)
    print(f"wrote {DOCS / 'quality_thresholds.png'}")


if __name__ == "__main__":
    main()
