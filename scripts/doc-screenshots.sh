#!/usr/bin/env bash
# Remake the demo screenshots of docs/capture-sdk.md from the Chromium end-to-end tests: run them with
# VERILIVE_SCREENSHOT_DIR set, then copy the pictures the docs show into docs/img/capture/, reduced to
# 64-colour PNGs so the repository stays small.
set -euo pipefail
cd "$(dirname "$0")/.."
shots="$(mktemp -d)"
trap 'rm -rf "$shots"' EXIT
# Only the tests whose pictures the docs show.
VERILIVE_SCREENSHOT_DIR="$shots" .venv/bin/pytest -q tests/test_capture_browser.py -k \
  "following_the_cue or accessibility or placement_problem or blocked_camera or without_a_configured \
   or phone_viewport or german or real_head_turn_through_the_page or still_photo_is_refused \
   or does_not_scroll"
.venv/bin/python - "$shots" <<'PY'
import sys
from pathlib import Path

from PIL import Image

shots, out = Path(sys.argv[1]), Path("docs/img/capture")
out.mkdir(parents=True, exist_ok=True)
pick = {
    "turn-turn-left.png": "turn-cue.png",
    "demo-done-light.png": "done.png",
    "hint-move-closer.png": "hint-move-closer.png",
    "hint-no-face.png": "hint-no-face.png",
    "hint-too-dark.png": "hint-too-dark.png",
    "hint-backlit.png": "hint-backlit.png",
    "camera-blocked.png": "camera-blocked.png",
    "no-configured-key-off.png": "no-key.png",
    "phone-390-done.png": "phone.png",
    "german-done.png": "german.png",
    "require-left-done.png": "accepted.png",
    "require-still-done.png": "turn-missing.png",
    "desktop-1280x757-cue.png": "desktop.png",
}
for src, dst in pick.items():
    im = Image.open(shots / src).convert("RGB")
    im.thumbnail((640, 640))
    im.quantize(64).save(out / dst, optimize=True)
    print(out / dst, (out / dst).stat().st_size, "bytes")
PY
