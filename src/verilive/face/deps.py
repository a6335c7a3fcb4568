"""The face service's composition root: the one place that builds its engine and collectors.

Each builder makes its object once per app, on first use (``ServiceContext.engine``), from the
app's settings and model registry. Routers and other services ask here; they never build.
"""

from __future__ import annotations

from verilive.face.engine import FaceEngine
from verilive.face.metrics import FaceMetrics
from verilive.server.context import ServiceContext

__all__ = ["face_engine", "face_metrics"]


def face_engine(ctx: ServiceContext) -> FaceEngine:
    """The face engine (detector, liveness models, fusion); the capture service shares it."""
    return ctx.engine("face", lambda: FaceEngine.from_registry(ctx.models, ctx.settings))


def face_metrics(ctx: ServiceContext) -> FaceMetrics:
    return ctx.engine("face_metrics", lambda: FaceMetrics(ctx.metrics.registry))
