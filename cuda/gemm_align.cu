/* gemm_align.cu - every GEMM on 16-byte-aligned shapes: gtc_gemm, which backend_cuda.cu's ops call.
 *
 * cuBLASLt's fast kernels load 16 bytes at a time; they are picked only when every operand starts
 * on a 16-byte boundary and its leading dimension AND its contiguous extent (the rows of the matrix
 * as stored, column-major) are multiples of 16 bytes. GPT-2's vocabulary V = 50257 is odd, so each
 * LM-head GEMM has one operand whose contiguous extent is V rows (forward: the logits D, m = V;
 * d-input: dlogits B, k = V; d-wte: dlogits B transposed, n = V), and an H200 ran all three on
 * cuBLAS's legacy "align1" kernels: 31 ms of a 76 ms step (bench/device-check-h200-2026-12-04.md).
 *
 * gtc_gemm splits such a shape at the last multiple of g = 16 / (smallest element size) along the
 * one dimension at fault (m, n or k): the main part is the same GEMM on the first m0 (n0, k0)
 * elements, aligned as it stands (same pointers and leading dimensions); the tail (fewer than g
 * elements) runs on zero-padded copies in the backend's scratch, so it too is a g-wide aligned GEMM:
 *   m tail: op(A)'s last rows and D's last rows (and the bias's) copied into g-row buffers; the GEMM
 *           writes g rows of which the first mt are copied back into D (with beta 1, D's rows are
 *           copied in first). Exact: the same sums as one GEMM, each output rounded once.
 *   n tail: (only op(B) = B^T has n contiguous) B's last rows and D's last columns, as above. Exact.
 *   k tail: op(A)'s last columns and op(B)'s last rows, zero-padded to g; the tail GEMM runs FIRST
 *           with the caller's beta and bias, then the main GEMM adds with beta 1. With a bf16 output
 *           that rounds twice: D = bf16(bf16(beta C + bias + tail) + main); the first rounding errs
 *           by at most 2^-9 |beta C + bias + tail| (fewer than g of the k products), not a rounding
 *           of the whole sum (tests/test_cuda_gemm_align.c measures it against a double reference).
 * The split depends on the shape alone (never on where buffers live), so recompute stays bit-identical.
 * Shapes with more than one dimension at fault, or with pointers or leading dimensions that are not
 * 16-byte aligned (nothing can make those fast), go to gtc_gemm_one unchanged, except the operands
 * of a dimension that is all tail (fewer than g elements): copied whole, they may lie anywhere. */
#include "cuda_common.cuh"

/* bytes of x elements of es bytes are a multiple of 16 */
static bool mult16(long long x, size_t es) { return ((unsigned long long)x * es) % 16u == 0; }
static size_t round256(size_t x) { return (x + 255u) & ~(size_t)255u; }

/* rows of w bytes, pitch apart, from src to dst (device to device, on the compute stream) */
static void copy2d(Backend *b, void *dst, size_t dpitch, const void *src, size_t spitch, size_t w, size_t rows) {
    if (!w || !rows) return;
    CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, w, rows, cudaMemcpyDeviceToDevice, gtc_stream(b)));
}
static void zero(Backend *b, void *p, size_t bytes) { CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, gtc_stream(b))); }

void gtc_gemm(Backend *b, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, GtDtype abt,
              const void *A, int lda, const void *B, int ldb, GtDtype cdt, void *Cm, int ldc, const void *bias,
              float beta) {
    const size_t ab = gt_dtype_size(abt), cd = gt_dtype_size(cdt);
    const bool an = ta == CUBLAS_OP_N, bn = tb == CUBLAS_OP_N;
    /* the contiguous extents: D's m; A's m (op N) or k (op T); B's k (op N) or n (op T) */
    const bool bad_m = !mult16(m, cd) || (an && !mult16(m, ab));
    const bool bad_k = (!an && !mult16(k, ab)) || (bn && !mult16(k, ab));
    const bool bad_n = !bn && !mult16(n, ab);
    const int g = (int)(16 / (ab < cd ? ab : cd)); /* 8 for bf16 operands, 4 for fp32 */
    /* a dimension at fault that is all tail (shorter than g) has no main part: the operands the tail
     * copies (m: op(A), D and the bias; n: op(B) and D; k: op(A) and op(B)) are not used in place, so
     * their own alignment does not matter (a LoRA GEMM's rank-r operands: B [rows, r] is packed) */
    const bool all_m = bad_m && m < g, all_n = bad_n && n < g, all_k = bad_k && k < g;
    const bool aligned = ((all_m || all_k) || (gtc_aligned16(A) && mult16(lda, ab))) &&
                         ((all_n || all_k) || (gtc_aligned16(B) && mult16(ldb, ab))) &&
                         ((all_m || all_n) || (gtc_aligned16(Cm) && mult16(ldc, cd))) &&
                         (!bias || all_m || gtc_aligned16(bias));
    if (m <= 0 || n <= 0 || k <= 0 || !aligned || (int)bad_m + (int)bad_k + (int)bad_n != 1) {
        gtc_gemm_one(b, ta, tb, m, n, k, alpha, abt, A, lda, B, ldb, cdt, Cm, ldc, bias, beta);
        return;
    }
    const char *a = (const char *)A, *bb = (const char *)B;
    char *c = (char *)Cm;
    if (bad_m) {
        const int m0 = m / g * g, mt = m - m0;
        if (m0 > 0) gtc_gemm_one(b, ta, tb, m0, n, k, alpha, abt, A, lda, B, ldb, cdt, Cm, ldc, bias, beta);
        /* op(A)'s rows m0.. : A's rows (op N, [g, k] ld g) or A's columns (op T, [k, g] ld k) */
        const size_t a_bytes = round256((size_t)g * k * ab), d_bytes = round256((size_t)g * n * cd);
        char *s = (char *)gtc_scratch(b, a_bytes + d_bytes + (bias ? 256 : 0));
        char *ap = s, *dp = s + a_bytes, *biasp = bias ? s + a_bytes + d_bytes : NULL;
        zero(b, ap, a_bytes);
        if (an)
            copy2d(b, ap, (size_t)g * ab, a + (size_t)m0 * ab, (size_t)lda * ab, (size_t)mt * ab, (size_t)k);
        else
            copy2d(b, ap, (size_t)k * ab, a + (size_t)m0 * lda * ab, (size_t)lda * ab, (size_t)k * ab, (size_t)mt);
        if (beta != 0.0f) {
            zero(b, dp, d_bytes);
            copy2d(b, dp, (size_t)g * cd, c + (size_t)m0 * cd, (size_t)ldc * cd, (size_t)mt * cd, (size_t)n);
        }
        if (bias) {
            zero(b, biasp, 256);
            copy2d(b, biasp, 256, (const char *)bias + (size_t)m0 * cd, 256, (size_t)mt * cd, 1);
        }
        gtc_gemm_one(b, ta, tb, g, n, k, alpha, abt, ap, an ? g : k, B, ldb, cdt, dp, g, biasp, beta);
        copy2d(b, c + (size_t)m0 * cd, (size_t)ldc * cd, dp, (size_t)g * cd, (size_t)mt * cd, (size_t)n);
    } else if (bad_n) { /* op(B) = B^T: B's rows n0.. */
        const int n0 = n / g * g, nt = n - n0;
        if (n0 > 0) gtc_gemm_one(b, ta, tb, m, n0, k, alpha, abt, A, lda, B, ldb, cdt, Cm, ldc, bias, beta);
        const size_t b_bytes = round256((size_t)g * k * ab), d_bytes = round256((size_t)m * g * cd);
        char *s = (char *)gtc_scratch(b, b_bytes + d_bytes);
        char *bp = s, *dp = s + b_bytes;
        zero(b, bp, b_bytes);
        copy2d(b, bp, (size_t)g * ab, bb + (size_t)n0 * ab, (size_t)ldb * ab, (size_t)nt * ab, (size_t)k);
        if (beta != 0.0f) {
            zero(b, dp, d_bytes);
            copy2d(b, dp, (size_t)m * cd, c + (size_t)n0 * ldc * cd, (size_t)ldc * cd, (size_t)m * cd, (size_t)nt);
        }
        gtc_gemm_one(b, ta, tb, m, g, k, alpha, abt, A, lda, bp, g, cdt, dp, m, bias, beta);
        copy2d(b, c + (size_t)n0 * ldc * cd, (size_t)ldc * cd, dp, (size_t)m * cd, (size_t)m * cd, (size_t)nt);
    } else { /* bad_k: the tail first, with the caller's beta and bias; then the main part adds */
        const int k0 = k / g * g, kt = k - k0;
        const size_t a_bytes = round256((size_t)m * g * ab), b_bytes = round256((size_t)g * n * ab);
        char *s = (char *)gtc_scratch(b, a_bytes + b_bytes);
        char *ap = s, *bp = s + a_bytes;
        zero(b, s, a_bytes + b_bytes);
        /* op(A)'s columns k0.. : A's columns (op N, [m, g] ld m) or A's rows (op T, [g, m] ld g) */
        if (an)
            copy2d(b, ap, (size_t)m * ab, a + (size_t)k0 * lda * ab, (size_t)lda * ab, (size_t)m * ab, (size_t)kt);
        else
            copy2d(b, ap, (size_t)g * ab, a + (size_t)k0 * ab, (size_t)lda * ab, (size_t)kt * ab, (size_t)m);
        /* op(B)'s rows k0.. : B's rows (op N, [g, n] ld g) or B's columns (op T, [n, g] ld n) */
        if (bn)
            copy2d(b, bp, (size_t)g * ab, bb + (size_t)k0 * ab, (size_t)ldb * ab, (size_t)kt * ab, (size_t)n);
        else
            copy2d(b, bp, (size_t)n * ab, bb + (size_t)k0 * ldb * ab, (size_t)ldb * ab, (size_t)n * ab, (size_t)kt);
        gtc_gemm_one(b, ta, tb, m, n, g, alpha, abt, ap, an ? m : g, bp, bn ? g : n, cdt, Cm, ldc, bias, beta);
        if (k0 > 0) gtc_gemm_one(b, ta, tb, m, n, k0, alpha, abt, A, lda, B, ldb, cdt, Cm, ldc, NULL, 1.0f);
    }
}
