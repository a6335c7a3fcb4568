"""Business-intelligence (BI) records of the face and capture liveness services, kept in SQL.

Every liveness decision of either service becomes one row: when, which endpoint, pipeline and
calibration, the client platform, the three result values or the rejection code, the image size,
the latency and, for capture, the rejection reasons. The image is never stored, nor anything that
identifies the person (no IP address, no file name, no request id). `BiStore` serves both
services' `/bi_records` and the face service's `/bi_report`; it knows nothing about HTTP. The
decisions (buckets, date range, retention, replicas) are written up in docs/bi.md.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import math
import re
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    case,
    create_engine,
    delete,
    event,
    func,
    insert,
    inspect,
    null,
    select,
    text,
)
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.pool import StaticPool
from sqlalchemy.schema import CreateIndex, CreateTable
from sqlalchemy.types import TypeDecorator

from verilive.datadir import make_private_file
from verilive.errors import InvalidParameter
from verilive.server.logs import request_id_var

if TYPE_CHECKING:
    from verilive.config import Settings
    from verilive.server.context import ServiceContext

log = logging.getLogger(__name__)

PLATFORMS = ("IOS", "ANDROID", "DESKTOP", "UNKNOWN")
# Histogram buckets [i/10, (i+1)/10); the last one also takes 1.0 (and anything above).
N_BUCKETS = 10
# Opportunistic purge on add runs at most this often per store (per replica).
PURGE_INTERVAL_S = 3600.0
# Serialises schema creation across replicas sharing one PostgreSQL (arbitrary 64-bit key).
_SCHEMA_LOCK_KEY = 0x7665726C42490001
_STR_LEN = 64
_WAL_SWITCH_ATTEMPTS = 100  # x 50 ms
_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


class _UtcDateTime(TypeDecorator[dt.datetime]):
    """Stores naive UTC (portable: SQLite has no time zones) and hands back aware UTC datetimes."""

    impl = DateTime(timezone=False)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("BI times must be timezone-aware")
        return value.astimezone(dt.UTC).replace(tzinfo=None)

    def process_result_value(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        return None if value is None else value.replace(tzinfo=dt.UTC)


metadata = MetaData()
bi_records = Table(
    "bi_records",
    metadata,
    # SQLite only auto-increments an INTEGER PRIMARY KEY, PostgreSQL wants room for billions of rows.
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("time", _UtcDateTime(), nullable=False),
    Column("endpoint", String(_STR_LEN), nullable=False),
    Column("pipeline", String(_STR_LEN), nullable=False),
    Column("calibration", String(_STR_LEN), nullable=False),
    Column("platform", String(16), nullable=False),
    Column("probability", Float),
    Column("quality", Float),
    Column("score", Float),
    Column("error_code", String(_STR_LEN)),
    Column("image_width", Integer),
    Column("image_height", Integer),
    Column("latency_ms", Float, nullable=False),
    # Capture service: the rejection reasons, comma-joined (null elsewhere and when none).
    Column("rejection", String(255)),
    # Face series and capture bursts: the 3D check from motion, "3d", "flat" or "cannot_judge" (null
    # when it did not run; docs/motion3d.md).
    Column("motion3d", String(16)),
    # The request that made the decision (the X-Request-ID of the access log and of error bodies), so
    # that an operator can go from a record to its log lines.
    Column("request_id", String(64)),
    # Every query (records, report, purge) selects a time range.
    Index("ix_bi_records_time", "time"),
)

_RECORD_COLUMNS = (
    "time",
    "endpoint",
    "pipeline",
    "calibration",
    "platform",
    "probability",
    "quality",
    "score",
    "error_code",
    "image_width",
    "image_height",
    "latency_ms",
    "rejection",
    "motion3d",
    "request_id",
)
# Columns added after the first release, with their SQL type: tables made before get them added.
_ADDED_COLUMNS = {"rejection": "VARCHAR(255)", "motion3d": "VARCHAR(16)", "request_id": "VARCHAR(64)"}


@dataclass(frozen=True)
class BiRecord:
    """One decision. ``time`` must be timezone-aware; it is converted to UTC."""

    time: dt.datetime
    endpoint: str
    pipeline: str
    calibration: str
    platform: str
    probability: float | None
    quality: float | None
    score: float | None
    error_code: str | None
    image_width: int | None
    image_height: int | None
    latency_ms: float
    rejection: str | None = None
    motion3d: str | None = None
    # None: the request being served (the request id of the access log), if any.
    request_id: str | None = None

    def __post_init__(self) -> None:
        if self.request_id is None:
            object.__setattr__(self, "request_id", request_id_var.get())
        if self.time.tzinfo is None or self.time.utcoffset() is None:
            raise ValueError("BiRecord.time must be timezone-aware")
        if self.platform not in PLATFORMS:
            raise ValueError(f"BiRecord.platform must be one of {PLATFORMS}, got {self.platform!r}")
        object.__setattr__(self, "time", self.time.astimezone(dt.UTC))


def normalise_platform(value: str | None) -> str:
    """Map a client's platform name (any case) to one of PLATFORMS; anything else is UNKNOWN."""
    name = (value or "").strip().upper()
    return name if name in PLATFORMS else "UNKNOWN"


def parse_date(value: str | None, name: str) -> dt.date | None:
    """Parse a ``yyyy-MM-dd`` query parameter strictly; None or "" mean "not given"."""
    if value is None or value == "":
        return None
    # fromisoformat alone would also take "20261121" and week dates, which the interface does not.
    if _DATE_RE.fullmatch(value):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            pass
    shown = value if len(value) <= 40 else value[:40] + "…"
    raise InvalidParameter(f"Query parameter '{name}' must be a date in the form yyyy-MM-dd, got {shown!r}")


def bucket_label(index: int) -> str:
    """``0`` -> ``"0.0-0.1"``, ..., ``9`` -> ``"0.9-1.0"``."""
    return f"{index / N_BUCKETS:.1f}-{(index + 1) / N_BUCKETS:.1f}"


def _bucket(column: Any) -> Any:
    # Compared with the same float literals Python uses, so a value's bucket never depends on
    # x*10 rounding; NULL stays NULL (a rejection has no values), and >= 0.9 (including 1.0) is 9.
    whens = [(column.is_(None), null())]
    whens += [(column < (i + 1) / N_BUCKETS, i) for i in range(N_BUCKETS - 1)]
    return case(*whens, else_=N_BUCKETS - 1)


def _midnight(day: dt.date) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


def _time_range(date_from: dt.date | None, date_to: dt.date | None) -> list[ColumnElement[bool]]:
    if date_from is not None and date_to is not None and date_from > date_to:
        raise InvalidParameter(
            f"date_from ({date_from.isoformat()}) is after date_to ({date_to.isoformat()})"
        )
    conditions: list[ColumnElement[bool]] = []
    if date_from is not None:
        conditions.append(bi_records.c.time >= _midnight(date_from))
    if date_to is not None and date_to < dt.date.max:
        # date_to is inclusive: everything before the next UTC midnight.
        conditions.append(bi_records.c.time < _midnight(date_to + dt.timedelta(days=1)))
    return conditions


def _endpoint_filter(endpoints: Sequence[str] | None) -> list[ColumnElement[bool]]:
    return [] if endpoints is None else [bi_records.c.endpoint.in_(list(endpoints))]


def _finite(value: float | None) -> float | None:
    # NaN/inf cannot be put in JSON and would land in an arbitrary bucket, so they count as absent.
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _short(value: str | None) -> str | None:
    # Names can come from the client (an unknown pipeline); never let a long one fail the insert.
    return None if value is None else value[:_STR_LEN]


def _row(record: BiRecord) -> dict[str, Any]:
    return {
        "time": record.time,
        "endpoint": _short(record.endpoint),
        "pipeline": _short(record.pipeline),
        "calibration": _short(record.calibration),
        "platform": record.platform,
        "probability": _finite(record.probability),
        "quality": _finite(record.quality),
        "score": _finite(record.score),
        "error_code": _short(record.error_code),
        "image_width": record.image_width,
        "image_height": record.image_height,
        "latency_ms": _finite(record.latency_ms) or 0.0,
        "rejection": None if record.rejection is None else record.rejection[:255],
        "motion3d": _short(record.motion3d),
        "request_id": None if record.request_id is None else record.request_id[:64],
    }


def _iso_utc(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def database_url(value: str) -> URL:
    """The SQLAlchemy URL of a setting: a URL, or a plain file path meaning an SQLite file.

    ``postgresql://`` and ``postgres://`` get the psycopg 3 driver (the `postgres` extra).
    """
    if "://" not in value:
        value = "sqlite:///" + str(Path(value).expanduser().resolve())
    url = make_url(value)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url


class BiStore:
    """Writes and aggregates BI records. Thread-safe; one instance per process is enough."""

    def __init__(self, url: str, retention_days: int = 90) -> None:
        if retention_days < 0:
            raise ValueError("retention_days must be >= 0 (0 keeps records forever)")
        self.retention_days = retention_days
        self.url = database_url(url)
        self._engine = self._make_engine(self.url)
        # SQLite allows one writer at a time; waiting on a Python lock beats spinning on SQLITE_BUSY.
        self._sqlite_lock = threading.Lock() if self.url.get_backend_name() == "sqlite" else None
        self._state_lock = threading.Lock()
        self._failed_writes = 0
        self._last_purge = -math.inf  # the first add after start purges
        self._create_schema()

    @classmethod
    def from_settings(cls, settings: Settings) -> BiStore:
        return cls(settings.bi_database_url, retention_days=settings.bi_retention_days)

    def __enter__(self) -> BiStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"BiStore({self.url.render_as_string(hide_password=True)!r})"

    @property
    def failed_writes(self) -> int:
        """Records that could not be stored since start (they are logged, never raised)."""
        return self._failed_writes

    @staticmethod
    def _make_engine(url: URL) -> Engine:
        if url.get_backend_name() != "sqlite":
            # pre_ping: a replica survives a database restart without failing the first requests.
            return create_engine(url, pool_pre_ping=True)
        memory = url.database in (None, "", ":memory:")
        if memory:
            # One shared connection, or each thread would see its own empty database.
            engine = create_engine(url, poolclass=StaticPool, connect_args={"check_same_thread": False})
        else:
            database = url.database or ""
            if database.startswith("file:"):  # an SQLite URI: its own options decide
                Path(database[5:].partition("?")[0]).parent.mkdir(parents=True, exist_ok=True)
            else:
                make_private_file(database)  # data directory 0700, database 0600 (issue 44)
            engine = create_engine(url, connect_args={"check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            # Several processes (workers, `serve all` + a report job) may share the file.
            cursor.execute("PRAGMA busy_timeout = 30000")
            if not memory:
                # WAL lets /bi_report read while requests write. The mode is stored in the file;
                # switching to it answers "database is locked" at once, without the busy handler,
                # when another process switches at the same moment, so retry for a while.
                for attempt in itertools.count():
                    try:
                        if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                            cursor.execute("PRAGMA journal_mode = WAL")
                        break
                    except sqlite3.OperationalError:
                        if attempt >= _WAL_SWITCH_ATTEMPTS:
                            raise
                        time.sleep(0.05)
                cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.close()

        return engine

    @contextmanager
    def _serialised(self) -> Iterator[None]:
        with self._sqlite_lock if self._sqlite_lock is not None else nullcontext():
            yield

    def _create_schema(self) -> None:
        with self._serialised(), self._engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                # Replicas starting together race on CREATE TABLE even with IF NOT EXISTS (the
                # pg_type unique index); a transaction-scoped advisory lock makes them take turns.
                conn.execute(select(func.pg_advisory_xact_lock(_SCHEMA_LOCK_KEY)))
            conn.execute(CreateTable(bi_records, if_not_exists=True))
            for index in sorted(bi_records.indexes, key=lambda i: str(i.name)):
                conn.execute(CreateIndex(index, if_not_exists=True))
            # Tables made before a column was added get it (a one-way migration).
            present = {c["name"] for c in inspect(conn).get_columns("bi_records")}
            for name, sql_type in _ADDED_COLUMNS.items():
                if name not in present:
                    conn.execute(text(f"ALTER TABLE bi_records ADD COLUMN {name} {sql_type}"))

    def add(self, record: BiRecord) -> None:
        """Store one record. Never raises: a failure is logged and counted in `failed_writes`."""
        self.add_many((record,))

    def add_many(self, records: Sequence[BiRecord]) -> None:
        """Store several records in one transaction (a batch request). Never raises."""
        if not records:
            return
        try:
            rows = [_row(r) for r in records]
            with self._serialised(), self._engine.begin() as conn:
                conn.execute(insert(bi_records), rows)
        except Exception:
            with self._state_lock:
                self._failed_writes += len(records)
            log.exception("could not store %d BI record(s) in %r", len(records), self)
            return
        self._maybe_purge()

    def _maybe_purge(self) -> None:
        if self.retention_days == 0:
            return
        now = time.monotonic()
        with self._state_lock:
            if now - self._last_purge < PURGE_INTERVAL_S:
                return
            self._last_purge = now  # claimed before purging, so concurrent adds do not all purge
        try:
            removed = self.purge()
        except Exception:
            log.exception("could not purge old BI records in %r", self)
            return
        if removed:
            log.info("purged %d BI record(s) older than %d days", removed, self.retention_days)

    def purge(self, now: dt.datetime | None = None) -> int:
        """Delete records older than ``retention_days`` before ``now``; returns how many went."""
        if self.retention_days == 0:
            return 0
        now = dt.datetime.now(dt.UTC) if now is None else now
        cutoff = now - dt.timedelta(days=self.retention_days)
        with self._serialised(), self._engine.begin() as conn:
            result = conn.execute(delete(bi_records).where(bi_records.c.time < cutoff))
        return int(result.rowcount or 0)

    def records(
        self,
        date_from: dt.date | None = None,
        date_to: dt.date | None = None,
        limit: int | None = None,
        endpoints: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Records in the date range, oldest first, as JSON-ready dicts (time as ``...Z``).
        ``endpoints``: only records of these endpoints (one store may serve several services)."""
        if limit is not None and limit < 0:
            raise InvalidParameter(f"limit must be >= 0, got {limit}")
        columns = [bi_records.c[name] for name in _RECORD_COLUMNS]
        stmt = (
            select(*columns)
            .where(*_time_range(date_from, date_to), *_endpoint_filter(endpoints))
            .order_by(bi_records.c.time, bi_records.c.id)
        )
        if limit is not None:
            stmt = stmt.limit(limit)
        with self._serialised(), self._engine.connect() as conn:
            rows = conn.execute(stmt).all()
        out = []
        for row in rows:
            item = dict(row._mapping)
            item["time"] = _iso_utc(item["time"])
            out.append(item)
        return out

    def report(
        self,
        date_from: dt.date | None = None,
        date_to: dt.date | None = None,
        endpoints: Sequence[str] | None = None,
    ) -> dict[str, int]:
        """The `/bi_report` object: histogram buckets, rejection counts and ``total``, over the
        records of ``endpoints`` (all when None).

        Every (pipeline, platform) pair with a record in the range gets all 10 probability and
        10 quality buckets (zero-filled, so dashboards see stable keys); an error-code key only
        appears when its count is above zero.
        """
        t = bi_records
        inner = (
            select(
                t.c.pipeline,
                t.c.platform,
                t.c.error_code,
                _bucket(t.c.probability).label("pb"),
                _bucket(t.c.quality).label("qb"),
            )
            .where(*_time_range(date_from, date_to), *_endpoint_filter(endpoints))
            .subquery()
        )
        # Grouping the subquery's columns (not the CASE expressions) keeps PostgreSQL from seeing
        # differently numbered parameters in SELECT and GROUP BY. At most pairs x codes x 121 rows.
        keys = (inner.c.pipeline, inner.c.platform, inner.c.error_code, inner.c.pb, inner.c.qb)
        stmt = select(*keys, func.count().label("n")).group_by(*keys)
        with self._serialised(), self._engine.connect() as conn:
            rows = conn.execute(stmt).all()

        total = 0
        pairs: set[tuple[str, str]] = set()
        probability: Counter[tuple[str, str, int]] = Counter()
        quality: Counter[tuple[str, str, int]] = Counter()
        errors: Counter[tuple[str, str, str]] = Counter()
        for pipeline, platform, error_code, pb, qb, n in rows:
            total += n
            pairs.add((pipeline, platform))
            if pb is not None:
                probability[pipeline, platform, int(pb)] += n
            if qb is not None:
                quality[pipeline, platform, int(qb)] += n
            if error_code:
                errors[pipeline, platform, error_code] += n

        out: dict[str, int] = {}
        for pipeline, platform in sorted(pairs):
            prefix = f"{pipeline}_{platform}"
            for i in range(N_BUCKETS):
                out[f"{prefix}_probability_{bucket_label(i)}"] = probability[pipeline, platform, i]
            for i in range(N_BUCKETS):
                out[f"{prefix}_quality_{bucket_label(i)}"] = quality[pipeline, platform, i]
            for (pl, pf, code), n in sorted(errors.items()):
                if (pl, pf) == (pipeline, platform):
                    out[f"{prefix}_{code}"] = n
        out["total"] = total
        return out

    def close(self) -> None:
        self._engine.dispose()


def bi_store(ctx: ServiceContext) -> BiStore:
    """The app's BI store, built once on first use. The face and capture services may share one
    database: each writes its own endpoint names and reads back only those."""
    return ctx.engine("bi", lambda: BiStore.from_settings(ctx.settings))
