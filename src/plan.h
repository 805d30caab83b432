/* plan.h - the memory plan: every byte a run will allocate, by category, from the model
 * description and the run config alone (no device is touched). The model allocates exactly this;
 * tests check planned == measured on the CPU. */
#ifndef GT_PLAN_H
#define GT_PLAN_H

#include "backend.h"
#include "config.h"
#include "model_desc.h"
#include "recompute.h"

typedef struct {
    int B, T, A, world;
    long effective_batch; /* B * world * A */
    long tokens_per_step; /* effective_batch * T */
    RecomputePolicy policy;
    uint64_t n_params;    /* the architecture's (tied embeddings once) */
    uint64_t n_trainable; /* what trains: n_params, or the LoRA adapters' (the rest frozen) */
    int logits_rows;
    bool zero1; /* AdamW state sharded over the world (ZeRO-1) */
    GtDtype act; /* activation dtype (precision) */
    uint64_t bytes[MEM_COUNT];
    uint64_t device_total; /* the device categories */
    uint64_t host_total;   /* host_offload + host_staging */
    const char *overflow;  /* NULL, or the first quantity that overflowed 64 bits ("activations", ...) */
} MemPlan;

/* the logits' row stride: the vocabulary rounded up to a multiple of 64, so the LM head's GEMMs
 * see 16-byte-aligned rows even for GPT-2's 50257 (llm.c pads the vocabulary itself to 50304;
 * here only the logits buffer is padded, the weights keep Hugging Face's shapes) */
int plan_logits_stride(const ModelDesc *d);
/* rows of the LM head computed at once: the logits chunk (act dtype) is kept near 64 MiB */
int plan_logits_rows(const ModelDesc *d, int B, int T, GtDtype act);

/* the activation dtype of a precision: fp32 -> fp32, bf16 -> bf16 */
GtDtype plan_act_dtype(Precision prec);

/* Plan for micro-batch B, accumulation A, world ranks, sequence T, recompute policy; zero1 shards
 * the AdamW state over the world; act: the activation dtype (bf16 halves the activations and adds
 * a bf16 copy of the weights). Every product and sum is checked: 0, or -1 when some quantity
 * overflows 64 bits (named in p->overflow; the totals are then UINT64_MAX). */
int plan_memory(MemPlan *p, const ModelDesc *d, int B, int A, int world, int T, RecomputePolicy pol, bool zero1,
                 GtDtype act);

/* Print the plan as a table; with measured != NULL, plan and measured (high-water) side by side. */
void plan_print(const MemPlan *p, const MemTracker *measured, FILE *out);

/* Resolve the micro-batch layout for the config: fixed B, or auto-fit (per_device_train_batch_size
 * auto + train_batch_size) within memory_limit bytes. Fills *p. Errors (code 2) when the plan does
 * not fit memory_limit, with what would fit. memory_limit 0 = no limit. */
int plan_resolve(MemPlan *p, const ModelDesc *d, const RunConfig *cfg, int world, uint64_t memory_limit,
                 GtError *err);

#endif
