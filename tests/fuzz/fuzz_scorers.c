/* fuzz_scorers.c - libFuzzer target: src/run/scorers.c on arbitrary bytes. The input is split at
 * its first 0xFE byte into a generation and a gold field (no 0xFE: all generation, an empty gold)
 * and scored as gsm8k and as math; strip_string and the last-boxed piece run on each half. A
 * generation is untrusted model output: whatever it holds, no crash, no hang, no leak, and the
 * results keep their shape: correct only with both answers, the texts valid UTF-8, a gsm8k
 * prediction an integer ("-"? digits). */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "scorers.h"

static void check_utf8(const char *s) {
    if (!s) return;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        long k = gt_utf8_sequence((const unsigned char *)s + i, n - i);
        if (k <= 0) abort();
        i += (size_t)k;
    }
}

static void check_result(GenTask task, const ScoreResult *r) {
    if (r->correct && (!r->extracted || !r->gold)) abort();
    check_utf8(r->extracted);
    check_utf8(r->gold);
    if (task == TASK_GSM8K && r->extracted) {
        const char *p = r->extracted + (r->extracted[0] == '-');
        if (!*p || strspn(p, "0123456789") != strlen(p) || (p[0] == '0' && p[1])) abort();
        if (!strcmp(r->extracted, "-0")) abort(); /* Python's int has no -0 */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    for (size_t i = 0; i < size; i++) /* a NUL ends a C string early: make it a byte that matters */
        if (!buf[i]) buf[i] = '{';
    char *gold = memchr(buf, 0xFE, size);
    if (gold) *gold++ = 0;
    else gold = buf + size;
    static const GenTask tasks[] = {TASK_GSM8K, TASK_MATH, TASK_NONE};
    for (size_t t = 0; t < sizeof tasks / sizeof tasks[0]; t++) {
        ScoreResult r;
        score_answer(tasks[t], buf, gold, &r);
        check_result(tasks[t], &r);
        score_result_free(&r);
    }
    const char *halves[2] = {buf, gold};
    for (int h = 0; h < 2; h++) {
        char *s = score_math_strip(halves[h]);
        check_utf8(s);
        free(s);
        char *b = score_math_last_boxed(halves[h]);
        check_utf8(b);
        if (b && !strstr(halves[h], "\\boxed{")) abort();
        free(b);
    }
    free(buf);
    return 0;
}
