#!/usr/bin/env bash
# make bench: gtrain's CPU training step beside the anchor users really pick, the real Hugging Face
# Trainer (transformers, + PEFT for LoRA; scripts/bench_hf_trainer.py in the test references' venv,
# scripts/install-deps.sh --test-refs), on the same model, batch, sequence, threads (2) and precision
# (fp32), one run, median step after warm-up, and their ratio (gtrain / Trainer: below 1 is faster):
#   GPT-2 124M full fine-tuning, B 4, T 64;
#   the 34M Llama-style model (configs/bench-llama-34m.json: 6 layers, 384 wide, 6 heads / 2 kv heads,
#   SwiGLU 1024, vocab 32000, untied), B 4, T 128, full and with LoRA r 16 on all seven projections.
# Then the time of `gtrain sample` for 200 tokens of GPT-2 124M, and of the SVD PiSSA needs
# (svd_topr, r = 128: exact and niter 4 on 4096 x 1024, niter 4 on Mistral-7B's 14336 x 4096 MLP).
# Then the NF4 base: QPiSSA vs QLoRA quantization error, and the dequantize vs the bandwidth floor.
set -uo pipefail
build="${1:-build}"
cd "$(dirname "$0")/.."
steps="${BENCH_STEPS:-10}"
py="${GTRAIN_REFS_PY:-$(scripts/install-deps.sh --venv-path)/bin/python}"
[ -x "$py" ] || { echo "bench: the Hugging Face Trainer is not installed ($py): run scripts/install-deps.sh --test-refs"; exit 1; }
# PyPI's torch computes its GEMMs with MKL (AVX-512 where the CPU has it; its line says which), not
# OpenBLAS: the same threads and precision, not the same BLAS. OPENBLAS_CORETYPE is passed on for
# whatever in its process does use OpenBLAS.
core="$("$build/bench_step" --blas-core 2>/dev/null || true)"
ms() { sed -n 's/.* \([0-9.]*\) ms\/step.*/\1/p' <<<"$1" | head -n 1; }
side_by_side() { # LABEL LORA_R MODEL B T
  local label="$1" r="$2" g h
  shift 2
  g="$(env ${r:+BENCH_LORA_R="$r"} "$build/bench_step" "$@" "$steps")" || { echo "bench: bench_step $* failed"; return 1; }
  echo "$g"
  h="$(OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-$core}" "$py" scripts/bench_hf_trainer.py "$@" "$steps" \
       ${r:+--lora "$r"} 2>/dev/null | tail -n 1)"
  echo "$h"
  awk -v l="$label" -v g="$(ms "$g")" -v h="$(ms "$h")" 'BEGIN {
    if (g > 0 && h > 0) printf "ratio   %-40s gtrain / HF Trainer = %.2f  (%.1f ms vs %.1f ms a step)\n", l, g / h, g, h
    else print "ratio   " l ": a step time is missing" }'
}
"$build/bench_step" configs/bench-4l256.json 4 64 "$steps"
side_by_side "GPT-2 124M full, B 4, T 64" "" configs/gpt2-124m.json 4 64
side_by_side "Llama 34M full, B 4, T 128" "" configs/bench-llama-34m.json 4 128
side_by_side "Llama 34M LoRA r 16 all seven, B 4, T 128" 16 configs/bench-llama-34m.json 4 128

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

# PiSSA's SVD (src/model/svd.c) on a uniform random matrix (flat spectrum: the randomised values are
# the hardest case here, not a measure of accuracy), r = 128
# packing (data.packing: true) vs padding: completion tokens trained per second at seq_len 512 on
# MetaMathQA-like lengths (bench/bench_pack.c says which), the 34M Llama-style model, B 4
"$build/bench_pack" configs/bench-llama-34m.json 4 512 "${BENCH_PACK_STEPS:-3}"
"$build/bench_svd" 4096 1024 128 -1 4
"$build/bench_svd" 14336 4096 128 4

# The 4-bit NF4 base (issue 27): the 34M model's LoRA r 16 step with its frozen linear weights in bf16
# and in NF4 (both dequantized / widened to fp32 for each GEMM); QPiSSA's against QLoRA's
# quantization error on matrices with a decaying spectrum (the PiSSA paper's measure;
# bench/bench_nf4.c); the dequantize of one Mistral-7B MLP weight (14336 x 4096), nf4.h's host
# function and the CPU backend's op, against a memcpy of the same bytes in the same run
for base in bf16 nf4; do BENCH_LORA_R=16 BENCH_BASE=$base "$build/bench_step" configs/bench-llama-34m.json 4 128 "$steps"; done
"$build/bench_nf4" error
"$build/bench_nf4" dequant 14336 4096 5

# Batched generation (issue 28): decode tokens/s of gtrain's generate_run (bench/bench_decode.c) beside
# transformers' generate() with its KV cache (scripts/bench_hf_generate.py: fp32, sdpa, greedy,
# use_cache), the same checkpoint (the 34M Llama-style model, random weights by save_pretrained), the
# same 32 prompts of 64 tokens, 128 new tokens each, the same threads (2): at batch 1 (the first 2
# prompts, one at a time) and batch 32 (one cache of 32 slots; generate() on the 32 at once).
threads="${BENCH_THREADS:-2}"
if "$py" tests/tools/hf_models.py make configs/bench-llama-34m.json "$tmp/llama34m" --seed 1 --init-std 0.02 >/dev/null; then
  "$py" -c "
import random
random.seed(28)
for _ in range(32): print(' '.join(str(random.randrange(32000)) for _ in range(64)))" >"$tmp/prompts32.txt"
  head -n 2 "$tmp/prompts32.txt" >"$tmp/prompts2.txt"
  for b in 1 32; do
    f="$tmp/prompts$([ "$b" = 1 ] && echo 2 || echo 32).txt"
    g="$("$build/bench_decode" "$tmp/llama34m" "$f" "$b" 128 "$threads")" || { echo "bench: bench_decode failed"; continue; }
    echo "$g"
    h="$(OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-$core}" "$py" scripts/bench_hf_generate.py "$tmp/llama34m" "$f" "$b" 128 \
         --threads "$threads" 2>/dev/null | tail -n 1)"
    echo "$h"
    tps() { sed -n 's/.* \([0-9.]*\) new tok\/s.*/\1/p' <<<"$1" | head -n 1; }
    awk -v b="$b" -v g="$(tps "$g")" -v h="$(tps "$h")" 'BEGIN {
      if (g > 0 && h > 0) printf "ratio   decode batch %-2d Llama 34M fp32: gtrain / HF generate = %.2fx the tokens/s (%.1f vs %.1f)\n", b, g / h, g, h
      else print "ratio   decode batch " b ": a tokens/s is missing" }'
  done
else
  echo "bench: the 34M checkpoint for the decode bench could not be made"
fi

# ddp_grad_dtype (issue 29 item 4): 2 CPU ranks under mpirun (1 thread each): the all-reduce of GPT-2
# 124M's 124.4M gradients in 12 buckets alone (bench/bench_dist.c), then GPT-2 124M full, B 1, T 64,
# 6 steps, gradients summed in fp32 and in bf16; the median step time of steps 2..6 of each.
# One node: MPI moves the gradients through shared memory, so this weighs the conversions and the
# bf16 sum against the halved copy, not a network.
mpirun_bin="$(command -v mpirun || true)"
if [ -n "$mpirun_bin" ] && "$build/gtrain" --version 2>/dev/null | grep -q mpi; then
  cat >"$tmp/ddp.yaml" <<EOF2
model: $PWD/configs/gpt2-124m.json
data: {train: $PWD/data/tinyshakespeare.txt, format: text, seq_len: 64}
per_device_train_batch_size: 1
max_steps: 6
logging_steps: 1
eval_steps: 0
eval_max_batches: 1
save_steps: 0
num_threads: 1
dist_timeout: 600
EOF2
  "$mpirun_bin" --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$build/bench_dist" 124439808 12 7 ||
    echo "bench: bench_dist failed"
  for dt in fp32 bf16; do
    if "$mpirun_bin" --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$build/gtrain" --config "$tmp/ddp.yaml" \
         --set output_dir="$tmp/ddp-$dt" --set ddp_grad_dtype="$dt" >"$tmp/ddp-$dt.log" 2>&1; then
      grep '"type":"train"' "$tmp/ddp-$dt/metrics.jsonl" | tail -n +2 | sed 's/.*"step_time_ms":\([0-9.]*\).*/\1/' | sort -g |
        awk -v dt="$dt" '{ a[NR] = $1 } END { printf "ddp     GPT-2 124M, 2 CPU ranks, ddp_grad_dtype %s: median step %.0f ms (steps 2..6)\n", dt, a[int((NR + 1) / 2)] }'
    else
      echo "bench: the 2-rank ddp_grad_dtype $dt run failed ($tmp/ddp-$dt.log)"
    fi
  done
else
  echo "bench: ddp_grad_dtype: skipped (needs mpirun and gtrain built with MPI)"
fi
