"""HTTP routes of the capture liveness service (capture-liveness.md, 2.1.0 or 2.0.0).

Thin: read the bundle, decrypt it (``verilive.capture.bundle``), let
:class:`verilive.capture.engine.CaptureEngine` decide, write one BI record and the decision metrics,
shape the answer. Error mapping, 2.0.0 behaviour and the extract_data layout: docs/capture.md.
"""

from __future__ import annotations

import base64
import datetime as dt
import importlib.util
import logging
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.concurrency import run_in_threadpool

from verilive.capture.bundle import Bundle, BundleError, KeyRing
from verilive.capture.engine import (
    CaptureConfig,
    CaptureDecision,
    CaptureEngine,
    CaptureInputError,
    CaptureValidationError,
    platform_of,
    summarise,
)
from verilive.capture.replay import open_replay_store
from verilive.capture.schemas import (
    ApiVersion,
    CaptureLiveness,
    CaptureLivenessResponse,
    ExtractDataResponse,
    FaceLiveness,
)
from verilive.capture.sdk_allowlist import build_allowlist
from verilive.errors import InvalidInput, InvalidParameter, VeriliveError
from verilive.face.api import bi_of, iso_expiry
from verilive.face.api import engine_of as face_engine_of
from verilive.server.bi import BiRecord, parse_date
from verilive.server.context import ServiceContext, get_context
from verilive.server.metrics import LATENCY_BUCKETS
from verilive.server.uploads import OCTET_STREAM_BODY, read_raw_body

log = logging.getLogger("verilive.capture")

Ctx = Annotated[ServiceContext, Depends(get_context)]
DateQ = Annotated[str | None, Query(description="yyyy-MM-dd", json_schema_extra={"format": "date"})]

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
# The spec's three UNKNOWN messages.
PARSE_FAILED = "Failed to parse file"
META_FAILED = "Failed to read a meta data"
DECRYPT_FAILED = "Failed to decrypt message"
_KIND_MESSAGES = {"parse": PARSE_FAILED, "decrypt": DECRYPT_FAILED, "meta": META_FAILED}
ENDPOINT = "check_capture_liveness"


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


class CaptureMetrics:
    """Decision counters on the service's own registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(
            "verilive_capture_decisions",
            "Capture decisions by outcome (live, rejected, invalid = validation code, "
            "unreadable = bundle error) and error code ('' if none).",
            ["outcome", "error_code"],
            registry=registry,
        )
        self.rejections = Counter(
            "verilive_capture_rejections",
            "Rejection reasons of capture decisions (one decision may count several).",
            ["reason"],
            registry=registry,
        )
        self.latency = Histogram(
            "verilive_capture_decision_duration_seconds",
            "Engine time per capture decision (decode, validation, face model, detectors).",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

    def decided(self, decision: CaptureDecision) -> None:
        self.decisions.labels("rejected" if decision.rejection else "live", "").inc()
        for reason in decision.rejection:
            self.rejections.labels(reason).inc()
        self.latency.observe(decision.latency_ms / 1000.0)


# ------------------------------------------------------------------------------ engines per app


def keys_of(ctx: ServiceContext) -> KeyRing:
    def build() -> KeyRing:
        try:
            ring = KeyRing.from_settings(ctx.settings)
        except ValueError as exc:
            log.error("capture keys cannot be loaded: %s", exc)
            raise VeriliveError(
                "The capture service's private keys cannot be loaded; see the server log",
                code="CAPTURE_KEYS_INVALID",
                status=503,
            ) from None
        if not ring.key_ids:
            log.warning("no capture private keys configured (VERILIVE_CAPTURE_PRIVATE_KEYS)")
        return ring

    return ctx.engine("capture_keys", build)


def capture_engine_of(ctx: ServiceContext) -> CaptureEngine:
    def build() -> CaptureEngine:
        s = ctx.settings
        return CaptureEngine(
            face_engine_of(ctx),
            open_replay_store(s.capture_replay_url),
            build_allowlist(extra=s.capture_sdk_extra_digests),
            CaptureConfig.from_settings(s),
        )

    return ctx.engine("capture", build)


def metrics_of(ctx: ServiceContext) -> CaptureMetrics:
    return ctx.engine("capture_metrics", lambda: CaptureMetrics(ctx.metrics.registry))


# ------------------------------------------------------------------------------------ requests


async def read_bundle_body(request: Request) -> bytes:
    """The raw body; an empty one is not a bundle ('Failed to parse file')."""
    try:
        return await read_raw_body(request, "bundle")
    except InvalidInput as exc:
        if exc.code == "EMPTY_BODY":
            raise VeriliveError(PARSE_FAILED, code="UNKNOWN") from None
        raise


def open_bundle(ctx: ServiceContext, blob: bytes, *, extract: bool = False) -> Bundle:
    """Decrypt; BundleError becomes the spec's 400. The extract endpoints list only two messages,
    so there a malformed payload is 'Failed to parse file' (docs/capture.md)."""
    try:
        return keys_of(ctx).decrypt(blob)
    except BundleError as exc:
        log.info("capture bundle refused (%s): %s", exc.kind, exc.detail)
        kind = "parse" if extract and exc.kind == "meta" else exc.kind
        raise VeriliveError(_KIND_MESSAGES.get(kind, PARSE_FAILED), code="UNKNOWN") from None


def bi_record(
    ctx: ServiceContext,
    bundle: Bundle,
    decision: CaptureDecision | None,
    error: CaptureValidationError | None,
    latency_ms: float,
) -> None:
    engine = capture_engine_of(ctx)
    pipeline = engine.config.pipeline if engine.config.face_liveness else "none"
    record = BiRecord(
        time=dt.datetime.now(dt.UTC),
        endpoint=ENDPOINT,
        pipeline=pipeline,
        calibration="REGULAR",
        platform=platform_of(bundle),
        probability=decision.probability if decision else None,
        quality=decision.quality if decision else None,
        score=decision.score if decision else None,
        error_code=error.code if error else None,
        image_width=decision.width if decision else error.width if error else None,
        image_height=decision.height if decision else error.height if error else None,
        latency_ms=latency_ms,
        rejection=",".join(decision.rejection) if decision and decision.rejection else None,
    )
    bi_of(ctx).add(record)


def decide(ctx: ServiceContext, blob: bytes) -> CaptureDecision | CaptureValidationError:
    """Decrypt and decide (runs in a worker thread). Bundle errors raise the spec's 400."""
    t0 = time.perf_counter()
    metrics = metrics_of(ctx)
    try:
        bundle = open_bundle(ctx, blob)
    except VeriliveError:
        metrics.decisions.labels("unreadable", "UNKNOWN").inc()
        raise
    try:
        decision = capture_engine_of(ctx).check(bundle)
    except CaptureInputError as exc:
        log.info("capture image unreadable: %s", exc.detail)
        metrics.decisions.labels("unreadable", "UNKNOWN").inc()
        raise VeriliveError(META_FAILED, code="UNKNOWN") from None
    except CaptureValidationError as exc:
        metrics.decisions.labels("invalid", exc.code).inc()
        bi_record(ctx, bundle, None, exc, 1000.0 * (time.perf_counter() - t0))
        return exc
    metrics.decided(decision)
    if decision.rejection:
        # The reasons and what the detectors saw stay on the server (logs, BI, metrics).
        log.info("capture rejected: %s", summarise(decision.findings))
    bi_record(ctx, bundle, decision, None, 1000.0 * (time.perf_counter() - t0))
    return decision


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
        return ApiVersion(product="verilive-capture", version=ctx.api_version, expirationDate=iso_expiry(ctx))

    @router.post(
        "/check_capture_liveness",
        response_model=CaptureLivenessResponse,
        response_model_exclude_none=True,
        tags=["capture"],
        openapi_extra=OCTET_STREAM_BODY,
    )
    async def check_capture_liveness(ctx: Ctx, request: Request) -> CaptureLivenessResponse:
        blob = await read_bundle_body(request)
        outcome = await run_in_threadpool(decide, ctx, blob)
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
        bundle = await run_in_threadpool(open_bundle, ctx, blob, extract=True)
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
        bundle = await run_in_threadpool(open_bundle, ctx, blob, extract=True)
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
        return await run_in_threadpool(bi_of(ctx).records, d0, d1, None, (ENDPOINT,))

    return router
