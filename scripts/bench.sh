#!/usr/bin/env bash
# make bench: gtrain's CPU training step beside PyTorch's on the same shapes, same machine, one run.
# fp32, B=4, T=64: (a) 4 layers / 4 heads / 256 wide / vocab 50257, (b) GPT-2 124M; fp32, B=4,
# T=128: (c) a 34M-parameter Llama (6 layers, 384 wide, 6 heads / 2 kv heads, SwiGLU 1024, vocab
# 32000, untied), against transformers' LlamaForCausalLM (tests/tools/hf_models.py bench).
# Then the time of `gtrain sample` for 200 tokens of GPT-2 124M, and of the SVD PiSSA needs
# (svd_topr, r = 128: exact and niter 4 on 4096 x 1024, niter 4 on Mistral-7B's 14336 x 4096 MLP).
# The GPT-2 lines' PyTorch comes from Debian's python3-torch (apt-get install python3-torch), run by /usr/bin/python3
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
"$build/bench_step" configs/bench-llama-34m.json 4 128 "$steps"
# the same model fine-tuned with LoRA r 16 on every projection: the base frozen, its weight
# gradients and the embedding's never computed
BENCH_LORA_R=16 "$build/bench_step" configs/bench-llama-34m.json 4 128 "$steps"
# transformers' LlamaForCausalLM, from the test references' venv (scripts/install-deps.sh --test-refs)
refs_py="${GTRAIN_REFS_PY:-$(scripts/install-deps.sh --venv-path 2>/dev/null)/bin/python}"
if "$refs_py" -c "import torch, transformers" 2>/dev/null; then
  core="$("$build/bench_step" --blas-core 2>/dev/null || true)"
  OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-$core}" "$refs_py" tests/tools/hf_models.py bench configs/bench-llama-34m.json 4 128 "$steps"
else
  echo "transformers: no test references at $refs_py (scripts/install-deps.sh --test-refs) - skipped"
fi

# gtrain sample: 200 new tokens (greedy) after a 6-byte prompt, GPT-2 124M shapes, weights from one
# training step; loading the checkpoint is timed alone too (--max-new-tokens 0).
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/run.yaml" <<EOF
model: $PWD/configs/gpt2-124m.json
data: {train: $PWD/data/tinyshakespeare.txt, format: text, seq_len: 64}
per_device_train_batch_size: 1
max_steps: 1
eval_max_batches: 1
save_steps: 0
output_dir: $tmp/run
EOF
if "$build/gtrain" --config "$tmp/run.yaml" >"$tmp/train.log" 2>&1; then
  for n in 0 200; do
    t0="$(date +%s.%N)"
    "$build/gtrain" sample --checkpoint "$tmp/run" --prompt "ROMEO:" --max-new-tokens "$n" --temperature 0 >/dev/null
    t[$n]="$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')"
  done
  awk -v a="${t[0]}" -v b="${t[200]}" 'BEGIN {
    printf "gtrain sample, GPT-2 124M: load %.2f s; load + 200 new tokens %.2f s (%.1f ms a token)\n", a, b, (b - a) * 5 }'
else
  echo "gtrain sample: the 124M checkpoint could not be made (see below)"; tail -3 "$tmp/train.log"
fi

# PiSSA's SVD (src/svd.c) on a uniform random matrix (flat spectrum: the randomised values are
# the hardest case here, not a measure of accuracy), r = 128
"$build/bench_svd" 4096 1024 128 -1 4
"$build/bench_svd" 14336 4096 128 4
