"""HTTP routes of the face liveness service (face-liveness.md).

Thin: read the parts and parameters, call one method of :class:`verilive.face.service.FaceService`
(built in ``verilive.face.deps``; it judges, writes the BI records and counts the metrics), shape the
answer. check_liveness and
check_liveness_batch always answer 200 (errors in the body); check_image answers 400 for malformed
``data`` (docs/face.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, File, Form, Header, Query, Request, UploadFile
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile as StarletteUpload

import verilive
from verilive.errors import InvalidInput, InvalidParameter
from verilive.face.deps import face_service
from verilive.face.engine import ErrorCode, ImageResult
from verilive.face.meta import Meta, MetaError, parse_meta
from verilive.face.pipelines import DEFAULT_PIPELINE, PIPELINES, Calibration, Domain
from verilive.face.schemas import (
    ApiVersion,
    BatchLivenessResult,
    CheckImageData,
    CheckImageResponse,
    LivenessResult,
    PipelineRequest,
    PipelineResult,
    RequestError,
)
from verilive.server.bi import parse_date
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
DateQ = Annotated[str | None, Query(description="yyyy-MM-dd", json_schema_extra={"format": "date"})]

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

# Parts parsed at most; more than the image limit is refused after parsing, with a clear message.
MAX_PARTS = 1000


class RequestFailure(Exception):
    """A whole-request failure of check_liveness / check_liveness_batch, answered with 200."""

    def __init__(self, error: str, error_code: str | None = None) -> None:
        super().__init__(error)
        self.error = error
        self.error_code = error_code


def check_pipeline(pipeline: str | None) -> str:
    name = DEFAULT_PIPELINE if pipeline in (None, "") else str(pipeline)
    if name not in PIPELINES:
        raise RequestFailure(f"Unsupported pipeline '{name}'; available: {', '.join(PIPELINES)}")
    return name


def meta_of(header: str | None) -> Meta:
    try:
        return parse_meta(header)
    except MetaError as exc:
        raise RequestFailure(str(exc), ErrorCode.INVALID_META.value) from None


async def image_parts(request: Request, limit: int) -> list[tuple[str, bytes]]:
    """(file name, bytes) of every file part, whatever its part name; form fields are ignored."""
    ctype = request.headers.get("content-type", "")
    if not ctype.lower().startswith("multipart/form-data"):
        raise RequestFailure(f"Expected multipart/form-data with image parts, got '{ctype or 'none'}'")
    try:
        form = await request.form(max_files=MAX_PARTS, max_fields=MAX_PARTS)
    except Exception as exc:  # malformed multipart, too many parts: a request failure, never a 500
        detail = getattr(exc, "detail", None) or str(exc)
        raise RequestFailure(f"The multipart body cannot be read: {detail}") from None
    files = [(k, v) for k, v in form.multi_items() if isinstance(v, StarletteUpload)]
    if not files:
        raise RequestFailure("No image part in the request; send the image(s) as multipart file parts")
    if len(files) > limit:
        raise RequestFailure(f"Too many images: {len(files)} parts, at most {limit} per request")
    out = []
    for name, f in files:
        out.append((f.filename or name, await f.read()))
    return out


def values_of(r: ImageResult) -> dict[str, Any]:
    """Success: probability, quality, score. Rejection: error and error_code, nothing else."""
    if r.ok:
        return {"probability": r.probability, "quality": r.quality, "score": r.score}
    return {"error": r.error, "error_code": r.error_code}


def failure(exc: RequestFailure) -> RequestError:
    # error_code is set even when None: the answer carries "error_code": null (face-liveness.md).
    return RequestError(error=exc.error, error_code=exc.error_code)


router = APIRouter()


@router.get("/api_version", response_model=ApiVersion, tags=["info"])
async def api_version(ctx: Ctx) -> ApiVersion:
    return ApiVersion(
        product="verilive-face",
        version=ctx.api_version,
        defaultPipeline=DEFAULT_PIPELINE,
        availablePipelines=list(PIPELINES),
        expirationDate=ctx.license_expires_iso(),
    )


# Answers hold only the fields that apply (values, or error and error_code): exclude_unset.
@router.post(
    "/check_liveness",
    response_model=LivenessResult,
    response_model_exclude_unset=True,
    tags=["liveness"],
    openapi_extra=IMAGES_BODY,
)
async def check_liveness(
    ctx: Ctx, request: Request, pipeline: PipelineQ = None, meta: MetaHeader = None
) -> LivenessResult:
    try:
        name = check_pipeline(pipeline)
        platform = meta_of(meta).platform
        parts = await image_parts(request, ctx.settings.face_max_images)
    except RequestFailure as exc:
        return LivenessResult(**failure(exc).model_dump())
    images = [data for _, data in parts]
    result = await run_in_threadpool(face_service(ctx).check_liveness, images, name, platform)
    return LivenessResult(**values_of(result))


@router.post(
    "/check_image",
    response_model=CheckImageResponse,
    response_model_exclude_unset=True,
    tags=["liveness"],
    dependencies=[Depends(require_multipart)],
)
async def check_image(
    ctx: Ctx,
    data: Annotated[str, Form(description="JSON: {domain, pipelines: [{pipeline, calibration}]}")],
    image: Annotated[UploadFile, File(description="The image file.")],
) -> CheckImageResponse:
    request = parse_check_image_data(data)
    content = await image.read()
    answers = await run_in_threadpool(
        face_service(ctx).check_image, content, request.pipelines, request.domain
    )
    results = [
        PipelineResult(pipeline=name, calibration=calibration.value, **values_of(r))
        for (name, calibration), r in zip(request.pipelines, answers, strict=True)
    ]
    return CheckImageResponse(
        serverVersion=verilive.__version__,
        licenseExpirationDate=ctx.license_expiration_date.isoformat(),
        results=results,
    )


@dataclass
class CheckImageRequest:
    domain: Domain = Domain.GENERAL
    pipelines: list[tuple[str, Calibration]] = field(default_factory=list)


def parse_check_image_data(data: str) -> CheckImageRequest:
    """The ``data`` part, strictly: malformed JSON, unknown names or wrong types are a 400."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"The 'data' part is not valid JSON: {exc}", code="INVALID_DATA") from None
    if not isinstance(raw, dict):
        raise InvalidInput("The 'data' part must be a JSON object", code="INVALID_DATA")
    try:
        parsed = CheckImageData.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise InvalidInput(
            f"The 'data' part is malformed at '{where}': {first['msg']}", code="INVALID_DATA"
        ) from None
    domain = (parsed.domain or Domain.GENERAL.value).upper()
    if domain not in Domain.__members__:
        raise InvalidParameter(f"Unknown domain '{parsed.domain}'; use GENERAL or DESKTOP")
    out = CheckImageRequest(Domain(domain))
    for i, p in enumerate(parsed.pipelines or [PipelineRequest(pipeline=DEFAULT_PIPELINE)]):
        name, cal = p.pipeline, p.calibration or Calibration.REGULAR.value
        if name not in PIPELINES:
            raise InvalidParameter(
                f"Unknown pipeline '{name}' in pipelines[{i}]; available: {', '.join(PIPELINES)}"
            )
        if cal.upper() not in Calibration.__members__:
            raise InvalidParameter(
                f"Unknown calibration '{cal}' in pipelines[{i}]; available: "
                + ", ".join(c.value for c in Calibration)
            )
        out.pipelines.append((name, Calibration(cal.upper())))
    return out


@router.post(
    "/check_liveness_batch",
    # A request-level failure is one {error, error_code} object instead of the array.
    response_model=list[BatchLivenessResult] | RequestError,
    response_model_exclude_unset=True,
    tags=["liveness"],
    openapi_extra=IMAGES_BODY,
)
async def check_liveness_batch(
    ctx: Ctx, request: Request, pipeline: PipelineQ = None, meta: MetaHeader = None
) -> list[BatchLivenessResult] | RequestError:
    try:
        name = check_pipeline(pipeline)
        platform = meta_of(meta).platform
        parts = await image_parts(request, ctx.settings.face_max_images)
    except RequestFailure as exc:
        return failure(exc)
    results = await run_in_threadpool(
        face_service(ctx).check_liveness_batch, [d for _, d in parts], name, platform
    )
    return [
        BatchLivenessResult(file_name=file_name, **values_of(r))
        for (file_name, _), r in zip(parts, results, strict=True)
    ]


@router.get("/bi_report", response_model=dict[str, int], tags=["bi"])
async def bi_report(ctx: Ctx, date_from: DateQ = None, date_to: DateQ = None) -> dict[str, int]:
    d0, d1 = parse_date(date_from, "date_from"), parse_date(date_to, "date_to")
    return await run_in_threadpool(face_service(ctx).bi_report, d0, d1)


@router.get("/bi_records", response_model=list[dict[str, Any]], tags=["bi"])
async def bi_records(ctx: Ctx, date_from: DateQ = None, date_to: DateQ = None) -> list[dict[str, Any]]:
    d0, d1 = parse_date(date_from, "date_from"), parse_date(date_to, "date_to")
    return await run_in_threadpool(face_service(ctx).bi_records, d0, d1)
