"""HyperFAS face anti-spoofing (zeusees): the one place that knows the model's input conventions.

image (BGR uint8, as cv2.imread returns it) + face box (x1, y1, x2, y2) -> :func:`crop_box` (upstream's
rule: a square of half-side int(0.6 * max(w, h)) about the box centre, clipped to the image, not padded)
-> 224x224 INTER_LINEAR resize -> ``(pixel - 127.5) / 127.5`` NHWC, BGR -> ONNX model ``hyperfas`` ->
P(live) and the 1024 features the final Dense layer reads. See docs/model-hyperfas.md.

Not part of the services: HyperFAS is a fusion candidate that ``train/face_pad_fusion.py`` compares
(docs/model-facepad.md), so its wrapper lives beside that script. Dependencies are numpy, opencv and
onnxruntime only; the model comes from the model store (``verilive models pull hyperfas``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

if TYPE_CHECKING:
    from verilive.models.sessions import ModelRegistry

MODEL_ID = "hyperfas"
INPUT_NAME = "input"
P_LIVE_NAME = "p_live"
FEATURES_NAME = "features"
INPUT_SIZE = 224
FEATURE_DIM = 1024
HALF_SIDE_FACTOR = 0.6  # half-side of the square crop per unit of the longer box side (1.2x the box)
# Upstream's demo (src/demo.py) draws a face as live when P(live) > 0.95; tuned for their camera and MTCNN.
UPSTREAM_THRESHOLD = 0.95

BoxLike = Sequence[float] | np.ndarray


def crop_box(width: int, height: int, box_xyxy: BoxLike) -> tuple[int, int, int, int]:
    """Upstream's crop: integer (x1, y1, x2, y2) with **exclusive** x2, y2, for a face box in a W x H image.

    1. The box corners are truncated to integers and clipped to [0, W-1] x [0, H-1].
    2. r = int(0.6 * max(w, h)) and the centre is ((x1 + x2) // 2, (y1 + y2) // 2).
    3. The square [cx - r, cx + r) x [cy - r, cy + r) is clipped to x, y >= 0, x2 <= W - 2, y2 <= H - 2.
       It is clipped, not shifted or padded: at an image edge the crop is no longer square (and the resize
       stretches it).

    Step 1 uses the image's width for x and height for y. Upstream's demo swaps them there (its detector
    returns boxes as (y1, x1, y2, x2)); that matters only for a box that leaves the image.
    """
    b = np.asarray(box_xyxy, dtype=np.float64).reshape(-1)
    if b.size != 4 or not np.all(np.isfinite(b)):
        raise ValueError(f"expected a finite face box (x1, y1, x2, y2), got {box_xyxy!r}")
    if width < 3 or height < 3:
        raise ValueError(f"image too small to crop: {width}x{height}")
    x1, y1, x2, y2 = (int(v) for v in b)  # truncation, as upstream's astype('int32')
    x1, y1 = max(x1, 0), max(y1, 0)
    x2, y2 = min(x2, width - 1), min(y2, height - 1)
    w, h = x2 - x1, y2 - y1
    if w <= 0 or h <= 0:
        raise ValueError(f"face box {tuple(b.tolist())} has no area inside the {width}x{height} image")
    r = int(max(w, h) * HALF_SIDE_FACTOR)
    cx, cy = (x1 + x2) // 2, (y1 + y2) // 2
    left, top = max(cx - r, 0), max(cy - r, 0)
    right, bottom = min(cx + r, width - 2), min(cy + r, height - 2)
    if right <= left or bottom <= top:  # only for a box of a pixel or two at the far edge
        raise ValueError(f"face box {tuple(b.tolist())} gives an empty crop in the {width}x{height} image")
    return left, top, right, bottom


def crop(image_bgr: np.ndarray, box_xyxy: BoxLike, size: int = INPUT_SIZE) -> np.ndarray:
    """(size, size, 3) uint8 BGR model crop: :func:`crop_box`, then cv2.resize with INTER_LINEAR."""
    img = np.asarray(image_bgr)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"expected an (H, W, 3) BGR image, got shape {img.shape}")
    left, top, right, bottom = crop_box(img.shape[1], img.shape[0], box_xyxy)
    return cv2.resize(img[top:bottom, left:right], (size, size), interpolation=cv2.INTER_LINEAR)


def preprocess(crops: np.ndarray) -> np.ndarray:
    """(N, 224, 224, 3) float32 model input of (N, 224, 224, 3) BGR crops (uint8, or float 0..255)."""
    c = np.asarray(crops)
    if c.ndim != 4 or c.shape[1:] != (INPUT_SIZE, INPUT_SIZE, 3):
        raise ValueError(f"expected crops of shape (N, {INPUT_SIZE}, {INPUT_SIZE}, 3), got {c.shape}")
    x = c.astype(np.float32)
    return np.ascontiguousarray((x - np.float32(127.5)) / np.float32(127.5))


class HyperFAS:
    """The HyperFAS model on onnxruntime.

    The session must be the ``hyperfas`` model from the store: input ``input`` float32 [N, 224, 224, 3]
    (NHWC, BGR, (pixel - 127.5) / 127.5), outputs ``p_live`` float32 [N] and ``features`` float32
    [N, 1024]. Thread-safe: ``InferenceSession.run`` may be called concurrently, and the wrapper keeps no
    other state.
    """

    def __init__(self, session: Any) -> None:
        inputs = [i.name for i in session.get_inputs()]
        outputs = [o.name for o in session.get_outputs()]
        if inputs != [INPUT_NAME] or not {P_LIVE_NAME, FEATURES_NAME} <= set(outputs):
            raise ValueError(f"not a HyperFAS session: inputs {inputs}, outputs {outputs}")
        self.session = session

    @classmethod
    def from_registry(cls, registry: ModelRegistry) -> HyperFAS:
        return cls(registry.session(MODEL_ID))

    @staticmethod
    def crop(image_bgr: np.ndarray, box_xyxy: BoxLike) -> np.ndarray:
        """The (224, 224, 3) uint8 crop of a face box (x1, y1, x2, y2), e.g. a CenterFace ``Face.box``."""
        return crop(image_bgr, box_xyxy)

    def predict(self, crops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(p_live (N,), features (N, 1024)), float32, of (N, 224, 224, 3) BGR crops (uint8 or 0..255)."""
        x = preprocess(crops)
        if x.shape[0] == 0:
            return np.zeros(0, np.float32), np.zeros((0, FEATURE_DIM), np.float32)
        p_live, features = self.session.run([P_LIVE_NAME, FEATURES_NAME], {INPUT_NAME: x})
        return np.asarray(p_live, np.float32).reshape(-1), np.asarray(features, np.float32)
