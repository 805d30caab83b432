/* test_nf4_model.c - a 4-bit NF4 frozen base (QLoRA: lora.quantize_base nf4, or a bitsandbytes base;
 * ModelDesc.quant), suites nf4_model and nf4_store.
 *
 * nf4_model: the model whose base linear weights are stored NF4 against the same model whose base
 * holds, in fp32 (or the bf16 act dtype), the values nf4.h's host quantize + dequantize give, computed
 * here per HF tensor (the unit bitsandbytes quantizes): loss and every adapter gradient within 1e-6
 * relative (they are the same GEMMs on the same weights: measured bit for bit), under fp32 and bf16
 * activations, Llama (fused q|k|v and gate|up: several units a tensor) and GPT-2, single and double
 * quantization, a blocksize that leaves a remainder block; the base reads back (download) as those
 * values bit for bit; recompute and offload change no bit; an accumulation split agrees; the
 * quantization hook (ModelBaseHook) sees each unit's values once, in order, and what it writes is
 * what is quantized.
 * nf4_store: the plan equals what model_create allocates, category by category (frozen: the units'
 * bytes from the format's definition, nf4.h's header, plus the rest in the act dtype; host_staging:
 * the unit buffer); the run config's keys and config.json's quantization_config reach the
 * description, and each bad input is one line naming the file and key, code 2. */
#include <cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "checkpoint.h"
#include "config.h"
#include "lora.h"
#include "lora_fixture.h"
#include "model.h"
#include "nf4.h"
#include "plan.h"
#include "test_backend_select.h"
#include "run_util.h"
#include "test_util.h"

enum { R = 3, BATCH = 2, SEQ = 6 };

/* the test's own rule (documented in arch.h): the layers' matrices are stored 4-bit */
static bool linear_weight(const ParamTensor *t) { return t->layer >= 0 && t->ndim == 2; }

static ModelDesc nf4_desc(bool llama, int blocksize, bool nested, int n_inner) {
    ModelDesc d = lora_fix_desc(llama, 2, R, 6.0, llama ? LORA_FIX_LLAMA_ALL : LORA_FIX_GPT_ALL, false, 0.1,
                                LORA_INIT_FALSE);
    if (n_inner) d.n_inner = n_inner;
    d.quant = (BaseQuant){.nf4 = true, .blocksize = blocksize, .nested = nested};
    return d;
}

/* every base value: uniform(-0.3, 0.3), norm weights around 1, a lone large value per linear weight */
static float *random_base(const ParamLayout *bl, uint64_t seed) {
    float *h = malloc(bl->total * sizeof *h);
    uint64_t s = seed;
    for (int i = 0; i < bl->n_tensors; i++) {
        const ParamTensor *t = &bl->tensors[i];
        const bool norm = t->role == ROLE_NORM1_W || t->role == ROLE_NORM2_W || t->role == ROLE_NORMF_W;
        for (size_t k = 0; k < t->numel; k++)
            h[t->offset + k] = (float)((norm ? 1.0 : 0.0) + 0.3 * (2 * lora_fix_rng_uniform(&s) - 1));
        if (linear_weight(t)) h[t->offset + t->numel / 3] = 2.5f;
    }
    return h;
}

/* h with each linear weight's HF tensors (arch.c's row blocks) replaced by nf4.h's host
 * dequantize of its host quantize: what a 4-bit base holds */
static float *dequantized(const ModelDesc *d, const ParamLayout *bl, const float *h) {
    float *q = malloc(bl->total * sizeof *q);
    memcpy(q, h, bl->total * sizeof *q);
    for (int i = 0; i < bl->n_tensors; i++) {
        const ParamTensor *t = &bl->tensors[i];
        if (!linear_weight(t)) continue;
        for (int b = 0; b < t->spec->n_blocks; b++) {
            char name[128];
            int64_t row0, rows;
            arch_block_name(t, b, name, sizeof name, d, &row0, &rows);
            const Nf4Format f = {rows * t->shape[1], d->quant.blocksize, d->quant.nested};
            void *unit = malloc((size_t)nf4_bytes(&f));
            const size_t off = t->offset + (size_t)(row0 * t->shape[1]);
            nf4_quantize(&f, h + off, unit);
            nf4_dequantize_f32(&f, unit, 0, f.numel, q + off);
            free(unit);
        }
    }
    return q;
}

typedef struct {
    Backend *be;
    Model *m;
    int *tok, *tgt;
    long items;
} Run;

/* a model of d (act, pol) with base values h uploaded in chunks of `chunk` (across tensors and
 * units) and random adapters (seeded: the same for every model of one test) */
static Run run_open(const ModelDesc *d, GtDtype act, RecomputePolicy pol, const float *h, size_t chunk) {
    Run r = {0};
    r.be = test_backend_open();
    backend_set_act_dtype(r.be, act);
    GtError err = {0};
    cr_assert_eq(model_create(&r.m, d, r.be, BATCH, SEQ, pol, 7, &err), 0, "%s", err.msg);
    const ParamLayout *bl = &r.m->base_layout;
    float *tmp = malloc(bl->total * sizeof *tmp);
    memcpy(tmp, h, bl->total * sizeof *tmp);
    for (size_t o = 0; o < bl->total; o += chunk) {
        const size_t n = bl->total - o < chunk ? bl->total - o : chunk;
        cr_assert_eq(model_upload_base(r.m, o, tmp + o, n, &err), 0, "%s", err.msg);
    }
    free(tmp);
    const size_t np = r.m->layout.total;
    float *p = malloc(np * sizeof *p);
    uint64_t s = 99;
    for (size_t k = 0; k < np; k++) p[k] = (float)(0.3 * (2 * lora_fix_rng_uniform(&s) - 1));
    cr_assert_eq(r.be->ops->to_device(r.be, r.m->params, p, np * sizeof *p, &err), 0, "%s", err.msg);
    free(p);
    model_params_changed(r.m);
    r.m->ad.dropout_seed = 1234, r.m->ad.dropout_step = 5, r.m->ad.dropout_row0 = 0;
    const size_t n = (size_t)BATCH * SEQ;
    r.tok = malloc(n * sizeof *r.tok), r.tgt = malloc(n * sizeof *r.tgt);
    uint64_t t = 5;
    for (size_t i = 0; i < n; i++) {
        r.tok[i] = (int)(lora_fix_rng_next(&t) % (uint64_t)d->vocab_size);
        r.tgt[i] = i % 5 == 3 ? -100 : (int)(lora_fix_rng_next(&t) % (uint64_t)d->vocab_size);
        r.items += r.tgt[i] >= 0;
    }
    return r;
}

static void run_close(Run *r) {
    free(r->tok), free(r->tgt);
    model_free(r->m);
    backend_close(r->be);
}

/* one training step of rows [row0, row0 + rows) (scale 1 / all items), grads not zeroed */
static double step_rows(Run *r, int row0, int rows) {
    GtError err = {0};
    double loss = 0;
    r->m->ad.dropout_row0 = row0;
    cr_assert_eq(model_step(r->m, r->tok + (size_t)row0 * SEQ, r->tgt + (size_t)row0 * SEQ, rows,
                            (float)(1.0 / r->items), true, &loss, &err), 0, "%s", err.msg);
    return loss;
}

static float *grads(Run *r) {
    GtError err = {0};
    const size_t n = r->m->layout.total;
    float *g = malloc(n * sizeof *g);
    cr_assert_eq(r->be->ops->to_host(r->be, g, r->m->grads, n * sizeof *g, &err), 0, "%s", err.msg);
    return g;
}

/* relative difference of two gradient vectors (max |a - b| / max |b|) */
static double grad_diff(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t k = 0; k < n; k++) {
        d = fmax(d, fabs((double)a[k] - b[k]));
        m = fmax(m, fabs((double)b[k]));
    }
    return m > 0 ? d / m : d;
}

/* the NF4 model of d against the plain model (the same description without quant) whose base holds
 * the dequantized values; the NF4 base's download is those values bit for bit */
static void check_against_dequantized(ModelDesc d, GtDtype act, const char *what) {
    ModelDesc plain = d;
    plain.quant = (BaseQuant){0};
    const RecomputePolicy pol = recompute_policy(false, 1, false, d.n_layer);
    ParamLayout bl;
    param_layout_init(&bl, &d);
    float *h = random_base(&bl, 42), *q = dequantized(&d, &bl, h);
    Run a = run_open(&d, act, pol, h, 777), b = run_open(&plain, act, pol, q, 1 << 20);
    int n_nf4 = 0;
    for (int i = 0; i < a.m->base_layout.n_tensors; i++) {
        const ParamTensor *t = &a.m->base_layout.tensors[i];
        cr_assert_eq(t->dtype, linear_weight(t) ? GT_NF4 : act, "%s: %s stored %s", what, t->name, gt_dtype_name(t->dtype));
        n_nf4 += t->dtype == GT_NF4;
    }
    cr_assert_gt(n_nf4, 0);
    GtError err = {0};
    float *back = malloc(bl.total * sizeof *back);
    cr_assert_eq(model_download_base(a.m, 0, back, bl.total, &err), 0, "%s", err.msg);
    for (int i = 0; i < bl.n_tensors; i++) {
        const ParamTensor *t = &bl.tensors[i];
        if (!linear_weight(t)) continue;
        for (size_t k = 0; k < t->numel; k++)
            cr_assert(memcmp(&back[t->offset + k], &q[t->offset + k], sizeof(float)) == 0,
                      "%s: %s[%zu] reads back %.9g, nf4.h's dequantized value %.9g", what, t->name, k,
                      back[t->offset + k], q[t->offset + k]);
    }
    /* a range that starts inside a unit */
    const ParamTensor *t0 = &bl.tensors[bl.layer[1][ROLE_FC_W]];
    cr_assert_eq(model_download_base(a.m, t0->offset + 70, back, 100, &err), 0, "%s", err.msg);
    cr_assert(memcmp(back, q + t0->offset + 70, 100 * sizeof *back) == 0, "%s: a range inside a unit differs", what);
    free(back);
    model_zero_grads(a.m), model_zero_grads(b.m);
    const double la = step_rows(&a, 0, BATCH), lb = step_rows(&b, 0, BATCH);
    float *ga = grads(&a), *gb = grads(&b);
    const double gd = grad_diff(ga, gb, a.m->layout.total);
    cr_assert(fabs(la - lb) <= 1e-6 * fabs(lb), "%s: loss %.9g, the dequantized base's %.9g", what, la, lb);
    cr_assert(gd <= 1e-6, "%s: adapter gradients %.3g relative from the dequantized base's", what, gd);
    cr_log_info("%s: loss %.9g vs %.9g (%s), gradients %.3g", what, la / a.items, lb / b.items,
                la == lb ? "bit for bit" : "close", gd);
    /* and the quantization did something: the unquantized base's loss is another */
    Run u = run_open(&plain, act, pol, h, 1 << 20);
    model_zero_grads(u.m);
    const double lu = step_rows(&u, 0, BATCH);
    cr_assert(fabs(lu - lb) > 1e-7 * fabs(lb), "%s: the unquantized base gives the same loss %.9g", what, lu);
    run_close(&u);
    free(ga), free(gb), free(h), free(q);
    param_layout_free(&bl);
    run_close(&a), run_close(&b);
}

Test(nf4_model, llama_nf4_base_is_the_dequantized_base, .timeout = 120) {
    check_against_dequantized(nf4_desc(true, 64, false, 0), GT_F32, "llama nf4");
    check_against_dequantized(nf4_desc(true, 64, true, 0), GT_F32, "llama nf4 double quant");
    check_against_dequantized(nf4_desc(true, 64, true, 26), GT_F32, "llama nf4, a remainder block");
    check_against_dequantized(nf4_desc(true, 32, true, 0), GT_BF16, "llama nf4 blocksize 32, bf16 activations");
    ModelDesc dora = nf4_desc(true, 64, true, 0);
    dora.adapter.dora = true; /* DoRA reads W through model_w too */
    check_against_dequantized(dora, GT_F32, "llama nf4 DoRA");
}

Test(nf4_model, gpt2_nf4_base_is_the_dequantized_base, .timeout = 120) {
    check_against_dequantized(nf4_desc(false, 64, false, 0), GT_F32, "gpt2 nf4");
    check_against_dequantized(nf4_desc(false, 64, true, 0), GT_BF16, "gpt2 nf4 double quant, bf16 activations");
}

/* recompute (every layer, offloaded or not) changes no bit with an NF4 base; two micro-batches of
 * one row add up to the batch of two (1e-6 relative) */
Test(nf4_model, recompute_offload_bit_identical_and_accumulation_agrees, .timeout = 120) {
    for (int llama = 0; llama <= 1; llama++) {
        const ModelDesc d = nf4_desc(llama, 64, true, 0);
        ParamLayout bl;
        param_layout_init(&bl, &d);
        float *h = random_base(&bl, 7);
        const RecomputePolicy pols[3] = {recompute_policy(false, 1, false, 2), recompute_policy(true, 1, false, 2),
                                         recompute_policy(true, 1, true, 2)};
        Run a = run_open(&d, GT_F32, pols[0], h, 1000);
        model_zero_grads(a.m);
        const double la = step_rows(&a, 0, BATCH);
        float *ga = grads(&a);
        for (int k = 1; k < 3; k++) {
            Run b = run_open(&d, GT_F32, pols[k], h, 1000);
            model_zero_grads(b.m);
            const double lb = step_rows(&b, 0, BATCH);
            float *gb = grads(&b);
            cr_assert(la == lb, "%s policy %d: loss %.17g vs %.17g", llama ? "llama" : "gpt2", k, lb, la);
            cr_assert(memcmp(ga, gb, a.m->layout.total * sizeof *ga) == 0, "%s policy %d: gradients differ",
                      llama ? "llama" : "gpt2", k);
            free(gb);
            run_close(&b);
        }
        Run c = run_open(&d, GT_F32, pols[0], h, 1000);
        model_zero_grads(c.m);
        const double lc = step_rows(&c, 0, 1) + step_rows(&c, 1, 1);
        float *gc = grads(&c);
        cr_assert(fabs(lc - la) <= 1e-6 * fabs(la), "%s: split loss %.9g vs %.9g", llama ? "llama" : "gpt2", lc, la);
        const double gd = grad_diff(gc, ga, a.m->layout.total);
        cr_assert(gd <= 1e-6, "%s: split gradients %.3g relative", llama ? "llama" : "gpt2", gd);
        free(gc), free(ga), free(h);
        run_close(&c), run_close(&a);
        param_layout_free(&bl);
    }
}

/* the quantization hook: called once per unit, in layout order, with the unit's values as
 * uploaded; what it writes (here: halved) is what is stored */
typedef struct {
    const float *h;
    int calls, bad;
} HookLog;
static HookLog *g_hook; /* the test's, for the hook (no context in the contract) */

static int halve_hook(Model *m, int tensor, int block, float *values, GtError *err) {
    (void)err;
    const ParamTensor *t = &m->base_layout.tensors[tensor];
    char name[128];
    int64_t row0, rows;
    arch_block_name(t, block, name, sizeof name, &m->desc, &row0, &rows);
    const size_t off = t->offset + (size_t)(row0 * t->shape[1]), n = (size_t)(rows * t->shape[1]);
    if (memcmp(values, g_hook->h + off, n * sizeof *values) != 0) g_hook->bad++;
    for (size_t k = 0; k < n; k++) values[k] *= 0.5f;
    g_hook->calls++;
    return 0;
}

Test(nf4_model, the_hook_sees_each_unit_and_what_it_writes_is_stored) {
    const ModelDesc d = nf4_desc(true, 64, true, 0);
    Backend *be = test_backend_open();
    Model *m = NULL;
    GtError err = {0};
    cr_assert_eq(model_create(&m, &d, be, 1, 4, recompute_policy(false, 1, false, 2), 1, &err), 0, "%s", err.msg);
    const ParamLayout *bl = &m->base_layout;
    float *h = random_base(bl, 3), *tmp = malloc(bl->total * sizeof *tmp);
    HookLog log = {h, 0, 0};
    g_hook = &log;
    m->base_hook = halve_hook;
    memcpy(tmp, h, bl->total * sizeof *tmp);
    cr_assert_eq(model_upload_base(m, 0, tmp, bl->total, &err), 0, "%s", err.msg);
    int units = 0;
    float *half = malloc(bl->total * sizeof *half);
    for (int i = 0; i < bl->n_tensors; i++) {
        const ParamTensor *t = &bl->tensors[i];
        units += linear_weight(t) ? t->spec->n_blocks : 0;
        for (size_t k = 0; k < t->numel; k++) half[t->offset + k] = h[t->offset + k] * (linear_weight(t) ? 0.5f : 1.0f);
    }
    cr_assert_eq(log.calls, units, "the hook was called %d times, the base has %d units", log.calls, units);
    cr_assert_eq(log.bad, 0, "%d units reached the hook with values other than the uploaded ones", log.bad);
    float *q = dequantized(&d, bl, half);
    cr_assert_eq(model_download_base(m, 0, tmp, bl->total, &err), 0, "%s", err.msg);
    cr_assert(memcmp(tmp, q, bl->total * sizeof *q) == 0, "the stored base is not the hook's values quantized");
    /* a chunk that does not continue its unit is an internal error, not a silent wrong unit */
    const ParamTensor *t = &bl->tensors[bl->layer[0][ROLE_O_W]];
    cr_assert_eq(model_upload_base(m, t->offset + 5, tmp, 10, &err), -1);
    cr_assert(strstr(err.msg, "internal error") && strstr(err.msg, t->name), "%s", err.msg);
    free(q), free(half), free(h), free(tmp);
    model_free(m);
    backend_close(be);
}

/* ---------------------------------------------------------------- nf4_store */

/* one unit's bytes from nf4.h's header: packed ceil(n/2), absmax (1 byte nested, else 4) per block,
 * nested: 4 per 256 absmax values and a 4-byte offset; each part starting at a multiple of 16 */
static uint64_t unit_bytes_by_definition(int64_t n, int bs, bool nested) {
    const uint64_t a16 = 16, nb = (uint64_t)((n + bs - 1) / bs);
    uint64_t at = ((uint64_t)(n + 1) / 2 + a16 - 1) / a16 * a16;
    at += nb * (nested ? 1 : 4);
    if (nested) {
        at = (at + a16 - 1) / a16 * a16;
        at += (nb + 255) / 256 * 4 + 4;
    }
    return (at + a16 - 1) / a16 * a16;
}

Test(nf4_store, planned_equals_measured_with_an_nf4_base, .timeout = 120) {
    int cases = 0;
    for (int llama = 0; llama <= 1; llama++)
    for (int act = GT_F32; act <= GT_BF16; act++)
    for (int nested = 0; nested <= 1; nested++)
    for (int pk = 0; pk < 3; pk++) {
        const GtDtype a = (GtDtype)act;
        const ModelDesc d = nf4_desc(llama, 64, nested, llama ? 26 : 0);
        const RecomputePolicy pol = recompute_policy(pk > 0, 1, pk == 2, d.n_layer);
        char what[96];
        snprintf(what, sizeof what, "%s act %s nested %d recompute %d", llama ? "llama" : "gpt2", gt_dtype_name(a), nested,
                 pk);
        MemPlan p;
        cr_assert_eq(plan_memory(&p, &d, BATCH, 1, 1, SEQ, pol, false, a), 0, "%s", what);
        cr_assert_eq(p.base_linear, GT_NF4, "%s", what);
        Backend *be = test_backend_open();
        backend_set_act_dtype(be, a);
        Model *m = NULL;
        GtError err = {0};
        cr_assert_eq(model_create(&m, &d, be, BATCH, SEQ, pol, 1, &err), 0, "%s: %s", what, err.msg);
        for (int c = 0; c < MEM_COUNT; c++)
            cr_assert_eq(p.bytes[c], be->mem.peak[c], "%s: %s planned %llu, measured %llu", what,
                         mem_category_name((MemCategory)c), (unsigned long long)p.bytes[c],
                         (unsigned long long)be->mem.peak[c]);
        /* frozen from the definition: the units, the rest in the act dtype, and at most 15 bytes of
         * alignment before each 4-bit tensor */
        const ParamLayout *bl = &m->base_layout;
        uint64_t units = 0, rest = 0, max_unit = 0, max_unit_bytes = 0;
        int n4 = 0;
        for (int i = 0; i < bl->n_tensors; i++) {
            const ParamTensor *t = &bl->tensors[i];
            if (!linear_weight(t)) {
                rest += t->numel * (a == GT_BF16 ? 2 : 4);
                continue;
            }
            n4++;
            for (int b = 0; b < t->spec->n_blocks; b++) {
                char name[128];
                int64_t row0, rows;
                arch_block_name(t, b, name, sizeof name, &d, &row0, &rows);
                const uint64_t ub = unit_bytes_by_definition(rows * t->shape[1], 64, nested);
                units += ub;
                if ((uint64_t)(rows * t->shape[1]) > max_unit) max_unit = (uint64_t)(rows * t->shape[1]);
                if (ub > max_unit_bytes) max_unit_bytes = ub;
            }
        }
        const uint64_t frozen = be->mem.peak[MEM_FROZEN];
        cr_assert(frozen >= units + rest && frozen <= units + rest + 15 * (uint64_t)n4, "%s: frozen %llu, the units "
                  "%llu and the rest %llu", what, (unsigned long long)frozen, (unsigned long long)units,
                  (unsigned long long)rest);
        /* the host unit buffer: the largest unit's fp32 values and bytes */
        ModelDesc plain = d;
        plain.quant = (BaseQuant){0};
        MemPlan pp;
        cr_assert_eq(plan_memory(&pp, &plain, BATCH, 1, 1, SEQ, pol, false, a), 0);
        const uint64_t host = p.bytes[MEM_HOST_STAGING] - pp.bytes[MEM_HOST_STAGING];
        cr_assert(host >= max_unit * 4 + max_unit_bytes && host <= max_unit * 4 + max_unit_bytes + 64,
                  "%s: the unit buffer %llu, a unit's values and bytes %llu", what, (unsigned long long)host,
                  (unsigned long long)(max_unit * 4 + max_unit_bytes));
        model_free(m);
        for (int c = 0; c < MEM_COUNT; c++)
            cr_assert_eq(be->mem.current[c], 0, "%s: leaked %s", what, mem_category_name((MemCategory)c));
        backend_close(be);
        cases++;
    }
    cr_log_info("nf4 storage plan: %d configurations, planned == measured", cases);
}

static void write_text(char *path, size_t cap, const char *tmpl, const char *text) {
    snprintf(path, cap, "%s", tmpl);
    const int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/* the run config's text through config_load and lora_configure on d: 0, or -1 with err */
static int configure(ModelDesc *d, const char *lora_lines, const char *top, GtError *err) {
    char path[64], text[1024];
    snprintf(text, sizeof text, "model: m\ndata:\n  train: t\noutput_dir: o\n%s%s%s", top, lora_lines ? "lora:\n" : "",
             lora_lines ? lora_lines : "");
    write_text(path, sizeof path, "/tmp/gtrain-nf4-XXXXXX", text);
    RunConfig *cfg = calloc(1, sizeof *cfg);
    int rc = config_load(cfg, path, NULL, 0, err);
    unlink(path);
    PeftConfig pc;
    if (rc == 0) rc = lora_configure(d, &pc, cfg, err);
    free(cfg);
    return rc;
}

static void expect_refused(int rc, const GtError *err, const char *a, const char *b, const char *c) {
    cr_assert_eq(rc, -1, "accepted, expected a refusal naming %s", a);
    cr_assert_eq(err->code, GT_EXIT_BAD_INPUT, "code %d: %s", err->code, err->msg);
    cr_assert(strstr(err->msg, a) && (!b || strstr(err->msg, b)) && (!c || strstr(err->msg, c)) && !strchr(err->msg, '\n'),
              "expected one line naming %s / %s / %s: %s", a, b ? b : "", c ? c : "", err->msg);
}

Test(nf4_store, the_keys_reach_the_description_and_bad_values_are_refused) {
    GtError err = {0};
    ModelDesc d = lora_fix_base(true, 2);
    cr_assert_eq(configure(&d, "  r: 4\n  quantize_base: nf4\n", "", &err), 0, "%s", err.msg);
    cr_assert(d.quant.nf4 && d.quant.blocksize == 64 && !d.quant.nested && !d.quant.prequantized);
    d = lora_fix_base(true, 2);
    cr_assert_eq(configure(&d, "  r: 4\n  quantize_base: nf4\n  bnb_4bit_use_double_quant: true\n"
                               "  bnb_4bit_compute_dtype: bfloat16\n  bnb_4bit_quant_type: nf4\n",
                           "precision: bf16\n", &err), 0, "%s", err.msg);
    cr_assert(d.quant.nf4 && d.quant.nested);
    d = lora_fix_base(true, 2);
    cr_assert_eq(configure(&d, "  r: 4\n", "", &err), 0, "%s", err.msg);
    cr_assert(!d.quant.nf4, "quantize_base defaults to none");

    d = lora_fix_base(true, 2);
    expect_refused(configure(&d, "  r: 4\n  quantize_base: nf4\n  bnb_4bit_quant_type: fp4\n", "", &err), &err,
                   "lora.bnb_4bit_quant_type", "nf4", "fp4");
    expect_refused(configure(&d, "  r: 4\n  quantize_base: int8\n", "", &err), &err, "lora.quantize_base", "int8", NULL);
    d = lora_fix_base(true, 2);
    expect_refused(configure(&d, "  r: 4\n  quantize_base: nf4\n  bnb_4bit_compute_dtype: bfloat16\n", "", &err), &err,
                   "lora.bnb_4bit_compute_dtype", "float32", "bfloat16");
    d = lora_fix_base(true, 2);
    expect_refused(configure(&d, "  r: 4\n  quantize_base: nf4\n  base_dtype: bf16\n", "", &err), &err,
                   "lora.base_dtype", "auto", "bf16");
    /* a bitsandbytes base (config.json's quantization_config) */
    ModelDesc q = lora_fix_base(true, 2);
    snprintf(q.path, sizeof q.path, "/models/x-bnb-4bit/config.json");
    q.quant = (BaseQuant){true, 64, true, true};
    d = q;
    cr_assert_eq(configure(&d, "  r: 4\n", "", &err), 0, "%s", err.msg);
    cr_assert(d.quant.nf4 && d.quant.prequantized && d.quant.nested);
    d = q;
    expect_refused(configure(&d, "  r: 4\n  quantize_base: nf4\n", "", &err), &err, "lora.quantize_base",
                   "already 4-bit (bitsandbytes nf4): it loads as it is; expected lora.quantize_base: none",
                   "/models/x-bnb-4bit/config.json");
    d = q;
    expect_refused(configure(&d, NULL, "", &err), &err, "model", "lora: section", "/models/x-bnb-4bit/config.json");
    d = q;
    expect_refused(configure(&d, "  r: 4\n  base_dtype: fp32\n", "", &err), &err, "lora.base_dtype", "x-bnb-4bit", NULL);
}

static const char *LLAMA_JSON =
    "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16, "
    "\"intermediate_size\": 24, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
    "\"vocab_size\": 32, \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-5%s}";

static int parse_with(ModelDesc *d, const char *qc, GtError *err) {
    char json[2048], extra[1024];
    snprintf(extra, sizeof extra, "%s%s", qc ? ", \"quantization_config\": " : "", qc ? qc : "");
    snprintf(json, sizeof json, LLAMA_JSON, extra);
    return model_desc_parse(d, json, strlen(json), "dir/config.json", err);
}

Test(nf4_store, config_json_quantization_config) {
    ModelDesc d;
    GtError err = {0};
    cr_assert_eq(parse_with(&d, NULL, &err), 0, "%s", err.msg);
    cr_assert(!d.quant.nf4);
    cr_assert_eq(parse_with(&d, "null", &err), 0, "%s", err.msg);
    cr_assert(!d.quant.nf4);
    cr_assert_eq(parse_with(&d, "{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, \"load_in_8bit\": false, "
                                "\"bnb_4bit_quant_type\": \"nf4\", \"bnb_4bit_use_double_quant\": true, "
                                "\"bnb_4bit_compute_dtype\": \"float32\", \"llm_int8_skip_modules\": null}", &err), 0,
                 "%s", err.msg);
    cr_assert(d.quant.nf4 && d.quant.prequantized && d.quant.nested && d.quant.blocksize == 64);
    cr_assert_eq(parse_with(&d, "{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, "
                                "\"bnb_4bit_quant_type\": \"nf4\"}", &err), 0, "%s", err.msg);
    cr_assert(d.quant.nf4 && !d.quant.nested);
    static const struct {
        const char *qc, *key, *found;
    } bad[] = {
        {"{\"quant_method\": \"bitsandbytes\", \"load_in_8bit\": true}", "quantization_config.load_in_8bit", "true"},
        {"{\"quant_method\": \"gptq\", \"bits\": 4}", "quantization_config.quant_method", "gptq"},
        {"{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"fp4\"}",
         "quantization_config.bnb_4bit_quant_type", "fp4"},
        {"{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true}", "quantization_config.bnb_4bit_quant_type",
         "default fp4"},
        {"{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": false}", "quantization_config.load_in_4bit", "false"},
        {"[1]", "quantization_config", "array"},
        {"{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": \"yes\"}", "quantization_config.load_in_4bit", NULL},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        err = (GtError){0};
        expect_refused(parse_with(&d, bad[k].qc, &err), &err, "dir/config.json", bad[k].key, bad[k].found);
    }
}

/* through the binary: `gtrain plan` on a bitsandbytes 4-bit directory's config.json exits 2 with one
 * line naming the file and key for each refusal, and plans the 4-bit base otherwise */
Test(nf4_store, gtrain_plan_on_a_4bit_config, .timeout = 60) {
    const char *bin = getenv("GTRAIN_BIN");
    cr_assert(bin, "GTRAIN_BIN is not set");
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gtrain_nf4");
    char extra[512];
    snprintf(extra, sizeof extra, ", \"quantization_config\": {\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, "
             "\"bnb_4bit_quant_type\": \"nf4\", \"bnb_4bit_use_double_quant\": true}");
    char json[2048];
    snprintf(json, sizeof json, LLAMA_JSON, extra);
    memcpy(strstr(json, "\"vocab_size\": 32"), "\"vocab_size\":256", 16); /* byte-level text: 256 */
    test_write_file(test_join(dir, "config.json"), json, strlen(json));
    static const struct {
        const char *lora, *key, *says;
    } cases[] = {
        {"", "model", "found full fine-tuning"},
        {"lora:\n  r: 4\n  quantize_base: nf4\n", "lora.quantize_base", "already 4-bit (bitsandbytes nf4)"},
        {"lora:\n  r: 4\n  base_dtype: bf16\n", "lora.base_dtype", "expected auto with a 4-bit base"},
        {"lora:\n  r: 4\n", NULL, "linear weights 4-bit nf4, blocks of 64, double quant, as the checkpoint holds them"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char yaml[1024];
        snprintf(yaml, sizeof yaml, "model: %s\ndata:\n  train: %s\n  seq_len: 8\noutput_dir: %s\n"
                 "per_device_train_batch_size: 1\nmemory_limit: 1GiB\n%s", test_join(dir, "config.json"), test_join(dir, "config.json"),
                 test_join(dir, "out"), cases[k].lora);
        test_write_file(test_join(dir, "run.yaml"), yaml, strlen(yaml));
        char *out = test_sh_output(true, "'%s' plan --config '%s'; echo \"exit=$?\"", bin, test_join(dir, "run.yaml"));
        if (cases[k].key) {
            cr_assert(strstr(out, "exit=2") && strstr(out, cases[k].key) && strstr(out, cases[k].says) &&
                      count_lines(out) == 2, "case %zu: expected one line naming %s (%s), exit 2:\n%s", k, cases[k].key,
                      cases[k].says, out);
        } else {
            cr_assert(strstr(out, "exit=0") && strstr(out, cases[k].says), "case %zu: expected the plan:\n%s", k, out);
        }
        free(out);
    }
    test_scratch_remove(dir);
}

/* ---------------------------------------------------------------- a bitsandbytes directory */

/* tensor `name`'s raw bytes in a .safetensors file, read here from its header (8-byte length, the
 * JSON, then the data), not through gtrain's readers; NULL when absent */
static uint8_t *st_raw(const char *path, const char *name, size_t *len) {
    size_t n = 0;
    uint8_t *file = (uint8_t *)slurp(path, &n);
    uint64_t hl = 0;
    memcpy(&hl, file, 8);
    cJSON *h = cJSON_ParseWithLength((const char *)file + 8, (size_t)hl);
    cr_assert(h, "%s: header", path);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, name);
    uint8_t *out = NULL;
    if (t) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
        const size_t a = (size_t)cJSON_GetArrayItem(o, 0)->valuedouble, b = (size_t)cJSON_GetArrayItem(o, 1)->valuedouble;
        *len = b - a;
        out = malloc(*len ? *len : 1);
        memcpy(out, file + 8 + hl + a, *len);
    }
    cJSON_Delete(h);
    free(file);
    return out;
}

/* transformers + bitsandbytes write a tiny Llama 4-bit (nf4, double quant or not) by save_pretrained;
 * gtrain loads it into a 4-bit base: every unit's packed codes, absmax, nested absmax and offset
 * are the file's bytes, unchanged, and nothing is quantized again (no warning) */
static void check_bnb_dir(bool nested) {
    test_require_refs();
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gtrain_bnb");
    free(test_sh_output(true, PY " -c \"import torch, warnings, logging; warnings.filterwarnings('ignore'); "
                        "logging.disable(logging.WARNING); from transformers import LlamaConfig, AutoModelForCausalLM, "
                        "BitsAndBytesConfig; cfg = LlamaConfig(hidden_size=16, intermediate_size=40, num_hidden_layers=2, "
                        "num_attention_heads=4, num_key_value_heads=2, vocab_size=64, max_position_embeddings=32); "
                        "torch.manual_seed(3); m = AutoModelForCausalLM.from_config(cfg); m.save_pretrained('%s/base'); "
                        "q = AutoModelForCausalLM.from_pretrained('%s/base', quantization_config=BitsAndBytesConfig("
                        "load_in_4bit=True, bnb_4bit_quant_type='nf4', bnb_4bit_use_double_quant=%s, "
                        "bnb_4bit_compute_dtype=torch.float32), device_map='cpu', dtype=torch.float32); "
                        "q.save_pretrained('%s/bnb')\" >/dev/null", dir, dir, nested ? "True" : "False", dir));
    char bnb[300];
    snprintf(bnb, sizeof bnb, "%s/bnb", dir);
    ModelDesc d;
    GtError err = {0};
    cr_assert_eq(model_desc_load(&d, bnb, &err), 0, "%s", err.msg);
    cr_assert(d.quant.nf4 && d.quant.prequantized && d.quant.nested == nested);
    d.adapter.r = 4, d.adapter.targets = LORA_FIX_LLAMA_ALL, d.adapter.scale = 2.0, d.adapter.init = LORA_INIT_TRUE;
    Backend *be = test_backend_open();
    Model *m = NULL;
    cr_assert_eq(model_create(&m, &d, be, 1, 8, recompute_policy(false, 1, false, d.n_layer), 1, &err), 0, "%s", err.msg);
    cr_assert_eq(checkpoint_load_weights(m, bnb, &err), 0, "%s", err.msg);
    const char *st = test_join(bnb, "model.safetensors");
    const ParamLayout *bl = &m->base_layout;
    int units = 0;
    for (int i = 0; i < bl->n_tensors; i++) {
        const ParamTensor *t = &bl->tensors[i];
        if (!linear_weight(t)) continue;
        cr_assert_eq(t->dtype, GT_NF4, "%s", t->name);
        for (int b = 0; b < t->spec->n_blocks; b++) {
            char name[128], key[200];
            int64_t row0, rows;
            arch_block_name(t, b, name, sizeof name, &d, &row0, &rows);
            Nf4Format f;
            size_t at, e0;
            arch_nf4_unit(t, &d, b, &f, &at, &e0);
            Nf4Layout l;
            nf4_layout(&f, &l);
            uint8_t *unit = malloc(l.bytes);
            cr_assert_eq(be->ops->to_host(be, unit, (const char *)m->base + at, l.bytes, &err), 0, "%s", err.msg);
            size_t n = 0;
            uint8_t *w = st_raw(st, name, &n);
            cr_assert(w && n == (size_t)(f.numel + 1) / 2, "%s: packed weight of %zu bytes", name, n);
            cr_assert(memcmp(unit, w, n) == 0, "%s: packed codes differ from the file's", name);
            free(w);
            snprintf(key, sizeof key, "%s.absmax", name);
            w = st_raw(st, key, &n);
            cr_assert(w && n == (size_t)l.nblocks * (nested ? 1 : 4), "%s: %zu bytes", key, n);
            cr_assert(memcmp(unit + l.absmax, w, n) == 0, "%s differs from the file's", key);
            free(w);
            if (nested) {
                snprintf(key, sizeof key, "%s.nested_absmax", name);
                w = st_raw(st, key, &n);
                cr_assert(w && n == (size_t)l.nnested * 4, "%s: %zu bytes", key, n);
                cr_assert(memcmp(unit + l.nested_absmax, w, n) == 0, "%s differs from the file's", key);
                free(w);
                snprintf(key, sizeof key, "%s.quant_state.bitsandbytes__nf4", name);
                w = st_raw(st, key, &n);
                cJSON *qs = cJSON_ParseWithLength((const char *)w, n);
                const cJSON *off = cJSON_GetObjectItemCaseSensitive(qs, "nested_offset");
                cr_assert(cJSON_IsNumber(off), "%s: nested_offset", key);
                float want = (float)off->valuedouble, got;
                memcpy(&got, unit + l.offset, sizeof got);
                cr_assert(memcmp(&got, &want, sizeof got) == 0, "%s: offset %.9g, the file's %.9g", name, got, want);
                cJSON_Delete(qs);
                free(w);
            }
            free(unit);
            units++;
        }
    }
    cr_assert_eq(units, 14, "a 2-layer Llama has 14 quantized HF tensors, %d compared", units);
    /* a base of another format (the other nesting): each unit dequantized and quantized again as
     * the base's: what it reads back is nf4.h's quantize of the file's values, dequantized */
    float *v = malloc(bl->total * sizeof *v), *got = malloc(bl->total * sizeof *got);
    cr_assert_eq(model_download_base(m, 0, v, bl->total, &err), 0, "%s", err.msg);
    ModelDesc d2 = d;
    d2.quant.nested = !nested;
    Model *m2 = NULL;
    cr_assert_eq(model_create(&m2, &d2, be, 1, 8, recompute_policy(false, 1, false, d.n_layer), 1, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(checkpoint_load_weights(m2, bnb, &err), 0, "%s", err.msg);
    cr_assert_eq(model_download_base(m2, 0, got, bl->total, &err), 0, "%s", err.msg);
    float *want = dequantized(&d2, bl, v);
    cr_assert(memcmp(got, want, bl->total * sizeof *got) == 0, "nested %d file into a nested %d base: not the file's "
              "values quantized again", nested, !nested);
    free(want), free(v), free(got);
    model_free(m2);
    model_free(m);
    backend_close(be);
    test_scratch_remove(dir);
}

Test(nf4_store, a_bitsandbytes_directory_loads_its_units_unchanged, .timeout = 300) {
    check_bnb_dir(true);
    check_bnb_dir(false);
}
