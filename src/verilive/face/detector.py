"""CenterFace face detection with 5 landmarks and a head-pose estimate: the one place that knows the model.

image (H x W x 3 uint8 BGR) -> resized so the long side is at most ``side`` (aspect kept), RGB float32 0..255,
zero-padded right/bottom to multiples of 32 -> ONNX model ``centerface`` -> four maps at stride 4:
heatmap (face-centre probability), log box size, centre offset, landmarks relative to the box -> boxes,
scores and landmarks in input-image pixels after NMS -> yaw, pitch and roll from the landmarks.
See docs/model-centerface.md for the decoding, the resize strategy and the pose method.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

if TYPE_CHECKING:
    from verilive.models.sessions import ModelRegistry

MODEL_ID = "centerface"
INPUT_NAME = "input.1"
OUT_HEATMAP = "537"  # (N, 1, h, w) sigmoid face-centre probability
OUT_SCALE = "538"  # (N, 2, h, w) log(box height / 4), log(box width / 4)
OUT_OFFSET = "539"  # (N, 2, h, w) sub-cell centre offset (y, x), in cells
OUT_LANDMARKS = "540"  # (N, 10, h, w) per landmark (y, x): fraction of box height/width from its top-left
OUTPUTS = (OUT_HEATMAP, OUT_SCALE, OUT_OFFSET, OUT_LANDMARKS)
STRIDE = 4
ALIGN = 32  # five stride-2 stages: the input sides must be multiples of 32

# Landmark indices in the model's output order. "Right"/"left" are the subject's: the subject's right eye
# is the one on the image's left in an unmirrored frontal photo (checked on the photos in
# tests/test_detector.py), as in the WIDER FACE annotations CenterFace was trained on.
RIGHT_EYE, LEFT_EYE, NOSE, RIGHT_MOUTH, LEFT_MOUTH = range(5)

# Head-pose constants, in units of the interpupillary distance (IPD) of a mean adult face: the nose tip
# stands about 0.5 IPD in front of the plane of the eyes and mouth corners (~31 mm for a 63 mm IPD), and
# the mouth line is about 1.1 IPD below the eye line. NOSE_T0 is where the nose tip sits, as a fraction of
# the eye-to-mouth distance, in a frontal view: the median over the frontal photos in tests/test_detector.py.
NOSE_DEPTH_IPD = 0.5
EYE_MOUTH_IPD = 1.1
NOSE_T0 = 0.56


@dataclass(frozen=True)
class Face:
    """One detected face, in pixels of the image given to :meth:`FaceDetector.detect`.

    ``box`` is not clipped to the image: a face cut by the border has a box reaching past the edge, which
    is how a caller can tell a cropped face. ``landmarks`` is (5, 2) float32 (x, y) in the order
    subject's right eye, left eye, nose tip, right mouth corner, left mouth corner (``RIGHT_EYE`` ...).
    Angles are degrees from :func:`head_pose`.
    """

    box: tuple[float, float, float, float]
    score: float
    landmarks: np.ndarray
    yaw: float
    pitch: float
    roll: float

    @property
    def width(self) -> float:
        return self.box[2] - self.box[0]

    @property
    def height(self) -> float:
        return self.box[3] - self.box[1]

    @property
    def area(self) -> float:
        return self.width * self.height

    @property
    def interpupillary_distance(self) -> float:
        """Distance between the two eye landmarks, in pixels (shrinks with yaw)."""
        return float(np.hypot(*(self.landmarks[LEFT_EYE] - self.landmarks[RIGHT_EYE])))


def head_pose(landmarks: np.ndarray) -> tuple[float, float, float]:
    """(yaw, pitch, roll) in degrees from 5 landmarks in :class:`Face` order; a geometric approximation.

    - roll: angle of the eye line (subject's right eye -> left eye) against the image x axis, positive
      when the face is rotated counter-clockwise as seen in the image (the subject's left eye higher,
      head tilted towards the subject's right shoulder). ``cv2.getRotationMatrix2D(c, a, 1)`` adds ``a``.
    - The landmarks are rotated by -roll about the eye midpoint, so yaw and pitch do not depend on it.
    - yaw: the nose tip, NOSE_DEPTH_IPD in front of the eye/mouth plane, moves sideways by
      depth * sin(yaw) while the eye distance shrinks by cos(yaw), so
      yaw = atan(offset / IPD_image / NOSE_DEPTH_IPD), where offset is the nose's distance from the line
      through the eye and mouth midpoints. Positive when the nose points to the image's right (the
      subject turned towards their left); a horizontal flip negates it.
    - pitch: likewise from the nose's height between the eye line and the mouth line,
      t = (nose - eyes) / (mouth - eyes), pitch = atan((NOSE_T0 - t) * EYE_MOUTH_IPD / NOSE_DEPTH_IPD).
      Positive when the face tilts up (chin up: the nose tip moves towards the eyes).
    Beyond about 45 degrees of yaw the landmarks themselves become unreliable, and so do these angles.
    """
    p = np.asarray(landmarks, dtype=np.float64).reshape(5, 2)
    eye_vec = p[LEFT_EYE] - p[RIGHT_EYE]
    # Image y points down; negate it so a counter-clockwise rotation on screen is a positive angle.
    roll = math.atan2(-eye_vec[1], eye_vec[0])
    ipd = float(np.hypot(*eye_vec))
    if ipd < 1e-6:
        return 0.0, 0.0, math.degrees(roll)
    c, s = math.cos(roll), math.sin(roll)
    # Rotate by +roll in y-up terms, i.e. undo the tilt: x' = c*dx - s*dy_up, with dy_up = -dy.
    d = p - (p[RIGHT_EYE] + p[LEFT_EYE]) / 2.0
    x = c * d[:, 0] - s * d[:, 1]
    y = s * d[:, 0] + c * d[:, 1]
    eye_x, eye_y = 0.0, 0.0  # eye midpoint is the origin
    mouth_x = (x[RIGHT_MOUTH] + x[LEFT_MOUTH]) / 2.0
    mouth_y = (y[RIGHT_MOUTH] + y[LEFT_MOUTH]) / 2.0
    em = mouth_y - eye_y
    if em < 1e-6:
        return 0.0, 0.0, math.degrees(roll)
    t = (y[NOSE] - eye_y) / em
    # Midline x at the nose's height: interpolate between the eye and mouth midpoints.
    mid_x = eye_x + t * (mouth_x - eye_x)
    yaw = math.atan((x[NOSE] - mid_x) / ipd / NOSE_DEPTH_IPD)
    pitch = math.atan((NOSE_T0 - t) * EYE_MOUTH_IPD / NOSE_DEPTH_IPD)
    return math.degrees(yaw), math.degrees(pitch), math.degrees(roll)


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> list[np.ndarray]:
    """Greedy non-maximum suppression: one index array per kept box, the kept (highest-score) index first,
    followed by the candidates it suppressed."""
    order = np.argsort(-scores, kind="stable")
    x1, y1, x2, y2 = boxes.T
    areas = np.maximum(x2 - x1, 0) * np.maximum(y2 - y1, 0)
    groups: list[np.ndarray] = []
    while order.size:
        i = int(order[0])
        rest = order[1:]
        w = np.maximum(0.0, np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]))
        h = np.maximum(0.0, np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]))
        inter = w * h
        overlap = inter / np.maximum(areas[i] + areas[rest] - inter, 1e-9)
        groups.append(np.concatenate([[i], rest[overlap > iou]]))
        order = rest[overlap <= iou]
    return groups


class FaceDetector:
    """CenterFace on onnxruntime. Thread-safe: no state changes after construction.

    ``session`` must be the ``centerface`` model from the store (dynamic input ``input.1`` [N, 3, H, W]).

    Resize strategy (docs/model-centerface.md, "Resize"): a first pass runs with the long side at
    ``base_side`` (320: about 11 ms for a 640x480 image on one core), which finds faces down to about
    14 px in that frame. Only when it finds nothing, or its smallest face is under ``refine_below`` pixels
    (width or height) in that frame, so that still smaller faces may have been missed, a second pass runs
    at ``max_side`` and its result is returned instead. Images are never enlarged.
    """

    def __init__(
        self,
        session: Any,
        *,
        max_side: int = 640,
        score_threshold: float = 0.5,
        nms_iou: float = 0.3,
        base_side: int = 320,
        refine_below: float = 20.0,
    ) -> None:
        inputs = [i.name for i in session.get_inputs()]
        outputs = [o.name for o in session.get_outputs()]
        if inputs != [INPUT_NAME] or not set(OUTPUTS) <= set(outputs):
            raise ValueError(f"not a CenterFace session: inputs {inputs}, outputs {outputs}")
        if max_side < ALIGN or base_side < ALIGN:
            raise ValueError(f"max_side and base_side must be at least {ALIGN}")
        if not 0.0 < score_threshold < 1.0:
            raise ValueError("score_threshold must be in (0, 1)")
        self.session = session
        self.max_side = int(max_side)
        self.base_side = min(int(base_side), self.max_side)
        self.score_threshold = float(score_threshold)
        self.nms_iou = float(nms_iou)
        self.refine_below = float(refine_below)

    @classmethod
    def from_registry(cls, registry: ModelRegistry, **kw: Any) -> FaceDetector:
        return cls(registry.session(MODEL_ID), **kw)

    def detect(self, image_bgr: np.ndarray) -> list[Face]:
        """Faces in an H x W x 3 uint8 BGR image, largest box area first."""
        img = np.asarray(image_bgr)
        if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
            raise ValueError(f"expected an HxWx3 uint8 BGR image, got {img.shape} {img.dtype}")
        if min(img.shape[:2]) < 1:
            raise ValueError(f"empty image {img.shape}")
        faces, scale = self._detect_at(img, self.base_side)
        long_side = max(img.shape[:2])
        # A second pass can only help when it sees the image at a higher resolution than the first.
        if min(self.max_side, long_side) > min(self.base_side, long_side):
            smallest = min((min(f.width, f.height) * scale for f in faces), default=0.0)
            if not faces or smallest < self.refine_below:
                faces, _ = self._detect_at(img, self.max_side)
        return faces

    def detect_at(self, image_bgr: np.ndarray, side: int) -> list[Face]:
        """One pass with the long side resized to ``min(side, long side)``; for tuning and tests."""
        return self._detect_at(np.asarray(image_bgr), side)[0]

    # --- internals -------------------------------------------------------------------------------------

    def _detect_at(self, img: np.ndarray, side: int) -> tuple[list[Face], float]:
        """Faces and the image-to-network scale used."""
        blob, scale = self._prepare(img, side)
        heat, size, offset, lms = self.session.run(list(OUTPUTS), {INPUT_NAME: blob})
        return self._decode(heat[0, 0], size[0], offset[0], lms[0], scale), scale

    @staticmethod
    def _prepare(img: np.ndarray, side: int) -> tuple[np.ndarray, float]:
        h, w = img.shape[:2]
        scale = min(1.0, side / max(h, w))
        nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
        small = img if (nh, nw) == (h, w) else cv2.resize(img, (nw, nh), interpolation=cv2.INTER_AREA)
        # Zero padding (not stretching) keeps one scale factor for both axes and the aspect ratio intact.
        hp, wp = -(-nh // ALIGN) * ALIGN, -(-nw // ALIGN) * ALIGN
        blob = np.zeros((1, 3, hp, wp), dtype=np.float32)
        blob[0, :, :nh, :nw] = small[:, :, ::-1].transpose(2, 0, 1)  # BGR -> RGB planes, 0..255
        # Map network pixels back with the realised per-axis factor (rounding makes them differ slightly).
        return blob, nw / w if w >= h else nh / h

    def _decode(
        self,
        heat: np.ndarray,
        size: np.ndarray,
        offset: np.ndarray,
        lms: np.ndarray,
        scale: float,
    ) -> list[Face]:
        ys, xs = np.nonzero(heat > self.score_threshold)
        if ys.size == 0:
            return []
        scores = heat[ys, xs].astype(np.float64)
        bh = np.exp(size[0, ys, xs].astype(np.float64)) * STRIDE
        bw = np.exp(size[1, ys, xs].astype(np.float64)) * STRIDE
        cy = (ys + offset[0, ys, xs] + 0.5) * STRIDE
        cx = (xs + offset[1, ys, xs] + 0.5) * STRIDE
        x1, y1 = cx - bw / 2, cy - bh / 2
        boxes = np.stack([x1, y1, x1 + bw, y1 + bh], axis=1) / scale
        lm = lms[:, ys, xs].astype(np.float64)  # (10, n): y0, x0, y1, x1, ...
        pts = np.empty((ys.size, 5, 2), dtype=np.float64)
        pts[:, :, 0] = (x1[:, None] + lm[1::2].T * bw[:, None]) / scale
        pts[:, :, 1] = (y1[:, None] + lm[0::2].T * bh[:, None]) / scale
        faces = []
        for group in nms(boxes, scores, self.nms_iou):
            # Score-weighted mean of the box and landmarks over the cluster of neighbouring cells
            # that voted for this face: steadier than the single peak cell.
            wts = scores[group] / scores[group].sum()
            landmarks = np.tensordot(wts, pts[group], axes=1).astype(np.float32)
            yaw, pitch, roll = head_pose(landmarks)
            box = tuple(float(v) for v in wts @ boxes[group])
            faces.append(Face(box, float(scores[group[0]]), landmarks, yaw, pitch, roll))  # type: ignore[arg-type]
        faces.sort(key=lambda f: f.area, reverse=True)
        return faces
