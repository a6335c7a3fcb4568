"""The EfficientNet-Lite0 face PAD backbone alone (issue 32), in process, real model.

    python -m bench.face_backbone [--repeats 60] [--model float|int8|both] [--rounds 1]

Times ``Backbone.describe`` (crop already made: 224x224 RGB) for one crop and for a batch of 16, with
onnxruntime limited to 1 and to 2 intra-op threads, and the wide crop itself from a 640x480 frame.
``--model`` picks the build (``efficientnet_lite0`` or its int8 ``efficientnet_lite0_int8``); ``both``
alternates them, ``--rounds`` times (float, int8, float, int8, ...), so that other load on a shared
machine falls on both alike. The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import cv2
import numpy as np

from bench._common import SHARED, summary
from verilive.config import Settings
from verilive.face import backbone
from verilive.models.sessions import cpu_session
from verilive.models.store import ModelStore

FACE = SHARED / "data/face/pad_silentface/image_T1.jpg"


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def time_model(path: Path, label: str, crop: np.ndarray, repeats: int) -> None:
    for threads in (1, 2):
        net = backbone.Backbone(cpu_session(path, intra_op_threads=threads))
        for n in (1, 16):
            x = np.repeat(crop[None], n, axis=0)
            net.describe(x)  # warm-up
            t = []
            for _ in range(repeats if n == 1 else max(5, repeats // 8)):
                t0 = time.perf_counter()
                net.describe(x, batch=n)
                t.append(1000 * (time.perf_counter() - t0) / n)
            print(f"[{label}] {threads} thread(s), batch {n:>2}, ms per crop: {summary(t)}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=60)
    ap.add_argument("--model", choices=(*backbone.MODEL_IDS, "both"), default="float")
    ap.add_argument("--rounds", type=int, default=1, help="times each build is timed (alternating)")
    args = ap.parse_args()
    builds = list(backbone.MODEL_IDS) if args.model == "both" else [args.model]
    store = ModelStore.from_settings(Settings())
    ids = [backbone.MODEL_IDS[b] for b in builds]
    for mid in store.missing(ids):
        store.pull(mid)
    frame = cv2.resize(cv2.imread(str(FACE)), (480, 640))
    box = (140.0, 180.0, 340.0, 420.0)
    t = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        crop = backbone.crop(frame, box, 1.5)
        t.append(1000 * (time.perf_counter() - t0))
    print(f"wide crop from 480x640 ms: {summary(t)}")
    print(f"before: {load()}", flush=True)
    for _ in range(args.rounds):
        for build, mid in zip(builds, ids, strict=True):
            time_model(store.model_path(mid), build, crop, args.repeats)
    print(f"after: {load()}")


if __name__ == "__main__":
    main()
