"""What the age and gender models share: a linear function of the standardised CAM++ unit embedding.

``score(u) = weights · ((u − mean) / scale) + bias``; each model maps the score to its answer
(``verilive.voice.age``: exp to years, ``verilive.voice.attributes``: sigmoid to P(male)). Runtime is
numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from verilive.voice.schemas import ChannelType


@dataclass(frozen=True)
class EmbeddingLinearModel:
    """mean, scale, weights: vectors of the embedding's size (scale > 0), bias on the score's scale.

    init_data_id: the embedding space the model was fitted on (the engine's must match).
    channel: the channel processing of the embedding the model reads.
    """

    NAME: ClassVar[str] = "linear model"  # how errors name the model

    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float
    init_data_id: str
    channel: ChannelType

    def __post_init__(self) -> None:
        dims = {self.mean.shape, self.scale.shape, self.weights.shape}
        if len(dims) != 1 or self.weights.ndim != 1:
            raise ValueError(f"{self.NAME}: mean, scale and weights must be vectors of one size")
        if not (
            np.all(np.isfinite(self.mean)) and np.all(self.scale > 0) and np.all(np.isfinite(self.weights))
        ):
            raise ValueError(f"{self.NAME}: non-finite parameters or non-positive scale")
        if not math.isfinite(self.bias):
            raise ValueError(f"{self.NAME}: non-finite bias")

    @staticmethod
    def linear_fields(data: Mapping[str, Any]) -> dict[str, Any]:
        """The shared fields as read from a model's JSON (the keyword arguments of the constructor)."""
        return {
            "mean": np.asarray(data["mean"], dtype=np.float64),
            "scale": np.asarray(data["scale"], dtype=np.float64),
            "weights": np.asarray(data["weights"], dtype=np.float64),
            "bias": float(data["bias"]),
            "init_data_id": str(data["init_data_id"]),
            "channel": ChannelType(data["channel"]),
        }

    @property
    def dim(self) -> int:
        return int(self.weights.size)

    def _vector(self, unit: np.ndarray) -> np.ndarray:
        u = np.asarray(unit, dtype=np.float64)
        if u.shape != self.weights.shape:  # a caller's bug (wrong model), not unsuitable input
            raise ValueError(f"{self.NAME} expects a {self.dim}-d embedding, got shape {u.shape}")
        return u

    def score(self, unit: np.ndarray) -> float:
        """``weights · ((u − mean) / scale) + bias`` of an L2-normalised embedding."""
        u = self._vector(unit)
        return float(self.weights @ ((u - self.mean) / self.scale)) + self.bias
