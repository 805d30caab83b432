#!/usr/bin/env bash
# cudasim-mutants.sh - proof that the CUDA simulator bites (make test-cudasim-mutants): plants known
# bugs, one at a time, into a copy of the CUDA sources, builds that copy on the simulator and runs
# the suites of make test-cudasim that should see the bug. A planted bug the tests do not catch is
# reported and fails the script. MUTANTS_FULL=1 runs the whole simulated suite for each;
# MUTANTS=name,name runs only those. MUTANT_JOBS (default: the number of cores) mutants run at a
# time, each in its own copy, so that one's single-file rebuild overlaps another's tests; each
# copy's tests run with JOBS=1 then (MUTANT_TEST_JOBS overrides). A mutant's test run stops at its
# first failing test (Criterion --fail-fast): one failure is the catch, the rest of its suites add
# nothing (MUTANTS_FULL=1 runs them all). Each line of the report gives the mutant's build and test
# seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
# one reference server (scripts/with-refs-server.sh) for every mutant's test run, instead of one
# started (torch, transformers and peft imported) per mutant
if [ -z "${GTRAIN_MUTANTS_SERVED:-}" ]; then GTRAIN_MUTANTS_SERVED=1 exec scripts/with-refs-server.sh "$(pwd)/scripts/cudasim-mutants.sh" "$@"; fi
root=$(pwd)
B=${BUILD_SIM:-build-cudasim}
P=${BUILD:-build}
make -s -j"$(nproc)" cudasim-build BUILD_SIM="$B"

work=$(mktemp -d /tmp/gtrain-mutants.XXXXXX)
trap 'rm -rf "$work"' EXIT
slots=${MUTANT_JOBS:-$(nproc)}
[ "$slots" -ge 1 ] || slots=1
test_jobs=${MUTANT_TEST_JOBS:-$(( slots > 1 ? 1 : $(nproc) ))}
fail_fast=--fail-fast
[ "${MUTANTS_FULL:-0}" = 1 ] && fail_fast=
# a copy per slot: the tracked tree and the simulator build (so each mutant rebuilds only the file
# it changes)
for ((k = 0; k < slots; k++)); do
  mkdir -p "$work/slot$k"
  git ls-files -z | xargs -0 cp -a --parents -t "$work/slot$k"
  cp -a "$B" "$work/slot$k/$B"
  # and the plain build's host objects, which the simulator build links when it was compiled with
  # the same flags (mk/cudasim.mk), so that a mutant of cuda/ recompiles that one file
  for d in obj tests flags.stamp; do
    if [ -e "$P/$d" ]; then mkdir -p "$work/slot$k/$P" && cp -a "$P/$d" "$work/slot$k/$P/"; fi
  done
done

# name | file | text found exactly once | replacement | suites that should fail (Criterion glob; the
# tests that catch it where a whole suite would run minutes of others first under --fail-fast)
# (a replacement of "" deletes the text; \n in the texts is a newline; the suites, last, may hold |)
mutants() {
  cat <<'EOF'
fa_causal_off_by_one|cuda/kernels_attention_tc.cu|        jmax[hr] = min(w0 + g + 8 * hr, T - 1);|        jmax[hr] = min(w0 + g + 8 * hr + 1, T - 1);|cuda/bf16_attention_tensor*
fa_ldmatrix_trans_dropped|cuda/kernels_attention_tc.cu|    gtc_ldmatrix_x4_t(b, tile + fa_off<HS>(k0|    gtc_ldmatrix_x4(b, tile + fa_off<HS>(k0|cuda/bf16_attention_tensor*
fa_softmax_rescale_dropped|cuda/kernels_attention_tc.cu|o[n][e] *= alpha[e >> 1];|(void)alpha[e >> 1];|cuda/bf16_attention_tensor*
fa_acc_to_a_registers_swapped|cuda/kernels_attention_tc.cu|    a[1] = gtc_pack_bf16x2(c0[2], c0[3]);\n    a[2] = gtc_pack_bf16x2(c1[0], c1[1]);|    a[1] = gtc_pack_bf16x2(c1[0], c1[1]);\n    a[2] = gtc_pack_bf16x2(c0[2], c0[3]);|cuda/bf16_attention_tensor*
causal_mask_dq|cuda/kernels_attention.cu|            if (j <= t && j >= jlo) {\n                float p = expf(att_score(|            if (j < t && j >= jlo) {\n                float p = expf(att_score(|@(ops|ops_bf16)/*
no_syncthreads_attention_tile|cuda/kernels_attention.cu|        __syncthreads(); /* previous tile fully used (and Qs loaded, first time) */\n||@(ops|ops_bf16)/*
no_syncthreads_block_sum|cuda/kernels_misc.cu|    if (lane == 0) shared[warp] = v;\n    __syncthreads();\n    if (threadIdx.x == 0) {\n        double s|    if (lane == 0) shared[warp] = v;\n    if (threadIdx.x == 0) {\n        double s|ops/sum_squares
fa_cp_async_wait_missing|cuda/kernels_attention_tc.cu|            gtc_cp_async_wait<1>(); /* this tile (and Q) landed; the next may be in flight */\n||cuda/bf16_attention_tensor*
fa_dkdv_stage_race|cuda/kernels_attention_tc.cu|                __syncthreads(); /* the stage and dS are free for the next iteration's copies */\n||cuda/bf16_attention_*
fa_bwd_ds_overwrites_live_stage|cuda/kernels_attention_tc.cu|                __syncthreads(); /* every warp is done with this stage's Q and dO (dS may overwrite them) */\n||cuda/bf16_attention_tensor*
fa_dq_slice_index_rotated|cuda/kernels_attention_tc.cu|    float *dqs = dqpart + (size_t)split * slice|    float *dqs = dqpart + (size_t)((split + 1) % S) * slice|cuda/bf16_attention_dq_slices_match_double_per_split
fa_dq_sum_drops_last_split|cuda/kernels_attention_tc.cu|        for (int s = 0; s < S; s++)\n            if (fa_split_reaches|        for (int s = 0; s < S - 1; s++)\n            if (fa_split_reaches|cuda/bf16_attention_dq_slices_match_double_per_split
fa_dq_sum_reads_stale_slices|cuda/kernels_attention_tc.cu|            if (fa_split_reaches(s, S, q0, window, T)) {|            if (s >= 0) {|cuda/bf16_attention_dq_slices_match_double_per_split
fa_bwd_key_block_skipped|cuda/kernels_attention_tc.cu|k0 < min((u + 1) * FA_UNIT, T); k0 += BK)|k0 < min((u + 1) * FA_UNIT, T); k0 += 2 * BK)|@(cuda/bf16_attention_small_smem*|ops_llama_bf16/attention_one_pass_backward_splits_small_smem)
fa_ds_lo_dropped|cuda/kernels_attention_tc.cu|                        *reinterpret_cast<uint32_t *>(dsl + o) = gtc_pack_bf16x2(x - xh, y - yh);|                        *reinterpret_cast<uint32_t *>(dsl + o) = 0u;|cuda/bf16_attention_dq_slices_match_double_per_split
fa_dq_fresh_rows_added|cuda/kernels_attention_tc.cu|acc[n][e] = t < T && !fresh ? dqh|acc[n][e] = t < T ? dqh|cuda/bf16_attention_dq_slices_match_double_per_split
fa_dq_operand_not_transposed|cuda/kernels_attention_tc.cu|    gtc_ldmatrix_x4_t(a, tile + fa_off<64>(|    gtc_ldmatrix_x4(a, tile + fa_off<64>(|cuda/bf16_attention_tensor*
fa_dq_written_before_last_block|cuda/kernels_attention_tc.cu|const bool last = S == 1 && q0 < k0 + BK;|const bool last = S == 1 && q0 <= k0 + BK;|@(ops_llama_bf16/attention_one_pass_backward_splits_small_smem|cuda/bf16_attention_small_smem*)
fa_units_not_snaked|cuda/kernels_attention_tc.cu|return r * S + (r & 1 ? S - 1 - s : s);|return r * S + s;|cuda/bf16_attention_dq_slices_match_double_per_split
fa_reach_skips_previous_round|cuda/kernels_attention_tc.cu|        u = fa_unit(s, r - 1, S);|        return false;|@(ops_llama_bf16/attention_one_pass_backward_splits|cuda/bf16_attention_dq_slices_match_double_per_split)
mma_emulation_trans_layout|cuda/mma_ptx.cuh|            lo = all[8 * i + 2 * t][g];|            lo = all[8 * i + g][2 * t];|mma_ptx/*
wrong_ld_to_cublaslt|cuda/backend_cuda.cu|ta == CUBLAS_OP_N ? k : m, key->lda));|ta == CUBLAS_OP_N ? k : m, key->ldc));|@(ops|ops_bf16)/*
transposed_operand|cuda/backend_cuda.cu|gemm(b, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, 1.0f, at, w, C, inp, C, at, out, ldo, bias, 0.0f);|gemm(b, CUBLAS_OP_N, CUBLAS_OP_N, OC, N, C, 1.0f, at, w, C, inp, C, at, out, ldo, bias, 0.0f);|@(ops|ops_bf16)/*
offload_compute_skips_wait|cuda/backend_cuda.cu|    CUDA_CHECK(cudaStreamWaitEvent(im->compute, im->done[slot & 1], 0));\n||@(cuda/offload*|recompute/*)
offload_copy_skips_wait|cuda/backend_cuda.cu|    CUDA_CHECK(cudaStreamWaitEvent(im->copy, im->ready[slot], 0));\n||@(cuda/offload*|recompute/*)
allreduce_skips_compute_wait|cuda/dist_nccl.cu|    NC_CUDA(c, cudaStreamWaitEvent(c->stream, c->ready, 0));\n||@(nccl|dist_e2e)/*
gqa_kv_head_mapping|cuda/cuda_common.cuh|    return h / (NH / NKV);|    return h % NKV;|@(ops_llama|ops_llama_bf16|cuda)/*
sliding_window_off_by_one|cuda/cuda_common.cuh|    return window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;|    return window > 0 && t - window > 0 ? t - window : 0;|@(ops_llama|ops_llama_bf16|cuda)/*
lora_src_stride_ignored|cuda/kernels_lora.cu|load_f32(src, row * (size_t)lds + j)|load_f32(src, row * (size_t)ldd + j)|lora_ops/axpby_rows*
lora_dropout_mask_shifted|cuda/kernels_lora.cu|gt_dropout_keep(key, base + (uint64_t)i, threshold)|gt_dropout_keep(key, base + (uint64_t)i + 1, threshold)|@(lora_ops|lora_model)/*
nf4_nibbles_swapped|cuda/kernels_nf4.cu|store_from_f32(dst, (size_t)e, __fmul_rn(t.code[byte >> 4], a));|store_from_f32(dst, (size_t)e, __fmul_rn(t.code[byte & 15], a));|@(backend_ops|backend_ops_bf16|nf4_model)/*
attention_cached_reads_past_pos|cuda/kernels_decode.cu|const int last = pos[i]; /* the last key|const int last = pos[i] + 1; /* the last key|@(backend_ops|backend_ops_bf16|decode)/*
attention_cached_window_ignored|cuda/kernels_decode.cu|const int lo = gtc_att_first_key(pos[i], window);|const int lo = gtc_att_first_key(pos[i], 0);|@(backend_ops|backend_ops_bf16|decode)/*
attention_cached_no_rescale|cuda/kernels_decode.cu|const float alpha = expf(m - mnew);|const float alpha = m == -INFINITY ? 0.0f : 1.0f;|@(backend_ops|backend_ops_bf16)/*
kv_store_value_from_key_heads|cuda/kernels_decode.cu|        vc[at] = row[KV + c];|        vc[at] = row[c];|@(backend_ops|backend_ops_bf16|decode)/*
lora_gemm_beta_zero|cuda/backend_cuda.cu|         ldb, A, lda, cdt, C, ldc, NULL, beta);|         ldb, A, lda, cdt, C, ldc, NULL, 0.0f);|@(backend_ops|backend_ops_bf16|lora_model)/*
lora_gemm_output_stride|cuda/backend_cuda.cu|         ldb, A, lda, cdt, C, ldc, NULL, beta);|         ldb, A, lda, cdt, C, N, NULL, beta);|@(backend_ops|backend_ops_bf16|lora_model)/*
lora_gemm_alpha_ignored|cuda/backend_cuda.cu|N, M, K < 0 ? 0 : K, alpha, act_dtype(b), B,|N, M, K < 0 ? 0 : K, 1.0f, act_dtype(b), B,|@(backend_ops|backend_ops_bf16|lora_model)/*
lora_concat_a_offset_by_r|src/model/adapter_linear.c|        op->gemm(m->be, false, true, N, (int)s->rows, r, sc, model_at(m, m->ad.h, (size_t)j * r), H,|        op->gemm(m->be, false, true, N, (int)s->rows, r, sc, model_at(m, m->ad.h, (size_t)((j + 1) % n) * r), H,|lora_model/llama_all_seven_modules
lora_dropout_base_ignored|cuda/kernels_lora.cu|gt_dropout_keep(key, base + (uint64_t)i, threshold)|gt_dropout_keep(key, (uint64_t)i, threshold)|@(lora_ops|lora_model)/*
module_table_collectives_swapped|cuda/module_entry.cu|    nccl_reduce_scatter,\n    nccl_allgather,\n|    nccl_allgather,\n    nccl_reduce_scatter,\n|dist_e2e/zero1_*
elementwise_tail_dropped|cuda/kernels_elementwise.cu|    for (size_t i = npack * N + tid; i < n; i += stride)\n        store_from_f32(out, i, op(|    for (size_t i = npack * N + tid; i < npack * N; i += stride)\n        store_from_f32(out, i, op(|@(backend_ops|backend_ops_bf16)/*
elementwise_alignment_unchecked|cuda/kernels_elementwise.cu|const size_t q0 = packed ? lo / N : 0, q1 = packed ? hi / N : 0;|const size_t q0 = lo / N, q1 = hi / N;|@(backend_ops|backend_ops_bf16)/*
sum_squares_chunk_tail_dropped|cuda/kernels_misc.cu|    for (size_t i = tail + threadIdx.x; i < i1; i += blockDim.x) acc += (double)x[i] * (double)x[i];\n||ops/sum_squares
sum_squares_second_pack_repeats_first|cuda/kernels_misc.cu|            load_pack<4>(c, x + i0 + 8 * p + 4);|            load_pack<4>(c, x + i0 + 8 * p);|ops/sum_squares
adamw_act_copy_skipped|cuda/kernels_elementwise.cu|        if (copy) store_pack<N>(copy + o, p);\n||@(backend_ops|backend_ops_bf16)/*
swiglu_pack_up_offset|cuda/kernels_llama.cu|        load_pack<P>(u, in + I);\n        load_pack<P>(dy, dout + idx);|        load_pack<P>(u, in + P);\n        load_pack<P>(dy, dout + idx);|@(backend_ops|backend_ops_bf16)/*
fused_residual_not_written|cuda/kernels_norms.cu|            gtc_raw_store(res + c0, xs[k], n, v);\n||@(ops|ops_bf16|ops_llama|backend_ops|backend_ops_bf16)/*
gemm_align_split_removed|cuda/gemm_align.cu|    const bool aligned = ((all_m|    const bool aligned = false && ((all_m|cuda_gemm/*
gemm_align_k_main_overwrites_tail|cuda/gemm_align.cu|abt, A, lda, B, ldb, cdt, Cm, ldc, NULL, 1.0f);|abt, A, lda, B, ldb, cdt, Cm, ldc, NULL, beta);|cuda_gemm/*
gemm_align_m_tail_writes_padding|cuda/gemm_align.cu|dp, (size_t)g * cd, (size_t)mt * cd, (size_t)n);|dp, (size_t)g * cd, (size_t)g * cd, (size_t)n);|cuda_gemm/*
gemm_align_n_tail_offset|cuda/gemm_align.cu|        copy2d(b, bp, (size_t)g * ab, bb + (size_t)n0 * ab,|        copy2d(b, bp, (size_t)g * ab, bb + (size_t)(n0 - 1) * ab,|cuda_gemm/*
profile_range_opened_every_step|cuda/backend_cuda.cu|    if (im->profile_step && ++im->timed_steps == im->profile_step) CUDA_CHECK(cudaProfilerStart());|    if (im->profile_step && ++im->timed_steps >= im->profile_step) CUDA_CHECK(cudaProfilerStart());|host_waits/profile*
bgrad_scratch_added_twice|cuda/backend_cuda.cu|    gtc_accumulate_f32(b, dbias, grad, OC);\n    return true;|    gtc_accumulate_f32(b, dbias, grad, OC);\n    gtc_accumulate_f32(b, dbias, grad, OC);\n    return true;|ops_bf16/matmul*
bgrad_scratch_not_added|cuda/backend_cuda.cu|    gtc_accumulate_f32(b, dbias, grad, OC);\n    return true;|    return true;|ops_bf16/matmul*
bgrad_epilogue_writes_dbias|cuda/backend_cuda.cu|CUBLASLT_MATMUL_DESC_BIAS_POINTER, &grad, sizeof grad));|CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias));|ops_bf16/matmul*
bgrad_other_operand|cuda/backend_cuda.cu|bgrad ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BIAS;|bgrad ? CUBLASLT_EPILOGUE_BGRADA : CUBLASLT_EPILOGUE_BIAS;|ops_bf16/matmul*
bgrad_bias_type_bf16|cuda/backend_cuda.cu|            int32_t bias_type = (int32_t)cuda_type(cdt);|            int32_t bias_type = bgrad ? (int32_t)CUDA_R_16BF : (int32_t)cuda_type(cdt);|ops_bf16/matmul*
norm_backward_row_groups_race|cuda/kernels_norms.cu|            }\n            __syncthreads();\n        }\n    }\n}|            }\n        }\n    }\n}|@(ops|ops_bf16|ops_llama|backend_ops)/*
norm_backward_block_partial_skipped|cuda/kernels_norms.cu|        gtc_colsum_partials(b, dw, db, pw, pb, C, blocks);|        gtc_colsum_partials(b, dw, db, pw, pb, C, blocks - 1);|@(ops|ops_bf16|backend_ops)/*
norm_partials_stride_skips|cuda/kernels_misc.cu|        for (int y = ty; y < parts; y += COL_TY) {|        for (int y = ty; y < parts; y += COL_TY + 1) {|@(ops|ops_bf16|backend_ops)/*
norm_tail_dropped|cuda/kernels_norms.cu|    return min(GTC_PACK(Act), Cv - c0);|    return Cv - c0 >= GTC_PACK(Act) ? GTC_PACK(Act) : 0;|@(ops_llama|ops_llama_bf16|ops|ops_bf16)/*
norm_pack_weight_order_swapped|cuda/kernels_norms.cu|: xv[j] * r * wv[j];|: xv[j] * r * wv[j ^ 1];|@(ops_llama|ops_llama_bf16)/*
norm_row_last_warp_dropped|cuda/kernels_norms.cu|    for (int k = 0; k < nw; k++) t += s[k];|    for (int k = 0; k < nw - 1; k++) t += s[k];|@(ops_llama|ops_llama_bf16)/*
norm_backward_alignment_unchecked|cuda/kernels_norms.cu|    const bool vec = aligned && C % GTC_PACK(Act) == 0;|    const bool vec = (void(aligned), true) && C % GTC_PACK(Act) == 0;|ops_llama*/rows_unaligned
ce_online_rescale_dropped|cuda/kernels_misc.cu|    s = m == -INFINITY ? add : s * expf(m - M) + add;|    s = m == -INFINITY ? add : s + add;|@(ops|ops_bf16|ops_llama|ops_llama_bf16)/*crossentropy*
ce_combine_rescale_dropped|cuda/kernels_misc.cu|    s = __fadd_rn(__fmul_rn(s, expf(m - M)), __fmul_rn(s2, expf(m2 - M)));|    s = __fadd_rn(s, s2);|@(ops|ops_bf16|ops_llama|ops_llama_bf16)/*crossentropy*
ce_warp_skipped|cuda/kernels_misc.cu|    for (int w = 1; w < CE_THREADS / 32; w++)|    for (int w = 2; w < CE_THREADS / 32; w++)|@(ops|ops_bf16|ops_llama|ops_llama_bf16)/*crossentropy*
ce_alignment_unchecked|cuda/kernels_misc.cu|    const int vec = ld % P == 0 && gtc_aligned16(logits);|    const int vec = ld % P == 0;|ops_llama*/rows_unaligned
sync_not_counted|cuda/backend_cuda.cu|    b->host_waits++;\n    b->syncs++;|    b->host_waits++;|host_waits/a_micro*
runtime_reserve_dropped|cuda/backend_cuda.cu|    backend_reserve(b, GTC_CUBLAS_WORKSPACE_BYTES(prop.major), "cuBLAS workspace");\n    backend_reserve(b, GTC_MODULES_RESERVE_BYTES, "kernel modules (allowance)");\n||host_waits/auto_fit*
nccl_bf16_summed_as_fp32_pairs|cuda/dist_nccl.cu|    return allreduce_start(c, dev_buf, n, ncclBfloat16, err);|    return allreduce_start(c, dev_buf, n / 2, ncclFloat32, err);|@(nccl|dist_e2e)/*
nccl_bf16_reduce_scatter_offset|cuda/dist_nccl.cu|(char *)dev_buf + (size_t)c->rank * shard * es, shard, t,|(char *)dev_buf + (size_t)c->rank * shard * sizeof(float), shard, t,|dist_e2e/zero1_bf16*
bf16_sums_not_widened_back|src/run/dist_comm.c|        c->be->ops->convert(c->be, c->grads + off, GT_F32, c->copy + off, GT_BF16, n);|        (void)off, (void)n;|@(dist_e2e)/*
bf16_allreduce_before_convert|src/run/dist_comm.c|        c->be->ops->convert(c->be, half, GT_BF16, buf, GT_F32, n); /* on the compute stream: before NCCL's start */\n        c->started[2 * c->n_started] = (size_t)(buf - c->grads);\n        c->started[2 * c->n_started + 1] = n;\n        c->n_started++;\n#ifdef GT_HAVE_NCCL\n        if (c->nccl) return nccl_allreduce_bf16_start(c->nccl, half, n, err);|        c->started[2 * c->n_started] = (size_t)(buf - c->grads);\n        c->started[2 * c->n_started + 1] = n;\n        c->n_started++;\n#ifdef GT_HAVE_NCCL\n        if (c->nccl) {\n            const int rc = nccl_allreduce_bf16_start(c->nccl, half, n, err);\n            c->be->ops->convert(c->be, half, GT_BF16, buf, GT_F32, n);\n            return rc;\n        }\n#endif\n        c->be->ops->convert(c->be, half, GT_BF16, buf, GT_F32, n);\n#ifdef GT_HAVE_NCCL|dist_e2e/bf16*
nccl_compute_skips_join|cuda/dist_nccl.cu|    NC_CUDA(c, cudaStreamWaitEvent(c->compute, c->done, 0));\n||nccl/one_rank*
lora_dh_stride_dropped|src/model/adapter_linear.c|                 model_at(m, m->ad.dh, (size_t)j * r), m->act, H);|                 model_at(m, m->ad.dh, (size_t)j * r), m->act, R);|@(lora_model|lora_train)/*
lora_h_rows_unpadded|src/model/lora.c|    return (width + 7) / 8 * 8;|    return width;|cuda_gemm/lora_steps*
gemm_align_whole_tail_strict|cuda/gemm_align.cu|    const bool all_m = bad_m && m < g, all_n = bad_n && n < g, all_k = bad_k && k < g;|    const bool all_m = false, all_n = false, all_k = false;|cuda_gemm/lora*
encoder_sort_unstable|cuda/kernels_encoder.cu|int at = s_next[d] + __popc(peers & ((1u << lane) - 1u));|int at = s_next[d] + __popc(peers & ~((2u << lane) - 1u));|@(ops|ops_bf16)/encoder_backward_bits
encoder_sort_scan_inclusive|cuda/kernels_encoder.cu|    return before + x - v;|    return before + x;|@(ops|ops_bf16)/encoder_backward_bits
encoder_sort_count_tile_tail|cuda/kernels_encoder.cu|const int lo = blockIdx.x * tile, hi = min(lo + tile, BT);|const int lo = blockIdx.x * tile, hi = min(lo + tile, BT) - 1;|@(ops|ops_bf16)/encoder_backward_bits
encoder_sort_second_digit|cuda/kernels_encoder.cu|(int *)NULL, BT, tl.tile, tl.ntiles, ENC_DIGIT_BITS);|(int *)NULL, BT, tl.tile, tl.ntiles, 0);|@(ops|ops_bf16)/encoder_backward_bits
encoder_every_index_owns|cuda/kernels_encoder.cu|    if (s > 0) { /* not the token's first sorted index|    if (s < 0) { /* not the token's first sorted index|@(ops|ops_bf16)/encoder_backward_bits
encoder_walk_first_chunk_only|cuda/kernels_encoder.cu|        if (past) break; /* the run|        break; /* the run|@(ops|ops_bf16)/encoder_backward_bits
encoder_high_bits_second_owner|cuda/kernels_encoder.cu|            if (--e < 0) break;|            break;|@(ops|ops_bf16)/encoder_backward_bits
encoder_packed_dwpe_last_row_dropped|cuda/kernels_encoder.cu|encoder_backward_rows_by_key(b, dwpe, dout, pos, B * T, C);|encoder_backward_rows_by_key(b, dwpe, dout, pos, B * T - 1, C);|@(ops|ops_bf16)/encoder_backward_bits
adamw_neighbour_run_decay|cuda/kernels_elementwise.cu|            sr.decay = runs.decay[r];|            sr.decay = runs.decay[r > 0 ? r - 1 : r];|@(ops|ops_bf16)/adamw_runs
adamw_run_skipped|cuda/kernels_elementwise.cu|            t.n++;|            t.n += k != k0 + 1; /* run k0 + 1 overwritten by the next */|@(ops|ops_bf16)/adamw_runs
adamw_edge_pack_stepped_whole|cuda/kernels_elementwise.cu|        if (r < runs.n && runs.begin[r] <= o && o + N <= runs.end[r]) {|        if (r < runs.n && runs.begin[r] < o + N && o < runs.end[r]) {|@(ops|ops_bf16)/adamw_runs
adamw_tail_repeats_packs|cuda/kernels_elementwise.cu|    const size_t first = q1 * N > runs.begin[0] ? q1 * N : runs.begin[0];|    const size_t first = runs.begin[0];|@(ops|ops_bf16)/adamw_runs
adamw_second_table_dropped|cuda/kernels_elementwise.cu|    for (int k0 = 0; k0 < n_runs; k0 += GTC_ADAMW_RUNS) {|    for (int k0 = 0; k0 < n_runs && k0 < GTC_ADAMW_RUNS; k0 += GTC_ADAMW_RUNS) {|@(ops|ops_bf16)/adamw_runs
EOF
}

# run_mutant SLOT NAME FILE FROM TO SUITES: plant, build and test in the slot's copy, unplant; the
# outcome (caught/missed/broken) goes to $work/result-NAME, the logs beside it
run_mutant() {
  local slot="$work/slot$1" name="$2" file="$3" from="$4" to="$5" suites="$6" rc failed how t0 tb tt f
  touch "$work/stamp-$name" # what the mutant's build and tests write is newer: put back after
  # plant: the text must be there exactly once, or this script is out of date with the sources
  if ! FROM="$from" TO="$to" perl -0777 -i -pe '
        BEGIN { ($f, $t) = map { s/\\n/\n/g; $_ } ($ENV{FROM}, $ENV{TO}); }
        $n = () = /\Q$f\E/g;
        die "found $n times\n" if $n != 1;
        s/\Q$f\E/$t/;' "$slot/$file"; then
    echo "broken|cudasim-mutants: $name: the text to change is not in $file exactly once; update scripts/cudasim-mutants.sh" >"$work/result-$name"
    return
  fi
  t0=$SECONDS
  if ! make -s -C "$slot" -j"$(nproc)" cudasim-build BUILD_SIM="$B" >"$work/build-$name.log" 2>&1; then
    echo "broken|cudasim-mutants: $name does not build; a planted bug must compile (log: $work/build-$name.log)" >"$work/result-$name"
    cat "$work/build-$name.log" >&2
  else
    tb=$((SECONDS - t0))
    (cd "$slot" && JOBS="$test_jobs" BUILD_SIM="$B" CUDASIM_FILTER="$suites" scripts/test-cudasim.sh $fail_fast) >"$work/test-$name.log" 2>&1
    rc=$?
    tt=$((SECONDS - t0 - tb))
    failed=$(grep -E '^\[(FAIL|CRASH)\]|^\[----\] .*(Timed out|crash)' "$work/test-$name.log" | sed -E 's/^\[[A-Z]+\] //; s/: .*//' | sort -u | head -4 | tr "\n" " " || true)
    how=$(grep -m1 -E 'gtcsim: |rel err|differ|Assertion' "$work/test-$name.log" | sed 's/^\[----\] *//' | cut -c1-150 || true)
    if [ "$rc" -ne 0 ] && [ -z "$failed$how" ]; then # e.g. a suites pattern Criterion refuses: no test ran
      echo "broken|cudasim-mutants: $name: the simulated suite ($suites) failed without naming a test or a simulator message; see its log (rc $rc): $(tail -3 "$work/test-$name.log" | tr '\n' ' ' | cut -c1-200)" >"$work/result-$name"
    elif [ "$rc" -ne 0 ]; then
      printf 'caught|  caught  %-30s (build %d s, tests %d s) %s\n          %s\n' "$name" "$tb" "$tt" "$failed" "$how" >"$work/result-$name"
    else
      printf 'missed|  MISSED  %-30s (build %d s, tests %d s; %s passed)\n' "$name" "$tb" "$tt" "${suites:-the whole suite}" >"$work/result-$name"
    fi
  fi
  # unplant, and put back every build output the mutant's build (and its tests) wrote, from the tree
  # the slot was copied from (the source with its old mtime too): the next mutant in this slot then
  # recompiles only what it changes. Recompiling the unplanted file instead cost each mutant a second
  # compile, and a planted header (cuda_common.cuh, mma_ptx.cuh) a second rebuild of every .cu
  cp -p "$root/$file" "$slot/$file"
  while IFS= read -r -d '' f; do
    if [ -e "$root/${f#"$slot/"}" ]; then cp -p "$root/${f#"$slot/"}" "$f"; else rm -f "$f"; fi
  done < <(find "$slot/$B" "$slot/$P" -newer "$work/stamp-$name" -type f -print0 2>/dev/null)
}

names=() pids=()
for ((k = 0; k < slots; k++)); do pids[k]=0; done
while IFS='|' read -r name file from to suites; do
  [ -n "$name" ] || continue
  if [ -n "${MUTANTS:-}" ] && [[ ",$MUTANTS," != *",$name,"* ]]; then continue; fi
  [ "${MUTANTS_FULL:-0}" = 1 ] && suites=""
  # a free slot: wait for any mutant to finish when all are busy
  free=-1
  while [ "$free" -lt 0 ]; do
    for ((k = 0; k < slots; k++)); do
      if [ "${pids[k]}" -eq 0 ] || ! kill -0 "${pids[k]}" 2>/dev/null; then free=$k; break; fi
    done
    [ "$free" -ge 0 ] || wait -n || true
  done
  [ "${pids[free]}" -eq 0 ] || wait "${pids[free]}" || true
  set +e
  run_mutant "$free" "$name" "$file" "$from" "$to" "$suites" &
  pids[free]=$!
  set -e
  names+=("$name")
done < <(mutants)
wait || true

caught=0 missed=0 broken=0 report=""
for name in "${names[@]}"; do
  r=$(cat "$work/result-$name" 2>/dev/null || echo "broken|cudasim-mutants: $name: no result")
  case "${r%%|*}" in
    caught) caught=$((caught + 1)) ;;
    missed) missed=$((missed + 1)) ;;
    *) broken=$((broken + 1)) ;;
  esac
  report+="${r#*|}"$'\n'
done

echo "cudasim-mutants: $caught planted bug(s) caught, $missed missed, $broken not planted or not built ($slots at a time)"
printf '%s' "$report"
[ "$missed" -eq 0 ] && [ "$broken" -eq 0 ]
