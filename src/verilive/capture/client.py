"""Python capture client: builds the same encrypted bundle as the browser SDK from an image file.

Meant for server-side tests and for kiosks that capture with their own camera code. The defaults
describe a Python client honestly (no browser, no screen, no touch); callers may add what they know.
"""

from __future__ import annotations

import base64
import hashlib
import os
import platform
import time
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import cv2
import numpy as np

import verilive
from verilive.capture.bundle import (
    BURST_MAX_FRAMES,
    encode_burst,
    encode_payload,
    key_id_of,
    load_public_key_b64,
    part_digests,
    seal,
)
from verilive.face.image import decode_image

__all__ = [
    "BURST_CUE",
    "SDK_NAME",
    "CaptureClient",
    "build_bundle",
    "burst_frames",
    "make_photo",
    "sdk_identity",
]

SDK_NAME = "verilive-capture-python"
PHOTO_MAX_SIDE = 320  # the "small photo": enough for a thumbnail, far smaller than the image
PHOTO_QUALITY = 85
IMAGE_QUALITY = 95  # only for images that are not JPEG already
# Burst frames for the 3D check from motion: downscaled (the server's check works at 640 px) and JPEG'd
# so that 12 frames add about 0.4 MB (docs/bundle-format.md, "Burst").
BURST_MAX_SIDE = 640
BURST_QUALITY = 80
BURST_CUE = "turn-left-then-back"  # what the browser SDK asks; callers name their own cue


def burst_frames(frames: Sequence[np.ndarray | bytes]) -> list[bytes]:
    """Burst frames as the bundle carries them: BGR arrays or encoded images, each scaled so that its
    longer side is at most BURST_MAX_SIDE and encoded as JPEG (EXIF orientation applied)."""
    if not 3 <= len(frames) <= BURST_MAX_FRAMES:
        raise ValueError(f"a burst has 3 to {BURST_MAX_FRAMES} frames, got {len(frames)}")
    out = []
    for f in frames:
        bgr = decode_image(bytes(f)).bgr if isinstance(f, bytes | bytearray) else np.asarray(f)
        if bgr.ndim != 3 or bgr.shape[2] != 3 or bgr.dtype != np.uint8:
            raise ValueError("burst frames must be BGR uint8 images or encoded images")
        h, w = bgr.shape[:2]
        scale = min(1.0, BURST_MAX_SIDE / max(h, w))
        if scale < 1.0:
            size = (max(1, round(w * scale)), max(1, round(h * scale)))
            bgr = cv2.resize(bgr, size, interpolation=cv2.INTER_AREA)
        out.append(_encode_jpeg(bgr, BURST_QUALITY))
    return out


@lru_cache(maxsize=1)
def sdk_identity() -> dict[str, str]:
    """Name, version and digest (SHA-256 of client.py then bundle.py, as installed)."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in ("client.py", "bundle.py"):
        h.update((here / name).read_bytes())
    return {"name": SDK_NAME, "version": verilive.__version__, "digest": h.hexdigest()}


def _encode_jpeg(bgr: np.ndarray, quality: int) -> bytes:
    ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError("could not encode the image as JPEG")
    return buf.tobytes()


def make_photo(bgr: np.ndarray, max_side: int = PHOTO_MAX_SIDE) -> bytes:
    """The small photo: the upright image scaled so its longer side is at most ``max_side``."""
    h, w = bgr.shape[:2]
    scale = min(1.0, max_side / max(h, w))
    if scale < 1.0:
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        bgr = cv2.resize(bgr, size, interpolation=cv2.INTER_AREA)
    return _encode_jpeg(bgr, PHOTO_QUALITY)


def _default_environment() -> dict[str, Any]:
    system = f"{platform.system()} {platform.machine()}"
    return {
        "client": "python",
        "userAgent": f"verilive-python/{verilive.__version__} (Python {platform.python_version()}; {system})",
        "platform": platform.system(),
        "webdriver": False,
        "automation": {},
        "screen": None,
        "maxTouchPoints": 0,
        "touch": False,
        "userAgentData": None,
    }


def new_nonce() -> str:
    """16 random bytes, base64url without padding (22 characters)."""
    return base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode("ascii")


def build_bundle(
    public_key_b64: str,
    key_id: str | None,
    image: bytes | str | Path,
    *,
    context: dict[str, Any] | None = None,
    environment: dict[str, Any] | None = None,
    external_data: str = "",
    photo: bytes | None = None,
    sdk: dict[str, Any] | None = None,
    nonce: str | None = None,
    timestamp_ms: int | None = None,
    digests_override: dict[str, Any] | None = None,
    burst: Sequence[np.ndarray | bytes] | None = None,
    burst_t_ms: Sequence[int] | None = None,
    burst_info: dict[str, Any] | None = None,
    still_index: int | None = None,
) -> bytes:
    """Build an encrypted capture bundle (docs/bundle-format.md).

    ``image`` is the full-resolution capture; a non-JPEG image is re-encoded as JPEG. ``context`` and
    ``environment`` are merged over honest defaults (the caller's values win). ``key_id`` None means
    the key id derived from the public key. ``digests_override`` replaces digests (part name -> hex)
    and, under ``"sizes"``, sizes: it exists only to test tamper detection.

    ``burst``: 3-32 frames of the face moving (the person turning the head when asked), oldest first,
    for the server's 3D check; ``burst_t_ms`` their times in ms from the first (default: 200 ms
    apart); ``burst_info`` more members of ``meta.burst`` (``cue``, ``turn_deg`` measured on the
    device, ``attempts``). ``still_index`` (required with a burst): the burst frame recorded at the
    same moment as ``image``, which must be that very camera frame at full resolution; the server
    refuses a burst that is not bound to the still (docs/motion3d.md, "Binding").
    """
    _, der = load_public_key_b64(public_key_b64)  # fail on a bad key before any image work
    data = Path(image).read_bytes() if isinstance(image, str | Path) else bytes(image)
    decoded = decode_image(data)
    if decoded.format != "JPEG":
        data = _encode_jpeg(decoded.bgr, IMAGE_QUALITY)
    if photo is None:
        photo = make_photo(decoded.bgr)

    ctx: dict[str, Any] = {
        "camera_label": "python-client",
        "track_settings": {"width": decoded.width, "height": decoded.height},
        "resolution": {"width": decoded.width, "height": decoded.height},
        # One still image: no preview frames were looked at before it.
        "frame_timing": {"count": 0, "mean_ms": 0.0, "std_ms": 0.0, "min_ms": 0.0, "max_ms": 0.0},
        "frames_seen": 1,
    }
    ctx.update(context or {})
    env = _default_environment()
    env.update(environment or {})

    burst_part = None
    burst_meta: dict[str, Any] | None = None
    if burst is not None:
        if isinstance(still_index, bool) or not isinstance(still_index, int):
            raise ValueError("still_index: which burst frame the image was taken with (an integer)")
        if not 0 <= still_index < len(burst):
            raise ValueError(f"still_index {still_index} is outside the burst's {len(burst)} frames")
        jpegs = burst_frames(burst)
        t_ms = list(burst_t_ms) if burst_t_ms is not None else [200 * i for i in range(len(jpegs))]
        if len(t_ms) != len(jpegs):
            raise ValueError("burst_t_ms needs one time per burst frame")
        burst_part = encode_burst(jpegs)
        burst_meta = {
            "cue": BURST_CUE,
            **(burst_info or {}),
            "t_ms": [int(t) for t in t_ms],
            "still_index": still_index,
        }
    digests, sizes = part_digests(data, photo, external_data, burst_part)
    override = dict(digests_override or {})
    sizes.update(override.pop("sizes", {}))
    digests.update(override)
    meta = {
        "context": ctx,
        "environment": env,
        "sdk": dict(sdk) if sdk is not None else sdk_identity(),
        "nonce": nonce if nonce is not None else new_nonce(),
        "timestamp_ms": timestamp_ms if timestamp_ms is not None else time.time_ns() // 1_000_000,
        "digests": digests,
        "sizes": sizes,
    }
    if burst_meta is not None:
        meta["burst"] = burst_meta
    kid = key_id if key_id is not None else key_id_of(der)
    return seal(encode_payload(meta, data, photo, external_data, burst_part), public_key_b64, kid)


class CaptureClient:
    """Convenience wrapper with the browser SDK's method names."""

    def __init__(
        self,
        public_key_b64: str | None = None,
        key_id: str | None = None,
        *,
        context: dict[str, Any] | None = None,
        environment: dict[str, Any] | None = None,
        sdk: dict[str, Any] | None = None,
    ) -> None:
        self._key: str | None = None
        self._key_id: str | None = None
        self._external = ""
        self._context = context
        self._environment = environment
        self._sdk = sdk
        if public_key_b64 is not None:
            self.set_encryption_key(public_key_b64, key_id)

    def set_encryption_key(self, public_key_b64: str, key_id: str | None = None) -> None:
        """Check and keep the server's public key (base64 DER); key id None = derived."""
        _, der = load_public_key_b64(public_key_b64)
        self._key, self._key_id = public_key_b64, key_id if key_id is not None else key_id_of(der)

    def set_external_data(self, external_data: str) -> None:
        self._external = external_data

    def capture(
        self,
        image: bytes | str | Path | None = None,
        *,
        burst: Sequence[np.ndarray | bytes] | None = None,
        burst_t_ms: Sequence[int] | None = None,
        burst_info: dict[str, Any] | None = None,
        still_index: int = 0,
    ) -> dict[str, bytes]:
        """Encrypt one capture: ``{"photo": small JPEG, "encryptedFile": bundle}``; ``burst`` as in
        :func:`build_bundle`. Without ``image``, the still is the burst's frame ``still_index`` at
        full resolution (a kiosk that records one stream: frontal frame first, then the turn)."""
        if self._key is None:
            raise ValueError("call set_encryption_key before capture")
        if image is None:
            if burst is None or not 0 <= still_index < len(burst):
                raise ValueError("capture needs an image, or a burst whose frame still_index is the still")
            frame = burst[still_index]
            image = (
                bytes(frame) if isinstance(frame, bytes | bytearray) else _encode_jpeg(frame, IMAGE_QUALITY)
            )
        data = Path(image).read_bytes() if isinstance(image, str | Path) else bytes(image)
        photo = make_photo(decode_image(data).bgr)
        bundle = build_bundle(
            self._key,
            self._key_id,
            data,
            context=self._context,
            environment=self._environment,
            external_data=self._external,
            photo=photo,
            sdk=self._sdk,
            burst=burst,
            burst_t_ms=burst_t_ms,
            burst_info=burst_info,
            still_index=still_index if burst is not None else None,
        )
        return {"photo": photo, "encryptedFile": bundle}
