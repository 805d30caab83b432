/* ref_gpt.h - an independent, naive double-precision GPT-2 forward for tests. */
#ifndef GT_REF_GPT_H
#define GT_REF_GPT_H

#include "model.h"

/* Mean cross-entropy over targets != -100 of a GPT-2 (pre-LN, tanh GELU, tied or untied head)
 * whose parameters are found by Hugging Face name in pl (gtrain layout: linear weights [out, in]).
 * Returns the SUM of losses; *count gets the number of valid targets. */
double ref_gpt_loss_sum(const ModelDesc *d, const ParamLayout *pl, const double *params, const int *tokens,
                        const int *targets, int B, int T, long *count);

/* The same with LoRA adapters (tests/ref_lora.h; lora->layers == n_layer, NULL: none): c_attn's
 * and mlp.c_fc's read the normed hidden state, attn.c_proj's the attention output, mlp.c_proj's the
 * GELU output; B, A are PEFT's [out, r], [r, in] whatever Conv1D's storage. Dropout's element
 * index counts rows over the step's whole batch (row lora->row_base + b*T + t). */
struct RefLora;
double ref_gpt_loss_sum_lora(const ModelDesc *d, const ParamLayout *pl, const double *params,
                             const struct RefLora *lora, const int *tokens, const int *targets, int B, int T,
                             long *count);

#endif
