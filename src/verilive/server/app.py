"""Builds the FastAPI app of one service: routers, errors, middleware, metrics, Swagger UI."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, FastAPI

import verilive
from verilive.capture.replay import open_replay_store
from verilive.config import Settings, get_settings
from verilive.models.sessions import ModelRegistry
from verilive.server import health
from verilive.server.auth import BACKOFFICE_PATHS, ApiKeyMiddleware, KeyRing, RateCounter
from verilive.server.buildinfo import git_commit
from verilive.server.context import ServiceContext
from verilive.server.errors import install_error_handlers
from verilive.server.memory import release_free_memory
from verilive.server.metrics import ServiceMetrics
from verilive.server.middleware import RequestContextMiddleware
from verilive.server.openapi import install_openapi
from verilive.server.swagger import install_swagger

log = logging.getLogger("verilive.server")


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: only this machine can connect."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def route_paths(routes: Iterable[Any]) -> set[str]:
    """Every path served, through included routers (FastAPI keeps those as wrappers)."""
    out: set[str] = set()
    for r in routes:
        if isinstance(getattr(r, "path", None), str):
            out.add(r.path)
        inner = getattr(r, "original_router", None) or getattr(r, "routes", None)
        if inner is not None:
            out |= route_paths(inner.routes if hasattr(inner, "routes") else inner)
    return out


def open_routes_warning(settings: Settings, app: FastAPI) -> str | None:
    """The start-up warning when no API keys are set and the service listens beyond loopback."""
    if settings.api_keys or is_loopback(settings.host):
        return None
    paths = sorted(route_paths(app.routes) & (BACKOFFICE_PATHS | {"/metrics"}))
    return (
        f"no API keys are configured and the service listens on {settings.host}: anyone who can reach "
        f"it can call every endpoint, including {', '.join(paths)}; set VERILIVE_API_KEYS "
        "(`verilive keys api`, docs/security.md)"
    )


SERVICES = ("face", "voice", "capture")


@dataclass(frozen=True)
class ServiceDefinition:
    name: str
    title: str
    description: str
    api_version: Callable[[Settings], str]
    required_models: tuple[str, ...]
    router: Callable[[Settings], APIRouter]
    error_code_map: Callable[[str | None], str | None] | None = None
    # What /health reports beyond the models (e.g. the capture service's missing key)
    problems: Callable[[ServiceContext], list[str]] | None = None


def _voice_router(settings: Settings) -> APIRouter:
    from verilive.voice.api import router

    return router


def _face_router(settings: Settings) -> APIRouter:
    from verilive.face.api import router

    return router


def _capture_router(settings: Settings) -> APIRouter:
    from verilive.capture.api import build_router

    return build_router(settings.capture_api_version)


def _capture_problems(ctx: ServiceContext) -> list[str]:
    from verilive.capture.deps import problems

    return problems(ctx)


def _capture_codes(code: str | None) -> str | None:
    from verilive.capture.service import capture_error_code

    return capture_error_code(code)


DEFINITIONS: dict[str, ServiceDefinition] = {
    "voice": ServiceDefinition(
        name="voice",
        title="verilive voice analysis",
        description="Voice templates, matching, identification, speech analysis (voice-analysis.md 1.12.5).",
        api_version=lambda s: "1.12.5",
        required_models=(
            "silero_vad",
            "campplus",
            "campplus_tel",
            "pyannote_segmentation",
            "pyannote_segmentation_tel",
            "whisper_base_encoder",
        ),
        router=_voice_router,
    ),
    "face": ServiceDefinition(
        name="face",
        title="verilive face liveness",
        description="Passive face liveness (face-liveness.md).",
        # BI date parameters are optional from server version 1.30 on, and so they are here.
        api_version=lambda s: "1.30.0",
        required_models=("centerface", "minifasnet_v2", "minifasnet_v1se", "face_mesh", "efficientnet_lite0"),
        router=_face_router,
    ),
    "capture": ServiceDefinition(
        name="capture",
        title="verilive capture liveness",
        description="Liveness of encrypted capture bundles (capture-liveness.md).",
        api_version=lambda s: s.capture_api_version,
        required_models=("centerface", "minifasnet_v2", "minifasnet_v1se", "face_mesh", "efficientnet_lite0"),
        router=_capture_router,
        error_code_map=_capture_codes,
        problems=_capture_problems,
    ),
}


def create_service_app(
    service: str,
    settings: Settings | None = None,
    models: ModelRegistry | None = None,
) -> FastAPI:
    if service not in DEFINITIONS:
        raise ValueError(f"unknown service {service!r}; choose one of {', '.join(SERVICES)}")
    definition = DEFINITIONS[service]
    settings = settings or get_settings()
    models = models or ModelRegistry(settings)
    metrics = ServiceMetrics(service)
    # Per-key rate limits count in the capture replay store (SQLite, or Redis across replicas).
    rates = (
        RateCounter(open_replay_store(settings.capture_replay_url))
        if any(k.rate_per_minute for k in settings.api_keys)
        else None
    )
    ctx = ServiceContext(
        service=service,
        api_version=definition.api_version(settings),
        settings=settings,
        models=models,
        metrics=metrics,
        required_models=definition.required_models,
        problems=definition.problems,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Load models up front: the first request should not pay for it, and /health
        # must say at once when a model is broken.
        models.load(list(definition.required_models))
        for mid, st in models.status().items():
            if mid in definition.required_models:
                metrics.model_info.labels(
                    service,
                    mid,
                    str(st.get("version", "")),
                    str(st.get("sha256", "")),
                    str(st.get("licence", "")),
                ).set(1 if st.get("loaded") else 0)
        for mid in models.missing(list(definition.required_models)):
            log.error("model %s is not installed; run: verilive models pull %s", mid, mid)
        release_free_memory()  # what loading freed stays in the heap otherwise (server/memory.py)
        # Service problems (e.g. the capture key, or its local evaluation key) are said at start
        for problem in definition.problems(ctx) if definition.problems is not None else []:
            log.error("%s: %s", service, problem)
        warning = open_routes_warning(settings, app)
        if warning is not None:
            log.warning("%s: %s", service, warning)
        yield
        ctx.close()
        if rates is not None:
            rates.store.close()

    app = FastAPI(
        title=definition.title,
        description=definition.description,
        version=verilive.__version__,
        lifespan=lifespan,
        docs_url=None,  # the default page loads Swagger UI from a CDN; ours is local
        redoc_url=None,
        openapi_url="/openapi.json",
        # No trailing-slash redirect: Starlette builds its Location from the request's Host header,
        # so `/bi_records/` with `Host: evil.example` answered `Location: http://evil.example/...`
        # (issue 44). The API has no paths with a trailing slash; such a path is the usual 404.
        redirect_slashes=False,
    )
    app.state.ctx = ctx
    app.state.error_code_map = definition.error_code_map
    metrics.set_license_expiry(settings.license_expiration_date)
    metrics.build_info.labels(
        service, verilive.__version__, git_commit(settings.git_commit), ctx.api_version
    ).set(1)

    install_error_handlers(app)
    app.include_router(definition.router(settings))
    app.include_router(health.router)
    install_swagger(app)
    install_openapi(app)
    if settings.api_keys:  # none: no middleware, every route answers as before
        app.add_middleware(ApiKeyMiddleware, keys=KeyRing(settings.api_keys), rates=rates)
    app.add_middleware(RequestContextMiddleware, metrics=metrics, max_body_bytes=settings.max_body_bytes)
    return app
