#!/usr/bin/env bash
# scripts/test-gpu-model.sh - the CUDA simulator's work counters (cuda/sim/cost.cpp) on work whose
# size is known (tests/cudasim/cost_probe.cu): a copy kernel of N bytes reads N and writes N; one
# warp's KT mma.sync m16n8k16 are 2*16*8*16*KT tensor FLOPs; a bf16 cublasGemmEx of m, n, k is
# 2mnk FLOPs and reads 2(mk + kn), writes 2mn bytes. Expected values are computed here from the
# sizes, not taken from the counters. Exit 0 when every count matches. (make test-gpu-model)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_SIM="${BUILD_SIM:-build-cudasim}"
N=$((3 * 1024 * 1024)) KT=5 M=96 NN=80 K=48
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
GTCSIM_COST="$out" "$BUILD_SIM/cost_probe" "$N" "$KT" "$M" "$NN" "$K" >/dev/null
fails=0
# expect KIND NAME-PREFIX COLUMN VALUE (columns: 3 launches, 4 read, 5 written, 6 tensor flops, 7 flops)
expect() {
  local got
  got="$(awk -F'\t' -v k="$1" -v n="$2" -v c="$3" '$1 == k && index($2, n) == 1 { s += $c; f = 1 } END { if (f) printf "%.0f", s }' "$out")"
  if [ "$got" = "$4" ]; then
    echo "ok   $1 $2 column $3 = $4"
  else
    echo "FAIL $1 $2 column $3: expected $4, found ${got:-nothing}"
    fails=$((fails + 1))
  fi
}
expect kernel copy_kernel 3 1
expect kernel copy_kernel 4 "$N"
expect kernel copy_kernel 5 "$N"
expect kernel mma_kernel 6 $((2 * 16 * 8 * 16 * KT))
expect kernel mma_kernel 4 8192 # A (16 x 80 bf16) and B (80 x 8), inside one page each
expect kernel mma_kernel 5 4096 # C: 16 x 8 fp32, one page
expect blas "cublasGemmEx NN CUDA_R_16BF->CUDA_R_16BF m $M n $NN k $K" 6 $((2 * M * NN * K))
expect blas "cublasGemmEx NN" 4 $((2 * (M * K + K * NN)))
expect blas "cublasGemmEx NN" 5 $((2 * M * NN))
expect other "cudaMemcpyAsync(DeviceToHost)" 4 512 # the copy of the 16x8 fp32 result reads 512 device bytes
if [ "$fails" = 0 ]; then echo "test-gpu-model: all counts as expected"; else echo "test-gpu-model: $fails count(s) wrong"; exit 1; fi
