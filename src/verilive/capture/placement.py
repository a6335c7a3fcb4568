"""Where the faces are in a small preview frame: the browser SDK's placement hints where the browser
has no face detector of its own (``POST /sdk/placement``, docs/capture-sdk.md).

It runs the capture service's own detector (CenterFace, the one that later validates the capture) on
a small JPEG and answers the boxes as fractions of the frame. It decides nothing and stores nothing:
no BI record, no replay-store entry, no log line beyond the access log. The SDK turns the boxes and its
own light measures into a hint; the capture is judged only by ``/check_capture_liveness``.
"""

from __future__ import annotations

from dataclasses import dataclass

from verilive.errors import PayloadTooLarge, VeriliveError
from verilive.face.detector import FaceDetector
from verilive.face.image import decode_image

__all__ = ["MAX_BYTES", "MAX_FACES", "MAX_SIDE", "MIN_SIDE", "FoundFace", "PlacementError", "locate_faces"]

# A preview frame, not a photo: the SDK sends about 240x320 at JPEG quality 0.7 (10-20 kB).
MAX_BYTES = 256 * 1024
MAX_SIDE = 1024
MIN_SIDE = 32
MAX_FACES = 3


class PlacementError(VeriliveError):
    code = "FAILED_TO_READ_IMAGE"


@dataclass(frozen=True)
class FoundFace:
    """A face box as fractions of the frame's width and height (x, y of the top-left corner), the
    detector's score, and the head pose in degrees."""

    box: tuple[float, float, float, float]
    score: float
    yaw: float
    pitch: float


def locate_faces(detector: FaceDetector, data: bytes) -> tuple[int, int, list[FoundFace]]:
    """``(width, height, faces)`` of one small frame, largest face first, at most MAX_FACES."""
    if len(data) > MAX_BYTES:
        raise PayloadTooLarge(
            f"A placement frame is at most {MAX_BYTES // 1024} KiB; this one is {len(data)} bytes. "
            f"Send a preview-sized JPEG (at most {MAX_SIDE} px a side)."
        )
    image = decode_image(data, max_pixels=MAX_SIDE * MAX_SIDE)
    w, h = image.width, image.height
    if max(w, h) > MAX_SIDE or min(w, h) < MIN_SIDE:
        raise PlacementError(f"A placement frame is {MIN_SIDE} to {MAX_SIDE} px a side; this one is {w}x{h}")
    faces = detector.detect(image.bgr)[:MAX_FACES]
    r = lambda v: round(float(v), 4)  # noqa: E731
    return (
        w,
        h,
        [
            FoundFace(
                box=(r(f.box[0] / w), r(f.box[1] / h), r(f.width / w), r(f.height / h)),
                score=r(f.score),
                yaw=round(float(f.yaw), 1),
                pitch=round(float(f.pitch), 1),
            )
            for f in faces
        ],
    )
