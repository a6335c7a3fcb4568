"""Train the face-only PAD branch and the face pipeline's fusion; score every protocol out of fold.

    python -m train.face_pad_data          # the data cache (once)
    python -m train.face_pad               # folds, leave-one-family-out, fusion, final model (~30 min)
    python -m train.face_pad --write       # also writes the shipped files:
                                           #   src/verilive/face/facepad_model.onnx

Protocols (all on subjects/sessions held aside, see train.face_pad_data):

* ``folds``: for each of the 4 folds, the branch is trained on the other three (real prints, replays and
  live photos, and the simulated masks, cut-outs and mannequins made from those folds' photos) and
  scores the held fold. Every feni and simulated image gets one out-of-fold score.
  Simulated prints and replays (``print_sim``, ``replay_sim``) train with their real family.
* ``lofo`` (leave one family out): for each attack family, the branch is trained on two folds without
  that family and scores the family in the other two folds (and the other way round).
* ``fusion``: a logistic regression on the branches' log-odds. It is learnt on folds {0, 1} and applied to
  {2, 3}, and the other way round; those cross-fitted scores are the reported ones. The shipped weights are
  learnt on all out-of-fold scores, and the calibration offsets are set on them (docs/face-eval.md).

Writes ``$VERILIVE_FACEPAD_CACHE/scores.npz`` (every branch's scores per protocol) for eval.face_pad.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import cv2
import numpy as np
import torch
from common.metrics import sigmoid_array
from torch import nn

from train.face_pad_data import CACHE, FOLDS, Item, load
from verilive.face import facepad

REPO = Path(__file__).resolve().parents[1]
MODEL_OUT = REPO / "src" / "verilive" / "face" / "facepad_model.onnx"
SEED = 7
EPOCHS = 14
BATCH = 64
LR = 2e-3
ATTACK_FAMILIES = ("print", "replay", "mask", "cutout", "mannequin")
CHECK_SEED = 20261124


class FacePADNet(nn.Module):
    """A small CNN: a full-resolution stem (print dots and paper grain are pixel-scale), then
    depthwise-separable stages to 8x8, global average pooling and one live logit."""

    def __init__(self) -> None:
        super().__init__()

        def cbr(cin: int, cout: int, k: int, s: int, groups: int = 1) -> list[nn.Module]:
            return [
                nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
            ]

        def sep(cin: int, cout: int, s: int) -> list[nn.Module]:
            return cbr(cin, cin, 3, s, groups=cin) + cbr(cin, cout, 1, 1)

        self.features = nn.Sequential(
            *cbr(3, 16, 3, 1),
            *cbr(16, 24, 3, 2),  # 64
            *sep(24, 48, 2),  # 32
            *sep(48, 48, 1),
            *sep(48, 96, 2),  # 16
            *sep(96, 96, 1),
            *sep(96, 128, 2),  # 8
            *sep(128, 128, 1),
        )
        self.head = nn.Sequential(nn.Dropout(0.3), nn.Linear(128, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3))).squeeze(1)


# ------------------------------------------------------------------ augmentation


def augment(crop: np.ndarray, rng: np.random.Generator, soften: float = 0.3) -> np.ndarray:
    """Camera and framing changes that keep the class: box jitter, flip, exposure, white balance,
    defocus, resolution, sensor noise and JPEG. The model must not learn one camera.

    ``soften`` is the chance of each of the two softening steps (lower resolution, defocus), for both
    classes: real prints are softer than live selfies, and softness alone must not be the cue."""
    s = facepad.INPUT_SIZE
    img = crop.astype(np.float32)
    scale = rng.uniform(0.9, 1.1)
    m = cv2.getRotationMatrix2D((s / 2, s / 2), rng.uniform(-8, 8), scale)
    m[:, 2] += rng.uniform(-0.05, 0.05, 2) * s
    img = cv2.warpAffine(img, m, (s, s), borderMode=cv2.BORDER_REFLECT)
    if rng.random() < 0.5:
        img = img[:, ::-1]
    img = img * rng.uniform(0.7, 1.3) + rng.uniform(-20, 20)
    img = img * rng.uniform(0.9, 1.1, 3)
    if rng.random() < 0.3:
        img = 255.0 * (np.clip(img, 0, 255) / 255.0) ** rng.uniform(0.7, 1.4)
    if rng.random() < soften:
        small = int(rng.integers(40 if soften > 0.3 else 48, 112))
        img = cv2.resize(cv2.resize(img, (small, small), interpolation=cv2.INTER_AREA), (s, s))
    if rng.random() < soften:
        img = cv2.GaussianBlur(img, (0, 0), rng.uniform(0.4, 1.8 if soften > 0.3 else 1.2))
    if rng.random() < 0.3:
        img = img + rng.normal(0, rng.uniform(1, 6), img.shape)
    img = np.clip(img, 0, 255).astype(np.uint8)
    if rng.random() < 0.5:
        _, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(40, 95))])
        img = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    return np.ascontiguousarray(img)


# ------------------------------------------------------------------ training


def train_net(
    crops: np.ndarray, y: np.ndarray, seed: int, epochs: int = EPOCHS, soften: float = 0.3
) -> FacePADNet:
    """Train on (N, S, S, 3) uint8 crops, y = 1 for live; classes balanced per batch by weights."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = FacePADNet()
    opt = torch.optim.AdamW(net.parameters(), lr=LR, weight_decay=1e-3)
    steps = epochs * int(np.ceil(len(y) / BATCH))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, total_steps=steps, pct_start=0.15)
    pos = max(1.0, float(y.sum()))
    neg = max(1.0, float(len(y) - y.sum()))
    w_live, w_attack = len(y) / (2 * pos), len(y) / (2 * neg)
    net.train()
    for _ in range(epochs):
        order = rng.permutation(len(y))
        for b0 in range(0, len(order), BATCH):
            ix = order[b0 : b0 + BATCH]
            if len(ix) < 2:
                continue
            xb = torch.from_numpy(facepad.to_input(np.stack([augment(crops[i], rng, soften) for i in ix])))
            yb = torch.from_numpy(y[ix].astype(np.float32))
            wb = torch.where(yb > 0.5, w_live, w_attack)
            loss = nn.functional.binary_cross_entropy_with_logits(net(xb), yb, weight=wb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    net.eval()
    return net


@torch.no_grad()
def predict(net: FacePADNet, crops: np.ndarray) -> np.ndarray:
    out = []
    for b0 in range(0, len(crops), 256):
        out.append(net(torch.from_numpy(facepad.to_input(crops[b0 : b0 + 256]))).numpy())
    return np.concatenate(out).astype(np.float64) if out else np.zeros(0)


def labels(items: list[Item]) -> np.ndarray:
    return np.array([it.label == "live" for it in items], dtype=np.float64)


def run_folds(items: list[Item], crops: np.ndarray, soften: float = 0.3) -> np.ndarray:
    """Out-of-fold live log-odds of every item with fold >= 0 (NaN elsewhere)."""
    y = labels(items)
    folds = np.array([it.fold for it in items])
    out = np.full(len(items), np.nan)
    for k in range(FOLDS):
        tr, te = np.flatnonzero((folds >= 0) & (folds != k)), np.flatnonzero(folds == k)
        t0 = time.time()
        net = train_net(crops[tr], y[tr], SEED + k, soften=soften)
        out[te] = predict(net, crops[te])
        print(f"  fold {k}: trained on {len(tr)} in {time.time() - t0:.0f} s", flush=True)
    return out


def run_lofo(items: list[Item], crops: np.ndarray, soften: float = 0.3) -> dict[str, np.ndarray]:
    """Per family: scores of that family's items (and of live items) from a model that never saw it,
    trained on two folds and scoring the other two, both ways round."""
    y = labels(items)
    folds = np.array([it.fold for it in items])
    fam = np.array([it.family for it in items])
    halves = (np.isin(folds, [0, 1]), np.isin(folds, [2, 3]))
    out = {}
    for f in ATTACK_FAMILIES:
        s = np.full(len(items), np.nan)
        for a, b in ((0, 1), (1, 0)):
            tr = np.flatnonzero(halves[a] & ~np.isin(fam, [f, f + "_sim"]))
            te = np.flatnonzero(halves[b] & ((fam == f) | (fam == "live")))
            net = train_net(crops[tr], y[tr], SEED + 10 + a, soften=soften)
            s[te] = predict(net, crops[te])
        out[f] = s
        print(f"  left out {f}", flush=True)
    return out


# ------------------------------------------------------------------ fusion


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-2) -> tuple[np.ndarray, float]:
    """Weights and bias of an L2-regularised, class-balanced logistic regression (Newton steps)."""
    n, d = x.shape
    xa = np.hstack([x, np.ones((n, 1))])
    sw = np.where(y > 0.5, n / (2 * max(y.sum(), 1)), n / (2 * max(n - y.sum(), 1)))
    w = np.zeros(d + 1)
    reg = np.full(d + 1, l2 * n)
    reg[-1] = 0.0
    for _ in range(50):
        p = sigmoid_array(xa @ w)
        g = xa.T @ (sw * (p - y)) + reg * w
        h = (xa * (sw * p * (1 - p))[:, None]).T @ xa + np.diag(reg) + 1e-9 * np.eye(d + 1)
        step = np.linalg.solve(h, g)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w[:-1], float(w[-1])


def export_onnx(net: FacePADNet, path: Path, meta: dict[str, object]) -> None:
    import onnx

    net.eval()
    x = torch.zeros(1, 3, facepad.INPUT_SIZE, facepad.INPUT_SIZE)
    tmp = path.with_suffix(".tmp.onnx")
    torch.onnx.export(
        net,
        (x,),
        str(tmp),
        input_names=[facepad.INPUT_NAME],
        output_names=[facepad.OUTPUT_NAME],
        dynamic_axes={facepad.INPUT_NAME: {0: "n"}, facepad.OUTPUT_NAME: {0: "n"}},
        opset_version=17,
        dynamo=False,
    )
    model = onnx.load(str(tmp))
    tmp.unlink()
    check = check_input()
    with torch.no_grad():
        meta["check"] = net(torch.from_numpy(check)).numpy().astype(float).round(6).tolist()
    entry = model.metadata_props.add()
    entry.key, entry.value = "verilive_facepad", json.dumps(meta)
    onnx.save(model, str(path))


def check_input() -> np.ndarray:
    """The fixed input whose trained-graph outputs are kept in the model's metadata."""
    rng = np.random.default_rng(CHECK_SEED)
    return rng.uniform(-1, 1, (2, 3, facepad.INPUT_SIZE, facepad.INPUT_SIZE)).astype(np.float32)


def write_model(net: FacePADNet) -> None:
    """Export the final model (trained with seed SEED + 100) into the package."""
    export_onnx(
        net,
        MODEL_OUT,
        {
            "input_size": facepad.INPUT_SIZE,
            "crop_scale": facepad.CROP_SCALE,
            "epochs": EPOCHS,
            "seed": SEED + 100,
        },
    )
    print(f"wrote {MODEL_OUT} ({MODEL_OUT.stat().st_size} bytes)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=str(CACHE))
    ap.add_argument("--write", action="store_true", help="write the shipped model into the package")
    ap.add_argument("--skip-lofo", action="store_true")
    ap.add_argument("--soften", type=float, default=0.3, help="chance of each softening augmentation")
    ap.add_argument("--export-only", action="store_true", help="export the last trained final model")
    args = ap.parse_args()
    torch.set_num_threads(2)
    cache = Path(args.cache)
    if args.export_only:
        net = FacePADNet()
        net.load_state_dict(torch.load(cache / "facepad_net.pt", weights_only=True))
        write_model(net)
        return
    items, crops = load(cache)
    fp = crops["facepad"]
    print("folds:", flush=True)
    oof = run_folds(items, fp, args.soften)
    lofo = {} if args.skip_lofo else run_lofo(items, fp, args.soften)
    scores = {"facepad_oof": oof, **{f"facepad_lofo_{f}": s for f, s in lofo.items()}}
    print("final model:", flush=True)
    train_ix = np.flatnonzero(np.array([it.fold >= 0 for it in items]))
    net = train_net(fp[train_ix], labels(items)[train_ix], SEED + 100, soften=args.soften)
    final = predict(net, fp)
    scores["facepad_final"] = final
    np.savez(cache / "facepad_scores.npz", **scores)
    if args.write:
        write_model(net)
    torch.save(net.state_dict(), cache / "facepad_net.pt")


if __name__ == "__main__":
    main()
