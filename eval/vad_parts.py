"""The VAD's numpy parts against the Silero model run window by window (issue 49), on every voice
recording of the development data, at its own rate and through 8 kHz.

    python -m eval.vad_parts [--data DIR] [--limit N]

The services' VAD (``SileroVad.from_registry``) computes Silero's STFT, encoder, LSTM cell and
decoder in numpy from the model's weights; the reference is the ONNX model itself, one run per
32 ms window (``SileroVad._window_by_window``). Speech intervals that are identical make identical
templates, quality checks and anti-spoofing speech checks, so this is also the check that the
verification, telephone and anti-spoofing figures are unchanged by it.

Prints the largest probability difference, the files whose intervals differ, and the time of both
paths; writes docs/vad_parts.png (per-file largest difference).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import soundfile as sf
from common.repo import REPO, shared_root

from verilive.audio import resample
from verilive.config import Settings
from verilive.models.sessions import ModelRegistry
from verilive.voice.vad import MODEL_ID, SileroVad, model_rate, segments_from_probabilities

PNG = REPO / "docs" / "vad_parts.png"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=shared_root() / "data" / "voice")
    ap.add_argument("--limit", type=int, default=0, help="at most this many files (0: all)")
    args = ap.parse_args()
    files = sorted(p for p in args.data.rglob("*") if p.suffix.lower() in (".flac", ".wav"))
    if args.limit:
        files = files[:: max(1, len(files) // args.limit)][: args.limit]
    registry = ModelRegistry(Settings(), ids=[MODEL_ID])
    vad = SileroVad.from_registry(registry)
    if not vad.batched_parts():
        raise SystemExit("the numpy parts were not built (see the log)")
    worst: dict[int, list[float]] = {16000: [], 8000: []}
    differ: list[str] = []
    seconds = {"parts": 0.0, "model": 0.0}
    audio_s = 0.0
    for path in files:
        x, sr = sf.read(path, dtype="float32", always_2d=True)
        x = x.mean(axis=1)
        for rate in (sr, 8000) if sr != 8000 else (8000,):
            y = x if rate == sr else resample(x, sr, rate)
            t0 = time.perf_counter()
            a, _ = vad.probabilities(y, rate)
            t1 = time.perf_counter()
            b = vad._window_by_window(*_model_input(y, rate))
            t2 = time.perf_counter()
            seconds["parts"] += t1 - t0
            seconds["model"] += t2 - t1
            audio_s += y.size / rate
            worst[model_rate(rate)].append(float(np.abs(a - b).max()) if a.size else 0.0)
            seg_a = segments_from_probabilities(a, y.size, rate, vad.config)
            seg_b = segments_from_probabilities(b, y.size, rate, vad.config)
            if seg_a != seg_b:
                differ.append(f"{path.relative_to(args.data)} @ {rate} Hz")
    n = sum(len(v) for v in worst.values())
    print(f"{len(files)} files, {n} runs, {audio_s / 3600:.2f} h of audio")
    for mr, v in worst.items():
        if v:
            big, mid = max(v), float(np.median(v))
            print(f"model rate {mr}: {len(v)} runs, largest |dp| {big:.2e}, median per-run largest {mid:.1e}")
    print(f"runs whose speech intervals differ: {len(differ)}")
    for d in differ[:20]:
        print("  ", d)
    print(
        f"time: parts {seconds['parts']:.1f} s (RTF {seconds['parts'] / audio_s:.4f}), "
        f"model window by window {seconds['model']:.1f} s (RTF {seconds['model'] / audio_s:.4f})"
    )
    _plot(worst)


def _model_input(y: np.ndarray, rate: int) -> tuple[np.ndarray, int]:
    mr = model_rate(rate)
    return (y if rate == mr else resample(y, rate, mr)).astype(np.float32), mr


def _plot(worst: dict[int, list[float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    bins = np.logspace(-9, -4, 41)
    for mr, v in worst.items():
        if v:
            ax.hist(np.maximum(v, 1e-9), bins=bins, alpha=0.6, label=f"model rate {mr} Hz ({len(v)} runs)")
    ax.set_xscale("log")
    ax.set_xlabel("largest |p(numpy parts) - p(model, window by window)| in a recording")
    ax.set_ylabel("recordings")
    ax.set_title("Silero VAD: numpy parts against the ONNX model (all voice dev data)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(PNG, dpi=110)
    print(f"wrote {PNG}")


if __name__ == "__main__":
    main()
