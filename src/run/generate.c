/* generate.c - see generate.h. One step of the loop: every decoding row's last token (one
 * DecodeToken each, logits wanted), then prompt chunks of the rows still prefilling, as many as
 * the model's tokens per call allow; one model_decode; each row with logits picks its next token
 * and is checked for its end; finished rows are reported and their slots given to the next
 * prompts. */
#include "generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

const char *gen_finish_name(GenFinish f) {
    static const char *const names[] = {"eos", "stop", "length", "context"};
    return f >= 0 && f <= GEN_FINISH_CONTEXT ? names[f] : "?";
}

uint64_t gen_rng_seed(uint64_t seed, long index) {
    uint64_t s = seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(index + 1));
    return sample_rng_next(&s) ^ seed;
}

/* the kept tokens' weights exp((l - max) / T) after top-k and top-p (HF's order: temperature,
 * top-k, top-p; best: the largest logit's id, the caller's argmax); w[v] = 0 for the removed ones; returns
 * their sum */
static double warp(const float *logits, int V, int best, const GenOptions *o, double *w, int *order) {
    const double T = o->temperature > 0 ? o->temperature : 1.0;
    /* top-k: HF's TopKLogitsWarper removes the tokens below the k-th largest logit (ties kept);
     * the k-th largest by quickselect on a copy */
    double kth = -INFINITY;
    if (o->top_k > 0 && o->top_k < V) {
        float *c = gt_xmalloc((size_t)V * sizeof *c);
        memcpy(c, logits, (size_t)V * sizeof *c);
        int lo = 0, hi = V - 1;
        const int want = o->top_k - 1; /* index in descending order */
        while (lo < hi) {
            const float pivot = c[lo + (hi - lo) / 2];
            int i = lo, j = hi;
            while (i <= j) {
                while (c[i] > pivot) i++;
                while (c[j] < pivot) j--;
                if (i <= j) {
                    float t = c[i];
                    c[i++] = c[j];
                    c[j--] = t;
                }
            }
            if (want <= j) hi = j;
            else if (want >= i) lo = i;
            else break;
        }
        kth = c[want];
        free(c);
    }
    double sum = 0.0;
    for (int v = 0; v < V; v++) {
        w[v] = logits[v] >= kth ? exp(((double)logits[v] - logits[best]) / T) : 0.0;
        sum += w[v];
    }
    if (o->top_p < 1.0) {
        /* HF's TopPLogitsWarper: ascending order, remove the tokens whose cumulative probability
         * is <= 1 - top_p (the largest is always kept) */
        int n = 0;
        for (int v = 0; v < V; v++)
            if (w[v] > 0) order[n++] = v;
        /* insertion sort would be quadratic on a big vocabulary: sort by weight with qsort_r-free
         * shell sort, ties by id (stable in torch's sort for equal logits is not guaranteed; ids
         * ascending is our rule) */
        for (int gap = n / 2; gap > 0; gap /= 2)
            for (int i = gap; i < n; i++) {
                int t = order[i], j = i;
                while (j >= gap && (w[order[j - gap]] > w[t] || (w[order[j - gap]] == w[t] && order[j - gap] > t))) {
                    order[j] = order[j - gap];
                    j -= gap;
                }
                order[j] = t;
            }
        double cum = 0.0, cut = (1.0 - o->top_p) * sum, kept = 0.0;
        for (int i = 0; i < n - 1; i++) {
            cum += w[order[i]];
            if (cum <= cut) w[order[i]] = 0.0;
        }
        for (int v = 0; v < V; v++) kept += w[v];
        sum = kept;
    }
    return sum;
}

int gen_pick_token(const float *logits, int V, const GenOptions *o, uint64_t *rng) {
    int best = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v; /* the first of equal maxima, as torch.argmax */
    if (!o->do_sample) return best;
    double *w = gt_xmalloc((size_t)V * sizeof *w);
    int *order = gt_xmalloc((size_t)V * sizeof *order);
    const double sum = warp(logits, V, best, o, w, order);
    const double u = (double)(sample_rng_next(rng) >> 11) / 9007199254740992.0 * sum;
    double acc = 0.0;
    int pick = best;
    for (int v = 0; v < V; v++) {
        if (w[v] <= 0) continue;
        acc += w[v];
        if (acc > u) {
            pick = v;
            break;
        }
    }
    free(w);
    free(order);
    return pick;
}

/* one cache row */
typedef struct {
    bool busy;
    long index;   /* the prompt */
    int fed;      /* prompt tokens stored so far */
    TokIds gen;   /* generated ids */
    uint64_t rng;
    size_t scanned; /* text bytes already searched for stop strings */
    char *text;     /* decoded text (stop strings and the result); NULL until needed */
} Row;

static void row_reset(Row *r) {
    tok_ids_free(&r->gen);
    free(r->text);
    memset(r, 0, sizeof *r);
}

/* decode the row's generated ids into r->text (skip_special_tokens, as the results are read) */
static int row_text(Row *r, const GenOptions *o, GtError *err) {
    free(r->text);
    r->text = NULL;
    size_t n;
    return tokenizer_decode(o->tok, r->gen.ids, r->gen.n, true, &r->text, &n, err);
}

/* the first stop string in the text (searched from where it could start in the new part); its
 * offset, or -1 */
static long find_stop(Row *r, const GenOptions *o) {
    size_t len = strlen(r->text), longest = 0;
    for (int s = 0; s < o->n_stop; s++)
        if (strlen(o->stop[s]) > longest) longest = strlen(o->stop[s]);
    size_t from = r->scanned > longest ? r->scanned - longest : 0;
    long hit = -1;
    for (int s = 0; s < o->n_stop; s++) {
        const char *p = strstr(r->text + from, o->stop[s]);
        if (p && (hit < 0 || p - r->text < hit)) hit = p - r->text;
    }
    r->scanned = len;
    return hit;
}

int generate_run(Model *m, KvCache *kv, const GenPrompt *prompts, long n, const GenOptions *o, GenDoneFn done,
                 GenProgressFn progress, void *ctx, GtError *err) {
    const int slots = kv_cache_slots(kv), cap = kv_cache_ctx(kv), V = m->desc.vocab_size;
    const int max_tok = model_decode_max_tokens(m), chunk = o->prefill_chunk > 0 ? o->prefill_chunk : 512;
    if (slots > max_tok)
        return gt_error(err, GT_EXIT_FAILURE, "generate: %d slots, but the model takes %d tokens a call", slots, max_tok);
    if (o->n_stop > 0 && !o->tok) return gt_error(err, GT_EXIT_FAILURE, "generate: stop strings need a tokenizer");
    for (long i = 0; i < n; i++)
        if (prompts[i].n < 1 || prompts[i].n >= cap)
            return gt_error(err, GT_EXIT_BAD_INPUT, "prompt %ld: %d tokens, expected 1 to %d (the context %d, less one "
                            "for a new token)", i, prompts[i].n, cap - 1, cap);
    Row *row = gt_xcalloc((size_t)slots, sizeof *row);
    DecodeToken *batch = gt_xmalloc((size_t)max_tok * sizeof *batch);
    int *who = gt_xmalloc((size_t)max_tok * sizeof *who); /* the slot of each logits row */
    float *logits = gt_xmalloc((size_t)slots * V * sizeof *logits);
    long next = 0, finished = 0, tokens = 0;
    int rc = 0;
    while (finished < n) {
        if (gt_stop_signal()) {
            rc = 1;
            break;
        }
        for (int s = 0; s < slots && next < n; s++) /* free slots take the next prompts */
            if (!row[s].busy) {
                row[s].busy = true;
                row[s].index = next;
                row[s].rng = gen_rng_seed(o->seed, next);
                next++;
            }
        /* the decoding rows' last tokens first (each wants logits), then prompt chunks */
        int nb = 0, nl = 0;
        for (int s = 0; s < slots; s++) {
            const Row *r = &row[s];
            if (!r->busy || r->fed < prompts[r->index].n) continue;
            batch[nb++] = (DecodeToken){r->gen.ids[r->gen.n - 1], s, r->fed + (int)r->gen.n - 1, true};
            who[nl++] = s;
        }
        for (int s = 0; s < slots && nb < max_tok; s++) {
            Row *r = &row[s];
            const GenPrompt *p = &prompts[r->index];
            if (!r->busy || r->fed >= p->n) continue;
            int take = p->n - r->fed;
            if (take > chunk) take = chunk;
            if (take > max_tok - nb) take = max_tok - nb;
            for (int t = 0; t < take; t++) {
                const bool last = r->fed + t == p->n - 1;
                batch[nb++] = (DecodeToken){p->ids[r->fed + t], s, r->fed + t, last};
                if (last) who[nl++] = s;
            }
            r->fed += take;
        }
        if ((rc = model_decode(m, kv, batch, nb, logits, err))) break;
        for (int i = 0; i < nl; i++) {
            Row *r = &row[who[i]];
            const GenPrompt *p = &prompts[r->index];
            const int id = gen_pick_token(logits + (size_t)i * V, V, o, &r->rng);
            tok_ids_push(&r->gen, id);
            tokens++;
            GenFinish fin = GEN_FINISH_LENGTH;
            bool end = false;
            for (int e = 0; e < o->n_eos && !end; e++)
                if (id == o->eos[e]) end = true, fin = GEN_FINISH_EOS;
            long cut = -1;
            bool decoded = false; /* r->text is this step's */
            if (!end && o->n_stop > 0) {
                if ((rc = row_text(r, o, err))) break;
                decoded = true;
                if ((cut = find_stop(r, o)) >= 0) end = true, fin = GEN_FINISH_STOP;
            }
            if (!end && (int)r->gen.n >= o->max_new_tokens) end = true, fin = GEN_FINISH_LENGTH;
            /* prompt + generation fill the context (HF's max_length = the model's positions) */
            if (!end && p->n + (int)r->gen.n >= cap) end = true, fin = GEN_FINISH_CONTEXT;
            if (!end) continue;
            if (o->tok && !decoded && (rc = row_text(r, o, err))) break;
            if (cut >= 0) r->text[cut] = '\0';
            GenResult res = {r->index, r->gen.ids, (int)r->gen.n, r->text, fin};
            rc = done ? done(ctx, &res, err) : 0;
            row_reset(r);
            finished++;
            if (rc) break;
        }
        if (rc) break;
        if (progress) progress(ctx, finished, n, tokens);
    }
    for (int s = 0; s < slots; s++) row_reset(&row[s]);
    free(row);
    free(batch);
    free(who);
    free(logits);
    return rc;
}
