"""A verilive cluster on loopback: server processes per service, nginx in front (deploy/nginx).

Each replica is a real `verilive serve <service> --port P` process with its own environment and
log file; nginx runs the deployment's own config (deploy/nginx/nginx.conf), rewritten only where
it names compose hosts, ports and log/temp paths, so the proxy rules under test are the shipped
ones.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import free_port, nginx_binary, stop_process, wait_for_port

REPO = Path(__file__).resolve().parents[2]
NGINX_CONF = REPO / "deploy" / "nginx" / "nginx.conf"
_POLL_S = 0.05
_HEALTH_TIMEOUT_S = 60.0


def verilive_command() -> list[str]:
    # The console script of the interpreter running the tests (the venv's), else the module.
    script = Path(sys.executable).parent / "verilive"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "verilive.cli"]


def clean_environ(**settings: str) -> dict[str, str]:
    """This process's environment without any VERILIVE_* setting, plus ``settings``.

    The developer's own settings (a config file, other ports or databases) must not leak into the
    replicas; only the model mirror is kept, so models resolve as in the rest of the suite.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERILIVE_")}
    mirror = os.environ.get("VERILIVE_MODEL_MIRROR")
    if mirror:
        env["VERILIVE_MODEL_MIRROR"] = mirror
    env.update(settings)
    return env


@dataclass
class Replica:
    """One `verilive serve` process on 127.0.0.1:port."""

    service: str
    name: str
    port: int
    env: dict[str, str]
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self) -> None:
        self.starts += 1
        with self.log.open("ab") as out:
            # cwd is a scratch folder so no `.env` of the checkout is read.
            self.proc = subprocess.Popen(
                [*verilive_command(), "serve", self.service, "--port", str(self.port)],
                cwd=self.workdir,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait_healthy(self) -> None:
        assert self.proc is not None
        with httpx.Client(timeout=5.0) as client:
            for _ in range(int(_HEALTH_TIMEOUT_S / _POLL_S)):
                if self.proc.poll() is not None:
                    pytest.fail(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                threading.Event().wait(_POLL_S)
        pytest.fail(f"{self.name} was not healthy within {_HEALTH_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, no chance to flush anything."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def counter(self, name: str, **labels: str) -> float:
        """Sum of the samples of counter ``name`` (without `_total`) whose labels include ``labels``."""
        text = httpx.get(f"{self.url}/metrics", timeout=10.0).text
        total = 0.0
        for family in text_string_to_metric_families(text):
            if family.name != name:
                continue
            for sample in family.samples:
                if sample.name == f"{name}_total" and labels.items() <= sample.labels.items():
                    total += sample.value
        return total


@dataclass
class Nginx:
    """nginx with the deployment config, pointed at loopback replicas."""

    workdir: Path
    ports: dict[str, int]  # service -> the port nginx listens on
    proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def configure(cls, workdir: Path, upstreams: dict[str, list[int]]) -> Nginx:
        """Write and check (`nginx -t`) the config: ``upstreams`` maps service -> replica ports."""
        workdir.mkdir(parents=True, exist_ok=True)
        # As root nginx's workers run as `nobody`: they must reach the temp folders.
        workdir.chmod(0o755)
        nginx = cls(workdir=workdir, ports={s: free_port() for s in upstreams})
        nginx.conf.write_text(nginx_config(NGINX_CONF.read_text(), upstreams, nginx.ports, workdir))
        check = subprocess.run([*nginx.command, "-t"], capture_output=True, text=True)
        if check.returncode != 0:
            pytest.fail(f"nginx rejects the generated config:\n{check.stderr}\n{nginx.conf.read_text()}")
        return nginx

    @property
    def conf(self) -> Path:
        return self.workdir / "nginx.conf"

    @property
    def command(self) -> list[str]:
        w = self.workdir
        return [nginx_binary(), "-p", str(w), "-e", str(w / "error.log"), "-c", str(self.conf)]

    def start(self) -> None:
        with (self.workdir / "nginx.out").open("ab") as out:
            self.proc = subprocess.Popen(
                [*self.command, "-g", "daemon off;"], stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir
            )
        for port in self.ports.values():
            wait_for_port(port, self.proc, "nginx", self.workdir / "error.log")

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}"

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)


def nginx_config(source: str, upstreams: dict[str, list[int]], listen: dict[str, int], workdir: Path) -> str:
    """``source`` (deploy/nginx/nginx.conf) with loopback upstreams, listen ports and paths.

    Every rewrite must match, so a change of the deployment file that this test no longer
    understands fails loudly instead of testing something else.
    """

    def sub(pattern: str, repl: str, text: str, count: int = 0) -> str:
        out, n = re.subn(pattern, repl, text, count=count, flags=re.MULTILINE)
        if n == 0:
            raise AssertionError(f"deploy/nginx/nginx.conf no longer has {pattern!r}")
        return out

    # One `server <compose host>:<port> <params>;` per upstream becomes one line per replica.
    original_ports: dict[str, int] = {}

    def replicas(m: re.Match[str]) -> str:
        indent, service, port, params = m.group(1), m.group(2), int(m.group(3)), m.group(4)
        original_ports[service] = port
        lines = [f"{indent}server 127.0.0.1:{p}{params};" for p in upstreams[service]]
        return "\n".join(lines)

    conf = sub(r"^(\s*)server (face|voice|capture):(\d+)([^;]*);", replicas, source)
    if set(original_ports) != set(upstreams):
        raise AssertionError(f"nginx.conf upstreams {sorted(original_ports)} != {sorted(upstreams)}")
    for service, port in original_ports.items():
        conf = sub(rf"^(\s*)listen {port};", rf"\g<1>listen 127.0.0.1:{listen[service]};", conf)
    conf = sub(r"^worker_processes [^;]+;", f"worker_processes 1;\npid {workdir / 'nginx.pid'};", conf)
    conf = sub(r"^error_log /dev/stderr", f"error_log {workdir / 'error.log'}", conf)
    conf = sub(r"access_log /dev/stdout", f"access_log {workdir / 'access.log'}", conf)
    # The package's default temp folders may not be writable by us; keep them in the workdir.
    temp = "\n".join(
        f"    {kind}_temp_path {workdir / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return sub(r"^http \{", "http {\n" + temp, conf, count=1)


@dataclass
class Cluster:
    replicas: dict[str, list[Replica]]
    nginx: Nginx
    bi_url: str
    redis_url: str

    def url(self, service: str) -> str:
        return self.nginx.url(service)


def replica_env(models_dir: Path, bi_url: str, redis_url: str, key: Path) -> dict[str, str]:
    return clean_environ(
        VERILIVE_MODELS_DIR=str(models_dir),
        VERILIVE_BI_DATABASE_URL=bi_url,
        VERILIVE_CAPTURE_REPLAY_URL=redis_url,
        VERILIVE_CAPTURE_PRIVATE_KEYS=json.dumps([str(key)]),
        # Six processes share two cores: one inference thread each keeps them from thrashing.
        VERILIVE_ONNX_INTRA_OP_THREADS="1",
        VERILIVE_GRACEFUL_TIMEOUT_S="5",
        VERILIVE_LOG_LEVEL="WARNING",
    )
