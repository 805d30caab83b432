/* plan.c - the memory plan (see plan.h). Formulas mirror model_create's allocations one by one. */
#include "plan.h"

#include <string.h>

#define LOGITS_CHUNK_BYTES (64ull << 20)

int plan_logits_stride(const ModelDesc *d) { return (d->vocab_size + 63) / 64 * 64; }

int plan_logits_rows(const ModelDesc *d, int B, int T, GtDtype act) {
    uint64_t rows = LOGITS_CHUNK_BYTES / ((uint64_t)plan_logits_stride(d) * gt_dtype_size(act));
    if (rows < 1) rows = 1;
    uint64_t bt = (uint64_t)B * (uint64_t)T;
    return (int)(rows < bt ? rows : bt);
}

GtDtype plan_act_dtype(Precision prec) { return prec == PREC_BF16 ? GT_BF16 : GT_F32; }

void plan_memory(MemPlan *p, const ModelDesc *d, int B, int A, int world, int T, RecomputePolicy pol, bool zero1,
                 GtDtype act) {
    memset(p, 0, sizeof *p);
    p->B = B;
    p->A = A;
    p->world = world;
    p->T = T;
    p->effective_batch = (long)B * world * A;
    p->tokens_per_step = p->effective_batch * T;
    p->policy = pol;
    p->act = act;
    p->n_params = model_desc_num_params(d);
    p->logits_rows = plan_logits_rows(d, B, T, act);

    /* f: bytes of an fp32 element; a: of an activation (act dtype) */
    const uint64_t f = sizeof(float), a = gt_dtype_size(act), L = (uint64_t)d->n_layer, C = (uint64_t)d->n_embd;
    const uint64_t I = (uint64_t)d->n_inner, NH = (uint64_t)d->n_head;
    const uint64_t BT = (uint64_t)B * T, BTC = BT * C;
    const uint64_t K = (uint64_t)recompute_count(&pol);
    /* what one layer keeps for backward, its input excluded: ln1, qkv, atty, res2, ln2, fch,
     * fch_gelu (act dtype); ln1 and ln2 mean/rstd, lse (fp32) */
    const uint64_t layer_acts = BT * (7 * C + 2 * I) * a + (4 * BT + (uint64_t)B * NH * T) * f;

    /* ZeRO-1: AdamW state sharded over the ranks; params and grads padded to a whole number of shards */
    const uint64_t shards = zero1 ? (uint64_t)world : 1, shard = (p->n_params + shards - 1) / shards;
    p->zero1 = zero1;
    /* fp32 master weights, and under bf16 their bf16 compute copy */
    p->bytes[MEM_PARAMS] = shard * shards * f + (act == GT_F32 ? 0 : p->n_params * a);
    p->bytes[MEM_GRADS] = shard * shards * f;
    p->bytes[MEM_OPTIMIZER] = 2 * shard * f;
    p->bytes[MEM_ACTIVATIONS] = (L - K) * (BTC * a + layer_acts) /* kept layers: input + internals */
                                + 2 * BTC * a + 2 * BT * f      /* final residual, ln_f; its stats */
                                + 3 * BT * f;                   /* tokens, targets, losses */
    p->bytes[MEM_RECOMPUTE_SCRATCH] = K > 0 ? layer_acts : 0;
    p->bytes[MEM_RECOMPUTE_STASH] = (uint64_t)recompute_device_stash_buffers(&pol) * BTC * a;
    p->bytes[MEM_HOST_OFFLOAD] = (uint64_t)recompute_host_stash_buffers(&pol) * BTC * a;
    p->bytes[MEM_LOGITS] = (uint64_t)p->logits_rows * (uint64_t)plan_logits_stride(d) * a;
    /* dres, dbtc, dqkv, dfch (act dtype); attention row sums (fp32) */
    p->bytes[MEM_WORKSPACE] = (5 * BTC + BT * I) * a + (uint64_t)B * NH * T * f;
    for (int c = 0; c < MEM_COUNT; c++) {
        if (mem_category_on_device((MemCategory)c))
            p->device_total += p->bytes[c];
        else
            p->host_total += p->bytes[c];
    }
}

void plan_print(const MemPlan *p, const MemTracker *measured, FILE *out) {
    char a[32], b[32], desc[96];
    fprintf(out, "memory plan (per rank): micro-batch %d x seq_len %d, %s activations, recompute %s%s\n", p->B,
            p->T, gt_dtype_name(p->act), recompute_describe(&p->policy, desc, sizeof desc),
            p->zero1 ? ", ZeRO-1 optimizer shards" : "");
    if (p->zero1)
        fprintf(out, "  ZeRO-1 saves %s of optimizer state per rank (%d shards)\n",
                gt_format_bytes(a, sizeof a, 2 * p->n_params * sizeof(float) - p->bytes[MEM_OPTIMIZER]), p->world);
    if (measured)
        fprintf(out, "  %-18s %14s %14s\n", "category", "planned", "measured");
    else
        fprintf(out, "  %-18s %14s\n", "category", "planned");
    for (int c = 0; c < MEM_COUNT; c++) {
        if (measured)
            fprintf(out, "  %-18s %14s %14s%s\n", mem_category_name((MemCategory)c),
                    gt_format_bytes(a, sizeof a, p->bytes[c]), gt_format_bytes(b, sizeof b, measured->peak[c]),
                    p->bytes[c] == measured->peak[c] ? "" : "  (differs)");
        else
            fprintf(out, "  %-18s %14s\n", mem_category_name((MemCategory)c), gt_format_bytes(a, sizeof a, p->bytes[c]));
    }
    if (measured)
        fprintf(out, "  %-18s %14s %14s\n", "device total", gt_format_bytes(a, sizeof a, p->device_total),
                gt_format_bytes(b, sizeof b, measured->device_peak));
    else
        fprintf(out, "  %-18s %14s\n", "device total", gt_format_bytes(a, sizeof a, p->device_total));
    fprintf(out, "  peak: every buffer is allocated once before step 1 and reused, so the peak is the\n"
                 "  total above, reached at the start and held through every forward, backward and\n"
                 "  optimizer step (no allocation inside a step)\n");
}

/* Layouts of the same effective batch, tried by auto-fit and by the advice of a refusal: every
 * micro-batch B dividing the per-rank batch, under every recompute setting, fewest recomputed
 * layers first. */
typedef struct {
    int B, A, every_n;
    bool offload;
    int recomputed;
    uint64_t bytes;
} FitCandidate;

static int candidate_better(const FitCandidate *a, const FitCandidate *b) {
    /* fewer recomputed layers, then no offload, then the larger micro-batch */
    if (a->recomputed != b->recomputed) return a->recomputed < b->recomputed;
    if (a->offload != b->offload) return !a->offload;
    return a->B > b->B;
}

/* Best layout of per_rank rows (B * A) that fits limit; min_B: smallest micro-batch considered.
 * Returns 0 and fills best, or -1 when nothing fits. */
static int best_fit(const ModelDesc *d, long per_rank, int world, int T, uint64_t limit, int min_B,
                    bool allow_recompute, bool zero1, GtDtype act, FitCandidate *best) {
    bool found = false;
    for (long B = per_rank; B >= 1; B--) {
        if (per_rank % B || B < min_B || B > (1 << 20)) continue;
        for (int every = 0; every <= d->n_layer; every++) {
            if (every > 0 && !allow_recompute) break;
            for (int off = 0; off <= (every > 0); off++) {
                RecomputePolicy pol = recompute_policy(every > 0, every ? every : 1, off, d->n_layer);
                MemPlan p;
                plan_memory(&p, d, (int)B, (int)(per_rank / B), world, T, pol, zero1, act);
                if (limit && p.device_total > limit) continue;
                FitCandidate c = {(int)B, (int)(per_rank / B), every, off, recompute_count(&pol), p.device_total};
                if (!found || candidate_better(&c, best)) *best = c, found = true;
            }
        }
    }
    return found ? 0 : -1;
}

static void describe_candidate(char *buf, size_t cap, const FitCandidate *c) {
    if (c->every_n == 0)
        snprintf(buf, cap, "per_device_train_batch_size %d x gradient_accumulation_steps %d, no recompute", c->B, c->A);
    else
        snprintf(buf, cap, "per_device_train_batch_size %d x gradient_accumulation_steps %d, gradient_checkpointing "
                 "every_n_layers %d%s", c->B, c->A, c->every_n, c->offload ? " with offload" : "");
}

int plan_resolve(MemPlan *p, const ModelDesc *d, const RunConfig *cfg, int world, uint64_t memory_limit,
                 GtError *err) {
    char a[32], b[32], why[256];
    const int T = cfg->data.seq_len;
    const bool zero1 = cfg->zero_stage == 1 && world > 1;
    const GtDtype act = plan_act_dtype(cfg->precision);
    if (cfg->per_device_train_batch_size == 0) { /* auto-fit */
        long E = cfg->train_batch_size;
        if (E <= 0 || E % world)
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: train_batch_size: expected a multiple of the world size %d with "
                            "per_device_train_batch_size auto, found %ld",
                            cfg->config_path, world, E);
        FitCandidate c;
        long per_rank = E / world;
        int min_B = per_rank >= 4 ? 4 : 1; /* 4 x 16 beats 1 x 64: keep micro-batches of 4+ when possible */
        if (best_fit(d, per_rank, world, T, memory_limit, min_B, true, zero1, act, &c) &&
            best_fit(d, per_rank, world, T, memory_limit, 1, true, zero1, act, &c)) {
            plan_memory(p, d, 1, (int)per_rank, world, T, recompute_policy(true, 1, true, d->n_layer), zero1, act);
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: train_batch_size %ld cannot fit memory_limit %s: even micro-batch 1 with every layer "
                            "recomputed and offloaded needs %s",
                            cfg->config_path, E, gt_format_bytes(a, sizeof a, memory_limit),
                            gt_format_bytes(b, sizeof b, p->device_total));
        }
        RecomputePolicy pol = recompute_policy(c.every_n > 0, c.every_n ? c.every_n : 1, c.offload, d->n_layer);
        plan_memory(p, d, c.B, c.A, world, T, pol, zero1, act);
        describe_candidate(why, sizeof why, &c);
        gt_log("auto-fit: %s -> %s of %s (fewest recomputed layers, then the largest micro-batch)\n", why,
               gt_format_bytes(a, sizeof a, c.bytes), memory_limit ? gt_format_bytes(b, sizeof b, memory_limit) : "no limit");
        return 0;
    }
    RecomputePolicy pol = recompute_policy(cfg->gradient_checkpointing, cfg->every_n_layers, cfg->offload, d->n_layer);
    plan_memory(p, d, cfg->per_device_train_batch_size, cfg->gradient_accumulation_steps, world, T, pol, zero1, act);
    if (memory_limit && p->device_total > memory_limit) {
        /* what would fit, for the same effective batch */
        FitCandidate c;
        long per_rank = (long)p->B * p->A;
        char fix[300] = "nothing fits, even micro-batch 1 with every layer recomputed and offloaded: raise memory_limit "
                        "or use a smaller model";
        if (best_fit(d, per_rank, world, T, memory_limit, 1, true, zero1, act, &c) == 0) {
            describe_candidate(why, sizeof why, &c);
            snprintf(fix, sizeof fix, "for the same effective batch %ld, %s fits (%s)", p->effective_batch, why,
                     gt_format_bytes(b, sizeof b, c.bytes));
        }
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: memory_limit: the plan needs %s of device memory, the limit is %s; %s",
                        cfg->config_path, gt_format_bytes(a, sizeof a, p->device_total),
                        gt_format_bytes(b, sizeof b, memory_limit), fix);
    }
    return 0;
}
