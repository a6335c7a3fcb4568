"""The capture service's work behind its routes: decrypt, decide, count, record, log (no HTTP).

:class:`CaptureService` is what both the interface route (/check_capture_liveness) and the demo's
back-end route call, so they decide, write BI records, count metrics and log identically. Errors
are the spec's: a bundle that cannot be read raises :class:`VeriliveError` with one of the three
UNKNOWN messages (HTTP 400); an unusable image comes back as a :class:`CaptureValidationError`
value, which the 2.1.0 route turns into a 400 and the 2.0.0 route into probability 0.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

from verilive.capture.bundle import Bundle, BundleError, KeyRing
from verilive.capture.engine import (
    VALIDATION_CODES,
    CaptureDecision,
    CaptureEngine,
    CaptureInputError,
    CaptureValidationError,
    summarise,
)
from verilive.capture.metrics import CaptureMetrics
from verilive.capture.useragent import platform_of
from verilive.errors import VeriliveError
from verilive.server.bi import BiRecord, BiStore

__all__ = [
    "DECRYPT_FAILED",
    "ENDPOINT",
    "META_FAILED",
    "PARSE_FAILED",
    "CaptureService",
    "capture_error_code",
    "unreadable_bundle",
]

log = logging.getLogger("verilive.capture")

# The spec's three UNKNOWN messages.
PARSE_FAILED = "Failed to parse file"
META_FAILED = "Failed to read a meta data"
DECRYPT_FAILED = "Failed to decrypt message"
_KIND_MESSAGES = {"parse": PARSE_FAILED, "decrypt": DECRYPT_FAILED, "meta": META_FAILED}
# The endpoint name in BI records (the face service may share the BI store).
ENDPOINT = "check_capture_liveness"


# Server configuration errors (503): no client can act on them, an operator can, so they keep their
# own codes instead of the spec's UNKNOWN (docs/capture.md).
CONFIGURATION_CODES = frozenset({"NO_CAPTURE_KEY", "CAPTURE_KEYS_INVALID"})


def unreadable_bundle() -> VeriliveError:
    """The error for a body that is not a bundle at all (an empty one): 'Failed to parse file'."""
    return VeriliveError(PARSE_FAILED, code="UNKNOWN")


def capture_error_code(code: str | None) -> str:
    """The error code a capture answer may carry: a validation or configuration code, else UNKNOWN."""
    return code if code in VALIDATION_CODES or code in CONFIGURATION_CODES else "UNKNOWN"


class CaptureService:
    """Thread-safe when its parts are (they are). ``keys`` is called on each use, so a key ring
    that cannot be loaded fails each request with a clear 503 rather than the app's start;
    ``engine`` and ``bi`` too, so /bi_records answers without the models."""

    def __init__(
        self,
        keys: Callable[[], KeyRing],
        engine: Callable[[], CaptureEngine],
        metrics: CaptureMetrics,
        bi: Callable[[], BiStore],
    ) -> None:
        self.keys = keys
        self._engine = engine
        self.metrics = metrics
        self.bi = bi

    @property
    def engine(self) -> CaptureEngine:
        return self._engine()

    def open(self, blob: bytes, *, extract: bool = False) -> Bundle:
        """Decrypt; BundleError becomes the spec's 400. The extract endpoints list only two messages,
        so there a malformed payload is 'Failed to parse file' (docs/capture.md)."""
        try:
            return self.keys().decrypt(blob)
        except BundleError as exc:
            log.info("capture bundle refused (%s): %s", exc.kind, exc.detail)
            kind = "parse" if extract and exc.kind == "meta" else exc.kind
            raise VeriliveError(_KIND_MESSAGES.get(kind, PARSE_FAILED), code="UNKNOWN") from None

    def decide(self, blob: bytes) -> CaptureDecision | CaptureValidationError:
        """Decrypt and decide, with one BI record, the metrics and a log line for rejections."""
        t0 = time.perf_counter()
        try:
            bundle = self.open(blob)
        except VeriliveError:
            self.metrics.decisions.labels("unreadable", "UNKNOWN").inc()
            raise
        try:
            decision = self.engine.check(bundle)
        except CaptureInputError as exc:
            log.info("capture image unreadable: %s", exc.detail)
            self.metrics.decisions.labels("unreadable", "UNKNOWN").inc()
            raise VeriliveError(META_FAILED, code="UNKNOWN") from None
        except CaptureValidationError as exc:
            log.info("capture rejected: image validation %s (%s)", exc.code, exc.message)
            self.metrics.decisions.labels("invalid", exc.code).inc()
            self.record(bundle, None, exc, 1000.0 * (time.perf_counter() - t0))
            return exc
        self.metrics.decided(decision)
        if decision.rejection:
            # The reasons and what the detectors saw stay on the server (logs, BI, metrics).
            log.info("capture rejected: %s", summarise(decision.findings))
        self.record(bundle, decision, None, 1000.0 * (time.perf_counter() - t0))
        return decision

    def bi_records(self, date_from: dt.date | None, date_to: dt.date | None) -> list[dict[str, Any]]:
        """This service's BI records (one store may serve the face and capture services)."""
        return self.bi().records(date_from, date_to, None, (ENDPOINT,))

    def record(
        self,
        bundle: Bundle,
        decision: CaptureDecision | None,
        error: CaptureValidationError | None,
        latency_ms: float,
    ) -> None:
        config = self.engine.config
        self.bi().add(
            BiRecord(
                time=dt.datetime.now(dt.UTC),
                endpoint=ENDPOINT,
                pipeline=config.pipeline if config.face_liveness else "none",
                calibration="REGULAR",
                platform=platform_of(bundle.environment),
                probability=decision.probability if decision else None,
                quality=decision.quality if decision else None,
                score=decision.score if decision else None,
                error_code=error.code if error else None,
                image_width=decision.width if decision else error.width if error else None,
                image_height=decision.height if decision else error.height if error else None,
                latency_ms=latency_ms,
                rejection=",".join(decision.rejection) if decision and decision.rejection else None,
                motion3d=decision.motion3d if decision else None,
            )
        )
