"""Image input of the face services: bytes -> upright BGR uint8, with the header checked first.

Pillow reads only the header (format, size, EXIF orientation) so that a decompression bomb is
refused before any pixel is allocated; OpenCV then decodes the pixels (its JPEG decoder is the one
the liveness models were validated with). Greyscale, 16-bit and RGBA/palette images are converted
to 8-bit BGR (alpha composited on white); the EXIF orientation is honoured.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import cv2
import numpy as np
from PIL import Image, UnidentifiedImageError

from verilive.errors import VeriliveError

__all__ = [
    "FULL_DECODE_PIXELS",
    "MAX_JPEG_SCANS",
    "MAX_PIXELS_PER_BYTE",
    "MAX_SCAN_PIXELS_PER_BYTE",
    "SMALL_PIXELS",
    "DecodedImage",
    "ImageError",
    "decode_image",
    "decode_reduction",
    "jpeg_scans",
    "jpeg_segments",
]

# Formats a camera or browser produces; anything else is refused before decoding.
FORMATS = frozenset({"JPEG", "PNG", "WEBP", "BMP", "TIFF"})
# A progressive JPEG costs the decoder one pass over the image per scan, and a scan can be 13 bytes:
# refused above this many scans, counted before decoding (docs/security.md, "Hostile input II").
# Cameras and browsers write 1 (every JPEG of ../shared/data has 1); libjpeg's progressive script
# writes 10 for colour and 6 for grey; optimising encoders (mozjpeg) stay under 20.
MAX_JPEG_SCANS = 32
# Decoding costs CPU per pixel (5-16 ns a pixel here, by format) while an attacker pays per byte, and
# a flat picture packs 170 (JPEG) to 20,000 (WebP) pixels into a byte. Above FULL_DECODE_PIXELS (at
# most ~35 ms to decode in any format) an image gets a budget of MAX_PIXELS_PER_BYTE pixels per byte
# received: a baseline JPEG over it is decoded at 1/2, 1/4 or 1/8 scale by libjpeg (a picture with
# that little data has no detail the full size would keep), any other format over it is refused.
# Camera photos carry 2-5 pixels a byte; the bound keeps the cost per byte within 5x of a phone
# selfie's (bench/hostile.py, docs/security.md "Hostile input II").
FULL_DECODE_PIXELS = 2_100_000  # a 1080p frame (1920x1088 in MCUs) always decodes in full
MAX_PIXELS_PER_BYTE = 10
# A progressive JPEG keeps every coefficient of the full image and makes one pass per scan, so
# scaled decoding saves little: pixels x scans must stay within this many per byte received
# (libjpeg's 10-scan script: at least one byte per 25 pixels, about 0.32 bits a pixel). 100 refused
# 16 of 321 real web photos (7-10 scans at 102-169; issue 47), so the bound sits above them with room.
# Only a VGA frame or smaller is exempt (at most ~3 ms to decode).
MAX_SCAN_PIXELS_PER_BYTE = 250
SMALL_PIXELS = 640 * 480
_REDUCED = {2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4, 8: cv2.IMREAD_REDUCED_COLOR_8}
_EXIF_ORIENTATION = 0x0112
# What undoes each EXIF orientation (1 = upright): a horizontal mirror first (2, 4, 5, 7), then a rotation.
_ORIENT: dict[int, tuple[int | None, bool]] = {
    2: (None, True),
    3: (cv2.ROTATE_180, False),
    4: (cv2.ROTATE_180, True),
    5: (cv2.ROTATE_90_COUNTERCLOCKWISE, True),
    6: (cv2.ROTATE_90_CLOCKWISE, False),
    7: (cv2.ROTATE_90_CLOCKWISE, True),
    8: (cv2.ROTATE_90_COUNTERCLOCKWISE, False),
}


class ImageError(VeriliveError):
    """The image cannot be read. The face services answer it as FAILED_TO_READ_IMAGE."""

    status = 400
    code = "FAILED_TO_READ_IMAGE"


@dataclass(frozen=True)
class DecodedImage:
    bgr: np.ndarray  # (H, W, 3) uint8, upright; the image's size divided by ``reduction``
    format: str
    width: int  # of the image as sent, after the EXIF rotation
    height: int
    reduction: int = 1  # 1, or 2, 4, 8 when a JPEG too sparse for its size was decoded scaled down


def decode_image(data: bytes, max_pixels: int = 40_000_000) -> DecodedImage:
    """Decode ``data``; raise :class:`ImageError` with a clear message when it cannot be used."""
    if not data:
        raise ImageError("The image is empty (0 bytes)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow warns about large images; we check ourselves
            with Image.open(io.BytesIO(data)) as im:
                fmt = str(im.format)
                width, height = im.size
                orientation = int(im.getexif().get(_EXIF_ORIENTATION, 1) or 1) if fmt == "JPEG" else 1
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise ImageError(
            "The data is not an image in a supported format (JPEG, PNG, WebP, BMP, TIFF)"
        ) from exc
    except Image.DecompressionBombError as exc:
        raise ImageError(f"The image is too large to decode (more than {max_pixels} pixels)") from exc
    if fmt not in FORMATS:
        raise ImageError(f"Unsupported image format {fmt}; use JPEG, PNG, WebP, BMP or TIFF")
    if width * height > max_pixels:
        raise ImageError(f"The image is {width}x{height} pixels; at most {max_pixels} pixels are accepted")
    if fmt == "JPEG" and not data.rstrip(b"\0").endswith(b"\xff\xd9"):
        # OpenCV would decode the part that arrived and grey-fill the rest.
        raise ImageError("The JPEG image is truncated (no end-of-image marker)")
    scans = jpeg_scans(data, MAX_JPEG_SCANS + 1) if fmt == "JPEG" else 1
    if scans > MAX_JPEG_SCANS:
        raise ImageError(
            f"The JPEG image has more than {scans - 1} scans; at most {MAX_JPEG_SCANS} are accepted"
        )
    reduction = decode_reduction(fmt, width * height, len(data), scans)
    flags = (_REDUCED[reduction] if reduction > 1 else cv2.IMREAD_UNCHANGED) | cv2.IMREAD_IGNORE_ORIENTATION
    raw = cv2.imdecode(np.frombuffer(data, np.uint8), flags)
    if raw is None or raw.size == 0:
        raise ImageError("The image could not be decoded: the file is truncated or corrupt")
    bgr = _to_bgr8(raw)
    bgr = _upright(bgr, orientation)
    if reduction == 1:
        height, width = bgr.shape[:2]
    elif orientation in (5, 6, 7, 8):
        width, height = height, width
    return DecodedImage(
        bgr=np.ascontiguousarray(bgr), format=fmt, width=width, height=height, reduction=reduction
    )


def decode_reduction(fmt: str, pixels: int, size: int, scans: int = 1) -> int:
    """The scale (1, 2, 4 or 8) at which an image of ``pixels`` sent in ``size`` bytes is decoded;
    raise :class:`ImageError` when it has too few bytes for its pixels to be decoded at any."""
    if scans > 1 and pixels > SMALL_PIXELS and pixels * scans > MAX_SCAN_PIXELS_PER_BYTE * size:
        raise ImageError(
            f"The progressive JPEG image has {pixels} pixels in {scans} scans but only {size} bytes; "
            f"at most {MAX_SCAN_PIXELS_PER_BYTE} pixels x scans per byte are accepted above "
            f"{SMALL_PIXELS} pixels (send a baseline JPEG)"
        )
    if pixels <= FULL_DECODE_PIXELS:
        return 1
    budget = MAX_PIXELS_PER_BYTE * size
    for reduction in (1, 2, 4, 8) if fmt == "JPEG" else (1,):
        if pixels <= budget * reduction * reduction:
            return reduction
    raise ImageError(
        f"The {fmt} image has {pixels} pixels in only {size} bytes; above {FULL_DECODE_PIXELS} pixels, "
        f"at most {MAX_PIXELS_PER_BYTE} pixels per byte are accepted"
        + (" (even at 1/8 scale)" if fmt == "JPEG" else " (send a JPEG)")
    )


def jpeg_segments(data: bytes) -> Iterator[tuple[int, bytes]]:
    """The marker and body of each JPEG segment after SOI, in order, up to the end of the image. A
    scan (SOS, 0xDA) yields its header, and its entropy-coded data (where 0xFF is always followed by
    0x00 stuffing or a restart marker) is skipped. Never decodes and never raises; a broken layout
    ends the walk."""
    n, pos = len(data), 2
    if data[:2] != b"\xff\xd8":
        return
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            return
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0xD9:  # end of image
            return
        if 0xD0 <= marker <= 0xD8 or marker == 0x01:  # markers without a length
            pos += 2
            continue
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        yield marker, data[pos + 4 : pos + 2 + length]
        pos += 2 + length
        if marker != 0xDA:
            continue
        while True:  # the scan's entropy-coded data, to the next real marker
            j = data.find(b"\xff", pos)
            if j < 0 or j + 1 >= n:
                return
            following = data[j + 1]
            if following == 0x00 or 0xD0 <= following <= 0xD7:
                pos = j + 2
            elif following == 0xFF:
                pos = j + 1
            else:
                pos = j
                break


def jpeg_scans(data: bytes, stop_at: int | None = None) -> int:
    """How many scans (SOS segments) a JPEG has, counted without decoding; stops at ``stop_at``."""
    count = 0
    for marker, _ in jpeg_segments(data):
        if marker == 0xDA:
            count += 1
            if stop_at is not None and count >= stop_at:
                break
    return count


def _to_bgr8(raw: np.ndarray) -> np.ndarray:
    img = raw
    if img.dtype != np.uint8:
        if img.dtype == np.uint16:
            img = (img >> 8).astype(np.uint8)
        elif np.issubdtype(img.dtype, np.floating):
            img = np.clip(np.nan_to_num(img) * 255.0, 0, 255).astype(np.uint8)
        else:
            raise ImageError(f"Unsupported pixel type {img.dtype}")
    if img.ndim == 2:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    channels = img.shape[2]
    if channels == 1:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    if channels == 3:
        return img
    if channels == 4:
        # Composite on white: a transparent background is not a face, and black would look like one edge.
        alpha = img[:, :, 3:4].astype(np.float32) / 255.0
        out = img[:, :, :3].astype(np.float32) * alpha + 255.0 * (1.0 - alpha)
        return np.clip(out + 0.5, 0, 255).astype(np.uint8)
    raise ImageError(f"Unsupported number of channels: {channels}")


def _upright(img: np.ndarray, orientation: int) -> np.ndarray:
    rotate, mirror = _ORIENT.get(orientation, (None, False))
    if mirror:
        img = cv2.flip(img, 1)
    if rotate is not None:
        img = cv2.rotate(img, rotate)
    return img
