/* bench_decode.c - decode tokens/s of gtrain's batched generation on the CPU (make bench; not a test).
 * usage: bench_decode MODELDIR PROMPTS.txt SLOTS NEW [threads]
 * MODELDIR: a Hugging Face checkpoint (config.json + safetensors), fp32 compute; PROMPTS.txt: one prompt
 * a line, token ids separated by spaces (scripts/bench_hf_generate.py reads the same file). All
 * prompts go through one generate_run over a cache of SLOTS rows (greedy, exactly NEW new tokens: no
 * EOS), prefill chunk 512. Prints one line: slots, prompts, the wall time of generate_run (prefill
 * included, as transformers' generate is timed) and generated tokens per second. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blas_setup.h"
#include "checkpoint.h"
#include "decode.h"
#include "generate.h"

static int die(const char *what, const GtError *err) {
    fprintf(stderr, "bench_decode: %s%s%s\n", what, err ? ": " : "", err ? err->msg : "");
    return 1;
}

/* the prompts of path: ids into one array, starts and lengths into p */
static int read_prompts(const char *path, GenPrompt **out, long *n_out, int **ids_out) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t cap = 1 << 16, n = 0, np = 0, capp = 64;
    int *ids = malloc(cap * sizeof *ids);
    size_t *start = malloc(capp * sizeof *start), *len = malloc(capp * sizeof *len);
    if (!ids || !start || !len) return -1;
    char line[1 << 16];
    while (fgets(line, sizeof line, f)) {
        char *p = line, *end;
        const size_t s0 = n;
        for (long v = strtol(p, &end, 10); end != p; v = strtol(p, &end, 10)) {
            if (n == cap && !(ids = realloc(ids, (cap *= 2) * sizeof *ids))) return -1;
            ids[n++] = (int)v, p = end;
        }
        if (n == s0) continue;
        if (np == capp && (!(start = realloc(start, (capp *= 2) * sizeof *start)) ||
                           !(len = realloc(len, capp * sizeof *len))))
            return -1;
        start[np] = s0, len[np] = n - s0, np++;
    }
    fclose(f);
    GenPrompt *p = calloc(np ? np : 1, sizeof *p);
    if (!p) return -1;
    for (size_t i = 0; i < np; i++) p[i] = (GenPrompt){.ids = ids + start[i], .n = (int)len[i]};
    free(start), free(len);
    *out = p, *n_out = (long)np, *ids_out = ids;
    return 0;
}

static int count_done(void *ctx, const GenResult *r, GtError *err) {
    *(long *)ctx += r->n;
    return 0;
}

int main(int argc, char **argv) {
    cpu_runtime_setup(argc, argv);
    if (argc < 5) {
        fprintf(stderr, "usage: bench_decode MODELDIR PROMPTS.txt SLOTS NEW [threads]\n");
        return 2;
    }
    const int slots = atoi(argv[3]), new_tokens = atoi(argv[4]), threads = argc > 5 ? atoi(argv[5]) : 0;
    GtError err = {0};
    GenPrompt *pr = NULL;
    long np = 0;
    int *ids = NULL, max_len = 0;
    if (read_prompts(argv[2], &pr, &np, &ids) || np == 0) return die("cannot read the prompts", NULL);
    for (long i = 0; i < np; i++) max_len = pr[i].n > max_len ? pr[i].n : max_len;
    ModelDesc d;
    if (model_desc_load(&d, argv[1], &err)) return die(argv[1], &err);
    Backend *be = NULL;
    if (backend_open(&be, DEVICE_CPU, 0, threads, &err)) return die("backend", &err);
    backend_set_act_dtype(be, GT_F32);
    const int chunk = 512;
    Model *m = NULL;
    KvCache *kv = NULL;
    if (model_create_decode(&m, &d, be, chunk > slots ? chunk : slots, slots, &err)) return die("model", &err);
    if (checkpoint_load_weights(m, argv[1], &err)) return die("weights", &err);
    if (kv_cache_create(&kv, m, slots, max_len + new_tokens + 1, &err)) return die("cache", &err);
    GenOptions o = {.max_new_tokens = new_tokens, .do_sample = false, .temperature = 1, .top_p = 1,
                    .prefill_chunk = chunk};
    long generated = 0;
    const double t0 = gt_now_seconds();
    if (generate_run(m, kv, pr, np, &o, count_done, NULL, &generated, &err)) return die("generate_run", &err);
    be->ops->synchronize(be);
    const double t = gt_now_seconds() - t0;
    printf("gtrain  decode %-24s slots %2d  %3ld prompts of <= %d tokens + %d new  %7.2f s  %8.1f new tok/s  (%s, %d "
           "threads)\n", d.model_type, slots, np, max_len, new_tokens, t, generated / t, be->device_name,
           be->num_threads);
    kv_cache_free(kv);
    model_free(m);
    backend_close(be);
    free(pr), free(ids);
    return 0;
}
