"""Frames of a short development video, and an even sample of them at a lower frame rate."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np


def read_video(path: str | Path, default_fps: float = 30.0) -> tuple[list[np.ndarray], float]:
    """Every frame (BGR) of the video at ``path`` and its frame rate (``default_fps`` if unknown)."""
    cap = cv2.VideoCapture(str(path))
    fps = cap.get(cv2.CAP_PROP_FPS) or default_fps
    frames = []
    while True:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(f)
    cap.release()
    return frames, float(fps)


def sample(
    frames: list[np.ndarray], src_fps: float, fps: float, start_s: float = 0.0, stop_s: float | None = None
) -> list[np.ndarray]:
    """The frames from ``start_s`` to ``stop_s`` (default: the end), ``fps`` a second."""
    step = src_fps / fps
    first = round(start_s * src_fps)
    last = len(frames) if stop_s is None else min(len(frames), round(stop_s * src_fps))
    return [frames[round(first + i * step)] for i in range(int((last - first) / step))]
