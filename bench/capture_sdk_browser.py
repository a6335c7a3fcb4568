"""Browser-side time of the capture SDK's buildBundle with a 1 MiB image, in Debian's headless Chromium.

    python -m bench.capture_sdk_browser [--repeats 31] [--size 1048576]

Serves the SDK from a bare app on 127.0.0.1 and times `buildBundle` inside the page with
performance.now(): SHA-256 of the parts, ECDH P-256, HKDF and AES-256-GCM (no camera, no JPEG encoding).
"""

from __future__ import annotations

import argparse
import json
import threading
import time

import uvicorn
from fastapi import FastAPI
from tests.test_capture_browser import free_port, make_driver, run_js, vector2_inputs

from verilive.capture.sdk_routes import router as sdk_router

TIMING_JS = """
const inp = JSON.parse(args[0]);
const img = new Uint8Array(args[1]);
for (let i = 0; i < img.length; i += 65536) crypto.getRandomValues(img.subarray(i, i + 65536));
const times = [];
for (let r = 0; r < args[2]; r++) {
  const t0 = performance.now();
  await sdk.buildBundle({ ...inp, image: img });
  times.push(performance.now() - t0);
}
return times;
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=31)
    ap.add_argument("--size", type=int, default=1 << 20)
    args = ap.parse_args()

    app = FastAPI()
    app.include_router(sdk_router)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    driver = make_driver(None)
    try:
        driver.get(f"http://127.0.0.1:{port}/sdk/manifest.json")
        skip = {"ephemeralPkcs8B64", "iv", "nonce", "image"}
        inputs = {k: v for k, v in vector2_inputs().items() if not k.startswith("_") and k not in skip}
        times = sorted(run_js(driver, TIMING_JS, json.dumps(inputs), args.size, args.repeats))
    finally:
        driver.quit()
        server.should_exit = True
        thread.join(timeout=10)
    n = len(times)
    print(
        f"buildBundle, {args.size} B image, {n} runs: median {times[n // 2]:.1f} ms, "
        f"p90 {times[min(n - 1, int(0.9 * n))]:.1f} ms, min {times[0]:.1f} ms"
    )


if __name__ == "__main__":
    main()
