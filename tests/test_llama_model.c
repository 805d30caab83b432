/* test_llama_model.c - whole Llama-family models (Llama, Mistral with GQA and a sliding window,
 * Qwen2 with q/k/v biases, Llama 3.1 rope scaling, all biases) against the independent
 * double-precision reference tests/ref_llama.c, which knows tensors only by their Hugging Face
 * names: gtrain's weights are handed to it through arch.c's HF names and row blocks (so a wrong
 * block offset or name shows up too), and its loss and every parameter gradient are compared. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "ref_llama.h"
#include "test_backend_select.h"
#include "trainer.h"

static ModelDesc llama_desc(const char *type, int L, int NH, int NKV, int hd, int C, int I, int V, int window,
                            bool qkv_bias, bool o_bias, bool mlp_bias, bool tie, bool llama3) {
    ModelDesc d = {.arch = ARCH_LLAMA, .n_layer = L, .n_head = NH, .n_kv_head = NKV, .head_dim = hd, .n_embd = C,
                   .n_inner = I, .vocab_size = V, .n_positions = 64, .layer_norm_epsilon = 1e-5,
                   .tie_word_embeddings = tie, .rope_theta = 500.0, .sliding_window = window, .qkv_bias = qkv_bias,
                   .o_bias = o_bias, .mlp_bias = mlp_bias, .rope_llama3 = llama3, .rope_factor = 8,
                   .rope_low_freq_factor = 1, .rope_high_freq_factor = 4, .rope_original_max_positions = 16};
    snprintf(d.model_type, sizeof d.model_type, "%s", type);
    model_desc_defaults(&d);
    return d;
}

static RefLlamaCfg ref_cfg(const ModelDesc *d) {
    RefLlamaCfg c = {.hidden = d->n_embd, .inter = d->n_inner, .layers = d->n_layer, .heads = d->n_head,
                     .kv_heads = d->n_kv_head, .head_dim = d->head_dim, .vocab = d->vocab_size,
                     .eps = d->layer_norm_epsilon, .theta = d->rope_theta, .llama3 = d->rope_llama3,
                     .rope_factor = d->rope_factor, .low_freq_factor = d->rope_low_freq_factor,
                     .high_freq_factor = d->rope_high_freq_factor,
                     .original_max_positions = d->rope_original_max_positions, .window = d->sliding_window,
                     .window_first_layer = 0, .qkv_bias = d->qkv_bias, .o_bias = d->o_bias, .mlp_bias = d->mlp_bias,
                     .tie = d->tie_word_embeddings};
    return c;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}
static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0; }

/* gtrain tensor t's HF blocks, element by element, as the reference's tensors: to (copy in) or back */
static void for_blocks(const ModelDesc *d, const ParamTensor *t, RefTensor *ref, int n_ref, float *flat, bool grad_out,
                       double *max_diff, double *max_ref) {
    for (int b = 0; b < t->spec->n_blocks; b++) {
        char name[128];
        int64_t row0, rows;
        arch_block_name(t, b, name, sizeof name, d, &row0, &rows);
        RefTensor *r = ref_llama_find(ref, n_ref, name);
        cr_assert(r, "reference has no tensor %s (gtrain %s block %d)", name, t->name, b);
        const int64_t cols = t->shape[1];
        cr_assert_eq(r->rows * r->cols, rows * cols, "%s: reference %lld x %lld, gtrain block %lld x %lld", name,
                     (long long)r->rows, (long long)r->cols, (long long)rows, (long long)cols);
        for (int64_t k = 0; k < rows * cols; k++) {
            float *x = flat + t->offset + (size_t)(row0 * cols + k);
            if (!grad_out) {
                r->data[k] = *x;
            } else {
                *max_diff = fmax(*max_diff, fabs((double)*x - r->grad[k]));
                *max_ref = fmax(*max_ref, fabs(r->grad[k]));
            }
        }
    }
}

/* every parameter uniform(-a, a) around 0 (norm weights around 1), the same values to both models */
static void check_against_reference(ModelDesc d, int B, int T, GtDtype act) {
    Backend *be = test_backend_open();
    backend_set_act_dtype(be, act);
    Model *m = NULL;
    GtError err = {0};
    cr_assert_eq(model_create(&m, &d, be, B, T, recompute_policy(false, 1, false, d.n_layer), 7, &err), 0, "%s",
                 err.msg);
    const ParamLayout *pl = &m->layout;
    float *h = malloc(pl->total * sizeof *h);
    uint64_t s = 99;
    for (int i = 0; i < pl->n_tensors; i++) {
        const ParamTensor *t = &pl->tensors[i];
        bool norm = t->role == ROLE_NORM1_W || t->role == ROLE_NORM2_W || t->role == ROLE_NORMF_W;
        double a = t->ndim == 1 && !norm ? 0.2 : 0.3;
        for (size_t k = 0; k < t->numel; k++) h[t->offset + k] = (float)((norm ? 1.0 : 0.0) + a * (2 * rng_uniform(&s) - 1));
    }
    cr_assert_eq(be->ops->to_device(be, m->params, h, pl->total * sizeof *h, &err), 0, "%s", err.msg);
    model_params_changed(m);

    RefLlamaCfg rc = ref_cfg(&d);
    int n_ref = 0;
    RefTensor *ref = ref_llama_alloc(&rc, &n_ref);
    cr_assert(ref);
    int64_t ref_elems = 0;
    for (int i = 0; i < n_ref; i++) ref_elems += ref[i].rows * ref[i].cols;
    cr_assert_eq((uint64_t)ref_elems, (uint64_t)pl->total, "reference has %lld parameters, gtrain %zu",
                 (long long)ref_elems, pl->total);
    for (int i = 0; i < pl->n_tensors; i++) for_blocks(&d, &pl->tensors[i], ref, n_ref, h, false, NULL, NULL);

    const size_t n = (size_t)B * T;
    int *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    for (size_t i = 0; i < n; i++) {
        tok[i] = (int)(rng_next(&s) % (uint64_t)d.vocab_size);
        tgt[i] = i % 5 == 3 ? -100 : (int)(rng_next(&s) % (uint64_t)d.vocab_size);
    }
    long items = count_items(tgt, n);
    double loss_sum = 0;
    cr_assert_eq(model_step(m, tok, tgt, B, (float)(1.0 / items), true, &loss_sum, &err), 0, "%s", err.msg);
    double ref_loss = ref_llama_loss(&rc, ref, n_ref, tok, tgt, B, T, true);
    cr_assert(isfinite(ref_loss));
    const double tol_loss = act == GT_F32 ? 1e-5 : 2e-2, tol_grad = act == GT_F32 ? 1e-4 : 5e-2;
    cr_assert(fabs(loss_sum / items - ref_loss) <= tol_loss * fabs(ref_loss), "%s %s: loss %.9g vs reference %.9g",
              d.model_type, gt_dtype_name(act), loss_sum / items, ref_loss);

    float *g = malloc(pl->total * sizeof *g);
    cr_assert_eq(be->ops->to_host(be, g, m->grads, pl->total * sizeof *g, &err), 0, "%s", err.msg);
    double gmax = 0, *diff = calloc((size_t)pl->n_tensors, sizeof *diff);
    for (int i = 0; i < pl->n_tensors; i++) {
        double mref = 0;
        for_blocks(&d, &pl->tensors[i], ref, n_ref, g, true, &diff[i], &mref);
        gmax = fmax(gmax, mref);
    }
    cr_assert(gmax > 1e-3, "gradients are all tiny (%g): the test would prove nothing", gmax);
    /* relative to the largest gradient of the model: fp32 gradients land near 1e-6 of it */
    for (int i = 0; i < pl->n_tensors; i++)
        cr_assert(diff[i] <= tol_grad * gmax, "%s %s: %s: gradient differs from the reference by %.3g (largest %.3g)",
                  d.model_type, gt_dtype_name(act), pl->tensors[i].name, diff[i], gmax);
    free(diff);
    free(h), free(g), free(tok), free(tgt);
    ref_llama_free(ref, n_ref);
    model_free(m);
    backend_close(be);
}

Test(llama_model, llama_matches_the_double_reference) {
    check_against_reference(llama_desc("llama", 2, 4, 4, 8, 32, 48, 40, 0, false, false, false, false, false), 2, 12,
                            GT_F32);
}

Test(llama_model, mistral_gqa_sliding_window_matches_the_double_reference) {
    check_against_reference(llama_desc("mistral", 2, 4, 2, 8, 32, 40, 40, 5, false, false, false, false, false), 2, 12,
                            GT_F32);
}

Test(llama_model, qwen2_biases_tied_matches_the_double_reference) {
    check_against_reference(llama_desc("qwen2", 2, 4, 1, 8, 32, 40, 40, 0, true, false, false, true, false), 2, 12,
                            GT_F32);
}

Test(llama_model, llama3_rope_scaling_and_every_bias_match_the_double_reference) {
    check_against_reference(llama_desc("llama", 2, 4, 2, 8, 24, 40, 40, 0, true, true, true, false, true), 2, 20,
                            GT_F32);
}

Test(llama_model, bf16_tracks_the_double_reference) {
    check_against_reference(llama_desc("mistral", 2, 4, 2, 16, 64, 96, 40, 6, false, false, false, false, false), 2, 16,
                            GT_BF16);
}

/* `gtrain plan` on the published config.json files of real models (tests/fixtures/hf_configs,
 * copied from the Hugging Face hub): it needs no weights, allocates nothing, and prints the
 * parameter counts their model cards give. */
Test(llama_model, plan_prints_the_published_parameter_counts, .timeout = 60) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT is not set");
    static const struct { const char *file; const char *count; } CASES[] = {
        {"mistral-7b-v0.1.json", "7241732096"}, {"llama-3-8b.json", "8030261248"}, {"qwen2.5-7b.json", "7615616512"},
        {"llama-3.1-8b.json", "8030261248"}, {"llama-3.2-1b.json", "1235814400"}, {"qwen2.5-0.5b.json", "494032768"},
    };
    char dir[] = "/tmp/gt_llama_plan_XXXXXX";
    cr_assert(mkdtemp(dir));
    char yaml[64], cmd[2048], line[512];
    snprintf(yaml, sizeof yaml, "%s/run.yaml", dir);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        FILE *f = fopen(yaml, "w");
        cr_assert(f);
        fprintf(f, "model: %s/tests/fixtures/hf_configs/%s\ndata: {train: %s/data/tinyshakespeare.txt, seq_len: 512}\n"
                   "precision: bf16\nper_device_train_batch_size: 1\nmemory_limit: 1TiB\noutput_dir: %s/out\n",
                root, CASES[i].file, root, dir);
        fclose(f);
        snprintf(cmd, sizeof cmd, "'%s' plan --config '%s' 2>&1", test_gtrain_bin(), yaml);
        FILE *p = popen(cmd, "r");
        cr_assert(p);
        bool found = false;
        char want[64];
        snprintf(want, sizeof want, "parameters: %s\n", CASES[i].count);
        while (fgets(line, sizeof line, p))
            if (strcmp(line, want) == 0) found = true;
        int st = pclose(p);
        cr_expect(found, "%s: gtrain plan did not print \"%.*s\"", CASES[i].file, (int)strlen(want) - 1, want);
        cr_expect_eq(st, 0, "%s: gtrain plan exited %d", CASES[i].file, st);
    }
    remove(yaml);
    rmdir(dir);
}

/* Sampling's incremental forward (keys and values kept, the new positions rotated at their own
 * offset) gives the logits a full forward of the same prefix gives, on a GQA model with a window
 * shorter than the prefix. */
static void incremental_matches_full(ModelDesc d) {
    const int T = 12, V = d.vocab_size;
    Backend *be = test_backend_open();
    Model *m = NULL, *full = NULL;
    GtError err = {0};
    cr_assert_eq(model_create_inference(&m, &d, be, T, &err), 0, "%s", err.msg);
    cr_assert_eq(model_create_inference(&full, &d, be, T, &err), 0, "%s", err.msg);
    cr_assert(model_keeps_kv(m));
    const ParamLayout *pl = &m->layout;
    float *h = malloc(pl->total * sizeof *h);
    uint64_t s = 5;
    for (size_t i = 0; i < pl->total; i++) h[i] = (float)(0.4 * (2 * rng_uniform(&s) - 1));
    for (int i = 0; i < pl->n_tensors; i++)
        if (pl->tensors[i].ndim == 1)
            for (size_t k = 0; k < pl->tensors[i].numel; k++) h[pl->tensors[i].offset + k] += 1.0f;
    for (int k = 0; k < 2; k++) {
        Model *x = k ? full : m;
        cr_assert_eq(be->ops->to_device(be, x->params, h, pl->total * sizeof *h, &err), 0, "%s", err.msg);
        model_params_changed(x);
    }
    int tok[12];
    for (int t = 0; t < T; t++) tok[t] = (int)(rng_next(&s) % (uint64_t)V);
    float *a = malloc(V * sizeof *a), *b = malloc(V * sizeof *b);
    /* a prefix of 5 at once, then one position at a time; against the whole prefix each time */
    cr_assert_eq(model_forward_rows(m, tok, 0, 5, a, &err), 0, "%s", err.msg);
    for (int pos = 5; pos <= T; pos++) {
        if (pos > 5) cr_assert_eq(model_forward_rows(m, tok + pos - 1, pos - 1, 1, a, &err), 0, "%s", err.msg);
        cr_assert_eq(model_forward_rows(full, tok, 0, pos, b, &err), 0, "%s", err.msg);
        double diff = 0, big = 0;
        for (int v = 0; v < V; v++) diff = fmax(diff, fabs((double)a[v] - b[v])), big = fmax(big, fabs(b[v]));
        cr_assert(diff <= 1e-5 * big, "prefix %d: incremental logits differ by %.3g (largest %.3g)", pos, diff, big);
    }
    free(h), free(a), free(b);
    model_free(m);
    model_free(full);
    backend_close(be);
}

Test(llama_model, incremental_forward_matches_the_full_forward) {
    incremental_matches_full(llama_desc("mistral", 2, 4, 2, 8, 32, 40, 40, 4, false, false, false, false, true));
}

/* Qwen3: the per-head q/k norm of the new positions at their row offset (qkv_pre and its rstd) */
Test(llama_model, qwen3_incremental_forward_matches_the_full_forward) {
    ModelDesc d = llama_desc("qwen3", 2, 4, 2, 8, 32, 40, 40, 4, true, true, false, false, false);
    d.arch = ARCH_QWEN3;
    incremental_matches_full(d);
}
