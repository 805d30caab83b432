/* optim.c - schedules, clipping, AdamW over parameter groups. */
#include "optim.h"

#include <math.h>

double lr_multiplier(LrSchedule s, long step, long warmup_steps, long total_steps, double min_lr_rate) {
    if (step < warmup_steps) return (double)step / (double)(warmup_steps > 1 ? warmup_steps : 1);
    switch (s) {
    case LR_LINEAR: {
        double denom = (double)(total_steps - warmup_steps > 1 ? total_steps - warmup_steps : 1);
        double v = (double)(total_steps - step) / denom;
        return v > 0.0 ? v : 0.0;
    }
    case LR_COSINE:
    case LR_COSINE_MIN_LR: {
        double denom = (double)(total_steps - warmup_steps > 1 ? total_steps - warmup_steps : 1);
        double progress = (double)(step - warmup_steps) / denom;
        double v = 0.5 * (1.0 + cos(M_PI * 2.0 * 0.5 * progress));
        if (v < 0.0) v = 0.0;
        /* HF's get_cosine_with_min_lr_schedule_with_warmup */
        return s == LR_COSINE_MIN_LR ? v * (1.0 - min_lr_rate) + min_lr_rate : v;
    }
    case LR_CONSTANT:
    default:
        return 1.0;
    }
}

double grad_global_norm(Model *m) {
    return sqrt(m->be->ops->sum_squares(m->be, m->grads, m->layout.total));
}

double clip_grads_range(Model *m, double norm, double max_norm, size_t lo, size_t hi) {
    if (max_norm <= 0.0 || !isfinite(norm)) return 1.0;
    double coef = max_norm / (norm + 1e-6);
    if (coef >= 1.0) return 1.0;
    m->be->ops->scale(m->be, m->grads + lo, (float)coef, hi - lo);
    return coef;
}

double clip_grads(Model *m, double norm, double max_norm) { return clip_grads_range(m, norm, max_norm, 0, m->layout.total); }

/* runs handed to one adamw call (a fixed table: no allocation in the step) */
#define ADAMW_RUNS_PER_CALL 128

void adamw_step_range(Model *m, double lr, const RunConfig *cfg, int t, size_t lo, size_t hi) {
    Backend *be = m->be;
    const ParamLayout *pl = &m->layout;
    if (hi > pl->total) hi = pl->total;
    /* the act-dtype compute copy of the weights is written in the same pass (NULL under fp32: the
     * weights are the params); it is fresh afterwards when the range covered every param */
    act_t *copy = m->weights != (act_t *)m->params ? m->weights : NULL;
    /* contiguous runs of tensors in the same group (decay or not), clipped to [lo, hi), go to one
     * adamw call as runs relative to lo (m and v hold the range's elements only: ZeRO-1's shard) */
    AdamwRun runs[ADAMW_RUNS_PER_CALL];
    int n_runs = 0;
    int i = 0;
    while (i < pl->n_tensors) {
        const bool decay = pl->tensors[i].decay;
        int j = i;
        while (j < pl->n_tensors && pl->tensors[j].decay == decay) j++;
        size_t a = pl->tensors[i].offset, b = pl->tensors[j - 1].offset + pl->tensors[j - 1].numel;
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        if (a < b) {
            runs[n_runs++] = (AdamwRun){a - lo, b - lo, decay ? (float)cfg->weight_decay : 0.0f};
        }
        i = j;
        if (n_runs == ADAMW_RUNS_PER_CALL || (i == pl->n_tensors && n_runs > 0)) {
            be->ops->adamw(be, m->params + lo, m->grads + lo, m->adam_m, m->adam_v,
                           copy ? backend_act_at(be, copy, lo) : NULL, runs, n_runs, (float)lr,
                           (float)cfg->adam_beta1, (float)cfg->adam_beta2, (float)cfg->adam_epsilon, t);
            n_runs = 0;
        }
    }
    model_params_changed(m);
    if (copy && lo == 0 && hi == pl->total) m->weights_stale = false;
}

void adamw_step(Model *m, double lr, const RunConfig *cfg, int t) { adamw_step_range(m, lr, cfg, t, 0, m->layout.total); }
