/* lora_train_fixture.c - see lora_train_fixture.h. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "lora_fixture.h"
#include "model.h"

#include "lora_train_fixture.h"

/* the architecture's parameter count, from the dims (HF's tensors, a tied head once) */
uint64_t base_params_from_dims(const ModelDesc *d) {
    const uint64_t C = (uint64_t)d->n_embd, I = (uint64_t)d->n_inner, V = (uint64_t)d->vocab_size;
    const uint64_t L = (uint64_t)d->n_layer;
    if (d->arch == ARCH_GPT2) {
        const uint64_t layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (I * C + I) + (C * I + C);
        return V * C + (uint64_t)d->n_positions * C + L * layer + 2 * C + (d->tie_word_embeddings ? 0 : V * C);
    }
    const uint64_t QD = (uint64_t)(d->n_head * d->head_dim), KD = (uint64_t)(d->n_kv_head * d->head_dim);
    const uint64_t layer = C + (QD + 2 * KD) * C + (d->qkv_bias ? QD + 2 * KD : 0) + C * QD + (d->o_bias ? C : 0) + C +
                           2 * I * C + (d->mlp_bias ? 2 * I : 0) + C * I + (d->mlp_bias ? C : 0);
    return V * C + L * layer + C + (d->tie_word_embeddings ? 0 : V * C);
}

float *dev_floats(Backend *be, const float *dev, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    GtError err = {0};
    cr_assert(h);
    cr_assert_eq(be->ops->to_host(be, h, dev, n * sizeof *h, &err), 0, "%s", err.msg);
    return h;
}

/* every base weight uniform(-0.3, 0.3), norm weights around 1, biases +-0.2 */
float *random_base(const ParamLayout *bl, uint64_t seed) {
    float *h = malloc(bl->total * sizeof *h);
    uint64_t s = seed;
    for (int i = 0; i < bl->n_tensors; i++) {
        const ParamTensor *t = &bl->tensors[i];
        const bool norm = t->role == ROLE_NORM1_W || t->role == ROLE_NORM2_W || t->role == ROLE_NORMF_W;
        const double a = t->ndim == 1 && !norm ? 0.2 : 0.3;
        for (size_t k = 0; k < t->numel; k++) h[t->offset + k] = (float)((norm ? 1.0 : 0.0) + a * (2 * lora_fix_rng_uniform(&s) - 1));
    }
    return h;
}

/* the base weights into the model (the frozen base under LoRA, narrowed to the act dtype; the
 * params of a plain model) */
void put_base(Model *m, const float *h) {
    const size_t n = m->base_layout.total;
    float *tmp = malloc(n * sizeof *tmp);
    memcpy(tmp, h, n * sizeof *tmp);
    GtError err = {0};
    cr_assert_eq(model_upload_base(m, 0, tmp, n, &err), 0, "%s", err.msg);
    free(tmp);
    model_params_changed(m);
}
