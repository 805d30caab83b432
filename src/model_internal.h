/* model_internal.h - helpers shared by model.c (allocation, steps) and model_blocks.c (the
 * blocks' forward and backward); not part of the model's interface. */
#ifndef GT_MODEL_INTERNAL_H
#define GT_MODEL_INTERNAL_H

#include "model.h"

/* n act-dtype elements past p */
static inline act_t *model_at(const Model *m, const act_t *p, size_t n) {
    return (char *)p + n * gt_dtype_size(m->act);
}

/* a tensor's compute weights (act dtype) by role (layer -1: a global), NULL when the model has none */
static inline const act_t *model_w(const Model *m, int layer, TensorRole role) {
    int i = param_layout_role(&m->layout, layer, role);
    return i < 0 ? NULL : model_at(m, m->weights, m->layout.tensors[i].offset);
}

/* its gradient (fp32), NULL when the model has none or no gradients */
static inline float *model_g(const Model *m, int layer, TensorRole role) {
    int i = param_layout_role(&m->layout, layer, role);
    return i < 0 || !m->grads ? NULL : m->grads + m->layout.tensors[i].offset;
}

/* model_blocks.c */
/* embedding and every block over positions pos0..pos0+n-1 of B rows; leaves lnf filled */
void model_forward_blocks(Model *m, int B, int pos0, int n, bool offload);
/* backward from dL/d(lnf) in dbtc down to the embeddings */
void model_backward_blocks(Model *m, int B);

#endif
