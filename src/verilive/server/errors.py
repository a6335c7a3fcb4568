"""One stable JSON error shape for every 4xx/5xx of every service.

The shape is the capture spec's error body (timestamp, status, error, message, path,
error_code) plus request_id, so a client parses errors of all three services the same way.
Bad input never produces a traceback in a response.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from verilive.errors import VeriliveError
from verilive.server.logs import REQUEST_ID_SCOPE_KEY, request_id_var

log = logging.getLogger("verilive.errors")


class ErrorBody(BaseModel):
    timestamp: str
    status: int
    error: str
    message: str
    path: str
    error_code: str | None
    request_id: str | None = None


def reason_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def error_body(status: int, code: str | None, message: str, path: str) -> dict[str, Any]:
    return {
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "status": status,
        "error": reason_phrase(status),
        "message": message,
        "path": path,
        "error_code": code,
        "request_id": request_id_var.get(),
    }


def error_response(request: Request, status: int, code: str | None, message: str) -> JSONResponse:
    mapper: Callable[[str | None], str | None] | None = getattr(request.app.state, "error_code_map", None)
    if mapper is not None:
        code = mapper(code)
    return JSONResponse(error_body(status, code, message, request.url.path), status_code=status)


_HTTP_CODES = {
    400: "MALFORMED_REQUEST",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
}


def _describe_validation(exc: RequestValidationError, multipart: bool) -> tuple[str, str]:
    """Turn pydantic's error list into one error code and a readable sentence."""
    errors = exc.errors()
    if not errors:
        return "INVALID_REQUEST", "Invalid request"
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ())]
    where = loc[0] if loc else "request"
    name = ".".join(loc[1:]) or where
    etype = str(first.get("type", ""))
    if etype == "missing":
        if where == "query":
            return "MISSING_PARAMETER", f"Missing required query parameter '{name}'"
        if where == "header":
            return "MISSING_HEADER", f"Missing required header '{name}'"
        if where == "body" and len(loc) == 2 and multipart:
            return "MISSING_PART", f"Missing required multipart part '{name}'"
        if where == "body" and len(loc) == 2:
            return "MISSING_FIELD", f"Missing required field '{name}' in the JSON body"
        if where == "body" and len(loc) == 1:
            return "MISSING_BODY", "Missing request body"
        return "INVALID_BODY", f"Missing required field '{name}' in the request body"
    msg = str(first.get("msg", "invalid value"))
    if where == "query":
        return "INVALID_PARAMETER", f"Invalid query parameter '{name}': {msg}"
    if where == "header":
        return "INVALID_HEADER", f"Invalid header '{name}': {msg}"
    if etype == "json_invalid":
        return "INVALID_JSON", f"Request body is not valid JSON: {first.get('ctx', {}).get('error', msg)}"
    if "UploadFile" in msg or (etype in ("value_error",) and "file" in msg.lower()):
        return "INVALID_PART", f"Part '{name}' must be a file upload"
    return "INVALID_BODY", f"Invalid request body at '{name}': {msg}"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(VeriliveError)
    async def _verilive(request: Request, exc: VeriliveError) -> JSONResponse:
        if exc.status >= 500:
            log.warning("request failed: %s", exc.message, extra={"error_code": exc.code})
        return error_response(request, exc.status, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        multipart = request.headers.get("content-type", "").lower().startswith("multipart/")
        code, message = _describe_validation(exc, multipart)
        return error_response(request, 400, code, message)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "HTTP_ERROR")
        detail = exc.detail if isinstance(exc.detail, str) else reason_phrase(exc.status_code)
        if exc.status_code == 400 and "parsing the body" in detail:
            code, detail = "MALFORMED_MULTIPART", "The multipart/form-data body could not be parsed"
        return error_response(request, exc.status_code, code, detail)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Starlette runs this outside the request middleware, whose contextvar is reset by
        # now; take the id from the scope so the log, body and header still carry it.
        rid = request_id_var.get() or request.scope.get(REQUEST_ID_SCOPE_KEY)
        token = request_id_var.set(rid)
        try:
            # The traceback goes to the log (with the request id), never to the client.
            log.exception("unhandled error")
            response = error_response(
                request, 500, "INTERNAL_ERROR", f"Internal error; quote request id {rid} to the operator"
            )
        finally:
            request_id_var.reset(token)
        if rid:
            response.headers["x-request-id"] = rid
        return response
