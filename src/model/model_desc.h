/* model_desc.h - the model description, read from a Hugging Face config.json: GPT-2
 * (model_type gpt2), the Llama family (llama, mistral, qwen2), Phi-3 (phi3) or Qwen3 (qwen3). What
 * an architecture computes and the tensors it has are arch.c's description; this is only the
 * numbers the config gives. */
#ifndef GT_MODEL_DESC_H
#define GT_MODEL_DESC_H

#include "adapter_desc.h"
#include "common.h"

typedef enum {
    ARCH_GPT2 = 0, /* pre-LN, learned positions, GELU MLP, LayerNorm with bias, Conv1D weights */
    ARCH_LLAMA,    /* llama / mistral / qwen2: RMSNorm, RoPE, SwiGLU MLP, grouped-query attention */
    ARCH_PHI3,     /* phi3: Llama's block with HF's fused qkv_proj and gate_up_proj tensors */
    ARCH_QWEN3,    /* qwen3: Llama's block with per-head q/k RMSNorm (QK-norm) before RoPE */
    ARCH_COUNT
} ModelArch;

/* The frozen base's 4-bit storage (QLoRA): nf4 false, none. Filled by config.json's
 * quantization_config (a bitsandbytes 4-bit directory: prequantized, its blocksize and nesting read
 * from each tensor at load, checked against these) or by lora_configure from the run's
 * lora.quantize_base (blocksize 64, nested = lora.bnb_4bit_use_double_quant). arch_storage_dtype
 * says which tensors it stores so (GT_NF4). */
typedef struct {
    bool nf4;
    int blocksize;     /* elements per absmax (bnb's default 64) */
    bool nested;       /* double quantization */
    bool prequantized; /* the checkpoint holds the 4-bit units (copied as they are) */
} BaseQuant;

typedef struct ModelDesc {
    char path[GT_PATH_MAX];
    ModelArch arch;
    char model_type[16]; /* as the config spells it: "gpt2", "llama", "mistral", "qwen2" */
    int n_layer;         /* n_layer / num_hidden_layers */
    int n_head;          /* n_head / num_attention_heads */
    int n_kv_head;       /* num_key_value_heads (default n_head; GPT-2: n_head) */
    int head_dim;        /* head_dim (default n_embd / n_head) */
    int n_embd;          /* n_embd / hidden_size */
    int n_inner;         /* n_inner (GPT-2 default 4 * n_embd) / intermediate_size */
    int vocab_size;
    int n_positions;     /* n_positions (n_ctx) / max_position_embeddings */
    double layer_norm_epsilon; /* layer_norm_epsilon (GPT-2, 1e-5) / rms_norm_eps (Llama, 1e-6) */
    bool tie_word_embeddings;  /* GPT-2 default true, Llama family default false */
    /* Llama family only */
    double rope_theta;   /* default 10000 */
    /* rope_scaling {rope_type: llama3, factor, low_freq_factor, high_freq_factor,
     * original_max_position_embeddings} (Llama 3.1 / 3.2); rope_llama3 false: no scaling */
    bool rope_llama3;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_positions;
    int sliding_window;  /* 0: none (null, absent, or use_sliding_window false) */
    bool qkv_bias;       /* q/k/v projections have biases (Qwen2; Llama attention_bias) */
    bool o_bias;         /* o_proj has a bias (Llama attention_bias) */
    bool mlp_bias;       /* gate/up/down have biases (Llama mlp_bias) */
    /* the run's adapters (the run config's lora: section, lora.c; adapter_desc.h): not part of
     * config.json */
    AdapterDesc adapter;
    BaseQuant quant; /* the base's 4-bit storage (above); nf4 false: none */
    /* the bytes of config.json as they were read (model_desc_load_source; NULL otherwise), borrowed
     * from the loader, who frees them after the last use of this description and its copies: what
     * a checkpoint's config.json is written from, never the file read again */
    const char *source;
    size_t source_len;
} ModelDesc;

/* For a description filled by hand (tests): n_kv_head 0 -> n_head, head_dim 0 -> n_embd / n_head. */
void model_desc_defaults(ModelDesc *d);

/* Load and validate a config.json, or DIR/config.json when path is a directory (a Hugging Face
 * model directory). Errors name the file and the field; code 2. */
int model_desc_load(ModelDesc *desc, const char *path, GtError *err);

/* model_desc_load, keeping the bytes read: desc->source = *source (the caller's to free(), after the
 * last use of desc and its copies); *source is NULL on failure. */
int model_desc_load_source(ModelDesc *desc, const char *path, char **source, GtError *err);

/* Parse from a JSON text already in memory (path is used in messages only). */
int model_desc_parse(ModelDesc *desc, const char *json, size_t len, const char *path, GtError *err);

/* Number of parameters (tied embeddings counted once): the sum over arch.c's table. */
uint64_t model_desc_num_params(const ModelDesc *desc);

/* Channels of the fused q|k|v projection: (n_head + 2 n_kv_head) * head_dim (GPT-2: 3 n_embd). */
static inline int model_desc_qkv_dim(const ModelDesc *d) { return (d->n_head + 2 * d->n_kv_head) * d->head_dim; }
/* Channels of the attention output: n_head * head_dim (GPT-2: n_embd). */
static inline int model_desc_attn_dim(const ModelDesc *d) { return d->n_head * d->head_dim; }

#endif
