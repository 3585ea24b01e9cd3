#!/usr/bin/python3
# check-torch-reads.py: manual check that PyTorch reads safetensors files
# written by accel-lua. Needs torch + safetensors (Debian: python3-torch;
# CI does not have them, so this is not part of `make test`).
#
#   /usr/bin/python3 scripts/check-torch-reads.py [--accel BUILD/accel-lua] [FILE]
#
# Without FILE it runs accel-lua to write a temporary file holding one tensor
# per dtype PyTorch 1.13 knows (float8 is left out: torch 1.13 has none),
# each a closed-form formula of its index, plus metadata {format = "pt"};
# then it loads that file with safetensors.torch.load_file and asserts
# dtype, shape and every value against the same formulas computed here.
# With FILE it only loads and prints FILE (and checks its header layout).
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> (accel dtype, torch dtype, shape, formula of the flat index i)
CASES = {
    "f32_2x3": ("float32", torch.float32, (2, 3), lambda i: i * 0.25 - 1),
    "f32_2x3x4": ("float32", torch.float32, (2, 3, 4), lambda i: i * 0.5 - 6),
    "f64_3x4": ("float64", torch.float64, (3, 4), lambda i: (i // 4) * 10 + (i % 4) / 4),
    "bf16_2x4": ("bfloat16", torch.bfloat16, (2, 4), lambda i: (i - 3) * 1.5),
    "f16_6": ("float16", torch.float16, (6,), lambda i: (i - 2) ** 3 / 8),
    "i64_5": ("int64", torch.int64, (5,), lambda i: (i - 2) * 1000000007000),
    "i32_4": ("int32", torch.int32, (4,), lambda i: (i - 2) * 100000),
    "u8_6": ("uint8", torch.uint8, (6,), lambda i: i * 50),
    "bool_7": ("bool", torch.bool, (7,), lambda i: i % 3 == 0),
}

# The same formulas in Lua, for accel-lua to write the file.
LUA_WRITER = r"""
local path = arg[1]
local function gen(n, f) local r = {} for i = 0, n - 1 do r[i + 1] = f(i) end return r end
local function mk(n, dt, shape, f)
  return accel.tensor(gen(n, f), {dtype = accel[dt]}):reshape(table.unpack(shape))
end
accel.save({
  f32_2x3 = mk(6, "float32", {2, 3}, function(i) return i * 0.25 - 1 end),
  f32_2x3x4 = mk(24, "float32", {2, 3, 4}, function(i) return i * 0.5 - 6 end),
  f64_3x4 = mk(12, "float64", {3, 4}, function(i) return (i // 4) * 10 + (i % 4) / 4 end),
  bf16_2x4 = mk(8, "bfloat16", {2, 4}, function(i) return (i - 3) * 1.5 end),
  f16_6 = mk(6, "float16", {6}, function(i) return (i - 2) ^ 3 / 8 end),
  i64_5 = mk(5, "int64", {5}, function(i) return (i - 2) * 1000000007000 end),
  i32_4 = mk(4, "int32", {4}, function(i) return (i - 2) * 100000 end),
  u8_6 = mk(6, "uint8", {6}, function(i) return i * 50 end),
  bool_7 = mk(7, "bool", {7}, function(i) return i % 3 == 0 end),
}, path, {format = "pt", writer = "accel-lua"})
"""


def check_layout(path):
    """Checks the byte layout the safetensors format asks for."""
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    body = len(raw) - 8 - hlen
    spans = sorted(tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__")
    pos = 0
    for a, b in spans:
        assert a == pos, f"data_offsets not contiguous at {a} (expected {pos})"
        pos = b
    assert pos == body, f"tensor data covers {pos} bytes, file body has {body}"
    print(f"layout ok: header {hlen} bytes (multiple of 8: {hlen % 8 == 0}), body {body} bytes")
    return header


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--accel", default=os.path.join(ROOT, os.environ.get("ACCEL_BUILD", "build"), "accel-lua"))
    ap.add_argument("file", nargs="?")
    args = ap.parse_args()

    tmp = None
    path = args.file
    if path is None:
        fd, tmp = tempfile.mkstemp(suffix=".safetensors")
        os.close(fd)
        path = tmp
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lf:
            lf.write(LUA_WRITER)
        try:
            subprocess.run([args.accel, lf.name, path], check=True)
        finally:
            os.remove(lf.name)

    try:
        check_layout(path)
        tensors = load_file(path)
        with safe_open(path, framework="pt") as f:
            meta = f.metadata()
        print(f"torch {torch.__version__} loaded {len(tensors)} tensors from {path}; metadata {meta}")
        for name in sorted(tensors):
            t = tensors[name]
            print(f"  {name}: {t.dtype} {tuple(t.shape)} {t.flatten().tolist()}")
        if args.file is None:
            assert meta == {"format": "pt", "writer": "accel-lua"}, meta
            assert sorted(tensors) == sorted(CASES), sorted(tensors)
            for name, (_, tdt, shape, f) in CASES.items():
                t = tensors[name]
                assert t.dtype == tdt, (name, t.dtype)
                assert tuple(t.shape) == shape, (name, t.shape)
                n = t.numel()
                want = torch.tensor([f(i) for i in range(n)], dtype=tdt).reshape(shape)
                assert torch.equal(t, want), (name, t, want)
            print(f"OK: PyTorch reads all {len(CASES)} accel-lua tensors with the expected dtype, shape and values")
    finally:
        if tmp:
            os.remove(tmp)


if __name__ == "__main__":
    sys.exit(main())
