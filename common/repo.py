"""The repository and development-data locations, and the file helpers eval/ and train/ share."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The one setting for where the development material lives: the folder that holds data/, models/,
# spec/ and the generators (../shared beside the checkout, as CI has it).
SHARED_ENV = "VERILIVE_SHARED_DIR"


def shared_root() -> Path:
    """The shared folder: $VERILIVE_SHARED_DIR, else ../shared beside the repository."""
    env = os.environ.get(SHARED_ENV)
    return Path(env) if env else REPO.parent / "shared"


def data_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The shared data folder: ``explicit``, else ``shared_root() / "data"``."""
    return Path(explicit) if explicit is not None else shared_root() / "data"


def replace_section(path: Path, name: str, body: str, title: str | None = None) -> None:
    """Replace (or append) the block between ``<!-- BEGIN name -->`` and ``<!-- END name -->``."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        heading = f"## {title}\n\n" if title else ""
        text = (text.rstrip() + "\n\n" if text.strip() else "") + heading + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def source_hash(*modules: str, extra: Sequence[Path] = ()) -> str:
    """Short hash of module source files (and extra files), for cache folder names."""
    h = hashlib.sha256()
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ImportError(f"module {name} not found")
        h.update(Path(spec.origin).read_bytes())
    for p in extra:
        h.update(p.read_bytes())
    return h.hexdigest()[:12]
