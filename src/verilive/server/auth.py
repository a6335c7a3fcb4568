"""API keys with scopes (docs/security.md#api-keys): who may call what, per request.

Configured keys are sha256 hashes (``VERILIVE_API_KEYS``); a request presents the key itself as
``Authorization: Bearer <key>`` or ``X-API-Key: <key>``. Each path has one scope:

- open: ``/health``, the version endpoints and the API description (no key needed, ever);
- ``metrics``: ``/metrics``;
- ``backoffice``: ``/bi_records``, ``/bi_report``, ``/extract_image``, ``/extract_data``;
- ``check``: everything else (the decision endpoints, the capture demo and SDK routes).

With no keys configured the middleware is not installed and every route answers as before. With
keys: no key or an unknown key is 401, a key without the path's scope 403, a key over its rate limit
429, each in the service's error body. The scope is decided on the route path: the path without
the ``root_path`` a prefix (``--root-path``, a mount) adds, as routing matches it (issue 44). The
presented key is hashed and compared with every configured hash in constant time; only the key's
name is ever logged. Every back-office request writes one audit line (logger ``verilive.audit``):
key name, route, status, record count.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from verilive.config import ApiKeyEntry
from verilive.server.errors import error_response

__all__ = [
    "ApiKeyMiddleware",
    "ApiScope",
    "KeyRing",
    "RateCounter",
    "key_digest",
    "presented_key",
    "route_path",
    "scope_of",
]

audit = logging.getLogger("verilive.audit")
log = logging.getLogger("verilive.auth")


class ApiScope(StrEnum):
    CHECK = "check"
    BACKOFFICE = "backoffice"
    METRICS = "metrics"


# Version endpoints of the three interfaces, health, and the API description stay open.
OPEN_PATHS = frozenset(
    {"/health", "/api_version", "/core/get_build_info", "/core/get_expiration_date", "/openapi.json", "/docs"}
)
OPEN_PREFIXES = ("/swagger-ui",)
BACKOFFICE_PATHS = frozenset({"/bi_records", "/bi_report", "/extract_image", "/extract_data"})
METRICS_PATHS = frozenset({"/metrics"})
# A longer header value is not a key of ours (ours are 43 characters); refused before hashing.
MAX_KEY_CHARS = 256
RATE_WINDOW_S = 60.0
RATE_NAMESPACE = "api-rate"


def scope_of(path: str) -> ApiScope | None:
    """The scope a path needs; None when it is open."""
    if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
        return None
    if path in METRICS_PATHS:
        return ApiScope.METRICS
    if path in BACKOFFICE_PATHS:
        return ApiScope.BACKOFFICE
    return ApiScope.CHECK


def route_path(scope: Scope) -> str:
    """The path routing matches: ``scope["path"]`` without the ``root_path`` at its start.

    Servers and Starlette versions differ on whether ``path`` holds the prefix (uvicorn's
    ``--root-path`` and a ``Mount`` put it there; older ones did not), so it is stripped when
    present, on a segment boundary only, as Starlette's router does."""
    path = str(scope.get("path", ""))
    root = str(scope.get("root_path", "") or "").rstrip("/")
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root) :]
    return path


def presented_key(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The key a request presents (Authorization: Bearer first, then X-API-Key); None when there
    is none, it is empty, too long, or not printable ASCII."""
    bearer = api = None
    for k, v in headers:
        name = k.lower()
        if name == b"authorization" and bearer is None:
            scheme, _, rest = v.partition(b" ")
            if scheme.lower() == b"bearer":
                bearer = rest.strip()
        elif name == b"x-api-key" and api is None:
            api = v.strip()
    raw = bearer if bearer else api
    if not raw or len(raw) > MAX_KEY_CHARS or not all(0x21 <= c <= 0x7E for c in raw):
        return None
    return raw.decode("ascii")


def key_digest(key: str) -> str:
    """The hex sha256 that ``VERILIVE_API_KEYS`` holds for ``key``."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class KeyRing:
    """The configured keys; :meth:`identify` takes the same time whichever key matches, or none."""

    def __init__(self, entries: Sequence[ApiKeyEntry]) -> None:
        self._entries = [(bytes.fromhex(e.sha256), e) for e in entries]

    def __len__(self) -> int:
        return len(self._entries)

    def identify(self, key: str | None) -> ApiKeyEntry | None:
        # A missing key is hashed too, so "no key" and "wrong key" cost the same.
        digest = hashlib.sha256((key or "").encode("utf-8")).digest()
        found = None
        for h, entry in self._entries:  # no early exit: every hash is compared
            if hmac.compare_digest(h, digest) and key:
                found = entry
        return found


class RateCounter:
    """Requests per key in the last minute, in a store shared by replicas (the capture replay store:
    SQLite on one host, Redis across hosts)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def over(self, entry: ApiKeyEntry, now: float | None = None) -> bool:
        if entry.rate_per_minute is None:
            return False
        n = self.store.count(RATE_NAMESPACE, entry.name, RATE_WINDOW_S, now)
        return bool(n > entry.rate_per_minute)


@dataclass(frozen=True)
class _Refusal:
    status: int
    code: str
    message: str
    headers: dict[str, str]


class ApiKeyMiddleware:
    """Plain ASGI (it must see every response's status, and must answer before the route runs)."""

    def __init__(self, app: ASGIApp, *, keys: KeyRing, rates: RateCounter | None = None) -> None:
        self.app = app
        self.keys = keys
        self.rates = rates

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = route_path(scope)
        needed = scope_of(path)
        if needed is None:
            await self.app(scope, receive, send)
            return
        entry = self.keys.identify(presented_key(scope.get("headers", [])))
        refusal = self._refusal(entry, needed)
        if refusal is not None:
            if needed is ApiScope.BACKOFFICE:
                audit.info(
                    "back-office request refused",
                    extra={"key": entry.name if entry else None, "route": path, "status": refusal.status},
                )
            response = error_response(Request(scope), refusal.status, refusal.code, refusal.message)
            response.headers.update(refusal.headers)
            await response(scope, receive, send)
            return
        assert entry is not None
        scope.setdefault("state", {})["api_key"] = entry.name
        if needed is not ApiScope.BACKOFFICE:
            await self.app(scope, receive, send)
            return
        await self._audited(scope, receive, send, entry.name, path)

    def _refusal(self, entry: ApiKeyEntry | None, needed: ApiScope) -> _Refusal | None:
        if entry is None:
            return _Refusal(
                401,
                "UNAUTHORIZED",
                "A valid API key is needed: send it as 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
                {"WWW-Authenticate": 'Bearer realm="verilive"'},
            )
        if needed.value not in entry.scopes:
            return _Refusal(
                403, "FORBIDDEN", f"The API key '{entry.name}' does not have the '{needed.value}' scope", {}
            )
        if self.rates is not None and self.rates.over(entry):
            return _Refusal(
                429,
                "RATE_LIMITED",
                f"The API key '{entry.name}' is over its {entry.rate_per_minute} requests per minute",
                {"Retry-After": str(int(RATE_WINDOW_S))},
            )
        return None

    async def _audited(self, scope: Scope, receive: Receive, send: Send, name: str, path: str) -> None:
        """Run a back-office route and write its audit line: status and record count, no bodies."""
        status = {"code": 500}
        body = bytearray()
        counts_body = path in ("/bi_records", "/bi_report")

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            elif message["type"] == "http.response.body" and counts_body and status["code"] == 200:
                body.extend(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            audit.info(
                "back-office access",
                extra={
                    "key": name,
                    "route": path,
                    "status": status["code"],
                    "records": _records(path, status["code"], bytes(body)),
                },
            )


def _records(path: str, status: int, body: bytes) -> int:
    """How many records a back-office answer handed out: BI records listed, decisions a report
    counts, or the one bundle opened by an extract route."""
    if status != 200:
        return 0
    if path in ("/extract_image", "/extract_data"):
        return 1
    try:
        data = json.loads(body)
    except ValueError:
        return 0
    if isinstance(data, list):
        return len(data)
    if isinstance(data, dict):
        return int(sum(v for v in data.values() if isinstance(v, int)))
    return 0
