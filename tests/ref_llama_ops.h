/* ref_llama_ops.h - naive double-precision references of the Llama-family backend ops (RMSNorm,
 * rotary embeddings, SwiGLU), in the style of ref_ops.h (which holds the GPT-2 ops and the
 * grouped-query, sliding-window attention): written independently of the backends, the textbook
 * formulas, the full Jacobian where there is one. Same semantics as backend.h: rmsnorm's dinp and
 * dw ACCUMULATE, the other gradients are overwritten. */
#ifndef GT_TEST_REF_LLAMA_OPS_H
#define GT_TEST_REF_LLAMA_OPS_H

#include <stddef.h>

/* out = inp / sqrt(mean(inp^2) + eps) * w over rows of C; rstd may be NULL */
void ref_rmsnorm_forward(double *out, double *rstd, const double *inp, const double *w, int N, int C, double eps);
/* recomputes the row statistics itself; dinp and dw accumulate (either may be NULL) */
void ref_rmsnorm_backward(double *dinp, double *dw, const double *dout, const double *inp, const double *w, int N,
                          int C, double eps);

/* Per-head RMSNorm (Qwen3's q_norm/k_norm) on inp[N,(NH+2*NKV)*hd]: each of the NH q heads and
 * NKV k heads of a row is ref_rmsnorm_forward's row of hd values with wq (q heads) or wk (k
 * heads), rstd[n*(NH+NKV)+h] (rstd may be NULL); the NKV v heads are copied. */
void ref_head_rmsnorm_forward(double *out, double *rstd, const double *inp, const double *wq, const double *wk, int N,
                              int NH, int NKV, int hd, double eps);
/* dinp OVERWRITTEN: the q and k heads' gradient through ref_rmsnorm_backward, the v heads' = dout's;
 * dwq, dwk ACCUMULATE (either may be NULL) */
void ref_head_rmsnorm_backward(double *dinp, double *dwq, double *dwk, const double *dout, const double *inp,
                               const double *wq, const double *wk, int N, int NH, int NKV, int hd, double eps);

/* In place on the NH q heads and NKV k heads of qkv[B,T,(NH+2*NKV)*hd] (v heads untouched): each
 * pair (x[i], x[i+hd/2]) of a head is multiplied by the rotation [[c, -s], [s, c]], c and s from
 * cos/sin[p*hd/2 + i] at position p = pos0 + t. */
void ref_rope_forward(double *qkv, const double *cos, const double *sin, int B, int T, int pos0, int NH, int NKV,
                      int hd);
/* the gradient: each pair multiplied by the transpose of the forward's rotation (pos0 = 0) */
void ref_rope_backward(double *dqkv, const double *cos, const double *sin, int B, int T, int NH, int NKV, int hd);
/* the tables: angle p * base^(-2i/hd) for p < positions, i < hd/2 (cos/sin[p*hd/2 + i]) */
void ref_rope_tables(double *ctab, double *stab, int positions, int hd, double base);

/* inp[N,2I] = gate | up per row; out[N,I] = gate * sigmoid(gate) * up */
void ref_swiglu_forward(double *out, const double *inp, int N, int I);
/* dinp[N,2I] = d gate | d up, overwritten */
void ref_swiglu_backward(double *dinp, const double *inp, const double *dout, int N, int I);

#endif
