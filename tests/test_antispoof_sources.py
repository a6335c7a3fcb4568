"""The anti-spoofing source builder (issue 46) on two fake sources made here: two small git repositories
laid out as the search tool's ``fetch`` lays them out (``<mirrors>/<owner>+<name>/repo``, bare or with a
``.git`` folder), rows added with ``add``, a build, and a file whose sha256 does not match."""

from __future__ import annotations

import csv
import dataclasses
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from train import antispoof_sources as src

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        [
            "git",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.org",
            "-c",
            "init.defaultBranch=main",
            *args,
        ],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def _tone(rate: int, seconds: float, freq: float, channels: int = 1) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    x = 0.3 * np.sin(2 * np.pi * freq * t).astype(np.float32)
    return np.stack([x] * channels, axis=1) if channels > 1 else x


def _make_repo(work: Path, files: dict[str, tuple[int, float, float, int, str]]) -> Path:
    work.mkdir(parents=True)
    _git(work, "init", "-q")
    for rel, (rate, seconds, freq, channels, fmt) in files.items():
        p = work / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        sf.write(p, _tone(rate, seconds, freq, channels), rate, format=fmt, subtype="PCM_16")
    (work / "README.md").write_text("demo\n")
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", "samples")
    return work


@pytest.fixture()
def mirrors(tmp_path: Path) -> Path:
    m = tmp_path / "mirror"
    # Source 1: a demo page with real and generated clips, fetched as a bare repository.
    a = _make_repo(
        tmp_path / "work_a",
        {
            "audio/gt/1.wav": (24000, 0.5, 220.0, 1, "WAV"),
            "audio/gt/2.wav": (24000, 0.4, 330.0, 1, "WAV"),
            "audio/sysA/1.wav": (22050, 0.5, 440.0, 2, "WAV"),
            "audio/sysB/1.flac": (16000, 0.3, 550.0, 1, "FLAC"),
        },
    )
    (m / "lab+demo").mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(a), str(m / "lab+demo" / "repo")], check=True)
    # Source 2: a model repository with one reference and one output, as a work tree with .git.
    b = _make_repo(
        tmp_path / "work_b",
        {"samples/ref.wav": (8000, 0.6, 300.0, 1, "WAV"), "samples/out.wav": (44100, 0.2, 600.0, 1, "WAV")},
    )
    (m / "org+model").mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", str(b), str(m / "org+model" / "repo")], check=True)
    return m


def _add(manifest: Path, mirrors: Path, repo: str, **kw) -> list[src.Row]:
    base = {
        "ref": "HEAD",
        "exclude": [],
        "generator": None,
        "generator_regex": None,
        "language": "en",
        "licence": "MIT",
        "role": "train",
        "max_new": 60,
        "log": lambda *a, **k: None,
    }
    base.update(kw)
    return src.add(manifest, mirrors, repo, **base)


@pytest.fixture()
def manifest(tmp_path: Path, mirrors: Path) -> Path:
    man = tmp_path / "sources.csv"
    _add(man, mirrors, "lab/demo", include=["audio/gt/*"], label="bonafide", generator="genuine-read")
    _add(man, mirrors, "lab/demo", include=["audio/sys*/*"], label="spoof", generator_regex=r"audio/([^/]+)/")
    _add(
        man,
        mirrors,
        "org/model",
        include=["samples/ref.wav"],
        label="bonafide",
        generator="genuine-prompt",
        licence="none",
        role="choose-only",
    )
    _add(
        man,
        mirrors,
        "org/model",
        include=["samples/out.wav"],
        label="spoof",
        generator="tts-x",
        licence="none",
        role="choose-only",
    )
    return man


def test_add_writes_pinned_rows(manifest: Path, mirrors: Path) -> None:
    rows = src.read_manifest(manifest)
    assert [(r.repo, r.path, r.label, r.generator) for r in rows] == [
        ("lab/demo", "audio/gt/1.wav", "bonafide", "genuine-read"),
        ("lab/demo", "audio/gt/2.wav", "bonafide", "genuine-read"),
        ("lab/demo", "audio/sysA/1.wav", "spoof", "sysA"),
        ("lab/demo", "audio/sysB/1.flac", "spoof", "sysB"),
        ("org/model", "samples/ref.wav", "bonafide", "genuine-prompt"),
        ("org/model", "samples/out.wav", "spoof", "tts-x"),
    ]
    head = subprocess.run(
        ["git", f"--git-dir={mirrors / 'lab+demo' / 'repo'}", "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert {r.commit for r in rows if r.repo == "lab/demo"} == {head}
    with manifest.open(newline="") as f:
        assert tuple(next(csv.reader(f))) == src.COLUMNS
    # Adding the same files again adds nothing (same sha256), and the per-repository cap holds.
    again = _add(manifest, mirrors, "lab/demo", include=["audio/*/*"], label="spoof", generator="x")
    assert again == []
    capped = _add(manifest, mirrors, "org/model", include=["samples/*"], label="spoof", generator="x", cap=2)
    assert capped == []


def test_build_writes_index_and_16k_wavs(manifest: Path, mirrors: Path, tmp_path: Path) -> None:
    out = tmp_path / "built"
    problems = src.build(manifest, mirrors, out, log=lambda *a, **k: None)
    assert not any(problems.values())
    with (out / "index.csv").open(newline="") as f:
        index = list(csv.DictReader(f))
    assert [
        (r["source"], r["label"], r["generator"], r["language"], r["role"], r["path"]) for r in index
    ] == [
        ("lab+demo", "bonafide", "genuine-read", "en", "train", "lab+demo/bonafide/audio__gt__1.wav"),
        ("lab+demo", "bonafide", "genuine-read", "en", "train", "lab+demo/bonafide/audio__gt__2.wav"),
        ("lab+demo", "spoof", "sysA", "en", "train", "lab+demo/spoof/audio__sysA__1.wav"),
        ("lab+demo", "spoof", "sysB", "en", "train", "lab+demo/spoof/audio__sysB__1.wav"),
        (
            "org+model",
            "bonafide",
            "genuine-prompt",
            "en",
            "choose-only",
            "org+model/bonafide/samples__ref.wav",
        ),
        ("org+model", "spoof", "tts-x", "en", "choose-only", "org+model/spoof/samples__out.wav"),
    ]
    durations = [0.5, 0.4, 0.5, 0.3, 0.6, 0.2]
    for row, seconds in zip(index, durations, strict=True):
        info = sf.info(out / row["path"])
        assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
        assert abs(info.frames / 16000 - seconds) < 0.01
        assert float(row["duration_s"]) == pytest.approx(seconds, abs=0.01)
    assert {r["sample_rate_in"] for r in index} == {"24000", "22050", "16000", "8000", "44100"}
    assert {r["decoder"] for r in index} == {"verilive"}


def test_build_refuses_sha256_mismatch(manifest: Path, mirrors: Path, tmp_path: Path) -> None:
    rows = src.read_manifest(manifest)
    bad = dataclasses.replace(rows[2], sha256="0" * 64)
    src.write_manifest(manifest, [*rows[:2], bad, *rows[3:]])
    with pytest.raises(src.SourceError, match=r"sha256 mismatch for lab/demo@[0-9a-f]{12}:audio/sysA/1\.wav"):
        src.build(manifest, mirrors, tmp_path / "stop", log=lambda *a, **k: None)
    assert not (tmp_path / "stop" / "index.csv").exists()

    out = tmp_path / "skip"
    problems = src.build(manifest, mirrors, out, on_mismatch="skip", log=lambda *a, **k: None)
    assert len(problems["mismatch"]) == 1 and problems["mismatch"][0].endswith(":audio/sysA/1.wav")
    with (out / "index.csv").open(newline="") as f:
        paths = [r["repo_path"] for r in csv.DictReader(f)]
    assert "audio/sysA/1.wav" not in paths and len(paths) == 5
    assert not (out / "lab+demo" / "spoof" / "audio__sysA__1.wav").exists()
    # The command line says so and exits 1 (stop is the default).
    assert src.main(["--manifest", str(manifest), "build", "--mirrors", str(mirrors), "--out", str(out)]) == 1


def test_missing_repository_is_reported(manifest: Path, tmp_path: Path, mirrors: Path) -> None:
    shutil.rmtree(mirrors / "org+model")
    problems = src.build(manifest, mirrors, tmp_path / "o", log=lambda *a, **k: None)
    assert problems["missing_repo"] == ["org/model"]


def test_fetch_list(manifest: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert src.main(["--manifest", str(manifest), "fetch-list"]) == 0
    assert capsys.readouterr().out.split() == ["github:lab/demo", "github:org/model"]


def test_committed_manifest_is_valid() -> None:
    rows = src.read_manifest(src.MANIFEST)
    assert rows, "train/antispoof_sources.csv is empty"
    keys = [(r.repo, r.commit, r.path) for r in rows]
    assert len(set(keys)) == len(keys)
    assert len({r.sha256 for r in rows}) == len(rows)
    per_repo: dict[str, int] = {}
    for r in rows:
        per_repo[r.repo] = per_repo.get(r.repo, 0) + 1
    assert max(per_repo.values()) <= src.DEFAULT_CAP
