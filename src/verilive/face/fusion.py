"""How each face pipeline combines its branches' live log-odds, and where its calibrations sit.

``fusion.json`` (written by ``python -m train.face_pad_fusion --write``) holds, per pipeline, the
branches it runs, a logistic regression on their live log-odds (weights and bias, learnt on out-of-fold
scores of held-aside sessions), an optional guard and one offset per calibration. A guard is one more
branch, calibrated on its own; the fused score is the soft minimum ``-log(exp(-z) + exp(-g))`` of the
regression ``z`` and the guard ``g``, so an image that either calls an attack stays an attack (the
wide-crop MiniFASNet models see screen bezels that the face-only view cannot). The offset is added
to the fused log-odds before the sigmoid, so P(live) >= 0.5 exactly when the score clears that
calibration's threshold; each threshold sits at a fixed BPCER of live photos (``target_bpcer``,
counted per session, docs/face.md).

Invariants, checked at load: every pipeline names known branches with one weight each, and its
offsets order SOFT >= REGULAR >= HARDENED, so a softer calibration never judges a photo less live.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from verilive.face.pipelines import PIPELINES, Calibration
from verilive.models.store import packaged_path

PACKAGED_ID = "face_fusion"  # its id in the manifest's packaged section
# "minifasnet_mean" is the logit of the mean MiniFASNet live probability: the engine's score before
# the face-only branch, kept as a guard. "backbone" is the EfficientNet-Lite0 head on a 1.5x crop
# (face/backbone.py).
BRANCHES = ("minifasnet_v2", "minifasnet_v1se", "facepad", "backbone", "minifasnet_mean")


@dataclass(frozen=True)
class Guard:
    branch: str
    weight: float
    bias: float

    def __post_init__(self) -> None:
        if self.branch not in BRANCHES:
            raise ValueError(f"unknown guard branch {self.branch!r}")
        if not self.weight > 0:
            raise ValueError("a guard's weight must be positive (higher log-odds = more live)")


@dataclass(frozen=True)
class PipelineFusion:
    branches: tuple[str, ...]
    weights: tuple[float, ...]
    bias: float
    offsets: dict[Calibration, float]
    target_bpcer: dict[Calibration, float]
    guard: Guard | None = None

    def __post_init__(self) -> None:
        unknown = set(self.branches) - set(BRANCHES)
        if unknown or not self.branches:
            raise ValueError(f"unknown or no fusion branches: {sorted(unknown)}")
        if len(self.weights) != len(self.branches):
            raise ValueError("one fusion weight per branch is needed")
        if set(self.offsets) != set(Calibration):
            raise ValueError(f"offsets needed for {[c.value for c in Calibration]}")
        o = self.offsets
        if not (o[Calibration.SOFT] >= o[Calibration.REGULAR] >= o[Calibration.HARDENED]):
            raise ValueError(f"calibration offsets out of order: {o}")

    @property
    def needs(self) -> tuple[str, ...]:
        """Every branch whose scores :meth:`fuse` reads."""
        return self.branches + (
            (self.guard.branch,) if self.guard and self.guard.branch not in self.branches else ()
        )

    def fuse(self, scores: dict[str, np.ndarray]) -> np.ndarray:
        """(N,) fused live log-odds from each branch's (N,) live log-odds."""
        z = np.full(len(scores[self.branches[0]]), self.bias, dtype=np.float64)
        for b, w in zip(self.branches, self.weights, strict=True):
            z += w * np.asarray(scores[b], dtype=np.float64)
        if self.guard is None:
            return z
        g = self.guard.weight * np.asarray(scores[self.guard.branch], dtype=np.float64) + self.guard.bias
        return -np.logaddexp(-z, -g)


def load_fusion(path: str | Path | None = None) -> dict[str, PipelineFusion]:
    """Every pipeline's fusion, from ``path`` or the packaged fusion.json."""
    source = Path(path) if path is not None else packaged_path(PACKAGED_ID)
    data = json.loads(source.read_text())
    out = {}
    for name in PIPELINES:
        d = data["pipelines"][name]
        out[name] = PipelineFusion(
            branches=tuple(d["branches"]),
            weights=tuple(float(v) for v in d["weights"]),
            bias=float(d["bias"]),
            offsets={Calibration(k): float(v) for k, v in d["offsets"].items()},
            target_bpcer={Calibration(k): float(v) for k, v in d["target_bpcer"].items()},
            guard=Guard(**d["guard"]) if d.get("guard") else None,
        )
    return out
