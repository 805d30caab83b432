/* buffers.h - the one list of buffers a model allocates, for a (model, micro-batch, recompute
 * policy, act dtype, ZeRO-1 world, train or inference). model_create allocates exactly this list
 * and plan_memory adds it up, so the plan equals what is allocated by construction. */
#ifndef GT_BUFFERS_H
#define GT_BUFFERS_H

#include "backend.h"
#include "arch.h"
#include "model_desc.h"
#include "recompute.h"

/* Under LoRA (d->adapter.r > 0) params, grads, the AdamW state and the compute copy hold the
 * adapters alone (lora.h) and BUF_FROZEN the base, each tensor in its storage dtype
 * (param_layout_storage). */
typedef enum {
    BUF_PARAMS = 0,   /* fp32 master weights, padded to whole ZeRO-1 shards */
    BUF_GRADS,
    BUF_ADAM_M,       /* this rank's shard */
    BUF_ADAM_V,
    BUF_WEIGHTS,      /* the bf16 compute copy (bf16 only) */
    BUF_ROPE_COS,     /* rotary table [T, head_dim / 2] (Llama) */
    BUF_ROPE_SIN,
    BUF_LAYER_INPUT,  /* the input of each kept layer */
    BUF_STASH_INPUT,  /* the input of each recomputed layer, on the device (no offload) */
    BUF_STAGE,        /* offload prefetch buffers */
    BUF_HOST_STASH,   /* host copy of each offloaded layer's input */
    /* a layer's kept activations (LayerActs), once per kept layer and once for the recompute scratch */
    BUF_ACT_LN1,
    BUF_ACT_LN1_MEAN, /* GPT-2's layernorm mean */
    BUF_ACT_LN1_RSTD,
    BUF_ACT_QKV,      /* q | k | v (after the rotation, Llama) */
    BUF_ACT_ATTY,
    BUF_ACT_LSE,
    BUF_ACT_RES2,
    BUF_ACT_LN2,
    BUF_ACT_LN2_MEAN,
    BUF_ACT_LN2_RSTD,
    BUF_ACT_FCH,      /* GPT-2: c_fc output [I]; Llama: gate | up [2I] */
    BUF_ACT_FCH_ACT,  /* gelu(fch) / swiglu(gate, up) [I] */
    BUF_ACT_QKV_PRE,  /* QK-norm families: the projection's q | k | v before the per-head norm */
    BUF_ACT_QK_RSTD,  /* and the norm's rstd [(NH + NKV) per row] */
    BUF_FINAL_RES,
    BUF_LNF,
    BUF_LNF_MEAN,
    BUF_LNF_RSTD,
    BUF_TOKENS,
    BUF_TARGETS,
    BUF_POSITIONS,    /* per-token positions of packed rows (model_step_pos) */
    BUF_LOSSES,
    BUF_LOGITS,       /* one chunk of the LM head's logits */
    BUF_DRES,         /* workspace: residual-stream gradient */
    BUF_DBTC,         /* workspace: a norm's or attention output's gradient */
    BUF_DQKV,
    BUF_DFCH_ATT_WS,  /* the MLP's gradient (GPT-2 [I]; Llama gate|up [2I] then swiglu output [I]),
                       * and in the same bytes, not live at once, the attention backward's row sums
                       * and dQ slices (fp32, backend.h): the larger of the two */
    BUF_HOST_STAGING, /* bounded host buffer that initialisation, loading and saving stream through */
    BUF_FROZEN,       /* LoRA: the frozen base weights (act dtype) */
    BUF_LORA_XD,      /* LoRA workspace: an adapter's input after dropout [BT, widest input] (dropout > 0) */
    BUF_LORA_H,       /* x A^T [BT, r * lora_group_max] (DoRA: [BT, r]) */
    BUF_LORA_Y,       /* DoRA: h B^T, or the scaled output gradient [BT, widest output block] */
    BUF_LORA_DH,      /* its gradient, the same size */
    BUF_LORA_DX,      /* the adapter's input gradient [BT, widest input] (dropout or DoRA) */
    BUF_DORA_Z,       /* DoRA: the adapter's input times the base block, x W_blk^T [BT, widest output block] */
    BUF_DORA_NORM,    /* DoRA: || W + s B A ||_row of one block (fp32) [widest output block] */
    BUF_WCONV,        /* workspace: one stored weight converted to the act dtype for its GEMM (a base
                       * stored in another dtype: arch.h's ParamTensor.dtype) */
    BUF_NF4_HOST,     /* host (host_staging): a 4-bit base's unit as it loads: its fp32 values, then its
                       * quantized bytes (buffers_nf4_host_bytes) */
    BUF_COUNT
} BufferId;

typedef struct {
    BufferId id;
    MemCategory cat;
    uint64_t bytes; /* of one instance */
    int count;      /* instances (per-layer buffers: how many layers) */
} BufferSpec;

#define BUF_LIST_MAX 64

typedef struct {
    BufferSpec b[BUF_LIST_MAX];
    int n;
    const char *overflow; /* NULL, or the first quantity that overflowed 64 bits */
} BufferList;

typedef struct {
    int B, T;
    RecomputePolicy policy;
    GtDtype act;
    int shard_world; /* ZeRO-1 shards of the AdamW state (1: none) */
    bool train;      /* gradients, AdamW state and the backward workspace */
    int logits_rows;
} BufferShape;

/* Fill the list; returns 0, or -1 when a size overflows 64 bits (named in out->overflow). */
int buffers_list(BufferList *out, const ModelDesc *d, const BufferShape *s);

/* The host staging buffer: buffers_stage_io_bytes that loading, saving and initialisation stream
 * through (the largest tensor, at most BUFFERS_STAGE_IO_MAX: a small model's is small), then room
 * for the largest transposed tensor of d (GPT-2's Conv1D weights are transposed whole; 0 for the
 * Llama family). */
#define BUFFERS_STAGE_IO_MAX ((uint64_t)16 << 20)
uint64_t buffers_stage_io_bytes(const ModelDesc *d);
uint64_t buffers_staging_bytes(const ModelDesc *d);
/* BUF_NF4_HOST of a frozen base's layout (param_layout_storage done): the largest unit's fp32
 * values (buffers_nf4_values_bytes, 64-aligned), then its bytes; 0 without NF4 tensors */
uint64_t buffers_nf4_values_bytes(const ParamLayout *bl);
uint64_t buffers_nf4_host_bytes(const ParamLayout *bl);

#endif
