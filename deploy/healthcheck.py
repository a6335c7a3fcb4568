"""Container health check: GET /health on every port of the service this container runs.

Standard library only and no verilive import, so it is cheap to run every 30 s. Exit 0 when every
port answers 200, 1 otherwise (Docker's HEALTHCHECK contract).
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

DEFAULT_PORTS = {"face": 8080, "voice": 8081, "capture": 8082}


def ports(service: str) -> list[int]:
    names = list(DEFAULT_PORTS) if service == "all" else [service]
    return [int(os.environ.get(f"VERILIVE_{n.upper()}_PORT", DEFAULT_PORTS[n])) for n in names]


def main() -> int:
    service = os.environ.get("VERILIVE_SERVICE", "")
    if service not in (*DEFAULT_PORTS, "all"):
        print(f"unknown VERILIVE_SERVICE {service!r}", file=sys.stderr)
        return 1
    for port in ports(service):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=4) as r:
                if r.status != 200:
                    return 1
        except (urllib.error.URLError, OSError) as exc:  # 503 is an HTTPError, a URLError
            print(f"port {port}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
