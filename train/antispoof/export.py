"""Export: the fused model as one ONNX graph, its fixed check input, and the check against torch."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from train.antispoof.features import antispoof_engine
from train.antispoof.fusion import Linear, Model
from train.antispoof.split import Data
from verilive.voice.antispoof import MODEL_FILE, FrontEnd
from verilive.voice.campplus import FCM_CHANNELS
from verilive.voice.utterance_cues import FEATURE_NAMES

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Outputs:
    """Where ``--write`` puts the model, the DET plot and the model card's result tables."""

    model: Path = REPO / "src" / "verilive" / "voice" / MODEL_FILE
    det: Path = REPO / "docs" / "antispoof_det.png"
    card: Path = REPO / "docs" / "antispoof.md"  # the tables go in its report.CARD_SECTION

    @classmethod
    def under(cls, folder: Path) -> Outputs:
        """The same file names in ``folder`` (``--candidate``: nothing in the repository changes)."""
        d = cls()
        return cls(folder / d.model.name, folder / d.det.name, folder / d.card.name)


CHECK_SEED, CHECK_FRAMES = 20261124, 150


def check_input(
    bins: int, seed: int = CHECK_SEED, frames: int = CHECK_FRAMES, whisper_dims: int = 0
) -> tuple[np.ndarray, ...]:
    """A fixed model input (spectrogram-like features, cues, front output and, with ``whisper_dims``,
    Whisper statistics), float32, batch of one."""
    rng = np.random.default_rng(seed)
    x = np.stack([rng.normal(-40, 15, (bins, frames)), np.tanh(rng.normal(0, 1, (bins, frames)))])
    c = rng.normal(0, 1, (1, len(FEATURE_NAMES)))
    h = rng.normal(0, 1, (1, FCM_CHANNELS, frames))
    out = [x[None].astype(np.float32), c.astype(np.float32), h.astype(np.float32)]
    if whisper_dims:  # drawn after the others, so the first three stay as they were
        out.append(np.abs(rng.normal(0, 1, (1, whisper_dims))).astype(np.float32))
    return tuple(out)


def export(model: Model, fe: FrontEnd, meta: dict[str, Any], path: Path) -> None:
    import onnx
    import torch
    from torch import nn

    def linear(m: Linear) -> nn.Linear:
        lin = nn.Linear(m.w.shape[1], m.w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.tensor(m.w, dtype=torch.float32))
            lin.bias.copy_(torch.tensor(m.b, dtype=torch.float32))
        return lin

    class Fused(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            f = model.fusion
            self.net, self.fcm_net, self.fcm_linear = model.net, model.fcm_net, linear(model.fcm_linear)
            self.whisper_linear = linear(model.whisper_linear)
            self.cals = nn.ModuleList([linear(c) for c in f.cals])
            self.out, self.bona = linear(f.out), linear(f.bona)
            self.register_buffer("weights", torch.tensor(f.w(), dtype=torch.float32))

        def forward(self, x: torch.Tensor, c: torch.Tensor, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            mu = h.mean(dim=2)
            d = h[:, :, 1:] - h[:, :, :-1]
            n = torch.ones_like(d[:, :1, :]).sum(dim=2).clamp(min=1.0)  # frames - 1, at least 1
            dm = d.sum(dim=2) / n
            stats = torch.cat(
                [
                    mu,
                    torch.sqrt(((h - mu[:, :, None]) ** 2).mean(dim=2)),
                    d.abs().sum(dim=2) / n,
                    torch.sqrt(((d - dm[:, :, None]) ** 2).sum(dim=2) / n),
                ],
                dim=1,
            )  # as fcm_stats
            zn, zf = self.net(x, c), self.fcm_net(h)
            z = [zn[:, :4], zf[:, :4], self.fcm_linear(stats), self.whisper_linear(w)]
            z += [zn[:, 4:]] if zn.shape[1] > 4 else []  # as Model.branches
            z += [zf[:, 4:]] if zf.shape[1] > 4 else []
            logp = [torch.log_softmax(cal(b), dim=1) for cal, b in zip(self.cals, z, strict=True)]
            odds = sum(
                self.weights[k] * (lp[:, :1] - torch.logsumexp(lp[:, 1:], dim=1, keepdim=True))
                for k, lp in enumerate(logp)
            )
            attack = torch.log_softmax(self.out(sum(logp))[:, 1:], dim=1)
            return torch.cat([self.bona(odds), attack], dim=1)

    fused = Fused().eval()
    dims = model.whisper_linear.w.shape[1]
    # the trained graph's answer to a fixed input, kept with the model: a test checks the ONNX file
    # against it (tests/test_antispoof.py)
    with torch.no_grad():
        ref = fused(*(torch.from_numpy(a) for a in check_input(fe.bins, whisper_dims=dims)))
    meta = {
        **meta,
        "check": {
            "seed": CHECK_SEED,
            "frames": CHECK_FRAMES,
            "whisper_dims": dims,
            "logits": ref[0].tolist(),
        },
    }
    x = torch.zeros(1, 2, fe.bins, 300)
    c = torch.zeros(1, len(FEATURE_NAMES))
    h = torch.zeros(1, FCM_CHANNELS, 300)
    w = torch.zeros(1, dims)
    tmp = path.with_suffix(".tmp.onnx")
    torch.onnx.export(
        fused, (x, c, h, w), str(tmp), input_names=["features", "cues", "fcm", "whisper"],
        output_names=["logits"],
        dynamic_axes={"features": {3: "frames"}, "fcm": {2: "fcm_frames"}}, opset_version=17, dynamo=False,
    )  # fmt: skip
    model = onnx.load(str(tmp))
    tmp.unlink()
    entry = model.metadata_props.add()
    entry.key, entry.value = "verilive_antispoof", json.dumps(meta)
    onnx.save(model, str(path))


def check_export(model: Model, d: Data, idx: np.ndarray, path: Path) -> None:
    """The ONNX file at ``path`` gives the same logits as the torch network and the regressions."""
    a = antispoof_engine(path)
    assert d.cues is not None and d.fcm is not None
    fcm = d.fcm
    ref = model.logits(d, idx, max_frames=10**6)
    assert d.whisper is not None
    wh = d.whisper
    got = np.stack(
        [a.logits(d.feats[i].astype(np.float32), d.cues[i], fcm[i].astype(np.float32), wh[i]) for i in idx]
    )
    err = float(np.abs(ref - got).max())
    print(f"ONNX vs torch: max |logit difference| {err:.2e}")
    assert err < 1e-3
