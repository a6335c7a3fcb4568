"""The optional ``Meta`` request header of the face service (docs/face.md#meta-header).

A JSON object with the keys OS (IOS, ANDROID, DESKTOP or UNKNOWN), OS_VERSION, MANUFACTURE and
MODEL, each a string or null; other keys are ignored. Present but malformed: INVALID_META.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

__all__ = ["OS_VALUES", "Meta", "MetaError", "parse_meta"]

OS_VALUES = ("IOS", "ANDROID", "DESKTOP", "UNKNOWN")
KEYS = ("OS", "OS_VERSION", "MANUFACTURE", "MODEL")
MAX_META_BYTES = 4096


class MetaError(ValueError):
    """The header is present but is not a valid Meta object."""


@dataclass(frozen=True)
class Meta:
    os: str = "UNKNOWN"
    os_version: str | None = None
    manufacture: str | None = None
    model: str | None = None

    @property
    def platform(self) -> str:
        """The BI platform: the OS."""
        return self.os


def parse_meta(header: str | None) -> Meta:
    """Parse the header; absent or blank gives the default Meta (platform UNKNOWN)."""
    if header is None or not header.strip():
        return Meta()
    if len(header) > MAX_META_BYTES:
        raise MetaError(f"The Meta header is longer than {MAX_META_BYTES} characters")
    try:
        obj = orjson.loads(header)
    except orjson.JSONDecodeError as exc:
        raise MetaError(f"The Meta header is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise MetaError("The Meta header must be a JSON object")
    values: dict[str, str | None] = {}
    for key in KEYS:
        v = obj.get(key)
        if v is not None and not isinstance(v, str):
            raise MetaError(f"Meta field {key} must be a string")
        values[key] = v
    os_name = (values["OS"] or "UNKNOWN").strip().upper()
    if os_name not in OS_VALUES:
        raise MetaError(f"Meta field OS must be one of {', '.join(OS_VALUES)}, got {values['OS']!r}")
    return Meta(os_name, values["OS_VERSION"], values["MANUFACTURE"], values["MODEL"])
