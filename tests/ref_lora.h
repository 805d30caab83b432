/* ref_lora.h - LoRA and DoRA adapters for the double-precision reference models (ref_llama.h,
 * ref_gpt.h), with PEFT's semantics, and their gradients by central finite differences of the
 * reference loss (the references need no hand-written backward for them). DoRA (use_dora) also has
 * an analytic backward for one module (ref_lora_dora_backward), which test_dora_ref.c checks against
 * the finite differences; its norm ||W + s B A||_row is detached as PEFT's (ref_lora_freeze_norms).
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

/* One adapter: A [r, in], B [out, r] row-major; dA, dB their gradients (ref_lora_fd_grads, or
 * ref_lora_dora_backward). A NULL: the module is not adapted.
 * DoRA (PEFT's use_dora; ref_lora_add_dora): m [out] the magnitude vector, dm its gradient, W the
 * module's frozen base weight [out, in] (the caller's, borrowed: the reference model's own tensor),
 * norm [out] the frozen row norms ||W + scale B A||_row (ref_lora_freeze_norms). NULL m: plain LoRA. */
typedef struct {
    double *A, *B, *dA, *dB;
    int in, out;
    double *m, *dm, *norm;
    const double *W;
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
    /* DoRA: true: every DoRA adapter divides by its stored norm (ref_lora_freeze_norms), a constant;
     * false: by ||W + scale B A||_row of the current A, B. The forward's value is the same at the
     * point the norms were frozen; PEFT detaches the norm, so its gradients are those of the loss
     * with the norm frozen, which is what ref_lora_fd_grads differentiates when this is set. */
    bool freeze_norm;
} RefLora;

/* No adapters yet (ref_lora_add them); p 0, no key. */
void ref_lora_init(RefLora *lo, int layers, int r, double scale);
void ref_lora_free(RefLora *lo);
/* Adapt layer's module: A, B (and dA, dB) allocated zeroed. Returns the adapter. */
RefLoraAdapter *ref_lora_add(RefLora *lo, int layer, int module, int in, int out);
/* The same as a DoRA adapter (PEFT's use_dora) of the base weight W [out, in] (borrowed; it must
 * outlive lo): also m, dm and norm [out] zeroed (set m, e.g. ref_lora_dora_norms for PEFT's init). */
RefLoraAdapter *ref_lora_add_dora(RefLora *lo, int layer, int module, int in, int out, const double *W);
/* norm[o] = ||W[o, :] + scale (B A)[o, :]|| of the adapter's current A, B */
void ref_lora_dora_norms(const RefLora *lo, const RefLoraAdapter *a, double *norm);
/* every DoRA adapter's norm := its current row norms, and lo->freeze_norm = true */
void ref_lora_freeze_norms(RefLora *lo);
/* lora_alpha / r, or lora_alpha / sqrt(r) */
double ref_lora_scaling(double lora_alpha, int r, bool use_rslora);

/* y[rows, out] += scale * (dropout(x) A^T) B^T for rows row0 .. row0 + rows - 1 of the micro-batch
 * (x [rows, in]; row0 within the micro-batch, b*T + t: the mask's row is lo->row_base + row0 + n);
 * nothing when lo is NULL or the module is not adapted. A module whose in / out are not the given
 * widths aborts (message on stderr): the caller's dims are wrong.
 * DoRA: y holds the base's W x + b on entry; with xd = dropout(x), g = m / norm (per output row),
 *     y += (g - 1) (W xd) + g * scale * B A xd
 * (PEFT's DoraLinearLayer: without dropout y = g (W x + scale B A x) + b, the bias outside). */
void ref_lora_apply(const RefLora *lo, int layer, int module, const double *x, int rows, long row0, int in, double *y,
                    int out);

/* W[out, in] += scale * B A (the merged weight, PEFT's merge; dropout plays no part).
 * DoRA: W := (m / norm) (W + scale B A) per row, norm of the current A, B (W the adapter's base). */
void ref_lora_merge(const RefLora *lo, int layer, int module, double *W, int out, int in);

/* The loss the gradients are of, as a function of the adapters (ctx: the caller's model and batch) */
typedef double (*RefLoraLossFn)(void *ctx, const RefLora *lo);

/* dA, dB (and DoRA's dm) of every adapter by central differences of loss, step h = rel_step * (1 + |w|)
 * per element. Returns the largest |gradient| (NAN when a loss was not finite). For DoRA's gradients
 * as PEFT has them (norm detached), ref_lora_freeze_norms first. */
double ref_lora_fd_grads(RefLora *lo, RefLoraLossFn loss, void *ctx, double rel_step);

/* DoRA's analytic backward with the norm detached (PEFT), no dropout (lo->p 0): for the module's
 * input x [rows, in] and the gradient dy [rows, out] of its output, adds to the adapter's dA, dB, dm
 * (zero them first to get one batch's) and, when dx is not NULL, to dx [rows, in] (W^T dy included).
 * The norm is lo->freeze_norm's choice as in ref_lora_apply. */
void ref_lora_dora_backward(RefLora *lo, int layer, int module, const double *x, int rows, const double *dy, double *dx);

#endif
