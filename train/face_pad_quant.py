"""Activation ranges for the int8 face PAD backbone (issue 47; docs/model-efficientnet-lite.md).

    python -m train.face_pad_quant             # ranges -> src/verilive/face/backbone_int8_ranges.json
    python -m train.face_pad_quant --compare   # int8 (packaged ranges) against float, on other crops

Calibration crops: ``CROPS`` photos of face/pad_feni_sfas (training role: live selfies, prints, replays),
drawn with ``SEED`` from its labels.csv; the largest CenterFace face of each, cropped by the service's
rule (:func:`verilive.face.backbone.crop` at the packaged head's scale). The float ONNX of the model
store is pre-processed as the converter does (verilive.models.convert.efficientnet_lite_int8), then
onnxruntime's MinMax calibrator records the minimum and maximum of every input and output of the
quantized operator types over the crops. Those numbers (float32, written exactly) are the ranges file;
the model store's converter turns float ONNX + ranges into the int8 model with no data at hand.

``--compare`` scores ``COMPARE`` other pad_feni_sfas photos (disjoint from the calibration draw) and the
four pad_silentface photos (evaluation only) with the float and the int8 model: the features' cosine,
the texture's relative error and the packaged head's live log-odds (absolute difference median, 95th
percentile and maximum; ``regular_flips``: crops on the other side of the head's REGULAR threshold).
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
from pathlib import Path

import cv2
import numpy as np
from common.repo import data_root

from verilive.config import Settings
from verilive.face import backbone
from verilive.face.detector import FaceDetector
from verilive.models.convert import efficientnet_lite_int8 as q8
from verilive.models.sessions import ModelRegistry, cpu_session
from verilive.models.store import ModelStore

CROPS = 120
COMPARE = 120
SEED = 47
SOURCE = "face/pad_feni_sfas"
RANGES_PATH = Path(backbone.__file__).resolve().parent / q8.RANGES_FILE


def draw(root: Path, seed: int = SEED) -> list[str]:
    """pad_feni_sfas files (relative to its folder) in a seeded random order."""
    with (root / SOURCE / "labels.csv").open(newline="") as f:
        files = sorted(r["file"] for r in csv.DictReader(f))
    return [files[i] for i in np.random.default_rng(seed).permutation(len(files))]


def face_crop(path: Path, detector: FaceDetector, scale: float) -> np.ndarray | None:
    """The service's wide RGB crop of the largest face in the photo at ``path``, or None."""
    img = cv2.imread(str(path), cv2.IMREAD_COLOR)
    faces = detector.detect(img) if img is not None else []
    if not faces:
        return None
    return backbone.crop(img, max(faces, key=lambda f: f.width * f.height).box, scale)


def crops_of(root: Path, files: list[str], detector: FaceDetector, scale: float, n: int) -> np.ndarray:
    """(n, 224, 224, 3) RGB wide crops of the first ``n`` files in which a face is found."""
    out: list[np.ndarray] = []
    for name in files:
        c = face_crop(root / SOURCE / name, detector, scale)
        if c is not None:
            out.append(c)
        if len(out) == n:
            break
    if len(out) < n:
        raise SystemExit(f"only {len(out)} faces found, {n} wanted")
    return np.stack(out)


class Reader:
    """onnxruntime's CalibrationDataReader protocol: one crop per call."""

    def __init__(self, crops: np.ndarray) -> None:
        self.it = iter(crops)

    def get_next(self) -> dict[str, np.ndarray] | None:
        c = next(self.it, None)
        return None if c is None else {"image": c[None].transpose(0, 3, 1, 2).astype(np.float32)}


def measure_ranges(float_path: Path, crops: np.ndarray) -> dict[str, list[float]]:
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import create_calibrator

    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        q8.pre_process(float_path, prepared)
        cal = create_calibrator(
            prepared,
            list(q8.OP_TYPES),
            augmented_model_path=str(Path(tmp) / "augmented.onnx"),
            calibrate_method=CalibrationMethod.MinMax,
        )
        cal.collect_data(Reader(crops))
        data = cal.compute_data()
    out: dict[str, list[float]] = {}
    for name in sorted(data):
        lo, hi = data[name].range_value
        # float32 -> Python float is exact, and JSON writes it back to the same float32.
        out[name] = [float(np.float32(np.ravel(lo)[0])), float(np.float32(np.ravel(hi)[0]))]
    return out


def compare(
    float_path: Path, int8_path: Path, crops: np.ndarray, head: backbone.BackboneHead
) -> dict[str, float]:
    f32 = backbone.Backbone(cpu_session(float_path, 1))
    i8 = backbone.Backbone(cpu_session(int8_path, 1))
    fa, ta = f32.describe(crops, 1)
    fb, tb = i8.describe(crops, 1)
    cos = np.sum(fa * fb, 1) / (np.linalg.norm(fa, axis=1) * np.linalg.norm(fb, axis=1))
    za, zb = head.live_log_odds(fa, ta), head.live_log_odds(fb, tb)
    d = np.abs(za - zb)
    tex = np.linalg.norm(ta - tb, axis=1) / np.linalg.norm(ta, axis=1)
    return {
        "cos_min": float(cos.min()),
        "cos_median": float(np.median(cos)),
        "texture_relerr_median": float(np.median(tex)),
        "texture_relerr_max": float(tex.max()),
        "logodds_diff_median": float(np.median(d)),
        "logodds_diff_p95": float(np.percentile(d, 95)),
        "logodds_diff_max": float(d.max()),
        "logodds_corr": float(np.corrcoef(za, zb)[0, 1]),
        "logodds_float_std": float(za.std()),  # the scale the differences are read against
        "regular_flips": float(np.sum((za >= head.thresholds[1]) != (zb >= head.thresholds[1]))),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--crops", type=int, default=CROPS)
    ap.add_argument("--out", default=str(RANGES_PATH))
    ap.add_argument("--compare", action="store_true", help="compare float and int8 (packaged ranges)")
    ap.add_argument("--ranges", default=None, help="with --compare: this ranges file instead")
    args = ap.parse_args()
    root = data_root(args.data)
    settings = Settings()
    store = ModelStore.from_settings(settings)
    if store.missing([backbone.FLOAT_MODEL_ID]):
        store.pull(backbone.FLOAT_MODEL_ID)
    float_path = store.model_path(backbone.FLOAT_MODEL_ID)
    head = backbone.BackboneHead.load()
    detector = FaceDetector.from_registry(ModelRegistry(settings))
    files = draw(root)
    if args.compare:
        crops = crops_of(root, files[len(files) // 2 :], detector, head.scale, COMPARE)
        silent = [
            face_crop(root / "face/pad_silentface" / f"{name}.jpg", detector, head.scale)
            for name in ("image_T1", "image_T2", "image_F1", "image_F2")
        ]
        if any(c is None for c in silent):
            raise SystemExit("no face found in a pad_silentface photo")
        ranges = q8.load_ranges(Path(args.ranges) if args.ranges else None)
        with tempfile.TemporaryDirectory() as tmp:
            int8_path = Path(tmp) / "int8.onnx"
            q8.build(float_path, int8_path, ranges)
            print(
                f"{COMPARE} pad_feni_sfas crops (not calibrated on):",
                json.dumps(compare(float_path, int8_path, crops, head)),
            )
            print(
                "4 pad_silentface crops:", json.dumps(compare(float_path, int8_path, np.stack(silent), head))
            )
        return
    # The calibration draw comes from the first half of the order, the comparison from the second.
    crops = crops_of(root, files[: len(files) // 2], detector, head.scale, args.crops)
    ranges = measure_ranges(float_path, crops)
    doc = {
        "made_by": "python -m train.face_pad_quant",
        "source": SOURCE,
        "crops": args.crops,
        "seed": SEED,
        "scale": head.scale,
        "op_types": list(q8.OP_TYPES),
        "ranges": ranges,
    }
    Path(args.out).write_text(json.dumps(doc, indent=0, sort_keys=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {len(ranges)} tensors from {args.crops} crops")


if __name__ == "__main__":
    main()
