/* decode.h - generation with a KV cache: many sequences of different lengths decoded at once.
 *
 * A KvCache holds, for every layer, the keys and values of `slots` rows of up to `ctx` positions
 * (act dtype, MEM_KV_CACHE in the tracking allocator, so the plan counts it), its own rotary
 * table for ctx positions (Llama family), and the device arrays of one call's rows and positions.
 * A row is one sequence; a slot is reused when its sequence is done (the next one overwrites
 * positions from 0; attention never reads past a token's own position).
 *
 * model_decode runs one flat batch of tokens through the model: any mix of prompt chunks (a
 * prefill: consecutive positions of one row) and single new tokens of many rows, each token at its
 * own (slot, position). No padding: a token attends only to its own row's positions 0..pos
 * (within the sliding window). The layers are the training forward's (model_blocks.c), with the
 * attention replaced by kv_store + attention_cached, so LoRA (unmerged), DoRA and a 4-bit base
 * decode as they train. */
#ifndef GT_DECODE_H
#define GT_DECODE_H

#include "model.h"
#include "plan.h"

typedef struct KvCache KvCache;

/* one token of a flat batch */
typedef struct {
    int token;   /* id < vocab_size */
    int slot;    /* cache row, < slots */
    int pos;     /* position in its row, < ctx; the row's positions 0..pos-1 stored already (this
                  * call's earlier tokens or an earlier call's) */
    bool logits; /* return this token's next-token logits */
} DecodeToken;

/* Bytes of a cache of slots x ctx for d in act (what kv_cache_create allocates, all MEM_KV_CACHE):
 * checked products, UINT64_MAX on overflow. */
uint64_t kv_cache_bytes(const ModelDesc *d, int slots, int ctx, GtDtype act);

/* Allocate the cache for m (m's backend and act dtype); ctx <= the model's positions
 * (n_positions / max_position_embeddings). */
int kv_cache_create(KvCache **out, Model *m, int slots, int ctx, GtError *err);
void kv_cache_free(KvCache *kv);
int kv_cache_slots(const KvCache *kv);
int kv_cache_ctx(const KvCache *kv);

/* The most tokens one model_decode call takes on m: its activations' B x T rows. */
static inline int model_decode_max_tokens(const Model *m) { return m->B * m->T; }

/* Forward the n tokens (n <= model_decode_max_tokens(m)); for each token with .logits set, in
 * order, its next-token logits (fp32, vocab_size floats each) into logits_host. Stores every
 * token's keys and values in kv. Inference only (no backward follows; dropout off); the model's
 * other state (kept activations for model_forward_rows) is invalidated. */
int model_decode(Model *m, KvCache *kv, const DecodeToken *tok, int n, float *logits_host, GtError *err);

/* A model for generation only: weights (load them: checkpoint_load_weights / lora_load_adapter),
 * activations for n_tokens tokens per model_decode call under full recompute (one layer's scratch,
 * no per-layer activations), logits for logits_rows tokens at a time, no gradients. */
int model_create_decode(Model **out, const ModelDesc *desc, Backend *be, int n_tokens, int logits_rows, GtError *err);

#endif
