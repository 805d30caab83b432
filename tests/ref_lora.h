/* ref_lora.h - LoRA adapters for the double-precision reference models (ref_llama.h, ref_gpt.h),
 * with PEFT's semantics, and their gradients by central finite differences of the reference loss
 * (the references need no hand-written backward for them).
 *
 * For each adapted module of each layer, with the module's input x [N, in] (N = B*T rows of the
 * micro-batch, row n = b*T + t), lora_A [r, in] and lora_B [out, r] (PEFT's nn.Linear shapes):
 *     y = x W^T (+ b) + scale * (dropout(x) A^T) B^T
 * where dropout (only when p > 0) keeps element (n, c) of x iff
 *     gt_dropout_keep(key(seed, step, layer, module), (row_base + n)*in + c, gt_dropout_threshold(p))
 * (src/model/dropout.h, the mask's definition) and multiplies kept elements by 1/(1-p) exactly (double).
 * row_base is the micro-batch's first row of x in the step's whole batch: g0 * T when its first
 * sequence is row g0 of the step's batch (the trainer's g = (a * world + rank) * B + b), so the
 * mask of a row does not depend on how the step is split into micro-batches or ranks. Each module
 * has its own key, so the same x is dropped separately per module.
 *
 * Which input each module reads is the reference model's business (ref_llama.c, ref_gpt.c):
 * Llama q/k/v/gate/up the normed hidden state, o_proj the attention output, down_proj the SwiGLU
 * output; GPT-2 c_attn and mlp.c_fc the normed hidden state, attn.c_proj the attention output,
 * mlp.c_proj the GELU output. q/k/v adapt the separate HF projections (before rope).
 *
 * No gtrain header here: the key function is the caller's (the model tests hand it lora.h's
 * lora_dropout_key), and the module numbers are PEFT's order as peft.h's PeftModule (the tests
 * check the two agree). */
#ifndef GT_REF_LORA_H
#define GT_REF_LORA_H

#include <stdbool.h>
#include <stdint.h>

enum {
    REF_LORA_Q_PROJ = 0, REF_LORA_K_PROJ, REF_LORA_V_PROJ, REF_LORA_O_PROJ, REF_LORA_GATE_PROJ, REF_LORA_UP_PROJ,
    REF_LORA_DOWN_PROJ,                                                            /* Llama family */
    REF_LORA_C_ATTN, REF_LORA_ATTN_C_PROJ, REF_LORA_C_FC, REF_LORA_MLP_C_PROJ,     /* GPT-2 */
    REF_LORA_QKV_PROJ, REF_LORA_GATE_UP_PROJ, /* Phi-3's fused modules: no reference model here (peft checks them) */
    REF_LORA_MODULES
};

/* One adapter: A [r, in], B [out, r] row-major; dA, dB their gradients (ref_lora_fd_grads).
 * A NULL: the module is not adapted. */
typedef struct {
    double *A, *B, *dA, *dB;
    int in, out;
} RefLoraAdapter;

/* The dropout key of one application (lora.h's lora_dropout_key, module as an int) */
typedef uint64_t (*RefLoraKeyFn)(uint64_t seed, long step, int layer, int module);

typedef struct RefLora {
    int layers, r;
    double scale; /* lora_alpha / r, or lora_alpha / sqrt(r) (use_rslora) */
    double p;     /* lora_dropout in [0, 1); 0: none (evaluation, or no dropout) */
    uint64_t seed;
    long step;
    long row_base;    /* the micro-batch's first row of x in the step's batch (g0 * T): dropout's index */
    RefLoraKeyFn key; /* needed when p > 0 */
    RefLoraAdapter (*ad)[REF_LORA_MODULES]; /* [layers] */
} RefLora;

/* No adapters yet (ref_lora_add them); p 0, no key. */
void ref_lora_init(RefLora *lo, int layers, int r, double scale);
void ref_lora_free(RefLora *lo);
/* Adapt layer's module: A, B (and dA, dB) allocated zeroed. Returns the adapter. */
RefLoraAdapter *ref_lora_add(RefLora *lo, int layer, int module, int in, int out);
/* lora_alpha / r, or lora_alpha / sqrt(r) */
double ref_lora_scaling(double lora_alpha, int r, bool use_rslora);

/* y[rows, out] += scale * (dropout(x) A^T) B^T for rows row0 .. row0 + rows - 1 of the micro-batch
 * (x [rows, in]; row0 within the micro-batch, b*T + t: the mask's row is lo->row_base + row0 + n);
 * nothing when lo is NULL or the module is not adapted. A module whose in / out are not the given
 * widths aborts (message on stderr): the caller's dims are wrong. */
void ref_lora_apply(const RefLora *lo, int layer, int module, const double *x, int rows, long row0, int in, double *y,
                    int out);

/* W[out, in] += scale * B A (the merged weight, PEFT's merge; dropout plays no part). */
void ref_lora_merge(const RefLora *lo, int layer, int module, double *W, int out, int in);

/* The loss the gradients are of, as a function of the adapters (ctx: the caller's model and batch) */
typedef double (*RefLoraLossFn)(void *ctx, const RefLora *lo);

/* dA, dB of every adapter by central differences of loss, step h = rel_step * (1 + |w|) per
 * element. Returns the largest |gradient| (NAN when a loss was not finite). */
double ref_lora_fd_grads(RefLora *lo, RefLoraLossFn loss, void *ctx, double rel_step);

#endif
