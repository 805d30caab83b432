/* model_internal.h - helpers shared by model.c (allocation, steps) and model_blocks.c (the
 * blocks' forward and backward); not part of the model's interface. */
#ifndef GT_MODEL_INTERNAL_H
#define GT_MODEL_INTERNAL_H

#include "model.h"

/* n act-dtype elements past p */
static inline act_t *model_at(const Model *m, const act_t *p, size_t n) {
    return (char *)p + n * gt_dtype_size(m->act);
}

/* a base tensor's compute weights (act dtype) by role (layer -1: a global), NULL when the model has
 * none. A tensor stored in another dtype (arch_storage_dtype; a 4-bit one dequantized unit by unit) is
 * converted into the one scratch
 * wconv, valid until the next such call: a caller uses one converted weight at a time (a block's
 * matrices; the globals the model keeps pointers to are never converted). */
static inline const act_t *model_w(const Model *m, int layer, TensorRole role) {
    int i = param_layout_role(&m->base_layout, layer, role);
    if (i < 0) return NULL;
    const ParamTensor *t = &m->base_layout.tensors[i];
    const act_t *w = (const char *)m->base + t->byte_offset;
    if (t->dtype == m->act) return w;
    if (t->dtype == GT_NF4) { /* unit by unit (one per HF block), each into its rows of the scratch */
        for (int b = 0; b < arch_nf4_units(t); b++) {
            Nf4Format f;
            size_t at, e0;
            arch_nf4_unit(t, &m->desc, b, &f, &at, &e0);
            m->be->ops->dequant_nf4(m->be, model_at(m, m->wconv, e0), m->act, (const char *)m->base + at, &f);
        }
        return m->wconv;
    }
    m->be->ops->convert(m->be, m->wconv, m->act, w, t->dtype, t->numel);
    return m->wconv;
}

/* its gradient (fp32), NULL when the model has none, no gradients, or the base is frozen (LoRA) */
static inline float *model_g(const Model *m, int layer, TensorRole role) {
    int i = param_layout_role(&m->base_layout, layer, role);
    return i < 0 || !m->grads || m->desc.adapter.r > 0 ? NULL : m->grads + m->base_layout.tensors[i].offset;
}

/* adapter tensor i of the layout: its compute weights and gradient (NULL without gradients) */
static inline const act_t *model_adapter_w(const Model *m, int i) {
    return model_at(m, m->weights, m->layout.tensors[i].offset);
}
static inline float *model_adapter_g(const Model *m, int i) {
    return m->grads ? m->grads + m->layout.tensors[i].offset : NULL;
}

/* the compute copy of the weights (bf16) refreshed from params if they changed (model.c) */
void model_refresh_weights(Model *m);

/* model_blocks.c */
/* embedding and every block over positions pos0..pos0+n-1 of B rows; leaves lnf filled */
void model_forward_blocks(Model *m, int B, int pos0, int n, bool offload);
/* the rotary table of positions 0..positions-1 into cos/sin (device, [positions, head_dim / 2]),
 * through the host staging buffer */
int model_upload_rope(Model *m, float *cos, float *sin, int positions, GtError *err);
/* decode.c: while model_decode runs (m->kv set), a layer's attention over the cache, and the
 * rotary table the layers read (the cache's, for its positions; else the model's) */
void decode_attention(Model *m, int l, act_t *atty, const act_t *qkv, int n);
void decode_rope_table(const Model *m, const float **cos, const float **sin);
/* backward from dL/d(lnf) in dbtc down to the embeddings */
void model_backward_blocks(Model *m, int B);

#endif
