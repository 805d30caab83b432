/* test_util.c - see test_util.h. */
#include "test_util.h"

#include <cJSON.h>
#include <stdarg.h>
#include <ftw.h>
#include <math.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

void test_require_refs(void) {
    const char *py = getenv("GTRAIN_REFS_PY");
    if (!py || !*py)
        cr_assert_fail("GTRAIN_REFS_PY is not set: run the suite through make test, which takes the reference Python "
                 "from scripts/install-deps.sh --test-refs");
    if (access(py, X_OK) != 0)
        cr_assert_fail("the test references are not installed (%s: %s): run scripts/install-deps.sh --test-refs", py,
                 strerror(errno));
}

char *test_sh_output(bool with_stderr, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *out = test_sh_voutput(with_stderr, fmt, ap);
    va_end(ap);
    return out;
}

char *test_sh_voutput(bool with_stderr, const char *fmt, va_list ap) {
    char cmd[16384];
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    cr_assert(n >= 0 && (size_t)n < sizeof cmd, "a command of %d bytes", n);
    char *full = malloc(sizeof cmd + 16);
    cr_assert(full);
    snprintf(full, sizeof cmd + 16, with_stderr ? "(%s) 2>&1" : "%s", cmd);
    FILE *p = popen(full, "r");
    free(full);
    cr_assert(p, "popen %s: %s", cmd, strerror(errno));
    size_t cap = 1 << 16, len = 0, got;
    char *out = malloc(cap);
    cr_assert(out);
    while ((got = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            out = realloc(out, cap *= 2);
            cr_assert(out);
        }
    }
    out[len] = '\0';
    int st = pclose(p);
    cr_assert_eq(st, 0, "%s exited %d:\n%s", cmd, st, out);
    return out;
}

void read_train_metrics(const char *dir, Losses *l) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    memset(l, 0, sizeof *l);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        cr_assert_not_null(j, "%s: not JSON: %s", path, line);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
        if (cJSON_IsString(type) && strcmp(type->valuestring, "train") == 0) {
            const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step"), *loss = cJSON_GetObjectItemCaseSensitive(j, "loss"),
                        *ni = cJSON_GetObjectItemCaseSensitive(j, "num_items"),
                        *eb = cJSON_GetObjectItemCaseSensitive(j, "effective_batch"),
                        *gn = cJSON_GetObjectItemCaseSensitive(j, "grad_norm"),
                        *lr = cJSON_GetObjectItemCaseSensitive(j, "lr");
            cr_assert(cJSON_IsNumber(step) && cJSON_IsNumber(loss), "%s: bad train record: %s", path, line);
            int s = (int)step->valuedouble;
            cr_assert(s >= 1 && s <= MAX_STEPS, "%s: step %d", path, s);
            l->loss[s - 1] = loss->valuedouble;
            l->num_items[s - 1] = cJSON_IsNumber(ni) ? (long)ni->valuedouble : -1;
            l->effective_batch[s - 1] = cJSON_IsNumber(eb) ? (long)eb->valuedouble : -1;
            l->grad_norm[s - 1] = cJSON_IsNumber(gn) ? gn->valuedouble : -1.0;
            l->lr[s - 1] = cJSON_IsNumber(lr) ? lr->valuedouble : -1.0;
            if (s > l->n) l->n = s;
        } else if (cJSON_IsString(type) && strcmp(type->valuestring, "eval") == 0 && l->n_eval < MAX_STEPS) {
            const cJSON *el = cJSON_GetObjectItemCaseSensitive(j, "eval_loss");
            cr_assert(cJSON_IsNumber(el), "%s: bad eval record: %s", path, line);
            l->eval_loss[l->n_eval++] = el->valuedouble;
        }
        cJSON_Delete(j);
    }
    fclose(f);
}

void test_scratch_make(char *dir, size_t cap, const char *prefix) {
    snprintf(dir, cap, "/tmp/%s_XXXXXX", prefix);
    cr_assert_not_null(mkdtemp(dir), "mkdtemp %s: %s", dir, strerror(errno));
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    remove(path); /* best effort: keep walking */
    return 0;
}

void test_scratch_remove(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

const char TEST_HF_GPT2_CONFIG[] =
    "{\n  \"activation_function\": \"gelu_new\",\n  \"architectures\": [\n    \"GPT2LMHeadModel\"\n  ],\n"
    "  \"attn_pdrop\": 0.1,\n  \"bos_token_id\": 50256,\n  \"embd_pdrop\": 0.1,\n  \"eos_token_id\": 50256,\n"
    "  \"initializer_range\": 0.02,\n  \"layer_norm_epsilon\": 1e-05,\n  \"model_type\": \"gpt2\",\n"
    "  \"n_ctx\": 1024,\n  \"n_embd\": 768,\n  \"n_head\": 12,\n  \"n_layer\": 12,\n  \"n_positions\": 1024,\n"
    "  \"resid_pdrop\": 0.1,\n  \"summary_activation\": null,\n  \"summary_first_dropout\": 0.1,\n"
    "  \"summary_proj_to_labels\": true,\n  \"summary_type\": \"cls_index\",\n  \"summary_use_proj\": true,\n"
    "  \"task_specific_params\": {\n    \"text-generation\": {\n      \"do_sample\": true,\n"
    "      \"max_length\": 50\n    }\n  },\n  \"vocab_size\": 50257\n}\n";

const char *test_join(const char *dir, const char *name) {
    static char buf[8][512];
    static int k = 0;
    char *p = buf[k++ % 8];
    cr_assert_lt((size_t)snprintf(p, 512, "%s/%s", dir, name), (size_t)512);
    return p;
}

void test_write_file(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s", path);
    if (n) cr_assert_eq(fwrite(buf, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* a 64-bit LCG (Knuth's MMIX constants) and Box-Muller: a generator unlike the module's */
double test_normal(uint64_t *st) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    double u1 = ((double)(*st >> 11) + 1.0) / 9007199254740993.0;
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    double u2 = (double)(*st >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double *test_random_orthonormal(int m, int n, uint64_t seed) {
    double *q = malloc(sizeof(double) * (size_t)m * n);
    cr_assert(q);
    uint64_t st = seed;
    for (size_t i = 0; i < (size_t)m * n; i++) q[i] = test_normal(&st);
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < n; j++) {
            for (int l = 0; l < j; l++) {
                double d = 0;
                for (int i = 0; i < m; i++) d += q[i * n + j] * q[i * n + l];
                for (int i = 0; i < m; i++) q[i * n + j] -= d * q[i * n + l];
            }
            double nrm = 0;
            for (int i = 0; i < m; i++) nrm += q[i * n + j] * q[i * n + j];
            nrm = sqrt(nrm);
            for (int i = 0; i < m; i++) q[i * n + j] /= nrm;
        }
    return q;
}

/* One-sided Jacobi (Hestenes) on A [m, n] row-major, m >= n: A = U diag(S) V^T with U [m, n],
 * V [n, n] row-major, S descending. Rotations until every column pair is orthogonal to 1e-15. */
void test_jacobi_svd(const double *A, int m, int n, double *U, double *S, double *V) {
    memcpy(U, A, sizeof(double) * (size_t)m * n);
    for (int i = 0; i < n * n; i++) V[i] = (i / n == i % n);
    for (int sweep = 0, rotated = 1; rotated && sweep < 100; sweep++) {
        rotated = 0;
        for (int p = 0; p < n - 1; p++)
            for (int q = p + 1; q < n; q++) {
                double al = 0, be = 0, ga = 0;
                for (int i = 0; i < m; i++) {
                    double x = U[i * n + p], y = U[i * n + q];
                    al += x * x, be += y * y, ga += x * y;
                }
                if (fabs(ga) <= 1e-15 * sqrt(al * be)) continue;
                rotated = 1;
                double zeta = (be - al) / (2 * ga);
                double t = (zeta >= 0 ? 1.0 : -1.0) / (fabs(zeta) + sqrt(1 + zeta * zeta));
                double c = 1 / sqrt(1 + t * t), s = c * t;
                for (int i = 0; i < m; i++) {
                    double x = U[i * n + p], y = U[i * n + q];
                    U[i * n + p] = c * x - s * y, U[i * n + q] = s * x + c * y;
                }
                for (int i = 0; i < n; i++) {
                    double x = V[i * n + p], y = V[i * n + q];
                    V[i * n + p] = c * x - s * y, V[i * n + q] = s * x + c * y;
                }
            }
    }
    for (int j = 0; j < n; j++) {
        double nrm = 0;
        for (int i = 0; i < m; i++) nrm += U[i * n + j] * U[i * n + j];
        S[j] = sqrt(nrm);
        for (int i = 0; i < m; i++) U[i * n + j] /= S[j];
    }
    for (int j = 0; j < n; j++) { /* selection sort, descending, columns moved along */
        int b = j;
        for (int l = j + 1; l < n; l++) if (S[l] > S[b]) b = l;
        if (b == j) continue;
        double t = S[j]; S[j] = S[b]; S[b] = t;
        for (int i = 0; i < m; i++) t = U[i * n + j], U[i * n + j] = U[i * n + b], U[i * n + b] = t;
        for (int i = 0; i < n; i++) t = V[i * n + j], V[i * n + j] = V[i * n + b], V[i * n + b] = t;
    }
}

double test_max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}
double test_max_diff(const float *x, const float *y, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i] - y[i]));
    return m;
}
