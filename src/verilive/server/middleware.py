"""ASGI middleware: request id, body-size limit, access log and request metrics.

Written as plain ASGI (not BaseHTTPMiddleware) so it can stop an oversized streamed upload
without buffering it and can see the final status of every response.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from verilive.server.errors import error_body
from verilive.server.logs import REQUEST_ID_SCOPE_KEY, request_id_var
from verilive.server.metrics import ServiceMetrics

log = logging.getLogger("verilive.access")
_RID_OK = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp, *, metrics: ServiceMetrics, max_body_bytes: int) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        rid = headers.get("x-request-id", "")
        if not _RID_OK.match(rid):
            rid = uuid.uuid4().hex
        token = request_id_var.set(rid)
        scope[REQUEST_ID_SCOPE_KEY] = rid
        start = time.perf_counter()
        status_holder = {"status": 500}
        too_large = {"hit": False, "replaced": False}
        limit = self.max_body_bytes

        async def send_413() -> None:
            body = json.dumps(
                error_body(
                    413,
                    "PAYLOAD_TOO_LARGE",
                    f"Request body exceeds the limit of {limit} bytes",
                    scope.get("path", ""),
                )
            ).encode()
            status_holder["status"] = 413
            await send(
                {
                    "type": "http.response.start",
                    "status": 413,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"x-request-id", rid.encode()),
                        (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})

        self.metrics.in_flight.labels(self.metrics.service).inc()
        try:
            declared = headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > limit:
                await send_413()
                return

            received = 0

            async def limited_receive() -> Message:
                nonlocal received
                message = await receive()
                if message["type"] == "http.request":
                    received += len(message.get("body", b""))
                    if received > limit:
                        # Pretend the client went away: whatever reads the body stops, and
                        # send_wrapper swaps the app's answer for the 413.
                        too_large["hit"] = True
                        return {"type": "http.disconnect"}
                return message

            async def send_wrapper(message: Message) -> None:
                if too_large["hit"]:
                    if message["type"] == "http.response.start" and not too_large["replaced"]:
                        too_large["replaced"] = True
                        await send_413()
                    return
                if message["type"] == "http.response.start":
                    status_holder["status"] = message["status"]
                    # Server time up to the first response byte, for clients and benchmarks.
                    timing = f"app;dur={(time.perf_counter() - start) * 1000:.1f}".encode()
                    message.setdefault("headers", [])
                    message["headers"] = [
                        *message["headers"],
                        (b"x-request-id", rid.encode()),
                        (b"server-timing", timing),
                    ]
                await send(message)

            try:
                await self.app(scope, limited_receive, send_wrapper)
            finally:
                if too_large["hit"] and not too_large["replaced"]:
                    too_large["replaced"] = True
                    await send_413()
        finally:
            elapsed = time.perf_counter() - start
            route = _route_template(scope)
            status = status_holder["status"]
            self.metrics.in_flight.labels(self.metrics.service).dec()
            self.metrics.observe(scope.get("method", ""), route, status, elapsed)
            log.info(
                "%s %s %s",
                scope.get("method"),
                scope.get("path"),
                status,
                extra={
                    "service": self.metrics.service,
                    "status": status,
                    "route": route,
                    "duration_ms": round(elapsed * 1000, 2),
                    # The API key's name (server/auth.py), never the key; None when keys are off.
                    "key": scope.get("state", {}).get("api_key"),
                },
            )
            request_id_var.reset(token)


def _route_template(scope: dict[str, Any]) -> str:
    # Label by route template, never the raw path, so unknown paths cannot blow up cardinality.
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "<unmatched>"
