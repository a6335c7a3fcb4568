"""Overlapped-speech detector real-time factor (engine only) on 30 s and 10 min of 16 kHz audio.

    python -m bench.overlap_rtf [--repeats 5]

Prints the median wall and CPU time of ``OverlapDetector.probabilities`` (front end and network, 8 s
chunks every 4 s) and the RTF = median wall time / audio duration. The diarizer adds this to its
VAD and CAM++ time when overlap detection is on (docs/model-overlap.md).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench._common import summary
from bench.voice_template_rtf import ten_seconds
from verilive.voice.overlap import OverlapDetector


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    det = OverlapDetector()
    speech = ten_seconds()
    for seconds in (30, 600):
        x = np.resize(speech, seconds * 16000)
        det.probabilities(x[:16000])  # warm-up
        wall, cpu = [], []
        for _ in range(args.repeats):
            t, c = time.perf_counter(), time.process_time()
            det.probabilities(x)
            wall.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
        print(f"{seconds} s: wall ms {summary(wall)}; CPU ms {summary(cpu)}")
        ms = seconds * 1000
        print(f"  RTF {np.median(wall) / ms:.4f} wall, {np.median(cpu) / ms:.4f} CPU")


if __name__ == "__main__":
    main()
