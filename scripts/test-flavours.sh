#!/usr/bin/env bash
# test-flavours.sh - which tests of the Criterion suite each flavour of scripts/test.sh runs.
# Sourced by scripts/test.sh; run alone it prints the two filters and checks the lists against
# the suites the test binary has (scripts/test-flavours.sh [build/test_gtrain]);
# scripts/test-flavours.sh --check-usage USAGE_LOG fails when a suite left out of the simulator
# ran a kernel in a whole-suite simulator run (make test-cudasim does this check).
#
# The plain flavour (make test) runs every test. The ASan + UBSan flavour and the CUDA-simulator
# flavour run every test except those listed below (an entry is a SUITE or a SUITE/TEST glob), as
# a Criterion filter "!(@(suite/*|suite/test*|...))": a suite or test added later runs in every
# flavour until someone shows a flavour adds nothing for it.
# make test, make test-asan and make test-cudasim run alone still run the whole suite; only
# scripts/test.sh passes these filters (TEST_ARGS / CUDASIM_FILTER).

# Left out of the simulator flavour: suites (and tests) that open no backend, neither in the test
# process (test_backend_open) nor through a gtrain that trains, evaluates or samples. On the
# simulator these run exactly the host code the plain flavour already ran (the simulator replaces
# only cuda/), so they add nothing there; most of their time is the Python references (trl,
# transformers, bitsandbytes): in a simulator run of the suites a..g (205 tests, on a loaded
# machine) they took 1026 s of the 2641 s of test time; in the plain flavour 2227 s of 4136 s.
# Checked, not assumed: each process that launches a kernel on the simulator names
# its test in GTCSIM_USAGE_LOG, and a whole-suite run (make test-cudasim) fails when a test listed
# here is in it (check_sim_usage below); that check moved data_formats' one training test back.
CUDASIM_LEAVE_OUT=(
  bnb_weights         # bitsandbytes' 4-bit state read and merged on the host (gtrain merge)
  bounded             # tokenizer/config/data readers in bounded time; bad input refused before a backend
  chat_template       # the Jinja subset against jinja2/transformers/trl
  config              # config parsing and checking
  config_source       # config key errors
  # data rendering and masks against trl and transformers; data_formats' one test that trains
  # (trainer_reads_a_json_array_through_data_columns) runs there
  'data_formats/*_match_trl*'
  'data_formats/render_is_transformers_chat_text'
  'data_formats/bad_input_is_one_line_naming_file_and_row'
  'data_formats/json_array_*'
  data_shards         # token shard files
  dist                # rank discovery from the environment (src/run/dist.c, in process)
  dist_mpi            # build/dist_probe's collectives over MPI (no CUDA in the probe)
  hf_index            # safetensors index reading
  # the Hugging Face directory writer; its one test that trains (save_dtype_bf16_final_weights_only)
  # runs there
  'hf_writer/parse_size_as_hf'
  'hf_writer/split_follows_huggingface_hub'
  'hf_writer/plan_rejects_bad_tensors'
  'hf_writer/sharded_round_trip'
  'hf_writer/one_shard_is_model_safetensors_without_index'
  'hf_writer/index_is_what_transformers_writes'
  'hf_writer/config_keys'
  'hf_writer/a_new_save_removes_what_contradicts_it'
  'hf_writer/a_failing_fill_leaves_nothing'
  'hf_writer/file_size_limit_leaves_the_previous_save'
  'hf_writer/python_reads_what_we_wrote'
  metrics             # metrics.jsonl records and the console line
  parquet             # the Parquet reader
  peft_config         # PEFT adapter_config.json
  peft_files          # PEFT adapter files
  report              # gtrain report (reads a finished run's files)
  safetensors         # the safetensors reader
  scorers             # GSM8K/MATH answer scorers
  tboard              # TensorBoard event files
  tokenize_cmd        # gtrain tokenize
  tokenizer_hf        # the tokenizer against Hugging Face tokenizers
  tokenizer_hf_variants
  tokenizer_offsets
)

# Left out of the ASan + UBSan flavour: tests whose C code runs under the sanitizers in other tests
# already, and whose time is the Python reference (the same in every flavour). Measured in the
# plain flavour (make test, TAP times on a loaded machine): data_formats' qwen3 and llama2 rows
# against trl took 222 s and 102 s, their assistant masks 71 s and 31 s, the rendering against
# transformers 60 s, of the suite's 4136 s of test time. Under ASan data_formats keeps the same
# tests for llama3.1 (rows and masks: gtrain tokenize --data through the reader, template,
# tokenizer and masks), its JSON-array and bad-input tests and the trainer test; the qwen3 and
# llama2 tokenizers and templates run under ASan in tokenizer_hf, tokenizer_offsets,
# tokenizer_hf_variants and chat_template (real_templates_render_as_transformers,
# assistant_spans_match_trl: the same three templates), and fuzz_chat_template,
# fuzz_tokenizer_encode and fuzz_jsonl fuzz those readers with ASan + UBSan.
ASAN_LEAVE_OUT=(
  'data_formats/qwen3_*'
  'data_formats/llama2_*'
  'data_formats/render_is_transformers_chat_text'
)

# the Criterion filter that runs every test but the given ones: a SUITE (all its tests) or a
# SUITE/TEST glob (everything runs when none is given)
leave_out_filter() {
  if [ $# -eq 0 ]; then echo '*/*'; return; fi
  local e pats=()
  for e in "$@"; do
    if [[ "$e" == */* ]]; then pats+=("$e"); else pats+=("$e/*"); fi
  done
  local IFS='|'
  echo "!(@(${pats[*]}))"
}

# check_leave_out TEST_BINARY ENTRY...: fails naming a listed suite the binary does not have
check_leave_out() {
  local bin="$1" e have
  shift
  have="$("$bin" --list 2>/dev/null | sed -nE 's/^([A-Za-z0-9_]+): [0-9]+ tests?$/\1/p')" || return 1
  for e in "$@"; do
    grep -qx -- "${e%%/*}" <<<"$have" || { echo "test-flavours.sh: suite ${e%%/*}: listed but not in $bin (renamed or removed?)"; return 1; }
  done
}

# check_sim_usage USAGE_LOG: fails naming each test of a suite left out of the simulator flavour
# that launched a kernel in a whole-suite simulator run (scripts/test-cudasim.sh runs this after
# one): such a suite is no longer one "that opens no backend" and must come off the list
check_sim_usage() {
  local usage="$1" e suite test bad=0 hits
  [ -r "$usage" ] || return 0
  for e in "${CUDASIM_LEAVE_OUT[@]}"; do
    suite="${e%%/*}" test="*"
    [[ "$e" == */* ]] && test="${e#*/}"
    hits="$(while IFS= read -r line; do
              # shellcheck disable=SC2053
              if [[ "${line%%::*}" == "$suite" && "${line#*::}" == $test ]]; then echo "$line"; fi
            done <"$usage" | sort -u | tr '\n' ' ')"
    if [ -n "$hits" ]; then
      echo "test-flavours.sh: $e is left out of the simulator flavour (CUDASIM_LEAVE_OUT, scripts/test-flavours.sh) but ran kernels there: $hits"
      bad=1
    fi
  done
  return $bad
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  cd "$(dirname "$0")/.."
  if [ "${1:-}" = --check-usage ]; then
    check_sim_usage "$2"
    exit
  fi
  bin="${1:-build/test_gtrain}"
  check_leave_out "$bin" "${CUDASIM_LEAVE_OUT[@]}" ${ASAN_LEAVE_OUT[@]+"${ASAN_LEAVE_OUT[@]}"}
  echo "simulator: $(leave_out_filter "${CUDASIM_LEAVE_OUT[@]}")"
  echo "asan:      $(leave_out_filter ${ASAN_LEAVE_OUT[@]+"${ASAN_LEAVE_OUT[@]}"})"
fi
