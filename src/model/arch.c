/* arch.c - the architecture tables (see arch.h) and what is derived from them: the parameter
 * layout, the parameter count, initialisation, HF names, the rotary table. */
#include "arch.h"

#include "model_desc_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the tables */

#define ONE(n, r) 1, {{n, r}}

/* GPT-2 (HF GPT2LMHeadModel): names without "transformer." are gtrain's; Conv1D weights are stored
 * [in, out]. The order is the layout's (and the seeds of the initialisation: keep it). */
static const ArchTensor GPT2_TENSORS[] = {
    {ROLE_WTE, false, "wte.weight", DIM_V, DIM_C, INIT_NORMAL, true, false, WHEN_ALWAYS, ONE("transformer.wte.weight", DIM_V)},
    {ROLE_WPE, false, "wpe.weight", DIM_P, DIM_C, INIT_NORMAL, true, false, WHEN_ALWAYS, ONE("transformer.wpe.weight", DIM_P)},
    {ROLE_NORM1_W, true, "h.%d.ln_1.weight", DIM_C, DIM_1, INIT_ONES, false, false, WHEN_ALWAYS,
     ONE("transformer.h.%d.ln_1.weight", DIM_C)},
    {ROLE_NORM1_B, true, "h.%d.ln_1.bias", DIM_C, DIM_1, INIT_ZEROS, false, false, WHEN_ALWAYS,
     ONE("transformer.h.%d.ln_1.bias", DIM_C)},
    {ROLE_QKV_W, true, "h.%d.attn.c_attn.weight", DIM_QKV, DIM_C, INIT_NORMAL, true, true, WHEN_ALWAYS,
     ONE("transformer.h.%d.attn.c_attn.weight", DIM_QKV)},
    {ROLE_QKV_B, true, "h.%d.attn.c_attn.bias", DIM_QKV, DIM_1, INIT_ZEROS, false, false, WHEN_ALWAYS,
     ONE("transformer.h.%d.attn.c_attn.bias", DIM_QKV)},
    {ROLE_O_W, true, "h.%d.attn.c_proj.weight", DIM_C, DIM_Q, INIT_NORMAL_RESID, true, true, WHEN_ALWAYS,
     ONE("transformer.h.%d.attn.c_proj.weight", DIM_C)},
    {ROLE_O_B, true, "h.%d.attn.c_proj.bias", DIM_C, DIM_1, INIT_ZEROS, false, false, WHEN_ALWAYS,
     ONE("transformer.h.%d.attn.c_proj.bias", DIM_C)},
    {ROLE_NORM2_W, true, "h.%d.ln_2.weight", DIM_C, DIM_1, INIT_ONES, false, false, WHEN_ALWAYS,
     ONE("transformer.h.%d.ln_2.weight", DIM_C)},
    {ROLE_NORM2_B, true, "h.%d.ln_2.bias", DIM_C, DIM_1, INIT_ZEROS, false, false, WHEN_ALWAYS,
     ONE("transformer.h.%d.ln_2.bias", DIM_C)},
    {ROLE_FC_W, true, "h.%d.mlp.c_fc.weight", DIM_I, DIM_C, INIT_NORMAL, true, true, WHEN_ALWAYS,
     ONE("transformer.h.%d.mlp.c_fc.weight", DIM_I)},
    {ROLE_FC_B, true, "h.%d.mlp.c_fc.bias", DIM_I, DIM_1, INIT_ZEROS, false, false, WHEN_ALWAYS,
     ONE("transformer.h.%d.mlp.c_fc.bias", DIM_I)},
    {ROLE_DOWN_W, true, "h.%d.mlp.c_proj.weight", DIM_C, DIM_I, INIT_NORMAL_RESID, true, true, WHEN_ALWAYS,
     ONE("transformer.h.%d.mlp.c_proj.weight", DIM_C)},
    {ROLE_DOWN_B, true, "h.%d.mlp.c_proj.bias", DIM_C, DIM_1, INIT_ZEROS, false, false, WHEN_ALWAYS,
     ONE("transformer.h.%d.mlp.c_proj.bias", DIM_C)},
    {ROLE_NORMF_W, false, "ln_f.weight", DIM_C, DIM_1, INIT_ONES, false, false, WHEN_ALWAYS,
     ONE("transformer.ln_f.weight", DIM_C)},
    {ROLE_NORMF_B, false, "ln_f.bias", DIM_C, DIM_1, INIT_ZEROS, false, false, WHEN_ALWAYS,
     ONE("transformer.ln_f.bias", DIM_C)},
    {ROLE_LM_HEAD, false, "lm_head.weight", DIM_V, DIM_C, INIT_NORMAL, true, false, WHEN_UNTIED,
     ONE("lm_head.weight", DIM_V)},
};

/* The Llama family (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM share these names).
 * q/k/v are one gtrain tensor of three row blocks, gate/up one of two, so each is one GEMM;
 * HF's initialisation: normal(0, 0.02) for every linear and the embedding, norms 1, biases 0. */
#define L_ "model.layers.%d."
/* the rows the RoPE families share (each table lists them in its layout order) */
#define R_WTE                                                                                                     \
    {ROLE_WTE, false, "model.embed_tokens.weight", DIM_V, DIM_C, INIT_NORMAL, true, false, WHEN_ALWAYS,            \
     ONE("model.embed_tokens.weight", DIM_V)}
#define R_NORM1                                                                                                   \
    {ROLE_NORM1_W, true, L_ "input_layernorm.weight", DIM_C, DIM_1, INIT_ONES, false, false, WHEN_ALWAYS,          \
     ONE(L_ "input_layernorm.weight", DIM_C)}
#define R_QKV_W                                                                                                   \
    {ROLE_QKV_W, true, L_ "self_attn.qkv_proj.weight", DIM_QKV, DIM_C, INIT_NORMAL, true, false, WHEN_ALWAYS, 3,   \
     {{L_ "self_attn.q_proj.weight", DIM_Q}, {L_ "self_attn.k_proj.weight", DIM_KV}, {L_ "self_attn.v_proj.weight", DIM_KV}}}
#define R_QKV_B                                                                                                   \
    {ROLE_QKV_B, true, L_ "self_attn.qkv_proj.bias", DIM_QKV, DIM_1, INIT_ZEROS, false, false, WHEN_QKV_BIAS, 3,   \
     {{L_ "self_attn.q_proj.bias", DIM_Q}, {L_ "self_attn.k_proj.bias", DIM_KV}, {L_ "self_attn.v_proj.bias", DIM_KV}}}
#define R_O_W                                                                                                     \
    {ROLE_O_W, true, L_ "self_attn.o_proj.weight", DIM_C, DIM_Q, INIT_NORMAL, true, false, WHEN_ALWAYS,            \
     ONE(L_ "self_attn.o_proj.weight", DIM_C)}
#define R_O_B                                                                                                     \
    {ROLE_O_B, true, L_ "self_attn.o_proj.bias", DIM_C, DIM_1, INIT_ZEROS, false, false, WHEN_O_BIAS,              \
     ONE(L_ "self_attn.o_proj.bias", DIM_C)}
#define R_NORM2                                                                                                   \
    {ROLE_NORM2_W, true, L_ "post_attention_layernorm.weight", DIM_C, DIM_1, INIT_ONES, false, false, WHEN_ALWAYS, \
     ONE(L_ "post_attention_layernorm.weight", DIM_C)}
#define R_FC_W                                                                                                    \
    {ROLE_FC_W, true, L_ "mlp.gate_up_proj.weight", DIM_2I, DIM_C, INIT_NORMAL, true, false, WHEN_ALWAYS, 2,       \
     {{L_ "mlp.gate_proj.weight", DIM_I}, {L_ "mlp.up_proj.weight", DIM_I}}}
#define R_DOWN_W                                                                                                  \
    {ROLE_DOWN_W, true, L_ "mlp.down_proj.weight", DIM_C, DIM_I, INIT_NORMAL, true, false, WHEN_ALWAYS,            \
     ONE(L_ "mlp.down_proj.weight", DIM_C)}
#define R_NORMF                                                                                                   \
    {ROLE_NORMF_W, false, "model.norm.weight", DIM_C, DIM_1, INIT_ONES, false, false, WHEN_ALWAYS,                 \
     ONE("model.norm.weight", DIM_C)}
#define R_LM_HEAD                                                                                                 \
    {ROLE_LM_HEAD, false, "lm_head.weight", DIM_V, DIM_C, INIT_NORMAL, true, false, WHEN_UNTIED,                   \
     ONE("lm_head.weight", DIM_V)}

static const ArchTensor LLAMA_TENSORS[] = {
    R_WTE, R_NORM1, R_QKV_W, R_QKV_B, R_O_W, R_O_B, R_NORM2, R_FC_W,
    {ROLE_FC_B, true, L_ "mlp.gate_up_proj.bias", DIM_2I, DIM_1, INIT_ZEROS, false, false, WHEN_MLP_BIAS, 2,
     {{L_ "mlp.gate_proj.bias", DIM_I}, {L_ "mlp.up_proj.bias", DIM_I}}},
    R_DOWN_W,
    {ROLE_DOWN_B, true, L_ "mlp.down_proj.bias", DIM_C, DIM_1, INIT_ZEROS, false, false, WHEN_MLP_BIAS,
     ONE(L_ "mlp.down_proj.bias", DIM_C)},
    R_NORMF, R_LM_HEAD,
};

/* Phi-3 (Phi3ForCausalLM): Llama's block, with HF's q|k|v and gate|up already fused (gate first),
 * no biases; gtrain's names are the Llama table's */
static const ArchTensor PHI3_TENSORS[] = {
    R_WTE, R_NORM1,
    {ROLE_QKV_W, true, L_ "self_attn.qkv_proj.weight", DIM_QKV, DIM_C, INIT_NORMAL, true, false, WHEN_ALWAYS,
     ONE(L_ "self_attn.qkv_proj.weight", DIM_QKV)},
    R_O_W, R_NORM2,
    {ROLE_FC_W, true, L_ "mlp.gate_up_proj.weight", DIM_2I, DIM_C, INIT_NORMAL, true, false, WHEN_ALWAYS,
     ONE(L_ "mlp.gate_up_proj.weight", DIM_2I)},
    R_DOWN_W, R_NORMF, R_LM_HEAD,
};

/* Qwen3 (Qwen3ForCausalLM): Llama's tensors (attention_bias: q, k, v and o biases; no MLP bias)
 * and the per-head q_norm / k_norm weights [head_dim] */
static const ArchTensor QWEN3_TENSORS[] = {
    R_WTE, R_NORM1, R_QKV_W, R_QKV_B, R_O_W, R_O_B,
    {ROLE_QNORM_W, true, L_ "self_attn.q_norm.weight", DIM_HD, DIM_1, INIT_ONES, false, false, WHEN_ALWAYS,
     ONE(L_ "self_attn.q_norm.weight", DIM_HD)},
    {ROLE_KNORM_W, true, L_ "self_attn.k_norm.weight", DIM_HD, DIM_1, INIT_ONES, false, false, WHEN_ALWAYS,
     ONE(L_ "self_attn.k_norm.weight", DIM_HD)},
    R_NORM2, R_FC_W, R_DOWN_W, R_NORMF, R_LM_HEAD,
};
#undef R_WTE
#undef R_NORM1
#undef R_QKV_W
#undef R_QKV_B
#undef R_O_W
#undef R_O_B
#undef R_NORM2
#undef R_FC_W
#undef R_DOWN_W
#undef R_NORMF
#undef R_LM_HEAD
#undef L_
#undef ONE

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
/* the Llama family's sizes (HF's names), every one required */
#define LLAMA_SIZES                                                                                                 \
    {{"num_hidden_layers", NULL, FIELD_N_LAYER, 1, MAX_N_LAYER, 0},                                               \
     {"num_attention_heads", NULL, FIELD_N_HEAD, 1, MAX_N_HEAD, 0},                                               \
     {"hidden_size", NULL, FIELD_N_EMBD, 1, MAX_N_EMBD, 0},                                                       \
     {"intermediate_size", NULL, FIELD_N_INNER, 1, MAX_N_INNER, 0},                                               \
     {"vocab_size", NULL, FIELD_VOCAB, 1, MAX_VOCAB, 0},                                                          \
     {"max_position_embeddings", NULL, FIELD_POSITIONS, 1, MAX_POSITIONS, 0}}

/* the RoPE families' keys beside the sizes: HF's LlamaConfig's names and defaults */
#define ROPE_KEYS                                                                                                   \
    .norm_eps_key = "rms_norm_eps", .norm_eps_default = 1e-6, .act_key = "hidden_act",                              \
    .act_values = {"silu", "swish"}, .act_expected = "\"silu\" (the SwiGLU MLP)", .tie_default = false,              \
    .readers = {model_desc_rope_architectures, model_desc_read_sizes, model_desc_rope_heads, model_desc_block_keys, \
                model_desc_rope_keys}

/* the Llama family's seven PEFT modules (Qwen3's too), PEFT's default targets and their summary */
#define LLAMA_PEFT                                                                                                  \
    .n_peft = 7,                                                                                                    \
    .peft = {{PEFT_Q_PROJ, "q_proj", "self_attn.q_proj"}, {PEFT_K_PROJ, "k_proj", "self_attn.k_proj"},               \
             {PEFT_V_PROJ, "v_proj", "self_attn.v_proj"}, {PEFT_O_PROJ, "o_proj", "self_attn.o_proj"},               \
             {PEFT_GATE_PROJ, "gate_proj", "mlp.gate_proj"}, {PEFT_UP_PROJ, "up_proj", "mlp.up_proj"},               \
             {PEFT_DOWN_PROJ, "down_proj", "mlp.down_proj"}},                                                        \
    .peft_default_targets = "q_proj,v_proj", .peft_summary = "q_proj ... down_proj"

static const ArchSpec SPECS[ARCH_COUNT] = {
    [ARCH_GPT2] = {.arch = ARCH_GPT2, .name = "GPT-2", .norm = NORM_LAYERNORM, .mlp = MLP_GELU_TANH,
                   .pos = POS_LEARNED, .n_families = 1,
                   .families = {{"gpt2", "GPT2LMHeadModel", "GPT-2", 0, 0, BIAS_KEYS_NONE, WINDOW_KEYS_NONE, false, false,
                                 {NULL}}},
                   .hf_optional_prefix = "transformer.", .layer_prefix = "transformer.h.", .n_peft = 4,
                   .peft = {{PEFT_C_ATTN, "c_attn", "attn.c_attn"}, {PEFT_ATTN_C_PROJ, "c_proj", "attn.c_proj"},
                            {PEFT_C_FC, "c_fc", "mlp.c_fc"}, {PEFT_MLP_C_PROJ, "c_proj", "mlp.c_proj"}},
                   .peft_default_targets = "c_attn", .peft_summary = "c_attn, c_proj, c_fc", .config_from_desc = true,
                   .sizes = {{"n_layer", NULL, FIELD_N_LAYER, 1, MAX_N_LAYER, 0},
                             {"n_head", NULL, FIELD_N_HEAD, 1, MAX_N_HEAD, 0},
                             {"n_embd", NULL, FIELD_N_EMBD, 1, MAX_N_EMBD, 0},
                             {"n_inner", NULL, FIELD_N_INNER, 1, MAX_N_INNER, 4},
                             {"vocab_size", NULL, FIELD_VOCAB, 1, MAX_VOCAB, 0},
                             {"n_positions", "n_ctx", FIELD_POSITIONS, 1, MAX_POSITIONS, 0}},
                   .norm_eps_key = "layer_norm_epsilon", .norm_eps_default = 1e-5, .act_key = "activation_function",
                   .act_values = {"gelu_new", "gelu_pytorch_tanh"},
                   .act_expected = "\"gelu_new\" or \"gelu_pytorch_tanh\" (tanh GELU)", .tie_default = true,
                   .readers = {model_desc_read_sizes, model_desc_heads_divide, model_desc_block_keys},
                   .tensors = GPT2_TENSORS, .n_tensors = COUNT(GPT2_TENSORS)},
    [ARCH_LLAMA] = {.arch = ARCH_LLAMA, .name = "Llama-family", .norm = NORM_RMSNORM, .mlp = MLP_SWIGLU,
                    .pos = POS_ROPE, .n_families = 3,
                    .families = {{"llama", "LlamaForCausalLM", "Llama", 0, 0, BIAS_KEYS_LLAMA, WINDOW_KEYS_NONE, true,
                                  true, {"attention_dropout"}},
                                 {"mistral", "MistralForCausalLM", "Mistral", 8, 0, BIAS_KEYS_NONE, WINDOW_KEYS_REQUIRED,
                                  false, true, {"attention_dropout"}},
                                 {"qwen2", "Qwen2ForCausalLM", "Qwen2", 32, 0, BIAS_KEYS_QKV, WINDOW_KEYS_USE_FLAG, false,
                                  true, {"attention_dropout"}}},
                    .layer_prefix = "model.layers.", LLAMA_PEFT,
                    .sizes = LLAMA_SIZES, ROPE_KEYS,
                    .tensors = LLAMA_TENSORS, .n_tensors = COUNT(LLAMA_TENSORS)},
    /* HF's Phi3Config: num_key_value_heads None -> num_attention_heads, no biases, sliding_window on
     * every layer when not null, the three dropouts; RoPE "default" only (longrope / su / yarn and
     * partial_rotary_factor refused); PEFT has no default targets for it */
    [ARCH_PHI3] = {.arch = ARCH_PHI3, .name = "Phi-3", .norm = NORM_RMSNORM, .mlp = MLP_SWIGLU, .pos = POS_ROPE,
                   .n_families = 1,
                   .families = {{"phi3", "Phi3ForCausalLM", "Phi3", 0, 0, BIAS_KEYS_NONE, WINDOW_KEYS_OPTIONAL, false,
                                 false, {"attention_dropout", "resid_pdrop", "embd_pdrop"}}},
                   .layer_prefix = "model.layers.", .n_peft = 4,
                   .peft = {{PEFT_QKV_PROJ, "qkv_proj", "self_attn.qkv_proj"}, {PEFT_O_PROJ, "o_proj", "self_attn.o_proj"},
                            {PEFT_GATE_UP_PROJ, "gate_up_proj", "mlp.gate_up_proj"},
                            {PEFT_DOWN_PROJ, "down_proj", "mlp.down_proj"}},
                   .peft_default_targets = NULL, .peft_summary = "qkv_proj, o_proj, gate_up_proj, down_proj",
                   .sizes = LLAMA_SIZES, ROPE_KEYS,
                   .tensors = PHI3_TENSORS, .n_tensors = COUNT(PHI3_TENSORS)},
    /* HF's Qwen3Config: num_key_value_heads (default 32) and head_dim (default 128, not
     * hidden_size / num_attention_heads) must be written out; attention_bias gives q, k, v and o
     * biases; Qwen2's window keys; PEFT's default targets q_proj, v_proj */
    [ARCH_QWEN3] = {.arch = ARCH_QWEN3, .name = "Qwen3", .norm = NORM_RMSNORM, .mlp = MLP_SWIGLU, .pos = POS_ROPE,
                    .qk_norm = true, .n_families = 1,
                    .families = {{"qwen3", "Qwen3ForCausalLM", "Qwen3", 32, 128, BIAS_KEYS_ATTN, WINDOW_KEYS_USE_FLAG,
                                  false, true, {"attention_dropout"}}},
                    .layer_prefix = "model.layers.", LLAMA_PEFT,
                    .sizes = LLAMA_SIZES, ROPE_KEYS,
                    .tensors = QWEN3_TENSORS, .n_tensors = COUNT(QWEN3_TENSORS)},
};

const ArchSpec *arch_spec(ModelArch arch) { return &SPECS[arch < ARCH_COUNT ? arch : ARCH_GPT2]; }

const ArchFamily *arch_family_of(const char *model_type, ModelArch *arch) {
    if (!model_type) { /* no model_type: GPT-2's (the description filled by hand's first family) */
        if (arch) *arch = ARCH_GPT2;
        return &SPECS[ARCH_GPT2].families[0];
    }
    for (int a = 0; a < ARCH_COUNT; a++)
        for (int f = 0; f < SPECS[a].n_families; f++)
            if (strcmp(model_type, SPECS[a].families[f].model_type) == 0) {
                if (arch) *arch = (ModelArch)a;
                return &SPECS[a].families[f];
            }
    return NULL;
}

const ArchFamily *arch_family(const ModelDesc *d) {
    const ArchSpec *s = arch_spec(d->arch);
    for (int f = 0; f < s->n_families; f++)
        if (strcmp(d->model_type, s->families[f].model_type) == 0) return &s->families[f];
    return &s->families[0];
}

int *arch_size_field(ModelDesc *d, ArchField f) {
    switch (f) {
    case FIELD_N_LAYER: return &d->n_layer;
    case FIELD_N_HEAD: return &d->n_head;
    case FIELD_N_EMBD: return &d->n_embd;
    case FIELD_N_INNER: return &d->n_inner;
    case FIELD_VOCAB: return &d->vocab_size;
    case FIELD_POSITIONS: return &d->n_positions;
    }
    return &d->n_layer;
}

const char *arch_hf_class(const ModelDesc *d) { return arch_family(d)->hf_class; }

const ArchPeft *arch_peft_module(ModelArch arch, PeftModule m) {
    const ArchSpec *s = arch_spec(arch);
    for (int i = 0; i < s->n_peft; i++)
        if (s->peft[i].module == m) return &s->peft[i];
    return NULL;
}

const ArchPeft *arch_peft_any(PeftModule m) {
    for (int a = 0; a < ARCH_COUNT; a++) {
        const ArchPeft *p = arch_peft_module((ModelArch)a, m);
        if (p) return p;
    }
    return NULL;
}

int64_t arch_dim(const ModelDesc *d, ArchDim dim) {
    switch (dim) {
    case DIM_1: return 1;
    case DIM_V: return d->vocab_size;
    case DIM_P: return d->n_positions;
    case DIM_C: return d->n_embd;
    case DIM_Q: return (int64_t)d->n_head * d->head_dim;
    case DIM_KV: return (int64_t)d->n_kv_head * d->head_dim;
    case DIM_QKV: return (int64_t)(d->n_head + 2 * d->n_kv_head) * d->head_dim;
    case DIM_I: return d->n_inner;
    case DIM_2I: return 2 * (int64_t)d->n_inner;
    case DIM_HD: return d->head_dim;
    }
    return 0;
}

bool arch_tensor_present(const ModelDesc *d, const ArchTensor *t) {
    switch (t->when) {
    case WHEN_ALWAYS: return true;
    case WHEN_UNTIED: return !d->tie_word_embeddings;
    case WHEN_QKV_BIAS: return d->qkv_bias;
    case WHEN_O_BIAS: return d->o_bias;
    case WHEN_MLP_BIAS: return d->mlp_bias;
    }
    return false;
}

uint64_t arch_num_params(const ModelDesc *d) {
    const ArchSpec *s = arch_spec(d->arch);
    uint64_t n = 0;
    for (int i = 0; i < s->n_tensors; i++) {
        const ArchTensor *t = &s->tensors[i];
        if (!arch_tensor_present(d, t)) continue;
        uint64_t numel = (uint64_t)arch_dim(d, t->dim0) * (uint64_t)arch_dim(d, t->dim1);
        n += t->per_layer ? numel * (uint64_t)d->n_layer : numel;
    }
    return n;
}

/* ---------------------------------------------------------------- layout */

static void layout_add(ParamLayout *pl, int *cap, const ModelDesc *d, const ArchTensor *spec, int layer) {
    if (pl->n_tensors == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        pl->tensors = gt_xrealloc(pl->tensors, (size_t)*cap * sizeof *pl->tensors);
    }
    ParamTensor *t = &pl->tensors[pl->n_tensors];
    memset(t, 0, sizeof *t);
    if (spec->per_layer)
        snprintf(t->name, sizeof t->name, spec->name, layer);
    else
        snprintf(t->name, sizeof t->name, "%s", spec->name);
    t->ndim = spec->dim1 == DIM_1 ? 1 : 2;
    t->shape[0] = arch_dim(d, spec->dim0);
    t->shape[1] = arch_dim(d, spec->dim1);
    t->numel = (size_t)t->shape[0] * (size_t)t->shape[1];
    t->offset = pl->total;
    t->decay = spec->decay;
    t->transposed = spec->transposed;
    t->layer = spec->per_layer ? layer : -1;
    t->role = spec->role;
    t->spec = spec;
    if (spec->per_layer)
        pl->layer[layer][spec->role] = pl->n_tensors;
    else
        pl->global[spec->role] = pl->n_tensors;
    pl->n_tensors++;
    pl->total += t->numel;
}

void param_layout_init(ParamLayout *pl, const ModelDesc *d) {
    memset(pl, 0, sizeof *pl);
    const ArchSpec *s = arch_spec(d->arch);
    const int L = d->n_layer;
    int cap = 0;
    pl->n_layer = L;
    pl->layer = gt_xcalloc((size_t)(L > 0 ? L : 1), sizeof *pl->layer);
    pl->layer_begin = gt_xcalloc((size_t)L + 1, sizeof *pl->layer_begin);
    for (int r = 0; r < ROLE_COUNT; r++) pl->global[r] = -1;
    for (int l = 0; l < L; l++)
        for (int r = 0; r < ROLE_COUNT; r++) pl->layer[l][r] = -1;
    int first_layer = 0, after_layers = s->n_tensors;
    while (first_layer < s->n_tensors && !s->tensors[first_layer].per_layer) first_layer++;
    for (int i = first_layer; i < s->n_tensors; i++)
        if (!s->tensors[i].per_layer) {
            after_layers = i;
            break;
        }
    for (int i = 0; i < first_layer; i++)
        if (arch_tensor_present(d, &s->tensors[i])) layout_add(pl, &cap, d, &s->tensors[i], -1);
    for (int l = 0; l < L; l++) {
        pl->layer_begin[l] = pl->total;
        for (int i = first_layer; i < after_layers; i++)
            if (arch_tensor_present(d, &s->tensors[i])) layout_add(pl, &cap, d, &s->tensors[i], l);
    }
    pl->layer_begin[L] = pl->total;
    for (int i = after_layers; i < s->n_tensors; i++)
        if (arch_tensor_present(d, &s->tensors[i])) layout_add(pl, &cap, d, &s->tensors[i], -1);
}

GtDtype arch_storage_dtype(const ModelDesc *d, const ArchTensor *t, GtDtype act) {
    if (d->adapter.r <= 0 || !t || !t->per_layer || t->dim1 == DIM_1) return act;
    if (d->quant.nf4) return GT_NF4;
    if (d->adapter.base_dtype == BASE_DTYPE_AUTO) return act;
    return d->adapter.base_dtype == BASE_DTYPE_BF16 ? GT_BF16 : GT_F32;
}

/* unit b of an NF4 tensor (no byte offset): its format and first element */
static void nf4_unit_format(const ParamTensor *t, const ModelDesc *d, int b, Nf4Format *f, size_t *e0) {
    size_t first = 0;
    for (int k = 0; k < b; k++) first += (size_t)arch_dim(d, t->spec->blocks[k].rows) * (size_t)t->shape[1];
    f->numel = arch_dim(d, t->spec->blocks[b].rows) * t->shape[1];
    f->blocksize = d->quant.blocksize;
    f->nested = d->quant.nested;
    *e0 = first;
}

int arch_nf4_units(const ParamTensor *t) { return t->dtype == GT_NF4 ? t->spec->n_blocks : 0; }

void arch_nf4_unit(const ParamTensor *t, const ModelDesc *d, int b, Nf4Format *f, size_t *byte_offset, size_t *e0) {
    size_t at = t->byte_offset;
    for (int k = 0; k < b; k++) {
        Nf4Format fk;
        size_t ek;
        nf4_unit_format(t, d, k, &fk, &ek);
        at += (size_t)nf4_bytes(&fk);
    }
    nf4_unit_format(t, d, b, f, e0);
    *byte_offset = at;
}

void param_layout_storage(ParamLayout *pl, const ModelDesc *d, GtDtype act) {
    uint64_t at = 0;
    pl->convert_max = 0;
    pl->nf4_unit_max = 0;
    pl->nf4_unit_bytes_max = 0;
    for (int i = 0; i < pl->n_tensors; i++) {
        ParamTensor *t = &pl->tensors[i];
        t->dtype = arch_storage_dtype(d, t->spec, act);
        t->block = 0;
        t->scales_offset = 0;
        if (t->dtype == GT_NF4) { /* its units, each NF4_ALIGN-aligned, in the order of its HF blocks */
            at = (at + NF4_ALIGN - 1) / NF4_ALIGN * NF4_ALIGN;
            t->byte_offset = (size_t)at;
            t->block = d->quant.blocksize;
            for (int b = 0; b < t->spec->n_blocks; b++) {
                Nf4Format f;
                size_t e0;
                nf4_unit_format(t, d, b, &f, &e0);
                const uint64_t ub = nf4_bytes(&f);
                at += ub;
                if ((uint64_t)f.numel > pl->nf4_unit_max) pl->nf4_unit_max = (uint64_t)f.numel;
                if (ub > pl->nf4_unit_bytes_max) pl->nf4_unit_bytes_max = ub;
            }
        } else {
            const uint64_t es = gt_dtype_size(t->dtype);
            at = (at + es - 1) / es * es;
            t->byte_offset = (size_t)at;
            at += (uint64_t)t->numel * es;
        }
        if (t->dtype != act && t->numel > pl->convert_max) pl->convert_max = t->numel;
    }
    pl->bytes = at;
}

void param_layout_free(ParamLayout *pl) {
    free(pl->tensors);
    free(pl->layer);
    free(pl->layer_begin);
    memset(pl, 0, sizeof *pl);
}

int param_layout_find(const ParamLayout *pl, const char *name) {
    for (int i = 0; i < pl->n_tensors; i++)
        if (strcmp(pl->tensors[i].name, name) == 0) return i;
    return -1;
}

int param_layout_role(const ParamLayout *pl, int layer, TensorRole role) {
    if (layer < 0) return pl->global[role];
    return layer < pl->n_layer ? pl->layer[layer][role] : -1;
}

void arch_block_name(const ParamTensor *t, int b, char *buf, size_t cap, const ModelDesc *d, int64_t *row0,
                     int64_t *rows) {
    const ArchTensor *s = t->spec;
    int64_t r = 0;
    for (int k = 0; k < b; k++) r += arch_dim(d, s->blocks[k].rows);
    if (s->per_layer)
        snprintf(buf, cap, s->blocks[b].hf, t->layer);
    else
        snprintf(buf, cap, "%s", s->blocks[b].hf);
    if (row0) *row0 = r;
    if (rows) *rows = arch_dim(d, s->blocks[b].rows);
}

/* ---------------------------------------------------------------- initialisation */

/* splitmix64: a counter-based generator, so each tensor's values depend only on (seed, index) */
static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { return ((double)(splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

void arch_init_tensor(const ParamLayout *pl, const ModelDesc *d, uint64_t seed, int i, size_t k0, size_t n,
                      float *dst) {
    const ParamTensor *t = &pl->tensors[i];
    const ArchInit init = t->spec->init;
    if (init == INIT_ONES || init == INIT_ZEROS) {
        float v = init == INIT_ONES ? 1.0f : 0.0f;
        for (size_t k = 0; k < n; k++) dst[k] = v;
        return;
    }
    const double std = init == INIT_NORMAL_RESID ? 0.02 / sqrt(2.0 * d->n_layer) : 0.02;
    uint64_t state = seed * 0x100000001B3ull + (uint64_t)i * 0x9E3779B97F4A7C15ull + 1;
    state += 2 * (uint64_t)(k0 / 2) * 0x9E3779B97F4A7C15ull; /* skip the draws of elements before k0 */
    for (size_t k = 0; k < n; k += 2) { /* Box-Muller, two values per pair of draws */
        double u1 = uniform01(&state), u2 = uniform01(&state);
        double r = sqrt(-2.0 * log(u1));
        dst[k] = (float)(std * r * cos(2.0 * M_PI * u2));
        if (k + 1 < n) dst[k + 1] = (float)(std * r * sin(2.0 * M_PI * u2));
    }
}

/* ---------------------------------------------------------------- rotary table */

void arch_rope_table(const ModelDesc *d, int p0, int np, float *cos_out, float *sin_out) {
    const int half = d->head_dim / 2;
    for (int i = 0; i < half; i++) {
        double inv_freq = 1.0 / pow(d->rope_theta, (2.0 * i) / d->head_dim);
        if (d->rope_llama3) { /* HF's _compute_llama3_parameters */
            const double old_ctx = d->rope_original_max_positions;
            const double low_wavelen = old_ctx / d->rope_low_freq_factor;
            const double high_wavelen = old_ctx / d->rope_high_freq_factor;
            const double wavelen = 2.0 * M_PI / inv_freq;
            if (wavelen > low_wavelen) {
                inv_freq = inv_freq / d->rope_factor;
            } else if (!(wavelen < high_wavelen)) { /* medium: smooth between the two */
                double smooth = (old_ctx / wavelen - d->rope_low_freq_factor) /
                                (d->rope_high_freq_factor - d->rope_low_freq_factor);
                inv_freq = (1.0 - smooth) * inv_freq / d->rope_factor + smooth * inv_freq;
            }
        }
        for (int p = 0; p < np; p++) {
            double a = (double)(p0 + p) * inv_freq;
            cos_out[(size_t)p * half + i] = (float)cos(a);
            sin_out[(size_t)p * half + i] = (float)sin(a);
        }
    }
}
