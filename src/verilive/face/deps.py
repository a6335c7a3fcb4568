"""The face service's composition root: the one place that builds its engine, collectors and
service.

Each builder makes its object once per app, on first use (``ServiceContext.engine``), from the
app's settings and model registry. Routers and other services ask here; they never build.
"""

from __future__ import annotations

from verilive.face.engine import FaceEngine
from verilive.face.metrics import FaceMetrics
from verilive.face.service import FaceService
from verilive.server.bi import bi_store
from verilive.server.context import ServiceContext

__all__ = ["face_engine", "face_metrics", "face_service"]


def face_engine(ctx: ServiceContext) -> FaceEngine:
    """The face engine (detector, liveness models, fusion); the capture service shares it. Its
    backbone branch runs the build ``ctx.settings.face_backbone_model`` names (BackbonePAD.from_registry
    reads it from the registry's settings, which are the app's)."""
    return ctx.engine("face", lambda: FaceEngine.from_registry(ctx.models, ctx.settings))


def face_metrics(ctx: ServiceContext) -> FaceMetrics:
    return ctx.engine("face_metrics", lambda: FaceMetrics(ctx.metrics.registry))


def face_service(ctx: ServiceContext) -> FaceService:
    """The face routes' service: the engine's decisions, with their BI records and metrics."""
    return ctx.engine(
        "face_service",
        lambda: FaceService(lambda: face_engine(ctx), face_metrics(ctx), lambda: bi_store(ctx)),
    )
