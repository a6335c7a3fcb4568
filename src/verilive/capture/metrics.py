"""Prometheus collectors of the capture service's decisions (on the app's own registry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from verilive.capture.engine import CaptureDecision
from verilive.server.metrics import LATENCY_BUCKETS

__all__ = ["CaptureMetrics"]


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
