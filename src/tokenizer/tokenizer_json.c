/* tokenizer_json.c - reading a Hugging Face tokenizer.json into a Tokenizer, as HF's serde
 * readers do (tokenizer/serialization.rs, models/bpe/serialization.rs, and each component's):
 * unknown keys are ignored as HF ignores them; a component type or value this code does not
 * implement is refused with one line naming the JSON path. Added tokens get their ids the way
 * HF's AddedVocabulary::add_tokens gives them (the vocabulary's id, else the next free one). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "tokenizer_internal.h"

#define TOK_JSON_MAX_DEPTH 64

typedef struct {
    const char *file;
    GtError *err;
} Ctx;

static int bad(Ctx *c, const char *path, const char *expected, const cJSON *found) {
    char shown[96] = "nothing";
    if (found) {
        if (cJSON_IsString(found)) snprintf(shown, sizeof shown, "\"%.80s\"", found->valuestring);
        else if (cJSON_IsNumber(found)) snprintf(shown, sizeof shown, "%.17g", found->valuedouble);
        else if (cJSON_IsBool(found)) snprintf(shown, sizeof shown, "%s", cJSON_IsTrue(found) ? "true" : "false");
        else if (cJSON_IsNull(found)) snprintf(shown, sizeof shown, "null");
        else snprintf(shown, sizeof shown, "%s", cJSON_IsArray(found) ? "an array" : "an object");
    }
    return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s: %s: expected %s, found %s", c->file, path, expected, shown);
}

static const cJSON *field(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static bool absent_or_null(const cJSON *v) { return !v || cJSON_IsNull(v); }

/* A boolean field: absent/null gives def. */
static int get_bool(Ctx *c, const cJSON *o, const char *path, const char *key, bool def, bool *out) {
    const cJSON *v = field(o, key);
    char p[512];
    snprintf(p, sizeof p, "%s.%s", path, key);
    if (absent_or_null(v)) *out = def;
    else if (cJSON_IsBool(v)) *out = cJSON_IsTrue(v);
    else return bad(c, p, "true or false", v);
    return 0;
}

static int get_string(Ctx *c, const cJSON *o, const char *path, const char *key, bool required, const char **out) {
    const cJSON *v = field(o, key);
    char p[512];
    snprintf(p, sizeof p, "%s.%s", path, key);
    if (absent_or_null(v) && !required) {
        *out = NULL;
        return 0;
    }
    if (!cJSON_IsString(v)) return bad(c, p, "a string", v);
    *out = v->valuestring;
    return 0;
}

static int get_int(Ctx *c, const cJSON *o, const char *path, const char *key, long lo, long hi, long def, long *out) {
    const cJSON *v = field(o, key);
    char p[512], range[96];
    snprintf(p, sizeof p, "%s.%s", path, key);
    snprintf(range, sizeof range, "an integer in [%ld, %ld]", lo, hi);
    if (absent_or_null(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < (double)lo || v->valuedouble > (double)hi ||
        v->valuedouble != (double)(long)v->valuedouble) /* the range first: the cast needs it */
        return bad(c, p, range, v);
    *out = (long)v->valuedouble;
    return 0;
}

/* One character (serde's char): its UTF-8 into out[5]. */
static int get_char(Ctx *c, const cJSON *o, const char *path, const char *key, char out[5], size_t *len) {
    const char *s = NULL;
    if (get_string(c, o, path, key, true, &s) != 0) return -1;
    size_t n = strlen(s);
    char p[512];
    snprintf(p, sizeof p, "%s.%s", path, key);
    if (n == 0 || n > 4 || tok_utf8_len((unsigned char)s[0]) != n) return bad(c, p, "exactly one character", field(o, key));
    memcpy(out, s, n);
    out[n] = 0;
    *len = n;
    return 0;
}

static const char *type_of(Ctx *c, const cJSON *o, const char *path, const char *expected) {
    char p[512];
    snprintf(p, sizeof p, "%s.type", path);
    const cJSON *t = field(o, "type");
    if (!cJSON_IsObject(o)) {
        bad(c, path, "an object", o);
        return NULL;
    }
    if (!cJSON_IsString(t)) {
        bad(c, p, expected, t);
        return NULL;
    }
    return t->valuestring;
}

/* A String or Regex pattern ({"String": s} or {"Regex": r}), compiled as HF compiles it. */
static int get_pattern(Ctx *c, const cJSON *o, const char *path, TokRegex *re) {
    const cJSON *p = field(o, "pattern");
    char pp[256];
    snprintf(pp, sizeof pp, "%s.pattern", path);
    const cJSON *s = cJSON_IsObject(p) ? field(p, "String") : NULL, *r = cJSON_IsObject(p) ? field(p, "Regex") : NULL;
    if (cJSON_IsString(s)) {
        strncat(pp, ".String", sizeof pp - strlen(pp) - 1);
        return tok_regex_compile(re, s->valuestring, strlen(s->valuestring), true, c->file, pp, c->err);
    }
    if (cJSON_IsString(r)) {
        strncat(pp, ".Regex", sizeof pp - strlen(pp) - 1);
        return tok_regex_compile(re, r->valuestring, strlen(r->valuestring), false, c->file, pp, c->err);
    }
    return bad(c, pp, "{\"String\": ...} or {\"Regex\": ...}", p);
}

/* A Sequence's members, each added by add (the component reader that met the Sequence). */
typedef int (*AddFn)(Ctx *c, Tokenizer *t, const cJSON *o, const char *path);
static int add_each(Ctx *c, Tokenizer *t, const cJSON *o, const char *path, const char *key, AddFn add) {
    const cJSON *list = field(o, key);
    char p[512];
    snprintf(p, sizeof p, "%s.%s", path, key);
    if (!cJSON_IsArray(list)) return bad(c, p, "an array", list);
    int i = 0;
    for (const cJSON *x = list->child; x; x = x->next, i++) {
        char q[600];
        snprintf(q, sizeof q, "%s[%d]", p, i);
        if (add(c, t, x, q) != 0) return -1;
    }
    return 0;
}

/* ---- normalizers ---- */

static int add_normalizer(Ctx *c, Tokenizer *t, const cJSON *o, const char *path) {
    const char *type = type_of(c, o, path, "a normalizer type");
    if (!type) return -1;
    if (strcmp(type, "Sequence") == 0) return add_each(c, t, o, path, "normalizers", add_normalizer);
    TokNormalizer z = {0};
    if (strcmp(type, "NFC") == 0) z.kind = NORM_NFC;
    else if (strcmp(type, "NFD") == 0) z.kind = NORM_NFD;
    else if (strcmp(type, "NFKC") == 0) z.kind = NORM_NFKC;
    else if (strcmp(type, "NFKD") == 0) z.kind = NORM_NFKD;
    else if (strcmp(type, "Prepend") == 0) {
        const char *s = NULL;
        if (get_string(c, o, path, "prepend", true, &s) != 0) return -1;
        z.kind = NORM_PREPEND;
        z.str = gt_xstrdup(s);
        z.str_len = strlen(s);
    } else if (strcmp(type, "Replace") == 0) {
        const char *s = NULL;
        if (get_string(c, o, path, "content", true, &s) != 0) return -1;
        z.kind = NORM_REPLACE;
        if (get_pattern(c, o, path, &z.re) != 0) return -1;
        z.str = gt_xstrdup(s);
        z.str_len = strlen(s);
    } else {
        char p[512];
        snprintf(p, sizeof p, "%s.type", path);
        return bad(c, p, "a normalizer gtrain implements (NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence)", field(o, "type"));
    }
    t->norms = gt_xrealloc(t->norms, (size_t)(t->n_norms + 1) * sizeof(TokNormalizer));
    t->norms[t->n_norms++] = z;
    return 0;
}

/* ---- pre-tokenizers ---- */

static const char *const GPT2_PATTERN = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int get_prepend_scheme(Ctx *c, const cJSON *o, const char *path, int *scheme) {
    const char *s = NULL;
    if (get_string(c, o, path, "prepend_scheme", false, &s) != 0) return -1;
    *scheme = PREPEND_ALWAYS;
    if (s) {
        if (strcmp(s, "always") == 0) *scheme = PREPEND_ALWAYS;
        else if (strcmp(s, "first") == 0) *scheme = PREPEND_FIRST;
        else if (strcmp(s, "never") == 0) *scheme = PREPEND_NEVER;
        else {
            char p[512];
            snprintf(p, sizeof p, "%s.prepend_scheme", path);
            return bad(c, p, "\"always\", \"first\" or \"never\"", field(o, "prepend_scheme"));
        }
    }
    const cJSON *aps = field(o, "add_prefix_space");
    if (cJSON_IsFalse(aps)) { /* the older form: add_prefix_space false means never */
        if (s && *scheme != PREPEND_NEVER) {
            char p[512];
            snprintf(p, sizeof p, "%s.add_prefix_space", path);
            return bad(c, p, "a value that agrees with prepend_scheme", aps);
        }
        *scheme = PREPEND_NEVER;
    }
    return 0;
}

static int add_pre_tokenizer(Ctx *c, Tokenizer *t, const cJSON *o, const char *path) {
    const char *type = type_of(c, o, path, "a pre-tokenizer type");
    if (!type) return -1;
    if (strcmp(type, "Sequence") == 0) return add_each(c, t, o, path, "pretokenizers", add_pre_tokenizer);
    TokPreTokenizer z = {0};
    if (strcmp(type, "ByteLevel") == 0) {
        z.kind = PRE_BYTE_LEVEL;
        if (get_bool(c, o, path, "add_prefix_space", true, &z.add_prefix_space) != 0 ||
            get_bool(c, o, path, "use_regex", true, &z.use_regex) != 0)
            return -1;
        if (z.use_regex && tok_regex_compile(&z.re, GPT2_PATTERN, strlen(GPT2_PATTERN), false, c->file, path, c->err) != 0)
            return -1;
    } else if (strcmp(type, "Split") == 0) {
        static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
        const char *b = NULL;
        z.kind = PRE_SPLIT;
        if (get_string(c, o, path, "behavior", true, &b) != 0) return -1;
        z.behavior = -1;
        for (int i = 0; i < 5; i++)
            if (strcmp(b, names[i]) == 0) z.behavior = i;
        char p[512];
        snprintf(p, sizeof p, "%s.behavior", path);
        if (z.behavior < 0)
            return bad(c, p, "Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous", field(o, "behavior"));
        const cJSON *inv = field(o, "invert");
        snprintf(p, sizeof p, "%s.invert", path);
        if (!cJSON_IsBool(inv)) return bad(c, p, "true or false", inv);
        z.invert = cJSON_IsTrue(inv);
        if (get_pattern(c, o, path, &z.re) != 0) return -1;
    } else if (strcmp(type, "Metaspace") == 0) {
        z.kind = PRE_METASPACE;
        if (get_char(c, o, path, "replacement", z.replacement, &z.replacement_len) != 0 ||
            get_prepend_scheme(c, o, path, &z.prepend_scheme) != 0 || get_bool(c, o, path, "split", true, &z.split) != 0)
            return -1;
    } else if (strcmp(type, "Digits") == 0) {
        z.kind = PRE_DIGITS;
        if (get_bool(c, o, path, "individual_digits", false, &z.individual_digits) != 0) return -1;
    } else {
        char p[512];
        snprintf(p, sizeof p, "%s.type", path);
        return bad(c, p, "a pre-tokenizer gtrain implements (ByteLevel, Split, Metaspace, Digits, Sequence)", field(o, "type"));
    }
    t->pres = gt_xrealloc(t->pres, (size_t)(t->n_pres + 1) * sizeof(TokPreTokenizer));
    t->pres[t->n_pres++] = z;
    return 0;
}

/* ---- decoders ---- */

static int add_decoder(Ctx *c, Tokenizer *t, const cJSON *o, const char *path) {
    const char *type = type_of(c, o, path, "a decoder type");
    if (!type) return -1;
    if (strcmp(type, "Sequence") == 0) return add_each(c, t, o, path, "decoders", add_decoder);
    TokDecoder z = {0};
    if (strcmp(type, "ByteLevel") == 0) z.kind = DEC_BYTE_LEVEL;
    else if (strcmp(type, "ByteFallback") == 0) z.kind = DEC_BYTE_FALLBACK;
    else if (strcmp(type, "Fuse") == 0) z.kind = DEC_FUSE;
    else if (strcmp(type, "Metaspace") == 0) {
        z.kind = DEC_METASPACE;
        if (get_char(c, o, path, "replacement", z.replacement, &z.replacement_len) != 0 ||
            get_prepend_scheme(c, o, path, &z.prepend_scheme) != 0)
            return -1;
    } else if (strcmp(type, "Replace") == 0) {
        const char *s = NULL;
        z.kind = DEC_REPLACE;
        if (get_string(c, o, path, "content", true, &s) != 0 || get_pattern(c, o, path, &z.re) != 0) return -1;
        z.content = gt_xstrdup(s);
        z.content_len = strlen(s);
    } else if (strcmp(type, "Strip") == 0) {
        char ch[5];
        long start, stop;
        z.kind = DEC_STRIP;
        if (get_char(c, o, path, "content", ch, &z.content_len) != 0 ||
            get_int(c, o, path, "start", 0, 1 << 20, 0, &start) != 0 || get_int(c, o, path, "stop", 0, 1 << 20, 0, &stop) != 0)
            return -1;
        z.content = gt_xstrdup(ch);
        z.start = (int)start;
        z.stop = (int)stop;
    } else {
        char p[512];
        snprintf(p, sizeof p, "%s.type", path);
        return bad(c, p, "a decoder gtrain implements (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence)",
                   field(o, "type"));
    }
    t->decs = gt_xrealloc(t->decs, (size_t)(t->n_decs + 1) * sizeof(TokDecoder));
    t->decs[t->n_decs++] = z;
    return 0;
}

/* ---- the BPE model ---- */

static int set_affix(Ctx *c, const cJSON *o, const char *key, char **out, size_t *len) {
    const char *s = NULL;
    if (get_string(c, o, "model", key, false, &s) != 0) return -1;
    if (s) {
        *out = gt_xstrdup(s);
        *len = strlen(s);
    }
    return 0;
}

static int merge_pair(Ctx *c, const cJSON *m, const char *p, const char **a, size_t *al, const char **b, size_t *bl) {
    if (cJSON_IsString(m)) { /* "a b": exactly one space */
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ')) return bad(c, p, "\"left right\" (two tokens and one space)", m);
        *a = s;
        *al = (size_t)(sp - s);
        *b = sp + 1;
        *bl = strlen(sp + 1);
        return 0;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
        *a = m->child->valuestring;
        *al = strlen(*a);
        *b = m->child->next->valuestring;
        *bl = strlen(*b);
        return 0;
    }
    return bad(c, p, "\"left right\" or [\"left\", \"right\"]", m);
}

static int read_bpe(Ctx *c, TokBpe *m, const cJSON *o) {
    const char *type = NULL;
    if (!cJSON_IsObject(o)) return bad(c, "model", "an object", o);
    if (get_string(c, o, "model", "type", false, &type) != 0) return -1;
    if (!type || strcmp(type, "BPE") != 0)
        return bad(c, "model.type", "\"BPE\" (the model gtrain implements)", field(o, "type"));
    const cJSON *dropout = field(o, "dropout");
    if (!absent_or_null(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0.0))
        return bad(c, "model.dropout", "null or 0 (BPE dropout is not implemented)", dropout);
    if (get_bool(c, o, "model", "fuse_unk", false, &m->fuse_unk) != 0 ||
        get_bool(c, o, "model", "byte_fallback", false, &m->byte_fallback) != 0 ||
        get_bool(c, o, "model", "ignore_merges", false, &m->ignore_merges) != 0 ||
        set_affix(c, o, "continuing_subword_prefix", &m->prefix, &m->prefix_len) != 0 ||
        set_affix(c, o, "end_of_word_suffix", &m->suffix, &m->suffix_len) != 0)
        return -1;
    const cJSON *vocab = field(o, "vocab"), *merges = field(o, "merges");
    if (!cJSON_IsObject(vocab)) return bad(c, "model.vocab", "an object of token -> id", vocab);
    if (!cJSON_IsArray(merges)) return bad(c, "model.merges", "an array", merges);
    int max_id = -1;
    unsigned seen = 0;
    for (const cJSON *v = vocab->child; v; v = v->next) {
        if ((++seen & 4095) == 0 && gt_stop_signal())
            return gt_error(c->err, GT_EXIT_FAILURE, "%s: loading model.vocab stopped by signal %d", c->file, gt_stop_signal());
        char p[160];
        snprintf(p, sizeof p, "model.vocab[\"%.100s\"]", v->string);
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > TOKENIZER_MAX_ID ||
            v->valuedouble != (double)(long)v->valuedouble) {
            char range[64];
            snprintf(range, sizeof range, "an id in [0, %d]", TOKENIZER_MAX_ID);
            return bad(c, p, range, v);
        }
        bool inserted;
        *tok_strmap_put(&m->vocab, v->string, strlen(v->string), (int32_t)v->valuedouble, &inserted) =
            (int32_t)v->valuedouble; /* a key given twice: the last wins, as in HF's map */
        if ((int)v->valuedouble > max_id) max_id = (int)v->valuedouble;
    }
    m->vocab_count = (int)m->vocab.n;
    m->vocab_size = max_id + 1;
    m->id_to_token = gt_xcalloc((size_t)m->vocab_size + 1, sizeof(char *));
    m->id_len = gt_xcalloc((size_t)m->vocab_size + 1, sizeof(uint32_t));
    for (uint32_t i = 0; i < m->vocab.cap; i++) {
        if (!m->vocab.keys[i]) continue;
        int id = m->vocab.vals[i];
        if (m->id_to_token[id]) {
            char p[160];
            snprintf(p, sizeof p, "model.vocab[\"%.100s\"]", m->vocab.keys[i]);
            return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s: %s: expected an id no other token has, found %d (also \"%.60s\")",
                            c->file, p, id, m->id_to_token[id]);
        }
        m->id_to_token[id] = m->vocab.keys[i]; /* the vocabulary's own copy */
        m->id_len[id] = m->vocab.lens[i];
    }
    m->unk_id = -1;
    const char *unk = NULL;
    if (get_string(c, o, "model", "unk_token", false, &unk) != 0) return -1;
    if (unk) {
        const int32_t *id = tok_strmap_get(&m->vocab, unk, strlen(unk));
        if (!id) return bad(c, "model.unk_token", "a token of model.vocab", field(o, "unk_token"));
        m->unk_id = *id;
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        const int32_t *id = tok_strmap_get(&m->vocab, name, 6);
        m->byte_ids[b] = id ? *id : -1;
    }
    int n_merges = cJSON_GetArraySize(merges);
    m->merge_cap = 16;
    while (m->merge_cap < 2u * (uint32_t)n_merges + 2) m->merge_cap *= 2;
    m->merge_keys = gt_xmalloc(m->merge_cap * sizeof(uint64_t));
    memset(m->merge_keys, 0xFF, m->merge_cap * sizeof(uint64_t));
    m->merge_rank = gt_xmalloc(m->merge_cap * sizeof(uint32_t));
    m->merge_new = gt_xmalloc(m->merge_cap * sizeof(int32_t));
    m->in_merge = gt_xcalloc((size_t)m->vocab_size + 1, 1);
    char *buf = NULL;
    size_t buf_cap = 0;
    uint32_t rank = 0;
    int i = 0, rc = 0;
    for (const cJSON *x = merges->child; x && rc == 0; x = x->next, i++) {
        if ((i & 4095) == 4095 && gt_stop_signal()) {
            rc = gt_error(c->err, GT_EXIT_FAILURE, "%s: loading model.merges stopped by signal %d", c->file, gt_stop_signal());
            break;
        }
        char p[64];
        snprintf(p, sizeof p, "model.merges[%d]", i);
        if (cJSON_IsString(x) && strncmp(x->valuestring, "#version", 8) == 0) continue; /* as HF: not a merge */
        const char *a = NULL, *b = NULL;
        size_t al = 0, bl = 0;
        if (merge_pair(c, x, p, &a, &al, &b, &bl) != 0) {
            rc = -1;
            break;
        }
        const int32_t *ia = tok_strmap_get(&m->vocab, a, al), *ib = tok_strmap_get(&m->vocab, b, bl);
        if (!ia || !ib) {
            rc = gt_error(c->err, GT_EXIT_BAD_INPUT, "%s: %s: expected two tokens of model.vocab, found \"%.*s\" which is not one",
                          c->file, p, (int)(ia ? bl : al), ia ? b : a);
            break;
        }
        if (bl < m->prefix_len || (m->prefix_len && memcmp(b, m->prefix, m->prefix_len) != 0)) {
            rc = gt_error(c->err, GT_EXIT_BAD_INPUT, "%s: %s: expected a right token that starts with continuing_subword_prefix, found \"%.*s\"",
                          c->file, p, (int)bl, b);
            break;
        }
        size_t nl = al + bl - m->prefix_len;
        if (nl + 1 > buf_cap) {
            buf_cap = nl * 2 + 16;
            buf = gt_xrealloc(buf, buf_cap);
        }
        memcpy(buf, a, al);
        memcpy(buf + al, b + m->prefix_len, bl - m->prefix_len);
        const int32_t *inew = tok_strmap_get(&m->vocab, buf, nl);
        if (!inew) {
            rc = gt_error(c->err, GT_EXIT_BAD_INPUT, "%s: %s: expected a merge whose result is in model.vocab, found \"%.*s\" which is not",
                          c->file, p, (int)nl, buf);
            break;
        }
        tok_bpe_merge_put(m, *ia, *ib, rank++, *inew);
        m->in_merge[*ia] = m->in_merge[*ib] = 1;
    }
    free(buf);
    return rc;
}

int tok_read_components(Tokenizer *t, const char *file, const cJSON *root, GtError *err) {
    Ctx c = {.file = file, .err = err};
    const cJSON *v;
    if (!absent_or_null(v = field(root, "normalizer")) && add_normalizer(&c, t, v, "normalizer") != 0) return -1;
    if (!absent_or_null(v = field(root, "pre_tokenizer")) && add_pre_tokenizer(&c, t, v, "pre_tokenizer") != 0) return -1;
    if (!absent_or_null(v = field(root, "decoder"))) {
        t->has_decoder = true;
        if (add_decoder(&c, t, v, "decoder") != 0) return -1;
    }
    v = field(root, "model");
    if (!v) return bad(&c, "model", "an object", NULL);
    return read_bpe(&c, &t->bpe, v);
}

void tok_components_free(Tokenizer *t) {
    for (int i = 0; i < t->n_norms; i++) {
        free(t->norms[i].str);
        tok_regex_free(&t->norms[i].re);
    }
    for (int i = 0; i < t->n_pres; i++) tok_regex_free(&t->pres[i].re);
    for (int i = 0; i < t->n_decs; i++) {
        free(t->decs[i].content);
        tok_regex_free(&t->decs[i].re);
    }
    free(t->norms);
    free(t->pres);
    free(t->decs);
    tok_bpe_free(&t->bpe);
}
