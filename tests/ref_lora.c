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
            free(a->A), free(a->B), free(a->dA), free(a->dB);
        }
    free(lo->ad);
    lo->ad = NULL;
}

RefLoraAdapter *ref_lora_add(RefLora *lo, int layer, int module, int in, int out) {
    if (layer < 0 || layer >= lo->layers || module < 0 || module >= REF_LORA_MODULES || in <= 0 || out <= 0) abort();
    RefLoraAdapter *a = &lo->ad[layer][module];
    free(a->A), free(a->B), free(a->dA), free(a->dB);
    const size_t na = (size_t)lo->r * in, nb = (size_t)out * lo->r;
    *a = (RefLoraAdapter){zalloc(na), zalloc(nb), zalloc(na), zalloc(nb), in, out};
    return a;
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
            y[(size_t)n * out + o] += lo->scale * s;
        }
    }
    free(xd), free(z);
}

void ref_lora_merge(const RefLora *lo, int layer, int module, double *W, int out, int in) {
    const RefLoraAdapter *a = adapter(lo, layer, module, in, out);
    if (!a) return;
    for (int o = 0; o < out; o++)
        for (int c = 0; c < in; c++) {
            double s = 0;
            for (int k = 0; k < lo->r; k++) s += a->B[(size_t)o * lo->r + k] * a->A[(size_t)k * in + c];
            W[(size_t)o * in + c] += lo->scale * s;
        }
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
            if (isnan(ba) || isnan(bb)) return NAN;
            big = fmax(big, fmax(ba, bb));
        }
    return big;
}
