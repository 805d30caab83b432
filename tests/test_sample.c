/* test_sample.c - sampling against the independent double-precision GPT-2 (ref_gpt.c): the
 * incremental forward's next-token distribution for every way of splitting a sequence, greedy
 * tokens through the window slide (in process and through `gtrain sample`), the kept keys and
 * values dropped when they go stale, and the sample command line's one-line errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "checkpoint.h"
#include "ref_gpt.h"
#include "sample.h"
#include "test_backend_select.h"
#include "test_util.h"

enum { L = 2, NH = 2, C = 16, V = 32, P = 12 };

static ModelDesc small_desc(void) {
    ModelDesc d = {.n_layer = L, .n_head = NH, .n_embd = C, .n_inner = 4 * C, .vocab_size = V, .n_positions = P,
                   .layer_norm_epsilon = 1e-5, .tie_word_embeddings = true};
    model_desc_defaults(&d);
    return d;
}

/* uniform(-0.3, 0.3) weights (layernorm weights around 1) into m, and the same values as doubles */
static double *set_random_params(Model *m, uint64_t seed) {
    const size_t n = m->layout.total;
    float *h = malloc(n * sizeof *h);
    double *p = malloc(n * sizeof *p);
    cr_assert(h && p);
    uint64_t s = seed;
    for (int i = 0; i < m->layout.n_tensors; i++) {
        const ParamTensor *t = &m->layout.tensors[i];
        bool lnw = strstr(t->name, "ln_") && strstr(t->name, ".weight");
        for (size_t k = 0; k < t->numel; k++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            double u = (double)(s >> 11) / 9007199254740992.0;
            h[t->offset + k] = (float)((lnw ? 1.0 : 0.0) + 0.3 * (2 * u - 1));
        }
    }
    for (size_t k = 0; k < n; k++) p[k] = h[k];
    GtError err = {0};
    cr_assert_eq(m->be->ops->to_device(m->be, m->params, h, n * sizeof *h, &err), 0, "%s", err.msg);
    model_params_changed(m);
    free(h);
    return p;
}

/* the reference's log-probabilities of every next token after seq[0..len): row v of a batch of
 * V copies of seq has the single target v at the last position, so its loss is -log p(v) */
static void ref_next_logprobs(const ModelDesc *d, const ParamLayout *pl, const double *p, const int *seq, int len,
                              double *out) {
    int *tok = malloc((size_t)V * len * sizeof *tok), *tgt = malloc((size_t)V * len * sizeof *tgt);
    cr_assert(tok && tgt);
    for (int v = 0; v < V; v++)
        for (int t = 0; t < len; t++) {
            tok[v * len + t] = seq[t];
            tgt[v * len + t] = t == len - 1 ? v : -100;
        }
    for (int v = 0; v < V; v++) {
        long count = 0;
        out[v] = -ref_gpt_loss_sum(d, pl, p, tok + v * len, tgt + v * len, 1, len, &count);
        cr_assert_eq(count, 1);
    }
    free(tok), free(tgt);
}

/* log-softmax of float logits, in double */
static void log_softmax(const float *logits, double *out) {
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
    for (int v = 0; v < V; v++) sum += exp(logits[v] - mx);
    for (int v = 0; v < V; v++) out[v] = logits[v] - mx - log(sum);
}

/* Every token of gen[n_gen], drawn greedily after prompt[n_prompt], is the reference's most likely
 * next token given the last P tokens before it (ties within 1e-5 accepted). */
static void assert_greedy_matches_reference(const ModelDesc *d, const ParamLayout *pl, const double *p,
                                            const int *prompt, int n_prompt, const int *gen, int n_gen) {
    int *seq = malloc((size_t)(n_prompt + n_gen) * sizeof *seq);
    cr_assert(seq);
    memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    memcpy(seq + n_prompt, gen, (size_t)n_gen * sizeof *seq);
    double lp[V];
    for (int i = 0; i < n_gen; i++) {
        int end = n_prompt + i, start = end > P ? end - P : 0;
        ref_next_logprobs(d, pl, p, seq + start, end - start, lp);
        int best = 0;
        for (int v = 1; v < V; v++)
            if (lp[v] > lp[best]) best = v;
        cr_assert(gen[i] >= 0 && gen[i] < V && lp[gen[i]] >= lp[best] - 1e-5,
                  "token %d: sampled %d (log p %.6f), the reference's argmax is %d (log p %.6f)", i, gen[i],
                  gen[i] >= 0 && gen[i] < V ? lp[gen[i]] : NAN, best, lp[best]);
    }
    free(seq);
}

/* "a,b,c\n" -> ids; returns the count */
static int parse_id_list(const char *s, int *ids, int cap) {
    int n = 0;
    while (*s && *s != '\n') {
        char *end;
        long v = strtol(s, &end, 10);
        cr_assert(end != s && n < cap, "not an id list: \"%s\"", s);
        ids[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* the sequence split into chunks of these sizes, one model_forward_rows call each */
static void check_splits(Model *m, const double *p, const int *seq, const int *chunks, int n_chunks) {
    GtError err = {0};
    float logits[V];
    double got[V], want[V];
    int pos = 0;
    for (int c = 0; c < n_chunks; c++) {
        cr_assert_eq(model_forward_rows(m, seq + pos, pos, chunks[c], logits, &err), 0, "%s", err.msg);
        pos += chunks[c];
        log_softmax(logits, got);
        ref_next_logprobs(&m->desc, &m->layout, p, seq, pos, want);
        for (int v = 0; v < V; v++)
            cr_assert(fabs(got[v] - want[v]) <= 1e-4, "after %d tokens (chunk %d): log p(%d) %.7f, reference %.7f", pos, c,
                      v, got[v], want[v]);
    }
}

Test(sample, incremental_forward_matches_the_reference_for_every_split, .timeout = 60) {
    Backend *be = test_backend_open();
    ModelDesc d = small_desc();
    Model *m = NULL;
    GtError err = {0};
    cr_assert_eq(model_create_inference(&m, &d, be, P, &err), 0, "%s", err.msg);
    cr_assert(model_keeps_kv(m));
    double *p = set_random_params(m, 11);
    const int seq[P] = {3, 17, 9, 0, 31, 5, 5, 22, 14, 8, 1, 27};
    const int whole[] = {P}, ones[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, mixed[] = {5, 1, 3, 1, 2};
    check_splits(m, p, seq, whole, 1);
    check_splits(m, p, seq, ones, P);
    check_splits(m, p, seq, mixed, 5);
    free(p);
    model_free(m);
    backend_close(be);
}

Test(sample, training_models_sample_row_0_with_and_without_recompute, .timeout = 60) {
    Backend *be = test_backend_open();
    ModelDesc d = small_desc();
    const int seq[8] = {4, 30, 2, 2, 19, 7, 11, 0}, ones[] = {1, 1, 1, 1, 1, 1, 1, 1}, whole[] = {8};
    for (int rc = 0; rc < 2; rc++) {
        Model *m = NULL;
        GtError err = {0};
        cr_assert_eq(model_create(&m, &d, be, 2, P, recompute_policy(rc, 1, false, L), 1, &err), 0, "%s", err.msg);
        cr_assert_eq(model_keeps_kv(m), !rc);
        double *p = set_random_params(m, 23);
        if (rc) { /* layers recomputed share one scratch: no keys kept, every call starts at 0 */
            float logits[V];
            cr_assert_eq(model_forward_rows(m, seq, 0, 3, logits, &err), 0, "%s", err.msg);
            cr_assert_neq(model_forward_rows(m, seq + 3, 3, 1, logits, &err), 0);
            check_splits(m, p, seq, whole, 1);
        } else {
            check_splits(m, p, seq, ones, 8);
        }
        free(p);
        model_free(m);
    }
    backend_close(be);
}

Test(sample, kept_keys_are_dropped_by_a_step_or_new_weights, .timeout = 60) {
    Backend *be = test_backend_open();
    ModelDesc d = small_desc();
    Model *m = NULL;
    GtError err = {0};
    cr_assert_eq(model_create(&m, &d, be, 1, P, recompute_policy(false, 1, false, L), 1, &err), 0, "%s", err.msg);
    int tok[P] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, tgt[P];
    for (int i = 0; i < P; i++) tgt[i] = (i + 1) % V;
    float logits[V];
    cr_assert_eq(model_forward_rows(m, tok, 0, 4, logits, &err), 0, "%s", err.msg);
    cr_assert_eq(model_forward_rows(m, tok + 4, 4, 1, logits, &err), 0, "%s", err.msg);
    cr_assert_neq(model_forward_rows(m, tok + 6, 6, 1, logits, &err), 0, "a gap: position 5 was never computed");
    cr_assert_neq(model_forward_rows(m, tok, P - 1, 2, logits, &err), 0, "past T");
    double loss = 0;
    cr_assert_eq(model_step(m, tok, tgt, 1, 1.0f, false, &loss, &err), 0, "%s", err.msg);
    cr_assert_neq(model_forward_rows(m, tok + 5, 5, 1, logits, &err), 0, "after a step");
    cr_assert_eq(model_forward_rows(m, tok, 0, 5, logits, &err), 0, "%s", err.msg);
    model_params_changed(m);
    cr_assert_neq(model_forward_rows(m, tok + 5, 5, 1, logits, &err), 0, "after new weights");
    model_free(m);
    /* an inference model has no gradients to compute */
    cr_assert_eq(model_create_inference(&m, &d, be, P, &err), 0, "%s", err.msg);
    cr_assert_neq(model_step(m, tok, tgt, 1, 1.0f, true, &loss, &err), 0);
    cr_assert_eq(model_step(m, tok, tgt, 1, 1.0f, false, &loss, &err), 0, "%s", err.msg);
    model_free(m);
    backend_close(be);
}

Test(sample, greedy_tokens_match_the_reference_through_the_window_slide, .timeout = 60) {
    Backend *be = test_backend_open();
    ModelDesc d = small_desc();
    Model *m = NULL;
    GtError err = {0};
    cr_assert_eq(model_create_inference(&m, &d, be, P, &err), 0, "%s", err.msg);
    double *p = set_random_params(m, 5);
    const int prompt[3] = {7, 0, 19}, n_new = 2 * P; /* the window fills at token 9 and slides after */
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    cr_assert_not_null(out);
    uint64_t rng = 1;
    cr_assert_eq(sample_continue(m, prompt, 3, n_new, 0.0, 0, &rng, NULL, false, out, &err), 0, "%s", err.msg);
    fclose(out);
    int gen[2 * P];
    cr_assert_eq(parse_id_list(buf, gen, 2 * P), n_new, "output \"%s\"", buf);
    assert_greedy_matches_reference(&d, &m->layout, p, prompt, 3, gen, n_new);
    free(buf), free(p);
    model_free(m);
    backend_close(be);
}

/* A sampled token's matmuls have one row (the CPU runs them as GEMV, split over threads when
 * large): against a double reference, with a bias and an output row stride. */
Test(sample, one_row_matmul_matches_a_double_reference, .timeout = 60) {
    Backend *be = test_backend_open();
    const int Cin = 384, OC = 1000, ldo = 1008;
    const size_t nw = (size_t)OC * Cin;
    float *w = malloc(nw * sizeof *w), *x = malloc(Cin * sizeof *x), *bias = malloc(OC * sizeof *bias);
    float *y = malloc(ldo * sizeof *y);
    cr_assert(w && x && bias && y);
    uint64_t s = 3;
    for (size_t i = 0; i < nw + Cin + OC; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        float u = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
        if (i < nw) w[i] = u;
        else if (i < nw + Cin) x[i - nw] = u;
        else bias[i - nw - Cin] = u;
    }
    GtError err = {0};
    float *dw = backend_alloc_floats(be, MEM_PARAMS, nw, &err), *dx = backend_alloc_floats(be, MEM_ACTIVATIONS, Cin, &err);
    float *db = backend_alloc_floats(be, MEM_PARAMS, OC, &err), *dy = backend_alloc_floats(be, MEM_ACTIVATIONS, ldo, &err);
    cr_assert(dw && dx && db && dy, "%s", err.msg);
    cr_assert_eq(be->ops->to_device(be, dw, w, nw * sizeof *w, &err), 0);
    cr_assert_eq(be->ops->to_device(be, dx, x, Cin * sizeof *x, &err), 0);
    cr_assert_eq(be->ops->to_device(be, db, bias, OC * sizeof *bias, &err), 0);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        be->ops->matmul_forward(be, dy, dx, dw, with_bias ? db : NULL, 1, Cin, OC, ldo);
        cr_assert_eq(be->ops->to_host(be, y, dy, ldo * sizeof *y, &err), 0);
        for (int o = 0; o < OC; o++) {
            double ref = with_bias ? bias[o] : 0.0;
            for (int i = 0; i < Cin; i++) ref += (double)w[(size_t)o * Cin + i] * x[i];
            cr_assert(fabs(y[o] - ref) <= 1e-4 * (1 + fabs(ref)), "bias %d, out %d: %.7g, reference %.7g", with_bias, o,
                      y[o], ref);
        }
    }
    backend_free(be, MEM_PARAMS, dw, nw * sizeof(float)), backend_free(be, MEM_ACTIVATIONS, dx, Cin * sizeof(float));
    backend_free(be, MEM_PARAMS, db, OC * sizeof(float)), backend_free(be, MEM_ACTIVATIONS, dy, ldo * sizeof(float));
    free(w), free(x), free(bias), free(y);
    backend_close(be);
}

/* ---------------------------------------------------------------- the command line */

static const char *gtrain_bin(void) {
    const char *bin = test_gtrain_bin();
    if (!bin) cr_skip_test("GTRAIN_BIN not set (run through make test)");
    return bin;
}

/* run `gtrain ARGS` with stdout and stderr into dir/out, dir/err; returns the exit status */
static int run_gtrain(const char *dir, const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s/out' 2>'%s/err'", gtrain_bin(), args, dir, dir);
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s: did not exit", cmd);
    return WEXITSTATUS(st);
}

static char *read_text(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    char *s = calloc(1, 65536);
    cr_assert_not_null(s);
    size_t n = fread(s, 1, 65535, f);
    s[n] = 0;
    fclose(f);
    return s;
}

/* a checkpoint of the small model with random weights in dir/ck; *params gets them as doubles */
static void write_checkpoint(const char *dir, Backend *be, Model **m, double **params) {
    ModelDesc d = small_desc();
    GtError err = {0};
    char ck[4096];
    snprintf(ck, sizeof ck, "%s/ck", dir);
    cr_assert_eq(mkdir(ck, 0755), 0);
    cr_assert_eq(model_create_inference(m, &d, be, P, &err), 0, "%s", err.msg);
    *params = set_random_params(*m, 77);
    cr_assert_eq(checkpoint_save_weights(ck, *m, false, 0, &err), 0, "%s", err.msg);
}

Test(sample_cli, greedy_ids_match_the_reference, .timeout = 60) {
    gtrain_bin();
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_sample");
    Backend *be = test_backend_open();
    Model *m = NULL;
    double *p = NULL;
    write_checkpoint(dir, be, &m, &p);
    char args[4096];
    snprintf(args, sizeof args, "sample --checkpoint '%s/ck' --prompt-ids 3,1,4,1,5 --max-new-tokens 20 --temperature 0",
             dir);
    int rc = run_gtrain(dir, args);
    char *out = read_text(dir, "out"), *errs = read_text(dir, "err");
    cr_assert_eq(rc, 0, "exit %d: %s", rc, errs);
    int gen[32];
    const int prompt[5] = {3, 1, 4, 1, 5};
    cr_assert_eq(parse_id_list(out, gen, 32), 20, "output \"%s\"", out);
    assert_greedy_matches_reference(&m->desc, &m->layout, p, prompt, 5, gen, 20);
    free(out), free(errs), free(p);
    model_free(m);
    backend_close(be);
    test_scratch_remove(dir);
}

Test(sample_cli, bad_options_are_one_line_errors_with_exit_2, .timeout = 60) {
    gtrain_bin();
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_sample");
    Backend *be = test_backend_open();
    Model *m = NULL;
    double *p = NULL;
    write_checkpoint(dir, be, &m, &p);
    /* CK is replaced by the checkpoint directory */
    static const struct { const char *args, *says; } cases[] = {
        {"sample --checkpoint CK --prompt ab --prompt-ids 1", "exclude each other"},
        {"sample --checkpoint CK --prompt-ids 1 --prompt-ids 2", "--prompt-ids: given more than once"},
        {"sample --checkpoint CK --checkpoint CK --prompt-ids 1", "--checkpoint: given more than once"},
        {"sample --checkpoint '' --prompt-ids 1", "--checkpoint DIR is required"},
        {"sample --prompt-ids 1", "--checkpoint DIR is required"},
        {"sample --checkpoint CK --prompt ''", "--prompt: expected text"},
        {"sample --checkpoint CK --prompt-ids ''", "at least one token id"},
        {"sample --checkpoint CK --prompt-ids 1,32", "[0, 32)"},
        {"sample --checkpoint CK --prompt-ids 1 extra", "unexpected argument 'extra'"},
        {"sample --checkpoint CK --prompt-ids 1 --config run.yaml", "--config: not for gtrain sample"},
        {"sample --checkpoint CK --prompt-ids 1 --set seed=1", "--set: not for gtrain sample"},
        {"sample --checkpoint CK --prompt-ids 1 --top-k 33", "--top-k 33: more than the 32 tokens"},
        {"sample --checkpoint CK --prompt-ids 1 --top-k -1", "--top-k: expected an integer"},
        {"sample --checkpoint CK --prompt-ids 1 --max-new-tokens 1048577", "--max-new-tokens: expected an integer in [0, 1048576]"},
        {"sample --checkpoint CK --prompt-ids 1 --max-new-tokens 2e3", "--max-new-tokens: expected an integer"},
        {"sample --checkpoint CK --prompt-ids 1 --seed 1.5", "--seed: expected an integer"},
        {"sample --checkpoint CK --prompt-ids 1 --temperature -0.5", "--temperature: expected a non-negative number"},
        {"sample --checkpoint CK --prompt-ids 1 --temperature inf", "--temperature: expected a non-negative number"},
        {"sample --checkpoint CK --prompt ab", "needs a byte-level model"},
        {"sample --checkpoint", "--checkpoint: expected a value"},
        {"sample --checkpoint CK --bogus", "--bogus: unknown or ambiguous option"},
        {"sample --checkpoint CK -x", "-x: unknown option"},
        {"--config run.yaml --checkpoint CK", "--checkpoint: not for gtrain train (only for gtrain eval and sample)"},
        {"plan --config run.yaml --temperature 1", "--temperature: not for gtrain plan (only for gtrain sample)"},
        {"report CK --seed 2", "--seed: not for gtrain report (only for gtrain sample)"},
        {"report CK --config run.yaml", "--config: not for gtrain report"},
        {"--config a.yaml --config b.yaml", "--config: given more than once"},
        {"--markdown", "--markdown: only with --help-config"},
        {"--help-config --markdown=yes", "--markdown: takes no value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char args[4096] = "", ck[512];
        snprintf(ck, sizeof ck, "'%s/ck'", dir);
        for (const char *s = cases[i].args; *s;)
            if (strncmp(s, "CK", 2) == 0) {
                strcat(args, ck);
                s += 2;
            } else {
                strncat(args, s++, 1);
            }
        int rc = run_gtrain(dir, args);
        char *errs = read_text(dir, "err");
        size_t len = strlen(errs);
        cr_assert_eq(rc, 2, "gtrain %s: exit %d: %s", args, rc, errs);
        cr_assert(len > 0 && errs[len - 1] == '\n' && strchr(errs, '\n') == errs + len - 1,
                  "gtrain %s: expected one line, found \"%s\"", args, errs);
        cr_assert(strncmp(errs, "gtrain: ", 8) == 0 && strstr(errs, cases[i].says), "gtrain %s: expected \"%s\", found \"%s\"",
                  args, cases[i].says, errs);
        free(errs);
    }
    free(p);
    model_free(m);
    backend_close(be);
    test_scratch_remove(dir);
}
