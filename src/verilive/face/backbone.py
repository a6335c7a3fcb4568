"""The pretrained face PAD backbone: the one place that knows EfficientNet-Lite0's crop and model.

image (BGR uint8) + CenterFace box (x1, y1, x2, y2) -> :func:`crop_box`: a square of ``scale`` x the
box's longer side around the box centre, shifted (not padded) into the image, shrunk to the shorter
side when larger -> 224 x 224 RGB (INTER_AREA when shrinking) -> ONNX model ``efficientnet_lite0``
(ImageNet weights, input scaling inside the graph) -> 1280 pooled features per face. The service may
run ``efficientnet_lite0_int8`` instead (``VERILIVE_FACE_BACKBONE_MODEL=int8``): the same network with
int8 static quantization, the same inputs and outputs, the same head (issue 47).

Why wide: at 2x the box the crop holds the forehead line, the ears, the jaw line and some neck, where
a worn paper mask, a held-up cut-out or a mannequin's printed face ends (issue 32). The features feed
a small head trained by ``train/face_pad_backbone.py`` (docs/model-efficientnet-lite.md);
:class:`BackbonePAD` is the face pipelines' ``backbone`` branch: crop, features, head, live log-odds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import cv2
import numpy as np

from verilive.models.store import packaged_path

if TYPE_CHECKING:
    from verilive.config import Settings
    from verilive.models.sessions import ModelRegistry

FLOAT_MODEL_ID = "efficientnet_lite0"
INT8_MODEL_ID = "efficientnet_lite0_int8"  # the same network, int8 static quantization (issue 47)
# The float build: the reference (the head was trained on its features; test_backbone.py's golden
# values are of it). The service's build is a setting: model_id_of(settings).
MODEL_ID = FLOAT_MODEL_ID
Build = Literal["float", "int8"]
MODEL_IDS: dict[Build, str] = {"float": FLOAT_MODEL_ID, "int8": INT8_MODEL_ID}
INPUT_NAME = "image"
OUTPUT_NAME = "features"
TEXTURE_NAME = "texture"  # pooled statistics of three inner blocks (docs/model-efficientnet-lite.md)
INPUT_SIZE = 224
FEATURES = 1280
TEXTURE = 464
DEFAULT_SCALE = 2.0
# Where train.face_pad_backbone --write puts the head; the engine finds it through the store.
# Crops per onnxruntime run in the service. On one intra-op thread a batch is no faster per crop
# (16.2 ms at 1, 18.4 at 4, 21.2 at 16), and the arena keeps the largest run's activations (peak RSS
# 145, 222, 535 MiB), so crops go one by one.
RUN_BATCH = 1
HEAD_FILE = Path(__file__).resolve().parent / "backbone_head.npz"
HEAD_ID = "backbone_head"  # its id in the manifest's packaged section


def model_id_of(settings: Settings) -> str:
    """The model id of the backbone build the settings choose (``VERILIVE_FACE_BACKBONE_MODEL``)."""
    return MODEL_IDS[settings.face_backbone_model]


def crop_box(
    width: int, height: int, box_xyxy: Sequence[float] | np.ndarray, scale: float = DEFAULT_SCALE
) -> tuple[int, int, int, int]:
    """Integer (left, top, right, bottom), right/bottom exclusive: the square crop of a face box,
    shifted back into the image rather than padded (a border would be a cue of close-ups)."""
    x1, y1, x2, y2 = (float(v) for v in np.asarray(box_xyxy, dtype=np.float64).reshape(-1)[:4])
    if not (x2 > x1 and y2 > y1):
        raise ValueError(f"face box needs a positive width and height, got {x2 - x1}x{y2 - y1}")
    if width < 2 or height < 2:
        raise ValueError(f"image too small to crop: {width}x{height}")
    s = max(2, round(min(scale * max(x2 - x1, y2 - y1), float(width), float(height))))
    cx, cy = (x1 + x2) / 2.0, (y1 + y2) / 2.0
    left = min(max(round(cx - s / 2.0), 0), width - s)
    top = min(max(round(cy - s / 2.0), 0), height - s)
    return left, top, left + s, top + s


def crop(
    image_bgr: np.ndarray, box_xyxy: Sequence[float] | np.ndarray, scale: float = DEFAULT_SCALE
) -> np.ndarray:
    """(224, 224, 3) uint8 **RGB** crop of one face (the model's channel order)."""
    img = np.asarray(image_bgr)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"expected an (H, W, 3) BGR image, got shape {img.shape}")
    left, top, right, bottom = crop_box(img.shape[1], img.shape[0], box_xyxy, scale)
    patch = img[top:bottom, left:right]
    interp = cv2.INTER_AREA if patch.shape[0] > INPUT_SIZE else cv2.INTER_LINEAR
    return cv2.cvtColor(cv2.resize(patch, (INPUT_SIZE, INPUT_SIZE), interpolation=interp), cv2.COLOR_BGR2RGB)


class Backbone:
    """EfficientNet-Lite0 features on onnxruntime. Thread-safe: no state changes after construction."""

    def __init__(self, session: Any) -> None:
        names = [i.name for i in session.get_inputs()]
        outputs = [o.name for o in session.get_outputs()]
        if names != [INPUT_NAME] or not {OUTPUT_NAME, TEXTURE_NAME} <= set(outputs):
            raise ValueError(f"not an EfficientNet-Lite0 session: inputs {names}, outputs {outputs}")
        self.session = session

    @classmethod
    def from_registry(cls, registry: ModelRegistry, model_id: str = FLOAT_MODEL_ID) -> Backbone:
        """One build of the backbone: ``FLOAT_MODEL_ID`` (default) or ``INT8_MODEL_ID``, same input and
        outputs. Raises ModelNotInstalled when it is not pulled."""
        if model_id not in MODEL_IDS.values():
            raise ValueError(f"not an EfficientNet-Lite0 build: {model_id!r}")
        return cls(registry.session(model_id))

    def features(self, crops: np.ndarray, batch: int = 16) -> np.ndarray:
        """(N, 1280) float32 features of (N, 224, 224, 3) uint8 RGB crops."""
        return self.describe(crops, batch)[0]

    def describe(self, crops: np.ndarray, batch: int = 16) -> tuple[np.ndarray, np.ndarray]:
        """(N, 1280) features and (N, 464) texture statistics of (N, 224, 224, 3) uint8 RGB crops."""
        c = np.asarray(crops)
        if c.ndim != 4 or c.shape[1:] != (INPUT_SIZE, INPUT_SIZE, 3):
            raise ValueError(f"expected crops of shape (N, {INPUT_SIZE}, {INPUT_SIZE}, 3), got {c.shape}")
        feats = [np.zeros((0, FEATURES), np.float32)]
        tex = [np.zeros((0, TEXTURE), np.float32)]
        for i in range(0, len(c), batch):
            x = np.ascontiguousarray(c[i : i + batch].transpose(0, 3, 1, 2), dtype=np.float32)
            f, t = self.session.run([OUTPUT_NAME, TEXTURE_NAME], {INPUT_NAME: x})
            feats.append(np.asarray(f, np.float32))
            tex.append(np.asarray(t, np.float32))
        return np.concatenate(feats), np.concatenate(tex)


@dataclass(frozen=True)
class BackboneHead:
    """The live/attack head on the backbone: live log-odds = inputs @ weights + bias, where the inputs
    are the 1280 features, then the 464 texture statistics when ``texture``. The standardisation of
    training is folded into the weights. Made by ``python -m train.face_pad_backbone --write``."""

    weights: np.ndarray
    bias: float
    scale: float
    texture: bool
    # The branch alone: log-odds thresholds at SOFT, REGULAR and HARDENED (0.5, 2.5 and 8 % BPCER of
    # the held-aside live photos, per session). The fusion sets its own calibrations.
    thresholds: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @classmethod
    def load(cls, path: Path | None = None) -> BackboneHead:
        path = Path(path) if path is not None else packaged_path(HEAD_ID)
        with np.load(path) as z:
            soft, regular, hardened = (float(v) for v in z["thresholds"])
            head = cls(
                np.asarray(z["weights"], np.float64),
                float(z["bias"]),
                float(z["scale"]),
                bool(z["texture"]),
                (soft, regular, hardened),
            )
        want = FEATURES + (TEXTURE if head.texture else 0)
        if head.weights.shape != (want,):
            raise ValueError(f"{path}: expected {want} weights, got {head.weights.shape}")
        return head

    def live_log_odds(self, features: np.ndarray, texture: np.ndarray) -> np.ndarray:
        x = np.concatenate([features, texture], axis=1) if self.texture else np.asarray(features)
        return x.astype(np.float64) @ self.weights + self.bias


class BackbonePAD:
    """The ``backbone`` branch of the face pipelines: the head's wide crop of a face, the frozen
    backbone's features and texture statistics, the head's live log-odds. Thread-safe."""

    def __init__(self, backbone: Backbone, head: BackboneHead) -> None:
        self.backbone = backbone
        self.head = head

    @classmethod
    def from_registry(cls, registry: ModelRegistry, model_id: str | None = None) -> BackbonePAD:
        """The branch on ``model_id``, by default the build the registry's settings choose
        (``face_backbone_model``: the service's composition goes through here). Both builds share the
        packaged head, trained on float features."""
        mid = model_id_of(registry.settings) if model_id is None else model_id
        return cls(Backbone.from_registry(registry, mid), BackboneHead.load())

    def crop(self, image_bgr: np.ndarray, box_xyxy: Sequence[float] | np.ndarray) -> np.ndarray:
        """(224, 224, 3) uint8 RGB crop at the head's scale of the CenterFace box."""
        return crop(image_bgr, box_xyxy, self.head.scale)

    def live_log_odds(self, crops: np.ndarray) -> np.ndarray:
        """(N,) live log-odds of (N, 224, 224, 3) crops made by :meth:`crop`."""
        return self.head.live_log_odds(*self.backbone.describe(crops, RUN_BATCH))
