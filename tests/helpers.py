"""Helpers several test files share: the error body every service answers, and the capture test key,
browser environment and settings. Servers the tests start are in ``tests/servers.py``, real video
frames in ``tests/motion_data.py``, the spec's endpoint tables in ``tests/spec_table.py``."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from verilive.capture.bundle import public_key_b64
from verilive.config import Settings

ERROR_KEYS = {"timestamp", "status", "error", "message", "path", "error_code", "request_id"}

# The published capture test key (docs/bundle-format.md) and its public half.
KEY = Path(__file__).parent / "fixtures" / "capture_test_key.pem"
PUBLIC = public_key_b64(KEY.read_bytes())
# A desktop Chrome on Windows, consistent in every claim.
CHROME_WIN = {
    "client": "browser",
    "userAgent": "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36",
    "platform": "Win32",
    "webdriver": False,
    "automation": {},
    "screen": {"width": 1920, "height": 1080, "devicePixelRatio": 1},
    "maxTouchPoints": 0,
    "touch": False,
    "userAgentData": {
        "brands": [{"brand": "Chromium", "version": "131"}],
        "mobile": False,
        "platform": "Windows",
    },
}
# A counter for values that must differ per call (device fingerprints, image bytes).
variants = itertools.count(1)


def assert_error(resp: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """``resp`` is the services' one error body with ``status`` (and ``code`` when given)."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == ERROR_KEYS, body
    assert body["status"] == status
    assert body["path"] == resp.request.url.path
    assert body["message"] and "Traceback" not in body["message"]
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", body["timestamp"])
    if code is not None:
        assert body["error_code"] == code, body
    return body


def env(**claims: Any) -> dict[str, Any]:
    """A consistent browser environment with its own timezone (its own device fingerprint)."""
    return {**CHROME_WIN, "timezone": f"test/{next(variants)}", **claims}


def settings_for(base: Settings, tmp: Path, **update: Any) -> Settings:
    """Capture settings with the test key and stores under ``tmp``."""
    return base.model_copy(
        update={
            "capture_private_keys": [str(KEY)],
            "capture_replay_url": f"sqlite:///{tmp}/replay.sqlite3",
            "bi_database_url": f"sqlite:///{tmp}/bi.sqlite3",
            # Each test is its own device (see `env`); bursts are tested on their own.
            "capture_device_captures_per_minute": 1000,
            # Most tests judge still images; the 3D check (required by default) and the binding of
            # a burst to the still are tested in tests/test_capture_binding.py.
            "capture_motion3d": "use",
            **update,
        }
    )
