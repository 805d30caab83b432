#!/usr/bin/env bash
# scripts/device-prepare.sh - on this (Debian 12) machine, make what scripts/device-check.sh needs to
# run on a GPU machine without compiling there (DEVICE_CHECK_PREBUILT=1):
#   build-carry/        gtrain, its CUDA module, test_gtrain, bench_attention and bench_rows (stripped copies; built
#                       in build-device/) for one GPU architecture (DEVICE_ARCH, default sm_90:
#                       H100/H200), host code for any x86-64-v3 processor (not -march=native), no MPI;
#   .devlibs.tar.xz     the shared libraries those load that are not glibc, libstdc++/libgcc or the
#                       CUDA/NVIDIA libraries (the GPU machine has those): libyaml, cJSON, OpenBLAS,
#                       ICU, Criterion and what they load. device-check.sh puts on its library path
#                       only the ones the machine lacks (ldconfig -p), so its own newer copies win.
# Both are ignored by git; carry them (the device tool: carry ["build-carry", ".devlibs.tar.xz"]).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ARCH="${DEVICE_ARCH:-90}"
B=build-device
FILES=(gtrain libgtrain-cuda.so libgtrain-cuda-probe.so test_gtrain bench_attention bench_rows) # what is carried
nice make -j"$(nproc)" BUILD=$B CUDA=1 MPI=0 ARCH_FLAGS=-march=x86-64-v3 \
  CUDA_ARCH="-gencode arch=compute_$ARCH,code=sm_$ARCH" "${FILES[@]/#/$B/}"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
for f in "${FILES[@]}"; do
  ldd "$B/$f" | awk '/=> \// { print $1, $3 }'
done | sort -u | while read -r soname path; do
  case "$soname" in
    libc.so* | libm.so* | libpthread* | libdl.so* | librt.so* | ld-linux* | libmvec* | libresolv* | libutil* | \
    libgcc_s* | libstdc++* | libcuda* | libcublas* | libnccl* | libcudnn* | libnvidia* | libcudart*) continue ;;
  esac
  cp -L "$path" "$stage/$soname"
done
tar -cJf .devlibs.tar.xz -C "$stage" .
rm -rf build-carry && mkdir -p build-carry
for f in "${FILES[@]}"; do
  strip --strip-unneeded -o build-carry/$f $B/$f
done
echo "device-prepare: build-carry/ $(du -sh build-carry | cut -f1), $(ls "$stage" | wc -l) libraries in" \
  ".devlibs.tar.xz $(du -h .devlibs.tar.xz | cut -f1)"
