/* test_cuda_gemm_align.c - the CUDA backend's GEMMs on shapes with an odd dimension (GPT-2's
 * vocabulary, 50257), which cuda/gemm_align.cu splits into a 16-byte-aligned main part and a
 * zero-padded tail:
 *   - matmul_forward (m split, with a bias), matmul_backward (dinp: k split; dw: n split, accumulated)
 *     and the gemm op with beta 1 (m split reading C) against a double-precision reference computed
 *     here from the same bf16/fp32 inputs, with the padding columns of the output left untouched;
 *   - LoRA's rank-r GEMMs (r 3 and 4: a misaligned slice of h, a packed B) against double references;
 *   - on the CUDA simulator, with GTCSIM_GEMM_AUDIT=1 (cuda/sim/cublas.cpp: a GEMM that would not
 *     run on 16-byte kernels aborts): the same ops, a whole GPT-2-shaped bf16 training step of the
 *     gtrain binary, and LoRA steps at r 3 and 4 (Llama, GPT-2), run without one such GEMM.
 * Skipped without a GPU (or the simulator). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "test_backend_select.h"
#include "test_util.h"

#ifdef GT_HAVE_CUDA

static uint64_t rng = 777;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* n values exactly representable in the act dtype (bf16-rounded when bf16) */
static float *rand_vals(size_t n, GtDtype act) {
    float *h = malloc(n * sizeof(float) + 4);
    cr_assert_not_null(h);
    for (size_t i = 0; i < n; i++) h[i] = act == GT_BF16 ? gt_bf16_to_f32(gt_f32_to_bf16(frand())) : frand();
    return h;
}

/* a device buffer of n elements of dtype t holding host floats h (NULL: NaN everywhere) */
static void *to_dev(Backend *b, const float *h, size_t n, GtDtype t) {
    GtError err = {0};
    const size_t es = gt_dtype_size(t);
    unsigned char *raw = malloc(n * es + 4);
    cr_assert_not_null(raw);
    for (size_t i = 0; i < n; i++) {
        float v = h ? h[i] : NAN;
        if (t == GT_BF16) {
            uint16_t u = h ? gt_f32_to_bf16(v) : 0x7FC0u;
            memcpy(raw + i * es, &u, es);
        } else {
            memcpy(raw + i * es, &v, es);
        }
    }
    void *d = b->ops->dev_alloc(b, n * es);
    cr_assert_not_null(d);
    cr_assert_eq(b->ops->to_device(b, d, raw, n * es, &err), 0, "%s", err.msg);
    free(raw);
    return d;
}
static float *from_dev(Backend *b, const void *d, size_t n, GtDtype t) {
    GtError err = {0};
    const size_t es = gt_dtype_size(t);
    unsigned char *raw = malloc(n * es + 4);
    float *f = malloc(n * sizeof(float) + 4);
    cr_assert(raw && f);
    cr_assert_eq(b->ops->to_host(b, raw, d, n * es, &err), 0, "%s", err.msg);
    for (size_t i = 0; i < n; i++) {
        if (t == GT_BF16) {
            uint16_t u;
            memcpy(&u, raw + i * es, es);
            f[i] = gt_bf16_to_f32(u);
        } else {
            memcpy(&f[i], raw + i * es, es);
        }
    }
    free(raw);
    return f;
}

/* |got - ref| within `ulps` units of the output's rounding (2^-8 relative for bf16, 2^-23 for fp32)
 * of |ref| (a rounding to nearest errs by at most 2^-8 relative in bf16), plus `slack` x the sum of
 * |terms| (fp32 accumulation, and for a k split the rounding of the tail's partial sum: 2^-8 of it);
 * the worst element in units of the bound is reported */
typedef struct {
    double worst;
    long at;
} Worst;
static void judge(Worst *w, long i, double got, double ref, double abs_terms, double unit, double slack) {
    const double bound = unit * fabs(ref) + slack * abs_terms + 1e-30;
    const double r = isfinite(got) ? fabs(got - ref) / bound : INFINITY;
    if (r > w->worst) w->worst = r, w->at = i;
}

static Backend *open_cuda(GtDtype act) {
    GtError err = {0};
    Backend *b = NULL;
    if (backend_gpu_count() <= 0) cr_skip_test("no GPU visible");
    cr_assert_eq(backend_open_cuda(&b, 0, &err), 0, "cuda backend: %s", err.msg);
    backend_set_act_dtype(b, act);
    return b;
}

/* the LM head's three GEMMs (forward with a bias, dinp, dw accumulated) and the gemm op with beta 1, on
 * N rows of C channels and V outputs whose rows are LV apart, against double references */
static void check_head(GtDtype act, int N, int C, int V) {
    Backend *b = open_cuda(act);
    const int LV = (V + 63) / 64 * 64;
    const double unit = act == GT_BF16 ? 1.0 / 256 : 1.0 / 8388608;
    float *inp = rand_vals((size_t)N * C, act), *w = rand_vals((size_t)V * C, act), *bias = rand_vals((size_t)V, act);
    float *dout = rand_vals((size_t)N * LV, act), *dw0 = rand_vals((size_t)V * C, GT_F32);
    float *c0 = rand_vals((size_t)N * LV, act);
    void *d_inp = to_dev(b, inp, (size_t)N * C, act), *d_w = to_dev(b, w, (size_t)V * C, act);
    void *d_bias = to_dev(b, bias, (size_t)V, act), *d_out = to_dev(b, NULL, (size_t)N * LV, act);
    void *d_dout = to_dev(b, dout, (size_t)N * LV, act), *d_dinp = to_dev(b, NULL, (size_t)N * C, act);
    void *d_dw = to_dev(b, dw0, (size_t)V * C, GT_F32), *d_c = to_dev(b, c0, (size_t)N * LV, act);
    b->ops->matmul_forward(b, d_out, d_inp, d_w, d_bias, N, C, V, LV);
    b->ops->matmul_backward(b, d_dinp, d_dw, NULL, d_dout, d_inp, d_w, N, C, V, LV);
    /* C[N, V] (ld LV) = 0.5 inp w^T + C: row-major M = N, N = V, K = C */
    b->ops->gemm(b, false, true, N, V, C, 0.5f, d_inp, C, d_w, C, 1.0f, d_c, act, LV);
    float *out = from_dev(b, d_out, (size_t)N * LV, act), *dinp = from_dev(b, d_dinp, (size_t)N * C, act);
    float *dw = from_dev(b, d_dw, (size_t)V * C, GT_F32), *cc = from_dev(b, d_c, (size_t)N * LV, act);
    Worst wo = {0, -1}, wi = {0, -1}, ww = {0, -1}, wc = {0, -1};
    long pad_touched = 0, c_pad_touched = 0;
    const int g = act == GT_BF16 ? 8 : 4, k0 = V / g * g;
    for (int i = 0; i < N; i++) {
        for (int o = 0; o < LV; o++) {
            const size_t at = (size_t)i * LV + o;
            if (o >= V) { /* the logits' padding: never written */
                pad_touched += !isnan(out[at]);
                c_pad_touched += cc[at] != c0[at];
                continue;
            }
            double s = 0, a = 0;
            for (int c = 0; c < C; c++) {
                const double t = (double)inp[(size_t)i * C + c] * w[(size_t)o * C + c];
                s += t, a += fabs(t);
            }
            judge(&wo, (long)at, out[at], s + bias[o], a + fabs(bias[o]), unit, 1e-6);
            judge(&wc, (long)at, cc[at], 0.5 * s + c0[at], 0.5 * a + fabs(c0[at]), unit, 1e-6);
        }
        for (int c = 0; c < C; c++) { /* dinp = dout w: the k = V split; its tail (o >= k0) rounded first */
            double s = 0, a = 0, tail = 0;
            for (int o = 0; o < V; o++) {
                const double t = (double)dout[(size_t)i * LV + o] * w[(size_t)o * C + c];
                s += t, a += fabs(t);
                if (o >= k0) tail += t;
            }
            judge(&wi, (long)i * C + c, dinp[(size_t)i * C + c], s, a, unit, 1e-6 + (a > 0 ? unit * fabs(tail) / a : 0));
        }
    }
    for (int o = 0; o < V; o++)
        for (int c = 0; c < C; c++) {
            double s = dw0[(size_t)o * C + c], a = fabs(s);
            for (int i = 0; i < N; i++) {
                const double t = (double)dout[(size_t)i * LV + o] * inp[(size_t)i * C + c];
                s += t, a += fabs(t);
            }
            judge(&ww, (long)o * C + c, dw[(size_t)o * C + c], s, a, 1.0 / 8388608, 1e-6);
        }
    const char *dt = gt_dtype_name(act);
    cr_log_info("%s N %d C %d V %d: worst element / its bound: forward %.3f, dinp (k split) %.3f, dw %.3f, gemm beta 1 %.3f",
                dt, N, C, V, wo.worst, wi.worst, ww.worst, wc.worst);
    cr_expect_leq(wo.worst, 1.0, "%s forward N %d C %d V %d: element %ld off by %.3g of its bound", dt, N, C, V, wo.at, wo.worst);
    cr_expect_leq(wi.worst, 1.0, "%s dinp: element %ld off by %.3g of its bound", dt, wi.at, wi.worst);
    cr_expect_leq(ww.worst, 1.0, "%s dw: element %ld off by %.3g of its bound", dt, ww.at, ww.worst);
    cr_expect_leq(wc.worst, 1.0, "%s gemm beta 1: element %ld off by %.3g of its bound", dt, wc.at, wc.worst);
    cr_expect_eq(pad_touched, 0, "%s forward wrote %ld padding elements (columns V..LV)", dt, pad_touched);
    cr_expect_eq(c_pad_touched, 0, "%s gemm wrote %ld padding elements", dt, c_pad_touched);
    void *bufs[] = {d_inp, d_w, d_bias, d_out, d_dout, d_dinp, d_dw, d_c};
    for (int i = 0; i < 8; i++) b->ops->dev_free(b, bufs[i]);
    float *hs[] = {inp, w, bias, dout, dw0, c0, out, dinp, dw, cc};
    for (int i = 0; i < 10; i++) free(hs[i]);
    backend_close(b);
}

/* V - V % 8: tails of 7, 1 and the whole (V < 8); 50257 = GPT-2's vocabulary (tail 1); N odd */
Test(cuda_gemm, odd_vocab_head_gemms_match_double_bf16, .timeout = 240) {
    setenv("GTCSIM_GEMM_AUDIT", "1", 1);
    check_head(GT_BF16, 37, 64, 1007);
    check_head(GT_BF16, 5, 32, 50257);
    check_head(GT_BF16, 3, 16, 5);
}

Test(cuda_gemm, odd_vocab_head_gemms_match_double_fp32, .timeout = 240) {
    setenv("GTCSIM_GEMM_AUDIT", "1", 1);
    check_head(GT_F32, 37, 64, 1003);
    check_head(GT_F32, 3, 16, 3);
}

/* a GPT-2 step (vocabulary 50257, bf16) through the gtrain binary: on the simulator every GEMM is
 * audited (a misaligned one aborts the run) */
Test(cuda_gemm, gpt2_bf16_step_has_no_gemm_off_the_16_byte_path, .timeout = 240) {
    const char *bin = test_gtrain_bin(), *root = getenv("GTRAIN_ROOT");
    if (!test_on_cudasim()) cr_skip_test("the GEMM audit is the CUDA simulator's (GTRAIN_TEST_DEVICE=cuda on it)");
    if (!bin || !root) cr_skip_test("GTRAIN_BIN/GTRAIN_ROOT not set (run through make test-cudasim)");
    char dir[] = "/tmp/gt_gemm_align_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    /* GPT-2's vocabulary and block, one narrow layer */
    char mpath[96];
    snprintf(mpath, sizeof mpath, "%s/m.json", dir);
    FILE *f = fopen(mpath, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"model_type\": \"gpt2\", \"architectures\": [\"GPT2LMHeadModel\"], \"activation_function\": "
               "\"gelu_new\", \"n_layer\": 1, \"n_embd\": 64, \"n_head\": 2, \"n_positions\": 64, \"n_ctx\": 64, "
               "\"layer_norm_epsilon\": 1e-05, \"vocab_size\": 50257}\n");
    cr_assert_eq(fclose(f), 0);
    char *out = test_sh_output(true,
        "cd '%s' && GTCSIM_GEMM_AUDIT=1 '%s' --config configs/shakespeare-char.yaml --set model=%s/m.json --set device=cuda "
        "--set precision=bf16 --set data.seq_len=32 --set per_device_train_batch_size=2 "
        "--set gradient_accumulation_steps=1 --set max_steps=1 --set eval_steps=0 --set eval_max_batches=1 --set per_device_eval_batch_size=1 "
        "--set save_steps=0 --set sample_max_new_tokens=0 --set output_dir=%s/run >/dev/null 2>%s/err; "
        "echo rc=$?; grep -m1 -e GTCSIM_GEMM_AUDIT -e expected %s/err; true",
        root, bin, dir, dir, dir, dir);
    cr_assert(strstr(out, "rc=0") != NULL, "the audited GPT-2 step failed: %s", out);
    free(out);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* LoRA's rank-r GEMMs (src/model/adapter_linear.c): site j's columns of h / dh (row stride H, so not
 * 16-byte aligned when j r is not a multiple of 8) and its packed B [rows, r]; each dimension of
 * width r < 8 is all tail, its operands copied whole (gemm_align.cu): against double references,
 * with dh's other columns left untouched */
static void check_lora_rank(GtDtype act, int r) {
    Backend *b = open_cuda(act);
    const int N = 37, rows = 24, H = 16, j = 1;
    const size_t off = (size_t)j * r * gt_dtype_size(act);
    const double unit = act == GT_BF16 ? 1.0 / 256 : 1.0 / 8388608;
    const float sc = 0.75f;
    float *h = rand_vals((size_t)N * H, act), *B = rand_vals((size_t)rows * r, act), *d = rand_vals((size_t)N * rows, act);
    float *out0 = rand_vals((size_t)N * rows, act), *dB0 = rand_vals((size_t)rows * r, GT_F32);
    void *d_h = to_dev(b, h, (size_t)N * H, act), *d_B = to_dev(b, B, (size_t)rows * r, act);
    void *d_d = to_dev(b, d, (size_t)N * rows, act), *d_out = to_dev(b, out0, (size_t)N * rows, act);
    void *d_dB = to_dev(b, dB0, (size_t)rows * r, GT_F32), *d_dh = to_dev(b, NULL, (size_t)N * H, act);
    /* forward: out += sc h_j B^T (k = r); backward: dh_j = sc d B (m = r), dB += sc d^T h_j (fp32, m = r) */
    b->ops->gemm(b, false, true, N, rows, r, sc, (char *)d_h + off, H, d_B, r, 1.0f, d_out, act, rows);
    b->ops->gemm(b, false, false, N, r, rows, sc, d_d, rows, d_B, r, 0.0f, (char *)d_dh + off, act, H);
    b->ops->gemm(b, true, false, rows, r, N, sc, d_d, rows, (char *)d_h + off, H, 1.0f, d_dB, GT_F32, r);
    float *out = from_dev(b, d_out, (size_t)N * rows, act), *dh = from_dev(b, d_dh, (size_t)N * H, act);
    float *dB = from_dev(b, d_dB, (size_t)rows * r, GT_F32);
    Worst wo = {0, -1}, wh = {0, -1}, wb = {0, -1};
    long pad_touched = 0;
    for (int i = 0; i < N; i++) {
        for (int o = 0; o < rows; o++) {
            double s = 0, a = 0;
            for (int k = 0; k < r; k++) {
                const double t = (double)sc * h[(size_t)i * H + j * r + k] * B[(size_t)o * r + k];
                s += t, a += fabs(t);
            }
            judge(&wo, (long)i * rows + o, out[(size_t)i * rows + o], s + out0[(size_t)i * rows + o],
                  a + fabs(out0[(size_t)i * rows + o]), unit, 1e-6);
        }
        for (int c = 0; c < H; c++) {
            if (c < j * r || c >= j * r + r) { /* another site's columns, or the padding: not written */
                pad_touched += !isnan(dh[(size_t)i * H + c]);
                continue;
            }
            double s = 0, a = 0;
            for (int o = 0; o < rows; o++) {
                const double t = (double)sc * d[(size_t)i * rows + o] * B[(size_t)o * r + c - j * r];
                s += t, a += fabs(t);
            }
            judge(&wh, (long)i * H + c, dh[(size_t)i * H + c], s, a, unit, 1e-6);
        }
    }
    for (int o = 0; o < rows; o++)
        for (int k = 0; k < r; k++) {
            double s = dB0[(size_t)o * r + k], a = fabs(s);
            for (int i = 0; i < N; i++) {
                const double t = (double)sc * d[(size_t)i * rows + o] * h[(size_t)i * H + j * r + k];
                s += t, a += fabs(t);
            }
            judge(&wb, (long)o * r + k, dB[(size_t)o * r + k], s, a, 1.0 / 8388608, 1e-6);
        }
    const char *dt = gt_dtype_name(act);
    cr_log_info("%s r %d: worst element / its bound: B GEMM %.3f, dh %.3f, dB %.3f", dt, r, wo.worst, wh.worst, wb.worst);
    cr_expect_leq(wo.worst, 1.0, "%s r %d out += s h_j B^T: element %ld off by %.3g of its bound", dt, r, wo.at, wo.worst);
    cr_expect_leq(wh.worst, 1.0, "%s r %d dh_j = s d B: element %ld off by %.3g of its bound", dt, r, wh.at, wh.worst);
    cr_expect_leq(wb.worst, 1.0, "%s r %d dB += s d^T h_j: element %ld off by %.3g of its bound", dt, r, wb.at, wb.worst);
    cr_expect_eq(pad_touched, 0, "%s r %d: dh_j's GEMM wrote %ld elements outside its columns", dt, r, pad_touched);
    void *bufs[] = {d_h, d_B, d_d, d_out, d_dB, d_dh};
    for (int i = 0; i < 6; i++) b->ops->dev_free(b, bufs[i]);
    float *hs[] = {h, B, d, out0, dB0, out, dh, dB};
    for (int i = 0; i < 8; i++) free(hs[i]);
    backend_close(b);
}

Test(cuda_gemm, lora_rank_3_and_4_gemms_match_double, .timeout = 240) {
    setenv("GTCSIM_GEMM_AUDIT", "1", 1);
    for (int r = 3; r <= 4; r++) {
        check_lora_rank(GT_BF16, r);
        check_lora_rank(GT_F32, r);
    }
}

/* LoRA training steps of the gtrain binary at ranks whose adapter intermediates are not 16-byte
 * rows by themselves (r 3: q, k, v's x A_cat^T is 9 wide; r 4: 12), on a small Llama (its sites on
 * one weight in one GEMM; with dropout one site at a time) and GPT-2 (c_attn: one fused qkv module),
 * bf16 and fp32: on the simulator every GEMM is audited (one off the 16-byte path aborts the run) */
Test(cuda_gemm, lora_steps_at_rank_3_and_4_have_no_gemm_off_the_16_byte_path, .timeout = 600) {
    const char *bin = test_gtrain_bin(), *root = getenv("GTRAIN_ROOT");
    if (!test_on_cudasim()) cr_skip_test("the GEMM audit is the CUDA simulator's (GTRAIN_TEST_DEVICE=cuda on it)");
    if (!bin || !root) cr_skip_test("GTRAIN_BIN/GTRAIN_ROOT not set (run through make test-cudasim)");
    static const struct {
        const char *model, *precision;
        int r;
        const char *dropout;
    } runs[] = {
        {"llama", "bf16", 3, "0"}, {"llama", "bf16", 4, "0"}, {"llama", "bf16", 3, "0.1"}, {"llama", "fp32", 3, "0"},
        {"gpt2", "bf16", 3, "0"},  {"gpt2", "bf16", 4, "0"},
    };
    char dir[] = "/tmp/gt_gemm_lora_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    /* one narrow layer of each (a step takes a fraction of a second on the simulator) */
    static const char *const json[2][2] = {
        {"llama", "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 64, "
                  "\"intermediate_size\": 176, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
                  "\"num_key_value_heads\": 1, \"head_dim\": 32, \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-05, "
                  "\"max_position_embeddings\": 64, \"vocab_size\": 256, \"tie_word_embeddings\": true}"},
        {"gpt2", "{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_head\": 2, \"n_embd\": 64, \"vocab_size\": 256, "
                 "\"n_positions\": 64, \"layer_norm_epsilon\": 1e-05, \"activation_function\": \"gelu_new\", "
                 "\"tie_word_embeddings\": true}"}};
    for (int k = 0; k < 2; k++) {
        char path[96];
        snprintf(path, sizeof path, "%s/%s.json", dir, json[k][0]);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f, "%s\n", json[k][1]);
        cr_assert_eq(fclose(f), 0);
    }
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char *out = test_sh_output(true,
            "cd '%s' && GTCSIM_GEMM_AUDIT=1 '%s' --config configs/shakespeare-char.yaml --set model=%s/%s.json "
            "--set device=cuda --set precision=%s --set lora.r=%d --set lora.lora_dropout=%s "
            "--set lora.target_modules=all-linear --set data.seq_len=32 --set per_device_train_batch_size=2 "
            "--set gradient_accumulation_steps=1 --set max_steps=1 --set eval_steps=0 --set eval_max_batches=1 "
            "--set per_device_eval_batch_size=1 --set save_steps=0 --set sample_max_new_tokens=0 "
            "--set output_dir=%s/run%zu >/dev/null 2>%s/err%zu; echo rc=$?; grep -m1 -e GTCSIM_GEMM_AUDIT -e expected %s/err%zu; true",
            root, bin, dir, runs[i].model, runs[i].precision, runs[i].r, runs[i].dropout, dir, i, dir, i, dir, i);
        cr_expect(strstr(out, "rc=0") != NULL, "%s %s LoRA r %d dropout %s: the audited step failed: %s", runs[i].model,
                  runs[i].precision, runs[i].r, runs[i].dropout, out);
        free(out);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

#else
Test(cuda_gemm, not_built) { cr_skip_test("built without CUDA"); }
#endif
