"""Start time and memory of each service inside its built image (issue 33; docs/deployment.md).

    scripts/build-image.sh all                      # localhost/verilive-all:dev
    python -m bench.image --image localhost/verilive-all:dev --runs 3

For each service (face, voice, capture, then all three in one process): start the image on loopback
ports with the host network (common/container.py), time from the start command to every port's
/health answering UP, read the process's resident memory from /metrics before and after one real
request per service (common.container.ask), and stop it with SIGTERM. Prints one row per service:
median and maximum time to healthy over ``--runs`` starts, RSS idle and after the requests.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from common.container import SERVICES, ask, image_size, run_image
from common.repo import REPO, data_root

KEY = REPO / "tests" / "fixtures" / "capture_test_key.pem"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", default="localhost/verilive-all:dev")
    ap.add_argument("--services", nargs="*", default=[*SERVICES, "all"])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    shared = data_root().parent
    print(f"image {args.image}: {image_size(args.image) / 1e6:.0f} MB")
    print("| service | to healthy /health, median (max) | RSS idle | RSS after one request each |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "capture_key.pem"
        key.write_bytes(KEY.read_bytes())
        key.chmod(0o644)  # read by the image's user (uid 10001)
        for service in args.services:
            starts: list[float] = []
            idle = after = 0.0
            for i in range(args.runs):
                log = Path(tmp) / f"{service}-{i}.log"
                with run_image(args.image, service, log, capture_key=key) as run:
                    starts.append(run.seconds_to_healthy)
                    if i == 0:
                        idle = run.rss_bytes()
                        for name, url in run.urls.items():
                            ask(name, url, shared, KEY.read_bytes())
                        after = run.rss_bytes()
            print(
                f"| {service} | {statistics.median(starts):.1f} s ({max(starts):.1f} s) | "
                f"{idle / 2**20:.0f} MiB | {after / 2**20:.0f} MiB |"
            )


if __name__ == "__main__":
    main()
