"""The capture service's composition root: the one place that builds its key ring, engine and
service. The face engine comes from the face service's own root (``verilive.face.deps``): one
decision path for both services, built once per app."""

from __future__ import annotations

import logging

from verilive.capture.bundle import KeyRing
from verilive.capture.engine import CaptureConfig, CaptureEngine
from verilive.capture.keys import CaptureKeys, capture_keys
from verilive.capture.metrics import CaptureMetrics
from verilive.capture.replay import open_replay_store
from verilive.capture.sdk_allowlist import build_allowlist
from verilive.capture.service import CaptureService
from verilive.errors import Misconfigured
from verilive.face.deps import face_engine
from verilive.server.bi import bi_store
from verilive.server.context import ServiceContext

__all__ = ["capture_engine", "capture_service", "key_entries", "key_ring", "problems"]

log = logging.getLogger("verilive.capture")


def key_entries(ctx: ServiceContext) -> CaptureKeys:
    """The keys this service uses: configured, else the local evaluation key where allowed."""
    return ctx.engine("capture_key_entries", lambda: capture_keys(ctx.settings))


def problems(ctx: ServiceContext) -> list[str]:
    """What /health reports for the capture service beyond its models."""
    keys = key_entries(ctx)
    return [keys.problem] if keys.problem else []


def key_ring(ctx: ServiceContext) -> KeyRing:
    def build() -> KeyRing:
        try:
            ring = KeyRing.from_entries(key_entries(ctx).entries)
        except ValueError as exc:
            log.error("capture keys cannot be loaded: %s", exc)
            raise Misconfigured(
                "The capture service's private keys cannot be loaded; see the server log",
                code="CAPTURE_KEYS_INVALID",
            ) from None
        if not ring.key_ids:
            log.warning("capture: %s", key_entries(ctx).problem)
        return ring

    return ctx.engine("capture_keys", build)


def capture_engine(ctx: ServiceContext) -> CaptureEngine:
    def build() -> CaptureEngine:
        s = ctx.settings
        return CaptureEngine(
            face_engine(ctx),
            open_replay_store(s.capture_replay_url),
            build_allowlist(extra=s.capture_sdk_extra_digests),
            CaptureConfig.from_settings(s),
        )

    return ctx.engine("capture", build)


def capture_service(ctx: ServiceContext) -> CaptureService:
    def build() -> CaptureService:
        return CaptureService(
            lambda: key_ring(ctx),
            lambda: capture_engine(ctx),
            ctx.engine("capture_metrics", lambda: CaptureMetrics(ctx.metrics.registry)),
            lambda: bi_store(ctx),
        )

    return ctx.engine("capture_service", build)
