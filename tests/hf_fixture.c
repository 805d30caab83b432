/* hf_fixture.c - see hf_fixture.h. */
#include "hf_fixture.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "test_util.h"

const char HF_FIX_TINY_GPT2[] =
    "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", \"activation_function\": \"gelu_new\", "
    "\"n_embd\": 64, \"n_head\": 4, \"n_layer\": 2, \"n_positions\": 64, \"n_ctx\": 64, \"n_inner\": null, "
    "\"vocab_size\": 256, \"layer_norm_epsilon\": 1e-05, \"attn_pdrop\": 0.0, \"embd_pdrop\": 0.0, "
    "\"resid_pdrop\": 0.0, \"tie_word_embeddings\": true, \"bos_token_id\": 0, \"eos_token_id\": 0}\n";

void hf_fix_make(const char *root, const char *dir, const char *config, const char *ref, const char *args) {
    char cfg[300];
    if (config)
        snprintf(cfg, sizeof cfg, "%s/tests/fixtures/hf_configs/%s", root, config);
    else
        snprintf(cfg, sizeof cfg, "%s", test_join(dir, "gpt2.json")),
            test_write_file(cfg, HF_FIX_TINY_GPT2, strlen(HF_FIX_TINY_GPT2));
    free(test_sh_output(false, PY " '%s/tests/tools/hf_models.py' make '%s' '%s' %s", root, cfg, ref, args));
}

double hf_fix_after(const char *out, const char *key) {
    const char *p = strstr(out, key);
    cr_assert(p, "no '%s' in:\n%s", key, out);
    return strtod(p + strlen(key), NULL);
}

int hf_fix_grad_blocks(const ModelDesc *d, const ParamTensor *t, const float *g, HfWeights *w, const char *what,
                       int64_t k0, int64_t k1, double *dmax, double *gmax, double *kb_ours, double *kb_theirs) {
    GtError err = {0};
    int used = 0;
    for (int b = 0; b < t->spec->n_blocks; b++) {
        char name[128];
        int64_t row0, rows;
        arch_block_name(t, b, name, sizeof name, d, &row0, &rows);
        int k = hf_weights_find(w, name);
        cr_assert(k >= 0, "%s: transformers has no parameter %s (gtrain's %s)", what, name, t->name);
        used++;
        HfTensorInfo info;
        hf_weights_info(w, k, &info);
        const int64_t cols = t->ndim == 1 ? 1 : t->shape[1];
        cr_assert_eq(info.numel, rows * cols, "%s: %s holds %lld values, gtrain's block %lld", what, name,
                     (long long)info.numel, (long long)(rows * cols));
        float *h = malloc((size_t)info.numel * sizeof *h);
        cr_assert_not_null(h);
        cr_assert_eq(hf_weights_read_f32(w, k, h, (size_t)info.numel, &err), 0, "%s", err.msg);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) {
                const double ours = g[t->offset + (size_t)((row0 + r) * cols + c)];
                const double theirs = t->transposed ? h[c * rows + r] : h[r * cols + c]; /* Conv1D: [in, out] */
                *gmax = fmax(*gmax, fabs(theirs));
                *dmax = fmax(*dmax, fabs(ours - theirs));
                if (row0 + r >= k0 && row0 + r < k1)
                    *kb_ours = fmax(*kb_ours, fabs(ours)), *kb_theirs = fmax(*kb_theirs, fabs(theirs));
            }
        free(h);
    }
    return used;
}
