"""The EfficientNet-Lite0 face PAD backbone alone (issue 32), in process, real model.

    python -m bench.face_backbone [--repeats 60]

Times ``Backbone.describe`` (crop already made: 224x224 RGB) for one crop and for a batch of 16, with
onnxruntime limited to 1 and to 2 intra-op threads, and the wide crop itself from a 640x480 frame.
"""

from __future__ import annotations

import argparse
import time

import cv2
import numpy as np

from bench._common import SHARED, summary
from verilive.config import Settings
from verilive.face import backbone
from verilive.models.sessions import cpu_session
from verilive.models.store import ModelStore

FACE = SHARED / "data/face/pad_silentface/image_T1.jpg"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=60)
    args = ap.parse_args()
    store = ModelStore.from_settings(Settings())
    if store.missing([backbone.MODEL_ID]):
        store.pull(backbone.MODEL_ID)
    path = store.model_path(backbone.MODEL_ID)
    frame = cv2.resize(cv2.imread(str(FACE)), (480, 640))
    box = (140.0, 180.0, 340.0, 420.0)
    t = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        crop = backbone.crop(frame, box, 1.5)
        t.append(1000 * (time.perf_counter() - t0))
    print(f"wide crop from 480x640 ms: {summary(t)}")
    for threads in (1, 2):
        net = backbone.Backbone(cpu_session(path, intra_op_threads=threads))
        for n in (1, 16):
            x = np.repeat(crop[None], n, axis=0)
            net.describe(x)  # warm-up
            t = []
            for _ in range(args.repeats if n == 1 else max(5, args.repeats // 8)):
                t0 = time.perf_counter()
                net.describe(x, batch=n)
                t.append(1000 * (time.perf_counter() - t0) / n)
            print(f"{threads} thread(s), batch {n:>2}, ms per crop: {summary(t)}")


if __name__ == "__main__":
    main()
