/* adapter_linear.c - the adapter kinds at a linear layer (adapter.h): the sites of a layer's weight,
 * the adapter's input (LoRA dropout), and the forward and backward of LoRA and DoRA, device-blind
 * (Backend ops only), with DoRA's magnitude initialised from the loaded base.
 *
 * LoRA at a site (rows of the base weight W_blk, input width IC, rank r, scale s):
 *   forward   out[:, block] += s (x A^T) B^T, the second GEMM accumulating into the block of the
 *             base's output itself (backend.h's gemm: alpha s, beta 1, row stride OC)
 *   backward  with d = dout[:, block] read in place and h = x A^T (recomputed: one small GEMM instead
 *             of keeping h per layer): dB += s d^T h, dh = s d B, dA += dh^T x, dinp += dropout'(dh A)
 *   without dropout the sites on one weight (q, k, v; gate, up) go at once: their lora_A are one
 *             A_cat [n r, IC] in the layout (lora.h), so h = x A_cat^T, dA_cat += dh^T x and
 *             dinp += dh A_cat are one GEMM each (the last two with beta 1); only B is per site.
 *   h and dh: rows lora_h_stride apart (lora.h: 16-byte rows whatever r is, so each of these GEMMs
 *             runs on cuBLASLt's aligned kernels); the columns past a GEMM's width are never touched.
 *   Launches per Mistral-7B layer (all seven modules, no dropout): 11 forward + 26 backward, where
 *   the per-site form with a [N, rows] y, its add and a scaled copy of dout took 21 + 49.
 * DoRA (PEFT's DoraLinearLayer): with y = (x A^T) B^T, z = x W_blk^T and norm = ||W_blk + s B A||_row
 * (a constant: PEFT detaches it), m the magnitude and g = m / norm:
 *   forward   out[:, block] += (g - 1) z + g s y, i.e. g (x W^T + s x A^T B^T) + b without dropout,
 *             and with it PEFT's x W^T + b + (g - 1) x_d W^T + g s x_d A^T B^T
 *   backward  y, z and the norms recomputed (the weights have not changed since the forward: the
 *             same bits); dora_backward gives dm += sum_n dout (z + s y) / norm, dy = g s dout and
 *             dz = (g - 1) dout; dinp += dropout'(dz W_blk), then LoRA's backward with dy for g. */
#include "adapter.h"

#include "dropout.h"
#include "model_internal.h"

/* LoRA dropout on an adapter's input [N, IC] (dst may be src), with the key of (step, layer,
 * module) and the elements indexed over the step's whole batch (dropout.h): the micro-batch's
 * first row is row dropout_row0 of the step's batch, so its element 0 is dropout_row0 * T * IC */
static void lora_dropout(Model *m, int l, const LoraSite *s, act_t *dst, const act_t *src, int N, int IC) {
    const double p = m->desc.adapter.dropout;
    const uint64_t key = lora_dropout_key(m->ad.dropout_seed, m->ad.dropout_step, l, s->module);
    const uint64_t base = (uint64_t)m->ad.dropout_row0 * (uint64_t)m->T * (uint64_t)IC;
    m->be->ops->dropout(m->be, dst, src, (size_t)N * IC, key, base, gt_dropout_threshold(p), (float)(1.0 / (1.0 - p)));
}

/* The input an adapter multiplies: inp itself, or under training with lora_dropout its dropped
 * copy in ad.xd (the mask a pure function of the key: backward regenerates the same one). */
static const act_t *lora_input(Model *m, int l, const LoraSite *s, const act_t *inp, int N, int IC) {
    if (!m->training || m->desc.adapter.dropout <= 0) return inp;
    lora_dropout(m, l, s, m->ad.xd, inp, N, IC);
    return m->ad.xd;
}

/* The adapters of layer l on base weight w, one per call: the next site from *k on, with its
 * first tensor's index in the layout, or NULL when there are no more */
static const LoraSite *next_adapter(const Model *m, int l, TensorRole w, int *k, int *ia) {
    for (; *k < m->ad.n_sites; (*k)++) {
        const LoraSite *s = &m->ad.sites[*k];
        if (s->role == w && (*ia = m->ad.idx[l][s->module]) >= 0) {
            (*k)++;
            return s;
        }
    }
    return NULL;
}

/* x's gradient in ad.dx: through the dropout (the same mask and scale) into dinp */
static void add_input_grad(Model *m, int l, const LoraSite *s, act_t *dinp, const act_t *x, const act_t *inp, int N,
                           int IC) {
    if (x != inp) lora_dropout(m, l, s, m->ad.dx, m->ad.dx, N, IC);
    m->be->ops->axpby_rows(m->be, dinp, IC, m->ad.dx, IC, N, IC, 1.0f, 1.0f);
}

/* ---------------------------------------------------------------- LoRA */

/* h = x A^T into lora_h (row stride H) */
static void lora_h(Model *m, int ia, const act_t *x, int N, int IC) {
    m->be->ops->matmul_forward(m->be, m->ad.h, x, model_adapter_w(m, ia), NULL, N, IC, m->desc.adapter.r,
                               lora_h_stride(&m->desc));
}

/* out[:, block] += s h B^T: one GEMM with beta 1 into the block (row stride OC), no [N, rows]
 * intermediate and no add */
static void lora_site_forward(Model *m, int l, const LoraSite *s, int ia, act_t *out, int OC, const act_t *x,
                              const act_t *inp, int N, int IC) {
    (void)l, (void)inp;
    const int r = m->desc.adapter.r, H = lora_h_stride(&m->desc);
    lora_h(m, ia, x, N, IC);
    m->be->ops->gemm(m->be, false, true, N, (int)s->rows, r, (float)m->desc.adapter.scale, m->ad.h, H,
                     model_adapter_w(m, adapter_tensor(&m->ad, ia, PEFT_PART_B)), r, 1.0f, model_at(m, out, (size_t)s->row0), m->act, OC);
}

/* with d = dout[:, block] (row stride OC) read in place and s the scale: dB += s d^T h, dh = s d B,
 * dA += dh^T x and dinp += dropout'(dh A): GEMMs with alpha s and beta 1, no scaled copy of d. One
 * site at a time is LoRA's path under dropout only (each module has its own mask, as PEFT's: x
 * differs per site, so their A's cannot share a GEMM); without it lora_group_backward runs. */
static void lora_site_backward(Model *m, int l, const LoraSite *s, int ia, act_t *dinp, const act_t *dout, int OC,
                               const act_t *x, const act_t *inp, int N, int IC) {
    const BackendOps *op = m->be->ops;
    const int r = m->desc.adapter.r, rows = (int)s->rows, H = lora_h_stride(&m->desc);
    const float sc = (float)m->desc.adapter.scale;
    const act_t *d = model_at(m, dout, (size_t)s->row0);
    float *dB = model_adapter_g(m, adapter_tensor(&m->ad, ia, PEFT_PART_B));
    lora_h(m, ia, x, N, IC);
    if (dB) op->gemm(m->be, true, false, rows, r, N, sc, d, OC, m->ad.h, H, 1.0f, dB, GT_F32, r);
    op->gemm(m->be, false, false, N, r, rows, sc, d, OC, model_adapter_w(m, adapter_tensor(&m->ad, ia, PEFT_PART_B)), r, 0.0f, m->ad.dh, m->act, H);
    float *dA = model_adapter_g(m, ia);
    if (dA) op->gemm(m->be, true, false, r, IC, N, 1.0f, m->ad.dh, H, x, IC, 1.0f, dA, GT_F32, IC);
    op->matmul_backward(m->be, m->ad.dx, NULL, NULL, m->ad.dh, x, model_adapter_w(m, ia), N, IC, r, H);
    add_input_grad(m, l, s, dinp, x, inp, N, IC);
}

/* The n sites k0.. of layer l on one weight (q, k, v; gate, up), on an input without dropout: their
 * lora_A are consecutive in the layout (lora.h: part-major), so in params, weights and grads they are
 * one A_cat [R = n r, IC], and h = x A_cat^T [N, R] is one GEMM; site j reads its columns j r.. of h
 * (row stride H >= R, lora_h_stride: 16-byte rows) and accumulates into its block of out with its B. */
/* h = x A_cat^T [N, n r] for the group's n sites from k0 of layer l; returns the first site's A index */
static int lora_group_h(Model *m, int l, int k0, int n, const act_t *x, int N, int IC) {
    const int R = n * m->desc.adapter.r, ia = m->ad.idx[l][m->ad.sites[k0].module];
    m->be->ops->matmul_forward(m->be, m->ad.h, x, model_adapter_w(m, ia), NULL, N, IC, R, lora_h_stride(&m->desc));
    return ia;
}

static void lora_group_forward(Model *m, int l, int k0, int n, act_t *out, int OC, const act_t *x, int N, int IC) {
    const BackendOps *op = m->be->ops;
    const int r = m->desc.adapter.r, H = lora_h_stride(&m->desc), ia = lora_group_h(m, l, k0, n, x, N, IC);
    const float sc = (float)m->desc.adapter.scale;
    for (int j = 0; j < n; j++) {
        const LoraSite *s = &m->ad.sites[k0 + j];
        op->gemm(m->be, false, true, N, (int)s->rows, r, sc, model_at(m, m->ad.h, (size_t)j * r), H,
                 model_adapter_w(m, adapter_tensor(&m->ad, ia + j, PEFT_PART_B)), r, 1.0f,
                 model_at(m, out, (size_t)s->row0), m->act, OC);
    }
}

/* its backward: h recomputed by the one GEMM; per site dB += s d^T h_j and dh_j = s d B (d: its
 * block of dout, read in place) into columns j r.. of dh [N, R]; then dA_cat += dh^T x and
 * dinp += dh A_cat, one GEMM each, both accumulating (beta 1) */
static void lora_group_backward(Model *m, int l, int k0, int n, act_t *dinp, const act_t *dout, int OC,
                                const act_t *x, int N, int IC) {
    const BackendOps *op = m->be->ops;
    const int r = m->desc.adapter.r, R = n * r, H = lora_h_stride(&m->desc), ia = lora_group_h(m, l, k0, n, x, N, IC);
    const float sc = (float)m->desc.adapter.scale;
    for (int j = 0; j < n; j++) {
        const LoraSite *s = &m->ad.sites[k0 + j];
        const int rows = (int)s->rows, ib = adapter_tensor(&m->ad, ia + j, PEFT_PART_B);
        const act_t *d = model_at(m, dout, (size_t)s->row0);
        float *dB = model_adapter_g(m, ib);
        if (dB) op->gemm(m->be, true, false, rows, r, N, sc, d, OC, model_at(m, m->ad.h, (size_t)j * r), H, 1.0f, dB,
                         GT_F32, r);
        op->gemm(m->be, false, false, N, r, rows, sc, d, OC, model_adapter_w(m, ib), r, 0.0f,
                 model_at(m, m->ad.dh, (size_t)j * r), m->act, H);
    }
    float *dA = model_adapter_g(m, ia);
    if (dA) op->gemm(m->be, true, false, R, IC, N, 1.0f, m->ad.dh, H, x, IC, 1.0f, dA, GT_F32, IC);
    op->gemm(m->be, false, false, N, IC, R, 1.0f, m->ad.dh, H, model_adapter_w(m, ia), IC, 1.0f, dinp, m->act, IC);
}

/* DoRA's LoRA part: h = x A^T into lora_h, y = h B^T into lora_y */
static void lora_hy(Model *m, int ia, const LoraSite *s, const act_t *x, int N, int IC) {
    const int r = m->desc.adapter.r, rows = (int)s->rows;
    lora_h(m, ia, x, N, IC);
    m->be->ops->matmul_forward(m->be, m->ad.y, m->ad.h, model_adapter_w(m, adapter_tensor(&m->ad, ia, PEFT_PART_B)), NULL, N, r, rows, rows);
}

/* DoRA's LoRA backward from g in lora_y (h in lora_h): dB, dh, dA and the input's gradient */
static void lora_backward_from_g(Model *m, int l, const LoraSite *s, int ia, act_t *dinp, const act_t *x,
                                 const act_t *inp, int N, int IC) {
    const BackendOps *op = m->be->ops;
    const int r = m->desc.adapter.r, rows = (int)s->rows;
    op->matmul_backward(m->be, m->ad.dh, model_adapter_g(m, adapter_tensor(&m->ad, ia, PEFT_PART_B)), NULL, m->ad.y, m->ad.h,
                        model_adapter_w(m, adapter_tensor(&m->ad, ia, PEFT_PART_B)), N, r, rows, rows);
    op->matmul_backward(m->be, m->ad.dx, model_adapter_g(m, ia), NULL, m->ad.dh, x, model_adapter_w(m, ia), N, IC, r,
                        r);
    add_input_grad(m, l, s, dinp, x, inp, N, IC);
}

/* ---------------------------------------------------------------- DoRA */

/* layer l's weight block of site s (the frozen base, act dtype) */
static const act_t *dora_block(const Model *m, int l, const LoraSite *s) {
    return model_at(m, model_w(m, l, s->role), (size_t)s->row0 * (size_t)s->in);
}

/* h and y (lora_hy), z = x W_blk^T into dora_z, the row norms of W_blk + s B A into dora_norm */
static void dora_prepare(Model *m, int l, const LoraSite *s, int ia, const act_t *x, int N, int IC) {
    const BackendOps *op = m->be->ops;
    const int rows = (int)s->rows;
    const act_t *wb = dora_block(m, l, s);
    lora_hy(m, ia, s, x, N, IC);
    op->matmul_forward(m->be, m->ad.dora_z, x, wb, NULL, N, IC, rows, rows);
    op->dora_norm(m->be, m->ad.dora_norm, wb, model_adapter_w(m, ia), model_adapter_w(m, adapter_tensor(&m->ad, ia, PEFT_PART_B)), rows, IC,
                  m->desc.adapter.r, (float)m->desc.adapter.scale);
}

static void dora_site_forward(Model *m, int l, const LoraSite *s, int ia, act_t *out, int OC, const act_t *x,
                              const act_t *inp, int N, int IC) {
    (void)inp;
    dora_prepare(m, l, s, ia, x, N, IC);
    m->be->ops->dora_forward(m->be, model_at(m, out, (size_t)s->row0), OC, m->ad.dora_z, m->ad.y,
                             model_adapter_w(m, adapter_tensor(&m->ad, ia, PEFT_PART_M)), m->ad.dora_norm, N, (int)s->rows,
                             (float)m->desc.adapter.scale);
}

static void dora_site_backward(Model *m, int l, const LoraSite *s, int ia, act_t *dinp, const act_t *dout, int OC,
                               const act_t *x, const act_t *inp, int N, int IC) {
    const BackendOps *op = m->be->ops;
    const int rows = (int)s->rows;
    dora_prepare(m, l, s, ia, x, N, IC);
    /* dz over z and dy (LoRA's g) over y, in place */
    op->dora_backward(m->be, model_adapter_g(m, adapter_tensor(&m->ad, ia, PEFT_PART_M)), m->ad.dora_z, m->ad.y,
                      model_at(m, dout, (size_t)s->row0), OC, m->ad.dora_z, m->ad.y,
                      model_adapter_w(m, adapter_tensor(&m->ad, ia, PEFT_PART_M)), m->ad.dora_norm, N, rows, (float)m->desc.adapter.scale);
    op->matmul_backward(m->be, m->ad.dx, NULL, NULL, m->ad.dora_z, x, dora_block(m, l, s), N, IC, rows, rows);
    add_input_grad(m, l, s, dinp, x, inp, N, IC);
    lora_backward_from_g(m, l, s, ia, dinp, x, inp, N, IC);
}

/* m = ||W + s B A||_row for every site (dora_norm over the frozen base and the adapters as they are,
 * then into the magnitudes' fp32 master weights through the host staging buffer) */
static int dora_init_from_base(Model *m, GtError *err) {
    model_refresh_weights(m); /* A and B as the forward reads them */
    const BackendOps *op = m->be->ops;
    for (int l = 0; l < m->desc.n_layer; l++)
        for (int k = 0; k < m->ad.n_sites; k++) {
            const LoraSite *s = &m->ad.sites[k];
            const int ia = m->ad.idx[l][s->module];
            const size_t rows = (size_t)s->rows;
            op->dora_norm(m->be, m->ad.dora_norm, dora_block(m, l, s), model_adapter_w(m, ia), model_adapter_w(m, adapter_tensor(&m->ad, ia, PEFT_PART_B)),
                          (int)rows, (int)s->in, m->desc.adapter.r, (float)m->desc.adapter.scale);
            if (op->to_host(m->be, m->staging, m->ad.dora_norm, rows * sizeof(float), err) ||
                op->to_device(m->be, m->params + m->layout.tensors[adapter_tensor(&m->ad, ia, PEFT_PART_M)].offset, m->staging,
                              rows * sizeof(float), err))
                return -1;
        }
    model_params_changed(m);
    return 0;
}

/* ---------------------------------------------------------------- the kinds */

static const AdapterKind ADAPTER_LORA = {.parts = &ADAPTER_PARTS_LORA,
                                         .site_forward = lora_site_forward,
                                         .site_backward = lora_site_backward,
                                         .group_forward = lora_group_forward,
                                         .group_backward = lora_group_backward};
static const AdapterKind ADAPTER_DORA = {.parts = &ADAPTER_PARTS_DORA,
                                         .n_work = 2,
                                         .work = {{BUF_DORA_Z, true, false}, {BUF_DORA_NORM, false, true}},
                                         .site_forward = dora_site_forward,
                                         .site_backward = dora_site_backward,
                                         .init_from_base = dora_init_from_base};

int adapter_part_shape(const AdapterKind *kind, int p, const LoraSite *s, int r, int64_t *dim0, int64_t *dim1) {
    return adapter_parts_shape(kind->parts, p, r, s->in, s->rows, dim0, dim1);
}

const AdapterKind *adapter_kind(const ModelDesc *d) {
    if (d->adapter.r <= 0) return NULL;
    return d->adapter.dora ? &ADAPTER_DORA : &ADAPTER_LORA;
}

/* the next run of consecutive sites from *k on that layer l's weight w carries: its first site in *k,
 * its length returned (0: none left) */
static int next_group(const Model *m, int l, TensorRole w, int *k) {
    int ia;
    if (!next_adapter(m, l, w, k, &ia)) return 0;
    const int k0 = --*k; /* next_adapter stepped past it */
    int n = 1;
    while (k0 + n < m->ad.n_sites && m->ad.sites[k0 + n].role == w && m->ad.idx[l][m->ad.sites[k0 + n].module] >= 0) n++;
    return n;
}

/* the kind's group entries apply (the input is not dropped: one x for every site) */
static bool grouped(const Model *m, const AdapterKind *kind) {
    return kind->group_forward && (!m->training || m->desc.adapter.dropout <= 0);
}

void adapter_forward(Model *m, int l, TensorRole w, act_t *out, const act_t *inp, int N, int IC, int OC) {
    const AdapterKind *kind = adapter_kind(&m->desc);
    int k = 0, ia, n;
    if (grouped(m, kind)) {
        for (; (n = next_group(m, l, w, &k)) > 0; k += n) kind->group_forward(m, l, k, n, out, OC, inp, N, IC);
        return;
    }
    for (const LoraSite *s; (s = next_adapter(m, l, w, &k, &ia));)
        kind->site_forward(m, l, s, ia, out, OC, lora_input(m, l, s, inp, N, IC), inp, N, IC);
}

void adapter_backward(Model *m, int l, TensorRole w, act_t *dinp, const act_t *dout, const act_t *inp, int N, int IC,
                      int OC) {
    const AdapterKind *kind = adapter_kind(&m->desc);
    int k = 0, ia, n;
    if (grouped(m, kind)) {
        for (; (n = next_group(m, l, w, &k)) > 0; k += n) kind->group_backward(m, l, k, n, dinp, dout, OC, inp, N, IC);
        return;
    }
    for (const LoraSite *s; (s = next_adapter(m, l, w, &k, &ia));)
        kind->site_backward(m, l, s, ia, dinp, dout, OC, lora_input(m, l, s, inp, N, IC), inp, N, IC);
}

bool adapter_on(const Model *m, int l, TensorRole w) {
    int k = 0, ia;
    return next_adapter(m, l, w, &k, &ia) != NULL;
}

int lora_parts(const ModelDesc *d) {
    const AdapterKind *kind = adapter_kind(d);
    return (kind ? kind->parts : ADAPTER_LORA.parts)->n;
}

int adapter_init_from_base(Model *m, GtError *err) {
    const AdapterKind *kind = adapter_kind(&m->desc);
    return kind && kind->init_from_base ? kind->init_from_base(m, err) : 0;
}
