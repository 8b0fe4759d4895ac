#!/usr/bin/env python3
"""Checks that a safetensors file written by exapt reads back in Python.

    build/tests/test_safetensors --write-sample /tmp/sample.safetensors
    python3 tests/check_safetensors.py /tmp/sample.safetensors

Reads the file with safetensors.torch.load_file when PyTorch and safetensors are
installed (the interoperability that matters), and always with a strict parser written
from the format's description using only the standard library. Checks the sample's
names, dtypes, shapes, values and metadata. Exit status 0 when all checks pass.
"""
import json
import struct
import sys

INT64_MAX = 2**63 - 1
EXPECTED = {
    "cells.0.w": ("F32", [2, 3], [1.5, -2.0, 3.25, 0.0, -0.0, 1e-30]),
    "labels": ("I32", [5], [7, -8, 2147483647, -2147483648, 0]),
    "steps": ("I64", [2, 1, 3, 1], [1, -1, INT64_MAX, -INT64_MAX - 1, 42, 1 << 40]),
    "lr": ("F32", [], [0.125]),
    "empty": ("F32", [0, 4], []),
}
METADATA = {"format": "pt", "exapt.note": "grüße"}
FORMATS = {"F32": ("f", 4), "I32": ("i", 4), "I64": ("q", 8)}


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same(dtype, got, want):
    if len(got) != len(want):
        return False
    if dtype == "F32":
        return all(struct.pack("<f", g) == struct.pack("<f", f32(w)) for g, w in zip(got, want))
    return list(got) == list(want)


def read_manual(path):
    """The format from its description: u64 length, JSON header, data tiled exactly."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0, "header length is not a multiple of 8"
    assert 8 + n <= len(data), "header length past the end of the file"
    text = data[8 : 8 + n].decode("utf-8")
    assert text.startswith("{") and text.rstrip(" ").endswith("}"), "header framing"
    header = json.loads(text)
    meta = header.pop("__metadata__", {})
    body = data[8 + n :]
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1]) for v in header.values())
    pos = 0
    for b, e in spans:
        assert b == pos, "data offsets leave a gap or overlap"
        pos = e
    assert pos == len(body), "data offsets do not cover the data section"
    out = {}
    for name, v in header.items():
        code, size = FORMATS[v["dtype"]]
        b, e = v["data_offsets"]
        count = (e - b) // size
        assert b % size == 0, f"{name} is not aligned to its element size"
        out[name] = (v["dtype"], v["shape"], list(struct.unpack(f"<{count}{code}", body[b:e])))
    return out, meta


def check(tensors, meta, how):
    ok = True
    for name, (dtype, shape, values) in EXPECTED.items():
        got = tensors.get(name)
        if got is None or got[0] != dtype or list(got[1]) != shape or not same(dtype, got[2], values):
            print(f"{how}: {name} differs: {got}")
            ok = False
    if set(tensors) != set(EXPECTED):
        print(f"{how}: names differ: {sorted(tensors)}")
        ok = False
    if meta is not None and meta != METADATA:
        print(f"{how}: metadata differs: {meta}")
        ok = False
    print(f"{how}: {'ok' if ok else 'FAILED'}")
    return ok


def read_torch(path):
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file

    names = {torch.float32: "F32", torch.int32: "I32", torch.int64: "I64"}
    loaded = load_file(path)
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
    out = {k: (names[t.dtype], list(t.shape), t.flatten().tolist()) for k, t in loaded.items()}
    return out, meta


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    path = sys.argv[1]
    ok = check(*read_manual(path), "manual parser")
    try:
        tensors, meta = read_torch(path)
    except ImportError:
        print("safetensors.torch: not installed here, skipped")
    else:
        ok = check(tensors, meta, "safetensors.torch.load_file") and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
