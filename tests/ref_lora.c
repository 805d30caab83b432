/* ref_lora.c - the reference models' LoRA adapters (ref_lora.h): the adapter's forward with PEFT's
 * dropout in double, the merged weight, and finite-difference gradients. Slow and simple on purpose.
 * The only gtrain code used is dropout.h, the header-only definition of the mask. */
#include "ref_lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dropout.h"

static double *zalloc(size_t n) {
    double *p = calloc(n ? n : 1, sizeof *p);
    if (!p) abort();
    return p;
}

void ref_lora_init(RefLora *lo, int layers, int r, double scale) {
    memset(lo, 0, sizeof *lo);
    lo->layers = layers, lo->r = r, lo->scale = scale;
    lo->ad = calloc((size_t)(layers > 0 ? layers : 1), sizeof *lo->ad);
    if (!lo->ad || r <= 0) abort();
}

void ref_lora_free(RefLora *lo) {
    if (!lo->ad) return;
    for (int l = 0; l < lo->layers; l++)
        for (int m = 0; m < REF_LORA_MODULES; m++) {
            RefLoraAdapter *a = &lo->ad[l][m];
            free(a->A), free(a->B), free(a->dA), free(a->dB), free(a->m), free(a->dm), free(a->norm);
        }
    free(lo->ad);
    lo->ad = NULL;
}

RefLoraAdapter *ref_lora_add(RefLora *lo, int layer, int module, int in, int out) {
    if (layer < 0 || layer >= lo->layers || module < 0 || module >= REF_LORA_MODULES || in <= 0 || out <= 0) abort();
    RefLoraAdapter *a = &lo->ad[layer][module];
    free(a->A), free(a->B), free(a->dA), free(a->dB), free(a->m), free(a->dm), free(a->norm);
    const size_t na = (size_t)lo->r * in, nb = (size_t)out * lo->r;
    *a = (RefLoraAdapter){.A = zalloc(na), .B = zalloc(nb), .dA = zalloc(na), .dB = zalloc(nb), .in = in, .out = out};
    return a;
}

RefLoraAdapter *ref_lora_add_dora(RefLora *lo, int layer, int module, int in, int out, const double *W) {
    if (!W) abort();
    RefLoraAdapter *a = ref_lora_add(lo, layer, module, in, out);
    a->m = zalloc((size_t)out), a->dm = zalloc((size_t)out), a->norm = zalloc((size_t)out), a->W = W;
    return a;
}

void ref_lora_dora_norms(const RefLora *lo, const RefLoraAdapter *a, double *norm) {
    const int r = lo->r, in = a->in;
    for (int o = 0; o < a->out; o++) {
        double ss = 0;
        for (int c = 0; c < in; c++) {
            double ba = 0;
            for (int k = 0; k < r; k++) ba += a->B[(size_t)o * r + k] * a->A[(size_t)k * in + c];
            const double w = a->W[(size_t)o * in + c] + lo->scale * ba;
            ss += w * w;
        }
        norm[o] = sqrt(ss);
    }
}

void ref_lora_freeze_norms(RefLora *lo) {
    for (int l = 0; l < lo->layers; l++)
        for (int m = 0; m < REF_LORA_MODULES; m++) {
            RefLoraAdapter *a = &lo->ad[l][m];
            if (a->A && a->m) ref_lora_dora_norms(lo, a, a->norm);
        }
    lo->freeze_norm = true;
}

/* g[o] = m[o] / norm[o]: the stored norm when frozen, else the current one */
static double *dora_gain(const RefLora *lo, const RefLoraAdapter *a) {
    double *g = zalloc((size_t)a->out);
    if (lo->freeze_norm)
        memcpy(g, a->norm, (size_t)a->out * sizeof *g);
    else
        ref_lora_dora_norms(lo, a, g);
    for (int o = 0; o < a->out; o++) g[o] = a->m[o] / g[o];
    return g;
}

double ref_lora_scaling(double lora_alpha, int r, bool use_rslora) {
    return use_rslora ? lora_alpha / sqrt((double)r) : lora_alpha / (double)r;
}

static const RefLoraAdapter *adapter(const RefLora *lo, int layer, int module, int in, int out) {
    if (!lo || layer >= lo->layers) return NULL;
    const RefLoraAdapter *a = &lo->ad[layer][module];
    if (!a->A) return NULL;
    if (a->in != in || a->out != out) {
        fprintf(stderr, "ref_lora: layer %d module %d: adapter is %d -> %d, the module %d -> %d\n", layer, module,
                a->in, a->out, in, out);
        abort();
    }
    return a;
}

void ref_lora_apply(const RefLora *lo, int layer, int module, const double *x, int rows, long row0, int in, double *y,
                    int out) {
    const RefLoraAdapter *a = adapter(lo, layer, module, in, out);
    if (!a) return;
    const int r = lo->r;
    const bool drop = lo->p > 0;
    if (drop && !lo->key) {
        fprintf(stderr, "ref_lora: dropout without a key function\n");
        abort();
    }
    const uint64_t key = drop ? lo->key(lo->seed, lo->step, layer, module) : 0;
    const uint32_t thr = gt_dropout_threshold(lo->p);
    const double keep_scale = drop ? 1.0 / (1.0 - lo->p) : 1.0;
    double *xd = zalloc((size_t)in), *z = zalloc((size_t)r);
    double *gain = a->m ? dora_gain(lo, a) : NULL;
    for (int n = 0; n < rows; n++) {
        const uint64_t base = (uint64_t)(lo->row_base + row0 + n) * (uint64_t)in; /* the step's whole batch */
        for (int c = 0; c < in; c++) {
            const double v = x[(size_t)n * in + c];
            xd[c] = !drop ? v : gt_dropout_keep(key, base + (uint64_t)c, thr) ? v * keep_scale : 0.0;
        }
        for (int k = 0; k < r; k++) {
            double s = 0;
            for (int c = 0; c < in; c++) s += a->A[(size_t)k * in + c] * xd[c];
            z[k] = s;
        }
        for (int o = 0; o < out; o++) {
            double s = 0;
            for (int k = 0; k < r; k++) s += a->B[(size_t)o * r + k] * z[k];
            if (!gain) {
                y[(size_t)n * out + o] += lo->scale * s;
                continue;
            }
            double wx = 0; /* DoRA: (g - 1) W xd + g scale B A xd */
            for (int c = 0; c < in; c++) wx += a->W[(size_t)o * in + c] * xd[c];
            y[(size_t)n * out + o] += (gain[o] - 1.0) * wx + gain[o] * lo->scale * s;
        }
    }
    free(xd), free(z), free(gain);
}

void ref_lora_merge(const RefLora *lo, int layer, int module, double *W, int out, int in) {
    const RefLoraAdapter *a = adapter(lo, layer, module, in, out);
    if (!a) return;
    double *norm = NULL;
    if (a->m) {
        norm = zalloc((size_t)out);
        ref_lora_dora_norms(lo, a, norm);
    }
    for (int o = 0; o < out; o++)
        for (int c = 0; c < in; c++) {
            double s = 0;
            for (int k = 0; k < lo->r; k++) s += a->B[(size_t)o * lo->r + k] * a->A[(size_t)k * in + c];
            W[(size_t)o * in + c] += lo->scale * s;
            if (norm) W[(size_t)o * in + c] *= a->m[o] / norm[o];
        }
    free(norm);
}

void ref_lora_dora_backward(RefLora *lo, int layer, int module, const double *x, int rows, const double *dy, double *dx) {
    if (!lo || layer < 0 || layer >= lo->layers || module < 0 || module >= REF_LORA_MODULES) abort();
    RefLoraAdapter *a = &lo->ad[layer][module];
    if (!a->A || !a->m || lo->p > 0) {
        fprintf(stderr, "ref_lora: dora_backward needs a DoRA adapter and no dropout\n");
        abort();
    }
    const int r = lo->r, in = a->in, out = a->out;
    const double s = lo->scale;
    double *gain = dora_gain(lo, a), *z = zalloc((size_t)r), *dz = zalloc((size_t)r);
    for (int n = 0; n < rows; n++) {
        const double *xn = x + (size_t)n * in, *dyn = dy + (size_t)n * out;
        for (int k = 0; k < r; k++) {
            double t = 0;
            for (int c = 0; c < in; c++) t += a->A[(size_t)k * in + c] * xn[c];
            z[k] = t, dz[k] = 0;
        }
        for (int o = 0; o < out; o++) {
            /* y_o = g_o (W x + s B z)_o + b_o, g_o = m_o / norm_o with norm_o a constant */
            double wx = 0, bz = 0;
            for (int c = 0; c < in; c++) wx += a->W[(size_t)o * in + c] * xn[c];
            for (int k = 0; k < r; k++) bz += a->B[(size_t)o * r + k] * z[k];
            const double u = wx + s * bz, gy = gain[o] * dyn[o];
            a->dm[o] += dyn[o] * u * (gain[o] / a->m[o]); /* d g_o / d m_o = 1 / norm_o */
            for (int k = 0; k < r; k++) {
                a->dB[(size_t)o * r + k] += gy * s * z[k];
                dz[k] += gy * s * a->B[(size_t)o * r + k];
            }
            if (dx)
                for (int c = 0; c < in; c++) dx[(size_t)n * in + c] += gy * a->W[(size_t)o * in + c];
        }
        for (int k = 0; k < r; k++)
            for (int c = 0; c < in; c++) {
                a->dA[(size_t)k * in + c] += dz[k] * xn[c];
                if (dx) dx[(size_t)n * in + c] += dz[k] * a->A[(size_t)k * in + c];
            }
    }
    free(gain), free(z), free(dz);
}

/* d loss / d w[i] for every i < n by central differences; returns the largest |gradient| */
static double fd_array(RefLora *lo, double *w, double *g, size_t n, RefLoraLossFn loss, void *ctx, double rel) {
    double big = 0;
    for (size_t i = 0; i < n; i++) {
        const double keep = w[i], h = rel * (1.0 + fabs(keep));
        w[i] = keep + h;
        const double lp = loss(ctx, lo);
        w[i] = keep - h;
        const double lm = loss(ctx, lo);
        w[i] = keep;
        if (!isfinite(lp) || !isfinite(lm)) return NAN;
        g[i] = (lp - lm) / (2 * h);
        big = fmax(big, fabs(g[i]));
    }
    return big;
}

double ref_lora_fd_grads(RefLora *lo, RefLoraLossFn loss, void *ctx, double rel_step) {
    double big = 0;
    for (int l = 0; l < lo->layers; l++)
        for (int m = 0; m < REF_LORA_MODULES; m++) {
            RefLoraAdapter *a = &lo->ad[l][m];
            if (!a->A) continue;
            const double ba = fd_array(lo, a->A, a->dA, (size_t)lo->r * a->in, loss, ctx, rel_step);
            const double bb = fd_array(lo, a->B, a->dB, (size_t)a->out * lo->r, loss, ctx, rel_step);
            const double bm = a->m ? fd_array(lo, a->m, a->dm, (size_t)a->out, loss, ctx, rel_step) : 0.0;
            if (isnan(ba) || isnan(bb) || isnan(bm)) return NAN;
            big = fmax(big, fmax(ba, fmax(bb, bm)));
        }
    return big;
}
