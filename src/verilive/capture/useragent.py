"""What a browser says about itself: user agent, navigator.platform and userAgentData, read into
operating-system families the capture detectors compare (docs/capture.md, UNTRUSTED_DEVICE)."""

from __future__ import annotations

from typing import Any

__all__ = ["UA_DATA_PLATFORMS", "UA_PLATFORMS", "platform_family", "platform_of", "ua_is_phone", "ua_os"]


def ua_os(ua: str) -> str | None:
    """The operating system a user agent claims: ios, ipados, android, windows, macos, chromeos,
    linux, or None (not a browser user agent: every browser's starts with "Mozilla/")."""
    if not ua.startswith("Mozilla/"):
        return None
    u = ua.lower()
    if "iphone" in u or "ipod" in u:
        return "ios"
    if "ipad" in u:
        return "ipados"
    if "android" in u:
        return "android"
    if "windows" in u:
        return "windows"
    if "cros" in u:
        return "chromeos"
    if "macintosh" in u or "mac os x" in u:
        return "macos"
    if "linux" in u or "x11" in u:
        return "linux"
    return None


def ua_is_phone(ua: str) -> bool:
    u = ua.lower()
    return "iphone" in u or "ipod" in u or ("android" in u and "mobile" in u)


def platform_family(platform: str) -> str | None:
    p = platform.strip().lower()
    if not p:
        return None
    if p.startswith("win"):
        return "windows"
    if p.startswith("mac"):
        return "macos"
    if p in ("iphone", "ipod", "iphone simulator", "ipod simulator"):
        return "ios"
    if p in ("ipad", "ipad simulator"):
        return "ipados"
    if p.startswith("linux") or p == "android" or p.startswith("arm"):
        return "linux"
    if "cros" in p or "chrome os" in p:
        return "chromeos"
    return "other"


# navigator.platform values each user-agent OS can honestly report. iPadOS Safari reports
# "MacIntel" (desktop mode); Android and ChromeOS report "Linux ..." strings.
UA_PLATFORMS: dict[str, frozenset[str]] = {
    "ios": frozenset({"ios"}),
    "ipados": frozenset({"ipados", "macos"}),
    "android": frozenset({"linux"}),
    "windows": frozenset({"windows"}),
    "macos": frozenset({"macos"}),
    "chromeos": frozenset({"linux", "chromeos"}),
    "linux": frozenset({"linux"}),
}
# userAgentData.platform values (Chromium) for each user-agent OS.
UA_DATA_PLATFORMS: dict[str, frozenset[str]] = {
    "ios": frozenset({"ios"}),
    "ipados": frozenset({"ios"}),
    "android": frozenset({"android"}),
    "windows": frozenset({"windows"}),
    "macos": frozenset({"macos"}),
    "chromeos": frozenset({"chrome os", "chromeos", "chromium os"}),
    "linux": frozenset({"linux"}),
}


def platform_of(environment: dict[str, Any]) -> str:
    """The BI platform: IOS, ANDROID, DESKTOP (a desktop browser) or UNKNOWN (e.g. Python kiosks)."""
    ua = environment.get("userAgent")
    claimed = ua_os(ua if isinstance(ua, str) else "")
    if claimed in ("ios", "ipados"):
        return "IOS"
    if claimed == "android":
        return "ANDROID"
    if claimed is not None:
        return "DESKTOP"
    return "UNKNOWN"
