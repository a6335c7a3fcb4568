"""Cut a sub-graph out of a serialized ONNX model without the ``onnx`` package (issue 49).

The services run on onnxruntime alone; ``onnx`` (31 MB) is only needed to convert models. Two
runtime jobs edit a graph: the CAM++ front module is cut out of the converted CAM++ model for the
anti-spoofing features, and Silero VAD's per-window encoder and weights are cut out of one branch
of its sample-rate ``If`` so the encoder runs batched (voice/vad.py). This module declares the few
ONNX protobuf fields those jobs read (node names, inputs, outputs and sub-graph attributes,
initializer names, graph inputs and outputs) as a small protobuf schema of its own; every other
field (other attributes, tensor data, opsets, metadata) is kept byte for byte as an unknown field
when the model is parsed and written back. Field numbers are ONNX's (onnx.proto3).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "verilive_onnx_subset"
_STR, _INT32, _MSG = (
    descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
)
_ONE = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
_MANY = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
# message -> [(field, number, type, label, message type)]
_FIELDS: dict[str, list[tuple[str, int, int, int, str]]] = {
    "ModelProto": [("graph", 7, _MSG, _ONE, "GraphProto")],
    "GraphProto": [
        ("node", 1, _MSG, _MANY, "NodeProto"),
        ("name", 2, _STR, _ONE, ""),
        ("initializer", 5, _MSG, _MANY, "TensorProto"),
        ("input", 11, _MSG, _MANY, "ValueInfoProto"),
        ("output", 12, _MSG, _MANY, "ValueInfoProto"),
        ("value_info", 13, _MSG, _MANY, "ValueInfoProto"),
    ],
    "NodeProto": [
        ("input", 1, _STR, _MANY, ""),
        ("output", 2, _STR, _MANY, ""),
        ("name", 3, _STR, _ONE, ""),
        ("op_type", 4, _STR, _ONE, ""),
        ("attribute", 5, _MSG, _MANY, "AttributeProto"),
    ],
    "AttributeProto": [("name", 1, _STR, _ONE, ""), ("g", 6, _MSG, _ONE, "GraphProto")],
    "TensorProto": [("name", 8, _STR, _ONE, "")],
    "ValueInfoProto": [("name", 1, _STR, _ONE, ""), ("type", 2, _MSG, _ONE, "TypeProto")],
    "TypeProto": [("tensor_type", 1, _MSG, _ONE, "TensorTypeProto")],
    "TensorTypeProto": [("elem_type", 1, _INT32, _ONE, "")],
}
FLOAT = 1  # TensorProto.DataType.FLOAT


@cache
def _classes() -> dict[str, Any]:
    f = descriptor_pb2.FileDescriptorProto(name=f"{_PACKAGE}.proto", package=_PACKAGE, syntax="proto2")
    for name, fields in _FIELDS.items():
        m = f.message_type.add(name=name)
        for fname, number, ftype, label, mtype in fields:
            fd = m.field.add(name=fname, number=number, type=ftype, label=label)
            if mtype:
                fd.type_name = f".{_PACKAGE}.{mtype}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
        for name in _FIELDS
    }


def parse_model(data: bytes) -> Any:
    """The model as this module's ``ModelProto`` (unknown fields kept)."""
    model = _classes()["ModelProto"]()
    model.ParseFromString(data)
    return model


def cut_subgraph(
    data: bytes, output: str | Sequence[str], name: str, branch: tuple[str, str] | None = None
) -> bytes:
    """A model computing only the graph outputs ``output`` (float32 tensors some node writes) of the
    serialized model ``data``: the nodes they depend on, their initializers, the graph inputs they
    read. The graph's nodes must be in topological order (ONNX requires it).

    ``branch`` = (node name, attribute name) cuts from a sub-graph instead, e.g. one branch of an
    ``If``: names the branch reads from the outer scope must be inputs of the main graph."""
    outputs = [output] if isinstance(output, str) else list(output)
    model = parse_model(data)
    graph = model.graph
    outer_inputs = list(graph.input)
    if branch is not None:
        graph = _subgraph(graph, *branch)
    for out_name in outputs:
        if not any(out_name in n.output for n in graph.node):
            raise ValueError(f"no node of the graph writes {out_name!r}")
    needed, keep = set(outputs), []
    for node in reversed(graph.node):
        if needed.intersection(node.output):
            keep.append(node)
            needed.update(i for i in node.input if i)
    keep.reverse()
    inits = [t for t in graph.initializer if t.name in needed]
    written = {o for n in keep for o in n.output}
    inputs = [v for v in (graph.input if branch is None else outer_inputs) if v.name in needed - written]
    nodes = [_copy(n) for n in keep]
    init_copies = [_copy(t) for t in inits]
    input_copies = [_copy(v) for v in inputs]
    main = model.graph
    if branch is not None:
        unresolved = needed - written - {t.name for t in inits} - {v.name for v in inputs}
        if unresolved:
            raise ValueError(f"the branch reads names the main graph does not give: {sorted(unresolved)}")
    del main.node[:], main.initializer[:], main.input[:], main.output[:], main.value_info[:]
    main.node.extend(nodes)
    main.initializer.extend(init_copies)
    main.input.extend(input_copies)
    for out_name in outputs:
        out = main.output.add(name=out_name)
        out.type.tensor_type.elem_type = FLOAT
    main.name = name
    return model.SerializeToString()


def _copy(message: Any) -> Any:
    dst = type(message)()
    dst.CopyFrom(message)
    return dst


def _subgraph(graph: Any, node_name: str, attribute: str) -> Any:
    for node in graph.node:
        if node.name == node_name:
            for attr in node.attribute:
                if attr.name == attribute and attr.HasField("g"):
                    return attr.g
            raise ValueError(f"node {node_name!r} has no sub-graph attribute {attribute!r}")
    raise ValueError(f"no node named {node_name!r} in the graph")


def branch_nodes(data: bytes, node_name: str, attribute: str) -> list[tuple[str, str, list[str]]]:
    """(name, op type, outputs) of every node of a sub-graph (e.g. an ``If`` branch), in order."""
    sub = _subgraph(parse_model(data).graph, node_name, attribute)
    return [(n.name, n.op_type, list(n.output)) for n in sub.node]


def node_names(data: bytes) -> list[tuple[str, str, list[str]]]:
    """(name, op type, outputs) of every node, in graph order."""
    return [(n.name, n.op_type, list(n.output)) for n in parse_model(data).graph.node]
