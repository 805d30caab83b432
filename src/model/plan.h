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
    bool grads_bf16; /* world > 1, ddp_grad_dtype bf16: the gradients go between ranks in bf16, and their bf16
                      * copy (dist_comm_grads) is in bytes[MEM_GRADS] (plan_resolve) */
    GtDtype act; /* activation dtype (precision) */
    GtDtype base_linear; /* LoRA: the frozen base's linear weights' storage (lora.base_dtype; act when auto;
                          * GT_NF4 with a 4-bit base, base_quant its blocksize and nesting) */
    BaseQuant base_quant;
    uint64_t bytes[MEM_COUNT];
    uint64_t device_total; /* the device categories */
    uint64_t host_total;   /* host_offload + host_staging */
    /* device bytes the runtime takes beside the categories (Backend.runtime_reserve; 0 on the CPU and
     * in a plan made without a device): not in device_total; printed as its own line, with the
     * device's need = device_total + runtime_reserve */
    uint64_t runtime_reserve;
    char runtime_reserve_what[160];
    const char *overflow;  /* NULL, or the first quantity that overflowed 64 bits ("activations", ...) */
} MemPlan;

/* the logits' row stride: the vocabulary rounded up to a multiple of 64, so the LM head's GEMMs
 * see 16-byte-aligned rows even for GPT-2's 50257 (llm.c pads the vocabulary itself to 50304;
 * here only the logits buffer is padded, the weights keep Hugging Face's shapes) */
int plan_logits_stride(const ModelDesc *d);
/* rows of the LM head computed at once without a memory limit: the logits chunk (act dtype) is kept
 * near 64 MiB (at most B*T rows) */
int plan_logits_rows(const ModelDesc *d, int B, int T, GtDtype act);
/* The LM head's chunk of a run under a memory limit (plan_resolve), from a fixed ladder so that it
 * does not follow small changes of the free memory: all B*T rows of the micro-batch (one chunk) when
 * their logits take at most 1 GiB, else 1 GiB of rows; halved (in whole multiples of 64 rows) until the
 * growth over p's chunk takes at most HALF the room that the same layout WITHOUT recompute leaves under
 * limit (the other half is left for what the plan does not see: the allocator's rounding, a
 * generation's KV cache, other processes); never fewer rows than p's (plan_logits_rows). Every
 * recompute setting of a layout gets the same chunk (their bits stay identical); with memory to spare
 * a run and its resume get the same chunk. With no limit (0), or no room, p's rows. A larger chunk
 * means fewer, larger LM-head GEMMs and cross-entropy launches per micro-batch. */
int plan_grow_logits_rows(const MemPlan *p, const ModelDesc *d, uint64_t limit);

/* the activation dtype of a precision: fp32 -> fp32, bf16 -> bf16 */
GtDtype plan_act_dtype(Precision prec);

/* Plan for micro-batch B, accumulation A, world ranks, sequence T, recompute policy; zero1 shards
 * the AdamW state over the world; act: the activation dtype (bf16 halves the activations and adds
 * a bf16 copy of the weights). Every product and sum is checked: 0, or -1 when some quantity
 * overflows 64 bits (named in p->overflow; the totals are then UINT64_MAX). */
int plan_memory(MemPlan *p, const ModelDesc *d, int B, int A, int world, int T, RecomputePolicy pol, bool zero1,
                 GtDtype act);

/* The plan of a generation run (decode.h): model_create_decode(n_tokens, logits_rows = slots) plus a
 * KV cache of slots x ctx (bytes[MEM_KV_CACHE]); B = 1, T = n_tokens in p. 0, or -1 on overflow. */
int plan_decode_memory(MemPlan *p, const ModelDesc *d, int n_tokens, int slots, int ctx, GtDtype act);
/* The most slots (at most max_slots) whose plan, with n_tokens = max(prefill_chunk, slots), fits
 * limit bytes of device memory; 0 when not even one does. */
int plan_decode_fit(const ModelDesc *d, int prefill_chunk, int max_slots, int ctx, GtDtype act, uint64_t limit);

/* Print the plan as a table; with measured != NULL, plan and measured (high-water) side by side. */
void plan_print(const MemPlan *p, const MemTracker *measured, FILE *out);

/* Auto-fit's candidates for per_rank rows per rank (B x A = per_rank): one row per micro-batch B
 * (largest first), each under the fewest recomputed layers that fit the limit (then no offload),
 * or not fitting (bytes: what it needs with every layer recomputed and offloaded; UINT64_MAX when
 * that overflows). chosen: the row PLAN_FIT_RULE picks, -1 when none fits. The same rule picks
 * auto-fit's layout and the layout a refusal of a fixed one recommends. */
#define PLAN_FIT_RULE                                                                                                  \
    "a micro-batch of 4 or more when one fits (any when the batch is under 4), then the fewest recomputed layers, "   \
    "then no offload, then the largest micro-batch"
#define PLAN_FIT_PRINT_ROWS 16
typedef struct {
    int B, A, every_n; /* every_n 0: no recompute */
    bool offload;
    int recomputed; /* layers recomputed */
    uint64_t bytes; /* device total */
    bool fits;
} PlanCandidate;
typedef struct {
    PlanCandidate *rows;
    int n, chosen, pref_B, n_layer;
    uint64_t limit;
} PlanFit;
/* 0 with f->chosen set, or -1 when nothing fits (f's rows filled either way: plan_fit_free). */
int plan_fit(PlanFit *f, const ModelDesc *d, long per_rank, int world, int T, uint64_t limit, bool zero1, GtDtype act);
void plan_fit_free(PlanFit *f);
/* The rule and the table ("  B 16 x A 8 | recompute every_n_layers 1 (32 of 32 layers) | offload no |
 * 23.62 GiB | chosen", or "  B 128 x A 1 | does not fit: ..."), at most PLAN_FIT_PRINT_ROWS rows
 * around the chosen one; out NULL: through gt_log. */
void plan_fit_print(const PlanFit *f, FILE *out);

/* The trainer's host buffers of a step's batch (host_staging; pinned on CUDA, so the uploads are
 * copies the device does on its own): the tokens, targets and (packing) positions of the A
 * micro-batches of B x T, twice (the host fills the next step's while the device reads this one's),
 * and the step's per-token losses (fp32). plan_resolve adds them to the run's plan. */
uint64_t plan_step_batch_bytes(int B, int A, int T, bool packing);

/* Resolve the micro-batch layout for the config: fixed B, or auto-fit (per_device_train_batch_size
 * auto + train_batch_size) within memory_limit bytes. Fills *p. Errors (code 2) when the plan does
 * not fit memory_limit, with what would fit. memory_limit 0 = no limit. The run's plan: the model's
 * (plan_memory, with the LM head's chunk then grown under the limit: plan_grow_logits_rows; the model
 * is created with p->logits_rows) and the trainer's step buffers (plan_step_batch_bytes, in
 * host_staging). */
int plan_resolve(MemPlan *p, const ModelDesc *d, const RunConfig *cfg, int world, uint64_t memory_limit,
                 GtError *err);

#endif
