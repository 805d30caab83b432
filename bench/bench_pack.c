/* bench_pack.c - completion tokens trained per second, packed (data.packing: true: whole examples
 * in rows by first-fit decreasing, no cross-talk) vs padded (one example a row), on the CPU (make
 * bench; not a test).
 * usage: bench_pack MODEL.json [B] [T] [steps] [examples]
 *
 * The examples are synthetic with MetaMathQA-like lengths through the Llama-2 tokenizer (the
 * Alpaca-style prompt template the PiSSA/MetaMath scripts use, then the query; the response):
 * prompt lengths lognormal with mean 92 and standard deviation 40 tokens, completion lengths
 * lognormal with mean 176 and standard deviation 105, each at least 8 (total mean ~268, sd ~113),
 * ids uniform in [1, vocab). Both modes read the same jsonl through the data reader (rows shuffled),
 * run the same number of full steps of B rows (forward, backward, clip, AdamW) after one warm-up,
 * in turn (a padded step, a packed step, ...), and count the targets that trained. Prints one line
 * each and their ratio, by wall time and by process CPU time (steadier on a shared machine). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blas_setup.h"
#include "data.h"
#include "optim.h"
#include "plan.h"
#include "trainer.h"

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}
static double unif(uint64_t *s) { return ((double)(rng(s) >> 11) + 0.5) / 9007199254740992.0; }
/* lognormal with the given mean and standard deviation */
static int lognormal(uint64_t *s, double mean, double sd) {
    const double s2 = log(1.0 + sd * sd / (mean * mean)), mu = log(mean) - s2 / 2;
    double z = sqrt(-2.0 * log(unif(s))) * cos(2.0 * M_PI * unif(s));
    int n = (int)lround(exp(mu + sqrt(s2) * z));
    return n < 8 ? 8 : n;
}

static char *make_jsonl(int n, int vocab, size_t *len, double *mean_len) {
    size_t cap = 1 << 20, k = 0;
    char *buf = malloc(cap);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    double sum = 0;
    for (int e = 0; e < n && buf; e++) {
        int pl = lognormal(&s, 92, 40), cl = lognormal(&s, 176, 105);
        sum += pl + cl;
        while (buf && cap - k < (size_t)(pl + cl) * 8 + 64) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
        if (!buf) break;
        k += (size_t)sprintf(buf + k, "{\"prompt_ids\": [");
        for (int j = 0; j < pl; j++)
            k += (size_t)sprintf(buf + k, "%s%d", j ? "," : "", 1 + (int)(rng(&s) % (uint64_t)(vocab - 1)));
        k += (size_t)sprintf(buf + k, "], \"completion_ids\": [");
        for (int j = 0; j < cl; j++)
            k += (size_t)sprintf(buf + k, "%s%d", j ? "," : "", 1 + (int)(rng(&s) % (uint64_t)(vocab - 1)));
        k += (size_t)sprintf(buf + k, "]}\n");
    }
    if (!buf) {
        fprintf(stderr, "bench_pack: out of memory\n");
        exit(1);
    }
    *len = k;
    *mean_len = sum / n;
    return buf;
}

static long targets(const int *tg, size_t n) {
    long c = 0;
    for (size_t i = 0; i < n; i++) c += tg[i] != -100;
    return c;
}

/* one mode: its model and data, and what its timed steps did */
typedef struct {
    const char *what;
    const DataSource *src;
    Backend *be;
    Model *m;
    int *tok, *tgt, *pos;
    double wall, cpu;
    long trained, cells, filled;
} Mode;

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void mode_open(Mode *o, const char *what, const ModelDesc *d, const DataSource *src, int B, int T) {
    GtError err = {0};
    *o = (Mode){.what = what, .src = src};
    if (backend_open(&o->be, DEVICE_CPU, 0, 0, &err) ||
        model_create(&o->m, d, o->be, B, T, recompute_policy(false, 1, false, d->n_layer), 1, &err)) {
        fprintf(stderr, "bench_pack: %s\n", err.msg);
        exit(1);
    }
    const size_t BT = (size_t)B * T;
    o->tok = malloc(BT * sizeof(int)), o->tgt = malloc(BT * sizeof(int)), o->pos = malloc(BT * sizeof(int));
    if (!o->tok || !o->tgt || !o->pos) exit(1);
}

/* one full step (forward, backward, clip, AdamW) on the rows of step `step` (shuffled, as a run draws them:
 * a sample of the whole epoch, not its first, fullest packed rows); timed unless warm-up */
static void mode_step(Mode *o, int B, int T, int step, bool timed) {
    static const RunConfig cfg = {.adam_beta1 = 0.9, .adam_beta2 = 0.999, .adam_epsilon = 1e-8, .weight_decay = 0.1};
    GtError err = {0};
    const size_t BT = (size_t)B * T;
    data_fill_train_pos(o->src, 1, true, step, B, 0, B, o->tok, o->tgt, o->pos);
    const long items = targets(o->tgt, BT);
    double w0 = gt_now_seconds(), c0 = cpu_now(), loss;
    if (model_step_pos(o->m, o->tok, o->tgt, data_packed(o->src) ? o->pos : NULL, B,
                       (float)(1.0 / (double)(items ? items : 1)), true, &loss, &err)) {
        fprintf(stderr, "bench_pack: %s\n", err.msg);
        exit(1);
    }
    clip_grads(o->m, grad_global_norm(o->m), 1.0);
    adamw_step(o->m, 1e-4, &cfg, step + 1);
    model_zero_grads(o->m);
    o->be->ops->synchronize(o->be);
    if (!timed) return;
    o->wall += gt_now_seconds() - w0, o->cpu += cpu_now() - c0;
    o->trained += items, o->cells += (long)BT;
    for (size_t k = 0; k < BT; k++) o->filled += !(o->tok[k] == DATA_PAD_TOKEN && o->tgt[k] == DATA_IGNORE_INDEX);
}

static void mode_close(Mode *o, int B, int T, int steps) {
    printf("%-7s B=%d T=%d: %d steps, %ld completion tokens trained in %.2f s (%.2f s CPU): %.0f completion tok/s "
           "(%.0f per CPU second), %.1f%% padding\n", o->what, B, T, steps, o->trained, o->wall, o->cpu,
           o->trained / o->wall, o->trained / o->cpu, 100.0 * (1.0 - (double)o->filled / (double)o->cells));
    free(o->tok), free(o->tgt), free(o->pos);
    model_free(o->m);
    backend_close(o->be);
}

int main(int argc, char **argv) {
    cpu_runtime_setup(argc, argv);
    if (argc < 2) {
        fprintf(stderr, "usage: bench_pack MODEL.json [B] [T] [steps] [examples]\n");
        return 2;
    }
    const int B = argc > 2 ? atoi(argv[2]) : 4, T = argc > 3 ? atoi(argv[3]) : 512;
    const int steps = argc > 4 ? atoi(argv[4]) : 3, n = argc > 5 ? atoi(argv[5]) : 2000;
    GtError err = {0};
    ModelDesc d;
    if (model_desc_load(&d, argv[1], &err)) {
        fprintf(stderr, "bench_pack: %s\n", err.msg);
        return 2;
    }
    size_t len;
    double mean_len;
    char *text = make_jsonl(n, d.vocab_size, &len, &mean_len);
    DataSource *pk = NULL, *un = NULL;
    if (data_open_memory(&un, "metamath-like.jsonl", text, len, DATA_JSONL, false, T, d.vocab_size, DATA_SPLIT_ALL, 0,
                         &err) ||
        data_open_memory(&pk, "metamath-like.jsonl", text, len, DATA_JSONL, true, T, d.vocab_size, DATA_SPLIT_ALL, 0,
                         &err)) {
        fprintf(stderr, "bench_pack: %s\n", err.msg);
        return 1;
    }
    DataStats st;
    data_stats(pk, &st);
    printf("data: %d synthetic MetaMathQA-like examples, mean %.0f tokens, %llu truncated to %d; packed into %llu rows "
           "(%.1f%% padding), padded %d rows (%.1f%% padding)\n", n, mean_len, (unsigned long long)st.truncated, T + 1,
           (unsigned long long)st.packed_rows, 100.0 * (1.0 - (double)st.packed_tokens / ((double)st.packed_rows * T)),
           n, 100.0 * (1.0 - (double)st.packed_tokens / ((double)n * T)));
    /* the two modes step by step in turn, so that a change in the machine's load hits both alike */
    Mode u, p;
    mode_open(&u, "padded", &d, un, B, T);
    mode_open(&p, "packed", &d, pk, B, T);
    for (int i = -1; i < steps; i++) {
        mode_step(&u, B, T, i + 1, i >= 0);
        mode_step(&p, B, T, i + 1, i >= 0);
    }
    const double rw = (p.trained / p.wall) / (u.trained / u.wall), rc = (p.trained / p.cpu) / (u.trained / u.cpu);
    mode_close(&u, B, T, steps);
    mode_close(&p, B, T, steps);
    printf("ratio   packed / padded completion tokens per second = %.2f (per CPU second %.2f)  (%s, %s, B %d, T %d)\n",
           rw, rc, argv[1], blas_core_name(), B, T);
    data_close(pk), data_close(un);
    free(text);
    return 0;
}
