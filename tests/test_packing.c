/* test_packing.c - data.packing: whole SFT examples packed into rows by first-fit decreasing, each
 * attending only to itself with positions from 0 (src/io/data_pack.c, the ops' per-token positions).
 *
 *   - first-fit decreasing: every example exactly once (its n-1 input tokens, targets under its
 *     labels, positions 0..n-2), rows within seq_len, the rows a naive first-fit-decreasing written
 *     here gives, deterministic, num_items the unpacked rows' count, an epoch a permutation of the
 *     rows, eval windows = rows;
 *   - the attention with positions on long rows (several key tiles, segments across them) against
 *     the double reference per segment (ops_positions.c; test_backend_ops.c runs the short rows);
 *   - a packed step's loss and every gradient equal the unpacked step's over the same examples
 *     (fp32 rounding), GPT-2 and Llama, full and LoRA, num_items equal;
 *   - recompute and offload change no bit of a packed step;
 *   - against transformers: the same examples through DataCollatorWithFlattening (one row,
 *     position_ids) in LlamaForCausalLM / GPT2LMHeadModel (tests/tools/hf_packed.py): the loss sum,
 *     num_items and every gradient;
 *   - what gtrain plan and a run print about the rows; positions that are not what the ops take
 *     are refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "backend.h"
#include "checkpoint.h"
#include "data.h"
#include "hf_fixture.h"
#include "hf_weights.h"
#include "lora_fixture.h"
#include "model.h"
#include "ops_fixture.h"
#include "recompute.h"
#include "test_backend_select.h"
#include "test_util.h"

/* ------------------------------------------------------------------ examples */

#define MAXE 400
typedef struct {
    int n;
    int len[MAXE], plen[MAXE]; /* as written (before truncation) */
    int tok[MAXE][80];
} Examples;

/* n examples of random lengths 1..maxlen (prompt 0..len), ids 1..vocab-1 (0 is the padding) */
static void make_examples(Examples *ex, int n, int maxlen, int vocab, uint64_t seed) {
    Rng r = {seed};
    ex->n = n;
    for (int e = 0; e < n; e++) {
        int len = 1 + (int)(rng_next(&r) % (uint64_t)maxlen);
        ex->len[e] = len;
        ex->plen[e] = (int)(rng_next(&r) % (uint64_t)(len + 1));
        if (ex->plen[e] == len && len > 1) ex->plen[e] = len - 1; /* mostly with a completion */
        for (int t = 0; t < len; t++) ex->tok[e][t] = 1 + (int)(rng_next(&r) % (uint64_t)(vocab - 1));
    }
}

static char *examples_jsonl(const Examples *ex, size_t *len) {
    size_t cap = (size_t)ex->n * 80 * 6 + 64, k = 0;
    char *s = malloc(cap);
    cr_assert(s);
    for (int e = 0; e < ex->n; e++) {
        k += (size_t)snprintf(s + k, cap - k, "{\"prompt_ids\": [");
        for (int t = 0; t < ex->plen[e]; t++) k += (size_t)snprintf(s + k, cap - k, "%s%d", t ? ", " : "", ex->tok[e][t]);
        k += (size_t)snprintf(s + k, cap - k, "], \"completion_ids\": [");
        for (int t = ex->plen[e]; t < ex->len[e]; t++)
            k += (size_t)snprintf(s + k, cap - k, "%s%d", t > ex->plen[e] ? ", " : "", ex->tok[e][t]);
        k += (size_t)snprintf(s + k, cap - k, "]}\n");
    }
    *len = k;
    return s;
}

static DataSource *open_examples(const Examples *ex, bool packing, int T, int vocab) {
    size_t len;
    char *s = examples_jsonl(ex, &len);
    DataSource *d = NULL;
    GtError err = {0};
    cr_assert_eq(data_open_memory(&d, "ex.jsonl", s, len, DATA_JSONL, packing, T, vocab, DATA_SPLIT_ALL, 0.0, &err), 0,
                 "%s", err.msg);
    free(s);
    return d;
}

static long count_targets(const int *tgt, size_t n) {
    long c = 0;
    for (size_t i = 0; i < n; i++) c += tgt[i] != -100;
    return c;
}

/* the input positions example e fills packed: its kept tokens (at most T+1) less one */
static int ex_size(const Examples *ex, int e, int T) {
    int n = ex->len[e] < T + 1 ? ex->len[e] : T + 1;
    return n - 1;
}

/* A naive first-fit decreasing: sizes descending (ties by index), each into the first row with room.
 * row_of[e] = its row (-1: no room needed); returns the rows. */
static int naive_ffd(const Examples *ex, int T, int *row_of) {
    int order[MAXE], room[MAXE], rows = 0, m = 0;
    for (int e = 0; e < ex->n; e++) {
        row_of[e] = -1;
        if (ex_size(ex, e, T) > 0) order[m++] = e;
    }
    for (int i = 1; i < m; i++) /* insertion sort: stable */
        for (int j = i; j > 0 && ex_size(ex, order[j], T) > ex_size(ex, order[j - 1], T); j--) {
            int x = order[j];
            order[j] = order[j - 1], order[j - 1] = x;
        }
    for (int i = 0; i < m; i++) {
        int e = order[i], s = ex_size(ex, e, T), r = 0;
        while (r < rows && room[r] < s) r++;
        if (r == rows) room[rows++] = T;
        room[r] -= s;
        row_of[e] = r;
    }
    return rows;
}

static void check_ffd(int n, int maxlen, int T, uint64_t seed) {
    const int V = 50;
    Examples *ex = malloc(sizeof *ex);
    make_examples(ex, n, maxlen, V, seed);
    DataSource *p = open_examples(ex, true, T, V), *p2 = open_examples(ex, true, T, V), *u = open_examples(ex, false, T, V);
    cr_assert(data_packed(p) && !data_packed(u));
    int row_of[MAXE];
    const int rows = naive_ffd(ex, T, row_of);
    cr_assert_eq(data_rows_per_epoch(p), (double)rows, "packed rows %.0f, naive first-fit decreasing %d",
                 data_rows_per_epoch(p), rows);
    cr_assert_eq(data_num_eval_windows(p), rows);
    const size_t N = (size_t)rows * T;
    int *tk = malloc(N * sizeof *tk), *tg = malloc(N * sizeof *tg), *ps = malloc(N * sizeof *ps);
    int *tk2 = malloc(N * sizeof *tk), *tg2 = malloc(N * sizeof *tg), *ps2 = malloc(N * sizeof *ps);
    data_fill_eval_pos(p, 0, rows, tk, tg, ps);
    data_fill_eval_pos(p2, 0, rows, tk2, tg2, ps2);
    cr_assert(memcmp(tk, tk2, N * sizeof *tk) == 0 && memcmp(tg, tg2, N * sizeof *tg) == 0 &&
              memcmp(ps, ps2, N * sizeof *ps) == 0, "packing is not deterministic");
    /* every segment is one example's, each example's exactly once, in the row the naive FFD puts it */
    int seen[MAXE] = {0}, padded = 0;
    for (int r = 0; r < rows; r++) {
        const int *k = tk + (size_t)r * T, *g = tg + (size_t)r * T, *q = ps + (size_t)r * T;
        for (int s = 0; s < T;) {
            cr_assert_eq(q[s], 0, "row %d: a segment starts at position %d", r, q[s]);
            int len = 1;
            while (s + len < T && q[s + len] == len) len++;
            cr_assert(s + len == T || q[s + len] == 0, "row %d: positions run %d then %d", r, len - 1, q[s + len]);
            if (k[s] == 0) { /* the padding: the row's tail */
                cr_assert_eq(s + len, T, "row %d: padding before an example", r);
                for (int j = 0; j < len; j++) cr_assert(k[s + j] == 0 && g[s + j] == -100, "row %d: padding trains", r);
                padded += len;
                break;
            }
            int match = -1;
            for (int e = 0; e < ex->n && match < 0; e++) {
                if (seen[e] || ex_size(ex, e, T) != len || row_of[e] != r) continue;
                bool same = true;
                for (int j = 0; j < len && same; j++) {
                    int want_tg = j + 1 >= ex->plen[e] ? ex->tok[e][j + 1] : -100;
                    same = k[s + j] == ex->tok[e][j] && g[s + j] == want_tg;
                }
                if (same) match = e;
            }
            cr_assert_geq(match, 0, "row %d, tokens %d..%d: no example of the naive FFD's row %d matches", r, s,
                          s + len - 1, r);
            seen[match] = 1;
            s += len;
        }
    }
    long used = 0;
    for (int e = 0; e < ex->n; e++) {
        cr_assert_eq(seen[e], ex_size(ex, e, T) > 0, "example %d seen %d times", e, seen[e]);
        used += ex_size(ex, e, T);
    }
    cr_assert_eq((long)N - padded, used);
    DataStats st;
    data_stats(p, &st);
    cr_assert_eq(st.packed_rows, (uint64_t)rows);
    cr_assert_eq(st.packed_tokens, (uint64_t)used);
    /* num_items: the unpacked rows' targets */
    int *utk = malloc((size_t)n * T * sizeof *utk), *utg = malloc((size_t)n * T * sizeof *utg);
    data_fill_eval(u, 0, n, utk, utg);
    cr_assert_eq(count_targets(tg, N), count_targets(utg, (size_t)n * T), "packed and unpacked targets differ");
    /* an epoch (shuffled, or in order) is a permutation of the rows */
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        data_fill_train_pos(p, 7, shuffle, 0, rows, 0, rows, tk2, tg2, ps2);
        int hit[MAXE] = {0};
        for (int i = 0; i < rows; i++)
            for (int r = 0; r < rows; r++)
                if (!hit[r] && memcmp(tk2 + (size_t)i * T, tk + (size_t)r * T, (size_t)T * sizeof *tk) == 0 &&
                    memcmp(tg2 + (size_t)i * T, tg + (size_t)r * T, (size_t)T * sizeof *tg) == 0 &&
                    memcmp(ps2 + (size_t)i * T, ps + (size_t)r * T, (size_t)T * sizeof *ps) == 0) {
                    hit[r] = 1;
                    break;
                }
        for (int r = 0; r < rows; r++) cr_assert(hit[r], "shuffle %d: row %d missing from the epoch", shuffle, r);
    }
    free(tk), free(tg), free(ps), free(tk2), free(tg2), free(ps2), free(utk), free(utg), free(ex);
    data_close(p), data_close(p2), data_close(u);
}

Test(packing, ffd_every_example_once_in_the_naive_rows) {
    check_ffd(40, 20, 16, 1);    /* several per row */
    check_ffd(150, 70, 64, 2);   /* some truncated (len > T+1), one-token examples left out */
    check_ffd(MAXE, 9, 32, 3);   /* many small ones */
}

/* ------------------------------------------------------------------ attention on long rows */

Test(packing, attention_positions_long_rows) {
    check_attention_pos(GT_F32, (AttCase){2, 150, 4, 2, 16, 0}, 80, 11);
    check_attention_pos(GT_F32, (AttCase){1, 200, 4, 1, 16, 9}, 100, 12);
    check_attention_pos(GT_F32, (AttCase){2, 130, 2, 2, 64, 0}, 140, 13); /* segments longer than a tile */
    check_attention_pos(GT_BF16, (AttCase){2, 150, 4, 2, 16, 0}, 80, 14);
    /* bf16 at head size 64, 96 and 128: CUDA's tensor-core kernels (kernels_attention_tc.cu) */
    check_attention_pos(GT_BF16, (AttCase){2, 140, 4, 2, 64, 0}, 90, 15);
    check_attention_pos(GT_BF16, (AttCase){1, 150, 2, 1, 128, 11}, 70, 16);
    check_attention_pos(GT_BF16, (AttCase){2, 100, 2, 1, 96, 0}, 30, 17); /* hs 96, short segments */
}

/* ------------------------------------------------------------------ packed step = unpacked step */

typedef struct {
    double loss;
    long items;
    float *grads;
    size_t n;
} StepOut;

static StepOut run_step(Model *m, Backend *be, const int *tok, const int *tgt, const int *pos, int rows, long items) {
    GtError err = {0};
    StepOut o = {.items = count_targets(tgt, (size_t)rows * m->T), .n = m->layout.total};
    model_zero_grads(m);
    cr_assert_eq(model_step_pos(m, tok, tgt, pos, rows, (float)(1.0 / (double)items), true, &o.loss, &err), 0, "%s",
                 err.msg);
    o.grads = malloc(o.n * sizeof *o.grads);
    cr_assert_eq(be->ops->to_host(be, o.grads, m->grads, o.n * sizeof *o.grads, &err), 0, "%s", err.msg);
    return o;
}

/* the packed rows' loss and gradients against the unpacked rows' (the same examples, the same
 * model); then recompute and offload on the packed rows: bit for bit */
static void check_packed_step(ModelDesc d, const char *what, uint64_t seed) {
    const int T = 24, V = d.vocab_size, n = 10;
    Examples *ex = malloc(sizeof *ex);
    make_examples(ex, n, 30, V, seed);
    DataSource *p = open_examples(ex, true, T, V), *u = open_examples(ex, false, T, V);
    const int rows = (int)data_rows_per_epoch(p);
    cr_assert_lt(rows, n, "%s: packing saves rows", what);
    int *utk = malloc((size_t)n * T * sizeof(int)), *utg = malloc((size_t)n * T * sizeof(int));
    int *ptk = malloc((size_t)rows * T * sizeof(int)), *ptg = malloc((size_t)rows * T * sizeof(int));
    int *pps = malloc((size_t)rows * T * sizeof(int));
    data_fill_eval(u, 0, n, utk, utg);
    data_fill_eval_pos(p, 0, rows, ptk, ptg, pps);
    const long items = count_targets(utg, (size_t)n * T);
    cr_assert_eq(count_targets(ptg, (size_t)rows * T), items, "%s: num_items differs", what);

    const RecomputePolicy pols[3] = {recompute_policy(false, 1, false, 2), recompute_policy(true, 1, false, 2),
                                     recompute_policy(true, 1, true, 2)};
    StepOut first = {0};
    for (int k = 0; k < 3; k++) {
        Backend *be = test_backend_open();
        Model *m = NULL;
        GtError err = {0};
        cr_assert_eq(model_create(&m, &d, be, n, T, pols[k], seed + 5, &err), 0, "%s", err.msg);
        StepOut pk = run_step(m, be, ptk, ptg, pps, rows, items);
        if (k == 0) {
            StepOut up = run_step(m, be, utk, utg, NULL, n, items);
            cr_assert(fabs(pk.loss - up.loss) <= 2e-6 * fabs(up.loss), "%s: packed loss sum %.9g, unpacked %.9g", what,
                      pk.loss, up.loss);
            double gmax = 0, emax = 0;
            for (size_t i = 0; i < up.n; i++) {
                gmax = fmax(gmax, fabs(up.grads[i]));
                emax = fmax(emax, fabs((double)pk.grads[i] - up.grads[i]));
            }
            cr_assert_gt(gmax, 0.0, "%s: no gradient", what);
            cr_assert_leq(emax / gmax, 2e-5, "%s: packed gradients %.3g (relative to the largest) from the unpacked",
                          what, emax / gmax);
            free(up.grads);
            first = pk;
        } else {
            cr_assert_eq(pk.loss, first.loss, "%s, recompute policy %d: the packed loss changed", what, k);
            cr_assert(memcmp(pk.grads, first.grads, pk.n * sizeof *pk.grads) == 0,
                      "%s, recompute policy %d: packed gradients changed", what, k);
            free(pk.grads);
        }
        model_free(m);
        backend_close(be);
    }
    free(first.grads);
    free(utk), free(utg), free(ptk), free(ptg), free(pps), free(ex);
    data_close(p), data_close(u);
}

Test(packing, gpt2_packed_step_equals_unpacked) { check_packed_step(lora_fix_base(false, 2), "gpt2", 21); }
Test(packing, llama_packed_step_equals_unpacked) { check_packed_step(lora_fix_base(true, 2), "llama", 22); }
Test(packing, gpt2_lora_packed_step_equals_unpacked) {
    check_packed_step(lora_fix_desc(false, 2, 4, 8.0, LORA_FIX_GPT_ALL, false, 0.0, LORA_INIT_FALSE), "gpt2 lora", 23);
}
Test(packing, llama_lora_packed_step_equals_unpacked) {
    check_packed_step(lora_fix_desc(true, 2, 4, 8.0, LORA_FIX_LLAMA_ALL, false, 0.0, LORA_INIT_FALSE), "llama lora", 24);
}

/* ------------------------------------------------------------------ against transformers */

/* every gradient block (HF names, arch_block_name) against the reference's file */
static void compare_hf_grads(Model *m, const float *g, const char *path, const char *what) {
    const ParamLayout *pl = &m->layout;
    GtError err = {0};
    HfWeights *w = NULL;
    cr_assert_eq(hf_weights_open(&w, path, &err), 0, "%s", err.msg);
    double worst = 0;
    for (int i = 0; i < pl->n_tensors; i++) {
        const ParamTensor *t = &pl->tensors[i];
        double dmax = 0, gmax = 0;
        hf_fix_grad_blocks(&m->desc, t, g, w, what, 0, 0, &dmax, &gmax, NULL, NULL);
        cr_assert(gmax > 0, "%s: %s: transformers' gradient is zero everywhere", what, t->name);
        cr_assert(dmax <= 1e-4 * gmax, "%s: gradient of %s differs by %.3g (largest |gradient| %.3g, %.2g of it)", what,
                  t->name, dmax, gmax, dmax / gmax);
        worst = fmax(worst, dmax / gmax);
    }
    hf_weights_close(w);
    cr_log_info("%s: every gradient within %.1e of transformers' (relative to each tensor's largest)", what, worst);
}

/* gtrain's packed rows (several examples a row, several rows) against DataCollatorWithFlattening's
 * one flattened row with position_ids in transformers: the loss sum, num_items, every gradient */
static void against_flattening(const char *config, const char *what) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT is not set (run through make test)");
    test_require_refs();
    char dir[128], cmd[4096];
    test_scratch_make(dir, sizeof dir, "gt_pack_hf");
    const char *ref = test_join(dir, "ref");
    hf_fix_make(root, dir, config, ref, "--seed 5 --dtype f32 --init-std 0.1 --bias-std 0.1");
    ModelDesc d;
    GtError err = {0};
    cr_assert_eq(model_desc_load(&d, ref, &err), 0, "%s", err.msg);

    const int T = 24, n = 12;
    Examples *ex = malloc(sizeof *ex);
    make_examples(ex, n, 34, d.vocab_size, 41);
    char *lines = malloc(80 * 8 * n), *at = lines;
    for (int e = 0; e < n; e++) {
        at += sprintf(at, "%d", ex->plen[e]);
        for (int t = 0; t < ex->len[e]; t++) at += sprintf(at, " %d", ex->tok[e][t]);
        at += sprintf(at, "\n");
    }
    test_write_file(test_join(dir, "examples.txt"), lines, (size_t)(at - lines));
    free(lines);
    DataSource *p = open_examples(ex, true, T, d.vocab_size);
    const int rows = (int)data_rows_per_epoch(p);
    int *tk = malloc((size_t)rows * T * sizeof(int)), *tg = malloc((size_t)rows * T * sizeof(int));
    int *ps = malloc((size_t)rows * T * sizeof(int));
    data_fill_eval_pos(p, 0, rows, tk, tg, ps);
    const long items = count_targets(tg, (size_t)rows * T);

    Backend *be = test_backend_open();
    Model *m = NULL;
    cr_assert_eq(model_create(&m, &d, be, rows, T, recompute_policy(false, 1, false, d.n_layer), 1, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(checkpoint_load_weights(m, ref, &err), 0, "%s", err.msg);
    double loss_sum = 0;
    model_zero_grads(m);
    cr_assert_eq(model_step_pos(m, tk, tg, ps, rows, 1.0f, true, &loss_sum, &err), 0, "%s", err.msg);
    float *g = malloc(m->layout.total * sizeof *g);
    cr_assert_eq(be->ops->to_host(be, g, m->grads, m->layout.total * sizeof *g, &err), 0, "%s", err.msg);

    snprintf(cmd, sizeof cmd, "cd '%s' && " PY " '%s/tests/tools/hf_packed.py' ref examples.txt --seq-len %d "
             "--grads grads/model.safetensors", dir, root, T);
    char *out = test_sh_output(false, "%s", cmd);
    cr_assert_eq((long)hf_fix_after(out, "items "), items, "%s: num_items %ld, transformers' %ld", what, items,
                 (long)hf_fix_after(out, "items "));
    const double want = hf_fix_after(out, "loss_sum ");
    cr_assert(fabs(loss_sum - want) <= 1e-5 * fabs(want), "%s: packed loss sum %.9g, transformers' %.9g", what,
              loss_sum, want);
    free(out);
    compare_hf_grads(m, g, test_join(dir, "grads/model.safetensors"), what);
    cr_log_info("%s: %d examples in %d packed rows of %d, %ld targets, loss sum within %.1e of transformers'", what, n,
                rows, T, items, fabs(loss_sum - want) / fabs(want));
    free(g), free(tk), free(tg), free(ps), free(ex);
    model_free(m);
    backend_close(be);
    data_close(p);
    test_scratch_remove(dir);
}

Test(packing, llama_equals_transformers_flattening, .timeout = 120) {
    against_flattening("tiny-llama.json", "Llama GQA 4/2 packed");
}
Test(packing, gpt2_equals_transformers_flattening, .timeout = 120) { against_flattening(NULL, "GPT-2 packed"); }

/* ------------------------------------------------------------------ what plan and a run say */

/* `gtrain plan` and a run's first lines: how many rows the examples pack into and the padding
 * left, the numbers the data reader gives */
Test(packing, plan_and_run_say_rows_and_padding, .timeout = 120) {
    const char *bin = getenv("GTRAIN_BIN"), *root = getenv("GTRAIN_ROOT");
    if (!bin || !root) cr_skip_test("GTRAIN_BIN / GTRAIN_ROOT are not set (run through make test)");
    char dir[128], cfg[4096];
    test_scratch_make(dir, sizeof dir, "gt_pack_plan");
    Examples *ex = malloc(sizeof *ex);
    make_examples(ex, 30, 30, 256, 51);
    size_t len;
    char *text = examples_jsonl(ex, &len);
    test_write_file(test_join(dir, "train.jsonl"), text, len);
    free(text);
    DataSource *p = open_examples(ex, true, 24, 256);
    DataStats st;
    data_stats(p, &st);
    char want[160];
    snprintf(want, sizeof want, "packed into %llu rows of 24 (first-fit decreasing, no cross-talk), %.1f%% padding left",
             (unsigned long long)st.packed_rows, 100.0 * (1.0 - (double)st.packed_tokens / ((double)st.packed_rows * 24)));
    data_close(p);
    free(ex);
    snprintf(cfg, sizeof cfg,
             "model: %s/tests/fixtures/hf_configs/tiny-llama.json\n"
             "data: {train: %s, format: jsonl, seq_len: 24, packing: true}\n"
             "per_device_train_batch_size: 2\nmax_steps: 1\nsave_steps: 0\neval_steps: 0\noutput_dir: %s\n",
             root, test_join(dir, "train.jsonl"), test_join(dir, "out"));
    test_write_file(test_join(dir, "run.yaml"), cfg, strlen(cfg));
    for (int k = 0; k < 2; k++) {
        char *out = test_sh_output(true, "'%s' %s --config '%s' --set device=cpu", bin, k ? "" : "plan",
                                   test_join(dir, "run.yaml"));
        cr_assert(strstr(out, want), "%s: no \"%s\" in:\n%s", k ? "run" : "plan", want, out);
        free(out);
    }
    test_scratch_remove(dir);
}

/* positions that are not what the ops take (a row not starting at 0, a jump) are refused with
 * one line before any op runs, never read past the tables */
Test(packing, bad_positions_refused) {
    ModelDesc d = lora_fix_base(true, 1);
    const int T = 8;
    Backend *be = test_backend_open();
    Model *m = NULL;
    GtError err = {0};
    cr_assert_eq(model_create(&m, &d, be, 1, T, recompute_policy(false, 1, false, 1), 3, &err), 0, "%s", err.msg);
    int tok[8] = {1, 2, 3, 4, 5, 6, 7, 8}, tgt[8] = {2, 3, 4, 5, 6, 7, 8, -100};
    const int bad[2][8] = {{1, 2, 3, 4, 5, 6, 7, 8}, {0, 1, 2, 0, 1, 9, 0, 1}};
    for (int k = 0; k < 2; k++) {
        double s = 0;
        err = (GtError){0};
        cr_assert_eq(model_step_pos(m, tok, tgt, bad[k], 1, 1.0f, true, &s, &err), -1, "bad positions %d accepted", k);
        cr_assert(strstr(err.msg, "position") && !strchr(err.msg, '\n'), "%s", err.msg);
    }
    model_free(m);
    backend_close(be);
}
