"""Shared fixtures.

`models_settings` makes sure every model a service needs is installed (pulling from
VERILIVE_MODEL_MIRROR or upstream, exactly as `verilive models pull` does), so tests run on
the real models and never silently skip them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from common.repo import shared_root

from verilive.config import Settings
from verilive.models.store import ModelStore
from verilive.server.app import DEFINITIONS

SHARED = shared_root()

# A capture app without keys on loopback makes a local evaluation key (verilive.capture.keys):
# in tests it goes to a temporary folder, never the user's data directory (inherited by the
# servers the tests start as subprocesses).
os.environ.setdefault(
    "VERILIVE_CAPTURE_EVAL_KEY_PATH",
    str(Path(tempfile.mkdtemp(prefix="verilive-test-")) / "capture-eval-key.pem"),
)


@pytest.fixture(scope="session")
def models_settings() -> Settings:
    settings = Settings(require_models=True)
    store = ModelStore.from_settings(settings)
    needed = sorted({m for d in DEFINITIONS.values() for m in d.required_models})
    for mid in store.missing(needed):
        store.pull(mid)
    return settings


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    path = SHARED
    if not path.is_dir():
        pytest.fail(f"development data folder {path} is missing (set VERILIVE_SHARED_DIR)")
    return path
