#!/usr/bin/env bash
# make bench: gtrain's CPU training step beside PyTorch's on the same shapes, same machine, one run.
# fp32, B=4, T=64: (a) 4 layers / 4 heads / 256 wide / vocab 50257, (b) GPT-2 124M.
# PyTorch comes from Debian's python3-torch (apt-get install python3-torch), run by /usr/bin/python3
# (the system interpreter, which that package serves); skipped if absent.
set -uo pipefail
build="${1:-build}"
cd "$(dirname "$0")/.."
steps="${BENCH_STEPS:-10}"
for model in configs/bench-4l256.json configs/gpt2-124m.json; do
  "$build/bench_step" "$model" 4 64 "$steps"
  if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    # OpenBLAS in torch's process gets the same fast-kernel choice gtrain makes for itself
    core="$("$build/bench_step" --blas-core 2>/dev/null || true)"
    OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-$core}" /usr/bin/python3 scripts/bench_torch.py "$model" 4 64 "$steps"
  else
    echo "pytorch: not installed (apt-get install python3-torch) - skipped"
  fi
done
