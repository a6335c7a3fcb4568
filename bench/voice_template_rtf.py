"""Template creation real-time factor on 10 s of 16 kHz speech (engine only, no HTTP).

    python -m bench.voice_template_rtf [--repeats 30] [--one-model]

Prints the median wall time per stage and the RTF = time / audio duration. A wideband template has
two views: the wideband one from ``campplus`` and the telephone one from ``campplus_tel``;
``--one-model`` makes both with ``campplus`` in one batch of two (before the adapted model, for
comparison).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import soundfile as sf

from bench._common import SHARED, summary
from verilive.audio import Audio
from verilive.config import Settings
from verilive.models.sessions import ModelRegistry
from verilive.voice.engine import VoiceEngine

LIBRI = SHARED / "data/voice/librispeech_251spk_gender"


def ten_seconds() -> np.ndarray:
    """10 s of real read speech: LibriSpeech utterances joined."""
    parts, total = [], 0
    for f in sorted(LIBRI.glob("*.flac")):
        x, sr = sf.read(f, dtype="float32")
        assert sr == 16000
        parts.append(x)
        total += x.size
        if total >= 160000:
            break
    return np.concatenate(parts)[:160000]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--one-model", action="store_true", help="telephone views from campplus too")
    args = ap.parse_args()
    engine = VoiceEngine.from_registry(ModelRegistry(Settings()))
    if args.one_model:
        engine.tel_embedder = engine.embedder
    audio = Audio(ten_seconds().reshape(-1, 1), 16000)
    engine.create_template(audio)  # warm-up: session init, allocations
    vad, embed, total = [], [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        a = engine.analyse(audio)
        t1 = time.perf_counter()
        engine.create_template(audio, analysis=a)
        t2 = time.perf_counter()
        vad.append((t1 - t0) * 1000)
        embed.append((t2 - t1) * 1000)
        total.append((t2 - t0) * 1000)
    print(f"VAD        ms: {summary(vad)}")
    print(f"embedding  ms: {summary(embed)}")
    print(f"total      ms: {summary(total)}")
    print(f"RTF (median total / 10 s): {np.median(total) / 10000:.4f}")


if __name__ == "__main__":
    main()
