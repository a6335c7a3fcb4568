"""The SDK allow-list: which capture libraries (name, version, digest) the server trusts.

Built at startup from the libraries this server ships, so a release trusts exactly its own SDKs:

- the browser SDK: every ``*.js`` file in ``verilive/capture/static/``, digest = SHA-256 of the exact
  bytes served, version and name = the file's ``VERSION = "..."`` and ``SDK_NAME = "..."`` constants
  (name not checked when the file has none);
- the Python client: ``verilive.capture.client.sdk_identity()`` (SHA-256 of client.py + bundle.py).

Operators add digests of other builds (an older SDK still deployed in a kiosk) with the setting
``capture_sdk_extra_digests``: entries ``"<sha256 hex>"`` (any name and version) or
``"<sha256 hex>@<version>"``. The limits of the digest as evidence are in docs/capture.md.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["STATIC_DIR", "SdkAllowList", "SdkEntry", "build_allowlist"]

STATIC_DIR = Path(__file__).resolve().parent / "static"
_HEX64 = re.compile(r"[0-9a-f]{64}")
# `export const VERSION = "1.2.3"` or `VERSION: "1.2.3"` near the top of the SDK.
_JS_VERSION = re.compile(r"""\bVERSION\s*[=:]\s*["']([0-9A-Za-z.+-]{1,40})["']""")
_JS_NAME = re.compile(r"""\bSDK_NAME\s*[=:]\s*["']([0-9A-Za-z._-]{1,60})["']""")


@dataclass(frozen=True)
class SdkEntry:
    """One trusted build. None for name or version means: not checked."""

    digest: str
    name: str | None = None
    version: str | None = None
    source: str = ""


@dataclass(frozen=True)
class SdkAllowList:
    entries: Mapping[str, SdkEntry] = field(default_factory=dict)  # digest -> entry

    @property
    def digests(self) -> frozenset[str]:
        return frozenset(self.entries)

    def problems(self, sdk: Mapping[str, Any]) -> list[str]:
        """Why ``sdk`` (the bundle's ``{name, version, digest}``) is not trusted; empty when it is."""
        digest = str(sdk.get("digest", "")).lower()
        entry = self.entries.get(digest)
        if entry is None:
            return ["sdk digest not on the allow-list"]
        out = []
        if entry.name is not None and sdk.get("name") != entry.name:
            out.append("sdk name does not match its digest")
        if entry.version is not None and sdk.get("version") != entry.version:
            out.append("sdk version does not match its digest")
        return out


def _js_entries(static_dir: Path, default_version: str) -> list[SdkEntry]:
    out = []
    if not static_dir.is_dir():
        return out
    for path in sorted(static_dir.glob("*.js")):
        data = path.read_bytes()
        head = data[:20_000].decode("utf-8", "replace")
        m, name = _JS_VERSION.search(head), _JS_NAME.search(head)
        out.append(
            SdkEntry(
                digest=hashlib.sha256(data).hexdigest(),
                name=name.group(1) if name else None,
                version=m.group(1) if m else default_version,
                source=f"static/{path.name}",
            )
        )
    return out


def _python_entry() -> SdkEntry | None:
    try:
        from verilive.capture.client import sdk_identity
    except ImportError:  # the client is optional in a stripped install
        return None
    ident = sdk_identity()
    return SdkEntry(ident["digest"], ident["name"], ident["version"], source="python client")


def parse_extra(entry: str) -> SdkEntry:
    """``"<hex>"`` or ``"<hex>@<version>"``; raises ValueError."""
    digest, _, version = entry.strip().partition("@")
    digest = digest.lower()
    if not _HEX64.fullmatch(digest):
        raise ValueError(f"capture_sdk_extra_digests: {entry!r} is not a SHA-256 hex digest")
    return SdkEntry(digest, version=version or None, source="setting")


def build_allowlist(
    static_dir: Path = STATIC_DIR,
    extra: Iterable[str] = (),
    *,
    include_python: bool = True,
    default_version: str | None = None,
) -> SdkAllowList:
    """The allow-list of this release plus the ``extra`` digests of a setting."""
    if default_version is None:
        import verilive

        default_version = verilive.__version__
    entries: dict[str, SdkEntry] = {}
    items = _js_entries(static_dir, default_version)
    py = _python_entry() if include_python else None
    if py is not None:
        items.append(py)
    items += [parse_extra(e) for e in extra]
    for item in items:
        entries.setdefault(item.digest, item)
    log.info("capture SDK allow-list: %s", ", ".join(f"{e.source}={e.digest[:12]}" for e in entries.values()))
    return SdkAllowList(entries)
