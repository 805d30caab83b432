/* test_ops_adamw.c - adamw over many runs of elements in one call (backend.h: each run its own weight
 * decay, elements between runs untouched; the CUDA backend steps up to 128 runs in one launch),
 * against ref_adamw (double) applied run by run, as optim.c hands GPT-2's 98 alternating decay /
 * no-decay runs over.
 *
 * Runs start and end off the 16-byte packs (and off 1: every pointer unaligned), with gaps of 0 to 2
 * elements between some of them, and three decays in turn (0.1, 0, 0.05), so that a run stepped
 * with its neighbour's decay or skipped shows at lr * wd = 1e-3 against TOL 1e-5. Checked: param,
 * m, v against the reference; the elements outside every run (and their copy, poisoned with NaN)
 * left exactly as they were; the act copy the rounding of the new param; and the whole call, bit
 * for bit, the same as one call per run on the same backend (an element's arithmetic does not
 * depend on the runs around it). 300 runs: more than one launch's table. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "ops_fixture.h"
#include "ref_ops.h"

/* runs over [0, n): lengths 1..2n/count, a gap of 1 or 2 after every third, decays 0.1, 0, 0.05 in
 * turn; the first starts at 1 or more; returns how many fit (<= count) */
static int make_runs(Rng *r, AdamwRun *runs, int count, size_t n) {
    const size_t avg = n / (size_t)count > 1 ? n / (size_t)count : 1;
    static const float decays[3] = {0.1f, 0.0f, 0.05f};
    size_t at = 1 + rng_next(r) % 3;
    int k = 0;
    for (; k < count && at < n; k++) {
        size_t len = 1 + (size_t)(rng_next(r) % (2 * avg));
        if (len > n - at) len = n - at;
        runs[k] = (AdamwRun){at, at + len, decays[k % 3]};
        at += len + (k % 3 == 2 ? 1 + rng_next(r) % 2 : 0);
    }
    return k;
}

static bool in_runs(const AdamwRun *runs, int nr, size_t i) {
    for (int k = 0; k < nr; k++)
        if (i >= runs[k].begin && i < runs[k].end) return true;
    return false;
}

static void check_adamw_runs(GtDtype act, size_t n, int count, size_t off, int t, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    AdamwRun *runs = hmem(&fx, (size_t)count * sizeof *runs);
    const int nr = make_runs(&r, runs, count, n);
    float *h[4] = {rand_f(&fx, &r, n, -1, 1), rand_f(&fx, &r, n, -1, 1), rand_f(&fx, &r, n, -0.1f, 0.1f),
                   rand_f(&fx, &r, n, 0, 0.01f)}; /* param, grad, m, v */
    /* two copies on the device: one call with every run, one call per run */
    float *d[2][4];
    act_t *dc[2];
    for (int w = 0; w < 2; w++) {
        for (int a = 0; a < 4; a++) {
            d[w][a] = dnan(&fx, n + off) + off;
            up(&fx, d[w][a], h[a], n * sizeof(float));
        }
        dc[w] = backend_act_at(fx.be, dnan_a(&fx, n + off), off);
    }
    fx.be->ops->adamw(fx.be, d[0][0], d[0][1], d[0][2], d[0][3], dc[0], runs, nr, lr, b1, b2, eps, t);
    for (int k = 0; k < nr; k++)
        fx.be->ops->adamw(fx.be, d[1][0], d[1][1], d[1][2], d[1][3], dc[1], &runs[k], 1, lr, b1, b2, eps, t);

    double *rp = to_d(&fx, h[0], n), *rg = to_d(&fx, h[1], n), *rm = to_d(&fx, h[2], n), *rv = to_d(&fx, h[3], n);
    for (int k = 0; k < nr; k++) {
        const size_t b = runs[k].begin;
        ref_adamw(rp + b, rg + b, rm + b, rv + b, runs[k].end - b, lr, b1, b2, eps, runs[k].weight_decay, t);
    }
    const float *got[3] = {get_f(&fx, d[0][0], n), get_f(&fx, d[0][2], n), get_f(&fx, d[0][3], n)};
    const double *want[3] = {rp, rm, rv};
    static const char *names[3] = {"param", "m", "v"};
    for (int a = 0; a < 3; a++)
        CHECK(names[a], got[a], want[a], n, "%s n=%zu runs=%d off=%zu t=%d", gt_dtype_name(act), n, nr, off, t);

    const float *copy = get_a(&fx, dc[0], n);
    size_t outside_changed = 0, copy_bad = 0, differs = 0;
    for (size_t i = 0; i < n; i++) {
        if (!in_runs(runs, nr, i)) {
            outside_changed += memcmp(&got[0][i], &h[0][i], 4) || memcmp(&got[1][i], &h[2][i], 4) ||
                               memcmp(&got[2][i], &h[3][i], 4) || !isnan(copy[i]);
            continue;
        }
        copy_bad += (double)copy[i] != (act == GT_BF16 ? ref_round_bf16(got[0][i]) : (double)got[0][i]);
    }
    for (int a = 0; a < 4; a++) {
        if (a == 1) continue; /* the gradient is read only */
        const size_t bytes = n * sizeof(float);
        differs += memcmp(get_raw(&fx, d[0][a], bytes), get_raw(&fx, d[1][a], bytes), bytes) != 0;
    }
    const size_t cb = backend_act_bytes(fx.be, n);
    differs += memcmp(get_raw(&fx, dc[0], cb), get_raw(&fx, dc[1], cb), cb) != 0;
    cr_expect_eq(outside_changed, 0, "adamw wrote %zu elements outside its runs (n=%zu runs=%d off=%zu)",
                 outside_changed, n, nr, off);
    cr_expect_eq(copy_bad, 0, "adamw act copy: %zu values are not the rounding of the new param", copy_bad);
    cr_expect_eq(differs, 0, "adamw over %d runs: %zu of param, m, v, copy differ in bits from one call per run",
                 nr, differs);
    fx_close(&fx);
}

static void adamw_runs_cases(GtDtype act) {
    check_adamw_runs(act, 20001, 9, 0, 3, 1);   /* long runs: the 16-byte packs, edges off them */
    check_adamw_runs(act, 20001, 300, 0, 7, 2); /* 300 runs: more than one launch's 128 */
    check_adamw_runs(act, 5003, 40, 1, 1, 3);   /* every pointer off 16 bytes: element by element */
    check_adamw_runs(act, 64, 30, 0, 2, 4);     /* runs of one or a few elements */
}
Test(ops, adamw_runs) { adamw_runs_cases(GT_F32); }
Test(ops_bf16, adamw_runs) { adamw_runs_cases(GT_BF16); }
