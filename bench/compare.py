"""The benchmarks beside a previous build, alternated in one run on the same machine (issue 49).

    python -m bench.compare --against 1cf782d [--rounds 2] [--only templates,identify,...]

The previous build is checked out once into a git worktree (``/tmp/verilive-build-<commit>``). Each
benchmark runs ``--rounds`` times per build, alternating (previous, this, previous, this, ...), so
that other load on a shared machine falls on both alike; the load average is printed before each
run. Both builds are measured by *this* tree's benchmark code: the previous build's ``verilive``
package comes first on ``PYTHONPATH`` (the servers the HTTP benchmarks start inherit it), so only
the code under test differs. Both use the models installed here; a previous build that needs other
model versions must have them pulled first.

Prints each run's figure lines (RTF, throughput, server ms, RSS) and a table of the medians.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from common.repo import REPO

#: name -> benchmark arguments (python -m ...) and the figures it prints, as (label, regex)
BENCHES: dict[str, tuple[list[str], list[tuple[str, str]]]] = {
    "templates": (
        ["bench.voice_template_rtf", "--repeats", "20"],
        [("template RTF, 10 s", r"RTF \(median total / 10 s\): ([\d.]+)")],
    ),
    "throughput": (
        ["bench.voice_http", "throughput", "--clients", "4", "--requests", "200"],
        [
            ("templates/s, 4 clients", r"throughput: ([\d.]+) per second"),
            ("server RSS peak MiB", r"server RSS: \d+ MiB now, (\d+) MiB peak"),
        ],
    ),
    "identify": (
        ["bench.voice_http", "identify", "--size", "100000", "--repeats", "20"],
        [
            ("identify 100k v2, server ms", r"server ms: median ([\d.]+)"),
            ("identify server RSS peak MiB", r"server RSS: \d+ MiB now, (\d+) MiB peak"),
            ("server RSS peak before identify, MiB", r"MiB peak \((\d+) MiB before identify"),
        ],
    ),
    "identify-tel": (
        ["bench.voice_http", "identify", "--size", "100000", "--repeats", "20", "--probe-rate", "8000"],
        [("identify 100k v2, telephone probe, server ms", r"server ms: median ([\d.]+)")],
    ),
    "diarize": (
        ["bench.voice_http", "diarize", "--minutes", "10", "--repeats", "1"],
        [
            ("diarize 10 min, 16 kHz, RTF", r"16000 Hz, [\d.]+ min two-party call: RTF ([\d.]+)"),
            ("diarize 10 min, G.711 8 kHz, RTF", r"8000 Hz, [\d.]+ min two-party call: RTF ([\d.]+)"),
            ("diarize 10 min, G.711: speakers found", r"8000 Hz, .*?speakers \[(\d+)"),
            ("diarize server RSS peak MiB", r"server RSS: \d+ MiB now, (\d+) MiB peak"),
        ],
    ),
    "antispoof": (
        ["bench.antispoof_rtf", "--repeats", "5"],
        [
            (
                "anti-spoofing RTF (wall), 5 s",
                r"5 s of speech.*?RTF \(median total / duration\): ([\d.]+)",
            )
        ],
    ),
    "face": (
        ["bench.face_http", "--requests", "30", "--batch-runs", "2"],
        [
            ("face server ms (first pipeline)", r"server ms median ([\d.]+)"),
            ("face batch images/s (first pipeline)", r"batch of \d+: ([\d.]+) images/s"),
            ("face server RSS peak MiB", r"server RSS: \d+ MiB now, (\d+) MiB peak"),
        ],
    ),
}


def worktree(commit: str) -> Path:
    sha = subprocess.run(
        ["git", "rev-parse", "--short=12", commit], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()
    path = Path(f"/tmp/verilive-build-{sha}")
    if not (path / "src" / "verilive").is_dir():
        subprocess.run(
            ["git", "worktree", "add", "--detach", "--force", str(path), sha], cwd=REPO, check=True
        )
    return path


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_one(args: list[str], src: Path) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(REPO)])}
    r = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        return f"FAILED ({r.returncode}): {r.stderr[-600:]}"
    return r.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, help="the previous build: a commit or ref")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", default=",".join(BENCHES), help="comma-separated: " + ", ".join(BENCHES))
    args = ap.parse_args()
    builds = {f"previous ({args.against})": worktree(args.against) / "src", "this build": REPO / "src"}
    figures: dict[tuple[str, str], list[float]] = {}
    for name in args.only.split(","):
        cmd, patterns = BENCHES[name]
        for rnd in range(args.rounds):
            for build, src in builds.items():
                before = load()
                out = run_one(cmd, src)
                print(f"== {name} round {rnd + 1}, {build}; load before {before}, after {load()}")
                for label, rx in patterns:
                    m = re.search(rx, out, re.S)
                    if m:
                        figures.setdefault((label, build), []).append(float(m.group(1)))
                    print(f"   {label}: {m.group(1) if m else 'not found'}")
                if out.startswith("FAILED"):
                    print("   " + out)
                sys.stdout.flush()
    print("\n| figure | " + " | ".join(builds) + " |")
    print("|---|" + "---:|" * len(builds))
    for label in dict.fromkeys(lbl for lbl, _ in figures):
        cells = []
        for build in builds:
            v = figures.get((label, build), [])
            cells.append(f"{statistics.median(v):g} ({', '.join(f'{x:g}' for x in v)})" if v else "-")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print(f"\n{os.cpu_count()} CPUs; load average at the end {load()}")


if __name__ == "__main__":
    main()
