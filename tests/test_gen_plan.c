/* test_gen_plan.c - the generation plan (decode.h), suite gen_plan: what model_create_decode and
 * kv_cache_create really allocate (the tracking allocator's high-water mark, category by category)
 * equals plan_decode_memory, for GPT-2 and a GQA Llama, plain, with LoRA and with an NF4 base, under
 * fp32 and bf16, at several (tokens per call, slots, ctx); the cache's bytes are the keys and values of
 * every layer's kv heads (and, with RoPE, the cache's rotary table) written here from the model's dims; and plan_decode_fit takes the largest
 * slot count whose plan fits: at a limit of exactly that plan's device total it takes it, one byte
 * less takes one slot fewer. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "decode.h"
#include "lora.h"
#include "lora_fixture.h"
#include "plan.h"
#include "test_backend_select.h"

/* L layers' keys and values of slots x ctx positions: 2 x L x slots x ctx x n_kv_head x head_dim act
 * values; with RoPE (the Llama family) the cache's own rotary table too: cos and sin, ctx x head_dim / 2
 * floats each */
static uint64_t kv_from_dims(const ModelDesc *d, int slots, int ctx, GtDtype act) {
    const uint64_t rope = d->arch == ARCH_LLAMA ? 2ull * (uint64_t)ctx * (uint64_t)(d->head_dim / 2) * sizeof(float) : 0;
    return 2ull * (uint64_t)d->n_layer * (uint64_t)slots * (uint64_t)ctx * (uint64_t)d->n_kv_head *
           (uint64_t)d->head_dim * (act == GT_BF16 ? 2u : 4u) + rope;
}

static ModelDesc desc_of(bool llama, int kind) {
    if (kind == 0) return lora_fix_base(llama, 2);
    ModelDesc d = lora_fix_desc(llama, 2, 4, 8.0, llama ? LORA_FIX_LLAMA_ALL : LORA_FIX_GPT_ALL, false, 0.0,
                                LORA_INIT_TRUE);
    if (kind == 2) d.quant = (BaseQuant){.nf4 = true, .blocksize = 64, .nested = true};
    return d;
}

static const char *KIND[3] = {"plain", "LoRA r 4", "NF4 + LoRA r 4"};

Test(gen_plan, planned_equals_measured_decode_model_and_cache, .timeout = 120) {
    const int shapes[][3] = {{1, 1, 8}, {16, 3, 32}, {5, 8, 17}, {32, 32, 32}}; /* n_tokens, slots, ctx */
    int cases = 0;
    for (int llama = 0; llama <= 1; llama++)
    for (int kind = 0; kind < 3; kind++)
    for (int act = GT_F32; act <= GT_BF16; act++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const GtDtype a = (GtDtype)act;
        const int n_tokens = shapes[s][0], slots = shapes[s][1], ctx = shapes[s][2];
        ModelDesc d = desc_of(llama, kind);
        char what[160];
        snprintf(what, sizeof what, "%s %s act %s n_tokens %d slots %d ctx %d", llama ? "llama" : "gpt2", KIND[kind],
                 gt_dtype_name(a), n_tokens, slots, ctx);
        MemPlan p;
        cr_assert_eq(plan_decode_memory(&p, &d, n_tokens, slots, ctx, a), 0, "%s", what);
        cr_assert_eq(p.bytes[MEM_KV_CACHE], kv_from_dims(&d, slots, ctx, a), "%s: the cache planned %llu bytes, %llu from "
                     "the dims", what, (unsigned long long)p.bytes[MEM_KV_CACHE],
                     (unsigned long long)kv_from_dims(&d, slots, ctx, a));
        cr_assert_eq(kv_cache_bytes(&d, slots, ctx, a), p.bytes[MEM_KV_CACHE], "%s", what);
        Backend *be = test_backend_open();
        backend_set_act_dtype(be, a);
        Model *m = NULL;
        KvCache *kv = NULL;
        GtError err = {0};
        cr_assert_eq(model_create_decode(&m, &d, be, n_tokens, slots, &err), 0, "%s: %s", what, err.msg);
        cr_assert_eq(kv_cache_create(&kv, m, slots, ctx, &err), 0, "%s: %s", what, err.msg);
        cr_assert_eq(kv_cache_slots(kv), slots);
        cr_assert_eq(kv_cache_ctx(kv), ctx);
        for (int c = 0; c < MEM_COUNT; c++)
            cr_assert_eq(p.bytes[c], be->mem.peak[c], "%s: category %d planned %llu, measured %llu", what, c,
                         (unsigned long long)p.bytes[c], (unsigned long long)be->mem.peak[c]);
        cr_assert_eq(p.device_total, be->mem.device_peak, "%s: device total planned %llu, measured peak %llu", what,
                     (unsigned long long)p.device_total, (unsigned long long)be->mem.device_peak);
        kv_cache_free(kv);
        model_free(m);
        backend_close(be);
        cases++;
    }
    cr_log_info("gen_plan: %d cases, planned = measured in every category", cases);
}

/* the device total of a generation plan of slots (tokens per call max(chunk, slots)) */
static uint64_t total_of(const ModelDesc *d, int chunk, int slots, int ctx, GtDtype act) {
    MemPlan p;
    cr_assert_eq(plan_decode_memory(&p, d, chunk > slots ? chunk : slots, slots, ctx, act), 0);
    return p.device_total;
}

Test(gen_plan, fit_takes_the_largest_slots_that_fit, .timeout = 60) {
    const int chunk = 8, ctx = 32, max_slots = 64;
    int cases = 0;
    for (int llama = 0; llama <= 1; llama++)
    for (int kind = 0; kind < 3; kind++)
    for (int act = GT_F32; act <= GT_BF16; act++) {
        const GtDtype a = (GtDtype)act;
        ModelDesc d = desc_of(llama, kind);
        uint64_t prev = 0;
        for (int s = 1; s <= max_slots; s++) { /* the plan grows with the slots (so "largest that fits" is a boundary) */
            const uint64_t t = total_of(&d, chunk, s, ctx, a);
            cr_assert(t > prev, "slots %d: %llu bytes, not more than %d slots' %llu", s, (unsigned long long)t, s - 1,
                      (unsigned long long)prev);
            prev = t;
        }
        const int probe[] = {1, 2, 7, 8, 9, 33, max_slots};
        for (size_t k = 0; k < sizeof probe / sizeof probe[0]; k++) {
            const int s = probe[k];
            const uint64_t t = total_of(&d, chunk, s, ctx, a);
            cr_assert_eq(plan_decode_fit(&d, chunk, max_slots, ctx, a, t), s, "%s %s %s: at %llu bytes (%d slots' plan)",
                         llama ? "llama" : "gpt2", KIND[kind], gt_dtype_name(a), (unsigned long long)t, s);
            cr_assert_eq(plan_decode_fit(&d, chunk, max_slots, ctx, a, t - 1), s - 1, "%s %s %s: at %llu bytes (one "
                         "below %d slots' plan)", llama ? "llama" : "gpt2", KIND[kind], gt_dtype_name(a),
                         (unsigned long long)(t - 1), s);
            cases++;
        }
        /* max_slots caps it */
        cr_assert_eq(plan_decode_fit(&d, chunk, 5, ctx, a, total_of(&d, chunk, max_slots, ctx, a)), 5);
    }
    cr_log_info("gen_plan: plan_decode_fit at %d boundaries (exactly a plan's total, and one byte less)", cases);
}
