/* ref_llama_ops.c - see ref_llama_ops.h. Deliberately naive; clarity over speed. */
#include "ref_llama_ops.h"

#include <math.h>

static double row_rstd(const double *x, int C, double eps) {
    double ms = 0.0;
    for (int c = 0; c < C; c++) ms += x[c] * x[c];
    return 1.0 / sqrt(ms / C + eps);
}

void ref_rmsnorm_forward(double *out, double *rstd, const double *inp, const double *w, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        double r = row_rstd(inp + (size_t)n * C, C, eps);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = inp[(size_t)n * C + c] * r * w[c];
        if (rstd) rstd[n] = r;
    }
}

/* y_c = w_c x_c r(x), r = (sum_k x_k^2 / C + eps)^(-1/2): the full Jacobian
 * d y_c / d x_j = w_c (r delta_cj + x_c dr/dx_j), dr/dx_j = -r^3 x_j / C. */
void ref_rmsnorm_backward(double *dinp, double *dw, const double *dout, const double *inp, const double *w, int N,
                          int C, double eps) {
    for (int n = 0; n < N; n++) {
        const double *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        double r = row_rstd(x, C, eps);
        if (dw)
            for (int c = 0; c < C; c++) dw[c] += dy[c] * x[c] * r;
        if (!dinp) continue;
        for (int j = 0; j < C; j++) {
            double drdxj = -r * r * r * x[j] / C, g = 0.0;
            for (int c = 0; c < C; c++) g += dy[c] * w[c] * ((c == j ? r : 0.0) + x[c] * drdxj);
            dinp[(size_t)n * C + j] += g;
        }
    }
}

void ref_head_rmsnorm_forward(double *out, double *rstd, const double *inp, const double *wq, const double *wk, int N,
                              int NH, int NKV, int hd, double eps) {
    const int H = NH + NKV;
    const size_t R = (size_t)(H + NKV) * hd;
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H + NKV; h++) {
            size_t o = n * R + (size_t)h * hd;
            if (h < H)
                ref_rmsnorm_forward(out + o, rstd ? rstd + (size_t)n * H + h : NULL, inp + o, h < NH ? wq : wk, 1,
                                    hd, eps);
            else
                for (int c = 0; c < hd; c++) out[o + c] = inp[o + c];
        }
}

void ref_head_rmsnorm_backward(double *dinp, double *dwq, double *dwk, const double *dout, const double *inp,
                               const double *wq, const double *wk, int N, int NH, int NKV, int hd, double eps) {
    const int H = NH + NKV;
    const size_t R = (size_t)(H + NKV) * hd;
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H + NKV; h++) {
            size_t o = n * R + (size_t)h * hd;
            if (h < H) {
                if (dinp)
                    for (int c = 0; c < hd; c++) dinp[o + c] = 0.0;
                ref_rmsnorm_backward(dinp ? dinp + o : NULL, h < NH ? dwq : dwk, dout + o, inp + o, h < NH ? wq : wk, 1,
                                     hd, eps);
            } else if (dinp) {
                for (int c = 0; c < hd; c++) dinp[o + c] = dout[o + c];
            }
        }
}

/* m = [[c, -s], [s, c]] (transpose: [[c, s], [-s, c]]) applied to every rotated pair of qkv */
static void rope_apply(double *qkv, const double *cos, const double *sin, int B, int T, int pos0, int NH, int NKV,
                       int hd, int transpose) {
    int half = hd / 2;
    size_t R = (size_t)(NH + 2 * NKV) * hd;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH + NKV; h++) /* q heads, then k heads; v heads follow, untouched */
                for (int i = 0; i < half; i++) {
                    size_t p = (size_t)(pos0 + t) * half + i;
                    double m[2][2] = {{cos[p], -sin[p]}, {sin[p], cos[p]}};
                    if (transpose) {
                        double tmp = m[0][1];
                        m[0][1] = m[1][0];
                        m[1][0] = tmp;
                    }
                    double *x = qkv + ((size_t)b * T + t) * R + (size_t)h * hd;
                    double a = x[i], c = x[i + half];
                    x[i] = m[0][0] * a + m[0][1] * c;
                    x[i + half] = m[1][0] * a + m[1][1] * c;
                }
}

void ref_rope_forward(double *qkv, const double *cos, const double *sin, int B, int T, int pos0, int NH, int NKV,
                      int hd) {
    rope_apply(qkv, cos, sin, B, T, pos0, NH, NKV, hd, 0);
}

void ref_rope_backward(double *dqkv, const double *cos, const double *sin, int B, int T, int NH, int NKV, int hd) {
    rope_apply(dqkv, cos, sin, B, T, 0, NH, NKV, hd, 1);
}

void ref_rope_tables(double *ctab, double *stab, int positions, int hd, double base) {
    int half = hd / 2;
    for (int p = 0; p < positions; p++)
        for (int i = 0; i < half; i++) {
            double a = p * pow(base, -2.0 * i / hd);
            ctab[(size_t)p * half + i] = cos(a);
            stab[(size_t)p * half + i] = sin(a);
        }
}

static double sigmoid(double g) { return 1.0 / (1.0 + exp(-g)); }

void ref_swiglu_forward(double *out, const double *inp, int N, int I) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            double g = inp[(size_t)n * 2 * I + i], u = inp[(size_t)n * 2 * I + I + i];
            out[(size_t)n * I + i] = g * sigmoid(g) * u;
        }
}

/* d/dg (g sigmoid(g)) = sigmoid(g) + g sigmoid(g) (1 - sigmoid(g)) */
void ref_swiglu_backward(double *dinp, const double *inp, const double *dout, int N, int I) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            double g = inp[(size_t)n * 2 * I + i], u = inp[(size_t)n * 2 * I + I + i], dy = dout[(size_t)n * I + i];
            double sg = sigmoid(g);
            dinp[(size_t)n * 2 * I + i] = dy * u * (sg + g * sg * (1.0 - sg));
            dinp[(size_t)n * 2 * I + I + i] = dy * g * sg;
        }
}
