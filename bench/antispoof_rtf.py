"""Anti-spoofing real-time factor (engine only, no HTTP) on 5, 10 and 30 s of 16 kHz speech.

    python -m bench.antispoof_rtf [--repeats 10]

Prints the median wall time of each stage (VAD speech check, spectrogram, utterance cues, CAM++
front statistics, Whisper base layer statistics, network)
and of the whole ``AntiSpoof.evaluate``, and the RTF = median time / audio duration, in wall clock
and in CPU seconds of this process (all threads) per second of audio.
``VERILIVE_ONNX_SPINNING=true`` measures with onnxruntime's busy-waiting threads (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench._common import summary
from bench.voice_template_rtf import ten_seconds
from verilive.audio import Audio
from verilive.config import Settings
from verilive.models.sessions import ModelRegistry
from verilive.voice.antispoof import AntiSpoof, features
from verilive.voice.utterance_cues import utterance_features
from verilive.voice.vad import MODEL_ID, SileroVad


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    registry = ModelRegistry(Settings(), ids=[MODEL_ID])
    anti = AntiSpoof(registry=registry, vad=SileroVad.from_registry(registry))
    speech = ten_seconds()
    for seconds in (5, 10, 30):
        x = np.tile(speech, 3)[: seconds * 16000]
        audio = Audio(x.reshape(-1, 1), 16000)
        anti.evaluate(audio)  # warm-up
        names = ("vad", "spectrogram", "cues", "campplus-fcm", "whisper", "networks", "total")
        stages: dict[str, list[float]] = {k: [] for k in names}
        cpu: list[float] = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            anti.speech_seconds(x, 16000)
            t1 = time.perf_counter()
            f = features(x, anti.frontend)
            t2 = time.perf_counter()
            c = utterance_features(x)
            t3 = time.perf_counter()
            s = anti.fcm_frames(x)
            t4 = time.perf_counter()
            w = anti.whisper_features(x)
            t4w = time.perf_counter()
            anti.logits(f, c, s, w)
            t5 = time.perf_counter()
            c5 = time.process_time()
            anti.evaluate(audio)
            t6 = time.perf_counter()
            cpu.append(time.process_time() - c5)
            times = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4w - t4, t5 - t4w, t6 - t5)
            for k, dt in zip(stages, times, strict=True):
                stages[k].append(dt * 1000)
        print(f"{seconds} s of speech")
        for k, v in stages.items():
            print(f"  {k:<12} ms: {summary(v)}")
        print(
            f"  RTF (median total / duration): {np.median(stages['total']) / (seconds * 1000):.4f} wall, "
            f"{np.median(cpu) / seconds:.4f} CPU"
        )


if __name__ == "__main__":
    main()
