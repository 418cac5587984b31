#!/usr/bin/env python3
"""Write add.onnx, the ONNX Runtime smoke model, with no third-party dependency.

The model: IR version 9, producer "anira-smoke", one graph "add_smoke" holding a single
node Add(x, x) -> y, where x and y are float[3]; default-domain opset 13.
Running it on x = {1, 2, 3} gives y = {2, 4, 6}.

The ONNX protobuf is encoded by hand (fields written in field-number order, as protobuf
serialisers do), so the output is byte-for-byte stable: rerunning this script must
reproduce the committed add.onnx exactly (a unit test checks that).

Usage: make_add_onnx.py [OUTPUT]   (default: add.onnx next to this script)
"""
from __future__ import annotations

import sys
from pathlib import Path

# Protobuf wire types.
_VARINT = 0
_LEN = 2

# onnx.TensorProto.DataType.FLOAT
_FLOAT = 1


def _varint(value: int) -> bytes:
    if value < 0:
        raise ValueError("negative varints are not used in this model")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint((field << 3) | wire_type)


def _int(field: int, value: int) -> bytes:
    return _key(field, _VARINT) + _varint(value)


def _bytes(field: int, payload: bytes) -> bytes:
    return _key(field, _LEN) + _varint(len(payload)) + payload


def _str(field: int, text: str) -> bytes:
    return _bytes(field, text.encode("utf-8"))


def _value_info(name: str, elem_type: int, dims: list[int]) -> bytes:
    # TensorShapeProto.Dimension: dim_value = 1
    shape = b"".join(_bytes(1, _int(1, d)) for d in dims)  # TensorShapeProto: dim = 1
    tensor = _int(1, elem_type) + _bytes(2, shape)  # TypeProto.Tensor: elem_type = 1, shape = 2
    type_proto = _bytes(1, tensor)  # TypeProto: tensor_type = 1
    return _str(1, name) + _bytes(2, type_proto)  # ValueInfoProto: name = 1, type = 2


def build_model() -> bytes:
    # NodeProto: input = 1 (repeated), output = 2, op_type = 4
    node = _str(1, "x") + _str(1, "x") + _str(2, "y") + _str(4, "Add")
    # GraphProto: node = 1, name = 2, input = 11, output = 12
    graph = (
        _bytes(1, node)
        + _str(2, "add_smoke")
        + _bytes(11, _value_info("x", _FLOAT, [3]))
        + _bytes(12, _value_info("y", _FLOAT, [3]))
    )
    # OperatorSetIdProto: domain = 1 (written explicitly as "", as onnx.helper does), version = 2
    opset = _str(1, "") + _int(2, 13)
    # ModelProto: ir_version = 1, producer_name = 2, graph = 7, opset_import = 8
    return _int(1, 9) + _str(2, "anira-smoke") + _bytes(7, graph) + _bytes(8, opset)


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().with_name("add.onnx")
    data = build_model()
    out.write_bytes(data)
    print(f"wrote {out} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
