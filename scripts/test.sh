#!/usr/bin/env bash
# The README's test command: install what is missing, build, run the whole suite:
# the Criterion tests, the same suite under AddressSanitizer + UBSan, the CUDA backend
# compiled with warnings as errors (when nvcc is present; CI has it at /usr/local/cuda/bin), the
# CUDA simulator's cuBLAS and NCCL models, the
# whole suite again with the CUDA backend on the CUDA simulator, planted bugs it must catch, and
# libFuzzer on every reader.
set -euo pipefail
cd "$(dirname "$0")/.."
# the Debian packages, and the test references (the real Hugging Face stack from PyPI) in a venv
# outside the repository: its path is the last line
venv="$(scripts/install-deps.sh --test-refs | tail -n 1)"
export GTRAIN_REFS_PY="$venv/bin/python"
echo "== the test references: $venv ($("$GTRAIN_REFS_PY" -c 'import torch, transformers, peft, trl, tokenizers
print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, trl {trl.__version__}, tokenizers {tokenizers.__version__}")'))"
export PATH="$PATH:/usr/local/cuda/bin"
# every suite appends its passed/failed/skipped counts here (scripts/tap-summary.sh)
GTRAIN_TEST_COUNTS="$(mktemp)"
export GTRAIN_TEST_COUNTS
trap 'rm -f "$GTRAIN_TEST_COUNTS"' EXIT
jobs="$(nproc)"
# the time each part took, printed at the end
times=() part_name="" part_start=$SECONDS
part() {
  [ -n "$part_name" ] && times+=("$(printf '%5d s  %s' $((SECONDS - part_start)) "$part_name")")
  part_name="$1" part_start=$SECONDS
  [ -n "$1" ] && echo "== $1"
  return 0
}
part_name="install of what was missing" part_start=0 # done above
part "build and test"
make -j"$jobs"
make -j"$jobs" test
part "test under AddressSanitizer + UBSan, leaks fatal"
LSAN_JOBS="$jobs" make -j"$jobs" test-asan
if command -v nvcc >/dev/null 2>&1; then
  part "CUDA backend: compiled with warnings as errors"
  make -j"$jobs" cuda-check
else
  echo "== CUDA backend: nvcc not found, not compiled"
fi
part "CUDA simulator: the cuBLAS/cuBLASLt and NCCL models against their references"
make test-cudasim-blas
make test-cudasim-nccl
part "the whole suite with the CUDA backend (cuda/*.cu) on the CUDA simulator"
make -j"$jobs" test-cudasim
part "known bugs planted into copies of cuda/: the simulated suite must catch each"
GTRAIN_TEST_COUNTS= make test-cudasim-mutants   # their failures are the point: not counted
part "fuzz every reader of untrusted input for ${FUZZ_SECONDS:-20} s each"
make -j"$jobs" fuzz FUZZ_SECONDS="${FUZZ_SECONDS:-20}" FUZZ_JOBS="$jobs"
part ""
echo "== all tests passed in $SECONDS s:"
printf '%s\n' "${times[@]}"
awk '{p += $1; f += $2; s += $3} END {printf "all suites: %d passed, %d failed, %d skipped\n", p, f, s}' "$GTRAIN_TEST_COUNTS"
