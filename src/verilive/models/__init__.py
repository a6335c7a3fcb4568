"""Model store: the only code that knows where model weights come from.

- :mod:`~verilive.models.manifest` — the packaged list of models (typed).
- :mod:`~verilive.models.store` — install (mirror → upstream), sha256 and check-vector verification.
- :mod:`~verilive.models.sessions` — one shared onnxruntime session per model.
- :mod:`~verilive.models.cli` — ``verilive models pull|list|verify``.
"""

from verilive.models.manifest import (
    CheckVector,
    InputSpec,
    Manifest,
    ModelSpec,
    OutputCheck,
    UrlSource,
    WheelPartsSource,
    WheelSource,
    default_manifest,
    load_manifest,
)
from verilive.models.pull import NullReporter, Reporter
from verilive.models.sessions import ModelRegistry
from verilive.models.store import InstalledRecord, ModelStore, PullResult, install_hint

__all__ = [
    "CheckVector",
    "InputSpec",
    "InstalledRecord",
    "Manifest",
    "ModelRegistry",
    "ModelSpec",
    "ModelStore",
    "NullReporter",
    "OutputCheck",
    "PullResult",
    "Reporter",
    "UrlSource",
    "WheelPartsSource",
    "WheelSource",
    "default_manifest",
    "install_hint",
    "load_manifest",
]
