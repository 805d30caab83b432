/* lora_fixture.c - see lora_fixture.h. */
#include "lora_fixture.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "adapter.h"
#include "arch.h"
#include "ref_gpt.h"

ModelDesc lora_fix_base(bool llama, int L) {
    ModelDesc d;
    if (llama)
        d = (ModelDesc){.arch = ARCH_LLAMA, .n_layer = L, .n_head = 4, .n_kv_head = 2, .head_dim = 4, .n_embd = 16,
                        .n_inner = 24, .vocab_size = 32, .n_positions = 64, .layer_norm_epsilon = 1e-5,
                        .rope_theta = 10000.0, .qkv_bias = true, .o_bias = true};
    else
        d = (ModelDesc){.arch = ARCH_GPT2, .n_layer = L, .n_head = 2, .n_embd = 16, .n_inner = 64, .vocab_size = 32,
                        .n_positions = 32, .layer_norm_epsilon = 1e-5, .tie_word_embeddings = true};
    snprintf(d.model_type, sizeof d.model_type, "%s", llama ? "llama" : "gpt2");
    model_desc_defaults(&d);
    return d;
}

double lora_fix_scaling(double alpha, int r, bool rslora) { return rslora ? alpha / sqrt((double)r) : alpha / r; }

ModelDesc lora_fix_desc(bool llama, int L, int r, double alpha, uint32_t targets, bool rslora, double p, LoraInit init) {
    ModelDesc d = lora_fix_base(llama, L);
    d.adapter.r = r, d.adapter.targets = targets, d.adapter.scale = lora_fix_scaling(alpha, r, rslora), d.adapter.dropout = p;
    d.adapter.init = (int)init;
    return d;
}

void lora_fix_module_dims(const ModelDesc *d, int module, int *in, int *out) {
    const int C = d->n_embd, I = d->n_inner, QD = d->n_head * d->head_dim, KD = d->n_kv_head * d->head_dim;
    switch (module) {
    case PEFT_Q_PROJ: *in = C, *out = QD; break;
    case PEFT_K_PROJ: case PEFT_V_PROJ: *in = C, *out = KD; break;
    case PEFT_O_PROJ: *in = QD, *out = C; break;
    case PEFT_GATE_PROJ: case PEFT_UP_PROJ: *in = C, *out = I; break;
    case PEFT_DOWN_PROJ: *in = I, *out = C; break;
    case PEFT_C_ATTN: *in = C, *out = 3 * C; break;
    case PEFT_ATTN_C_PROJ: *in = C, *out = C; break;
    case PEFT_C_FC: *in = C, *out = I; break;
    case PEFT_QKV_PROJ: *in = C, *out = QD + 2 * KD; break; /* Phi-3's fused ones */
    case PEFT_GATE_UP_PROJ: *in = C, *out = 2 * I; break;
    default: *in = I, *out = C; break; /* mlp.c_proj */
    }
}

uint64_t lora_fix_key(uint64_t seed, long step, int layer, int module) {
    return lora_dropout_key(seed, step, layer, (PeftModule)module);
}

uint64_t lora_fix_rng_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

double lora_fix_rng_uniform(uint64_t *s) { return (double)(lora_fix_rng_next(s) >> 11) / 9007199254740992.0; }

double lora_fix_rng_normal(uint64_t *s) {
    const double u1 = (lora_fix_rng_uniform(s) * 9007199254740991.0 + 1.0) / 9007199254740992.0,
                 u2 = lora_fix_rng_uniform(s);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void lora_fix_tokens(int *tok, int *tgt, size_t n, int V, uint64_t seed, int mask_every) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        tok[i] = (int)(lora_fix_rng_next(&s) % (uint64_t)V);
        tgt[i] = mask_every && i % (size_t)mask_every == 3 ? -100 : (int)(lora_fix_rng_next(&s) % (uint64_t)V);
    }
}

void lora_fix_dora_weights(Model *m, uint64_t *s, float *base_h, float *params_h) {
    GtError err = {0};
    const ParamLayout *bl = &m->base_layout;
    for (int i = 0; i < bl->n_tensors; i++) {
        const ParamTensor *t = &bl->tensors[i];
        const bool norm = t->role == ROLE_NORM1_W || t->role == ROLE_NORM2_W || t->role == ROLE_NORMF_W;
        for (size_t k = 0; k < t->numel; k++)
            base_h[t->offset + k] = (float)((norm ? 1.0 : 0.0) + 0.3 * (2 * lora_fix_rng_uniform(s) - 1));
    }
    float *tmp = malloc(bl->total * sizeof *tmp); /* model_upload_base may use it as scratch */
    cr_assert_not_null(tmp);
    memcpy(tmp, base_h, bl->total * sizeof *tmp);
    cr_assert_eq(model_upload_base(m, 0, tmp, bl->total, &err), 0, "%s", err.msg);
    free(tmp);
    model_params_changed(m);
    cr_assert_eq(adapter_init_from_base(m, &err), 0, "%s", err.msg);
    if (!params_h) return;
    const ParamLayout *pl = &m->layout;
    for (int i = 0; i < pl->n_tensors; i++) {
        const ParamTensor *t = &pl->tensors[i];
        for (size_t k = 0; k < t->numel; k++)
            params_h[t->offset + k] = (float)(t->ndim == 1 ? 0.5 + lora_fix_rng_uniform(s)
                                                            : 0.3 * (2 * lora_fix_rng_uniform(s) - 1));
    }
    cr_assert_eq(m->be->ops->to_device(m->be, m->params, params_h, pl->total * sizeof *params_h, &err), 0, "%s",
                 err.msg);
    model_params_changed(m);
}

RefLlamaCfg lora_fix_ref_cfg(const ModelDesc *d) {
    return (RefLlamaCfg){.hidden = d->n_embd, .inter = d->n_inner, .layers = d->n_layer, .heads = d->n_head,
                         .kv_heads = d->n_kv_head, .head_dim = d->head_dim, .vocab = d->vocab_size,
                         .eps = d->layer_norm_epsilon, .theta = d->rope_theta, .window = d->sliding_window,
                         .qkv_bias = d->qkv_bias, .o_bias = d->o_bias, .mlp_bias = d->mlp_bias,
                         .tie = d->tie_word_embeddings};
}

void lora_fix_ref_open(LoraFixRef *r, const ModelDesc *d, const ParamLayout *bl, const float *base_h) {
    *r = (LoraFixRef){.d = *d, .bl = bl, .llama = d->arch == ARCH_LLAMA};
    if (!r->llama) {
        r->base_d = malloc(bl->total * sizeof *r->base_d);
        cr_assert_not_null(r->base_d);
        for (size_t k = 0; k < bl->total; k++) r->base_d[k] = base_h[k];
        return;
    }
    r->rc = lora_fix_ref_cfg(d);
    r->ref = ref_llama_alloc(&r->rc, &r->n_ref);
    cr_assert(r->ref);
    for (int i = 0; i < bl->n_tensors; i++) {
        const ParamTensor *t = &bl->tensors[i];
        for (int b = 0; b < t->spec->n_blocks; b++) {
            char name[128];
            int64_t row0, rows;
            arch_block_name(t, b, name, sizeof name, d, &row0, &rows);
            RefTensor *rt = ref_llama_find(r->ref, r->n_ref, name);
            cr_assert(rt, "reference has no tensor %s (gtrain %s block %d)", name, t->name, b);
            const int64_t cols = t->ndim == 2 ? t->shape[1] : 1;
            cr_assert_eq(rt->rows * rt->cols, rows * cols, "%s", name);
            for (int64_t k = 0; k < rows * cols; k++) rt->data[k] = base_h[t->offset + (size_t)(row0 * cols + k)];
        }
    }
}

void lora_fix_ref_close(LoraFixRef *r) {
    if (r->ref) ref_llama_free(r->ref, r->n_ref);
    free(r->base_d);
    *r = (LoraFixRef){0};
}

void lora_fix_grad_diff(const float *g, const double *fd, size_t n, double *diff, double *big, size_t *at) {
    *diff = 0, *big = 0, *at = 0;
    for (size_t k = 0; k < n; k++) {
        const double e = fabs((double)g[k] - fd[k]);
        if (e > *diff) *diff = e, *at = k;
        *big = fmax(*big, fabs(fd[k]));
    }
}

double lora_fix_ref_loss(const LoraFixRef *r, const RefLora *lo, const int *tok, const int *tgt, int B, int T) {
    if (r->llama) return ref_llama_loss_lora(&r->rc, r->ref, r->n_ref, lo, tok, tgt, B, T);
    long cnt = 0;
    const double s = ref_gpt_loss_sum_lora(&r->d, r->bl, r->base_d, lo, tok, tgt, B, T, &cnt);
    return cnt ? s / (double)cnt : 0.0;
}
