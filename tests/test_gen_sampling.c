/* test_gen_sampling.c - sampled generation (generate.h), suite gen_sampling:
 *   - the warpers: gen_pick_token's draws on random logits against transformers' own
 *     TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper applied in HF's order in float64
 *     (tests/tools/hf_generate.py warp): 200000 draws per case never fall outside the tokens HF keeps,
 *     every kept token of probability >= 1e-4 is drawn, and each token's frequency is within 5 standard
 *     deviations (+ 2 draws) of HF's probability; greedy takes the lowest id of a tie (torch.argmax);
 *   - reproducibility: with a fixed seed, 40 prompts of different lengths sampled on a tiny Llama give
 *     the same ids whether run 32 slots at a time, one at a time (each alone in the cache), 7 slots with
 *     another prefill chunk (other slots, other neighbours), and prompt 0 alone in a run of its own;
 *     another seed gives other generations, and sampling is not greedy.
 * The example's stream is seeded by (seed, the prompt's index in the run's array): a prompt keeps its
 * generation in any batch as long as it keeps its index (generate.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_fixture.h"
#include "hf_fixture.h"
#include "test_util.h"

#define V 64
#define DRAWS 200000

typedef struct {
    double temperature;
    int top_k;
    double top_p;
} Warp;

static const Warp WARPS[] = {{1.0, 0, 1.0}, {0.7, 0, 1.0}, {1.0, 10, 1.0}, {1.3, 0, 0.9},
                             {0.8, 20, 0.8}, {1.0, 1, 1.0}, {2.0, 50, 0.5}, {0.5, 0, 0.95}};
#define N_WARPS (int)(sizeof WARPS / sizeof WARPS[0])

Test(gen_sampling, warpers_draw_as_transformers_warpers, .timeout = 300) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT is not set (run through make test)");
    test_require_refs();
    char dir[128];
    test_scratch_make(dir, sizeof dir, "gt_gen_warp");
    /* one row of random logits per case: N(0, 3), printed with 9 digits (the floats exactly) */
    static float logits[N_WARPS][V];
    uint64_t s = 0x2545f4914f6cdd1dull;
    for (int w = 0; w < N_WARPS; w++) {
        char path[64];
        snprintf(path, sizeof path, "logits%d.txt", w);
        FILE *f = fopen(test_join(dir, path), "w");
        cr_assert(f);
        for (int v = 0; v < V; v++) {
            logits[w][v] = (float)(3.0 * test_normal(&s));
            fprintf(f, "%.9g%c", logits[w][v], v + 1 == V ? '\n' : ' ');
        }
        fclose(f);
    }
    GenOptions o = {.do_sample = true, .max_new_tokens = 1};
    double worst_sigma = 0;
    for (int w = 0; w < N_WARPS; w++) {
        char *out = test_sh_output(false, "cd '%s' && " PY " '%s/tests/tools/hf_generate.py' warp logits%d.txt "
                                   "--temperature %.17g --top-k %d --top-p %.17g", dir, root, w, WARPS[w].temperature,
                                   WARPS[w].top_k, WARPS[w].top_p);
        double p[V];
        const char *q = strstr(out, "p 0: ");
        cr_assert(q, "no \"p 0:\" in:\n%s", out);
        q += 5;
        for (int v = 0; v < V; v++) {
            char *end;
            p[v] = strtod(q, &end);
            cr_assert(end != q, "case %d: %d probabilities expected:\n%s", w, V, out);
            q = end;
        }
        free(out);
        o.temperature = WARPS[w].temperature, o.top_k = WARPS[w].top_k, o.top_p = WARPS[w].top_p;
        long count[V] = {0};
        uint64_t rng = gen_rng_seed(77, w);
        for (long k = 0; k < DRAWS; k++) {
            const int t = gen_pick_token(logits[w], V, &o, &rng);
            cr_assert(t >= 0 && t < V, "case %d: token %d", w, t);
            count[t]++;
        }
        int kept = 0;
        for (int v = 0; v < V; v++) {
            const double f = (double)count[v] / DRAWS, sd = sqrt(p[v] * (1 - p[v]) / DRAWS);
            if (p[v] == 0)
                cr_assert_eq(count[v], 0, "case %d (T %g, top_k %d, top_p %g): token %d drawn %ld times, transformers "
                             "removes it", w, o.temperature, o.top_k, o.top_p, v, count[v]);
            else kept++;
            if (p[v] >= 1e-4)
                cr_assert(count[v] > 0, "case %d: token %d (transformers' probability %.3g) never drawn", w, v, p[v]);
            cr_assert(fabs(f - p[v]) <= 5 * sd + 2.0 / DRAWS, "case %d (T %g, top_k %d, top_p %g): token %d drawn %.5f of "
                      "the time, transformers' probability %.5f (%.1f standard deviations)", w, o.temperature, o.top_k,
                      o.top_p, v, f, p[v], sd > 0 ? fabs(f - p[v]) / sd : INFINITY);
            if (sd > 0) worst_sigma = fmax(worst_sigma, fabs(f - p[v]) / sd);
        }
        cr_log_info("gen_sampling: case %d (T %g, top_k %d, top_p %g): %d tokens kept as transformers keeps them", w,
                    o.temperature, o.top_k, o.top_p, kept);
    }
    cr_log_info("gen_sampling: %d cases x %d draws, frequencies within %.2f standard deviations of transformers' "
                "warped probabilities", N_WARPS, DRAWS, worst_sigma);
    test_scratch_remove(dir);
}

/* greedy: the argmax, the lowest id of a tie (torch.argmax returns the first maximal index) */
Test(gen_sampling, greedy_takes_the_lowest_id_of_a_tie) {
    float l[V];
    uint64_t s = 99;
    for (int v = 0; v < V; v++) l[v] = (float)test_normal(&s);
    l[11] = l[40] = l[57] = 9.0f;
    GenOptions o = {.do_sample = false, .temperature = 1, .top_p = 1};
    uint64_t rng = 5, before = rng;
    cr_assert_eq(gen_pick_token(l, V, &o, &rng), 11);
    cr_assert_eq(rng, before, "greedy advanced the stream");
}

#define N_SAMP 40
#define SAMP_NEW 24

static void sample_run(const char *mdir, const GenFixPrompts *pr, int slots, int chunk, uint64_t seed, bool sample,
                       GenFixOut *o) {
    GenFixModel g;
    GtError err = {0};
    cr_assert_eq(gen_fix_open(&g, mdir, NULL, GT_F32, slots, 128, chunk, &err), 0, "%s", err.msg);
    GenOptions opt = {.max_new_tokens = SAMP_NEW, .do_sample = sample, .temperature = 0.9, .top_k = 40, .top_p = 0.95,
                      .seed = seed, .prefill_chunk = chunk};
    gen_fix_out_init(o, pr->n);
    cr_assert_eq(gen_fix_generate(&g, pr, &opt, o, &err), 0, "%s", err.msg);
    cr_assert_eq(o->done, pr->n);
    gen_fix_close(&g);
}

static bool same(const GenFixOut *a, long i, const GenFixOut *b, long j) {
    return a->n[i] == b->n[j] && memcmp(a->ids[i], b->ids[j], (size_t)a->n[i] * sizeof(int)) == 0;
}

Test(gen_sampling, fixed_seed_is_independent_of_batch_slots_and_neighbours, .timeout = 300) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT is not set (run through make test)");
    test_require_refs();
    char dir[128];
    test_scratch_make(dir, sizeof dir, "gt_gen_samp");
    free(test_sh_output(false, "cd '%s' && " PY " '%s/tests/tools/hf_models.py' make '%s/tests/fixtures/hf_configs/"
                        "tiny-llama.json' m --seed 11 --init-std 0.1 >/dev/null", dir, root, root));
    const char *mdir = test_join(dir, "m");
    int lens[N_SAMP];
    uint64_t s = 31337;
    for (int i = 0; i < N_SAMP; i++) s ^= s << 13, s ^= s >> 7, s ^= s << 17, lens[i] = 1 + (int)(s % 60);
    GenFixPrompts pr, one;
    gen_fix_prompts(&pr, lens, N_SAMP, 256, 4242);
    gen_fix_prompts(&one, lens, 1, 256, 4242); /* prompt 0 alone */
    cr_assert_eq(memcmp(one.ids[0], pr.ids[0], (size_t)lens[0] * sizeof(int)), 0);
    GenFixOut b32, b1, b7, alone, seed2, greedy;
    sample_run(mdir, &pr, 32, 16, 1234, true, &b32);
    sample_run(mdir, &pr, 1, 512, 1234, true, &b1);
    sample_run(mdir, &pr, 7, 5, 1234, true, &b7);
    sample_run(mdir, &one, 1, 16, 1234, true, &alone);
    sample_run(mdir, &pr, 32, 16, 1235, true, &seed2);
    sample_run(mdir, &pr, 32, 16, 1234, false, &greedy);
    int other_seed = 0, not_greedy = 0;
    for (long i = 0; i < N_SAMP; i++) {
        cr_assert_eq(b32.n[i], SAMP_NEW, "prompt %ld: %d tokens", i, b32.n[i]);
        cr_assert(same(&b32, i, &b1, i), "prompt %ld (%d tokens): 32 slots and one slot at a time differ", i, lens[i]);
        cr_assert(same(&b32, i, &b7, i), "prompt %ld (%d tokens): 32 slots and 7 slots (chunk 5) differ", i, lens[i]);
        other_seed += !same(&b32, i, &seed2, i);
        not_greedy += !same(&b32, i, &greedy, i);
    }
    cr_assert(same(&b32, 0, &alone, 0), "prompt 0: in a batch of 40 and alone differ");
    cr_assert(other_seed >= N_SAMP * 3 / 4, "seeds 1234 and 1235 differ on only %d of %d prompts", other_seed, N_SAMP);
    cr_assert(not_greedy >= N_SAMP * 3 / 4, "sampling differs from greedy on only %d of %d prompts", not_greedy, N_SAMP);
    cr_log_info("gen_sampling: %d prompts x %d tokens equal at 32 slots, 1 slot, 7 slots (chunk 5) and alone; seed "
                "1235 differs on %d, greedy on %d", N_SAMP, SAMP_NEW, other_seed, not_greedy);
    GenFixOut *all[] = {&b32, &b1, &b7, &alone, &seed2, &greedy};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) gen_fix_out_free(all[k]);
    gen_fix_prompts_free(&pr), gen_fix_prompts_free(&one);
    test_scratch_remove(dir);
}
