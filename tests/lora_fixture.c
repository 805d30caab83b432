/* lora_fixture.c - see lora_fixture.h. */
#include "lora_fixture.h"

#include <math.h>
#include <stdio.h>

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
