"""Routes that serve the browser capture SDK, its manifest, the current public key and the demo page.

They are not part of the capture-liveness interface, so they stay out of the OpenAPI document:

- ``GET /sdk/verilive-capture.js``: the SDK, byte for byte the file the SDK allow-list hashes;
- ``GET /sdk/manifest.json``: name, version, SHA-256 and the Subresource Integrity value of the SDK;
- ``GET /sdk/public_key``: ``{keyId, publicKey}`` of the current key (the first configured one);
- ``GET /sdk/messages.json``: every text the demo page shows, keyed by status code, per language;
- ``POST /sdk/placement``: where the faces are in a small preview frame, for the SDK's hints where
  the browser has no face detector; it decides and stores nothing (``verilive.capture.placement``);
- ``GET /demo``: a page that captures, sends the bundle and shows the answer (docs/capture-sdk.md);
- ``POST /demo/check_capture_liveness``: the demo's stand-in for an integrator's back end. It decides
  like ``/check_capture_liveness`` (same BI record, metrics and log line) but answers without
  ``rejection``: the reasons must never reach the capture client (docs/security.md).
"""

from __future__ import annotations

import base64
import hashlib
import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from verilive.capture.bundle import KeyRing, public_key_b64
from verilive.capture.deps import capture_engine, capture_service, key_entries
from verilive.capture.engine import CaptureValidationError
from verilive.capture.placement import MAX_BYTES as PLACEMENT_MAX_BYTES
from verilive.capture.schemas import (
    DemoAnswer,
    DemoVerdict,
    PlacementAnswer,
    PlacementFace,
    SdkManifest,
    SdkPublicKey,
)
from verilive.capture.service import unreadable_bundle
from verilive.errors import Misconfigured, VeriliveError
from verilive.server.context import ServiceContext, get_context
from verilive.server.uploads import read_raw_body

__all__ = [
    "SDK_FILE",
    "STATIC_DIR",
    "SdkFile",
    "client_answer",
    "current_public_key",
    "router",
    "sdk_file",
]

STATIC_DIR = Path(__file__).resolve().parent / "static"
SDK_FILE = "verilive-capture.js"
_VERSION = re.compile(r"""\bVERSION\s*=\s*["']([0-9A-Za-z.+-]{1,40})["']""")

Ctx = Annotated[ServiceContext, Depends(get_context)]


class SdkFile:
    """The SDK's bytes, read once, with the digests clients and the allow-list compare."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        digest = hashlib.sha256(data)
        self.sha256 = digest.hexdigest()
        self.integrity = "sha256-" + base64.b64encode(digest.digest()).decode("ascii")
        m = _VERSION.search(data[:20_000].decode("utf-8", "replace"))
        self.version = m.group(1) if m else ""

    def manifest(self) -> SdkManifest:
        return SdkManifest(
            name="verilive-capture-js",
            version=self.version,
            file=f"/sdk/{SDK_FILE}",
            sha256=self.sha256,
            integrity=self.integrity,
            bundleFormat=1,
        )


@lru_cache(maxsize=1)
def sdk_file() -> SdkFile:
    return SdkFile((STATIC_DIR / SDK_FILE).read_bytes())


def current_public_key(entries: list[str]) -> SdkPublicKey:
    """``{keyId, publicKey}`` of the first ``capture_private_keys`` entry: the key clients should use.

    The other entries stay valid for decryption (rotation, docs/bundle-format.md), so the first one
    is the newest by convention.
    """
    if not entries:
        raise Misconfigured(
            "No capture key is configured (VERILIVE_CAPTURE_PRIVATE_KEYS); the operator's fix is in /health",
            code="NO_CAPTURE_KEY",
        )
    entry = entries[0]
    key_id = KeyRing.from_entries([entry]).key_ids[0]  # parses "<key id>=<path>" as decryption does
    path = Path(entry).expanduser()
    if not path.is_file():
        path = Path(entry.partition("=")[2]).expanduser()
    return SdkPublicKey(keyId=key_id, publicKey=public_key_b64(path.read_bytes()))


def client_answer(probability: float) -> DemoAnswer:
    """What a capture client may see: accepted or not, nothing more (docs/security.md).

    Not the reasons, not the score, and no probability either: the capture probability is
    sigmoid(face log-odds - 3 x the number of reasons), so next to the face probability (or across
    two tries) it would give the number of failed checks away.
    """
    return DemoAnswer(capture_liveness=DemoVerdict(accepted=probability >= 0.5))


def _static(name: str, media_type: str) -> Response:
    return Response(
        (STATIC_DIR / name).read_bytes(),
        media_type=media_type,
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )


router = APIRouter(include_in_schema=False)


@router.get("/sdk/verilive-capture.js")
async def sdk_js(request: Request) -> Response:
    sdk = sdk_file()
    etag = f'"{sdk.sha256}"'
    # no-cache means "revalidate": the SDK fetches itself to hash its own code, and the ETag lets
    # that second request be answered from the browser cache with the same bytes.
    headers = {"ETag": etag, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(sdk.data, media_type="text/javascript; charset=utf-8", headers=headers)


@router.get("/sdk/manifest.json", response_model=SdkManifest)
async def sdk_manifest(response: Response) -> SdkManifest:
    response.headers["Cache-Control"] = "no-cache"
    return sdk_file().manifest()


@router.get("/sdk/public_key", response_model=SdkPublicKey)
async def sdk_public_key(ctx: Ctx, response: Response) -> SdkPublicKey:
    response.headers["Cache-Control"] = "no-cache"
    return current_public_key(list(key_entries(ctx).entries))


@router.get("/sdk/messages.json")
async def sdk_messages() -> Response:
    return _static("messages.json", "application/json")


@router.post("/sdk/placement", response_model=PlacementAnswer)
async def sdk_placement(ctx: Ctx, request: Request, response: Response) -> PlacementAnswer:
    response.headers["Cache-Control"] = "no-store"
    data = await read_raw_body(request, "placement frame", max_bytes=PLACEMENT_MAX_BYTES)
    width, height, faces = await run_in_threadpool(capture_engine(ctx).placement, data)
    return PlacementAnswer(
        width=width,
        height=height,
        faces=[PlacementFace(box=list(f.box), score=f.score, yaw=f.yaw, pitch=f.pitch) for f in faces],
    )


@router.get("/demo")
async def demo() -> Response:
    return _static("demo.html", "text/html; charset=utf-8")


@router.post("/demo/check_capture_liveness", response_model=DemoAnswer)
async def demo_check(ctx: Ctx, request: Request) -> DemoAnswer:
    blob = await read_raw_body(request, "bundle", empty=unreadable_bundle)
    outcome = await run_in_threadpool(capture_service(ctx).decide, blob)
    if isinstance(outcome, CaptureValidationError):
        raise VeriliveError(outcome.message, code=outcome.code)
    return client_answer(outcome.probability)
