#!/usr/bin/env bash
# The README's main command: install what is missing, build, train the embedded default
# (a character-level GPT on the Shakespeare text; on the CPU when there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
make -j"$(nproc)"
exec build/gtrain --config configs/shakespeare-char.yaml "$@"
