/* buffers.c - the list of a model's buffers (see buffers.h). Every size is a checked product. */
#include "buffers.h"

#include "adapter.h"
#include "arch.h"
#include "lora.h"
#include "plan.h"

typedef struct {
    BufferList *l;
    const char *cur;
} Builder;

static uint64_t mul(Builder *k, uint64_t a, uint64_t b) {
    uint64_t r;
    if (!__builtin_mul_overflow(a, b, &r)) return r;
    if (!k->l->overflow) k->l->overflow = k->cur;
    return UINT64_MAX;
}

static void add(Builder *k, BufferId id, MemCategory cat, uint64_t elems, uint64_t elem_bytes, int count) {
    if (count <= 0) return;
    BufferSpec *s = &k->l->b[k->l->n++];
    s->id = id;
    s->cat = cat;
    s->bytes = mul(k, elems, elem_bytes);
    s->count = count;
}

uint64_t buffers_nf4_values_bytes(const ParamLayout *bl) { return (bl->nf4_unit_max * sizeof(float) + 63) / 64 * 64; }
uint64_t buffers_nf4_host_bytes(const ParamLayout *bl) {
    return bl->nf4_unit_max ? buffers_nf4_values_bytes(bl) + bl->nf4_unit_bytes_max : 0;
}

uint64_t buffers_stage_io_bytes(const ModelDesc *d) {
    const ArchSpec *s = arch_spec(d->arch);
    uint64_t need = 2 * (uint64_t)(d->head_dim / 2 + 1) * sizeof(float); /* one position's rope row */
    for (int i = 0; i < s->n_tensors && need < BUFFERS_STAGE_IO_MAX; i++) {
        const ArchTensor *t = &s->tensors[i];
        if (!arch_tensor_present(d, t)) continue;
        uint64_t b = (uint64_t)arch_dim(d, t->dim0) * (uint64_t)arch_dim(d, t->dim1) * sizeof(float);
        if (b > need) need = b;
    }
    need = need < BUFFERS_STAGE_IO_MAX ? need : BUFFERS_STAGE_IO_MAX;
    return (need + 63) / 64 * 64;
}

uint64_t buffers_staging_bytes(const ModelDesc *d) {
    const ArchSpec *s = arch_spec(d->arch);
    uint64_t scratch = 0;
    for (int i = 0; i < s->n_tensors; i++) {
        const ArchTensor *t = &s->tensors[i];
        if (!t->transposed || !arch_tensor_present(d, t)) continue;
        uint64_t b = (uint64_t)arch_dim(d, t->dim0) * (uint64_t)arch_dim(d, t->dim1) * sizeof(float);
        if (b > scratch) scratch = b;
    }
    return buffers_stage_io_bytes(d) + scratch;
}

/* the activations one layer keeps for backward (its input excluded), `count` times in cat */
static void layer_acts(Builder *k, const ModelDesc *d, const BufferShape *s, MemCategory cat, int count) {
    const uint64_t BT = mul(k, (uint64_t)s->B, (uint64_t)s->T), a = gt_dtype_size(s->act), f = sizeof(float);
    const uint64_t C = (uint64_t)d->n_embd, I = (uint64_t)d->n_inner;
    const bool mean = arch_spec(d->arch)->norm == NORM_LAYERNORM, swiglu = arch_spec(d->arch)->mlp == MLP_SWIGLU;
    add(k, BUF_ACT_LN1, cat, mul(k, BT, C), a, count);
    if (mean) add(k, BUF_ACT_LN1_MEAN, cat, BT, f, count);
    add(k, BUF_ACT_LN1_RSTD, cat, BT, f, count);
    add(k, BUF_ACT_QKV, cat, mul(k, BT, (uint64_t)model_desc_qkv_dim(d)), a, count);
    add(k, BUF_ACT_ATTY, cat, mul(k, BT, (uint64_t)model_desc_attn_dim(d)), a, count);
    add(k, BUF_ACT_LSE, cat, mul(k, BT, (uint64_t)d->n_head), f, count);
    add(k, BUF_ACT_RES2, cat, mul(k, BT, C), a, count);
    add(k, BUF_ACT_LN2, cat, mul(k, BT, C), a, count);
    if (mean) add(k, BUF_ACT_LN2_MEAN, cat, BT, f, count);
    add(k, BUF_ACT_LN2_RSTD, cat, BT, f, count);
    add(k, BUF_ACT_FCH, cat, mul(k, BT, swiglu ? 2 * I : I), a, count);
    add(k, BUF_ACT_FCH_ACT, cat, mul(k, BT, I), a, count);
    if (arch_spec(d->arch)->qk_norm) {
        add(k, BUF_ACT_QKV_PRE, cat, mul(k, BT, (uint64_t)model_desc_qkv_dim(d)), a, count);
        add(k, BUF_ACT_QK_RSTD, cat, mul(k, BT, (uint64_t)(d->n_head + d->n_kv_head)), f, count);
    }
}

int buffers_list(BufferList *out, const ModelDesc *d, const BufferShape *s) {
    out->n = 0;
    out->overflow = NULL;
    Builder k = {out, "params"};
    const uint64_t f = sizeof(float), a = gt_dtype_size(s->act), C = (uint64_t)d->n_embd;
    /* what trains: every weight, or under LoRA the adapters (the base then frozen, once, each tensor in
     * its storage dtype: the layout's bytes) */
    const bool lora = d->adapter.r > 0;
    const uint64_t NP = lora ? lora_num_params(d) : arch_num_params(d);
    const uint64_t world = (uint64_t)(s->shard_world > 0 ? s->shard_world : 1);
    const uint64_t shard = (NP + world - 1) / world;
    const ArchSpec *spec = arch_spec(d->arch);
    const RecomputePolicy *pol = &s->policy;
    const int L = d->n_layer, K = recompute_count(pol);

    add(&k, BUF_PARAMS, MEM_PARAMS, mul(&k, shard, world), f, 1);
    if (s->act != GT_F32) add(&k, BUF_WEIGHTS, MEM_PARAMS, NP, a, 1);
    k.cur = "frozen";
    size_t convert_max = 0;
    uint64_t nf4_host = 0;
    if (lora) {
        ParamLayout bl;
        param_layout_init(&bl, d);
        param_layout_storage(&bl, d, s->act);
        add(&k, BUF_FROZEN, MEM_FROZEN, bl.bytes, 1, 1);
        convert_max = bl.convert_max;
        nf4_host = buffers_nf4_host_bytes(&bl);
        param_layout_free(&bl);
    }
    k.cur = "grads";
    if (s->train) add(&k, BUF_GRADS, MEM_GRADS, mul(&k, shard, world), f, 1);
    k.cur = "optimizer";
    if (s->train) {
        add(&k, BUF_ADAM_M, MEM_OPTIMIZER, shard, f, 1);
        add(&k, BUF_ADAM_V, MEM_OPTIMIZER, shard, f, 1);
    }
    k.cur = "activations";
    const uint64_t BT = mul(&k, (uint64_t)s->B, (uint64_t)s->T), BTC = mul(&k, BT, C);
    if (spec->pos == POS_ROPE) {
        const uint64_t rope = mul(&k, (uint64_t)s->T, (uint64_t)(d->head_dim / 2));
        add(&k, BUF_ROPE_COS, MEM_ACTIVATIONS, rope, f, 1);
        add(&k, BUF_ROPE_SIN, MEM_ACTIVATIONS, rope, f, 1);
    }
    add(&k, BUF_LAYER_INPUT, MEM_ACTIVATIONS, BTC, a, L - K);
    layer_acts(&k, d, s, MEM_ACTIVATIONS, L - K);
    add(&k, BUF_FINAL_RES, MEM_ACTIVATIONS, BTC, a, 1);
    add(&k, BUF_LNF, MEM_ACTIVATIONS, BTC, a, 1);
    if (spec->norm == NORM_LAYERNORM) add(&k, BUF_LNF_MEAN, MEM_ACTIVATIONS, BT, f, 1);
    add(&k, BUF_LNF_RSTD, MEM_ACTIVATIONS, BT, f, 1);
    add(&k, BUF_TOKENS, MEM_ACTIVATIONS, BT, sizeof(int), 1);
    add(&k, BUF_TARGETS, MEM_ACTIVATIONS, BT, sizeof(int), 1);
    add(&k, BUF_POSITIONS, MEM_ACTIVATIONS, BT, sizeof(int), 1);
    add(&k, BUF_LOSSES, MEM_ACTIVATIONS, BT, f, 1);
    k.cur = "recompute_scratch";
    if (K > 0) layer_acts(&k, d, s, MEM_RECOMPUTE_SCRATCH, 1);
    k.cur = "recompute_stash";
    if (pol->offload)
        add(&k, BUF_STAGE, MEM_RECOMPUTE_STASH, BTC, a, recompute_device_stash_buffers(pol));
    else
        add(&k, BUF_STASH_INPUT, MEM_RECOMPUTE_STASH, BTC, a, K);
    k.cur = "host_offload";
    add(&k, BUF_HOST_STASH, MEM_HOST_OFFLOAD, BTC, a, recompute_host_stash_buffers(pol));
    k.cur = "logits";
    add(&k, BUF_LOGITS, MEM_LOGITS, mul(&k, (uint64_t)s->logits_rows, (uint64_t)plan_logits_stride(d)), a, 1);
    k.cur = "workspace";
    if (s->train) {
        const uint64_t Q = (uint64_t)model_desc_attn_dim(d), I = (uint64_t)d->n_inner;
        add(&k, BUF_DRES, MEM_WORKSPACE, BTC, a, 1);
        add(&k, BUF_DBTC, MEM_WORKSPACE, mul(&k, BT, Q > C ? Q : C), a, 1);
        add(&k, BUF_DQKV, MEM_WORKSPACE, mul(&k, BT, (uint64_t)model_desc_qkv_dim(d)), a, 1);
        /* the MLP's gradient and the attention backward's workspace (its row sums and the
         * tensor-core backward's dQ slices, backend.h) share one buffer: a layer's backward is done
         * with the first before it starts the second, and the next layer's MLP backward starts
         * after the attention backward returns (model_blocks.c's layer_backward) */
        const uint64_t dfch = mul(&k, mul(&k, BT, spec->mlp == MLP_SWIGLU ? 3 * I : I), a);
        const uint64_t att_ws =
            mul(&k, backend_attention_workspace_floats(s->act, s->B, s->T, d->n_head, d->n_kv_head, d->head_dim), f);
        add(&k, BUF_DFCH_ATT_WS, MEM_WORKSPACE, dfch > att_ws ? dfch : att_ws, 1, 1);
    }
    if (lora) { /* one adapter at a time: the widest input and output block */
        LoraSite site[PEFT_MODULE_COUNT];
        const int n = lora_sites(d, site);
        uint64_t in = 0, rows = 0;
        for (int i = 0; i < n; i++) {
            if ((uint64_t)site[i].in > in) in = (uint64_t)site[i].in;
            if ((uint64_t)site[i].rows > rows) rows = (uint64_t)site[i].rows;
        }
        if (s->train && d->adapter.dropout > 0) add(&k, BUF_LORA_XD, MEM_WORKSPACE, mul(&k, BT, in), a, 1);
        /* x A^T and its gradient: [BT, r] a site, or under LoRA the sites on one weight at once
         * (their concatenated lora_A: lora_group_max of them), rows padded to 16 bytes (lora.h) */
        const uint64_t hr = (uint64_t)lora_h_stride(d);
        add(&k, BUF_LORA_H, MEM_WORKSPACE, mul(&k, BT, hr), a, 1);
        /* [BT, rows] only for DoRA (LoRA's B GEMM accumulates into the base's output itself), the
         * input gradient's own buffer only where dropout or DoRA comes between it and dinp */
        add(&k, BUF_LORA_Y, MEM_WORKSPACE, mul(&k, BT, rows), a, d->adapter.dora);
        if (s->train) {
            add(&k, BUF_LORA_DH, MEM_WORKSPACE, mul(&k, BT, hr), a, 1);
            add(&k, BUF_LORA_DX, MEM_WORKSPACE, mul(&k, BT, in), a, d->adapter.dora || d->adapter.dropout > 0);
        }
        const AdapterKind *kind = adapter_kind(d); /* the kind's own, one site at a time */
        for (int w = 0; w < kind->n_work; w++)
            add(&k, kind->work[w].buf, MEM_WORKSPACE, kind->work[w].per_token ? mul(&k, BT, rows) : rows,
                kind->work[w].fp32 ? f : a, 1);
    }
    k.cur = "workspace";
    add(&k, BUF_WCONV, MEM_WORKSPACE, convert_max, a, convert_max > 0);
    k.cur = "host_staging";
    add(&k, BUF_HOST_STAGING, MEM_HOST_STAGING, buffers_staging_bytes(d), 1, 1);
    add(&k, BUF_NF4_HOST, MEM_HOST_STAGING, nf4_host, 1, nf4_host > 0);
    return out->overflow ? -1 : 0;
}
