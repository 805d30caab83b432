#!/usr/bin/env bash
# The README's memory report: for each recompute setting, planned and measured activation memory
# (activations + recompute stash + scratch; host_offload apart) and the step time against no
# recompute, from bench_step on this machine's CPU backend.
#   scripts/memory-report.sh [BUILD] MODEL.json B T [steps]
set -euo pipefail
build="${1:-build}" model="$2" B="$3" T="$4" steps="${5:-3}"
cd "$(dirname "$0")/.."
echo "| setting | activations planned | measured | host_offload | step time | vs none |"
echo "|---|---|---|---|---|---|"
base=""
for setting in "0 0" "4 0" "2 0" "1 0" "4 1" "2 1" "1 1"; do
  set -- $setting
  line="$(BENCH_MEMORY=1 "$build/bench_step" "$model" "$B" "$T" "$steps" "$1" "$2")"
  ap="$(sed -E 's/.*activations planned ([0-9.]+) MiB.*/\1/' <<<"$line")"
  am="$(sed -E 's/.*activations planned [0-9.]+ MiB measured ([0-9.]+) MiB.*/\1/' <<<"$line")"
  ho="$(sed -E 's/.*host_offload planned ([0-9.]+) MiB.*/\1/' <<<"$line")"
  ms="$(sed -E 's/.* ([0-9.]+) ms\/step$/\1/' <<<"$line")"
  [ -z "$base" ] && base="$ms"
  name="none"
  [ "$1" != 0 ] && name="every_n_layers $1"
  [ "$2" = 1 ] && name="$name + offload"
  ratio="$(awk -v a="$ms" -v b="$base" 'BEGIN{printf "%.2fx", a/b}')"
  echo "| $name | $ap MiB | $am MiB | $ho MiB | $ms ms | $ratio |"
done
