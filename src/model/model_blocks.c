/* model_blocks.c - the transformer blocks' forward and backward, device-blind (Backend ops only),
 * for both families. Tensors are found by role (arch.h); an absent bias is a NULL pointer.
 *
 * GPT-2 layer l:  ln1 = LN(x); qkv = ln1 Wqkv + b; atty = attn(qkv); res2 = x + atty Wo + b
 *                 ln2 = LN(res2); fch = ln2 Wfc + b; fch_act = gelu(fch); out = res2 + fch_act Wdown + b
 * Llama layer l:  ln1 = RMS(x); qkv = rope(ln1 Wqkv [+ b]); atty = gqa_attn(qkv, window);
 *                 res2 = x + atty Wo [+ b]; ln2 = RMS(res2); fch = ln2 Wgate|up [+ b];
 *                 fch_act = silu(gate) * up; out = res2 + fch_act Wdown [+ b]
 * (each residual add runs fused with the norm that reads its sum: res2 with ln2, and the block's
 * output with the next block's ln1 or the final norm; GPT-2's Wfc and its gelu run fused too).
 * qkv is kept after the rotation: the attention's backward needs the rotated q and k, and the
 * rotation's own backward needs only the table. Backward runs the same graph in reverse with one
 * activation-gradient workspace shared by all layers; a recomputed layer re-runs its forward
 * (without the output) into the scratch first. */
#include "model_internal.h"

#include "adapter.h"

/* what the block computes: the architecture's description */
static const ArchSpec *spec(const Model *m) { return arch_spec(m->desc.arch); }

/* One projection of layer l, by the roles of its weight and bias: out[N, OC] = inp[N, IC] W^T + b,
 * plus its adapters (adapter.h). Every projection of a block goes through this pair, so what a
 * projection is lives here once. */
static void linear_forward(Model *m, int l, TensorRole w, TensorRole b, act_t *out, const act_t *inp, int N, int IC,
                           int OC) {
    m->be->ops->matmul_forward(m->be, out, inp, model_w(m, l, w), model_w(m, l, b), N, IC, OC, OC);
    if (m->ad.n_sites) adapter_forward(m, l, w, out, inp, N, IC, OC);
}

/* dinp[N, IC] = dout W (overwritten), dW += dout^T inp, db += colsum(dout); a NULL gradient (no
 * gradients, or a frozen tensor) skips its GEMM; then the adapters' */
static void linear_backward(Model *m, int l, TensorRole w, TensorRole b, act_t *dinp, const act_t *dout,
                            const act_t *inp, int N, int IC, int OC) {
    m->be->ops->matmul_backward(m->be, dinp, model_g(m, l, w), model_g(m, l, b), dout, inp, model_w(m, l, w), N, IC, OC,
                                OC);
    if (m->ad.n_sites) adapter_backward(m, l, w, dinp, dout, inp, N, IC, OC);
}

/* a norm of a block (and the final one), of the architecture's kind */
static void norm_forward(Model *m, act_t *out, float *mean, float *rstd, const act_t *x, const act_t *w,
                         const act_t *b, int N) {
    const BackendOps *op = m->be->ops;
    const float eps = (float)m->desc.layer_norm_epsilon;
    if (spec(m)->norm == NORM_LAYERNORM)
        op->layernorm_forward(m->be, out, mean, rstd, x, w, b, N, m->desc.n_embd, eps);
    else
        op->rmsnorm_forward(m->be, out, rstd, x, w, N, m->desc.n_embd, eps);
}

/* res = x + y rounded, out = norm(res): the add and the norm as one fused op (bit for bit the pair) */
static void residual_norm_forward(Model *m, act_t *res, act_t *out, float *mean, float *rstd, const act_t *x,
                                  const act_t *y, const act_t *w, const act_t *b, int N) {
    const int C = m->desc.n_embd;
    const float eps = (float)m->desc.layer_norm_epsilon;
    if (spec(m)->norm == NORM_LAYERNORM)
        backend_residual_layernorm_forward(m->be, res, out, mean, rstd, x, y, w, b, N, C, eps);
    else
        backend_residual_rmsnorm_forward(m->be, res, out, rstd, x, y, w, N, C, eps);
}

/* The norm that reads a block's output: the next layer's first norm, or the final one. The block's
 * closing residual add runs fused with it (llm.c's fused_residual_forward), so the output is
 * written once and normed from the same pass. Rows of the whole buffers; the callee offsets them. */
typedef struct {
    act_t *out;
    float *mean, *rstd;
    const act_t *w, *b;
} NextNorm;

static void norm_backward(Model *m, act_t *dinp, float *dw, float *db, const act_t *dout, const act_t *x,
                          const act_t *w, const float *mean, const float *rstd, int N) {
    const BackendOps *op = m->be->ops;
    if (spec(m)->norm == NORM_LAYERNORM)
        op->layernorm_backward(m->be, dinp, dw, db, dout, x, w, mean, rstd, N, m->desc.n_embd);
    else
        op->rmsnorm_backward(m->be, dinp, dw, dout, x, w, rstd, N, m->desc.n_embd);
}

/* One block over positions pos0..pos0+n-1 of B rows: the training forward runs whole rows
 * (pos0 = 0, n = T), sampling runs B = 1 over the new positions only, the keys and values of
 * the earlier ones being kept in qkv by the calls before. in, a and out are the whole buffers.
 * out == NULL skips the last projection (recompute needs only the activations backward reads,
 * not the block's output). in_normed: ln1 (and its statistics) already hold norm1(in) for these
 * rows, written by the block before; next: where this block's output is normed (NULL: only out). */
static void layer_forward(Model *m, int l, int B, int pos0, int n, const act_t *in, const LayerActs *a, bool in_normed,
                          act_t *out, const NextNorm *next) {
    Backend *be = m->be;
    const BackendOps *op = be->ops;
    const ModelDesc *d = &m->desc;
    const int C = d->n_embd, I = d->n_inner, NH = d->n_head, NKV = d->n_kv_head, hd = d->head_dim, N = B * n;
    const int QKV = model_desc_qkv_dim(d), Q = model_desc_attn_dim(d), FC = spec(m)->mlp == MLP_SWIGLU ? 2 * I : I;
    const size_t r = (size_t)pos0; /* the first row: B = 1 buffers are contiguous [T, ...] */
    const float eps = (float)d->layer_norm_epsilon;
    act_t *ln1 = model_at(m, a->ln1, r * C), *qkv = model_at(m, a->qkv, r * QKV), *atty = model_at(m, a->atty, r * Q);
    act_t *res2 = model_at(m, a->res2, r * C), *ln2 = model_at(m, a->ln2, r * C), *fch = model_at(m, a->fch, r * FC);
    act_t *fch_act = model_at(m, a->fch_act, r * I), *x = model_at(m, in, r * C);
    if (!in_normed)
        norm_forward(m, ln1, a->ln1_mean ? a->ln1_mean + r : NULL, a->ln1_rstd + r, x, model_w(m, l, ROLE_NORM1_W),
                     model_w(m, l, ROLE_NORM1_B), N);
    if (spec(m)->qk_norm) { /* the projection into qkv_pre, then q and k heads normed into qkv */
        act_t *pre = model_at(m, a->qkv_pre, r * QKV);
        linear_forward(m, l, ROLE_QKV_W, ROLE_QKV_B, pre, ln1, N, C, QKV);
        op->head_rmsnorm_forward(be, qkv, a->qk_rstd + r * (size_t)(NH + NKV), pre, model_w(m, l, ROLE_QNORM_W),
                                 model_w(m, l, ROLE_KNORM_W), N, NH, NKV, hd, eps);
    } else {
        linear_forward(m, l, ROLE_QKV_W, ROLE_QKV_B, qkv, ln1, N, C, QKV);
    }
    /* per-token positions: packed rows (pos0 = 0, n = T), or a decode's tokens (decode.h) */
    const int *pos = m->pos_on ? m->positions : NULL;
    const float *cos, *sin;
    decode_rope_table(m, &cos, &sin);
    if (spec(m)->pos == POS_ROPE) op->rope_forward(be, qkv, cos, sin, B, n, pos0, NH, NKV, hd, pos);
    /* causal attention over positions 0..pos0+n-1: the op has no query offset, so rows before
     * pos0 are recomputed too (measured: 3 % of the time of 200 sampled tokens at 124M on the CPU,
     * the weights' matmuls 70 %). With pos0 > 0 the lse layout is [NH, pos0+n]: only a training
     * forward is followed by backward. A decode attends over its cache instead. */
    if (m->kv)
        decode_attention(m, l, atty, qkv, N);
    else
        op->attention_forward(be, a->atty, a->lse, a->qkv, B, pos0 + n, NH, NKV, hd, m->window, pos);
    linear_forward(m, l, ROLE_O_W, ROLE_O_B, res2, atty, N, Q, C);
    /* res2 += in, ln2 = norm(res2) */
    residual_norm_forward(m, res2, ln2, a->ln2_mean ? a->ln2_mean + r : NULL, a->ln2_rstd + r, res2, x,
                          model_w(m, l, ROLE_NORM2_W), model_w(m, l, ROLE_NORM2_B), N);
    if (spec(m)->mlp == MLP_GELU_TANH) {
        /* fch = ln2 Wfc + b, fch_act = gelu(fch): one fused op (backend.h: bf16 on CUDA may use a GELU
         * epilogue), or the pair when an adapter adds to fch before the gelu */
        if (adapter_on(m, l, ROLE_FC_W)) {
            linear_forward(m, l, ROLE_FC_W, ROLE_FC_B, fch, ln2, N, C, I);
            op->gelu_forward(be, fch_act, fch, (size_t)N * I);
        } else {
            backend_matmul_gelu_forward(be, fch_act, fch, ln2, model_w(m, l, ROLE_FC_W), model_w(m, l, ROLE_FC_B), N, C, I);
        }
    } else {
        linear_forward(m, l, ROLE_FC_W, ROLE_FC_B, fch, ln2, N, C, 2 * I);
        op->swiglu_forward(be, fch_act, fch, N, I);
    }
    if (out) {
        act_t *y = model_at(m, out, r * C);
        linear_forward(m, l, ROLE_DOWN_W, ROLE_DOWN_B, y, fch_act, N, I, C);
        if (next) /* out = y + res2, and the next norm of it */
            residual_norm_forward(m, y, model_at(m, next->out, r * C), next->mean ? next->mean + r : NULL,
                                  next->rstd + r, y, res2, next->w, next->b, N);
        else
            op->add(be, y, y, res2, (size_t)N * C);
    }
}

/* dres holds dL/d(block output) on entry and dL/d(block input) on return. */
static void layer_backward(Model *m, int l, int B, const act_t *in, const LayerActs *a) {
    Backend *be = m->be;
    const BackendOps *op = be->ops;
    const ModelDesc *d = &m->desc;
    const int T = m->T, C = d->n_embd, I = d->n_inner, NH = d->n_head, NKV = d->n_kv_head, hd = d->head_dim;
    const int BT = B * T, QKV = model_desc_qkv_dim(d), Q = model_desc_attn_dim(d);
    /* out = res2 + act(norm2(res2) Wfc) Wdown */
    if (spec(m)->mlp == MLP_GELU_TANH) {
        linear_backward(m, l, ROLE_DOWN_W, ROLE_DOWN_B, m->dfch, m->dres, a->fch_act, BT, I, C);
        op->gelu_backward(be, m->dfch, a->fch, m->dfch, (size_t)BT * I);
        linear_backward(m, l, ROLE_FC_W, ROLE_FC_B, m->dbtc, m->dfch, a->ln2, BT, C, I);
    } else { /* dfch: d(gate | up) [2I], then d(fch_act) [I] after it */
        act_t *dact = model_at(m, m->dfch, (size_t)BT * 2 * I);
        linear_backward(m, l, ROLE_DOWN_W, ROLE_DOWN_B, dact, m->dres, a->fch_act, BT, I, C);
        op->swiglu_backward(be, m->dfch, a->fch, dact, BT, I);
        linear_backward(m, l, ROLE_FC_W, ROLE_FC_B, m->dbtc, m->dfch, a->ln2, BT, C, 2 * I);
    }
    norm_backward(m, m->dres, model_g(m, l, ROLE_NORM2_W), model_g(m, l, ROLE_NORM2_B), m->dbtc, a->res2,
                  model_w(m, l, ROLE_NORM2_W), a->ln2_mean, a->ln2_rstd, BT);
    /* res2 = in + attn(norm1(in) Wqkv) Wo */
    linear_backward(m, l, ROLE_O_W, ROLE_O_B, m->dbtc, m->dres, a->atty, BT, Q, C);
    const int *pos = m->pos_on ? m->positions : NULL;
    op->attention_backward(be, m->dqkv, m->att_ws, m->dbtc, a->qkv, a->atty, a->lse, B, T, NH, NKV, hd, m->window, pos);
    if (spec(m)->pos == POS_ROPE) op->rope_backward(be, m->dqkv, m->rope_cos, m->rope_sin, B, T, NH, NKV, hd, pos);
    if (spec(m)->qk_norm) /* in place: d(qkv_pre) from d(qkv) */
        op->head_rmsnorm_backward(be, m->dqkv, model_g(m, l, ROLE_QNORM_W), model_g(m, l, ROLE_KNORM_W), m->dqkv,
                                  a->qkv_pre, model_w(m, l, ROLE_QNORM_W), model_w(m, l, ROLE_KNORM_W), a->qk_rstd, BT,
                                  NH, NKV, hd);
    linear_backward(m, l, ROLE_QKV_W, ROLE_QKV_B, m->dbtc, m->dqkv, a->ln1, BT, C, QKV);
    norm_backward(m, m->dres, model_g(m, l, ROLE_NORM1_W), model_g(m, l, ROLE_NORM1_B), m->dbtc, in,
                  model_w(m, l, ROLE_NORM1_W), a->ln1_mean, a->ln1_rstd, BT);
}

/* offload: copy out the kept inputs of offloaded layers (only when a backward will read them:
 * whole rows). */
void model_forward_blocks(Model *m, int B, int pos0, int n, bool offload) {
    Backend *be = m->be;
    const BackendOps *op = be->ops;
    const int C = m->desc.n_embd, L = m->desc.n_layer, N = B * n;
    const size_t r = (size_t)pos0;
    const RecomputePolicy *pol = &m->policy;
    const size_t input_bytes = (size_t)N * C * gt_dtype_size(m->act);
    if (offload && recompute_offloaded(pol, 0)) op->offload_wait(be, recompute_slot(pol, 0));
    op->encoder_forward(be, model_at(m, m->input[0], r * C), m->tokens + r, m->wte,
                        m->wpe ? model_at(m, m->wpe, r * C) : NULL, B, n, C, m->pos_on ? m->positions : NULL);
    for (int l = 0; l < L; l++) {
        /* the kept input of an offloaded layer leaves for the host as soon as it exists; the
         * copy runs on the copy stream while this layer computes (it only reads the input) */
        if (offload && recompute_offloaded(pol, l))
            op->offload_to_host(be, m->host_stash[l], m->input[l], input_bytes, recompute_slot(pol, l));
        act_t *out = l + 1 < L ? m->input[l + 1] : m->final_res;
        /* before overwriting a prefetch buffer, the copy out of its previous tenant must be done */
        if (offload && l + 1 < L && recompute_offloaded(pol, l + 1)) op->offload_wait(be, recompute_slot(pol, l + 1));
        /* the output normed by the next layer's first norm or the final norm, in the same pass */
        const LayerActs *na = l + 1 < L ? &m->acts[l + 1] : NULL;
        const NextNorm next = na ? (NextNorm){na->ln1, na->ln1_mean, na->ln1_rstd, model_w(m, l + 1, ROLE_NORM1_W),
                                              model_w(m, l + 1, ROLE_NORM1_B)}
                                 : (NextNorm){m->lnf, m->lnf_mean, m->lnf_rstd, m->lnfw, m->lnfb};
        layer_forward(m, l, B, pos0, n, m->input[l], &m->acts[l], l > 0, out, &next);
    }
    /* lnf = norm(final_res): written by the last block (n_layer >= 1, arch.c) */
}

void model_backward_blocks(Model *m, int B) {
    Backend *be = m->be;
    const BackendOps *op = be->ops;
    const int T = m->T, C = m->desc.n_embd, L = m->desc.n_layer, BT = B * T;
    const RecomputePolicy *pol = &m->policy;
    const ParamLayout *pl = &m->layout;
    const size_t input_bytes = (size_t)BT * C * gt_dtype_size(m->act);
    /* dbtc holds dL/d(lnf) from the LM head */
    op->zero(be, m->dres, input_bytes);
    norm_backward(m, m->dres, m->dlnfw, m->dlnfb, m->dbtc, m->final_res, m->lnfw, m->lnf_mean, m->lnf_rstd, BT);
    int last_rc = -1; /* the last recomputed layer: its input is fetched first */
    for (int l = L - 1; l >= 0 && last_rc < 0; l--)
        if (recompute_layer(pol, l)) last_rc = l;
    if (pol->offload && last_rc >= 0)
        op->offload_to_device(be, m->input[last_rc], m->host_stash[last_rc], input_bytes, recompute_slot(pol, last_rc));
    for (int l = L - 1; l >= 0; l--) {
        if (recompute_layer(pol, l)) {
            if (pol->offload) {
                op->offload_wait(be, recompute_slot(pol, l));
                /* prefetch the next one needed into the other buffer while this one computes */
                int prev = recompute_prev(pol, l);
                if (prev >= 0)
                    op->offload_to_device(be, m->input[prev], m->host_stash[prev], input_bytes, recompute_slot(pol, prev));
            }
            layer_forward(m, l, B, 0, m->T, m->input[l], &m->acts[l], false, NULL, NULL);
        }
        layer_backward(m, l, B, m->input[l], &m->acts[l]);
        if (m->grad_ready) /* layer l's tensors are contiguous */
            m->grad_ready(m->grad_ready_ctx, m->grads + pl->layer_begin[l], pl->layer_begin[l + 1] - pl->layer_begin[l]);
    }
    if (m->dwte) /* none: frozen (LoRA) */
        op->encoder_backward(be, m->dwte, m->dwpe, m->dres, m->tokens, B, T, C, m->pos_on ? m->positions : NULL);
    if (m->grad_ready) { /* the globals before the layers (wte, wpe); then those after (final norm, lm_head) */
        m->grad_ready(m->grad_ready_ctx, m->grads, pl->layer_begin[0]);
        m->grad_ready(m->grad_ready_ctx, m->grads + pl->layer_begin[L], m->padded_total - pl->layer_begin[L]);
    }
}
