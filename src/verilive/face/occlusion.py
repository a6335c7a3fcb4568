"""Face occlusion: is something covering an eye, or the nose and mouth? (issue 47)

image + 5 landmarks -> similarity warp to a small canonical face (:data:`CANON` px, the eyes :data:`IPD`
px apart, level) -> a small CNN (``occlusion_model.onnx``, package data made by
``python -m train.face_occlusion train --write``) -> one covered probability per region of
:data:`REGIONS` -> overall score = the largest.

The model replaced hand-made skin-colour cues, which took their skin reference from patches a mask or
beard covers and turned away 5-12 % of uncovered faces per collection (docs/face-quality.md). It is
trained on real masked faces and on uncovered faces drawn over with synthetic masks, scarves, hands,
phones and sunglasses (clear glasses as a negative); the threshold is chosen on collections it never
trained on. Its logits are shifted so that the chosen threshold is 0.5 (:data:`DEFAULT_THRESHOLD`):
``VERILIVE_FACE_OCCLUSION_THRESHOLD`` moves around that point. Landmarks are used as given: under a hand
the detector still places them where the eye should be, which is where the model looks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from verilive.models.sessions import cpu_session
from verilive.models.store import packaged_path

# Canonical face: CANON x CANON px, eyes IPD px apart, eye midpoint at (CANON/2, EYE_Y).
CANON = 96
IPD = 32.0
EYE_Y = 36.0
# Landmark template in IPD units from the eye midpoint (x right in the image, y down), in the detector's
# order: subject's right eye, left eye, nose tip, right and left mouth corners. Proportions of a mean
# adult frontal face (nose tip 0.57 IPD and mouth line 1.15 IPD below the eye line).
TEMPLATE_IPD = np.array(
    [[-0.5, 0.0], [0.5, 0.0], [0.0, 0.57], [-0.41, 1.15], [0.41, 1.15]],
    dtype=np.float64,
)

DEFAULT_THRESHOLD = 0.5
PACKAGED_ID = "occlusion"  # its id in the manifest's packaged section
INPUT_NAME = "face"
OUTPUT_NAME = "covered_logits"
META_KEY = "verilive_occlusion"
# The model's outputs, in order ("right_eye"/"left_eye" are the subject's, as the detector's landmarks).
REGIONS = ("right_eye", "left_eye", "nose_mouth")
REGION_WORDS = {"right_eye": "right eye", "left_eye": "left eye", "nose_mouth": "nose and mouth"}


@dataclass(frozen=True)
class Occlusion:
    """Occlusion of one face.

    ``score`` is 0 when nothing covers the face and 1 when it is surely covered (the largest region
    score; 0.5 at the chosen threshold). ``regions`` has one score per name in :data:`REGIONS`.
    ``occluded`` is ``score >= threshold``.
    """

    score: float
    regions: dict[str, float]
    occluded: bool

    @property
    def worst(self) -> str:
        """The most covered region, in words ("left eye", "nose and mouth")."""
        return REGION_WORDS[max(self.regions, key=lambda k: self.regions[k])]


def _similarity(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Least-squares similarity (rotation, uniform scale, translation) mapping src points onto dst: 2x3."""
    ms, md = src.mean(0), dst.mean(0)
    s, d = src - ms, dst - md
    # For z = a + ib acting on complex points: z = sum(conj(s) * d) / sum(|s|^2).
    sc = s[:, 0] + 1j * s[:, 1]
    dc = d[:, 0] + 1j * d[:, 1]
    z = np.sum(np.conj(sc) * dc) / max(float(np.sum(np.abs(sc) ** 2)), 1e-12)
    a, b = float(z.real), float(z.imag)
    t = md - np.array([a * ms[0] - b * ms[1], b * ms[0] + a * ms[1]])
    return np.array([[a, -b, t[0]], [b, a, t[1]]], dtype=np.float64)


def canonical_face(image_bgr: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
    """The face warped to CANON x CANON BGR uint8 with the eyes IPD px apart and level (outside the image:
    the border pixels repeated)."""
    src = np.asarray(landmarks, dtype=np.float64).reshape(5, 2)
    dst = TEMPLATE_IPD * IPD + np.array([CANON / 2, EYE_Y])
    m = _similarity(src, dst)
    scale = float(np.hypot(m[0, 0], m[1, 0]))
    img = image_bgr
    if scale < 0.5:
        # Shrinking a lot in one bilinear warp aliases skin texture into false structure: halve the face's
        # region with pyrDown (a cheap low-pass) until the warp shrinks by less than 2.
        x0, y0, x1, y1 = _source_roi(m, img.shape)
        img = img[y0:y1, x0:x1]
        m = m @ np.array([[1.0, 0.0, x0], [0.0, 1.0, y0], [0.0, 0.0, 1.0]])
        while scale < 0.5 and min(img.shape[:2]) >= 4:
            h, w = img.shape[:2]
            img = cv2.pyrDown(img)
            fx, fy = w / img.shape[1], h / img.shape[0]
            m = m @ np.array([[fx, 0.0, 0.0], [0.0, fy, 0.0], [0.0, 0.0, 1.0]])
            scale *= 2.0
    face = cv2.warpAffine(img, m, (CANON, CANON), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return face


def _source_roi(m: np.ndarray, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """Integer image rectangle that the canonical square comes from (clipped, at least 1 px)."""
    inv = cv2.invertAffineTransform(m)
    corners = np.array([[0, 0, 1], [CANON, 0, 1], [0, CANON, 1], [CANON, CANON, 1]], dtype=np.float64)
    pts = corners @ inv.T
    h, w = shape[:2]
    x0 = int(np.clip(np.floor(pts[:, 0].min()) - 2, 0, w - 1))
    y0 = int(np.clip(np.floor(pts[:, 1].min()) - 2, 0, h - 1))
    x1 = int(np.clip(np.ceil(pts[:, 0].max()) + 2, x0 + 1, w))
    y1 = int(np.clip(np.ceil(pts[:, 1].max()) + 2, y0 + 1, h))
    return x0, y0, x1, y1


def to_input(faces_bgr: np.ndarray) -> np.ndarray:
    """(N, CANON, CANON, 3) uint8 BGR -> (N, 3, CANON, CANON) float32 RGB in 0..1."""
    return (
        np.ascontiguousarray(np.asarray(faces_bgr)[..., ::-1].transpose(0, 3, 1, 2), dtype=np.float32) / 255.0
    )


class OcclusionModel:
    """The occlusion CNN on onnxruntime. Thread-safe: ``InferenceSession.run`` may be called concurrently
    and the object holds no per-call state."""

    def __init__(self, session: Any) -> None:
        inputs = [i.name for i in session.get_inputs()]
        outputs = [o.name for o in session.get_outputs()]
        if inputs != [INPUT_NAME] or outputs != [OUTPUT_NAME]:
            raise ValueError(f"not an occlusion model: inputs {inputs}, outputs {outputs}")
        meta = json.loads(session.get_modelmeta().custom_metadata_map.get(META_KEY, "{}"))
        if tuple(meta.get("outputs", ())) != REGIONS or not 0.0 < float(meta.get("threshold", -1)) < 1.0:
            raise ValueError("the occlusion model's metadata lacks its outputs or threshold")
        self.session = session
        self.meta: dict[str, Any] = meta
        t = float(meta["threshold"])
        # Logit of the chosen threshold: subtracted, so that threshold maps to 0.5.
        self.offset = float(np.log(t / (1.0 - t)))

    @classmethod
    def load(cls, path: str | Path | None = None) -> OcclusionModel:
        """The committed model (package data, resolved by the model store), or the ONNX file at ``path``.
        One intra-op thread: the face engine runs its images on a pool of its own."""
        source = Path(path) if path is not None else packaged_path(PACKAGED_ID)
        return cls(cpu_session(source.read_bytes(), intra_op_threads=1))

    def region_scores(self, faces_bgr: np.ndarray) -> np.ndarray:
        """(N, 3) region scores in 0..1 (0.5 at the chosen threshold) of (N, CANON, CANON, 3) uint8 BGR
        canonical faces."""
        x = to_input(faces_bgr)
        if x.shape[0] == 0:
            return np.zeros((0, len(REGIONS)))
        (logits,) = self.session.run([OUTPUT_NAME], {INPUT_NAME: x})
        z = np.asarray(logits, dtype=np.float64) - self.offset
        return 1.0 / (1.0 + np.exp(-z))

    def check(
        self, image_bgr: np.ndarray, landmarks: np.ndarray, threshold: float = DEFAULT_THRESHOLD
    ) -> Occlusion:
        """Occlusion of the face with these 5 landmarks (detector order) in an H x W x 3 uint8 BGR image."""
        img = np.asarray(image_bgr)
        if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
            raise ValueError(f"expected an HxWx3 uint8 BGR image, got {img.shape} {img.dtype}")
        lm = np.asarray(landmarks, dtype=np.float64).reshape(5, 2)
        r = self.region_scores(canonical_face(img, lm)[None])[0]
        regions = {k: float(v) for k, v in zip(REGIONS, r, strict=True)}
        score = max(regions.values())
        return Occlusion(score=score, regions=regions, occluded=bool(score >= threshold))
