"""The diarization source builder (issue 48) on a fake source made here: a git repository laid out as the
search tool's ``fetch`` lays it out (``<mirrors>/<owner>+<name>/repo``), holding a generated stereo WAV and
two references (``.segments`` and ``.json``); a build, a file whose sha256 does not match, a reserved
repository; and the committed manifest."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from train import diarization_sources as src

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

RATE = 8000


def _git(cwd: Path, *args: str) -> str:
    res = subprocess.run(
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
        text=True,
    )
    return res.stdout.strip()


@pytest.fixture()
def source(tmp_path: Path) -> tuple[Path, Path]:
    """A mirror folder with one repository ``demo/talks`` and a manifest of its two recordings."""
    work = tmp_path / "mirror" / "demo+talks" / "repo"
    work.mkdir(parents=True)
    _git(work, "init", "-q")
    t = np.arange(int(RATE * 6.0)) / RATE
    a = np.where(t < 3.0, 0.3 * np.sin(2 * np.pi * 220 * t), 0.0)
    b = np.where(t >= 3.2, 0.3 * np.sin(2 * np.pi * 330 * t), 0.0)
    sf.write(work / "call.wav", np.stack([a, b], axis=1).astype(np.float32), RATE, subtype="PCM_16")
    (work / "call.segments").write_text("0.0\t3.0\tagent\n3.0\t3.2\tsilence\n3.2\t6.0\tcaller\n")
    shutil.copy(work / "call.wav", work / "call2.wav")
    ref = {
        "tests": [
            {"audio_file": "call2.wav", "segments": [{"start_sec": 0.0, "end_sec": 3.0, "speaker_tag": 1}]}
        ]
    }
    ref["tests"][0]["segments"].append({"start_sec": 3.2, "end_sec": 6.0, "speaker_tag": 2})
    (work / "ref.json").write_text(json.dumps(ref))
    _git(work, "add", "call.wav", "call.segments", "call2.wav", "ref.json")
    _git(work, "commit", "-q", "-m", "fixture")
    commit = _git(work, "rev-parse", "HEAD")

    def row(path: str, kind: str, rec: str) -> src.Row:
        digest = hashlib.sha256((work / path).read_bytes()).hexdigest()
        return src.Row(
            "demo/talks", commit, path, digest, "MIT", "train", kind, rec, "demo", "phone", "en", "2", ""
        )

    manifest = tmp_path / "manifest.csv"
    rows = [
        row("call.wav", "audio", "demo_call"),
        row("call.segments", "reference", "demo_call"),
        row("call2.wav", "audio", "demo_call2"),
        row("ref.json", "reference", "demo_call2"),
    ]
    src.write_manifest(manifest, rows)
    return tmp_path / "mirror", manifest


def _quiet(*_args, **_kw) -> None:
    pass


def test_build_writes_wav_rttm_and_index(source: tuple[Path, Path], tmp_path: Path) -> None:
    mirrors, manifest = source
    out = tmp_path / "out"
    problems = src.build(manifest, mirrors, out, log=_quiet)
    assert not any(problems.values())
    with (out / "index.csv").open(newline="") as f:
        index = {r["recording"]: r for r in csv.DictReader(f)}
    assert set(index) == {"demo_call", "demo_call2"}
    row = index["demo_call"]
    assert row["speakers"] == "2" and row["setting"] == "phone" and row["sample_rate"] == str(RATE)
    assert abs(float(row["duration_s"]) - 6.0) < 1e-3 and abs(float(row["speech_s"]) - 5.8) < 1e-3
    info = sf.info(out / row["audio"])
    assert (info.channels, info.samplerate, info.subtype) == (1, RATE, "PCM_16")
    for rec in index.values():
        lines = (out / rec["rttm"]).read_text().splitlines()
        assert len(lines) == 2
        fields = [ln.split() for ln in lines]
        assert all(f[0] == "SPEAKER" and f[1] == rec["recording"] for f in fields)
        assert [(float(f[3]), float(f[4])) for f in fields] == [(0.0, 3.0), (3.2, 2.8)]


def test_sha256_mismatch_is_refused(source: tuple[Path, Path], tmp_path: Path) -> None:
    mirrors, manifest = source
    rows = src.read_manifest(manifest)
    rows[0] = dataclasses.replace(rows[0], sha256="0" * 64)
    src.write_manifest(manifest, rows)
    with pytest.raises(src.SourceError, match="sha256 mismatch"):
        src.build(manifest, mirrors, tmp_path / "out", log=_quiet)
    assert (
        src.main(
            ["--manifest", str(manifest), "build", "--mirrors", str(mirrors), "--out", str(tmp_path / "o2")]
        )
        == 1
    )
    problems = src.build(manifest, mirrors, tmp_path / "out3", on_mismatch="skip", log=_quiet)
    assert problems["mismatch"] == ["demo_call"]
    with (tmp_path / "out3" / "index.csv").open(newline="") as f:
        assert [r["recording"] for r in csv.DictReader(f)] == ["demo_call2"]


def test_reserved_repository_is_refused(source: tuple[Path, Path]) -> None:
    _, manifest = source
    rows = src.read_manifest(manifest)
    for name in (
        "pyannote/pyannote-audio",
        "gaspardpetit/verbatim",
        "Resemble-AI/Resemblyzer",
        "someone/saivt-bnews",
    ):
        bad = [dataclasses.replace(r, repo=name) for r in rows]
        with pytest.raises(src.SourceError, match="reserved"):
            src.validate(bad)


def test_committed_manifest_validates() -> None:
    rows = src.read_manifest(src.MANIFEST)
    assert rows, "the manifest is empty"
    for r in rows:
        assert re.fullmatch(r"[0-9a-f]{40}", r.commit) and re.fullmatch(r"[0-9a-f]{64}", r.sha256)
        assert not src.is_reserved(r.repo)
    recordings = src.group_recordings(rows)
    assert all(len(g) == 2 for g in recordings.values())
    with src.MANIFEST.open(newline="", encoding="utf-8") as f:
        assert tuple(next(csv.reader(f))) == src.COLUMNS
