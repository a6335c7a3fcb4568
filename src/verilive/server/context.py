"""Per-service state shared by the routers of one app: settings, models, metrics, engines."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import Request

from verilive.config import Settings
from verilive.models.sessions import ModelRegistry
from verilive.server.metrics import ServiceMetrics, license_expiry_instant

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass
class ServiceContext:
    service: str
    api_version: str
    settings: Settings
    models: ModelRegistry
    metrics: ServiceMetrics
    required_models: tuple[str, ...]
    problems: Callable[[ServiceContext], list[str]] | None = None
    _engines: dict[str, Any] = field(default_factory=dict)
    # Re-entrant: building one engine may build another (the diarizer needs the voice engine).
    _lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def license_expiration_date(self) -> dt.date:
        return self.settings.license_expiration_date

    def license_expires_at(self) -> dt.datetime:
        return license_expiry_instant(self.settings.license_expiration_date)

    def license_expires_iso(self) -> str:
        """The expiry instant as the specs' ISO 8601 text, e.g. 2027-01-01T00:00:00Z."""
        return self.license_expires_at().isoformat().replace("+00:00", "Z")

    def license_expired(self, now: dt.datetime | None = None) -> bool:
        now = now or dt.datetime.now(dt.UTC)
        return now > self.license_expires_at()

    def engine(self, name: str, factory: Callable[[], T]) -> T:
        """Build an engine once per app, on first use, safely across threads."""
        eng = self._engines.get(name)
        if eng is None:
            with self._lock:
                eng = self._engines.get(name)
                if eng is None:
                    eng = factory()
                    self._engines[name] = eng
        return eng  # type: ignore[no-any-return]

    def close(self) -> None:
        """Release what the engines hold (database connections, thread pools) at shutdown.

        Only closable engines are dropped (and rebuilt on next use if the app starts again).
        The others, the metric collectors, stay: they are registered in the app's registry,
        which outlives a lifespan, and building them again would register them twice.
        """
        with self._lock:
            closable = {k: e for k, e in self._engines.items() if callable(getattr(e, "close", None))}
            self._engines = {k: e for k, e in self._engines.items() if k not in closable}
        for eng in closable.values():
            try:
                eng.close()
            except Exception:  # shutdown goes on; one engine must not block the others
                log.exception("closing %r failed", eng)


def get_context(request: Request) -> ServiceContext:
    return request.app.state.ctx  # type: ignore[no-any-return]
