/* json_string.c - see json_string.h. */
#include "json_string.h"

#include <stdlib.h>
#include <string.h>

static long hex4(const char *p, const char *end) {
    if (end - p < 4) return -1;
    long v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* code point cp (< 0x110000) as UTF-8 into u; returns its length */
static size_t utf8_put(char *u, long cp) {
    if (cp < 0x80) {
        u[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 0x3F)), u[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 0x3F)), u[2] = (char)(0x80 | (cp >> 6 & 0x3F)),
    u[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int json_string_decode(const char **pp, const char *end, GtBytes *out) {
    const char *p = *pp + 1;
    while (p < end && *p != '"') {
        if (*p != '\\') {
            const char *q = p;
            while (q < end && *q != '"' && *q != '\\') q++;
            if (out) gt_bytes_put(out, p, (size_t)(q - p));
            p = q;
            continue;
        }
        if (++p >= end) return -1;
        char e = *p++, c;
        switch (e) {
        case '"': case '\\': case '/': c = e; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u': {
            long cp = hex4(p, end);
            if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return -1;
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate: its low half must follow */
                long lo = end - p >= 6 && p[0] == '\\' && p[1] == 'u' ? hex4(p + 2, end) : -1;
                if (lo < 0xDC00 || lo > 0xDFFF) return -1;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            char u[4];
            size_t n = utf8_put(u, cp);
            if (out) gt_bytes_put(out, u, n);
            continue;
        }
        default: return -1;
        }
        if (out) gt_bytes_put(out, &c, 1);
    }
    if (p >= end) return -1;
    *pp = p + 1;
    return 0;
}

void json_string_encode(GtBytes *out, const char *text, size_t len) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)text;
    gt_bytes_put(out, "\"", 1);
    size_t i = 0;
    while (i < len) {
        size_t run = i; /* plain bytes: printable ASCII but the two to escape */
        while (run < len && s[run] >= 0x20 && s[run] < 0x80 && s[run] != '"' && s[run] != '\\') run++;
        if (run > i) {
            gt_bytes_put(out, text + i, run - i);
            i = run;
            continue;
        }
        unsigned char c = s[i];
        if (c >= 0x80) {
            long k = gt_utf8_sequence(s + i, len - i);
            if (k > 0) gt_bytes_put(out, text + i, (size_t)k);
            else gt_bytes_put(out, "\xEF\xBF\xBD", 3); /* U+FFFD */
            i += (size_t)(k > 0 ? k : -k);
            continue;
        }
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        size_t n = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            esc[1] = 'u', esc[2] = '0', esc[3] = '0', esc[4] = hex[c >> 4], esc[5] = hex[c & 15];
            n = 6;
        }
        gt_bytes_put(out, esc, n);
        i++;
    }
    gt_bytes_put(out, "\"", 1);
}
