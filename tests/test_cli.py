"""The `verilive` command: version, and real servers started on free loopback ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

import verilive
from verilive.cli import app
from verilive.config import Settings

VERILIVE = [sys.executable, "-m", "verilive.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env_for(models_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {"VERILIVE_MODELS_DIR": str(models_dir), "VERILIVE_HOST": "127.0.0.1", "VERILIVE_LOG_JSON": "true"}
    )
    return env


def wait_healthy(url: str, proc: subprocess.Popen, deadline_s: float = 120.0) -> httpx.Response:
    # Polls until the server answers; the deadline only guards against a hung start.
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(
                f"server exited early with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}"
            )
        try:
            return httpx.get(url, timeout=5)
        except httpx.TransportError:
            time.sleep(0.2)
    raise AssertionError(f"{url} never answered")


@contextmanager
def running(args: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(
        [*VERILIVE, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_version() -> None:
    result = CliRunner().invoke(app, ["version"])
    assert result.exit_code == 0 and result.stdout.strip() == verilive.__version__


@pytest.mark.slow
def test_serve_voice_answers_health_and_metrics(models_settings: Settings) -> None:
    port = free_port()
    with running(["serve", "voice", "--port", str(port)], env_for(models_settings.models_dir)) as proc:
        r = wait_healthy(f"http://127.0.0.1:{port}/health", proc)
        assert r.status_code == 200 and r.json()["status"] == "UP"
        m = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
        assert (
            'verilive_http_requests_total{method="GET",route="/health",service="voice",status="200"}'
            in m.text
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        # One JSON log line per request, carrying its request id.
        assert '"request_id"' in (proc.stderr.read() if proc.stderr else "")


@pytest.mark.slow
def test_serve_all_runs_three_services(models_settings: Settings) -> None:
    ports = {"face": free_port(), "voice": free_port(), "capture": free_port()}
    args = ["serve", "all", "--face-port", str(ports["face"]), "--voice-port", str(ports["voice"])]
    args += ["--capture-port", str(ports["capture"])]
    with running(args, env_for(models_settings.models_dir)) as proc:
        for service, port in ports.items():
            r = wait_healthy(f"http://127.0.0.1:{port}/health", proc)
            assert r.status_code == 200 and r.json()["service"] == service
        assert "availablePipelines" in httpx.get(f"http://127.0.0.1:{ports['face']}/api_version").json()
        assert (
            "availablePipelines" not in httpx.get(f"http://127.0.0.1:{ports['capture']}/api_version").json()
        )
        assert httpx.get(f"http://127.0.0.1:{ports['voice']}/core/get_expiration_date").status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_serve_refuses_to_start_without_models(tmp_path: Path) -> None:
    env = env_for(tmp_path / "empty")
    env.pop("VERILIVE_MODEL_MIRROR", None)
    proc = subprocess.run(
        [*VERILIVE, "serve", "voice", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    needed = " ".join(
        (
            "campplus",
            "campplus_tel",
            "pyannote_segmentation",
            "pyannote_segmentation_tel",
            "silero_vad",
            "whisper_base_encoder",
        )
    )
    assert f"verilive models pull {needed}" in proc.stderr.replace("\n", "")


@pytest.mark.slow
def test_serve_port_in_use_exits_nonzero(models_settings: Settings) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = subprocess.run(
            [*VERILIVE, "serve", "face", "--port", str(port)],
            env=env_for(models_settings.models_dir),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode != 0


def test_serve_root_path_reaches_uvicorn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--root-path` (issue 44): the prefix a gateway routes to the service is uvicorn's root_path;
    a prefix not starting with '/' is refused before anything starts."""
    import verilive.cli
    from verilive.server import runner

    seen: list[runner.ServerOptions] = []
    s = Settings(
        models_dir=tmp_path / "models",
        model_mirror=None,
        require_models=False,
        bi_database_url=f"sqlite:///{tmp_path}/bi.sqlite3",
        capture_replay_url=f"sqlite:///{tmp_path}/replay.sqlite3",
    )
    monkeypatch.setattr(verilive.cli, "get_settings", lambda: s)
    monkeypatch.setattr(runner, "run_apps", lambda apps, options, *a: seen.append(options))
    result = CliRunner().invoke(app, ["serve", "voice", "--port", "1", "--root-path", "/voice/"])
    assert result.exit_code == 0, result.output
    assert seen[0].root_path == "/voice"
    assert seen[0].uvicorn_config(object(), "127.0.0.1", 1).root_path == "/voice"  # type: ignore[arg-type]
    assert runner.ServerOptions.from_settings(s.model_copy(update={"root_path": "/v"})).root_path == "/v"
    bad = CliRunner().invoke(app, ["serve", "voice", "--root-path", "voice"])
    assert bad.exit_code == 2 and not seen[1:]
    assert Settings(root_path="/face").root_path == "/face"
    with pytest.raises(ValueError):
        Settings(root_path="face/")
