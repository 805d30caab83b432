# scripts/device-check-stages.sh - the timed stages of scripts/device-check.sh that run first
# (sourced by it after the build; uses its helpers: record, run_to, have_time, median_of, want).
# Each stage has its own time budget (seconds, STAGE_*); a stage that does not fit what is left of
# DEVICE_CHECK_BUDGET is recorded as SKIP "out of time budget", never dropped silently.
#   s1 bench     GPT-2 124M bf16 (B 16, T 1024, no recompute); a Mistral-dimension model (hidden
#                4096, 32 heads, 8 kv heads, head size 128, ffn 14336, vocab 32000) with
#                MISTRAL_LAYERS layers, bf16, B 4, T 512, full and LoRA r 16; the attention alone
#                (bench_attention) at head size 128, T 1024 and 4096. Each printed beside the cost
#                model's prediction for this GPU (GPU_MODEL_JSON, written by make gpu-model). The row
#                kernels alone (bench_rows: norms, SwiGLU, cross-entropy at those runs' shapes): us and
#                the fraction of the memory bandwidth each reaches.
#   s2 torch     the same-machine PyTorch baseline: transformers + PEFT on the same shapes
#                (scripts/bench_torch_gpu.py).
#   s3 step      one small config on the CPU and on the GPU: per-step loss and grad norm agree.
#   s4 tc128     recompute and offload bit-identity on the tensor-core attention at head size 128,
#                T 1024 (bf16), and the plan's device total beside the measured one and the
#                driver's view (cudaMemGetInfo) after the steps.
#   s5 sanitize  compute-sanitizer memcheck and racecheck on one small step.
#   s6 kernels   Nsight Compute's time of every kernel of step 2 of s1's GPT-2 and Mistral LoRA runs
#                (GTRAIN_PROFILE_STEP=2, ncu --profile-from-start off), summed per kernel function
#                beside the cost model's figure for it (scripts/ncu_summary.py); the tables go to the
#                log, the totals and the kernel furthest from the model to the summary. Runs after s2.
# --dry-run (DRY=1): the same commands on the CPU backend with tiny models and sizes (tests the
# script's logic here; the numbers mean nothing).

STAGE_BENCH="${STAGE_BENCH:-150}" STAGE_TORCH="${STAGE_TORCH:-80}" STAGE_STEP="${STAGE_STEP:-40}"
STAGE_TC128="${STAGE_TC128:-60}" STAGE_SANITIZE="${STAGE_SANITIZE:-50}" STAGE_KERNELS="${STAGE_KERNELS:-60}"
GPU_MODEL_JSON="${GPU_MODEL_JSON:-$ROOT/bench/gpu-model-predictions.json}"
MISTRAL_LAYERS="${MISTRAL_LAYERS:-2}"
GPU_NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)"

# the cost model's predicted step ms for CASE on this GPU, or "none"
model_gpu() {
  case "$GPU_NAME" in *H200*) echo "H200" ;; *H100*) echo "H100 SXM" ;; *4090*) echo "RTX 4090" ;; *) echo "" ;; esac
}
# this GPU's memory bandwidth in GB/s as the cost model has it (scripts/gpu_model.py's GPUS), or 0
model_gpu_bandwidth_gbs() {
  python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import gpu_model as g; print(int(round({x[0]: x[3] for x in g.GPUS}.get(sys.argv[2], 0) / 1e9)))' \
    "$ROOT/scripts" "$(model_gpu)" 2>/dev/null || echo 0
}
predicted_ms() {
  local gpu
  gpu="$(model_gpu)"
  if [ -z "$gpu" ] || [ ! -f "$GPU_MODEL_JSON" ]; then echo none; return; fi
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["step_ms"]; v=d.get(sys.argv[2],{}).get(sys.argv[3]); print("%.1f" % v if v else "none")' \
    "$GPU_MODEL_JSON" "$1" "$gpu" 2>/dev/null || echo none
}

# a model json in $WORK: BASE with KEY=VALUE overrides (numbers)
model_json() { # OUT BASE KEY=VALUE...
  local out="$1" base="$2"
  shift 2
  python3 - "$out" "$base" "$@" <<'PY'
import json, sys
m = json.load(open(sys.argv[2]))
for kv in sys.argv[3:]:
    k, v = kv.split("=", 1)
    m[k] = int(v)
json.dump(m, open(sys.argv[1], "w"))
PY
}

if [ "${DRY:-0}" = 1 ]; then
  GPT2_JSON="$ROOT/tests/fixtures/hf_configs/tiny-gpt2.json" GPT2_B=2 GPT2_T=64
  model_json "$WORK/mistral.json" "$ROOT/tests/fixtures/hf_configs/tiny-mistral.json" hidden_size=256 num_attention_heads=2 num_key_value_heads=1
  MIS_B=1 MIS_T=64 ATT_SIZES="1:128 1:256" ATT_HEADS="2 1" BSTEPS=3
  model_json "$WORK/tc128.json" "$ROOT/tests/fixtures/hf_configs/tiny-mistral.json" hidden_size=256 num_attention_heads=2 num_key_value_heads=1 sliding_window=4096 max_position_embeddings=4096
  TC_T=64
else
  GPT2_JSON="$ROOT/configs/gpt2-124m.json" GPT2_B=16 GPT2_T=1024
  model_json "$WORK/mistral.json" "$ROOT/configs/mistral-7b-v0.1.json" num_hidden_layers="$MISTRAL_LAYERS"
  MIS_B=4 MIS_T=512 ATT_SIZES="4:1024 1:4096" ATT_HEADS="32 8" BSTEPS=6
  model_json "$WORK/tc128.json" "$ROOT/tests/fixtures/hf_configs/tiny-mistral.json" hidden_size=512 num_attention_heads=4 num_key_value_heads=2 intermediate_size=1024 sliding_window=4096 max_position_embeddings=4096
  TC_T=1024
fi
BENCH_WARMUP=$((BSTEPS / 2))

# a benchmark run: NAME SECONDS CONFIG SETS...; tokens/s and step ms from its metrics
sbench() {
  local name="$1" secs="$2" cfg="$3"
  shift 3
  local sets=(--set device="$DEV" --set data.train="$ROOT/data/tinyshakespeare.txt" --set data.format=text
              --set data.val= --set gradient_accumulation_steps=1 --set max_steps="$BSTEPS"
              --set logging_steps=1 --set eval_steps=0 --set eval_max_batches=1 --set save_steps=0
              --set warmup_steps=0 --set memory_limit=auto --set save_dtype=bf16 --set output_dir="$WORK/run-$name")
  for s in "$@"; do sets+=(--set "$s"); done
  run_to "$WORK/run-$name.out" "$secs" "${SBENCH_PREFIX[@]}" "$GT" --config "$cfg" "${sets[@]}"
}
SBENCH_PREFIX=() # a command sbench's runs go through (s6: ncu)
# record NAME from a benchmark run with the prediction CASE beside it
bench_record() { # NAME RUN CASE WHAT
  local tps ms pred
  tps="$(median_of "$2" tokens_per_sec || true)"
  ms="$(median_of "$2" device_time_ms || true)"
  pred="$(predicted_ms "$3")"
  if [ -n "$tps" ]; then
    record "$1" PASS "$4: $(printf '%.0f' "$tps") tok/s, step ${ms:-?} ms measured | predicted ${pred} ms (gpu-model)"
  else
    record "$1" FAIL "$4: no tokens_per_sec in its metrics - see log"
  fi
}

stage_start() { STAGE_T0=$(date +%s); }
stage_left() { echo $(($1 - ($(date +%s) - STAGE_T0))); }
# a run inside a stage: at most what is left of the stage's budget (and of the whole budget)
stage_secs() { # STAGE-BUDGET WANT
  local s l
  s="$(stage_left "$1")"
  l="$(left)"
  [ "$l" -lt "$s" ] && s="$l"
  [ "$2" -lt "$s" ] && s="$2"
  echo "$s"
}

# ------------------------------------------------------------------ s1 benchmarks
# NAME|CASE (the cost model's)|CONFIG|WHAT|SETS; s6 profiles the first and the last
S1_RUNS=("s1-gpt2|gpt2|$ROOT/configs/gpt2-124m.yaml|GPT-2 124M bf16 B=$GPT2_B T=$GPT2_T|model=$GPT2_JSON precision=bf16 per_device_train_batch_size=$GPT2_B data.seq_len=$GPT2_T gradient_checkpointing=false"
         "s1-mistral-full|mistral-full|$ROOT/configs/gpt2-124m.yaml|Mistral dims L=$MISTRAL_LAYERS full bf16 B=$MIS_B T=$MIS_T|model=$WORK/mistral.json precision=bf16 per_device_train_batch_size=$MIS_B data.seq_len=$MIS_T gradient_checkpointing=false"
         "s1-mistral-lora|mistral-dc|$ROOT/configs/mistral-7b-lora-r16.yaml|Mistral dims L=$MISTRAL_LAYERS LoRA r16 bf16 B=$MIS_B T=$MIS_T|model=$WORK/mistral.json per_device_train_batch_size=$MIS_B train_batch_size=$MIS_B data.seq_len=$MIS_T gradient_checkpointing=false lora.lora_dropout=0")
if want s1 && [ "$GPU_OK" = 1 ]; then
  stage_start
  for b in "${S1_RUNS[@]}"; do
    IFS='|' read -r name pcase cfg what sets <<<"$b"
    secs="$(stage_secs "$STAGE_BENCH" 60)"
    if [ "$secs" -lt 15 ]; then record "$name" SKIP "out of time budget ($what)"; continue; fi
    # shellcheck disable=SC2086
    if sbench "$name" "$secs" "$cfg" $sets; then bench_record "$name" "$name" "$pcase" "$what"
    else record "$name" FAIL "$what: run failed or passed its ${secs}s - see log"; fi
  done
  read -r nh nkv <<<"$ATT_HEADS"
  for bt in $ATT_SIZES; do
    ab="${bt%%:*}" at="${bt##*:}"
    secs="$(stage_secs "$STAGE_BENCH" 30)"
    if [ ! -x "$ROOT/$BUILD/bench_attention" ]; then record "s1-attn-T$at" SKIP "$BUILD/bench_attention not built"; continue; fi
    if [ "$secs" -lt 5 ]; then record "s1-attn-T$at" SKIP "out of time budget"; continue; fi
    if run_to "$WORK/attn-$at.out" "$secs" "$ROOT/$BUILD/bench_attention" "$DEV" "$ab" "$at" "$nh" "$nkv" 128 5 bf16; then
      record "s1-attn-T$at" PASS "$(tail -1 "$WORK/attn-$at.out") (same FLOP count as the FlashAttention-2 paper's fwd+bwd figures, Dao 2023)"
    else
      record "s1-attn-T$at" FAIL "bench_attention failed - see log"
    fi
  done
  # the row kernels alone (norms, SwiGLU, cross-entropy) at the runs' shapes: us per call, GB/s and the
  # fraction of the GPU's memory bandwidth (bench/bench_rows.c)
  peak="$(model_gpu_bandwidth_gbs)"
  secs="$(stage_secs "$STAGE_BENCH" 20)"
  if [ ! -x "$ROOT/$BUILD/bench_rows" ]; then record s1-rows SKIP "$BUILD/bench_rows not built"
  elif [ "$secs" -lt 5 ]; then record s1-rows SKIP "out of time budget"
  elif run_to "$WORK/rows.out" "$secs" "$ROOT/$BUILD/bench_rows" "$DEV" "$([ "${DRY:-0}" = 1 ] && echo 1 || echo 10)" bf16 "$peak"; then
    record s1-rows PASS "$(grep '^rows' "$WORK/rows.out" | sed -E 's/^rows [a-z]+ //; s/, [0-9.]+ MB moved//' | paste -sd';' -)"
  else
    record s1-rows FAIL "bench_rows failed - see log"
  fi
elif want s1; then
  record s1-bench SKIP "no working GPU backend"
fi

# ------------------------------------------------------------------ s2 PyTorch + PEFT baseline
if want s2; then
  stage_start
  secs="$(stage_secs "$STAGE_TORCH" "$STAGE_TORCH")"
  PY="${DEVICE_CHECK_PYTHON:-python3}"
  if ! env -u LD_LIBRARY_PATH "$PY" -c 'import torch, transformers, peft' >/dev/null 2>&1; then
    record s2-torch SKIP "torch/transformers/peft not importable by $PY"
  elif [ "$secs" -lt 20 ]; then
    record s2-torch SKIP "out of time budget"
  else
    tdev=cuda
    [ "$DEV" = cpu ] && tdev=cpu
    rc=0
    run_to "$WORK/torch.out" "$secs" env -u LD_LIBRARY_PATH "$PY" "$ROOT/scripts/bench_torch_gpu.py" --device "$tdev" --steps "$BSTEPS" \
      --gpt2 "$GPT2_JSON:$GPT2_B:$GPT2_T" --mistral "$WORK/mistral.json:$MIS_B:$MIS_T" || rc=$?
    while IFS= read -r line; do record "s2-torch-${line%%:*}" PASS "${line#*: }"; done < <(grep -a '^[a-z0-9-]*: torch' "$WORK/torch.out")
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      record s2-torch SKIP "passed its ${secs}s budget: the models without an s2-torch line (gpt2, mistral-full, mistral-lora) were not measured"
    elif [ "$rc" != 0 ]; then
      record s2-torch FAIL "the PyTorch baseline failed (exit $rc) - see log"
    fi
  fi
fi

# ------------------------------------------------------------------ s6 per-kernel times (Nsight Compute)
# (after s2, before the correctness stages: it is a benchmark)
ncu_record() { # NAME NCU-OUTPUT CASE [GPU]: the summary table to the log, its last line to the table
  local sum="$WORK/$1.summary" gpu="${4:-$(model_gpu)}"
  if python3 "$ROOT/scripts/ncu_summary.py" "$2" --json "$GPU_MODEL_JSON" --case "$3" --gpu "$gpu" >"$sum" 2>&1; then
    cat "$sum" >>"$LOG"
    record "$1" PASS "$(tail -1 "$sum" | sed 's/^ncu-summary: //')"
  else
    cat "$sum" >>"$LOG"
    record "$1" FAIL "$(tail -1 "$sum") - see log"
  fi
}
if want s6 && [ "${DRY:-0}" = 1 ]; then
  # no ncu here: the summary of the H200's stored output (step 1 of GPT-2, its first 81 kernels)
  ncu_record s6-kernels-gpt2 "$ROOT/tests/fixtures/ncu/gpt2-h200-step1-head.csv" gpt2 H200
elif want s6 && [ "$GPU_OK" = 1 ]; then
  if ! command -v ncu >/dev/null; then
    record s6-kernels SKIP "ncu (Nsight Compute) not on PATH"
  else
    for b in "${S1_RUNS[0]}" "${S1_RUNS[2]}"; do
      IFS='|' read -r name pcase cfg what sets <<<"$b"
      name="s6-kernels-${name#s1-}"
      stage_start
      secs="$(stage_secs "$STAGE_KERNELS" "$((STAGE_KERNELS / 2))")"
      if [ "$secs" -lt 15 ]; then record "$name" SKIP "out of time budget ($what)"; continue; fi
      SBENCH_PREFIX=(env GTRAIN_PROFILE_STEP=2 ncu --clock-control none --profile-from-start off
                     --metrics gpu__time_duration.sum --csv)
      # shellcheck disable=SC2086
      if sbench "$name" "$secs" "$cfg" $sets max_steps=2; then ncu_record "$name" "$WORK/run-$name.out" "$pcase"
      else record "$name" FAIL "$what under ncu: run failed or passed its ${secs}s - see log"; fi
      SBENCH_PREFIX=()
    done
  fi
fi

# ------------------------------------------------------------------ s3 CPU vs GPU step
if want s3 && [ "$GPU_OK" = 1 ]; then
  stage_start
  secs="$(stage_secs "$STAGE_STEP" 30)"
  if [ "$secs" -lt 10 ]; then
    record s3-step SKIP "out of time budget"
  elif SMALL_STEPS=2 small_run s3-cpu cpu "$secs" && SMALL_STEPS=2 small_run s3-gpu "$DEV" "$(stage_secs "$STAGE_STEP" 30)"; then
    compare_runs s3-step s3-cpu s3-gpu 1e-5 1e-3
  else
    record s3-step FAIL "a gtrain run failed or passed its budget - see log"
  fi
fi

# ------------------------------------------------------------------ s4 tensor-core attention hd 128
if want s4 && [ "$GPU_OK" = 1 ]; then
  stage_start
  ok=1
  for v in "none gradient_checkpointing=false" "every1 gradient_checkpointing=true gradient_checkpointing_kwargs.every_n_layers=1" \
           "offload gradient_checkpointing=true gradient_checkpointing_kwargs.every_n_layers=1 gradient_checkpointing_kwargs.offload=true"; do
    set -- $v
    n="$1"
    shift
    secs="$(stage_secs "$STAGE_TC128" 25)"
    if [ "$secs" -lt 5 ]; then ok=2; break; fi
    SMALL_STEPS=2 SMALL_CONFIG=configs/llama-shakespeare.yaml small_run "s4-$n" "$DEV" "$secs" model="$WORK/tc128.json" \
      precision=bf16 data.seq_len="$TC_T" per_device_train_batch_size=1 train_batch_size=1 "$@" || ok=0
  done
  if [ "$ok" = 2 ]; then
    record s4-tc128 SKIP "out of time budget"
  elif [ "$ok" = 0 ]; then
    record s4-tc128 FAIL "a head-size-128 run failed - see log"
  else
    diffs=""
    same_metrics s4-none s4-every1 s4-offload
    if [ -z "$diffs" ]; then
      record s4-tc128 PASS "hd 128 T=$TC_T bf16: losses and grad norms identical: none = every 1 = offload"
    else
      record s4-tc128 FAIL "hd 128 T=$TC_T: differs from no-recompute:$diffs"
    fi
    row="$(grep -a -E '^ *device total' "$WORK/run-s4-offload.out" | head -1 || true)"
    drv="$(grep -a "driver's view" "$WORK/run-s4-offload.out" | tail -1 | sed -E 's/^ *//' || true)"
    read -r planned measured <<<"$(echo "$row" | sed -E 's/^ *device total +//' |
      awk '{ if (NF >= 4) print $1 $2, $3 $4; else print $1, $2 }')"
    mst=SKIP
    [ -n "$measured" ] && mst=FAIL
    [ -n "$measured" ] && [ "$planned" = "$measured" ] && mst=PASS
    record s4-memory "$mst" "device total planned ${planned:-?} measured ${measured:-?}; ${drv:-no driver view line (CPU)}"
  fi
fi

# ------------------------------------------------------------------ s5 compute-sanitizer
if want s5 && [ "$GPU_OK" = 1 ]; then
  if ! command -v compute-sanitizer >/dev/null; then
    record s5-sanitize SKIP "compute-sanitizer not on PATH"
  else
    for tool in memcheck racecheck; do
      stage_start
      secs="$(stage_secs "$STAGE_SANITIZE" "$((STAGE_SANITIZE / 2))")"
      if [ "$secs" -lt 10 ]; then record "s5-$tool" SKIP "out of time budget"; continue; fi
      if run_to "$WORK/san-$tool.out" "$secs" compute-sanitizer --tool "$tool" --error-exitcode 9 "$GT" \
          --config configs/shakespeare-char.yaml --set device="$DEV" --set max_steps=1 --set eval_steps=0 \
          --set eval_max_batches=1 --set save_steps=0 --set precision=bf16 --set sample_max_new_tokens=0 --set data.val= \
          --set output_dir="$WORK/run-san-$tool"; then
        record "s5-$tool" PASS "$(grep -a 'ERROR SUMMARY' "$WORK/san-$tool.out" | tail -1)"
      else
        record "s5-$tool" FAIL "$(grep -a 'ERROR SUMMARY' "$WORK/san-$tool.out" | tail -1 || echo 'failed or passed its budget') - see log"
      fi
    done
  fi
fi
