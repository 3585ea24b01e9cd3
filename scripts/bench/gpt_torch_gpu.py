"""gpt_torch_gpu.py: PyTorch's side of the GPU benchmark (scripts/gpu-check.sh):
the GPT-2 step of scripts/bench/gpt.lua (pre-LN blocks, qkv one Linear(C, 3C),
causal scaled_dot_product_attention, GELU tanh, final LayerNorm, LM head tied
to the token embedding, every Linear with a bias, N(0, 0.02) init, AdamW lr
3e-4, betas (0.9, 0.95), weight_decay 0.1, fresh uniform random tokens each
step) on cuda, timed per step (zero_grad + forward + loss + backward + step,
then torch.cuda.synchronize()). Prints one JSON line like gpt.lua's.

  python3 gpt_torch_gpu.py SHAPE STEPS WARMUP [--bf16] [--tf32] [--compile]

SHAPE: gpt2_b16 (V 50257, T 1024, L 12, H 12, C 768, B 16) or small.
FLOPs per step: 6 * (parameters without the position table) * B * T
+ 12 * L * T * C * B * T, the formula gpt.lua uses.
"""
import json
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {"small": dict(V=65, T=64, L=4, H=4, C=128, B=16),
          "gpt2_b16": dict(V=50257, T=1024, L=12, H=12, C=768, B=16)}


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc1, self.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, H, C):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.reshape(-1))


def main(argv):
    shape, steps, warmup = argv[0], int(argv[1]), int(argv[2])
    flags = set(argv[3:])
    cfg = SHAPES[shape]
    torch.backends.cuda.matmul.allow_tf32 = "--tf32" in flags
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = GPT(cfg["V"], cfg["T"], cfg["L"], cfg["H"], cfg["C"]).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    flops = 6 * (nparams - model.wpe.weight.numel()) * cfg["B"] * cfg["T"] + \
        12 * cfg["L"] * cfg["T"] * cfg["C"] * cfg["B"] * cfg["T"]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    step_model = torch.compile(model) if "--compile" in flags else model
    times, losses = [], []
    for i in range(warmup + steps):
        data = torch.randint(0, cfg["V"], (cfg["B"], cfg["T"] + 1), device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled="--bf16" in flags):
            loss = step_model(data[:, :-1], data[:, 1:])
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    med = statistics.median(times)
    print(json.dumps({"bench": "gpt", "impl": "pytorch" + (" compile" if "--compile" in flags else " eager"),
                      "cfg": shape, **cfg, "precision": "bf16" if "--bf16" in flags else "fp32",
                      "tf32": "--tf32" in flags, "device": torch.cuda.get_device_name(), "params": nparams,
                      "steps": steps, "warmup": warmup, "step_s_median": round(med, 5),
                      "tokens_per_s": round(cfg["B"] * cfg["T"] / med), "achieved_gflops": round(flops / med / 1e9, 1),
                      "loss_first": round(losses[0], 3), "loss_last": round(losses[-1], 3),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main(sys.argv[1:])
