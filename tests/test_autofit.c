/* test_autofit.c - auto-fit and refusal against the memory plan's own table; the plan's 64-bit
 * overflow checks. */
#include <criterion/criterion.h>
#include <string.h>

#include "plan.h"

static ModelDesc desc6(void) {
    ModelDesc d = {.n_layer = 6, .n_head = 4, .n_embd = 64, .n_inner = 256, .vocab_size = 512, .n_positions = 128,
                   .layer_norm_epsilon = 1e-5, .tie_word_embeddings = true};
    model_desc_defaults(&d);
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

/* ---------------------------------------------------------------- 64-bit overflow */

/* The largest model model_desc accepts, at the largest micro-batch and sequence a config accepts:
 * the kept activations alone are at least n_layer x B x T x n_embd x 4 bytes = 2^10 x 2^16 x 2^20 x
 * 2^16 x 2^2 = 2^64, one past uint64. */
static ModelDesc desc_huge(void) {
    ModelDesc d = {.n_layer = 1024, .n_head = 1024, .n_embd = 65536, .n_inner = 262144, .vocab_size = 256,
                   .n_positions = 1 << 20, .layer_norm_epsilon = 1e-5, .tie_word_embeddings = true};
    model_desc_defaults(&d);
    snprintf(d.path, sizeof d.path, "huge.json");
    return d;
}

Test(plan, a_plan_over_64_bits_is_an_overflow_not_a_small_total) {
    ModelDesc d = desc_huge();
    const int B = 65536, T = 1 << 20;
    cr_assert((long double)d.n_layer * B * T * d.n_embd * 4 >= 18446744073709551616.0L, "precondition: >= 2^64");
    MemPlan p;
    int rc = plan_memory(&p, &d, B, 1, 1, T, recompute_policy(false, 1, false, d.n_layer), false, GT_F32);
    cr_assert_eq(rc, -1);
    cr_assert_not_null(p.overflow);
    cr_expect_str_eq(p.overflow, "activations");
    cr_expect_eq(p.device_total, UINT64_MAX, "an overflowed plan must not fit any limit");

    RunConfig c = auto_config(0);
    c.per_device_train_batch_size = B;
    c.data.seq_len = T;
    GtError err = {0};
    /* with a limit (2^50, the largest memory_limit) and without one */
    const uint64_t limits[] = {1ull << 50, 0};
    for (int i = 0; i < 2; i++) {
        memset(&err, 0, sizeof err);
        cr_assert_eq(plan_resolve(&p, &d, &c, 1, limits[i], &err), -1, "an overflowed plan passed limit %llu",
                     (unsigned long long)limits[i]);
        cr_expect_eq(err.code, GT_EXIT_BAD_INPUT);
        cr_expect_null(strchr(err.msg, '\n'));
        cr_expect(strstr(err.msg, "run.yaml: memory plan") && strstr(err.msg, "overflow") &&
                      strstr(err.msg, "activations") && strstr(err.msg, "huge.json"),
                  "%s", err.msg);
    }
    /* auto-fit over the same model skips the layouts that overflow (65536 x 1 without recompute is
     * the one above) and picks one that really fits */
    RunConfig a = auto_config(65536);
    a.data.seq_len = T;
    memset(&err, 0, sizeof err);
    cr_assert_eq(plan_resolve(&p, &d, &a, 1, 1ull << 50, &err), 0, "%s", err.msg);
    cr_expect_null(p.overflow);
    cr_expect_leq(p.device_total, 1ull << 50);
    cr_expect_eq(p.effective_batch, 65536);
    cr_expect_gt(recompute_count(&p.policy), 0);
}

/* 64 layers at B 64777, T 2^20: the true device total is 2^64 + 140.7 TiB (the totals at B 64775
 * and 64776 stay under 2^64, 16776838.74 and 16777097.74 TiB: one more row is 259 TiB more), which
 * wrapped to 140.7 TiB would pass a 1024 TiB memory_limit (B 64776 did, before the attention's
 * workspace shared the MLP gradient's buffer) */
Test(plan, a_plan_that_wraps_below_the_limit_is_refused) {
    ModelDesc d = desc_huge();
    d.n_layer = 64;
    RunConfig c = auto_config(0);
    c.per_device_train_batch_size = 64777;
    c.data.seq_len = 1 << 20;
    MemPlan p;
    GtError err = {0};
    cr_assert_eq(plan_resolve(&p, &d, &c, 1, 1024ull << 40, &err), -1, "a wrapped plan of %llu bytes passed",
                 (unsigned long long)p.device_total);
    cr_expect_eq(err.code, GT_EXIT_BAD_INPUT);
    cr_expect(strstr(err.msg, "overflow"), "%s", err.msg);
}

Test(plan, the_same_model_at_a_small_batch_still_plans) {
    ModelDesc d = desc_huge();
    MemPlan p;
    cr_assert_eq(plan_memory(&p, &d, 1, 1, 1, 1024, recompute_policy(false, 1, false, d.n_layer), false, GT_F32), 0);
    cr_expect_null(p.overflow);
    /* at least its fp32 weights, gradients and two AdamW moments: 16 bytes a parameter */
    cr_expect_geq(p.device_total, 16 * model_desc_num_params(&d));
    cr_expect_lt(p.device_total, UINT64_MAX);
}

Test(plan, effective_batch_and_tokens_per_step_overflow_are_errors) {
    ModelDesc d = desc6();
    MemPlan p;
    RecomputePolicy none = recompute_policy(false, 1, false, d.n_layer);
    /* 2^16 x 2^20 ranks x 2^20 = 2^56 rows, x 128 tokens = 2^63 > LONG_MAX */
    cr_assert_eq(plan_memory(&p, &d, 65536, 1 << 20, 1 << 20, 128, none, false, GT_F32), -1);
    cr_expect_str_eq(p.overflow, "tokens per step");
    /* 2^16 x (2^31 - 1) ranks x 2^20 > 2^63 rows */
    cr_assert_eq(plan_memory(&p, &d, 65536, 1 << 20, 2147483647, 128, none, false, GT_F32), -1);
    cr_expect_str_eq(p.overflow, "effective batch");
    RunConfig c = auto_config(0);
    c.per_device_train_batch_size = 65536;
    c.gradient_accumulation_steps = 1 << 20;
    GtError err = {0};
    cr_assert_eq(plan_resolve(&p, &d, &c, 1 << 20, 0, &err), -1);
    cr_expect(strstr(err.msg, "tokens per step") && strstr(err.msg, "overflow"), "%s", err.msg);
    /* one rank: 2^56 tokens fit */
    cr_expect_eq(plan_memory(&p, &d, 65536, 1 << 20, 1, 128, none, false, GT_F32), 0);
    cr_expect_eq(p.tokens_per_step, 1L << 43);
}

/* The advice of a refusal searches the layouts of the same effective batch: per_rank rows up to
 * 65536 x 2^20 = 2^36, which must not mean 2^36 candidate micro-batches (it used to). */
Test(plan, the_advice_for_the_largest_layout_is_quick, .timeout = 20) {
    ModelDesc d = desc6();
    RunConfig c = auto_config(0);
    c.per_device_train_batch_size = 65536;
    c.gradient_accumulation_steps = 1 << 20;
    MemPlan p;
    GtError err = {0};
    cr_assert_eq(plan_resolve(&p, &d, &c, 1, 1, &err), -1);
    cr_expect(strstr(err.msg, "memory_limit") && strstr(err.msg, "nothing fits"), "%s", err.msg);
}

/* auto-fit only picks layouts a config could spell: B <= 65536, A <= 2^20 */
Test(autofit, an_effective_batch_with_no_valid_split_is_refused) {
    ModelDesc d = desc6();
    RunConfig c = auto_config(16777213); /* a prime above 2^20: only 1 x 16777213, A out of bounds */
    MemPlan p;
    GtError err = {0};
    cr_assert_eq(plan_resolve(&p, &d, &c, 1, 0, &err), -1, "accepted B %d x A %d", p.B, p.A);
    cr_expect_eq(err.code, GT_EXIT_BAD_INPUT);
    cr_expect(strstr(err.msg, "train_batch_size") && strstr(err.msg, "16777213"), "%s", err.msg);
    /* 2^24 = 16 x 2^20 splits; with no limit the largest micro-batch, 65536 x 256 */
    c = auto_config(1 << 24);
    cr_assert_eq(plan_resolve(&p, &d, &c, 1, 0, &err), 0, "%s", err.msg);
    cr_expect_eq(p.B, 65536);
    cr_expect_eq(p.A, 256);
    cr_expect_eq(p.effective_batch, 1 << 24);
}
