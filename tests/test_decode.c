/* test_decode.c - model_decode (a flat batch of tokens over a KV cache) against the training
 * forward of each row's whole prefix (attention_forward, checked against transformers elsewhere):
 * rows of different lengths fed in interleaved chunks, a slot reused by a shorter row over stale
 * keys, GPT-2, Llama with grouped-query heads, Mistral's sliding window, Qwen2's biases, fp32 and
 * bf16. And the plan of a generation run against what it allocates. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "plan.h"
#include "test_backend_select.h"

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}
static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0; }

static ModelDesc desc_of(int which) {
    ModelDesc d = {.n_layer = 2, .n_head = 4, .n_embd = 32, .n_inner = 48, .vocab_size = 61, .n_positions = 40,
                   .layer_norm_epsilon = 1e-5, .tie_word_embeddings = which != 1, .rope_theta = 500.0};
    if (which == 0) {
        d.n_inner = 128;
        snprintf(d.model_type, sizeof d.model_type, "gpt2");
    } else {
        d.arch = ARCH_LLAMA;
        d.n_kv_head = which == 3 ? 4 : 2;
        d.sliding_window = which == 2 ? 5 : 0;
        d.qkv_bias = which == 3;
        snprintf(d.model_type, sizeof d.model_type, "%s", which == 2 ? "mistral" : which == 3 ? "qwen2" : "llama");
    }
    model_desc_defaults(&d);
    return d;
}

static void set_params(Backend *be, Model *m, uint64_t seed) {
    const ParamLayout *pl = &m->layout;
    float *h = malloc(pl->total * sizeof *h);
    cr_assert(h);
    uint64_t s = seed;
    for (size_t i = 0; i < pl->total; i++) h[i] = (float)(0.4 * (2 * rng_uniform(&s) - 1));
    for (int i = 0; i < pl->n_tensors; i++)
        if (pl->tensors[i].ndim == 1)
            for (size_t k = 0; k < pl->tensors[i].numel; k++) h[pl->tensors[i].offset + k] += 1.0f;
    GtError err = {0};
    cr_assert_eq(be->ops->to_device(be, m->params, h, pl->total * sizeof *h, &err), 0, "%s", err.msg);
    model_params_changed(m);
    free(h);
}

#define NSEQ 5
#define SLOTS 3
#define CTX 24

/* rows of lengths len[] through SLOTS slots (a row takes a slot freed by an earlier one), fed in
 * chunks of 1..4 tokens interleaved with the other rows', every position's logits checked */
static void decode_matches_full(int which, GtDtype act) {
    ModelDesc d = desc_of(which);
    Backend *be = test_backend_open();
    backend_set_act_dtype(be, act);
    Model *m = NULL, *full = NULL;
    KvCache *kv = NULL;
    GtError err = {0};
    cr_assert_eq(model_create_decode(&m, &d, be, 8, 8, &err), 0, "%s", err.msg);
    cr_assert_eq(model_create_inference(&full, &d, be, CTX, &err), 0, "%s", err.msg);
    cr_assert_eq(kv_cache_create(&kv, m, SLOTS, CTX, &err), 0, "%s", err.msg);
    set_params(be, m, 7);
    set_params(be, full, 7);
    const int V = d.vocab_size, len[NSEQ] = {17, 6, 24, 3, 11};
    int tok[NSEQ][CTX], fed[NSEQ] = {0}, slot_of[NSEQ], busy[SLOTS] = {-1, -1, -1}, next = 0, done = 0;
    uint64_t s = 99;
    for (int q = 0; q < NSEQ; q++)
        for (int t = 0; t < len[q]; t++) tok[q][t] = (int)(rng_next(&s) % (uint64_t)V);
    DecodeToken batch[8];
    int seq_of[8];
    float *got = malloc((size_t)8 * V * sizeof *got), *want = malloc((size_t)V * sizeof *want);
    cr_assert(got && want);
    double worst = 0;
    while (done < NSEQ) {
        for (int sl = 0; sl < SLOTS && next < NSEQ; sl++)
            if (busy[sl] < 0) busy[sl] = next, slot_of[next++] = sl;
        int n = 0;
        for (int sl = 0; sl < SLOTS; sl++) {
            const int q = busy[sl];
            if (q < 0) continue;
            int take = 1 + (int)(rng_next(&s) % 4);
            if (take > len[q] - fed[q]) take = len[q] - fed[q];
            if (take > 8 - n) take = 8 - n;
            for (int t = 0; t < take; t++, n++) {
                batch[n] = (DecodeToken){tok[q][fed[q] + t], sl, fed[q] + t, true};
                seq_of[n] = q;
            }
            fed[q] += take;
        }
        cr_assert_eq(model_decode(m, kv, batch, n, got, &err), 0, "%s", err.msg);
        for (int i = 0; i < n; i++) {
            const int q = seq_of[i], p = batch[i].pos;
            cr_assert_eq(model_forward_rows(full, tok[q], 0, p + 1, want, &err), 0, "%s", err.msg);
            double diff = 0, big = 0;
            for (int v = 0; v < V; v++) diff = fmax(diff, fabs((double)got[(size_t)i * V + v] - want[v])), big = fmax(big, fabs(want[v]));
            /* fp32: both sum the same terms in another order; bf16: both round each activation once,
             * so they may differ by a few of its ulps */
            const double tol = act == GT_BF16 ? 0.05 * big : 2e-5 * big;
            cr_assert(diff <= tol, "%s %s: row %d (slot %d) position %d: logits differ by %.3g (largest %.3g)",
                      d.model_type, gt_dtype_name(act), q, slot_of[q], p, diff, big);
            worst = fmax(worst, diff / big);
        }
        for (int sl = 0; sl < SLOTS; sl++)
            if (busy[sl] >= 0 && fed[busy[sl]] == len[busy[sl]]) busy[sl] = -1, done++;
    }
    cr_log_info("%s %s: worst logit difference %.3g of the largest", d.model_type, gt_dtype_name(act), worst);
    free(got), free(want);
    kv_cache_free(kv);
    model_free(m);
    model_free(full);
    backend_close(be);
}

Test(decode, gpt2_rows_in_chunks_match_the_full_forward) { decode_matches_full(0, GT_F32); }
Test(decode, llama_gqa_rows_in_chunks_match_the_full_forward) { decode_matches_full(1, GT_F32); }
Test(decode, mistral_window_rows_in_chunks_match_the_full_forward) { decode_matches_full(2, GT_F32); }
Test(decode, qwen2_bias_rows_in_chunks_match_the_full_forward) { decode_matches_full(3, GT_F32); }
Test(decode, llama_bf16_rows_in_chunks_match_the_full_forward) { decode_matches_full(1, GT_BF16); }

/* the plan of a generation run is what model_create_decode and kv_cache_create allocate */
Test(decode, plan_equals_what_is_allocated) {
    for (int which = 0; which < 4; which++)
        for (int a = 0; a < 2; a++) {
            const GtDtype act = a ? GT_BF16 : GT_F32;
            ModelDesc d = desc_of(which);
            Backend *be = test_backend_open();
            backend_set_act_dtype(be, act);
            Model *m = NULL;
            KvCache *kv = NULL;
            GtError err = {0};
            const int n_tokens = 13, slots = 5, ctx = 31;
            cr_assert_eq(model_create_decode(&m, &d, be, n_tokens, slots, &err), 0, "%s", err.msg);
            cr_assert_eq(kv_cache_create(&kv, m, slots, ctx, &err), 0, "%s", err.msg);
            MemPlan p;
            cr_assert_eq(plan_decode_memory(&p, &d, n_tokens, slots, ctx, act), 0);
            for (int c = 0; c < MEM_COUNT; c++)
                cr_expect_eq(p.bytes[c], be->mem.peak[c], "%s %s: %s planned %llu, allocated %llu", d.model_type,
                             gt_dtype_name(act), mem_category_name((MemCategory)c), (unsigned long long)p.bytes[c],
                             (unsigned long long)be->mem.peak[c]);
            cr_expect_gt(p.bytes[MEM_KV_CACHE], 0);
            kv_cache_free(kv);
            model_free(m);
            backend_close(be);
        }
}
