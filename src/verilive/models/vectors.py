"""Check vectors: run a model on its manifest test input and compare with the stored expected values.

Also the reproducible generator for those expected values::

    python -m verilive.models.vectors --mirror /path/to/mirror              # print the new numbers
    python -m verilive.models.vectors --mirror /path/to/mirror --write      # rewrite manifest.json

The generator fetches each source file the normal way (mirror, then upstream; sha256 checked), converts it
when the manifest says so, runs onnxruntime on CPU with one intra-op thread (so the numbers do not depend
on the machine's core count) and writes ``expected`` back into the manifest. No model file is written
into the source tree.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from verilive.errors import ModelVerificationError
from verilive.models.convert import run_converter
from verilive.models.manifest import CheckVector, ModelSpec, load_manifest, packaged_manifest_path
from verilive.models.pull import NullReporter, fetch_source

# ORT severity: 0 verbose, 1 info, 2 warning, 3 error. Warnings only repeat harmless graph notes
# (e.g. centerface's BN initializers listed as graph inputs).
ORT_LOG_SEVERITY = 3
EXPECTED_DIGITS = 9  # float32 needs 9 significant digits to round-trip


def check_session(path: Path) -> Any:
    """A small, deterministic onnxruntime session used only for checks (1 thread, CPU)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = ORT_LOG_SEVERITY
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def evaluate(path: Path, check: CheckVector, label: str | None = None) -> dict[str, np.ndarray]:
    """Run the ONNX model at ``path`` on the check inputs; returns the outputs the check names."""
    try:
        sess = check_session(path)
    except Exception as e:  # onnxruntime raises its own exception types for unreadable models
        raise ModelVerificationError(f"{label or path} is not a loadable ONNX model: {e}") from e
    names = list(dict.fromkeys(o.name for o in check.outputs))
    try:
        values = sess.run(names, check.feeds())
    except Exception as e:
        raise ModelVerificationError(f"{label or path} failed on its check vector: {e}") from e
    return {n: np.asarray(v) for n, v in zip(names, values, strict=True)}


def compare(outputs: dict[str, np.ndarray], check: CheckVector) -> list[str]:
    """Human-readable problems (empty list = the check passed)."""
    problems: list[str] = []
    for oc in check.outputs:
        out = outputs[oc.name]
        where = f"output {oc.name!r}" + (f"[{oc.slice}]" if oc.slice else "")
        if tuple(out.shape) != tuple(oc.shape):
            problems.append(f"{where}: shape {tuple(out.shape)} != expected {tuple(oc.shape)}")
            continue
        got = oc.select(out)
        want = np.asarray(oc.expected, dtype=np.float64)
        if got.shape != want.shape:
            problems.append(f"{where}: {got.size} values, manifest has {want.size}")
            continue
        if not np.all(np.isfinite(got)):
            problems.append(f"{where}: non-finite values")
            continue
        diff = np.abs(got - want)
        tol = oc.atol + oc.rtol * np.abs(want)
        if np.any(diff > tol):
            i = int(np.argmax(diff - tol))
            problems.append(
                f"{where}: max |diff| {diff.max():.3g} > atol {oc.atol:g} (rtol {oc.rtol:g}); "
                f"first bad value #{i}: got {got[i]:.9g}, expected {want[i]:.9g}"
            )
    return problems


def run_check(path: Path, check: CheckVector, label: str) -> None:
    """Raise ModelVerificationError (naming the model and outputs) when the check vector does not match."""
    problems = compare(evaluate(path, check, label), check)
    if problems:
        raise ModelVerificationError(f"Check vector failed for {label}: " + "; ".join(problems))


def expected_values(path: Path, check: CheckVector) -> list[dict[str, Any]]:
    """The `outputs` list of ``check`` with ``expected`` recomputed from the model at ``path``."""
    outs = evaluate(path, check)
    result = []
    for oc in check.outputs:
        out = outs[oc.name]
        d = oc.model_dump(mode="json", exclude_none=True)
        d["shape"] = list(out.shape)
        sel = oc.select(out)
        d["expected"] = [float(f"{v:.{EXPECTED_DIGITS}g}") for v in sel]
        result.append(d)
    return result


def build_onnx(spec: ModelSpec, workdir: Path, mirror: Path | None) -> Path:
    """Fetch (and convert) ``spec`` into ``workdir`` without running its check."""
    fetched = fetch_source(spec, workdir / "src", mirror=mirror, reporter=NullReporter())
    if not spec.convert:
        return fetched.path
    dest = workdir / "out" / spec.file
    dest.parent.mkdir(parents=True, exist_ok=True)
    run_converter(spec.convert, fetched.path, dest)
    return dest


def dumps_manifest(data: dict[str, Any]) -> str:
    """JSON with 2-space indent but number lists on one line, so diffs of expected values stay readable."""
    text = json.dumps(data, indent=2, ensure_ascii=False)
    num_list = re.compile(r"\[\s*((?:-?[0-9.eE+-]+\s*,\s*)*-?[0-9.eE+-]+)\s*\]")
    text = num_list.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    return text + "\n"


def regenerate(manifest_path: Path, ids: list[str] | None, mirror: Path | None) -> dict[str, Any]:
    """Return the manifest JSON with recomputed ``expected`` values for ``ids`` (default: all)."""
    manifest = load_manifest(manifest_path)
    data = json.loads(manifest_path.read_text(encoding="utf-8"))
    wanted = ids or manifest.ids
    for entry in data["models"]:
        spec = manifest.get(entry["id"])
        if spec.id not in wanted or spec.check is None:
            continue
        with tempfile.TemporaryDirectory(prefix=f"verilive-vec-{spec.id}-") as tmp:
            onnx_path = build_onnx(spec, Path(tmp), mirror)
            entry["check"]["outputs"] = expected_values(onnx_path, spec.check)
        print(f"{spec.id}: recomputed {len(spec.check.outputs)} output check(s)", file=sys.stderr)
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verilive.models.vectors", description=__doc__.split("\n")[0])
    ap.add_argument("ids", nargs="*", help="model ids (default: all with a check)")
    ap.add_argument("--manifest", type=Path, default=packaged_manifest_path())
    ap.add_argument("--mirror", type=Path, default=None, help="folder with source files or wheels")
    ap.add_argument("--write", action="store_true", help="rewrite the manifest file in place")
    args = ap.parse_args(argv)
    data = regenerate(args.manifest, args.ids or None, args.mirror)
    text = dumps_manifest(data)
    if args.write:
        args.manifest.write_text(text, encoding="utf-8")
        print(f"wrote {args.manifest}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
