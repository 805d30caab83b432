/* model.c - GPT-2 forward and backward, device-blind: every computation goes through Backend ops.
 *
 * Data flow of one micro-batch (B rows of T tokens, C = n_embd, I = n_inner):
 *   input[0] = wte[tokens] + wpe
 *   layer l: ln1 = LN(input[l]); qkv = ln1 Wqkv; atty = attn(qkv); res2 = input[l] + atty Wproj
 *            ln2 = LN(res2); fch = ln2 Wfc; fch_gelu = gelu(fch); out = res2 + fch_gelu Wfcproj
 *            out -> input[l+1] (or final_res after the last layer)
 *            (the residual add and LN2 run as one fused op, and so do Wfc and its gelu)
 *   lnf = LN(final_res); logits = lnf wte^T (in chunks of logits_rows rows, the loss and dlogits
 *   computed at once, so the full B*T*V logits never exist)
 * Backward runs the same graph in reverse with one activation-gradient workspace shared by all
 * layers. A recomputed layer re-runs its forward (without the output) into the scratch first. */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

/* ---------------------------------------------------------------- parameter layout */

static void layout_add(ParamLayout *pl, int *cap, const char *name, int ndim, int64_t d0, int64_t d1,
                       bool decay, bool conv1d, int layer) {
    if (pl->n_tensors == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        pl->tensors = gt_xrealloc(pl->tensors, (size_t)*cap * sizeof *pl->tensors);
    }
    ParamTensor *t = &pl->tensors[pl->n_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 1;
    t->numel = (size_t)d0 * (size_t)(ndim > 1 ? d1 : 1);
    t->offset = pl->total;
    t->decay = decay;
    t->conv1d = conv1d;
    t->layer = layer;
    pl->total += t->numel;
}

void param_layout_init(ParamLayout *pl, const ModelDesc *d) {
    memset(pl, 0, sizeof *pl);
    int cap = 0;
    const int64_t C = d->n_embd, I = d->n_inner, V = d->vocab_size, P = d->n_positions;
    char name[64];
    layout_add(pl, &cap, "wte.weight", 2, V, C, true, false, -1);
    layout_add(pl, &cap, "wpe.weight", 2, P, C, true, false, -1);
    /* one layer's tensors are contiguous, in this order (LayerParams follows it) */
    for (int l = 0; l < d->n_layer; l++) {
#define ADD(suffix, nd, a, b, decay, conv) \
    snprintf(name, sizeof name, "h.%d.%s", l, suffix), layout_add(pl, &cap, name, nd, a, b, decay, conv, l)
        ADD("ln_1.weight", 1, C, 1, false, false);
        ADD("ln_1.bias", 1, C, 1, false, false);
        ADD("attn.c_attn.weight", 2, 3 * C, C, true, true);
        ADD("attn.c_attn.bias", 1, 3 * C, 1, false, false);
        ADD("attn.c_proj.weight", 2, C, C, true, true);
        ADD("attn.c_proj.bias", 1, C, 1, false, false);
        ADD("ln_2.weight", 1, C, 1, false, false);
        ADD("ln_2.bias", 1, C, 1, false, false);
        ADD("mlp.c_fc.weight", 2, I, C, true, true);
        ADD("mlp.c_fc.bias", 1, I, 1, false, false);
        ADD("mlp.c_proj.weight", 2, C, I, true, true);
        ADD("mlp.c_proj.bias", 1, C, 1, false, false);
#undef ADD
    }
    layout_add(pl, &cap, "ln_f.weight", 1, C, 1, false, false, -1);
    layout_add(pl, &cap, "ln_f.bias", 1, C, 1, false, false, -1);
    if (!d->tie_word_embeddings) layout_add(pl, &cap, "lm_head.weight", 2, V, C, true, false, -1);
}

void param_layout_free(ParamLayout *pl) {
    free(pl->tensors);
    memset(pl, 0, sizeof *pl);
}

int param_layout_find(const ParamLayout *pl, const char *name) {
    for (int i = 0; i < pl->n_tensors; i++)
        if (strcmp(pl->tensors[i].name, name) == 0) return i;
    return -1;
}

/* index of layer l's first tensor (ln_1.weight) */
static int layer_first_tensor(int l) { return 2 + 12 * l; }

/* n act-dtype elements past p */
static act_t *at(const Model *m, const act_t *p, size_t n) { return (char *)p + n * gt_dtype_size(m->act); }

/* layer l's gradients (fp32) */
static LayerParams layer_grads(const Model *m, int l) {
    const ParamTensor *t = &m->layout.tensors[layer_first_tensor(l)];
    LayerParams p;
    float **f[12] = {&p.ln1w, &p.ln1b, &p.qkvw, &p.qkvb, &p.attprojw, &p.attprojb,
                     &p.ln2w, &p.ln2b, &p.fcw, &p.fcb, &p.fcprojw, &p.fcprojb};
    for (int i = 0; i < 12; i++) *f[i] = m->grads + t[i].offset;
    return p;
}

/* layer l's weights as forward and backward read them (act dtype) */
static LayerWeights layer_weights(const Model *m, int l) {
    const ParamTensor *t = &m->layout.tensors[layer_first_tensor(l)];
    LayerWeights p;
    const act_t **f[12] = {&p.ln1w, &p.ln1b, &p.qkvw, &p.qkvb, &p.attprojw, &p.attprojb,
                           &p.ln2w, &p.ln2b, &p.fcw, &p.fcb, &p.fcprojw, &p.fcprojb};
    for (int i = 0; i < 12; i++) *f[i] = at(m, m->weights, t[i].offset);
    return p;
}

/* ---------------------------------------------------------------- initialisation */

/* splitmix64: a counter-based generator, so each tensor's values depend only on (seed, index) */
static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { return ((double)(splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

void model_init_params_host(const ParamLayout *pl, const ModelDesc *d, uint64_t seed, float *host) {
    const double std_base = 0.02, std_resid = 0.02 / sqrt(2.0 * d->n_layer);
    for (int i = 0; i < pl->n_tensors; i++) {
        const ParamTensor *t = &pl->tensors[i];
        float *x = host + t->offset;
        const char *n = t->name;
        size_t len = strlen(n);
        bool is_ln_weight = strstr(n, "ln_") && len > 7 && strcmp(n + len - 7, ".weight") == 0;
        if (t->ndim == 1) {
            float v = is_ln_weight ? 1.0f : 0.0f;
            for (size_t k = 0; k < t->numel; k++) x[k] = v;
            continue;
        }
        double std = strstr(n, "c_proj.weight") ? std_resid : std_base;
        uint64_t state = seed * 0x100000001B3ull + (uint64_t)i * 0x9E3779B97F4A7C15ull + 1;
        for (size_t k = 0; k < t->numel; k += 2) { /* Box-Muller, two values per draw */
            double u1 = uniform01(&state), u2 = uniform01(&state);
            double r = sqrt(-2.0 * log(u1));
            x[k] = (float)(std * r * cos(2.0 * M_PI * u2));
            if (k + 1 < t->numel) x[k + 1] = (float)(std * r * sin(2.0 * M_PI * u2));
        }
    }
}

/* ---------------------------------------------------------------- allocation */

static void *model_alloc(Model *m, MemCategory cat, size_t bytes, GtError *err) {
    void *p = backend_alloc(m->be, cat, bytes, err);
    if (!p) return NULL;
    if (m->n_allocs == m->cap_allocs) {
        m->cap_allocs = m->cap_allocs ? 2 * m->cap_allocs : 64;
        m->allocs = gt_xrealloc(m->allocs, (size_t)m->cap_allocs * sizeof *m->allocs);
    }
    m->allocs[m->n_allocs++] = (struct ModelAlloc){p, bytes, cat};
    return p;
}

/* n floats (ALLOC_F) or n elements of the act dtype (ALLOC_A) */
#define ALLOC_N(dst, cat, n, size)                                           \
    do {                                                                     \
        if (!((dst) = model_alloc(m, (cat), (size_t)(n) * (size), err))) \
            goto fail;                                                       \
    } while (0)
#define ALLOC_F(dst, cat, n) ALLOC_N(dst, cat, n, sizeof(float))
#define ALLOC_A(dst, cat, n) ALLOC_N(dst, cat, n, gt_dtype_size(m->act))

/* the activations one layer keeps for backward (its input excluded) */
static int alloc_layer_acts(Model *m, LayerActs *a, MemCategory cat, GtError *err) {
    const size_t BT = (size_t)m->B * m->T, C = (size_t)m->desc.n_embd, I = (size_t)m->desc.n_inner;
    const size_t NH = (size_t)m->desc.n_head;
    ALLOC_A(a->ln1, cat, BT * C);
    ALLOC_F(a->ln1_mean, cat, BT);
    ALLOC_F(a->ln1_rstd, cat, BT);
    ALLOC_A(a->qkv, cat, BT * 3 * C);
    ALLOC_A(a->atty, cat, BT * C);
    ALLOC_F(a->lse, cat, (size_t)m->B * NH * m->T);
    ALLOC_A(a->res2, cat, BT * C);
    ALLOC_A(a->ln2, cat, BT * C);
    ALLOC_F(a->ln2_mean, cat, BT);
    ALLOC_F(a->ln2_rstd, cat, BT);
    ALLOC_A(a->fch, cat, BT * I);
    ALLOC_A(a->fch_gelu, cat, BT * I);
    return 0;
fail:
    return -1;
}

size_t model_shard_size(size_t n_params, int shard_world) {
    return (n_params + (size_t)shard_world - 1) / (size_t)shard_world;
}

static int model_build(Model **out, const ModelDesc *desc, Backend *be, int B, int T, RecomputePolicy policy,
                       uint64_t seed, int shard_world, int shard_rank, bool train, GtError *err);

int model_create(Model **out, const ModelDesc *desc, Backend *be, int B, int T, RecomputePolicy policy,
                 uint64_t seed, GtError *err) {
    return model_create_sharded(out, desc, be, B, T, policy, seed, 1, 0, err);
}

int model_create_sharded(Model **out, const ModelDesc *desc, Backend *be, int B, int T, RecomputePolicy policy,
                         uint64_t seed, int shard_world, int shard_rank, GtError *err) {
    return model_build(out, desc, be, B, T, policy, seed, shard_world, shard_rank, true, err);
}

int model_create_inference(Model **out, const ModelDesc *desc, Backend *be, int T, GtError *err) {
    return model_build(out, desc, be, 1, T, recompute_policy(false, 1, false, desc->n_layer), 0, 1, 0, false, err);
}

/* train: gradients, AdamW state, the backward workspace and GPT-2's initial weights; without it,
 * the forward's buffers only and zero weights (the caller loads them) */
static int model_build(Model **out, const ModelDesc *desc, Backend *be, int B, int T, RecomputePolicy policy,
                       uint64_t seed, int shard_world, int shard_rank, bool train, GtError *err) {
    Model *m = gt_xcalloc(1, sizeof *m);
    m->desc = *desc;
    m->be = be;
    m->B = B;
    m->T = T;
    m->policy = policy;
    m->act = be->act_dtype;
    m->logits_rows = train ? plan_logits_rows(desc, B, T, m->act) : 1;
    param_layout_init(&m->layout, desc);
    const int L = desc->n_layer;
    const size_t BT = (size_t)B * T, C = (size_t)desc->n_embd, I = (size_t)desc->n_inner;
    const size_t NP = m->layout.total;
    float *host = NULL;

    m->shard_world = shard_world;
    m->shard_rank = shard_rank;
    m->shard = model_shard_size(NP, shard_world);
    m->padded_total = m->shard * (size_t)shard_world;
    ALLOC_F(m->params, MEM_PARAMS, m->padded_total);
    if (train) {
        ALLOC_F(m->grads, MEM_GRADS, m->padded_total);
        ALLOC_F(m->adam_m, MEM_OPTIMIZER, m->shard);
        ALLOC_F(m->adam_v, MEM_OPTIMIZER, m->shard);
    }
    if (m->act == GT_F32)
        m->weights = m->params;
    else
        ALLOC_A(m->weights, MEM_PARAMS, NP);

    m->acts = gt_xcalloc((size_t)L, sizeof *m->acts);
    m->input = gt_xcalloc((size_t)L, sizeof *m->input);
    m->host_stash = gt_xcalloc((size_t)L, sizeof *m->host_stash);
    LayerActs scratch = {0};
    if (recompute_count(&policy) > 0 && alloc_layer_acts(m, &scratch, MEM_RECOMPUTE_SCRATCH, err)) goto fail;
    int n_stage = policy.offload ? recompute_device_stash_buffers(&policy) : 0;
    for (int s = 0; s < n_stage; s++) ALLOC_A(m->stage[s], MEM_RECOMPUTE_STASH, BT * C);
    for (int l = 0; l < L; l++) {
        if (!recompute_layer(&policy, l)) {
            ALLOC_A(m->input[l], MEM_ACTIVATIONS, BT * C);
            if (alloc_layer_acts(m, &m->acts[l], MEM_ACTIVATIONS, err)) goto fail;
        } else {
            m->acts[l] = scratch;
            if (policy.offload) {
                m->input[l] = m->stage[recompute_slot(&policy, l) % (n_stage ? n_stage : 1)];
                ALLOC_A(m->host_stash[l], MEM_HOST_OFFLOAD, BT * C);
            } else {
                ALLOC_A(m->input[l], MEM_RECOMPUTE_STASH, BT * C);
            }
        }
    }
    ALLOC_A(m->final_res, MEM_ACTIVATIONS, BT * C);
    ALLOC_A(m->lnf, MEM_ACTIVATIONS, BT * C);
    ALLOC_F(m->lnf_mean, MEM_ACTIVATIONS, BT);
    ALLOC_F(m->lnf_rstd, MEM_ACTIVATIONS, BT);
    if (!(m->tokens = model_alloc(m, MEM_ACTIVATIONS, BT * sizeof(int), err))) goto fail;
    if (!(m->targets = model_alloc(m, MEM_ACTIVATIONS, BT * sizeof(int), err))) goto fail;
    ALLOC_F(m->losses, MEM_ACTIVATIONS, BT);
    ALLOC_A(m->logits, MEM_LOGITS, (size_t)m->logits_rows * plan_logits_stride(desc));
    if (train) {
        ALLOC_A(m->dres, MEM_WORKSPACE, BT * C);
        ALLOC_A(m->dbtc, MEM_WORKSPACE, BT * C);
        ALLOC_A(m->dqkv, MEM_WORKSPACE, BT * 3 * C);
        ALLOC_A(m->dfch, MEM_WORKSPACE, BT * I);
        ALLOC_F(m->att_ws, MEM_WORKSPACE, (size_t)B * desc->n_head * T);
    }
    m->losses_host = gt_xmalloc(BT * sizeof(float));

    /* named parameter pointers */
    const ParamTensor *tt = m->layout.tensors;
    const int nt = m->layout.n_tensors;
    int lnf_i = layer_first_tensor(L);
    m->wte = at(m, m->weights, tt[0].offset);
    m->wpe = at(m, m->weights, tt[1].offset);
    m->lnfw = at(m, m->weights, tt[lnf_i].offset);
    m->lnfb = at(m, m->weights, tt[lnf_i + 1].offset);
    m->lm_head = desc->tie_word_embeddings ? m->wte : at(m, m->weights, tt[nt - 1].offset);
    if (train) {
        m->dwte = m->grads + tt[0].offset;
        m->dwpe = m->grads + tt[1].offset;
        m->dlnfw = m->grads + tt[lnf_i].offset;
        m->dlnfb = m->grads + tt[lnf_i + 1].offset;
        m->dlm_head = desc->tie_word_embeddings ? m->dwte : m->grads + tt[nt - 1].offset;
        /* GPT-2 init on the host, then one copy; the padding, grads and AdamW state stay as allocated: zero */
        host = malloc(NP * sizeof(float));
        if (!host) {
            gt_error(err, GT_EXIT_FAILURE, "out of host memory for the initial parameters (%zu floats)", NP);
            goto fail;
        }
        model_init_params_host(&m->layout, desc, seed, host);
        if (be->ops->to_device(be, m->params, host, NP * sizeof(float), err)) goto fail;
        free(host);
        host = NULL;
    }
    model_params_changed(m);
    be->ops->synchronize(be);
    *out = m;
    return 0;
fail:
    free(host);
    model_free(m);
    *out = NULL;
    return -1;
}

void model_free(Model *m) {
    if (!m) return;
    if (m->be) m->be->ops->synchronize(m->be);
    for (int i = m->n_allocs - 1; i >= 0; i--) backend_free(m->be, m->allocs[i].cat, m->allocs[i].p, m->allocs[i].bytes);
    free(m->allocs);
    free(m->acts);
    free(m->input);
    free(m->host_stash);
    free(m->losses_host);
    param_layout_free(&m->layout);
    free(m);
}

void model_zero_grads(Model *m) {
    if (m->grads) m->be->ops->zero(m->be, m->grads, m->padded_total * sizeof(float));
}

/* the bf16 compute copy of the weights, from the fp32 master, if they changed since the last one */
static void refresh_weights(Model *m) {
    if (!m->weights_stale) return;
    m->be->ops->to_act(m->be, m->weights, m->params, m->layout.total);
    m->weights_stale = false;
}

/* ---------------------------------------------------------------- forward / backward */

/* One transformer block over positions pos0..pos0+n-1 of B rows: the training forward runs whole
 * rows (pos0 = 0, n = T), sampling runs B = 1 over the new positions only, the keys and values of
 * the earlier ones being kept in qkv by the calls before. in, a and out are the whole buffers.
 * out == NULL skips the last projection (recompute needs only the activations backward reads,
 * not the block's output). */
static void layer_forward(Model *m, int l, int B, int pos0, int n, const act_t *in, const LayerActs *a, act_t *out) {
    Backend *be = m->be;
    const BackendOps *op = be->ops;
    const int C = m->desc.n_embd, I = m->desc.n_inner, NH = m->desc.n_head, N = B * n;
    const size_t r = (size_t)pos0; /* the first row: B = 1 buffers are contiguous [T, ...] */
    const float eps = (float)m->desc.layer_norm_epsilon;
    LayerWeights p = layer_weights(m, l);
    act_t *ln1 = at(m, a->ln1, r * C), *qkv = at(m, a->qkv, r * 3 * C), *atty = at(m, a->atty, r * C);
    act_t *res2 = at(m, a->res2, r * C), *ln2 = at(m, a->ln2, r * C), *fch = at(m, a->fch, r * I);
    act_t *fch_gelu = at(m, a->fch_gelu, r * I), *x = at(m, in, r * C);
    op->layernorm_forward(be, ln1, a->ln1_mean + r, a->ln1_rstd + r, x, p.ln1w, p.ln1b, N, C, eps);
    op->matmul_forward(be, qkv, ln1, p.qkvw, p.qkvb, N, C, 3 * C, 3 * C);
    /* causal attention over positions 0..pos0+n-1: the op has no query offset, so rows before
     * pos0 are recomputed too (measured: 3 % of the time of 200 sampled tokens at 124M on the CPU,
     * the weights' matmuls 70 %). With pos0 > 0 the lse layout is [NH, pos0+n]: only a training
     * forward is followed by backward. */
    op->attention_forward(be, a->atty, a->lse, a->qkv, B, pos0 + n, NH, NH, C / NH, 0);
    op->matmul_forward(be, res2, atty, p.attprojw, p.attprojb, N, C, C, C);
    /* res2 += in, ln2 = LN(res2): one fused op (bit for bit add + layernorm_forward) */
    op->residual_layernorm_forward(be, res2, ln2, a->ln2_mean + r, a->ln2_rstd + r, res2, x, p.ln2w, p.ln2b, N, C,
                                   eps);
    /* fch = ln2 Wfc + b, fch_gelu = gelu(fch): one fused op (backend.h: bf16 on CUDA may use a GELU epilogue) */
    op->matmul_gelu_forward(be, fch_gelu, fch, ln2, p.fcw, p.fcb, N, C, I);
    if (out) {
        act_t *y = at(m, out, r * C);
        op->matmul_forward(be, y, fch_gelu, p.fcprojw, p.fcprojb, N, I, C, C);
        op->add(be, y, y, res2, (size_t)N * C);
    }
}

/* dres holds dL/d(block output) on entry and dL/d(block input) on return. */
static void layer_backward(Model *m, int l, int B, const act_t *in, const LayerActs *a) {
    Backend *be = m->be;
    const BackendOps *op = be->ops;
    const int T = m->T, C = m->desc.n_embd, I = m->desc.n_inner, NH = m->desc.n_head, BT = B * T;
    LayerWeights p = layer_weights(m, l);
    LayerParams g = layer_grads(m, l);
    /* out = res2 + gelu(LN2(res2) Wfc) Wfcproj */
    op->matmul_backward(be, m->dfch, g.fcprojw, g.fcprojb, m->dres, a->fch_gelu, p.fcprojw, BT, I, C, C);
    op->gelu_backward(be, m->dfch, a->fch, m->dfch, (size_t)BT * I);
    op->matmul_backward(be, m->dbtc, g.fcw, g.fcb, m->dfch, a->ln2, p.fcw, BT, C, I, I);
    op->layernorm_backward(be, m->dres, g.ln2w, g.ln2b, m->dbtc, a->res2, p.ln2w, a->ln2_mean, a->ln2_rstd, BT, C);
    /* res2 = in + attn(LN1(in) Wqkv) Wproj */
    op->matmul_backward(be, m->dbtc, g.attprojw, g.attprojb, m->dres, a->atty, p.attprojw, BT, C, C, C);
    op->attention_backward(be, m->dqkv, m->att_ws, m->dbtc, a->qkv, a->atty, a->lse, B, T, NH, NH, C / NH, 0);
    op->matmul_backward(be, m->dbtc, g.qkvw, g.qkvb, m->dqkv, a->ln1, p.qkvw, BT, C, 3 * C, 3 * C);
    op->layernorm_backward(be, m->dres, g.ln1w, g.ln1b, m->dbtc, in, p.ln1w, a->ln1_mean, a->ln1_rstd, BT, C);
}

/* Embedding and every block over positions pos0..pos0+n-1 of B rows (B > 1: whole rows, pos0 = 0,
 * n = T); leaves lnf filled for them. offload: copy out the kept inputs of offloaded layers (only
 * when a backward will read them: whole rows). */
static void forward_blocks(Model *m, int B, int pos0, int n, bool offload) {
    Backend *be = m->be;
    const BackendOps *op = be->ops;
    const int C = m->desc.n_embd, L = m->desc.n_layer, N = B * n;
    const size_t r = (size_t)pos0;
    const RecomputePolicy *pol = &m->policy;
    const size_t input_bytes = (size_t)N * C * gt_dtype_size(m->act);
    if (offload && recompute_offloaded(pol, 0)) op->offload_wait(be, recompute_slot(pol, 0));
    op->encoder_forward(be, at(m, m->input[0], r * C), m->tokens + r, m->wte, at(m, m->wpe, r * C), B, n, C);
    for (int l = 0; l < L; l++) {
        /* the kept input of an offloaded layer leaves for the host as soon as it exists; the
         * copy runs on the copy stream while this layer computes (it only reads the input) */
        if (offload && recompute_offloaded(pol, l))
            op->offload_to_host(be, m->host_stash[l], m->input[l], input_bytes, recompute_slot(pol, l));
        act_t *out = l + 1 < L ? m->input[l + 1] : m->final_res;
        /* before overwriting a prefetch buffer, the copy out of its previous tenant must be done */
        if (offload && l + 1 < L && recompute_offloaded(pol, l + 1)) op->offload_wait(be, recompute_slot(pol, l + 1));
        layer_forward(m, l, B, pos0, n, m->input[l], &m->acts[l], out);
    }
    op->layernorm_forward(be, at(m, m->lnf, r * C), m->lnf_mean + r, m->lnf_rstd + r, at(m, m->final_res, r * C),
                          m->lnfw, m->lnfb, N, C, (float)m->desc.layer_norm_epsilon);
}

static void backward_blocks(Model *m, int B) {
    Backend *be = m->be;
    const BackendOps *op = be->ops;
    const int T = m->T, C = m->desc.n_embd, L = m->desc.n_layer, BT = B * T;
    const RecomputePolicy *pol = &m->policy;
    const size_t input_bytes = (size_t)BT * C * gt_dtype_size(m->act);
    /* dbtc holds dL/d(lnf) from the LM head */
    op->zero(be, m->dres, input_bytes);
    op->layernorm_backward(be, m->dres, m->dlnfw, m->dlnfb, m->dbtc, m->final_res, m->lnfw, m->lnf_mean, m->lnf_rstd,
                           BT, C);
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
            layer_forward(m, l, B, 0, m->T, m->input[l], &m->acts[l], NULL);
        }
        layer_backward(m, l, B, m->input[l], &m->acts[l]);
        if (m->grad_ready) { /* layer l's tensors are contiguous: ln_1.weight .. mlp.c_proj.bias */
            const ParamTensor *first = &m->layout.tensors[layer_first_tensor(l)];
            const ParamTensor *next = &m->layout.tensors[layer_first_tensor(l + 1)];
            m->grad_ready(m->grad_ready_ctx, m->grads + first->offset, next->offset - first->offset);
        }
    }
    op->encoder_backward(be, m->dwte, m->dwpe, m->dres, m->tokens, B, T, C);
    if (m->grad_ready) { /* wte (also the tied head), wpe; then ln_f (and an untied lm_head) */
        const size_t layer0 = m->layout.tensors[layer_first_tensor(0)].offset;
        const size_t lnf = m->layout.tensors[layer_first_tensor(L)].offset;
        m->grad_ready(m->grad_ready_ctx, m->grads, layer0);
        m->grad_ready(m->grad_ready_ctx, m->grads + lnf, m->padded_total - lnf);
    }
}

static int upload_batch(Model *m, const int *tokens, const int *targets, int rows, GtError *err) {
    const size_t n = (size_t)rows * m->T * sizeof(int);
    if (rows < 1 || rows > m->B) return gt_error(err, GT_EXIT_FAILURE, "model: %d rows, model sized for %d", rows, m->B);
    if (m->be->ops->to_device(m->be, m->tokens, tokens, n, err)) return -1;
    return targets ? m->be->ops->to_device(m->be, m->targets, targets, n, err) : 0;
}

int model_step(Model *m, const int *tokens, const int *targets, int rows, float dloss_scale, bool compute_grad,
               double *loss_sum, GtError *err) {
    Backend *be = m->be;
    const BackendOps *op = be->ops;
    const int C = m->desc.n_embd, V = m->desc.vocab_size, LV = plan_logits_stride(&m->desc), BT = rows * m->T;
    if (compute_grad && !m->grads) return gt_error(err, GT_EXIT_FAILURE, "model: created for inference, no gradients");
    if (upload_batch(m, tokens, targets, rows, err)) return -1;
    refresh_weights(m);
    m->kv_len = 0; /* the activations are this batch's now */
    forward_blocks(m, rows, 0, m->T, compute_grad && m->policy.offload);
    /* LM head + loss, chunked over rows; dlogits formed in place and consumed at once */
    for (int r0 = 0; r0 < BT; r0 += m->logits_rows) {
        int n = BT - r0 < m->logits_rows ? BT - r0 : m->logits_rows;
        const act_t *lnf_rows = at(m, m->lnf, (size_t)r0 * C);
        op->matmul_forward(be, m->logits, lnf_rows, m->lm_head, NULL, n, C, V, LV);
        op->crossentropy(be, m->losses + r0, m->logits, m->targets + r0, n, V, LV, dloss_scale, compute_grad);
        if (compute_grad)
            op->matmul_backward(be, at(m, m->dbtc, (size_t)r0 * C), m->dlm_head, NULL, m->logits, lnf_rows,
                                m->lm_head, n, C, V, LV);
    }
    if (compute_grad) backward_blocks(m, rows);
    if (op->to_host(be, m->losses_host, m->losses, (size_t)BT * sizeof(float), err)) return -1;
    double s = 0.0;
    for (int i = 0; i < BT; i++) s += m->losses_host[i];
    *loss_sum = s;
    return 0;
}

bool model_keeps_kv(const Model *m) { return recompute_count(&m->policy) == 0; }

int model_forward_rows(Model *m, const int *tokens, int pos0, int n, float *logits_host, GtError *err) {
    const int C = m->desc.n_embd, V = m->desc.vocab_size;
    if (pos0 < 0 || n < 1 || pos0 + n > m->T)
        return gt_error(err, GT_EXIT_FAILURE, "model: positions %d..%d outside [0, %d)", pos0, pos0 + n - 1, m->T);
    if (pos0 > m->kv_len)
        return gt_error(err, GT_EXIT_FAILURE, "model: continuing at position %d, but only %d are kept", pos0, m->kv_len);
    if (m->be->ops->to_device(m->be, m->tokens + pos0, tokens, (size_t)n * sizeof *tokens, err)) return -1;
    refresh_weights(m);
    forward_blocks(m, 1, pos0, n, false);
    m->kv_len = model_keeps_kv(m) ? pos0 + n : 0;
    m->be->ops->matmul_forward(m->be, m->logits, at(m, m->lnf, (size_t)(pos0 + n - 1) * C), m->lm_head, NULL, 1, C,
                               V, plan_logits_stride(&m->desc));
    return backend_act_to_host_f32(m->be, logits_host, m->logits, (size_t)V, err);
}
