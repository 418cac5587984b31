#!/usr/bin/env python3
"""Write add.tflite, the TFLite / LiteRT smoke model, with no third-party dependency.

Semantics match TensorFlow's ``tensorflow/lite/testdata/add.bin``, which upstream's smoke
downloaded: ``y = (x + x) + x``, i.e. three times the input, as two builtin ADD ops.
The input is float32 of shape [1, 1, 1, 2] (NHWC, like add.bin's [1, 8, 8, 3], so GPU
delegates such as Metal take the ops): {1, 3} -> {3, 9}. The TFLite smoke's CPU pass
resizes the input to [2] exactly as upstream did with add.bin; its Metal pass and the
LiteRT smoke run the model at its own shape.

Layout: one subgraph "main", tensors x (input), x_plus_x, y (output), each with its own
empty buffer after the empty sentinel buffer 0; one SignatureDef "serving_default"
(x -> y) for LiteRT's signature-based API; description "anira-smoke".

The FlatBuffer is written by a tiny forward writer below (every referenced object is
placed after the field that references it, all offsets aligned), so the output is
byte-for-byte stable: rerunning this script reproduces the committed add.tflite.

Usage: make_add_tflite.py [OUTPUT]   (default: add.tflite next to this script)
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

# ---------------------------------------------------------------- minimal FlatBuffer writer


class Table:
    """A table: ``fields`` maps vtable slot -> Scalar or a referenced object."""

    def __init__(self, **fields):
        self.fields = fields  # "s<slot>" -> value


class Scalar:
    def __init__(self, fmt: str, value):
        self.fmt = "<" + fmt
        self.value = value
        self.size = struct.calcsize(self.fmt)


class String:
    def __init__(self, text: str):
        self.data = text.encode("utf-8")


class TableVector:
    def __init__(self, items: list[Table]):
        self.items = items


class IntVector:
    def __init__(self, values: list[int]):
        self.values = values


def _u8(v: int) -> Scalar:
    return Scalar("B", v)


def _i8(v: int) -> Scalar:
    return Scalar("b", v)


def _i32(v: int) -> Scalar:
    return Scalar("i", v)


def _u32(v: int) -> Scalar:
    return Scalar("I", v)


class Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def _pad_to(self, alignment: int, extra: int = 0) -> None:
        while (len(self.buf) + extra) % alignment:
            self.buf.append(0)

    def _patch_offset(self, at: int, target: int) -> None:
        assert target > at, "forward writer: referenced objects must follow the reference"
        struct.pack_into("<I", self.buf, at, target - at)

    def emit(self, obj) -> int:
        """Append ``obj`` (and then everything it references); return its position."""
        if isinstance(obj, Table):
            return self._table(obj)
        if isinstance(obj, String):
            self._pad_to(4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(obj.data)) + obj.data + b"\0"
            return pos
        if isinstance(obj, IntVector):
            self._pad_to(4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(obj.values))
            self.buf += b"".join(struct.pack("<i", v) for v in obj.values)
            return pos
        if isinstance(obj, TableVector):
            self._pad_to(4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(obj.items))
            slots = []
            for _ in obj.items:
                slots.append(len(self.buf))
                self.buf += b"\0\0\0\0"
            for slot, item in zip(slots, obj.items):
                self._patch_offset(slot, self.emit(item))
            return pos
        raise TypeError(obj)

    def _table(self, table: Table) -> int:
        fields = sorted(((int(k[1:]), v) for k, v in table.fields.items()), key=lambda kv: kv[0])
        # Inline layout: soffset (4 bytes), then the fields, largest first, each aligned.
        def size(v):
            return v.size if isinstance(v, Scalar) else 4

        layout = {}
        offset = 4
        for slot, value in sorted(fields, key=lambda kv: (-size(kv[1]), kv[0])):
            s = size(value)
            offset = (offset + s - 1) // s * s
            layout[slot] = offset
            offset += s
        inline_size = offset
        nslots = (max(layout) + 1) if layout else 0
        vtable = [4 + 2 * nslots, inline_size] + [layout.get(i, 0) for i in range(nslots)]

        self._pad_to(2)
        vtable_pos = len(self.buf)
        self.buf += struct.pack(f"<{len(vtable)}H", *vtable)
        self._pad_to(4)
        table_pos = len(self.buf)
        self.buf += bytes(inline_size)
        struct.pack_into("<i", self.buf, table_pos, table_pos - vtable_pos)
        refs = []
        for slot, value in fields:
            at = table_pos + layout[slot]
            if isinstance(value, Scalar):
                struct.pack_into(value.fmt, self.buf, at, value.value)
            else:
                refs.append((at, value))
        for at, value in refs:
            self._patch_offset(at, self.emit(value))
        return table_pos

    def finish(self, root: Table, identifier: bytes) -> bytes:
        assert len(identifier) == 4
        self.buf = bytearray(8)  # root uoffset + file identifier
        self.buf[4:8] = identifier
        self._patch_offset(0, self.emit(root))
        self._pad_to(4)
        return bytes(self.buf)


# ---------------------------------------------------------------- the model (schema.fbs slots)

_FLOAT32 = 0  # TensorType
_ADD = 0  # BuiltinOperator
_ADD_OPTIONS = 11  # BuiltinOptions union index of AddOptions


def _tensor(name: str, buffer: int) -> Table:
    # Tensor: shape 0, type 1, buffer 2, name 3
    return Table(s0=IntVector([1, 1, 1, 2]), s1=_i8(_FLOAT32), s2=_u32(buffer), s3=String(name))


def _add(inputs: list[int], outputs: list[int]) -> Table:
    # Operator: opcode_index 0, inputs 1, outputs 2, builtin_options_type 3, builtin_options 4
    # AddOptions{} (fused_activation_function NONE is the default).
    return Table(s0=_u32(0), s1=IntVector(inputs), s2=IntVector(outputs),
                 s3=_u8(_ADD_OPTIONS), s4=Table())


def _tensor_map(name: str, index: int) -> Table:
    # TensorMap: name 0, tensor_index 1
    return Table(s0=String(name), s1=_u32(index))


def build_model() -> bytes:
    tensors = [_tensor("x", 1), _tensor("x_plus_x", 2), _tensor("y", 3)]
    operators = [_add([0, 0], [1]), _add([1, 0], [2])]
    # SubGraph: tensors 0, inputs 1, outputs 2, operators 3, name 4
    subgraph = Table(s0=TableVector(tensors), s1=IntVector([0]), s2=IntVector([2]),
                     s3=TableVector(operators), s4=String("main"))
    # OperatorCode: deprecated_builtin_code 0 (byte), custom_code 1, version 2, builtin_code 3
    opcode = Table(s0=_i8(_ADD), s2=_i32(1), s3=_i32(_ADD))
    # SignatureDef: inputs 0, outputs 1, signature_key 2, (deprecated_tag 3), subgraph_index 4
    signature = Table(s0=TableVector([_tensor_map("x", 0)]), s1=TableVector([_tensor_map("y", 2)]),
                      s2=String("serving_default"), s4=_u32(0))
    # Buffer: all empty; buffer 0 is the sentinel.
    buffers = [Table() for _ in range(4)]
    # Model: version 0, operator_codes 1, subgraphs 2, description 3, buffers 4,
    #        metadata_buffer 5, metadata 6, signature_defs 7
    model = Table(s0=_u32(3), s1=TableVector([opcode]), s2=TableVector([subgraph]),
                  s3=String("anira-smoke"), s4=TableVector(buffers), s7=TableVector([signature]))
    return Writer().finish(model, b"TFL3")


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().with_name("add.tflite")
    data = build_model()
    out.write_bytes(data)
    print(f"wrote {out} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
