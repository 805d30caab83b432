/* svd.h - the top-r singular triplets of a fp32 weight matrix (exact through LAPACK, or
 * randomised as torch.svd_lowrank), and PEFT's PiSSA initialisation built on them.
 *
 * Host-side and model-independent. Matrices are fp32, row-major, W [rows, cols] (a Linear's
 * weight [out, in]). The computation runs in double; only the results are rounded to fp32.
 *
 * Sign convention (LAPACK and torch leave each pair's sign arbitrary): every singular pair
 * (U[:, j], Vh[j, :]) is flipped together so that the entry of U[:, j] of largest magnitude (the
 * first such entry on a tie) is positive. Flipping both keeps U diag(S) Vh unchanged. */
#ifndef GT_SVD_H
#define GT_SVD_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

/* U [rows, r], S [r] (descending, >= 0), Vh [r, cols] with W ~= U diag(S) Vh.
 * niter = -1: exact (LAPACK dgesdd on a double copy of W; the top r of the thin SVD).
 *   Memory: about 8 * (rows*cols + k*(rows+cols) + 4*k*k) bytes with k = min(rows, cols)
 *   (1.7 GB for 14336 x 4096), freed before returning.
 * niter >= 0: torch.svd_lowrank(W, q=r, niter) - Halko et al. 2009, algorithm 4.4 (randomised
 *   range finder with niter subspace iterations, QR re-orthonormalisation after every product)
 *   then algorithm 5.1, on the row space of W as torch does for q < cols, no oversampling
 *   (PEFT calls it with q = r). The Gaussian test matrix G [rows, r] comes from seed
 *   (splitmix64 + Box-Muller); it does not reproduce torch's random numbers.
 *   Memory: 8 * (rows*cols + 3*r*(rows+cols) + ...) bytes.
 * Errors: r < 1 or r > min(rows, cols), bad dimensions, niter < -1, a non-finite entry of W
 * -> code 2; allocation failure, LAPACK info != 0 -> code 1. Returns 0 or -1 with err filled. */
int svd_topr(const float *W, int rows, int cols, int r, int niter, uint64_t seed,
             float *U, float *S, float *Vh, GtError *err);

/* PEFT's LoRA scaling: lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora. */
double lora_scale(double lora_alpha, int r, bool use_rslora);

/* PEFT's pissa_init (peft/tuners/lora/layer.py) for W [rows, cols]:
 *   U, S, Vh = svd_topr(W, r, niter);  Sr = S / scale
 *   A = diag(sqrt(Sr)) @ Vh          [r, cols]   (PEFT's lora_A)
 *   B = U @ diag(sqrt(Sr))           [rows, r]   (PEFT's lora_B)
 *   W_res = W - scale * B @ A        [rows, cols]
 * so that W_res + scale * B @ A = W. niter -1 is init_lora_weights "pissa", N >= 0 is
 * "pissa_niter_N". W_res is formed from the fp32 A and B as stored (in double, rounded once),
 * so the identity holds to the rounding of W_res itself whatever the SVD's own error. W_res
 * may alias W (in place). scale must be finite and > 0. Errors as svd_topr. */
int pissa_init(const float *W, int rows, int cols, int r, double scale, int niter, uint64_t seed,
               float *A, float *B, float *W_res, GtError *err);

/* About how many host bytes pissa_init allocates at its peak for W [rows, cols] (the LAPACK
 * workspace is queried at run time, so this uses LAPACK's documented sizes): what a plan shows. */
uint64_t pissa_host_bytes(int rows, int cols, int r, int niter);

/* W_res = W - scale * B @ A (A [r, cols], B [rows, r] as stored in fp32), in double, rounded to fp32
 * once per entry; what pissa_init forms, so a resumed run rebuilds the same bits from the saved
 * initial adapter. W_res may alias W. 0, or -1 (code 1: out of memory). */
int pissa_residual(const float *W, int rows, int cols, int r, double scale, const float *A, const float *B,
                   float *W_res, GtError *err);

/* PEFT's conversion of a trained PiSSA adapter to a plain LoRA of rank 2r relative to the
 * original W (save_pretrained(path_initial_model_for_weight_conversion=...), through
 * subtract_mutated_init): with A0, B0 the adapter pissa_init made and A, B the trained one,
 *   A2 = [A ; A0]   [2r, cols]  (torch.cat(dim=0))
 *   B2 = [B | -B0]  [rows, 2r]  (torch.cat(dim=1))
 * so scale * B2 @ A2 = scale * (B @ A - B0 @ A0) and W + scale * B2 @ A2 = W_res + scale * B @ A.
 * The saved config keeps the scale: r becomes 2r and lora_alpha becomes pissa_lora_alpha_2r(). */
void pissa_to_lora_2r(const float *A, const float *B, const float *A0, const float *B0,
                      int rows, int cols, int r, float *A2, float *B2);

/* lora_alpha of the converted adapter: 2 * alpha (alpha / r kept), or sqrt(2) * alpha with
 * use_rslora (alpha / sqrt(r) kept), as PEFT writes it. */
double pissa_lora_alpha_2r(double lora_alpha, bool use_rslora);

#endif
