/* lora_io.c - a LoRA model's adapters in and out as PEFT adapter directories (peft.c's files),
 * and PiSSA: the SVD initialisation of the adapters from the loaded base, the rank-2r conversion
 * of what a PiSSA run saves, the rebuilding of its residual base on resume, and QPiSSA's hook that
 * does both on a 4-bit base as it loads (lora.h).
 *
 * The adapters' layout (lora_layout_init) and peft_entries_for's list are both layer-major with the
 * modules in lora_sites' order; the layout is part-major within a layer, so entry e's part p is
 * layout tensor lora_entry_tensor(d, e, p) (lora.h). Everything streams through
 * bounded host buffers: an adapter tensor is r x width. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lora.h"
#include "model_internal.h"
#include "svd.h"

void lora_set_run(Model *m, const PeftConfig *pc, const char *pissa_init_dir) {
    free(m->ad.peft);
    m->ad.peft = gt_xmalloc(sizeof *m->ad.peft);
    *m->ad.peft = *pc;
    free(m->ad.pissa_init_dir);
    m->ad.pissa_init_dir = pissa_init_dir ? gt_xstrdup(pissa_init_dir) : NULL;
}

/* the entries of the model's adapters, in layout order */
static int model_entries(const Model *m, PeftEntry **out) {
    bool mask[PEFT_MODULE_COUNT];
    lora_targets_mask(&m->desc, mask);
    int n = peft_entries_for(&m->desc, mask, out);
    if (lora_parts(&m->desc) * n != m->layout.n_tensors) { /* a module the architecture lacks in the mask: lora_sites skipped it */
        free(*out);
        *out = NULL;
        return -1;
    }
    return n;
}

/* the config the files carry: the run's, or one from the description */
static PeftConfig run_config(const Model *m) {
    PeftConfig pc;
    if (m->ad.peft) return *m->ad.peft;
    peft_config_defaults(&pc);
    pc.r = m->desc.adapter.r;
    pc.lora_alpha = m->desc.adapter.scale * m->desc.adapter.r;
    pc.lora_dropout = m->desc.adapter.dropout;
    pc.use_dora = adapter_kind(&m->desc)->parts->peft_use_dora;
    bool mask[PEFT_MODULE_COUNT];
    lora_targets_mask(&m->desc, mask);
    peft_config_set_targets(&pc, mask);
    return pc;
}

/* float offset in the base of layer l's block that site s adapts */
static size_t block_offset(const Model *m, int l, const LoraSite *s) {
    const ParamTensor *bt = &m->base_layout.tensors[param_layout_role(&m->base_layout, l, s->role)];
    return bt->offset + (size_t)s->row0 * (size_t)s->in;
}

/* the directory an initial PiSSA adapter is written to */
static int make_dir(const char *dir, GtError *err) {
    if (mkdir(dir, 0755) == 0 || errno == EEXIST) return 0;
    return gt_error(err, GT_EXIT_FAILURE, "%s: cannot create: %s", dir, strerror(errno));
}

/* the seed of PiSSA's randomised SVD at layer l's module (lora_pissa_init and the QPiSSA hook) */
static uint64_t pissa_key(uint64_t seed, int l, PeftModule module) {
    return seed ^ ((uint64_t)(l + 1) << 20) ^ (uint64_t)module;
}

/* QPiSSA's hook state (lora_qpissa_arm) */
typedef struct QpissaRun {
    int niter;
    uint64_t seed;
    PeftAdapter *conv; /* residual mode: the rank-2r conversion (A0, B0 its second halves); NULL: PiSSA mode */
    PeftEntry *ent;
    int n_ent;
    bool *done; /* [n_layer * n_sites]: the site's adapter made by the hook from the full-precision W */
    float *a, *b; /* one site's A [r or 2r, in] and B [rows, r or 2r] */
} QpissaRun;

/* the same scale, allowing for the rounding of a converted config's alpha (sqrt(2) alpha / sqrt(2r)) */
static bool same_scale(double a, double b) { return fabs(a - b) <= 1e-12 * fabs(b); }

/* ---------------------------------------------------------------- load */

int lora_load_adapter(Model *m, const char *dir, GtError *err) {
    if (m->desc.adapter.r <= 0) return gt_error(err, GT_EXIT_FAILURE, "%s: the model has no adapters to load into", dir);
    PeftEntry *ent = NULL;
    const int n = model_entries(m, &ent);
    if (n < 0) return gt_error(err, GT_EXIT_FAILURE, "%s: the model's adapters do not match its modules", dir);
    PeftConfig pc;
    PeftAdapter *a = NULL;
    const bool pissa = m->ad.pissa_init_dir != NULL;
    const int r = m->desc.adapter.r, want_r = pissa ? 2 * r : r;
    float *buf = NULL, *w = NULL, *a0 = NULL, *b0 = NULL;
    int rc = -1;
    if (peft_adapter_open(&a, dir, m->desc.arch, ent, n, &pc, err)) goto done;
    if (!pissa) { /* a PiSSA run's checkpoint holds its rank-2r conversion, saved as "true" */
        char cfile[GT_PATH_MAX + 32];
        snprintf(cfile, sizeof cfile, "%s/%s", dir, PEFT_CONFIG_FILE);
        peft_warn_unconverted(&pc, cfile);
    }
    if (pc.r != want_r) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s/%s: r: expected %d (%s), found %d", dir, PEFT_CONFIG_FILE, want_r,
                 pissa ? "twice the run's r: a PiSSA run saves its rank-2r conversion" : "the run's lora.r", pc.r);
        goto done;
    }
    const AdapterParts *kind = adapter_kind(&m->desc)->parts;
    if (peft_kind(&pc) != kind) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s/%s: use_dora: expected %s (the run's lora.use_dora), found %s", dir,
                 PEFT_CONFIG_FILE, kind->peft_use_dora ? "true" : "false", pc.use_dora ? "true" : "false");
        goto done;
    }
    if (!same_scale(peft_scaling(&pc), m->desc.adapter.scale)) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s/%s: lora_alpha: expected the scale %g of the run (lora_alpha / r%s), found "
                 "lora_alpha %g, r %d, use_rslora %s", dir, PEFT_CONFIG_FILE, m->desc.adapter.scale,
                 pc.use_rslora ? " under rslora: / sqrt(r)" : "", pc.lora_alpha, pc.r, pc.use_rslora ? "true" : "false");
        goto done;
    }
    size_t widest = 0;
    for (int e = 0; e < n; e++) {
        const size_t wd = (size_t)(ent[e].in > ent[e].out ? ent[e].in : ent[e].out);
        if (wd > widest) widest = wd;
    }
    buf = gt_xmalloc((size_t)want_r * widest * sizeof *buf);
    const int P = kind->n;
    for (int e = 0; e < n; e++) {
        const ParamTensor *ta = &m->layout.tensors[lora_entry_tensor(&m->desc, e, PEFT_PART_A)],
                          *tb = &m->layout.tensors[lora_entry_tensor(&m->desc, e, PEFT_PART_B)];
        const size_t in = (size_t)ent[e].in, out = (size_t)ent[e].out;
        /* lora_A [want_r, in]: its first r rows */
        if (peft_adapter_read(a, e, false, buf, (size_t)want_r * in, err)) goto done;
        if (m->be->ops->to_device(m->be, m->params + ta->offset, buf, (size_t)r * in * sizeof(float), err)) goto done;
        if (pissa) {
            a0 = gt_xrealloc(a0, (size_t)r * in * sizeof *a0);
            memcpy(a0, buf + (size_t)r * in, (size_t)r * in * sizeof *a0);
        }
        /* lora_B [out, want_r]: the first r columns of each row (in place, front to back) */
        if (peft_adapter_read(a, e, true, buf, out * want_r, err)) goto done;
        if (pissa) {
            b0 = gt_xrealloc(b0, out * r * sizeof *b0);
            for (size_t o = 0; o < out; o++)
                for (int k = 0; k < r; k++) b0[o * r + k] = -buf[o * want_r + r + k];
        }
        for (size_t o = 1; o < out && pissa; o++) memmove(buf + o * r, buf + o * want_r, r * sizeof *buf);
        if (m->be->ops->to_device(m->be, m->params + tb->offset, buf, out * r * sizeof(float), err)) goto done;
        for (int p = PEFT_PART_B + 1; p < P; p++) { /* the kind's further parts as they are (DoRA's magnitude;
                                                       PiSSA is refused with DoRA) */
            const ParamTensor *tp = &m->layout.tensors[lora_entry_tensor(&m->desc, e, p)];
            if (peft_adapter_read(a, e, p, buf, tp->numel, err) ||
                m->be->ops->to_device(m->be, m->params + tp->offset, buf, tp->numel * sizeof(float), err))
                goto done;
        }
        if (pissa) { /* the residual base W - s B0 A0, from the base as loaded */
            LoraSite s;
            lora_module_site(&m->desc, ent[e].module, &s);
            const size_t off = block_offset(m, ent[e].layer, &s);
            w = gt_xrealloc(w, out * in * sizeof *w);
            if (model_download_base(m, off, w, out * in, err) ||
                pissa_residual(w, (int)out, (int)in, r, m->desc.adapter.scale, a0, b0, w, err) ||
                model_upload_base(m, off, w, out * in, err))
                goto done;
        }
    }
    model_params_changed(m);
    rc = 0;
done:
    free(buf), free(w), free(a0), free(b0);
    peft_adapter_close(a);
    free(ent);
    return rc;
}

/* ---------------------------------------------------------------- save */

typedef struct {
    Model *m;
    PeftAdapter *init; /* a PiSSA run's initial adapter (A0, B0), or NULL */
    int r;
    float *tmp;        /* B and B0 rows of one chunk */
} SaveCtx;

/* elements [off, off + n) of entry e's tensor as saved: the adapter, or its rank-2r conversion
 * A2 = [A ; A0] (row blocks), B2 = [B | -B0] (column blocks) */
static int save_fill(void *vctx, int e, int part, uint64_t off, size_t n, float *dst, GtError *err) {
    SaveCtx *c = vctx;
    Model *m = c->m;
    const bool lora_B = part == PEFT_PART_B;
    const ParamTensor *t = &m->layout.tensors[lora_entry_tensor(&m->desc, e, part)];
    if (!c->init || part > PEFT_PART_B) return m->be->ops->to_host(m->be, dst, m->params + t->offset + off, n * sizeof(float), err);
    const uint64_t own = t->numel; /* A: r * in elements of A before A0's; B: see below */
    if (!lora_B) {
        size_t k = off < own ? (size_t)(own - off < n ? own - off : n) : 0;
        if (k && m->be->ops->to_host(m->be, dst, m->params + t->offset + off, k * sizeof(float), err)) return -1;
        return k < n ? peft_adapter_read_range(c->init, e, false, off + k - own, n - k, dst + k, err) : 0;
    }
    /* B2 rows [o0, o0 + rows): chunks are whole rows (the staging is a multiple of 2r) */
    const size_t r = (size_t)c->r, o0 = (size_t)(off / (2 * r)), rows = n / (2 * r);
    float *b = c->tmp, *b0 = c->tmp + rows * r;
    if (m->be->ops->to_host(m->be, b, m->params + t->offset + o0 * r, rows * r * sizeof(float), err) ||
        peft_adapter_read_range(c->init, e, true, o0 * r, rows * r, b0, err))
        return -1;
    for (size_t o = 0; o < rows; o++)
        for (size_t k = 0; k < r; k++) {
            dst[o * 2 * r + k] = b[o * r + k];
            dst[o * 2 * r + r + k] = -b0[o * r + k];
        }
    return 0;
}

int lora_save_adapter(const char *dir, Model *m, bool bf16, GtError *err) {
    PeftEntry *ent = NULL;
    const int n = model_entries(m, &ent);
    if (n < 0) return gt_error(err, GT_EXIT_FAILURE, "%s: the model's adapters do not match its modules", dir);
    PeftConfig pc = run_config(m);
    SaveCtx c = {m, NULL, m->desc.adapter.r, NULL};
    size_t staging = (size_t)1 << 20;
    int rc = -1;
    if (m->ad.pissa_init_dir) {
        PeftConfig ic;
        if (peft_adapter_open(&c.init, m->ad.pissa_init_dir, m->desc.arch, ent, n, &ic, err)) goto done;
        if (ic.r != c.r) {
            gt_error(err, GT_EXIT_BAD_INPUT, "%s/%s: r: expected the run's %d (its initial PiSSA adapter), found %d",
                     m->ad.pissa_init_dir, PEFT_CONFIG_FILE, c.r, ic.r);
            goto done;
        }
        staging = staging / (2 * (size_t)c.r) * 2 * (size_t)c.r;
        if (staging == 0) staging = 2 * (size_t)c.r;
        c.tmp = gt_xmalloc(staging * sizeof *c.tmp);
        /* PEFT's converted config: rank 2r, the same scale, a plain LoRA */
        pc.lora_alpha = pissa_lora_alpha_2r(pc.lora_alpha, pc.use_rslora);
        pc.r = 2 * c.r;
        snprintf(pc.init, sizeof pc.init, "true");
    }
    pc.inference_mode = true; /* what save_pretrained writes */
    rc = peft_adapter_write(dir, &pc, m->desc.arch, ent, n, bf16 ? ST_BF16 : ST_F32, staging, save_fill, &c, err);
done:
    peft_adapter_close(c.init);
    free(c.tmp);
    free(ent);
    return rc;
}

/* ---------------------------------------------------------------- PiSSA */

/* A converted adapter's second halves are the initial adapter: A0 = A2[r:2r], B0 = -B2[:, r:2r]. */
typedef struct {
    PeftAdapter *conv;
    const PeftEntry *ent;
    int r;
    float *tmp; /* rows of B2 */
} InitCtx;

static int init_fill(void *vctx, int e, int part, uint64_t off, size_t n, float *dst, GtError *err) {
    InitCtx *c = vctx;
    const bool lora_B = part == PEFT_PART_B;
    const size_t r = (size_t)c->r;
    if (!lora_B) return peft_adapter_read_range(c->conv, e, false, r * (size_t)c->ent[e].in + off, n, dst, err);
    const size_t o0 = (size_t)(off / r), rows = n / r; /* whole rows: the staging is a multiple of r */
    if (peft_adapter_read_range(c->conv, e, true, o0 * 2 * r, rows * 2 * r, c->tmp, err)) return -1;
    for (size_t o = 0; o < rows; o++)
        for (size_t k = 0; k < r; k++) dst[o * r + k] = -c->tmp[o * 2 * r + r + k];
    return 0;
}

int lora_write_pissa_init(Model *m, const char *conv_dir, GtError *err) {
    PeftEntry *ent = NULL;
    const int n = model_entries(m, &ent);
    if (n < 0 || !m->ad.pissa_init_dir) {
        free(ent);
        return gt_error(err, GT_EXIT_FAILURE, "%s: not a PiSSA run's adapters", conv_dir);
    }
    PeftConfig cc, pc = run_config(m);
    InitCtx c = {NULL, ent, m->desc.adapter.r, NULL};
    const size_t staging = ((size_t)1 << 20) / (size_t)c.r * (size_t)c.r;
    int rc = -1;
    if (peft_adapter_open(&c.conv, conv_dir, m->desc.arch, ent, n, &cc, err)) goto done;
    if (cc.r != 2 * c.r) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s/%s: r: expected %d (a PiSSA run's rank-2r conversion), found %d", conv_dir,
                 PEFT_CONFIG_FILE, 2 * c.r, cc.r);
        goto done;
    }
    c.tmp = gt_xmalloc(2 * staging * sizeof *c.tmp);
    if (make_dir(m->ad.pissa_init_dir, err)) goto done;
    pc.inference_mode = true;
    rc = peft_adapter_write(m->ad.pissa_init_dir, &pc, m->desc.arch, ent, n, ST_F32, staging, init_fill, &c, err);
done:
    peft_adapter_close(c.conv);
    free(c.tmp);
    free(ent);
    return rc;
}

int lora_pissa_init(Model *m, int niter, uint64_t seed, bool write, GtError *err) {
    if (!m->ad.pissa_init_dir) return gt_error(err, GT_EXIT_FAILURE, "pissa: no directory for the initial adapter");
    const int r = m->desc.adapter.r, L = m->desc.n_layer;
    const QpissaRun *qp = m->ad.qpissa;
    float *w = NULL, *A = NULL, *B = NULL;
    int rc = -1;
    for (int l = 0; l < L; l++)
        for (int k = 0; k < m->ad.n_sites; k++) {
            const LoraSite *s = &m->ad.sites[k];
            const int ia = m->ad.idx[l][s->module];
            const size_t rows = (size_t)s->rows, in = (size_t)s->in;
            const size_t off = block_offset(m, l, s);
            w = gt_xrealloc(w, rows * in * sizeof *w);
            A = gt_xrealloc(A, (size_t)r * in * sizeof *A);
            B = gt_xrealloc(B, rows * r * sizeof *B);
            if (qp && qp->done[l * m->ad.n_sites + k]) continue; /* made by the QPiSSA hook */
            const uint64_t key = pissa_key(seed, l, s->module);
            if (model_download_base(m, off, w, rows * in, err)) goto done;
            if (pissa_init(w, (int)rows, (int)in, r, m->desc.adapter.scale, niter, key, A, B, w, err)) {
                char msg[GT_ERR_MAX];
                snprintf(msg, sizeof msg, "%s", err->msg);
                gt_error(err, err->code, "pissa: layer %d %s: %s", l, peft_module_path(s->module), msg);
                goto done;
            }
            if (m->be->ops->to_device(m->be, m->params + m->layout.tensors[ia].offset, A, (size_t)r * in * sizeof(float), err) ||
                m->be->ops->to_device(m->be, m->params + m->layout.tensors[adapter_tensor(&m->ad, ia, PEFT_PART_B)].offset, B, rows * r * sizeof(float), err) ||
                model_upload_base(m, off, w, rows * in, err))
                goto done;
        }
    model_params_changed(m);
    rc = 0;
    if (!write) goto done;
    rc = -1;
    /* the initial adapter, as PEFT's workflow saves it before training (and as the conversion reads it) */
    if (make_dir(m->ad.pissa_init_dir, err)) goto done;
    char *keep = m->ad.pissa_init_dir;
    m->ad.pissa_init_dir = NULL; /* written as it is: a plain rank-r adapter */
    rc = lora_save_adapter(keep, m, false, err);
    m->ad.pissa_init_dir = keep;
done:
    free(w), free(A), free(B);
    return rc;
}


/* ---------------------------------------------------------------- QPiSSA */


/* the adapted site unit `block` of base tensor `tensor` is: its layer and index in m->ad.sites, or -1 */
static int unit_site(const Model *m, int tensor, int block, int *layer) {
    const ParamTensor *pt = &m->base_layout.tensors[tensor];
    if (pt->layer < 0 || !pt->spec) return -1;
    for (int k = 0; k < m->ad.n_sites; k++)
        if (m->ad.sites[k].tensor == pt->spec && m->ad.sites[k].block == block) {
            *layer = pt->layer;
            return k;
        }
    return -1;
}

static int qpissa_hook(Model *m, int tensor, int block, float *values, GtError *err) {
    QpissaRun *q = m->ad.qpissa;
    int l = 0;
    const int k = unit_site(m, tensor, block, &l);
    if (k < 0) return 0; /* a 4-bit weight no adapter is on: quantized as it is */
    const LoraSite *s = &m->ad.sites[k];
    const int r = m->desc.adapter.r, ia = m->ad.idx[l][s->module];
    const size_t rows = (size_t)s->rows, in = (size_t)s->in;
    if (q->conv) { /* W - s B0 A0, from the conversion's second halves */
        const int e = lora_tensor_entry(&m->desc, ia);
        if (peft_adapter_read(q->conv, e, false, q->a, 2 * (size_t)r * in, err) ||
            peft_adapter_read(q->conv, e, true, q->b, rows * 2 * (size_t)r, err))
            return -1;
        for (size_t o = 0; o < rows; o++)
            for (int j = 0; j < r; j++) q->b[o * r + j] = -q->b[o * 2 * r + r + j]; /* in place, front to back */
        return pissa_residual(values, (int)rows, (int)in, r, m->desc.adapter.scale, q->a + (size_t)r * in, q->b, values,
                              err);
    }
    if (pissa_init(values, (int)rows, (int)in, r, m->desc.adapter.scale, q->niter, pissa_key(q->seed, l, s->module), q->a,
                   q->b, values, err)) {
        char msg[GT_ERR_MAX];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return gt_error(err, err->code, "pissa: layer %d %s: %s", l, peft_module_path(s->module), msg);
    }
    if (m->be->ops->to_device(m->be, m->params + m->layout.tensors[ia].offset, q->a, (size_t)r * in * sizeof(float), err) ||
        m->be->ops->to_device(m->be, m->params + m->layout.tensors[adapter_tensor(&m->ad, ia, PEFT_PART_B)].offset, q->b, rows * r * sizeof(float), err))
        return -1;
    model_params_changed(m);
    q->done[l * m->ad.n_sites + k] = true;
    return 0;
}

int lora_qpissa_arm(Model *m, int niter, uint64_t seed, const char *conv_dir, GtError *err) {
    if (m->desc.adapter.r <= 0 || !m->desc.quant.nf4)
        return gt_error(err, GT_EXIT_FAILURE, "qpissa: internal error: not a LoRA model on a 4-bit base");
    lora_qpissa_disarm(m);
    QpissaRun *q = m->ad.qpissa;
    if (!q) {
        q = m->ad.qpissa = gt_xcalloc(1, sizeof *q);
        q->done = gt_xcalloc((size_t)m->desc.n_layer * (size_t)(m->ad.n_sites ? m->ad.n_sites : 1), sizeof *q->done);
        size_t wa = 0, wb = 0;
        for (int k = 0; k < m->ad.n_sites; k++) {
            const size_t r2 = 2 * (size_t)m->desc.adapter.r;
            if (r2 * (size_t)m->ad.sites[k].in > wa) wa = r2 * (size_t)m->ad.sites[k].in;
            if (r2 * (size_t)m->ad.sites[k].rows > wb) wb = r2 * (size_t)m->ad.sites[k].rows;
        }
        q->a = gt_xmalloc((wa ? wa : 1) * sizeof *q->a);
        q->b = gt_xmalloc((wb ? wb : 1) * sizeof *q->b);
    }
    q->niter = niter, q->seed = seed;
    if (conv_dir) {
        PeftConfig cc;
        if ((q->n_ent = model_entries(m, &q->ent)) < 0)
            return gt_error(err, GT_EXIT_FAILURE, "%s: the model's adapters do not match its modules", conv_dir);
        if (peft_adapter_open(&q->conv, conv_dir, m->desc.arch, q->ent, q->n_ent, &cc, err)) return -1;
        if (cc.r != 2 * m->desc.adapter.r) {
            lora_qpissa_disarm(m);
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s/%s: r: expected %d (a PiSSA run's rank-2r conversion), found %d",
                            conv_dir, PEFT_CONFIG_FILE, 2 * m->desc.adapter.r, cc.r);
        }
    }
    m->base_hook = qpissa_hook;
    return 0;
}

void lora_qpissa_disarm(Model *m) {
    QpissaRun *q = m->ad.qpissa;
    if (m->base_hook == qpissa_hook) m->base_hook = NULL;
    if (!q) return;
    peft_adapter_close(q->conv);
    q->conv = NULL;
    free(q->ent);
    q->ent = NULL;
}

bool lora_qpissa_made(const Model *m) {
    const QpissaRun *q = m->ad.qpissa;
    if (!q) return false;
    for (int i = 0; i < m->desc.n_layer * m->ad.n_sites; i++)
        if (!q->done[i]) return false;
    return true;
}

void lora_qpissa_free(Model *m) {
    QpissaRun *q = m->ad.qpissa;
    if (!q) return;
    lora_qpissa_disarm(m);
    free(q->done), free(q->a), free(q->b), free(q);
    m->ad.qpissa = NULL;
}
