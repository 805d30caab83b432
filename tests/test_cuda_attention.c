/* test_cuda_attention.c - the CUDA backend's attention kernels against the CPU backend in the same
 * process (test_cuda.c's fixture, cuda_fixture.h; skipped without a visible GPU):
 *   - fp32 (the CUDA-core kernels): head sizes 16-128 including odd ones, T not a multiple of the
 *     tiles, grouped-query heads and sliding windows;
 *   - bf16 at head sizes 64, 96 and 128 (the tensor-core kernels, FlashAttention-2's design)
 *     against the CPU's bf16 on ragged T, with the same bits from a second run on buffers that
 *     are not 16-byte aligned; grouped-query heads, windows, the 4-warp variant a 99 KiB device
 *     runs;
 *   - the one-pass backward's dQ slices: each against a double sum over its split's keys, dq the
 *     slices' sum in split order bit for bit, the same bits through a reused workspace and on the
 *     8- and 4-warp variants. */
#include "backend.h"

#ifdef GT_HAVE_CUDA

#include "cuda_fixture.h"

/* attention forward + backward with NKV kv heads and a window, GPU vs CPU (fp32) */
static void check_attention_gqa(Pair *p, int B, int T, int NH, int NKV, int hd, int window) {
    const int C = NH * hd;
    size_t n3 = (size_t)B * T * (NH + 2 * NKV) * hd, nc = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = rand_host(n3, -2, 2), *dout = rand_host(nc, -1, 1);
    float *res[2][4];
    Backend *bs[2] = {p->cpu, p->gpu};
    for (int k = 0; k < 2; k++) {
        Backend *b = bs[k];
        float *d_qkv = dup_to(b, qkv, n3 * sizeof(float)), *d_dout = dup_to(b, dout, nc * sizeof(float));
        float *d_out = dnan_on(b, nc), *d_lse = dnan_on(b, nl), *d_dqkv = dnan_on(b, n3),
              *d_ws = dnan_on(b, backend_attention_workspace_floats(b->act_dtype, B, T, NH, NKV, hd));
        b->ops->attention_forward(b, d_out, d_lse, d_qkv, B, T, NH, NKV, hd, window, NULL);
        b->ops->attention_backward(b, d_dqkv, d_ws, d_dout, d_qkv, d_out, d_lse, B, T, NH, NKV, hd, window, NULL);
        res[k][0] = fetch(b, d_out, nc);
        res[k][1] = fetch(b, d_lse, nl);
        res[k][2] = fetch(b, d_dqkv, n3);
        res[k][3] = fetch(b, d_ws, nl);
        void *bufs[] = {d_qkv, d_dout, d_out, d_lse, d_dqkv, d_ws};
        for (int i = 0; i < 6; i++) b->ops->dev_free(b, bufs[i]);
    }
    const char *names[] = {"out", "lse", "dqkv", "D (workspace)"};
    size_t ns[] = {nc, nl, n3, nl};
    for (int i = 0; i < 4; i++) {
        double e = rel(res[1][i], res[0][i], ns[i]);
        cr_expect_leq(e, TOL, "attention %s B=%d T=%d NH=%d NKV=%d hd=%d window=%d: gpu vs cpu rel %.3g",
                      names[i], B, T, NH, NKV, hd, window, e);
        free(res[0][i]);
        free(res[1][i]);
    }
    free(qkv);
    free(dout);
}
static void check_attention(Pair *p, int B, int T, int C, int NH) { check_attention_gqa(p, B, T, NH, NH, C / NH, 0); }

Test(cuda, attention_head_sizes_and_ragged_tiles, .timeout = 120) {
    Pair p;
    pair_open(&p);
    check_attention(&p, 2, 77, 256, 2);   /* hs 128: > 48 KiB shared memory; T off the tiles */
    check_attention(&p, 1, 130, 192, 3);  /* hs 64 */
    check_attention(&p, 2, 33, 60, 2);    /* hs 30: odd channel counts, not a multiple of 32 */
    check_attention(&p, 1, 1, 64, 1);     /* a single position */
    pair_close(&p);
}

/* fp32 grouped-query heads and sliding windows (the CUDA-core kernels) against the CPU */
Test(cuda, attention_gqa_window_match_cpu, .timeout = 120) {
    Pair p;
    pair_open(&p);
    check_attention_gqa(&p, 2, 77, 4, 2, 32, 0);   /* 2 query heads per kv head */
    check_attention_gqa(&p, 1, 130, 4, 1, 16, 40); /* one kv head, window across tiles */
    check_attention_gqa(&p, 2, 70, 6, 3, 30, 17);  /* odd head size, window */
    check_attention_gqa(&p, 1, 100, 2, 1, 128, 33); /* hs 128 (large shared memory), window */
    check_attention_gqa(&p, 1, 50, 4, 2, 8, 1);    /* window 1: each row sees itself */
    pair_close(&p);
}

/* bf16 attention, head size 64 or 128 (the GPU's tensor-core path): GPU vs the CPU's bf16 within
 * BF16_TOL (the GPU rounds P and dS to bf16 inside its products, the CPU does not), and a second
 * GPU run on buffers offset by one element (2 bytes: no 16-byte vector loads) must give the same
 * bits (determinism, and no dependence on the buffers' addresses, which recompute relies on) */
static void bf16_attention_gqa_run(Pair *p, int B, int T, int NH, int NKV, int hd, int window, float *kept[4]) {
    const int C = NH * hd;
    size_t n3 = (size_t)B * T * (NH + 2 * NKV) * hd, nc = (size_t)B * T * C, nl = (size_t)B * NH * T;
    uint16_t *qkv = rand_bf16(n3, -2, 2), *dout = rand_bf16(nc, -1, 1);
    uint16_t *nan16 = malloc(n3 * sizeof(uint16_t) + 4);
    cr_assert_not_null(nan16);
    for (size_t i = 0; i < n3; i++) nan16[i] = 0x7FC0u;
    float *res[3][4]; /* run 0: cpu; 1: gpu; 2: gpu, buffers offset by 2 bytes */
    for (int k = 0; k < 3; k++) {
        Backend *b = k == 0 ? p->cpu : p->gpu;
        backend_set_act_dtype(b, GT_BF16);
        size_t o = k == 2 ? 2 : 0;
        GtError err = {0};
        char *bq = dup_to(b, NULL, n3 * 2 + 16), *bd = dup_to(b, NULL, nc * 2 + 16);
        char *bo = dup_to(b, NULL, nc * 2 + 16), *bdq = dup_to(b, NULL, n3 * 2 + 16);
        cr_assert_eq(b->ops->to_device(b, bq + o, qkv, n3 * 2, &err), 0, "%s", err.msg);
        cr_assert_eq(b->ops->to_device(b, bd + o, dout, nc * 2, &err), 0, "%s", err.msg);
        cr_assert_eq(b->ops->to_device(b, bo + o, nan16, nc * 2, &err), 0, "%s", err.msg);
        cr_assert_eq(b->ops->to_device(b, bdq + o, nan16, n3 * 2, &err), 0, "%s", err.msg);
        float *lse = dnan_on(b, nl), *ws = dnan_on(b, backend_attention_workspace_floats(b->act_dtype, B, T, NH, NKV, hd));
        b->ops->attention_forward(b, bo + o, lse, bq + o, B, T, NH, NKV, hd, window, NULL);
        b->ops->attention_backward(b, bdq + o, ws, bd + o, bq + o, bo + o, lse, B, T, NH, NKV, hd, window, NULL);
        res[k][0] = fetch_bf16(b, bo + o, nc);
        res[k][1] = fetch(b, lse, nl);
        res[k][2] = fetch_bf16(b, bdq + o, n3);
        res[k][3] = fetch(b, ws, nl);
        void *bufs[] = {bq, bd, bo, bdq, lse, ws};
        bf_free_all(b, bufs, 6);
    }
    const char *names[] = {"out", "lse", "dqkv", "D (workspace)"};
    size_t ns[] = {nc, nl, n3, nl};
    for (int i = 0; i < 4; i++) {
        double e = rel(res[1][i], res[0][i], ns[i]);
        cr_expect_leq(e, BF16_TOL, "bf16 attention %s B=%d T=%d NH=%d NKV=%d hd=%d window=%d: gpu vs cpu rel %.3g",
                      names[i], B, T, NH, NKV, hd, window, e);
        cr_expect(memcmp(res[1][i], res[2][i], ns[i] * sizeof(float)) == 0,
                  "bf16 attention %s B=%d T=%d NH=%d NKV=%d hd=%d window=%d: other bits from a second run "
                  "(unaligned)",
                  names[i], B, T, NH, NKV, hd, window);
        for (int k = 0; k < 3; k++)
            if (k != 1 || !kept) free(res[k][i]);
        if (kept) kept[i] = res[1][i]; /* the caller's */
    }
    free(qkv);
    free(dout);
    free(nan16);
}
static void bf16_attention_gqa_case(Pair *p, int B, int T, int NH, int NKV, int hd, int window) {
    bf16_attention_gqa_run(p, B, T, NH, NKV, hd, window, NULL);
}
static void bf16_attention_case(Pair *p, int B, int T, int C, int NH) {
    bf16_attention_gqa_case(p, B, T, NH, NH, C / NH, 0);
}

Test(cuda, bf16_attention_tensor_cores_match_cpu_bf16, .timeout = 120) {
    Pair p;
    pair_open(&p);
    bf16_attention_case(&p, 2, 77, 256, 2);  /* hs 128, two 64-row tiles, the last ragged */
    bf16_attention_case(&p, 1, 130, 192, 3); /* hs 64, three tiles, 2 rows in the last */
    bf16_attention_case(&p, 2, 200, 128, 2); /* hs 64, four tiles */
    bf16_attention_case(&p, 1, 1, 64, 1);    /* hs 64, a single position */
    bf16_attention_case(&p, 2, 37, 128, 1);  /* hs 128, one ragged tile */
    bf16_attention_case(&p, 1, 16, 64, 1);   /* hs 64, a quarter tile */
    bf16_attention_case(&p, 1, 17, 64, 1);   /* hs 64, a quarter tile and one row */
    bf16_attention_case(&p, 1, 65, 128, 1);  /* hs 128, one row past a tile */
    pair_close(&p);
}

/* bf16 grouped-query heads and sliding windows: hs 64 and 128 on the tensor cores (key tiles of
 * 64, 16-key blocks per warp skipped or masked by the window), hs 16 on the CUDA-core kernels */
Test(cuda, bf16_attention_gqa_window_match_cpu_bf16, .timeout = 120) {
    Pair p;
    pair_open(&p);
    bf16_attention_gqa_case(&p, 2, 77, 4, 2, 64, 0);    /* hs 64, 2 query heads per kv head */
    bf16_attention_gqa_case(&p, 1, 200, 4, 1, 64, 40);  /* hs 64, MQA, window: tiles skipped */
    bf16_attention_gqa_case(&p, 1, 130, 2, 1, 64, 5);   /* hs 64, window inside a 16-key block */
    bf16_attention_gqa_case(&p, 1, 150, 4, 2, 128, 70); /* hs 128, window across tile edges */
    bf16_attention_gqa_case(&p, 2, 65, 2, 2, 128, 17);  /* hs 128, plain heads, window */
    bf16_attention_gqa_case(&p, 1, 140, 2, 1, 64, 129); /* window > one tile */
    bf16_attention_gqa_case(&p, 2, 37, 4, 2, 16, 9);    /* hs 16: the CUDA-core kernels in bf16 */
    pair_close(&p);
}

/* the FlashAttention-2-style kernels at head size 96 (padded shared rows, not swizzled) and the
 * shapes that cross their tiles: causal, window, GQA, T not a multiple of 64 or 128 */
Test(cuda, bf16_attention_head_size_96_match_cpu_bf16, .timeout = 240) {
    Pair p;
    pair_open(&p);
    bf16_attention_gqa_case(&p, 2, 77, 2, 2, 96, 0);    /* causal, ragged last tile */
    bf16_attention_gqa_case(&p, 1, 150, 4, 2, 96, 45);  /* GQA, window across tile edges */
    bf16_attention_gqa_case(&p, 1, 129, 3, 1, 96, 0);   /* MQA, one row past two 64-tiles */
    pair_close(&p);
}

/* the 4-warp variant, the one a 99 KiB device (RTX 3090/4090, sm_86/89) runs: on the simulator
 * GTCSIM_SMEM_OPTIN_KIB makes the device report 99 KiB of opt-in shared memory, so the backend
 * picks the small tiles for hd 96 and 128 (hd 64's large ones fit: 97 KiB; on a GPU the variable
 * does nothing: the device's) */
Test(cuda, bf16_attention_small_smem_variant_match_cpu_bf16, .timeout = 240) {
    setenv("GTCSIM_SMEM_OPTIN_KIB", "99", 1);
    Pair p;
    pair_open(&p);
    bf16_attention_gqa_case(&p, 1, 100, 2, 1, 128, 0);  /* hs 128 within 99 KiB */
    bf16_attention_gqa_case(&p, 2, 70, 4, 2, 64, 33);   /* hs 64, GQA, window */
    bf16_attention_gqa_case(&p, 1, 65, 2, 2, 96, 0);    /* hs 96 */
    pair_close(&p);
}

/* the one-pass backward's dQ slices (backend.h's backend_attention_dq_splits: S = 3 and 2 here,
 * several key blocks of a split adding into the same query rows of its slice, the window reaching
 * across units), on the 8-warp variant (128-key blocks) and the 4-warp one (64-key blocks, what
 * GTCSIM_SMEM_OPTIN_KIB=99 gives at hd 96 and 128; hd 64's 8 warps fit in 97 KiB): each GPU vs
 * the CPU's bf16 and a second run (unaligned) the
 * same bits (bf16_attention_gqa_run), and the two variants the same bits as each other: both add
 * a unit's keys into a slice 64 at a time in one order, so the bits do not depend on the GPU */
Test(cuda, bf16_attention_one_pass_backward_same_bits_on_both_variants, .timeout = 240) {
    static const int cases[][6] = {{1, 300, 4, 2, 96, 100}, {2, 200, 2, 2, 128, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int *k = cases[c];
        const size_t n3 = (size_t)k[0] * k[1] * (k[2] + 2 * k[3]) * k[4];
        float *got[2][4];
        for (int v = 0; v < 2; v++) {
            if (v) setenv("GTCSIM_SMEM_OPTIN_KIB", "99", 1);
            else unsetenv("GTCSIM_SMEM_OPTIN_KIB");
            rng_state = 4242 + c; /* the same inputs for both */
            Pair p;
            pair_open(&p);
            bf16_attention_gqa_run(&p, k[0], k[1], k[2], k[3], k[4], k[5], got[v]);
            pair_close(&p);
        }
        unsetenv("GTCSIM_SMEM_OPTIN_KIB");
        cr_expect(memcmp(got[0][2], got[1][2], n3 * sizeof(float)) == 0,
                  "bf16 attention dqkv B=%d T=%d NH=%d NKV=%d hd=%d window=%d: the 8- and 4-warp variants "
                  "give other bits", k[0], k[1], k[2], k[3], k[4], k[5]);
        for (int v = 0; v < 2; v++)
            for (int i = 0; i < 4; i++) free(got[v][i]);
    }
}

/* The one-pass backward's dQ slices (backend.h: the workspace after the row sums): for each row
 * t that sees a key of split s's units (units of BACKEND_ATT_DQ_KEYS keys, dealt in rounds of S:
 * unit r S + s in even rounds r, r S + S - 1 - s in odd ones), slice
 * s must hold sum_j dS[t, j] K[j] over those keys alone, against that sum in double (from the
 * op's own lse and out, as the op is given them; the other rows of a slice are the op's own
 * business); dq must be bf16(scale * ((slice s1 + slice s2) + ...)) over the splits whose keys t
 * sees, in split order, bit for bit (S > 1; with one split the op writes dq itself, and the
 * double reference of ops_llama_bf16's split cases checks it); a second backward through the
 * same workspace (as the next micro-batch's, its slices not cleared) must give the same bits. The slices' tolerance is fp32's, not bf16's: dS enters dQ's product as
 * two bf16 parts (hi, lo), and one part alone is off by bf16's rounding. */
#define SLICE_TOL 1e-4
static void bf16_attention_slices_case(int B, int T, int NH, int NKV, int hd, int window) {
    Pair p;
    pair_open(&p);
    Backend *b = p.gpu;
    backend_set_act_dtype(b, GT_BF16);
    const int G = NH / NKV, S = backend_attention_dq_splits(B, T, NKV);
    const size_t C = (size_t)NH * hd, R = (size_t)(NH + 2 * NKV) * hd;
    const size_t n3 = (size_t)B * T * R, nc = (size_t)B * T * C, nl = (size_t)B * NH * T, slice = nc;
    const size_t nws = backend_attention_workspace_floats(GT_BF16, B, T, NH, NKV, hd);
    const size_t off = backend_attention_rowsum_floats(B, T, NH);
    cr_assert_eq(nws, off + (size_t)S * slice);
    const float scale = 1.0f / sqrtf((float)hd);
    uint16_t *qkv = rand_bf16(n3, -2, 2), *dout = rand_bf16(nc, -1, 1);
    GtError err = {0};
    void *bq = dup_to(b, qkv, n3 * 2), *bd = dup_to(b, dout, nc * 2);
    void *bo = dnan_bf16_on(b, nc), *bdq = dnan_bf16_on(b, n3);
    float *lse = dnan_on(b, nl), *ws = dnan_on(b, nws);
    b->ops->attention_forward(b, bo, lse, bq, B, T, NH, NKV, hd, window, NULL);
    b->ops->attention_backward(b, bdq, ws, bd, bq, bo, lse, B, T, NH, NKV, hd, window, NULL);
    float *dq1 = fetch_bf16(b, bdq, n3), *w = fetch(b, ws, nws), *o = fetch_bf16(b, bo, nc), *l = fetch(b, lse, nl);
    b->ops->attention_backward(b, bdq, ws, bd, bq, bo, lse, B, T, NH, NKV, hd, window, NULL);
    float *dq2 = fetch_bf16(b, bdq, n3);
    cr_assert(memcmp(dq1, dq2, n3 * sizeof(float)) == 0, "attention dqkv T=%d hd=%d: a second backward through "
              "the same workspace gives other bits", T, hd);
    (void)err;

    /* the slices in double, key by key */
    double *ref = calloc((size_t)S * slice, sizeof(double));
    bool *sees = calloc((size_t)S * B * T * NH, sizeof(bool)); /* [s][b][t][h]: t sees a key of s */
    float *q = malloc(n3 * sizeof(float)), *dy = malloc(nc * sizeof(float));
    cr_assert(ref && sees && q && dy);
    for (size_t i = 0; i < n3; i++) q[i] = gt_bf16_to_f32(qkv[i]);
    for (size_t i = 0; i < nc; i++) dy[i] = gt_bf16_to_f32(dout[i]);
    for (int bb = 0; bb < B; bb++)
        for (int h = 0; h < NH; h++) {
            const int kvh = h / G;
            for (int t = 0; t < T; t++) {
                const float *qt = q + ((size_t)bb * T + t) * R + (size_t)h * hd;
                const float *dyt = dy + ((size_t)bb * T + t) * C + (size_t)h * hd;
                const float *ot = o + ((size_t)bb * T + t) * C + (size_t)h * hd;
                double D = 0.0;
                for (int c = 0; c < hd; c++) D += (double)dyt[c] * ot[c];
                const double lt = l[((size_t)bb * NH + h) * T + t];
                for (int j = window > 0 && t - window + 1 > 0 ? t - window + 1 : 0; j <= t; j++) {
                    const float *kj = q + ((size_t)bb * T + j) * R + C + (size_t)kvh * hd;
                    const float *vj = kj + (size_t)NKV * hd;
                    double sc = 0.0, dp = 0.0;
                    for (int c = 0; c < hd; c++) {
                        sc += (double)qt[c] * kj[c];
                        dp += (double)dyt[c] * vj[c];
                    }
                    const double ds = exp(sc * scale - lt) * (dp - D);
                    /* key j's unit goes to a split in rounds of S, snaking (backend.h) */
                    const int u = j / BACKEND_ATT_DQ_KEYS, odd = u / S % 2;
                    const size_t sp = (size_t)(odd ? S - 1 - u % S : u % S);
                    sees[((sp * B + bb) * T + t) * NH + h] = true;
                    double *r = ref + sp * slice + ((size_t)bb * T + t) * C + (size_t)h * hd;
                    for (int c = 0; c < hd; c++) r[c] += ds * kj[c];
                }
            }
        }
    float *rf = malloc(slice * sizeof(float)), *got = malloc(slice * sizeof(float));
    cr_assert(rf && got);
    for (int sp = 0; sp < (S > 1 ? S : 0); sp++) {
        size_t n = 0;
        for (size_t i = 0; i < slice; i++)
            if (sees[(size_t)sp * B * T * NH + i / hd]) {
                rf[n] = (float)ref[(size_t)sp * slice + i];
                got[n++] = w[off + (size_t)sp * slice + i];
            }
        double e = rel(got, rf, n);
        cr_assert_leq(e, SLICE_TOL, "attention dQ slice %d of %d B=%d T=%d NH=%d NKV=%d hd=%d window=%d: rel %.3g vs "
                      "double", sp, S, B, T, NH, NKV, hd, window, e);
    }
    /* dq: the sum of the slices whose keys the row sees, in split order, times scale, rounded once */
    size_t bad = 0;
    for (size_t i = 0; i < (S > 1 ? slice : 0); i++) {
        float x = 0.0f;
        bool any = false;
        for (int sp = 0; sp < S; sp++)
            if (sees[(size_t)sp * B * T * NH + i / hd]) {
                float v = w[off + (size_t)sp * slice + i];
                x = any ? x + v : v;
                any = true;
            }
        float want = gt_bf16_to_f32(gt_f32_to_bf16(x * scale)), have = dq1[i / C * R + i % C];
        if (memcmp(&want, &have, sizeof want) != 0) bad++;
    }
    cr_assert_eq(bad, 0, "attention dq T=%d hd=%d: %zu of %zu values are not the slices' sum in split order", T, hd,
                 bad, slice);
    void *bufs[] = {bq, bd, bo, bdq, lse, ws};
    bf_free_all(b, bufs, 6);
    free(ref), free(sees), free(got), free(q), free(dy), free(rf), free(dq1), free(dq2), free(w), free(o), free(l), free(qkv), free(dout);
    pair_close(&p);
}
/* a case that fails ends the test (the asserts above): the rest add nothing, and the larger ones
 * cost seconds on the simulator under each planted bug they would catch again */
Test(cuda, bf16_attention_dq_slices_match_double_per_split, .timeout = 240) {
    bf16_attention_slices_case(1, 300, 4, 2, 64, 100); /* S = 3, GQA, window across units */
    bf16_attention_slices_case(1, 700, 2, 1, 64, 0);   /* S = 4, 6 units: round 1 reversed, short */
    bf16_attention_slices_case(1, 300, 2, 1, 64, 0);   /* S = 3, the last rows in all three slices */
    bf16_attention_slices_case(2, 200, 2, 1, 128, 0);  /* S = 2, hd 128 */
    bf16_attention_slices_case(1, 128, 2, 1, 96, 0);   /* S = 1 */
    bf16_attention_slices_case(1, 1100, 4, 2, 64, 300); /* S = 4, 9 units: three rounds, a window */
}
Test(cuda, bf16_attention_dq_slices_match_double_per_split_small_smem, .timeout = 240) {
    setenv("GTCSIM_SMEM_OPTIN_KIB", "99", 1); /* the 4-warp variant at hd 96, 128: 64-key blocks */
    bf16_attention_slices_case(1, 300, 4, 2, 128, 100);
    bf16_attention_slices_case(1, 128, 2, 1, 128, 30);
    bf16_attention_slices_case(1, 600, 2, 1, 128, 0); /* S = 4, 5 units */
}

#endif
