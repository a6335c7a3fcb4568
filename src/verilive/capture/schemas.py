"""Response models of the capture liveness service, spelt as in capture-liveness.md."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from verilive.server.types import Float


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ApiVersion(_Model):
    product: str
    version: str
    expirationDate: str


class CaptureLiveness(_Model):
    probability: Float
    score: Float | None = None
    rejection: list[str] | None = None


class FaceLiveness(_Model):
    probability: Float


class CaptureLivenessResponse(_Model):
    capture_liveness: CaptureLiveness
    face_liveness: FaceLiveness | None = None


class ExtractDataResponse(_Model):
    photo: str | None = None
    external: str | None = None


# --- the browser SDK's own routes (not part of capture-liveness.md; docs/capture-sdk.md) ---


class SdkManifest(_Model):
    name: str
    version: str
    file: str
    sha256: str
    integrity: str
    bundleFormat: int


class SdkPublicKey(_Model):
    keyId: str
    publicKey: str


class DemoVerdict(_Model):
    accepted: bool


class DemoAnswer(_Model):
    """All the demo's back-end route tells the browser (docs/security.md)."""

    capture_liveness: DemoVerdict


class PlacementFace(_Model):
    box: list[float]  # x, y, width, height as fractions of the frame
    score: float
    yaw: float
    pitch: float


class PlacementAnswer(_Model):
    """``POST /sdk/placement``: where the faces are in a preview frame (docs/capture-sdk.md)."""

    width: int
    height: int
    faces: list[PlacementFace]
