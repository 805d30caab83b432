/* ops_fixture.h - the fixture the op tests share (test_ops.c, test_ops_llama.c): the backend
 * under test from test_backend_open() (GTRAIN_TEST_DEVICE=cuda runs the same tests on the CUDA
 * backend), device buffers filled with ops->to_device and read back with ops->to_host (never
 * assuming host pointers are device pointers), outputs poisoned with NaN, seeded random data,
 * and the error metric against the double-precision references.
 *
 * rel_err(a, b) = max_i |a_i - b_i| / max(max_i |b_i|, 1e-6), infinite when a holds a NaN or Inf;
 * TOL bounds an fp32 output, TOL_BF16 an act-typed output under bf16 (test_ops.c's header says
 * why). Every buffer is released by fx_close (host-only uses: fx_free_host). Asserts on failure. */
#ifndef GT_TEST_OPS_FIXTURE_H
#define GT_TEST_OPS_FIXTURE_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#define TOL 1e-5      /* backend fp32 vs double reference */
#define TOL_BF16 1e-2 /* a bf16 (act dtype) output vs double reference */
#define FD_TOL 1e-6   /* double reference backward vs central differences (h = 1e-5) */
#define FD_H 1e-5

#define FX_MAX 64
typedef struct {
    Backend *be;
    GtDtype act;   /* the backend's act dtype for this test */
    double act_tol; /* bound for act-typed outputs */
    void *dev[FX_MAX];
    int ndev;
    void *host[FX_MAX];
    int nhost;
} Fx;

void fx_open_as(Fx *fx, GtDtype act);
void fx_open(Fx *fx); /* fp32 */
/* a CPU backend with exactly num_threads threads (thread-count checks); false (fx untouched
 * but zeroed) when the tests run on another device */
bool fx_open_threads(Fx *fx, GtDtype act, int num_threads);
void fx_close(Fx *fx);
void fx_free_host(Fx *fx); /* the host buffers only (a fixture used without a backend) */

/* host buffers, zeroed, freed by fx_close */
void *hmem(Fx *fx, size_t bytes);
float *hf(Fx *fx, size_t n);
double *hd(Fx *fx, size_t n);
/* device buffers, freed by fx_close */
void *dmem(Fx *fx, size_t bytes);
void up(Fx *fx, void *dev, const void *host, size_t bytes);
void down(Fx *fx, void *host, const void *dev, size_t bytes);

/* device copy of host floats / ints; n floats back into a fresh host buffer */
float *dup_f(Fx *fx, const float *h, size_t n);
int *dup_i(Fx *fx, const int *h, size_t n);
float *get_f(Fx *fx, const float *d, size_t n);
/* act-typed tensors: host values are floats (already representable in the act dtype, see
 * rand_a); on the device they are stored in fx->act */
void *dup_a(Fx *fx, const float *h, size_t n);
/* n NaNs on the device: fp32 (dnan) or in the act dtype (dnan_a) */
float *dnan(Fx *fx, size_t n);
void *dnan_a(Fx *fx, size_t n);
float *get_a(Fx *fx, const void *d, size_t n);
/* raw bytes of a device buffer (for bit-identity checks) */
void *get_raw(Fx *fx, const void *d, size_t bytes);

/* ---- data: splitmix64 */
typedef struct {
    uint64_t s;
} Rng;

static inline uint64_t rng_next(Rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline double rng_uniform(Rng *r) { return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }
static inline float rng_f(Rng *r, float lo, float hi) { return lo + (hi - lo) * (float)rng_uniform(r); }

/* a row width (a multiple of 4) that takes the CUDA norms' wide path: more than 256 threads x 4
 * packs of 16 bytes, at most 256 x 8 (cuda/kernels_norms.cu's ROW_PPT, ROW_PPT_WIDE) */
static inline int wide_c(GtDtype act) { return act == GT_BF16 ? 9000 : 8188; }

float *rand_f(Fx *fx, Rng *r, size_t n, float lo, float hi);
/* random values representable in the act dtype (rounded to bf16 under bf16) */
float *rand_a(Fx *fx, Rng *r, size_t n, float lo, float hi);
int *rand_i(Fx *fx, Rng *r, size_t n, int hi);
double *rand_d(Fx *fx, Rng *r, size_t n, double lo, double hi);
double *to_d(Fx *fx, const float *f, size_t n);

double rel_err(const float *a, const double *b, size_t n);
#define CHECK_TOL(tol, what, a, b, n, fmt, ...)                                                           \
    do {                                                                                                  \
        double e_ = rel_err((a), (b), (n)), t_ = (tol);                                                   \
        cr_expect_leq(e_, t_, "%s: rel err %.3g > %.1g (" fmt ")", what, e_, t_, __VA_ARGS__);            \
    } while (0)
/* an fp32 output; an act-typed output (fx in scope) */
#define CHECK(what, a, b, n, fmt, ...) CHECK_TOL(TOL, what, a, b, n, fmt, __VA_ARGS__)
#define CHECK_A(what, a, b, n, fmt, ...) CHECK_TOL(fx.act_tol, what, a, b, n, fmt, __VA_ARGS__)

/* ---- the references' backward vs central differences (h = FD_H) of a scalar loss() */
typedef double (*LossFn)(void *ctx);
/* max_i |fd_i - grad_i| / max(max_i |grad_i|, 1e-6) over the elements of x */
double fd_check(double *x, size_t n, const double *grad, LossFn loss, void *ctx);
double dotd(const double *a, const double *b, size_t n);
#define FD_EXPECT(what, e) cr_expect_leq((e), FD_TOL, "%s: reference vs finite differences %.3g", what, (e))

/* ---- attention, shared by the GPT-2 (test_ops.c) and the Llama (test_ops_llama.c) cases:
 * attention_forward and attention_backward against the double reference (out, lse, dqkv), dqkv
 * and the outputs poisoned with NaN. ramp: keys grow along the sequence, so later key tiles hold
 * the row's max and the online softmax must rescale what it accumulated (see ops_fixture.c). */
typedef struct {
    int B, T, NH, NKV, hd, window;
} AttCase;
void check_attention_gqa(GtDtype act, AttCase c, bool ramp, uint64_t seed);

/* ---- the position ops on packed rows (ops_positions.c): rows of segments of random lengths
 * 1..max_len, each segment checked against the double reference run on it alone from position 0 */
void pos_random_segments(Rng *r, int *pos, int B, int T, int max_len);
void check_attention_pos(GtDtype act, AttCase c, int max_len, uint64_t seed);
void check_encoder_pos(Fx *fx, Rng *r, int B, int T, int C, int V, double act_tol);
void check_rope_pos(Fx *fx, Rng *r, int B, int T, int NH, int NKV, int hs, double act_tol);

/* ---- the generation ops (ops_decode.c): kv_store and attention_cached through a history of
 * decoding calls against a double reference, on fx's backend and on the CPU backend when fx's is
 * another; encoder_forward and rope_forward at arbitrary per-token positions. s: NH, NKV, hd,
 * window */
void check_decode_ops(Fx *fx, Rng *r, const int *s);

#endif
