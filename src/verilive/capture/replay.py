"""Replay store of the capture service: nonces, image hashes and per-device capture counts.

Two operations, both atomic, both with expiry:

- ``remember(namespace, key, ttl_s)`` records a key and says whether it was already there (and not
  expired): a second bundle with the same nonce, or a second capture with the same image hash.
- ``count(namespace, key, window_s)`` records one event and returns how many events the key had in
  the last ``window_s`` seconds, this one included (bursts from one device).
- ``similar(namespace, buckets, vector, tolerance, ttl_s)`` records a short vector under its first
  bucket and says whether a vector recorded earlier under any of the buckets is within ``tolerance``
  (the near-duplicate key of a burst: a re-encoded copy is not byte-identical, but moves the same).

SQLite (a file, the default) serves one host; Redis (``redis://`` URL, the ``redis`` extra) is shared
by replicas and expires keys itself. Keys are opaque strings (hashes and nonces); nothing personal.
"""

from __future__ import annotations

import itertools
import math
import os
import sqlite3
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from verilive.datadir import make_private_file

__all__ = ["RedisReplayStore", "ReplayStore", "SqliteReplayStore", "open_replay_store"]

# Expired rows are deleted at most this often (SQLite; Redis expires keys itself).
PURGE_INTERVAL_S = 60.0
REDIS_PREFIX = "verilive:capture:"
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class ReplayStore(ABC):
    """Thread-safe. ``now`` (Unix seconds) is a parameter so that tests need no sleeping.

    The public methods take the clock and compare vectors; a backend implements the storage steps
    (``_remember``, ``_count``, ``_record_vector``), each atomic, with ``now`` already resolved."""

    def remember(self, namespace: str, key: str, ttl_s: float, now: float | None = None) -> bool:
        """Record ``key`` for ``ttl_s`` seconds; True when it was already recorded and not expired."""
        return self._remember(namespace, key, ttl_s, _clock(now))

    def count(self, namespace: str, key: str, window_s: float, now: float | None = None) -> int:
        """Record one event of ``key``; the number of its events in the last ``window_s`` seconds."""
        return self._count(namespace, key, window_s, _clock(now))

    def similar(
        self,
        namespace: str,
        buckets: Sequence[str],
        vector: Sequence[float],
        tolerance: float,
        ttl_s: float,
        now: float | None = None,
    ) -> bool:
        """Record ``vector`` under ``buckets[0]`` for ``ttl_s`` seconds; True when a vector of the same
        length recorded earlier under any of ``buckets``, and not expired, is within ``tolerance``
        (see :func:`near`)."""
        earlier = self._record_vector(namespace, buckets, _pack(vector), ttl_s, _clock(now))
        mine = np.asarray(vector, dtype=np.float32)
        return any(near(_unpack(blob), mine, tolerance) for blob in earlier)

    @abstractmethod
    def _remember(self, namespace: str, key: str, ttl_s: float, now: float) -> bool:
        """:meth:`remember` at ``now``."""

    @abstractmethod
    def _count(self, namespace: str, key: str, window_s: float, now: float) -> int:
        """:meth:`count` at ``now``."""

    @abstractmethod
    def _record_vector(
        self, namespace: str, buckets: Sequence[str], packed: bytes, ttl_s: float, now: float
    ) -> list[bytes]:
        """Record the packed vector under ``buckets[0]`` until ``now + ttl_s``, in the same atomic step
        as reading the packed vectors recorded earlier under ``buckets`` and not expired at ``now``."""

    def close(self) -> None:  # noqa: B027 (optional for subclasses)
        """Release connections."""


def _clock(now: float | None) -> float:
    return time.time() if now is None else now


# Share of coordinates that must agree: one badly tracked frame of a copy must not hide it.
NEAR_QUANTILE = 0.9


def near(a: np.ndarray, b: np.ndarray, tolerance: float) -> bool:
    """Two vectors are near when NEAR_QUANTILE of their coordinates differ by at most ``tolerance``."""
    return a.shape == b.shape and float(np.quantile(np.abs(a - b), NEAR_QUANTILE)) <= tolerance


def _pack(vector: Sequence[float]) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def _unpack(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f4")


class SqliteReplayStore(ReplayStore):
    """One SQLite file (or ``:memory:``). A process-wide lock serialises writers of this process;
    ``BEGIN IMMEDIATE`` and the busy timeout serialise several processes sharing the file."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        if self.path != ":memory:":
            make_private_file(self.path)  # data directory 0700, database 0600 (issue 44)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30.0)
        self._last_purge = -math.inf
        with self._lock:
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode = WAL")
                self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS capture_seen ("
                " ns TEXT NOT NULL, key TEXT NOT NULL, expires REAL NOT NULL, PRIMARY KEY (ns, key))"
            )
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS capture_events ("
                " ns TEXT NOT NULL, key TEXT NOT NULL, t REAL NOT NULL, expires REAL NOT NULL)"
            )
            self._db.execute("CREATE INDEX IF NOT EXISTS ix_capture_events ON capture_events (ns, key, t)")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS capture_vectors ("
                " ns TEXT NOT NULL, bucket TEXT NOT NULL, vec BLOB NOT NULL, expires REAL NOT NULL)"
            )
            self._db.execute("CREATE INDEX IF NOT EXISTS ix_capture_vectors ON capture_vectors (ns, bucket)")

    def __repr__(self) -> str:
        return f"SqliteReplayStore({self.path!r})"

    def _write(self, sql: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """Run statements in one write transaction; the first row of each result."""
        out: list[Any] = []
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                for statement, args in sql:
                    out.append(cur.execute(statement, args).fetchone())
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        return out

    def _remember(self, namespace: str, key: str, ttl_s: float, now: float) -> bool:
        self._maybe_purge(now)
        before, _ = self._write(
            [
                ("SELECT expires FROM capture_seen WHERE ns = ? AND key = ?", (namespace, key)),
                # A replayed key keeps its first expiry: replaying must not extend the memory forever.
                (
                    "INSERT INTO capture_seen (ns, key, expires) VALUES (?, ?, ?) "
                    "ON CONFLICT (ns, key) DO UPDATE SET expires = excluded.expires "
                    "WHERE capture_seen.expires <= ?",
                    (namespace, key, now + ttl_s, now),
                ),
            ]
        )
        return before is not None and float(before[0]) > now

    def _count(self, namespace: str, key: str, window_s: float, now: float) -> int:
        self._maybe_purge(now)
        _, n = self._write(
            [
                (
                    "INSERT INTO capture_events (ns, key, t, expires) VALUES (?, ?, ?, ?)",
                    (namespace, key, now, now + window_s),
                ),
                (
                    "SELECT COUNT(*) FROM capture_events WHERE ns = ? AND key = ? AND t > ? AND t <= ?",
                    (namespace, key, now - window_s, now),
                ),
            ]
        )
        return int(n[0])

    def _record_vector(
        self, namespace: str, buckets: Sequence[str], packed: bytes, ttl_s: float, now: float
    ) -> list[bytes]:
        self._maybe_purge(now)
        marks = ",".join("?" * len(buckets))
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                rows = cur.execute(
                    f"SELECT vec FROM capture_vectors WHERE ns = ? AND bucket IN ({marks}) AND expires > ?",
                    (namespace, *buckets, now),
                ).fetchall()
                cur.execute(
                    "INSERT INTO capture_vectors (ns, bucket, vec, expires) VALUES (?, ?, ?, ?)",
                    (namespace, buckets[0], packed, now + ttl_s),
                )
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        return [bytes(r[0]) for r in rows]

    def _maybe_purge(self, now: float) -> None:
        with self._lock:
            if now - self._last_purge < PURGE_INTERVAL_S and now >= self._last_purge:
                return
            self._last_purge = now
        self.purge(now)

    def purge(self, now: float | None = None) -> int:
        """Delete expired rows; how many went."""
        now = time.time() if now is None else now
        with self._lock:
            a = self._db.execute("DELETE FROM capture_seen WHERE expires <= ?", (now,)).rowcount
            b = self._db.execute("DELETE FROM capture_events WHERE expires <= ?", (now,)).rowcount
            c = self._db.execute("DELETE FROM capture_vectors WHERE expires <= ?", (now,)).rowcount
        return int(a) + int(b) + int(c)

    def close(self) -> None:
        with self._lock:
            self._db.close()


class RedisReplayStore(ReplayStore):
    """Redis: ``SET NX PX`` for keys, a sorted set per key for event windows. Redis expires both,
    with its own clock; ``now`` only places events inside a window."""

    def __init__(self, url: str, prefix: str = REDIS_PREFIX) -> None:
        try:
            import redis
        except ImportError as exc:  # the optional extra
            raise RuntimeError(
                "capture_replay_url names Redis but the redis client is not installed; "
                "pip install 'verilive[redis]'"
            ) from exc
        self.url = url
        self.prefix = prefix
        self._redis = redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
        self._ids = itertools.count()
        self._me = uuid.uuid4().hex[:12]

    def __repr__(self) -> str:
        host = self.url.split("@")[-1]  # never show a password
        return f"RedisReplayStore({host!r})"

    def _remember(self, namespace: str, key: str, ttl_s: float, now: float) -> bool:
        ms = max(1, math.ceil(ttl_s * 1000.0))
        created = self._redis.set(f"{self.prefix}{namespace}:{key}", b"1", nx=True, px=ms)
        return not created

    def _count(self, namespace: str, key: str, window_s: float, now: float) -> int:
        name = f"{self.prefix}{namespace}:{key}"
        member = f"{now:.6f}:{self._me}:{next(self._ids)}"  # unique even for equal times
        pipe = self._redis.pipeline(transaction=True)
        pipe.zremrangebyscore(name, "-inf", now - window_s)
        pipe.zadd(name, {member: now})
        pipe.zcount(name, f"({now - window_s}", now)
        pipe.pexpire(name, max(1, math.ceil(window_s * 1000.0)))
        results = pipe.execute()
        return int(results[2])

    def _record_vector(
        self, namespace: str, buckets: Sequence[str], packed: bytes, ttl_s: float, now: float
    ) -> list[bytes]:
        # One sorted set per bucket, each member a vector (with a random tail, so equal vectors stay
        # two members) scored by its expiry; expired members are dropped on the next write.
        names = [f"{self.prefix}{namespace}:{b}" for b in buckets]
        pipe = self._redis.pipeline(transaction=True)
        pipe.zremrangebyscore(names[0], "-inf", now)
        for name in names:
            pipe.zrangebyscore(name, f"({now}", "+inf")
        pipe.zadd(names[0], {packed + os.urandom(8): now + ttl_s})
        pipe.pexpire(names[0], max(1, math.ceil(ttl_s * 1000.0)))
        results = pipe.execute()
        return [bytes(m)[:-8] for r in results[1 : 1 + len(names)] for m in r]

    def close(self) -> None:
        self._redis.close()


def sqlite_path(url: str) -> str:
    """``sqlite:///abs/path``, ``sqlite://`` (memory), or a plain file path."""
    if url.startswith("sqlite://"):
        rest = url[len("sqlite://") :]
        if rest in ("", "/", "/:memory:"):
            return ":memory:"
        return rest[1:] if rest.startswith("/") else rest
    return url


def open_replay_store(url: str) -> ReplayStore:
    """The store a setting names: a Redis URL, an SQLite URL, a file path or ``:memory:``."""
    if url.startswith(_REDIS_SCHEMES):
        return RedisReplayStore(url)
    return SqliteReplayStore(sqlite_path(url))
