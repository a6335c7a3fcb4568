"""Run a built verilive image on this machine's loopback, for tests/test_image.py and bench/image.py.

The image is one of scripts/build-image.sh. Where docker is there, ``docker run --network host``;
otherwise buildah (which builds the image here): ``buildah from`` then ``buildah run --isolation
chroot --network host``. ``podman run`` is not used: sandboxes like this build host refuse its
``setrlimit``. Either way the service runs as the image's user, with the image's environment and
entrypoint, on ports picked here, and is stopped with SIGTERM (as an orchestrator would) and its
container removed afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SERVICES = ("face", "voice", "capture")
ENTRYPOINT = "/usr/local/bin/verilive-entrypoint"
KEY_INSIDE = "/run/secrets/capture_key"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def builder() -> str | None:
    """ "docker" or "buildah", whichever can run images here; None when neither can."""
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        return "docker"
    return "buildah" if shutil.which("buildah") else None


def buildah_problem() -> str | None:
    """Why buildah cannot run containers here (None when it can): ``buildah from scratch``."""
    if shutil.which("buildah") is None:
        return "buildah is not installed (scripts/install-test-deps.sh installs it)"
    r = subprocess.run(["buildah", "from", "scratch"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"buildah cannot make a container here: {r.stderr.strip()[-300:]}"
    subprocess.run(["buildah", "rm", r.stdout.strip()], capture_output=True)
    return None


def image_size(image: str) -> int:
    """Bytes, as the image store reports them."""
    tool = "docker" if builder() == "docker" else "podman"
    out = subprocess.run(
        [tool, "image", "inspect", "--format", "{{.Size}}", image], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


def remove_image(image: str) -> None:
    """The image and the build's intermediate layers no other image uses; the base stays."""
    if builder() == "docker":
        subprocess.run(["docker", "image", "rm", "-f", image], capture_output=True)
        subprocess.run(["docker", "image", "prune", "-f"], capture_output=True)
    else:
        subprocess.run(["buildah", "rmi", "-f", image], capture_output=True)
        subprocess.run(["buildah", "rmi", "--prune"], capture_output=True)


def get_json(url: str, timeout: float = 10.0) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def metric(url: str, name: str) -> float | None:
    """One unlabelled sample of the service's Prometheus /metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


@dataclass
class Running:
    """A started image: its service URLs and how long it took to answer healthy."""

    image: str
    service: str
    urls: dict[str, str]
    seconds_to_healthy: float = 0.0
    log: Path | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _container: str | None = field(default=None, repr=False)

    def rss_bytes(self) -> float:
        """Resident memory of the service process (one process serves ``all``'s three ports)."""
        value = metric(next(iter(self.urls.values())), "process_resident_memory_bytes")
        if value is None:
            raise RuntimeError("the service's /metrics has no process_resident_memory_bytes")
        return value


@contextlib.contextmanager
def run_image(
    image: str,
    service: str,
    log: Path,
    *,
    env: dict[str, str] | None = None,
    capture_key: Path | None = None,
    healthy_within_s: float = 120.0,
) -> Iterator[Running]:
    """Start ``service`` (face, voice, capture or all) from ``image``, wait until every port's
    /health says UP, yield, then stop it with SIGTERM and remove the container."""
    names = SERVICES if service == "all" else (service,)
    ports = {n: free_port() for n in names}
    environ = {
        "VERILIVE_SERVICE": service,
        "VERILIVE_HOST": "127.0.0.1",
        **{f"VERILIVE_{n.upper()}_PORT": str(p) for n, p in ports.items()},
        **(env or {}),
    }
    volumes = []
    if capture_key is not None:
        environ["VERILIVE_CAPTURE_PRIVATE_KEYS"] = json.dumps([KEY_INSIDE])
        volumes = ["-v", f"{capture_key}:{KEY_INSIDE}:ro"]
    env_args = [a for k, v in environ.items() for a in ("-e", f"{k}={v}")]
    tool = builder()
    container = None
    if tool == "docker":
        container = f"verilive-test-{os.getpid()}-{ports[names[0]]}"
        cmd = ["docker", "run", "--rm", "--name", container, "--network", "host", *volumes, *env_args, image]
    elif tool == "buildah":
        made = subprocess.run(
            ["buildah", "from", "--quiet", image], capture_output=True, text=True, check=True
        )
        container = made.stdout.strip()
        cmd = [
            "buildah", "run", "--isolation", "chroot", "--network", "host",
            *volumes, *env_args, container, "--", ENTRYPOINT,
        ]  # fmt: skip
    else:
        raise RuntimeError("neither docker nor buildah can run images here")
    urls = {n: f"http://127.0.0.1:{p}" for n, p in ports.items()}
    running = Running(image, service, urls, log=log, _container=container)
    t0 = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    running._proc = proc
    try:
        pending = set(names)
        while pending:
            if proc.poll() is not None:
                raise RuntimeError(f"the container exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            if time.monotonic() - t0 > healthy_within_s:
                raise TimeoutError(f"{sorted(pending)} not healthy after {healthy_within_s} s")
            for n in list(pending):
                with contextlib.suppress(OSError, ValueError):
                    status, body = get_json(f"{urls[n]}/health", timeout=2)
                    if status == 200 and isinstance(body, dict) and body.get("status") == "UP":
                        pending.discard(n)
            time.sleep(0.1)
        running.seconds_to_healthy = time.monotonic() - t0
        yield running
    finally:
        _stop(proc, tool, container)


def _children() -> dict[int, list[int]]:
    """Parent pid -> its child pids, from /proc."""
    out: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                out.setdefault(ppid, []).append(int(d.name))
    return out


def _service_pids(root: int) -> list[int]:
    """The verilive processes under ``root`` (buildah run's child; same pid namespace with chroot)."""
    tree, found, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        for child in tree.get(pid, []):
            todo.append(child)
            with contextlib.suppress(OSError):
                argv = (Path("/proc") / str(child) / "cmdline").read_bytes().split(b"\0")
                if any(a.endswith(b"/verilive") for a in argv) and b"serve" in argv:
                    found.append(child)
    return found


def _stop(proc: subprocess.Popen[bytes], tool: str | None, container: str | None) -> None:
    if proc.poll() is None:
        # buildah run answers SIGTERM by killing its command outright; the service itself gets the
        # SIGTERM an orchestrator sends, so it finishes in-flight requests and shuts down in order.
        targets = _service_pids(proc.pid) if tool == "buildah" else []
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        if not targets:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    if tool == "buildah" and container:
        subprocess.run(["buildah", "rm", container], capture_output=True)
    elif tool == "docker" and container:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True)


# ---------------------------------------------------------------- one real request per service

FACE_PHOTO = "data/face/pad_silentface/image_T1.jpg"  # a live selfie, 480x640 (../shared/data)
SPEECH = "data/voice/librispeech_251spk_gender/103-1240-0000.flac"


def ask(service: str, url: str, shared_dir: Path, capture_key_pem: bytes | None = None) -> dict[str, object]:
    """Send ``service`` at ``url`` one real request and return what a client would read from it:
    face: the /check_liveness body; voice: a template of a speech clip and its self-match;
    capture: the decision on a genuine capture with a bound head-turn burst made with the Python
    client (needs the service's key; the 3D check is required by default)."""
    import io

    import httpx
    import soundfile as sf

    if service == "face":
        photo = (shared_dir / FACE_PHOTO).read_bytes()
        r = httpx.post(
            f"{url}/check_liveness", files={"image": ("face.jpg", photo, "image/jpeg")}, timeout=60
        )
        r.raise_for_status()
        return dict(r.json())
    if service == "voice":
        x, sr = sf.read(shared_dir / SPEECH, dtype="int16")
        wav = io.BytesIO()
        sf.write(wav, x, sr, format="WAV", subtype="PCM_16")
        r = httpx.post(
            f"{url}/voice_template_factory/create_voice_template_from_file",
            files={"wav_file": ("speech.wav", wav.getvalue(), "audio/wav")},
            timeout=120,
        )
        r.raise_for_status()
        template = r.json()
        m = httpx.post(
            f"{url}/voice_template_matcher/match_voice_templates",
            json={"template1": template, "template2": template},
            timeout=60,
        )
        m.raise_for_status()
        return {"template_chars": len(template), "self_match": m.json()["probability"]}
    if service == "capture":
        from common.capture_samples import genuine_bundle
        from verilive.capture.bundle import public_key_b64

        if capture_key_pem is None:
            raise ValueError("the capture request needs the service's key")
        blob = genuine_bundle(public_key_b64(capture_key_pem), shared_dir)
        r = httpx.post(
            f"{url}/check_capture_liveness",
            content=blob,
            headers={"Content-Type": "application/octet-stream"},
            timeout=60,
        )
        r.raise_for_status()
        return dict(r.json()["capture_liveness"])
    raise ValueError(f"unknown service {service!r}")
