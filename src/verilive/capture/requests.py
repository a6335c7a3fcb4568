"""Reading a capture bundle from an HTTP request body (shared by the interface and demo routes)."""

from __future__ import annotations

from fastapi import Request

from verilive.capture.service import PARSE_FAILED
from verilive.errors import InvalidInput, VeriliveError
from verilive.server.uploads import read_raw_body

__all__ = ["read_bundle_body"]


async def read_bundle_body(request: Request) -> bytes:
    """The raw body; an empty one is not a bundle ('Failed to parse file')."""
    try:
        return await read_raw_body(request, "bundle")
    except InvalidInput as exc:
        if exc.code == "EMPTY_BODY":
            raise VeriliveError(PARSE_FAILED, code="UNKNOWN") from None
        raise
