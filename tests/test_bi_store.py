"""BI record store (server/bi.py) on SQLite and on a real PostgreSQL.

The PostgreSQL cases start a throw-away cluster on 127.0.0.1 (tests/servers.py) from Debian's
`postgresql` package, which scripts/install-test-deps.sh installs (`make test` runs it). A machine
without it fails these tests rather than skipping them, like the model tests.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.servers import PgServer
from tests.servers import postgres_server as start_postgres
from verilive.config import Settings
from verilive.errors import InvalidParameter
from verilive.server.bi import (
    PLATFORMS,
    BiRecord,
    BiStore,
    database_url,
    normalise_platform,
    parse_date,
)

UTC = dt.UTC
# Written out rather than computed, so the key format is checked independently of the code.
LABELS = [
    "0.0-0.1",
    "0.1-0.2",
    "0.2-0.3",
    "0.3-0.4",
    "0.4-0.5",
    "0.5-0.6",
    "0.6-0.7",
    "0.7-0.8",
    "0.8-0.9",
    "0.9-1.0",
]
RECORD_KEYS = {
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
}


def rec(
    time: dt.datetime,
    *,
    pipeline: str = "p1",
    platform: str = "IOS",
    probability: float | None = 0.8,
    quality: float | None = 0.7,
    error_code: str | None = None,
) -> BiRecord:
    rejected = error_code is not None
    return BiRecord(
        time=time,
        endpoint="check_liveness",
        pipeline=pipeline,
        calibration="REGULAR",
        platform=platform,
        probability=None if rejected else probability,
        quality=None if rejected else quality,
        score=None if rejected else 1.25,
        error_code=error_code,
        image_width=640,
        image_height=480,
        latency_ms=12.5,
    )


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


# --------------------------------------------------------------------------- PostgreSQL server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PgServer]:
    with start_postgres() as server:
        yield server


# --------------------------------------------------------------------------- one database per test


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'bi.sqlite3'}"
        return
    server: PgServer = request.getfixturevalue("postgres_server")
    name = server.new_database()
    yield server.url(name)
    server.admin(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def make_store(db_url: str) -> Iterator[Callable[..., BiStore]]:
    stores: list[BiStore] = []

    def make(retention_days: int = 0) -> BiStore:
        # retention 0 by default: most tests use fixed past dates the opportunistic purge would drop.
        store = BiStore(db_url, retention_days=retention_days)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def store(make_store: Callable[..., BiStore]) -> BiStore:
    return make_store()


# --------------------------------------------------------------------------- cases


def test_records_round_trip(store: BiStore) -> None:
    plus2 = dt.timezone(dt.timedelta(hours=2))
    ok = BiRecord(
        time=dt.datetime(2026, 3, 1, 1, 30, 5, 123000, tzinfo=plus2),  # 23:30:05.123 UTC the day before
        endpoint="check_image",
        pipeline="default",
        calibration="HARDENED",
        platform="ANDROID",
        probability=0.875,
        quality=0.625,
        score=-1.5,
        error_code=None,
        image_width=1280,
        image_height=720,
        latency_ms=41.25,
    )
    rejected = rec(at("2026-03-01T08:00:00"), error_code="FACE_NOT_FOUND", platform="UNKNOWN")
    store.add(ok)
    store.add(rejected)

    got = store.records()
    assert got == [
        {
            "time": "2026-02-28T23:30:05.123Z",
            "endpoint": "check_image",
            "pipeline": "default",
            "calibration": "HARDENED",
            "platform": "ANDROID",
            "probability": 0.875,
            "quality": 0.625,
            "score": -1.5,
            "error_code": None,
            "image_width": 1280,
            "image_height": 720,
            "latency_ms": 41.25,
            "rejection": None,
            "motion3d": None,
            "request_id": None,
        },
        {
            "time": "2026-03-01T08:00:00.000Z",
            "endpoint": "check_liveness",
            "pipeline": "p1",
            "calibration": "REGULAR",
            "platform": "UNKNOWN",
            "probability": None,
            "quality": None,
            "score": None,
            "error_code": "FACE_NOT_FOUND",
            "image_width": 640,
            "image_height": 480,
            "latency_ms": 12.5,
            "rejection": None,
            "motion3d": None,
            "request_id": None,
        },
    ]
    assert store.failed_writes == 0


def test_records_are_oldest_first_and_limited(store: BiStore) -> None:
    times = [at("2026-05-03T10:00:00"), at("2026-05-01T10:00:00"), at("2026-05-02T10:00:00")]
    store.add_many([rec(t) for t in times])
    assert [r["time"][:10] for r in store.records()] == ["2026-05-01", "2026-05-02", "2026-05-03"]
    assert [r["time"][:10] for r in store.records(limit=2)] == ["2026-05-01", "2026-05-02"]
    assert store.records(limit=0) == []
    with pytest.raises(InvalidParameter):
        store.records(limit=-1)


@pytest.mark.parametrize(
    ("date_from", "date_to", "expected"),
    [
        (None, None, ["a", "b", "c", "d"]),
        ("2026-03-01", "2026-03-01", ["a", "b"]),  # the end day is inclusive up to its last instant
        ("2026-03-02", None, ["c", "d"]),
        (None, "2026-03-02", ["a", "b", "c"]),
        ("2026-03-02", "2026-03-03", ["c", "d"]),
        ("2026-03-04", None, []),
        (None, "2026-02-28", []),
    ],
)
def test_date_filters(
    store: BiStore, date_from: str | None, date_to: str | None, expected: list[str]
) -> None:
    by_pipeline = {
        "a": at("2026-03-01T00:00:00"),
        "b": at("2026-03-01T23:59:59.999999"),
        "c": at("2026-03-02T00:00:00"),
        "d": at("2026-03-03T12:00:00"),
    }
    store.add_many([rec(t, pipeline=name) for name, t in by_pipeline.items()])
    d_from, d_to = parse_date(date_from, "date_from"), parse_date(date_to, "date_to")

    assert [r["pipeline"] for r in store.records(d_from, d_to)] == expected
    report = store.report(d_from, d_to)
    assert report["total"] == len(expected)
    assert {k.split("_")[0] for k in report if k != "total"} == set(expected)


def test_reversed_date_range_is_an_invalid_parameter(store: BiStore) -> None:
    with pytest.raises(InvalidParameter, match="after date_to"):
        store.records(dt.date(2026, 3, 2), dt.date(2026, 3, 1))
    with pytest.raises(InvalidParameter):
        store.report(dt.date(2026, 3, 2), dt.date(2026, 3, 1))


def test_report_keys_and_counts(store: BiStore) -> None:
    t = at("2026-04-10T12:00:00")
    store.add_many(
        [
            rec(t, probability=0.05, quality=0.5),
            rec(t, probability=0.15, quality=0.55),
            rec(t, probability=1.0, quality=0.0),
            rec(t, probability=0.95, quality=0.99),
            rec(t, error_code="FACE_NOT_FOUND"),
            rec(t, error_code="FACE_NOT_FOUND"),
            rec(t, error_code="FACE_TOO_SMALL"),
            rec(t, pipeline="p2", platform="DESKTOP", probability=0.5, quality=0.1),
        ]
    )
    expected: dict[str, int] = {}
    for prefix in ("p1_IOS", "p2_DESKTOP"):
        for kind in ("probability", "quality"):
            for label in LABELS:
                expected[f"{prefix}_{kind}_{label}"] = 0
    expected |= {
        "p1_IOS_probability_0.0-0.1": 1,
        "p1_IOS_probability_0.1-0.2": 1,
        "p1_IOS_probability_0.9-1.0": 2,  # 0.95 and 1.0
        "p1_IOS_quality_0.0-0.1": 1,
        "p1_IOS_quality_0.5-0.6": 2,
        "p1_IOS_quality_0.9-1.0": 1,
        "p1_IOS_FACE_NOT_FOUND": 2,
        "p1_IOS_FACE_TOO_SMALL": 1,
        "p2_DESKTOP_probability_0.5-0.6": 1,
        "p2_DESKTOP_quality_0.1-0.2": 1,
        "total": 8,
    }
    assert store.report() == expected


@pytest.mark.parametrize("k", range(10))
def test_bucket_boundaries(store: BiStore, k: int) -> None:
    edge = k / 10  # the same double as the literal, e.g. 0.3 (whose x*10 rounds up)
    just_below = math.nextafter(edge, -1.0)
    t = at("2026-04-10T12:00:00")
    store.add(rec(t, pipeline="edge", probability=edge, quality=edge))
    store.add(rec(t, pipeline="below", probability=just_below, quality=just_below))
    report = store.report()
    assert report[f"edge_IOS_probability_{LABELS[k]}"] == 1
    assert report[f"edge_IOS_quality_{LABELS[k]}"] == 1
    below = LABELS[k - 1] if k > 0 else LABELS[0]  # below 0.0 is clamped into the first bucket
    assert report[f"below_IOS_probability_{below}"] == 1
    assert report["total"] == 2


def test_probability_one_lands_in_the_last_bucket(store: BiStore) -> None:
    store.add(rec(at("2026-04-10T12:00:00"), probability=1.0, quality=1.0))
    report = store.report()
    assert report["p1_IOS_probability_0.9-1.0"] == 1
    assert report["p1_IOS_quality_0.9-1.0"] == 1
    assert not any(k.endswith("1.0-1.1") for k in report)
    assert sum(v for k, v in report.items() if "_probability_" in k) == 1


def test_zero_filled_buckets(store: BiStore) -> None:
    assert store.report() == {"total": 0}
    store.add(rec(at("2026-04-10T12:00:00"), pipeline="p1", platform="IOS", error_code="FACE_CROPPED"))
    store.add(rec(at("2026-04-12T12:00:00"), pipeline="p2", platform="DESKTOP"))

    only_rejection = store.report(date_to=dt.date(2026, 4, 10))
    # A pair with only rejections still gets all 20 buckets, at zero, plus its error key.
    assert len(only_rejection) == 22
    assert only_rejection["p1_IOS_FACE_CROPPED"] == 1
    assert all(only_rejection[f"p1_IOS_probability_{label}"] == 0 for label in LABELS)
    assert all(only_rejection[f"p1_IOS_quality_{label}"] == 0 for label in LABELS)
    # Pairs without records in the range get no keys; error codes with no count get none either.
    assert not any(k.startswith("p2_") for k in only_rejection)
    later = store.report(date_from=dt.date(2026, 4, 11))
    assert not any(k.startswith("p1_") or k.endswith("FACE_CROPPED") for k in later)
    assert later["total"] == 1 and len(later) == 21


def test_non_finite_values_are_stored_as_absent(store: BiStore) -> None:
    store.add(replace(rec(at("2026-04-10T12:00:00")), probability=math.nan, score=math.inf))
    (row,) = store.records()
    assert row["probability"] is None and row["score"] is None and row["quality"] == 0.7
    assert store.report()["total"] == 1
    assert store.failed_writes == 0


def test_long_names_are_truncated_not_lost(store: BiStore) -> None:
    store.add(rec(at("2026-04-10T12:00:00"), pipeline="x" * 500))
    (row,) = store.records()
    assert row["pipeline"] == "x" * 64
    assert store.failed_writes == 0


def test_purge_removes_only_records_past_retention(make_store: Callable[..., BiStore]) -> None:
    now = at("2026-06-15T12:00:00")
    writer = make_store(retention_days=0)  # keeps everything, so adding cannot purge
    writer.add_many(
        [
            rec(now - dt.timedelta(days=31), pipeline="old"),
            rec(now - dt.timedelta(days=30), pipeline="edge"),  # exactly at the cut-off: kept
            rec(now - dt.timedelta(days=1), pipeline="new"),
        ]
    )
    assert writer.purge(now=now) == 0

    replica = make_store(retention_days=30)
    assert replica.purge(now=now) == 1
    assert [r["pipeline"] for r in replica.records()] == ["edge", "new"]
    assert replica.purge(now=now) == 0


def test_add_purges_opportunistically_at_most_once_an_hour(make_store: Callable[..., BiStore]) -> None:
    store = make_store(retention_days=30)
    now = dt.datetime.now(UTC)
    store.add_many([rec(now - dt.timedelta(days=400), pipeline="old"), rec(now, pipeline="new")])
    assert [r["pipeline"] for r in store.records()] == ["new"]
    # The next purge is due an hour later, so an old record added now stays for the moment.
    store.add(rec(now - dt.timedelta(days=400), pipeline="old2"))
    assert [r["pipeline"] for r in store.records()] == ["old2", "new"]


def test_concurrent_adds(store: BiStore) -> None:
    n_threads, per_thread = 8, 40
    barrier = threading.Barrier(n_threads)
    t0 = at("2026-04-10T00:00:00")

    def work(i: int) -> None:
        barrier.wait()
        for j in range(per_thread):
            platform = PLATFORMS[(i + j) % len(PLATFORMS)]
            store.add(rec(t0 + dt.timedelta(seconds=j), pipeline=f"t{i}", platform=platform))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert store.failed_writes == 0
    assert len(store.records()) == n_threads * per_thread
    assert store.report()["total"] == n_threads * per_thread


def test_replicas_creating_the_schema_at_once(db_url: str) -> None:
    n = 6
    barrier = threading.Barrier(n)
    stores: list[BiStore] = []
    errors: list[BaseException] = []

    def start() -> None:
        barrier.wait()
        try:
            stores.append(BiStore(db_url, retention_days=0))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    try:
        assert errors == []
        for i, s in enumerate(stores):
            s.add(rec(at("2026-04-10T12:00:00"), pipeline=f"r{i}"))
        assert stores[0].report()["total"] == n
    finally:
        for s in stores:
            s.close()


def test_add_never_raises(store: BiStore, db_url: str) -> None:
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE bi_records")
    engine.dispose()
    store.add(rec(at("2026-04-10T12:00:00")))
    store.add_many([rec(at("2026-04-10T12:00:00")), rec(at("2026-04-10T12:00:01"))])
    assert store.failed_writes == 3


def test_table_holds_no_image_and_no_personal_data(store: BiStore, db_url: str) -> None:
    engine = sa.create_engine(db_url)
    try:
        inspector = sa.inspect(engine)
        columns = {c["name"]: c["type"] for c in inspector.get_columns("bi_records")}
        indexes = inspector.get_indexes("bi_records")
    finally:
        engine.dispose()
    # Exactly the decision's fields (plus a surrogate key): no image, file name, IP or request id.
    assert set(columns) == RECORD_KEYS | {"id"}
    assert not any(isinstance(t, sa.LargeBinary) for t in columns.values())
    assert any(ix["column_names"] == ["time"] for ix in indexes)


@pytest.mark.parametrize(
    "value",
    [
        "2026-1-05",
        "05-01-2026",
        "2026/01/05",
        "20260105",
        "2026-02-30",
        "2026-13-01",
        "yesterday",
        "2026-01-05T00:00",
        " 2026-01-05",
        "２０２６-01-05",  # full-width digits match \d but are not yyyy-MM-dd
    ],
)
def test_malformed_date_is_an_invalid_parameter(value: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        parse_date(value, "date_from")
    assert info.value.status == 400
    assert info.value.code == "INVALID_PARAMETER"
    assert "date_from" in info.value.message and "yyyy-MM-dd" in info.value.message


def test_parse_date_accepts_the_interface_form() -> None:
    assert parse_date("2026-02-28", "date_to") == dt.date(2026, 2, 28)
    assert parse_date(None, "date_to") is None
    assert parse_date("", "date_to") is None


def test_record_validation() -> None:
    t = at("2026-04-10T12:00:00")
    with pytest.raises(ValueError, match="timezone-aware"):
        rec(t.replace(tzinfo=None))
    with pytest.raises(ValueError, match="platform"):
        rec(t, platform="ios")
    assert normalise_platform("iOS") == "IOS"
    assert normalise_platform(" android ") == "ANDROID"
    assert normalise_platform("WEB") == "UNKNOWN"
    assert normalise_platform(None) == "UNKNOWN"


def test_urls_and_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VERILIVE_BI_DATABASE_URL", raising=False)
    monkeypatch.delenv("VERILIVE_BI_RETENTION_DAYS", raising=False)
    assert database_url(str(tmp_path / "a.db")).drivername == "sqlite"
    assert database_url("postgresql://u:p@h/db").drivername == "postgresql+psycopg"
    assert database_url("postgres://u:p@h/db").drivername == "postgresql+psycopg"

    settings = Settings(bi_database_url=str(tmp_path / "nested" / "bi.db"), bi_retention_days=7)
    with BiStore.from_settings(settings) as store:
        assert store.retention_days == 7
        store.add(rec(dt.datetime.now(UTC)))  # recent, so the 7-day retention keeps it
        assert (tmp_path / "nested" / "bi.db").is_file()
        assert store.report()["total"] == 1
    assert Settings().bi_retention_days == 90
    assert Settings().bi_database_url.startswith("sqlite:///")


def test_repr_hides_the_password() -> None:
    store = BiStore.__new__(BiStore)
    store.url = database_url("postgresql://user:s3cret@db.example/bi")
    assert "s3cret" not in repr(store) and "db.example" in repr(store)


def test_endpoint_filter_separates_services_sharing_a_store(store: BiStore) -> None:
    import dataclasses

    face = rec(at("2026-11-20T10:00:00"))
    capture = dataclasses.replace(rec(at("2026-11-20T11:00:00")), endpoint="check_capture_liveness")
    store.add_many([face, capture])
    assert [r["endpoint"] for r in store.records(endpoints=("check_liveness",))] == ["check_liveness"]
    assert [r["endpoint"] for r in store.records(endpoints=("check_capture_liveness",))] == [
        "check_capture_liveness"
    ]
    assert len(store.records()) == 2
    assert store.report(endpoints=("check_liveness", "check_image"))["total"] == 1
    assert store.report()["total"] == 2
    assert store.report(endpoints=())["total"] == 0


def test_a_new_data_directory_is_0700_and_its_databases_0600(tmp_path: Path) -> None:
    """Issue 44, finding 6: BI records and the replay store are not readable by other local users,
    whatever the umask; an existing database keeps the mode its owner gave it."""
    from verilive.capture.replay import SqliteReplayStore

    data = tmp_path / "share" / "verilive"
    old = os.umask(0o022)
    try:
        store = BiStore(f"sqlite:///{data}/bi.sqlite3", retention_days=0)
        replay = SqliteReplayStore(data / "capture-replay.sqlite3")
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        for name in ("bi.sqlite3", "capture-replay.sqlite3"):
            assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
        for wal in data.glob("*-wal"):  # SQLite gives the WAL and shm files the database's mode
            assert stat.S_IMODE(wal.stat().st_mode) == 0o600, wal.name
    finally:
        store.close()
        replay.close()
    existing = tmp_path / "mine.sqlite3"
    existing.touch(mode=0o640)
    existing.chmod(0o640)
    BiStore(f"sqlite:///{existing}", retention_days=0).close()
    assert stat.S_IMODE(existing.stat().st_mode) == 0o640
