/* ref_ops.c - see ref_ops.h. Deliberately naive; clarity over speed. */
#include "ref_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ref_encoder_forward(double *out, const int *tokens, const double *wte, const double *wpe,
                         int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                out[(b * T + t) * C + c] = wte[tokens[b * T + t] * C + c] + (wpe ? wpe[t * C + c] : 0.0);
}

void ref_encoder_backward(double *dwte, double *dwpe, const double *dout, const int *tokens, int B,
                          int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                double g = dout[(b * T + t) * C + c];
                dwte[tokens[b * T + t] * C + c] += g;
                if (dwpe) dwpe[t * C + c] += g;
            }
}

static void row_stats(const double *x, int C, double eps, double *mean, double *rstd) {
    double m = 0.0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    double var = 0.0;
    for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    var /= C;
    *mean = m;
    *rstd = 1.0 / sqrt(var + eps);
}

void ref_layernorm_forward(double *out, double *mean, double *rstd, const double *inp,
                           const double *w, const double *bias, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        double m, s;
        row_stats(inp + n * C, C, eps, &m, &s);
        for (int c = 0; c < C; c++) out[n * C + c] = (inp[n * C + c] - m) * s * w[c] + bias[c];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = s;
    }
}

/* Direct chain rule through xhat_c = (x_c - mean) * rstd with the full Jacobian
 * d xhat_c / d x_j = rstd * (delta_cj - 1/C - xhat_c * xhat_j / C). */
void ref_layernorm_backward(double *dinp, double *dw, double *dbias, const double *dout,
                            const double *inp, const double *w, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        const double *x = inp + n * C;
        const double *dy = dout + n * C;
        double m, s;
        row_stats(x, C, eps, &m, &s);
        for (int c = 0; c < C; c++) {
            double xh = (x[c] - m) * s;
            if (dw) dw[c] += dy[c] * xh;
            if (dbias) dbias[c] += dy[c];
        }
        if (!dinp) continue;
        for (int j = 0; j < C; j++) {
            double xhj = (x[j] - m) * s;
            double g = 0.0;
            for (int c = 0; c < C; c++) {
                double xhc = (x[c] - m) * s;
                double jac = s * ((c == j ? 1.0 : 0.0) - 1.0 / C - xhc * xhj / C);
                g += dy[c] * w[c] * jac;
            }
            dinp[n * C + j] += g;
        }
    }
}

void ref_matmul_forward(double *out, const double *inp, const double *w, const double *bias, int N,
                        int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += inp[n * C + c] * w[o * C + c];
            out[n * OC + o] = s;
        }
}

void ref_matmul_backward(double *dinp, double *dw, double *dbias, const double *dout,
                         const double *inp, const double *w, int N, int C, int OC) {
    if (dinp)
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double s = 0.0;
                for (int o = 0; o < OC; o++) s += dout[n * OC + o] * w[o * C + c];
                dinp[n * C + c] = s;
            }
    if (dw)
        for (int o = 0; o < OC; o++)
            for (int c = 0; c < C; c++) {
                double s = 0.0;
                for (int n = 0; n < N; n++) s += dout[n * OC + o] * inp[n * C + c];
                dw[o * C + c] += s;
            }
    if (dbias)
        for (int o = 0; o < OC; o++) {
            double s = 0.0;
            for (int n = 0; n < N; n++) s += dout[n * OC + o];
            dbias[o] += s;
        }
}

/* Attention with grouped-query heads and a sliding window. qkv rows: [NH q | NKV k | NKV v] heads
 * of hd each; query head h reads kv head h / (NH / NKV). */
typedef struct {
    int B, T, NH, NKV, hd, window;
} AttShape;

static size_t qkv_at(const AttShape *s, int b, int t, int which, int head) { /* which: 0 q, 1 k, 2 v */
    size_t R = (size_t)(s->NH + 2 * s->NKV) * s->hd;
    int col_head = which == 0 ? head : which == 1 ? s->NH + head : s->NH + s->NKV + head;
    return ((size_t)b * s->T + t) * R + (size_t)col_head * s->hd;
}
static size_t out_at(const AttShape *s, int b, int t, int h) {
    return ((size_t)b * s->T + t) * s->NH * s->hd + (size_t)h * s->hd;
}
/* key j is visible to query t: causal, and within the window (t - j < window) when there is one */
static int att_sees(const AttShape *s, int t, int j) { return j <= t && (s->window <= 0 || t - j < s->window); }

/* att[t][j] for one (b, h), zero where query t does not see key j. Also returns the scores' lse. */
static void att_matrix(double *att, double *lse, const double *qkv, int b, int h, const AttShape *s) {
    int T = s->T, hd = s->hd, g = h / (s->NH / s->NKV);
    double scale = 1.0 / sqrt((double)hd);
    for (int t = 0; t < T; t++) {
        const double *q = qkv + qkv_at(s, b, t, 0, h);
        double mx = -INFINITY;
        for (int j = 0; j < T; j++) {
            double sc = 0.0;
            if (att_sees(s, t, j)) {
                const double *k = qkv + qkv_at(s, b, j, 1, g);
                for (int i = 0; i < hd; i++) sc += q[i] * k[i];
                sc *= scale;
                if (sc > mx) mx = sc;
            }
            att[t * T + j] = sc;
        }
        double sum = 0.0;
        for (int j = 0; j < T; j++)
            if (att_sees(s, t, j)) sum += exp(att[t * T + j] - mx);
        for (int j = 0; j < T; j++) att[t * T + j] = att_sees(s, t, j) ? exp(att[t * T + j] - mx) / sum : 0.0;
        if (lse) lse[((size_t)b * s->NH + h) * T + t] = mx + log(sum);
    }
}

void ref_attention_gqa_forward(double *out, double *lse, const double *qkv, int B, int T, int NH, int NKV, int hd,
                               int window) {
    AttShape s = {B, T, NH, NKV, hd, window};
    double *att = malloc(sizeof(double) * (size_t)T * T);
    if (!att) abort();
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            att_matrix(att, lse, qkv, b, h, &s);
            for (int t = 0; t < T; t++)
                for (int i = 0; i < hd; i++) {
                    double sum = 0.0;
                    for (int j = 0; j < T; j++) sum += att[t * T + j] * qkv[qkv_at(&s, b, j, 2, g) + i];
                    out[out_at(&s, b, t, h) + i] = sum;
                }
        }
    free(att);
}

void ref_attention_gqa_backward(double *dqkv, const double *dout, const double *qkv, const double *out, int B, int T,
                                int NH, int NKV, int hd, int window) {
    AttShape s = {B, T, NH, NKV, hd, window};
    double scale = 1.0 / sqrt((double)hd);
    double *att = malloc(sizeof(double) * (size_t)T * T);
    double *datt = malloc(sizeof(double) * (size_t)T * T);
    double *dpre = malloc(sizeof(double) * (size_t)T * T);
    if (!att || !datt || !dpre) abort();
    memset(dqkv, 0, sizeof(double) * (size_t)B * T * (NH + 2 * NKV) * hd);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV); /* dk, dv of kv head g gather every query head of its group */
            att_matrix(att, NULL, qkv, b, h, &s);
            /* out = att @ v: datt = dout @ v^T, dv += att^T @ dout */
            for (int t = 0; t < T; t++)
                for (int j = 0; j < T; j++) {
                    double sum = 0.0;
                    for (int i = 0; i < hd; i++) sum += dout[out_at(&s, b, t, h) + i] * qkv[qkv_at(&s, b, j, 2, g) + i];
                    datt[t * T + j] = sum;
                }
            for (int j = 0; j < T; j++)
                for (int i = 0; i < hd; i++) {
                    double sum = 0.0;
                    for (int t = 0; t < T; t++) sum += att[t * T + j] * dout[out_at(&s, b, t, h) + i];
                    dqkv[qkv_at(&s, b, j, 2, g) + i] += sum;
                }
            /* softmax Jacobian: dpre[t][j] = sum_k datt[t][k] * att[t][k] * (delta_jk - att[t][j])
             *                             = att[t][j] * (datt[t][j] - D[t]),
             * D[t] = sum_k datt[t][k] * att[t][k] (= dout[t] . out[t]) */
            for (int t = 0; t < T; t++) {
                double D = 0.0;
                if (out)
                    for (int i = 0; i < hd; i++) D += dout[out_at(&s, b, t, h) + i] * out[out_at(&s, b, t, h) + i];
                else
                    for (int k = 0; k < T; k++) D += datt[t * T + k] * att[t * T + k];
                for (int j = 0; j < T; j++)
                    dpre[t * T + j] = att_sees(&s, t, j) ? att[t * T + j] * (datt[t * T + j] - D) : 0.0;
            }
            /* pre = scale * q @ k^T */
            for (int t = 0; t < T; t++)
                for (int j = 0; j < T; j++) {
                    if (!att_sees(&s, t, j)) continue;
                    double gr = dpre[t * T + j] * scale;
                    for (int i = 0; i < hd; i++) {
                        dqkv[qkv_at(&s, b, t, 0, h) + i] += gr * qkv[qkv_at(&s, b, j, 1, g) + i];
                        dqkv[qkv_at(&s, b, j, 1, g) + i] += gr * qkv[qkv_at(&s, b, t, 0, h) + i];
                    }
                }
        }
    free(att);
    free(datt);
    free(dpre);
}

void ref_attention_forward(double *out, double *lse, const double *qkv, int B, int T, int C, int NH) {
    ref_attention_gqa_forward(out, lse, qkv, B, T, NH, NH, C / NH, 0);
}

void ref_attention_backward(double *dqkv, const double *dout, const double *qkv, const double *out, int B, int T,
                            int C, int NH) {
    ref_attention_gqa_backward(dqkv, dout, qkv, out, B, T, NH, NH, C / NH, 0);
}

static const double k_gelu_k = 0.79788456080286535588; /* sqrt(2/pi) */

void ref_gelu_forward(double *out, const double *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = 0.5 * x * (1.0 + tanh(k_gelu_k * (x + 0.044715 * x * x * x)));
    }
}

void ref_gelu_backward(double *dinp, const double *inp, const double *dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        double u = k_gelu_k * (x + 0.044715 * x * x * x);
        double du = k_gelu_k * (1.0 + 3.0 * 0.044715 * x * x);
        double th = tanh(u);
        double d = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du;
        dinp[i] = dout[i] * d;
    }
}

void ref_add(double *out, const double *x, const double *y, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = x[i] + y[i];
}

void ref_crossentropy(double *losses, double *dlogits, const double *logits, const int *targets,
                      int N, int V, double dloss_scale) {
    for (int n = 0; n < N; n++) {
        const double *x = logits + (size_t)n * V;
        int tgt = targets[n];
        if (tgt == -100) {
            losses[n] = 0.0;
            if (dlogits)
                for (int i = 0; i < V; i++) dlogits[(size_t)n * V + i] = 0.0;
            continue;
        }
        double mx = x[0];
        for (int i = 1; i < V; i++)
            if (x[i] > mx) mx = x[i];
        double sum = 0.0;
        for (int i = 0; i < V; i++) sum += exp(x[i] - mx);
        losses[n] = -(x[tgt] - mx - log(sum));
        if (dlogits)
            for (int i = 0; i < V; i++)
                dlogits[(size_t)n * V + i] = dloss_scale * (exp(x[i] - mx) / sum - (i == tgt ? 1.0 : 0.0));
    }
}

void ref_adamw(double *param, const double *grad, double *m, double *v, size_t n, double lr,
               double beta1, double beta2, double eps, double weight_decay, int t) {
    double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
    for (size_t i = 0; i < n; i++) {
        param[i] -= lr * weight_decay * param[i];
        m[i] = beta1 * m[i] + (1.0 - beta1) * grad[i];
        v[i] = beta2 * v[i] + (1.0 - beta2) * grad[i] * grad[i];
        double mhat = m[i] / bc1, vhat = v[i] / bc2;
        /* the header's form: lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps) */
        param[i] -= lr * mhat / (sqrt(vhat) + eps);
    }
}

double ref_sum_squares(const double *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}

double ref_round_bf16(double x) {
    if (x == 0 || !isfinite(x)) return x;
    int e;
    const double m = frexp(fabs(x), &e); /* |x| = m 2^e, m in [0.5, 1) */
    const double scaled = ldexp(m, 8);   /* [128, 256): the 8 kept bits are its integer part */
    const double lo = floor(scaled), frac = scaled - lo;
    const double q = frac > 0.5 || (frac == 0.5 && fmod(lo, 2.0) == 1.0) ? lo + 1 : lo;
    return copysign(ldexp(q, e - 8), x);
}
