/* ref_ops.h - naive double-precision reference implementations of every backend op.
 *
 * Written independently of backend_cpu.c: plain loops, the attention matrix materialised, the
 * textbook backward formulas (softmax Jacobian, not the flash D trick). Same semantics as
 * backend.h: parameter gradients ACCUMULATE (+=), layernorm's dinp accumulates, the other
 * activation gradients are overwritten. Sizes here are small (tests only). */
#ifndef GT_TEST_REF_OPS_H
#define GT_TEST_REF_OPS_H

#include <stddef.h>

/* wpe / dwpe may be NULL (no position embedding, as Llama) */
void ref_encoder_forward(double *out, const int *tokens, const double *wte, const double *wpe,
                         int B, int T, int C);
void ref_encoder_backward(double *dwte, double *dwpe, const double *dout, const int *tokens, int B,
                          int T, int C);

/* mean/rstd may be NULL */
void ref_layernorm_forward(double *out, double *mean, double *rstd, const double *inp,
                           const double *w, const double *bias, int N, int C, double eps);
/* recomputes the row statistics itself; dinp, dw, dbias all accumulate */
void ref_layernorm_backward(double *dinp, double *dw, double *dbias, const double *dout,
                            const double *inp, const double *w, int N, int C, double eps);

void ref_matmul_forward(double *out, const double *inp, const double *w, const double *bias, int N,
                        int C, int OC);
/* dinp overwritten (if not NULL), dw and dbias (if not NULL) accumulate */
void ref_matmul_backward(double *dinp, double *dw, double *dbias, const double *dout,
                         const double *inp, const double *w, int N, int C, int OC);

/* Causal attention with grouped-query heads and a sliding window (backend.h's contract):
 * qkv[B,T,(NH+2*NKV)*hd], out[B,T,NH*hd], lse[B,NH,T] (may be NULL); query head h reads kv head
 * h / (NH/NKV); window > 0: query t sees keys j with t - j < window, 0: all j <= t. The T x T
 * scores of each head are materialised. */
void ref_attention_gqa_forward(double *out, double *lse, const double *qkv, int B, int T, int NH, int NKV, int hd,
                               int window);
/* dqkv overwritten (dK, dV of a kv head summed over its query heads); out as for
 * ref_attention_backward below */
void ref_attention_gqa_backward(double *dqkv, const double *dout, const double *qkv, const double *out, int B, int T,
                                int NH, int NKV, int hd, int window);

/* plain multi-head (GPT-2): the above with NKV = NH, hd = C / NH, no window. lse may be NULL */
void ref_attention_forward(double *out, double *lse, const double *qkv, int B, int T, int C,
                           int NH);
/* dqkv overwritten. out: the forward output as the op under test holds it (bf16-rounded under
 * bf16), whose row dot with dout enters the softmax backward as sum_k datt*att = dout . out;
 * NULL: the exact value, from the attention matrix. */
void ref_attention_backward(double *dqkv, const double *dout, const double *qkv, const double *out,
                            int B, int T, int C, int NH);

void ref_gelu_forward(double *out, const double *inp, size_t n);
void ref_gelu_backward(double *dinp, const double *inp, const double *dout, size_t n);

void ref_add(double *out, const double *x, const double *y, size_t n);

/* losses[n]; if dlogits != NULL it receives dloss_scale * (softmax - onehot), zero rows for -100 */
void ref_crossentropy(double *losses, double *dlogits, const double *logits, const int *targets,
                      int N, int V, double dloss_scale);

void ref_adamw(double *param, const double *grad, double *m, double *v, size_t n, double lr,
               double beta1, double beta2, double eps, double weight_decay, int t);
double ref_sum_squares(const double *x, size_t n);

/* x rounded to bfloat16 from the definition (8 significant bits, the nearer of the two neighbours,
 * a tie to the one whose last bit is 0), in double arithmetic: no bit patterns. Finite, normal
 * bf16 range; zero, NaN and Inf come back as they are. */
double ref_round_bf16(double x);

#endif
