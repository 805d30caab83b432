/* test_gen_stop.c - where generate_run ends a row, against what the same greedy run without the
 * ending gives: a stop string ends the row at the first token whose decoded text (Llama-2's real
 * tokenizer, decoding checked against HF elsewhere) contains it, the text cut before it; the
 * context ends a row when prompt + generation fill the cache (HF's max_length); each row alone. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"
#include "test_backend_select.h"
#include "tok_hf_util.h"

static uint64_t stop_rng(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

typedef struct {
    long n;
    int *len[8];
    int *ids[8];
    char *text[8];
    GenFinish fin[8];
} Got;

static int keep(void *ctx, const GenResult *r, GtError *err) {
    (void)err;
    Got *g = ctx;
    g->ids[r->index] = malloc((size_t)(r->n + 1) * sizeof(int));
    memcpy(g->ids[r->index], r->ids, (size_t)r->n * sizeof(int));
    g->len[r->index] = malloc(sizeof(int));
    *g->len[r->index] = r->n;
    g->text[r->index] = r->text ? strdup(r->text) : NULL;
    g->fin[r->index] = r->finish;
    g->n++;
    return 0;
}

static void got_free(Got *g) {
    for (int i = 0; i < 8; i++) free(g->len[i]), free(g->ids[i]), free(g->text[i]);
}

typedef struct {
    Backend *be;
    Model *m;
    Tokenizer *tok;
    ModelDesc d;
} Fix;

/* a tiny Llama over Llama-2's 32000 ids, weights from a fixed stream */
static void fix_open(Fix *f) {
    need_refs();
    char path[4096];
    ref_tokenizer_file("llama2", path, sizeof path);
    GtError err = {0};
    cr_assert_eq(tokenizer_load(&f->tok, path, &err), 0, "%s", err.msg);
    f->d = (ModelDesc){.arch = ARCH_LLAMA, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 32, .n_inner = 48,
                       .vocab_size = 32000, .n_positions = 64, .layer_norm_epsilon = 1e-5, .rope_theta = 10000.0};
    snprintf(f->d.model_type, sizeof f->d.model_type, "llama");
    model_desc_defaults(&f->d);
    f->be = test_backend_open();
    cr_assert_eq(model_create_decode(&f->m, &f->d, f->be, 16, 4, &err), 0, "%s", err.msg);
    const ParamLayout *pl = &f->m->layout;
    float *h = malloc(pl->total * sizeof *h);
    uint64_t s = 11;
    for (size_t i = 0; i < pl->total; i++) h[i] = (float)((double)(stop_rng(&s) >> 11) / 9007199254740992.0 - 0.5);
    for (int i = 0; i < pl->n_tensors; i++)
        if (pl->tensors[i].ndim == 1)
            for (size_t k = 0; k < pl->tensors[i].numel; k++) h[pl->tensors[i].offset + k] += 1.0f;
    cr_assert_eq(f->be->ops->to_device(f->be, f->m->params, h, pl->total * sizeof *h, &err), 0, "%s", err.msg);
    model_params_changed(f->m);
    free(h);
}

static void fix_close(Fix *f) {
    model_free(f->m);
    backend_close(f->be);
    tokenizer_free(f->tok);
}

static void gen(Fix *f, int ctx, const GenPrompt *p, long n, const GenOptions *o, Got *g) {
    KvCache *kv = NULL;
    GtError err = {0};
    cr_assert_eq(kv_cache_create(&kv, f->m, 4, ctx, &err), 0, "%s", err.msg);
    memset(g, 0, sizeof *g);
    cr_assert_eq(generate_run(f->m, kv, p, n, o, keep, NULL, g, &err), 0, "%s", err.msg);
    cr_assert_eq(g->n, n);
    kv_cache_free(kv);
}

static char *decode(const Fix *f, const int *ids, int n) {
    char *s;
    size_t len;
    GtError err = {0};
    cr_assert_eq(tokenizer_decode(f->tok, ids, (size_t)n, true, &s, &len, &err), 0, "%s", err.msg);
    return s;
}

Test(gen_stop, a_stop_string_ends_the_row_at_the_token_that_completes_it) {
    Fix f;
    fix_open(&f);
    int pa[3] = {1, 450, 4996}, pb[7] = {1, 1724, 338, 278, 7483, 310, 3444}, pc[1] = {1};
    GenPrompt p[3] = {{pa, 3}, {pb, 7}, {pc, 1}};
    GenOptions o = {.max_new_tokens = 40, .tok = f.tok};
    Got full, cut;
    gen(&f, 64, p, 3, &o, &full);
    for (int i = 0; i < 3; i++) {
        /* a stop string taken from the middle of this row's text: 3 bytes from its second half */
        char *text = decode(&f, full.ids[i], *full.len[i]);
        const size_t tl = strlen(text);
        cr_assert_gt(tl, 12, "row %d: too little text to cut (%zu bytes)", i, tl);
        size_t at = tl / 2;
        while (at < tl - 3 && ((unsigned char)text[at] & 0xC0) == 0x80) at++; /* a character's start */
        char stop[4] = {0};
        memcpy(stop, text + at, 3);
        GenOptions os = o;
        os.stop[0] = stop;
        os.n_stop = 1;
        gen(&f, 64, p, 3, &os, &cut);
        /* the reference: the first k whose decoded prefix contains the stop string */
        int k = 1;
        char *pre = NULL;
        for (; k <= *full.len[i]; k++) {
            free(pre);
            pre = decode(&f, full.ids[i], k);
            if (strstr(pre, stop)) break;
        }
        cr_assert_leq(k, *full.len[i]);
        cr_expect_eq(cut.fin[i], GEN_FINISH_STOP, "row %d finished %s", i, gen_finish_name(cut.fin[i]));
        cr_expect_eq(*cut.len[i], k, "row %d: %d ids, expected %d (stop \"%s\")", i, *cut.len[i], k, stop);
        cr_expect_eq(memcmp(cut.ids[i], full.ids[i], (size_t)k * sizeof(int)), 0, "row %d: other ids", i);
        *strstr(pre, stop) = '\0';
        cr_expect_str_eq(cut.text[i], pre, "row %d: text cut before the stop string", i);
        free(pre);
        free(text);
        got_free(&cut);
    }
    got_free(&full);
    fix_close(&f);
}

Test(gen_stop, the_context_ends_a_row_when_prompt_and_generation_fill_it) {
    Fix f;
    fix_open(&f);
    int pa[5] = {1, 450, 4996, 17354, 1701}, pb[2] = {1, 3444};
    GenPrompt p[2] = {{pa, 5}, {pb, 2}};
    GenOptions o = {.max_new_tokens = 40};
    Got wide, narrow;
    gen(&f, 64, p, 2, &o, &wide);
    gen(&f, 20, p, 2, &o, &narrow);
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(wide.fin[i], GEN_FINISH_LENGTH);
        cr_expect_eq(*wide.len[i], 40);
        cr_expect_eq(narrow.fin[i], GEN_FINISH_CONTEXT, "row %d finished %s", i, gen_finish_name(narrow.fin[i]));
        cr_expect_eq(*narrow.len[i], 20 - p[i].n, "row %d: %d ids in a context of 20 after %d", i, *narrow.len[i], p[i].n);
        cr_expect_eq(memcmp(narrow.ids[i], wide.ids[i], (size_t)*narrow.len[i] * sizeof(int)), 0, "row %d", i);
    }
    got_free(&wide);
    got_free(&narrow);
    fix_close(&f);
}
