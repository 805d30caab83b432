/* test_util.h - reading a run's output back in end-to-end tests. */
#ifndef GT_TEST_UTIL_H
#define GT_TEST_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_STEPS 64

typedef struct {
    int n;                 /* highest step with a train record */
    double loss[MAX_STEPS];
    long num_items[MAX_STEPS], effective_batch[MAX_STEPS];
    double grad_norm[MAX_STEPS]; /* before clipping */
    double lr[MAX_STEPS];        /* the learning rate of the step's update */
    int n_eval;
    double eval_loss[MAX_STEPS]; /* in file order */
} Losses;

/* GPT-2 small's config.json as Hugging Face publishes it (openai-community/gpt2), extra fields
 * and all: a fixture written here, not read from configs/. */
extern const char TEST_HF_GPT2_CONFIG[];

/* The test suite's independent references are the real Hugging Face stack (torch, transformers, peft,
 * trl, tokenizers, ...) in a virtual environment that scripts/install-deps.sh --test-refs makes; make
 * test passes its Python as $GTRAIN_REFS_PY. PY is that Python in a command for system(3)/popen(3)
 * (the shell expands it). test_require_refs() fails the test (never skips it) with one line saying
 * what is missing and how to install it, when the reference Python is not there. */
#define PY "\"$GTRAIN_REFS_PY\""
void test_require_refs(void);
/* The output of the shell command printf(fmt, ...) (its stdout, and its stderr too when with_stderr;
 * a fresh malloc the caller frees); the test fails, showing that output, unless it exits 0. */
char *test_sh_output(bool with_stderr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *test_sh_voutput(bool with_stderr, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* A scratch directory /tmp/<prefix>_XXXXXX into dir (asserts), and its removal with everything in it. */
void test_scratch_make(char *dir, size_t cap, const char *prefix);
void test_scratch_remove(const char *dir);

/* dir/name in one of 8 rotating buffers (so a call can take several); asserts it fits. */
const char *test_join(const char *dir, const char *name);
/* Write n bytes to path (asserts). */
void test_write_file(const char *path, const void *buf, size_t n);

/* The "train" and "eval" records of dir/metrics.jsonl (asserts it parses). */
void read_train_metrics(const char *dir, Losses *l);

/* A normal deviate from a 64-bit LCG (Knuth's MMIX constants) and Box-Muller: a generator unlike
 * the modules' (splitmix64). */
double test_normal(uint64_t *st);
/* Q [m, n] (row-major, fresh malloc) with orthonormal columns: modified Gram-Schmidt, twice, on a
 * Gaussian matrix from seed. */
double *test_random_orthonormal(int m, int n, uint64_t seed);

/* One-sided Jacobi (Hestenes) SVD in double of A [m, n] row-major, m >= n: A = U diag(S) V^T with
 * U [m, n], V [n, n], S descending (an independent reference for src/model/svd.c). */
void test_jacobi_svd(const double *A, int m, int n, double *U, double *S, double *V);
/* max |x[i]| and max |x[i] - y[i]| over n floats, in double */
double test_max_abs(const float *x, size_t n);
double test_max_diff(const float *x, const float *y, size_t n);

/* 1 when built with AddressSanitizer: its shadow memory and the quarantine of freed blocks make a
 * process's RSS say nothing about what the code holds */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

#endif
