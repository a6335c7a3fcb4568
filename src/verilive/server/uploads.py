"""Reading request bodies: raw PCM16/bundle bodies and multipart file parts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request, UploadFile

from verilive.errors import InvalidInput, PayloadTooLarge, UnsupportedMediaType, VeriliveError

OCTET_STREAM_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}

_NOT_RAW = ("multipart/", "application/json", "application/x-www-form-urlencoded", "text/")


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


async def read_raw_body(
    request: Request,
    what: str = "request body",
    max_bytes: int | None = None,
    *,
    empty: Callable[[], VeriliveError] | None = None,
) -> bytes:
    """A raw binary body. Content types that clearly mean something else are refused. With
    ``max_bytes``, a larger body is a 413 from its Content-Length, or as soon as the stream passes the
    limit: never read whole first (the service-wide limit is far larger). An empty body raises
    ``empty()`` when given (a service's own error for it), else EMPTY_BODY."""
    mt = media_type(request)
    if mt and any(mt.startswith(p) for p in _NOT_RAW):
        raise UnsupportedMediaType(
            f"Expected the {what} as application/octet-stream, got content type '{mt}'"
        )
    if max_bytes is None:
        body = await request.body()
    else:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise _too_large(what, max_bytes, int(declared))
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise _too_large(what, max_bytes, size)
            chunks.append(chunk)
        body = b"".join(chunks)
    if not body:
        raise empty() if empty is not None else InvalidInput(f"The {what} is empty", code="EMPTY_BODY")
    return body


def _too_large(what: str, max_bytes: int, size: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The {what} is at most {max_bytes // 1024} KiB; this one is {size} bytes or more")


async def require_multipart(request: Request) -> None:
    """Dependency for file endpoints: a clear 415 instead of a confusing 'missing part'."""
    mt = media_type(request)
    if mt != "multipart/form-data":
        raise UnsupportedMediaType(f"Expected multipart/form-data, got content type '{mt or 'none'}'")


async def read_part(upload: UploadFile, part: str) -> bytes:
    data = await upload.read()
    if not data:
        raise InvalidInput(f"The file part '{part}' is empty", code="EMPTY_PART")
    return data
