/* test_ops_encoder.c - encoder_backward's table gradients, bit for bit, against a sequential fp32
 * loop written here (for i in order: dwte[tok[i]] += dout[i], and under packing dwpe[pos[i]] +=
 * dout[i]): the order backend.h promises and the CPU backend's loop keeps, which the CUDA backend
 * reaches through a stable sort of the positions by key (cuda/kernels_encoder.cu). test_ops.c and
 * ops_positions.c check the same op against the double reference to a tolerance; this file checks
 * the order of the additions, which a tolerance cannot see.
 *
 * Shapes that stress the grouping: one token repeated over most positions, every position its own
 * token, the vocabulary's last token, B*T off every tile of the sort (and past 64 x 256, where a
 * tile takes several rounds), Qwen's vocabulary (18 bits), tokens of 2^18 and more that share
 * their low 18 bits with others, row widths on and off the 16-byte path, packed rows' positions
 * past 511. The tables start non-zero and take two calls (two micro-batches), fp32 and bf16
 * activations. Runs on the backend under test (GTRAIN_TEST_DEVICE=cuda: the CUDA backend). */
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

/* n rows of C in got against want bit for bit */
static void assert_same_bits(const float *got, const float *want, size_t n, int C, const char *what, GtDtype act,
                             int B, int T, int V, int pat) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n * C; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ == 0) first = i;
    /* an assert: once a case is wrong the rest add nothing (and a planted bug that makes every
     * repeat of a token walk the token's whole run takes minutes on the simulator's larger cases) */
    cr_assert_eq(bad, 0,
                 "%s %s B=%d T=%d C=%d V=%d pattern %d: %zu of %zu values differ from the sequential fp32 loop; "
                 "first [%zu][%zu]: %.9g, expected %.9g",
                 act == GT_BF16 ? "bf16" : "fp32", what, B, T, C, V, pat, bad, n * C, first / (size_t)C,
                 first % (size_t)C, bad ? got[first] : 0.0, bad ? want[first] : 0.0);
}

/* want[keys[i]] += rows[i], i in order, in fp32 */
static void add_rows_by_key(float *want, const float *rows, const int *keys, size_t n, int C) {
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < C; c++) want[(size_t)keys[i] * C + c] += rows[i * C + c];
}

/* Two encoder_backward calls (two micro-batches) on the backend leave, bit for bit, the tables the
 * sequential fp32 loop gives: dwte0 plus both douts' rows added one position after another at
 * their tokens (pat a TokPattern); with pos_segments also packed rows' dwpe (random segments, each
 * from position 0; short ones, then whole rows), dwpe0 plus the rows added at their positions,
 * the same walk after dwte's in one call. */
static void check_rows_bits(GtDtype act, int B, int T, int C, int V, TokPattern pat, bool pos_segments,
                            uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    const size_t BT = (size_t)B * T, nw = (size_t)V * C, np = (size_t)T * C;
    int *tok[2], *pos[2];
    float *dout[2];
    for (int k = 0; k < 2; k++) {
        tok[k] = hmem(&fx, BT * sizeof(int));
        fill_tokens(&r, tok[k], BT, V, pat);
        pos[k] = hmem(&fx, BT * sizeof(int));
        pos_random_segments(&r, pos[k], B, T, k ? T : T / 5 + 1);
        dout[k] = rand_a(&fx, &r, BT * C, -1, 1);
    }
    float *dwte0 = rand_f(&fx, &r, nw, -1, 1), *dwpe0 = rand_f(&fx, &r, np, -1, 1);

    float *d_dwte = dup_f(&fx, dwte0, nw), *d_dwpe = pos_segments ? dup_f(&fx, dwpe0, np) : NULL;
    for (int k = 0; k < 2; k++)
        fx.be->ops->encoder_backward(fx.be, d_dwte, d_dwpe, dup_a(&fx, dout[k], BT * C), dup_i(&fx, tok[k], BT), B, T,
                                     C, pos_segments ? dup_i(&fx, pos[k], BT) : NULL);

    float *want = hf(&fx, nw);
    memcpy(want, dwte0, nw * sizeof(float));
    for (int k = 0; k < 2; k++) add_rows_by_key(want, dout[k], tok[k], BT, C);
    assert_same_bits(get_f(&fx, d_dwte, nw), want, (size_t)V, C, "dwte", act, B, T, V, (int)pat);
    if (pos_segments) {
        float *want_p = hf(&fx, np);
        memcpy(want_p, dwpe0, np * sizeof(float));
        for (int k = 0; k < 2; k++) add_rows_by_key(want_p, dout[k], pos[k], BT, C);
        assert_same_bits(get_f(&fx, d_dwpe, np), want_p, (size_t)T, C, "dwpe (packed rows)", act, B, T, V, (int)pat);
    }
    fx_close(&fx);
}

static void rows_bits_cases(GtDtype act) {
    check_rows_bits(act, 2, 700, 40, 50257, TOK_ONE_HEAVY, false, 1); /* one token at most positions; BT off the tiles */
    check_rows_bits(act, 1, 1400, 11, 1400, TOK_DISTINCT, false, 2);  /* every position its own token; odd width */
    check_rows_bits(act, 3, 333, 3, 151936, TOK_RANDOM, false, 3);    /* Qwen's vocabulary: both 9-bit digits used */
    check_rows_bits(act, 2, 300, 4, (1 << 18) + 4, TOK_HIGH_BITS, false, 4); /* tokens >= 2^18 sharing low bits */
    check_rows_bits(act, 3, 5500, 16, 50257, TOK_RANDOM, false, 5); /* BT 16500: tiles of 2 rounds, the last partial */
    check_rows_bits(act, 1, 1, 264, 7, TOK_RANDOM, false, 6);       /* one position; a width of several chunks */
    /* packed rows: dwpe keyed by position too (positions past 511: both digits) */
    check_rows_bits(act, 4, 1024, 40, 50257, TOK_RANDOM, true, 7);
    check_rows_bits(act, 3, 5500, 12, 300, TOK_ONE_HEAVY, true, 8); /* BT 16500; odd width */
}
Test(ops, encoder_backward_bits, .timeout = 300) { rows_bits_cases(GT_F32); }
Test(ops_bf16, encoder_backward_bits, .timeout = 300) { rows_bits_cases(GT_BF16); }
