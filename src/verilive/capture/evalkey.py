"""The capture service's keys as it uses them: the configured ones, else a local evaluation key.

With no ``capture_private_keys`` the service cannot decrypt anything, so ``make serve`` and the demo
page were a dead end (issue 31). On a loopback address the service now makes (once) and uses an
*evaluation* key pair kept in the data directory, and says so loudly in the log. It never does
that on another address unless ``capture_eval_key=on`` says to: a key made on the fly on a server
would be lost with the container and is not one the operator chose (docs/capture.md).
"""

from __future__ import annotations

import ipaddress
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verilive.capture.bundle import generate_key, key_id_of_pem

log = logging.getLogger("verilive.capture")

NO_KEY_FIX = (
    "make a key with `verilive keys generate` and list it in VERILIVE_CAPTURE_PRIVATE_KEYS "
    "(docs/bundle-format.md)"
)


@dataclass(frozen=True)
class CaptureKeys:
    """``entries``: what KeyRing.from_entries takes; ``evaluation``: they are the local evaluation
    key; ``problem``: why there are none (None when there are)."""

    entries: tuple[str, ...]
    evaluation: bool = False
    problem: str | None = None


def is_loopback(host: str) -> bool:
    if host.strip().lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def capture_keys(settings: Any) -> CaptureKeys:
    if settings.capture_private_keys:
        return CaptureKeys(tuple(settings.capture_private_keys))
    mode = settings.capture_eval_key
    if mode == "off":
        return CaptureKeys((), problem=f"no capture key is configured: {NO_KEY_FIX}")
    if mode == "auto" and not is_loopback(settings.host):
        return CaptureKeys(
            (),
            problem=(
                f"no capture key is configured, and the local evaluation key is only made on a loopback "
                f"address (this service listens on {settings.host}): {NO_KEY_FIX}"
            ),
        )
    path = Path(settings.capture_eval_key_path).expanduser()
    try:
        created = ensure_key_file(path)
    except OSError as exc:
        problem = f"the local evaluation key {path} cannot be made ({exc}): {NO_KEY_FIX}"
        return CaptureKeys((), problem=problem)
    log.warning(
        "capture: %s the LOCAL EVALUATION key %s (key id %s), for trying the demo on this machine only. "
        "For real use, %s",
        "made and using" if created else "using",
        path,
        key_id_of_pem(path.read_bytes()),
        NO_KEY_FIX,
    )
    return CaptureKeys((str(path),), evaluation=True)


def ensure_key_file(path: Path) -> bool:
    """Make a P-256 private key at ``path`` (mode 0600) unless one is there; True when made."""
    if path.is_file():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    _, pem, _ = generate_key()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    try:
        os.link(tmp, path)  # atomic, and never replaces a key another replica made meanwhile
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True
