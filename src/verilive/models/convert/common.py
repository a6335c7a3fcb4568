"""What the torch converters share: the legacy ONNX export, the onnxruntime-vs-torch check and the
"export next to dest, verify, rename" sequence.

torch and onnxruntime are imported inside the functions, so importing this module costs nothing.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from verilive.errors import ModelError

OPSET = 17


def export_legacy(
    module: Any,
    example: Any,
    dest: Path,
    *,
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_axes: Mapping[str, Mapping[int, str]],
    opset: int = OPSET,
    ignore: Iterable[type[Warning]] | None = (DeprecationWarning,),
    ignore_messages: Iterable[tuple[str, type[Warning]]] = (),
) -> None:
    """``torch.onnx.export`` of ``module`` on ``(example,)`` with the legacy TorchScript exporter (it needs no
    onnxscript), under ``torch.no_grad``, constants folded. The exporter announces its own deprecation, so
    ``ignore`` lists the warning categories silenced (None: every warning); ``ignore_messages`` adds
    (message regex, category) filters."""
    import torch

    with torch.no_grad(), warnings.catch_warnings():
        if ignore is None:
            warnings.simplefilter("ignore")
        else:
            for category in ignore:
                warnings.simplefilter("ignore", category)
        for message, category in ignore_messages:
            warnings.filterwarnings("ignore", message, category)
        torch.onnx.export(
            module,
            (example,),
            str(dest),
            dynamo=False,
            input_names=list(input_names),
            output_names=list(output_names),
            opset_version=opset,
            dynamic_axes={name: dict(axes) for name, axes in dynamic_axes.items()},
            do_constant_folding=True,
        )


def cpu_session(path: Path) -> Any:
    """An onnxruntime CPU session of ``path`` that logs only errors."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def check_close(
    got: np.ndarray,
    want: np.ndarray,
    atol: float,
    what: str,
    shape: tuple[int, ...] | None = None,
) -> float:
    """``max |got - want|``; ModelError (naming ``what``) when ``got`` does not have the shape (``want``'s
    by default), holds a non-finite value, or differs by more than ``atol``."""
    shape = want.shape if shape is None else shape
    if got.shape != shape or not np.all(np.isfinite(got)):
        raise ModelError(f"{what} is wrong: shape {got.shape}, expected {shape}")
    diff = float(np.max(np.abs(got - want)))
    if diff > atol:
        raise ModelError(f"{what} differs from torch: max |diff| {diff:.3g}")
    return diff


def write_verified(dest: Path, export: Callable[[Path], None], verify: Callable[[Path], Any]) -> None:
    """``export`` to a temporary file next to ``dest``, ``verify`` it, then rename it to ``dest``: a failed
    export or verification leaves nothing at ``dest`` (the rename stays on one filesystem)."""
    dest = Path(dest)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        tmp_path = Path(tmp) / dest.name
        export(tmp_path)
        verify(tmp_path)
        tmp_path.replace(dest)
