"""Replay store of the capture service on SQLite and on a real Redis (docs/capture.md#replay-store).

Redis comes from Debian (`redis-server`, installed by scripts/install-test-deps.sh, which `make test`
runs); tests/servers.py starts a throw-away server on 127.0.0.1 on a free port. Expiry is checked
without sleeping: SQLite takes the time as a parameter, Redis is asked for the key's remaining time
to live.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import redis_server
from verilive.capture.replay import (
    RedisReplayStore,
    ReplayStore,
    SqliteReplayStore,
    open_replay_store,
    sqlite_path,
)

T0 = 1_800_000_000.0


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.slow)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ReplayStore]:
    if request.param == "sqlite":
        s: ReplayStore = SqliteReplayStore(tmp_path / "replay.sqlite3")
    else:
        url = request.getfixturevalue("redis_url")
        # A fresh prefix per test: the server is shared by the module.
        s = RedisReplayStore(url, prefix=f"test:{request.node.name}:")
    yield s
    s.close()


def test_remember_reports_the_second_sighting(store: ReplayStore) -> None:
    assert store.remember("nonce", "abc", 600, now=T0) is False
    assert store.remember("nonce", "abc", 600, now=T0 + 1) is True
    assert store.remember("nonce", "abc", 600, now=T0 + 2) is True
    # Namespaces and keys are independent.
    assert store.remember("image", "abc", 600, now=T0) is False
    assert store.remember("nonce", "abd", 600, now=T0) is False


def test_count_is_a_sliding_window(store: ReplayStore) -> None:
    assert [store.count("device", "d1", 60, now=T0 + i) for i in range(4)] == [1, 2, 3, 4]
    assert store.count("device", "d2", 60, now=T0 + 3) == 1
    # 61 s after the first event, the first two have left the window (T0 and T0 + 1 are <= now - 60).
    assert store.count("device", "d1", 60, now=T0 + 61) == 3


def test_concurrent_remember_has_one_winner(store: ReplayStore) -> None:
    results: list[bool] = []
    lock = threading.Lock()

    def worker() -> None:
        seen = store.remember("nonce", "race", 600, now=T0)
        with lock:
            results.append(seen)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] + [True] * 7


def test_sqlite_expiry_and_purge(tmp_path: Path) -> None:
    s = SqliteReplayStore(tmp_path / "r.sqlite3")
    assert s.remember("nonce", "n1", 10, now=T0) is False
    assert s.remember("nonce", "n1", 10, now=T0 + 9) is True
    # Expired: a new sighting, remembered again from now on.
    assert s.remember("nonce", "n1", 10, now=T0 + 11) is False
    assert s.remember("nonce", "n1", 10, now=T0 + 12) is True
    # A replay does not extend the memory: the key expires 10 s after its first sighting at T0 + 11.
    assert s.remember("nonce", "n1", 10, now=T0 + 21.5) is False
    s.count("device", "d", 60, now=T0)
    assert s.purge(now=T0 + 10_000) == 2  # the nonce and the event
    s.close()


def test_sqlite_file_is_shared_by_two_stores(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    a, b = SqliteReplayStore(path), SqliteReplayStore(path)
    assert a.remember("nonce", "x", 600, now=T0) is False
    assert b.remember("nonce", "x", 600, now=T0) is True
    assert a.count("device", "d", 60, now=T0) == 1
    assert b.count("device", "d", 60, now=T0) == 2
    a.close()
    b.close()


@pytest.mark.slow
def test_redis_sets_expiry_and_is_shared(redis_url: str) -> None:
    import redis

    a = RedisReplayStore(redis_url, prefix="test:shared:")
    b = RedisReplayStore(redis_url, prefix="test:shared:")
    assert a.remember("nonce", "k", 600) is False
    assert b.remember("nonce", "k", 600) is True
    client = redis.Redis.from_url(redis_url)
    ttl_ms = client.pttl("test:shared:nonce:k")
    assert 0 < ttl_ms <= 600_000
    a.count("device", "d", 60, now=T0)
    assert 0 < client.pttl("test:shared:device:d") <= 60_000
    client.close()
    a.close()
    b.close()


@pytest.mark.slow
def test_open_replay_store_by_url(tmp_path: Path, redis_url: str) -> None:
    s = open_replay_store(f"sqlite:///{tmp_path}/a.sqlite3")
    assert isinstance(s, SqliteReplayStore) and s.path == f"{tmp_path}/a.sqlite3"
    s.close()
    r = open_replay_store(redis_url)
    assert isinstance(r, RedisReplayStore)
    assert "127.0.0.1" in repr(r)
    r.close()
    assert sqlite_path("sqlite://") == ":memory:"
    assert sqlite_path("sqlite:///rel/x.db") == "rel/x.db"
    assert sqlite_path("sqlite:////abs/x.db") == "/abs/x.db"
    assert sqlite_path("/plain/path.db") == "/plain/path.db"


@pytest.mark.slow
def test_redis_password_is_not_shown(redis_url: str) -> None:
    port = redis_url.rsplit(":", 1)[1]
    r = RedisReplayStore(f"redis://user:secret@127.0.0.1:{port}")
    assert "secret" not in repr(r)
    r.close()


def test_similar_finds_near_vectors_in_any_probed_bucket(store: ReplayStore) -> None:
    sig = [10.0, -2.0, 0.5, 0.1, 3.0] * 4
    assert store.similar("pose", ["12:3:l", "12:2:l"], sig, 4.0, 600, now=T0) is False
    # A copy whose coordinates moved a little (and one far, inside the 10 % that may): near.
    copy = [v + 1.5 for v in sig]
    copy[0] += 40.0
    assert store.similar("pose", ["12:4:l", "12:3:l"], copy, 4.0, 600, now=T0 + 1) is True
    # Another movement, or the same one in another bucket or namespace: not near.
    assert store.similar("pose", ["12:3:l"], [v + 9.0 for v in sig], 4.0, 600, now=T0 + 2) is False
    assert store.similar("pose", ["12:9:r"], sig, 4.0, 600, now=T0 + 3) is False
    assert store.similar("other", ["12:3:l"], sig, 4.0, 600, now=T0 + 4) is False
    # A vector of another length never matches.
    assert store.similar("pose", ["12:3:l"], sig[:10], 4.0, 600, now=T0 + 5) is False


def test_similar_forgets_after_its_ttl(tmp_path: Path) -> None:
    s = SqliteReplayStore(tmp_path / "r.sqlite3")
    sig = [1.0] * 10
    assert s.similar("pose", ["b"], sig, 1.0, 60, now=T0) is False
    assert s.similar("pose", ["b"], sig, 1.0, 60, now=T0 + 30) is True
    assert s.similar("pose", ["b"], sig, 1.0, 60, now=T0 + 200) is False
    s.close()
