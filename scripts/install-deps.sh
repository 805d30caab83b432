#!/usr/bin/env bash
# Install what gtrain needs to build and test (Debian 12; root or sudo).
#   scripts/install-deps.sh               the Debian packages of the build
#   scripts/install-deps.sh --test-refs   those, and the test suite's independent references: the real
#                                         Hugging Face stack (torch, transformers, peft, trl,
#                                         tokenizers, ...) from PyPI at the exact versions of
#                                         tests/requirements-refs.txt, in a virtual environment outside
#                                         the repository ($GTRAIN_REFS_VENV, default
#                                         ~/.cache/gtrain/refs-venv), whose path it prints last
#   scripts/install-deps.sh --venv-path   only print that path (make test reads it from here)
# Only what is missing is installed: a second run installs nothing and needs no network (the venv
# remembers the requirements it was made from; a change of that file reinstalls).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${GTRAIN_REFS_VENV:-$HOME/.cache/gtrain/refs-venv}"
req="tests/requirements-refs.txt"
if [ "${1:-}" = "--venv-path" ]; then
  echo "$venv"
  exit 0
fi
pkgs=(build-essential make gcc pkg-config libyaml-dev libcjson-dev libcriterion-dev libopenblas-dev
      libopenmpi-dev openmpi-bin clang libclang-rt-14-dev libxml2-utils libonig-dev libutf8proc-dev libicu-dev
      libsnappy-dev libzstd-dev zlib1g-dev)
refs=0
if [ "${1:-}" = "--test-refs" ]; then
  refs=1
  pkgs+=(python3 python3-venv)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
[ "$refs" -eq 1 ] || exit 0

# The references. The stamp is a copy of the requirements the venv was made from: equal, nothing to do.
stamp="$venv/gtrain-requirements.txt"
if [ -x "$venv/bin/python" ] && cmp -s "$req" "$stamp"; then
  echo "$venv"
  exit 0
fi
echo "install-deps: installing the test references ($req) into $venv (first time: 3.0 GB of wheels from PyPI, 6.0 GB on disk, about 2.5 min)" >&2
t0=$(date +%s)
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input -r "$req" >&2
# Every reference must import: a broken install is an error here, never a skipped test later.
"$venv/bin/python" - <<'EOF' >&2
import importlib, sys
mods = ["torch", "transformers", "peft", "trl", "tokenizers", "safetensors", "pyarrow", "jinja2",
        "bitsandbytes", "accelerate", "datasets", "numpy", "duckdb"]
bad = []
for m in mods:
    try:
        importlib.import_module(m)
    except Exception as e:  # report every missing one, in one line each
        bad.append(f"{m}: {type(e).__name__}: {e}")
if bad:
    sys.exit("install-deps: the test references do not import: " + "; ".join(bad))
EOF
cp "$req" "$stamp"
echo "install-deps: the test references installed in $(( $(date +%s) - t0 )) s" >&2
echo "$venv"
