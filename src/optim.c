/* optim.c - schedules, clipping, AdamW over parameter groups. */
#include "optim.h"

#include <math.h>

double lr_multiplier(LrSchedule s, long step, long warmup_steps, long total_steps) {
    if (step < warmup_steps) return (double)step / (double)(warmup_steps > 1 ? warmup_steps : 1);
    switch (s) {
    case LR_LINEAR: {
        double denom = (double)(total_steps - warmup_steps > 1 ? total_steps - warmup_steps : 1);
        double v = (double)(total_steps - step) / denom;
        return v > 0.0 ? v : 0.0;
    }
    case LR_COSINE: {
        double denom = (double)(total_steps - warmup_steps > 1 ? total_steps - warmup_steps : 1);
        double progress = (double)(step - warmup_steps) / denom;
        double v = 0.5 * (1.0 + cos(M_PI * 2.0 * 0.5 * progress));
        return v > 0.0 ? v : 0.0;
    }
    case LR_CONSTANT:
    default:
        return 1.0;
    }
}

double grad_global_norm(Model *m) {
    return sqrt(m->be->ops->sum_squares(m->be, m->grads, m->layout.total));
}

double clip_grads(Model *m, double norm, double max_norm) {
    if (max_norm <= 0.0 || !isfinite(norm)) return 1.0;
    double coef = max_norm / (norm + 1e-6);
    if (coef >= 1.0) return 1.0;
    m->be->ops->scale(m->be, m->grads, (float)coef, m->layout.total);
    return coef;
}

void adamw_step(Model *m, double lr, const RunConfig *cfg, int t) {
    Backend *be = m->be;
    /* contiguous runs of tensors in the same group are stepped together */
    const ParamLayout *pl = &m->layout;
    int i = 0;
    while (i < pl->n_tensors) {
        int j = i;
        size_t n = 0;
        while (j < pl->n_tensors && pl->tensors[j].decay == pl->tensors[i].decay) n += pl->tensors[j++].numel;
        size_t off = pl->tensors[i].offset;
        float wd = pl->tensors[i].decay ? (float)cfg->weight_decay : 0.0f;
        be->ops->adamw(be, m->params + off, m->grads + off, m->adam_m + off, m->adam_v + off, n, (float)lr,
                       (float)cfg->adam_beta1, (float)cfg->adam_beta2, (float)cfg->adam_epsilon, wd, t);
        i = j;
    }
}
