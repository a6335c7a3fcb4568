"""Request and response models of the face liveness service, spelt as in face-liveness.md."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from verilive.server.types import Float


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class LivenessResult(_Model):
    probability: Float | None = Field(None, description="0 = spoof … 1 = live; live from 0.5.")
    quality: Float | None = Field(None, description="Suitability of the image for a liveness check, 0..1.")
    score: Float | None = Field(None, description="Unbounded log-odds; larger = more likely live.")
    error: str | None = None
    error_code: str | None = None


class RequestError(_Model):
    """Request-level failure of a batch (e.g. an unknown pipeline)."""

    error: str
    error_code: str | None = None


class BatchLivenessResult(LivenessResult):
    file_name: str | None = None


class PipelineRequest(_Model):
    pipeline: str
    calibration: str | None = None


class CheckImageData(_Model):
    domain: str | None = Field(None, description="GENERAL or DESKTOP.")
    pipelines: list[PipelineRequest] | None = None


class PipelineResult(_Model):
    pipeline: str
    calibration: str
    score: Float | None = None
    probability: Float | None = None
    quality: Float | None = None
    error: str | None = None
    error_code: str | None = None


class CheckImageResponse(_Model):
    serverVersion: str
    licenseExpirationDate: str
    results: list[PipelineResult]


class ApiVersion(_Model):
    product: str
    version: str
    defaultPipeline: str
    availablePipelines: list[str]
    expirationDate: str
