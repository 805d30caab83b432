#!/bin/sh
# test-cudasim.sh - the whole Criterion suite with the CUDA backend on the CUDA simulator (make
# test-cudasim builds $BUILD_SIM first), and how many of its tests ran kernels through cuda/.
#   GTRAIN_TEST_DEVICE=cuda   the op, model, recompute, plan, precision ... tests open the CUDA backend
#   GTRAIN_TEST_CUDASIM=1     long process tests run shorter; what the simulator does not model skips
#   GTCSIM_DEVICE_COUNT=2     two simulated devices, so the data-parallel tests (2 MPI ranks on one
#                             node, device = local rank) run through dist_nccl.cu and the NCCL model
#   GTCSIM_USAGE_LOG          each process that runs a kernel appends the test it runs for
# CUDASIM_FILTER narrows the suite (a Criterion --filter glob); GTRAIN_TEST_LEAVE_OUT=FILE leaves out
# the tests FILE lists (tests/test_main.c; scripts/test.sh's simulator flavour); extra arguments go to
# the test binary.
set -u
B=${BUILD_SIM:-build-cudasim}
LOG=$B/test-cudasim.log
USAGE=$B/test-cudasim.usage
rm -f "$USAGE"
start=$(date +%s)
# (quoted: a filter is a glob, which the shell must not expand)
if [ -n "${CUDASIM_FILTER:-}" ]; then set -- --filter="$CUDASIM_FILTER" "$@"; fi
# the Python of the test references (scripts/install-deps.sh --test-refs), unless given; its programs
# run through a fork server (scripts/with-refs-server.sh)
GTRAIN_REFS_PY="${GTRAIN_REFS_PY:-$(scripts/install-deps.sh --venv-path)/bin/python}"
export GTRAIN_REFS_PY
GTRAIN_TEST_CUDASIM=1 GTRAIN_TEST_DEVICE=cuda GTCSIM_DEVICE_COUNT=2 GTCSIM_NCCL_TIMEOUT=${GTCSIM_NCCL_TIMEOUT:-60} \
  GTCSIM_USAGE_LOG="$(pwd)/$USAGE" GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-1000} \
  GTRAIN_BIN="$(pwd)/$B/gtrain" GTRAIN_ROOT="$(pwd)" \
  scripts/with-refs-server.sh "$B/test_gtrain" --tap="$B/test.tap" --verbose -j"${JOBS:-$(nproc)}" "$@" >"$LOG" 2>&1
rc=$?
# the backend's line (once per process) and the [RUN ] lines say nothing here
grep -v -e '^cuda: gtcsim' -e '^\[RUN \]' -e 'Test is disabled' "$LOG"
syn=$(grep 'Synthesis:' "$LOG" | tail -1)
tested=$(echo "$syn" | sed -n 's/.*Tested: \([0-9]*\).*/\1/p')
skipped=$(grep -c '^\[SKIP\]' "$LOG")
disabled=$(grep -c '^\[SKIP\].*Test is disabled' "$LOG")
through=$(grep -E '^[A-Za-z0-9_]+::[A-Za-z0-9_]+$' "$USAGE" 2>/dev/null | sort -u | grep -c .)
echo "test-cudasim: ${tested:-0} test(s) run with the CUDA backend on the simulator, ${through:-0} of them" \
     "ran kernels through cuda/ (their names: $USAGE);" \
     "$((skipped - disabled)) skipped; $(( $(date +%s) - start )) s; rc $rc"
scripts/tap-summary.sh "$B/test.tap" cudasim || rc=1
# after a whole-suite run: no suite that scripts/test.sh leaves out of this flavour ran a kernel
[ -n "${CUDASIM_FILTER:-}" ] || bash scripts/test-flavours.sh --check-usage "$USAGE" || rc=1
exit $rc
