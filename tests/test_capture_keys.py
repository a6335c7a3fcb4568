"""The capture service's keys out of the box (issue 31): a local evaluation key on loopback only,
and a service without a key that says what is wrong and how to fix it."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.helpers import assert_error
from verilive.capture.bundle import generate_key, key_id_of_pem, public_key_b64
from verilive.capture.keys import capture_keys, is_loopback
from verilive.config import Settings
from verilive.server.app import create_service_app


def _settings(tmp_path: Path, **kw: object) -> Settings:
    return Settings(capture_private_keys=[], capture_eval_key_path=tmp_path / "eval" / "key.pem", **kw)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("verilive.example", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_configured_keys_are_used_as_they_are(tmp_path: Path) -> None:
    keys = capture_keys(Settings(capture_private_keys=["k1=/x.pem"], capture_eval_key_path=tmp_path / "k"))
    assert keys.entries == ("k1=/x.pem",) and not keys.evaluation and keys.problem is None
    assert not (tmp_path / "k").exists()


def test_loopback_makes_one_evaluation_key_and_reuses_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = _settings(tmp_path, host="127.0.0.1")
    with caplog.at_level(logging.WARNING, logger="verilive.capture"):
        first = capture_keys(s)
    path = tmp_path / "eval" / "key.pem"
    assert first.entries == (str(path),) and first.evaluation and first.problem is None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    kid = key_id_of_pem(path.read_bytes())
    assert (
        "LOCAL EVALUATION" in caplog.text and kid in caplog.text and "verilive keys generate" in caplog.text
    )
    pem = path.read_bytes()
    assert capture_keys(s).entries == first.entries and path.read_bytes() == pem  # reused, not replaced


def test_other_addresses_get_no_evaluation_key_unless_asked(tmp_path: Path) -> None:
    keys = capture_keys(_settings(tmp_path, host="0.0.0.0"))
    assert keys.entries == () and not keys.evaluation
    assert (
        keys.problem is not None and "loopback" in keys.problem and "verilive keys generate" in keys.problem
    )
    assert not (tmp_path / "eval").exists()
    assert capture_keys(_settings(tmp_path, host="0.0.0.0", capture_eval_key="on")).evaluation
    off = capture_keys(_settings(tmp_path, host="127.0.0.1", capture_eval_key="off"))
    assert off.entries == () and off.problem is not None and "VERILIVE_CAPTURE_PRIVATE_KEYS" in off.problem


def test_an_unwritable_key_place_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    keys = capture_keys(Settings(capture_private_keys=[], capture_eval_key_path=blocker / "key.pem"))
    assert keys.entries == () and keys.problem is not None and "cannot be made" in keys.problem


def test_a_service_without_a_key_says_so_on_health_and_public_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_service_app("capture", _settings(tmp_path, host="0.0.0.0"))
    with caplog.at_level(logging.ERROR), TestClient(app) as c:
        assert "no capture key is configured" in caplog.text  # said at start, not at the first request
        health = c.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "DOWN"
        assert any("verilive keys generate" in p for p in health.json()["problems"])
        body = assert_error(c.get("/sdk/public_key"), 503, "NO_CAPTURE_KEY")
        assert "/health" in body["message"]


def test_the_demo_works_out_of_the_box_on_loopback(tmp_path: Path) -> None:
    app = create_service_app("capture", _settings(tmp_path, host="127.0.0.1"))
    with TestClient(app) as c:
        health = c.get("/health").json()
        assert not any("capture key" in p for p in health["problems"])
        key = c.get("/sdk/public_key")
        assert key.status_code == 200
        pem = (tmp_path / "eval" / "key.pem").read_bytes()
        assert key.json() == {"keyId": key_id_of_pem(pem), "publicKey": public_key_b64(pem)}


def test_a_configured_key_wins_over_the_evaluation_key(tmp_path: Path) -> None:
    kid, pem, pub = generate_key()
    (tmp_path / "real.pem").write_bytes(pem)
    s = Settings(capture_private_keys=[str(tmp_path / "real.pem")], capture_eval_key_path=tmp_path / "e.pem")
    with TestClient(create_service_app("capture", s)) as c:
        assert c.get("/sdk/public_key").json() == {"keyId": kid, "publicKey": pub}
    assert not (tmp_path / "e.pem").exists()


# Issue 44, finding 6: an evaluation key found in place is used only when it is this user's own,
# private, regular file; the service then has no key and says which file and how to fix it.
def _found_key(tmp_path: Path, mode: int) -> Path:
    path = tmp_path / "eval" / "key.pem"
    path.parent.mkdir()
    _, pem, _ = generate_key()
    path.write_bytes(pem)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o622], ids=oct)
def test_an_evaluation_key_open_to_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = _found_key(tmp_path, mode)
    keys = capture_keys(_settings(tmp_path, host="127.0.0.1"))
    assert keys.entries == () and not keys.evaluation and keys.problem is not None
    assert str(path) in keys.problem and f"chmod 600 {path}" in keys.problem
    assert stat.S_IMODE(path.stat().st_mode) == mode  # refused, not silently changed


def test_a_symlinked_evaluation_key_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.pem"
    _, pem, _ = generate_key()
    target.write_bytes(pem)
    target.chmod(0o600)  # a good key, but reached through a link someone could point anywhere
    path = tmp_path / "eval" / "key.pem"
    path.parent.mkdir()
    path.symlink_to(target)
    keys = capture_keys(_settings(tmp_path, host="127.0.0.1"))
    assert keys.entries == () and keys.problem is not None
    assert str(path) in keys.problem and "symlink" in keys.problem
    # A dangling link is refused too, never followed to create a key where it points.
    target.unlink()
    keys = capture_keys(_settings(tmp_path, host="127.0.0.1"))
    assert keys.entries == () and "symlink" in (keys.problem or "") and not target.exists()


def test_an_evaluation_key_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _found_key(tmp_path, 0o600)
    monkeypatch.setattr("verilive.capture.keys.os.getuid", lambda: path.stat().st_uid + 1)
    keys = capture_keys(_settings(tmp_path, host="127.0.0.1"))
    assert keys.entries == () and keys.problem is not None
    assert str(path) in keys.problem and "owned by" in keys.problem


def test_a_private_evaluation_key_found_in_place_is_used(tmp_path: Path) -> None:
    path = _found_key(tmp_path, 0o600)
    keys = capture_keys(_settings(tmp_path, host="127.0.0.1"))
    assert keys.entries == (str(path),) and keys.evaluation and keys.problem is None


def test_the_evaluation_key_directory_is_made_0700(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        keys = capture_keys(_settings(tmp_path, host="127.0.0.1"))
    finally:
        os.umask(old)
    assert keys.evaluation
    assert stat.S_IMODE((tmp_path / "eval").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "eval" / "key.pem").stat().st_mode) == 0o600
