/* test_ops_encoder.c - encoder_backward's token gradient, bit for bit, against a sequential fp32 loop
 * written here (for i in order: dwte[tok[i]] += dout[i]): the order backend.h promises and the
 * CPU backend's loop keeps, which the CUDA backend reaches through a stable sort of the positions by
 * token (cuda/kernels_encoder.cu). test_ops.c checks the same op against the double reference to a
 * tolerance; this file checks the order of the additions, which a tolerance cannot see.
 *
 * Shapes that stress the grouping: one token repeated over most positions, every position its own
 * token, the vocabulary's last token, B*T off every tile of the sort (and past 64 x 256, where a
 * tile takes several rounds), Qwen's vocabulary (18 bits), tokens of 2^18 and more that share
 * their low 18 bits with others, row widths on and off the 16-byte path. dwte starts non-zero
 * and takes two calls (two micro-batches), fp32 and bf16 activations. Runs on the backend under
 * test (GTRAIN_TEST_DEVICE=cuda: the CUDA backend). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "ops_fixture.h"

typedef enum {
    TOK_RANDOM,    /* uniform over V */
    TOK_ONE_HEAVY, /* 7 of 8 positions the same token, the rest uniform */
    TOK_DISTINCT,  /* a random permutation of 0..BT-1 (V = BT) */
    TOK_HIGH_BITS  /* tokens t and t + 2^18 k interleaved: equal low 18 bits, different tokens */
} TokPattern;

static void fill_tokens(Rng *r, int *tok, size_t BT, int V, TokPattern pat) {
    for (size_t i = 0; i < BT; i++) {
        switch (pat) {
        case TOK_RANDOM: tok[i] = (int)(rng_next(r) % (uint64_t)V); break;
        case TOK_ONE_HEAVY: tok[i] = rng_next(r) % 8 ? 3 : (int)(rng_next(r) % (uint64_t)V); break;
        case TOK_DISTINCT: tok[i] = (int)i; break;
        case TOK_HIGH_BITS: tok[i] = (int)(rng_next(r) % 4) + (1 << 18) * (int)(rng_next(r) % 2); break;
        }
    }
    if (pat == TOK_DISTINCT)
        for (size_t i = BT - 1; i > 0; i--) { /* Fisher-Yates */
            size_t j = (size_t)(rng_next(r) % (uint64_t)(i + 1));
            int t = tok[i];
            tok[i] = tok[j];
            tok[j] = t;
        }
    tok[BT / 2] = V - 1; /* the vocabulary's last row */
}

/* dwte after two encoder_backward calls on the backend equals, bit for bit, dwte0 plus both douts'
 * rows added one position after another in fp32 */
static void check_wte_bits(GtDtype act, int B, int T, int C, int V, TokPattern pat, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    const size_t BT = (size_t)B * T, nw = (size_t)V * C;
    int *tok[2];
    float *dout[2];
    for (int k = 0; k < 2; k++) {
        tok[k] = hmem(&fx, BT * sizeof(int));
        fill_tokens(&r, tok[k], BT, V, pat);
        dout[k] = rand_a(&fx, &r, BT * C, -1, 1);
    }
    float *dwte0 = rand_f(&fx, &r, nw, -1, 1);

    float *d_dwte = dup_f(&fx, dwte0, nw);
    for (int k = 0; k < 2; k++)
        fx.be->ops->encoder_backward(fx.be, d_dwte, NULL, dup_a(&fx, dout[k], BT * C), dup_i(&fx, tok[k], BT), B, T,
                                     C, NULL);
    const float *got = get_f(&fx, d_dwte, nw);

    float *want = hf(&fx, nw);
    memcpy(want, dwte0, nw * sizeof(float));
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < BT; i++)
            for (int c = 0; c < C; c++) want[(size_t)tok[k][i] * C + c] += dout[k][i * C + c];

    size_t bad = 0, first = 0;
    for (size_t i = 0; i < nw; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ == 0) first = i;
    cr_expect_eq(bad, 0,
                 "%s B=%d T=%d C=%d V=%d pattern %d: %zu of %zu dwte values differ from the sequential fp32 loop; "
                 "first [%zu][%zu]: %.9g, expected %.9g",
                 act == GT_BF16 ? "bf16" : "fp32", B, T, C, V, (int)pat, bad, nw, first / (size_t)C,
                 first % (size_t)C, bad ? got[first] : 0.0, bad ? want[first] : 0.0);
    fx_close(&fx);
}

static void wte_bits_cases(GtDtype act) {
    check_wte_bits(act, 2, 700, 40, 50257, TOK_ONE_HEAVY, 1); /* one token at most positions; BT off the tiles */
    check_wte_bits(act, 1, 1400, 11, 1400, TOK_DISTINCT, 2);  /* every position its own token; odd width */
    check_wte_bits(act, 3, 333, 3, 151936, TOK_RANDOM, 3);    /* Qwen's vocabulary: both 9-bit digits used */
    check_wte_bits(act, 2, 300, 4, (1 << 18) + 4, TOK_HIGH_BITS, 4); /* tokens >= 2^18 sharing low bits */
    check_wte_bits(act, 3, 5500, 16, 50257, TOK_RANDOM, 5); /* BT 16500: tiles of 2 rounds, the last partial */
    check_wte_bits(act, 1, 1, 264, 7, TOK_RANDOM, 6);       /* one position; a width of several chunks */
}
Test(ops, encoder_backward_bits, .timeout = 300) { wte_bits_cases(GT_F32); }
Test(ops_bf16, encoder_backward_bits, .timeout = 300) { wte_bits_cases(GT_BF16); }
