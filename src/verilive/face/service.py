"""The face service's work behind its routes: judge, count, record (no HTTP).

:class:`FaceService` is what the face routes call: one method per endpoint, each returning the
engine's :class:`ImageResult` (or a list of them) after writing one BI record and the decision
metrics per result. The routes parse the request and shape the answer; they choose nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from verilive.face.engine import FaceEngine, ImageResult
from verilive.face.metrics import FaceMetrics
from verilive.face.pipelines import Calibration, Domain
from verilive.server.bi import BiRecord, BiStore

__all__ = ["FACE_ENDPOINTS", "FaceService"]

# The face service's BI endpoints show its own decisions (the store may be shared with capture).
FACE_ENDPOINTS = ("check_liveness", "check_liveness_batch", "check_image")


class FaceService:
    """Thread-safe when its parts are (they are). ``engine`` and ``bi`` are called on each use, so
    the BI endpoints answer without the models, and each part is the app's current one."""

    def __init__(
        self, engine: Callable[[], FaceEngine], metrics: FaceMetrics, bi: Callable[[], BiStore]
    ) -> None:
        self._engine = engine
        self.metrics = metrics
        self.bi = bi

    @property
    def engine(self) -> FaceEngine:
        return self._engine()

    def check_liveness(self, images: Sequence[bytes], pipeline: str, platform: str) -> ImageResult:
        """One answer for one image, or for a series of frames of one capture (docs/face.md)."""
        if len(images) == 1:
            result = self.engine.check(images[0], pipeline)
        else:
            result = self.engine.check_series(images, pipeline)
        self.record("check_liveness", pipeline, Calibration.REGULAR, platform, [result])
        return result

    def check_liveness_batch(
        self, images: Sequence[bytes], pipeline: str, platform: str
    ) -> list[ImageResult]:
        """One answer per image."""
        results = self.engine.check_images(images, pipeline)
        self.record("check_liveness_batch", pipeline, Calibration.REGULAR, platform, results)
        return results

    def check_image(
        self, image: bytes, pipelines: Sequence[tuple[str, Calibration]], domain: Domain
    ) -> list[ImageResult]:
        """One answer per (pipeline, calibration), in the order asked."""
        results = []
        for name, calibration in pipelines:
            r = self.engine.check(image, name, calibration, domain)
            self.record("check_image", name, calibration, "UNKNOWN", [r])
            results.append(r)
        return results

    def bi_report(self, date_from: dt.date | None, date_to: dt.date | None) -> dict[str, int]:
        return self.bi().report(date_from, date_to, FACE_ENDPOINTS)

    def bi_records(self, date_from: dt.date | None, date_to: dt.date | None) -> list[dict[str, Any]]:
        return self.bi().records(date_from, date_to, None, FACE_ENDPOINTS)

    def record(
        self,
        endpoint: str,
        pipeline: str,
        calibration: str,
        platform: str,
        results: Sequence[ImageResult],
    ) -> None:
        """One BI record and one decision count per result. Never the image, nothing personal."""
        now = dt.datetime.now(dt.UTC)
        rows = []
        for r in results:
            self.metrics.observe(pipeline, r.probability, r.error_code, r.latency_ms / 1000.0)
            rows.append(
                BiRecord(
                    time=now,
                    endpoint=endpoint,
                    pipeline=pipeline,
                    calibration=calibration,
                    platform=platform,
                    probability=r.probability,
                    quality=r.quality,
                    score=r.score,
                    error_code=r.error_code,
                    image_width=r.width,
                    image_height=r.height,
                    latency_ms=r.latency_ms,
                    motion3d=r.motion3d,
                )
            )
        self.bi().add_many(rows)
