"""Real multi-speaker recordings with reference speaker turns from public repositories (issue 48): a
file-by-file manifest and its builder.

The manifest ``train/diarization_sources.csv`` has one row per file taken from a public GitHub repository,
audio and reference alike:

    repo,commit,path,sha256,licence,role,kind,recording,set,setting,language,speakers,notes

* ``repo`` is ``owner/name``; ``commit`` the full commit the file is read at; ``path`` the file's path in
  that commit; ``sha256`` the hash of the file's bytes as committed.
* ``licence`` is the repository's (or the recordings') licence at that commit; ``role`` is ``eval`` (used
  to choose and evaluate only) or ``train`` (the licence allows training shipped weights: MIT, Apache-2.0,
  BSD, CC-BY, CC0).
* ``kind`` is ``audio`` or ``reference``; a recording has exactly one of each, sharing ``recording`` (an id
  unique in the manifest). ``set`` names the source collection, ``setting`` is one of
  meeting|interview|podcast|phone|broadcast|other, ``language`` an ISO 639-1 code, ``speakers`` the number
  of distinct speakers in the reference (the builder checks it).

References are read in the format their path says: ``.rttm`` (NIST RTTM, SPEAKER lines), ``.segments``
(one turn a line: start, end, label; tab, comma or space separated; labels ``silence``/``music``/
``noise`` are not speakers), ``.json`` (a list of turns, or of test cases holding an ``audio_file`` and its
``segments``; each turn has a start, an end and a speaker under the usual key names: ``start``/
``start_sec``/``begin``, ``end``/``end_sec``/``stop``, ``speaker``/``speaker_tag``/``label``) and
``.TextGrid`` (one interval tier per speaker; non-empty intervals are turns).

The recordings never enter the project repository. To build the evaluation set, fetch each repository
(``python -m train.diarization_sources fetch-list`` prints them; the search tool's ``fetch`` puts a bare
git directory under ``/work/.mirror/owner+name/``), then::

    python -m train.diarization_sources build --mirrors /work/.mirror --out DIR

Every file is read with ``git cat-file`` at its pinned commit and its sha256 checked; a mismatch is refused
(the build stops, exit status 1, the file named; ``--on-mismatch skip`` leaves that recording out and
exits 1 at the end). Audio is decoded with libsndfile, averaged to mono and written as 16-bit PCM WAV **at
its own sample rate** (no resampling, nothing trimmed) to ``DIR/<set>/<recording>.wav``; the reference
becomes ``DIR/<set>/<recording>.rttm`` (file id = recording id, channel 1). A reference whose turns run
more than ``END_TOLERANCE_S`` past the end of the audio, or whose speaker count differs from the
manifest's, is refused. ``DIR/index.csv`` lists recording, set, setting, language, role, licence, audio,
rttm (paths relative to DIR), duration_s, speakers, speech_s, turns, sample_rate.

Repositories named in ``../shared/RESERVED.md`` are refused both in the manifest and by the builder.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

MANIFEST = Path(__file__).with_name("diarization_sources.csv")
COLUMNS = (
    "repo",
    "commit",
    "path",
    "sha256",
    "licence",
    "role",
    "kind",
    "recording",
    "set",
    "setting",
    "language",
    "speakers",
    "notes",
)
INDEX_COLUMNS = (
    "recording",
    "set",
    "setting",
    "language",
    "role",
    "licence",
    "audio",
    "rttm",
    "duration_s",
    "speakers",
    "speech_s",
    "turns",
    "sample_rate",
    "repo",
    "commit",
)
ROLES = ("eval", "train")
KINDS = ("audio", "reference")
SETTINGS = ("meeting", "interview", "podcast", "phone", "broadcast", "other")
TRAIN_LICENCES = ("MIT", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "CC-BY-4.0", "CC-BY-3.0", "CC0-1.0")
AUDIO_EXTENSIONS = (".wav", ".flac", ".mp3", ".ogg", ".opus")
REFERENCE_EXTENSIONS = (".rttm", ".segments", ".json", ".textgrid")
NON_SPEAKER_LABELS = frozenset({"silence", "sil", "music", "noise", "nonspeech", "non-speech", ""})
END_TOLERANCE_S = 1.0

# ../shared/RESERVED.md (voice, and the face owners for good measure): held out for independent
# evaluation; nothing of theirs may enter the manifest or be read by the builder.
RESERVED_OWNERS = (
    "doubangotelecom",
    "faceonlive",
    "kby-ai",
    "recognito-vision",
    "miniailive",
    "hyperinspire",
    "nhtlongcs",
    "khanhngit",
    "trainingdata-datamarket",
)
RESERVED_REPOS = (
    "din05aur/audio_deepfake_detection",
    "nmalameri/elec5305-project-510044280",
    "ditto-tts/ditto-tts.github.io",
    "aijianiula0601/flowcpcvc",
    "generspeech/generspeech.github.io",
    "lvc-vc/lvc-vc-demo",
    "speechresearch/speechresearch.github.io",
    "kallavinka8045/icassp2021",
    "resemble-ai/resemblyzer",
    "pyannote/pyannote-audio",
    "gaspardpetit/verbatim",
    "junxue-tech/rtcfake-demo",
    "e1tts/e1tts.github.io",
    "alberthsu0509/123456.github.io",
    "alberthsu0509/fabyol",
    "berkeley-speech-group/rt-vc",
    "14484anon/demo14484",
)
# Data reserved in any repository: a repository whose name says it holds it is refused too.
RESERVED_NAME_PARTS = ("saivt", "rtcfake", "fake-or-real", "celeba-spoof")


class SourceError(Exception):
    """A manifest row or recording that cannot be built (sha256 mismatch, missing blob, bad reference)."""


def is_reserved(repo: str) -> bool:
    low = repo.lower()
    owner = low.split("/", 1)[0]
    return owner in RESERVED_OWNERS or low in RESERVED_REPOS or any(p in low for p in RESERVED_NAME_PARTS)


@dataclass(frozen=True)
class Row:
    repo: str
    commit: str
    path: str
    sha256: str
    licence: str
    role: str
    kind: str
    recording: str
    set: str
    setting: str
    language: str
    speakers: str
    notes: str

    def as_dict(self) -> dict[str, str]:
        return {c: getattr(self, c) for c in COLUMNS}


# --- manifest ---


def read_manifest(path: Path) -> list[Row]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise SourceError(f"{path}: columns must be {','.join(COLUMNS)}, got {reader.fieldnames}")
        rows = [Row(**{c: r[c] for c in COLUMNS}) for r in reader]
    validate(rows)
    return rows


def write_manifest(path: Path, rows: Iterable[Row]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow(r.as_dict())


def validate_row(r: Row) -> None:
    where = f"{r.repo}:{r.path}"
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", r.repo):
        raise SourceError(f"bad repo {r.repo!r} (want owner/name)")
    if is_reserved(r.repo):
        raise SourceError(f"{r.repo} is reserved for independent evaluation (RESERVED.md)")
    if not re.fullmatch(r"[0-9a-f]{40}", r.commit):
        raise SourceError(f"{where}: commit must be 40 hex digits, got {r.commit!r}")
    if not re.fullmatch(r"[0-9a-f]{64}", r.sha256):
        raise SourceError(f"{where}: sha256 must be 64 hex digits, got {r.sha256!r}")
    if r.role not in ROLES:
        raise SourceError(f"{where}: role must be one of {ROLES}, got {r.role!r}")
    if r.role == "train" and r.licence not in TRAIN_LICENCES:
        raise SourceError(f"{where}: role train needs one of {TRAIN_LICENCES}, licence is {r.licence!r}")
    if r.kind not in KINDS:
        raise SourceError(f"{where}: kind must be one of {KINDS}, got {r.kind!r}")
    exts = AUDIO_EXTENSIONS if r.kind == "audio" else REFERENCE_EXTENSIONS
    if not r.path.lower().endswith(exts):
        raise SourceError(f"{where}: a {r.kind} file must end with one of {exts}")
    if r.setting not in SETTINGS:
        raise SourceError(f"{where}: setting must be one of {SETTINGS}, got {r.setting!r}")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", r.recording) or not re.fullmatch(r"[A-Za-z0-9_.-]+", r.set):
        raise SourceError(f"{where}: recording and set must be [A-Za-z0-9_.-]+")
    if not r.speakers.isdigit() or int(r.speakers) < 1:
        raise SourceError(f"{where}: speakers must be a positive integer, got {r.speakers!r}")
    if not r.language or not r.licence:
        raise SourceError(f"{where}: language and licence must not be empty")


def validate(rows: list[Row]) -> None:
    """Every row valid; each recording has one audio and one reference row that agree on their metadata."""
    for r in rows:
        validate_row(r)
    seen: set[tuple[str, str, str]] = set()
    for r in rows:
        key = (r.repo, r.commit, r.path)
        if key in seen:
            raise SourceError(f"{r.repo}:{r.path} is listed twice")
        seen.add(key)
    for rec, group in group_recordings(rows).items():
        kinds = sorted(r.kind for r in group)
        if kinds != ["audio", "reference"]:
            raise SourceError(f"recording {rec}: needs one audio and one reference row, has {kinds}")
        a, b = group
        for c in ("repo", "commit", "licence", "role", "set", "setting", "language", "speakers"):
            if getattr(a, c) != getattr(b, c):
                raise SourceError(f"recording {rec}: audio and reference rows differ in {c}")


def group_recordings(rows: Iterable[Row]) -> dict[str, list[Row]]:
    groups: dict[str, list[Row]] = {}
    for r in rows:
        groups.setdefault(r.recording, []).append(r)
    return groups


# --- git access ---


def find_git_dir(mirrors: Path, repo: str) -> Path | None:
    """The git directory of ``owner/name`` under ``mirrors``: ``mirrors/owner+name`` itself or a directory
    up to two levels below it holding ``HEAD`` and ``objects`` (``fetch`` uses ``owner+name/repo``)."""
    base = mirrors / repo.replace("/", "+")
    if not base.is_dir():
        return None
    level1 = sorted(p for p in base.iterdir() if p.is_dir())
    level2 = sorted(q for p in level1 for q in p.iterdir() if q.is_dir())
    for c in [base, *level1, *level2]:
        if (c / "HEAD").is_file() and (c / "objects").is_dir():
            return c
    return None


def read_blob(git_dir: Path, commit: str, path: str) -> bytes | None:
    res = subprocess.run(
        ["git", f"--git-dir={git_dir}", "cat-file", "blob", f"{commit}:{path}"],
        capture_output=True,
        check=False,
    )
    return res.stdout if res.returncode == 0 else None


# --- references ---


@dataclass(frozen=True)
class Turn:
    start: float
    end: float
    speaker: str


def _first(d: dict, keys: tuple[str, ...]) -> object:
    for k in keys:
        if k in d:
            return d[k]
    raise KeyError(keys[0])


def _json_turns(obj: object, audio_name: str) -> list[Turn]:
    starts, ends, spks = (
        ("start", "start_sec", "begin", "onset"),
        ("end", "end_sec", "stop", "offset"),
        (
            "speaker",
            "speaker_tag",
            "speaker_id",
            "label",
        ),
    )
    if isinstance(obj, dict):
        # A test case naming its audio file: take the one for this recording's audio.
        if "segments" in obj and (obj.get("audio_file") in (None, audio_name)):
            return _json_turns(obj["segments"], audio_name)
        for v in obj.values():
            if isinstance(v, (dict, list)):
                found = _json_turns(v, audio_name)
                if found:
                    return found
        return []
    if isinstance(obj, list):
        if obj and all(isinstance(x, dict) and any(k in x for k in starts) for x in obj):
            return [Turn(float(_first(x, starts)), float(_first(x, ends)), str(_first(x, spks))) for x in obj]
        for v in obj:
            found = _json_turns(v, audio_name)
            if found:
                return found
    return []


def _textgrid_turns(text: str) -> list[Turn]:
    turns: list[Turn] = []
    for tier in re.split(r"item \[\d+\]:", text)[1:]:
        name = re.search(r'name = "([^"]*)"', tier)
        if not name or 'class = "IntervalTier"' not in tier:
            continue
        for xmin, xmax, label in re.findall(
            r"xmin = ([0-9.eE+-]+)\s+xmax = ([0-9.eE+-]+)\s+text = \"((?:[^\"]|\"\")*)\"", tier
        ):
            if label.strip():
                turns.append(Turn(float(xmin), float(xmax), name.group(1)))
    return turns


def parse_reference(path: str, data: bytes, audio_name: str) -> list[Turn]:
    """Speaker turns of a reference file; the format follows the file's extension."""
    text = data.decode("utf-8-sig")
    low = path.lower()
    turns: list[Turn] = []
    if low.endswith(".rttm"):
        for line in text.splitlines():
            f = line.split()
            if len(f) >= 8 and f[0] == "SPEAKER":
                start, dur = float(f[3]), float(f[4])
                turns.append(Turn(start, start + dur, f[7]))
    elif low.endswith(".segments"):
        for line in text.splitlines():
            f = [x for x in re.split(r"[\t, ]+", line.strip()) if x]
            if len(f) >= 3 and f[2].lower() not in NON_SPEAKER_LABELS:
                turns.append(Turn(float(f[0]), float(f[1]), f[2]))
    elif low.endswith(".json"):
        turns = _json_turns(json.loads(text), audio_name)
    elif low.endswith(".textgrid"):
        turns = _textgrid_turns(text)
    else:
        raise SourceError(f"{path}: unknown reference format")
    turns = [t for t in turns if t.end > t.start]
    if not turns:
        raise SourceError(f"{path}: no speaker turns found")
    return sorted(turns, key=lambda t: (t.start, t.end, t.speaker))


def to_rttm(uri: str, turns: list[Turn]) -> str:
    lines = []
    for t in turns:
        spk = re.sub(r"\s+", "_", t.speaker)
        lines.append(f"SPEAKER {uri} 1 {t.start:.3f} {t.end - t.start:.3f} <NA> <NA> {spk} <NA> <NA>\n")
    return "".join(lines)


def speech_seconds(turns: list[Turn]) -> float:
    """Length of the union of the turns (overlap counted once)."""
    total, cur_s, cur_e = 0.0, None, None
    for t in sorted(turns, key=lambda t: t.start):
        if cur_e is None or t.start > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = t.start, t.end
        else:
            cur_e = max(cur_e, t.end)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


# --- build ---


def decode_mono(data: bytes) -> tuple[np.ndarray, int]:
    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as exc:  # soundfile raises several types; any of them means "cannot decode"
        raise SourceError(f"cannot decode: {exc}") from exc
    mono = np.clip(np.nan_to_num(samples.mean(axis=1)), -1.0, 1.0)
    if mono.size == 0:
        raise SourceError("no samples")
    return mono, int(rate)


def _checked(git_dir: Path, r: Row) -> bytes:
    if is_reserved(r.repo):
        raise SourceError(f"{r.repo} is reserved for independent evaluation (RESERVED.md); refused")
    where = f"{r.repo}@{r.commit[:12]}:{r.path}"
    data = read_blob(git_dir, r.commit, r.path)
    if data is None:
        raise SourceError(f"{where}: no such file at that commit (or not in the snapshot)")
    digest = hashlib.sha256(data).hexdigest()
    if digest != r.sha256:
        raise SourceError(f"sha256 mismatch for {where}: manifest {r.sha256}, file {digest} (refused)")
    return data


def build(
    manifest: Path,
    mirrors: Path,
    out: Path,
    *,
    on_mismatch: str = "stop",
    log=print,
) -> dict[str, list[str]]:
    """Build the evaluation set; returns the problems: ``mismatch``, ``missing_repo``, ``bad`` (lists).
    Raises :class:`SourceError` on the first sha256 mismatch when ``on_mismatch == 'stop'``."""
    if on_mismatch not in ("stop", "skip"):
        raise ValueError("on_mismatch must be 'stop' or 'skip'")
    rows = read_manifest(manifest)
    problems: dict[str, list[str]] = {"mismatch": [], "missing_repo": [], "bad": []}
    index: list[dict[str, str]] = []
    out.mkdir(parents=True, exist_ok=True)
    for rec, group in group_recordings(rows).items():
        audio_row = next(r for r in group if r.kind == "audio")
        ref_row = next(r for r in group if r.kind == "reference")
        if is_reserved(audio_row.repo):
            raise SourceError(
                f"{audio_row.repo} is reserved for independent evaluation (RESERVED.md); refused"
            )
        git_dir = find_git_dir(mirrors, audio_row.repo)
        if git_dir is None:
            if audio_row.repo not in problems["missing_repo"]:
                problems["missing_repo"].append(audio_row.repo)
                log(
                    f"skip {audio_row.repo}: not under {mirrors} (fetch github:{audio_row.repo})",
                    file=sys.stderr,
                )
            continue
        try:
            audio_data = _checked(git_dir, audio_row)
            ref_data = _checked(git_dir, ref_row)
        except SourceError as exc:
            if "sha256 mismatch" in str(exc):
                if on_mismatch == "stop":
                    raise
                problems["mismatch"].append(rec)
            else:
                problems["bad"].append(rec)
            log(f"skip {rec}: {exc}", file=sys.stderr)
            continue
        try:
            mono, rate = decode_mono(audio_data)
            duration = mono.size / rate
            turns = parse_reference(ref_row.path, ref_data, audio_row.path.rsplit("/", 1)[-1])
            speakers = sorted({t.speaker for t in turns})
            if len(speakers) != int(ref_row.speakers):
                raise SourceError(f"reference has {len(speakers)} speakers, manifest says {ref_row.speakers}")
            last = max(t.end for t in turns)
            if last > duration + END_TOLERANCE_S:
                raise SourceError(f"reference runs to {last:.2f} s, audio lasts {duration:.2f} s")
        except SourceError as exc:
            problems["bad"].append(rec)
            log(f"skip {rec}: {exc}", file=sys.stderr)
            continue
        turns = [Turn(t.start, min(t.end, duration), t.speaker) for t in turns if t.start < duration]
        wav_rel = Path(audio_row.set) / f"{rec}.wav"
        rttm_rel = Path(audio_row.set) / f"{rec}.rttm"
        (out / wav_rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(out / wav_rel, mono, rate, subtype="PCM_16")
        (out / rttm_rel).write_text(to_rttm(rec, turns), encoding="utf-8")
        index.append(
            {
                "recording": rec,
                "set": audio_row.set,
                "setting": audio_row.setting,
                "language": audio_row.language,
                "role": audio_row.role,
                "licence": audio_row.licence,
                "audio": wav_rel.as_posix(),
                "rttm": rttm_rel.as_posix(),
                "duration_s": f"{duration:.3f}",
                "speakers": str(len(speakers)),
                "speech_s": f"{speech_seconds(turns):.3f}",
                "turns": str(len(turns)),
                "sample_rate": str(rate),
                "repo": audio_row.repo,
                "commit": audio_row.commit,
            }
        )
    with (out / "index.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=INDEX_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(index)
    hours = sum(float(i["duration_s"]) for i in index) / 3600
    log(f"wrote {len(index)} recordings ({hours * 60:.1f} min) to {out}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m train.diarization_sources", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--manifest", type=Path, default=MANIFEST)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write WAV + RTTM per recording and index.csv from fetched repositories")
    b.add_argument("--mirrors", type=Path, required=True, help="folder holding owner+name/ git directories")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--on-mismatch", choices=("stop", "skip"), default="stop")
    sub.add_parser("fetch-list", help="print github:owner/name for every repository in the manifest")
    sub.add_parser("check", help="validate the manifest")
    args = ap.parse_args(argv)
    try:
        rows = read_manifest(args.manifest)
        if args.cmd == "fetch-list":
            for repo in dict.fromkeys(r.repo for r in rows):
                print(f"github:{repo}")
            return 0
        if args.cmd == "check":
            print(f"{len(rows)} rows, {len(group_recordings(rows))} recordings: ok")
            return 0
        problems = build(args.manifest, args.mirrors, args.out, on_mismatch=args.on_mismatch)
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 1 if problems["mismatch"] or problems["bad"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
