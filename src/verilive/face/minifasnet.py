"""MiniFASNet face anti-spoofing (Silent-Face): the one place that knows the models' input conventions.

image (BGR uint8, as cv2.imread returns it) + face box (x, y, w, h) -> :func:`crop_box` (upstream's rule:
the box scaled by the model's factor around its centre, clamped and shifted into the image) -> 80x80
INTER_LINEAR resize -> ONNX model ``minifasnet_v2`` (scale 2.7) or ``minifasnet_v1se`` (scale 4.0) ->
3 logits, index 1 = real face. See docs/model-minifasnet.md.

Runtime dependencies are numpy, opencv and onnxruntime only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

from verilive.numeric import softmax

if TYPE_CHECKING:
    from verilive.models.sessions import ModelRegistry

V2 = "minifasnet_v2"
V1SE = "minifasnet_v1se"
# Upstream reads these from the file names: 2.7_80x80_MiniFASNetV2.pth, 4_0_0_80x80_MiniFASNetV1SE.pth.
SCALES: dict[str, float] = {V2: 2.7, V1SE: 4.0}
INPUT_NAME = "input"
OUTPUT_NAME = "logits"
INPUT_SIZE = 80
NUM_CLASSES = 3
REAL_CLASS = 1  # 0 = 2-D fake (print, screen), 2 = 3-D fake (mask), per upstream's author

# CenterFace box -> upstream RetinaFace-like box (docs/model-minifasnet.md, "Face boxes"): CenterFace boxes
# are taller than wide (h/w 1.29-1.37 on the golden images) where RetinaFace's are near square (1.01-1.03).
# Fitted on the three golden images: RetinaFace width = 1.19 x, height = 0.91 x the CenterFace one, and
# its centre lies 0.06 x the CenterFace height lower (x offset +0.00, spread 0.02).
RF_WIDTH_SCALE = 1.19
RF_HEIGHT_SCALE = 0.91
RF_CENTRE_SHIFT_Y = 0.06

BoxLike = tuple[int, int, int, int] | Sequence[int] | np.ndarray


def crop_box(width: int, height: int, bbox_xywh: BoxLike, scale: float) -> tuple[int, int, int, int]:
    """Upstream's crop box: inclusive integer (left, top, right, bottom) for a face box in a W x H image.

    The box is scaled by ``scale`` about its centre, where ``scale`` is first lowered so the scaled box
    fits the image (at most (W-1)/w and (H-1)/h); a box that sticks out on one side is shifted back in;
    coordinates are truncated with int(). The arithmetic is Python float (double) in upstream's order, so
    the truncation gives upstream's integers exactly.
    """
    x, y, w, h = (int(v) for v in np.asarray(bbox_xywh).reshape(-1)[:4])
    if w <= 0 or h <= 0:
        raise ValueError(f"face box needs a positive width and height, got {w}x{h}")
    if width < 2 or height < 2:
        raise ValueError(f"image too small to crop: {width}x{height}")
    s = min((height - 1) / h, min((width - 1) / w, float(scale)))
    new_w, new_h = w * s, h * s
    cx, cy = w / 2 + x, h / 2 + y
    left, top = cx - new_w / 2, cy - new_h / 2
    right, bottom = cx + new_w / 2, cy + new_h / 2
    # Shift rather than clip, so the crop keeps the scaled size (and the face keeps its scale in it).
    if left < 0:
        right -= left
        left = 0
    if top < 0:
        bottom -= top
        top = 0
    if right > width - 1:
        left -= right - width + 1
        right = width - 1
    if bottom > height - 1:
        top -= bottom - height + 1
        bottom = height - 1
    return int(left), int(top), int(right), int(bottom)


def retinaface_like_box(box_xyxy: Sequence[float] | np.ndarray) -> tuple[int, int, int, int]:
    """Integer (x, y, w, h) box resembling upstream's RetinaFace box for a CenterFace (x1, y1, x2, y2) box.

    The crop scales (2.7, 4.0) were trained with RetinaFace boxes, and the models' scores move with the
    box: a raw CenterFace box gave log-odds 5 higher than the RetinaFace box on the live golden image.
    Measured on only three images; the box is not clipped to the image (:func:`crop_box` does that).
    """
    x1, y1, x2, y2 = (float(v) for v in np.asarray(box_xyxy, dtype=np.float64).reshape(-1)[:4])
    w, h = x2 - x1, y2 - y1
    if w <= 0 or h <= 0:
        raise ValueError(f"face box needs a positive width and height, got {w}x{h}")
    cx, cy = x1 + w / 2, y1 + h / 2 + RF_CENTRE_SHIFT_Y * h
    new_w, new_h = RF_WIDTH_SCALE * w, RF_HEIGHT_SCALE * h
    return round(cx - new_w / 2), round(cy - new_h / 2), max(1, round(new_w)), max(1, round(new_h))


def crop(image_bgr: np.ndarray, bbox_xywh: BoxLike, scale: float, size: int = INPUT_SIZE) -> np.ndarray:
    """(size, size, 3) uint8 BGR model crop: :func:`crop_box`, then cv2.resize with INTER_LINEAR.

    The box is inclusive and not necessarily square; the resize stretches it to a square, as upstream does.
    """
    img = np.asarray(image_bgr)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"expected an (H, W, 3) BGR image, got shape {img.shape}")
    left, top, right, bottom = crop_box(img.shape[1], img.shape[0], bbox_xywh, scale)
    patch = img[top : bottom + 1, left : right + 1]
    return cv2.resize(patch, (size, size), interpolation=cv2.INTER_LINEAR)


class MiniFASNet:
    """One MiniFASNet model (V2 or V1SE) on onnxruntime.

    The session must be the ``minifasnet_v2`` or ``minifasnet_v1se`` model from the store: input ``input``
    float32 [N, 3, 80, 80] (BGR, 0..255), output ``logits`` float32 [N, 3]. Thread-safe:
    ``InferenceSession.run`` may be called concurrently.
    """

    def __init__(self, session: Any, model_id: str) -> None:
        if model_id not in SCALES:
            raise ValueError(f"unknown MiniFASNet model {model_id!r}; known: {', '.join(SCALES)}")
        inputs = [i.name for i in session.get_inputs()]
        outputs = [o.name for o in session.get_outputs()]
        if inputs != [INPUT_NAME] or OUTPUT_NAME not in outputs:
            raise ValueError(f"not a MiniFASNet session: inputs {inputs}, outputs {outputs}")
        self.session = session
        self.model_id = model_id
        self.scale = SCALES[model_id]

    @classmethod
    def from_registry(cls, registry: ModelRegistry, model_id: str) -> MiniFASNet:
        return cls(registry.session(model_id), model_id)

    def crop(self, image_bgr: np.ndarray, bbox_xywh: BoxLike) -> np.ndarray:
        """The (80, 80, 3) uint8 crop of a face at this model's scale."""
        return crop(image_bgr, bbox_xywh, self.scale)

    def logits(self, crops: np.ndarray) -> np.ndarray:
        """(N, 3) float32 raw logits of (N, 80, 80, 3) BGR crops (uint8, or float 0..255)."""
        c = np.asarray(crops)
        if c.ndim != 4 or c.shape[1:] != (INPUT_SIZE, INPUT_SIZE, 3):
            raise ValueError(f"expected crops of shape (N, {INPUT_SIZE}, {INPUT_SIZE}, 3), got {c.shape}")
        if c.shape[0] == 0:
            return np.zeros((0, NUM_CLASSES), np.float32)
        # NHWC -> NCHW; values stay 0..255 (upstream's ToTensor does not divide by 255).
        x = np.ascontiguousarray(c.transpose(0, 3, 1, 2), dtype=np.float32)
        (out,) = self.session.run([OUTPUT_NAME], {INPUT_NAME: x})
        return np.asarray(out, dtype=np.float32)

    @staticmethod
    def live_probability(logits: np.ndarray) -> np.ndarray:
        """(N,) P(real) from (N, 3) logits, as upstream's predict() gives it."""
        return softmax(np.asarray(logits))[:, REAL_CLASS]

    @staticmethod
    def live_log_odds(logits: np.ndarray) -> np.ndarray:
        """(N,) log(p_real) - log(1 - p_real) from the softmax of (N, 3) logits.

        Computed as logit_real - logsumexp(other logits), which stays finite where p_real rounds to 0 or 1.
        """
        z = np.asarray(logits, dtype=np.float64)
        if z.ndim != 2 or z.shape[1] != NUM_CLASSES:
            raise ValueError(f"expected logits of shape (N, {NUM_CLASSES}), got {z.shape}")
        others = np.delete(z, REAL_CLASS, axis=1)
        return z[:, REAL_CLASS] - np.logaddexp(others[:, 0], others[:, 1])
