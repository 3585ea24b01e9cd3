"""shard_gpt.py: PyTorch's side of scripts/bench/shard_gpt.sh: the GPT of
shared/anchors/fsdp_gpt.py (the bench_gpt.py model with SDPA causal
attention) under DDP or FSDP2 (fully_shard per block, then the root), gloo,
1 thread per rank. Needs PyTorch >= 2.6 (torch.distributed.fsdp.fully_shard).

  python -m torch.distributed.run --nproc_per_node 2 shard_gpt.py ddp|fsdp small|gpt2 STEPS WARMUP [ckpt] [bf16]

As fsdp_gpt.py: model initialised from seed 0 on every rank, AdamW lr 3e-4
betas (0.9, 0.95) weight_decay 0.1, fresh random tokens per step (generator
seed 1 + rank), the timed region is zero_grad + forward + loss + backward +
step + barrier. Added: each rank's median process CPU time of a step up to
the barrier (gloo's threads included) and global tokens over the larger one; "ckpt" runs every block under
torch.utils.checkpoint(use_reentrant=False) (shard_gpt.lua --ckpt does the
same per block); "bf16" runs the forward under torch.autocast("cpu",
torch.bfloat16), parameters, gradients and collectives staying float32
(shard_gpt.lua --bf16 does the same); the phases of a step; per rank peak RSS (ru_maxrss) and
parameters + gradients + optimizer state counted from this rank's local
tensors (DTensor.to_local() under FSDP2) right after one more optimizer
step, before zero_grad. Rank 0 prints one JSON line."""
import json
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

mode, cfg_name, steps, warmup = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
EXTRA = set(sys.argv[5:])
CKPT, BF16 = "ckpt" in EXTRA, "bf16" in EXTRA
CFGS = dict(small=dict(V=65, T=64, L=4, H=4, C=128, B=16), gpt2=dict(V=50257, T=256, L=12, H=12, C=768, B=4))
if mode not in ("ddp", "fsdp") or cfg_name not in CFGS or not EXTRA <= {"ckpt", "bf16"}:
    sys.exit("shard_gpt.py: usage: shard_gpt.py ddp|fsdp small|gpt2 STEPS WARMUP [ckpt] [bf16]")
cfg = CFGS[cfg_name]
V, T, L, H, C, B = (cfg[k] for k in "VTLHCB")
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)


class Attn(nn.Module):
    def __init__(s):
        super().__init__()
        s.qkv = nn.Linear(C, 3 * C)
        s.proj = nn.Linear(C, C)

    def forward(s, x):
        b, t, c = x.shape
        q, k, v = s.qkv(x).split(C, dim=2)
        q, k, v = [z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v)]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return s.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1 = nn.LayerNorm(C)
        s.attn = Attn()
        s.ln2 = nn.LayerNorm(C)
        s.fc1 = nn.Linear(C, 4 * C)
        s.act = nn.GELU(approximate="tanh")
        s.fc2 = nn.Linear(4 * C, C)

    def forward(s, x):
        x = x + s.attn(s.ln1(x))
        return x + s.fc2(s.act(s.fc1(s.ln2(x))))


class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte = nn.Embedding(V, C)
        s.wpe = nn.Embedding(T, C)
        s.blocks = nn.ModuleList([Block() for _ in range(L)])
        s.lnf = nn.LayerNorm(C)
        s.head = nn.Linear(C, V, bias=False)
        s.head.weight = s.wte.weight
        for m in s.modules():  # N(0, 0.02), zero biases (as common.gpt)
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1]))
        for blk in s.blocks:
            x = checkpoint(blk, x, use_reentrant=False) if CKPT else blk(x)
        return F.cross_entropy(s.head(s.lnf(x)).view(-1, V), tgt.reshape(-1))


model = GPT()
nparams = sum(p.numel() for p in model.parameters())
if mode == "fsdp":
    from torch.distributed.fsdp import fully_shard

    for blk in model.blocks:
        fully_shard(blk)
    fully_shard(model)
else:
    model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
g = torch.Generator().manual_seed(1 + rank)


def step():
    data = torch.randint(0, V, (B, T + 1), generator=g)
    idx, tgt = data[:, :-1], data[:, 1:]
    c0, t0 = time.process_time(), time.perf_counter()
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
        loss = model(idx, tgt)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    opt.step()
    t3, c3 = time.perf_counter(), time.process_time()
    dist.barrier()
    return loss.item(), (t0, t1, t2, t3, time.perf_counter()), c3 - c0


times, cpus, parts, losses = [], [], [[], [], [], []], []
for i in range(warmup + steps):
    loss, ts, cpu = step()
    losses.append(loss)
    if i >= warmup:
        times.append(ts[4] - ts[0])
        cpus.append(cpu)
        for k in range(4):
            parts[k].append(ts[k + 1] - ts[k])


def local_bytes(t):
    t = t.to_local() if hasattr(t, "to_local") else t
    return t.numel() * t.element_size()


# one more step, stopped after the optimizer step: what this rank holds
data = torch.randint(0, V, (B, T + 1), generator=g)
opt.zero_grad(set_to_none=True)
with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
    loss = model(data[:, :-1], data[:, 1:])
loss.backward()
opt.step()
params = list(model.parameters())
p_b = sum(local_bytes(p) for p in params)
g_b = sum(local_bytes(p.grad) for p in params if p.grad is not None)
os_b = sum(local_bytes(v) for st in opt.state.values() for v in st.values() if torch.is_tensor(v) and v.dim() > 0)
med = statistics.median(times)
mine = torch.tensor([med, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0, p_b, g_b, os_b,
                     statistics.median(cpus)],
                    dtype=torch.float64)
every = [torch.zeros_like(mine) for _ in range(world)]
dist.all_gather(every, mine)
if rank == 0:
    med_max = max(e[0].item() for e in every)
    rss = [int(e[1].item()) for e in every]
    pgos = [int(e[2].item() + e[3].item() + e[4].item()) for e in every]
    cpu_max = max(e[5].item() for e in every)
    print(json.dumps(dict(
        bench="shard_gpt", impl="pytorch", mode=mode, ckpt=CKPT, bf16=BF16, cfg=cfg_name, world=world, torch=torch.__version__,
        params=nparams, steps=steps, warmup=warmup, threads=torch.get_num_threads(),
        step_s_median=round(med_max, 4), global_tokens_per_s=round(world * B * T / med_max, 1),
        cpu_s_median_max_rank=round(cpu_max, 4), global_tokens_per_cpu_s=round(world * B * T / cpu_max, 1),
        ms_forward=round(statistics.median(parts[0]) * 1e3, 1), ms_backward=round(statistics.median(parts[1]) * 1e3, 1),
        ms_optimizer=round(statistics.median(parts[2]) * 1e3, 1), ms_barrier=round(statistics.median(parts[3]) * 1e3, 1),
        peak_rss_bytes_max_rank=max(rss), peak_rss_bytes=rss, pgos_bytes=max(pgos), pgos_bytes_per_rank=pgos,
        p_bytes=int(every[0][2].item()), g_bytes=int(every[0][3].item()), os_bytes=int(every[0][4].item()),
        loss_first=round(losses[0], 3), loss_last=round(losses[-1], 3))), flush=True)
dist.destroy_process_group()
