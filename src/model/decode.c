/* decode.c - see decode.h: the KV cache, a flat batch of tokens through the model
 * (model_forward_blocks with the cache's attention: decode_attention), its logits, and the model a
 * generation run creates. Each buffer of the cache goes through the tracking allocator under
 * MEM_KV_CACHE, in the order kv_cache_bytes counts them. */
#include "decode.h"

#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "model_internal.h"

struct KvCache {
    Backend *be;
    int slots, ctx, L, window;
    size_t layer_bytes; /* one layer's K (or V): slots x ctx x NKV x hd act values */
    act_t **k, **v;     /* per layer */
    float *rope_cos, *rope_sin; /* [ctx, hd/2] (rotary families; NULL otherwise) */
    size_t rope_bytes;
};

static uint64_t mul_sat(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
static uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

/* one layer's K (or V), and the rotary table's two halves */
static uint64_t layer_bytes(const ModelDesc *d, int slots, int ctx, GtDtype act) {
    return mul_sat(mul_sat(mul_sat((uint64_t)slots, (uint64_t)ctx), (uint64_t)d->n_kv_head * (uint64_t)d->head_dim),
                   gt_dtype_size(act));
}
static uint64_t rope_bytes(const ModelDesc *d, int ctx) {
    return arch_spec(d->arch)->pos == POS_ROPE ? mul_sat((uint64_t)ctx, (uint64_t)(d->head_dim / 2) * sizeof(float)) : 0;
}

uint64_t kv_cache_bytes(const ModelDesc *d, int slots, int ctx, GtDtype act) {
    const uint64_t kv = mul_sat(mul_sat(layer_bytes(d, slots, ctx, act), 2), (uint64_t)d->n_layer);
    return add_sat(kv, mul_sat(rope_bytes(d, ctx), 2));
}

int kv_cache_slots(const KvCache *kv) { return kv->slots; }
int kv_cache_ctx(const KvCache *kv) { return kv->ctx; }

void kv_cache_free(KvCache *kv) {
    if (!kv) return;
    Backend *be = kv->be;
    be->ops->synchronize(be);
    for (int l = 0; l < kv->L; l++) {
        if (kv->k && kv->k[l]) backend_free(be, MEM_KV_CACHE, kv->k[l], kv->layer_bytes);
        if (kv->v && kv->v[l]) backend_free(be, MEM_KV_CACHE, kv->v[l], kv->layer_bytes);
    }
    if (kv->rope_cos) backend_free(be, MEM_KV_CACHE, kv->rope_cos, kv->rope_bytes);
    if (kv->rope_sin) backend_free(be, MEM_KV_CACHE, kv->rope_sin, kv->rope_bytes);
    free(kv->k);
    free(kv->v);
    free(kv);
}

int kv_cache_create(KvCache **out, Model *m, int slots, int ctx, GtError *err) {
    *out = NULL;
    const ModelDesc *d = &m->desc;
    if (slots < 1 || ctx < 1 || ctx > d->n_positions)
        return gt_error(err, GT_EXIT_BAD_INPUT, "kv cache: %d slots of %d positions: expected at least 1 slot and 1 to %d "
                        "positions (the model's context)", slots, ctx, d->n_positions);
    if (!m->be->ops->kv_store || !m->be->ops->attention_cached)
        return gt_error(err, GT_EXIT_BAD_INPUT, "the %s backend cannot decode with a KV cache", m->be->ops->name);
    if (kv_cache_bytes(d, slots, ctx, m->act) == UINT64_MAX)
        return gt_error(err, GT_EXIT_BAD_INPUT, "kv cache: %d slots of %d positions overflow 64 bits", slots, ctx);
    KvCache *kv = gt_xcalloc(1, sizeof *kv);
    kv->be = m->be;
    kv->slots = slots;
    kv->ctx = ctx;
    kv->L = d->n_layer;
    kv->window = d->sliding_window > 0 && d->sliding_window < ctx ? d->sliding_window : 0;
    kv->layer_bytes = (size_t)layer_bytes(d, slots, ctx, m->act);
    kv->rope_bytes = (size_t)rope_bytes(d, ctx);
    kv->k = gt_xcalloc((size_t)kv->L, sizeof *kv->k);
    kv->v = gt_xcalloc((size_t)kv->L, sizeof *kv->v);
    for (int l = 0; l < kv->L; l++)
        if (!(kv->k[l] = backend_alloc(m->be, MEM_KV_CACHE, kv->layer_bytes, err)) ||
            !(kv->v[l] = backend_alloc(m->be, MEM_KV_CACHE, kv->layer_bytes, err)))
            goto fail;
    if (kv->rope_bytes) {
        if (!(kv->rope_cos = backend_alloc(m->be, MEM_KV_CACHE, kv->rope_bytes, err)) ||
            !(kv->rope_sin = backend_alloc(m->be, MEM_KV_CACHE, kv->rope_bytes, err)) ||
            model_upload_rope(m, kv->rope_cos, kv->rope_sin, ctx, err))
            goto fail;
    }
    *out = kv;
    return 0;
fail:
    kv_cache_free(kv);
    return -1;
}

/* model_blocks.c's attention while model_decode runs: store this call's keys and values, then
 * attend over each token's row (n tokens, B = 1; slots in m->targets, positions in m->positions) */
void decode_attention(Model *m, int l, act_t *atty, const act_t *qkv, int n) {
    const KvCache *kv = m->kv;
    const BackendOps *op = m->be->ops;
    const ModelDesc *d = &m->desc;
    op->kv_store(m->be, kv->k[l], kv->v[l], qkv, m->targets, m->positions, n, d->n_head, d->n_kv_head, d->head_dim,
                 kv->ctx);
    op->attention_cached(m->be, atty, qkv, kv->k[l], kv->v[l], m->targets, m->positions, n, d->n_head, d->n_kv_head,
                         d->head_dim, kv->ctx, kv->window);
}

void decode_rope_table(const Model *m, const float **cos, const float **sin) {
    *cos = m->kv ? m->kv->rope_cos : m->rope_cos;
    *sin = m->kv ? m->kv->rope_sin : m->rope_sin;
}

int model_decode(Model *m, KvCache *kv, const DecodeToken *tok, int n, float *logits_host, GtError *err) {
    Backend *be = m->be;
    const BackendOps *op = be->ops;
    const int C = m->desc.n_embd, V = m->desc.vocab_size, LV = plan_logits_stride(&m->desc);
    if (n < 1 || n > model_decode_max_tokens(m))
        return gt_error(err, GT_EXIT_FAILURE, "decode: %d tokens, the model takes 1 to %d at a time", n,
                        model_decode_max_tokens(m));
    /* the call's tokens, slots and positions, through the model's token, target and position
     * buffers (a decode has no targets: its slots ride there) */
    int *host = gt_xmalloc((size_t)3 * n * sizeof *host);
    for (int i = 0; i < n; i++) {
        const DecodeToken *t = &tok[i];
        if (t->token < 0 || t->token >= V || t->slot < 0 || t->slot >= kv->slots || t->pos < 0 || t->pos >= kv->ctx) {
            free(host);
            return gt_error(err, GT_EXIT_FAILURE, "decode: token %d (id %d, slot %d, position %d) outside the model's %d "
                            "ids or the cache's %d slots x %d positions", i, t->token, t->slot, t->pos, V, kv->slots,
                            kv->ctx);
        }
        host[i] = t->token;
        host[n + i] = t->slot;
        host[2 * n + i] = t->pos;
    }
    const size_t bytes = (size_t)n * sizeof *host;
    int rc = op->to_device(be, m->tokens, host, bytes, err) || op->to_device(be, m->targets, host + n, bytes, err) ||
             op->to_device(be, m->positions, host + 2 * n, bytes, err);
    free(host);
    if (rc) return -1;
    model_refresh_weights(m);
    m->training = false;
    m->kv_len = 0; /* the activations are this call's */
    m->pos_on = true;
    m->kv = kv;
    model_forward_blocks(m, 1, 0, n, false);
    m->kv = NULL;
    m->pos_on = false;
    /* the LM head over each run of consecutive tokens that want logits, logits_rows at a time */
    int done = 0;
    for (int i = 0; i < n;) {
        if (!tok[i].logits) {
            i++;
            continue;
        }
        int j = i;
        while (j < n && tok[j].logits && j - i < m->logits_rows) j++;
        op->matmul_forward(be, m->logits, model_at(m, m->lnf, (size_t)i * C), m->lm_head, NULL, j - i, C, V, LV);
        for (int r = 0; r < j - i; r++, done++)
            if (backend_act_to_host_f32(be, logits_host + (size_t)done * V, model_at(m, m->logits, (size_t)r * LV),
                                        (size_t)V, err))
                return -1;
        i = j;
    }
    return 0;
}
