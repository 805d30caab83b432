/* backend.h - the ops table every backend fills (cpu: backend_cpu.c, cuda: cuda/backend_cuda.cu).
 *
 * model.c never branches on the device: it calls these ops. Pointers are device pointers
 * (host pointers for the CPU backend). Tensors are row-major; token ids int32.
 *
 * Two element types (precision):
 *   - `float *`: always fp32. Parameters' master copy, their gradients, AdamW state, layernorm
 *     mean/rstd, attention log-sum-exps and row sums, per-token losses.
 *   - `act_t *`: the backend's activation dtype, b->act_dtype: fp32 (precision: fp32) or bf16
 *     (precision: bf16). Activations, activation gradients, logits, and the compute copy of the
 *     weights that the forward and backward read. Every op computes in fp32 from these and rounds
 *     its act_t outputs once (round to nearest even); parameter gradients always accumulate in
 *     fp32. So the CPU backend's bf16 is the reference for the GPU's.
 * Conventions for backward ops: gradients of PARAMETERS (dw, dbias, dwte, ...) are ACCUMULATED
 * (+=), so micro-batches add up; gradients of ACTIVATIONS (dinp, dqkv) are OVERWRITTEN unless the
 * op says otherwise. Every op is deterministic: the same inputs give the same bits (for a given
 * thread count), which is what makes recompute bit-identical.
 *
 * Ops are issued on the backend's compute stream (CUDA) and may return before they finish;
 * anything that returns a value to the host synchronises. */
#ifndef GT_BACKEND_H
#define GT_BACKEND_H

#include "common.h"
#include "nf4.h"
#include "config.h"

typedef enum {
    MEM_PARAMS = 0,
    MEM_FROZEN,            /* LoRA: the frozen base weights, in the compute dtype (no gradient, no optimizer state) */
    MEM_GRADS,
    MEM_OPTIMIZER,
    MEM_ACTIVATIONS,       /* kept for backward (and the step's inputs/targets/losses) */
    MEM_RECOMPUTE_STASH,   /* inputs of recomputed layers kept on the device (or the 2 prefetch buffers) */
    MEM_RECOMPUTE_SCRATCH, /* one layer's activations, shared by all recomputed layers */
    MEM_WORKSPACE,         /* activation gradients, GEMM and attention workspace */
    MEM_LOGITS,            /* LM head logits / dlogits chunk */
    MEM_HOST_OFFLOAD,      /* host (pinned on CUDA) copies of offloaded inputs */
    MEM_HOST_STAGING,      /* host (pinned on CUDA) buffer that init, loading and saving stream through */
    MEM_KV_CACHE,          /* generation: the keys and values of every decoding row (decode.h), on the device */
    MEM_COUNT
} MemCategory;

const char *mem_category_name(MemCategory c);
/* true for the categories that live on the device (all but the MEM_HOST_* ones) */
bool mem_category_on_device(MemCategory c);

typedef struct {
    uint64_t current[MEM_COUNT];
    uint64_t peak[MEM_COUNT];
    uint64_t device_current, device_peak; /* sum over device categories */
} MemTracker;

typedef struct Backend Backend;

/* GT_NF4: a frozen base weight stored 4-bit (nf4.h's units, one per HF block of the tensor); a storage
 * dtype only, never an act dtype, and it has no element size: its bytes are nf4_bytes of its units */
typedef enum { GT_F32 = 0, GT_BF16, GT_NF4 } GtDtype;
size_t gt_dtype_size(GtDtype t); /* 4 or 2; GT_NF4 has none: an internal error (the caller asks nf4.h) */
const char *gt_dtype_name(GtDtype t); /* "fp32", "bf16" or "nf4" */
/* An activation-type tensor (see the top of this file); act_t * is a void pointer. */
typedef void act_t;

/* One run of an adamw call: elements [begin, end) stepped with this weight decay (backend.h's adamw) */
typedef struct {
    size_t begin, end;
    float weight_decay;
} AdamwRun;

/* What a backend can do, as flags in BackendOps.caps: callers ask these, never the backend's name. */
enum {
    GT_CAP_DEVICE_MEMORY = 1u << 0,  /* model buffers live in device memory, apart from the host's */
    GT_CAP_NATIVE_BF16 = 1u << 1,    /* bf16 activations are computed natively (the CPU rounds, for checking) */
    GT_CAP_NCCL = 1u << 2,           /* its buffers can go over NCCL collectives (cuda/dist_nccl.cu) */
    GT_CAP_DRIVER_MEM_VIEW = 1u << 3, /* memory_info is the device driver's view (else the system's) */
    GT_CAP_POSITIONS = 1u << 4        /* the position ops take per-token positions (pos != NULL; packing) */
};

typedef struct BackendOps {
    const char *name; /* "cpu" or "cuda": for messages */
    unsigned caps;    /* GT_CAP_* */
    void (*close)(Backend *b);

    /* ---- memory (raw; use backend_alloc/backend_free, which track by category) ---- */
    void *(*dev_alloc)(Backend *b, size_t bytes); /* NULL when it does not fit */
    void (*dev_free)(Backend *b, void *p);
    void *(*host_alloc)(Backend *b, size_t bytes); /* pinned on CUDA; NULL on failure */
    void (*host_free)(Backend *b, void *p);
    /* synchronous copies; return 0 or -1 with err filled */
    int (*to_device)(Backend *b, void *dev_dst, const void *host_src, size_t bytes, GtError *err);
    int (*to_host)(Backend *b, void *host_dst, const void *dev_src, size_t bytes, GtError *err);
    void (*dev_copy)(Backend *b, void *dev_dst, const void *dev_src, size_t bytes); /* async on compute */
    void (*zero)(Backend *b, void *dev_dst, size_t bytes);                        /* async on compute */
    void (*synchronize)(Backend *b);

    /* ---- offload: copies on a copy stream, ordered after the compute issued so far ----
     * slot in {0, 1}: the double buffer. offload_wait(slot) makes the compute stream wait for the
     * last copy issued in that slot. On the CPU these are plain copies and the wait is a no-op. */
    void (*offload_to_host)(Backend *b, void *host_dst, const void *dev_src, size_t bytes, int slot);
    void (*offload_to_device)(Backend *b, void *dev_dst, const void *host_src, size_t bytes, int slot);
    void (*offload_wait)(Backend *b, int slot);

    /* ---- ops ----
     * Positions (packed rows, src/io/data_pack.c): the encoder, rope and attention ops take pos,
     * NULL (position t of each row is t: every existing caller, today's code path and bits) or
     * int[B*T] on the device: per row pos[0] = 0 and pos[t] is 0 (an example starts) or
     * pos[t-1] + 1, each < the model's positions. Token t then has position pos[t] and attends
     * to keys t-pos[t]..t only (its own example), as HF derives cu_seqlens from position_ids.
     * encoder_forward and rope_forward read only each token's own pos[t], so they also take
     * arbitrary positions < the model's positions (generation: B = 1, T = n tokens of many rows
     * at positions such as 5, 17, 3, 0); the attention ops need the packing structure above.
     * Only a backend with GT_CAP_POSITIONS is given pos != NULL. */
    /* out[B,T,C] = wte[tokens[b,t]] + wpe[p] (p = pos ? pos[b,t] : t; wpe NULL: no position
     * embedding, as Llama) */
    void (*encoder_forward)(Backend *b, act_t *out, const int *tokens, const act_t *wte,
                            const act_t *wpe, int B, int T, int C, const int *pos);
    /* dwte[tokens[i]] += dout[i], one row after another in increasing i (the bits depend on it);
     * dwpe: with pos, dwpe[pos[i]] += dout[i] in the same way; without, dwpe[t] += the sum over
     * b of dout[b, t] (accumulate; dwpe NULL: skipped) */
    void (*encoder_backward)(Backend *b, float *dwte, float *dwpe, const act_t *dout,
                             const int *tokens, int B, int T, int C, const int *pos);

    /* out = (inp - mean) * rstd * w + bias over rows of C; mean/rstd[N] saved for backward */
    void (*layernorm_forward)(Backend *b, act_t *out, float *mean, float *rstd, const act_t *inp,
                              const act_t *w, const act_t *bias, int N, int C, float eps);
    /* dinp += ..., dw += ..., dbias += ...  (dinp ACCUMULATES: it is the residual stream).
     * dw, dbias (and rmsnorm's dw, head_rmsnorm's dwq/dwk, matmul's dbias): each column's sum over
     * the N rows in a fixed order, its error at most gamma_K * (|dw| + sum_r |term_r|) with
     * K = max(32, ceil(N / 256)) + 268 and gamma_K = K 2^-24 / (1 - K 2^-24) (CUDA: fp32 partials;
     * the CPU sums in double; tests/test_ops_paramgrads.c checks it) */
    void (*layernorm_backward)(Backend *b, act_t *dinp, float *dw, float *dbias, const act_t *dout,
                               const act_t *inp, const act_t *w, const float *mean,
                               const float *rstd, int N, int C);

    /* out[N,OC] = inp[N,C] @ w[OC,C]^T + bias[OC] (bias may be NULL). ldo >= OC: the row stride
     * of out in elements (OC: contiguous); columns OC..ldo-1 are left unspecified. A stride that
     * is a multiple of 8 keeps a GEMM with an odd OC (the vocabulary) on the fast aligned path. */
    void (*matmul_forward)(Backend *b, act_t *out, const act_t *inp, const act_t *w,
                           const act_t *bias, int N, int C, int OC, int ldo);
    /* dinp[N,C] = dout @ w (overwritten; skipped if NULL); dw[OC,C] += dout^T @ inp (skipped if
     * NULL: a frozen weight);
     * dbias[OC] += colsum(dout) (skipped if NULL). ldo >= OC: the row stride of dout (its
     * columns OC..ldo-1 are never read); with dbias, ldo must be OC. */
    void (*matmul_backward)(Backend *b, act_t *dinp, float *dw, float *dbias, const act_t *dout,
                            const act_t *inp, const act_t *w, int N, int C, int OC, int ldo);
    /* The strided GEMM the adapters accumulate with (LoRA: scale * B (A x) added into the base's
     * output block, its gradients added into theirs), row-major:
     *   C[M,N] = alpha * op(A) op(B) + beta * C,  op(A) [M,K] (A stored [M,K], or [K,M] when ta),
     *   op(B) [K,N] (B stored [K,N], or [N,K] when tb),
     * row strides lda, ldb, ldc (>= the stored row length). A and B act values; C of dtype cdt:
     * the act dtype or GT_F32 (a gradient). beta 0 (C not read) or 1 (accumulate). fp32
     * accumulation, the result (alpha * sum + beta * C) rounded once to cdt. Only the M rows of N
     * columns of C are read or written (the columns up to ldc belong to others: an output block
     * of a fused weight). M, N <= 0: nothing; K 0: C = beta * C. */
    void (*gemm)(Backend *b, bool ta, bool tb, int M, int N, int K, float alpha, const act_t *A, int lda,
                 const act_t *B, int ldb, float beta, void *C, GtDtype cdt, int ldc);

    /* Causal multi-head self-attention with grouped-query heads, flash-style:
     * qkv[B,T,(NH+2*NKV)*hd] (NH query heads | NKV key heads | NKV value heads, hd channels each),
     * out[B,T,NH*hd], lse[B,NH,T] = log-sum-exp of each row's scaled scores (scale 1/sqrt(hd)).
     * Query head h reads kv head h / (NH / NKV) (NKV divides NH; NKV = NH: plain multi-head, as
     * GPT-2). window > 0: position t sees keys t-window+1..t only (Mistral's sliding window, HF's
     * mask keeps t - j < window); window 0: all of 0..t. Never materialises B*NH*T*T. */
    void (*attention_forward)(Backend *b, act_t *out, float *lse, const act_t *qkv, int B, int T,
                              int NH, int NKV, int hd, int window, const int *pos);
    /* dqkv[B,T,(NH+2*NKV)*hd] overwritten; the dK and dV of a kv head are summed over the query
     * heads of its group in a fixed order (no atomics). workspace:
     * backend_attention_workspace_floats(...) floats: the row sums of dout*out (B*NH*T), then the
     * CUDA tensor-core backward's dQ partial sums (below). */
    void (*attention_backward)(Backend *b, act_t *dqkv, float *workspace, const act_t *dout,
                               const act_t *qkv, const act_t *out, const float *lse, int B, int T,
                               int NH, int NKV, int hd, int window, const int *pos);

    /* GELU, tanh form (HF gelu_new). dinp overwritten; dinp may equal dout. */
    void (*gelu_forward)(Backend *b, act_t *out, const act_t *inp, size_t n);
    void (*gelu_backward)(Backend *b, act_t *dinp, const act_t *inp, const act_t *dout, size_t n);

    /* out = x + y (out may alias x or y) */
    void (*add)(Backend *b, act_t *out, const act_t *x, const act_t *y, size_t n);

    /* ---- fused forward ops (each equals the pair it replaces, see the notes) ----
     * OPTIONAL: a backend may leave these NULL. Callers go through backend.c's wrappers
     * (backend_residual_layernorm_forward, backend_matmul_gelu_forward,
     * backend_residual_rmsnorm_forward), which call the entry when there is one and otherwise
     * compose it from the unfused ops, bit for bit what the entry's contract promises. Every other
     * entry is mandatory. */
    /* res[N,C] = x + y (rounded to the act dtype once), then out = layernorm(res) with mean/rstd
     * saved, computed from the ROUNDED res: bit for bit add(res, x, y) followed by
     * layernorm_forward(out, mean, rstd, res, ...) on the same backend. res may alias x or y. */
    void (*residual_layernorm_forward)(Backend *b, act_t *res, act_t *out, float *mean, float *rstd,
                                       const act_t *x, const act_t *y, const act_t *w,
                                       const act_t *bias, int N, int C, float eps);
    /* pre[N,OC] = inp[N,C] @ w[OC,C]^T + bias[OC] (as matmul_forward; bias may be NULL) and
     * out_gelu = gelu(pre) (tanh form, as gelu_forward, from the ROUNDED pre). Bit for bit the
     * pair matmul_forward + gelu_forward on the same backend, except CUDA with bf16 activations,
     * where a cuBLASLt GELU epilogue may compute gelu from the fp32 pre-activation before it is
     * rounded (out_gelu then within a bf16 ulp of the pair's). */
    void (*matmul_gelu_forward)(Backend *b, act_t *out_gelu, act_t *pre, const act_t *inp,
                                const act_t *w, const act_t *bias, int N, int C, int OC);

    /* ---- Llama-family ops (RMSNorm, rotary embeddings, SwiGLU) ---- */
    /* out = inp * rstd * w over rows of C, rstd[N] = 1/sqrt(mean(inp^2) + eps) (fp32 statistics,
     * HF's LlamaRMSNorm) saved for backward */
    void (*rmsnorm_forward)(Backend *b, act_t *out, float *rstd, const act_t *inp, const act_t *w,
                            int N, int C, float eps);
    /* dinp += ..., dw += ... (dinp ACCUMULATES: it is the residual stream) */
    void (*rmsnorm_backward)(Backend *b, act_t *dinp, float *dw, const act_t *dout,
                             const act_t *inp, const act_t *w, const float *rstd, int N, int C);
    /* OPTIONAL (see the fused ops above): res = x + y (rounded once), then out = rmsnorm(res) from
     * the ROUNDED res: bit for bit add followed by rmsnorm_forward on the same backend. res may
     * alias x or y. */
    void (*residual_rmsnorm_forward)(Backend *b, act_t *res, act_t *out, float *rstd,
                                     const act_t *x, const act_t *y, const act_t *w, int N, int C,
                                     float eps);
    /* Per-head RMSNorm of the NH query and NKV key heads (Qwen3's q_norm/k_norm): inp, out
     * [N,(NH+2*NKV)*hd], out != inp. For row n and head h < NH+NKV, x = inp[n, h*hd .. h*hd+hd),
     * rstd[n*(NH+NKV)+h] = 1/sqrt(mean(x^2)+eps), out = x*rstd*w with w = wq[hd] for query heads,
     * wk[hd] for key heads (fp32 math, output rounded once; rmsnorm_forward's row arithmetic);
     * the NKV value heads are copied from inp unchanged. */
    void (*head_rmsnorm_forward)(Backend *b, act_t *out, float *rstd, const act_t *inp, const act_t *wq,
                                 const act_t *wk, int N, int NH, int NKV, int hd, float eps);
    /* dinp's q and k heads OVERWRITTEN with the gradient through the norm from dout's, its v heads
     * copied from dout (dinp may equal dout); dwq, dwk ACCUMULATE (fp32, a fixed-order column
     * reduction over rows and heads, as rmsnorm_backward's dw). inp: the forward's inp. */
    void (*head_rmsnorm_backward)(Backend *b, act_t *dinp, float *dwq, float *dwk, const act_t *dout,
                                  const act_t *inp, const act_t *wq, const act_t *wk, const float *rstd, int N,
                                  int NH, int NKV, int hd);
    /* Rotary position embedding in HF's rotate_half convention, in place on the NH query and NKV
     * key heads of qkv[B,T,(NH+2*NKV)*hd] (the value heads are untouched): for each head x and
     * i < hd/2, with c = cos[p*hd/2 + i], s = sin[p*hd/2 + i] at position p = pos0 + t
     * (pos != NULL: p = pos[b,t], pos0 ignored):
     *   x[i] <- x[i]*c - x[i+hd/2]*s,   x[i+hd/2] <- x[i+hd/2]*c + x[i]*s.
     * cos/sin: the model's table (fp32, [positions, hd/2], computed once on the host in double). */
    void (*rope_forward)(Backend *b, act_t *qkv, const float *cos, const float *sin, int B, int T,
                         int pos0, int NH, int NKV, int hd, const int *pos);
    /* the gradient through rope_forward (pos0 = 0), in place on dqkv: the inverse rotation
     * x[i] <- x[i]*c + x[i+hd/2]*s, x[i+hd/2] <- x[i+hd/2]*c - x[i]*s of the q and k heads */
    void (*rope_backward)(Backend *b, act_t *dqkv, const float *cos, const float *sin, int B, int T,
                          int NH, int NKV, int hd, const int *pos);
    /* SwiGLU: inp[N,2I] = gate | up per row; out[N,I] = silu(gate) * up, silu(g) = g/(1+exp(-g))
     * (I = n_inner; the parameter is not called I, which complex.h defines) */
    void (*swiglu_forward)(Backend *b, act_t *out, const act_t *inp, int N, int n_inner);
    /* dinp[N,2I] overwritten (d gate | d up) from dout[N,I] */
    void (*swiglu_backward)(Backend *b, act_t *dinp, const act_t *inp, const act_t *dout, int N,
                            int n_inner);

    /* Per row of logits[N,V] (row stride ld >= V; columns V..ld-1 are not read and are left
     * unspecified):
     * losses[n] = -log softmax(logits)[targets[n]], 0 where targets[n] == -100. If compute_grad:
     * logits is overwritten with dloss_scale * (softmax - onehot(target)) (zero rows for ignored
     * targets). */
    void (*crossentropy)(Backend *b, float *losses, act_t *logits, const int *targets, int N,
                         int V, int ld, float dloss_scale, int compute_grad);

    /* AdamW (torch/HF form) over runs of elements of the same tensors (param, grad, m, v, act_copy
     * all indexed alike), each run with its own weight decay (optim.c: the contiguous runs of
     * tensors in the decay and no-decay groups), in one pass: for each run and i in [begin, end),
     * decoupled weight decay p -= lr*wd*p, then m,v update and
     * p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). t >= 1. runs: a host array of n_runs
     * (>= 0) runs in increasing order, not overlapping (begin <= end); elements outside every run
     * are neither read nor written. An element's arithmetic does not depend on the runs: the same
     * bits as a call with one run around it. CUDA: one launch per GTC_ADAMW_RUNS (128) runs.
     * act_copy (NULL: none): also the new param in the act dtype, as to_act would write it, in the
     * same pass (the compute copy of the weights); may equal param under fp32. */
    void (*adamw)(Backend *b, float *param, const float *grad, float *m, float *v, act_t *act_copy,
                  const AdamwRun *runs, int n_runs, float lr, float beta1, float beta2, float eps, int t);
    /* sum of squares of x[n] in double, returned to the host (synchronises) */
    double (*sum_squares)(Backend *b, const float *x, size_t n);
    /* x *= s */
    void (*scale)(Backend *b, float *x, float s, size_t n);
    /* dst[n] (act dtype) = src[n] (fp32), rounded to nearest even; a copy when act is fp32 */
    void (*to_act)(Backend *b, act_t *dst, const float *src, size_t n);

    /* Step timing: the time from timer_start to timer_elapsed_ms on the device's timeline, in ms.
     * CUDA: events recorded on the compute stream (timer_elapsed_ms waits for its event); CPU: the
     * wall clock. */
    void (*timer_start)(Backend *b);
    double (*timer_elapsed_ms)(Backend *b);

    /* the driver's (CUDA: cudaMemGetInfo) or the system's (CPU: /proc/meminfo) view of memory
     * now, beside the tracking allocator's: free and total bytes (0 when unknown) */
    void (*memory_info)(Backend *b, uint64_t *free_bytes, uint64_t *total_bytes);

    /* ---- LoRA ops (model_blocks.c builds an adapter's forward and backward from these and the
     * GEMMs above) ---- */
    /* dst[n*ldd + j] = beta * dst[n*ldd + j] + alpha * src[n*lds + j] for n < N, j < cols: fp32
     * arithmetic on the act values, rounded to the act dtype once; beta 0: dst is not read (a
     * scaled copy). ldd >= cols, lds >= cols. dst and src do not overlap (but dst == src with
     * ldd == lds, in place, is allowed). */
    void (*axpby_rows)(Backend *b, act_t *dst, int ldd, const act_t *src, int lds, int N, int cols,
                       float alpha, float beta);
    /* Dropout with a counter-based mask (dropout.h): out[i] = gt_dropout_keep(key, base + i,
     * threshold) ? inp[i] * scale : 0 for i < n, the product in fp32 rounded once. out may alias
     * inp. base is the global index of element 0 (LoRA: the micro-batch's first row in the step's
     * batch times T times the input width), so a call over elements [base, base + n) drops what
     * one over more elements drops there. The mask is a pure function of (key, base + i), so the
     * same call gives the same bits on every backend. */
    void (*dropout)(Backend *b, act_t *out, const act_t *inp, size_t n, uint64_t key, uint64_t base,
                    uint32_t threshold, float scale);

    /* ---- DoRA ops (PEFT's use_dora; model_blocks.c's dora site). Deterministic: each output
     * element is one thread's, in a fixed order, so every backend gives the same bits. ---- */
    /* norm[i] = || W[i, :] + scale * B[i, :] A ||_2 for i < rows (W [rows, in], A [r, in],
     * B [rows, r], act values): each element and the sum of squares in double (products and sums
     * rounded separately, no FMA), the square root in double, rounded once to fp32. */
    void (*dora_norm)(Backend *b, float *norm, const act_t *W, const act_t *A, const act_t *B, int rows, int in,
                      int r, float scale);
    /* With g_i = mag_i / norm_i (fp32): out[n*ldo + i] += (g_i - 1) z[n, i] + (g_i scale) y[n, i] for
     * n < N, i < rows (z, y [N, rows] contiguous); fp32: a = g - 1, c = g * scale, then
     * o + (a z + c y), each operation rounded, the result rounded once to the act dtype. */
    void (*dora_forward)(Backend *b, act_t *out, int ldo, const act_t *z, const act_t *y, const act_t *mag,
                         const float *norm, int N, int rows, float scale);
    /* Its backward, with g, a, c as above and d = dout[n*ldd + i]: dz[n, i] = a d, dy[n, i] = c d
     * (overwritten; dz may be z and dy y, in place), and dmag[i] += (float)(sum_n d (z + scale y)
     * / norm_i), the sum over n in order in double, fp32 accumulate (the norm is a constant: no
     * gradient flows through it, as PEFT detaches it). */
    void (*dora_backward)(Backend *b, float *dmag, act_t *dz, act_t *dy, const act_t *dout, int ldd, const act_t *z,
                          const act_t *y, const act_t *mag, const float *norm, int N, int rows, float scale);
    /* ---- storage ---- */
    /* dst[n] (dst_dtype) = src[n] (src_dtype): widening is exact, narrowing rounds to nearest
     * even (as to_act), the same dtype is a copy. A weight stored in a dtype other than the act
     * dtype (arch.h's ParamTensor.dtype) is converted with this into a scratch before its GEMM.
     * dst and src do not overlap. */
    void (*convert)(Backend *b, void *dst, GtDtype dst_dtype, const void *src, GtDtype src_dtype, size_t n);
    /* dst[0 .. f->numel) (dst_dtype: fp32 or bf16) = the NF4 unit's values exactly as nf4.h's
     * nf4_dequantize_f32 / _bf16 compute them (bit for bit): a 4-bit base weight (GT_NF4) is
     * dequantized with this, unit by unit, into the scratch before its GEMM. unit is in the
     * backend's memory (device pointer), laid out by nf4_layout(f). */
    void (*dequant_nf4)(Backend *b, void *dst, GtDtype dst_dtype, const void *unit, const Nf4Format *f);
    /* ---- generation with a KV cache (src/model/decode.h) ----
     * The cache of one layer: kc, vc [slots, ctx, NKV*hd] (act dtype). N tokens of any rows are
     * processed at once (a flat batch: prompt chunks and one new token per decoding row); token i
     * belongs to cache row slot[i] (< slots) at position pos[i] (< ctx). slot and pos are int[N] in
     * the backend's memory. Within one call no two tokens share a (slot, pos). */
    /* kc[slot[i], pos[i], :] = the k heads of qkv[i] (channels NH*hd .. (NH+NKV)*hd of the row of
     * (NH+2*NKV)*hd), vc[...] = its v heads (the NKV*hd after them); a copy, no arithmetic */
    void (*kv_store)(Backend *b, act_t *kc, act_t *vc, const act_t *qkv, const int *slot, const int *pos, int N,
                     int NH, int NKV, int hd, int ctx);
    /* Attention of each token's query heads over its own row's cached keys (kv_store of this call
     * done first, so a token sees itself and the earlier tokens of its row, whether stored by this
     * call or an earlier one): for token i, query head h (kv head g = h / (NH/NKV)), keys
     * j = lo..pos[i] with lo = max(0, pos[i] - window + 1) (window 0: lo = 0):
     *   s_j = (q . k_j) / sqrt(hd)   (q: qkv[i] head h, k_j: kc[slot[i], j] head g),
     *   out[i, h*hd + c] = sum_j softmax(s)_j vc[slot[i], j, g*hd + c].
     * fp32 arithmetic on the act values, out rounded once; each (i, h) computed by one thread in
     * a fixed order (deterministic, no atomics). Cache rows are never read past pos[i]: what an
     * earlier tenant of the slot left there is not seen. */
    void (*attention_cached)(Backend *b, act_t *out, const act_t *qkv, const act_t *kc, const act_t *vc,
                             const int *slot, const int *pos, int N, int NH, int NKV, int hd, int ctx, int window);
} BackendOps;

struct Backend {
    const BackendOps *ops;
    MemTracker mem;
    char device_name[128];
    uint64_t device_free_bytes;  /* at open (driver's view on CUDA; MemAvailable on CPU) */
    uint64_t device_total_bytes;
    int num_threads;             /* CPU threads in use (CPU backend) */
    GtDtype act_dtype;           /* element type of act_t tensors; fp32 at open (backend_set_precision) */
    /* How often the host waited for the device: host_waits counts the calls of the ops that
     * synchronise (to_device, to_host, synchronize, sum_squares, timer_elapsed_ms; the CPU backend
     * counts the same calls, so the count is the caller's structure, the same on every backend);
     * syncs counts synchronize alone (both streams, the whole device). Read by the trainer's summary
     * and its tests: a micro-step adds none (model_step_async). */
    uint64_t host_waits, syncs;
    /* Device bytes the runtime still takes after open, outside the tracking allocator's categories
     * (the plan's runtime_reserve line): the CUDA backend sets cuBLAS's own workspace and an
     * allowance for the kernel modules loaded at their first launch (cuda/backend_cuda.cu names the
     * source of each figure), dist_comm_open adds NCCL's buffers; 0 on the CPU. memory_limit auto is
     * device_free_bytes minus this. */
    uint64_t runtime_reserve;
    char runtime_reserve_what[160]; /* what it holds, for the plan's line ("" when 0) */
    void *impl;                  /* backend private state */
};

/* Open the backend for the config's device (auto: CUDA when its module loads and sees a GPU, else
 * CPU). local_rank picks the GPU. */
int backend_open(Backend **out, DeviceKind kind, int local_rank, int num_threads, GtError *err);
void backend_close(Backend *b);

/* The tracking allocator: every buffer of a run goes through these. MEM_HOST_OFFLOAD and MEM_HOST_STAGING go
 * to host_alloc, the rest to dev_alloc. The memory comes back zeroed (touched at once). Returns NULL
 * with err filled (code 1) when out of memory. */
void *backend_alloc(Backend *b, MemCategory cat, size_t bytes, GtError *err);
void backend_free(Backend *b, MemCategory cat, void *p, size_t bytes);
/* convenience: allocate n floats */
float *backend_alloc_floats(Backend *b, MemCategory cat, size_t n, GtError *err);

/* Backend constructors (backend.c dispatches). The CUDA backend lives in a module loaded on demand
 * (cuda_module.h); backend_open_cuda loads it and says in one line (exit code 2) why it cannot: the
 * module missing, a CUDA library it needs absent (dlerror's text), or no device. */
int cpu_backend_create(Backend **out, int num_threads, GtError *err);
int backend_open_cuda(Backend **out, int local_rank, GtError *err);

/* The activation dtype of the ops from now on: set before the model is created. */
void backend_set_act_dtype(Backend *b, GtDtype t);
/* bytes of n act_t elements, and the pointer n elements past p */
static inline size_t backend_act_bytes(const Backend *b, size_t n) { return n * gt_dtype_size(b->act_dtype); }
static inline act_t *backend_act_at(const Backend *b, const act_t *p, size_t n) {
    return (act_t *)((char *)p + backend_act_bytes(b, n));
}
/* The attention backward's workspace (attention_backward above), in floats: the row sums D
 * (B*NH*T, rounded up to 4 floats), then, for bf16 at head sizes 64, 96 and 128 (the CUDA
 * tensor-core backward; the CPU leaves them unused), S fp32 slices of dQ, B*T*NH*hd floats each:
 * split s of the one-pass backward owns slice s alone and adds the dS K of its key units
 * (BACKEND_ATT_DQ_KEYS keys each, dealt in rounds of S as a snake: round r gives split s unit
 * r S + s when r is even, r S + S - 1 - s when odd, so that the causal work balances) into it in
 * increasing unit order; dq is their sum in s order (with S = 1 the op writes dq itself, its
 * slice holding partial sums). S comes from the shapes only (not the device), so the bits and
 * the plan do not depend on the GPU: enough blocks (S * B * NKV) for about BACKEND_ATT_DQ_BLOCKS
 * (one a multiprocessor of a large GPU), at most one split a unit, at most
 * BACKEND_ATT_DQ_SPLITS_MAX (the scratch: at most 4 x B*T*NH*hd fp32; each split more costs a
 * write and a read of one). */
#define BACKEND_ATT_DQ_KEYS 128
#define BACKEND_ATT_DQ_BLOCKS 128
#define BACKEND_ATT_DQ_SPLITS_MAX 4
static inline int backend_attention_dq_splits(int B, int T, int NKV) {
    const long units = ((long)T + BACKEND_ATT_DQ_KEYS - 1) / BACKEND_ATT_DQ_KEYS, bkv = (long)B * NKV;
    long s = bkv > 0 ? (BACKEND_ATT_DQ_BLOCKS + bkv - 1) / bkv : 1;
    if (s > units) s = units;
    if (s > BACKEND_ATT_DQ_SPLITS_MAX) s = BACKEND_ATT_DQ_SPLITS_MAX;
    return s < 1 ? 1 : (int)s;
}
static inline uint64_t backend_attention_rowsum_floats(int B, int T, int NH) {
    return ((uint64_t)B * (uint64_t)NH * (uint64_t)T + 3) / 4 * 4;
}
static inline uint64_t backend_attention_workspace_floats(GtDtype act, int B, int T, int NH, int NKV, int hd) {
    uint64_t n = backend_attention_rowsum_floats(B, T, NH);
    if (act == GT_BF16 && (hd == 64 || hd == 96 || hd == 128))
        n += (uint64_t)backend_attention_dq_splits(B, T, NKV) * (uint64_t)B * (uint64_t)T * (uint64_t)NH * (uint64_t)hd;
    return n;
}
/* Copy n act_t elements to the host as fp32 (synchronous). */
int backend_act_to_host_f32(Backend *b, float *host_dst, const act_t *dev_src, size_t n, GtError *err);
/* The same for n elements stored in dtype t. */
int backend_to_host_f32(Backend *b, float *host_dst, const void *dev_src, GtDtype t, size_t n, GtError *err);

/* The optional (fused) entries, as the model calls them: the backend's entry when it has one,
 * else the unfused ops it replaces (add + layernorm_forward, matmul_forward + gelu_forward,
 * add + rmsnorm_forward), in the one place that composes them. Contracts: the entries above. */
void backend_residual_layernorm_forward(Backend *b, act_t *res, act_t *out, float *mean, float *rstd, const act_t *x,
                                        const act_t *y, const act_t *w, const act_t *bias, int N, int C, float eps);
void backend_matmul_gelu_forward(Backend *b, act_t *out_gelu, act_t *pre, const act_t *inp, const act_t *w,
                                 const act_t *bias, int N, int C, int OC);
void backend_residual_rmsnorm_forward(Backend *b, act_t *res, act_t *out, float *rstd, const act_t *x, const act_t *y,
                                      const act_t *w, int N, int C, float eps);

/* Add bytes to b->runtime_reserve, named in runtime_reserve_what ("cuBLAS workspace 32.0 MiB"). */
void backend_reserve(Backend *b, uint64_t bytes, const char *what);
/* What memory_limit auto lets the plan's device categories take: device_free_bytes at open less
 * runtime_reserve (1 byte, so that nothing fits, when the reserve is larger). */
uint64_t backend_auto_limit(const Backend *b);

/* Which backends this build made, e.g. "cpu cuda" (the CUDA one a module: backend_describe says
 * whether it is found and loads). */
const char *backend_built_list(void);
/* How many GPUs a CUDA backend would see (0 without one, or without a loadable CUDA module). */
int backend_gpu_count(void);
/* The backends found, for --version: "cpu, cuda (PATH; 1 GPU)", "cpu, cuda (PATH; no device: WHY)" or
 * "cpu (cuda: WHY the module does not load)". Writes buf; returns it. */
const char *backend_describe(char *buf, size_t cap);

#endif
