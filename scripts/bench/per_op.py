#!/usr/bin/python3
# per_op.py: PyTorch side of the per-op overhead benchmark (see per_op.lua).
# Two 16-element float32 tensors, 1 thread; times `a + b` (no grad) and
# `(a + b).sum().backward()` (requires_grad), N iterations each, median of
# REPEATS runs, on DEVICE (cpu, the default, or cuda: each loop timed up to
# torch.cuda.synchronize()). Run with one thread everywhere:
#   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 scripts/bench/per_op.py [N] [REPEATS] [DEVICE]
# Last line: "RESULT torch add=<us> fwdbwd=<us> rss_before_kib=<n> rss_after_kib=<n>".
import statistics
import sys
import time

import torch


def vmrss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def time_loop(body, n, repeats, device):
    body(min(n, 1000))  # warm up
    sync(device)
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        body(n)
        sync(device)
        runs.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(runs)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
    torch.set_num_threads(1)
    torch.manual_seed(0)

    x, y = torch.randn(16, device=device), torch.randn(16, device=device)
    a = torch.randn(16, device=device, requires_grad=True)
    b = torch.randn(16, device=device, requires_grad=True)

    def add(k):
        for _ in range(k):
            x + y

    def fwdbwd(k):
        for _ in range(k):
            (a + b).sum().backward()

    rss0 = vmrss_kib()
    t_add = time_loop(add, n, repeats, device)
    t_fb = time_loop(fwdbwd, n, repeats, device)
    rss1 = vmrss_kib()
    print(f"PyTorch {torch.__version__} per-op (16-element float32 on {device}, {n} iterations, median of {repeats}, "
          f"{torch.get_num_threads()} thread)")
    print(f"  a + b (no grad)            {t_add:8.3f} us/op")
    print(f"  (a + b).sum().backward()   {t_fb:8.3f} us/op")
    print(f"  VmRSS before {rss0} KiB, after {rss1} KiB")
    print(f"RESULT torch add={t_add:.4f} fwdbwd={t_fb:.4f} rss_before_kib={rss0} rss_after_kib={rss1}")


if __name__ == "__main__":
    main()
