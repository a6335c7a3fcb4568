"""Face-only PAD branch: the one place that knows its crop and its ONNX model (docs/model-facepad.md).

image (BGR uint8) + CenterFace box (x1, y1, x2, y2) -> :func:`crop_box`: a square of ``CROP_SCALE`` x the
box's longer side around the box centre, shifted (not padded) into the image -> ``INPUT_SIZE`` x
``INPUT_SIZE`` INTER_AREA resize -> ONNX model ``facepad`` -> one live log-odds per face.

Why a face-only view: the MiniFASNet crops are 2.7x and 4x the box, so most of what they see around a
paper mask or a held-up cut-out is the attacker's real hair, neck and room. This crop is nearly all face,
at a resolution where print texture (dots, paper grain, flat shading, cut edges) still shows.

The model is trained here by ``python -m train.face_pad --write`` and committed as package data
(``facepad_model.onnx``, about 0.3 MB); its metadata keeps the trained graph's output for a fixed
input, which tests/test_facepad.py checks. Runtime dependencies: numpy, opencv, onnxruntime.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from verilive.models.sessions import cpu_session
from verilive.models.store import packaged_path

MODEL_FILE = "facepad_model.onnx"
PACKAGED_ID = "facepad"  # its id in the manifest's packaged section (the store resolves it)
META_KEY = "verilive_facepad"
INPUT_NAME = "input"
OUTPUT_NAME = "live_logit"
INPUT_SIZE = 128
# 1.1 x the longer side of a CenterFace box (which runs from the brow to the chin, taller than wide)
# takes the whole face and little else: forehead, cheeks and jaw line, not the hair or the room.
CROP_SCALE = 1.1


def crop_box(width: int, height: int, box_xyxy: Sequence[float] | np.ndarray) -> tuple[int, int, int, int]:
    """Integer (left, top, right, bottom), right/bottom exclusive: the square crop of a face box.

    The square is shifted back into the image rather than padded, so that a face near the edge keeps
    its scale and no artificial border enters the model (padding would be a cue that tight close-ups
    carry and service images do not). A square larger than the image shrinks to the shorter side.
    """
    x1, y1, x2, y2 = (float(v) for v in np.asarray(box_xyxy, dtype=np.float64).reshape(-1)[:4])
    if not (x2 > x1 and y2 > y1):
        raise ValueError(f"face box needs a positive width and height, got {x2 - x1}x{y2 - y1}")
    if width < 2 or height < 2:
        raise ValueError(f"image too small to crop: {width}x{height}")
    side = min(CROP_SCALE * max(x2 - x1, y2 - y1), float(width), float(height))
    s = max(2, round(side))
    cx, cy = (x1 + x2) / 2.0, (y1 + y2) / 2.0
    left = min(max(round(cx - s / 2.0), 0), width - s)
    top = min(max(round(cy - s / 2.0), 0), height - s)
    return left, top, left + s, top + s


def crop(image_bgr: np.ndarray, box_xyxy: Sequence[float] | np.ndarray) -> np.ndarray:
    """(INPUT_SIZE, INPUT_SIZE, 3) uint8 BGR crop of one face."""
    img = np.asarray(image_bgr)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"expected an (H, W, 3) BGR image, got shape {img.shape}")
    left, top, right, bottom = crop_box(img.shape[1], img.shape[0], box_xyxy)
    patch = img[top:bottom, left:right]
    # INTER_AREA averages when shrinking: print dots alias less, and the same face at two camera
    # resolutions gives nearly the same crop.
    interp = cv2.INTER_AREA if patch.shape[0] > INPUT_SIZE else cv2.INTER_LINEAR
    return cv2.resize(patch, (INPUT_SIZE, INPUT_SIZE), interpolation=interp)


def to_input(crops: np.ndarray) -> np.ndarray:
    """(N, 3, S, S) float32 model input of (N, S, S, 3) uint8 BGR crops: BGR, scaled to [-1, 1]."""
    c = np.asarray(crops)
    if c.ndim != 4 or c.shape[1:] != (INPUT_SIZE, INPUT_SIZE, 3):
        raise ValueError(f"expected crops of shape (N, {INPUT_SIZE}, {INPUT_SIZE}, 3), got {c.shape}")
    x = c.transpose(0, 3, 1, 2).astype(np.float32)
    return np.ascontiguousarray((x - 127.5) / 127.5)


class FacePAD:
    """The face-only branch on onnxruntime. Thread-safe: ``InferenceSession.run`` may be called
    concurrently and the object holds no per-call state."""

    def __init__(self, session: Any) -> None:
        inputs = [i.name for i in session.get_inputs()]
        outputs = [o.name for o in session.get_outputs()]
        if inputs != [INPUT_NAME] or OUTPUT_NAME not in outputs:
            raise ValueError(f"not a facepad session: inputs {inputs}, outputs {outputs}")
        self.session = session
        meta = session.get_modelmeta().custom_metadata_map
        self.meta: dict[str, Any] = json.loads(meta.get(META_KEY, "{}"))
        if (
            self.meta.get("input_size", INPUT_SIZE) != INPUT_SIZE
            or self.meta.get("crop_scale", CROP_SCALE) != CROP_SCALE
        ):
            raise ValueError("the face-only model was trained with another crop")

    @classmethod
    def load(cls, path: str | Path | None = None) -> FacePAD:
        """The committed model (package data, resolved by the model store), or the ONNX file at
        ``path``. One intra-op thread: the face engine runs its batches on a pool of its own (as the
        other face models do)."""
        source = Path(path) if path is not None else packaged_path(PACKAGED_ID)
        return cls(cpu_session(source.read_bytes(), intra_op_threads=1))

    crop = staticmethod(crop)

    def live_log_odds(self, crops: np.ndarray) -> np.ndarray:
        """(N,) float64 live log-odds of (N, S, S, 3) uint8 BGR crops."""
        x = to_input(crops)
        if x.shape[0] == 0:
            return np.zeros(0)
        (out,) = self.session.run([OUTPUT_NAME], {INPUT_NAME: x})
        return np.asarray(out, dtype=np.float64).reshape(-1)
