"""Networks: the spectrogram-and-cues LCNN and the CAM++ front-output network, training, inference."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from train.antispoof.split import Data, subclass_of, subclasses
from verilive.voice.antispoof import CLASSES


def build_net(
    mean: np.ndarray, std: np.ndarray, cues: np.ndarray, sub_class: list[int], oc: bool = False
) -> Any:
    """LCNN on the spectrogram plus a small branch on the utterance cues (``cues``: training rows,
    for the NaN fill and the standardisation folded into the network). ``sub_class[j]``: the class
    of output unit j; class logits are the log-sum-exp of their units, then calibrated. ``oc``: a
    one-class bona fide direction on the embedding (``oc_loss``), its scaled cosine appended to the
    output as a fifth column."""
    import torch
    from torch import nn

    med = np.nanmedian(cues, axis=0)
    filled = np.where(np.isnan(cues), med, cues)
    c_mean, c_std = filled.mean(axis=0), filled.std(axis=0) + 1e-6
    member = np.zeros((len(sub_class), len(CLASSES)), np.float32)
    member[np.arange(len(sub_class)), sub_class] = 1.0

    class MFM(nn.Module):
        """Max-feature-map: the element-wise max of the two halves of the channels."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a, b = torch.chunk(x, 2, dim=1)
            return torch.maximum(a, b)

    class LCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, 2, -1, 1))
            self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, 2, -1, 1))
            self.register_buffer("c_med", torch.tensor(med, dtype=torch.float32).view(1, -1))
            self.register_buffer("c_mean", torch.tensor(c_mean, dtype=torch.float32).view(1, -1))
            self.register_buffer("c_std", torch.tensor(c_std, dtype=torch.float32).view(1, -1))
            self.register_buffer("member", torch.tensor(member))
            self.cue_drop = 0.0  # training: probability of hiding a clip's cues (as if unmeasurable)
            # A strided first layer and early pooling keep it cheap (~27 M multiply-adds per 2 s).
            self.body = nn.Sequential(
                nn.Conv2d(2, 24, 5, stride=2, padding=2), MFM(), nn.MaxPool2d(2),
                nn.Conv2d(12, 32, 3, padding=1), MFM(), nn.BatchNorm2d(16), nn.MaxPool2d(2),
                nn.Conv2d(16, 48, 3, padding=1), MFM(), nn.BatchNorm2d(24), nn.MaxPool2d(2),
                nn.Conv2d(24, 64, 3, padding=1), MFM(), nn.BatchNorm2d(32),
            )  # fmt: skip
            self.head = nn.Sequential(nn.Dropout(0.4), nn.Linear(32 * 16 * 2, 80), MFM())
            self.cue_branch = nn.Sequential(
                nn.Linear(len(med), 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 32), nn.ReLU()
            )
            self.out = nn.Sequential(nn.Dropout(0.2), nn.Linear(40 + 32, len(sub_class)))
            self.cal = nn.Linear(4, 4)
            with torch.no_grad():
                self.cal.weight.copy_(torch.eye(4))
                self.cal.bias.zero_()
            # created last, and only when used, so the other weights draw the same initial values
            self.oc_w = nn.Parameter(torch.randn(40 + 32)) if oc else None

        def embed(self, x: torch.Tensor) -> torch.Tensor:
            h = self.body((x - self.mean) / self.std)  # (B, 32, 16, T')
            h = h.flatten(1, 2)
            return torch.cat([h.mean(dim=2), h.std(dim=2)], dim=1)

        def embedding(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
            c = torch.where(torch.isnan(c), self.c_med, c)
            if self.training and self.cue_drop > 0:
                hide = torch.rand(c.shape[0], 1) < self.cue_drop
                c = torch.where(hide, self.c_med.expand_as(c), c)
            c = torch.clamp((c - self.c_mean) / self.c_std, -6.0, 6.0)  # odd input stays in range
            return torch.cat([self.head(self.embed(x)), self.cue_branch(c)], dim=1)

        def sub_from(self, e: torch.Tensor) -> torch.Tensor:
            return self.out(e)

        def sub_logits(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
            return self.sub_from(self.embedding(x, c))

        def class_logits(self, z: torch.Tensor) -> torch.Tensor:
            top = z.max(dim=1, keepdim=True).values
            return torch.log(torch.exp(z - top) @ self.member + 1e-30) + top

        def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
            e = self.embedding(x, c)
            y = self.cal(self.class_logits(self.sub_from(e)))
            if self.oc_w is None:
                return y
            return torch.cat([y, OC_ALPHA * oc_cosine(e, self.oc_w)[:, None]], dim=1)

    return LCNN()


def build_fcm_net(
    mean: np.ndarray, std: np.ndarray, sub_class: list[int], width: int = 128, oc: bool = False
) -> Any:
    """A small time-convolutional network on the frozen CAM++ front output (320 rows per 10 ms
    frame): a 1x1 projection, two dilated convolutions (receptive field 13 frames), mean and
    standard deviation over time, one output per generator family summed per class as in the LCNN.
    About 0.14 M multiply-adds per frame."""
    import torch
    from torch import nn

    member = np.zeros((len(sub_class), len(CLASSES)), np.float32)
    member[np.arange(len(sub_class)), sub_class] = 1.0

    class FrontNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1))
            self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1))
            self.register_buffer("member", torch.tensor(member))
            self.body = nn.Sequential(
                nn.Dropout(0.2),
                nn.Conv1d(len(mean), width, 1), nn.BatchNorm1d(width), nn.ReLU(),
                nn.Conv1d(width, width, 3, padding=2, dilation=2), nn.BatchNorm1d(width), nn.ReLU(),
                nn.Conv1d(width, width, 3, padding=4, dilation=4), nn.BatchNorm1d(width), nn.ReLU(),
            )  # fmt: skip
            self.head = nn.Sequential(nn.Dropout(0.3), nn.Linear(2 * width, len(sub_class)))
            self.oc_w = nn.Parameter(torch.randn(2 * width)) if oc else None  # as in the LCNN

        def embedding(self, h: torch.Tensor) -> torch.Tensor:
            z = self.body((h - self.mean) / self.std)
            mu = z.mean(dim=2)
            sd = torch.sqrt(((z - mu[:, :, None]) ** 2).mean(dim=2) + 1e-6)  # defined for one frame too
            return torch.cat([mu, sd], dim=1)

        def sub_from(self, e: torch.Tensor) -> torch.Tensor:
            return self.head(e)

        def sub_logits(self, h: torch.Tensor) -> torch.Tensor:
            return self.sub_from(self.embedding(h))

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            e = self.embedding(h)
            z = self.sub_from(e)
            top = z.max(dim=1, keepdim=True).values
            y = torch.log(torch.exp(z - top) @ self.member + 1e-30) + top
            if self.oc_w is None:
                return y
            return torch.cat([y, OC_ALPHA * oc_cosine(e, self.oc_w)[:, None]], dim=1)

    return FrontNet()


@dataclass
class TrainConfig:
    epochs: int = 60  # 20 -> 60: validation EER 6.2 -> 4.0 % (network alone, docs/antispoof.md)
    steps_per_epoch: int = 50
    batch: int = 32
    crop: int = 400  # longest training crop, frames (4 s)
    crop_min: int = 100  # shortest (1 s): each batch draws its crop length in [crop_min, crop]
    lr: float = 2e-3
    weight_decay: float = 1e-3
    oc_weight: float = 0.0  # weight of the one-class loss (``oc_loss``); 0: none, and no fifth output


# One-class softmax (Zhang, Jiang and Li, 2021): bona fide embeddings are pulled to within an angle
# of cos 0.9 of a learnt direction, spoofs pushed beyond cos 0.2, so "bona fide" is learnt as a
# narrow region rather than as "not like the spoofs seen". Margins and scale are the paper's.
OC_ALPHA, OC_M_BONA, OC_M_SPOOF = 20.0, 0.9, 0.2


def oc_cosine(e: Any, w: Any) -> Any:
    """Cosine of each row of ``e`` with the direction ``w`` (torch tensors)."""
    import torch

    return (e @ w) / (torch.linalg.vector_norm(e, dim=1) * torch.linalg.vector_norm(w) + 1e-9)


def oc_loss(cos: Any, bona: Any) -> Any:
    """Mean one-class softmax loss of cosines ``cos`` with boolean ``bona`` targets."""
    import torch

    margin = torch.where(bona, OC_M_BONA - cos, cos - OC_M_SPOOF)
    return torch.nn.functional.softplus(OC_ALPHA * margin).mean()


FCM_CFG = TrainConfig(epochs=30, weight_decay=1e-2)  # the front-output network (fast: ~5 s per epoch)


def sample_weights(d: Data, idx: np.ndarray) -> np.ndarray:
    """Each class equally likely; within a class, generators weighted by sqrt of their size."""
    w = np.zeros(len(idx))
    for cls in CLASSES:
        m = d.lab[idx] == cls
        gens, counts = np.unique(d.gen[idx][m], return_counts=True)
        gw = np.sqrt(counts) / np.sqrt(counts).sum()
        for g, c, share in zip(gens, counts, gw, strict=True):
            w[m & (d.gen[idx] == g)] = share / c
    return w / w.sum()


def crop_batch(
    feats: list[np.ndarray], picks: np.ndarray, crop: int, rng: np.random.Generator, augment: bool
) -> np.ndarray:
    out = np.empty((len(picks), *feats[0].shape[:2], crop), np.float32)
    for k, i in enumerate(picks):
        f = feats[i]
        if f.shape[2] < crop:
            f = np.tile(f, (1, 1, -(-crop // f.shape[2])))
        s = int(rng.integers(0, f.shape[2] - crop + 1))
        x = f[:, :, s : s + crop].astype(np.float32)
        if augment:
            if rng.uniform() < 0.5:  # frequency mask (both channels)
                w = int(rng.integers(1, 25))
                b = int(rng.integers(0, x.shape[1] - w))
                x[:, b : b + w] = x[:, b : b + w].mean(axis=(1, 2), keepdims=True)
            if rng.uniform() < 0.5:  # time mask
                w = int(rng.integers(1, 25))
                b = int(rng.integers(0, crop - w))
                x[:, :, b : b + w] = x[:, :, b : b + w].mean(axis=(1, 2), keepdims=True)
            x[0] += rng.normal(0, 1.0)  # small level offset, dB
        out[k] = x
    return out


def fit_net(
    net: Any, d: Data, tr: np.ndarray, cfg: TrainConfig, rng: np.random.Generator,
    inputs: Callable[[np.ndarray], tuple[Any, ...]], log: str,
) -> Any:  # fmt: skip
    """The shared training loop: class-balanced batches, AdamW with a one-cycle schedule, label
    smoothing, one target per generator family. ``inputs(picks)``: the network's input tensors."""
    import torch

    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    total = cfg.epochs * cfg.steps_per_epoch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=total, pct_start=0.15)
    w = sample_weights(d, tr)
    names = [s for s, _ in subclasses(d)]
    y_all = np.array([names.index(subclass_of(lab, g)) for lab, g in zip(d.lab, d.gen, strict=True)])
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.05)
    is_bona = torch.from_numpy(d.lab == "bonafide")
    t = time.time()
    net.train()
    for ep in range(cfg.epochs):
        run = 0.0
        for _ in range(cfg.steps_per_epoch):
            picks = rng.choice(tr, size=cfg.batch, p=w)
            opt.zero_grad()
            e = net.embedding(*inputs(picks))
            loss = loss_fn(net.sub_from(e), torch.from_numpy(y_all[picks]))
            if cfg.oc_weight > 0:
                loss = loss + cfg.oc_weight * oc_loss(oc_cosine(e, net.oc_w), is_bona[picks])
            loss.backward()
            opt.step()
            sched.step()
            run += loss.item()
        print(
            f"  {log}epoch {ep + 1}/{cfg.epochs} loss {run / cfg.steps_per_epoch:.3f} "
            f"({time.time() - t:.0f} s)",
            flush=True,
        )
    net.eval()
    return net


def train_net(d: Data, tr: np.ndarray, cfg: TrainConfig, seed: int, log: str = "") -> Any:
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    assert d.cues is not None
    cues = d.cues
    sub = rng.choice(tr, size=min(len(tr), 400), replace=False)
    allf = np.concatenate([d.feats[i].astype(np.float32) for i in sub], axis=2)
    net = build_net(
        allf.mean(axis=2), allf.std(axis=2) + 1e-3, cues[tr], [CLASSES.index(c) for _, c in subclasses(d)],
        oc=cfg.oc_weight > 0,
    )  # fmt: skip
    net.cue_drop = 0.1

    def inputs(picks: np.ndarray) -> tuple[Any, ...]:
        crop = int(rng.integers(cfg.crop_min, cfg.crop + 1))
        x = torch.from_numpy(crop_batch(d.feats, picks, crop, rng, augment=True))
        return x, torch.from_numpy(cues[picks].astype(np.float32))

    return fit_net(net, d, tr, cfg, rng, inputs, log)


def train_fcm_net(d: Data, tr: np.ndarray, cfg: TrainConfig, seed: int, log: str = "") -> Any:
    """The network on the CAM++ front output: random 1-4 s crops, no masking (the front module is
    frozen, so the crops are the only augmentation)."""
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    fcm = d.fcm
    assert fcm is not None
    sub = rng.choice(tr, size=min(len(tr), 400), replace=False)
    allh = np.concatenate([fcm[i].astype(np.float32) for i in sub], axis=1)
    classes = [CLASSES.index(c) for _, c in subclasses(d)]
    net = build_fcm_net(allh.mean(axis=1), allh.std(axis=1) + 1e-3, classes, oc=cfg.oc_weight > 0)

    def inputs(picks: np.ndarray) -> tuple[Any, ...]:
        crop = int(rng.integers(cfg.crop_min, cfg.crop + 1))
        out = np.empty((len(picks), fcm[0].shape[0], crop), np.float32)
        for k, i in enumerate(picks):
            h = fcm[i]
            if h.shape[1] < crop:
                h = np.tile(h, (1, -(-crop // h.shape[1])))
            s = int(rng.integers(0, h.shape[1] - crop + 1))
            out[k] = h[:, s : s + crop]
        return (torch.from_numpy(out),)

    return fit_net(net, d, tr, cfg, rng, inputs, f"{log}[front] ")


OC_WEIGHT = 0.0  # the one-class loss (--oc-weight); see docs/antispoof.md
MEMBERS = 1  # networks per branch (--members): two seeds averaged gained nothing measurable (card)
MEMBER_SEED_STEP = 1000  # member k is trained with seed + k * MEMBER_SEED_STEP


def average(nets: list[Any]) -> Any:
    """One module whose output is the mean of its members' class logits. A network trained on a few
    hundred clips depends on its seed (which crops, which masks, which initial weights); the mean of
    several such networks varies less and ranks clips more steadily. One member is returned as is."""
    if len(nets) == 1:
        return nets[0]
    import torch
    from torch import nn

    class Mean(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.members = nn.ModuleList(nets)

        def forward(self, *x: torch.Tensor) -> torch.Tensor:
            return torch.stack([m(*x) for m in self.members]).mean(dim=0)

    return Mean().eval()


def out_width(net: Any) -> int:
    """4 class logits, and a fifth column (the one-class score) when the network has one."""
    first = net.members[0] if hasattr(net, "members") else net
    return 4 if getattr(first, "oc_w", None) is None else 5


def split_oc(z: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """A network's output as its class logits and, if present, its one-class score column."""
    return z[:, :4], [z[:, 4:]] if z.shape[1] > 4 else []


def predict(net: Any, d: Data, idx: np.ndarray, max_frames: int = 800) -> np.ndarray:
    """Logits of whole clips (the first ``max_frames``), batched by equal length."""
    import torch

    assert d.cues is not None
    feats = d.feats

    out = np.zeros((len(idx), out_width(net)))
    lengths = np.array([min(feats[i].shape[2], max_frames) for i in idx])
    with torch.no_grad():
        for n in np.unique(lengths):
            pos = np.flatnonzero(lengths == n)
            for s in range(0, len(pos), 32):
                p = pos[s : s + 32]
                x = np.stack([feats[idx[k]][:, :, :n] for k in p]).astype(np.float32)
                c = d.cues[idx[p]].astype(np.float32)
                out[p] = net(torch.from_numpy(x), torch.from_numpy(c)).numpy()
    return out


def predict_fcm(net: Any, d: Data, idx: np.ndarray) -> np.ndarray:
    """Class logits of the front-output network on whole clips (at most ``FCM_SECONDS``)."""
    import torch

    fcm = d.fcm
    assert fcm is not None
    out = np.zeros((len(idx), out_width(net)))
    lengths = np.array([fcm[i].shape[1] for i in idx])
    with torch.no_grad():
        for n in np.unique(lengths):
            pos = np.flatnonzero(lengths == n)
            for s in range(0, len(pos), 32):
                p = pos[s : s + 32]
                h = np.stack([fcm[idx[k]] for k in p]).astype(np.float32)
                out[p] = net(torch.from_numpy(h)).numpy()
    return out
