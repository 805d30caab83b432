#!/usr/bin/env bash
# flavour-coverage.sh asan|cudasim [MIN_SECONDS] - which slow tests a second flavour of the suite can
# leave out without running one line less of the product's code in that flavour.
#
# The plain flavour (make test) runs every test. The ASan + UBSan flavour checks the C code of src/
# under the sanitizers; the simulator flavour runs src/ and the CUDA backend (cuda/, not the
# simulator itself) on the CUDA simulator. A slow test adds nothing to such a flavour when every line
# of that code it runs is run there by the tests the flavour keeps. This script measures it with gcov:
#   1. builds the suite with --coverage (build-cov/, and for cudasim build-cudasim-cov/ as the
#      simulator flavour is built: scripts/test-cudasim.sh's environment);
#   2. candidates: the tests that took MIN_SECONDS (default 2) or more in the flavour's last run
#      (build-asan/test.tap or build-cudasim/test.tap: run the flavour once first), less those
#      scripts/test-flavours.sh already leaves out of it and, on the simulator, those whose
#      assertions are the CUDA backend's own results (keep= below);
#   3. runs the other tests of the flavour together, then each candidate alone, each into its own
#      GCOV_PREFIX (gtrain processes a test starts write there too), and reads the lines run;
#   4. from the slowest candidate down: a candidate whose lines all run in the kept tests and the
#      candidates still kept is left out; the union of lines never shrinks.
# It prints the entries to put in scripts/test-flavours.sh (ASAN_COVERED / CUDASIM_COVERED) and,
# with --check, fails when the entries listed there now leave a line of the flavour's code unrun.
# It takes about as long as the flavour itself, at -O1 with counters: run it when tests change much.
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
flavour="${1:?usage: scripts/flavour-coverage.sh [--check] asan|cudasim [MIN_SECONDS]}"
min="${2:-2}"
. scripts/test-flavours.sh
# one reference server for every test run below (scripts/with-refs-server.sh)
GTRAIN_REFS_PY="${GTRAIN_REFS_PY:-$(scripts/install-deps.sh --venv-path)/bin/python}"
export GTRAIN_REFS_PY
if [ -z "${GTRAIN_COVERAGE_SERVED:-}" ]; then
  GTRAIN_COVERAGE_SERVED=1 exec scripts/with-refs-server.sh "$(pwd)/scripts/flavour-coverage.sh" "$@"
fi
jobs="$(nproc)"
cov=build-cov simcov=build-cudasim-cov
covmake=(make -j"$jobs" BUILD="$cov" CUDA=0 OPT=-O1 SAN=--coverage)
case "$flavour" in
  asan)
    "${covmake[@]}" $cov/gtrain $cov/test_gtrain $cov/dist_probe >/dev/null
    bin=$cov/test_gtrain tap=build-asan/test.tap code='src/' keep=''
    leave=(${ASAN_LEAVE_OUT[@]+"${ASAN_LEAVE_OUT[@]}"}) covered=(${ASAN_COVERED[@]+"${ASAN_COVERED[@]}"})
    export GTRAIN_BIN="$PWD/$cov/gtrain" ;;
  cudasim)
    "${covmake[@]}" BUILD_SIM=$simcov cudasim-build >/dev/null
    # the code the simulator flavour checks: the CUDA backend (not the simulator) and the host code that
    # drives it (the backend layer, the model, the trainer, evaluation, generation, checkpoints, data
    # parallel, the weight loaders and writers); readers, tokenizer and config run the same bits in the
    # plain flavour
    bin=$simcov/test_gtrain tap=build-cudasim/test.tap
    code='cuda/(?!sim/)|src/backend/|src/model/|src/run/(trainer|trainer_eval|trainer_open|checkpoint|eval|generate|sample|dist|dist_comm|dist_nccl_module|optim)\.c|src/io/(hf_weights|hf_weights_bnb|hf_checkpoint|hf_writer|lora_io|bnb_state)\.c'
    # never candidates: tests whose assertions are the CUDA backend's own results (its numbers
    # against a reference, its waits, its device memory against the plan, its bits under recompute
    # and offload): lines run say nothing of what they check
    keep='(cuda|cuda_gemm|mma_ptx|ops\w*|backend_ops\w*|\w+_ops|nccl|host_waits|plan|storage_plan|gen_plan|recompute)/\w+|\w+/\w*planned_equals_measured\w*'
    leave=("${CUDASIM_LEAVE_OUT[@]}") covered=(${CUDASIM_COVERED[@]+"${CUDASIM_COVERED[@]}"})
    export GTRAIN_BIN="$PWD/$simcov/gtrain" GTRAIN_TEST_CUDASIM=1 GTRAIN_TEST_DEVICE=cuda GTCSIM_DEVICE_COUNT=2 \
           GTCSIM_NCCL_TIMEOUT=60 ;;
  *) echo "flavour-coverage: expected asan or cudasim, found $flavour"; exit 2 ;;
esac
export GTRAIN_ROOT="$PWD" GOMP_SPINCOUNT="${GOMP_SPINCOUNT:-1000}" GCOV_PREFIX_STRIP=0
out="/tmp/gtrain-coverage-$flavour"
rm -rf "$out" && mkdir -p "$out/runs"

# the candidates: --check measures the tests listed as covered; otherwise the slow ones of the last run
if [ $check = 1 ]; then
  "$bin" --list | awk '/^[A-Za-z0-9_]+: [0-9]+ tests?$/ { s = $1; sub(/:$/, "", s); next }
                       { t = $NF; print s "/" t }' >"$out/all"
  : >"$out/candidates"
  for e in ${covered[@]+"${covered[@]}"}; do
    grep -x -- "$e" "$out/all" >>"$out/candidates" || { echo "flavour-coverage: $e is not a test of $bin"; exit 1; }
  done
else
  [ -r "$tap" ] || { echo "flavour-coverage: $tap missing: run the $flavour flavour once first"; exit 1; }
  sed -nE 's/^ok - ([A-Za-z0-9_]+)::([A-Za-z0-9_]+) +\(([0-9.]+)s\).*/\1\/\2 \3/p' "$tap" |
    awk -v m="$min" '$2 >= m { print $1 }' | while IFS= read -r t; do
      for e in ${leave[@]+"${leave[@]}"}; do
        [[ "$e" == */* ]] || e="$e/*"
        # shellcheck disable=SC2053
        [[ "$t" == $e ]] && continue 2
      done
      [ -n "$keep" ] && grep -qxP -- "$keep" <<<"$t" && continue
      echo "$t"
    done >"$out/candidates"
fi
# the kept run leaves out (GTRAIN_TEST_LEAVE_OUT, tests/test_main.c) the flavour's left-out entries and
# the candidates: too many for a --filter pattern
write_leave_out "$out/leave-out" ${leave[@]+"${leave[@]}"}
cat "$out/candidates" >>"$out/leave-out"
run() { # run PREFIX JOBS CRITERION_ARGS... (PREFIX.failed when a test failed)
  local p="$1" j="$2"
  shift 2
  GCOV_PREFIX="$out/runs/$p" "$bin" -j"$j" --tap="$out/runs/$p.tap" "$@" >"$out/runs/$p.log" 2>&1 ||
    touch "$out/runs/$p.failed"
}
echo "flavour-coverage: $flavour: $(wc -l <"$out/candidates") candidate(s); the kept tests first"
GTRAIN_TEST_LEAVE_OUT="$out/leave-out" run kept "$jobs"
n=0
while IFS= read -r t; do
  n=$((n + 1))
  echo "$t" >"$out/runs/c$n.name"
  run "c$n" 1 --filter="$t" &
  if (( n % jobs == 0 )); then wait; fi
done <"$out/candidates"
wait
# a test that limits its own file sizes or reads its stderr may fail with the counters (libgcov
# writes at exit): said, and its lines still count
for f in "$out"/runs/*.failed; do
  [ -e "$f" ] || continue
  echo "flavour-coverage: warning: in $(basename "$f" .failed): $(grep -h '^\[FAIL\]' "${f%.failed}.log" | tr '\n' ' ')(${f%.failed}.log)"
done
# gcov reads a counter file beside its notes file: link each .gcno beside the .gcda of every run
find "$out/runs" -name '*.gcda' | while IFS= read -r f; do
  src="${f#"$out/runs/"*/}"
  ln -sf "/${src%.gcda}.gcno" "${f%.gcda}.gcno"
done
"${GTRAIN_REFS_PY}" scripts/flavour_coverage.py "$out" "$code" "$check" "$flavour" "$keep"
