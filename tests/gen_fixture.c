/* gen_fixture.c - see gen_fixture.h. */
#include "gen_fixture.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "lora.h"
#include "test_backend_select.h"

void gen_fix_prompts(GenFixPrompts *pr, const int *len, long n, int V, uint64_t seed) {
    pr->n = n;
    pr->p = calloc((size_t)n, sizeof *pr->p);
    pr->ids = calloc((size_t)n, sizeof *pr->ids);
    cr_assert(pr->p && pr->ids);
    uint64_t s = seed | 1;
    for (long i = 0; i < n; i++) {
        pr->ids[i] = malloc((size_t)len[i] * sizeof(int));
        cr_assert(pr->ids[i]);
        for (int t = 0; t < len[i]; t++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            pr->ids[i][t] = (int)(s % (uint64_t)V);
        }
        pr->p[i] = (GenPrompt){.ids = pr->ids[i], .n = len[i]};
    }
}

int gen_fix_write_prompts(const GenFixPrompts *pr, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    for (long i = 0; i < pr->n; i++)
        for (int t = 0; t < pr->p[i].n; t++) fprintf(f, "%d%c", pr->p[i].ids[t], t + 1 == pr->p[i].n ? '\n' : ' ');
    return fclose(f) == 0 ? 0 : -1;
}

void gen_fix_prompts_free(GenFixPrompts *pr) {
    for (long i = 0; i < pr->n; i++) free(pr->ids[i]);
    free(pr->ids), free(pr->p);
    memset(pr, 0, sizeof *pr);
}

int gen_fix_open(GenFixModel *g, const char *dir, const char *adapter, GtDtype act, int slots, int ctx, int chunk,
                 GtError *err) {
    memset(g, 0, sizeof *g);
    PeftConfig pc;
    if (model_desc_load(&g->d, dir, err)) return -1;
    if (adapter && lora_desc_from_adapter(&g->d, adapter, &pc, err)) return -1;
    g->be = test_backend_open();
    backend_set_act_dtype(g->be, act);
    const int n_tokens = chunk > slots ? chunk : slots;
    if (model_create_decode(&g->m, &g->d, g->be, n_tokens, slots, err)) return -1;
    if (checkpoint_load_weights(g->m, dir, err)) return -1;
    if (adapter) {
        lora_set_run(g->m, &pc, NULL);
        if (lora_load_adapter(g->m, adapter, err)) return -1;
    }
    return kv_cache_create(&g->kv, g->m, slots, ctx, err);
}

void gen_fix_close(GenFixModel *g) {
    if (g->kv) kv_cache_free(g->kv);
    if (g->m) model_free(g->m);
    if (g->be) backend_close(g->be);
    memset(g, 0, sizeof *g);
}

void gen_fix_out_init(GenFixOut *o, long n) {
    o->count = n, o->done = 0;
    o->ids = calloc((size_t)n, sizeof *o->ids);
    o->n = calloc((size_t)n, sizeof *o->n);
    o->finish = calloc((size_t)n, sizeof *o->finish);
    cr_assert(o->ids && o->n && o->finish);
    for (long i = 0; i < n; i++) o->n[i] = -1;
}

void gen_fix_out_free(GenFixOut *o) {
    for (long i = 0; i < o->count; i++) free(o->ids[i]);
    free(o->ids), free(o->n), free(o->finish);
    memset(o, 0, sizeof *o);
}

static int keep(void *ctx, const GenResult *r, GtError *err) {
    GenFixOut *o = ctx;
    if (r->index < 0 || r->index >= o->count || o->n[r->index] >= 0)
        return gt_error(err, 1, "generate_run reported prompt %ld (of %ld) twice or out of range", r->index, o->count);
    o->ids[r->index] = malloc((size_t)(r->n > 0 ? r->n : 1) * sizeof(int));
    if (!o->ids[r->index]) return gt_error(err, 1, "out of memory");
    if (r->n > 0) memcpy(o->ids[r->index], r->ids, (size_t)r->n * sizeof(int));
    o->n[r->index] = r->n, o->finish[r->index] = r->finish, o->done++;
    return 0;
}

int gen_fix_generate(GenFixModel *g, const GenFixPrompts *pr, const GenOptions *opt, GenFixOut *o, GtError *err) {
    return generate_run(g->m, g->kv, pr->p, pr->n, opt, keep, NULL, o, err);
}

void gen_fix_read_hf(const char *out, long n, int new_tokens, int **ids, double **margins, int *len) {
    *ids = malloc((size_t)n * new_tokens * sizeof **ids);
    *margins = malloc((size_t)n * new_tokens * sizeof **margins);
    cr_assert(*ids && *margins);
    for (long i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) {
            char key[48];
            snprintf(key, sizeof key, "%s %ld: ", k ? "margin" : "gen", i);
            const char *p = strstr(out, key);
            cr_assert(p, "hf_generate.py printed no \"%s\" line:\n%s", key, out);
            p += strlen(key);
            int t = 0;
            for (;; t++) {
                while (*p == ' ') p++;
                if (*p == '\n' || *p == 0) break;
                cr_assert(t < new_tokens, "%s: more than %d values", key, new_tokens);
                char *end;
                if (k) (*margins)[i * new_tokens + t] = strtod(p, &end);
                else (*ids)[i * new_tokens + t] = (int)strtol(p, &end, 10);
                cr_assert(end != p && (*end == ' ' || *end == '\n' || *end == 0), "%s: not a number at value %d", key, t);
                p = end;
            }
            cr_assert(len ? t >= 1 : t == new_tokens, "%s: %d values, expected %d", key, t, new_tokens);
            if (len && k == 0) len[i] = t;
            if (len && k == 1) cr_assert_eq(t, len[i], "%s: %d margins for %d ids", key, t, len[i]);
        }
}
