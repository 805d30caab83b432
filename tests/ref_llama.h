/* ref_llama.h - an independent, naive double-precision Llama-family model (Llama, Mistral, Qwen2)
 * with a hand-written backward, for gradient tests (as ref_gpt.h is for GPT-2's forward).
 *
 * Independent of gtrain: it includes no gtrain header, has its own config struct, and finds its
 * parameters by Hugging Face tensor name ("model.embed_tokens.weight",
 * "model.layers.3.self_attn.q_proj.weight", ...) in an array the caller owns, so it shares no
 * layout, no rope table and no kernel with src/. Written from HF's modeling_llama.py equations:
 *   x = embed[tok]; per layer: h = rmsnorm(x) * w_in; q, k, v = h Wq^T + bq, h Wk^T + bk, h Wv^T + bv;
 *   rotary embedding (rotate_half) on q and k; query head h attends with kv head h / (heads/kv_heads)
 *   (repeat_kv) over keys j <= t (and t - j < window on windowed layers), scores / sqrt(head_dim);
 *   x += y Wo^T + bo; h = rmsnorm(x) * w_post; x += (silu(h Wg^T + bg) * (h Wu^T + bu)) Wd^T + bd;
 *   logits = (rmsnorm(x) * w_norm) H^T with H = lm_head.weight, or embed_tokens when tied.
 * Everything in double, the rope table too (inv_freq = 1 / theta^(2i/head_dim), Llama 3.1's
 * llama3 frequency adjustment as HF's _compute_llama3_parameters). Slow and simple on purpose. */
#ifndef GT_REF_LLAMA_H
#define GT_REF_LLAMA_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int hidden, inter, layers, heads, kv_heads, head_dim, vocab; /* head_dim even; kv_heads divides heads */
    double eps;   /* rms_norm_eps */
    double theta; /* rope_theta */
    /* rope_scaling {rope_type: llama3, factor, low_freq_factor, high_freq_factor,
     * original_max_position_embeddings}; llama3 false: plain rope */
    bool llama3;
    double rope_factor, low_freq_factor, high_freq_factor;
    int original_max_positions;
    int window;             /* sliding window, 0: none. Query t keeps key j when t - j < window. */
    int window_first_layer; /* layers l >= this one are windowed (Mistral: 0, Qwen2: max_window_layers) */
    bool qkv_bias;          /* q/k/v_proj.bias (Qwen2; Llama attention_bias) */
    bool o_bias;            /* o_proj.bias (Llama attention_bias) */
    bool mlp_bias;          /* gate/up/down_proj.bias (Llama mlp_bias) */
    bool tie;               /* tie_word_embeddings: no lm_head.weight, the head is embed_tokens */
} RefLlamaCfg;

/* One parameter by its HF name. Linear weights are [out, in] (rows = out, cols = in) as HF stores
 * them, embeddings and lm_head [vocab, hidden], vectors (norm weights, biases) [n, 1]. */
typedef struct {
    const char *name;
    double *data;
    double *grad; /* written by ref_llama_loss when want_grad (then it must not be NULL) */
    int64_t rows, cols;
} RefTensor;

/* The tensors cfg has, in HF's state-dict order, names allocated, data and grad zeroed;
 * *n gets the count. NULL (message on stderr) for a bad cfg. */
RefTensor *ref_llama_alloc(const RefLlamaCfg *cfg, int *n);
void ref_llama_free(RefTensor *tensors, int n);
/* by name; NULL if absent */
RefTensor *ref_llama_find(RefTensor *tensors, int n, const char *name);

/* The rope table: cos[t * head_dim/2 + i] = cos(t * f_i), sin likewise, t < T, in double. */
void ref_llama_rope(const RefLlamaCfg *cfg, int T, double *cos, double *sin);
/* the (llama3-adjusted) inverse frequencies f_i, i < head_dim/2 */
void ref_llama_inv_freq(const RefLlamaCfg *cfg, double *inv_freq);

/* Mean next-token cross-entropy of tokens[B, T] against targets[B, T] (-100: ignored) over the
 * valid targets (0 when there are none). Each row of T starts at position 0. want_grad: every
 * tensor's grad is OVERWRITTEN with d(mean loss)/d(param) (the tied embedding gets both of its
 * uses). tensors are looked up by name; a missing tensor, a wrong shape, a token or target
 * outside the vocabulary or a bad cfg returns NAN with a message on stderr. */
double ref_llama_loss(const RefLlamaCfg *cfg, RefTensor *tensors, int n, const int *tokens,
                      const int *targets, int B, int T, bool want_grad);

/* The same loss (forward only) with LoRA adapters (tests/ref_lora.h; lora->layers == cfg->layers):
 * q/k/v_proj's adapters add to the projections before the rotary embedding, o_proj's read the
 * attention output, gate/up_proj's the post-attention norm's output, down_proj's silu(g) * u.
 * Dropout's element index counts rows over the step's whole batch (row lora->row_base + b*T + t).
 * lora NULL: the base model. Gradients: ref_lora_fd_grads over this. */
struct RefLora;
double ref_llama_loss_lora(const RefLlamaCfg *cfg, RefTensor *tensors, int n, const struct RefLora *lora,
                           const int *tokens, const int *targets, int B, int T);

#endif
