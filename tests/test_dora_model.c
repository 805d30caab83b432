/* test_dora_model.c - DoRA (use_dora) models, suite dora_model: recompute (every layer, kept on the
 * device or offloaded to the host) gives the loss and every adapter gradient (the magnitudes'
 * included) bit for bit as without it, with lora_dropout > 0 (the same masks regenerated) and
 * without; the layout holds each site's lora_A, lora_B and a magnitude of the block's output rows;
 * the DoRA kind's init_from_base (adapter.h) sets the magnitude to the row norms of W + s B A, so with B = 0 (PEFT's default
 * init) the model's loss is the frozen base's (a LoRA model with B = 0, computed separately). The
 * agreement with PEFT itself (losses, gradient norms, 5 AdamW steps, the saved files) is
 * test_lora_io.c's, the merge test_merge.c's, the ops' test_ops_dora.c's. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "adapter.h"
#include "lora.h"
#include "lora_fixture.h"
#include "model.h"
#include "test_backend_select.h"

enum { R = 3, BATCH = 2, SEQ = 6 };

typedef struct {
    Backend *be;
    Model *m;
    int tok[BATCH * SEQ], tgt[BATCH * SEQ];
    long items;
} Fix;

static Fix fix_open(ModelDesc d, RecomputePolicy pol, uint64_t seed, bool random_adapters) {
    Fix f = {0};
    GtError err = {0};
    f.be = test_backend_open();
    cr_assert_eq(model_create(&f.m, &d, f.be, BATCH, SEQ, pol, 9, &err), 0, "%s", err.msg);
    Model *m = f.m;
    uint64_t s = seed;
    /* a random frozen base (norm weights around 1); with random_adapters A, B and the magnitudes
     * all random (magnitudes in [0.5, 1.5]) */
    float *h = malloc(m->base_layout.total * sizeof *h), *p = NULL;
    cr_assert_not_null(h);
    if (random_adapters) {
        p = malloc(m->layout.total * sizeof *p);
        cr_assert_not_null(p);
    }
    lora_fix_dora_weights(m, &s, h, p);
    free(h), free(p);
    lora_fix_tokens(f.tok, f.tgt, BATCH * SEQ, d.vocab_size, seed ^ 0x5151, 5);
    for (int i = 0; i < BATCH * SEQ; i++) f.items += f.tgt[i] >= 0;
    return f;
}

static void fix_close(Fix *f) {
    model_free(f->m);
    backend_close(f->be);
}

static float *grads_host(const Fix *f) {
    GtError err = {0};
    const size_t n = f->m->layout.total;
    float *g = malloc(n * sizeof *g);
    cr_assert_not_null(g);
    cr_assert_eq(f->be->ops->to_host(f->be, g, f->m->grads, n * sizeof *g, &err), 0, "%s", err.msg);
    return g;
}

static ModelDesc dora_desc(bool llama, double p) {
    ModelDesc d = lora_fix_desc(llama, 2, R, 6.0, llama ? LORA_FIX_LLAMA_ALL : LORA_FIX_GPT_ALL, false, p, LORA_INIT_TRUE);
    d.adapter.dora = true;
    return d;
}

static void check_recompute(bool llama, double p) {
    const RecomputePolicy pols[3] = {recompute_policy(false, 1, false, 2), recompute_policy(true, 1, false, 2),
                                     recompute_policy(true, 1, true, 2)};
    float *g0 = NULL;
    double l0 = 0;
    for (int k = 0; k < 3; k++) {
        Fix f = fix_open(dora_desc(llama, p), pols[k], 600, true);
        GtError err = {0};
        double ls = 0;
        model_zero_grads(f.m);
        cr_assert_eq(model_step(f.m, f.tok, f.tgt, BATCH, (float)(1.0 / f.items), true, &ls, &err), 0, "%s", err.msg);
        float *g = grads_host(&f);
        bool mag_grad = false; /* the magnitudes get gradients */
        for (int i = 0; i < f.m->layout.n_tensors; i++) {
            const ParamTensor *t = &f.m->layout.tensors[i];
            for (size_t e = 0; t->ndim == 1 && e < t->numel; e++) mag_grad |= g[t->offset + e] != 0.0f;
        }
        cr_assert(mag_grad, "no magnitude has a gradient");
        if (k == 0) {
            g0 = g, l0 = ls;
        } else {
            cr_assert_eq(ls, l0, "policy %d: loss %.9g, without recompute %.9g", k, ls, l0);
            cr_assert(memcmp(g, g0, f.m->layout.total * sizeof *g) == 0, "policy %d: gradients differ", k);
            free(g);
        }
        fix_close(&f);
    }
    free(g0);
}

Test(dora_model, llama_recompute_and_offload_are_bit_identical) { check_recompute(true, 0.0); }
Test(dora_model, gpt2_recompute_and_offload_are_bit_identical) { check_recompute(false, 0.0); }
Test(dora_model, llama_recompute_with_dropout_is_bit_identical) { check_recompute(true, 0.1); }
Test(dora_model, gpt2_recompute_with_dropout_is_bit_identical) { check_recompute(false, 0.1); }

/* the layout: per site lora_A [r, in], lora_B [rows, r], lora_magnitude_vector [rows] under PEFT's key
 * (part-major per layer: the magnitudes after every site's A and B) */
Test(dora_model, layout_has_a_magnitude_per_output_row) {
    ModelDesc d = dora_desc(true, 0.0);
    ParamLayout pl;
    lora_layout_init(&pl, &d);
    int mags = 0;
    for (int i = 0; i < pl.n_tensors; i++) {
        const ParamTensor *t = &pl.tensors[i];
        if (t->ndim != 1) continue;
        mags++;
        int in, out;
        lora_fix_module_dims(&d, lora_tensor_module(&d, i), &in, &out);
        cr_assert_eq(t->shape[0], out, "%s: %lld rows, the module has %d", t->name, (long long)t->shape[0], out);
        cr_assert(strstr(t->name, ".lora_magnitude_vector") && !strstr(t->name, ".weight"), "%s", t->name);
        char a_name[sizeof t->name];
        snprintf(a_name, sizeof a_name, "%.*s.lora_A.weight", (int)(strstr(t->name, ".lora_magnitude_vector") - t->name),
                 t->name);
        const int ia = lora_entry_tensor(&d, lora_tensor_entry(&d, i), PEFT_PART_A); /* part-major (lora.h) */
        cr_assert(ia >= 0 && strcmp(pl.tensors[ia].name, a_name) == 0 && i == lora_entry_tensor(&d, lora_tensor_entry(&d, i), PEFT_PART_M),
                  "%s: not its entry's part PEFT_PART_M", t->name);
    }
    cr_assert_eq(mags, 7 * d.n_layer);
    cr_assert_eq(pl.total, (size_t)lora_num_params(&d));
    param_layout_free(&pl);
}

/* B = 0 and m = ||W + s B A|| = ||W||: the base's output (a plain LoRA model with B = 0, which the
 * LoRA suites check is the base) */
static void check_init_is_base(bool llama) {
    Fix f = fix_open(dora_desc(llama, 0.0), recompute_policy(false, 1, false, 2), 700, false);
    ModelDesc dl = dora_desc(llama, 0.0);
    dl.adapter.dora = false;
    Fix g = fix_open(dl, recompute_policy(false, 1, false, 2), 700, false);
    GtError err = {0};
    double lf = 0, lg = 0;
    cr_assert_eq(model_step(f.m, f.tok, f.tgt, BATCH, 1.0f, false, &lf, &err), 0, "%s", err.msg);
    cr_assert_eq(model_step(g.m, g.tok, g.tgt, BATCH, 1.0f, false, &lg, &err), 0, "%s", err.msg);
    cr_assert(fabs(lf - lg) <= 1e-5 * fabs(lg), "DoRA at init %.9g, the base %.9g", lf, lg);
    fix_close(&f);
    fix_close(&g);
}

Test(dora_model, llama_init_is_the_base_model) { check_init_is_base(true); }
Test(dora_model, gpt2_init_is_the_base_model) { check_init_is_base(false); }
