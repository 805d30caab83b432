/* test_qpissa.c - QPiSSA (PiSSA on a 4-bit NF4 base): the quantization error the PiSSA paper reports,
 * measured (tests/qerr.c: naive double-precision norms over svd.h's pissa_init and nf4.h's round
 * trip) on matrices with a decaying spectrum: quantizing the residual W - s B A loses less than
 * quantizing W, at every rank. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "qerr.h"

/* U diag(k^-p) V^T, p 0.5 and 1, 512 x 512 and 1024 x 4096 (an MLP's down_proj shape, quartered),
 * r 16 .. 128 (lora_alpha 16, blocksize 64, double quantization as QLoRA's recipe; the exact SVD on
 * 512 x 512, pissa_niter_4 on 1024 x 4096 to keep the test short: bench_nf4 error prints the exact one):
 * every row's QPiSSA error below its QLoRA error; pissa_init's own (unquantized) error far below
 * both, so the difference is the quantization's. The table goes to the log (README's table). */
Test(qpissa, quantization_error_below_qlora_on_decaying_spectra, .timeout = 600) {
    const int shapes[][2] = {{512, 512}, {1024, 4096}}, ranks[] = {16, 32, 64, 128};
    const double powers[] = {0.5, 1.0};
    for (int sh = 0; sh < 2; sh++)
        for (int p = 0; p < 2; p++) {
            int rows = shapes[sh][0], cols = shapes[sh][1];
            GtError err = {0};
            float *W = qerr_spectrum_matrix(rows, cols, powers[p], 1000 + 10 * sh + p, &err);
            cr_assert(W, "%s", err.msg);
            for (int k = 0; k < 4; k++) {
                QerrRow q;
                cr_assert_eq(qerr_measure(W, rows, cols, ranks[k], 16, sh ? 4 : -1, 64, true, &q, &err), 0, "%s", err.msg);
                cr_log_info("qerr %dx%d s_k=k^-%.1f %s r %3d: ||W|| %.4f  QLoRA %.5f  QPiSSA %.5f  (%.1f%% less)  unquantized %.2g",
                            rows, cols, powers[p], sh ? "niter 4" : "exact", ranks[k], q.w, q.qlora, q.qpissa, 100 * (1 - q.qpissa / q.qlora), q.exact);
                cr_expect(q.qpissa < q.qlora, "%dx%d k^-%.1f r %d: QPiSSA %.6g not below QLoRA %.6g", rows, cols, powers[p],
                          ranks[k], q.qpissa, q.qlora);
                cr_expect(q.qlora > 0 && q.exact < 1e-3 * q.qpissa, "%dx%d r %d: unquantized error %.3g vs %.3g", rows, cols,
                          ranks[k], q.exact, q.qpissa);
            }
            free(W);
        }
}
