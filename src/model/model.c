/* model.c - the model's creation (arch.c's tensors, buffers.c's buffers), initialisation, and the
 * step: forward through the blocks (model_blocks.c), the LM head and loss in chunks of
 * logits_rows rows (the loss and dlogits computed at once, so the full B*T*V logits never exist),
 * and backward. Device-blind: every computation goes through Backend ops. */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "buffers.h"
#include "lora.h"
#include "model_internal.h"
#include "plan.h"

/* ---------------------------------------------------------------- initialisation */

/* elements [k0, k0 + n) of tensor i's initial values: the architecture table's for its tensors, the
 * adapter's own (lora_init_tensor) for an adapter's (a tensor the table does not describe) */
static void init_tensor(const ParamLayout *pl, const ModelDesc *d, uint64_t seed, int i, size_t k0, size_t n,
                        float *dst) {
    if (pl->tensors[i].spec) arch_init_tensor(pl, d, seed, i, k0, n, dst);
    else lora_init_tensor(&pl->tensors[i], d, seed, i, k0, n, dst);
}

/* n fp32 values at float offset off of the trainable params (upload false) or the base weights */
static int put_values(Model *m, bool base, size_t off, float *host, size_t n, GtError *err) {
    if (base) return model_upload_base(m, off, host, n, err);
    return m->be->ops->to_device(m->be, m->params + off, host, n * sizeof(float), err);
}

/* the table's initialisation of a layout (the trainable params, or with base the frozen base)
 * through the staging buffer: consecutive tensors (contiguous in the flat buffer) gathered into
 * one copy while they fit, a larger one in chunks of its own */
static int init_layout(Model *m, const ParamLayout *pl, bool base, uint64_t seed, GtError *err) {
    const size_t cap = m->staging_bytes / sizeof(float) / 2 * 2; /* even: arch_init_tensor's k0 */
    size_t fill = 0, start = 0;
    for (int i = 0; i < pl->n_tensors; i++) {
        const ParamTensor *t = &pl->tensors[i];
        if (fill && (fill + t->numel > cap || t->numel > cap)) {
            if (put_values(m, base, start, m->staging, fill, err)) return -1;
            fill = 0;
        }
        if (t->numel > cap) {
            for (size_t k0 = 0; k0 < t->numel; k0 += cap) {
                size_t n = t->numel - k0 < cap ? t->numel - k0 : cap;
                init_tensor(pl, &m->desc, seed, i, k0, n, m->staging);
                if (put_values(m, base, t->offset + k0, m->staging, n, err)) return -1;
            }
            continue;
        }
        if (fill == 0) start = t->offset;
        init_tensor(pl, &m->desc, seed, i, 0, t->numel, m->staging + fill);
        fill += t->numel;
    }
    return fill ? put_values(m, base, start, m->staging, fill, err) : 0;
}

/* which unit of NF4 tensor t element k is in: its index, and in *f, *at, *e0 its format, byte
 * offset and first element */
static int nf4_unit_of(const Model *m, const ParamTensor *t, size_t k, Nf4Format *f, size_t *at, size_t *e0) {
    int b = 0;
    for (; b + 1 < arch_nf4_units(t); b++) {
        arch_nf4_unit(t, &m->desc, b, f, at, e0);
        if (k < *e0 + (size_t)f->numel) break;
    }
    arch_nf4_unit(t, &m->desc, b, f, at, e0);
    return b;
}

/* the gathered unit is complete: the hook, then quantized and copied in */
static int nf4_flush(Model *m, const Nf4Format *f, size_t at, GtError *err) {
    m->nf4_fill = 0;
    if (m->base_hook && m->base_hook(m, m->nf4_tensor, m->nf4_block, m->nf4_values, err)) return -1;
    nf4_quantize(f, m->nf4_values, m->nf4_unit);
    return m->be->ops->to_device(m->be, (char *)m->base + at, m->nf4_unit, (size_t)nf4_bytes(f), err);
}

/* elements [k, k + cnt) of NF4 tensor i to (up) or from the host: gathered unit by unit on the way
 * in, dequantized on the host on the way out */
static int nf4_io(Model *m, bool up, int i, size_t k, float *h, size_t cnt, GtError *err) {
    const ParamTensor *t = &m->base_layout.tensors[i];
    for (size_t done = 0; done < cnt;) {
        Nf4Format f;
        size_t at, e0;
        const int b = nf4_unit_of(m, t, k + done, &f, &at, &e0);
        const size_t j = k + done - e0, n = (size_t)f.numel - j < cnt - done ? (size_t)f.numel - j : cnt - done;
        if (!up) {
            if (m->be->ops->to_host(m->be, m->nf4_unit, (const char *)m->base + at, (size_t)nf4_bytes(&f), err)) return -1;
            nf4_dequantize_f32(&f, m->nf4_unit, (int64_t)j, (int64_t)n, h + done);
        } else {
            const bool cont = m->nf4_fill > 0 && m->nf4_tensor == i && m->nf4_block == b && m->nf4_fill == j;
            if (!cont && j != 0)
                return gt_error(err, GT_EXIT_FAILURE, "model: internal error: %s unit %d: elements from %zu, expected "
                                "them in order from %zu", t->name, b, j, m->nf4_tensor == i && m->nf4_block == b ?
                                m->nf4_fill : 0);
            if (!cont && m->nf4_fill > 0)
                return gt_error(err, GT_EXIT_FAILURE, "model: internal error: %s unit %d left with %zu values of its "
                                "%lld", m->base_layout.tensors[m->nf4_tensor].name, m->nf4_block, m->nf4_fill,
                                (long long)f.numel);
            m->nf4_tensor = i;
            m->nf4_block = b;
            memcpy(m->nf4_values + j, h + done, n * sizeof(float));
            m->nf4_fill = j + n;
            if (m->nf4_fill == (size_t)f.numel && nf4_flush(m, &f, at, err)) return -1;
        }
        done += n;
    }
    return 0;
}

int model_upload_nf4_unit(Model *m, int tensor, int block, const void *unit, const Nf4Format *f, GtError *err) {
    const ParamTensor *t = &m->base_layout.tensors[tensor];
    Nf4Format mine;
    size_t at, e0;
    if (t->dtype != GT_NF4 || block < 0 || block >= arch_nf4_units(t) || m->nf4_fill > 0)
        return gt_error(err, GT_EXIT_FAILURE, "model: internal error: %s unit %d is not a 4-bit unit to copy into",
                        t->name, block);
    arch_nf4_unit(t, &m->desc, block, &mine, &at, &e0);
    if (f->numel != mine.numel)
        return gt_error(err, GT_EXIT_FAILURE, "model: internal error: %s unit %d: %lld elements, expected %lld", t->name,
                        block, (long long)f->numel, (long long)mine.numel);
    if (f->blocksize == mine.blocksize && f->nested == mine.nested && !m->base_hook)
        return m->be->ops->to_device(m->be, (char *)m->base + at, unit, (size_t)nf4_bytes(f), err);
    /* another format (or a hook that changes the values): its values, quantized as the base is */
    nf4_dequantize_f32(f, unit, 0, f->numel, m->nf4_values);
    m->nf4_tensor = tensor;
    m->nf4_block = block;
    if (nf4_flush(m, &mine, at, err)) return -1;
    return f->blocksize == mine.blocksize && f->nested == mine.nested ? 0 : 1;
}

/* the frozen base's elements [off, off + n) to (up) or from the host, tensor by tensor, each in its
 * storage dtype at its byte offset (the layout's tensors are in element-offset order) */
static int base_io(Model *m, bool up, size_t off, float *host, size_t n, GtError *err) {
    const ParamLayout *pl = &m->base_layout;
    if (off > pl->total || n > pl->total - off)
        return gt_error(err, GT_EXIT_FAILURE, "model: base elements %zu..+%zu outside its %zu", off, n, pl->total);
    int i = 0;
    for (size_t done = 0; done < n;) {
        const size_t at = off + done;
        while (i + 1 < pl->n_tensors && pl->tensors[i + 1].offset <= at) i++;
        const ParamTensor *t = &pl->tensors[i];
        const size_t k = at - t->offset, cnt = t->numel - k < n - done ? t->numel - k : n - done;
        float *h = host + done;
        if (t->dtype == GT_NF4) {
            if (nf4_io(m, up, i, k, h, cnt, err)) return -1;
            done += cnt;
            continue;
        }
        const size_t es = gt_dtype_size(t->dtype);
        void *dev = (char *)m->base + t->byte_offset + k * es;
        if (!up) {
            if (backend_to_host_f32(m->be, h, dev, t->dtype, cnt, err)) return -1;
        } else {
            if (t->dtype == GT_BF16) { /* narrowed in place, front to back (element j's 2 bytes land before j's 4) */
                uint16_t *h16 = (uint16_t *)h;
                for (size_t j = 0; j < cnt; j++) h16[j] = gt_f32_to_bf16(h[j]);
            }
            if (m->be->ops->to_device(m->be, dev, h, cnt * es, err)) return -1;
        }
        done += cnt;
    }
    return 0;
}

int model_upload_base(Model *m, size_t off, float *host, size_t n, GtError *err) {
    if (m->desc.adapter.r == 0)
        return m->be->ops->to_device(m->be, m->params + off, host, n * sizeof(float), err);
    return base_io(m, true, off, host, n, err);
}

int model_download_base(Model *m, size_t off, float *host, size_t n, GtError *err) {
    if (m->desc.adapter.r == 0) return m->be->ops->to_host(m->be, host, m->params + off, n * sizeof(float), err);
    return base_io(m, false, off, host, n, err);
}

/* the rotary table, positions in chunks through the staging buffer */
int model_upload_rope(Model *m, float *cos, float *sin, int positions, GtError *err) {
    const int half = m->desc.head_dim / 2;
    const size_t per_pos = 2 * (size_t)half;
    const int chunk = (int)(m->staging_bytes / sizeof(float) / per_pos);
    for (int p0 = 0; p0 < positions; p0 += chunk) {
        int np = positions - p0 < chunk ? positions - p0 : chunk;
        float *cs = m->staging, *sn = m->staging + (size_t)np * half;
        arch_rope_table(&m->desc, p0, np, cs, sn);
        const size_t off = (size_t)p0 * half, bytes = (size_t)np * half * sizeof(float);
        if (m->be->ops->to_device(m->be, cos + off, cs, bytes, err) || m->be->ops->to_device(m->be, sin + off, sn, bytes, err))
            return -1;
    }
    return 0;
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

size_t model_shard_size(size_t n_params, int shard_world) {
    return (n_params + (size_t)shard_world - 1) / (size_t)shard_world;
}

static int model_build(Model **out, const ModelDesc *desc, Backend *be, int B, int T, RecomputePolicy policy,
                       uint64_t seed, int shard_world, int shard_rank, bool train, int logits_rows, GtError *err);

int model_create(Model **out, const ModelDesc *desc, Backend *be, int B, int T, RecomputePolicy policy,
                 uint64_t seed, GtError *err) {
    return model_create_sharded(out, desc, be, B, T, policy, seed, 1, 0, 0, err);
}

int model_create_sharded(Model **out, const ModelDesc *desc, Backend *be, int B, int T, RecomputePolicy policy,
                         uint64_t seed, int shard_world, int shard_rank, int logits_rows, GtError *err) {
    return model_build(out, desc, be, B, T, policy, seed, shard_world, shard_rank, true,
                       logits_rows > 0 ? logits_rows : plan_logits_rows(desc, B, T, be->act_dtype), err);
}

int model_create_inference(Model **out, const ModelDesc *desc, Backend *be, int T, GtError *err) {
    return model_build(out, desc, be, 1, T, recompute_policy(false, 1, false, desc->n_layer), 0, 1, 0, false, 1, err);
}

int model_create_decode(Model **out, const ModelDesc *desc, Backend *be, int n_tokens, int logits_rows, GtError *err) {
    /* every layer "recomputed": one layer's activations serve all (a decode keeps nothing for a backward) */
    return model_build(out, desc, be, 1, n_tokens, recompute_policy(true, 1, false, desc->n_layer), 0, 1, 0, false,
                       logits_rows, err);
}

/* where instance k of a buffer goes: the layers it serves are walked in order (kept layers for
 * the kept activations and inputs, recomputed ones for the stash, offloaded ones for the host
 * copies), so the list says how many and this says which */
static int nth_layer(const RecomputePolicy *pol, int L, int k, int want) { /* want 0: kept, 1: recomputed */
    for (int l = 0; l < L; l++)
        if ((recompute_layer(pol, l) ? 1 : 0) == want && k-- == 0) return l;
    return -1;
}

static void **layer_act_slot(LayerActs *a, BufferId id) {
    switch (id) {
    case BUF_ACT_LN1: return (void **)&a->ln1;
    case BUF_ACT_LN1_MEAN: return (void **)&a->ln1_mean;
    case BUF_ACT_LN1_RSTD: return (void **)&a->ln1_rstd;
    case BUF_ACT_QKV: return (void **)&a->qkv;
    case BUF_ACT_ATTY: return (void **)&a->atty;
    case BUF_ACT_LSE: return (void **)&a->lse;
    case BUF_ACT_RES2: return (void **)&a->res2;
    case BUF_ACT_LN2: return (void **)&a->ln2;
    case BUF_ACT_LN2_MEAN: return (void **)&a->ln2_mean;
    case BUF_ACT_LN2_RSTD: return (void **)&a->ln2_rstd;
    case BUF_ACT_FCH: return (void **)&a->fch;
    case BUF_ACT_FCH_ACT: return (void **)&a->fch_act;
    case BUF_ACT_QKV_PRE: return (void **)&a->qkv_pre;
    case BUF_ACT_QK_RSTD: return (void **)&a->qk_rstd;
    default: return NULL;
    }
}

/* the pointer that instance k of buffer s goes to */
static void **buffer_slot(Model *m, LayerActs *scratch, const BufferSpec *s, int k) {
    const int L = m->desc.n_layer;
    const RecomputePolicy *pol = &m->policy;
    if (layer_act_slot(scratch, s->id)) {
        if (s->cat == MEM_RECOMPUTE_SCRATCH) return layer_act_slot(scratch, s->id);
        return layer_act_slot(&m->acts[nth_layer(pol, L, k, 0)], s->id);
    }
    switch (s->id) {
    case BUF_PARAMS: return (void **)&m->params;
    case BUF_GRADS: return (void **)&m->grads;
    case BUF_ADAM_M: return (void **)&m->adam_m;
    case BUF_ADAM_V: return (void **)&m->adam_v;
    case BUF_WEIGHTS: return (void **)&m->weights;
    case BUF_ROPE_COS: return (void **)&m->rope_cos;
    case BUF_ROPE_SIN: return (void **)&m->rope_sin;
    case BUF_LAYER_INPUT: return (void **)&m->input[nth_layer(pol, L, k, 0)];
    case BUF_STASH_INPUT: return (void **)&m->input[nth_layer(pol, L, k, 1)];
    case BUF_STAGE: return (void **)&m->stage[k];
    case BUF_HOST_STASH: return (void **)&m->host_stash[nth_layer(pol, L, k, 1)];
    case BUF_FINAL_RES: return (void **)&m->final_res;
    case BUF_LNF: return (void **)&m->lnf;
    case BUF_LNF_MEAN: return (void **)&m->lnf_mean;
    case BUF_LNF_RSTD: return (void **)&m->lnf_rstd;
    case BUF_TOKENS: return (void **)&m->tokens;
    case BUF_TARGETS: return (void **)&m->targets;
    case BUF_POSITIONS: return (void **)&m->positions;
    case BUF_LOSSES: return (void **)&m->losses;
    case BUF_LOGITS: return (void **)&m->logits;
    case BUF_DRES: return (void **)&m->dres;
    case BUF_DBTC: return (void **)&m->dbtc;
    case BUF_DQKV: return (void **)&m->dqkv;
    case BUF_DFCH_ATT_WS: return (void **)&m->dfch;
    case BUF_HOST_STAGING: return (void **)&m->staging;
    case BUF_FROZEN: return (void **)&m->base;
    case BUF_LORA_XD: return (void **)&m->ad.xd;
    case BUF_LORA_H: return (void **)&m->ad.h;
    case BUF_LORA_Y: return (void **)&m->ad.y;
    case BUF_LORA_DH: return (void **)&m->ad.dh;
    case BUF_LORA_DX: return (void **)&m->ad.dx;
    case BUF_DORA_Z: return (void **)&m->ad.dora_z;
    case BUF_DORA_NORM: return (void **)&m->ad.dora_norm;
    case BUF_WCONV: return (void **)&m->wconv;
    case BUF_NF4_HOST: return (void **)&m->nf4_values;
    default: return NULL;
    }
}

/* train: gradients, AdamW state, the backward workspace and the table's initial weights; without
 * it, the forward's buffers only and zero weights (the caller loads them) */
static int model_build(Model **out, const ModelDesc *desc, Backend *be, int B, int T, RecomputePolicy policy,
                       uint64_t seed, int shard_world, int shard_rank, bool train, int logits_rows, GtError *err) {
    Model *m = gt_xcalloc(1, sizeof *m);
    m->desc = *desc;
    m->be = be;
    m->B = B;
    m->T = T;
    m->policy = policy;
    m->act = be->act_dtype;
    m->logits_rows = logits_rows;
    m->window = desc->sliding_window > 0 && desc->sliding_window < T ? desc->sliding_window : 0;
    const bool lora = desc->adapter.r > 0;
    param_layout_init(&m->base_layout, desc);
    param_layout_storage(&m->base_layout, desc, m->act);
    if (lora)
        lora_layout_init(&m->layout, desc);
    else
        param_layout_init(&m->layout, desc);
    const int L = desc->n_layer;
    if (lora) {
        m->ad.n_sites = lora_sites(desc, m->ad.sites);
        m->ad.idx = gt_xcalloc((size_t)(L > 0 ? L : 1), sizeof *m->ad.idx);
        for (int l = 0; l < L; l++)
            for (int k = 0; k < MODEL_LORA_SLOTS; k++) m->ad.idx[l][k] = -1;
        for (int i = 0; i < m->layout.n_tensors; i++) {
            const int layer = m->layout.tensors[i].layer, mod = (int)lora_tensor_module(desc, i);
            if (m->ad.idx[layer][mod] < 0) m->ad.idx[layer][mod] = i; /* lora_A: the first */
        }
    }
    const size_t NP = m->layout.total;
    m->shard_world = shard_world;
    m->shard_rank = shard_rank;
    m->shard = model_shard_size(NP, shard_world);
    m->padded_total = m->shard * (size_t)shard_world;
    m->acts = gt_xcalloc((size_t)L, sizeof *m->acts);
    m->input = gt_xcalloc((size_t)L, sizeof *m->input);
    m->host_stash = gt_xcalloc((size_t)L, sizeof *m->host_stash);

    BufferShape shape = {B, T, policy, m->act, shard_world, train, m->logits_rows};
    BufferList list;
    if (buffers_list(&list, desc, &shape)) {
        gt_error(err, GT_EXIT_FAILURE, "model: the size of %s overflows 64 bits", list.overflow);
        goto fail;
    }
    LayerActs scratch = {0};
    for (int i = 0; i < list.n; i++) {
        const BufferSpec *s = &list.b[i];
        for (int k = 0; k < s->count; k++) {
            void **slot = buffer_slot(m, &scratch, s, k);
            if (!slot || !(*slot = model_alloc(m, s->cat, s->bytes, err))) goto fail;
        }
    }
    m->att_ws = (float *)m->dfch; /* BUF_DFCH_ATT_WS: one buffer, two lifetimes (buffers.c) */
    if (m->nf4_values) m->nf4_unit = (char *)m->nf4_values + buffers_nf4_values_bytes(&m->base_layout);
    m->staging_bytes = (size_t)buffers_staging_bytes(desc);
    m->stage_io_bytes = (size_t)buffers_stage_io_bytes(desc);
    if (m->act == GT_F32) m->weights = m->params;
    if (!lora) m->base = m->weights;
    for (int l = 0; l < L; l++) {
        if (!recompute_layer(&policy, l)) continue;
        m->acts[l] = scratch;
        if (policy.offload) {
            int n_stage = recompute_device_stash_buffers(&policy);
            m->input[l] = m->stage[recompute_slot(&policy, l) % (n_stage ? n_stage : 1)];
        }
    }
    m->losses_host = gt_xmalloc((size_t)B * T * sizeof(float));

    /* named parameter pointers (of the base: the architecture's tensors) */
    const ParamLayout *pl = &m->base_layout;
    m->wte = model_w(m, -1, ROLE_WTE);
    m->wpe = model_w(m, -1, ROLE_WPE);
    m->lnfw = model_w(m, -1, ROLE_NORMF_W);
    m->lnfb = model_w(m, -1, ROLE_NORMF_B);
    m->lm_head = pl->global[ROLE_LM_HEAD] >= 0 ? model_w(m, -1, ROLE_LM_HEAD) : m->wte;
    if (arch_spec(desc->arch)->pos == POS_ROPE && model_upload_rope(m, m->rope_cos, m->rope_sin, m->T, err)) goto fail;
    if (train) {
        m->dwte = model_g(m, -1, ROLE_WTE);
        m->dwpe = model_g(m, -1, ROLE_WPE);
        m->dlnfw = model_g(m, -1, ROLE_NORMF_W);
        m->dlnfb = model_g(m, -1, ROLE_NORMF_B);
        m->dlm_head = pl->global[ROLE_LM_HEAD] >= 0 ? model_g(m, -1, ROLE_LM_HEAD) : m->dwte;
        /* the padding, grads and AdamW state stay as allocated: zero */
        if (init_layout(m, &m->layout, false, seed, err)) goto fail;
        /* a frozen base the table initialises too, when nothing is loaded into it */
        if (lora && init_layout(m, &m->base_layout, true, seed, err)) goto fail;
    }
    model_params_changed(m);
    be->ops->synchronize(be);
    *out = m;
    return 0;
fail:
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
    param_layout_free(&m->base_layout);
    free(m->ad.idx);
    free(m->ad.peft);
    free(m->ad.pissa_init_dir);
    lora_qpissa_free(m);
    free(m);
}

void model_zero_grads(Model *m) {
    if (m->grads) m->be->ops->zero(m->be, m->grads, m->padded_total * sizeof(float));
}

/* the bf16 compute copy of the weights, from the fp32 master, if they changed since the last one */
void model_refresh_weights(Model *m) {
    if (!m->weights_stale) return;
    m->be->ops->to_act(m->be, m->weights, m->params, m->layout.total);
    m->weights_stale = false;
}

/* ---------------------------------------------------------------- steps */

/* the batch's rows as the ops take them (backend.h): each row starts at 0, then 0 or one more */
static int check_batch(const Model *m, const int *positions, int rows, GtError *err) {
    if (rows < 1 || rows > m->B) return gt_error(err, GT_EXIT_FAILURE, "model: %d rows, model sized for %d", rows, m->B);
    if (positions && !(m->be->ops->caps & GT_CAP_POSITIONS))
        return gt_error(err, GT_EXIT_BAD_INPUT, "model: the %s backend does not take per-token positions (packed rows)",
                        m->be->ops->name);
    for (int r = 0; positions && r < rows; r++)
        for (int t = 0; t < m->T; t++) {
            const int p = positions[(size_t)r * m->T + t], prev = t ? positions[(size_t)r * m->T + t - 1] : -1;
            if (p != 0 && p != prev + 1)
                return gt_error(err, GT_EXIT_FAILURE, "model: row %d position %d is %d, expected 0 or %d", r, t, p,
                                prev + 1);
        }
    return 0;
}

static int upload_batch(Model *m, const int *tokens, const int *targets, const int *positions, int rows,
                        GtError *err) {
    const size_t n = (size_t)rows * m->T * sizeof(int);
    if (check_batch(m, positions, rows, err)) return -1;
    if (m->be->ops->to_device(m->be, m->tokens, tokens, n, err)) return -1;
    m->pos_on = positions != NULL;
    if (positions && m->be->ops->to_device(m->be, m->positions, positions, n, err)) return -1;
    return targets ? m->be->ops->to_device(m->be, m->targets, targets, n, err) : 0;
}

int model_step(Model *m, const int *tokens, const int *targets, int rows, float dloss_scale, bool compute_grad,
               double *loss_sum, GtError *err) {
    return model_step_pos(m, tokens, targets, NULL, rows, dloss_scale, compute_grad, loss_sum, err);
}

/* forward, LM head + loss and (compute_grad) backward of the uploaded batch: issued, not waited for */
static void step_compute(Model *m, int rows, float dloss_scale, bool compute_grad) {
    Backend *be = m->be;
    const BackendOps *op = be->ops;
    const int C = m->desc.n_embd, V = m->desc.vocab_size, LV = plan_logits_stride(&m->desc), BT = rows * m->T;
    model_refresh_weights(m);
    m->kv_len = 0; /* the activations are this batch's now */
    m->training = compute_grad;
    model_forward_blocks(m, rows, 0, m->T, compute_grad && m->policy.offload);
    /* LM head + loss, chunked over rows; dlogits formed in place and consumed at once */
    for (int r0 = 0; r0 < BT; r0 += m->logits_rows) {
        int n = BT - r0 < m->logits_rows ? BT - r0 : m->logits_rows;
        const act_t *lnf_rows = model_at(m, m->lnf, (size_t)r0 * C);
        op->matmul_forward(be, m->logits, lnf_rows, m->lm_head, NULL, n, C, V, LV);
        op->crossentropy(be, m->losses + r0, m->logits, m->targets + r0, n, V, LV, dloss_scale, compute_grad);
        if (compute_grad)
            op->matmul_backward(be, model_at(m, m->dbtc, (size_t)r0 * C), m->dlm_head, NULL, m->logits, lnf_rows,
                                m->lm_head, n, C, V, LV);
    }
    if (compute_grad) model_backward_blocks(m, rows);
}

int model_step_pos(Model *m, const int *tokens, const int *targets, const int *positions, int rows,
                   float dloss_scale, bool compute_grad, double *loss_sum, GtError *err) {
    Backend *be = m->be;
    const int BT = rows * m->T;
    if (compute_grad && !m->grads) return gt_error(err, GT_EXIT_FAILURE, "model: created for inference, no gradients");
    if (upload_batch(m, tokens, targets, positions, rows, err)) return -1;
    step_compute(m, rows, dloss_scale, compute_grad);
    if (be->ops->to_host(be, m->losses_host, m->losses, (size_t)BT * sizeof(float), err)) return -1;
    *loss_sum = model_loss_sum(m->losses_host, BT);
    return 0;
}

double model_loss_sum(const float *losses, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += losses[i];
    return s;
}

/* The copies go on the backend's copy stream in offload slot 0: ordered after the compute issued
 * so far (the previous micro-batch's reads of tokens, targets and positions, and its losses), and
 * the compute waits for the upload before it starts. A recompute offload sharing the slot only
 * makes a wait later than it needs to be (the copy stream runs in order), never earlier. */
int model_step_async(Model *m, const int *tokens, const int *targets, const int *positions, int rows,
                     float dloss_scale, float *losses_host, GtError *err) {
    Backend *be = m->be;
    const BackendOps *op = be->ops;
    const size_t n = (size_t)rows * m->T * sizeof(int);
    if (!m->grads) return gt_error(err, GT_EXIT_FAILURE, "model: created for inference, no gradients");
    if (check_batch(m, positions, rows, err)) return -1;
    op->offload_to_device(be, m->tokens, tokens, n, 0);
    m->pos_on = positions != NULL;
    if (positions) op->offload_to_device(be, m->positions, positions, n, 0);
    op->offload_to_device(be, m->targets, targets, n, 0);
    op->offload_wait(be, 0);
    step_compute(m, rows, dloss_scale, true);
    op->offload_to_host(be, losses_host, m->losses, (size_t)rows * m->T * sizeof(float), 0);
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
    m->pos_on = false;
    model_refresh_weights(m);
    m->training = false;
    model_forward_blocks(m, 1, pos0, n, false);
    m->kv_len = model_keeps_kv(m) ? pos0 + n : 0;
    m->be->ops->matmul_forward(m->be, m->logits, model_at(m, m->lnf, (size_t)(pos0 + n - 1) * C), m->lm_head, NULL, 1, C,
                               V, plan_logits_stride(&m->desc));
    return backend_act_to_host_f32(m->be, logits_host, m->logits, (size_t)V, err);
}
