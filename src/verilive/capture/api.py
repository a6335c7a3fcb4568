"""HTTP routes of the capture liveness service (capture-liveness.md, 2.1.0 or 2.0.0).

Thin: read the body, call one method of :class:`verilive.capture.service.CaptureService` (decrypt,
decide, BI, metrics, logs; built in ``verilive.capture.deps``), map the result to the schemas. Error
mapping, 2.0.0 behaviour and the extract_data layout: docs/capture.md.

The routes are defined once, at import: ``router`` holds those of both interface versions,
``router_2_1`` those only 2.1.0 has; :func:`build_router` only picks among them.
"""

from __future__ import annotations

import base64
import importlib.util
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from verilive.capture.deps import capture_service
from verilive.capture.engine import CaptureDecision, CaptureValidationError
from verilive.capture.schemas import (
    ApiVersion,
    CaptureLiveness,
    CaptureLivenessResponse,
    ExtractDataResponse,
    FaceLiveness,
)
from verilive.capture.service import unreadable_bundle
from verilive.errors import InvalidParameter, VeriliveError
from verilive.server.bi import parse_date
from verilive.server.context import ServiceContext, get_context
from verilive.server.uploads import OCTET_STREAM_BODY, read_raw_body

Ctx = Annotated[ServiceContext, Depends(get_context)]
DateQ = Annotated[str | None, Query(description="yyyy-MM-dd", json_schema_extra={"format": "date"})]

DATA_TYPES = ("photo", "external")
# Documented by hand: a comma-separated list is `explode: false`, which FastAPI cannot express.
TYPES_PARAM: dict[str, Any] = {
    "name": "types",
    "in": "query",
    "required": True,
    "style": "form",
    "explode": False,
    "description": "Comma-separated list of: photo, external.",
    "schema": {"type": "array", "items": {"type": "string", "enum": list(DATA_TYPES)}},
}


def parse_types(values: list[str]) -> list[str]:
    """Accept both `types=photo,external` and repeated `types=` parameters."""
    out: list[str] = []
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            if item not in DATA_TYPES:
                raise InvalidParameter(f"Unknown type '{item}' in 'types'; allowed: {', '.join(DATA_TYPES)}")
            if item not in out:
                out.append(item)
    if not out:
        raise InvalidParameter("Query parameter 'types' names no type; allowed: photo, external")
    return out


V200 = "2.0.0"


def capture_answer(
    outcome: CaptureDecision | CaptureValidationError, api_version: str
) -> CaptureLivenessResponse:
    """The decision under the interface's names: the one place they are written (2.0.0 knows only
    the three UNKNOWN errors, so there an unusable image is "not live", probability 0)."""
    if isinstance(outcome, CaptureValidationError):
        if api_version == V200:
            return CaptureLivenessResponse(capture_liveness=CaptureLiveness(probability=0.0))
        raise VeriliveError(outcome.message, code=outcome.code)
    if api_version == V200:
        return CaptureLivenessResponse(capture_liveness=CaptureLiveness(probability=outcome.probability))
    face = (
        FaceLiveness(probability=outcome.face_probability) if outcome.face_probability is not None else None
    )
    return CaptureLivenessResponse(
        capture_liveness=CaptureLiveness(
            probability=outcome.probability, score=outcome.score, rejection=outcome.rejection
        ),
        face_liveness=face,
    )


async def bundle_body(request: Request) -> bytes:
    """The raw body; an empty one is not a bundle ('Failed to parse file')."""
    return await read_raw_body(request, "bundle", empty=unreadable_bundle)


# ---------------------------------------------------------------- both interface versions

router = APIRouter()


@router.get("/api_version", response_model=ApiVersion, tags=["info"])
async def api_version_route(ctx: Ctx) -> ApiVersion:
    return ApiVersion(
        product="verilive-capture", version=ctx.api_version, expirationDate=ctx.license_expires_iso()
    )


@router.post(
    "/check_capture_liveness",
    response_model=CaptureLivenessResponse,
    response_model_exclude_none=True,
    tags=["capture"],
    openapi_extra=OCTET_STREAM_BODY,
)
async def check_capture_liveness(ctx: Ctx, request: Request) -> CaptureLivenessResponse:
    blob = await bundle_body(request)
    outcome = await run_in_threadpool(capture_service(ctx).decide, blob)
    return capture_answer(outcome, ctx.api_version)


@router.post(
    "/extract_image",
    response_class=Response,
    tags=["capture"],
    openapi_extra=OCTET_STREAM_BODY,
    responses={200: {"content": {"image/jpeg": {"schema": {"type": "string", "format": "binary"}}}}},
)
async def extract_image(ctx: Ctx, request: Request) -> Response:
    blob = await bundle_body(request)
    bundle = await run_in_threadpool(capture_service(ctx).open, blob, extract=True)
    return Response(bundle.image, media_type="image/jpeg")


# ---------------------------------------------------------------- 2.1.0 only

router_2_1 = APIRouter()


@router_2_1.post(
    "/extract_data",
    response_model=ExtractDataResponse,
    response_model_exclude_none=True,
    tags=["capture"],
    openapi_extra={**OCTET_STREAM_BODY, "parameters": [TYPES_PARAM]},
)
async def extract_data(
    ctx: Ctx,
    request: Request,
    types: Annotated[list[str], Query(include_in_schema=False)],
) -> ExtractDataResponse:
    wanted = parse_types(types)
    blob = await bundle_body(request)
    bundle = await run_in_threadpool(capture_service(ctx).open, blob, extract=True)
    out = ExtractDataResponse()
    if "photo" in wanted:
        out.photo = base64.b64encode(bundle.photo).decode("ascii")
    if "external" in wanted:
        out.external = bundle.external_data
    return out


@router_2_1.get("/bi_records", response_model=list[dict[str, Any]], tags=["bi"])
async def bi_records(ctx: Ctx, date_from: DateQ = None, date_to: DateQ = None) -> list[dict[str, Any]]:
    d0, d1 = parse_date(date_from, "date_from"), parse_date(date_to, "date_to")
    return await run_in_threadpool(capture_service(ctx).bi_records, d0, d1)


def _sdk_router() -> APIRouter | None:
    """The browser SDK and demo routes (`/sdk/...`, `/demo`), when this build has them."""
    if importlib.util.find_spec("verilive.capture.sdk_routes") is None:
        return None
    from verilive.capture.sdk_routes import router as sdk

    return sdk


def build_router(api_version: str) -> APIRouter:
    """The routes of one interface version, in the order of the OpenAPI document: 2.0.0 has neither
    /extract_data nor /bi_records. Picks among the module's routers; defines none."""
    out = APIRouter()
    out.include_router(router)
    sdk = _sdk_router()
    if sdk is not None:
        out.include_router(sdk)
    if api_version != V200:
        out.include_router(router_2_1)
    return out
