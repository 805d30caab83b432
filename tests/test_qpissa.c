/* test_qpissa.c - QPiSSA (PiSSA on a 4-bit NF4 base):
 * - the quantization error the PiSSA paper reports, measured (tests/qerr.c: naive double-precision
 *   norms over svd.h's pissa_init and nf4.h's round trip) on matrices with a decaying spectrum:
 *   quantizing the residual W - s B A loses less than quantizing W, at every rank;
 * - the hook (lora_qpissa_arm) on a tiny Llama: the adapter is bit for bit the one PiSSA makes on the
 *   same full-precision base unquantized; the 4-bit base holds nf4(W - s B A) with the residual formed
 *   here in double from that adapter (rounded once, svd.h's rule) and quantized by nf4.h; the saved
 *   rank-2r conversion on the ORIGINAL base gives W_res + s B A of the trained adapter (double,
 *   here); a resume's rebuild (the hook from the conversion) gives the same base bytes and adapters;
 * - on a bitsandbytes base (no full-precision W): PiSSA of its dequantized W, the residual quantized
 *   again (PEFT's behaviour there). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "checkpoint.h"
#include "hf_weights.h"
#include "lora.h"
#include "lora_fixture.h"
#include "model.h"
#include "nf4.h"
#include "qerr.h"
#include "recompute.h"
#include "test_backend_select.h"
#include "test_util.h"

/* U diag(k^-p) V^T, p 0.5 and 1, 512 x 512 and 1024 x 4096 (an MLP's down_proj shape, quartered),
 * r 16 .. 128 (lora_alpha 16, blocksize 64, double quantization as QLoRA's recipe; the exact SVD on
 * 512 x 512, pissa_niter_4 on 1024 x 4096 to keep the test short: bench_nf4 error prints the exact one):
 * every row's QPiSSA error below its QLoRA error; pissa_init's own (unquantized) error far below
 * both, so the difference is the quantization's. The table goes to the log (README's table). */
Test(qpissa, quantization_error_below_qlora_on_decaying_spectra, .timeout = 600) {
    const int shapes[][2] = {{512, 512}, {1024, 4096}}, ranks[] = {16, 32, 64, 128};
    const double powers[] = {0.5, 1.0};
    for (int sh = 0; sh < 2; sh++)
        for (int p = 0; p < 2; p++) {
            int rows = shapes[sh][0], cols = shapes[sh][1];
            GtError err = {0};
            float *W = qerr_spectrum_matrix(rows, cols, powers[p], 1000 + 10 * sh + p, &err);
            cr_assert(W, "%s", err.msg);
            for (int k = 0; k < 4; k++) {
                QerrRow q;
                cr_assert_eq(qerr_measure(W, rows, cols, ranks[k], 16, sh ? 4 : -1, 64, true, &q, &err), 0, "%s", err.msg);
                cr_log_info("qerr %dx%d s_k=k^-%.1f %s r %3d: ||W|| %.4f  QLoRA %.5f  QPiSSA %.5f  (%.1f%% less)  unquantized %.2g",
                            rows, cols, powers[p], sh ? "niter 4" : "exact", ranks[k], q.w, q.qlora, q.qpissa, 100 * (1 - q.qpissa / q.qlora), q.exact);
                cr_expect(q.qpissa < q.qlora, "%dx%d k^-%.1f r %d: QPiSSA %.6g not below QLoRA %.6g", rows, cols, powers[p],
                          ranks[k], q.qpissa, q.qlora);
                cr_expect(q.qlora > 0 && q.exact < 1e-3 * q.qpissa, "%dx%d r %d: unquantized error %.3g vs %.3g", rows, cols,
                          ranks[k], q.exact, q.qpissa);
            }
            free(W);
        }
}

/* ---- the hook on a model ---- */

enum { QR = 3, QL = 2 };
static const double QALPHA = 6.0;

typedef struct {
    Backend *be;
    Model *m;
} QRun;

static QRun qrun_open(const ModelDesc *d) {
    QRun r = {test_backend_open(), NULL};
    GtError err = {0};
    cr_assert_eq(model_create(&r.m, d, r.be, 1, 4, recompute_policy(false, 1, false, d->n_layer), 7, &err), 0, "%s",
                 err.msg);
    return r;
}

static void qrun_close(QRun *r) {
    model_free(r->m);
    backend_close(r->be);
}

/* the base's values: normal(0, 0.2), norm weights around 1 (the test's own generator) */
static float *qbase(const ParamLayout *bl) {
    float *h = malloc(bl->total * sizeof *h);
    cr_assert(h);
    uint64_t s = 31;
    for (int i = 0; i < bl->n_tensors; i++) {
        const ParamTensor *t = &bl->tensors[i];
        const bool norm = t->ndim == 1;
        for (size_t k = 0; k < t->numel; k++) h[t->offset + k] = (float)((norm ? 1.0 : 0.0) + 0.2 * lora_fix_rng_normal(&s));
    }
    return h;
}

static void upload(Model *m, const float *h) {
    GtError err = {0};
    float *tmp = malloc(m->base_layout.total * sizeof *tmp);
    cr_assert(tmp);
    memcpy(tmp, h, m->base_layout.total * sizeof *tmp);
    cr_assert_eq(model_upload_base(m, 0, tmp, m->base_layout.total, &err), 0, "%s", err.msg);
    free(tmp);
}

static float *host_copy(Backend *be, const void *src, size_t n) {
    GtError err = {0};
    float *h = malloc(n * sizeof *h);
    cr_assert(h);
    cr_assert_eq(be->ops->to_host(be, h, src, n * sizeof *h, &err), 0, "%s", err.msg);
    return h;
}

static float *download(Model *m) {
    GtError err = {0};
    float *h = malloc(m->base_layout.total * sizeof *h);
    cr_assert(h);
    cr_assert_eq(model_download_base(m, 0, h, m->base_layout.total, &err), 0, "%s", err.msg);
    return h;
}

static PeftConfig qpeft(const ModelDesc *d) {
    PeftConfig pc;
    peft_config_defaults(&pc);
    pc.r = QR;
    pc.lora_alpha = QALPHA;
    bool mask[PEFT_MODULE_COUNT];
    lora_targets_mask(d, mask);
    peft_config_set_targets(&pc, mask);
    snprintf(pc.init, sizeof pc.init, "pissa");
    return pc;
}

/* adapter tensor of (layer, site) in layout l: A [r, in] (part 0) or B [rows, r] (part 1) */
static const float *part_of(const Model *m, const float *params, int l, const LoraSite *s, int part) {
    return params + m->layout.tensors[adapter_tensor(&m->ad, m->ad.idx[l][s->module], part)].offset;
}

/* fl32(W - s B A), the product and the difference in double (svd.h's documented rule) */
static void residual(const float *W, const float *A, const float *B, int rows, int in, double sc, float *out) {
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < in; c++) {
            double p = 0;
            for (int j = 0; j < QR; j++) p += (double)B[i * QR + j] * A[j * in + c];
            out[i * in + c] = (float)((double)W[i * in + c] - sc * p);
        }
}

Test(qpissa, hook_adapter_is_pissa_base_is_quantized_residual_conversion_and_rebuild_exact, .timeout = 120) {
    ModelDesc dp = lora_fix_desc(true, QL, QR, QALPHA, LORA_FIX_LLAMA_ALL, false, 0.0, LORA_INIT_TRUE), dq = dp;
    dq.quant = (BaseQuant){.nf4 = true, .blocksize = 64, .nested = true};
    const double sc = lora_fix_scaling(QALPHA, QR, false);
    const PeftConfig pc = qpeft(&dp);
    char dir[128];
    test_scratch_make(dir, sizeof dir, "gt_qpissa");
    GtError err = {0};

    /* PiSSA on the unquantized base (fp32), and QPiSSA through the hook on the same values */
    QRun p = qrun_open(&dp), q = qrun_open(&dq);
    float *W = qbase(&p.m->base_layout);
    upload(p.m, W);
    lora_set_run(p.m, &pc, test_join(dir, "init_p"));
    cr_assert_eq(lora_pissa_init(p.m, -1, 11, true, &err), 0, "%s", err.msg);
    cr_assert_eq(lora_qpissa_arm(q.m, -1, 11, NULL, &err), 0, "%s", err.msg);
    upload(q.m, W);
    lora_qpissa_disarm(q.m);
    cr_assert(lora_qpissa_made(q.m), "the hook did not make every adapter");
    lora_set_run(q.m, &pc, test_join(dir, "init_q"));
    cr_assert_eq(lora_pissa_init(q.m, -1, 11, true, &err), 0, "%s", err.msg);

    const size_t np = p.m->layout.total;
    float *ap = host_copy(p.be, p.m->params, np), *aq = host_copy(q.be, q.m->params, np);
    cr_assert(memcmp(ap, aq, np * sizeof *ap) == 0, "QPiSSA's adapter is not the unquantized PiSSA's");
    char *fp = test_sh_output(false, "cmp '%s/init_p/adapter_model.safetensors' '%s/init_q/adapter_model.safetensors' && echo same",
                              dir, dir);
    cr_assert(strstr(fp, "same"), "the initial adapters' files differ");
    free(fp);

    /* the 4-bit base: nf4(fl32(W - s B A)) per unit, formed here */
    float *bq = download(q.m), *bp = download(p.m);
    int units = 0;
    for (int l = 0; l < QL; l++)
        for (int k = 0; k < q.m->ad.n_sites; k++) {
            const LoraSite *s = &q.m->ad.sites[k];
            const ParamTensor *bt = &q.m->base_layout.tensors[param_layout_role(&q.m->base_layout, l, s->role)];
            const size_t off = bt->offset + (size_t)s->row0 * (size_t)s->in, n = (size_t)(s->rows * s->in);
            float *res = malloc(n * sizeof *res), *want = malloc(n * sizeof *want);
            cr_assert(res && want);
            residual(W + off, part_of(p.m, ap, l, s, 0), part_of(p.m, ap, l, s, 1), (int)s->rows, (int)s->in, sc, res);
            cr_assert(memcmp(res, bp + off, n * sizeof *res) == 0, "layer %d %s: PiSSA's residual is not fl32(W - sBA)", l,
                      peft_module_path(s->module));
            Nf4Format f = {.numel = (int64_t)n, .blocksize = 64, .nested = true};
            void *unit = malloc(nf4_bytes(&f));
            cr_assert(unit);
            nf4_quantize(&f, res, unit);
            nf4_dequantize_f32(&f, unit, 0, (int64_t)n, want);
            cr_assert(memcmp(want, bq + off, n * sizeof *want) == 0, "layer %d %s: the 4-bit base is not nf4(W - sBA)", l,
                      peft_module_path(s->module));
            free(res), free(want), free(unit);
            units++;
        }
    cr_assert_eq(units, QL * 7);

    /* "train": move the adapters; the saved rank-2r conversion on the original W gives W_res + s B A */
    float *t = malloc(np * sizeof *t);
    cr_assert(t);
    uint64_t g = 5;
    for (size_t k = 0; k < np; k++) t[k] = aq[k] + (float)(0.05 * lora_fix_rng_normal(&g));
    cr_assert_eq(q.be->ops->to_device(q.be, q.m->params, t, np * sizeof *t, &err), 0, "%s", err.msg);
    model_params_changed(q.m);
    const char *saved = test_join(dir, "saved");
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", saved);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(lora_save_adapter(saved, q.m, false, &err), 0, "%s", err.msg);
    HfWeights *hw = NULL;
    cr_assert_eq(hf_weights_open(&hw, test_join(saved, "adapter_model.safetensors"), &err), 0, "%s", err.msg);
    double worst = 0;
    for (int l = 0; l < QL; l++)
        for (int k = 0; k < q.m->ad.n_sites; k++) {
            const LoraSite *s = &q.m->ad.sites[k];
            const int rows = (int)s->rows, in = (int)s->in, ia = q.m->ad.idx[l][s->module];
            const ParamTensor *bt = &q.m->base_layout.tensors[param_layout_role(&q.m->base_layout, l, s->role)];
            const float *w = W + bt->offset + (size_t)s->row0 * (size_t)in;
            float *A2 = malloc(sizeof(float) * 2 * QR * in), *B2 = malloc(sizeof(float) * rows * 2 * QR);
            cr_assert(A2 && B2);
            const char *names[2] = {q.m->layout.tensors[ia].name, q.m->layout.tensors[adapter_tensor(&q.m->ad, ia, PEFT_PART_B)].name};
            float *dst[2] = {A2, B2};
            for (int part = 0; part < 2; part++) {
                const int i = hf_weights_find(hw, names[part]);
                cr_assert(i >= 0, "%s: no %s", saved, names[part]);
                cr_assert_eq(hf_weights_read_f32(hw, i, dst[part], (size_t)(part ? rows * 2 * QR : 2 * QR * in), &err), 0,
                             "%s", err.msg);
            }
            const float *A = part_of(q.m, t, l, s, 0), *B = part_of(q.m, t, l, s, 1), *A0 = part_of(p.m, ap, l, s, 0),
                        *B0 = part_of(p.m, ap, l, s, 1);
            for (int i = 0; i < rows; i++)
                for (int c = 0; c < in; c++) {
                    double conv = w[i * in + c], want = w[i * in + c];
                    for (int j = 0; j < 2 * QR; j++) conv += sc * (double)B2[i * 2 * QR + j] * A2[j * in + c];
                    for (int j = 0; j < QR; j++)
                        want += sc * ((double)B[i * QR + j] * A[j * in + c] - (double)B0[i * QR + j] * A0[j * in + c]);
                    worst = fmax(worst, fabs(conv - want));
                }
            free(A2), free(B2);
        }
    hf_weights_close(hw);
    cr_assert(worst <= 1e-12, "the conversion on the original W: off by %.3g from W_res + sBA", worst);

    /* a resume: the base loads plain, the checkpoint's adapters load, the hook rebuilds the residual
     * from the conversion: the same base bytes and adapters as the run that saved it */
    QRun r = qrun_open(&dq);
    upload(r.m, W);
    lora_set_run(r.m, &pc, test_join(dir, "init_q"));
    cr_assert_eq(lora_load_adapter(r.m, saved, &err), 0, "%s", err.msg);
    cr_assert_eq(lora_qpissa_arm(r.m, -1, 11, saved, &err), 0, "%s", err.msg);
    upload(r.m, W);
    lora_qpissa_disarm(r.m);
    float *br = download(r.m), *ar = host_copy(r.be, r.m->params, np);
    cr_assert(memcmp(br, bq, q.m->base_layout.total * sizeof *br) == 0, "the rebuilt 4-bit base differs");
    cr_assert(memcmp(ar, t, np * sizeof *ar) == 0, "the resumed adapters differ");
    cr_log_info("qpissa: adapter = PiSSA's bit for bit; base = nf4(W - sBA) in %d units; conversion on W within %.2g; "
                "rebuild bit for bit", units, worst);
    free(W), free(ap), free(aq), free(bq), free(bp), free(t), free(br), free(ar);
    qrun_close(&p), qrun_close(&q), qrun_close(&r);
    test_scratch_remove(dir);
}

/* QPiSSA on a bitsandbytes base (transformers' save_pretrained of a 4-bit tiny Llama, double quant):
 * the full-precision W does not exist, so PiSSA runs on its dequantized W, as PEFT does there, and the
 * residual is quantized again: the adapter equals PiSSA's on an fp32 base holding those dequantized
 * values (read through hf_weights, bitsandbytes' dequantize_4bit bit for bit), and the 4-bit base holds
 * nf4(fl32(deq(W) - s B A)) formed here. */
Test(qpissa, on_a_bitsandbytes_base_pissa_takes_the_dequantized_w, .timeout = 300) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT is not set (run through make test)");
    test_require_refs();
    char dir[128];
    test_scratch_make(dir, sizeof dir, "gt_qpissa_bnb");
    free(test_sh_output(false, "cd '%s' && " PY " '%s/tests/tools/bnb_qlora.py' make '%s/tests/fixtures/hf_configs/tiny-llama.json' "
                        ". --seed 7 --r 4 --alpha 8 --double-quant 1", dir, root, root));
    const char *bnb = test_join(dir, "bnb");
    ModelDesc dq, dp;
    PeftConfig pc;
    GtError err = {0};
    cr_assert_eq(model_desc_load(&dq, bnb, &err), 0, "%s", err.msg);
    cr_assert(dq.quant.nf4 && dq.quant.prequantized);
    cr_assert_eq(lora_desc_from_adapter(&dq, test_join(dir, "adapter"), &pc, &err), 0, "%s", err.msg);
    snprintf(pc.init, sizeof pc.init, "pissa");
    dp = dq;
    dp.quant = (BaseQuant){0};
    QRun q = qrun_open(&dq), p = qrun_open(&dp);
    cr_assert_eq(lora_qpissa_arm(q.m, -1, 3, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(checkpoint_load_weights(q.m, bnb, &err), 0, "%s", err.msg);
    lora_qpissa_disarm(q.m);
    cr_assert(lora_qpissa_made(q.m), "the hook did not make every adapter");
    /* the fp32 model: every tensor as hf_weights reads it (the 4-bit ones dequantized) */
    cr_assert_eq(checkpoint_load_weights(p.m, bnb, &err), 0, "%s", err.msg);
    float *W = download(p.m);
    lora_set_run(p.m, &pc, test_join(dir, "init_p"));
    cr_assert_eq(lora_pissa_init(p.m, -1, 3, false, &err), 0, "%s", err.msg);
    const size_t np = p.m->layout.total;
    float *ap = host_copy(p.be, p.m->params, np), *aq = host_copy(q.be, q.m->params, np), *bq = download(q.m);
    cr_assert(memcmp(ap, aq, np * sizeof *ap) == 0, "the adapter is not PiSSA's of the dequantized W");
    const double sc = q.m->desc.adapter.scale;
    int units = 0;
    for (int l = 0; l < q.m->desc.n_layer; l++)
        for (int k = 0; k < q.m->ad.n_sites; k++) {
            const LoraSite *s = &q.m->ad.sites[k];
            const ParamTensor *bt = &q.m->base_layout.tensors[param_layout_role(&q.m->base_layout, l, s->role)];
            const size_t off = bt->offset + (size_t)s->row0 * (size_t)s->in, n = (size_t)(s->rows * s->in);
            const int r = q.m->desc.adapter.r, in = (int)s->in;
            const float *A = part_of(q.m, aq, l, s, 0), *B = part_of(q.m, aq, l, s, 1);
            float *res = malloc(n * sizeof *res), *want = malloc(n * sizeof *want);
            cr_assert(res && want);
            for (int i = 0; i < (int)s->rows; i++)
                for (int c = 0; c < in; c++) {
                    double pr = 0;
                    for (int j = 0; j < r; j++) pr += (double)B[i * r + j] * A[j * in + c];
                    res[i * in + c] = (float)((double)W[off + (size_t)i * in + c] - sc * pr);
                }
            Nf4Format f = {.numel = (int64_t)n, .blocksize = dq.quant.blocksize, .nested = dq.quant.nested};
            void *unit = malloc(nf4_bytes(&f));
            cr_assert(unit);
            nf4_quantize(&f, res, unit);
            nf4_dequantize_f32(&f, unit, 0, (int64_t)n, want);
            cr_assert(memcmp(want, bq + off, n * sizeof *want) == 0, "layer %d %s: the 4-bit base is not nf4(deq(W) - sBA)",
                      l, peft_module_path(s->module));
            free(res), free(want), free(unit);
            units++;
        }
    cr_log_info("qpissa on a bnb base: adapter = PiSSA of the dequantized W; %d units = nf4(deq(W) - sBA)", units);
    free(W), free(ap), free(aq), free(bq);
    qrun_close(&p), qrun_close(&q);
    test_scratch_remove(dir);
}
