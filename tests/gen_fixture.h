/* gen_fixture.h - what the generation suites share (test_generate.c, test_gen_sampling.c,
 * bench/bench_decode.c): prompts of given lengths, a decoding model loaded from a Hugging Face
 * directory (optionally with a PEFT adapter) with its KV cache, generate_run's results kept in
 * prompt order, and transformers' generations read from tests/tools/hf_generate.py's output. */
#ifndef GT_TEST_GEN_FIXTURE_H
#define GT_TEST_GEN_FIXTURE_H

#include <stdint.h>

#include "decode.h"
#include "generate.h"

/* n prompts, prompt i of len[i] ids in [0, V) from a xorshift stream seeded by seed */
typedef struct {
    GenPrompt *p;
    int **ids;
    long n;
} GenFixPrompts;
void gen_fix_prompts(GenFixPrompts *pr, const int *len, long n, int V, uint64_t seed);
/* one prompt a line, ids separated by spaces (hf_generate.py's PROMPTS.txt); returns 0 or -1 */
int gen_fix_write_prompts(const GenFixPrompts *pr, const char *path);
void gen_fix_prompts_free(GenFixPrompts *pr);

/* a decoding model from an HF directory (+ a PEFT adapter directory, or NULL) in act, activations for
 * max(chunk, slots) tokens, logits for slots rows, and its cache of slots x ctx; NULL with err set
 * (and the test's own message) when something fails */
typedef struct {
    Backend *be;
    Model *m;
    KvCache *kv;
    ModelDesc d;
} GenFixModel;
int gen_fix_open(GenFixModel *g, const char *dir, const char *adapter, GtDtype act, int slots, int ctx, int chunk,
                 GtError *err);
void gen_fix_close(GenFixModel *g);

/* generate_run's results in prompt order: ids[i] (n[i] of them), finish[i]; text not kept */
typedef struct {
    int **ids;
    int *n;
    GenFinish *finish;
    long count, done;
} GenFixOut;
void gen_fix_out_init(GenFixOut *o, long n);
void gen_fix_out_free(GenFixOut *o);
/* generate_run over all prompts into o; its return value */
int gen_fix_generate(GenFixModel *g, const GenFixPrompts *pr, const GenOptions *opt, GenFixOut *o, GtError *err);

/* hf_generate.py greedy's lines "gen i: ..." and "margin i: ..." for i < n: new_tokens values each, or
 * with len (not NULL) up to new_tokens, their count into len[i] (the test fails if a line is missing,
 * short, or long); fresh arrays [n * new_tokens], prompt i's values from i * new_tokens */
void gen_fix_read_hf(const char *out, long n, int new_tokens, int **ids, double **margins, int *len);

#endif
