"""HyperFAS face anti-spoofing model: own PyTorch definition and ONNX converter for the Keras .h5 file.

The source is zeusees/HyperFAS ``model/fas.h5`` (BSD-3-Clause): a Keras 2.2.4 HDF5 file holding the model
config (``model_config``) and the weights. The file is read with h5py only (no TensorFlow). The layer list
is parsed from the config and checked strictly against the one topology this module knows: a MobileNet-v1
chain (3x3 conv, then depthwise 3x3 + pointwise 1x1 blocks, each followed by BatchNorm and ReLU), then a 1x1
conv with bias, Flatten and Dense(1, sigmoid). Channel counts, strides, BatchNorm epsilons and paddings
come from the config, so a file with another layout is refused rather than half-loaded. See
docs/model-hyperfas.md.

Every convolution uses Keras ``padding='same'`` (the file has no ZeroPadding2D layers). TensorFlow's 'same'
pads ``max((ceil(n / s) - 1) * s + k - n, 0)`` pixels per axis, the smaller half before and the larger half
after, so a stride-2 3x3 conv pads (0, 1) on an even input (224, 112, 56, 28, 14) but (1, 1) on the odd
7x7 map of the last stage. The pads are computed per layer from the fixed 224x224 input.

ONNX interface (opset 17, batch dynamic):

- input ``input`` float32 (N, 224, 224, 3): NHWC, **BGR**, ``(pixel - 127.5) / 127.5``, exactly the
  Keras model's input; the graph transposes to NCHW itself.
- output ``p_live`` float32 (N,): the Dense layer's sigmoid, P(live).
- output ``features`` float32 (N, 1024): the 4x4x64 map of the 1x1 conv before Flatten, flattened in
  Keras order (row, column, channel), i.e. the Dense layer's input.

This module imports torch and h5py; it is needed only for conversion (``verilive[convert]``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from verilive.errors import ModelError
from verilive.models.convert.common import check_close, cpu_session, export_legacy, write_verified

INPUT_SIZE = 224
FEATURE_DIM = 1024
INPUT_NAME = "input"
P_LIVE_NAME = "p_live"
FEATURES_NAME = "features"
OUTPUT_NAMES = (P_LIVE_NAME, FEATURES_NAME)
# Batch sizes the export is checked at: 1 and an odd size, so a batch baked in at export time fails.
VERIFY_BATCHES = (1, 3)
VERIFY_ATOL = 1e-4


@dataclass(frozen=True)
class ConvSpec:
    """One Keras convolution as the config describes it, with TF 'same' pads resolved for its input."""

    name: str
    in_ch: int
    out_ch: int
    kernel: int
    stride: int
    pads: tuple[int, int, int, int]  # (left, right, top, bottom), nn.ZeroPad2d order
    depthwise: bool = False
    bias: bool = False


@dataclass(frozen=True)
class BlockSpec:
    """Conv -> BatchNorm (eps) -> ReLU, as the Keras layers ``<conv>``, ``<bn>``, ``<act>``."""

    conv: ConvSpec
    bn: str
    eps: float


@dataclass(frozen=True)
class Architecture:
    """The parsed layer list: initial conv block, (depthwise, pointwise) block pairs, 1x1 head, Dense."""

    stem: BlockSpec
    blocks: tuple[tuple[BlockSpec, BlockSpec], ...]
    head: ConvSpec
    dense: str
    head_size: int  # spatial side of the head's output map

    @property
    def feature_dim(self) -> int:
        return self.head_size * self.head_size * self.head.out_ch


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow 'same' padding of one axis: (before, after); the extra pixel goes after."""
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def _as_int(v: Any) -> int:
    """Keras writes kernel sizes and strides as lists of one value per axis; square ones only here."""
    vals = list(v) if isinstance(v, list | tuple) else [v]
    if len(set(vals)) != 1:
        raise ModelError(f"only square kernels and strides are supported, got {v}")
    return int(vals[0])


def parse_config(config: Mapping[str, Any]) -> Architecture:
    """The :class:`Architecture` of a Keras ``model_config``; ModelError for any other layout.

    The layers must form a single chain from the 224x224x3 input (each layer's only input is the previous
    layer), all ``channels_last``, with exactly the layer classes and activations this module implements.
    """
    if config.get("class_name") not in ("Model", "Functional", "Sequential"):
        raise ModelError(f"unexpected Keras model class {config.get('class_name')!r}")
    body = config.get("config")
    layers = body.get("layers") if isinstance(body, Mapping) else body
    if not isinstance(layers, list) or not layers:
        raise ModelError("Keras model_config has no layer list")

    def inbound(layer: Mapping[str, Any]) -> list[str]:
        nodes = layer.get("inbound_nodes") or []
        return [n[0] for node in nodes for n in node]

    prev: str | None = None
    seq: list[tuple[str, str, Mapping[str, Any]]] = []
    for layer in layers:
        cls, cfg = layer["class_name"], layer["config"]
        name = cfg["name"]
        if prev is not None and inbound(layer) != [prev]:
            raise ModelError(f"layer {name!r} is not fed by {prev!r} alone: not a plain chain")
        if cfg.get("data_format", "channels_last") != "channels_last":
            raise ModelError(f"layer {name!r}: only channels_last is supported")
        seq.append((cls, name, cfg))
        prev = name

    pos = 0

    def take(cls: str) -> tuple[str, Mapping[str, Any]]:
        nonlocal pos
        if pos >= len(seq) or seq[pos][0] != cls:
            got = seq[pos][:2] if pos < len(seq) else "end of model"
            raise ModelError(f"layer {pos}: expected a {cls}, got {got}")
        _, name, cfg = seq[pos]
        pos += 1
        return name, cfg

    _, inp = take("InputLayer")
    shape = list(inp.get("batch_input_shape") or inp.get("batch_shape") or [])
    if shape[1:] != [INPUT_SIZE, INPUT_SIZE, 3]:
        raise ModelError(f"expected input (None, {INPUT_SIZE}, {INPUT_SIZE}, 3), got {shape}")
    size, channels = INPUT_SIZE, 3

    def conv(cls: str, in_ch: int) -> tuple[ConvSpec, int]:
        nonlocal size
        name, cfg = take(cls)
        k, s = _as_int(cfg["kernel_size"]), _as_int(cfg["strides"])
        if cfg.get("activation", "linear") != "linear" or _as_int(cfg.get("dilation_rate", 1)) != 1:
            raise ModelError(f"layer {name!r}: fused activations and dilation are not supported")
        if cls == "DepthwiseConv2D":
            if int(cfg.get("depth_multiplier", 1)) != 1:
                raise ModelError(f"layer {name!r}: depth_multiplier must be 1")
            out_ch = in_ch
        else:
            out_ch = int(cfg["filters"])
        if cfg["padding"] == "same":
            top, bottom = same_pads(size, k, s)
            new_size = math.ceil(size / s)
        elif cfg["padding"] == "valid":
            top = bottom = 0
            new_size = (size - k) // s + 1
        else:
            raise ModelError(f"layer {name!r}: unsupported padding {cfg['padding']!r}")
        size = new_size
        spec = ConvSpec(
            name,
            in_ch,
            out_ch,
            k,
            s,
            (top, bottom, top, bottom),
            cls == "DepthwiseConv2D",
            bool(cfg["use_bias"]),
        )
        return spec, out_ch

    def block(cls: str, in_ch: int) -> tuple[BlockSpec, int]:
        spec, out_ch = conv(cls, in_ch)
        if spec.bias:
            raise ModelError(f"layer {spec.name!r}: a conv before BatchNorm should have no bias")
        bn, bcfg = take("BatchNormalization")
        if bcfg.get("axis", -1) not in (-1, 3, [3]) or not (
            bcfg.get("center", True) and bcfg.get("scale", True)
        ):
            raise ModelError(f"layer {bn!r}: expected a channel BatchNorm with gamma and beta")
        act, acfg = take("Activation")
        if acfg.get("activation") != "relu":
            raise ModelError(f"layer {act!r}: expected relu, got {acfg.get('activation')!r}")
        return BlockSpec(spec, bn, float(bcfg["epsilon"])), out_ch

    stem, channels = block("Conv2D", channels)
    blocks = []
    while pos < len(seq) and seq[pos][0] == "DepthwiseConv2D":
        dw, channels = block("DepthwiseConv2D", channels)
        pw, channels = block("Conv2D", channels)
        if pw.conv.kernel != 1 or pw.conv.stride != 1:
            raise ModelError(f"layer {pw.conv.name!r}: a pointwise conv must be 1x1, stride 1")
        blocks.append((dw, pw))
    head, channels = conv("Conv2D", channels)
    if head.kernel != 1 or head.stride != 1 or not head.bias:
        raise ModelError(f"layer {head.name!r}: expected a 1x1 conv with bias before Flatten")
    take("Flatten")
    dense, dcfg = take("Dense")
    if int(dcfg["units"]) != 1 or dcfg.get("activation") != "sigmoid" or not dcfg.get("use_bias", True):
        raise ModelError(f"layer {dense!r}: expected Dense(1, sigmoid) with bias")
    if pos != len(seq):
        raise ModelError(f"unexpected layers after {dense!r}: {[n for _, n, _ in seq[pos:]]}")
    arch = Architecture(stem, tuple(blocks), head, dense, size)
    if arch.feature_dim != FEATURE_DIM:
        raise ModelError(f"Flatten gives {arch.feature_dim} features, expected {FEATURE_DIM}")
    return arch


class ConvBNReLU(nn.Module):
    """Conv (no bias, or depthwise) -> BatchNorm(eps) -> ReLU, with TF 'same' pads.

    Symmetric pads are the conv's own padding; asymmetric ones (stride 2 on an even input) are a ZeroPad2d
    in front, which :func:`fold_pads` moves into the ONNX Conv's ``pads`` attribute after export.
    """

    def __init__(self, spec: BlockSpec) -> None:
        super().__init__()
        c = spec.conv
        left, right, top, bottom = c.pads
        symmetric = left == right == top == bottom
        self.pad: nn.Module = nn.Identity() if symmetric else nn.ZeroPad2d(c.pads)
        groups = c.in_ch if c.depthwise else 1
        padding = left if symmetric else 0
        self.conv = nn.Conv2d(c.in_ch, c.out_ch, c.kernel, c.stride, padding, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(c.out_ch, eps=spec.eps)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn(self.conv(self.pad(x))))


class HyperFASNet(nn.Module):
    """HyperFAS on (N, 224, 224, 3) NHWC input -> (p_live (N,), features (N, 1024)).

    With the file's config: 224 -> 112 (stem) -> 112 -> 56 -> 56 -> 28 -> 28 -> 14 (x6) -> 7 -> 4, channels
    16 -> 32 -> 64 -> 64 -> 128 -> 128 -> 256 (x6) -> 512 -> 512, then a 1x1 conv to 64 with bias.
    """

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        self.arch = arch
        self.stem = ConvBNReLU(arch.stem)
        self.blocks = nn.Sequential(
            *(nn.Sequential(ConvBNReLU(dw), ConvBNReLU(pw)) for dw, pw in arch.blocks)
        )
        h = arch.head
        self.head = nn.Conv2d(h.in_ch, h.out_ch, h.kernel, h.stride, 0, bias=True)
        self.dense = nn.Linear(arch.feature_dim, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.permute(0, 3, 1, 2)  # NHWC -> NCHW
        y = self.head(self.blocks(self.stem(x)))
        # Keras flattens channels_last maps in (row, column, channel) order.
        features = y.permute(0, 2, 3, 1).flatten(1)
        p_live = torch.sigmoid(self.dense(features)).squeeze(1)
        return p_live, features

    def keras_layers(self) -> dict[str, nn.Module]:
        """Keras layer name -> the torch module that holds its weights."""
        out: dict[str, nn.Module] = {}
        pairs: list[tuple[BlockSpec, ConvBNReLU]] = [(self.arch.stem, self.stem)]
        for (dw, pw), mods in zip(self.arch.blocks, self.blocks, strict=True):
            pairs += [(dw, mods[0]), (pw, mods[1])]
        for spec, mod in pairs:
            out[spec.conv.name] = mod.conv
            out[spec.bn] = mod.bn
        out[self.arch.head.name] = self.head
        out[self.arch.dense] = self.dense
        return out


def read_h5(source: Path) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """(model_config, {layer: {weight name without the layer prefix and ':0': array}}) of a Keras .h5."""
    import h5py

    try:
        with h5py.File(source, "r") as f:
            raw = f.attrs.get("model_config")
            if raw is None:
                raise ModelError(f"{source}: no model_config attribute (a weights-only .h5?)")
            config = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
            group = f.get("model_weights", f)  # full-model files keep weights there
            weights: dict[str, dict[str, np.ndarray]] = {}
            for lname in group.attrs["layer_names"]:
                lname = lname.decode("utf-8") if isinstance(lname, bytes) else str(lname)
                g = group[lname]
                arrays = {}
                for wname in g.attrs.get("weight_names", []):
                    wname = wname.decode("utf-8") if isinstance(wname, bytes) else str(wname)
                    short = wname.rsplit("/", 1)[-1].removesuffix(":0")
                    arrays[short] = np.asarray(g[wname], dtype=np.float32)
                if arrays:
                    weights[lname] = arrays
    except OSError as e:
        raise ModelError(f"{source} is not a readable HDF5 file: {e}") from e
    return config, weights


def _put(param: torch.Tensor, value: np.ndarray, where: str) -> None:
    if tuple(param.shape) != value.shape:
        raise ModelError(f"{where}: weight shape {value.shape} does not fit {tuple(param.shape)}")
    with torch.no_grad():
        param.copy_(torch.from_numpy(np.ascontiguousarray(value)))


def load_weights(model: HyperFASNet, weights: Mapping[str, Mapping[str, np.ndarray]]) -> None:
    """Copy Keras weights into ``model``; every Keras weight must be used exactly once."""
    layers = model.keras_layers()
    if set(weights) != set(layers):
        raise ModelError(
            f"weight layers do not match the config: missing {sorted(set(layers) - set(weights))}, "
            f"unexpected {sorted(set(weights) - set(layers))}"
        )
    for name, mod in layers.items():
        w = dict(weights[name])
        if isinstance(mod, nn.BatchNorm2d):
            expected = {"gamma", "beta", "moving_mean", "moving_variance"}
            if set(w) != expected:
                raise ModelError(f"{name}: expected weights {sorted(expected)}, got {sorted(w)}")
            _put(mod.weight, w["gamma"], name)
            _put(mod.bias, w["beta"], name)
            _put(mod.running_mean, w["moving_mean"], name)
            _put(mod.running_var, w["moving_variance"], name)
        elif isinstance(mod, nn.Conv2d) and mod.groups > 1:
            if set(w) != {"depthwise_kernel"}:
                raise ModelError(f"{name}: expected a depthwise_kernel, got {sorted(w)}")
            k = w["depthwise_kernel"]  # (kh, kw, in, 1) -> (in, 1, kh, kw)
            _put(mod.weight, k.transpose(2, 3, 0, 1), name)
        elif isinstance(mod, nn.Conv2d):
            if set(w) != ({"kernel", "bias"} if mod.bias is not None else {"kernel"}):
                raise ModelError(f"{name}: unexpected weights {sorted(w)}")
            _put(
                mod.weight, w["kernel"].transpose(3, 2, 0, 1), name
            )  # (kh, kw, in, out) -> (out, in, kh, kw)
            if mod.bias is not None:
                _put(mod.bias, w["bias"], name)
        else:  # the Dense layer: kernel (in, out) -> Linear weight (out, in)
            if set(w) != {"kernel", "bias"}:
                raise ModelError(f"{name}: unexpected weights {sorted(w)}")
            _put(mod.weight, w["kernel"].T, name)
            _put(mod.bias, w["bias"], name)


def load_model(source: Path) -> HyperFASNet:
    """The HyperFAS network of a Keras .h5 file, in eval mode; ModelError for any other file."""
    config, weights = read_h5(Path(source))
    model = HyperFASNet(parse_config(config))
    load_weights(model, weights)
    return model.eval()


def export_onnx(model: HyperFASNet, dest: Path) -> None:
    """Write the ONNX file (opset 17, dynamic batch); constant folding merges each BatchNorm into its conv."""
    export_legacy(
        model,
        torch.zeros(1, INPUT_SIZE, INPUT_SIZE, 3),
        dest,
        input_names=[INPUT_NAME],
        output_names=OUTPUT_NAMES,
        dynamic_axes={name: {0: "batch"} for name in (INPUT_NAME, *OUTPUT_NAMES)},
        # ZeroPad2d's pads chain has a reversed Slice the exporter cannot fold; fold_pads removes it.
        ignore_messages=[("Constant folding - Only steps=1", UserWarning)],
    )


def _constant(name: str, producers: Mapping[str, Any], inits: Mapping[str, np.ndarray], cache: dict) -> Any:
    """Value of a tensor computed from constants only (KeyError when it depends on a graph input)."""
    if name in cache:
        return cache[name]
    if name in inits:
        return inits[name]
    node = producers[name]  # KeyError for graph inputs: not a constant
    from onnx.reference import ReferenceEvaluator

    feeds = {i: _constant(i, producers, inits, cache) for i in node.input if i}
    for out, value in zip(node.output, ReferenceEvaluator(node).run(None, feeds), strict=True):
        cache[out] = value
    return cache[name]


def fold_pads(model: Any) -> int:
    """Move constant zero Pad nodes in front of a Conv into the Conv's ``pads``; returns how many.

    The TorchScript exporter writes ``F.pad`` as a Pad whose pads input is computed at run time by a chain
    of Constant/Concat/Reshape/Slice/Cast nodes (its constant folding skips the reversed Slice). Folding
    leaves one Conv with asymmetric pads, which ONNX allows, and the chain is pruned as dead code.
    """
    from onnx import helper, numpy_helper

    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list[Any]] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    graph_outputs = {o.name for o in graph.output}
    cache: dict[str, Any] = {}
    folded = 0
    for pad in [n for n in graph.node if n.op_type == "Pad"]:
        attrs = {a.name: helper.get_attribute_value(a) for a in pad.attribute}
        users = consumers.get(pad.output[0], [])
        if attrs.get("mode", b"constant") != b"constant" or (len(pad.input) > 3 and pad.input[3]):
            continue  # another mode, or an axes input
        if len(users) != 1 or users[0].op_type != "Conv" or pad.output[0] in graph_outputs:
            continue
        conv = users[0]
        try:
            pads = np.asarray(_constant(pad.input[1], producers, inits, cache), dtype=np.int64).ravel()
            fill = (
                _constant(pad.input[2], producers, inits, cache) if len(pad.input) > 2 and pad.input[2] else 0
            )
        except KeyError:
            continue
        # ONNX pads: [begin of each axis..., end of each axis...] for N, C, H, W.
        if (
            pads.size != 8
            or np.any(pads[[0, 1, 4, 5]] != 0)
            or np.any(pads < 0)
            or np.any(np.asarray(fill) != 0)
        ):
            continue
        cattrs = {a.name: a for a in conv.attribute}
        if "auto_pad" in cattrs and helper.get_attribute_value(cattrs["auto_pad"]) not in (b"NOTSET", b""):
            continue
        old = list(cattrs["pads"].ints) if "pads" in cattrs else [0, 0, 0, 0]
        new = [old[0] + int(pads[2]), old[1] + int(pads[3]), old[2] + int(pads[6]), old[3] + int(pads[7])]
        if "pads" in cattrs:
            cattrs["pads"].ints[:] = new
        else:
            conv.attribute.append(helper.make_attribute("pads", new))
        conv.input[0] = pad.input[0]
        folded += 1
    _prune(graph)
    return folded


def _prune(graph: Any) -> None:
    """Drop nodes and initializers nothing reads any more."""
    while True:
        used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        dead = [n for n in graph.node if not any(o in used for o in n.output)]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
    used = {i for n in graph.node for i in n.input}
    for t in [t for t in graph.initializer if t.name not in used]:
        graph.initializer.remove(t)


def finish_onnx(path: Path) -> None:
    """Fold the exporter's Pad chains into the Convs and declare the outputs as [batch] and [batch, 1024]."""
    import onnx

    model = onnx.load(str(path))
    fold_pads(model)
    for out in model.graph.output:
        dims = {P_LIVE_NAME: ["batch"], FEATURES_NAME: ["batch", FEATURE_DIM]}.get(out.name)
        if dims is None:
            continue
        shape = out.type.tensor_type.shape
        del shape.dim[:]
        for d in dims:
            dim = shape.dim.add()
            if isinstance(d, str):
                dim.dim_param = d
            else:
                dim.dim_value = d
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))


def verify_onnx(model: HyperFASNet, path: Path, batches: Sequence[int] = VERIFY_BATCHES) -> float:
    """Compare onnxruntime with torch on random inputs in [-1, 1); returns the max |diff| or raises."""
    sess = cpu_session(path)
    rng = np.random.default_rng(0)
    worst = 0.0
    for n in batches:
        x = (rng.random((n, INPUT_SIZE, INPUT_SIZE, 3)) * 2.0 - 1.0).astype(np.float32)
        with torch.no_grad():
            want = [t.numpy() for t in model(torch.from_numpy(x))]
        got = sess.run(list(OUTPUT_NAMES), {INPUT_NAME: x})
        for name, g, w in zip(OUTPUT_NAMES, got, want, strict=True):
            worst = max(worst, check_close(g, w, VERIFY_ATOL, f"HyperFAS ONNX export at batch {n}: {name}"))
    return worst


def convert(source: Path, dest: Path) -> None:
    """Converter for the model store: ``fas.h5`` -> verified ONNX; nothing is written when it fails."""
    model = load_model(Path(source))

    def export(path: Path) -> None:
        export_onnx(model, path)
        finish_onnx(path)

    write_verified(dest, export, lambda p: verify_onnx(model, p))
