#!/usr/bin/env python3
# load_gpt2_in_transformers.py: shows that a GPT-2 saved by accel-lua
# (examples/gpt.lua: accelerator:save_model + config:save_pretrained, or
# model:save_pretrained) is a Hugging Face GPT-2: transformers'
# GPT2LMHeadModel.from_pretrained loads the folder with no missing or
# unexpected weights, and its logits on a fixed input equal the logits
# accel-lua computes from the same folder (accel.models.gpt2
# GPT2LMHeadModel.from_pretrained), to 1e-4 of their scale in float32.
# Then transformers' own generate() continues a prompt with our weights.
#
#   python3 scripts/load_gpt2_in_transformers.py runs/gpt/model [--accel-lua build/accel-lua] [--prompt TEXT]
#
# Needs torch and transformers (a developer tool, not part of `make test`):
#   /usr/bin/python3 -m venv --system-site-packages /tmp/hfenv     # Debian's torch 1.13
#   /tmp/hfenv/bin/pip install "transformers<4.47"                  # the last series that runs on torch 1.13
#   /tmp/hfenv/bin/python scripts/load_gpt2_in_transformers.py runs/gpt/model
# Exit status 0 when the logits agree, 1 otherwise.
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs inside accel-lua: our model from the same folder, logits of the ids.
LUA = r"""
local dir, ids_path, out_path = arg[1], arg[2], arg[3]
local model = accel.models.gpt2.GPT2LMHeadModel.from_pretrained(dir)
model:eval()
local ids = accel.load(ids_path).input_ids
local logits = accel.no_grad(function() return model(ids) end)
accel.save({logits = logits}, out_path)
"""


def our_logits(accel_lua, model_dir, ids):
    with tempfile.TemporaryDirectory() as tmp:
        ids_path, out_path, script = (os.path.join(tmp, n) for n in ("ids.safetensors", "logits.safetensors", "logits.lua"))
        save_file({"input_ids": ids.contiguous()}, ids_path)
        with open(script, "w") as f:
            f.write(LUA)
        subprocess.run([accel_lua, script, model_dir, ids_path, out_path], check=True)
        return load_file(out_path)["logits"]


def sample(model, prompt, n, ctx):
    """Top-k sampling with the model's forward (generate() itself imports
    torch.distributed.fsdp, which Debian's torch 1.13 cannot import under
    Python 3.11)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(n):
            logits = model(ids[:, -ctx:]).logits[0, -1] / 0.8
            top = torch.topk(logits, 40)
            pick = torch.multinomial(torch.softmax(top.values, -1), 1, generator=g)
            ids = torch.cat([ids, top.indices[pick].view(1, 1)], 1)
    return bytes(ids[0].tolist()).decode("utf-8", errors="replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model_dir")
    ap.add_argument("--accel-lua", default=os.environ.get("ACCEL_LUA_BIN", os.path.join(ROOT, "build", "accel-lua")))
    ap.add_argument("--prompt", default="\n")
    ap.add_argument("--new-tokens", type=int, default=120)
    a = ap.parse_args()

    with open(os.path.join(a.model_dir, "config.json")) as f:
        cfg = json.load(f)
    model, info = GPT2LMHeadModel.from_pretrained(a.model_dir, local_files_only=True, output_loading_info=True)
    model.eval()
    # lm_head.weight is tied to transformer.wte.weight: HF files omit it too
    missing = [k for k in info["missing_keys"] if k != "lm_head.weight"]
    print(f"transformers GPT2LMHeadModel loaded {a.model_dir}: {sum(p.numel() for p in model.parameters())} parameters, "
          f"missing {missing}, unexpected {info['unexpected_keys']}, "
          f"lm_head tied: {model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()}")
    ok = not missing and not info["unexpected_keys"] and not info["mismatched_keys"]

    g = torch.Generator().manual_seed(0)
    T = min(cfg["n_positions"], 64)
    ids = torch.randint(0, cfg["vocab_size"], (2, T), generator=g)
    with torch.no_grad():
        theirs = model(ids).logits
    ours = our_logits(a.accel_lua, a.model_dir, ids)
    diff = (theirs - ours).abs().max().item()
    scale = max(theirs.abs().max().item(), 1e-2)
    agree = tuple(ours.shape) == tuple(theirs.shape) and diff <= 1e-4 * scale
    print(f"logits {tuple(theirs.shape)}: max |transformers - accel-lua| = {diff:.3e} (scale {scale:.3e}) -> "
          f"{'agree' if agree else 'DIFFER'}")
    ok = ok and agree

    if cfg["vocab_size"] == 256:  # byte-level (examples/gpt.lua): transformers' model samples some text
        print("sampled by transformers' GPT2LMHeadModel with these weights (top-k 40, temperature 0.8):")
        print(sample(model, list(a.prompt.encode()), a.new_tokens, cfg["n_positions"]))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
