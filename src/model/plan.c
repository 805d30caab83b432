/* plan.c - the memory plan (see plan.h): the sum of buffers.c's list, which model_create allocates. */
#include "plan.h"

#include "decode.h"
#include "lora.h"

#include "buffers.h"

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define LOGITS_CHUNK_BYTES (64ull << 20)    /* the chunk of a plan without a memory limit, and the least one */
#define LOGITS_CHUNK_MAX_BYTES (1ull << 30) /* the most a chunk grows to (plan_grow_logits) */

int plan_logits_stride(const ModelDesc *d) { return (d->vocab_size + 63) / 64 * 64; }

int plan_logits_rows(const ModelDesc *d, int B, int T, GtDtype act) {
    uint64_t rows = LOGITS_CHUNK_BYTES / ((uint64_t)plan_logits_stride(d) * gt_dtype_size(act));
    if (rows < 1) rows = 1;
    uint64_t bt = (uint64_t)B * (uint64_t)T;
    return (int)(rows < bt ? rows : bt);
}

GtDtype plan_act_dtype(Precision prec) { return prec == PREC_BF16 ? GT_BF16 : GT_F32; }

/* Checked uint64 arithmetic for the plan: the first quantity that overflows 64 bits is named in
 * what (the one being computed: cur) and the result saturates; plan_memory then reports the whole
 * plan as overflowed, so no wrapped-around total can pass a memory limit. */
typedef struct {
    const char *cur, *what;
} Checked;

static uint64_t cmul(Checked *k, uint64_t a, uint64_t b) {
    uint64_t r;
    if (!__builtin_mul_overflow(a, b, &r)) return r;
    if (!k->what) k->what = k->cur;
    return UINT64_MAX;
}

static uint64_t cadd(Checked *k, uint64_t a, uint64_t b) {
    uint64_t r;
    if (!__builtin_add_overflow(a, b, &r)) return r;
    if (!k->what) k->what = k->cur;
    return UINT64_MAX;
}

/* the storage of the base's linear weights: arch_storage_dtype of the table's first per-layer matrix */
static GtDtype base_linear_dtype(const ModelDesc *d, GtDtype act) {
    const ArchSpec *s = arch_spec(d->arch);
    for (int i = 0; i < s->n_tensors; i++)
        if (s->tensors[i].per_layer && s->tensors[i].dim1 != DIM_1) return arch_storage_dtype(d, &s->tensors[i], act);
    return act;
}

/* The plan of a model of B x T under pol: a training run's (train: gradients, AdamW state, the
 * backward's workspace; logits_rows 0: plan_logits_rows) or a generation run's (no train, with a
 * KV cache of kv_bytes in MEM_KV_CACHE) */
static int plan_fill(MemPlan *p, const ModelDesc *d, int B, int A, int world, int T, RecomputePolicy pol, bool zero1,
                     GtDtype act, bool train, int logits_rows, uint64_t kv_bytes) {
    memset(p, 0, sizeof *p);
    Checked k = {"effective batch", NULL};
    p->B = B;
    p->A = A;
    p->world = world;
    p->T = T;
    if (__builtin_mul_overflow((long)B, (long)world, &p->effective_batch) ||
        __builtin_mul_overflow(p->effective_batch, (long)A, &p->effective_batch)) {
        k.what = "effective batch";
        p->effective_batch = LONG_MAX;
    }
    if (!k.what && __builtin_mul_overflow(p->effective_batch, (long)T, &p->tokens_per_step)) k.what = "tokens per step";
    if (k.what) p->tokens_per_step = LONG_MAX;
    p->policy = pol;
    p->act = act;
    p->base_linear = base_linear_dtype(d, act);
    p->base_quant = d->quant;
    p->n_params = model_desc_num_params(d);
    p->n_trainable = d->adapter.r > 0 ? lora_num_params(d) : p->n_params;
    p->logits_rows = logits_rows > 0 ? logits_rows : plan_logits_rows(d, B, T, act);

    /* the model's buffers, as model_create allocates them (buffers.c) */
    p->zero1 = zero1;
    BufferShape shape = {B, T, pol, act, zero1 ? world : 1, train, p->logits_rows};
    BufferList list;
    if (buffers_list(&list, d, &shape) && !k.what) k.what = list.overflow;
    for (int i = 0; i < list.n; i++) {
        k.cur = mem_category_name(list.b[i].cat);
        p->bytes[list.b[i].cat] = cadd(&k, p->bytes[list.b[i].cat], cmul(&k, list.b[i].bytes, (uint64_t)list.b[i].count));
    }
    k.cur = "kv_cache";
    p->bytes[MEM_KV_CACHE] = cadd(&k, p->bytes[MEM_KV_CACHE], kv_bytes);
    for (int c = 0; c < MEM_COUNT; c++) {
        k.cur = mem_category_on_device((MemCategory)c) ? "the device total" : "the host total";
        if (mem_category_on_device((MemCategory)c))
            p->device_total = cadd(&k, p->device_total, p->bytes[c]);
        else
            p->host_total = cadd(&k, p->host_total, p->bytes[c]);
    }
    p->overflow = k.what;
    if (k.what) { /* nothing of it can be trusted, and nothing of it may fit a limit */
        p->device_total = UINT64_MAX;
        p->host_total = UINT64_MAX;
        return -1;
    }
    return 0;
}

int plan_memory(MemPlan *p, const ModelDesc *d, int B, int A, int world, int T, RecomputePolicy pol, bool zero1,
                GtDtype act) {
    return plan_fill(p, d, B, A, world, T, pol, zero1, act, true, 0, 0);
}

int plan_decode_memory(MemPlan *p, const ModelDesc *d, int n_tokens, int slots, int ctx, GtDtype act) {
    const uint64_t kv = kv_cache_bytes(d, slots, ctx, act);
    int rc = plan_fill(p, d, 1, 1, 1, n_tokens, recompute_policy(true, 1, false, d->n_layer), false, act, false, slots,
                       kv == UINT64_MAX ? 0 : kv);
    if (kv == UINT64_MAX && !p->overflow) {
        p->overflow = "kv_cache";
        p->device_total = p->host_total = UINT64_MAX;
        rc = -1;
    }
    return rc;
}

int plan_decode_fit(const ModelDesc *d, int prefill_chunk, int max_slots, int ctx, GtDtype act, uint64_t limit) {
    /* the plan grows with the slots: the largest that fits, by bisection */
    int lo = 0, hi = max_slots;
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        MemPlan p;
        if (plan_decode_memory(&p, d, mid > prefill_chunk ? mid : prefill_chunk, mid, ctx, act) == 0 &&
            p.device_total <= limit)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

void plan_print(const MemPlan *p, const MemTracker *measured, FILE *out) {
    char a[32], b[32], desc[96];
    fprintf(out, "memory plan (per rank): micro-batch %d x seq_len %d, %s activations, recompute %s%s\n", p->B,
            p->T, gt_dtype_name(p->act), recompute_describe(&p->policy, desc, sizeof desc),
            p->zero1 ? ", ZeRO-1 optimizer shards" : "");
    if (p->n_trainable != p->n_params && p->base_linear == GT_NF4)
        fprintf(out, "  LoRA: %llu trainable parameters (fp32 master, gradients, AdamW state), %llu frozen (linear "
                "weights 4-bit nf4, blocks of %d%s, %s, dequantized to %s for each matrix multiply; the rest %s; "
                "once)\n", (unsigned long long)p->n_trainable, (unsigned long long)p->n_params, p->base_quant.blocksize,
                p->base_quant.nested ? ", double quant" : "", p->base_quant.prequantized ? "as the checkpoint holds them" :
                "quantized as they load", gt_dtype_name(p->act), gt_dtype_name(p->act));
    else if (p->n_trainable != p->n_params && p->base_linear != p->act)
        fprintf(out, "  LoRA: %llu trainable parameters (fp32 master, gradients, AdamW state), %llu frozen (linear "
                "weights %s, converted to %s for each matrix multiply; the rest %s; once)\n",
                (unsigned long long)p->n_trainable, (unsigned long long)p->n_params, gt_dtype_name(p->base_linear),
                gt_dtype_name(p->act), gt_dtype_name(p->act));
    else if (p->n_trainable != p->n_params)
        fprintf(out, "  LoRA: %llu trainable parameters (fp32 master, gradients, AdamW state), %llu frozen (%s, once)\n",
                (unsigned long long)p->n_trainable, (unsigned long long)p->n_params, gt_dtype_name(p->act));
    if (p->zero1)
        fprintf(out, "  ZeRO-1 saves %s of optimizer state per rank (%d shards)\n",
                gt_format_bytes(a, sizeof a, 2 * p->n_trainable * sizeof(float) - p->bytes[MEM_OPTIMIZER]), p->world);
    if (p->grads_bf16)
        fprintf(out, "  ddp_grad_dtype bf16: %s of gradients per step between ranks instead of %s (saves %s, half); "
                "their bf16 copy is in grads\n",
                gt_format_bytes(a, sizeof a, p->n_trainable * 2), gt_format_bytes(b, sizeof b, p->n_trainable * 4),
                gt_format_bytes(desc, sizeof desc, p->n_trainable * 2));
    if (measured)
        fprintf(out, "  %-18s %14s %14s\n", "category", "planned", "measured");
    else
        fprintf(out, "  %-18s %14s\n", "category", "planned");
    for (int c = 0; c < MEM_COUNT; c++) {
        if (c == MEM_KV_CACHE && !p->bytes[c] && !(measured && measured->peak[c])) continue; /* training */
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
    if (p->runtime_reserve) {
        fprintf(out, "  %-18s %14s  (%s: the runtime's, outside the categories)\n", "runtime_reserve",
                gt_format_bytes(a, sizeof a, p->runtime_reserve), p->runtime_reserve_what);
        fprintf(out, "  %-18s %14s  (device total + runtime_reserve)\n", "device need",
                gt_format_bytes(a, sizeof a, p->device_total + p->runtime_reserve));
    }
    fprintf(out, "  %-18s %14s\n", "host total", gt_format_bytes(a, sizeof a, p->host_total));
    const long bt = (long)p->B * p->T, chunks = p->logits_rows > 0 ? (bt + p->logits_rows - 1) / p->logits_rows : 0;
    fprintf(out, "  LM head: %d of the micro-batch's %ld rows at a time (%ld chunk%s, logits above)\n", p->logits_rows,
            bt, chunks, chunks == 1 ? "" : "s");
    fprintf(out, "  peak: every buffer is allocated once before step 1 and reused, so the peak is the\n"
                 "  total above, reached at the start and held through every forward, backward and\n"
                 "  optimizer step (no allocation inside a step)\n");
}

/* Layouts of the same effective batch, weighed by auto-fit and by the advice of a refusal, under
 * one rule (PLAN_FIT_RULE): every micro-batch B dividing the per-rank batch, each under the fewest
 * recomputed layers that fit (then no offload); among those, a micro-batch of 4 or more when one
 * fits (4 x 16 beats 1 x 64), then the fewest recomputed layers, then no offload, then the largest
 * micro-batch. */
static int candidate_better(const PlanCandidate *a, const PlanCandidate *b, int pref_B) {
    if ((a->B >= pref_B) != (b->B >= pref_B)) return a->B >= pref_B;
    if (a->recomputed != b->recomputed) return a->recomputed < b->recomputed;
    if (a->offload != b->offload) return !a->offload;
    return a->B > b->B;
}

/* The micro-batches a layout of per_rank rows (B * A) may use: B divides per_rank, and both B and A
 * are values a config could spell (at most GT_MAX_MICRO_BATCH and GT_MAX_ACCUM_STEPS), which also
 * bounds the search to GT_MAX_MICRO_BATCH candidates whatever per_rank is. */
static long max_micro_batch(long per_rank) { return per_rank < GT_MAX_MICRO_BATCH ? per_rank : GT_MAX_MICRO_BATCH; }
static long min_micro_batch(long per_rank) { return (per_rank + GT_MAX_ACCUM_STEPS - 1) / GT_MAX_ACCUM_STEPS; }

/* The smallest valid micro-batch of per_rank rows, or 0 when there is none (a prime above 2^20). */
static int smallest_split(long per_rank) {
    for (long B = min_micro_batch(per_rank) > 1 ? min_micro_batch(per_rank) : 1; B <= max_micro_batch(per_rank); B++)
        if (per_rank % B == 0) return (int)B;
    return 0;
}

int plan_fit(PlanFit *f, const ModelDesc *d, long per_rank, int world, int T, uint64_t limit, bool zero1, GtDtype act) {
    memset(f, 0, sizeof *f);
    f->chosen = -1;
    f->limit = limit;
    f->pref_B = per_rank >= 4 ? 4 : 1;
    f->n_layer = d->n_layer;
    size_t cap = 0;
    const long lo = min_micro_batch(per_rank) > 1 ? min_micro_batch(per_rank) : 1;
    for (long B = max_micro_batch(per_rank); B >= lo; B--) {
        if (per_rank % B) continue;
        PlanCandidate row = {.B = (int)B, .A = (int)(per_rank / B), .fits = false};
        for (int every = 0; every <= d->n_layer; every++) {
            for (int off = 0; off <= (every > 0); off++) {
                RecomputePolicy pol = recompute_policy(every > 0, every ? every : 1, off, d->n_layer);
                MemPlan p;
                if (plan_memory(&p, d, row.B, row.A, world, T, pol, zero1, act)) continue;
                if (limit && p.device_total > limit) continue;
                PlanCandidate c = {row.B, row.A, every, off, recompute_count(&pol), p.device_total, true};
                /* of the settings recomputing as many layers, the first (smallest every_n_layers) stands for them */
                if (!row.fits || c.recomputed < row.recomputed || (c.recomputed == row.recomputed && !c.offload && row.offload))
                    row = c;
            }
        }
        if (!row.fits) { /* the least it could need: every layer recomputed and offloaded */
            MemPlan p;
            row.every_n = 1, row.offload = true, row.recomputed = d->n_layer;
            row.bytes = plan_memory(&p, d, row.B, row.A, world, T, recompute_policy(true, 1, true, d->n_layer), zero1,
                                    act) ? UINT64_MAX : p.device_total;
        }
        if ((size_t)f->n == cap) {
            cap = cap ? 2 * cap : 16;
            f->rows = gt_xrealloc(f->rows, cap * sizeof *f->rows);
        }
        f->rows[f->n] = row;
        if (row.fits && (f->chosen < 0 || candidate_better(&row, &f->rows[f->chosen], f->pref_B))) f->chosen = f->n;
        f->n++;
    }
    return f->chosen >= 0 ? 0 : -1;
}

void plan_fit_free(PlanFit *f) {
    free(f->rows);
    f->rows = NULL;
    f->n = 0;
}

static void describe_recompute(char *buf, size_t cap, const PlanCandidate *c, int n_layer) {
    if (c->every_n == 0)
        snprintf(buf, cap, "none (0 of %d layers)", n_layer);
    else
        snprintf(buf, cap, "every_n_layers %d (%d of %d layers)", c->every_n, c->recomputed, n_layer);
}

/* a line to out, or through gt_log (rank 0's stdout) when out is NULL */
static void emit(FILE *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(FILE *out, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (out) fputs(line, out);
    else gt_log("%s", line);
}

void plan_fit_print(const PlanFit *f, FILE *out) {
    char a[32], rec[64];
    emit(out, "auto-fit rule: %s\n", PLAN_FIT_RULE);
    emit(out, "auto-fit candidates (each micro-batch under the fewest recomputed layers that fit %s):\n",
            f->limit ? gt_format_bytes(a, sizeof a, f->limit) : "no limit");
    /* at most PLAN_FIT_PRINT_ROWS rows: a window around the chosen one (all when they are few) */
    int first = 0, last = f->n;
    if (f->n > PLAN_FIT_PRINT_ROWS) {
        int c = f->chosen >= 0 ? f->chosen : 0;
        first = c - PLAN_FIT_PRINT_ROWS / 2;
        if (first < 0) first = 0;
        if (first + PLAN_FIT_PRINT_ROWS > f->n) first = f->n - PLAN_FIT_PRINT_ROWS;
        last = first + PLAN_FIT_PRINT_ROWS;
    }
    if (first > 0) emit(out, "  (%d larger micro-batches not shown)\n", first);
    for (int i = first; i < last; i++) {
        const PlanCandidate *c = &f->rows[i];
        if (c->fits) {
            describe_recompute(rec, sizeof rec, c, f->n_layer);
            emit(out, "  B %d x A %d | recompute %s | offload %s | %s%s\n", c->B, c->A, rec, c->offload ? "yes" : "no",
                    gt_format_bytes(a, sizeof a, c->bytes), i == f->chosen ? " | chosen" : "");
        } else {
            emit(out, "  B %d x A %d | does not fit: %s even with every layer recomputed and offloaded\n", c->B, c->A,
                    c->bytes == UINT64_MAX ? "over 2^64 bytes" : gt_format_bytes(a, sizeof a, c->bytes));
        }
    }
    if (last < f->n) emit(out, "  (%d smaller micro-batches not shown)\n", f->n - last);
}

static void describe_candidate(char *buf, size_t cap, const PlanCandidate *c) {
    if (c->every_n == 0)
        snprintf(buf, cap, "per_device_train_batch_size %d x gradient_accumulation_steps %d, no recompute", c->B, c->A);
    else
        snprintf(buf, cap, "per_device_train_batch_size %d x gradient_accumulation_steps %d, gradient_checkpointing "
                 "every_n_layers %d%s", c->B, c->A, c->every_n, c->offload ? " with offload" : "");
}

/* A plan that overflowed (p->overflow): one line naming what, and the sizes that made it. */
static int overflow_error(const MemPlan *p, const ModelDesc *d, const RunConfig *cfg, GtError *err) {
    return gt_error(err, GT_EXIT_BAD_INPUT,
                    "%s: memory plan: expected a plan under 2^64 bytes, found an overflow of 64 bits in %s "
                    "(per_device_train_batch_size %d x world %d x gradient_accumulation_steps %d, data.seq_len %d; "
                    "%s: n_layer %d, n_embd %d, n_inner %d, n_head %d, vocab_size %d)",
                    cfg->config_path, p->overflow, p->B, p->world, p->A, p->T, d->path, d->n_layer, d->n_embd,
                    d->n_inner, d->n_head, d->vocab_size);
}

uint64_t plan_step_batch_bytes(int B, int A, int T, bool packing) {
    const uint64_t n = (uint64_t)B * (uint64_t)A * (uint64_t)T; /* each at most 2^31: no overflow */
    return 2 * n * (packing ? 3 : 2) * sizeof(int) + n * sizeof(float);
}

/* the run's plan: the model's (logits_rows 0: plan_logits_rows) and the step buffers */
static int run_plan(MemPlan *p, const ModelDesc *d, int B, int A, int world, int T, RecomputePolicy pol, bool zero1,
                    GtDtype act, bool packing, int logits_rows) {
    if (plan_fill(p, d, B, A, world, T, pol, zero1, act, true, logits_rows, 0)) return -1;
    const uint64_t step = plan_step_batch_bytes(B, A, T, packing);
    p->bytes[MEM_HOST_STAGING] += step;
    p->host_total += step;
    return 0;
}

int plan_grow_logits_rows(const MemPlan *p, const ModelDesc *d, uint64_t limit) {
    const uint64_t row = (uint64_t)plan_logits_stride(d) * gt_dtype_size(p->act);
    const uint64_t bt = (uint64_t)p->B * (uint64_t)p->T, now = (uint64_t)p->logits_rows;
    if (!limit || p->overflow || now >= bt) return p->logits_rows;
    /* the room is the no-recompute plan's (at the default chunk), whatever p's recompute: every
     * recompute setting of one layout gets the same chunk, so their bits stay identical */
    MemPlan q;
    if (plan_memory(&q, d, p->B, p->A, p->world, p->T, recompute_policy(false, 1, false, d->n_layer), p->zero1, p->act) ||
        q.device_total >= limit || q.logits_rows != p->logits_rows)
        return p->logits_rows;
    const uint64_t half_room = (limit - q.device_total) / 2, cap = LOGITS_CHUNK_MAX_BYTES / row;
    for (uint64_t rows = bt < cap ? bt : cap; rows > now; rows /= 2) {
        const uint64_t r = rows == bt ? rows : rows / 64 * 64; /* whole tiles of rows below one chunk */
        if (r > now && (r - now) * row <= half_room) return (int)r;
    }
    return p->logits_rows;
}

/* the run's plan with the LM head's chunk grown into the room under the limit (plan_grow_logits_rows) */
static int run_plan_grown(MemPlan *p, const ModelDesc *d, int B, int A, int world, int T, RecomputePolicy pol,
                          bool zero1, GtDtype act, bool packing, uint64_t limit) {
    if (run_plan(p, d, B, A, world, T, pol, zero1, act, packing, 0)) return -1;
    const int rows = plan_grow_logits_rows(p, d, limit);
    return rows == p->logits_rows ? 0 : run_plan(p, d, B, A, world, T, pol, zero1, act, packing, rows);
}

/* ddp_grad_dtype bf16 over world > 1 ranks: the bf16 copy of the gradients that dist_comm_grads
 * allocates (MEM_GRADS), half the gradients' bytes, whatever the micro-batch; 0 otherwise */
static uint64_t grad_copy_bytes(const ModelDesc *d, const RunConfig *cfg, int world, bool zero1, GtDtype act) {
    MemPlan q;
    if (cfg->ddp_grad_dtype != PREC_BF16 || world <= 1 ||
        plan_memory(&q, d, 1, 1, world, cfg->data.seq_len, recompute_policy(false, 1, false, d->n_layer), zero1, act))
        return 0;
    return q.bytes[MEM_GRADS] / 2;
}

/* the resolved plan with the gradients' bf16 copy added (grad_copy_bytes) */
static void add_grad_copy(MemPlan *p, uint64_t bytes) {
    if (!bytes) return;
    p->grads_bf16 = true;
    p->bytes[MEM_GRADS] += bytes;
    p->device_total += bytes;
}

static int plan_resolve_layout(MemPlan *p, const ModelDesc *d, const RunConfig *cfg, int world, uint64_t memory_limit,
                               GtError *err);

int plan_resolve(MemPlan *p, const ModelDesc *d, const RunConfig *cfg, int world, uint64_t memory_limit,
                 GtError *err) {
    const bool zero1 = cfg->zero_stage == 1 && world > 1;
    const uint64_t copy = grad_copy_bytes(d, cfg, world, zero1, plan_act_dtype(cfg->precision));
    /* the copy does not depend on the layout: the layouts are weighed against what it leaves */
    const uint64_t limit = !memory_limit || !copy ? memory_limit : memory_limit > copy ? memory_limit - copy : 1;
    const int rc = plan_resolve_layout(p, d, cfg, world, limit, err);
    if (!p->overflow) add_grad_copy(p, copy);
    return rc;
}

static int plan_resolve_layout(MemPlan *p, const ModelDesc *d, const RunConfig *cfg, int world, uint64_t memory_limit,
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
        long per_rank = E / world;
        const int B1 = smallest_split(per_rank);
        if (B1 == 0)
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: train_batch_size: expected %ld rows per rank to split into per_device_train_batch_size "
                            "<= %d x gradient_accumulation_steps <= %d, found no such split of %ld",
                            cfg->config_path, per_rank, GT_MAX_MICRO_BATCH, GT_MAX_ACCUM_STEPS, E);
        PlanFit fit;
        int none = plan_fit(&fit, d, per_rank, world, T, memory_limit, zero1, act);
        if (none) {
            plan_fit_print(&fit, NULL); /* what was weighed: every micro-batch, none fitting */
            plan_fit_free(&fit);
            /* the smallest plan there is: the smallest micro-batch, every layer recomputed and offloaded */
            if (plan_memory(p, d, B1, (int)(per_rank / B1), world, T, recompute_policy(true, 1, true, d->n_layer), zero1,
                            act))
                return overflow_error(p, d, cfg, err);
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: train_batch_size %ld cannot fit memory_limit %s: even micro-batch %d with every layer "
                            "recomputed and offloaded needs %s",
                            cfg->config_path, E, gt_format_bytes(a, sizeof a, memory_limit), B1,
                            gt_format_bytes(b, sizeof b, p->device_total));
        }
        const PlanCandidate c = fit.rows[fit.chosen];
        RecomputePolicy pol = recompute_policy(c.every_n > 0, c.every_n ? c.every_n : 1, c.offload, d->n_layer);
        if (run_plan_grown(p, d, c.B, c.A, world, T, pol, zero1, act, cfg->data.packing, memory_limit)) {
            plan_fit_free(&fit);
            return overflow_error(p, d, cfg, err);
        }
        plan_fit_print(&fit, NULL);
        plan_fit_free(&fit);
        describe_candidate(why, sizeof why, &c);
        gt_log("auto-fit: %s -> %s of %s (by the rule above)\n", why, gt_format_bytes(a, sizeof a, c.bytes),
               memory_limit ? gt_format_bytes(b, sizeof b, memory_limit) : "no limit");
        return 0;
    }
    RecomputePolicy pol = recompute_policy(cfg->gradient_checkpointing, cfg->every_n_layers, cfg->offload, d->n_layer);
    if (run_plan(p, d, cfg->per_device_train_batch_size, cfg->gradient_accumulation_steps, world, T, pol, zero1, act,
                 cfg->data.packing, 0))
        return overflow_error(p, d, cfg, err);
    if (memory_limit && p->device_total > memory_limit) {
        /* what would fit, for the same effective batch */
        long per_rank = (long)p->B * p->A;
        char fix[400] = "nothing fits, even micro-batch 1 with every layer recomputed and offloaded: raise memory_limit "
                        "or use a smaller model";
        PlanFit fit;
        if (plan_fit(&fit, d, per_rank, world, T, memory_limit, zero1, act) == 0) {
            describe_candidate(why, sizeof why, &fit.rows[fit.chosen]);
            snprintf(fix, sizeof fix, "for the same effective batch %ld, %s fits (%s; what per_device_train_batch_size "
                     "auto with train_batch_size %ld picks)", p->effective_batch, why,
                     gt_format_bytes(b, sizeof b, fit.rows[fit.chosen].bytes), p->effective_batch);
        }
        plan_fit_free(&fit);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: memory_limit: the plan needs %s of device memory, the limit is %s; %s",
                        cfg->config_path, gt_format_bytes(a, sizeof a, p->device_total),
                        gt_format_bytes(b, sizeof b, memory_limit), fix);
    }
    const int rows = plan_grow_logits_rows(p, d, memory_limit);
    if (rows != p->logits_rows &&
        run_plan(p, d, p->B, p->A, world, T, pol, zero1, act, cfg->data.packing, rows))
        return overflow_error(p, d, cfg, err);
    return 0;
}
