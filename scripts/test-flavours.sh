#!/usr/bin/env bash
# test-flavours.sh - which tests of the Criterion suite each flavour of scripts/test.sh runs.
# Sourced by scripts/test.sh; run alone it checks the lists against the tests the test binary has
# and counts them (scripts/test-flavours.sh [build/test_gtrain]);
# scripts/test-flavours.sh --check-usage USAGE_LOG fails when a suite left out of the simulator
# ran a kernel in a whole-suite simulator run (make test-cudasim does this check).
#
# The plain flavour (make test) runs every test. The ASan + UBSan flavour and the CUDA-simulator
# flavour run every test except those listed below (an entry is a SUITE or a SUITE/TEST glob; the
# test binary disables them, GTRAIN_TEST_LEAVE_OUT and tests/test_main.c): a suite or test added
# later runs in every flavour until someone shows a flavour adds nothing for it. Two kinds of list
# per flavour: *_LEAVE_OUT, each entry with why (what it tests is not what the flavour checks), and
# *_COVERED, measured (scripts/flavour-coverage.sh): slow tests each of whose lines of the code the
# flavour checks also runs in the tests the flavour keeps.
# make test, make test-asan and make test-cudasim run alone still run the whole suite; only
# scripts/test.sh leaves these out.

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

# Left out of the simulator flavour, measured as ASAN_COVERED is (scripts/flavour-coverage.sh
# cudasim 2): slow tests each of whose lines of the CUDA backend (cuda/, not the simulator) and of the
# host code that drives it (src/backend, src/model, the trainer, eval, generation, checkpoints, data
# parallel, the weight loaders and writers: flavour-coverage.sh's code=) also run on the simulator in
# the tests the flavour keeps. Never among them: the suites whose assertions are the
# CUDA backend's own results (cuda, cuda_gemm, the op suites, mma_ptx, nccl, host_waits, plan,
# storage_plan, gen_plan, recompute, every planned_equals_measured test): what a line computes is
# checked there, not only that it runs. Most of their time is training steps on the simulator that
# other tests already take through the same code (resume, signals, run directories, generation
# against transformers: one test of each kind stays). Measured 2026-12-04 on the CI run's simulator
# TAP: 59 of 76 candidates, 450 s of its 912 s of test time; again 2026-12-04 (stop 40) on stop 39's
# CI TAP: 15 more of the 29 new candidates, 72 s of test time (the last 15 entries).
CUDASIM_COVERED=(
  'hf_layout/saved_weights_give_the_same_loss_in_transformers_gpt2lmheadmodel'  # 46.5 s
  'reliability/kill9_at_random_moments_then_resume_is_bit_exact'  # 33.7 s
  'gen_sampling/fixed_seed_is_independent_of_batch_slots_and_neighbours'  # 24.1 s
  'output_dir/the_demo_interrupted_by_sigint_resumes_to_the_unbroken_weights'  # 22.0 s
  'safety/sigterm_while_loading_exits_0_and_resumes_exactly'  # 18.8 s
  'e2e/the_loss_falls_on_the_demo_model'  # 18.2 s
  'generate/lora_unmerged_and_merged_greedy_equal_peft'  # 14.8 s
  'safety/two_runs_started_at_once_one_wins'  # 14.5 s
  'e2e/micro_batch_8x1_and_2x4_log_the_same_losses'  # 14.1 s
  'output_dir/auto_resumes_the_same_run_and_names_what_differs_otherwise'  # 13.9 s
  'generate/bf16_llama_greedy_equals_transformers_bf16_up_to_near_ties'  # 12.4 s
  'reliability/bf16_resume_is_bit_exact'  # 12.2 s
  'lora_runs/two_ranks_equal_one_rank_with_dropout'  # 10.2 s
  'silent/the_saved_config_json_is_the_one_read_at_start'  # 9.9 s
  'hf_trainer/accumulation_recompute_and_steps_loss_match_trainer'  # 8.8 s
  'generate/nf4_bnb_base_lora_greedy_equals_transformers'  # 8.6 s
  'reliability/llama_sharded_resume_is_bit_exact'  # 8.0 s
  'lora_runs/resume_with_dropout_into_another_output_dir_is_bit_exact'  # 7.7 s
  'eval_cli/jsonl_json_and_parquet_prompts_give_the_same_results'  # 7.7 s
  'lora_runs/two_ranks_equal_one_rank_with_the_same_effective_batch'  # 7.2 s
  'lora_runs/resume_with_accumulation_and_gradient_checkpointing_is_bit_exact'  # 6.7 s
  'dist_e2e/killed_rank_ends_the_job'  # 6.7 s
  'qpissa/quantization_error_below_qlora_on_decaying_spectra'  # 6.2 s
  'generate/eos_rows_leave_early_equal_transformers'  # 5.5 s
  'generate/mistral_window_16_greedy_equals_transformers'  # 5.3 s
  'lora_train/gpt2_accumulation_matches_the_big_batch'  # 5.0 s
  'generate/gpt2_greedy_equals_transformers'  # 4.7 s
  'generate/llama_gqa_greedy_equals_transformers'  # 4.5 s
  'safety/overwrite_and_resume_from_an_earlier_checkpoint_stay_coherent'  # 4.5 s
  'generate/qwen2_biases_tied_greedy_equals_transformers'  # 4.4 s
  'sft_templates/llama3_1_tokenizer_counts_completion_tokens_and_eos'  # 4.4 s
  'lora_runs/pissa_resume_into_another_output_dir_rebuilds_pissa_init_bit_exact'  # 4.3 s
  'dist_e2e/zero1_equals_plain_data_parallel'  # 4.2 s
  'silent/special_tokens_are_autotokenizers_for_the_real_tokenizers'  # 4.0 s
  'reliability/disk_full_keeps_the_previous_checkpoint'  # 3.7 s
  'safety/symlink_traps_never_delete_through_a_link'  # 3.5 s
  'safety/metrics_never_hold_a_torn_record'  # 3.4 s
  'data/shuffle_false_run_resumes_in_order_and_refuses_a_changed_order'  # 3.3 s
  'lora_io/pissa_exact_all_linear_on_llama_like_peft'  # 3.2 s
  'dist_e2e/steps_normalisation_averages_over_ranks'  # 3.2 s
  'logs/window_means_eta_eval_line_and_summary_agree_with_metrics'  # 3.1 s
  'lora_train/llama_accumulation_matches_the_big_batch'  # 2.9 s
  'lora_io/pissa_exact_all_linear_on_phi3_like_peft'  # 2.9 s
  'lora_train/qwen3_recompute_and_offload_are_bit_identical_fp32_and_bf16'  # 2.9 s
  'silent/a_run_prints_qwen3s_special_tokens_as_autotokenizer_has_them'  # 2.7 s
  'model/gradients_match_finite_differences_of_double_reference'  # 2.5 s
  'lora_train/llama_recompute_and_offload_are_bit_identical_fp32_and_bf16'  # 2.5 s
  'lora_model/gpt2_all_four_modules'  # 2.5 s
  'silent/sample_reads_only_the_checkpoints_own_tokenizer'  # 2.5 s
  'eval_cli/generation_accuracy_matches_its_results_file'  # 2.4 s
  'lora_train/gpt2_recompute_and_offload_are_bit_identical_fp32_and_bf16'  # 2.3 s
  'dora_ref/gpt2_with_dropout_matches_the_reference'  # 2.3 s
  'lora_runs/pissa_niter_0_writes_an_initial_adapter_that_reads_back'  # 2.2 s
  'lora_io/continue_all_linear_rslora_dora_adapter_on_a_bf16_qwen2_like_peft'  # 2.2 s
  'logs/resolved_config_holds_auto_fit_and_loads_back_as_the_same_run'  # 2.1 s
  'lora_train/phi3_recompute_and_offload_are_bit_identical_fp32_and_bf16'  # 2.0 s
  'output_dir/never_the_model_directory_nor_around_or_inside_it_with_overwrite'  # 2.0 s
  'lora_io/bf16_base_under_fp32_is_peft_on_the_rounded_gpt2'  # 2.0 s
  'dora_ref/gpt2_loss_and_every_adapter_gradient_match_the_reference'  # 2.0 s
  'reliability/sigterm_checkpoints_exits_0_and_resume_is_bit_exact'  # 23.5 s
  'lora_runs/pissa_resumed_from_checkpoint_0_is_the_unbroken_run'  # 8.2 s
  'dist_e2e/bf16_resume_is_bit_exact'  # 5.8 s
  'dist_e2e/splits_of_the_global_batch_agree'  # 5.3 s
  'dist_e2e/bf16_gradients_stay_near_fp32'  # 5.0 s
  'e2e/sft_splits_agree_under_tokens_and_differ_under_steps'  # 3.0 s
  'lora_io/continue_all_linear_adapter_on_qwen3_like_peft'  # 2.8 s
  'lora_io/continue_all_linear_rslora_adapter_on_qwen2_like_peft'  # 2.8 s
  'lora_train/llama_accumulation_with_dropout_matches_the_big_batch'  # 2.5 s
  'lora_io/bf16_base_under_fp32_is_peft_on_the_rounded_llama'  # 2.3 s
  'lora_io/pissa_exact_conv1d_on_gpt2_like_peft'  # 2.3 s
  'lora_io/pissa_exact_rslora_attention_on_mistral_like_peft'  # 2.2 s
  'safety/a_held_lock_refuses_a_second_run_naming_the_pid'  # 2.1 s
  'reliability/output_dir_holding_another_run_is_refused'  # 2.1 s
  'safety/a_run_directory_of_gtrain_0_1_resumes'  # 2.0 s
)

# Left out of the ASan + UBSan flavour: tests whose C code runs under the sanitizers in other tests
# already, and whose time is the Python reference (the same in every flavour). Measured in the
# plain flavour (make test, TAP times on a loaded machine): data_formats' qwen3 and llama2 rows
# against trl took 222 s and 102 s, their assistant masks 71 s and 31 s, the rendering against
# transformers 60 s, of the suite's 4136 s of test time. Under ASan data_formats keeps the same
# tests for llama3.1 (its masks: gtrain tokenize --data through the reader, template,
# tokenizer and masks; its rows test runs the same lines, ASAN_COVERED below), its JSON-array and bad-input tests and the trainer test; the qwen3 and
# llama2 tokenizers and templates run under ASan in tokenizer_hf, tokenizer_offsets,
# tokenizer_hf_variants and chat_template (its other tests render them too;
# assistant_spans_match_trl: the same three templates), and fuzz_chat_template,
# fuzz_tokenizer_encode and fuzz_jsonl fuzz those readers with ASan + UBSan.
ASAN_LEAVE_OUT=(
  'data_formats/qwen3_*'
  'data_formats/llama2_*'
  'data_formats/render_is_transformers_chat_text'
)

# Left out of the ASan + UBSan flavour, measured: the slow tests (2 s or more in an ASan run) each of
# whose lines of src/ also runs under the sanitizers in the tests the flavour keeps (gcov, every
# process a test starts counted; scripts/flavour-coverage.sh asan 2 lists them, and
# scripts/flavour-coverage.sh --check asan fails when one of them now runs a line no kept test runs).
# Most of their time is the Python reference or training steps that repeat what shorter tests run.
# Measured 2026-12-04: 71 of the 102 candidates, 679 s of the ASan run's 1113 s of test time (a
# loaded machine); the 31 others each run lines nothing else runs and stay. Again 2026-12-04 (stop
# 40) on stop 39's CI TAP: 3 more of the 18 new candidates, 7 s (the last 3 entries).
ASAN_COVERED=(
  'output_dir/the_demo_interrupted_by_sigint_resumes_to_the_unbroken_weights'  # 82.7 s
  'data_formats/llama3_1_rows_match_trl'  # 45.3 s
  'qpissa/quantization_error_below_qlora_on_decaying_spectra'  # 44.4 s
  'lora_train/gpt2_accumulation_matches_the_big_batch'  # 31.8 s
  'reliability/kill9_at_random_moments_then_resume_is_bit_exact'  # 30.7 s
  'safety/sigterm_while_loading_exits_0_and_resumes_exactly'  # 25.2 s
  'lora_train/llama_accumulation_matches_the_big_batch'  # 21.6 s
  'gen_sampling/warpers_draw_as_transformers_warpers'  # 16.0 s
  'e2e/the_loss_falls_on_the_demo_model'  # 15.9 s
  'tokenizer_hf/qwen3_decode_matches'  # 15.7 s
  'dora_ref/gpt2_with_dropout_matches_the_reference'  # 15.7 s
  'dora_ref/gpt2_loss_and_every_adapter_gradient_match_the_reference'  # 15.1 s
  'hf_trainer/accumulation_recompute_and_steps_loss_match_trainer'  # 14.4 s
  'model/gradients_match_finite_differences_of_double_reference'  # 14.0 s
  'tokenizer_hf/llama3_ids_identical_add_special_tokens'  # 10.6 s
  'lora_model/gpt2_all_four_modules'  # 10.5 s
  'hf_layout/saved_weights_give_the_same_loss_in_transformers_gpt2lmheadmodel'  # 10.0 s
  'tokenizer_hf/llama3_decode_matches_and_round_trips'  # 9.5 s
  'tokenizer_hf_variants/qwen3_normalizers'  # 9.1 s
  'tokenizer_hf/llama3_ids_identical'  # 8.4 s
  'tokenizer_offsets/llama3_offsets_equal_hf'  # 8.3 s
  'lora_train/gpt2_accumulation_with_dropout_matches_the_big_batch'  # 8.3 s
  'tokenize_cmd/output_identical_for_one_and_two_threads'  # 8.1 s
  'lora_train/llama_accumulation_with_dropout_matches_the_big_batch'  # 7.9 s
  'recompute/bf16_head_size_64_bit_identical_for_every_setting'  # 7.9 s
  'tokenizer_hf/llama3_1_decode_matches_and_round_trips'  # 7.8 s
  'tokenizer_hf/qwen3_ids_identical_add_special_tokens'  # 7.4 s
  'lora_model/llama_all_seven_modules'  # 7.2 s
  'tokenizer_offsets/qwen3_offsets_equal_hf'  # 7.1 s
  'safety/two_runs_started_at_once_one_wins'  # 6.9 s
  'silent/special_tokens_are_autotokenizers_for_the_real_tokenizers'  # 6.8 s
  'tokenizer_hf/qwen3_ids_identical'  # 6.7 s
  'dora_ref/llama_with_dropout_matches_the_reference'  # 6.7 s
  'tokenizer_offsets/llama3_1_offsets_equal_hf'  # 6.4 s
  'generate/nf4_bnb_base_lora_greedy_equals_transformers'  # 6.3 s
  'dist_e2e/killed_rank_ends_the_job'  # 6.2 s
  'dora_ref/llama_loss_and_every_adapter_gradient_match_the_reference'  # 6.0 s
  'generate/bf16_llama_greedy_equals_transformers_bf16_up_to_near_ties'  # 5.3 s
  'e2e/micro_batch_8x1_and_2x4_log_the_same_losses'  # 5.2 s
  'generate/eos_rows_leave_early_equal_transformers'  # 4.8 s
  'parquet/duckdb_writes'  # 4.4 s
  'silent/a_run_prints_qwen3s_special_tokens_as_autotokenizer_has_them'  # 4.4 s
  'tokenizer_hf/bad_lines_are_refused_by_both_naming_the_line'  # 4.3 s
  'tokenizer_hf/llama3_1_ids_identical_add_special_tokens'  # 4.2 s
  'sft_templates/llama3_1_tokenizer_counts_completion_tokens_and_eos'  # 4.2 s
  'tokenizer_hf/llama3_1_ids_identical'  # 4.2 s
  'bounded/three_hundred_thousand_added_tokens_load_in_bounded_time'  # 4.1 s
  'lora_model/gpt2_mlp_c_proj'  # 3.6 s
  'tokenizer_offsets/llama2_offsets_equal_hf'  # 3.5 s
  'generate/llama_gqa_greedy_equals_transformers'  # 3.5 s
  'lora_model/gpt2_init_true_is_the_base_model'  # 3.5 s
  'generate/mistral_window_16_greedy_equals_transformers'  # 3.2 s
  'generate/gpt2_greedy_equals_transformers'  # 3.2 s
  'chat_template/generation_blocks_match_transformers'  # 3.1 s
  'scorers/long_inputs_stay_linear'  # 3.0 s
  'lora_model/gpt2_bf16_base_is_the_rounded_fp32_base_bit_for_bit'  # 2.9 s
  'lora_model/gpt2_c_fc'  # 2.9 s
  'lora_runs/two_ranks_equal_one_rank_with_dropout'  # 2.7 s
  'output_dir/auto_resumes_the_same_run_and_names_what_differs_otherwise'  # 2.6 s
  'lora_model/llama_init_true_is_the_base_model'  # 2.6 s
  'lora_train/planned_equals_measured_with_adapters_and_a_frozen_base'  # 2.6 s
  'generate/qwen2_biases_tied_greedy_equals_transformers'  # 2.5 s
  'dist_mpi/probe_timeout_aborts_naming_the_rank'  # 2.5 s
  'recompute/llama_gradients_and_losses_bit_identical_for_every_setting'  # 2.3 s
  'lora_ref/llama_finite_differences_match_the_chain_rule'  # 2.3 s
  'bnb_weights/merge_onto_4bit_base_equals_peft_on_the_dequantized_model'  # 2.3 s
  'lora_runs/two_ranks_equal_one_rank_with_the_same_effective_batch'  # 2.2 s
  'ref_llama/gradients_mqa_window_everywhere_qkv_bias_untied'  # 2.2 s
  'lora_model/gpt2_c_attn'  # 2.2 s
  'lora_io/pissa_exact_rslora_attention_on_mistral_like_peft'  # 2.2 s
  'lora_io/pissa_exact_conv1d_on_gpt2_like_peft'  # 2.0 s
  'ops_llama_bf16/rmsnorm'  # 2.7 s
  'chat_template/real_templates_render_as_transformers'  # 2.3 s
  'ops_llama/rmsnorm'  # 2.2 s
)

# write_leave_out FILE ENTRY...: the file GTRAIN_TEST_LEAVE_OUT names for a flavour's run (read by
# tests/test_main.c, which disables those tests: Criterion's --filter globs fail past ~3000
# characters). An entry that matches no test of the binary stops the run with exit 2.
write_leave_out() {
  local f="$1"
  shift
  printf '%s\n' "$@" >"$f"
}

# write_flavour_leave_out FILE asan|cudasim: what that flavour leaves out, both of its lists
write_flavour_leave_out() {
  case "$2" in
    asan) write_leave_out "$1" ${ASAN_LEAVE_OUT[@]+"${ASAN_LEAVE_OUT[@]}"} ${ASAN_COVERED[@]+"${ASAN_COVERED[@]}"} ;;
    cudasim) write_leave_out "$1" "${CUDASIM_LEAVE_OUT[@]}" ${CUDASIM_COVERED[@]+"${CUDASIM_COVERED[@]}"} ;;
    *) echo "test-flavours.sh: expected asan or cudasim, found $2"; return 2 ;;
  esac
}

# check_leave_out TEST_BINARY FILE: fails naming an entry of FILE that matches no test of the binary
check_leave_out() {
  GTRAIN_TEST_LEAVE_OUT="$2" "$1" --list >/dev/null
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
  f="$(mktemp)"
  trap 'rm -f "$f"' EXIT
  for flavour in asan cudasim; do
    write_flavour_leave_out "$f" "$flavour"
    check_leave_out "$bin" "$f"
    printf '%-9s %s entries left out\n' "$flavour:" "$(grep -c . "$f")"
  done
fi
