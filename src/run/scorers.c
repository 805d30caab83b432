/* scorers.c - GSM8K and MATH answer extraction and scoring as the PiSSA / MetaMath evaluation
 * scripts do it (scorers.h). The scripts (MetaMath fe667b1: eval_gsm8k.py, eval_math.py, util.py;
 * PiSSA 87f4db6 utils/test_acc.py holds the same functions) are Python on str: every step here is
 * the Python step on UTF-8 (input that is not UTF-8 is first made so, each invalid piece one
 * U+FFFD, as a Python reader decoding with errors="replace" would see it). Each rule names the
 * function it follows; where the Python would raise, the C says what the script's caller then
 * does. tests/test_scorers.c checks all of it against the scripts' own functions
 * (tests/tools/metamath_score.py). */
#include "scorers.h"

#include <math.h>
#define ONIG_ESCAPE_UCHAR_COLLISION /* ICU's UChar is another type */
#include <oniguruma.h>
#include <stdlib.h>
#include <unicode/uchar.h>

#include "common.h"

#define ANSWER_MARK "The answer is: "
#define PY_INT_MAX_STR_DIGITS 4300 /* Python's int(str) limit (sys.get_int_max_str_digits) */

const char *gen_task_name(GenTask t) {
    switch (t) {
    case TASK_GSM8K: return "gsm8k";
    case TASK_MATH: return "math";
    default: return "none";
    }
}

/* ---- strings ---- */

static char *dup_n(const char *s, size_t n) {
    char *d = gt_xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static char *bytes_take(GtBytes *b) { /* the buffer as a NUL-terminated string (b emptied) */
    gt_bytes_put(b, "", 1);
    char *s = b->p;
    b->p = NULL;
    b->n = b->cap = 0;
    return s;
}

/* The text as Python holds it: invalid UTF-8 pieces become U+FFFD (from_utf8_lossy's units). */
static char *utf8_lossy(const char *s) {
    size_t n = strlen(s);
    GtBytes b = {0};
    for (size_t i = 0; i < n;) {
        long k = gt_utf8_sequence((const unsigned char *)s + i, n - i);
        if (k > 0) gt_bytes_put(&b, s + i, (size_t)k);
        else gt_bytes_put(&b, "\xEF\xBF\xBD", 3);
        i += (size_t)(k > 0 ? k : -k);
    }
    return bytes_take(&b);
}

/* The code point at s[i] of valid UTF-8 into *cp; returns its length. */
static size_t utf8_at(const char *s, size_t i, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s + i;
    if (u[0] < 0x80) return *cp = u[0], 1;
    if (u[0] < 0xE0) return *cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F), 2;
    if (u[0] < 0xF0) return *cp = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F), 3;
    *cp = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) | ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
    return 4;
}

static size_t utf8_chars(const char *s, size_t n) { /* Python's len() */
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* str.isspace (Py_UNICODE_ISSPACE): what str.strip(), int() and float() strip */
static bool py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* str.strip() of s[0..n): the stripped piece's start and length */
static const char *py_strip(const char *s, size_t n, size_t *len) {
    size_t a = 0, e = n;
    uint32_t cp;
    while (a < e) {
        size_t k = utf8_at(s, a, &cp);
        if (!py_isspace(cp)) break;
        a += k;
    }
    while (e > a) {
        size_t b = e - 1;
        while (b > a && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
        utf8_at(s, b, &cp);
        if (!py_isspace(cp)) break;
        e = b;
    }
    *len = e - a;
    return s + a;
}

/* The decimal value of a Unicode decimal digit (category Nd, what Python's \d, int() and float()
 * take), or -1 */
static int nd_value(uint32_t cp) {
    if (cp >= '0' && cp <= '9') return (int)(cp - '0');
    if (cp < 0x80 || u_charType((UChar32)cp) != U_DECIMAL_DIGIT_NUMBER) return -1;
    return u_charDigitValue((UChar32)cp);
}

static size_t count(const char *s, const char *pat) { /* str.count, = len(str.split(pat)) - 1 */
    size_t c = 0, m = strlen(pat);
    for (const char *p = strstr(s, pat); p; p = strstr(p + m, pat)) c++;
    return c;
}

static char *replace(char *s, const char *from, const char *to) { /* str.replace; frees s */
    if (!strstr(s, from)) return s;
    size_t fm = strlen(from), tm = strlen(to);
    GtBytes b = {0};
    const char *p = s;
    for (const char *q = strstr(p, from); q; q = strstr(p, from)) {
        gt_bytes_put(&b, p, (size_t)(q - p));
        gt_bytes_put(&b, to, tm);
        p = q + fm;
    }
    gt_bytes_put(&b, p, strlen(p));
    free(s);
    return bytes_take(&b);
}

/* The piece after the last `pat` (str.split(pat)[-1] when pat occurs: pat has no border), or NULL */
static const char *after_last(const char *s, const char *pat) {
    const char *last = NULL;
    for (const char *p = strstr(s, pat); p; p = strstr(p + strlen(pat), pat)) last = p;
    return last ? last + strlen(pat) : NULL;
}

/* ---- Python's int() and float() on a str ---- */

/* int(s) in base 10 (the digits of s into ascii, without sign or underscores): whitespace around,
 * a sign, Nd digits with single underscores between them, at most 4300 digits. False where int()
 * raises ValueError. */
static bool py_int_parse(const char *s, GtBytes *ascii) {
    size_t n;
    const char *p = py_strip(s, strlen(s), &n);
    size_t i = 0, digits = 0;
    if (i < n && (p[i] == '+' || p[i] == '-')) i++;
    bool need_digit = true;
    while (i < n) {
        uint32_t cp;
        size_t k = utf8_at(p, i, &cp);
        int v = nd_value(cp);
        if (v >= 0) {
            char c = (char)('0' + v);
            if (ascii) gt_bytes_put(ascii, &c, 1);
            digits++;
            need_digit = false;
        } else if (cp == '_' && !need_digit) {
            need_digit = true;
        } else {
            return false;
        }
        i += k;
    }
    return !need_digit && digits <= PY_INT_MAX_STR_DIGITS;
}

/* float(s): whitespace around, [sign] (inf | infinity | nan) in any case, or [sign] digits with an
 * optional point and exponent (Nd digits, single underscores between digits). False where float()
 * raises ValueError; else *v is the correctly rounded value (strtod, as CPython's). */
static bool py_float_parse(const char *s, double *v) {
    size_t n;
    const char *p = py_strip(s, strlen(s), &n);
    GtBytes a = {0};
    for (size_t i = 0; i < n;) { /* to ascii: Nd digits to 0-9; anything else non-ASCII fails */
        uint32_t cp;
        size_t k = utf8_at(p, i, &cp);
        int d = nd_value(cp);
        if (d < 0 && (cp >= 0x80 || cp == 0)) {
            gt_bytes_free(&a);
            return false;
        }
        char c = d >= 0 ? (char)('0' + d) : (char)cp;
        gt_bytes_put(&a, &c, 1);
        i += k;
    }
    char *t = bytes_take(&a);
    size_t i = 0, m = strlen(t);
    bool ok = false;
    GtBytes clean = {0}; /* t without its underscores, once they are known to sit between digits */
    if (i < m && (t[i] == '+' || t[i] == '-')) i++;
    const char *w = t + i;
    if (!strcasecmp(w, "inf") || !strcasecmp(w, "infinity") || !strcasecmp(w, "nan")) {
        ok = true;
    } else {
        size_t int_digits = 0, frac_digits = 0;
        bool bad = false;
#define DIGITPART(cnt)                                                                                              \
    while (i < m && ((t[i] >= '0' && t[i] <= '9') || (t[i] == '_' && cnt > 0 && i + 1 < m && t[i + 1] >= '0' &&    \
                                                      t[i + 1] <= '9'))) {                                          \
        if (t[i] != '_') cnt++;                                                                                     \
        i++;                                                                                                        \
    }
        DIGITPART(int_digits);
        if (i < m && t[i] == '.') {
            i++;
            DIGITPART(frac_digits);
        }
        if (int_digits + frac_digits == 0) bad = true;
        if (!bad && i < m && (t[i] == 'e' || t[i] == 'E')) {
            i++;
            if (i < m && (t[i] == '+' || t[i] == '-')) i++;
            size_t exp_digits = 0;
            DIGITPART(exp_digits);
            if (exp_digits == 0) bad = true;
        }
#undef DIGITPART
        ok = !bad && i == m;
    }
    if (ok) {
        for (size_t j = 0; j < m; j++)
            if (t[j] != '_') gt_bytes_put(&clean, t + j, 1);
        char *c = bytes_take(&clean);
        *v = strtod(c, NULL);
        free(c);
    }
    free(t);
    return ok;
}

/* ---- gsm8k: eval_gsm8k.py extract_answer_number ---- */

/* Python's round() of a float to an int, as str(); NULL where round() raises (inf). */
static char *py_round_str(double v) {
    if (!isfinite(v)) return NULL;
    double r = nearbyint(v); /* round half to even, as float.__round__ */
    if (r == 0) r = 0; /* int has no -0 */
    char buf[400];
    snprintf(buf, sizeof buf, "%.0f", r);
    return gt_xstrdup(buf);
}

/* The ASCII form of a matched number (Nd digits to 0-9, commas dropped: .replace(',', '')) */
static char *number_ascii(const char *s, size_t n) {
    GtBytes b = {0};
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = utf8_at(s, i, &cp);
        int d = nd_value(cp);
        char c = d >= 0 ? (char)('0' + d) : (char)cp;
        if (c != ',') gt_bytes_put(&b, &c, 1);
        i += k;
    }
    return bytes_take(&b);
}

/* extract_answer_number's numeric part on the matched text m: the fraction branch (numerator and
 * denominator must be numbers: is_number; a denominator '0' takes the numerator; else
 * Fraction(m) of the `fraction` package, numerator / denominator) and the plain branch
 * (float(m.replace(',', '')), inf -> None), then round(). NULL: None, or a raise in the script. */
static char *gsm8k_number(const char *m, size_t n) {
    const char *slash = memchr(m, '/', n);
    if (!slash) {
        char *a = number_ascii(m, n);
        double v = strtod(a, NULL);
        free(a);
        return py_round_str(v);
    }
    char *num = number_ascii(m, (size_t)(slash - m));
    char *den = number_ascii(slash + 1, n - (size_t)(slash + 1 - m));
    char *out = NULL;
    bool num_has_digit = strpbrk(num, "0123456789") != NULL; /* is_number: "", "-", "+" are not */
    if (num_has_digit) {
        if (n - (size_t)(slash - m) == 2 && slash[1] == '0') { /* denominator == '0': that literal only */
            out = py_round_str(strtod(num, NULL));
        } else {
            /* Fraction(m): the package goes through float() of each term and reduces with int(x / g)
             * float divisions; below 2^53/10 every such step is exact, so the value is num/den
             * exactly and numerator / denominator its correctly rounded double. Beyond that the
             * package's float steps drift and are not reproduced (the quotient is taken as is). */
            double a = strtod(num, NULL), b = strtod(den, NULL);
            if (b != 0) out = py_round_str(a / b); /* a zero denominator ("00"): FractionException */
        }
    }
    free(num);
    free(den);
    return out;
}

/* extract_answer_number: the text after the last "The answer is: ", its first match of
 * [\-+]?\d*[\.,/]?\d+ (Python's \d: Unicode Nd, as Oniguruma's \d), as a rounded int; NULL: None. */
static char *gsm8k_extract(const char *text) {
    const char *ans = after_last(text, ANSWER_MARK); /* completion.split('The answer is: ')[-1] */
    if (!ans) return NULL;
    static const char pattern[] = "[\\-+]?\\d*[\\.,/]?\\d+";
    OnigEncoding encs[1] = {ONIG_ENCODING_UTF8};
    onig_initialize(encs, 1);
    regex_t *re = NULL;
    OnigErrorInfo einfo;
    if (onig_new(&re, (const OnigUChar *)pattern, (const OnigUChar *)pattern + sizeof pattern - 1, ONIG_OPTION_NONE,
                 ONIG_ENCODING_UTF8, ONIG_SYNTAX_PYTHON, &einfo) != ONIG_NORMAL) {
        fprintf(stderr, "gtrain: internal error: the gsm8k answer pattern does not compile\n");
        abort();
    }
    OnigRegion *region = onig_region_new();
    if (!region) {
        fprintf(stderr, "gtrain: out of memory (regex region)\n");
        exit(GT_EXIT_FAILURE);
    }
    const OnigUChar *s = (const OnigUChar *)ans, *end = s + strlen(ans);
    char *out = NULL;
    /* .strip() first changes nothing: the pattern matches no whitespace */
    if (onig_search(re, s, end, s, end, region, ONIG_OPTION_NONE) >= 0)
        out = gsm8k_number(ans + region->beg[0], (size_t)(region->end[0] - region->beg[0]));
    onig_region_free(region, 1);
    onig_free(re);
    return out;
}

/* The gold: eval_gsm8k.py's item['response'].split('#### ')[1].replace(',', '') (the whole field
 * when it has no "#### ", as test_acc.py's data["answer"]), stripped; NULL unless float() takes it. */
static char *gsm8k_gold(const char *field, double *v) {
    const char *g = strstr(field, "#### ");
    size_t n;
    if (g) {
        g += 5;
        const char *next = strstr(g, "#### ");
        n = next ? (size_t)(next - g) : strlen(g);
    } else {
        g = field;
        n = strlen(field);
    }
    char *t = replace(dup_n(g, n), ",", "");
    size_t sn;
    const char *s = py_strip(t, strlen(t), &sn);
    char *out = dup_n(s, sn);
    free(t);
    if (!py_float_parse(out, v)) {
        free(out);
        return NULL;
    }
    return out;
}

/* ---- math: util.py and eval_math.py ---- */

/* last_boxed_only_string then remove_boxed: the last "\boxed" (else the last "\fbox"), up to the
 * '}' that brings the brace count from there back to 0; then what is inside "\boxed{" ... "}"
 * (an \fbox or a "\boxed 5" is None: remove_boxed takes only "\boxed{"). */
char *score_math_last_boxed(const char *text) {
    char *s = utf8_lossy(text);
    char *out = NULL;
    const char *idx = NULL;
    for (const char *p = strstr(s, "\\boxed"); p; p = strstr(p + 1, "\\boxed")) idx = p;
    if (!idx)
        for (const char *p = strstr(s, "\\fbox"); p; p = strstr(p + 1, "\\fbox")) idx = p;
    if (idx) {
        long open = 0;
        const char *right = NULL;
        for (const char *p = idx; *p; p++) {
            if (*p == '{') open++;
            if (*p == '}' && --open == 0) {
                right = p;
                break;
            }
        }
        if (right && !strncmp(idx, "\\boxed{", 7) && right >= idx + 7) out = dup_n(idx + 7, (size_t)(right - idx - 7));
    }
    free(s);
    return out;
}

/* fix_fracs: "\frac12" -> "\frac{1}{2}", "\frac1{2}" -> "\frac{1}{2}" (one character each, a code
 * point); a \frac with fewer than two characters after it returns the input; a \frac at the very
 * end raises (substr[0] of ""): returns NULL then. */
static char *fix_fracs(char *s) {
    static const char mark[] = "\\frac";
    const char *p = strstr(s, mark);
    if (!p) return s;
    GtBytes b = {0};
    gt_bytes_put(&b, s, (size_t)(p - s));
    while (p) {
        const char *sub = p + 5;
        const char *next = strstr(sub, mark);
        size_t sn = next ? (size_t)(next - sub) : strlen(sub);
        gt_bytes_put(&b, mark, 5);
        if (sn == 0) {
            gt_bytes_free(&b);
            free(s);
            return NULL;
        }
        if (sub[0] == '{') {
            gt_bytes_put(&b, sub, sn);
        } else if (utf8_chars(sub, sn) < 2) {
            gt_bytes_free(&b);
            return s;
        } else {
            uint32_t cp;
            size_t ka = utf8_at(sub, 0, &cp);
            size_t kb = utf8_at(sub, ka, &cp);
            gt_bytes_put(&b, "{", 1);
            gt_bytes_put(&b, sub, ka);
            gt_bytes_put(&b, "}", 1);
            if (cp != '{') gt_bytes_put(&b, "{", 1);
            gt_bytes_put(&b, sub + ka, kb);
            if (cp != '{') gt_bytes_put(&b, "}", 1);
            gt_bytes_put(&b, sub + ka + kb, sn - ka - kb);
        }
        p = next;
    }
    free(s);
    return bytes_take(&b);
}

/* fix_sqrt: "\sqrt3" -> "\sqrt{3}" (one code point); a \sqrt at the very end raises (split[0] of
 * ""): NULL. */
static char *fix_sqrt(char *s) {
    static const char mark[] = "\\sqrt";
    const char *p = strstr(s, mark);
    if (!p) return s;
    GtBytes b = {0};
    gt_bytes_put(&b, s, (size_t)(p - s));
    while (p) {
        const char *sp = p + 5;
        const char *next = strstr(sp, mark);
        size_t sn = next ? (size_t)(next - sp) : strlen(sp);
        if (sn == 0) {
            gt_bytes_free(&b);
            free(s);
            return NULL;
        }
        if (sp[0] != '{') {
            uint32_t cp;
            size_t k = utf8_at(sp, 0, &cp);
            gt_bytes_put(&b, "\\sqrt{", 6);
            gt_bytes_put(&b, sp, k);
            gt_bytes_put(&b, "}", 1);
            gt_bytes_put(&b, sp + k, sn - k);
        } else {
            gt_bytes_put(&b, mark, 5);
            gt_bytes_put(&b, sp, sn);
        }
        p = next;
    }
    free(s);
    return bytes_take(&b);
}

/* str(int(x)) == x: int() takes x and gives it back unchanged (ASCII, no '+', no leading zero,
 * no "-0", no underscores or spaces) */
static bool int_canonical(const char *x) {
    const char *d = x + (*x == '-');
    if (!*d || (*d == '0' && (d[1] || *x == '-'))) return false;
    for (; *d; d++)
        if (*d < '0' || *d > '9') return false;
    return true;
}

/* fix_a_slash_b: exactly one '/' between two ints written as str(int) writes them ->
 * "\frac{a}{b}"; a side int() refuses raises ValueError (the assert catches only the rewrite):
 * NULL. */
static char *fix_a_slash_b(char *s) {
    char *slash = strchr(s, '/');
    if (!slash || strchr(slash + 1, '/')) return s;
    char *a = dup_n(s, (size_t)(slash - s));
    const char *b = slash + 1;
    char *out = s;
    if (!py_int_parse(a, NULL) || !py_int_parse(b, NULL)) {
        free(s);
        out = NULL;
    } else if (int_canonical(a) && int_canonical(b)) {
        GtBytes r = {0};
        gt_bytes_put(&r, "\\frac{", 6);
        gt_bytes_put(&r, a, strlen(a));
        gt_bytes_put(&r, "}{", 2);
        gt_bytes_put(&r, b, strlen(b));
        gt_bytes_put(&r, "}", 1);
        free(s);
        out = bytes_take(&r);
    }
    free(a);
    return out;
}

/* util.py strip_string, step by step; NULL where it raises (is_equiv then compares the raw
 * strings). Takes s. */
static char *strip_string(char *s) {
    s = replace(s, "\n", "");          /* linebreaks */
    s = replace(s, "\\!", "");         /* inverse spaces */
    s = replace(s, "\\\\", "\\");      /* \\ -> \ */
    s = replace(s, "tfrac", "frac");   /* tfrac, dfrac -> frac */
    s = replace(s, "dfrac", "frac");
    s = replace(s, "\\left", "");      /* \left, \right */
    s = replace(s, "\\right", "");
    s = replace(s, "^{\\circ}", "");   /* degrees */
    s = replace(s, "^\\circ", "");
    s = replace(s, "\\$", "");         /* dollar signs */
    size_t units = count(s, "\\text{ "); /* remove_right_units: one "\text{ " cuts there; two raise */
    if (units > 1) {
        free(s);
        return NULL;
    }
    if (units == 1) *strstr(s, "\\text{ ") = 0;
    s = replace(s, "\\%", "");         /* percentage: twice, as the script ("\\%" then "\%", the same */
    s = replace(s, "\\%", "");         /* string: the first pass can make a new one, "\\%%" -> "\%") */
    s = replace(s, " .", " 0.");       /* " ." -> " 0.", "{." -> "{0." */
    s = replace(s, "{.", "{0.");
    if (!*s) return s;
    if (s[0] == '.') {                 /* a leading "." gets a 0 */
        char *t = gt_xmalloc(strlen(s) + 2);
        t[0] = '0';
        strcpy(t + 1, s);
        free(s);
        s = t;
    }
    char *eq = strchr(s, '=');         /* "k = 3" -> " 3": one '=', at most 2 characters before it */
    if (eq && !strchr(eq + 1, '=') && utf8_chars(s, (size_t)(eq - s)) <= 2) {
        char *t = gt_xstrdup(eq + 1);
        free(s);
        s = t;
    }
    if (!(s = fix_sqrt(s))) return NULL;
    s = replace(s, " ", "");           /* spaces */
    if (!(s = fix_fracs(s))) return NULL;
    if (!strcmp(s, "0.5")) {           /* 0.5 -> \frac{1}{2} */
        free(s);
        s = gt_xstrdup("\\frac{1}{2}");
    }
    return fix_a_slash_b(s);
}

char *score_math_strip(const char *s) { return strip_string(utf8_lossy(s)); }

/* util.py is_equiv on two strings: strip_string equal, or, when either raises, the raw strings */
static bool is_equiv(const char *a, const char *b) {
    char *sa = strip_string(gt_xstrdup(a)), *sb = strip_string(gt_xstrdup(b));
    bool eq = (sa && sb) ? !strcmp(sa, sb) : !strcmp(a, b);
    free(sa);
    free(sb);
    return eq;
}

/* eval_math.py process_results' extraction: after the last "The answer is: ", up to the first
 * ".\n", stripped, one trailing '.' dropped, stripped again; NULL without the mark (invalid). */
static char *math_extract(const char *text) {
    const char *ans = after_last(text, ANSWER_MARK);
    if (!ans) return NULL;
    const char *cut = strstr(ans, ".\n");
    size_t n = cut ? (size_t)(cut - ans) : strlen(ans);
    const char *p = py_strip(ans, n, &n);
    if (n > 0 && p[n - 1] == '.') n--;
    p = py_strip(p, n, &n);
    return dup_n(p, n);
}

/* ---- the scorer ---- */

void score_answer(GenTask task, const char *generated, const char *gold_field, ScoreResult *out) {
    memset(out, 0, sizeof *out);
    if (task != TASK_GSM8K && task != TASK_MATH) return;
    char *gen = utf8_lossy(generated ? generated : "");
    char *gold = utf8_lossy(gold_field ? gold_field : "");
    if (task == TASK_GSM8K) {
        double g = 0;
        out->extracted = gsm8k_extract(gen);
        out->gold = gsm8k_gold(gold, &g);
        /* float(y_pred) == float(answer) */
        out->correct = out->extracted && out->gold && strtod(out->extracted, NULL) == g;
    } else {
        out->extracted = math_extract(gen);
        /* remove_boxed(last_boxed_only_string(solution)); a field with no \boxed or \fbox at all is
         * the answer itself (test_acc.py's data['answer']) */
        if (strstr(gold, "\\boxed") || strstr(gold, "\\fbox")) out->gold = score_math_last_boxed(gold);
        else out->gold = gt_xstrdup(gold);
        out->correct = out->extracted && out->gold && is_equiv(out->extracted, out->gold);
    }
    free(gen);
    free(gold);
}

void score_result_free(ScoreResult *r) {
    if (!r) return;
    free(r->extracted);
    free(r->gold);
    memset(r, 0, sizeof *r);
}
