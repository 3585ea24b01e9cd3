#!/usr/bin/env bash
# fmnist.sh: Fashion-MNIST, accel-lua (examples/fashion_mnist.lua) against
# PyTorch (shared/anchors/fmnist.py) in the same run, one thread each, same
# recipe (Adam 1e-3, batch 64). Prints per-epoch train seconds and test
# accuracy for both.   bash scripts/bench/fmnist.sh [mlp|cnn] [epochs]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
ARCH=${1:-mlp}
EPOCHS=${2:-$([[ $ARCH == mlp ]] && echo 5 || echo 3)}
ANCHORS=${ANCHORS:-$ROOT/../shared/anchors}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
make -s -j2 >/dev/null
echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-<unset>}, 1 thread, $ARCH, $EPOCHS epochs"
echo "-- accel-lua"
build/accel-lua examples/fashion_mnist.lua "$ARCH" "$EPOCHS" 1 2>/dev/null | grep -E "^epoch|^data"
echo "-- PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)"
timeout 3600 /usr/bin/python3 "$ANCHORS/fmnist.py" 1 "$ARCH" "$EPOCHS" |
    /usr/bin/python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    if r.get("bench") == "fmnist_epoch":
        print("epoch %d  train %.2f s  loss %.4f  test accuracy %.4f" % (r["epoch"], r["train_s"], r["mean_train_loss"], r["test_acc"]))'
