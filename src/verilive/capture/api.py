"""HTTP routes of the capture liveness service (capture-liveness.md, 2.1.0 or 2.0.0)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from verilive.capture.schemas import ApiVersion, CaptureLivenessResponse, ExtractDataResponse
from verilive.errors import InvalidParameter, NotImplementedYet
from verilive.face.api import iso_expiry
from verilive.server.context import ServiceContext, get_context
from verilive.server.uploads import OCTET_STREAM_BODY, read_raw_body

Ctx = Annotated[ServiceContext, Depends(get_context)]
DateQ = Annotated[dt.date | None, Query(description="yyyy-MM-dd")]

# The spec's image validation codes pass through; every other error code is UNKNOWN there.
VALIDATION_CODES = frozenset(
    {
        "FACE_NOT_FOUND",
        "FACE_CROPPED",
        "FACE_IS_OCCLUDED",
        "TOO_MANY_FACES",
        "FACE_ANGLE_TOO_LARGE",
        "FACE_TOO_SMALL",
        "FACE_CLOSE_TO_BORDER",
        "IMAGE_TOO_SMALL",
    }
)


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


def capture_error_code(code: str | None) -> str:
    return code if code in VALIDATION_CODES else "UNKNOWN"


def _not_yet(what: str) -> NotImplementedYet:
    return NotImplementedYet(f"{what} is not available in this build of verilive")


def build_router(api_version: str) -> APIRouter:
    router = APIRouter()

    @router.get("/api_version", response_model=ApiVersion, tags=["info"])
    async def api_version_route(ctx: Ctx) -> ApiVersion:
        return ApiVersion(product="verilive-capture", version=ctx.api_version, expirationDate=iso_expiry(ctx))

    @router.post(
        "/check_capture_liveness",
        response_model=CaptureLivenessResponse,
        response_model_exclude_none=True,
        tags=["capture"],
        openapi_extra=OCTET_STREAM_BODY,
    )
    async def check_capture_liveness(ctx: Ctx, request: Request) -> CaptureLivenessResponse:
        await read_raw_body(request, "bundle")
        raise _not_yet("Capture liveness")

    @router.post(
        "/extract_image",
        response_class=Response,
        tags=["capture"],
        openapi_extra=OCTET_STREAM_BODY,
        responses={200: {"content": {"image/jpeg": {"schema": {"type": "string", "format": "binary"}}}}},
    )
    async def extract_image(ctx: Ctx, request: Request) -> Response:
        await read_raw_body(request, "bundle")
        raise _not_yet("Bundle extraction")

    if api_version == "2.0.0":
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
        parse_types(types)
        await read_raw_body(request, "bundle")
        raise _not_yet("Bundle extraction")

    @router.get("/bi_records", response_model=list[dict[str, Any]], tags=["bi"])
    async def bi_records(ctx: Ctx, date_from: DateQ = None, date_to: DateQ = None) -> list[dict[str, Any]]:
        raise _not_yet("BI records")

    return router
