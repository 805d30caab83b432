#!/usr/bin/env bash
# The README's test command: install what is missing, build, run the whole suite:
# the Criterion tests, the same suite under AddressSanitizer + UBSan, the CUDA backend
# compiled with warnings as errors (when nvcc is present; CI has it at /usr/local/cuda/bin), the
# CUDA simulator's cuBLAS and NCCL models, the
# whole suite again with the CUDA backend on the CUDA simulator, planted bugs it must catch, and
# libFuzzer on every reader.
# The plain flavour runs every test; the ASan and simulator flavours leave out the suites and
# tests scripts/test-flavours.sh lists, each with why that flavour adds nothing for it, said or
# measured (the closing lines say what ran where). The time of each part (wall and CPU seconds) is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/test-flavours.sh
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
trap 'rm -f "$GTRAIN_TEST_COUNTS" "${times_file:-}" "${asan_leave:-}" "${sim_leave:-}"' EXIT
jobs="$(nproc)"
# the time each part took, printed at the end: wall seconds, and CPU seconds (user + sys of the
# processes the part ran and waited for, from bash's `times`), which say more on a shared machine.
# `times` runs in this shell: a $(...) subshell would count its own children, none of these.
times_file="$(mktemp)"
cpu_s=0
read_cpu() {
  times >"$times_file"
  cpu_s="$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); n += a[1] * 60 + a[2] } printf "%.2f", n }' "$times_file")"
}
times=() part_name="" part_start="" part_cpu=0
part() {
  local t="${EPOCHREALTIME/,/.}"
  read_cpu
  [ -n "$part_name" ] && times+=("$(awk -v w="$t" -v w0="$part_start" -v c="$cpu_s" -v c0="$part_cpu" -v n="$part_name" \
    'BEGIN { printf "%7.1f s wall %7.1f s CPU  %s", w - w0, c - c0, n }')")
  part_name="$1" part_start="$t" part_cpu="$cpu_s"
  [ -n "$1" ] && echo "== $1"
  return 0
}
# the install (above) ran from the script's start, where bash's $SECONDS counts from
part_name="install of what was missing" part_start="$(awk -v w="${EPOCHREALTIME/,/.}" -v s="$SECONDS" 'BEGIN { printf "%.6f", w - s }')"
all_start="$part_start"
# what the ASan and simulator flavours leave out (scripts/test-flavours.sh): files the test binary
# reads (GTRAIN_TEST_LEAVE_OUT, tests/test_main.c)
asan_leave="$(mktemp)" sim_leave="$(mktemp)"
write_flavour_leave_out "$asan_leave" asan
write_flavour_leave_out "$sim_leave" cudasim
asan_n="$(grep -c . "$asan_leave" || true)" sim_n="$(grep -c . "$sim_leave" || true)"
part "build and test"
make -j"$jobs"
make -j"$jobs" test
check_leave_out build/test_gtrain "$asan_leave"
check_leave_out build/test_gtrain "$sim_leave"
part "test under AddressSanitizer + UBSan, leaks fatal ($asan_n entries of scripts/test-flavours.sh left out)"
GTRAIN_TEST_LEAVE_OUT="$asan_leave" LSAN_JOBS="$jobs" make -j"$jobs" test-asan
if command -v nvcc >/dev/null 2>&1; then
  part "CUDA backend: compiled with warnings as errors"
  make -j"$jobs" cuda-check
else
  echo "== CUDA backend: nvcc not found, not compiled"
fi
part "CUDA simulator: the cuBLAS/cuBLASLt and NCCL models against their references"
make test-cudasim-blas
make test-cudasim-nccl
part "the suite with the CUDA backend (cuda/*.cu) on the CUDA simulator ($sim_n entries of scripts/test-flavours.sh left out)"
GTRAIN_TEST_LEAVE_OUT="$sim_leave" make -j"$jobs" test-cudasim
part "known bugs planted into copies of cuda/: the simulated suite must catch each"
GTRAIN_TEST_COUNTS= make test-cudasim-mutants   # their failures are the point: not counted
part "fuzz every reader of untrusted input for ${FUZZ_SECONDS:-2} s each (its seed corpus first)"
make -j"$jobs" fuzz FUZZ_SECONDS="${FUZZ_SECONDS:-2}" FUZZ_JOBS="$jobs"
part ""
echo "== all tests passed in $(awk -v w="${EPOCHREALTIME/,/.}" -v w0="$all_start" 'BEGIN { printf "%.0f", w - w0 }') s:"
printf '%s\n' "${times[@]}"
echo "what ran where: plain: every test; ASan + UBSan: all but $asan_n entries; CUDA simulator: all but" \
     "$sim_n entries (scripts/test-flavours.sh lists them and says why)"
awk '{p += $1; f += $2; s += $3} END {printf "all suites: %d passed, %d failed, %d skipped\n", p, f, s}' "$GTRAIN_TEST_COUNTS"
