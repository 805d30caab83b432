/* qerr.h - the quantization error the PiSSA paper reports (Meng et al. 2024, "QPiSSA"), measured on
 * one matrix: ||W - deq(nf4(W))||_F (QLoRA: the base quantized as it is) against
 * ||W - (deq(nf4(W - s B A)) + s B A)||_F (QPiSSA: the principal part kept in the adapter, only the
 * residual quantized), with A, B from svd.h's pissa_init and the NF4 round trip from nf4.h.
 * The norms are naive double-precision sums over every entry (s B A formed in double from the fp32
 * A and B as stored). Shared by tests/test_qpissa.c (which asserts QPiSSA < QLoRA) and
 * bench/bench_nf4.c (which prints the table); no Criterion in here. */
#ifndef GT_QERR_H
#define GT_QERR_H

#include <stdint.h>

#include "common.h"
#include "nf4.h"

typedef struct {
    double w;      /* ||W||_F */
    double qlora;  /* ||W - deq(nf4(W))||_F */
    double qpissa; /* ||W - (deq(nf4(W - s B A)) + s B A)||_F */
    double exact;  /* ||W - (W_res + s B A)||_F: pissa_init's own rounding, no quantization */
} QerrRow;

/* W [rows, cols] fp32 (fresh malloc) = Q1 diag(sv) Q2^T with sv_k = k^-power (k = 1 ..
 * min(rows, cols)) and Q1, Q2 orthonormal columns from Gaussian matrices (seed; LAPACK's QR),
 * all in double, rounded once. NULL with err filled (code 1) when out of memory. */
float *qerr_spectrum_matrix(int rows, int cols, double power, uint64_t seed, GtError *err);

/* The row of W [rows, cols] at rank r: lora_alpha alpha (scale svd.h's lora_scale(alpha, r)),
 * niter as pissa_init's (-1: exact SVD), W quantized as one NF4 unit of format blocksize/nested.
 * 0, or -1 with err filled. */
int qerr_measure(const float *W, int rows, int cols, int r, double alpha, int niter, int blocksize, bool nested,
                 QerrRow *out, GtError *err);

#endif
