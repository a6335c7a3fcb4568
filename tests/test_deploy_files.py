"""Offline checks of deploy/: Dockerfile, entrypoint, health check, compose, nginx, Kubernetes.

Docker and a cluster are not available here; these tests check what can be checked without them
(docs/deployment.md lists what was linted and what was not run).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.servers import find_binary, missing_message
from verilive.config import Settings
from verilive.server.app import SERVICES

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
PORTS = {"face": 8080, "voice": 8081, "capture": 8082}
# Environment variables the deploy files may set that are not settings.
NOT_SETTINGS = {"VERILIVE_SERVICE"}


def _setting_names() -> set[str]:
    return {f"VERILIVE_{name.upper()}" for name in Settings.model_fields}


def _assert_real_settings(names: Any, where: str) -> None:
    unknown = {n for n in names if n.startswith("VERILIVE_")} - _setting_names() - NOT_SETTINGS
    assert not unknown, f"{where} sets unknown settings: {sorted(unknown)}"


def test_ports_match_the_settings_defaults() -> None:
    s = Settings()
    assert {n: s.port_of(n) for n in SERVICES} == PORTS


# ---------------------------------------------------------------- Dockerfile


def _stages(text: str) -> dict[str, str]:
    """Dockerfile instructions by stage name (comments dropped, continuation lines joined)."""
    text = "\n".join(x for x in text.splitlines() if not x.lstrip().startswith("#"))
    text = re.sub(r"\\\n", " ", text)
    out: dict[str, str] = {}
    name = ""
    for line in text.splitlines():
        m = re.match(r"FROM\s+\S+(?:\s+AS\s+(\S+))?", line.strip(), re.IGNORECASE)
        if m:
            name = m.group(1) or f"stage{len(out)}"
            out[name] = ""
        elif name:
            out[name] += line + "\n"
    return out


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text()


def test_dockerfile_is_multi_stage_and_runtime_has_no_torch(dockerfile: str) -> None:
    stages = _stages(dockerfile)
    assert {"wheel", "venv", "models", "runtime"} <= set(stages)
    assert list(stages)[-1] == "runtime"
    # Conversion (torch) happens in the models stage only (its lock, requirements/convert.txt); the
    # runtime venv installs the runtime lock, which has no torch (tests/test_lock.py).
    assert "requirements/convert.txt" in stages["models"]
    assert "requirements/runtime.txt" in stages["venv"]
    assert "convert" not in stages["venv"] and "torch" not in stages["venv"]
    runtime = stages["runtime"]
    assert "--from=venv /opt/verilive" in runtime
    assert "--from=models" in runtime and "/opt/convert" not in runtime
    assert "VERILIVE_MODELS_DIR=/opt/models" in runtime


def test_dockerfile_pulls_models_from_the_mirror(dockerfile: str) -> None:
    models = _stages(dockerfile)["models"]
    assert "ARG VERILIVE_MODEL_MIRROR" in models
    assert "VERILIVE_MODEL_MIRROR=${VERILIVE_MODEL_MIRROR}" in models
    assert "from=mirror" in models
    assert "verilive models pull" in models and "verilive models verify" in models
    assert re.search(r"^FROM scratch AS mirror$", dockerfile, re.MULTILINE)


def test_dockerfile_runtime_user_healthcheck_ports(dockerfile: str) -> None:
    runtime = _stages(dockerfile)["runtime"]
    users = re.findall(r"^USER\s+(\S+)", runtime, re.MULTILINE)
    assert users, "runtime stage sets no USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    assert re.search(rf"--uid {user}\b", runtime), "the USER is not the one created"
    assert re.search(r"^HEALTHCHECK .*CMD .*verilive-healthcheck\.py", runtime, re.MULTILINE)
    exposed = {int(p) for line in re.findall(r"^EXPOSE (.+)$", runtime, re.MULTILINE) for p in line.split()}
    assert exposed == set(PORTS.values())
    assert "ARG SERVICE" in runtime and "VERILIVE_SERVICE=${SERVICE}" in runtime
    assert re.search(r"^ENTRYPOINT \[\"/usr/local/bin/verilive-entrypoint\"\]", runtime, re.MULTILINE)
    assert "VERILIVE_HOST=0.0.0.0" in runtime


def test_dockerignore_keeps_only_what_the_build_copies(dockerfile: str) -> None:
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert next(x for x in ignore if not x.startswith("#")) == "*"
    copied = re.findall(r"^COPY (?!--from)(?:--\S+ )*(.+) \S+$", dockerfile, re.MULTILINE)
    sources = {p for line in copied for p in line.split()}
    for src in sources:
        assert f"!{src}" in ignore or f"!{src.rstrip('/')}/" in ignore, f"{src} is excluded from the context"


# ---------------------------------------------------------------- entrypoint and health check


def test_entrypoint_execs_the_chosen_service(tmp_path: Path) -> None:
    fake = tmp_path / "verilive"
    fake.write_text('#!/bin/sh\necho "args: $*"\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    script = str(DEPLOY / "entrypoint.sh")
    ok = subprocess.run(
        ["sh", script, "--workers", "2"], env={**env, "VERILIVE_SERVICE": "voice"}, capture_output=True
    )
    assert ok.returncode == 0
    assert ok.stdout.decode().strip() == "args: serve voice --workers 2"
    bad = subprocess.run(["sh", script], env={**env, "VERILIVE_SERVICE": "nope"}, capture_output=True)
    assert bad.returncode == 64
    assert b"must be face, voice, capture or all" in bad.stderr


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:  # keep the test output clean
        pass


@pytest.fixture
def health_server() -> Iterator[http.server.HTTPServer]:
    srv = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _healthcheck(env: dict[str, str]) -> int:
    script = str(DEPLOY / "healthcheck.py")
    return subprocess.run([sys.executable, script], env={**os.environ, **env}, capture_output=True).returncode


def test_healthcheck_follows_health_status(health_server: http.server.HTTPServer) -> None:
    port = str(health_server.server_address[1])
    env = {"VERILIVE_SERVICE": "voice", "VERILIVE_VOICE_PORT": port}
    _Health.status = 200
    assert _healthcheck(env) == 0
    _Health.status = 503
    assert _healthcheck(env) == 1
    _Health.status = 200
    # "all" checks three ports; two of them answer nothing here.
    assert _healthcheck({"VERILIVE_SERVICE": "all", "VERILIVE_VOICE_PORT": port}) == 1
    assert _healthcheck({"VERILIVE_SERVICE": "bogus"}) == 1


# ---------------------------------------------------------------- docker compose


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_compose_two_replicas_each_behind_nginx(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"face", "voice", "capture", "nginx", "postgres", "redis"} <= set(services)
    for name in SERVICES:
        svc = services[name]
        assert svc["deploy"]["replicas"] == 2, name
        assert svc["build"]["args"]["SERVICE"] == name
        assert svc["build"]["dockerfile"] == "deploy/Dockerfile"
        assert svc["healthcheck"]["test"][-1].endswith("verilive-healthcheck.py")
        assert "memory" in svc["deploy"]["resources"]["limits"]
        assert svc["expose"] == [str(PORTS[name])]
        assert "ports" not in svc, "replicas are reached through nginx only"
        _assert_real_settings(svc["environment"], f"compose service {name}")
        grace = int(svc["stop_grace_period"].rstrip("s"))
        assert grace > float(svc["environment"]["VERILIVE_GRACEFUL_TIMEOUT_S"])
        assert svc["depends_on"] if name != "voice" else True
    assert sorted(services["nginx"]["ports"]) == [f"{p}:{p}" for p in sorted(PORTS.values())]


def test_compose_wires_postgres_redis_and_the_key_secret(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("face", "capture"):
        url = services[name]["environment"]["VERILIVE_BI_DATABASE_URL"]
        assert re.match(
            r"postgresql://verilive:\$\{VERILIVE_DB_PASSWORD:\?[^}]*\}@postgres:5432/verilive$", url
        )
    capture = services["capture"]
    assert capture["environment"]["VERILIVE_CAPTURE_REPLAY_URL"] == "redis://redis:6379/0"
    assert capture["secrets"] == ["capture_key"]
    keys = json.loads(capture["environment"]["VERILIVE_CAPTURE_PRIVATE_KEYS"])
    assert keys == ["/run/secrets/capture_key"]
    assert "capture_key" in compose["secrets"]
    assert (DEPLOY / compose["x-build"]["additional_contexts"]["mirror"].split(":-")[1].rstrip("}")).is_dir()


# ---------------------------------------------------------------- nginx


@pytest.fixture(scope="module")
def nginx_conf() -> str:
    return (DEPLOY / "nginx" / "nginx.conf").read_text()


def test_nginx_routes_each_port_to_its_service(nginx_conf: str) -> None:
    upstreams = dict(re.findall(r"upstream (\w+) \{\s*server (\S+) ", nginx_conf))
    assert upstreams == {f"verilive_{n}": f"{n}:{p}" for n, p in PORTS.items()}
    servers = re.findall(r"listen (\d+);.*?proxy_pass http://(\w+);", nginx_conf, re.DOTALL)
    assert {int(port): up for port, up in servers} == {p: f"verilive_{n}" for n, p in PORTS.items()}
    limit = re.search(r"client_max_body_size (\d+)m;", nginx_conf)
    assert limit and int(limit.group(1)) * 2**20 > Settings().max_body_bytes
    assert "proxy_request_buffering off;" in nginx_conf  # uploads never spool to the proxy's disk


def _nginx() -> str:
    nginx = find_binary("nginx", ("/usr/sbin",))
    if nginx is None:
        message = missing_message("nginx", "nginx")
        # Without root: skipped, as when this test installed nginx itself.
        if os.geteuid() != 0:
            pytest.skip(message)
        pytest.fail(message)
    return nginx


@pytest.mark.slow  # runs Debian's nginx
def test_nginx_conf_passes_nginx_t(nginx_conf: str, tmp_path: Path) -> None:
    nginx = _nginx()
    # Compose service names do not resolve outside compose; the syntax check needs addresses.
    conf = re.sub(r"server (face|voice|capture):", "server 127.0.0.1:", nginx_conf)
    (tmp_path / "nginx.conf").write_text(conf)
    res = subprocess.run(
        [nginx, "-t", "-e", "stderr", "-p", f"{tmp_path}/", "-c", str(tmp_path / "nginx.conf")],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert "test is successful" in res.stderr
    # And the check is real: a broken file fails it.
    (tmp_path / "nginx.conf").write_text(conf.replace("proxy_pass", "proxy_passs", 1))
    bad = subprocess.run(
        [nginx, "-t", "-e", "stderr", "-p", f"{tmp_path}/", "-c", str(tmp_path / "nginx.conf")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0


def _compose_config(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "podman-compose"  # the dev extra's, which has `config`
    cmd = [str(exe), "-f", str(DEPLOY / "compose.yaml"), "config"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def test_compose_file_matches_the_compose_specification(tmp_path: Path) -> None:
    """Against the compose-spec schema that check-jsonschema vendors (no network)."""
    exe = str(Path(sys.executable).parent / "check-jsonschema")
    cmd = [exe, "--builtin-schema", "vendor.compose-spec"]
    res = subprocess.run([*cmd, str(DEPLOY / "compose.yaml")], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    # And the check is real: a misspelt key is refused.
    bad = tmp_path / "compose.yaml"
    bad.write_text((DEPLOY / "compose.yaml").read_text().replace("depends_on:", "depend_on:", 1))
    res = subprocess.run([*cmd, str(bad)], capture_output=True, text=True)
    assert res.returncode != 0


def test_compose_file_passes_podman_compose_config() -> None:
    """`podman-compose config` parses, merges and interpolates the file as `up` would."""
    env = {k: v for k, v in os.environ.items() if k != "VERILIVE_DB_PASSWORD"}
    res = _compose_config({**env, "VERILIVE_DB_PASSWORD": "secret-for-the-test"})
    assert res.returncode == 0, res.stderr
    resolved = yaml.safe_load(res.stdout)
    assert {"face", "voice", "capture", "nginx", "postgres", "redis"} <= set(resolved["services"])
    assert "secret-for-the-test" in json.dumps(resolved["services"]["face"]["environment"])
    # The database password is required, not silently empty.
    missing = _compose_config(env)
    assert missing.returncode != 0 and "VERILIVE_DB_PASSWORD" in missing.stderr


# ---------------------------------------------------------------- Kubernetes


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def settings_map() -> dict[str, str]:
    return dict(_kind(_docs(DEPLOY / "k8s" / "configmap.yaml"), "ConfigMap")["data"])


@pytest.mark.parametrize("name", SERVICES)
def test_k8s_service_manifests(name: str, settings_map: dict[str, str]) -> None:
    docs = _docs(DEPLOY / "k8s" / f"{name}.yaml")
    dep = _kind(docs, "Deployment")
    svc = _kind(docs, "Service")
    hpa = _kind(docs, "HorizontalPodAutoscaler")
    labels = dep["spec"]["selector"]["matchLabels"]
    pod = dep["spec"]["template"]
    assert labels.items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    port = next(p for p in container["ports"] if p["name"] == "http")["containerPort"]
    assert port == PORTS[name]

    ready = container["readinessProbe"]["httpGet"]
    assert ready["path"] == "/health" and ready["port"] in ("http", port)
    assert container["livenessProbe"]["httpGet"]["port"] in ("http", port)

    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert ann["prometheus.io/port"] == str(port)
    assert ann["prometheus.io/path"] == "/metrics"

    pod_sec, sec = pod["spec"]["securityContext"], container["securityContext"]
    assert pod_sec["runAsNonRoot"] is True and pod_sec["runAsUser"] != 0
    assert sec["readOnlyRootFilesystem"] is True and sec["allowPrivilegeEscalation"] is False
    assert container["resources"]["requests"]["cpu"], "the HPA's CPU target needs a request"

    env = {e["name"]: e for e in container.get("env", [])}
    assert env["VERILIVE_SERVICE"]["value"] == name
    _assert_real_settings(env, f"k8s {name}")
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert grace > pre_stop + float(settings_map["VERILIVE_GRACEFUL_TIMEOUT_S"])

    assert svc["spec"]["selector"] == labels
    assert svc["spec"]["ports"][0]["targetPort"] in ("http", port)

    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": dep["metadata"]["name"],
    }
    assert hpa["spec"]["minReplicas"] >= 2
    assert any(m["resource"]["name"] == "cpu" for m in hpa["spec"]["metrics"] if m["type"] == "Resource")


def test_k8s_capture_keys_come_from_the_secret() -> None:
    dep = _kind(_docs(DEPLOY / "k8s" / "capture.yaml"), "Deployment")
    spec = dep["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    secret_volumes = [n for n, v in volumes.items() if "secret" in v]
    assert secret_volumes == ["capture-keys"]
    secret_name = volumes["capture-keys"]["secret"]["secretName"]
    mount = mounts["capture-keys"]
    assert mount["readOnly"] is True
    env = {e["name"]: e for e in container["env"]}
    keys = json.loads(env["VERILIVE_CAPTURE_PRIVATE_KEYS"]["value"])
    assert keys and all(k.startswith(mount["mountPath"] + "/") for k in keys)
    secrets = {d["metadata"]["name"]: d for d in _docs(DEPLOY / "k8s" / "secret.yaml")}
    assert secrets[secret_name]["kind"] == "Secret"
    files = set(secrets[secret_name]["stringData"])
    assert {Path(k).name for k in keys} <= files
    # The database URL holds a password: it comes from a Secret too, never the ConfigMap.
    ref = env["VERILIVE_BI_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref["key"] in secrets[ref["name"]]["stringData"]


K8S_VERSIONS = ("1.30.0", "1.37.0")  # the oldest maintained line we state support for, and the newest


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_k8s_manifests_match_the_kubernetes_schemas(version: str) -> None:
    """Every resource, strictly (no unknown fields), against the schemas kubernetes-validate bundles
    (no network). kustomization.yaml is kustomize's, not an API resource: checked below."""
    import kubernetes_validate as kv

    checked = 0
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in _docs(path):
            kv.validate(doc, version, strict=True)
            checked += 1
    assert checked >= 14  # 4 per service, the ConfigMap, two Secrets
    # And the check is real: a misspelt field and a wrong type are refused.
    dep = _kind(_docs(DEPLOY / "k8s" / "face.yaml"), "Deployment")
    bad = json.loads(json.dumps(dep))
    bad["spec"]["replica"] = 2
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, version, strict=True)
    bad = json.loads(json.dumps(dep))
    bad["spec"]["replicas"] = "two"
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, version, strict=True)


def test_k8s_configmap_and_kustomization(settings_map: dict[str, str]) -> None:
    _assert_real_settings(settings_map, "the ConfigMap")
    Settings(**{k.removeprefix("VERILIVE_").lower(): v for k, v in settings_map.items()})  # values parse
    assert "VERILIVE_BI_DATABASE_URL" not in settings_map
    kust = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    for res in kust["resources"]:
        assert (DEPLOY / "k8s" / res).is_file(), res
    assert {f"{n}.yaml" for n in SERVICES} | {"configmap.yaml"} <= set(kust["resources"])
