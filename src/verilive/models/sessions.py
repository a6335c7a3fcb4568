"""One shared onnxruntime session per model id.

Engines ask the registry for ``session(id)``; the session is created once (lazily or by ``load``),
guarded by a per-model lock, and then shared between threads: ``InferenceSession.run`` is thread-safe.
Load failures are recorded, not raised, by ``load`` so /health can report them through ``status``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from verilive.config import Settings, get_settings
from verilive.errors import ModelError, ModelNotInstalled
from verilive.models.manifest import Manifest
from verilive.models.store import InstalledRecord, ModelStore, install_hint, not_installed

# 3 = errors only: centerface's graph lists BN initializers as inputs, and onnxruntime warns about
# each of them at load time; the warnings are harmless.
ORT_LOG_SEVERITY = 3

__all__ = ["ModelRegistry", "cpu_session", "install_hint"]


def cpu_session(
    model: str | Path | bytes, intra_op_threads: int = 0, spinning: bool | None = None, mem_arena: bool = True
) -> Any:
    """An onnxruntime CPU session: ``model`` is a path or serialized ONNX; ``intra_op_threads`` 0
    is onnxruntime's default (one per core); ``spinning`` None follows the ``onnx_spinning`` setting.

    Idle intra-op threads do not spin by default. onnxruntime's own default lets them busy-wait
    after each run, and on 2 cores that steals the core from the numpy work between calls and from
    the request's other sessions: anti-spoofing took about 40 % less wall and CPU time on 5 s of
    speech without it (docs/benchmarks.md).

    ``mem_arena`` False frees each run's intermediate tensors instead of keeping them in onnxruntime's
    CPU arena: for models whose inputs vary widely in length (the arena keeps the largest run's
    memory for the life of the process).
    """
    import onnxruntime as ort

    if spinning is None:
        spinning = get_settings().onnx_spinning
    so = ort.SessionOptions()
    if intra_op_threads > 0:
        so.intra_op_num_threads = intra_op_threads
    so.inter_op_num_threads = 1
    so.enable_cpu_mem_arena = mem_arena
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    so.log_severity_level = ORT_LOG_SEVERITY
    source = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])


class ModelRegistry:
    """Loads and shares onnxruntime sessions for the models a service uses.

    ``ids`` are the models this registry reports in :meth:`status` and loads by default; ``session`` works
    for any model in the manifest.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        ids: Iterable[str] | None = None,
        store: ModelStore | None = None,
        manifest: Manifest | str | Path | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        self.store = store or ModelStore.from_settings(self.settings, manifest=manifest)
        self.ids: list[str] = list(ids) if ids is not None else self.store.ids
        for i in self.ids:
            self.store.spec(i)  # unknown ids fail here, at construction, not on the first request
        self._lock = threading.Lock()
        self._model_locks: dict[str, threading.Lock] = {}
        self._sessions: dict[str, Any] = {}
        self._records: dict[str, InstalledRecord] = {}
        self._errors: dict[str, str] = {}

    # --- queries ------------------------------------------------------------------------------------

    def missing(self, ids: Iterable[str] | None = None) -> list[str]:
        """Models among ``ids`` (default: this registry's) that are not installed."""
        return self.store.missing(self.ids if ids is None else ids)

    def install_hint(self, ids: Iterable[str] | None = None) -> str:
        return install_hint(self.ids if ids is None else ids)

    def path(self, model_id: str) -> Path:
        return self.store.model_path(model_id)

    def packaged_path(self, file_id: str) -> Path:
        """A model the project ships in its package (manifest ``packaged``); never pulled."""
        return self.store.packaged_path(file_id)

    def status(self, ids: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """Per model: loaded, installed, error, version, sha256, licence (for /health)."""
        wanted = list(dict.fromkeys([*(self.ids if ids is None else ids), *self._sessions, *self._errors]))
        out: dict[str, dict[str, Any]] = {}
        for mid in wanted:
            spec = self.store.spec(mid)
            installed = self.store.is_installed(mid)
            rec = self._records.get(mid) or self.store.record(mid)
            error = self._errors.get(mid)
            if error is None and not installed:
                error = f"not installed; run: {install_hint([mid])}"
            out[mid] = {
                "loaded": mid in self._sessions,
                "installed": installed,
                "error": error,
                "version": spec.version,
                "sha256": rec.sha256 if rec else None,
                "licence": spec.licence,
            }
        return out

    # --- loading ------------------------------------------------------------------------------------

    def load(self, ids: Iterable[str] | None = None) -> dict[str, str]:
        """Create the sessions of ``ids`` (default: this registry's). Returns {id: error} for failures."""
        failures: dict[str, str] = {}
        for mid in self.ids if ids is None else ids:
            try:
                self.session(mid)
            except ModelError as e:
                failures[mid] = e.message
        return failures

    def session(self, model_id: str) -> Any:
        """The shared ``onnxruntime.InferenceSession`` of ``model_id``, created on first use."""
        sess = self._sessions.get(model_id)  # fast path without locking: dict reads are atomic
        if sess is not None:
            return sess
        with self._model_lock(model_id):
            sess = self._sessions.get(model_id)
            if sess is not None:
                return sess
            if model_id in self._errors:
                raise ModelError(f"Model '{model_id}' failed to load: {self._errors[model_id]}")
            self.store.spec(model_id)  # unknown id -> ModelError
            if not self.store.is_installed(model_id):
                # Not cached as an error: a later `verilive models pull` makes it loadable.
                raise not_installed(model_id)
            try:
                rec = self.store.verify_files(model_id)
                path, threads = self.store.model_path(model_id), self.intra_op_threads(model_id)
                arena = self.store.spec(model_id).mem_arena is not False
                sess = cpu_session(path, threads, self.settings.onnx_spinning, arena)
            except ModelNotInstalled:
                raise
            except ModelError as e:
                self._errors[model_id] = e.message
                raise
            except Exception as e:  # onnxruntime's own errors for corrupt/unsupported files
                self._errors[model_id] = f"onnxruntime could not load {self.store.model_path(model_id)}: {e}"
                raise ModelError(f"Model '{model_id}' failed to load: {self._errors[model_id]}") from e
            self._records[model_id] = rec
            self._sessions[model_id] = sess
            return sess

    def reset(self, model_id: str | None = None) -> None:
        """Forget sessions and recorded errors (all, or one model) so the next use reloads from disk."""
        with self._lock:
            for d in (self._sessions, self._errors, self._records):
                if model_id is None:
                    d.clear()
                else:
                    d.pop(model_id, None)

    # --- internals ----------------------------------------------------------------------------------

    def _model_lock(self, model_id: str) -> threading.Lock:
        # Per-model locks let two different models load in parallel while one model loads only once.
        with self._lock:
            return self._model_locks.setdefault(model_id, threading.Lock())

    def intra_op_threads(self, model_id: str) -> int:
        """Intra-op threads for the session of ``model_id``; 0 = onnxruntime's default.

        The setting ``onnx_intra_op_threads`` wins when set (> 0). At 0 (auto) the manifest's per-model
        hint ``intra_op_threads`` applies, if the model has one (docs/models.md).
        """
        if self.settings.onnx_intra_op_threads > 0:
            return self.settings.onnx_intra_op_threads
        return self.store.spec(model_id).intra_op_threads or 0
