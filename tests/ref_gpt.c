/* ref_gpt.c - straightforward double-precision GPT-2, written from the HF GPT2LMHeadModel
 * equations with no shared code beyond the parameter names. Slow and simple on purpose. */
#include "ref_gpt.h"

#include "ref_lora.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const double *P(const ParamLayout *pl, const double *params, const char *name) {
    int i = param_layout_find(pl, name);
    if (i < 0) abort();
    return params + pl->tensors[i].offset;
}

static void ln(double *out, const double *x, const double *w, const double *b, int C, double eps) {
    double mean = 0, var = 0;
    for (int i = 0; i < C; i++) mean += x[i];
    mean /= C;
    for (int i = 0; i < C; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= C;
    double rs = 1.0 / sqrt(var + eps);
    for (int i = 0; i < C; i++) out[i] = (x[i] - mean) * rs * w[i] + b[i];
}

/* y[OC] = W[OC, IC] x + b */
static void linear(double *y, const double *x, const double *W, const double *b, int IC, int OC) {
    for (int o = 0; o < OC; o++) {
        double s = b ? b[o] : 0.0;
        for (int i = 0; i < IC; i++) s += W[(size_t)o * IC + i] * x[i];
        y[o] = s;
    }
}

static double gelu_tanh(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

double ref_gpt_loss_sum_lora(const ModelDesc *d, const ParamLayout *pl, const double *params, const RefLora *lora,
                             const int *tokens, const int *targets, int B, int T, long *count) {
    if (lora && lora->layers != d->n_layer) abort();
    const int C = d->n_embd, NH = d->n_head, hs = C / NH, I = d->n_inner, V = d->vocab_size;
    double *x = calloc((size_t)T * C, sizeof *x), *h = calloc((size_t)T * C, sizeof *h);
    double *qkv = calloc((size_t)T * 3 * C, sizeof *qkv), *y = calloc((size_t)T * C, sizeof *y);
    double *tmp = calloc((size_t)(I > C ? I : C) + V, sizeof *tmp), *f = calloc((size_t)I, sizeof *f);
    double *att = calloc((size_t)T, sizeof *att);
    const double *wte = P(pl, params, "wte.weight"), *wpe = P(pl, params, "wpe.weight");
    const double *head = d->tie_word_embeddings ? wte : P(pl, params, "lm_head.weight");
    double total = 0.0;
    long n = 0;
    char nm[64];
#define LP(s) (snprintf(nm, sizeof nm, "h.%d.%s", l, s), P(pl, params, nm))
    for (int b = 0; b < B; b++) {
        const int *tk = tokens + (size_t)b * T, *tg = targets + (size_t)b * T;
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) x[t * C + c] = wte[(size_t)tk[t] * C + c] + wpe[(size_t)t * C + c];
        for (int l = 0; l < d->n_layer; l++) {
            for (int t = 0; t < T; t++) {
                ln(h + t * C, x + t * C, LP("ln_1.weight"), LP("ln_1.bias"), C, d->layer_norm_epsilon);
                linear(qkv + (size_t)t * 3 * C, h + t * C, LP("attn.c_attn.weight"), LP("attn.c_attn.bias"), C, 3 * C);
                ref_lora_apply(lora, l, REF_LORA_C_ATTN, h + t * C, 1, (long)b * T + t, C, qkv + (size_t)t * 3 * C, 3 * C);
            }
            for (int hd = 0; hd < NH; hd++)
                for (int t = 0; t < T; t++) {
                    const double *q = qkv + (size_t)t * 3 * C + hd * hs;
                    double mx = -INFINITY, sum = 0;
                    for (int s = 0; s <= t; s++) {
                        const double *k = qkv + (size_t)s * 3 * C + C + hd * hs;
                        double dot = 0;
                        for (int i = 0; i < hs; i++) dot += q[i] * k[i];
                        att[s] = dot / sqrt((double)hs);
                        if (att[s] > mx) mx = att[s];
                    }
                    for (int s = 0; s <= t; s++) sum += (att[s] = exp(att[s] - mx));
                    for (int i = 0; i < hs; i++) {
                        double acc = 0;
                        for (int s = 0; s <= t; s++) acc += att[s] / sum * qkv[(size_t)s * 3 * C + 2 * C + hd * hs + i];
                        y[t * C + hd * hs + i] = acc;
                    }
                }
            for (int t = 0; t < T; t++) {
                const long row = (long)b * T + t; /* the row in the micro-batch (ref_lora adds row_base) */
                linear(tmp, y + t * C, LP("attn.c_proj.weight"), LP("attn.c_proj.bias"), C, C);
                ref_lora_apply(lora, l, REF_LORA_ATTN_C_PROJ, y + t * C, 1, row, C, tmp, C);
                for (int c = 0; c < C; c++) x[t * C + c] += tmp[c];
                ln(h + t * C, x + t * C, LP("ln_2.weight"), LP("ln_2.bias"), C, d->layer_norm_epsilon);
                linear(f, h + t * C, LP("mlp.c_fc.weight"), LP("mlp.c_fc.bias"), C, I);
                ref_lora_apply(lora, l, REF_LORA_C_FC, h + t * C, 1, row, C, f, I);
                for (int i = 0; i < I; i++) f[i] = gelu_tanh(f[i]);
                linear(tmp, f, LP("mlp.c_proj.weight"), LP("mlp.c_proj.bias"), I, C);
                ref_lora_apply(lora, l, REF_LORA_MLP_C_PROJ, f, 1, row, I, tmp, C);
                for (int c = 0; c < C; c++) x[t * C + c] += tmp[c];
            }
        }
        for (int t = 0; t < T; t++) {
            if (tg[t] == -100) continue;
            ln(h + t * C, x + t * C, P(pl, params, "ln_f.weight"), P(pl, params, "ln_f.bias"), C, d->layer_norm_epsilon);
            double *logits = tmp;
            linear(logits, h + t * C, head, NULL, C, V);
            double mx = -INFINITY, sum = 0;
            for (int v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
            for (int v = 0; v < V; v++) sum += exp(logits[v] - mx);
            total += -(logits[tg[t]] - mx - log(sum));
            n++;
        }
    }
#undef LP
    free(x), free(h), free(qkv), free(y), free(tmp), free(f), free(att);
    *count = n;
    return total;
}

double ref_gpt_loss_sum(const ModelDesc *d, const ParamLayout *pl, const double *params, const int *tokens,
                        const int *targets, int B, int T, long *count) {
    return ref_gpt_loss_sum_lora(d, pl, params, NULL, tokens, targets, B, T, count);
}
