#!/usr/bin/env bash
# with-refs-server.sh CMD [ARGS...] - run CMD (a test suite) with the test references served by a
# fork server (tests/tools/refserver.py): torch, transformers and peft imported once instead of in
# each of the suite's several hundred reference runs. CMD sees GTRAIN_REFS_PY pointing at
# tests/tools/refpy, which sends `SCRIPT.py ARGS` to the server and runs anything else with the real
# Python (GTRAIN_REFS_PY_REAL). When the server cannot start, CMD runs with the real Python as
# before (a line says so). The server ends with CMD; CMD's exit status is returned.
set -uo pipefail
# inside another with-refs-server.sh (a script that runs many suites, as cudasim-mutants.sh does,
# starts one server for all): that server serves CMD too
if [ -n "${GTRAIN_REFS_SOCK:-}" ] && [ -S "$GTRAIN_REFS_SOCK" ] && [ -n "${GTRAIN_REFS_PY_REAL:-}" ]; then exec "$@"; fi
root="$(cd "$(dirname "$0")/.." && pwd)"
real="${GTRAIN_REFS_PY_REAL:-${GTRAIN_REFS_PY:-$("$root/scripts/install-deps.sh" --venv-path)/bin/python}}"
dir="$(mktemp -d /tmp/gtrain-refs.XXXXXX)" || exit 1
sock="$dir/sock"
"$real" "$root/tests/tools/refserver.py" "$sock" >"$dir/out" 2>"$dir/err" &
pid=$!
cleanup() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
for _ in $(seq 600); do # the imports take a few seconds; give up after 60 s
  grep -q ready "$dir/out" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if grep -q ready "$dir/out" 2>/dev/null; then
  GTRAIN_REFS_PY_REAL="$real" GTRAIN_REFS_SOCK="$sock" GTRAIN_REFS_PY="$root/tests/tools/refpy" "$@"
else
  echo "with-refs-server: the reference server did not start ($(tail -n 1 "$dir/err")); each reference imports its own" >&2
  GTRAIN_REFS_PY="$real" "$@"
fi
