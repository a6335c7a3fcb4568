"""MediaPipe face mesh: the one place that knows the ``face_mesh`` model (docs/model-facemesh.md).

A region of interest (centre, side, angle) -> an upright square crop warped to 192 x 192, RGB 0..1 ->
ONNX model ``face_mesh`` (converted from mediapipe 0.10.14's ``face_landmark.tflite``) -> 468 points
(x, y, z) mapped back to image pixels, and a face-presence probability.

The crop follows MediaPipe's own rule for landmarks: the box of the previous landmarks, turned so the
outer eye corners (points 33 and 263) are level, squared on its longer side and enlarged 1.5x. The first
frame of a track starts from a CenterFace box (1.5x its longer side, turned by its eye line) and is run
twice, the second time on the crop its own first landmarks give. Later frames of a burst start from the
previous frame's landmarks and run once more on their own landmarks when the face moved (tracking).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

from verilive.numeric import sigmoid

if TYPE_CHECKING:
    from verilive.face.detector import Face
    from verilive.models.sessions import ModelRegistry

MODEL_ID = "face_mesh"
INPUT_NAME = "input_1"
OUT_POINTS = "conv2d_21"
OUT_FLAG = "conv2d_31"
SIDE = 192
N_POINTS = 468
ROI_SCALE = 1.5
# Outer eye corners: subject's right (image left in an unmirrored photo) and left.
RIGHT_EYE_OUTER, LEFT_EYE_OUTER = 33, 263
# A tracked frame is run again on its own landmarks when its crop moved by more than this share of the
# crop side, or changed size or angle by more than these: the mesh is most precise on its own framing.
REFINE_SHIFT = 0.04
REFINE_SCALE = 0.04
REFINE_ANGLE = math.radians(3.0)


@dataclass(frozen=True)
class Roi:
    """A square crop: centre (px), side (px) and angle (radians, of the eye line in the image)."""

    cx: float
    cy: float
    side: float
    angle: float

    def affine(self) -> np.ndarray:
        """2x3 matrix mapping image pixels to crop pixels (the face upright)."""
        s = SIDE / max(self.side, 1e-6)
        c, n = math.cos(self.angle) * s, math.sin(self.angle) * s
        a = np.array([[c, n], [-n, c]])
        t = np.array([SIDE / 2.0, SIDE / 2.0]) - a @ np.array([self.cx, self.cy])
        return np.hstack([a, t[:, None]])


@dataclass(frozen=True)
class Mesh:
    """468 points (x, y, z) in image pixels (z: relative depth, same scale, smaller is nearer) and the
    model's face-presence probability."""

    points: np.ndarray
    presence: float
    roi: Roi

    @property
    def interocular(self) -> float:
        """Distance between the outer eye corners, in pixels."""
        return float(np.hypot(*(self.points[LEFT_EYE_OUTER, :2] - self.points[RIGHT_EYE_OUTER, :2])))


def roi_from_face(face: Face) -> Roi:
    """The first crop of a track, from a CenterFace detection."""
    x1, y1, x2, y2 = face.box
    lm = np.asarray(face.landmarks, dtype=np.float64)
    eye = lm[1] - lm[0]  # subject's right eye -> left eye
    side = ROI_SCALE * max(x2 - x1, y2 - y1)
    return Roi((x1 + x2) / 2.0, (y1 + y2) / 2.0, side, math.atan2(eye[1], eye[0]))


def roi_from_points(points: np.ndarray) -> Roi:
    """MediaPipe's landmarks-to-crop rule: level the outer eye corners, box, square, 1.5x."""
    p = np.asarray(points, dtype=np.float64)[:, :2]
    eye = p[LEFT_EYE_OUTER] - p[RIGHT_EYE_OUTER]
    angle = math.atan2(eye[1], eye[0])
    c, s = math.cos(angle), math.sin(angle)
    rot = np.array([[c, s], [-s, c]])  # into the levelled frame
    q = p @ rot.T
    lo, hi = q.min(axis=0), q.max(axis=0)
    centre = rot.T @ ((lo + hi) / 2.0)
    return Roi(float(centre[0]), float(centre[1]), float(ROI_SCALE * max(hi - lo)), angle)


def _moved(a: Roi, b: Roi) -> bool:
    shift = math.hypot(a.cx - b.cx, a.cy - b.cy) / max(a.side, 1e-6)
    dangle = abs((a.angle - b.angle + math.pi) % (2 * math.pi) - math.pi)
    return (
        shift > REFINE_SHIFT
        or abs(math.log(b.side / max(a.side, 1e-6))) > REFINE_SCALE
        or dangle > REFINE_ANGLE
    )


class FaceMesh:
    """The face mesh on onnxruntime. Thread-safe: no state changes after construction."""

    def __init__(self, session: Any) -> None:
        inputs = [i.name for i in session.get_inputs()]
        outputs = {o.name for o in session.get_outputs()}
        if inputs != [INPUT_NAME] or not {OUT_POINTS, OUT_FLAG} <= outputs:
            raise ValueError(f"not a face-mesh session: inputs {inputs}, outputs {sorted(outputs)}")
        self.session = session

    @classmethod
    def from_registry(cls, registry: ModelRegistry) -> FaceMesh:
        return cls(registry.session(MODEL_ID))

    def run(self, images_bgr: list[np.ndarray], rois: list[Roi]) -> list[Mesh]:
        """One mesh per (image, crop), in one batched model call."""
        if len(images_bgr) != len(rois):
            raise ValueError("one crop per image is needed")
        if not rois:
            return []
        mats = [r.affine() for r in rois]
        batch = np.empty((len(rois), SIDE, SIDE, 3), dtype=np.float32)
        for k, (img, m) in enumerate(zip(images_bgr, mats, strict=True)):
            crop = cv2.warpAffine(
                img, m, (SIDE, SIDE), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT
            )
            batch[k] = crop[:, :, ::-1] * (1.0 / 255.0)
        pts, flag = self.session.run([OUT_POINTS, OUT_FLAG], {INPUT_NAME: batch})
        out = []
        for k, (m, roi) in enumerate(zip(mats, rois, strict=True)):
            p = pts[k].reshape(N_POINTS, 3).astype(np.float64)
            a_inv = np.linalg.inv(m[:, :2])
            xy = (p[:, :2] - m[:, 2]) @ a_inv.T
            scale = roi.side / SIDE  # crop pixels -> image pixels
            out.append(
                Mesh(np.column_stack([xy, p[:, 2] * scale]), float(sigmoid(float(flag[k].ravel()[0]))), roi)
            )
        return out

    def fit(self, image_bgr: np.ndarray, roi: Roi, *, refine: bool = True) -> Mesh:
        """The mesh of one image from a starting crop; run again on its own crop when that moved."""
        mesh = self.run([image_bgr], [roi])[0]
        if refine:
            better = roi_from_points(mesh.points)
            if _moved(roi, better):
                mesh = self.run([image_bgr], [better])[0]
        return mesh

    def track(self, frames_bgr: list[np.ndarray], start: Roi) -> list[Mesh]:
        """Meshes of consecutive frames of one face: the first from ``start`` (run twice), each later
        frame from the previous frame's landmarks."""
        meshes: list[Mesh] = []
        roi = start
        for k, frame in enumerate(frames_bgr):
            mesh = (
                self.fit(frame, roi)
                if k
                else self.run([frame], [roi_from_points(self.fit(frame, roi).points)])[0]
            )
            meshes.append(mesh)
            roi = roi_from_points(mesh.points)
        return meshes
