"""Cut a sub-graph out of a serialized ONNX model without the ``onnx`` package (issue 49).

The services run on onnxruntime alone; ``onnx`` (31 MB) is only needed to convert models. One
runtime job edits a graph: the CAM++ front module is cut out of the converted CAM++ model for the
anti-spoofing features. This module declares the few ONNX protobuf fields that job reads (node
names, inputs and outputs, initializer names, graph inputs and outputs) as a small protobuf schema
of its own; every other field (attributes, tensor data, opsets, metadata) is kept byte for byte as
an unknown field when the model is parsed and written back. Field numbers are ONNX's (onnx.proto3).
"""

from __future__ import annotations

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
    ],
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


def cut_subgraph(data: bytes, output: str, name: str) -> bytes:
    """A model computing only graph output ``output`` (float32, a tensor some node writes) of the
    serialized model ``data``: the nodes it depends on, their initializers, the graph inputs they
    read. The graph's nodes must be in topological order (ONNX requires it)."""
    model = parse_model(data)
    graph = model.graph
    if not any(output in n.output for n in graph.node):
        raise ValueError(f"no node of the graph writes {output!r}")
    needed, keep = {output}, []
    for node in reversed(graph.node):
        if needed.intersection(node.output):
            keep.append(node)
            needed.update(i for i in node.input if i)
    keep.reverse()
    inits = [t for t in graph.initializer if t.name in needed]
    inputs = [v for v in graph.input if v.name in needed]
    nodes = [type(n)() for n in keep]
    for dst, src in zip(nodes, keep, strict=True):
        dst.CopyFrom(src)
    init_copies = [type(t)() for t in inits]
    for dst, src in zip(init_copies, inits, strict=True):
        dst.CopyFrom(src)
    input_copies = [type(v)() for v in inputs]
    for dst, src in zip(input_copies, inputs, strict=True):
        dst.CopyFrom(src)
    del graph.node[:], graph.initializer[:], graph.input[:], graph.output[:], graph.value_info[:]
    graph.node.extend(nodes)
    graph.initializer.extend(init_copies)
    graph.input.extend(input_copies)
    out = graph.output.add(name=output)
    out.type.tensor_type.elem_type = FLOAT
    graph.name = name
    return model.SerializeToString()


def node_names(data: bytes) -> list[tuple[str, str, list[str]]]:
    """(name, op type, outputs) of every node, in graph order."""
    return [(n.name, n.op_type, list(n.output)) for n in parse_model(data).graph.node]
