"""Decision metrics of the face service, on the service's own Prometheus registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from verilive.server.metrics import LATENCY_BUCKETS


class FaceMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(
            "verilive_face_decisions",
            "Liveness decisions by pipeline, outcome (live, spoof, rejected) and error code ('' if none).",
            ["pipeline", "outcome", "error_code"],
            registry=registry,
        )
        self.latency = Histogram(
            "verilive_face_decision_duration_seconds",
            "Engine time per image (decode, detection, validation, models), by pipeline.",
            ["pipeline"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

    def observe(
        self, pipeline: str, probability: float | None, error_code: str | None, seconds: float
    ) -> None:
        outcome = "rejected" if probability is None else "live" if probability >= 0.5 else "spoof"
        self.decisions.labels(pipeline, outcome, error_code or "").inc()
        self.latency.labels(pipeline).observe(seconds)
