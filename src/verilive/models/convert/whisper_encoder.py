"""OpenAI Whisper's audio encoder from a CTranslate2 ``model.bin`` to ONNX (docs/model-whisper.md).

The CTranslate2 file is a flat list of named tensors. Layout (binary version 6, little-endian): u32
version; the spec name (u16 length, bytes with a trailing NUL) and a u32 spec revision; u32 variable
count; per variable its name, a u8 rank, u32 dims, a u8 data type (0 float32, 1 int8, 2 int16, 3 int32,
4 float16, 5 bfloat16) and a u32 byte count, then the bytes; then u32 alias count and alias/target name
pairs. Only ``encoder/...`` is read.

The encoder (the Whisper paper's architecture, facts only): two 1-D convolutions (kernel 3; the second
with stride 2) with exact GELU, sinusoidal position encodings added, N pre-norm Transformer blocks
(self-attention with a fused q/k/v projection, then a 4x MLP with GELU; LayerNorm eps 1e-5), a final
LayerNorm. Input: log-mel [batch, 80, frames] (100 frames per second); output ``encoded`` [batch,
frames/2, dims] (after the final LayerNorm, what CTranslate2's ``encode`` returns) and ``layers``
[batch, N+1, frames/2, dims]: the residual stream after the convolutions and after each block (before
the final LayerNorm), for probes that weigh the layers.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

import numpy as np

from verilive.errors import ModelError
from verilive.models.convert.common import export_legacy

INPUT_NAME = "mel"
OUTPUTS = ("encoded", "layers")
N_MELS = 80
LN_EPS = 1e-5
_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def read_ct2(path: Path, prefix: str = "encoder/") -> dict[str, np.ndarray]:
    """The tensors of a CTranslate2 model file whose names start with ``prefix`` (float16 -> float32)."""
    data = memoryview(path.read_bytes())
    pos = 0

    def take(fmt: str) -> Any:
        nonlocal pos
        (value,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return value

    def name() -> str:
        nonlocal pos
        n = take("<H")
        raw = bytes(data[pos : pos + n])
        pos += n
        return raw.rstrip(b"\0").decode("utf-8")

    version = take("<I")
    if version != 6:
        raise ModelError(f"{path.name}: CTranslate2 binary version {version}, expected 6")
    spec = name()
    take("<I")  # spec revision
    if spec != "WhisperSpec":
        raise ModelError(f"{path.name}: a {spec!r}, not a Whisper model")
    out: dict[str, np.ndarray] = {}
    for _ in range(take("<I")):
        var = name()
        dims = [take("<I") for _ in range(take("<B"))]
        dtype = take("<B")
        nbytes = take("<I")
        if var.startswith(prefix):
            if dtype not in _DTYPES:
                raise ModelError(f"{path.name}: {var} has data type {dtype}, not supported")
            arr = np.frombuffer(data[pos : pos + nbytes], dtype=_DTYPES[dtype]).reshape(dims)
            out[var.removeprefix(prefix)] = arr.astype(np.float32) if dtype == 4 else arr.copy()
        pos += nbytes
    if "conv1/weight" not in out:
        raise ModelError(f"{path.name}: no encoder tensors")
    return out


def n_layers(weights: dict[str, np.ndarray]) -> int:
    return len({k.split("/")[0] for k in weights if re.match(r"layer_\d+/", k)})


def build_module(weights: dict[str, np.ndarray]) -> Any:
    """The encoder as a torch module with the given weights (torch is imported here: convert extra)."""
    import torch
    from torch import nn

    heads = int(weights["num_heads"].reshape(-1)[0])
    dims = weights["conv1/weight"].shape[0]

    def param(key: str) -> nn.Parameter:
        return nn.Parameter(torch.from_numpy(np.ascontiguousarray(weights[key], dtype=np.float32)))

    def layer_norm(key: str) -> nn.LayerNorm:
        ln = nn.LayerNorm(dims, eps=LN_EPS)
        ln.weight, ln.bias = param(f"{key}/gamma"), param(f"{key}/beta")
        return ln

    def linear(key: str) -> nn.Linear:
        w = weights[f"{key}/weight"]
        lin = nn.Linear(w.shape[1], w.shape[0])
        lin.weight, lin.bias = param(f"{key}/weight"), param(f"{key}/bias")
        return lin

    class Block(nn.Module):
        def __init__(self, i: int) -> None:
            super().__init__()
            p = f"layer_{i}"
            self.ln1 = layer_norm(f"{p}/self_attention/layer_norm")
            self.qkv = linear(f"{p}/self_attention/linear_0")
            self.out = linear(f"{p}/self_attention/linear_1")
            self.ln2 = layer_norm(f"{p}/ffn/layer_norm")
            self.fc1 = linear(f"{p}/ffn/linear_0")
            self.fc2 = linear(f"{p}/ffn/linear_1")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(dims, dim=-1)

            def split(z: torch.Tensor) -> torch.Tensor:
                return z.reshape(b, t, heads, dims // heads).transpose(1, 2)

            scores = split(q) @ split(k).transpose(-1, -2) * float((dims // heads) ** -0.5)
            att = (scores.softmax(dim=-1) @ split(v)).transpose(1, 2).reshape(b, t, dims)
            x = x + self.out(att)
            return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv1d(N_MELS, dims, 3, padding=1)
            self.conv1.weight, self.conv1.bias = param("conv1/weight"), param("conv1/bias")
            self.conv2 = nn.Conv1d(dims, dims, 3, stride=2, padding=1)
            self.conv2.weight, self.conv2.bias = param("conv2/weight"), param("conv2/bias")
            self.register_buffer("pos", torch.from_numpy(weights["position_encodings/encodings"].copy()))
            self.blocks = nn.ModuleList(Block(i) for i in range(n_layers(weights)))
            self.ln_post = layer_norm("layer_norm")

        def forward(self, mel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            x = nn.functional.gelu(self.conv1(mel))
            x = nn.functional.gelu(self.conv2(x)).transpose(1, 2)
            x = x + self.pos[: x.shape[1]]
            states = [x]
            for block in self.blocks:
                x = block(x)
                states.append(x)
            return self.ln_post(x), torch.stack(states, dim=1)

    return Encoder().eval()


def convert(source: Path, dest: Path) -> None:
    """CTranslate2 ``model.bin`` -> ONNX encoder (opset 17, dynamic batch and frames)."""
    import torch

    weights = read_ct2(source)
    model = build_module(weights)
    export_legacy(
        model,
        torch.zeros(1, N_MELS, 400),
        dest,
        input_names=[INPUT_NAME],
        output_names=OUTPUTS,
        dynamic_axes={
            INPUT_NAME: {0: "batch", 2: "frames"},
            "encoded": {0: "batch", 1: "steps"},
            "layers": {0: "batch", 2: "steps"},
        },
        ignore=None,  # the legacy exporter announces its own deprecation
    )
