#!/bin/sh
# test-cudasim.sh - run the Criterion suites that exercise the CUDA backend on the CUDA simulator
# (make test-cudasim builds $BUILD_SIM first) and print how many tests ran through cuda/.
# Extra arguments go to the test binary.
set -u
B=${BUILD_SIM:-build-cudasim}
F=${CUDASIM_FILTER:-'@(ops|ops_bf16|cuda|model|recompute|plan|precision|accumulation|sample|optim|reliability)/*'}
LOG=$B/test-cudasim.log
start=$(date +%s)
GTRAIN_TEST_DEVICE=cuda GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-1000} GTRAIN_BIN="$(pwd)/$B/gtrain" GTRAIN_ROOT="$(pwd)" \
  "$B/test_gtrain" --filter="$F" "$@" >"$LOG" 2>&1
rc=$?
cat "$LOG"
syn=$(grep 'Synthesis:' "$LOG" | tail -1)
tested=$(echo "$syn" | sed -n 's/.*Tested: \([0-9]*\).*/\1/p')
skipped=$(echo "$syn" | sed -n 's/.*Skipped: \([0-9]*\).*/\1/p')
echo "test-cudasim: ${tested:-0} test(s) run with GTRAIN_TEST_DEVICE=cuda on the CUDA simulator" \
     "(${skipped:-0} skipped), $(( $(date +%s) - start )) s; rc $rc"
exit $rc
