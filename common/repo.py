"""The repository and development-data locations, and the file helpers eval/ and train/ share."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA_ROOT = REPO.parent / "shared" / "data"


def data_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The shared data folder: ``explicit``, else $VERILIVE_DATA_DIR, else ../shared/data."""
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get("VERILIVE_DATA_DIR")
    return Path(env) if env else DEFAULT_DATA_ROOT


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
