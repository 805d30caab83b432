/* ref_llama.c - the naive double-precision Llama / Mistral / Qwen2 of ref_llama.h: forward and a
 * hand-written backward, one sequence at a time, every activation kept. Written from HF's
 * modeling_llama.py / modeling_rope_utils.py equations, sharing nothing with src/ (no gtrain header,
 * parameters by HF name). Slow and simple on purpose: a check, not a kernel. */
#include "ref_llama.h"

#include "ref_lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN 96

/* ---------------------------------------------------------------- tensors by name */

typedef struct {
    double *w, *gw; /* data, grad (grad NULL without want_grad) */
} Par;

typedef struct {
    Par in_norm, q, k, v, o, post_norm, gate, up, down;
    Par bq, bk, bv, bo, bgate, bup, bdown; /* .w NULL when the cfg has no such bias */
} LayerPars;

static bool cfg_ok(const RefLlamaCfg *c) {
    if (c->hidden <= 0 || c->inter <= 0 || c->layers <= 0 || c->heads <= 0 || c->kv_heads <= 0 || c->head_dim <= 0 ||
        c->vocab <= 0 || c->head_dim % 2 || c->heads % c->kv_heads || c->window < 0 || !(c->theta > 0)) {
        fprintf(stderr, "ref_llama: bad config (sizes positive, head_dim even, kv_heads dividing heads)\n");
        return false;
    }
    if (c->llama3 && !(c->rope_factor > 0 && c->high_freq_factor > c->low_freq_factor && c->low_freq_factor > 0 &&
                       c->original_max_positions > 0)) {
        fprintf(stderr, "ref_llama: bad llama3 rope_scaling parameters\n");
        return false;
    }
    return true;
}

/* Calls fn(name, rows, cols, ctx) for every tensor of c in HF state-dict order. */
static void for_each_spec(const RefLlamaCfg *c, void (*fn)(const char *, int64_t, int64_t, void *), void *ctx) {
    char nm[NAME_MAX_LEN];
    const int64_t H = c->hidden, I = c->inter, QD = (int64_t)c->heads * c->head_dim, KD = (int64_t)c->kv_heads * c->head_dim;
    fn("model.embed_tokens.weight", c->vocab, H, ctx);
    for (int l = 0; l < c->layers; l++) {
        const struct { const char *s; int64_t o, i; bool b; } lin[7] = {
            {"self_attn.q_proj", QD, H, c->qkv_bias}, {"self_attn.k_proj", KD, H, c->qkv_bias},
            {"self_attn.v_proj", KD, H, c->qkv_bias}, {"self_attn.o_proj", H, QD, c->o_bias},
            {"mlp.gate_proj", I, H, c->mlp_bias},     {"mlp.up_proj", I, H, c->mlp_bias},
            {"mlp.down_proj", H, I, c->mlp_bias}};
        for (int j = 0; j < 7; j++) {
            snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, lin[j].s);
            fn(nm, lin[j].o, lin[j].i, ctx);
            if (lin[j].b) {
                snprintf(nm, sizeof nm, "model.layers.%d.%s.bias", l, lin[j].s);
                fn(nm, lin[j].o, 1, ctx);
            }
        }
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        fn(nm, H, 1, ctx);
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        fn(nm, H, 1, ctx);
    }
    fn("model.norm.weight", H, 1, ctx);
    if (!c->tie) fn("lm_head.weight", c->vocab, H, ctx);
}

typedef struct {
    RefTensor *t;
    int n, cap;
} AllocCtx;

static void alloc_one(const char *name, int64_t rows, int64_t cols, void *vctx) {
    AllocCtx *a = vctx;
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 64;
        a->t = realloc(a->t, (size_t)a->cap * sizeof *a->t);
        if (!a->t) abort();
    }
    RefTensor *t = &a->t[a->n++];
    char *nm = malloc(strlen(name) + 1);
    if (!nm) abort();
    strcpy(nm, name);
    t->name = nm;
    t->rows = rows, t->cols = cols;
    t->data = calloc((size_t)(rows * cols), sizeof(double));
    t->grad = calloc((size_t)(rows * cols), sizeof(double));
    if (!t->data || !t->grad) abort();
}

RefTensor *ref_llama_alloc(const RefLlamaCfg *cfg, int *n) {
    *n = 0;
    if (!cfg_ok(cfg)) return NULL;
    AllocCtx a = {0};
    for_each_spec(cfg, alloc_one, &a);
    *n = a.n;
    return a.t;
}

void ref_llama_free(RefTensor *tensors, int n) {
    if (!tensors) return;
    for (int i = 0; i < n; i++) {
        free((void *)tensors[i].name);
        free(tensors[i].data);
        free(tensors[i].grad);
    }
    free(tensors);
}

RefTensor *ref_llama_find(RefTensor *tensors, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(tensors[i].name, name) == 0) return &tensors[i];
    return NULL;
}

typedef struct {
    RefTensor *t;
    int n;
    bool want_grad, ok;
    Par *out; /* the specs in order, filled one after another */
    int k;
} BindCtx;

static void bind_one(const char *name, int64_t rows, int64_t cols, void *vctx) {
    BindCtx *b = vctx;
    Par *p = &b->out[b->k++];
    p->w = p->gw = NULL;
    RefTensor *t = ref_llama_find(b->t, b->n, name);
    if (!t) {
        fprintf(stderr, "ref_llama: tensor %s missing\n", name);
        b->ok = false;
        return;
    }
    if (t->rows * t->cols != rows * cols || (t->rows != rows && !(cols == 1 && t->cols == rows))) {
        fprintf(stderr, "ref_llama: tensor %s: expected [%lld, %lld], found [%lld, %lld]\n", name, (long long)rows,
                (long long)cols, (long long)t->rows, (long long)t->cols);
        b->ok = false;
        return;
    }
    if (!t->data || (b->want_grad && !t->grad)) {
        fprintf(stderr, "ref_llama: tensor %s has no %s\n", name, t->data ? "grad" : "data");
        b->ok = false;
        return;
    }
    p->w = t->data;
    p->gw = b->want_grad ? t->grad : NULL;
}

static void count_one(const char *name, int64_t rows, int64_t cols, void *vctx) { (*(int *)vctx)++; }

/* ---------------------------------------------------------------- rope */

void ref_llama_inv_freq(const RefLlamaCfg *c, double *inv) {
    const int half = c->head_dim / 2;
    for (int i = 0; i < half; i++) {
        double f = 1.0 / pow(c->theta, (double)(2 * i) / c->head_dim);
        if (c->llama3) {
            const double wavelen = 2.0 * M_PI / f, orig = c->original_max_positions;
            if (wavelen < orig / c->high_freq_factor) {
                /* high frequency: kept */
            } else if (wavelen > orig / c->low_freq_factor) {
                f /= c->rope_factor;
            } else {
                double s = (orig / wavelen - c->low_freq_factor) / (c->high_freq_factor - c->low_freq_factor);
                f = (1.0 - s) * f / c->rope_factor + s * f;
            }
        }
        inv[i] = f;
    }
}

void ref_llama_rope(const RefLlamaCfg *c, int T, double *cs, double *sn) {
    const int half = c->head_dim / 2;
    double *inv = malloc((size_t)half * sizeof *inv);
    if (!inv) abort();
    ref_llama_inv_freq(c, inv);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            cs[t * half + i] = cos(t * inv[i]);
            sn[t * half + i] = sin(t * inv[i]);
        }
    free(inv);
}

/* in place on nh heads of hd channels of each of T rows (row stride nh*hd); inverse: the backward */
static void rope_apply(double *x, int T, int nh, int hd, const double *cs, const double *sn, bool inverse) {
    const int half = hd / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            double *v = x + ((size_t)t * nh + h) * hd;
            for (int i = 0; i < half; i++) {
                double c = cs[t * half + i], s = inverse ? -sn[t * half + i] : sn[t * half + i];
                double a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
}

/* ---------------------------------------------------------------- building blocks */

/* y[N, O] = x[N, In] W[O, In]^T + b */
static void lin_fwd(double *y, const double *x, const Par *W, const Par *b, int N, int In, int O) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double s = b && b->w ? b->w[o] : 0.0;
            for (int i = 0; i < In; i++) s += W->w[(size_t)o * In + i] * x[(size_t)n * In + i];
            y[(size_t)n * O + o] = s;
        }
}

/* dx[N, In] += dy W (dx NULL: skipped); dW += dy^T x; db += colsum(dy) */
static void lin_bwd(double *dx, const double *dy, const double *x, const Par *W, const Par *b, int N, int In, int O) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double g = dy[(size_t)n * O + o];
            if (b && b->w) b->gw[o] += g;
            for (int i = 0; i < In; i++) {
                W->gw[(size_t)o * In + i] += g * x[(size_t)n * In + i];
                if (dx) dx[(size_t)n * In + i] += g * W->w[(size_t)o * In + i];
            }
        }
}

/* out = w * x * r, r = 1/sqrt(mean(x^2) + eps), per row of C */
static void rms_fwd(double *out, double *r, const double *x, const Par *w, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        const double *xr = x + (size_t)n * C;
        double ss = 0;
        for (int i = 0; i < C; i++) ss += xr[i] * xr[i];
        r[n] = 1.0 / sqrt(ss / C + eps);
        for (int i = 0; i < C; i++) out[(size_t)n * C + i] = w->w[i] * xr[i] * r[n];
    }
}

/* dx += d/dx, dw += d/dw of out = w * x * r(x):  dx_i = r dn_i - x_i r^3 (sum_j dn_j x_j) / C, dn = dout * w */
static void rms_bwd(double *dx, const double *dout, const double *x, const Par *w, const double *r, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double *xr = x + (size_t)n * C, *dr = dout + (size_t)n * C;
        double dot = 0;
        for (int i = 0; i < C; i++) {
            w->gw[i] += dr[i] * xr[i] * r[n];
            dot += dr[i] * w->w[i] * xr[i];
        }
        for (int i = 0; i < C; i++)
            dx[(size_t)n * C + i] += r[n] * dr[i] * w->w[i] - xr[i] * r[n] * r[n] * r[n] * dot / C;
    }
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* ---------------------------------------------------------------- the model */

typedef struct { /* one layer's activations of one sequence */
    double *xin, *r1, *h1, *q, *k, *v, *p, *y, *x2, *r2, *h2, *g, *u, *a;
} Acts;

static double *dalloc(size_t n) {
    double *p = calloc(n ? n : 1, sizeof(double));
    if (!p) abort();
    return p;
}

/* lora: adapters on the forward (ref_lora.h); then no backward (want_grad false) */
static double loss_impl(const RefLlamaCfg *c, RefTensor *tensors, int n, const RefLora *lora, const int *tokens,
                        const int *targets, int B, int T, bool want_grad) {
    if (!cfg_ok(c) || B <= 0 || T <= 0) return NAN;
    if (lora && (want_grad || lora->layers != c->layers)) {
        fprintf(stderr, "ref_llama: adapters need want_grad false and one entry per layer\n");
        return NAN;
    }
    const int C = c->hidden, I = c->inter, L = c->layers, NH = c->heads, NKV = c->kv_heads, hd = c->head_dim;
    const int V = c->vocab, QD = NH * hd, KD = NKV * hd, rep = NH / NKV, half = hd / 2;
    const double scale = 1.0 / sqrt((double)hd);
    long count = 0;
    for (size_t i = 0; i < (size_t)B * T; i++) {
        if (tokens[i] < 0 || tokens[i] >= V || (targets[i] != -100 && (targets[i] < 0 || targets[i] >= V))) {
            fprintf(stderr, "ref_llama: token or target %zu outside the vocabulary\n", i);
            return NAN;
        }
        count += targets[i] != -100;
    }
    /* bind the parameters: specs in order are embed, per layer (q[,bq], k[,bk], v[,bv], o[,bo],
     * gate[,b], up[,b], down[,b], in_norm, post_norm), norm[, head] */
    int nspec = 0;
    for_each_spec(c, count_one, &nspec);
    Par *ps = calloc((size_t)nspec, sizeof *ps);
    if (!ps) abort();
    BindCtx bc = {tensors, n, want_grad, true, ps, 0};
    for_each_spec(c, bind_one, &bc);
    if (!bc.ok) {
        free(ps);
        return NAN;
    }
    LayerPars *lp = calloc((size_t)L, sizeof *lp);
    if (!lp) abort();
    int k = 0;
    const Par embed = ps[k++];
    for (int l = 0; l < L; l++) {
        LayerPars *P = &lp[l];
        Par *w[7] = {&P->q, &P->k, &P->v, &P->o, &P->gate, &P->up, &P->down};
        Par *bs[7] = {&P->bq, &P->bk, &P->bv, &P->bo, &P->bgate, &P->bup, &P->bdown};
        bool has[7] = {c->qkv_bias, c->qkv_bias, c->qkv_bias, c->o_bias, c->mlp_bias, c->mlp_bias, c->mlp_bias};
        for (int j = 0; j < 7; j++) {
            *w[j] = ps[k++];
            if (has[j]) *bs[j] = ps[k++];
        }
        P->in_norm = ps[k++];
        P->post_norm = ps[k++];
    }
    const Par fnorm = ps[k++];
    const Par head = c->tie ? embed : ps[k++];
    free(ps);
    if (want_grad)
        for (int i = 0; i < n; i++)
            if (tensors[i].grad) memset(tensors[i].grad, 0, (size_t)(tensors[i].rows * tensors[i].cols) * sizeof(double));

    double *cs = dalloc((size_t)T * half), *sn = dalloc((size_t)T * half);
    ref_llama_rope(c, T, cs, sn);
    Acts *A = calloc((size_t)L, sizeof *A);
    if (!A) abort();
    for (int l = 0; l < L; l++) {
        A[l] = (Acts){dalloc((size_t)T * C), dalloc(T),           dalloc((size_t)T * C), dalloc((size_t)T * QD),
                      dalloc((size_t)T * KD), dalloc((size_t)T * KD), dalloc((size_t)NH * T * T), dalloc((size_t)T * QD),
                      dalloc((size_t)T * C), dalloc(T),           dalloc((size_t)T * C), dalloc((size_t)T * I),
                      dalloc((size_t)T * I), dalloc((size_t)T * I)};
    }
    double *x = dalloc((size_t)T * C), *rf = dalloc(T), *hf = dalloc((size_t)T * C), *prob = dalloc((size_t)T * V);
    double *tmp = dalloc((size_t)T * (C > I ? C : I));
    /* backward scratch */
    double *dx = dalloc((size_t)T * C), *dh = dalloc((size_t)T * C), *dq = dalloc((size_t)T * QD);
    double *dk = dalloc((size_t)T * KD), *dv = dalloc((size_t)T * KD), *dy = dalloc((size_t)T * QD);
    double *dg = dalloc((size_t)T * I), *du = dalloc((size_t)T * I), *da = dalloc((size_t)T * I);
    double *dlog = dalloc(V), *dp = dalloc(T);
    double total = 0.0;

    for (int b = 0; b < B; b++) {
        const int *tk = tokens + (size_t)b * T, *tg = targets + (size_t)b * T;
        for (int t = 0; t < T; t++) memcpy(x + (size_t)t * C, embed.w + (size_t)tk[t] * C, (size_t)C * sizeof *x);
        /* ---- forward ---- */
        for (int l = 0; l < L; l++) {
            const LayerPars *P = &lp[l];
            Acts *a = &A[l];
            const int win = (c->window > 0 && l >= c->window_first_layer) ? c->window : 0;
            memcpy(a->xin, x, (size_t)T * C * sizeof *x);
            rms_fwd(a->h1, a->r1, a->xin, &P->in_norm, T, C, c->eps);
            lin_fwd(a->q, a->h1, &P->q, &P->bq, T, C, QD);
            lin_fwd(a->k, a->h1, &P->k, &P->bk, T, C, KD);
            lin_fwd(a->v, a->h1, &P->v, &P->bv, T, C, KD);
            const long row0 = (long)b * T; /* the sequence's first row in the micro-batch (ref_lora adds row_base) */
            ref_lora_apply(lora, l, REF_LORA_Q_PROJ, a->h1, T, row0, C, a->q, QD);
            ref_lora_apply(lora, l, REF_LORA_K_PROJ, a->h1, T, row0, C, a->k, KD);
            ref_lora_apply(lora, l, REF_LORA_V_PROJ, a->h1, T, row0, C, a->v, KD);
            rope_apply(a->q, T, NH, hd, cs, sn, false);
            rope_apply(a->k, T, NKV, hd, cs, sn, false);
            memset(a->p, 0, (size_t)NH * T * T * sizeof *a->p);
            for (int h = 0; h < NH; h++) {
                const int g = h / rep;
                for (int t = 0; t < T; t++) {
                    const int lo = win ? (t - win + 1 > 0 ? t - win + 1 : 0) : 0;
                    double *pr = a->p + ((size_t)h * T + t) * T, mx = -INFINITY, z = 0;
                    const double *qv = a->q + (size_t)t * QD + h * hd;
                    for (int j = lo; j <= t; j++) {
                        const double *kv = a->k + (size_t)j * KD + g * hd;
                        double s = 0;
                        for (int i = 0; i < hd; i++) s += qv[i] * kv[i];
                        pr[j] = s * scale;
                        if (pr[j] > mx) mx = pr[j];
                    }
                    for (int j = lo; j <= t; j++) z += (pr[j] = exp(pr[j] - mx));
                    for (int j = lo; j <= t; j++) pr[j] /= z;
                    double *yv = a->y + (size_t)t * QD + h * hd;
                    for (int i = 0; i < hd; i++) {
                        double s = 0;
                        for (int j = lo; j <= t; j++) s += pr[j] * a->v[(size_t)j * KD + g * hd + i];
                        yv[i] = s;
                    }
                }
            }
            lin_fwd(tmp, a->y, &P->o, &P->bo, T, QD, C);
            ref_lora_apply(lora, l, REF_LORA_O_PROJ, a->y, T, row0, QD, tmp, C);
            for (size_t i = 0; i < (size_t)T * C; i++) a->x2[i] = a->xin[i] + tmp[i];
            rms_fwd(a->h2, a->r2, a->x2, &P->post_norm, T, C, c->eps);
            lin_fwd(a->g, a->h2, &P->gate, &P->bgate, T, C, I);
            lin_fwd(a->u, a->h2, &P->up, &P->bup, T, C, I);
            ref_lora_apply(lora, l, REF_LORA_GATE_PROJ, a->h2, T, row0, C, a->g, I);
            ref_lora_apply(lora, l, REF_LORA_UP_PROJ, a->h2, T, row0, C, a->u, I);
            for (size_t i = 0; i < (size_t)T * I; i++) a->a[i] = a->g[i] * sigmoid(a->g[i]) * a->u[i];
            lin_fwd(tmp, a->a, &P->down, &P->bdown, T, I, C);
            ref_lora_apply(lora, l, REF_LORA_DOWN_PROJ, a->a, T, row0, I, tmp, C);
            for (size_t i = 0; i < (size_t)T * C; i++) x[i] = a->x2[i] + tmp[i];
        }
        rms_fwd(hf, rf, x, &fnorm, T, C, c->eps);
        for (int t = 0; t < T; t++) {
            if (tg[t] == -100) continue;
            double *lg = prob + (size_t)t * V, mx = -INFINITY, z = 0;
            lin_fwd(lg, hf + (size_t)t * C, &head, NULL, 1, C, V);
            for (int v = 0; v < V; v++) mx = lg[v] > mx ? lg[v] : mx;
            for (int v = 0; v < V; v++) z += exp(lg[v] - mx);
            total += mx + log(z) - lg[tg[t]];
            for (int v = 0; v < V; v++) lg[v] = exp(lg[v] - mx) / z;
        }
        if (!want_grad) continue;
        /* ---- backward ---- */
        memset(dh, 0, (size_t)T * C * sizeof *dh);
        for (int t = 0; t < T; t++) {
            if (tg[t] == -100) continue;
            for (int v = 0; v < V; v++) dlog[v] = (prob[(size_t)t * V + v] - (v == tg[t])) / (double)count;
            lin_bwd(dh + (size_t)t * C, dlog, hf + (size_t)t * C, &head, NULL, 1, C, V);
        }
        memset(dx, 0, (size_t)T * C * sizeof *dx);
        rms_bwd(dx, dh, x, &fnorm, rf, T, C);
        for (int l = L - 1; l >= 0; l--) {
            const LayerPars *P = &lp[l];
            const Acts *a = &A[l];
            const int win = (c->window > 0 && l >= c->window_first_layer) ? c->window : 0;
            /* MLP: x = x2 + down(silu(g) * u); dx flows to x2 unchanged, plus through the branch */
            memset(da, 0, (size_t)T * I * sizeof *da);
            lin_bwd(da, dx, a->a, &P->down, &P->bdown, T, I, C);
            for (size_t i = 0; i < (size_t)T * I; i++) {
                const double s = sigmoid(a->g[i]);
                dg[i] = da[i] * a->u[i] * s * (1.0 + a->g[i] * (1.0 - s));
                du[i] = da[i] * a->g[i] * s;
            }
            memset(dh, 0, (size_t)T * C * sizeof *dh);
            lin_bwd(dh, dg, a->h2, &P->gate, &P->bgate, T, C, I);
            lin_bwd(dh, du, a->h2, &P->up, &P->bup, T, C, I);
            rms_bwd(dx, dh, a->x2, &P->post_norm, a->r2, T, C); /* dx is now d x2 */
            /* attention: x2 = xin + o(y) */
            memset(dy, 0, (size_t)T * QD * sizeof *dy);
            lin_bwd(dy, dx, a->y, &P->o, &P->bo, T, QD, C);
            memset(dq, 0, (size_t)T * QD * sizeof *dq);
            memset(dk, 0, (size_t)T * KD * sizeof *dk);
            memset(dv, 0, (size_t)T * KD * sizeof *dv);
            for (int h = 0; h < NH; h++) {
                const int g = h / rep;
                for (int t = 0; t < T; t++) {
                    const int lo = win ? (t - win + 1 > 0 ? t - win + 1 : 0) : 0;
                    const double *pr = a->p + ((size_t)h * T + t) * T, *dyv = dy + (size_t)t * QD + h * hd;
                    const double *qv = a->q + (size_t)t * QD + h * hd;
                    double sum = 0;
                    for (int j = lo; j <= t; j++) {
                        double s = 0;
                        for (int i = 0; i < hd; i++) {
                            s += dyv[i] * a->v[(size_t)j * KD + g * hd + i];
                            dv[(size_t)j * KD + g * hd + i] += pr[j] * dyv[i];
                        }
                        dp[j] = s;
                        sum += pr[j] * s;
                    }
                    for (int j = lo; j <= t; j++) {
                        const double ds = pr[j] * (dp[j] - sum) * scale;
                        for (int i = 0; i < hd; i++) {
                            dq[(size_t)t * QD + h * hd + i] += ds * a->k[(size_t)j * KD + g * hd + i];
                            dk[(size_t)j * KD + g * hd + i] += ds * qv[i];
                        }
                    }
                }
            }
            rope_apply(dq, T, NH, hd, cs, sn, true);
            rope_apply(dk, T, NKV, hd, cs, sn, true);
            memset(dh, 0, (size_t)T * C * sizeof *dh);
            lin_bwd(dh, dq, a->h1, &P->q, &P->bq, T, C, QD);
            lin_bwd(dh, dk, a->h1, &P->k, &P->bk, T, C, KD);
            lin_bwd(dh, dv, a->h1, &P->v, &P->bv, T, C, KD);
            rms_bwd(dx, dh, a->xin, &P->in_norm, a->r1, T, C); /* dx is now d xin */
        }
        for (int t = 0; t < T; t++)
            for (int i = 0; i < C; i++) embed.gw[(size_t)tk[t] * C + i] += dx[(size_t)t * C + i];
    }

    for (int l = 0; l < L; l++) {
        Acts *a = &A[l];
        free(a->xin), free(a->r1), free(a->h1), free(a->q), free(a->k), free(a->v), free(a->p);
        free(a->y), free(a->x2), free(a->r2), free(a->h2), free(a->g), free(a->u), free(a->a);
    }
    free(A);
    free(lp);
    free(cs), free(sn), free(x), free(rf), free(hf), free(prob), free(tmp);
    free(dx), free(dh), free(dq), free(dk), free(dv), free(dy), free(dg), free(du), free(da), free(dlog), free(dp);
    return count ? total / (double)count : 0.0;
}

double ref_llama_loss(const RefLlamaCfg *c, RefTensor *tensors, int n, const int *tokens, const int *targets, int B,
                      int T, bool want_grad) {
    return loss_impl(c, tensors, n, NULL, tokens, targets, B, T, want_grad);
}

double ref_llama_loss_lora(const RefLlamaCfg *c, RefTensor *tensors, int n, const struct RefLora *lora,
                           const int *tokens, const int *targets, int B, int T) {
    return loss_impl(c, tensors, n, lora, tokens, targets, B, T, false);
}
