"""The dependency locks (requirements/*.txt, written by `make lock`) and what pyproject.toml asks.

Each lock is pip-compile's output for pyproject.toml with some extras: exact ``name==version`` pins
and, under each pin, the packages that need it (``# via ...``); ``verilive (pyproject.toml)`` marks
what pyproject.toml names itself.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from common.repo import REPO

LOCKS = REPO / "requirements"
#: lock file -> the extras of pyproject.toml it is compiled with (besides the base dependencies)
EXTRAS: dict[str, tuple[str, ...]] = {
    "runtime.txt": ("postgres", "redis"),  # the service image's venv
    "convert.txt": ("convert",),  # the image's model stage
    "dev.txt": ("dev", "convert", "postgres", "redis"),  # make, CI
}
SELF = "verilive (pyproject.toml)"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)\s*$")


def read_lock(path: Path) -> dict[str, str]:
    """Canonical name -> locked version; any line that is not a comment or an exact pin is an error."""
    return {name: version for name, (version, _) in read_lock_via(path).items()}


def read_lock_via(path: Path) -> dict[str, tuple[str, set[str]]]:
    """Canonical name -> (locked version, the names in its ``# via`` annotation)."""
    out: dict[str, tuple[str, set[str]]] = {}
    current: str | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            via = line.lstrip("#").strip()
            if current is not None and via and via != "via":
                via = via.removeprefix("via ").strip()
                out[current][1].add(via if via == SELF else str(canonicalize_name(via)))
            continue
        m = _PIN.match(line)
        if m is None:
            raise ValueError(f"{path.name}: not an exact pin: {raw!r}")
        current = str(canonicalize_name(m[1]))
        out[current] = (m[2], set())
    return out


def wanted(extras: tuple[str, ...], pyproject: Path = REPO / "pyproject.toml") -> list[Requirement]:
    """pyproject.toml's base dependencies and those of ``extras``."""
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return [Requirement(r) for r in reqs]
