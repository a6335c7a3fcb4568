"""Prometheus metrics of one service.

Each service app owns a registry, so `serve all` (three apps in one process) still gives each
service's /metrics only its own series.
"""

from __future__ import annotations

import datetime as dt

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.process_collector import ProcessCollector

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ServiceMetrics:
    def __init__(self, service: str) -> None:
        self.service = service
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        self.requests = Counter(
            "verilive_http_requests",
            "HTTP requests answered, by route template and status.",
            ["service", "method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "verilive_http_request_duration_seconds",
            "Time from request start to the end of the response, by route template and status.",
            ["service", "method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "verilive_http_requests_in_flight",
            "Requests being served now.",
            ["service"],
            registry=self.registry,
        )
        self.model_info = Gauge(
            "verilive_model_info",
            "Models a service uses (1 = loaded, 0 = failed or missing).",
            ["service", "model", "version", "sha256", "license"],
            registry=self.registry,
        )
        self.license_expiry = Gauge(
            "verilive_license_expiration_timestamp_seconds",
            "Licence expiry as a Unix timestamp (end of the expiry day, UTC).",
            ["service"],
            registry=self.registry,
        )
        self.build_info = Gauge(
            "verilive_build_info",
            "Build of the running service.",
            ["service", "version", "git_commit", "api_version"],
            registry=self.registry,
        )

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        labels = (self.service, method, route, str(status))
        self.requests.labels(*labels).inc()
        self.latency.labels(*labels).observe(seconds)

    def set_license_expiry(self, day: dt.date) -> None:
        self.license_expiry.labels(self.service).set(license_expiry_timestamp(day))

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def license_expiry_instant(day: dt.date) -> dt.datetime:
    """The licence is valid through the whole expiry day (UTC)."""
    return dt.datetime.combine(day, dt.time(23, 59, 59), tzinfo=dt.UTC)


def license_expiry_timestamp(day: dt.date) -> float:
    return license_expiry_instant(day).timestamp()
