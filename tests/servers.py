"""Throw-away PostgreSQL, Redis and nginx servers on 127.0.0.1 for the tests.

Each comes from Debian, installed by scripts/install-test-deps.sh (`make test` runs it), and is
started on a free loopback port in a temporary folder that is removed afterwards. The tests never
install anything: a machine without the binaries fails the tests that need them rather than
skipping them, like the model tests. Used by tests/test_bi_store.py, tests/test_capture_replay.py,
tests/test_deploy_files.py and tests/integration/.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa

# Readiness polls: a bound on how long a server may take to come up, not a timing assumption.
_POLL_S = 0.02
_START_TIMEOUT_S = 30.0


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


INSTALL_SCRIPT = "scripts/install-test-deps.sh"


def missing_message(what: str, package: str) -> str:
    """Why a test cannot run, and the one command that fixes it."""
    return f"{what} is missing: run {INSTALL_SCRIPT} (`make test` does), which installs Debian's {package}"


def find_binary(name: str, extra_dirs: tuple[str, ...] = ()) -> str | None:
    """``name`` on PATH, else in one of ``extra_dirs`` (e.g. /usr/sbin, off PATH for non-root users)."""
    return shutil.which(name) or next(
        (str(Path(d) / name) for d in extra_dirs if (Path(d) / name).is_file()), None
    )


def _binary(name: str, package: str, extra_dirs: tuple[str, ...] = ()) -> str:
    found = find_binary(name, extra_dirs)
    if found is None:
        pytest.fail(missing_message(name, package))
    return found


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path | None = None) -> None:
    """Poll until ``port`` accepts connections; fail at once if ``proc`` exits."""
    for _ in range(int(_START_TIMEOUT_S / _POLL_S)):
        if port_open(port):
            return
        if proc.poll() is not None:
            text = log.read_text(errors="replace")[-4000:] if log and log.exists() else ""
            pytest.fail(f"{what} exited with code {proc.returncode} at start\n{text}")
        threading.Event().wait(_POLL_S)
    pytest.fail(f"{what} did not listen on port {port} within {_START_TIMEOUT_S:.0f} s")


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL if it does not exit in time; always reaps it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------- PostgreSQL


def _pg_bindir() -> Path | None:
    candidates: list[Path] = []
    found = shutil.which("pg_ctl")
    if found:
        candidates.append(Path(found).resolve().parent)
    # Debian keeps the server binaries off PATH, one folder per major version.
    candidates += sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    for d in candidates:
        if all((d / name).is_file() for name in ("initdb", "pg_ctl", "postgres")):
            return d
    return None


def postgres_bindir() -> Path:
    """The folder of initdb/pg_ctl/postgres; fails the test when there is none."""
    bindir = _pg_bindir()
    if bindir is None:
        pytest.fail(missing_message("PostgreSQL (initdb, pg_ctl, postgres)", "postgresql"))
    return bindir


@dataclass
class PgServer:
    port: int
    user: str
    password: str
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{self.user}:{self.password}@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        engine = sa.create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(sql)
        finally:
            engine.dispose()

    def new_database(self) -> str:
        name = f"bi_test_{next(self._counter)}"
        self.admin(f"CREATE DATABASE {name}")
        return name


@contextlib.contextmanager
def postgres_server() -> Iterator[PgServer]:
    """A throw-away PostgreSQL cluster on 127.0.0.1 (user ``verilive``, random password)."""
    bindir = postgres_bindir()
    base = Path(tempfile.mkdtemp(prefix="verilive-pg-"))
    # postgres refuses to run as root, so as root the cluster belongs to the `postgres` user.
    as_root = os.geteuid() == 0
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    password = secrets.token_hex(12)
    (base / "pw").write_text(password + "\n")
    if as_root:
        shutil.chown(base, "postgres")
        shutil.chown(base / "pw", "postgres")
    data, logfile, port = base / "data", base / "postgres.log", free_port()
    ctl = [*prefix, str(bindir / "pg_ctl"), "-D", str(data)]
    try:
        subprocess.run(
            [
                *prefix,
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "verilive",
                "--auth=scram-sha-256",
                f"--pwfile={base / 'pw'}",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
        )
        # Loopback only, socket in our own folder; durability is irrelevant for a test cluster.
        options = f"-h 127.0.0.1 -p {port} -k {base} -c fsync=off -c synchronous_commit=off"
        start = subprocess.run(
            [*ctl, "-l", str(logfile), "-w", "-t", "60", "-o", options, "start"],
            capture_output=True,
            text=True,
        )
        if start.returncode != 0:
            log = logfile.read_text() if logfile.exists() else ""
            pytest.fail(f"PostgreSQL did not start: {start.stdout}{start.stderr}{log}")
        yield PgServer(port=port, user="verilive", password=password)
    finally:
        if data.is_dir():
            subprocess.run([*ctl, "-m", "fast", "-w", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------- Redis


def redis_server_binary() -> str:
    return _binary("redis-server", "redis-server")


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A throw-away Redis on 127.0.0.1 without persistence; yields its ``redis://`` URL."""
    try:
        import redis
    except ImportError:
        pytest.fail("the redis client is missing: pip install -e '.[redis]' (make install does)")
    workdir = Path(tempfile.mkdtemp(prefix="verilive-redis-"))
    port = free_port()
    proc = subprocess.Popen(
        [
            redis_server_binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        for _ in range(int(_START_TIMEOUT_S / _POLL_S)):
            try:
                if client.ping():
                    break
            except redis.exceptions.ConnectionError:
                if proc.poll() is not None:
                    pytest.fail("redis-server exited at start")
                threading.Event().wait(_POLL_S)
        else:
            pytest.fail("redis-server did not answer")
        yield url
    finally:
        client.close()
        stop_process(proc)
        shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------- nginx


def nginx_binary() -> str:
    return _binary("nginx", "nginx", ("/usr/sbin",))
