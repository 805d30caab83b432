/* optim.h - learning-rate schedules (Hugging Face's formulas), gradient clipping and the AdamW
 * step over the model's parameter groups. */
#ifndef GT_OPTIM_H
#define GT_OPTIM_H

#include "config.h"
#include "model.h"

/* LR multiplier at optimizer step `step` (0-based, the step about to be taken), as HF's
 * get_{constant,linear,cosine,cosine_with_min_lr}_schedule_with_warmup: warmup is linear from 0;
 * min_lr_rate is the floor of cosine_with_min_lr. */
double lr_multiplier(LrSchedule s, long step, long warmup_steps, long total_steps, double min_lr_rate);

/* Global L2 norm of the grads (double, deterministic). */
double grad_global_norm(Model *m);

/* torch.nn.utils.clip_grad_norm_: scale grads by max_norm / (norm + 1e-6) when that is < 1.
 * Returns the factor applied (1 when not clipped). max_norm <= 0 disables. */
double clip_grads(Model *m, double norm, double max_norm);
/* The same on grads[lo, hi) only (ZeRO-1: this rank's shard; norm is still the global one). */
double clip_grads_range(Model *m, double norm, double max_norm, size_t lo, size_t hi);

/* One AdamW step (t is 1-based) with decoupled weight decay on the decay group only
 * (HF's default grouping: no decay for biases and layernorm weights). */
void adamw_step(Model *m, double lr, const RunConfig *cfg, int t);
/* The same over params[lo, hi) only, with the AdamW state m->adam_m/adam_v indexed from lo
 * (ZeRO-1: this rank's shard). */
void adamw_step_range(Model *m, double lr, const RunConfig *cfg, int t, size_t lo, size_t hi);

#endif
