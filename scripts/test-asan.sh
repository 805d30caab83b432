#!/usr/bin/env bash
# test-asan.sh BUILD_DIR [criterion args...] - run BUILD_DIR/test_gtrain (built with ASan + UBSan)
# so that a leak or any sanitizer report fails the run, wherever it happens: in a Criterion
# worker (whose exit status Criterion ignores after the test reported) or in a gtrain process
# a test spawned. Reports go to files (log_path) in a scratch dir; the run fails when there are
# any, printing them and the tests whose stacks name them. LSAN_JOBS=N runs N workers (default
# 1, so reports are easy to attribute).
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-asan}"
shift || true
[ -x "$build/test_gtrain" ] && [ -x "$build/gtrain" ] || { echo "test-asan: $build/test_gtrain or $build/gtrain not built"; exit 1; }
logs="$(mktemp -d /tmp/gtrain-san.XXXXXX)"
export ASAN_OPTIONS="detect_leaks=1:log_path=$logs/asan:log_exe_name=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan:log_exe_name=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$(pwd)/tests/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# the Python of the test references (scripts/install-deps.sh --test-refs), unless given; its programs
# run through a fork server (scripts/with-refs-server.sh)
GTRAIN_REFS_PY="${GTRAIN_REFS_PY:-$(scripts/install-deps.sh --venv-path)/bin/python}"
export GTRAIN_REFS_PY
# a short OpenMP spin, as make test sets: with two test workers on two cores, libgomp's default
# spin (~300k iterations per barrier) made a descheduled thread's partner spin through whole time
# slices; recompute and generate took 291 s here without it, 23 s with it (same tests, -j2)
export GOMP_SPINCOUNT="${GOMP_SPINCOUNT:-1000}"
GTRAIN_BIN="$(pwd)/$build/gtrain" GTRAIN_ROOT="$(pwd)" scripts/with-refs-server.sh "$build/test_gtrain" --tap="$build/test.tap" --jobs "${LSAN_JOBS:-1}" "$@"
rc=$?
scripts/tap-summary.sh "$build/test.tap" asan || rc=1
shopt -s nullglob
# a file that only lists the suppressions used (tests/lsan.supp) is not a report
reports=()
for r in "$logs"/asan.* "$logs"/ubsan.*; do
  grep -qE 'ERROR: |runtime error:' "$r" && reports+=("$r")
done
if [ ${#reports[@]} -gt 0 ]; then
  echo
  echo "test-asan: ${#reports[@]} sanitizer report(s):"
  for r in "${reports[@]}"; do
    echo "---- $(basename "$r")"
    cat "$r"
  done
  tests="$(grep -ho 'in [A-Za-z0-9_]*_impl ' "${reports[@]}" | sed 's/^in //; s/_impl $//' | sort -u | tr '\n' ' ')"
  echo "test-asan: FAILED: sanitizer reports (leaks or errors)${tests:+ from tests: $tests}; reports kept in $logs"
  exit 1
fi
rm -rf "$logs"
[ $rc -eq 0 ] && echo "test-asan: no sanitizer report, no leak"
exit $rc
