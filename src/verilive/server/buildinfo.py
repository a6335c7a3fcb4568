"""Version, components, git commit and licence facts reported by the services."""

from __future__ import annotations

import platform
import subprocess
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import verilive

PROJECT_LICENSE = "Apache-2.0"
_COMPONENTS = ("onnxruntime", "numpy", "soundfile", "soxr", "fastapi", "uvicorn", "pydantic", "cryptography")


def _pkg_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


@lru_cache(maxsize=1)
def git_commit_from_checkout() -> str | None:
    """Commit of the source tree the package runs from, when it is a git checkout."""
    here = Path(verilive.__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "describe", "--always", "--dirty", "--abbrev=40", "--match=NeVeR"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit or None


def git_commit(configured: str | None) -> str:
    return configured or git_commit_from_checkout() or "unknown"


def components_string() -> str:
    parts = [f"verilive {verilive.__version__}", f"python {platform.python_version()}"]
    parts += [f"{name} {_pkg_version(name)}" for name in _COMPONENTS]
    return "; ".join(parts)
