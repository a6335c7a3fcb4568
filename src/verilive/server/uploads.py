"""Reading request bodies: raw PCM16/bundle bodies and multipart file parts."""

from __future__ import annotations

from typing import Any

from fastapi import Request, UploadFile

from verilive.errors import InvalidInput, UnsupportedMediaType

OCTET_STREAM_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}

_NOT_RAW = ("multipart/", "application/json", "application/x-www-form-urlencoded", "text/")


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


async def read_raw_body(request: Request, what: str = "request body") -> bytes:
    """A raw binary body. Content types that clearly mean something else are refused."""
    mt = media_type(request)
    if mt and any(mt.startswith(p) for p in _NOT_RAW):
        raise UnsupportedMediaType(
            f"Expected the {what} as application/octet-stream, got content type '{mt}'"
        )
    body = await request.body()
    if not body:
        raise InvalidInput(f"The {what} is empty", code="EMPTY_BODY")
    return body


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
