/* test_autofit.c - auto-fit and refusal against the memory plan's own table. */
#include <criterion/criterion.h>
#include <string.h>

#include "plan.h"

static ModelDesc desc6(void) {
    ModelDesc d = {.n_layer = 6, .n_head = 4, .n_embd = 64, .n_inner = 256, .vocab_size = 512, .n_positions = 128,
                   .layer_norm_epsilon = 1e-5, .tie_word_embeddings = true};
    return d;
}

static RunConfig auto_config(int effective) {
    RunConfig c;
    config_defaults(&c);
    snprintf(c.config_path, sizeof c.config_path, "run.yaml");
    c.per_device_train_batch_size = 0; /* auto */
    c.train_batch_size = effective;
    c.data.seq_len = 128;
    return c;
}

static uint64_t need(const ModelDesc *d, int B, int A, int every, bool off) {
    MemPlan p;
    plan_memory(&p, d, B, A, 1, 128, recompute_policy(every > 0, every ? every : 1, off, d->n_layer), false, GT_F32);
    return p.device_total;
}

Test(autofit, no_limit_takes_the_whole_batch_in_one_micro_batch) {
    ModelDesc d = desc6();
    RunConfig c = auto_config(32);
    MemPlan p;
    GtError err = {0};
    cr_assert_eq(plan_resolve(&p, &d, &c, 1, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(p.B, 32);
    cr_assert_eq(p.A, 1);
    cr_assert_eq(recompute_count(&p.policy), 0);
    cr_assert_eq(p.effective_batch, 32);
}

Test(autofit, a_budget_that_fits_micro_batch_4_without_recompute_gets_exactly_that) {
    ModelDesc d = desc6();
    RunConfig c = auto_config(32);
    uint64_t budget = need(&d, 4, 8, 0, false);
    cr_assert(need(&d, 8, 4, 0, false) > budget, "precondition: micro-batch 8 must not fit");
    MemPlan p;
    GtError err = {0};
    cr_assert_eq(plan_resolve(&p, &d, &c, 1, budget, &err), 0, "%s", err.msg);
    cr_assert_eq(p.B, 4);
    cr_assert_eq(p.A, 8);
    cr_assert_eq(recompute_count(&p.policy), 0);
    cr_assert_eq(p.effective_batch, 32);
    cr_assert(p.device_total <= budget);
}

Test(autofit, a_tighter_budget_recomputes_the_fewest_layers_and_keeps_the_largest_micro_batch) {
    ModelDesc d = desc6();
    RunConfig c = auto_config(32);
    /* below no-recompute at B=4, enough for B=4 with layers 0 and 3 recomputed (every_n_layers 3;
     * one recomputed layer alone saves nothing: its scratch is as big as what it frees) */
    uint64_t budget = need(&d, 4, 8, 3, false);
    cr_assert(need(&d, 4, 8, 0, false) > budget);
    MemPlan p;
    GtError err = {0};
    cr_assert_eq(plan_resolve(&p, &d, &c, 1, budget, &err), 0, "%s", err.msg);
    cr_assert_eq(p.effective_batch, 32, "the effective batch must come out exactly as asked");
    cr_assert(p.device_total <= budget);
    cr_assert_geq(p.B, 4, "micro-batches of 4+ are preferred over fewer recomputed layers at B < 4");
    /* optimality, checked against the table: nothing with fewer recomputed layers and B >= 4 fits */
    int k = recompute_count(&p.policy);
    for (int B = 4; B <= 32; B *= 2)
        for (int every = 0; every <= 6; every++)
            for (int off = 0; off <= (every > 0); off++) {
                RecomputePolicy pol = recompute_policy(every > 0, every ? every : 1, off, 6);
                if (recompute_count(&pol) < k) cr_assert(need(&d, B, 32 / B, every, off) > budget);
                if (recompute_count(&pol) == k && !off && !p.policy.offload && B > p.B)
                    cr_assert(need(&d, B, 32 / B, every, off) > budget);
            }
}

Test(autofit, an_impossible_budget_is_refused_with_exit_2) {
    ModelDesc d = desc6();
    RunConfig c = auto_config(32);
    MemPlan p;
    GtError err = {0};
    uint64_t params_only = model_desc_num_params(&d) * 4;
    cr_assert_eq(plan_resolve(&p, &d, &c, 1, params_only, &err), -1);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT);
    cr_assert(strstr(err.msg, "run.yaml") && strstr(err.msg, "train_batch_size"), "%s", err.msg);
}

Test(autofit, a_fixed_layout_over_the_limit_is_refused_with_what_would_fit) {
    ModelDesc d = desc6();
    RunConfig c = auto_config(32);
    c.per_device_train_batch_size = 32;
    c.gradient_accumulation_steps = 1;
    uint64_t budget = need(&d, 4, 8, 0, false);
    MemPlan p;
    GtError err = {0};
    cr_assert_eq(plan_resolve(&p, &d, &c, 1, budget, &err), -1);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT);
    cr_assert(strstr(err.msg, "memory_limit") && strstr(err.msg, "per_device_train_batch_size 4 x gradient_accumulation_steps 8"),
              "%s", err.msg);
}
