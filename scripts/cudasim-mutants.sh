#!/usr/bin/env bash
# cudasim-mutants.sh - proof that the CUDA simulator bites (make test-cudasim-mutants): plants known
# bugs, one at a time, into a copy of the CUDA sources, builds that copy on the simulator and runs
# the suites of make test-cudasim that should see the bug. A planted bug the tests do not catch is
# reported and fails the script. MUTANTS_FULL=1 runs the whole simulated suite for each;
# MUTANTS=name,name runs only those.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
B=${BUILD_SIM:-build-cudasim}
make -s -j"$(nproc)" cudasim-build BUILD_SIM="$B"

work=$(mktemp -d /tmp/gtrain-mutants.XXXXXX)
trap 'rm -rf "$work"' EXIT
# the tracked tree and the simulator build (so each mutant rebuilds only the file it changes)
git ls-files -z | xargs -0 cp -a --parents -t "$work"
cp -a "$B" "$work/$B"

# name | file | text found exactly once | replacement | suites that should fail (Criterion glob)
# (a replacement of "" deletes the text; \n in the texts is a newline; the suites, last, may hold |)
mutants() {
  cat <<'EOF'
causal_mask_tc_forward|cuda/kernels_attention_tc.cu|const int jmax = min(t, T - 1);     /* last key row|const int jmax = min(t + 1, T - 1);     /* last key row|@(ops_bf16|cuda)/*
causal_mask_dq|cuda/kernels_attention.cu|            if (j <= t && j >= jlo) {\n                float p = expf(att_score(|            if (j < t && j >= jlo) {\n                float p = expf(att_score(|@(ops|ops_bf16)/*
no_syncthreads_attention_tile|cuda/kernels_attention.cu|        __syncthreads(); /* previous tile fully used (and Qs loaded, first time) */\n||@(ops|ops_bf16)/*
no_syncthreads_block_sum|cuda/kernels_misc.cu|    if (lane == 0) shared[warp] = v;\n    __syncthreads();\n    if (threadIdx.x == 0) {\n        double s|    if (lane == 0) shared[warp] = v;\n    if (threadIdx.x == 0) {\n        double s|@(ops|ops_bf16|cuda|optim)/*
no_syncthreads_tc_tile|cuda/kernels_attention_tc.cu|        __syncthreads(); /* every warp is done with the previous K/V tile */\n||@(ops_bf16|cuda)/*
wrong_ld_to_cublaslt|cuda/backend_cuda.cu|ta == CUBLAS_OP_N ? k : m, key->lda));|ta == CUBLAS_OP_N ? k : m, key->ldc));|@(ops|ops_bf16)/*
transposed_operand|cuda/backend_cuda.cu|gemm(b, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, at, w, C, inp, C, at, out, ldo, bias, 0.0f);|gemm(b, CUBLAS_OP_N, CUBLAS_OP_N, OC, N, C, at, w, C, inp, C, at, out, ldo, bias, 0.0f);|@(ops|ops_bf16)/*
offload_compute_skips_wait|cuda/backend_cuda.cu|    CUDA_CHECK(cudaStreamWaitEvent(im->compute, im->done[slot & 1], 0));\n||@(cuda|recompute)/*
offload_copy_skips_wait|cuda/backend_cuda.cu|    CUDA_CHECK(cudaStreamWaitEvent(im->copy, im->ready[slot], 0));\n||@(cuda|recompute)/*
allreduce_skips_compute_wait|cuda/dist_nccl.cu|    NC_CUDA(c, cudaStreamWaitEvent(c->stream, c->ready, 0));\n||@(nccl|dist_e2e)/*
gqa_kv_head_mapping|cuda/cuda_common.cuh|    return h / (NH / NKV);|    return h % NKV;|@(ops_llama|ops_llama_bf16|cuda)/*
sliding_window_off_by_one|cuda/cuda_common.cuh|    return window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;|    return window > 0 && t - window > 0 ? t - window : 0;|@(ops_llama|ops_llama_bf16|cuda)/*
lora_src_stride_ignored|cuda/kernels_lora.cu|load_f32(src, row * (size_t)lds + j)|load_f32(src, row * (size_t)ldd + j)|@(lora_ops|lora_model)/*
lora_dropout_mask_shifted|cuda/kernels_lora.cu|gt_dropout_keep(key, base + (uint64_t)i, threshold)|gt_dropout_keep(key, base + (uint64_t)i + 1, threshold)|@(lora_ops|lora_model)/*
nf4_nibbles_swapped|cuda/kernels_nf4.cu|store_from_f32(dst, (size_t)e, __fmul_rn(t.code[byte >> 4], a));|store_from_f32(dst, (size_t)e, __fmul_rn(t.code[byte & 15], a));|@(backend_ops|backend_ops_bf16|nf4_model)/*
attention_cached_reads_past_pos|cuda/kernels_decode.cu|const int last = pos[i]; /* the last key|const int last = pos[i] + 1; /* the last key|@(backend_ops|backend_ops_bf16|decode)/*
attention_cached_window_ignored|cuda/kernels_decode.cu|const int lo = gtc_att_first_key(pos[i], window);|const int lo = gtc_att_first_key(pos[i], 0);|@(backend_ops|backend_ops_bf16|decode)/*
attention_cached_no_rescale|cuda/kernels_decode.cu|const float alpha = expf(m - mnew);|const float alpha = m == -INFINITY ? 0.0f : 1.0f;|@(backend_ops|backend_ops_bf16)/*
kv_store_value_from_key_heads|cuda/kernels_decode.cu|        vc[at] = row[KV + c];|        vc[at] = row[c];|@(backend_ops|backend_ops_bf16|decode)/*
lora_dropout_base_ignored|cuda/kernels_lora.cu|gt_dropout_keep(key, base + (uint64_t)i, threshold)|gt_dropout_keep(key, (uint64_t)i, threshold)|@(lora_ops|lora_model)/*
sync_not_counted|cuda/backend_cuda.cu|    b->host_waits++;\n    b->syncs++;|    b->host_waits++;|@(host_waits)/*
runtime_reserve_dropped|cuda/backend_cuda.cu|    backend_reserve(b, GTC_CUBLAS_WORKSPACE_BYTES(prop.major), "cuBLAS workspace");\n    backend_reserve(b, GTC_MODULES_RESERVE_BYTES, "kernel modules (allowance)");\n||@(host_waits)/*
EOF
}

caught=0 missed=0 report=""
while IFS='|' read -r name file from to suites; do
  [ -n "$name" ] || continue
  if [ -n "${MUTANTS:-}" ] && [[ ",$MUTANTS," != *",$name,"* ]]; then continue; fi
  [ "${MUTANTS_FULL:-0}" = 1 ] && suites=""
  # plant: the text must be there exactly once, or this script is out of date with the sources
  if ! FROM="$from" TO="$to" perl -0777 -i -pe '
        BEGIN { ($f, $t) = map { s/\\n/\n/g; $_ } ($ENV{FROM}, $ENV{TO}); }
        $n = () = /\Q$f\E/g;
        die "found $n times\n" if $n != 1;
        s/\Q$f\E/$t/;' "$work/$file"; then
    echo "cudasim-mutants: $name: the text to change is not in $file exactly once; update scripts/cudasim-mutants.sh" >&2
    exit 1
  fi
  if ! make -s -C "$work" -j"$(nproc)" cudasim-build BUILD_SIM="$B" >"$work/build-$name.log" 2>&1; then
    cat "$work/build-$name.log" >&2
    echo "cudasim-mutants: $name does not build; a planted bug must compile" >&2
    exit 1
  fi
  set +e
  (cd "$work" && BUILD_SIM="$B" CUDASIM_FILTER="$suites" scripts/test-cudasim.sh) >"$work/test-$name.log" 2>&1
  rc=$?
  set -e
  failed=$(grep -E '^\[(FAIL|CRASH)\]|^\[----\] .*(Timed out|crash)' "$work/test-$name.log" | sed -E 's/^\[[A-Z]+\] //; s/: .*//' | sort -u | head -4 | tr "\n" " " || true)
  how=$(grep -m1 -E 'gtcsim: |rel err|differ|Assertion' "$work/test-$name.log" | sed 's/^\[----\] *//' | cut -c1-150 || true)
  if [ "$rc" -ne 0 ]; then
    caught=$((caught + 1))
    report+=$(printf '  caught  %-30s %s\n          %s' "$name" "$failed" "$how")$'\n'
  else
    missed=$((missed + 1))
    report+=$(printf '  MISSED  %-30s (%s passed)' "$name" "${suites:-the whole suite}")$'\n'
  fi
  # unplant; the newer mtime makes the next build recompile it
  cp "$root/$file" "$work/$file"
  touch "$work/$file"
done < <(mutants)

echo "cudasim-mutants: $caught planted bug(s) caught, $missed missed"
printf '%s' "$report"
[ "$missed" -eq 0 ]
