"""Real-time factor of the Whisper encoders (front end + encoder), in process, on real speech.

    python -m bench.whisper_rtf [--repeats 10]

For 2, 5 and 10 s of LibriSpeech speech (shared/data/voice), prints the median wall time over the clip
length for tiny.en and base, with onnxruntime on the registry's default threads.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import soundfile as sf

from bench._common import SHARED
from verilive.models.sessions import ModelRegistry
from verilive.voice.whisper import BASE_MODEL_ID, TINY_EN_MODEL_ID, WhisperEncoder

SPEECH = SHARED / "data" / "voice" / "librispeech_251spk_gender"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    audio = np.concatenate([sf.read(p, dtype="float32")[0] for p in sorted(SPEECH.glob("*.flac"))[:6]])
    for model in (TINY_EN_MODEL_ID, BASE_MODEL_ID):
        enc = WhisperEncoder.from_registry(ModelRegistry(ids=[model]), model)
        for seconds in (2, 5, 10):
            clip = audio[: seconds * 16000]
            enc.layers(clip)  # warm-up
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                enc.layers(clip)
                times.append(time.perf_counter() - t0)
            print(f"{model:26s} {seconds:2d} s: RTF {statistics.median(times) / seconds:.4f}")


if __name__ == "__main__":
    main()
