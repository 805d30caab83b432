#!/usr/bin/env bash
# tap-summary.sh TAP_FILE [NAME] - the closing line of a Criterion run from its TAP report: every
# skipped test with its reason, then "NAME: N passed, N failed, N skipped" (NAME defaults to
# "tests"). Tests left out by --filter or disabled are not counted (Criterion's TAP says "# SKIP test
# was skipped" for those, and a cr_skip_test always gives a reason). Appends the three counts to
# $GTRAIN_TEST_COUNTS when set, so scripts/test.sh can add up its suites.
set -euo pipefail
tap="$1"
name="${2:-tests}"
[ -r "$tap" ] || { echo "tap-summary: $tap: no TAP report (did the test binary start?)"; exit 1; }
passed=$(grep -E '^ok ' "$tap" | grep -vc '# SKIP' || true)
failed=$(grep -cE '^not ok ' "$tap" || true)
skips=$(grep -E '^ok .*# SKIP ' "$tap" | grep -v '# SKIP test was skipped$' || true)
skipped=$(printf '%s' "$skips" | grep -c . || true)
if [ "$skipped" -gt 0 ]; then
  echo "$name: skipped:"
  printf '%s\n' "$skips" | sed -E 's/^ok - ([^ ]+) +# SKIP (.*)$/  \1: \2/'
fi
[ -n "${GTRAIN_TEST_COUNTS:-}" ] && echo "$passed $failed $skipped" >> "$GTRAIN_TEST_COUNTS"
echo "$name: $passed passed, $failed failed, $skipped skipped"
