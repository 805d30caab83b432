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
                out[(b * T + t) * C + c] = wte[tokens[b * T + t] * C + c] + wpe[t * C + c];
}

void ref_encoder_backward(double *dwte, double *dwpe, const double *dout, const int *tokens, int B,
                          int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                double g = dout[(b * T + t) * C + c];
                dwte[tokens[b * T + t] * C + c] += g;
                dwpe[t * C + c] += g;
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

/* att[t][t2] for one (b, h), t2 <= t; zero above the diagonal. Also returns the scores' lse. */
static void att_matrix(double *att, double *lse, const double *qkv, int b, int h, int T, int C,
                       int NH) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    for (int t = 0; t < T; t++) {
        const double *q = qkv + (b * T + t) * 3 * C + h * hs;
        double mx = -INFINITY;
        for (int t2 = 0; t2 < T; t2++) {
            double s = 0.0;
            if (t2 <= t) {
                const double *k = qkv + (b * T + t2) * 3 * C + C + h * hs;
                for (int i = 0; i < hs; i++) s += q[i] * k[i];
                s *= scale;
                if (s > mx) mx = s;
            }
            att[t * T + t2] = s;
        }
        double sum = 0.0;
        for (int t2 = 0; t2 <= t; t2++) sum += exp(att[t * T + t2] - mx);
        for (int t2 = 0; t2 < T; t2++)
            att[t * T + t2] = t2 <= t ? exp(att[t * T + t2] - mx) / sum : 0.0;
        if (lse) lse[(b * NH + h) * T + t] = mx + log(sum);
    }
}

void ref_attention_forward(double *out, double *lse, const double *qkv, int B, int T, int C,
                           int NH) {
    int hs = C / NH;
    double *att = malloc(sizeof(double) * (size_t)T * T);
    if (!att) abort();
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            att_matrix(att, lse, qkv, b, h, T, C, NH);
            for (int t = 0; t < T; t++)
                for (int i = 0; i < hs; i++) {
                    double s = 0.0;
                    for (int t2 = 0; t2 < T; t2++)
                        s += att[t * T + t2] * qkv[(b * T + t2) * 3 * C + 2 * C + h * hs + i];
                    out[(b * T + t) * C + h * hs + i] = s;
                }
        }
    free(att);
}

void ref_attention_backward(double *dqkv, const double *dout, const double *qkv, const double *out,
                            int B, int T, int C, int NH) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    double *att = malloc(sizeof(double) * (size_t)T * T);
    double *datt = malloc(sizeof(double) * (size_t)T * T);
    double *dpre = malloc(sizeof(double) * (size_t)T * T);
    if (!att || !datt || !dpre) abort();
    memset(dqkv, 0, sizeof(double) * (size_t)B * T * 3 * C);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            att_matrix(att, NULL, qkv, b, h, T, C, NH);
            /* out = att @ v: datt = dout @ v^T, dv = att^T @ dout */
            for (int t = 0; t < T; t++)
                for (int t2 = 0; t2 < T; t2++) {
                    double s = 0.0;
                    for (int i = 0; i < hs; i++)
                        s += dout[(b * T + t) * C + h * hs + i] *
                             qkv[(b * T + t2) * 3 * C + 2 * C + h * hs + i];
                    datt[t * T + t2] = s;
                }
            for (int t2 = 0; t2 < T; t2++)
                for (int i = 0; i < hs; i++) {
                    double s = 0.0;
                    for (int t = 0; t < T; t++) s += att[t * T + t2] * dout[(b * T + t) * C + h * hs + i];
                    dqkv[(b * T + t2) * 3 * C + 2 * C + h * hs + i] = s;
                }
            /* softmax Jacobian: dpre[t][j] = sum_k datt[t][k] * att[t][k] * (delta_jk - att[t][j])
             *                             = att[t][j] * (datt[t][j] - D[t]),
             * D[t] = sum_k datt[t][k] * att[t][k] (= dout[t] . out[t]) */
            for (int t = 0; t < T; t++) {
                double D = 0.0;
                if (out)
                    for (int i = 0; i < hs; i++) D += dout[(b * T + t) * C + h * hs + i] * out[(b * T + t) * C + h * hs + i];
                else
                    for (int k = 0; k < T; k++) D += datt[t * T + k] * att[t * T + k];
                for (int j = 0; j < T; j++) dpre[t * T + j] = j <= t ? att[t * T + j] * (datt[t * T + j] - D) : 0.0;
            }
            /* pre = scale * q @ k^T */
            for (int t = 0; t < T; t++)
                for (int t2 = 0; t2 <= t; t2++) {
                    double g = dpre[t * T + t2] * scale;
                    for (int i = 0; i < hs; i++) {
                        dqkv[(b * T + t) * 3 * C + h * hs + i] += g * qkv[(b * T + t2) * 3 * C + C + h * hs + i];
                        dqkv[(b * T + t2) * 3 * C + C + h * hs + i] += g * qkv[(b * T + t) * 3 * C + h * hs + i];
                    }
                }
        }
    free(att);
    free(datt);
    free(dpre);
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
