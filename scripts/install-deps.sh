#!/usr/bin/env bash
# Install the Debian packages gtrain needs to build and test (Debian 12; root or sudo).
# Only what is missing is installed, so a second run is quick and needs no network.
set -euo pipefail
pkgs=(build-essential make gcc pkg-config libyaml-dev libcjson-dev libcriterion-dev libopenblas-dev
      libopenmpi-dev openmpi-bin clang libclang-rt-14-dev libxml2-utils)
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
