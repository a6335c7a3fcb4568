"""Real face photos for presentation-attack detection (issue 47): a file-by-file manifest and its builder.

The manifest ``train/face_pad_sources.csv`` has one row per image (or per video frame) taken from a public
GitHub repository (a face anti-spoofing repository's live / spoof samples, a face library's test photos, a
small selfie data set, ...):

    repo,commit,path,sha256,licence,role,label,attack_type,camera,collection,frame,notes

* ``repo`` is ``owner/name``; ``commit`` the full commit the file is read at; ``path`` the file's path in
  that commit; ``sha256`` the hash of the file's bytes as committed.
* ``licence`` is the repository's licence at that commit (``none`` when it has no licence file).
* ``role`` is ``train`` (the licence allows training shipped weights: MIT, Apache-2.0, BSD, CC-BY, CC0,
  public domain) or ``choose-only`` (may only be used to choose, calibrate and evaluate).
* ``label`` is ``live`` or ``attack``; ``attack_type`` is ``none`` for live and one of ``print``,
  ``replay``, ``paper_mask``, ``mask_3d``, ``cutout``, ``mannequin``, ``other`` for attacks.
* ``camera`` is ``webcam``, ``phone``, ``studio``, ``dslr``, ``video-frame`` or ``unknown``.
* ``collection`` is a short id (usually ``owner+name``); it is the unit for leave-one-collection-out
  evaluation, so two folders of one repository that come from different capture set-ups may get two ids.
* ``frame`` is the 0-based frame index when ``path`` is a video, empty for images.

The photos never enter the project repository. To build the data set, bring each repository onto the
machine (the search tool's ``fetch`` puts a bare git directory under ``/work/.mirror/owner+name/``;
``python -m train.face_pad_sources fetch-list`` prints the list), then::

    python -m train.face_pad_sources build --mirrors /work/.mirror --out DIR

which reads every file at its pinned commit, checks its sha256, decodes it with OpenCV and writes
``DIR/<collection>/<label>/<path with / as __>`` and ``DIR/index.csv``. JPEG sources are written with their
original bytes (``.jpg``); everything else (PNG, BMP, WebP, video frames) as lossless PNG. Nothing is
re-encoded to JPEG because a second compression pass is itself a cue a PAD model can learn, and it would
differ between collections. A file whose bytes do not match the manifest's sha256 is refused: by default
the build stops there (exit status 1, the file named); with ``--on-mismatch skip`` it is left out, named on
stderr, and the build goes on (exit status 1 at the end all the same). Files OpenCV cannot decode are left
out and listed; repositories missing from the mirror folder are listed and skipped.

``add`` is how the manifest is written: it scans a fetched repository at a commit for images (or videos,
with ``--frames``) matching glob patterns and appends rows (sha256 computed from the blobs), at most
``--max`` new files and at most ``--cap`` rows per repository in all, spread evenly over the folders found.
Files already in the manifest or in the shared face data (same sha256) are left out.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

MANIFEST = Path(__file__).with_name("face_pad_sources.csv")
COLUMNS = (
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
    "frame",
    "notes",
)
INDEX_COLUMNS = (
    "collection",
    "label",
    "attack_type",
    "camera",
    "role",
    "path",
    "repo",
    "commit",
    "src_path",
    "sha256",
    "frame",
    "width",
    "height",
)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
VIDEO_EXTENSIONS = (".mp4", ".avi", ".mov", ".mkv", ".webm")
# "occluded" (a live face covered by a mask, scarf, sunglasses or hand) is the label of the occlusion
# manifest (train/face_occlusion_sources.csv); its kind of cover goes in attack_type.
LABELS = ("live", "attack", "occluded")
ATTACK_TYPES = ("none", "print", "replay", "paper_mask", "mask_3d", "cutout", "mannequin", "other")
OCCLUSION_TYPES = ("mask", "scarf", "sunglasses", "hand", "other")
CAMERAS = ("webcam", "phone", "studio", "dslr", "unknown", "video-frame")
ROLES = ("train", "choose-only")
# Licences whose terms allow training weights that are then shipped; anything else is choose-only.
TRAIN_LICENCES = (
    "MIT",
    "Apache-2.0",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "CC-BY-4.0",
    "CC0-1.0",
    "public-domain",
)
DEFAULT_CAP = 60
MIN_SIDE = 48  # smaller images are icons or landmark crops, not usable face photos
SHARED_FACE = Path(__file__).resolve().parents[2] / "shared" / "data" / "face"

# RESERVED.md (face): held out for independent evaluation; nothing of theirs may enter the manifest.
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
    "zeusees/hyperfas",
    "serengil/deepface",
    "jotriever/xai-face-anti-spoofing",
    "debruine/webmorphr.stim",
    "dracarys261/spoofingdetection",
    "rounakdeepsingh/face_anti_spoofing_system",
    "davisking/dlib",
    "zhangyuanhan/celeba-spoof",
    "zubaircrackscode/anit-spoofing",
    "krzysiek354/python_face_detection",
    "lestari15/cnn-face-detection",
    "georgeretsi/smirk",
    "opentalker/sadtalker",
    "opentalker/video-retalking",
    "yoyo-nb/thin-plate-spline-motion-model",
    "filby89/spectre",
    "rizkiarm/lipnet",
)

Log = Callable[..., None]


class SourceError(Exception):
    """A manifest row that cannot be built or added (sha256 mismatch, missing blob, bad row)."""


@dataclass(frozen=True)
class Row:
    repo: str
    commit: str
    path: str
    sha256: str
    licence: str
    role: str
    label: str
    attack_type: str
    camera: str
    collection: str
    frame: str
    notes: str

    def as_dict(self) -> dict[str, str]:
        return {c: getattr(self, c) for c in COLUMNS}


def is_reserved(repo: str) -> bool:
    owner = repo.split("/", 1)[0].lower()
    return owner in RESERVED_OWNERS or repo.lower() in RESERVED_REPOS


# --- manifest ---


def read_manifest(path: Path) -> list[Row]:
    if not path.exists():
        return []
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise SourceError(f"{path}: columns must be {','.join(COLUMNS)}, got {reader.fieldnames}")
        rows = [Row(**{c: r[c] for c in COLUMNS}) for r in reader]
    for r in rows:
        validate_row(r)
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
    if r.label not in LABELS:
        raise SourceError(f"{where}: label must be one of {LABELS}, got {r.label!r}")
    kinds = OCCLUSION_TYPES if r.label == "occluded" else ATTACK_TYPES
    if r.attack_type not in kinds or (r.label == "live") != (r.attack_type == "none"):
        raise SourceError(f"{where}: attack_type {r.attack_type!r} does not fit label {r.label!r}")
    if r.camera not in CAMERAS:
        raise SourceError(f"{where}: camera must be one of {CAMERAS}, got {r.camera!r}")
    if r.role not in ROLES:
        raise SourceError(f"{where}: role must be one of {ROLES}, got {r.role!r}")
    if r.role == "train" and r.licence not in TRAIN_LICENCES:
        raise SourceError(f"{where}: role train needs one of {TRAIN_LICENCES}, licence is {r.licence!r}")
    if not r.licence or not re.fullmatch(r"[A-Za-z0-9_.+-]+", r.collection):
        raise SourceError(f"{where}: licence must not be empty, collection must be a short id")
    lower = r.path.lower()
    if r.frame:
        if not lower.endswith(VIDEO_EXTENSIONS) or not r.frame.isdigit():
            raise SourceError(f"{where}: a frame index needs a video path ({', '.join(VIDEO_EXTENSIONS)})")
    elif not lower.endswith(IMAGE_EXTENSIONS):
        raise SourceError(f"{where}: not an image ({', '.join(IMAGE_EXTENSIONS)})")


# --- git access ---


def find_git_dir(mirrors: Path, repo: str) -> Path | None:
    """The bare git directory of ``owner/name`` under ``mirrors``: ``mirrors/owner+name`` itself or a
    directory below it (depth 2) that holds ``HEAD`` and ``objects``, as ``fetch`` lays them out."""
    base = mirrors / repo.replace("/", "+")
    if not base.is_dir():
        return None
    candidates = [base, *sorted(p for p in base.iterdir() if p.is_dir())]
    candidates += sorted(q for p in candidates[1:] for q in p.iterdir() if q.is_dir())
    for c in candidates:
        if (c / "HEAD").is_file() and (c / "objects").is_dir():
            return c
    return None


def _git(git_dir: Path, *args: str) -> bytes:
    res = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, check=False)
    if res.returncode != 0:
        raise SourceError(f"git {' '.join(args)} in {git_dir}: {res.stderr.decode(errors='replace').strip()}")
    return res.stdout


def resolve_commit(git_dir: Path, ref: str) -> str:
    return _git(git_dir, "rev-parse", "--verify", f"{ref}^{{commit}}").decode().strip()


def list_files(git_dir: Path, commit: str, extensions: tuple[str, ...]) -> list[str]:
    out = _git(git_dir, "ls-tree", "-r", "-z", "--name-only", commit)
    names = [n for n in out.decode("utf-8", errors="surrogateescape").split("\0") if n]
    return sorted(n for n in names if n.lower().endswith(extensions))


class BlobReader:
    """Reads many blobs through one ``git cat-file --batch`` process."""

    def __init__(self, git_dir: Path) -> None:
        self._proc = subprocess.Popen(
            ["git", f"--git-dir={git_dir}", "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def read(self, commit: str, path: str) -> bytes | None:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(f"{commit}:{path}\n".encode("utf-8", errors="surrogateescape"))
        self._proc.stdin.flush()
        header = self._proc.stdout.readline().decode().split()
        if len(header) < 3 or header[1] != "blob":
            return None
        data = self._proc.stdout.read(int(header[2]))
        self._proc.stdout.read(1)  # trailing newline
        return data

    def close(self) -> None:
        if self._proc.stdin:
            self._proc.stdin.close()
        self._proc.wait()

    def __enter__(self) -> BlobReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- decoding ---


def decode_image(data: bytes) -> np.ndarray:
    """BGR uint8 image (alpha dropped, 16-bit scaled down by OpenCV); :class:`SourceError` if undecodable."""
    try:
        img = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    except cv2.error as exc:  # raised, not returned as None, for an empty buffer
        raise SourceError(f"OpenCV cannot decode it ({exc.err})") from exc
    if img is None or img.size == 0:
        raise SourceError("OpenCV cannot decode it")
    return img


def _with_video(data: bytes, suffix: str, fn: Callable[[cv2.VideoCapture], object]) -> object:
    # OpenCV reads videos only from a file name, so the blob goes through a temporary file.
    fd, name = tempfile.mkstemp(suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        cap = cv2.VideoCapture(name)
        try:
            if not cap.isOpened():
                raise SourceError("OpenCV cannot open the video")
            return fn(cap)
        finally:
            cap.release()
    finally:
        os.unlink(name)


def video_frame_count(data: bytes, suffix: str) -> int:
    def count(cap: cv2.VideoCapture) -> int:
        n = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
        if n > 0:
            return n
        n = 0  # container without a frame count: read through it
        while cap.grab():
            n += 1
        return n

    return int(_with_video(data, suffix, count))  # type: ignore[call-overload]


def decode_video_frame(data: bytes, suffix: str, index: int) -> np.ndarray:
    """Frame ``index`` (0-based), read sequentially: seeking is not frame-exact for every codec."""

    def grab(cap: cv2.VideoCapture) -> np.ndarray:
        for _ in range(index):
            if not cap.grab():
                raise SourceError(f"video has fewer than {index + 1} frames")
        ok, img = cap.read()
        if not ok or img is None:
            raise SourceError(f"cannot read frame {index}")
        return img

    out = _with_video(data, suffix, grab)
    assert isinstance(out, np.ndarray)
    return out


def out_name(path: str, frame: str, keep_jpeg: bool) -> str:
    stem = path.rsplit(".", 1)[0] + (f"__f{int(frame):06d}" if frame else "")
    return re.sub(r"[^A-Za-z0-9._+-]", "_", stem.replace("/", "__")) + (".jpg" if keep_jpeg else ".png")


# --- build ---


def build(
    manifest: Path,
    mirrors: Path,
    out: Path,
    *,
    on_mismatch: str = "stop",
    repos: set[str] | None = None,
    log: Log = print,
) -> dict[str, list[str]]:
    """Build the data set; returns the problems found: ``mismatch``, ``missing_repo``, ``missing_file``,
    ``undecodable`` (lists of ``repo:path`` or repo names). Raises :class:`SourceError` on the first sha256
    mismatch when ``on_mismatch == 'stop'``."""
    if on_mismatch not in ("stop", "skip"):
        raise ValueError("on_mismatch must be 'stop' or 'skip'")
    rows = [r for r in read_manifest(manifest) if repos is None or r.repo in repos]
    problems: dict[str, list[str]] = {
        "mismatch": [],
        "missing_repo": [],
        "missing_file": [],
        "undecodable": [],
    }
    out.mkdir(parents=True, exist_ok=True)
    index: list[dict[str, str]] = []
    by_repo: dict[str, list[Row]] = {}
    for r in rows:
        by_repo.setdefault(r.repo, []).append(r)
    for repo, repo_rows in by_repo.items():
        git_dir = find_git_dir(mirrors, repo)
        if git_dir is None:
            problems["missing_repo"].append(repo)
            log(f"skip {repo}: not under {mirrors} (fetch github:{repo})", file=sys.stderr)
            continue
        with BlobReader(git_dir) as blobs:
            for r in repo_rows:
                where = f"{r.repo}@{r.commit[:12]}:{r.path}" + (f"#{r.frame}" if r.frame else "")
                data = blobs.read(r.commit, r.path)
                if data is None:
                    problems["missing_file"].append(where)
                    log(f"skip {where}: no such file at that commit", file=sys.stderr)
                    continue
                digest = hashlib.sha256(data).hexdigest()
                if digest != r.sha256:
                    msg = f"sha256 mismatch for {where}: manifest {r.sha256}, file {digest}"
                    if on_mismatch == "stop":
                        raise SourceError(msg + " (refused; build stopped)")
                    problems["mismatch"].append(where)
                    log(msg + " (refused; skipped)", file=sys.stderr)
                    continue
                try:
                    if r.frame:
                        img = decode_video_frame(data, Path(r.path).suffix, int(r.frame))
                    else:
                        img = decode_image(data)
                except SourceError as exc:
                    problems["undecodable"].append(where)
                    log(f"skip {where}: {exc}", file=sys.stderr)
                    continue
                keep_jpeg = not r.frame and r.path.lower().endswith((".jpg", ".jpeg"))
                rel = Path(r.collection) / r.label / out_name(r.path, r.frame, keep_jpeg)
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                if keep_jpeg:
                    (out / rel).write_bytes(data)
                elif not cv2.imwrite(str(out / rel), img):
                    raise SourceError(f"cannot write {out / rel}")
                index.append(
                    {
                        "collection": r.collection,
                        "label": r.label,
                        "attack_type": r.attack_type,
                        "camera": r.camera,
                        "role": r.role,
                        "path": rel.as_posix(),
                        "repo": r.repo,
                        "commit": r.commit,
                        "src_path": r.path,
                        "sha256": r.sha256,
                        "frame": r.frame,
                        "width": str(img.shape[1]),
                        "height": str(img.shape[0]),
                    }
                )
    with (out / "index.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=INDEX_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(index)
    log(f"wrote {len(index)} images to {out} ({len(rows) - len(index)} of {len(rows)} rows left out)")
    return problems


# --- add ---


def spread(groups: dict[str, list[str]], n: int) -> list[tuple[str, str]]:
    """Up to ``n`` (group, item) pairs: quotas filled round robin over the groups, each group's picks
    evenly spaced over its sorted items (deterministic)."""
    keys = sorted(groups)
    n = min(n, sum(len(v) for v in groups.values()))
    quota = dict.fromkeys(keys, 0)
    while sum(quota.values()) < n:
        for k in keys:
            if sum(quota.values()) < n and quota[k] < len(groups[k]):
                quota[k] += 1
    picks: list[tuple[str, str]] = []
    for k in keys:
        items, q = groups[k], quota[k]
        if q:
            idx = np.unique(np.round(np.linspace(0, len(items) - 1, q)).astype(int))
            picks += [(k, items[i]) for i in idx]
    return picks


def add(
    manifest: Path,
    mirrors: Path,
    repo: str,
    *,
    ref: str,
    include: list[str],
    exclude: list[str],
    label: str,
    attack_type: str,
    camera: str,
    licence: str,
    role: str,
    collection: str | None = None,
    notes: str = "",
    frames: int = 0,
    max_new: int = 30,
    cap: int = DEFAULT_CAP,
    min_side: int = MIN_SIDE,
    known_sha256: set[str] | None = None,
    log: Log = print,
) -> list[Row]:
    """Append rows for the images of ``repo`` at ``ref`` whose paths match ``include`` (globs) and none of
    ``exclude``; with ``frames > 0``, rows for that many evenly spaced frames of each matching video
    instead. Images already in the manifest (same sha256, any repository), in ``known_sha256``, undecodable
    or smaller than ``min_side`` are left out. Returns the rows added."""
    if is_reserved(repo):
        raise SourceError(f"{repo} is reserved for independent evaluation (RESERVED.md)")
    git_dir = find_git_dir(mirrors, repo)
    if git_dir is None:
        raise SourceError(f"{repo} is not under {mirrors}; fetch github:{repo} first")
    commit = resolve_commit(git_dir, ref)
    rows = read_manifest(manifest)
    seen = {r.sha256 for r in rows if not r.frame} | (known_sha256 or set())
    room = cap - sum(1 for r in rows if r.repo == repo)
    if room <= 0:
        log(f"{repo} already has {cap} rows (the per-repository cap); nothing added")
        return []
    exts = VIDEO_EXTENSIONS if frames else IMAGE_EXTENSIONS
    paths = [
        p
        for p in list_files(git_dir, commit, exts)
        if any(fnmatch.fnmatch(p, g) for g in include) and not any(fnmatch.fnmatch(p, g) for g in exclude)
    ]
    taken_frames = {(r.sha256, r.frame) for r in rows if r.frame}
    hashes: dict[str, str] = {}
    groups: dict[str, list[str]] = {}  # parent folder -> items (path, or path#frame for videos)
    skipped = {"missing": 0, "duplicate": 0, "undecodable": 0, "small": 0}
    with BlobReader(git_dir) as blobs:
        for p in paths:
            data = blobs.read(commit, p)
            if not data:  # absent from the snapshot (large files are often left out) or empty
                skipped["missing"] += 1
                continue
            h = hashlib.sha256(data).hexdigest()
            if (not frames and h in seen) or h in hashes.values():
                skipped["duplicate"] += 1
                continue
            try:
                if frames:
                    n = video_frame_count(data, Path(p).suffix)
                    img = decode_video_frame(data, Path(p).suffix, 0)
                else:
                    img = decode_image(data)
            except SourceError:
                skipped["undecodable"] += 1
                continue
            if min(img.shape[:2]) < min_side:
                skipped["small"] += 1
                continue
            hashes[p] = h
            parent = p.rsplit("/", 1)[0] if "/" in p else "."
            if frames:
                # Frames from near the start, middle and end: a few per video, never neighbours.
                idx = np.unique(np.round(np.linspace(0, max(n - 2, 0), min(frames, n))).astype(int))
                groups.setdefault(p, []).extend(f"{p}#{i}" for i in idx if (h, str(i)) not in taken_frames)
            else:
                groups.setdefault(parent, []).append(p)
    new: list[Row] = []
    for _, item in spread({k: v for k, v in groups.items() if v}, min(max_new, room)):
        path, _, frame = item.partition("#")
        row = Row(
            repo,
            commit,
            path,
            hashes[path],
            licence,
            role,
            label,
            attack_type,
            camera,
            collection or repo.replace("/", "+"),
            frame,
            notes,
        )
        validate_row(row)
        new.append(row)
    write_manifest(manifest, [*rows, *new])
    log(
        f"{repo}@{commit[:12]}: {len(paths)} matching, left out {skipped}, added {len(new)} "
        f"({label}/{attack_type}, {len({r.path for r in new})} files)"
    )
    return new


def shared_sha256(shared_face: Path) -> set[str]:
    """sha256 of every file under the shared face data, and of the source files its labels.csv name
    (``sha256`` / ``source_sha256`` columns), so that ``add`` does not take them twice."""
    out: set[str] = set()
    if not shared_face.is_dir():
        return out
    for p in shared_face.rglob("*"):
        if p.is_file():
            out.add(hashlib.sha256(p.read_bytes()).hexdigest())
            if p.name == "labels.csv":
                with p.open(newline="", encoding="utf-8") as f:
                    for r in csv.DictReader(f):
                        for col in ("sha256", "source_sha256"):
                            h = (r.get(col) or "").strip().lower()
                            if re.fullmatch(r"[0-9a-f]{64}", h):
                                out.add(h)
    return out


# --- command line ---


def _repos(rows: Iterable[Row]) -> Iterator[str]:
    seen: set[str] = set()
    for r in rows:
        if r.repo not in seen:
            seen.add(r.repo)
            yield r.repo


def summary(rows: list[Row]) -> list[str]:
    """One line per collection: role, live count, attack counts by type, cameras, repository."""
    lines = []
    for coll in sorted({r.collection for r in rows}):
        rr = [r for r in rows if r.collection == coll]
        attacks: dict[str, int] = {}
        for r in rr:
            if r.label == "attack":
                attacks[r.attack_type] = attacks.get(r.attack_type, 0) + 1
        lines.append(
            f"{coll}\t{'/'.join(sorted({r.role for r in rr}))}\tlive={sum(r.label == 'live' for r in rr)}\t"
            f"attack={sum(attacks.values())}"
            f"{' (' + ', '.join(f'{k}:{v}' for k, v in sorted(attacks.items())) + ')' if attacks else ''}\t"
            f"{','.join(sorted({r.camera for r in rr}))}\t{' '.join(sorted({r.repo for r in rr}))}"
        )
    n_live = sum(r.label == "live" for r in rows)
    lines.append(
        f"total\t{len({r.collection for r in rows})} collections, {len(set(_repos(rows)))} repositories\t"
        f"live={n_live}\tattack={len(rows) - n_live}"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m train.face_pad_sources", description=__doc__.split("\n")[0])
    ap.add_argument("--manifest", type=Path, default=MANIFEST)
    sub = ap.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("build", help="decode the images, write them and index.csv")
    b.add_argument(
        "--mirrors", type=Path, required=True, help="folder of fetched repositories (owner+name/...)"
    )
    b.add_argument("--out", type=Path, required=True)
    b.add_argument(
        "--on-mismatch",
        choices=("stop", "skip"),
        default="stop",
        help="a file whose sha256 differs from the manifest is refused: stop the build (default) or skip it",
    )
    b.add_argument("--repo", action="append", help="build only these owner/name (repeatable)")

    sub.add_parser("fetch-list", help="print github:owner/name for every repository in the manifest")
    sub.add_parser("summary", help="rows per collection, label, attack type and role")

    a = sub.add_parser("add", help="append rows for images (or video frames) of a fetched repository")
    a.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    a.add_argument("--repo", required=True, help="owner/name")
    a.add_argument("--ref", default="HEAD", help="branch, tag or commit (pinned to its commit)")
    a.add_argument("--include", action="append", required=True, help="glob on the path (repeatable)")
    a.add_argument("--exclude", action="append", default=[], help="glob on the path (repeatable)")
    a.add_argument("--label", choices=LABELS, required=True)
    a.add_argument("--attack-type", choices=ATTACK_TYPES, default="none")
    a.add_argument("--camera", choices=CAMERAS, default="unknown")
    a.add_argument("--collection", help="short id (default owner+name)")
    a.add_argument("--notes", default="")
    a.add_argument("--licence", required=True)
    a.add_argument("--role", choices=ROLES, required=True)
    a.add_argument("--frames", type=int, default=0, help="take this many frames of each matching video")
    a.add_argument("--max", type=int, default=30, help="most new rows (spread over folders)")
    a.add_argument("--cap", type=int, default=DEFAULT_CAP, help="most rows for this repository in all")
    a.add_argument("--min-side", type=int, default=MIN_SIDE)
    a.add_argument(
        "--shared-face",
        type=Path,
        default=SHARED_FACE,
        help="shared face data folder; images already there (same sha256) are left out",
    )
    args = ap.parse_args(argv)

    try:
        if args.cmd == "fetch-list":
            for repo in _repos(read_manifest(args.manifest)):
                print(f"github:{repo}")
            return 0
        if args.cmd == "summary":
            print("\n".join(summary(read_manifest(args.manifest))))
            return 0
        if args.cmd == "add":
            add(
                args.manifest,
                args.mirrors,
                args.repo,
                ref=args.ref,
                include=args.include,
                exclude=args.exclude,
                label=args.label,
                attack_type=args.attack_type,
                camera=args.camera,
                licence=args.licence,
                role=args.role,
                collection=args.collection,
                notes=args.notes,
                frames=args.frames,
                max_new=args.max,
                cap=args.cap,
                min_side=args.min_side,
                known_sha256=shared_sha256(args.shared_face),
            )
            return 0
        problems = build(
            args.manifest,
            args.mirrors,
            args.out,
            on_mismatch=args.on_mismatch,
            repos=set(args.repo) if args.repo else None,
        )
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for kind, items in problems.items():
        if items:
            print(
                f"{kind}: {len(items)}: {', '.join(items[:20])}{' ...' if len(items) > 20 else ''}",
                file=sys.stderr,
            )
    if not args.repo:
        print("\n".join(summary(read_manifest(args.manifest))))
    return 1 if problems["mismatch"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
