"""Overlapped-speech detection on the AMI dev excerpts (docs/model-overlap.md).

    python -m eval.overlap [--data DIR] [--no-docs]

The detector (``verilive.voice.overlap``) never saw AMI: it was trained on simulated LibriSpeech
conversations. Here each 20 ms frame of the 10 AMI excerpts (inside their UEM) is overlapped when the
RTTM has at least two speakers in it. Printed: precision, recall and F1 of the frames the detector
flags at its own threshold, over all frames and over reference speech only, the average precision,
and the same at other thresholds. Writes docs/overlap_pr.png (precision-recall curve) unless
``--no-docs``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from eval.diarization import DOCS, dev_excerpts

FRAME_S = 0.02


def reference_frames(ex, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(speech, overlap) bool per 20 ms frame from the RTTM, and the UEM mask folded into both."""
    count = np.zeros(n, np.int16)
    for seg, _, _ in ex.reference.itertracks(yield_label=True):
        count[round(seg.start / FRAME_S) : round(seg.end / FRAME_S)] += 1
    scored = np.zeros(n, bool)
    for seg in ex.uem:
        scored[round(seg.start / FRAME_S) : round(seg.end / FRAME_S)] = True
    return (count >= 1) & scored, (count >= 2) & scored


def pr(p: np.ndarray, y: np.ndarray, t: float) -> tuple[float, float, float]:
    hit = p >= t
    tp = float(np.sum(hit & y))
    prec, rec = tp / max(1, hit.sum()), tp / max(1, y.sum())
    return prec, rec, 2 * prec * rec / max(1e-9, prec + rec)


def main() -> None:
    import soundfile as sf

    from verilive.audio.resample import resample
    from verilive.voice.overlap import SR, OverlapDetector

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()

    det = OverlapDetector()
    ps, ys, ss = [], [], []
    for ex in dev_excerpts(args.data):
        if not ex.ami:
            continue
        wave, sr = sf.read(str(ex.audio), dtype="float32")
        if sr != SR:
            wave = resample(wave, sr, SR)
        p = det.probabilities(wave)
        speech, ovl = reference_frames(ex, p.size)
        scored = np.zeros(p.size, bool)
        for seg in ex.uem:
            scored[round(seg.start / FRAME_S) : round(seg.end / FRAME_S)] = True
        ps.append(p[scored])
        ys.append(ovl[scored])
        ss.append(speech[scored])
        f = pr(p[scored], ovl[scored], det.threshold)
        print(
            f"{ex.uri}: overlap {ovl.sum() * FRAME_S:.1f} s, "
            f"flagged {np.sum(p[scored] >= det.threshold) * FRAME_S:.1f} s, P {f[0]:.2f} R {f[1]:.2f}"
        )
    p, y, s = np.concatenate(ps), np.concatenate(ys), np.concatenate(ss)
    print(
        f"\nAMI, {p.size * FRAME_S:.0f} s scored, {y.sum() * FRAME_S:.1f} s overlapped "
        f"({y.sum() / max(1, s.sum()):.1%} of speech)"
    )
    for t in sorted({det.threshold, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}):
        a, b = pr(p, y, t), pr(p[s], y[s], t)
        mark = "  <- model threshold" if t == det.threshold else ""
        print(
            f"threshold {t:.2f}: all frames P {a[0]:.3f} R {a[1]:.3f} F1 {a[2]:.3f}; "
            f"speech frames P {b[0]:.3f} R {b[1]:.3f} F1 {b[2]:.3f}{mark}"
        )
    curves = {"all frames": curve(p, y), "reference speech only": curve(p[s], y[s])}
    for (name, (_, _, ap_score)), chance in zip(curves.items(), (y.mean(), y[s].mean()), strict=True):
        print(f"average precision, {name}: {ap_score:.3f} (chance {chance:.3f})")
    if not args.no_docs:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5.5, 4))
        for i, (name, (prec, rec, ap_score)) in enumerate(curves.items()):
            ax.plot(rec, prec, c=f"C{i}", label=f"{name} (AP {ap_score:.2f})")
            q = pr(p, y, det.threshold) if i == 0 else pr(p[s], y[s], det.threshold)
            ax.plot([q[1]], [q[0]], "o", c=f"C{i}")
        ax.axhline(y[s].mean(), ls="--", c="grey", label=f"chance in speech ({y[s].mean():.2f})")
        ax.set(
            xlabel="recall",
            ylabel="precision",
            xlim=(0, 1),
            ylim=(0, 1),
            title=f"Overlapped speech, AMI dev excerpts (dots: threshold {det.threshold:g})",
        )
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(DOCS / "overlap_pr.png", dpi=110)
        print(f"wrote {DOCS / 'overlap_pr.png'}")


def curve(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Precision and recall over every threshold, and the average precision."""
    order = np.argsort(-p)
    tp = np.cumsum(y[order])
    prec, rec = tp / np.arange(1, p.size + 1), tp / max(1, y.sum())
    return prec, rec, float(np.sum(np.diff(np.concatenate([[0.0], rec])) * prec))


if __name__ == "__main__":
    main()
