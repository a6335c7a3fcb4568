"""The dependency locks (issue 49): pyproject.toml and requirements/*.txt agree, the runtime set
leaves out what only conversion needs, and this environment holds exactly the development lock."""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

import pytest
from common.locks import EXTRAS, LOCKS, SELF, read_lock, read_lock_via, wanted
from common.repo import REPO
from packaging.utils import canonicalize_name
from packaging.version import Version


@pytest.mark.parametrize("lock", sorted(EXTRAS))
def test_every_requirement_of_pyproject_is_locked_within_its_range(lock: str) -> None:
    pins = read_lock(LOCKS / lock)
    for req in wanted(EXTRAS[lock]):
        name = canonicalize_name(req.name)
        assert name in pins, f"{lock} has no pin for {req} (run `make lock`)"
        assert req.specifier.contains(Version(pins[name]), prereleases=True), (
            f"{lock} pins {name}=={pins[name]} outside pyproject.toml's {req} (run `make lock`)"
        )


@pytest.mark.parametrize("lock", sorted(EXTRAS))
def test_the_lock_names_as_direct_exactly_what_pyproject_asks(lock: str) -> None:
    direct = {name for name, (_, via) in read_lock_via(LOCKS / lock).items() if SELF in via}
    asked = {canonicalize_name(r.name) for r in wanted(EXTRAS[lock])}
    assert direct == asked, f"{lock} is stale (run `make lock`): {sorted(direct ^ asked)}"


def test_the_runtime_lock_leaves_conversion_out() -> None:
    runtime, convert = read_lock(LOCKS / "runtime.txt"), read_lock(LOCKS / "convert.txt")
    for tool in ("onnx", "torch", "h5py", "tflite"):
        assert tool not in runtime
        assert tool in convert or tool == "tflite"
    assert "onnxruntime" in runtime and "protobuf" in runtime
    # a package in both sets has one version: the image's two stages run the same libraries
    both = runtime.keys() & convert.keys()
    assert {n for n in both if runtime[n] != convert[n]} == set()


def test_this_environment_holds_exactly_the_development_lock() -> None:
    """`make` installs requirements/dev.txt; a package at another version means it did not."""
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in md.distributions()}
    wrong = {
        name: (version, installed.get(name))
        for name, version in read_lock(LOCKS / "dev.txt").items()
        if installed.get(name, "").split("+")[0] != version
    }
    assert wrong == {}, "locked (version, installed): run `make install` after `make lock`"


def test_make_and_the_image_install_from_the_locks() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "-r requirements/dev.txt" in makefile and "--no-deps -e ." in makefile
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    assert "-r /tmp/runtime.txt" in dockerfile and "-r /tmp/convert.txt" in dockerfile
    assert dockerfile.count("pip install --no-deps") == 2


def test_read_lock_refuses_a_range(tmp_path: Path) -> None:
    bad = tmp_path / "x.txt"
    bad.write_text("numpy>=2\n")
    with pytest.raises(ValueError, match="not an exact pin"):
        read_lock(bad)
