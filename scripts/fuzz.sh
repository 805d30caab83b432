#!/usr/bin/env bash
# fuzz.sh - run each libFuzzer target (build-fuzz/fuzz_NAME) for FUZZ_SECONDS, FUZZ_JOBS at a time.
#   FUZZ_BUILD=build-fuzz FUZZ_SECONDS=60 FUZZ_JOBS=2 scripts/fuzz.sh fuzz_config fuzz_shard ...
# (no arguments: every build-fuzz/fuzz_* binary). Seeds come from tests/fuzz/corpus/NAME (read
# only); new inputs go to $FUZZ_BUILD/corpus/NAME, crashing inputs to $FUZZ_BUILD/artifacts/.
# Fails when any target crashes, hits a sanitizer report (ASan, UBSan, LeakSanitizer), times out
# on one input, or goes over the memory limit. One summary line per target.
set -uo pipefail
cd "$(dirname "$0")/.."
build="${FUZZ_BUILD:-build-fuzz}"
seconds="${FUZZ_SECONDS:-60}"
jobs="${FUZZ_JOBS:-2}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for b in "$build"/fuzz_*; do [ -x "$b" ] && targets+=("$(basename "$b")"); done
fi
[ ${#targets[@]} -gt 0 ] || { echo "fuzz: no targets in $build (make fuzz-build)"; exit 1; }
mkdir -p "$build/logs" "$build/artifacts"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

run_one() {
  local t="$1" name="${1#fuzz_}"
  local seeds="tests/fuzz/corpus/$name" work="$build/corpus/$name" log="$build/logs/$1.log"
  mkdir -p "$work"
  local dirs=("$work")
  [ -d "$seeds" ] && dirs+=("$seeds")
  "$build/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" "${dirs[@]}" >"$log" 2>&1
  echo $? >"$build/logs/$t.rc"
}

running=0
for t in "${targets[@]}"; do
  [ -x "$build/$t" ] || { echo "fuzz: $build/$t not built"; exit 1; }
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait

fail=0
for t in "${targets[@]}"; do
  log="$build/logs/$t.log"
  rc="$(cat "$build/logs/$t.rc" 2>/dev/null || echo 99)"
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)"
  cov="$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')"
  corpus="$(find "$build/corpus/${t#fuzz_}" -type f | wc -l)"
  bad=""
  if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|SUMMARY: (Address|Leak|UndefinedBehavior)Sanitizer|deadly signal|==ERROR' "$log"; then
    bad="$(grep -m1 -E 'ERROR: |runtime error:|deadly signal' "$log")"
  elif [ "$rc" != 0 ]; then
    bad="exit status $rc"
  fi
  if [ -n "$bad" ]; then
    fail=1
    printf 'fuzz %-20s FAIL  %s execs, %s s: %s (log %s; inputs %s/artifacts/%s-*)\n' "$t" "${execs:-?}" "$seconds" "$bad" "$log" "$build" "$t"
  else
    printf 'fuzz %-20s ok    %s execs in %s s, coverage %s edges, corpus %s\n' "$t" "${execs:-?}" "$seconds" "${cov:-?}" "$corpus"
  fi
done
exit $fail
