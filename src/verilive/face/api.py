"""HTTP routes of the face liveness service (face-liveness.md)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Header, Query, UploadFile

from verilive.errors import NotImplementedYet
from verilive.face.pipelines import DEFAULT_PIPELINE, PIPELINES
from verilive.face.schemas import (
    ApiVersion,
    BatchLivenessResult,
    CheckImageResponse,
    LivenessResult,
    RequestError,
)
from verilive.server.context import ServiceContext, get_context
from verilive.server.uploads import require_multipart

Ctx = Annotated[ServiceContext, Depends(get_context)]
PipelineQ = Annotated[str | None, Query(description=f"Pipeline name; default '{DEFAULT_PIPELINE}'.")]
MetaHeader = Annotated[
    str | None,
    Header(
        alias="Meta",
        description='JSON: {"OS": "IOS|ANDROID|DESKTOP|UNKNOWN", "OS_VERSION", "MANUFACTURE", "MODEL"}',
    ),
]
DateQ = Annotated[dt.date | None, Query(description="yyyy-MM-dd")]

# Images may come under any part name; "image" is the documented one (see docs/face.md).
IMAGES_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "image": {"type": "array", "items": {"type": "string", "format": "binary"}}
                    },
                    "additionalProperties": {"type": "string", "format": "binary"},
                }
            }
        },
    }
}


def iso_expiry(ctx: ServiceContext) -> str:
    return ctx.license_expires_at().isoformat().replace("+00:00", "Z")


def _not_yet(what: str) -> NotImplementedYet:
    return NotImplementedYet(f"{what} is not available in this build of verilive")


router = APIRouter()


@router.get("/api_version", response_model=ApiVersion, tags=["info"])
async def api_version(ctx: Ctx) -> ApiVersion:
    return ApiVersion(
        product="verilive-face",
        version=ctx.api_version,
        defaultPipeline=DEFAULT_PIPELINE,
        availablePipelines=list(PIPELINES),
        expirationDate=iso_expiry(ctx),
    )


@router.post(
    "/check_liveness",
    response_model=LivenessResult,
    tags=["liveness"],
    openapi_extra=IMAGES_BODY,
    dependencies=[Depends(require_multipart)],
)
async def check_liveness(ctx: Ctx, pipeline: PipelineQ = None, meta: MetaHeader = None) -> LivenessResult:
    raise _not_yet("Face liveness")


@router.post(
    "/check_image",
    response_model=CheckImageResponse,
    tags=["liveness"],
    dependencies=[Depends(require_multipart)],
)
async def check_image(
    ctx: Ctx,
    data: Annotated[str, Form(description="JSON: {domain, pipelines: [{pipeline, calibration}]}")],
    image: Annotated[UploadFile, File(description="The image file.")],
) -> CheckImageResponse:
    raise _not_yet("Face liveness")


@router.post(
    "/check_liveness_batch",
    # A request-level failure is one {error, error_code} object instead of the array.
    response_model=list[BatchLivenessResult] | RequestError,
    tags=["liveness"],
    openapi_extra=IMAGES_BODY,
    dependencies=[Depends(require_multipart)],
)
async def check_liveness_batch(
    ctx: Ctx, pipeline: PipelineQ = None, meta: MetaHeader = None
) -> list[BatchLivenessResult] | RequestError:
    raise _not_yet("Face liveness")


@router.get("/bi_report", response_model=dict[str, int], tags=["bi"])
async def bi_report(ctx: Ctx, date_from: DateQ = None, date_to: DateQ = None) -> dict[str, int]:
    raise _not_yet("BI reports")


@router.get("/bi_records", response_model=list[dict[str, Any]], tags=["bi"])
async def bi_records(ctx: Ctx, date_from: DateQ = None, date_to: DateQ = None) -> list[dict[str, Any]]:
    raise _not_yet("BI records")
