"""The voice service's composition root: the one place that builds its engines and its service.

Each builder makes its object once per app, on first use (``ServiceContext.engine``), from the
app's settings and model registry. The routes in ``voice/api.py`` only ask here.
"""

from __future__ import annotations

from verilive.errors import Misconfigured, VeriliveError
from verilive.server.context import ServiceContext
from verilive.voice.antispoof import AntiSpoof
from verilive.voice.attributes import AttributesEstimator
from verilive.voice.engine import VoiceEngine
from verilive.voice.service import VoiceService
from verilive.voice.templates import VoiceTemplate

__all__ = ["antispoof_engine", "attributes_estimator", "voice_engine", "voice_service"]


def voice_engine(ctx: ServiceContext) -> VoiceEngine:
    """VAD, CAM++, the matching calibration and the diarizer (segmentation-3.0 + CAM++)."""
    return ctx.engine("voice", lambda: VoiceEngine.from_registry(ctx.models))


def antispoof_engine(ctx: ServiceContext) -> AntiSpoof:
    threads = ctx.settings.onnx_intra_op_threads
    return ctx.engine(
        "antispoof",
        lambda: AntiSpoof.from_engine(voice_engine(ctx), ctx.models, intra_op_threads=threads),
    )


def voice_service(ctx: ServiceContext) -> VoiceService:
    """The requests that combine engines (checked templates, quality, diarization); the
    anti-spoofing engine is built on its first use."""
    return ctx.engine("voice_service", lambda: VoiceService(voice_engine(ctx), lambda: antispoof_engine(ctx)))


def attributes_estimator(ctx: ServiceContext) -> AttributesEstimator:
    """Gender and age models, and the phone-call role templates from the settings."""

    def build() -> AttributesEstimator:
        try:
            ops = [
                VoiceTemplate.decode(t, "operator template") for t in ctx.settings.voice_operator_templates
            ]
            cus = [
                VoiceTemplate.decode(t, "customer template") for t in ctx.settings.voice_customer_templates
            ]
            return AttributesEstimator(voice_engine(ctx), ops, cus)
        except VeriliveError as exc:  # a bad template in the settings is the operator's to fix
            raise Misconfigured(f"Misconfigured phone-call templates: {exc.message}") from exc

    return ctx.engine("attributes", build)
