#!/usr/bin/env bash
# Data parallel on one machine: 2 processes (ranks) of gtrain launched by Open MPI's mpirun.
#
#   scripts/mpirun-example.sh [NP] [extra gtrain args...]      e.g.  scripts/mpirun-example.sh 2 --set max_steps=200
#
# What happens: mpirun starts NP copies of build/gtrain and sets OMPI_COMM_WORLD_RANK,
# OMPI_COMM_WORLD_SIZE and OMPI_COMM_WORLD_LOCAL_RANK in each; gtrain (src/run/dist.c) reads them, calls
# MPI_Init and all-reduces the gradients and the token count every optimizer step. Rank 0 alone
# logs, evaluates and writes checkpoints. Effective batch = per_device_train_batch_size x NP x
# gradient_accumulation_steps (printed at start).
#
# gtrain must be built with MPI:  make MPI=1   (gtrain --version then lists "mpi").
set -euo pipefail
cd "$(dirname "$0")/.."

NP="${1:-2}"
[ $# -gt 0 ] && shift
CONFIG="${CONFIG:-configs/shakespeare-char.yaml}"

if ! build/gtrain --version 2>/dev/null | grep -q mpi; then
    echo "mpirun-example: build/gtrain is not built with MPI; run: make MPI=1" >&2
    exit 1
fi

# Each rank's CPU backend uses OpenMP; split the cores between the ranks so they do not fight.
CORES="$(nproc)"
THREADS=$(( CORES / NP > 0 ? CORES / NP : 1 ))

# --allow-run-as-root: only needed inside containers that run as root.
# --oversubscribe:     allow more ranks than cores (fine for trying it out; slow).
# --bind-to none:      leave thread placement to OpenMP (OMP_NUM_THREADS per rank below).
# -x VAR:              forward an environment variable to every rank.
exec mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$NP" \
    -x OMP_NUM_THREADS="$THREADS" \
    build/gtrain --config "$CONFIG" \
    --set output_dir=runs/mpirun-example \
    "$@"
