"""The capture service's keys as it uses them: the configured ones, else a local evaluation key.

With no ``capture_private_keys`` the service cannot decrypt anything, so ``make serve`` and the demo
page were a dead end (issue 31). On a loopback address the service now makes (once) and uses an
*evaluation* key pair kept in the data directory, and says so loudly in the log. It never does
that on another address unless ``capture_eval_key=on`` says to: a key made on the fly on a server
would be lost with the container and is not one the operator chose (docs/capture.md).

An evaluation key file found in place is used only when it is a regular file (not a symlink), owned
by the service's user and not readable or writable by group or others (issue 44, finding 6);
otherwise the service has no key and says which file and how to fix it. Configured keys
(``capture_private_keys``) are the operator's choice and are not checked so: Kubernetes mounts a
Secret as symlinks with mode 0440 and the service's group (docs/security.md).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verilive.capture.bundle import generate_key, key_id_of_pem
from verilive.datadir import make_private_dir

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
    except UnsafeKeyFile as exc:
        return CaptureKeys((), problem=f"{exc}; or {NO_KEY_FIX}")
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


class UnsafeKeyFile(ValueError):
    """A key file found in place that others could have written or can read."""


def check_key_file(path: Path) -> None:
    """Refuse a key file that is a symlink, not a regular file, not owned by this process's user, or
    open to group or others; the message names the file and the fix."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeKeyFile(
            f"the local evaluation key {path} is a symlink and is not used: replace it with the key "
            f"file itself (owned by this user, chmod 600 {path}), or remove it to have one made"
        )
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeKeyFile(
            f"the local evaluation key {path} is not a regular file: remove it to have one made"
        )
    if st.st_uid != os.getuid():
        raise UnsafeKeyFile(
            f"the local evaluation key {path} is owned by uid {st.st_uid}, not by this service's user "
            f"(uid {os.getuid()}): chown {os.getuid()} {path} && chmod 600 {path}, or remove it"
        )
    if st.st_mode & 0o077:
        raise UnsafeKeyFile(
            f"the local evaluation key {path} has mode {stat.S_IMODE(st.st_mode):04o}, open to group or "
            f"others: chmod 600 {path}"
        )


def ensure_key_file(path: Path) -> bool:
    """Make a P-256 private key at ``path`` (mode 0600, its directory 0700 when made here) unless one
    is there; True when made. One found there must pass :func:`check_key_file`."""
    if os.path.lexists(path):
        check_key_file(path)
        return False
    make_private_dir(path.parent)
    _, pem, _ = generate_key()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    try:
        os.link(tmp, path)  # atomic, and never replaces a key another replica made meanwhile
    except FileExistsError:
        check_key_file(path)
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True
