"""The face PAD source manifest and builder (issue 47) on a tiny git fixture; the committed manifest."""

from __future__ import annotations

import csv
import dataclasses
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
from train import face_pad_sources as fps

# RESERVED.md, face section, written out here on purpose: the test must not trust the module's own list.
RESERVED_OWNERS = {
    "doubangotelecom",
    "faceonlive",
    "kby-ai",
    "recognito-vision",
    "miniailive",
    "hyperinspire",
    "nhtlongcs",
    "khanhngit",
    "trainingdata-datamarket",
}
RESERVED_REPOS = {
    "zeusees/hyperfas",
    "serengil/deepface",
    "jotriever/xai-face-anti-spoofing",
    "debruine/webmorphr.stim",
    "dracarys261/spoofingdetection",
    "rounakdeepsingh/face_anti_spoofing_system",
    "davisking/dlib",
    "zhangyuanhan/celeba-spoof",
    "zhangyuanhan-ai/celeba-spoof",
    "zubaircrackscode/anit-spoofing",
    "krzysiek354/python_face_detection",
    "lestari15/cnn-face-detection",
    "georgeretsi/smirk",
    "opentalker/sadtalker",
    "opentalker/video-retalking",
    "yoyo-nb/thin-plate-spline-motion-model",
    "filby89/spectre",
    "rizkiarm/lipnet",
}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _image(seed: int, ext: str) -> bytes:
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 255, size=(64, 80, 3), dtype=np.uint8)
    ok, buf = cv2.imencode(ext, img)
    assert ok
    return buf.tobytes()


@pytest.fixture()
def mirror(tmp_path: Path) -> tuple[Path, str]:
    """A mirrors folder holding one repository ``alice/pad-samples``: two live JPEGs, two print PNGs, an
    icon too small to use and a README; committed with git."""
    work = tmp_path / "work"
    for rel, data in {
        "samples/live/a.jpg": _image(1, ".jpg"),
        "samples/live/b.jpg": _image(2, ".jpg"),
        "samples/print/c.png": _image(3, ".png"),
        "samples/print/d.png": _image(4, ".png"),
        "samples/print/icon.png": cv2.imencode(".png", np.zeros((16, 16, 3), np.uint8))[1].tobytes(),
        "README.md": b"fixture\n",
    }.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(data)
    _git(work.parent, "init", "-q", str(work))
    _git(work, "add", ".")
    _git(work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "fixture")
    mirrors = tmp_path / "mirrors"
    mirrors.mkdir()
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(work), str(mirrors / "alice+pad-samples" / "repo")],
        check=True,
        capture_output=True,
    )
    return mirrors, _git(work, "rev-parse", "HEAD")


def _add(manifest: Path, mirrors: Path, **kw: object) -> list[fps.Row]:
    args: dict[str, object] = {
        "ref": "HEAD",
        "exclude": [],
        "licence": "MIT",
        "role": "train",
        "camera": "webcam",
        "log": lambda *a, **k: None,
    }
    args.update(kw)
    return fps.add(manifest, mirrors, "alice/pad-samples", **args)  # type: ignore[arg-type]


def test_add_writes_rows_and_build_checks_sha256(tmp_path: Path, mirror: tuple[Path, str]) -> None:
    mirrors, commit = mirror
    manifest = tmp_path / "m.csv"
    live = _add(manifest, mirrors, include=["samples/live/*"], label="live", attack_type="none")
    attack = _add(
        manifest,
        mirrors,
        include=["samples/print/*"],
        label="attack",
        attack_type="print",
        collection="alice-prints",
    )
    assert [r.path for r in live] == ["samples/live/a.jpg", "samples/live/b.jpg"]
    assert [r.path for r in attack] == ["samples/print/c.png", "samples/print/d.png"]  # icon too small
    with manifest.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == fps.COLUMNS
    assert {r["commit"] for r in rows} == {commit}
    assert rows[0]["collection"] == "alice+pad-samples" and rows[2]["collection"] == "alice-prints"
    assert rows[0]["sha256"] == fps.hashlib.sha256(_image(1, ".jpg")).hexdigest()
    # Adding the same files again adds nothing: their sha256 are already in the manifest.
    assert _add(manifest, mirrors, include=["samples/*"], label="live", attack_type="none") == []

    out = tmp_path / "out"
    assert fps.build(manifest, mirrors, out, log=lambda *a, **k: None)["undecodable"] == []
    with (out / "index.csv").open(newline="") as f:
        index = list(csv.DictReader(f))
    assert [r["path"] for r in index] == [
        "alice+pad-samples/live/samples__live__a.jpg",
        "alice+pad-samples/live/samples__live__b.jpg",
        "alice-prints/attack/samples__print__c.png",
        "alice-prints/attack/samples__print__d.png",
    ]
    # JPEGs keep their bytes; PNGs are decoded and written losslessly.
    assert (out / index[0]["path"]).read_bytes() == _image(1, ".jpg")
    png = cv2.imread(str(out / index[2]["path"]))
    assert png is not None and png.shape == (64, 80, 3)

    # A manifest sha256 that does not match the committed bytes is refused.
    text = manifest.read_text()
    bad = text.replace(rows[1]["sha256"], "0" * 64)
    manifest.write_text(bad)
    with pytest.raises(fps.SourceError, match="sha256 mismatch"):
        fps.build(manifest, mirrors, tmp_path / "out2", log=lambda *a, **k: None)
    problems = fps.build(manifest, mirrors, tmp_path / "out3", on_mismatch="skip", log=lambda *a, **k: None)
    assert len(problems["mismatch"]) == 1
    assert fps.main(["--manifest", str(manifest), "build", "--mirrors", str(mirrors), "--out", str(out)]) == 1


def test_rows_are_validated(tmp_path: Path, mirror: tuple[Path, str]) -> None:
    mirrors, _ = mirror
    manifest = tmp_path / "m.csv"
    with pytest.raises(fps.SourceError, match="role train"):
        _add(manifest, mirrors, include=["samples/live/*"], label="live", attack_type="none", licence="none")
    with pytest.raises(fps.SourceError, match="does not fit"):
        _add(manifest, mirrors, include=["samples/live/*"], label="attack", attack_type="none")
    with pytest.raises(fps.SourceError, match="reserved"):
        fps.add(
            manifest,
            mirrors,
            "FaceOnLive/anything",
            ref="HEAD",
            include=["*"],
            exclude=[],
            label="live",
            attack_type="none",
            camera="unknown",
            licence="MIT",
            role="train",
        )


def test_committed_manifest() -> None:
    with fps.MANIFEST.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames is not None
        assert set(reader.fieldnames) >= {
            "repo",
            "commit",
            "path",
            "sha256",
            "licence",
            "role",
            "label",
            "attack_type",
            "camera",
            "collection",
            "notes",
        }
        rows = list(reader)
    assert rows
    fps.read_manifest(fps.MANIFEST)  # every row passes the module's own checks
    for r in rows:
        assert r["label"] in {"live", "attack"}
        assert r["role"] in {"train", "choose-only"}
        assert (r["label"] == "live") == (r["attack_type"] == "none")
        owner = r["repo"].split("/")[0].lower()
        assert owner not in RESERVED_OWNERS, r["repo"]
        assert r["repo"].lower() not in RESERVED_REPOS, r["repo"]
        assert "celeba" not in (r["repo"] + r["path"]).lower(), r["repo"]
    images = [r["sha256"] for r in rows if not r["frame"]]
    assert len(images) == len(set(images)), "duplicate sha256 in the manifest"
    frames = [(r["sha256"], r["frame"]) for r in rows if r["frame"]]
    assert len(frames) == len(set(frames))


def test_committed_occlusion_manifest() -> None:
    # The real-occlusion set (docs/face-occlusion-sources.md) is read by the same builder.
    path = fps.MANIFEST.with_name("face_occlusion_sources.csv")
    rows = fps.read_manifest(path)
    covered = [r for r in rows if r.label == "occluded"]
    assert len(covered) >= 200 and {r.attack_type for r in covered} >= {"mask", "sunglasses"}
    assert all(r.label in {"live", "occluded"} for r in rows)
    assert not any(fps.is_reserved(r.repo) for r in rows)


def test_occluded_rows_need_an_occlusion_kind() -> None:
    row = fps.read_manifest(fps.MANIFEST)[0]
    fps.validate_row(dataclasses.replace(row, label="occluded", attack_type="mask"))
    with pytest.raises(fps.SourceError, match="does not fit"):
        fps.validate_row(dataclasses.replace(row, label="occluded", attack_type="print"))
