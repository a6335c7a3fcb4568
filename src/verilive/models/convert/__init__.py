"""Converter registry: turns a model's source file (e.g. a PyTorch checkpoint) into ONNX.

A converter is ``func(source: Path, dest: Path) -> None``: read the verified source file, write an ONNX
file at ``dest``. The store then runs the manifest's check vector on ``dest`` before installing it.

A manifest names a converter either by a registered name (``register_converter`` / ``@converter``) or as
``"module:function"``, imported on first use. Converters should import torch/onnx inside the function,
so that ``import verilive.models`` works without the optional ``convert`` extra.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from pathlib import Path

from verilive.errors import ModelError

Converter = Callable[[Path, Path], None]

# Distributions the `convert` extra provides; an ImportError for one of these means "install the extra".
CONVERT_EXTRA_MODULES = frozenset({"torch", "onnx", "onnxscript", "h5py", "tflite"})
CONVERT_EXTRA_HINT = "pip install 'verilive[convert]'"

_registry: dict[str, Converter] = {}
_lock = threading.Lock()


def register_converter(name: str, func: Converter) -> Converter:
    """Register ``func`` under ``name`` (replacing any earlier one) and return it."""
    with _lock:
        _registry[name] = func
    return func


def converter(name: str) -> Callable[[Converter], Converter]:
    """Decorator form of :func:`register_converter`."""

    def _add(func: Converter) -> Converter:
        return register_converter(name, func)

    return _add


def unregister_converter(name: str) -> None:
    with _lock:
        _registry.pop(name, None)


def resolve_converter(ref: str) -> Converter:
    """Find the converter a manifest names; ModelError (with the install hint) if an extra is missing."""
    with _lock:
        if ref in _registry:
            return _registry[ref]
    if ":" not in ref:
        raise ModelError(f"Unknown converter {ref!r}: not registered and not of the form 'module:function'")
    mod_name, _, func_name = ref.partition(":")
    try:
        module = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        raise missing_extra_error(e, ref) from e
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ModelError(f"Converter {ref!r}: {mod_name} has no callable {func_name!r}")
    return func


def missing_extra_error(exc: ModuleNotFoundError, ref: str) -> ModelError:
    """Translate a missing torch/onnx into the message users can act on."""
    root = (exc.name or "").split(".")[0]
    if root in CONVERT_EXTRA_MODULES:
        return ModelError(
            f"Converter {ref!r} needs the convert extra (missing module {root!r}): {CONVERT_EXTRA_HINT}"
        )
    return ModelError(f"Converter {ref!r} could not be imported: {exc}")


def run_converter(ref: str, source: Path, dest: Path) -> None:
    func = resolve_converter(ref)
    try:
        func(source, dest)
    except ModuleNotFoundError as e:
        raise missing_extra_error(e, ref) from e
    if not dest.is_file():
        raise ModelError(f"Converter {ref!r} finished without writing {dest.name}")
