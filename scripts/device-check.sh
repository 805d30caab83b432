#!/usr/bin/env bash
# scripts/device-check.sh - prove the CUDA backend on a machine with an NVIDIA GPU, in one command,
# unattended, in about 7 minutes. Writes the full log to device-check.log and prints a short table
# last. Exit status: 0 when no check FAILed (SKIPs allowed), 1 otherwise.
#
#   scripts/device-check.sh              # from anywhere; works in the repository root
#   DEVICE_CHECK_BUDGET=420 scripts/device-check.sh   # seconds for everything after the build
#   DEVICE_CHECK_ONLY=g,h scripts/device-check.sh     # only those steps (after the build)
#   scripts/device-check.sh --dry-run   # no GPU: the stages s1-s6 on the CPU backend with tiny sizes
#                                       # (build/ as it is; make device-check-dry)
#
# Stages s1-s6 run first, each with its own budget (scripts/device-check-stages.sh): s1 benchmarks
# (GPT-2 124M, Mistral dimensions full and LoRA r 16, attention alone at T 1024/4096) beside the
# cost model's prediction (make gpu-model), s2 the same-machine PyTorch + PEFT baseline, s6 (run
# third) Nsight Compute's per-kernel times of one GPT-2 and one Mistral LoRA step beside the cost
# model's per kernel, s3 CPU vs GPU step, s4 recompute/offload bit identity on the tensor-core
# attention at head size 128 and T 1024 with the memory plan vs measured, s5 compute-sanitizer
# memcheck + racecheck (the dry run's s6 summarises the H200's stored ncu output). Then:
#
# Steps
#   build  make CUDA=1 BUILD=build-device (gtrain + test_gtrain), for this GPU's architecture only
#          (CUDA_ARCH from nvidia-smi's compute capability; override with CUDA_ARCH=...).
#   (a) ops      each op vs the double-precision reference on fresh random inputs, outputs poisoned
#                with NaN, in fp32 (rel err <= 1e-5) and bf16 (act outputs <= 1e-2, fp32 outputs
#                1e-5): GTRAIN_TEST_DEVICE=cuda test_gtrain --filter 'ops*/*' (ops, ops_bf16, and
#                ops_llama, ops_llama_bf16: rmsnorm, rope, swiglu, grouped-query / sliding-window
#                attention); and the GPU against the CPU backend in the same process (cuda/*: bf16
#                ops vs the CPU's bf16, the Llama ops in fp32 and bf16 with rope bit for bit,
#                grouped-query / sliding-window attention on the CUDA-core and tensor-core kernels,
#                copy-stream ordering, unaligned GEMMs, large head sizes).
#   (b) step     a full training step on the GPU vs the CPU: the model tests against the double
#                reference (model/*, accumulation/*, precision/*), and gtrain runs on device=cpu and
#                device=cuda whose per-step loss and grad norm (metrics.jsonl, 9 digits) must agree
#                (fp32: 1e-5 at step 1; bf16, the CPU's bf16 emulation vs the GPU: 1e-2).
#   (c) recomp   recompute and offload bit-identity on the GPU: recompute/* tests, and gtrain runs
#                with gradient_checkpointing off / every_n_layers 1 / 2 / offload whose
#                metrics.jsonl losses and grad norms must be identical, digit for digit.
#   (d) memory   planned vs measured memory: plan/* tests on the GPU, and the "device total" line
#                of gtrain's plan-vs-measured table must show the same two numbers.
#   (e) bench    GPT-2 124M, bf16, T = 1024, the largest micro-batch that fits (auto-fit, up to
#                BENCH_MAX_BATCH = 32 rows so that the runs fit the time budget): tokens/s and MFU
#                (median of the steps after warm-up), and step time with every_n_layers 1 and with
#                offload. tokens/s and MFU come from the wall-clock step time (metrics.jsonl
#                tokens_per_sec); step times are device_time_ms, timed with CUDA events on the compute
#                stream from the step's first op to its last (forward, backward, optimizer).
#   (g) llama    the Llama family on the GPU: the whole-model tests against the double reference
#                (llama_model/*: Llama, Mistral GQA + sliding window, Qwen2 biases, rope scaling, bf16),
#                configs/llama-shakespeare.yaml runs on device=cpu and device=cuda (per-step loss and
#                grad norm, fp32 1e-5 at step 1), recompute / offload bit-identity of its metrics,
#                planned = measured device total, and a benchmark of Llama-3.2-1B's shape
#                (tests/fixtures/hf_configs/llama-3.2-1b.json, random weights) in bf16 at T = 2048:
#                tokens/s and MFU (6 N + 12 L T d_attn FLOPs per token, N = 1,235,814,400).
#   (h) lora     LoRA on the GPU: lora_ops/*, lora_model/* (every module's adapter gradients against
#                finite differences of the double reference, with rslora and dropout) and
#                lora_train/*; the small Llama with adapters on all seven projections and dropout 0.1
#                on device=cpu and device=cuda (per-step loss and grad norm, 1e-5 at step 1),
#                recompute/offload bit-identity with dropout (fp32 and bf16), planned = measured,
#                and a LoRA r 16 benchmark on Llama-3.2-1B's shape beside (g)'s full fine-tuning.
#   (f) nccl     with 2+ GPUs (nvidia-smi -L): the (e) benchmark on N = min(GPUs, 8) ranks over NCCL
#                (mpirun -np N; without mpirun, N processes with RANK/WORLD_SIZE/LOCAL_RANK and the id
#                through dist_init_file, as srun alone would), and the scaling efficiency
#                tokens/s on N GPUs / (N x tokens/s on one GPU). SKIP on a 1-GPU machine.
#
# Steps whose output format may change (the plan-vs-measured table's wording, metrics.jsonl
# fields) report SKIP with the reason instead of failing or crashing.
#
# A build carried from another machine (DEVICE_CHECK_PREBUILT=1; scripts/device-prepare.sh makes it
# on a Debian 12 machine: build-carry/ for sm_90 and .devlibs.tar.xz, the shared libraries a bare
# CUDA image lacks): nothing is compiled here; the libraries are unpacked into .devlibs/ and put on
# LD_LIBRARY_PATH (Python runs without them), with the directories holding cuBLAS/cuBLASLt/NCCL.
# When $OUT is set (the device tool), the log and the summary are copied there at the end.
#
# Machines without Debian's -dev packages: the build needs libyaml, cJSON, OpenBLAS (and Criterion
# for the tests). If pkg-config cannot find them (or DEVICE_CHECK_FORCE_DEBS=1), this script looks
# for .deb files in .debs/ at the repository root and unpacks them (dpkg -x, no root needed) into
# .debs/root, then builds against that prefix. Prepare .debs/ on any Debian 12 (bookworm) x86_64
# machine with its mirror: scripts/device-debs.sh (apt-get download, no root; about 14 MB).
# (Missing names on other releases: `apt-cache depends PKG`.)
# Never put libc6/libgcc/libstdc++ there: the prefix goes on LD_LIBRARY_PATH.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"
LOG="$ROOT/device-check.log"
BUILD="build-device"
BUDGET="${DEVICE_CHECK_BUDGET:-360}"
DRY=0
if [ "${1:-}" = --dry-run ]; then
  DRY=1 BUILD=build BUDGET="${DEVICE_CHECK_BUDGET:-900}" DEVICE_CHECK_DEVICE=cpu
  DEVICE_CHECK_ONLY="${DEVICE_CHECK_ONLY:-s1,s2,s3,s4,s5,s6}"
  DEVICE_CHECK_PYTHON="${DEVICE_CHECK_PYTHON:-${GTRAIN_REFS_PY:-python3}}"
  LOG="$ROOT/build/device-check-dry.log"
fi
# DEVICE_CHECK_DEVICE=cpu: a dry run of this script's own logic on a machine without a GPU
# (every comparison is then CPU vs CPU); the real check is the default, cuda.
DEV="${DEVICE_CHECK_DEVICE:-cuda}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/device-check.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export PATH="$PATH:/usr/local/cuda/bin"
: >"$LOG"

T0=$(date +%s)
RESULTS=()

log() { printf '%s\n' "$*" >>"$LOG"; }
say() { printf '%s\n' "$*" | tee -a "$LOG"; }
elapsed() { echo $(($(date +%s) - T0)); }
left() { echo $((BUDGET - $(elapsed))); }
# record NAME STATUS DETAIL
record() {
  RESULTS+=("$1|$2|$3")
  say "== $1: $2${3:+ - $3}"
}
# run_to OUTFILE SECONDS CMD...: run with a timeout, output to OUTFILE and the log; returns rc
run_to() {
  local out="$1" secs="$2"
  shift 2
  log "\$ $* (timeout ${secs}s)"
  local rc=0
  timeout --kill-after=5 "$secs" "$@" >"$out" 2>&1 || rc=$?
  cat "$out" >>"$LOG"
  log "(exit $rc)"
  return $rc
}
# a step needs at least N seconds of the budget
have_time() { [ "$(left)" -ge "$1" ]; }

say "device-check: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $ROOT"
{
  echo "--- environment"
  uname -a
  command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "nvidia-smi: not found"
  command -v nvcc >/dev/null && nvcc --version | tail -2 || echo "nvcc: not found"
  git -C "$ROOT" log -1 --oneline 2>/dev/null || true
} >>"$LOG" 2>&1

# ------------------------------------------------------------------ dependencies
PKGS="yaml-0.1 libcjson openblas"
PREBUILT="${DEVICE_CHECK_PREBUILT:-0}"
if [ "$PREBUILT" = 1 ]; then
  [ "$DRY" = 1 ] || BUILD="${DEVICE_CHECK_BUILD:-build-carry}"
  if [ -f "$ROOT/.devlibs.tar.xz" ]; then
    # only the libraries this machine lacks: its own (newer, same soname) copies are used otherwise
    mkdir -p "$ROOT/.devlibs/all" && tar -xJf "$ROOT/.devlibs.tar.xz" -C "$ROOT/.devlibs/all"
    have="$(ldconfig -p 2>/dev/null | awk '{ print $1 }')"
    lacked=""
    for f in "$ROOT"/.devlibs/all/lib*; do
      n="$(basename "$f")"
      if ! grep -qxF "$n" <<<"$have"; then ln -sf "all/$n" "$ROOT/.devlibs/$n"; lacked="$lacked $n"; fi
    done
    say "prebuilt: carried libraries this machine lacks:${lacked:- none}"
  fi
  libdirs="$ROOT/.devlibs"
  for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudart.so.13; do
    d="$(find /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu \
          /opt/torch/.venv/lib -name "$lib" -printf '%h\n' 2>/dev/null | head -1 || true)"
    say "prebuilt: $lib: ${d:-NOT FOUND}"
    [ -n "$d" ] && [[ ":$libdirs:" != *":$d:"* ]] && libdirs="$libdirs:$d"
  done
  export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "prebuilt: $BUILD, LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
elif [ "${DEVICE_CHECK_FORCE_DEBS:-0}" = 1 ] || ! pkg-config --exists $PKGS 2>/dev/null ||
   ! pkg-config --exists criterion 2>/dev/null; then
  if ls "$ROOT"/.debs/*.deb >/dev/null 2>&1; then
    PREFIX="$ROOT/.debs/root"
    mkdir -p "$PREFIX"
    for d in "$ROOT"/.debs/*.deb; do dpkg -x "$d" "$PREFIX"; done
    # .pc files say prefix=/usr; point them at the unpacked tree
    mkdir -p "$PREFIX/pc"
    while IFS= read -r pc; do
      sed -e "s|=/usr|=$PREFIX/usr|g" "$pc" >"$PREFIX/pc/$(basename "$pc")"
    done < <(find "$PREFIX" -name '*.pc' -not -path "$PREFIX/pc/*")
    export PKG_CONFIG_PATH="$PREFIX/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    LIBDIRS="$(find "$PREFIX" -name '*.so*' -printf '%h\n' | sort -u | tr '\n' ':')"
    export LIBRARY_PATH="${LIBDIRS}${LIBRARY_PATH:-}"
    export LD_LIBRARY_PATH="${LIBDIRS}${LD_LIBRARY_PATH:-}"
    export CPATH="$PREFIX/usr/include:$PREFIX/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
    # unversioned .so links for libraries whose -dev package was not downloaded
    while IFS= read -r so; do
      base="${so%%.so.*}.so"
      [ -e "$base" ] || ln -sf "$(basename "$so")" "$base"
    done < <(find "$PREFIX" -name 'lib*.so.[0-9]*' \( -type f -o -type l \))
    say "dependencies: unpacked $(ls "$ROOT"/.debs/*.deb | wc -l) .deb files into $PREFIX"
  else
    say "dependencies: pkg-config misses some of: $PKGS criterion; no .debs/ to unpack (see the header of this script)"
  fi
fi

# ------------------------------------------------------------------ build
if [ -z "${CUDA_ARCH:-}" ] && command -v nvidia-smi >/dev/null; then
  cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')"
  [ -n "$cc" ] && CUDA_ARCH="-gencode arch=compute_$cc,code=sm_$cc"
fi
MAKE_ARGS=(CUDA=1 BUILD="$BUILD")
[ "$DRY" = 1 ] && MAKE_ARGS=(BUILD="$BUILD") # the CPU build
[ -n "${CUDA_ARCH:-}" ] && MAKE_ARGS+=(CUDA_ARCH="$CUDA_ARCH")
JOBS="$(nproc 2>/dev/null || echo 4)"
HAVE_GTRAIN=0
HAVE_TESTS=0
if [ "$PREBUILT" = 1 ]; then
  if run_to "$WORK/build.out" 30 "$BUILD/gtrain" --version; then
    HAVE_GTRAIN=1
    say "prebuilt: $(head -1 "$WORK/build.out")"
    "$BUILD/test_gtrain" --list >/dev/null 2>"$WORK/tests-list.err" && HAVE_TESTS=1
    record build PASS "carried $BUILD (not built here); test_gtrain $([ "$HAVE_TESTS" = 1 ] && echo runs || echo "does not run: $(head -1 "$WORK/tests-list.err")")"
  else
    record build FAIL "carried $BUILD/gtrain does not run: $(tail -1 "$WORK/build.out")"
  fi
elif run_to "$WORK/build.out" 240 make -j"$JOBS" "${MAKE_ARGS[@]}" "$BUILD/gtrain" "$BUILD/bench_attention" "$BUILD/bench_rows"; then
  HAVE_GTRAIN=1
  if [ "$DRY" = 1 ]; then
    record build PASS "dry run: $BUILD/gtrain + bench_attention + bench_rows on the CPU (no test_gtrain)"
  elif run_to "$WORK/build-tests.out" 180 make -j"$JOBS" "${MAKE_ARGS[@]}" "$BUILD/test_gtrain"; then
    HAVE_TESTS=1
    record build PASS "gtrain + test_gtrain (${CUDA_ARCH:-default arch}), $(elapsed)s"
  else
    record build PASS "gtrain only: test_gtrain did not build (Criterion missing?) - see log"
  fi
else
  record build FAIL "make failed - see $LOG"
fi
# the budget counts from here: the build time depends on the machine's cores
T0=$(date +%s)

GT="$ROOT/$BUILD/gtrain"
TG="$ROOT/$BUILD/test_gtrain"
export GTRAIN_BIN="$GT" GTRAIN_ROOT="$ROOT"

GPU_OK=0
if [ "$HAVE_GTRAIN" = 1 ]; then
  if run_to "$WORK/gpu.out" 60 "$GT" --config configs/shakespeare-char.yaml --set device="$DEV" \
      --set max_steps=1 --set eval_steps=0 --set eval_max_batches=1 --set save_steps=0 \
      --set output_dir="$WORK/probe"; then
    GPU_OK=1
  else
    record gpu FAIL "gtrain --set device=$DEV did not run: $(tail -1 "$WORK/gpu.out")"
  fi
fi

# criterion test group on the GPU: NAME FILTER SECONDS
crit() {
  local name="$1" filter="$2" secs="$3" out="$WORK/crit-$1.out"
  if [ "$HAVE_TESTS" != 1 ]; then record "$name" SKIP "test_gtrain not built"; return 1; fi
  if ! have_time "$secs"; then record "$name" SKIP "out of time budget"; return 1; fi
  local rc=0
  GTRAIN_TEST_DEVICE="$DEV" run_to "$out" "$secs" "$TG" --filter "$filter" || rc=$?
  local syn
  syn="$(grep -a 'Synthesis' "$out" | tail -1 | sed 's/.*Synthesis: //')"
  if [ "$rc" = 0 ] && echo "$syn" | grep -q 'Tested: [1-9]'; then
    record "$name" PASS "$syn"
  elif [ "$rc" = 0 ]; then
    record "$name" FAIL "nothing ran (GPU not visible to the tests?): $syn"; return 1
  else
    record "$name" FAIL "${syn:-exit $rc}"; return 1
  fi
}

# gtrain run on the small config: NAME DEVICE SECONDS EXTRA-SETS...; metrics in $WORK/run-NAME
small_run() {
  local name="$1" dev="$2" secs="$3"
  shift 3
  local sets=(--set device="$dev" --set max_steps="${SMALL_STEPS:-4}" --set logging_steps=1
              --set eval_steps=0 --set eval_max_batches=1 --set save_steps=0
              --set output_dir="$WORK/run-$name")
  for s in "$@"; do sets+=(--set "$s"); done
  run_to "$WORK/run-$name.out" "$secs" "$GT" --config "${SMALL_CONFIG:-configs/shakespeare-char.yaml}" "${sets[@]}"
}
# "step loss grad_norm" per train record of a run (exact digits as written)
metrics_of() {
  local f="$WORK/run-$1/metrics.jsonl"
  [ -f "$f" ] || return 1
  grep '"type":"train"' "$f" | sed -E 's/.*"step":([0-9]+).*"loss":([^,]+).*"grad_norm":([^,]+).*/\1 \2 \3/'
}

# compare_runs NAME CPU-RUN GPU-RUN TOL-STEP1 TOL-LATER: per-step loss and grad norm, CPU vs GPU
compare_runs() {
  if metrics_of "$2" >"$WORK/m-$2" && metrics_of "$3" >"$WORK/m-$3" && [ -s "$WORK/m-$2" ]; then
    verdict="$(paste "$WORK/m-$2" "$WORK/m-$3" | awk -v t1="$4" -v tn="$5" '
      function rel(a, b) { d = a - b; if (d < 0) d = -d; m = (b < 0 ? -b : b); if (m < 1e-6) m = 1e-6; return d / m }
      { rl = rel($5, $2); rg = rel($6, $3); tl = ($1 == 1 ? t1 : tn); tg = ($1 == 1 ? 10 * t1 : tn);
        if (rl > ml) ml = rl; if (rg > mg) mg = rg; if (rl > tl || rg > tg || $2 == "null" || $5 == "null") bad = 1; n++ }
      END { printf "%s %d steps, max rel diff loss %.2e grad norm %.2e", (bad || n == 0) ? "FAIL" : "PASS", n, ml, mg }')"
    record "$1" "${verdict%% *}" "${verdict#* }"
  else
    record "$1" SKIP "no metrics.jsonl train records to compare"
  fi
}

# DEVICE_CHECK_ONLY=h (or a,c,h ...): run only those steps (the build always); default all
want() { [ -z "${DEVICE_CHECK_ONLY:-}" ] || [[ ",$DEVICE_CHECK_ONLY," == *",$1,"* ]]; }

# Recompute/offload bit-identity and planned = measured, on SMALL_CONFIG with the extra SETS:
# STEP names the records (STEP-bitident, STEP-mem), P the runs. gradient_checkpointing off, every
# layer, every layer offloaded, and bf16 off / every 2nd layer must give the same metrics digit for
# digit; the offloaded bf16 run's device total, planned = measured.
bitident_checks() { # STEP P SETS...
  local step="$1" p="$2" ok=1
  shift 2
  small_run "$p-none" "$DEV" 40 "$@" gradient_checkpointing=false || ok=0
  small_run "$p-every1" "$DEV" 40 "$@" gradient_checkpointing=true every_n_layers=1 || ok=0
  small_run "$p-offload" "$DEV" 40 "$@" gradient_checkpointing=true every_n_layers=1 offload=true || ok=0
  small_run "$p-bf16-none" "$DEV" 40 "$@" precision=bf16 gradient_checkpointing=false || ok=0
  small_run "$p-bf16-every2" "$DEV" 40 "$@" precision=bf16 gradient_checkpointing=true every_n_layers=2 || ok=0
  diffs=""
  if [ "$ok" = 1 ]; then
    same_metrics "$p-none" "$p-every1" "$p-offload"
    same_metrics "$p-bf16-none" "$p-bf16-every2"
    [ -z "$diffs" ] && record "$step-bitident" PASS "none = every 1 = offload; bf16: none = every 2" ||
      record "$step-bitident" FAIL "differs from no-recompute:$diffs"
  else
    record "$step-bitident" FAIL "a recompute run failed - see log"
  fi
  local row planned measured
  row="$(grep -a -E '^ *device total' "$WORK/run-$p-offload.out" 2>/dev/null | head -1 || true)"
  read -r planned measured <<<"$(echo "$row" | sed -E 's/^ *device total +//' | awk '{ print $1 $2, $3 $4 }')"
  [ -n "$measured" ] && [ "$planned" = "$measured" ] && record "$step-mem" PASS "planned $planned = measured $measured" ||
    record "$step-mem" FAIL "planned ${planned:-?}, measured ${measured:-?}"
}

same_metrics() {
  local base="$1" v
  shift
  metrics_of "$base" >"$WORK/c-$base" || true
  for v in "$@"; do
    metrics_of "$v" >"$WORK/c-$v" || true
    [ -s "$WORK/c-$base" ] && cmp -s "$WORK/c-$base" "$WORK/c-$v" || diffs="$diffs $v"
  done
}
# median of a metrics.jsonl field over the steps after warm-up
median_of() { # NAME FIELD
  local f="$WORK/run-$1/metrics.jsonl"
  [ -f "$f" ] || return 1
  grep '"type":"train"' "$f" | sed -E "s/.*\"step\":([0-9]+).*\"$2\":([^,]+).*/\1 \2/" |
    awk -v w="$BENCH_WARMUP" '$1 > w && $2 != "null" && $2 > 0 { print $2 }' | sort -g |
    awk '{ a[NR] = $1 } END { if (NR == 0) exit 1; print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# ------------------------------------------------------------------ the timed stages (s1-s5)
# benchmarks first, then CPU vs GPU, head-size-128 bit identity and memory, sanitizers
# (scripts/device-check-stages.sh); the steps (a)-(h) below use what is left of the budget.
# shellcheck source=scripts/device-check-stages.sh
. "$ROOT/scripts/device-check-stages.sh"

# ------------------------------------------------------------------ (a) ops
if ! want a; then
  : # not asked for (DEVICE_CHECK_ONLY)
elif [ "$GPU_OK" = 1 ]; then
  crit "a-ops" 'ops*/*' 90 || true
  crit "a-gpu-vs-cpu" 'cuda/*' 90 || true
else
  record a-ops SKIP "no working GPU backend"
fi

# ------------------------------------------------------------------ (b) training step vs CPU
if ! want b; then
  : # not asked for (DEVICE_CHECK_ONLY)
elif [ "$GPU_OK" = 1 ]; then
  crit "b-model" 'model/*' 90 || true
  crit "b-accum" 'accumulation/*' 90 || true
  crit "b-bf16" 'precision/*' 60 || true
  # fp32: step 1 must agree to 1e-5 (loss) / 1e-4 (grad norm); later steps drift with Adam, 1e-3
  if have_time 60 && small_run cpu cpu 60 && small_run gpu "$DEV" 60; then
    compare_runs b-step-cli cpu gpu 1e-5 1e-3
  else
    record b-step-cli FAIL "a gtrain run failed - see log"
  fi
  # bf16: the GPU against the CPU's bf16 emulation (the same rounding points), 1e-2
  if have_time 60 && small_run cpu-bf16 cpu 90 precision=bf16 && small_run gpu-bf16 "$DEV" 60 precision=bf16; then
    compare_runs b-step-bf16 cpu-bf16 gpu-bf16 1e-2 1e-2
  else
    record b-step-bf16 FAIL "a bf16 gtrain run failed - see log"
  fi
else
  record b-step SKIP "no working GPU backend"
fi

# ------------------------------------------------------------------ (c) recompute / offload bit identity
# same_metrics BASE RUN...: appends to diffs each RUN whose metrics differ from BASE's
if ! want c; then
  : # not asked for (DEVICE_CHECK_ONLY)
elif [ "$GPU_OK" = 1 ]; then
  crit "c-recompute" 'recompute/*' 120 || true
  if have_time 60; then
    ok=1
    small_run r-none "$DEV" 40 gradient_checkpointing=false || ok=0
    small_run r-every1 "$DEV" 40 gradient_checkpointing=true every_n_layers=1 || ok=0
    small_run r-every2 "$DEV" 40 gradient_checkpointing=true every_n_layers=2 || ok=0
    small_run r-bf16-none "$DEV" 40 precision=bf16 gradient_checkpointing=false || ok=0
    small_run r-bf16-every1 "$DEV" 40 precision=bf16 gradient_checkpointing=true every_n_layers=1 || ok=0
    small_run r-bf16-offload "$DEV" 40 precision=bf16 gradient_checkpointing=true every_n_layers=1 offload=true || ok=0
    small_run r-offload "$DEV" 40 gradient_checkpointing=true every_n_layers=1 offload=true || ok=0
    if [ "$ok" = 1 ]; then
      diffs=""
      same_metrics r-none r-every1 r-every2 r-offload
      same_metrics r-bf16-none r-bf16-every1 r-bf16-offload
      if [ -z "$diffs" ]; then
        record c-bitident-cli PASS "losses and grad norms identical: none = every 1 = every 2 = offload; bf16: none = every 1 = offload"
      else
        record c-bitident-cli FAIL "differs from no-recompute (or wrote no metrics):$diffs"
      fi
    else
      record c-bitident-cli FAIL "a recompute run failed - see log"
    fi
  else
    record c-bitident-cli SKIP "out of time budget"
  fi
else
  record c-recompute SKIP "no working GPU backend"
fi

# ------------------------------------------------------------------ (d) planned vs measured memory
if ! want d; then
  : # not asked for (DEVICE_CHECK_ONLY)
elif [ "$GPU_OK" = 1 ]; then
  crit "d-plan" 'plan/*' 60 || true
  # gtrain prints its plan beside what was measured; the "device total" row has both numbers
  for v in r-none r-every1 r-offload r-bf16-none r-bf16-offload; do
    f="$WORK/run-$v.out"
    [ -f "$f" ] || continue
    row="$(grep -a -E '^ *device total' "$f" | head -1 || true)"
    if [ -z "$row" ]; then
      record "d-mem-$v" SKIP "no 'device total' row in gtrain's output (format changed?)"
      continue
    fi
    read -r planned measured <<<"$(echo "$row" | sed -E 's/^ *device total +//' |
      awk '{ if (NF >= 4) print $1 $2, $3 $4; else print $1, $2 }')"
    if [ -n "$measured" ] && [ "$planned" = "$measured" ]; then
      record "d-mem-$v" PASS "planned $planned = measured $measured"
    elif [ -z "$measured" ]; then
      record "d-mem-$v" SKIP "only one number in: $row"
    else
      record "d-mem-$v" FAIL "planned $planned, measured $measured"
    fi
  done
else
  record d-memory SKIP "no working GPU backend"
fi

# ------------------------------------------------------------------ (e) benchmark
# GPT-2 124M, T = 1024, on the byte-level Shakespeare text (token ids < 256 are valid GPT-2 ids;
# the speed does not depend on the data). bf16; fp32 (no TF32) only if the bf16 run fails.
BENCH_STEPS="${BENCH_STEPS:-8}"
BENCH_WARMUP=3
bench_run() { # NAME SECONDS SETS...
  local name="$1" secs="$2"
  shift 2
  local sets=(--set device="$DEV" --set data.train="$ROOT/data/tinyshakespeare.txt" --set data.format=text
              --set data.val= --set gradient_accumulation_steps=1 --set max_steps="$BENCH_STEPS"
              --set logging_steps=1 --set eval_steps=0 --set eval_max_batches=1 --set save_steps=0
              --set warmup_steps=0 --set output_dir="$WORK/run-$name")
  for s in "$@"; do sets+=(--set "$s"); done
  run_to "$WORK/run-$name.out" "$secs" "$GT" --config configs/gpt2-124m.yaml "${sets[@]}"
}
# dense peak FLOP/s by device name and precision; "unknown" rather than a wrong number
peak_flops() { # PRECISION
  local name
  name="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  case "$1:$name" in
    bf16:*H100*|bf16:*H200*) echo 989e12 ;;
    bf16:*A100*) echo 312e12 ;;
    fp32:*H100*SXM*|fp32:*H200*) echo 67e12 ;;
    fp32:*H100*) echo 51e12 ;;
    fp32:*A100*) echo 19.5e12 ;;
    *) echo unknown ;;
  esac
}
# MFU of TOKENS_PER_S at FLOPS_PER_TOKEN against the device's dense peak in PRECISION, or "unknown"
mfu_of() {
  local peak
  peak="$(peak_flops "$3")"
  if [ "$peak" = unknown ]; then echo unknown; else awk -v t="$1" -v f="$2" -v p="$peak" 'BEGIN { printf "%.1f%%", 100 * t * f / p }'; fi
}
if ! want e; then
  : # not asked for (DEVICE_CHECK_ONLY)
elif [ "$GPU_OK" = 1 ] && have_time 60; then
  prec=bf16
  # the largest micro-batch that fits without recompute, up to BENCH_MAX_BATCH rows (auto-fit
  # prefers no recompute, then the largest micro-batch); BENCH_BATCH=N fixes it instead
  if [ -n "${BENCH_BATCH:-}" ]; then
    BSETS=(per_device_train_batch_size="$BENCH_BATCH")
  else
    BSETS=(per_device_train_batch_size=auto train_batch_size="${BENCH_MAX_BATCH:-32}")
  fi
  if ! bench_run bench 150 precision=bf16 "${BSETS[@]}" gradient_checkpointing=false; then
    prec=fp32
    log "bench: bf16 run failed; falling back to fp32"
    have_time 60 && bench_run bench 150 precision=fp32 "${BSETS[@]}" gradient_checkpointing=false || true
  fi
  # the micro-batch the run used, from its "effective batch size = B x W x A" line
  B="$(grep -a -o -E 'effective batch size = [0-9]+' "$WORK/run-bench.out" 2>/dev/null | head -1 | grep -o -E '[0-9]+$' || echo "${BENCH_BATCH:-?}")"
  tps="$(median_of bench tokens_per_sec || true)"
  if [ -n "$tps" ]; then
    # FLOPs per token as llm.c counts them (so the MFU figures compare): 6 N for the matmuls
    # forward + backward, N = all 124,439,808 parameters, + 12 L T C for attention (the PaLM
    # formula, not halved for the causal mask)
    fpt="$(awk 'BEGIN { N = 124439808; L = 12; T = 1024; C = 768; printf "%.0f", 6 * N + 12 * L * T * C }')"
    mfu="$(mfu_of "$tps" "$fpt" "$prec")"
    dev_ms="$(median_of bench device_time_ms || true)"
    record e-bench PASS "GPT-2 124M $prec B=$B T=1024: $(printf '%.0f' "$tps") tok/s, MFU $mfu, step ${dev_ms:-?} ms by CUDA events (llm.c: ~218k tok/s/A100 bf16)"
  else
    record e-bench FAIL "no tokens_per_sec in the benchmark's metrics - see log"
  fi
  for v in "every1 gradient_checkpointing=true every_n_layers=1" \
           "offload gradient_checkpointing=true every_n_layers=1 offload=true"; do
    set -- $v
    name="$1"
    shift
    if have_time 45 && bench_run "bench-$name" 90 precision="$prec" per_device_train_batch_size="$B" "$@"; then
      ms="$(median_of "bench-$name" device_time_ms || true)"
      base="$(median_of bench device_time_ms || true)"
      record "e-$name" PASS "step ${ms:-?} ms (no recompute: ${base:-?} ms)"
    else
      record "e-$name" SKIP "run failed or out of time - see log"
    fi
  done
else
  record e-bench SKIP "no working GPU backend or out of time budget"
fi

# ------------------------------------------------------------------ (g) the Llama family
if ! want g; then
  : # not asked for (DEVICE_CHECK_ONLY)
elif [ "$GPU_OK" = 1 ]; then
  crit "g-llama-model" 'llama_model/*' 120 || true
  export SMALL_CONFIG=configs/llama-shakespeare.yaml
  if ! have_time 60; then
    record g-llama-step SKIP "out of time budget"
  elif small_run l-cpu cpu 60 && small_run l-gpu "$DEV" 60; then
    compare_runs g-llama-step l-cpu l-gpu 1e-5 1e-3
  else
    record g-llama-step FAIL "a Llama gtrain run failed - see log"
  fi
  have_time 60 && bitident_checks g-llama l
  unset SMALL_CONFIG
  # Llama-3.2-1B's shape, random weights (model: the config.json file), bf16, T = 2048
  if have_time 90; then
    lsets=(--set device="$DEV" --set model="$ROOT/tests/fixtures/hf_configs/llama-3.2-1b.json"
           --set data.train="$ROOT/data/tinyshakespeare.txt" --set data.format=text --set data.val= --set data.seq_len=2048
           --set precision=bf16 --set per_device_train_batch_size=auto --set train_batch_size="${LLAMA_BENCH_BATCH:-8}"
           --set max_steps="$BENCH_STEPS" --set logging_steps=1 --set eval_steps=0 --set eval_max_batches=1
           --set save_steps=0 --set warmup_steps=0 --set sample_max_new_tokens=0 --set output_dir="$WORK/run-l-bench")
    if run_to "$WORK/run-l-bench.out" 150 "$GT" --config configs/gpt2-124m.yaml "${lsets[@]}"; then
      tps="$(median_of l-bench tokens_per_sec || true)"
      fpt="$(awk 'BEGIN { N = 1235814400; L = 16; T = 2048; D = 2048; printf "%.0f", 6 * N + 12 * L * T * D }')"
      if [ -n "$tps" ]; then
        mfu="$(mfu_of "$tps" "$fpt" bf16)"
        record g-llama-bench PASS "Llama-3.2-1B shape bf16 T=2048 batch ${LLAMA_BENCH_BATCH:-8}: $(printf '%.0f' "$tps") tok/s, MFU $mfu, step $(median_of l-bench device_time_ms || echo ?) ms"
      else
        record g-llama-bench FAIL "no tokens_per_sec in the Llama benchmark's metrics - see log"
      fi
    else
      record g-llama-bench FAIL "the Llama-3.2-1B benchmark run failed - see log"
    fi
  else
    record g-llama-bench SKIP "out of time budget"
  fi
else
  record g-llama SKIP "no working GPU backend"
fi

# ------------------------------------------------------------------ (h) LoRA and PiSSA
# The small Llama's own random weights as the frozen base (model: its config.json), adapters on all
# seven projections with dropout: the tests against the double reference with finite differences,
# CPU against GPU per step, recompute/offload bit-identity with dropout, planned = measured; then a
# LoRA r 16 benchmark on Llama-3.2-1B's shape (bf16, T = 2048, frozen bf16 base).
if ! want h; then
  : # not asked for (DEVICE_CHECK_ONLY)
elif [ "$GPU_OK" = 1 ]; then
  crit "h-lora-model" 'lora_@(ops|model|train)/*' 150 || true
  export SMALL_CONFIG=configs/llama-shakespeare.yaml
  lora=(lora.r=8 lora.lora_alpha=16 lora.lora_dropout=0.1 lora.target_modules=all-linear)
  if ! have_time 60; then
    record h-lora-step SKIP "out of time budget"
  elif small_run h-cpu cpu 60 "${lora[@]}" && small_run h-gpu "$DEV" 60 "${lora[@]}"; then
    compare_runs h-lora-step h-cpu h-gpu 1e-5 1e-3
  else
    record h-lora-step FAIL "a LoRA gtrain run failed - see log"
  fi
  have_time 60 && bitident_checks h-lora h "${lora[@]}"
  unset SMALL_CONFIG
  if have_time 90; then
    hsets=(--set device="$DEV" --set model="$ROOT/tests/fixtures/hf_configs/llama-3.2-1b.json"
           --set data.train="$ROOT/data/tinyshakespeare.txt" --set data.format=text --set data.val= --set data.seq_len=2048
           --set precision=bf16 --set per_device_train_batch_size=auto --set train_batch_size="${LLAMA_BENCH_BATCH:-8}"
           --set max_steps="$BENCH_STEPS" --set logging_steps=1 --set eval_steps=0 --set eval_max_batches=1
           --set save_steps=0 --set warmup_steps=0 --set sample_max_new_tokens=0 --set output_dir="$WORK/run-h-bench"
           --set lora.r=16 --set lora.lora_alpha=32 --set lora.target_modules=all-linear)
    if run_to "$WORK/run-h-bench.out" 150 "$GT" --config configs/gpt2-124m.yaml "${hsets[@]}"; then
      tps="$(median_of h-bench tokens_per_sec || true)"
      [ -n "$tps" ] && record h-lora-bench PASS "LoRA r 16 all-linear on Llama-3.2-1B's shape, bf16 T=2048 batch ${LLAMA_BENCH_BATCH:-8}: $(printf '%.0f' "$tps") tok/s, step $(median_of h-bench device_time_ms || echo ?) ms (full fine-tuning: g-llama-bench)" ||
        record h-lora-bench FAIL "no tokens_per_sec in the LoRA benchmark's metrics - see log"
    else
      record h-lora-bench FAIL "the LoRA benchmark run failed - see log"
    fi
  else
    record h-lora-bench SKIP "out of time budget"
  fi
else
  record h-lora SKIP "no working GPU backend"
fi

# ------------------------------------------------------------------ (f) data parallel over NCCL
# Same model, precision and per-device batch as (e); tokens_per_sec in rank 0's metrics.jsonl counts
# the global batch (per-device batch x world x T), so efficiency = tps(N) / (N x tps(1)).
NGPU="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
NGPU="${NGPU:-0}"
dp_run() { # NAME N SECONDS SETS...
  local name="$1" n="$2" secs="$3"
  shift 3
  local sets=(--set device="$DEV" --set data.train="$ROOT/data/tinyshakespeare.txt" --set data.format=text
              --set data.val= --set gradient_accumulation_steps=1 --set max_steps="$BENCH_STEPS"
              --set logging_steps=1 --set eval_steps=0 --set eval_max_batches=1 --set save_steps=0
              --set warmup_steps=0 --set output_dir="$WORK/run-$name" --set dist_timeout=120)
  for s in "$@"; do sets+=(--set "$s"); done
  if command -v mpirun >/dev/null && "$GT" --version | grep -q mpi; then
    run_to "$WORK/run-$name.out" "$secs" mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" \
      -x NCCL_DEBUG=WARN -x LD_LIBRARY_PATH "$GT" --config configs/gpt2-124m.yaml "${sets[@]}"
  else # srun-style: ranks from the environment, the NCCL id through a file
    log "\$ $n x RANK=r WORLD_SIZE=$n LOCAL_RANK=r $GT ... dist_init_file=$WORK/nccl.id (timeout ${secs}s)"
    local pids=() r rc=0
    for ((r = 0; r < n; r++)); do
      RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r NCCL_DEBUG=WARN timeout --kill-after=5 "$secs" "$GT" \
        --config configs/gpt2-124m.yaml "${sets[@]}" --set dist_init_file="$WORK/nccl.id" \
        >"$WORK/run-$name.$r.out" 2>&1 &
      pids+=($!)
    done
    for ((r = 0; r < n; r++)); do wait "${pids[$r]}" || rc=$?; cat "$WORK/run-$name.$r.out" >>"$LOG"; done
    log "(exit $rc)"
    return $rc
  fi
}
if ! want f; then
  : # not asked for (DEVICE_CHECK_ONLY)
elif [ "$GPU_OK" != 1 ]; then
  record f-nccl SKIP "no working GPU backend"
elif [ "$NGPU" -lt 2 ]; then
  record f-nccl SKIP "$NGPU GPU on this machine: data parallel over NCCL needs 2 or more"
elif ! "$GT" --version | grep -q nccl; then
  record f-nccl FAIL "$NGPU GPUs but gtrain was built without NCCL ($("$GT" --version)); is nccl.h installed?"
elif [ -z "${tps:-}" ]; then
  record f-nccl SKIP "no one-GPU tokens/s from (e) to compare with"
elif ! have_time 90; then
  record f-nccl SKIP "out of time budget"
else
  N=$((NGPU > 8 ? 8 : NGPU))
  if dp_run dp "$N" 150 precision="$prec" per_device_train_batch_size="$B" gradient_checkpointing=false; then
    tpsn="$(median_of dp tokens_per_sec || true)"
    if [ -n "$tpsn" ]; then
      eff="$(awk -v a="$tpsn" -v b="$tps" -v n="$N" 'BEGIN { printf "%.1f%%", 100 * a / (n * b) }')"
      record f-nccl PASS "$N GPUs: $(printf '%.0f' "$tpsn") tok/s vs 1 GPU $(printf '%.0f' "$tps"): scaling efficiency $eff"
    else
      record f-nccl FAIL "$N ranks ran but rank 0 wrote no tokens_per_sec - see log"
    fi
  else
    record f-nccl FAIL "$N ranks over NCCL failed or timed out - see log"
  fi
fi

# ------------------------------------------------------------------ table
fails=0
for r in "${RESULTS[@]}"; do
  IFS='|' read -r _ s _ <<<"$r"
  [ "$s" = FAIL ] && fails=$((fails + 1))
done
{
  echo
  echo "device-check summary ($(elapsed)s after the build; full log: $LOG)"
  printf '%-22s %-5s %s\n' CHECK STATUS DETAIL
  for r in "${RESULTS[@]}"; do
    IFS='|' read -r n s d <<<"$r"
    printf '%-22s %-5s %s\n' "$n" "$s" "$d"
  done
  echo "$fails check(s) failed"
} | tee -a "$LOG"
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  cp "$LOG" "$OUT/device-check.log"
  tail -n $((${#RESULTS[@]} + 4)) "$LOG" >"$OUT/device-check-summary.txt"
  # every run's metrics and output, in one file (the tool brings back at most 8)
  (cd "$WORK" && find . \( -name '*.out' -o -name 'metrics.jsonl' -o -name '*.json' \) -size -4M |
    tar -czf "$OUT/device-check-runs.tar.gz" -T -) 2>/dev/null || true
fi
[ "$fails" = 0 ]
