/* model.h - the transformer: GPT-2 (pre-LN, as HF's GPT2LMHeadModel) and the Llama family
 * (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Phi3ForCausalLM, Qwen3ForCausalLM), written
 * once against the Backend ops; what a block computes and what tensors a model has is arch.c's
 * description, what buffers it allocates is buffers.c's list. Owns
 * params, grads, AdamW state and activations, all allocated at creation through the tracking
 * allocator (no allocation inside a step). */
#ifndef GT_MODEL_H
#define GT_MODEL_H

#include "arch.h"
#include "backend.h"
#include "adapter.h"
#include "lora.h"
#include "model_desc.h"
#include "recompute.h"

/* The activations of one layer that backward needs (its input is kept separately): act dtype,
 * but the norm statistics and the attention log-sum-exps, which stay fp32. The means are GPT-2's
 * only (RMSNorm has none: NULL). fch: GPT-2's c_fc output [I] or Llama's gate | up [2I]; fch_act:
 * gelu(fch) or silu(gate) * up [I]. */
typedef struct {
    act_t *ln1, *qkv, *atty, *res2, *ln2, *fch, *fch_act;
    float *ln1_mean, *ln1_rstd, *lse, *ln2_mean, *ln2_rstd;
    act_t *qkv_pre; /* QK-norm: the projection's output, before the per-head norm (NULL otherwise) */
    float *qk_rstd;
} LayerActs;

/* Called in backward when a range of the grads buffer is final for this micro-batch (a layer's
 * tensors right after its backward; the embeddings and ln_f at the end), so a data-parallel
 * all-reduce can start while the rest of backward runs. */
typedef void (*GradReadyFn)(void *ctx, float *grads, size_t n);

struct Model;
/* Called with a 4-bit base unit's complete fp32 values ([rows of that HF block, in], gtrain's
 * order) before they are quantized: tensor (in base_layout) and block (its HF block) say which; it
 * may change them (QPiSSA writes the residual). 0, or -1 with err set (the upload fails). */
typedef int (*ModelBaseHook)(struct Model *m, int tensor, int block, float *values, GtError *err);

typedef struct Model {
    ModelDesc desc;
    Backend *be;
    int B, T;          /* micro-batch rows and sequence length the activations are sized for */
    int logits_rows;   /* rows of the LM head processed at a time */
    GtDtype act;       /* the backend's act dtype when the model was created (precision) */
    RecomputePolicy policy;
    /* layout: what trains (params, grads, AdamW state): the architecture's tensors, or under
     * LoRA (desc.adapter.r > 0) the adapters alone (lora_layout_init). base_layout: always the
     * architecture's tensors, in base: the weights the forward reads (== weights without LoRA; the
     * frozen base, MEM_FROZEN, with LoRA, each tensor in its storage dtype at its byte_offset:
     * param_layout_storage). */
    ParamLayout layout, base_layout;
    act_t *base;
    act_t *wconv; /* a base tensor stored in another dtype, converted for its GEMM (model_w); NULL: none */
    ModelBaseHook base_hook; /* NULL: none; see ModelBaseHook */
    /* A 4-bit base's unit as it loads (host, BUF_NF4_HOST; NULL without NF4 tensors): nf4_values
     * its fp32 values gathered (nf4_fill of them so far, for unit nf4_block of tensor nf4_tensor),
     * nf4_unit its quantized bytes */
    float *nf4_values;
    void *nf4_unit;
    size_t nf4_fill;
    int nf4_tensor, nf4_block;
    /* this rank in the data-parallel world (0 alone), set by the trainer when it creates the
     * model (the adapters' dropout rows, AdapterState) */
    int data_rank;
    bool training;            /* the model_step in flight computes gradients (dropout applies) */
    AdapterState ad; /* the adapters' state (adapter.h); all zero without adapters */

    float *params, *grads, *adam_m, *adam_v; /* fp32: master weights, their gradients, AdamW */
    /* The weights forward and backward read, in the act dtype: params itself under fp32, a bf16
     * copy (MEM_PARAMS) under bf16, refreshed from params before a step when they changed. */
    act_t *weights;
    bool weights_stale;
    /* ZeRO-1: params/grads are padded to shard_world * shard floats; adam_m/adam_v hold only this
     * rank's shard [shard_rank * shard, (shard_rank + 1) * shard). shard_world 1: no sharding. */
    int shard_world, shard_rank;
    size_t shard, padded_total;
    GradReadyFn grad_ready; /* NULL: none */
    void *grad_ready_ctx;
    /* in weights; lm_head == wte when tied; wpe and lnfb NULL for the Llama family */
    const act_t *wte, *wpe, *lnfw, *lnfb, *lm_head;
    float *dwte, *dwpe, *dlnfw, *dlnfb, *dlm_head;
    float *rope_cos, *rope_sin; /* Llama: the rotary table [T, head_dim / 2] */
    int window;                 /* the attention's sliding window (0: none, or not shorter than T) */
    float *staging;             /* host buffer init, loading and saving stream through */
    size_t staging_bytes;       /* all of it (init uses all) */
    size_t stage_io_bytes;      /* the streamed part (buffers.h), before the transpose scratch */

    LayerActs *acts;      /* per layer; recomputed layers point into the scratch */
    act_t **input;        /* per layer: device buffer holding the layer's input */
    act_t **host_stash;   /* per layer: host copy (offloaded layers), else NULL */
    act_t *stage[2];      /* offload prefetch buffers */
    act_t *final_res, *lnf;
    float *lnf_mean, *lnf_rstd;
    act_t *logits;
    int *tokens, *targets;
    int *positions; /* [B*T] per-token positions of packed rows, read only while pos_on */
    bool pos_on;    /* this batch came with positions (model_step_pos) */
    float *losses;
    float *losses_host;
    /* activation-gradient workspace (act dtype) and attention row sums (fp32) */
    act_t *dres, *dbtc, *dqkv, *dfch;
    float *att_ws;
    /* positions of row 0 whose keys and values the activations hold for model_forward_rows; 0
     * after a model_step or a change of the weights */
    int kv_len;
    /* generation: the cache the layers store into and attend over while model_decode runs (decode.h);
     * NULL otherwise */
    struct KvCache *kv;

    /* every allocation, to free it: pointer, bytes, category */
    struct ModelAlloc { void *p; size_t bytes; MemCategory cat; } *allocs;
    int n_allocs, cap_allocs;
} Model;

/* Allocate everything for micro-batch B x T under the recompute policy; initialise parameters
 * as the architecture's table says (GPT-2's or HF's Llama initialisation), from seed. */
int model_create(Model **out, const ModelDesc *desc, Backend *be, int B, int T, RecomputePolicy policy,
                 uint64_t seed, GtError *err);
/* The same with the AdamW state sharded over shard_world ranks (ZeRO-1); this is shard_rank; the LM head
 * in chunks of logits_rows rows (0: plan_logits_rows; a run passes its plan's, plan_resolve). */
int model_create_sharded(Model **out, const ModelDesc *desc, Backend *be, int B, int T, RecomputePolicy policy,
                         uint64_t seed, int shard_world, int shard_rank, int logits_rows, GtError *err);
/* For sampling: B = 1, no recompute, no gradients, AdamW state or backward workspace, and zero
 * weights (load them: checkpoint_load_weights). model_step only evaluates on it. */
int model_create_inference(Model **out, const ModelDesc *desc, Backend *be, int T, GtError *err);
/* floats per rank of the sharded AdamW state, and the padded params/grads length */
size_t model_shard_size(size_t n_params, int shard_world);
void model_free(Model *m);

/* One micro-batch: forward, and if compute_grad, backward with the loss gradient scaled by
 * dloss_scale, ADDING into the grads. tokens/targets are host arrays of B*T (targets -100 =
 * ignore); rows <= B. Returns the sum of the per-token losses (over valid targets). */
int model_step(Model *m, const int *tokens, const int *targets, int rows, float dloss_scale,
               bool compute_grad, double *loss_sum, GtError *err);
/* The same with per-token positions (host, B*T; NULL = model_step): packed rows, each example
 * with positions from 0 attending only to itself (backend.h; needs GT_CAP_POSITIONS). */
int model_step_pos(Model *m, const int *tokens, const int *targets, const int *positions, int rows,
                   float dloss_scale, bool compute_grad, double *loss_sum, GtError *err);
/* A training micro-batch (model_step_pos with compute_grad, the same ops in the same order: the
 * same bits) that never waits for the device: tokens, targets and positions (NULL: none) are read
 * from host memory (pinned on CUDA: the trainer's step buffers, host_staging) on the backend's copy
 * stream, and the per-token losses [rows*T] are copied back into losses_host the same way. Neither
 * host array may be touched until the next synchronize; then losses_host holds the losses
 * (model_loss_sum adds them as model_step_pos does). */
int model_step_async(Model *m, const int *tokens, const int *targets, const int *positions, int rows,
                     float dloss_scale, float *losses_host, GtError *err);
/* the sum of n per-token losses in double, in order: the loss_sum of model_step_pos */
double model_loss_sum(const float *losses, int n);

/* Sampling: forward positions pos0..pos0+n-1 of row 0 (tokens[n], host) and copy the logits of the
 * last one to logits_host[vocab_size]. The keys and values of positions 0..pos0-1 are those the
 * previous calls left (pos0 = 0 starts a sequence): pos0 may not exceed m->kv_len. Inference only:
 * no backward may follow. */
int model_forward_rows(Model *m, const int *tokens, int pos0, int n, float *logits_host, GtError *err);
/* Whether the activations keep a sequence's keys and values between calls (no recomputed layer:
 * those share one scratch). Otherwise kv_len stays 0 and every call starts at position 0. */
bool model_keeps_kv(const Model *m);

void model_zero_grads(Model *m);

/* The base weights (base_layout), n fp32 values at element offset off (ParamTensor.offset, across
 * tensors as the layout orders them): written from / read into a host buffer. Without LoRA these
 * are params (model_params_changed is the caller's); with LoRA the frozen base, each tensor in its
 * storage dtype (rounded to it on the way in; host is used as scratch). */
int model_upload_base(Model *m, size_t off, float *host, size_t n, GtError *err);
int model_download_base(Model *m, size_t off, float *host, size_t n, GtError *err);
/* A 4-bit base (GT_NF4 tensors): an upload gathers each unit's fp32 values on the host in order
 * (a chunk that does not continue its unit is an internal error) and, when the unit is complete,
 * calls base_hook, quantizes it (nf4_quantize) and copies its bytes in; a download dequantizes
 * (any range). model_upload_nf4_unit copies a unit that is already quantized (a bitsandbytes
 * checkpoint's, f its format) into unit `block` of tensor `tensor` as it is, or, when f is not the
 * base's format, dequantizes it and quantizes it again (returns 1 then: the caller says so). */
int model_upload_nf4_unit(Model *m, int tensor, int block, const void *unit, const Nf4Format *f, GtError *err);

/* Say that m->params were written (optimizer step, checkpoint load, gather): the bf16 compute
 * copy is refreshed before the next forward (not needed under fp32), and the kept keys and values
 * are dropped. (Inline: the checkpoint readers call it and link without the model.) */
static inline void model_params_changed(Model *m) {
    m->weights_stale = m->weights != (act_t *)m->params;
    m->kv_len = 0;
}

/* ---- what a caller outside the model (the trainer) reads and sets: through these, not fields ---- */

/* the micro-batch rows and the sequence length the activations are sized for */
static inline int model_batch_rows(const Model *m) { return m->B; }
static inline int model_seq_len(const Model *m) { return m->T; }
/* floats that train: params, grads and AdamW state (the adapters alone under LoRA) */
static inline size_t model_num_trainable(const Model *m) { return m->layout.total; }
/* the fp32 trainable params and their gradients, model_num_trainable floats (padded to
 * world x size under ZeRO-1), in the backend's memory; after writing params: model_params_changed */
static inline float *model_params(Model *m) { return m->params; }
static inline float *model_grads(Model *m) { return m->grads; }

/* ZeRO-1: the AdamW state is sharded over world ranks (world 1: not sharded); this rank holds
 * floats [rank * size, (rank + 1) * size) of padded_total, in adam_m / adam_v */
typedef struct {
    int world, rank;
    size_t size, padded_total;
    float *adam_m, *adam_v;
} ModelShard;
static inline ModelShard model_shard(const Model *m) {
    return (ModelShard){m->shard_world, m->shard_rank, m->shard, m->padded_total, m->adam_m, m->adam_v};
}

/* the hook backward calls when a range of the gradients is final (NULL: none), and its context */
static inline GradReadyFn model_grad_ready(const Model *m, void **ctx) {
    *ctx = m->grad_ready_ctx;
    return m->grad_ready;
}
static inline void model_set_grad_ready(Model *m, GradReadyFn fn, void *ctx) {
    m->grad_ready = fn;
    m->grad_ready_ctx = ctx;
}

/* dropout's key (see Model): the run's seed and this rank in the data-parallel world, set once;
 * the optimizer step, set before each; the micro-batch's first row in the step's batch, before each */
static inline void model_set_dropout_run(Model *m, uint64_t seed, int data_rank) {
    m->ad.dropout_seed = seed;
    m->data_rank = data_rank;
}
static inline int model_data_rank(const Model *m) { return m->data_rank; }
static inline void model_set_dropout_step(Model *m, long step) { m->ad.dropout_step = step; }
static inline void model_set_dropout_row0(Model *m, long row0) { m->ad.dropout_row0 = row0; }

#endif
