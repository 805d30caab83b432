/* test_scorers.c - src/run/scorers.c against the evaluation scripts it follows: every case of the
 * tables below goes through MetaMath's own functions (tests/tools/metamath_score.py: eval_gsm8k.py's
 * extract_answer_number, eval_math.py's process_results and remove_boxed, util.py's strip_string,
 * is_equiv and last_boxed_only_string, with the `fraction` package they import) and through
 * score_answer, and the extracted answer, the gold and the verdict must agree field by field; the
 * pieces (score_math_strip, score_math_last_boxed) likewise on their own inputs. No expected value
 * is written here: the script's output is the expectation. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "scorers.h"
#include "test_util.h"

static char g_dir[256];

static void scratch_init(void) { test_scratch_make(g_dir, sizeof g_dir, "gt_test_scorers"); }
static void scratch_fini(void) { test_scratch_remove(g_dir); }

TestSuite(scorers, .init = scratch_init, .fini = scratch_fini, .timeout = 120);

typedef struct {
    const char *generated, *gold_field;
    const char *py_generated; /* what Python reads when the C input is not UTF-8 (NULL: the same) */
} Case;

/* GSM8K: the number after the last "The answer is: ", compared numerically with the "#### " gold */
static const Case GSM8K[] = {
    {"Natalia sold 48 clips. The answer is: 72", "She sold 48/2 = 24 clips.\n#### 72", NULL},
    {"The total is 1,234 dollars. The answer is: 1,234", "#### 1,234", NULL},
    {"The answer is: 1,234,567", "#### 1,234,567", NULL},
    {"The answer is: 1234567", "#### 1,234,567", NULL},
    {"The answer is: -5", "#### -5", NULL},
    {"The answer is: - 5", "#### -5", NULL},
    {"The answer is: 3.50", "#### 3.5", NULL},
    {"The answer is: 3.50", "#### 4", NULL},
    {"The answer is: 2.5", "#### 2", NULL},
    {"The answer is: .5", "#### 0", NULL},
    {"The answer is: -0.5", "#### 0", NULL},
    {"The answer is: 3/4", "#### 1", NULL},
    {"The answer is: 7/2", "#### 4", NULL},
    {"The answer is: 12/5 hours", "#### 2", NULL},
    {"The answer is: -3/4", "#### -1", NULL},
    {"The answer is: 5/0", "#### 5", NULL},
    {"The answer is: 5/00", "#### 5", NULL},
    {"The answer is: -/4", "#### 4", NULL},
    {"The answer is: 2/3/4", "#### 1", NULL},
    {"The answer is: $12 dollars.", "#### 12", NULL},
    {"The answer is: 45%", "#### 45", NULL},
    {"The answer is: 3,50", "#### 350", NULL},
    {"The answer is: 1e5", "#### 100000", NULL},
    {"The answer is: +7", "#### 7", NULL},
    {"The answer is: x = 3", "#### 3", NULL},
    {"The answer is: 3.\nThen again... The answer is: 4", "#### 4", NULL},
    {"The answer is: 4. The answer is: 3", "#### 4", NULL},
    {"The result is 18.", "#### 18", NULL},
    {"The answer is: eighteen", "#### 18", NULL},
    {"The answer is:18", "#### 18", NULL},
    {"The answer is: $\\boxed{5}$", "#### 5", NULL},
    {"", "#### 5", NULL},
    {"The answer is: 18", "18", NULL},
    {"The answer is: 18", " 1,018 \n", NULL},
    {"The answer is: 18", "#### 18 #### 19", NULL},
    {"The answer is: 18", "#### eighteen", NULL},
    {"The answer is: 18", "#### ", NULL},
    {"The answer is: 1000", "#### 1_000", NULL},
    {"The answer is: 100", "#### 1e2", NULL},
    {"The answer is: \xd9\xa3\xd9\xa4", "#### 34", NULL},          /* Arabic-Indic ٣٤ */
    {"The answer is: \xef\xbc\x91\xef\xbc\x92", "#### 12", NULL},  /* full-width １２ */
    {"The answer is: \xc2\xa0" "42\xe3\x80\x80.", "#### \xe3\x80\x80" "42", NULL}, /* NBSP, ideographic space */
    {"Caf\xc3\xa9 \xe2\x82\xac" "5 The answer is: \xe2\x82\xac" "5", "#### 5", NULL},
    {"The answer is: \xff" "5", "#### 5", "The answer is: \xef\xbf\xbd" "5"}, /* not UTF-8 */
    {"The answer is: "
     "99999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999"
     "99999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999"
     "99999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999",
     "#### 1", NULL}, /* inf: None */
    {"The answer is: 123456789012", "#### 123,456,789,012", NULL},
};

/* MATH: the text after the last "The answer is: ", normalised by strip_string, against the last
 * \boxed{} of the solution */
static const Case MATH[] = {
    {"The answer is: \\frac{1}{2}", "So it is $\\boxed{\\frac{1}{2}}$.", NULL},
    {"The answer is: \\dfrac{1}{2}", "$\\boxed{\\frac{1}{2}}$", NULL},
    {"The answer is: \\tfrac12", "\\boxed{\\frac{1}{2}}", NULL},
    {"The answer is: 1/2", "\\boxed{\\frac{1}{2}}", NULL},
    {"The answer is: 0.5", "\\boxed{\\frac{1}{2}}", NULL},
    {"The answer is: .5", "\\boxed{\\frac12}", NULL},
    {"The answer is: 0.50", "\\boxed{\\frac12}", NULL},
    {"The answer is: 5 \\text{ cm}", "\\boxed{5}", NULL},
    {"The answer is: 5\\text{ cm}^2 \\text{ total}", "\\boxed{5}", NULL},
    {"The answer is: 5\\%", "\\boxed{5}", NULL},
    {"The answer is: 90^\\circ", "\\boxed{90^{\\circ}}", NULL},
    {"The answer is: \\left( 1, 2 \\right)", "\\boxed{(1,2)}", NULL},
    {"The answer is: x = 3", "\\boxed{3}", NULL},
    {"The answer is: abc = 3", "\\boxed{3}", NULL},
    {"The answer is: \xce\xb1\xce\xb2=3", "\\boxed{3}", NULL}, /* αβ= : two characters, four bytes */
    {"The answer is: 3.", "\\boxed{3}", NULL},
    {"The answer is: 3.\nAnd then some.", "\\boxed{3}", NULL},
    {"The answer is: 2.\nThe answer is: 3", "\\boxed{3}", NULL},
    {"The answer is 3", "\\boxed{3}", NULL},
    {"The answer is: $\\boxed{5}$", "\\boxed{5}", NULL},
    {"The answer is: \\boxed{5}", "\\boxed{5}", NULL},
    {"Thus \\boxed{5}.", "\\boxed{5}", NULL},
    {"The answer is: 5", "\\boxed 5", NULL},
    {"The answer is: 5", "\\fbox{5}", NULL},
    {"The answer is: 5", "\\boxed{5", NULL},
    {"The answer is: 5", "\\boxed{3} then \\boxed{5}", NULL},
    {"The answer is: \\sqrt2", "\\boxed{\\sqrt{2}}", NULL},
    {"The answer is: 2\\sqrt3+\\sqrt{5}", "\\boxed{2\\sqrt{3}+\\sqrt{5}}", NULL},
    {"The answer is: 2\\sqrt", "2\\sqrt", NULL},
    {"The answer is: 2\\frac", "\\boxed{2\\frac}", NULL},
    {"The answer is: \\frac1{72}", "\\boxed{\\frac{1}{72}}", NULL},
    {"The answer is: \\frac{72}1", "\\boxed{\\frac{72}{1}}", NULL},
    {"The answer is: x/2", "\\boxed{\\frac{x}{2}}", NULL},
    {"The answer is: x/2", "x/2", NULL},
    {"The answer is: 01/2", "\\boxed{\\frac{1}{2}}", NULL},
    {"The answer is: -1/2", "\\boxed{\\frac{-1}{2}}", NULL},
    {"The answer is: \xef\xbc\x91/2", "\\boxed{\\frac{1}{2}}", NULL}, /* full-width 1 */
    {"The answer is: \\$5", "\\boxed{5}", NULL},
    {"The answer is: 10\\!000", "\\boxed{10000}", NULL},
    {"The answer is: \\\\frac{1}{2}", "\\boxed{\\frac{1}{2}}", NULL},
    {"The answer is: \\sqrt\xcf\x80", "\\boxed{\\sqrt{\xcf\x80}}", NULL}, /* \sqrtπ */
    {"The answer is: \xcf\x80/2", "\\boxed{\\frac{\\pi}{2}}", NULL},
    {"The answer is: 1,000", "\\boxed{1000}", NULL},
    {"The answer is: \\text{(A)}", "\\boxed{\\text{(A)}}", NULL},
    {"", "\\boxed{5}", NULL},
    {"The answer is: ", "\\boxed{}", NULL},
    {"The answer is: 7", "7", NULL},
    {"The answer is: \\frac{1}{2}", "\\frac12", NULL},
    {"The answer is: \xff" "7", "\\boxed{\xef\xbf\xbd" "7}", "The answer is: \xef\xbf\xbd" "7"},
};

/* strip_string and last_boxed_only_string + remove_boxed on their own */
static const char *PIECES[] = {
    "", ".", ".5", " .5", "{.5}", "0.5", "a = b = c", "ab=3", "abc=3", "\\frac", "\\fracx", "\\frac{1}2",
    "\\frac12\\frac34", "\\frac1", "\\sqrt", "\\sqrtx\\sqrt{y}", "3/4", "3/4/5", "-0/1", "+1/2", "1_0/2",
    "\\text{ a}\\text{ b}", "a\\text{ b}", "\\left[1\\right)", "50\\%", "\\$\\$3", "\n1\n2\n", "1\\\\2",
    "^{\\circ}^\\circ", "\\boxed{1}", "\\boxed{\\frac{1}{2}}", "\\boxed 5", "\\fbox{5}", "\\boxed{a}\\fbox{b}",
    "\\fbox{a}", "\\boxed}{x}", "\\boxed{{}", "x\\boxedy{z}", "\\boxed{}", "\xe4\xb8\x80=\xe4\xba\x8c",
    "\\dfrac\xce\xb1\xce\xb2", "1 2 3", "0.50", "\\\\\\%%", "5\\%%",
};

/* The reference's answers to the lines of cases.jsonl, one object each */
static cJSON **run_reference(const char *jsonl, size_t n) {
    test_require_refs();
    const char *in = test_join(g_dir, "cases.jsonl"), *out = test_join(g_dir, "ref.jsonl");
    test_write_file(in, jsonl, strlen(jsonl));
    free(test_sh_output(true, PY " '%s/tests/tools/metamath_score.py' < '%s' > '%s'", getenv("GTRAIN_ROOT"), in, out));
    char *text = NULL;
    size_t len = 0;
    GtError err = {0};
    cr_assert(gt_read_small_file(out, "reference output", 1u << 26, &text, &len, &err) == 0, "%s", err.msg);
    cJSON **r = calloc(n, sizeof *r);
    cr_assert(r);
    size_t k = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cr_assert(k < n, "the reference answered more lines than the %zu asked", n);
        r[k] = cJSON_Parse(line);
        cr_assert(r[k], "reference line %zu is not JSON: %s", k + 1, line);
        k++;
    }
    cr_assert_eq(k, n, "the reference answered %zu of %zu lines", k, n);
    free(text);
    return r;
}

static void put_line(GtBytes *b, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cr_assert(s);
    gt_bytes_put(b, s, strlen(s));
    gt_bytes_put(b, "\n", 1);
    free(s);
    cJSON_Delete(o);
}

/* the reference's string member (NULL for null), asserting it is one or the other */
static const char *ref_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsString(v) || cJSON_IsNull(v), "reference output lacks %s", key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool same(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

/* Each case through the reference and score_answer; the first disagreement of each case is logged,
 * all cases run, then the test fails if any disagreed. */
static void check_table(GenTask task, const Case *cases, size_t n, const char *long_text) {
    size_t total = n + (long_text ? 1 : 0);
    GtBytes b = {0};
    for (size_t i = 0; i < total; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "task", gen_task_name(task));
        const char *g = i < n ? (cases[i].py_generated ? cases[i].py_generated : cases[i].generated) : long_text;
        cJSON_AddStringToObject(o, "generated", g);
        cJSON_AddStringToObject(o, "gold_field", i < n ? cases[i].gold_field : "#### 42");
        put_line(&b, o);
    }
    gt_bytes_put(&b, "", 1);
    cJSON **ref = run_reference(b.p, total);
    gt_bytes_free(&b);
    int bad = 0, n_correct = 0, n_none = 0;
    for (size_t i = 0; i < total; i++) {
        ScoreResult r;
        const char *gen = i < n ? cases[i].generated : long_text;
        score_answer(task, gen, i < n ? cases[i].gold_field : "#### 42", &r);
        const char *want_x = ref_str(ref[i], "extracted"), *want_g = ref_str(ref[i], "gold");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(ref[i], "correct");
        cr_assert(cJSON_IsBool(c), "reference output lacks correct");
        bool want_c = cJSON_IsTrue(c);
        if (!same(r.extracted, want_x) || !same(r.gold, want_g) || r.correct != want_c) {
            bad++;
            cr_log_error("%s case %zu (%.60s | %.40s):\n  scripts: extracted %s, gold %s, correct %d\n  gtrain:  "
                         "extracted %s, gold %s, correct %d",
                         gen_task_name(task), i, gen, i < n ? cases[i].gold_field : "", want_x ? want_x : "None",
                         want_g ? want_g : "None", want_c, r.extracted ? r.extracted : "None", r.gold ? r.gold : "None",
                         r.correct);
        }
        n_correct += want_c;
        n_none += !want_x;
        score_result_free(&r);
        cJSON_Delete(ref[i]);
    }
    free(ref);
    cr_log_info("%s: %zu cases, %d correct and %d without an answer by the scripts", gen_task_name(task), total,
                n_correct, n_none);
    /* the table is tricky, not degenerate: both verdicts and missing answers occur */
    cr_assert(n_correct > 3 && (size_t)n_correct + 3 < total && n_none > 2, "the table lost its mix");
    cr_assert_eq(bad, 0, "%d of %zu %s cases differ from the scripts", bad, total, gen_task_name(task));
}

/* a long generation: 100 kB of working with numbers, then the answer */
static char *long_generation(void) {
    GtBytes b = {0};
    for (int i = 0; i < 4000; i++) {
        char line[64];
        snprintf(line, sizeof line, "Step %d: 1,2%d/3 = x. ", i, i % 10);
        gt_bytes_put(&b, line, strlen(line));
    }
    const char *tail = "The answer is: 42.\n";
    gt_bytes_put(&b, tail, strlen(tail) + 1);
    return b.p;
}

Test(scorers, gsm8k_table_matches_metamath) {
    cr_assert_geq(sizeof GSM8K / sizeof GSM8K[0], 40);
    char *lt = long_generation();
    check_table(TASK_GSM8K, GSM8K, sizeof GSM8K / sizeof GSM8K[0], lt);
    free(lt);
}

Test(scorers, math_table_matches_metamath) {
    cr_assert_geq(sizeof MATH / sizeof MATH[0], 40);
    char *lt = long_generation();
    check_table(TASK_MATH, MATH, sizeof MATH / sizeof MATH[0], lt);
    free(lt);
}

/* strip_string and remove_boxed(last_boxed_only_string(.)) on the pieces, on every MATH
 * generation and gold, as the reference computes them */
Test(scorers, pieces_match_util_py) {
    size_t np = sizeof PIECES / sizeof PIECES[0], nm = sizeof MATH / sizeof MATH[0];
    size_t n = np + 2 * nm;
    const char **texts = calloc(n, sizeof *texts);
    cr_assert(texts);
    for (size_t i = 0; i < np; i++) texts[i] = PIECES[i];
    for (size_t i = 0; i < nm; i++) {
        texts[np + 2 * i] = MATH[i].py_generated ? MATH[i].py_generated : MATH[i].generated;
        texts[np + 2 * i + 1] = MATH[i].gold_field;
    }
    GtBytes b = {0};
    for (size_t i = 0; i < 2 * n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "task", i < n ? "strip" : "boxed");
        cJSON_AddStringToObject(o, "text", texts[i % n]);
        put_line(&b, o);
    }
    gt_bytes_put(&b, "", 1);
    cJSON **ref = run_reference(b.p, 2 * n);
    gt_bytes_free(&b);
    int bad = 0, raised = 0, boxed = 0;
    for (size_t i = 0; i < 2 * n; i++) {
        const char *t = texts[i % n];
        char *got = i < n ? score_math_strip(t) : score_math_last_boxed(t);
        const char *want = ref_str(ref[i], "out");
        if (!same(got, want)) {
            bad++;
            cr_log_error("%s(\"%s\"): scripts %s%s%s, gtrain %s%s%s", i < n ? "strip_string" : "last boxed", t,
                         want ? "\"" : "", want ? want : "None (raised)", want ? "\"" : "", got ? "\"" : "",
                         got ? got : "NULL", got ? "\"" : "");
        }
        raised += i < n && !want;
        boxed += i >= n && want;
        free(got);
        cJSON_Delete(ref[i]);
    }
    free(ref);
    free(texts);
    cr_assert(raised >= 3 && boxed >= 10, "the pieces lost their mix (%d raising, %d boxed)", raised, boxed);
    cr_assert_eq(bad, 0, "%d of %zu pieces differ from util.py", bad, 2 * n);
}

/* Token soup: random strings over the pieces the rules look at (digits in three scripts, signs,
 * separators, the answer mark, \frac, \sqrt, \boxed, braces, units, spaces), a fixed seed; every
 * string scored as gsm8k and math (generation and gold) and run through the pieces, all against
 * the scripts. */
static const char *SOUP[] = {
    "0", "1", "2", "5", "7", "9", "12", "\xd9\xa3", "\xef\xbc\x95", "-", "+", ".", ",", "/", "=", " ", "\n", ".\n",
    "The answer is: ", "The answer is: ", "#### ", "\\frac", "\\dfrac", "\\tfrac", "\\sqrt", "\\boxed{", "\\boxed",
    "\\fbox{", "{", "}", "{", "}", "\\text{ ", "\\%", "%", "^\\circ", "^{\\circ}", "\\left(", "\\right)", "\\$", "$",
    "\\!", "\\\\", "x", "k", "_", "e", "\xcf\x80", "\xc2\xa0", "0.5", ".5", "00", "inf",
    "1,234", "3.50", "/0", "\xe2\x80\x83", "\\sqrt{", "\\frac{", "ab=", "01", "-0", "1_0", "\xc2\x85", "\\\\%%", "E", "\t", "nan",
};

static uint64_t lcg(uint64_t *st) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return *st >> 33;
}

Test(scorers, token_soup_matches_metamath) {
    enum { N = 1500 };
    const size_t ns = sizeof SOUP / sizeof SOUP[0];
    char **gen = calloc(N, sizeof *gen), **gold = calloc(N, sizeof *gold);
    cr_assert(gen && gold);
    uint64_t st = 20260428;
    for (int i = 0; i < N; i++) {
        char *part[4]; /* soup pieces; every third case is soup "The answer is: " X soup against X */
        for (int h = 0; h < 4; h++) {
            GtBytes b = {0};
            int len = (int)(lcg(&st) % (h == 2 ? 4 : 12)) + (h == 2);
            for (int k = 0; k < len; k++) {
                const char *t = SOUP[lcg(&st) % ns];
                gt_bytes_put(&b, t, strlen(t));
            }
            gt_bytes_put(&b, "", 1);
            part[h] = b.p;
        }
        if (i % 3 == 0) {
            GtBytes g = {0}, d = {0};
            gt_bytes_put(&g, part[0], strlen(part[0]));
            gt_bytes_put(&g, "The answer is: ", 15);
            gt_bytes_put(&g, part[2], strlen(part[2]));
            if (i % 2) gt_bytes_put(&g, part[3], strlen(part[3]));
            gt_bytes_put(&g, "", 1);
            gt_bytes_put(&d, i % 2 ? "#### " : "\\boxed{", i % 2 ? 5 : 7);
            gt_bytes_put(&d, part[2], strlen(part[2]));
            gt_bytes_put(&d, i % 2 ? "" : "}", i % 2 ? 1 : 2);
            gen[i] = g.p;
            gold[i] = d.p;
        } else {
            gen[i] = gt_xstrdup(part[0]);
            gold[i] = gt_xstrdup(part[1]);
        }
        for (int h = 0; h < 4; h++) free(part[h]);
    }
    /* per string: gsm8k, math, strip(gen), boxed(gold) */
    GtBytes b = {0};
    for (int i = 0; i < N; i++) {
        for (int t = 0; t < 4; t++) {
            cJSON *o = cJSON_CreateObject();
            static const char *const tasks[] = {"gsm8k", "math", "strip", "boxed"};
            cJSON_AddStringToObject(o, "task", tasks[t]);
            if (t < 2) {
                cJSON_AddStringToObject(o, "generated", gen[i]);
                cJSON_AddStringToObject(o, "gold_field", gold[i]);
            } else {
                cJSON_AddStringToObject(o, "text", t == 2 ? gen[i] : gold[i]);
            }
            put_line(&b, o);
        }
    }
    gt_bytes_put(&b, "", 1);
    cJSON **ref = run_reference(b.p, 4 * (size_t)N);
    gt_bytes_free(&b);
    int bad = 0, n_correct[2] = {0, 0}, n_extracted[2] = {0, 0};
    for (int i = 0; i < N; i++) {
        for (int t = 0; t < 2; t++) {
            ScoreResult r;
            score_answer(t ? TASK_MATH : TASK_GSM8K, gen[i], gold[i], &r);
            const cJSON *o = ref[4 * i + t];
            const char *wx = ref_str(o, "extracted"), *wg = ref_str(o, "gold");
            bool wc = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "correct"));
            if (!same(r.extracted, wx) || !same(r.gold, wg) || r.correct != wc) {
                if (bad++ < 10)
                    cr_log_error("%s on \"%s\" | \"%s\": scripts %s / %s / %d, gtrain %s / %s / %d", t ? "math" : "gsm8k",
                                 gen[i], gold[i], wx ? wx : "None", wg ? wg : "None", wc,
                                 r.extracted ? r.extracted : "None", r.gold ? r.gold : "None", r.correct);
            }
            n_correct[t] += wc;
            n_extracted[t] += wx != NULL;
            score_result_free(&r);
        }
        for (int t = 2; t < 4; t++) {
            char *got = t == 2 ? score_math_strip(gen[i]) : score_math_last_boxed(gold[i]);
            const char *want = ref_str(ref[4 * i + t], "out");
            if (!same(got, want) && bad++ < 10)
                cr_log_error("%s(\"%s\"): scripts %s, gtrain %s", t == 2 ? "strip_string" : "last boxed",
                             t == 2 ? gen[i] : gold[i], want ? want : "None", got ? got : "NULL");
            free(got);
        }
        for (int t = 0; t < 4; t++) cJSON_Delete(ref[4 * i + t]);
        free(gen[i]);
        free(gold[i]);
    }
    free(ref);
    free(gen);
    free(gold);
    cr_assert(n_extracted[0] > N / 5 && n_extracted[1] > N / 5 && n_correct[0] > 10 && n_correct[1] > 50,
              "the soup lost its mix: gsm8k %d extracted %d correct, math %d extracted %d correct", n_extracted[0],
              n_correct[0], n_extracted[1], n_correct[1]);
    cr_assert_eq(bad, 0, "%d of %d soup results differ from the scripts", bad, 4 * N);
}

Test(scorers, task_names_and_no_task) {
    cr_assert_str_eq(gen_task_name(TASK_NONE), "none");
    cr_assert_str_eq(gen_task_name(TASK_GSM8K), "gsm8k");
    cr_assert_str_eq(gen_task_name(TASK_MATH), "math");
    ScoreResult r;
    score_answer(TASK_NONE, "The answer is: 5", "#### 5", &r);
    cr_assert(!r.extracted && !r.gold && !r.correct);
    score_result_free(&r);
    score_answer(TASK_GSM8K, NULL, NULL, &r); /* nothing at all: nothing extracted, never a crash */
    cr_assert(!r.extracted && !r.gold && !r.correct);
    score_result_free(&r);
}
