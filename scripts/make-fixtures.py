#!/usr/bin/python3
# make-fixtures.py: writes tests/fixtures/torch_tensors.safetensors with
# PyTorch (Debian's torch 1.13) + safetensors.torch.save_file, so that the
# Lua spec tests/lua/safetensors_torch_spec.lua can check that accel-lua reads
# files written by PyTorch. Every tensor is a closed-form formula of its index;
# the spec recomputes the same formulas in Lua. If you change one here, change
# it there too.
#
#   /usr/bin/python3 scripts/make-fixtures.py
#
# float8 dtypes are left out: torch 1.13 has none.
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from fixture_file import fixture_path, save_fixture  # noqa: E402

OUT = fixture_path("torch_tensors.safetensors")


def fixtures():
    ar = torch.arange
    t = {}
    # float32, 2-D: (i*0.25 - 1) for i = 0..5, row-major 2x3
    t["f32_2x3"] = (ar(6, dtype=torch.float32) * 0.25 - 1).reshape(2, 3)
    # float32, 3-D: (i*0.5 - 6) for i = 0..23, row-major 2x3x4
    t["f32_2x3x4"] = (ar(24, dtype=torch.float32) * 0.5 - 6).reshape(2, 3, 4)
    # float32, 0-D scalar
    t["f32_scalar"] = torch.tensor(3.5, dtype=torch.float32)
    # float64, 1-D: (i - 2) / 3 for i = 0..4 (full double precision)
    t["f64_5"] = (ar(5, dtype=torch.float64) - 2) / 3
    # float64, 2-D: r*10 + c/4 for r = 0..2, c = 0..3
    t["f64_3x4"] = (ar(3, dtype=torch.float64).reshape(3, 1) * 10
                    + ar(4, dtype=torch.float64).reshape(1, 4) / 4)
    # bfloat16 (values exact in bf16): (i - 3) * 1.5 for i = 0..7, 2x4
    t["bf16_2x4"] = ((ar(8, dtype=torch.float32) - 3) * 1.5).to(torch.bfloat16).reshape(2, 4)
    # float16 (values exact in fp16): (i - 2)^3 / 8 for i = 0..5
    t["f16_6"] = ((ar(6, dtype=torch.float32) - 2) ** 3 / 8).to(torch.float16)
    # int64 (beyond 32 bits): (i - 2) * 1000000007000 for i = 0..4
    t["i64_5"] = (ar(5, dtype=torch.int64) - 2) * 1000000007000
    # int32: (i - 2) * 100000 for i = 0..3
    t["i32_4"] = (ar(4, dtype=torch.int32) - 2) * 100000
    # uint8: i * 50 for i = 0..5 (0..250)
    t["u8_6"] = ar(6, dtype=torch.int64).mul(50).to(torch.uint8)
    # bool: i % 3 == 0 for i = 0..6
    t["bool_7"] = ar(7) % 3 == 0
    return t


def main():
    size = save_fixture(fixtures(), OUT, "scripts/make-fixtures.py")
    print(f"wrote {OUT} ({size} bytes, torch {torch.__version__})")
    if size >= 4096:
        sys.exit("fixture is larger than 4 KB")


if __name__ == "__main__":
    main()
