"""/health (200 or 503) and /metrics (Prometheus text) for every service."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

import verilive
from verilive.server.context import ServiceContext


class HealthResponse(BaseModel):
    status: Literal["UP", "DOWN"]
    service: str
    version: str
    problems: list[str]
    models: dict[str, dict[str, Any]]
    licenseExpirationDate: str


def health_report(ctx: ServiceContext) -> HealthResponse:
    problems: list[str] = []
    status = ctx.models.status(ctx.required_models)
    for mid in ctx.required_models:
        st = status.get(mid)
        if st is None or not st.get("loaded"):
            reason = (st or {}).get("error") or "not loaded"
            problems.append(f"model {mid}: {reason}")
    if ctx.problems is not None:
        problems += ctx.problems(ctx)
    if ctx.license_expired():
        problems.append(f"licence expired on {ctx.license_expiration_date.isoformat()}")
    return HealthResponse(
        status="DOWN" if problems else "UP",
        service=ctx.service,
        version=verilive.__version__,
        problems=problems,
        models={mid: status.get(mid, {"loaded": False}) for mid in ctx.required_models},
        licenseExpirationDate=ctx.license_expiration_date.isoformat(),
    )


router = APIRouter(tags=["monitoring"])
DOWN_DESCRIPTION = "A model failed, the licence expired or the service lacks a key it needs."


@router.get(
    "/health",
    response_model=HealthResponse,
    responses={503: {"model": HealthResponse, "description": DOWN_DESCRIPTION}},
)
async def health(request: Request) -> JSONResponse:
    report = health_report(request.app.state.ctx)
    return JSONResponse(report.model_dump(), status_code=200 if report.status == "UP" else 503)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def metrics(request: Request) -> Response:
    ctx: ServiceContext = request.app.state.ctx
    # Refresh the expiry gauge so a config change shows up without a restart.
    ctx.metrics.set_license_expiry(ctx.license_expiration_date)
    body, content_type = ctx.metrics.render()
    return Response(body, media_type=content_type)
