/* test_optim.c - schedules, clipping and AdamW's parameter groups against hand-computed values. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"
#include "test_backend_select.h"

Test(schedule, warmup_then_each_decay_matches_hand_computed_values) {
    /* warmup 10 of 110 steps: decay runs over 100 steps */
    cr_assert_float_eq(lr_multiplier(LR_LINEAR, 0, 10, 110, 0), 0.0, 1e-12);
    cr_assert_float_eq(lr_multiplier(LR_LINEAR, 5, 10, 110, 0), 0.5, 1e-12);
    cr_assert_float_eq(lr_multiplier(LR_LINEAR, 10, 10, 110, 0), 1.0, 1e-12);
    cr_assert_float_eq(lr_multiplier(LR_LINEAR, 60, 10, 110, 0), 0.5, 1e-12);
    cr_assert_float_eq(lr_multiplier(LR_LINEAR, 110, 10, 110, 0), 0.0, 1e-12);
    cr_assert_float_eq(lr_multiplier(LR_COSINE, 5, 10, 110, 0), 0.5, 1e-12);
    cr_assert_float_eq(lr_multiplier(LR_COSINE, 35, 10, 110, 0), 0.5 * (1 + cos(M_PI / 4)), 1e-12); /* 0.853553 */
    cr_assert_float_eq(lr_multiplier(LR_COSINE, 60, 10, 110, 0), 0.5, 1e-12);
    cr_assert_float_eq(lr_multiplier(LR_COSINE, 110, 10, 110, 0), 0.0, 1e-12);
    cr_assert_float_eq(lr_multiplier(LR_COSINE_MIN_LR, 60, 10, 110, 0.1), 0.55, 1e-12);
    cr_assert_float_eq(lr_multiplier(LR_COSINE_MIN_LR, 110, 10, 110, 0.1), 0.1, 1e-12);
    cr_assert_float_eq(lr_multiplier(LR_CONSTANT, 3, 10, 110, 0), 0.3, 1e-12);
    cr_assert_float_eq(lr_multiplier(LR_CONSTANT, 100, 10, 110, 0), 1.0, 1e-12);
    cr_assert_float_eq(lr_multiplier(LR_CONSTANT, 0, 0, 110, 0), 1.0, 1e-12); /* no warmup */
}

static Model *tiny_model(Backend *be) {
    ModelDesc d = {.n_layer = 1, .n_head = 1, .n_embd = 4, .n_inner = 8, .vocab_size = 8, .n_positions = 4,
                   .layer_norm_epsilon = 1e-5, .tie_word_embeddings = true};
    model_desc_defaults(&d);
    Model *m = NULL;
    GtError err = {0};
    cr_assert_eq(model_create(&m, &d, be, 1, 4, recompute_policy(false, 1, false, 1), 1, &err), 0, "%s", err.msg);
    return m;
}

static void fill(Model *m, float *dev, float v) {
    float *h = malloc(m->layout.total * sizeof *h);
    for (size_t i = 0; i < m->layout.total; i++) h[i] = v;
    GtError err = {0};
    cr_assert_eq(m->be->ops->to_device(m->be, dev, h, m->layout.total * sizeof *h, &err), 0);
    free(h);
}

Test(optim, global_norm_and_clipping_by_hand) {
    Backend *be = test_backend_open();
    Model *m = tiny_model(be);
    float *g = calloc(m->layout.total, sizeof *g);
    g[0] = 3.0f, g[m->layout.total - 1] = 4.0f; /* norm 5 */
    GtError err = {0};
    cr_assert_eq(be->ops->to_device(be, m->grads, g, m->layout.total * sizeof *g, &err), 0);
    double norm = grad_global_norm(m);
    cr_assert_float_eq(norm, 5.0, 1e-12);
    cr_assert_float_eq(clip_grads(m, norm, 10.0), 1.0, 0, "below max_norm: untouched");
    double coef = clip_grads(m, norm, 1.0);
    cr_assert_float_eq(coef, 1.0 / (5.0 + 1e-6), 1e-12); /* torch's clip_grad_norm_ */
    cr_assert_eq(be->ops->to_host(be, g, m->grads, m->layout.total * sizeof *g, &err), 0);
    cr_assert_float_eq(g[0], 0.6f, 1e-6);
    cr_assert_float_eq(g[m->layout.total - 1], 0.8f, 1e-6);
    free(g);
    model_free(m);
    backend_close(be);
}

Test(optim, adamw_decays_weights_but_not_biases_or_layernorm) {
    Backend *be = test_backend_open();
    Model *m = tiny_model(be);
    fill(m, m->params, 1.0f);
    fill(m, m->grads, 0.5f);
    RunConfig cfg = {.adam_beta1 = 0.9, .adam_beta2 = 0.999, .adam_epsilon = 1e-8, .weight_decay = 0.1};
    adamw_step(m, 0.1, &cfg, 1);
    float *p = malloc(m->layout.total * sizeof *p);
    GtError err = {0};
    cr_assert_eq(be->ops->to_host(be, p, m->params, m->layout.total * sizeof *p, &err), 0);
    /* t=1: m = 0.05, v = 0.00025; m/(1-b1) = 0.5, sqrt(v/(1-b2)) = 0.5: the step is lr*0.5/(0.5+eps).
     * decay group: p*(1 - lr*wd) first = 0.99, then - 0.1 -> 0.89; no-decay group: 0.9 */
    const double step = 0.1 * 0.5 / (0.5 + 1e-8);
    int checked_decay = 0, checked_plain = 0;
    for (int i = 0; i < m->layout.n_tensors; i++) {
        const ParamTensor *t = &m->layout.tensors[i];
        bool is_bias = strstr(t->name, ".bias") != NULL, is_ln = strstr(t->name, "ln_") != NULL;
        double want = (is_bias || is_ln) ? 1.0 - step : 0.99 - step;
        cr_assert_eq(t->decay, !(is_bias || is_ln), "%s: decay group", t->name);
        for (size_t k = 0; k < t->numel; k++)
            cr_assert_float_eq(p[t->offset + k], want, 1e-6, "%s[%zu] = %.8f, want %.8f", t->name, k, p[t->offset + k], want);
        if (t->decay)
            checked_decay++;
        else
            checked_plain++;
    }
    cr_assert(checked_decay >= 6 && checked_plain >= 10);
    free(p);
    model_free(m);
    backend_close(be);
}
