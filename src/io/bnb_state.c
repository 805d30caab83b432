/* bnb_state.c - bitsandbytes' quant_state JSON (see bnb_state.h). */
#include "bnb_state.h"

#include <cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int why_f(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int why_f(char *why, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return -1;
}

/* a short description of v for "found ..." */
static const char *found(const cJSON *v, char *buf, size_t cap) {
    if (!v) return "no such key";
    if (cJSON_IsString(v)) {
        snprintf(buf, cap, "\"%.60s\"", v->valuestring);
        for (char *p = buf; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
        return buf;
    }
    if (cJSON_IsNumber(v)) {
        snprintf(buf, cap, "%.17g", v->valuedouble);
        return buf;
    }
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an invalid value";
}

/* v as an integer in [lo, hi], or -1 */
static int int_in(const cJSON *v, double lo, double hi, int64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    const double d = v->valuedouble;
    if (!(d >= lo && d <= hi) || floor(d) != d) return -1;
    *out = (int64_t)d;
    return 0;
}

static const char *const KEYS[] = {"quant_type", "blocksize", "dtype", "shape", "nested_blocksize", "nested_dtype",
                                   "nested_offset"};
enum { K_QT, K_BS, K_DT, K_SHAPE, K_NBS, K_NDT, K_NOFF, K_N };

int bnb_state_parse(const char *text, size_t len, BnbState *s, char *why, size_t cap) {
    memset(s, 0, sizeof *s);
    char b[96];
    if (len == 0) return why_f(why, cap, "expected a JSON object, found no bytes");
    if (len > BNB_STATE_MAX_BYTES)
        return why_f(why, cap, "expected at most %d bytes of JSON, found %zu", BNB_STATE_MAX_BYTES, len);
    long at = gt_json_nul_at(text, len);
    if (at >= 0) return why_f(why, cap, "expected JSON without NUL, found one at byte %ld", at);
    at = gt_json_too_deep(text, len, 4);
    if (at >= 0) return why_f(why, cap, "expected JSON nested at most 4 deep, found deeper nesting at byte %ld", at);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        size_t off = (end && end >= text && end <= text + len) ? (size_t)(end - text) : 0;
        return why_f(why, cap, "expected valid JSON, found an error at byte %zu of %zu", off, len);
    }
    int rc = -1;
    for (const char *p = end; p < text + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            why_f(why, cap, "expected the end of the JSON, found more text at byte %zu", (size_t)(p - text));
            goto out;
        }
    if (!cJSON_IsObject(j)) {
        why_f(why, cap, "expected a JSON object {quant_type, blocksize, dtype, shape, ...}, found %s", found(j, b, sizeof b));
        goto out;
    }
    const cJSON *v[K_N] = {0};
    for (const cJSON *c = j->child; c; c = c->next)
        for (int k = 0; k < K_N; k++)
            if (strcmp(c->string, KEYS[k]) == 0) {
                if (v[k]) {
                    why_f(why, cap, "%s: expected the key once, found it twice", KEYS[k]);
                    goto out;
                }
                v[k] = c;
            }
    for (int k = K_QT; k <= K_SHAPE; k++)
        if (!v[k]) {
            why_f(why, cap, "%s: expected the key, found none", KEYS[k]);
            goto out;
        }
    if (!cJSON_IsString(v[K_QT]) || strcmp(v[K_QT]->valuestring, "nf4") != 0) {
        why_f(why, cap, "quant_type: expected \"nf4\" (gtrain reads NF4 only), found %s", found(v[K_QT], b, sizeof b));
        goto out;
    }
    int64_t bs = 0;
    if (int_in(v[K_BS], 1, 1 << 30, &bs)) {
        why_f(why, cap, "blocksize: expected a positive integer, found %s", found(v[K_BS], b, sizeof b));
        goto out;
    }
    static const char *const DT[] = {"float32", "bfloat16", "float16"};
    static const StDtype DTV[] = {ST_F32, ST_BF16, ST_F16};
    int dt = -1;
    for (int k = 0; k < 3 && cJSON_IsString(v[K_DT]); k++)
        if (strcmp(v[K_DT]->valuestring, DT[k]) == 0) dt = k;
    if (dt < 0) {
        why_f(why, cap, "dtype: expected \"float32\", \"bfloat16\" or \"float16\", found %s", found(v[K_DT], b, sizeof b));
        goto out;
    }
    s->dtype = DTV[dt];
    const int nd = cJSON_IsArray(v[K_SHAPE]) ? cJSON_GetArraySize(v[K_SHAPE]) : 0;
    if (nd < 1 || nd > 2) {
        why_f(why, cap, "shape: expected 1 or 2 positive integers, found %s%s", cJSON_IsArray(v[K_SHAPE]) ? "" : "",
              cJSON_IsArray(v[K_SHAPE]) ? (nd ? "more than 2 dimensions" : "an empty array") : found(v[K_SHAPE], b, sizeof b));
        goto out;
    }
    double numel = 1;
    int k = 0;
    for (const cJSON *d = v[K_SHAPE]->child; d; d = d->next, k++) {
        if (int_in(d, 1, 9007199254740992.0, &s->shape[k])) {
            why_f(why, cap, "shape[%d]: expected a positive integer, found %s", k, found(d, b, sizeof b));
            goto out;
        }
        numel *= (double)s->shape[k];
    }
    if (numel > 9007199254740992.0) {
        why_f(why, cap, "shape: expected at most 2^53 elements, found %.17g", numel);
        goto out;
    }
    s->ndim = nd;
    s->f.numel = nd == 1 ? s->shape[0] : s->shape[0] * s->shape[1];
    s->f.blocksize = (int)bs;
    const bool any_nested = v[K_NBS] || v[K_NDT] || v[K_NOFF];
    for (int q = K_NBS; any_nested && q <= K_NOFF; q++)
        if (!v[q]) {
            why_f(why, cap, "%s: expected the key (double quantization: %s is given), found none", KEYS[q],
                  KEYS[v[K_NBS] ? K_NBS : v[K_NDT] ? K_NDT : K_NOFF]);
            goto out;
        }
    s->f.nested = any_nested;
    char fwhy[160];
    if (nf4_format_check(&s->f, fwhy, sizeof fwhy)) {
        why_f(why, cap, "blocksize: %s", fwhy);
        goto out;
    }
    if (any_nested) {
        int64_t nbs = 0;
        if (int_in(v[K_NBS], NF4_NESTED_BLOCK, NF4_NESTED_BLOCK, &nbs)) {
            why_f(why, cap, "nested_blocksize: expected %d, found %s", NF4_NESTED_BLOCK, found(v[K_NBS], b, sizeof b));
            goto out;
        }
        if (!cJSON_IsString(v[K_NDT]) || strcmp(v[K_NDT]->valuestring, "float32") != 0) {
            why_f(why, cap, "nested_dtype: expected \"float32\", found %s", found(v[K_NDT], b, sizeof b));
            goto out;
        }
        const double off = cJSON_IsNumber(v[K_NOFF]) ? v[K_NOFF]->valuedouble : NAN;
        if (!isfinite(off) || !isfinite((float)off)) {
            why_f(why, cap, "nested_offset: expected a finite number, found %s", found(v[K_NOFF], b, sizeof b));
            goto out;
        }
        s->offset = (float)off;
    }
    rc = 0;
out:
    cJSON_Delete(j);
    return rc;
}
