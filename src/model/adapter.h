/* adapter.h - an adapter kind behind one interface: what a block's linear layer calls. model_blocks.c's
 * linear_forward / linear_backward call adapter_forward / adapter_backward after the base's GEMM and
 * never ask which adapter is on; the kind (from the model description) says, per adapted site
 * (lora.h's LoraSite: a row block of a base weight):
 *   parts           its tensors in the adapters' layout, in order (lora_A [r, in], lora_B [rows, r],
 *                   and DoRA's lora_magnitude_vector [rows]: peft.h's PEFT_PART_*)
 *   site_forward    out[:, block] += the adapter's contribution, given x (the site's input after
 *                   dropout, or the input itself) and inp (the input without dropout)
 *   site_backward   the gradients of its tensors (added) and dinp += its input gradient
 *   init_from_base  its tensors' values that depend on the loaded base (DoRA's magnitude: m =
 *                   ||W + s B A||_row, so with PEFT's B = 0 the model starts as the base), or NULL
 * Kinds: LoRA (scale alpha / r or alpha / sqrt(r); its initialisations, PiSSA included, are lora.c's
 * and lora_io.c's) and DoRA (PEFT's use_dora: LoRA plus a magnitude per output row, the norm of
 * W + s B A detached as PEFT does). Their plan is data here too: each part's shape (the layout,
 * lora_num_params) and the workspace a kind needs beside LoRA's BUF_LORA_* (DoRA's BUF_DORA_*), which
 * buffers.c adds from the kind's list. */
#ifndef GT_ADAPTER_H
#define GT_ADAPTER_H

#include "adapter_parts.h"
#include "backend.h"
#include "buffers.h"
#include "lora.h"

struct Model;

/* slots per layer in AdapterState's idx: at least PEFT_MODULE_COUNT (lora.c checks) */
#define MODEL_LORA_SLOTS 16

/* The adapters' state in a model (Model's ad member; all zero without adapters). */
typedef struct AdapterState {
    /* idx[l][module] = index in the model's layout of that adapter's lora_A (its part p is
     * adapter_tensor(ad, idx, p): the layout is part-major per layer, lora.h), -1 when the module
     * is not adapted; NULL without LoRA */
    int (*idx)[MODEL_LORA_SLOTS];
    /* LoRA dropout: the key of each application is lora_dropout_key(dropout_seed, dropout_step,
     * layer, module) (lora.h) and element (n, c) of the adapter's [B*T, in] input has the mask
     * index (dropout_row0 * T + n) * in + c (dropout.h): a function of (seed, step, the row's
     * place in the step's batch, layer, module, element), so the accumulation split and the
     * number of ranks change nothing. Only a model_step with compute_grad drops. The trainer sets
     * dropout_step before each optimizer step and, per micro-batch a (trainer_accumulate),
     * dropout_row0 = (a * world + data_rank) * B, the micro-batch's first row in the step's batch
     * (the rows fill_step draws); data_rank is the Model's. */
    uint64_t dropout_seed;
    long dropout_step;
    long dropout_row0;
    LoraSite sites[MODEL_LORA_SLOTS]; /* the adapted modules of a layer (lora_sites) */
    int n_sites;
    act_t *xd, *h, *y, *dh, *dx; /* the adapters' workspace (buffers.h's BUF_LORA_*) */
    act_t *dora_z;               /* DoRA: x W_blk^T of one site; NULL without DoRA */
    float *dora_norm;            /* DoRA: the row norms of W + s B A of one site */
    /* the PEFT config the adapter files carry (lora_configure's; NULL: none set, the defaults
     * from the description are written), and for a PiSSA run the directory of its initial
     * adapter (NULL otherwise): then what is saved is the rank-2r conversion, and what is loaded
     * from a run checkpoint is one (lora.h). Owned. */
    PeftConfig *peft;
    char *pissa_init_dir;
    /* QPiSSA: PiSSA on a 4-bit base through the model's base_hook (lora.h's lora_qpissa_arm); NULL
     * unless armed once. Owned (lora_qpissa_free). */
    struct QpissaRun *qpissa;
} AdapterState;

/* the layout index of part p (peft.h's PEFT_PART_*) of the adapter whose lora_A is tensor ia */
static inline int adapter_tensor(const AdapterState *ad, int ia, int p) { return ia + p * ad->n_sites; }

/* A workspace buffer a kind needs beside LoRA's (BUF_LORA_*), one site at a time: [BT, widest output
 * block] (per_token) or [widest output block]. */
typedef struct {
    BufferId buf;
    bool per_token;
    bool fp32; /* else the act dtype */
} AdapterWork;

#define ADAPTER_MAX_WORK 2

typedef struct AdapterKind {
    const AdapterParts *parts; /* what it stores and how files carry it (adapter_parts.h) */
    int n_work;
    AdapterWork work[ADAPTER_MAX_WORK]; /* the plan's extra workspace (buffers.c) */
    /* ia: the site's first tensor in the layout (its parts follow) */
    void (*site_forward)(struct Model *m, int l, const LoraSite *s, int ia, act_t *out, int OC, const act_t *x,
                         const act_t *inp, int N, int IC);
    /* dx: the gradient of x into m->ad.dx, then through dropout (undo) and into dinp */
    void (*site_backward)(struct Model *m, int l, const LoraSite *s, int ia, act_t *dinp, const act_t *dout, int OC,
                          const act_t *x, const act_t *inp, int N, int IC);
    /* OPTIONAL (NULL: per site): the n consecutive sites k0.. of layer l on one weight at once, on an
     * input without dropout (LoRA: one GEMM with their concatenated lora_A) */
    void (*group_forward)(struct Model *m, int l, int k0, int n, act_t *out, int OC, const act_t *x, int N, int IC);
    void (*group_backward)(struct Model *m, int l, int k0, int n, act_t *dinp, const act_t *dout, int OC,
                           const act_t *x, int N, int IC);
    int (*init_from_base)(struct Model *m, GtError *err);
} AdapterKind;

/* the kind of d's adapters (d->adapter.dora: DoRA, else LoRA); NULL without adapters (adapter.r 0) */
const AdapterKind *adapter_kind(const ModelDesc *d);
/* the shape [*dim0, *dim1] (dim1 1: a vector) of part p of an adapter of kind on site s at rank r; its ndim */
int adapter_part_shape(const AdapterKind *kind, int p, const LoraSite *s, int r, int64_t *dim0, int64_t *dim1);

/* the adapters on layer l's weight of role w, after the base's forward (out = inp W^T + b) and
 * backward (dinp overwritten with dout W) */
void adapter_forward(struct Model *m, int l, TensorRole w, act_t *out, const act_t *inp, int N, int IC, int OC);
void adapter_backward(struct Model *m, int l, TensorRole w, act_t *dinp, const act_t *dout, const act_t *inp, int N,
                      int IC, int OC);
/* whether layer l's weight of role w has an adapter */
bool adapter_on(const struct Model *m, int l, TensorRole w);

/* the kind's init_from_base on a model with its base loaded (nothing for LoRA) */
int adapter_init_from_base(struct Model *m, GtError *err);

#endif
