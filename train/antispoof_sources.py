"""Real anti-spoofing sources from public repositories (issue 46): a file-by-file manifest and its builder.

The manifest ``train/antispoof_sources.csv`` has one row per audio file taken from a public GitHub
repository (a TTS / voice-conversion demo page, a model repository's samples, ...):

    repo,commit,path,sha256,licence,role,label,generator,language

* ``repo`` is ``owner/name``; ``commit`` the full commit the file is read at; ``path`` the file's path in
  that commit; ``sha256`` the hash of the file's bytes as committed.
* ``licence`` is the repository's licence at that commit (``none`` when it has no licence file).
* ``role`` is ``train`` (licence allows training shipped weights: MIT, Apache-2.0, BSD, CC-BY, CC0) or
  ``choose-only`` (may only be used to choose, fuse and calibrate, never inside trained weights).
* ``label`` is ``bonafide`` or ``spoof``; ``generator`` names the system (or ``genuine-<set-up>`` for
  bona fide); ``language`` is an ISO 639-1 code (``mul`` for mixed).

The audio itself never enters the project repository. To build the data set, bring each repository onto
the machine (the search tool's ``fetch`` puts a bare git directory under ``/work/.mirror/owner+name/``;
``python -m train.antispoof_sources fetch-list`` prints the list), then::

    python -m train.antispoof_sources build --mirrors /work/.mirror --out DIR

which reads every file at its pinned commit, checks its sha256, decodes it to 16 kHz mono 16-bit WAV and
writes ``DIR/<owner+name>/<label>/<path with / as __>.wav`` and ``DIR/index.csv``. A file whose bytes do
not match the manifest's sha256 is refused: by default the build stops there (exit status 1, the file
named); with ``--on-mismatch skip`` it is left out, named on stderr, and the build goes on (exit status 1
at the end all the same). Files that cannot be decoded (M4A/AAC: neither the project's decoder nor
libsndfile reads them) are left out and listed. Repositories missing from the mirror folder are listed and
skipped.

``add`` is how the manifest is written: it scans a fetched repository at a commit for audio files matching
glob patterns and appends rows (sha256 computed from the blobs), at most ``--max`` new files and at most
``--cap`` files per repository in all, spread evenly over the generators found.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import hashlib
import io
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

MANIFEST = Path(__file__).with_name("antispoof_sources.csv")
COLUMNS = ("repo", "commit", "path", "sha256", "licence", "role", "label", "generator", "language")
INDEX_COLUMNS = (
    "source",
    "label",
    "generator",
    "language",
    "role",
    "path",
    "licence",
    "repo",
    "commit",
    "repo_path",
    "sha256",
    "decoder",
    "sample_rate_in",
    "duration_s",
)
AUDIO_EXTENSIONS = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".aac")
LABELS = ("bonafide", "spoof")
ROLES = ("train", "choose-only")
TARGET_RATE = 16000
MAX_SECONDS = 600.0
DEFAULT_CAP = 60


class SourceError(Exception):
    """A manifest row that cannot be built (sha256 mismatch, missing blob, bad row)."""


@dataclass(frozen=True)
class Row:
    repo: str
    commit: str
    path: str
    sha256: str
    licence: str
    role: str
    label: str
    generator: str
    language: str

    @property
    def source(self) -> str:
        return self.repo.replace("/", "+")

    def as_dict(self) -> dict[str, str]:
        return {c: getattr(self, c) for c in COLUMNS}


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
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", r.repo):
        raise SourceError(f"bad repo {r.repo!r} (want owner/name)")
    if not re.fullmatch(r"[0-9a-f]{40}", r.commit):
        raise SourceError(f"{r.repo}:{r.path}: commit must be 40 hex digits, got {r.commit!r}")
    if not re.fullmatch(r"[0-9a-f]{64}", r.sha256):
        raise SourceError(f"{r.repo}:{r.path}: sha256 must be 64 hex digits, got {r.sha256!r}")
    if r.label not in LABELS:
        raise SourceError(f"{r.repo}:{r.path}: label must be one of {LABELS}, got {r.label!r}")
    if r.role not in ROLES:
        raise SourceError(f"{r.repo}:{r.path}: role must be one of {ROLES}, got {r.role!r}")
    if not r.path.lower().endswith(AUDIO_EXTENSIONS):
        raise SourceError(f"{r.repo}:{r.path}: not an audio file ({', '.join(AUDIO_EXTENSIONS)})")
    if not r.generator or not r.language or not r.licence:
        raise SourceError(f"{r.repo}:{r.path}: generator, language and licence must not be empty")


# --- git access ---


def find_git_dir(mirrors: Path, repo: str) -> Path | None:
    """The bare git directory of ``owner/name`` under ``mirrors``: ``mirrors/owner+name`` itself or the
    first directory below it (depth 2) that holds ``HEAD`` and ``objects``, as ``fetch`` lays them out."""
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


def list_audio(git_dir: Path, commit: str) -> list[str]:
    out = _git(git_dir, "ls-tree", "-r", "-z", "--name-only", commit)
    names = [n for n in out.decode("utf-8", errors="surrogateescape").split("\0") if n]
    return sorted(n for n in names if n.lower().endswith(AUDIO_EXTENSIONS))


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
        self._proc.stdin.write(f"{commit}:{path}\n".encode())
        self._proc.stdin.flush()
        header = self._proc.stdout.readline().decode().split()
        if len(header) < 2 or header[1] == "missing" or header[1] != "blob":
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


def decode_to_16k(data: bytes) -> tuple[np.ndarray, int, str]:
    """Mono float32 at 16 kHz, the input rate and the decoder used.

    The project's decoder (``verilive.audio.decode.decode_file``: WAV, FLAC, Ogg, ...) first; MP3, which it
    refuses by design, through libsndfile (soundfile, 1.1+ reads MPEG layer III) directly. Anything else
    (M4A/AAC) raises :class:`SourceError`.
    """
    from verilive.audio.decode import decode_file
    from verilive.audio.resample import resample
    from verilive.errors import AudioDecodeError

    try:
        audio = decode_file(data, max_seconds=MAX_SECONDS)
        samples, rate, decoder = audio.samples, audio.sample_rate, "verilive"
    except AudioDecodeError as exc:
        try:
            samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
        except Exception as exc2:  # soundfile raises several types; any of them means "cannot decode"
            raise SourceError(f"cannot decode ({exc}; libsndfile: {exc2})") from exc2
        samples = np.clip(np.nan_to_num(samples), -1.0, 1.0)
        decoder = "libsndfile"
    mono = np.asarray(samples, dtype=np.float32).mean(axis=1)
    if mono.size == 0:
        raise SourceError("no samples")
    return resample(mono, int(rate), TARGET_RATE), int(rate), decoder


def out_name(path: str) -> str:
    stem = path.rsplit(".", 1)[0]
    return re.sub(r"[^A-Za-z0-9._+-]", "_", stem.replace("/", "__")) + ".wav"


# --- build ---


def build(
    manifest: Path,
    mirrors: Path,
    out: Path,
    *,
    on_mismatch: str = "stop",
    repos: set[str] | None = None,
    log=print,
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
                where = f"{r.repo}@{r.commit[:12]}:{r.path}"
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
                    wav, rate_in, decoder = decode_to_16k(data)
                except SourceError as exc:
                    problems["undecodable"].append(where)
                    log(f"skip {where}: {exc}", file=sys.stderr)
                    continue
                rel = Path(r.source) / r.label / out_name(r.path)
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                sf.write(out / rel, wav, TARGET_RATE, subtype="PCM_16")
                index.append(
                    {
                        "source": r.source,
                        "label": r.label,
                        "generator": r.generator,
                        "language": r.language,
                        "role": r.role,
                        "path": rel.as_posix(),
                        "licence": r.licence,
                        "repo": r.repo,
                        "commit": r.commit,
                        "repo_path": r.path,
                        "sha256": r.sha256,
                        "decoder": decoder,
                        "sample_rate_in": str(rate_in),
                        "duration_s": f"{wav.size / TARGET_RATE:.3f}",
                    }
                )
    with (out / "index.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=INDEX_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(index)
    log(f"wrote {len(index)} clips to {out} ({len(rows) - len(index)} of {len(rows)} rows left out)")
    return problems


# --- add ---


def _spread(groups: dict[str, list[str]], n: int) -> list[tuple[str, str]]:
    """Up to ``n`` (generator, path) pairs, round robin over the generators, each group's picks evenly
    spaced over its sorted paths (deterministic)."""
    picks: dict[str, list[str]] = {}
    total = sum(len(v) for v in groups.values())
    n = min(n, total)
    quota = dict.fromkeys(groups, 0)
    keys = sorted(groups)
    while sum(quota.values()) < n:
        for k in keys:
            if sum(quota.values()) >= n:
                break
            if quota[k] < len(groups[k]):
                quota[k] += 1
    for k in keys:
        paths, q = groups[k], quota[k]
        if q:
            idx = np.unique(np.round(np.linspace(0, len(paths) - 1, q)).astype(int))
            picks[k] = [paths[i] for i in idx]
    return [(k, p) for k in keys for p in picks.get(k, [])]


def add(
    manifest: Path,
    mirrors: Path,
    repo: str,
    *,
    ref: str,
    include: list[str],
    exclude: list[str],
    label: str,
    generator: str | None,
    generator_regex: str | None,
    language: str,
    licence: str,
    role: str,
    max_new: int,
    cap: int = DEFAULT_CAP,
    known_sha256: set[str] | None = None,
    log=print,
) -> list[Row]:
    """Append rows for the audio files of ``repo`` at ``ref`` whose paths match ``include`` (globs) and
    none of ``exclude``. Files already in the manifest (same sha256, any repository) or in
    ``known_sha256`` are left out. Returns the rows added."""
    if (generator is None) == (generator_regex is None):
        raise SourceError("give exactly one of --generator and --generator-regex")
    git_dir = find_git_dir(mirrors, repo)
    if git_dir is None:
        raise SourceError(f"{repo} is not under {mirrors}; fetch github:{repo} first")
    commit = resolve_commit(git_dir, ref)
    rows = read_manifest(manifest)
    seen = {r.sha256 for r in rows} | (known_sha256 or set())
    room = cap - sum(1 for r in rows if r.repo == repo)
    if room <= 0:
        log(f"{repo} already has {cap} rows (the per-repository cap); nothing added")
        return []
    paths = [
        p
        for p in list_audio(git_dir, commit)
        if any(fnmatch.fnmatch(p, g) for g in include) and not any(fnmatch.fnmatch(p, g) for g in exclude)
    ]
    groups: dict[str, list[str]] = {}
    for p in paths:
        if generator_regex is not None:
            m = re.search(generator_regex, p)
            if m is None:
                continue
            gen = "-".join(g for g in m.groups() if g) if m.groups() else m.group(0)
        else:
            gen = generator or ""
        groups.setdefault(gen, []).append(p)
    # Drop duplicates before choosing so the quota is not spent on them.
    new: list[Row] = []
    with BlobReader(git_dir) as blobs:
        hashes: dict[str, str] = {}
        for plist in groups.values():
            for p in plist:
                data = blobs.read(commit, p)
                if data is not None:
                    hashes[p] = hashlib.sha256(data).hexdigest()
    uniq: dict[str, list[str]] = {}
    taken: set[str] = set()
    for gen, plist in groups.items():
        for p in plist:
            h = hashes.get(p)
            if h is None or h in seen or h in taken:
                continue
            taken.add(h)
            uniq.setdefault(gen, []).append(p)
    for gen, p in _spread(uniq, min(max_new, room)):
        row = Row(repo, commit, p, hashes[p], licence, role, label, gen, language)
        validate_row(row)
        new.append(row)
    write_manifest(manifest, [*rows, *new])
    dropped = sum(len(v) for v in groups.values()) - sum(len(v) for v in uniq.values())
    log(
        f"{repo}@{commit[:12]}: {len(paths)} matching, {dropped} duplicates left out, added {len(new)} "
        f"({', '.join(f'{g}:{sum(1 for r in new if r.generator == g)}' for g in sorted(uniq))})"
    )
    return new


def shared_sha256(shared_voice: Path) -> set[str]:
    """sha256 of the source files behind the real sources already in the shared folder (their labels.csv
    ``source_sha256`` column), so that ``add`` does not take them twice."""
    out: set[str] = set()
    for labels in shared_voice.glob("*/labels.csv"):
        with labels.open(newline="", encoding="utf-8") as f:
            for r in csv.DictReader(f):
                h = (r.get("source_sha256") or "").strip()
                if h:
                    out.add(h)
    return out


# --- command line ---


def _repos(rows: Iterable[Row]) -> Iterator[str]:
    seen: set[str] = set()
    for r in rows:
        if r.repo not in seen:
            seen.add(r.repo)
            yield r.repo


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m train.antispoof_sources", description=__doc__.split("\n")[0])
    ap.add_argument("--manifest", type=Path, default=MANIFEST)
    sub = ap.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("build", help="build 16 kHz WAVs and index.csv from fetched repositories")
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

    sub.add_parser("summary", help="rows per repository, label and role")

    a = sub.add_parser("add", help="append rows for audio files of a fetched repository")
    a.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    a.add_argument("--repo", required=True, help="owner/name")
    a.add_argument("--ref", default="HEAD", help="branch, tag or commit (pinned to its commit)")
    a.add_argument("--include", action="append", required=True, help="glob on the path (repeatable)")
    a.add_argument("--exclude", action="append", default=[], help="glob on the path (repeatable)")
    a.add_argument("--label", choices=LABELS, required=True)
    g = a.add_mutually_exclusive_group(required=True)
    g.add_argument("--generator", help="generator name, or genuine-<set-up> for bona fide")
    g.add_argument("--generator-regex", help="regex on the path; its groups joined by - name the generator")
    a.add_argument("--language", required=True)
    a.add_argument("--licence", required=True)
    a.add_argument("--role", choices=ROLES, required=True)
    a.add_argument("--max", type=int, default=30, help="most new rows (spread over generators)")
    a.add_argument("--cap", type=int, default=DEFAULT_CAP, help="most rows for this repository in all")
    a.add_argument(
        "--shared-voice",
        type=Path,
        default=None,
        help="shared voice data folder; files already there (labels.csv source_sha256) are left out",
    )
    args = ap.parse_args(argv)

    try:
        if args.cmd == "fetch-list":
            for repo in _repos(read_manifest(args.manifest)):
                print(f"github:{repo}")
            return 0
        if args.cmd == "summary":
            rows = read_manifest(args.manifest)
            for repo in _repos(rows):
                rr = [r for r in rows if r.repo == repo]
                n_b = sum(r.label == "bonafide" for r in rr)
                gens = sorted({r.generator for r in rr if r.label == "spoof"})
                roles = "/".join(sorted({r.role for r in rr}))
                licences = " | ".join(sorted({r.licence for r in rr}))
                print(f"{repo}\t{roles}\t{licences}\tspoof={len(rr) - n_b}\tbonafide={n_b}\t{','.join(gens)}")
            n_b = sum(r.label == "bonafide" for r in rows)
            print(f"total\t{len(list(_repos(rows)))} repositories\tspoof={len(rows) - n_b}\tbonafide={n_b}")
            return 0
        if args.cmd == "add":
            known = shared_sha256(args.shared_voice) if args.shared_voice else None
            add(
                args.manifest,
                args.mirrors,
                args.repo,
                ref=args.ref,
                include=args.include,
                exclude=args.exclude,
                label=args.label,
                generator=args.generator,
                generator_regex=args.generator_regex,
                language=args.language,
                licence=args.licence,
                role=args.role,
                max_new=args.max,
                cap=args.cap,
                known_sha256=known,
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
    return 1 if problems["mismatch"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
