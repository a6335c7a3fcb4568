"""HTTP routes of the capture liveness service (capture-liveness.md, 2.1.0 or 2.0.0).

Thin: read the body, call :class:`verilive.capture.service.CaptureService` (decrypt, decide, BI,
metrics, logs; built in ``verilive.capture.deps``), map the result to the schemas. Error mapping,
2.0.0 behaviour and the extract_data layout: docs/capture.md.
"""

from __future__ import annotations

import base64
import importlib.util
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from verilive.capture.deps import capture_service
from verilive.capture.engine import CaptureValidationError
from verilive.capture.requests import read_bundle_body
from verilive.capture.schemas import (
    ApiVersion,
    CaptureLiveness,
    CaptureLivenessResponse,
    ExtractDataResponse,
    FaceLiveness,
)
from verilive.capture.service import ENDPOINT
from verilive.errors import InvalidParameter, VeriliveError
from verilive.server.bi import bi_store, parse_date
from verilive.server.context import ServiceContext, get_context
from verilive.server.uploads import OCTET_STREAM_BODY

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


def _sdk_router() -> APIRouter | None:
    """The browser SDK and demo routes (`/sdk/...`, `/demo`), when this build has them."""
    if importlib.util.find_spec("verilive.capture.sdk_routes") is None:
        return None
    from verilive.capture.sdk_routes import build_sdk_router

    return build_sdk_router()


def build_router(api_version: str) -> APIRouter:
    router = APIRouter()
    v200 = api_version == "2.0.0"

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
        blob = await read_bundle_body(request)
        outcome = await run_in_threadpool(capture_service(ctx).decide, blob)
        if isinstance(outcome, CaptureValidationError):
            if v200:
                # 2.0.0 clients know only the three UNKNOWN errors: an unusable image is "not live".
                return CaptureLivenessResponse(capture_liveness=CaptureLiveness(probability=0.0))
            raise VeriliveError(outcome.message, code=outcome.code)
        if v200:
            return CaptureLivenessResponse(capture_liveness=CaptureLiveness(probability=outcome.probability))
        face = (
            FaceLiveness(probability=outcome.face_probability)
            if outcome.face_probability is not None
            else None
        )
        return CaptureLivenessResponse(
            capture_liveness=CaptureLiveness(
                probability=outcome.probability, score=outcome.score, rejection=outcome.rejection
            ),
            face_liveness=face,
        )

    @router.post(
        "/extract_image",
        response_class=Response,
        tags=["capture"],
        openapi_extra=OCTET_STREAM_BODY,
        responses={200: {"content": {"image/jpeg": {"schema": {"type": "string", "format": "binary"}}}}},
    )
    async def extract_image(ctx: Ctx, request: Request) -> Response:
        blob = await read_bundle_body(request)
        bundle = await run_in_threadpool(capture_service(ctx).open, blob, extract=True)
        return Response(bundle.image, media_type="image/jpeg")

    sdk = _sdk_router()
    if sdk is not None:
        router.include_router(sdk)

    if v200:
        return router  # 2.0.0 has neither /extract_data nor /bi_records

    @router.post(
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
        blob = await read_bundle_body(request)
        bundle = await run_in_threadpool(capture_service(ctx).open, blob, extract=True)
        out = ExtractDataResponse()
        if "photo" in wanted:
            out.photo = base64.b64encode(bundle.photo).decode("ascii")
        if "external" in wanted:
            out.external = bundle.external_data
        return out

    @router.get("/bi_records", response_model=list[dict[str, Any]], tags=["bi"])
    async def bi_records(ctx: Ctx, date_from: DateQ = None, date_to: DateQ = None) -> list[dict[str, Any]]:
        d0, d1 = parse_date(date_from, "date_from"), parse_date(date_to, "date_to")
        # One BI store may serve the face and capture services; show this service's records.
        return await run_in_threadpool(bi_store(ctx).records, d0, d1, None, (ENDPOINT,))

    return router
