"""Constants and separation of the multiple-speakers detector score (docs/voice.md#multiple-speakers).

    python -m eval.multispeaker [--data DIR]

The score embeds 2 s windows (hop 1 s) of a recording's speech and takes q = the 10th
percentile of the pairwise cosine similarities. For single-speaker recordings q is high; when
a second speaker is present, the cross-speaker pairs pull it down. This script measures q on
LibriSpeech single-speaker utterances (>= 8 s) and on two-speaker recordings made by joining
the first 6 s of two different speakers, prints the medians that become MS_SAME_SIM and
MS_DIFF_SIM, the detection EER of the resulting score, and plots docs/multispeaker.png.

It then checks the diarization refinement (VoiceEngine.multiple_speakers_score) against the window
score alone on harder cases: a second speaker who says only 2.5 s after 8 s of the first, and a
dialogue of 2 s turns. It prints the share flagged at the recommended maximum 0.5.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import soundfile as sf
from common.metrics import eer
from common.repo import data_root

from verilive.audio import Audio
from verilive.config import Settings
from verilive.models.sessions import ModelRegistry
from verilive.voice.engine import VoiceEngine

DOCS = Path(__file__).resolve().parents[1] / "docs"


def q10(engine: VoiceEngine, x: np.ndarray, sr: int) -> float | None:
    return engine.window_similarity(engine.analyse(Audio(x.reshape(-1, 1), sr)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None)
    args = ap.parse_args()
    files = sorted((data_root(args.data) / "voice/librispeech_251spk_gender").glob("*.flac"))
    engine = VoiceEngine.from_registry(ModelRegistry(Settings()))
    waves = []
    for f in files:
        x, sr = sf.read(f, dtype="float32")
        if x.size >= 8 * sr:
            waves.append(x)
    sr = 16000
    single = [q for x in waves if (q := q10(engine, x, sr)) is not None]
    rng = np.random.default_rng(20240601)
    two = []
    for _ in range(len(single)):
        i, j = rng.choice(len(waves), 2, replace=False)
        q = q10(engine, np.concatenate([waves[i][: 6 * sr], waves[j][: 6 * sr]]), sr)
        if q is not None:
            two.append(q)
    same, diff = float(np.median(single)), float(np.median(two))
    print(f"single-speaker recordings: {len(single)}, median q10 {same:.3f} (MS_SAME_SIM)")
    print(f"two-speaker recordings:    {len(two)}, median q10 {diff:.3f} (MS_DIFF_SIM)")
    scores_1 = np.clip((same - np.array(single)) / (same - diff), 0, 1)
    scores_2 = np.clip((same - np.array(two)) / (same - diff), 0, 1)
    e, thr = eer(
        np.concatenate([scores_2, scores_1]), np.r_[np.ones(len(two), bool), np.zeros(len(single), bool)]
    )
    print(f"detection EER of the score: {100 * e:.2f} % at score {thr:.2f}")
    for t in (0.3, 0.5, 0.7):
        flagged, caught = np.mean(scores_1 > t), np.mean(scores_2 > t)
        print(f"  threshold {t}: single flagged {flagged:.1%}, two-speaker caught {caught:.1%}")
    refinement(engine, waves, sr, rng)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bins = np.linspace(-0.2, 1.0, 49)
    ax.hist(single, bins, alpha=0.6, label="one speaker")
    ax.hist(two, bins, alpha=0.6, label="two speakers")
    ax.axvline(same, color="C0", ls="--")
    ax.axvline(diff, color="C1", ls="--")
    ax.set(xlabel="10th percentile of 2 s window similarities", ylabel="recordings")
    ax.legend()
    fig.tight_layout()
    fig.savefig(DOCS / "multispeaker.png", dpi=120)
    print(f"wrote {DOCS / 'multispeaker.png'}")


def refinement(engine: VoiceEngine, waves: list[np.ndarray], sr: int, rng: np.random.Generator) -> None:
    n = min(120, len(waves))
    cases: dict[str, list[np.ndarray]] = {"one speaker": [], "8 s + 2.5 s": [], "dialogue 2 s turns": []}
    for _ in range(n):
        i, j = rng.choice(len(waves), 2, replace=False)
        a, b = waves[i], waves[j]
        cases["one speaker"].append(a)
        cases["8 s + 2.5 s"].append(np.concatenate([a[: 8 * sr], b[: int(2.5 * sr)]]))
        turns = [w[t * 2 * sr : (t + 1) * 2 * sr] for t in range(3) for w in (a, b)]
        cases["dialogue 2 s turns"].append(np.concatenate(turns))
    print(f"flagged at score > 0.5 ({n} recordings per case): window score / refined with diarization")
    for name, xs in cases.items():
        window, refined = [], []
        for x in xs:
            an = engine.analyse(Audio(x.reshape(-1, 1), sr))
            window.append(engine.window_score(an))
            refined.append(engine.multiple_speakers_score(an))
        print(
            f"  {name:20s} {np.mean(np.array(window) > 0.5):6.1%} / {np.mean(np.array(refined) > 0.5):6.1%}"
        )


if __name__ == "__main__":
    main()
