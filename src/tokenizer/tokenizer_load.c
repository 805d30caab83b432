/* tokenizer_load.c - a tokenizer.json from file to Tokenizer: the checks before parsing, the top
 * level (version, truncation, padding), the added tokens (ids as HF's AddedVocabulary::add_tokens
 * gives them; matched in raw or normalized text), the post-processor's special tokens, and the
 * accessors of tokenizer.h. The components themselves are read in tokenizer_json.c. */
#include <stdlib.h>
#include <sys/stat.h>

#include "tokenizer_internal.h"

static const cJSON *field(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static int bad_at(GtError *err, const char *file, const char *path, const char *expected, const char *found) {
    return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected %s, found %s", file, path, expected, found);
}

static bool flag(const cJSON *o, const char *key, bool def) {
    const cJSON *v = field(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

/* ---- added tokens ---- */

#define ADDED_ID_WARNINGS 3 /* tokens whose given id is not HF's: this many named, then a count */

static int read_added_tokens(Tokenizer *t, const char *file, const cJSON *list, GtError *err) {
    if (!list || cJSON_IsNull(list)) return 0;
    if (!cJSON_IsArray(list)) return bad_at(err, file, "added_tokens", "an array", "something else");
    int n = cJSON_GetArraySize(list), next_id = t->bpe.vocab_count, i = 0, n_moved = 0;
    t->added = gt_xcalloc((size_t)n + 1, sizeof(TokAddedToken));
    TokStrMap slot_of_id = {0}; /* id (its 4 bytes) -> index into added */
    int rc = 0;
    for (const cJSON *x = list->child; x && rc == 0; x = x->next, i++) {
        if ((i & 4095) == 0 && gt_stop_signal()) {
            rc = gt_error(err, GT_EXIT_FAILURE, "%s: loading added_tokens stopped by signal %d", file, gt_stop_signal());
            break;
        }
        char p[64];
        snprintf(p, sizeof p, "added_tokens[%d]", i);
        const cJSON *content = field(x, "content"), *id = field(x, "id");
        if (!cJSON_IsObject(x) || !cJSON_IsString(content)) {
            rc = bad_at(err, file, p, "an object with a string \"content\"", "something else");
            break;
        }
        for (const char *k = "single_word\0lstrip\0rstrip\0normalized\0special\0"; *k && rc == 0; k += strlen(k) + 1) {
            const cJSON *v = field(x, k);
            if (v && !cJSON_IsBool(v) && !cJSON_IsNull(v)) {
                char q[96];
                snprintf(q, sizeof q, "%s.%s", p, k);
                rc = bad_at(err, file, q, "true or false", "something else");
            }
        }
        if (rc != 0) break;
        TokAddedToken a = {.content = content->valuestring, .len = strlen(content->valuestring),
                           .single_word = flag(x, "single_word", false), .lstrip = flag(x, "lstrip", false),
                           .rstrip = flag(x, "rstrip", false), .normalized = flag(x, "normalized", true),
                           .special = flag(x, "special", false)};
        if (a.len == 0) continue; /* HF ignores an empty token */
        /* the same content again: HF keeps its id (and the later properties) */
        const int32_t *known = tok_strmap_get(&t->added_by_content, a.content, a.len);
        const int32_t *in_vocab = tok_strmap_get(&t->bpe.vocab, a.content, a.len);
        if (known) a.id = t->added[*known].id;
        else if (in_vocab) a.id = *in_vocab;
        else a.id = next_id++;
        if (a.id > TOKENIZER_MAX_ID) {
            char found[32];
            snprintf(found, sizeof found, "%d", a.id);
            rc = bad_at(err, file, p, "an id gtrain can hold", found);
            break;
        }
        if (cJSON_IsNumber(id) && (double)a.id != id->valuedouble && n_moved++ < ADDED_ID_WARNINGS)
            gt_warn("%s: %s: \"%.80s\" is given id %.0f, but Hugging Face's tokenizers gives it %d (and so does gtrain)\n",
                    file, p, a.content, id->valuedouble, a.id);
        a.content = gt_xstrdup(a.content);
        /* one token per id, as HF's added_tokens_map_r: a later token with the id replaces it */
        bool inserted;
        int32_t *slot = tok_strmap_put(&slot_of_id, (const char *)&a.id, sizeof a.id, t->n_added, &inserted);
        if (inserted) t->n_added++;
        else free(t->added[*slot].content);
        t->added[*slot] = a;
        *tok_strmap_put(&t->added_by_content, a.content, a.len, *slot, &inserted) = *slot;
    }
    tok_strmap_free(&slot_of_id);
    if (rc == 0 && n_moved > ADDED_ID_WARNINGS)
        gt_warn("%s: added_tokens: and %d more tokens given ids Hugging Face's tokenizers does not give them (gtrain gives HF's)\n",
                file, n_moved - ADDED_ID_WARNINGS);
    return rc;
}

/* The strings the added tokens are matched by: normalized tokens by their normalized form. */
static int build_added_sets(Tokenizer *t, const char *file, GtError *err) {
    TokEncoder *e = tok_encoder_new(t);
    int rc = 0;
    t->raw_set.tokens = gt_xcalloc((size_t)t->n_added + 1, sizeof(int));
    t->norm_set.tokens = gt_xcalloc((size_t)t->n_added + 1, sizeof(int));
    for (int i = 0; i < t->n_added && rc == 0; i++) {
        TokAddedToken *a = &t->added[i];
        const char *m = a->content;
        size_t ml = a->len;
        if (a->normalized && t->n_norms > 0 && tok_normalize(e, a->content, a->len, &m, &ml, err) != 0) rc = -1;
        a->match = gt_xmalloc(ml + 1);
        memcpy(a->match, m, ml);
        a->match[ml] = 0;
        a->match_len = ml;
        if (rc == 0 && ml == 0)
            rc = gt_error(err, GT_EXIT_BAD_INPUT, "%s: added_tokens: expected tokens that are not empty once normalized, found \"%s\"",
                          file, a->content);
        TokAddedSet *set = a->normalized ? &t->norm_set : &t->raw_set;
        int same = rc == 0 ? tok_added_insert(set, t->added, i) : -1;
        if (same >= 0)
            rc = gt_error(err, GT_EXIT_BAD_INPUT, "%s: added_tokens: expected tokens that differ once normalized, found \"%.80s\" and \"%.80s\"",
                          file, t->added[same].content, a->content);
        if (rc == 0) set->tokens[set->n++] = i;
        if (rc == 0 && (i & 4095) == 0 && gt_stop_signal())
            rc = gt_error(err, GT_EXIT_FAILURE, "%s: loading added_tokens stopped by signal %d", file, gt_stop_signal());
    }
    tok_encoder_free(e);
    if (rc == 0 && (tok_added_finish(&t->raw_set, t->added, file, err) != 0 ||
                    tok_added_finish(&t->norm_set, t->added, file, err) != 0))
        rc = -1;
    return rc;
}

/* ---- post-processor ---- */

static void ids_prepend(int **v, int *n, const int *ids, int k) {
    if (k == 0) return; /* ids may be NULL then */
    *v = gt_xrealloc(*v, (size_t)(*n + k + 1) * sizeof(int));
    memmove(*v + k, *v, (size_t)*n * sizeof(int));
    memcpy(*v, ids, (size_t)k * sizeof(int));
    *n += k;
}

static void ids_append(int **v, int *n, const int *ids, int k) {
    if (k == 0) return;
    *v = gt_xrealloc(*v, (size_t)(*n + k + 1) * sizeof(int));
    memcpy(*v + *n, ids, (size_t)k * sizeof(int));
    *n += k;
}

/* A template piece: {"SpecialToken": {"id": ..}} or {"Sequence": {"id": "A"}} (HF reads no other). */
static int template_piece(const cJSON *x, bool *is_seq, const char **name) {
    const cJSON *st = field(x, "SpecialToken"), *sq = field(x, "Sequence");
    const cJSON *id = field(st ? st : sq, "id");
    if (!cJSON_IsObject(x) || !cJSON_IsString(id)) return -1;
    *is_seq = sq != NULL;
    *name = id->valuestring;
    return 0;
}

static int read_template(Tokenizer *t, const char *file, const cJSON *o, const char *path, GtError *err) {
    const cJSON *single = field(o, "single"), *specials = field(o, "special_tokens");
    char p[512];
    snprintf(p, sizeof p, "%s.single", path);
    if (!cJSON_IsArray(single)) return bad_at(err, file, p, "an array of template pieces", "something else");
    int *before = NULL, *after = NULL, nb = 0, na = 0, seqs = 0, i = 0;
    for (const cJSON *x = single->child; x; x = x->next, i++) {
        char q[600];
        snprintf(q, sizeof q, "%s[%d]", p, i);
        bool is_seq;
        const char *name;
        if (template_piece(x, &is_seq, &name) != 0) {
            free(before);
            free(after);
            return bad_at(err, file, q, "a SpecialToken or Sequence piece", "something else");
        }
        if (is_seq) {
            if (strcmp(name, "A") != 0) {
                free(before);
                free(after);
                return bad_at(err, file, q, "the sequence $A (a single sequence)", name);
            }
            seqs++;
            continue;
        }
        const cJSON *tok = cJSON_IsObject(specials) ? field(specials, name) : NULL, *ids = field(tok, "ids");
        if (!cJSON_IsArray(ids)) {
            free(before);
            free(after);
            return bad_at(err, file, q, "a special token listed in special_tokens with its ids", name);
        }
        for (const cJSON *d = ids->child; d; d = d->next) {
            if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > TOKENIZER_MAX_ID ||
                d->valuedouble != (double)(int)d->valuedouble) {
                free(before);
                free(after);
                return bad_at(err, file, q, "token ids in special_tokens", "something else");
            }
            int id = (int)d->valuedouble;
            if (seqs == 0) ids_append(&before, &nb, &id, 1);
            else ids_append(&after, &na, &id, 1);
        }
    }
    if (seqs != 1) {
        free(before);
        free(after);
        return bad_at(err, file, p, "exactly one $A", seqs ? "several" : "none");
    }
    ids_prepend(&t->tmpl_before, &t->n_before, before, nb); /* a later processor wraps the earlier */
    ids_append(&t->tmpl_after, &t->n_after, after, na);
    free(before);
    free(after);
    return 0;
}

static int read_post_processor(Tokenizer *t, const char *file, const cJSON *o, const char *path, GtError *err) {
    if (!o || cJSON_IsNull(o)) return 0;
    const cJSON *type = field(o, "type");
    char p[512];
    snprintf(p, sizeof p, "%s.type", path);
    if (!cJSON_IsObject(o) || !cJSON_IsString(type)) return bad_at(err, file, p, "a post-processor type", "something else");
    if (strcmp(type->valuestring, "ByteLevel") == 0) return 0; /* offsets only */
    if (strcmp(type->valuestring, "TemplateProcessing") == 0) return read_template(t, file, o, path, err);
    if (strcmp(type->valuestring, "Sequence") == 0) {
        const cJSON *list = field(o, "processors");
        snprintf(p, sizeof p, "%s.processors", path);
        if (!cJSON_IsArray(list)) return bad_at(err, file, p, "an array", "something else");
        int i = 0;
        for (const cJSON *x = list->child; x; x = x->next, i++) {
            char q[600];
            snprintf(q, sizeof q, "%s[%d]", p, i);
            if (read_post_processor(t, file, x, q, err) != 0) return -1;
        }
        return 0;
    }
    char found[96];
    snprintf(found, sizeof found, "\"%.80s\"", type->valuestring);
    return bad_at(err, file, p, "a post-processor gtrain implements (TemplateProcessing, ByteLevel, Sequence)", found);
}

/* ---- the whole file ---- */

static int build(Tokenizer *t, const char *file, const cJSON *root, GtError *err) {
    if (!cJSON_IsObject(root)) return bad_at(err, file, "(top level)", "an object", "something else");
    const cJSON *v = field(root, "version");
    if (v && !(cJSON_IsString(v) && strcmp(v->valuestring, "1.0") == 0))
        return bad_at(err, file, "version", "\"1.0\"", cJSON_IsString(v) ? v->valuestring : "something else");
    for (const char *k = "truncation\0padding\0"; *k; k += strlen(k) + 1)
        if ((v = field(root, k)) && !cJSON_IsNull(v))
            return bad_at(err, file, k, "null (truncation and padding are not implemented: gtrain cuts rows itself)",
                          "a setting");
    if (tok_read_components(t, file, root, err) != 0) return -1;
    tok_make_byte_alphabet(&t->alphabet);
    if (read_added_tokens(t, file, field(root, "added_tokens"), err) != 0 || build_added_sets(t, file, err) != 0 ||
        read_post_processor(t, file, field(root, "post_processor"), "post_processor", err) != 0)
        return -1;
    static const char word[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]", space[] = "\\p{White_Space}";
    if (tok_regex_compile(&t->word_char, word, sizeof word - 1, false, file, "(\\w)", err) != 0 ||
        tok_regex_compile(&t->space_char, space, sizeof space - 1, false, file, "(\\s)", err) != 0)
        return -1;
    int vs = t->bpe.vocab_size;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].id + 1 > vs) vs = t->added[i].id + 1;
    for (int i = 0; i < t->n_before; i++)
        if (t->tmpl_before[i] + 1 > vs) vs = t->tmpl_before[i] + 1;
    for (int i = 0; i < t->n_after; i++)
        if (t->tmpl_after[i] + 1 > vs) vs = t->tmpl_after[i] + 1;
    t->vocab_size = vs;
    t->token_str = gt_xcalloc((size_t)vs, sizeof(char *));
    t->token_len = gt_xcalloc((size_t)vs, sizeof(uint32_t));
    t->special_of_id = gt_xcalloc((size_t)vs, sizeof(int));
    for (int id = 0; id < t->bpe.vocab_size; id++) {
        t->token_str[id] = t->bpe.id_to_token[id];
        t->token_len[id] = t->bpe.id_len[id];
    }
    for (int i = 0; i < t->n_added; i++) {
        t->token_str[t->added[i].id] = t->added[i].content;
        t->token_len[t->added[i].id] = (uint32_t)t->added[i].len;
    }
    /* HF skips a token as special by its string (the special set holds contents) */
    TokStrMap specials = {0};
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].special) {
            bool inserted;
            tok_strmap_put(&specials, t->added[i].content, t->added[i].len, 1, &inserted);
        }
    for (int id = 0; id < vs; id++)
        t->special_of_id[id] = t->token_str[id] && tok_strmap_get(&specials, t->token_str[id], t->token_len[id]) != NULL;
    tok_strmap_free(&specials);
    return 0;
}

int tokenizer_load_memory(Tokenizer **out, const char *name, const char *json, size_t len, GtError *err) {
    *out = NULL;
    long at = gt_json_nul_at(json, len);
    if (at >= 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: byte %ld: expected JSON text without NUL, found a NUL (raw or \\u0000)", name, at);
    at = tok_utf8_invalid_at(json, len);
    if (at >= 0) /* serde_json refuses it too */
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: byte %ld: expected UTF-8 text (JSON), found the byte 0x%02x", name, at,
                        (unsigned char)json[at]);
    at = gt_json_too_deep(json, len, 64);
    if (at >= 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: byte %ld: expected JSON nested at most 64 deep, found deeper", name, at);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        long off = end && end >= json ? (long)(end - json) : 0;
        const char *e = cJSON_GetErrorPtr();
        if (e && e >= json && e <= json + len) off = (long)(e - json);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: byte %ld: expected valid JSON, found a syntax error", name, off);
    }
    Tokenizer *t = gt_xcalloc(1, sizeof *t);
    snprintf(t->path, sizeof t->path, "%s", name);
    int rc = build(t, name, root, err);
    cJSON_Delete(root);
    if (rc != 0) {
        tokenizer_free(t);
        return -1;
    }
    tok_special_defaults(t);
    *out = t;
    return 0;
}

int tokenizer_load(Tokenizer **out, const char *path, GtError *err) {
    char file[GT_PATH_MAX];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (snprintf(file, sizeof file, "%s/tokenizer.json", path) >= (int)sizeof file)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: path too long", path);
    } else {
        snprintf(file, sizeof file, "%s", path);
    }
    uint8_t *buf;
    size_t len;
    if (gt_read_input(file, "tokenizer file", TOKENIZER_MAX_FILE_BYTES, &buf, &len, err) != 0) return -1;
    if (tokenizer_load_memory(out, file, (const char *)buf, len, err)) {
        free(buf);
        return -1;
    }
    (*out)->raw = buf; /* kept: what a run saves is what it read */
    (*out)->raw_len = len;
    /* BOS/EOS/PAD from the files beside it (HF's tokenizer_config.json, ...) */
    char dir[GT_PATH_MAX];
    gt_parent_dir(dir, sizeof dir, file);
    if (tok_special_from_files(*out, dir, err)) {
        tokenizer_free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

int tokenizer_load_for_model(Tokenizer **out, const char *setting, const char *model_path, GtError *err) {
    *out = NULL;
    if (setting && strcmp(setting, "none") == 0) return 0;
    if (setting && setting[0]) return tokenizer_load(out, setting, err);
    if (!model_path || !model_path[0]) return 0;
    char dir[GT_PATH_MAX], file[GT_PATH_MAX + 16];
    struct stat st;
    snprintf(dir, sizeof dir, "%s", model_path);
    if (stat(dir, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    if (stat(file, &st) != 0) return 0;
    return tokenizer_load(out, file, err);
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    tok_components_free(t);
    for (int i = 0; i < t->n_added; i++) {
        free(t->added[i].content);
        free(t->added[i].match);
    }
    free(t->added);
    tok_strmap_free(&t->added_by_content);
    tok_added_free(&t->raw_set);
    tok_added_free(&t->norm_set);
    free(t->special_of_id);
    free(t->token_str);
    free(t->token_len);
    free(t->tmpl_before);
    free(t->tmpl_after);
    tok_regex_free(&t->word_char);
    tok_regex_free(&t->space_char);
    free(t->raw);
    free(t);
}

int tokenizer_vocab_size(const Tokenizer *t) { return t->vocab_size; }
const char *tokenizer_path(const Tokenizer *t) { return t->path; }

const char *tokenizer_id_to_token(const Tokenizer *t, int id) {
    return id >= 0 && id < t->vocab_size ? t->token_str[id] : NULL;
}

int tokenizer_token_to_id(const Tokenizer *t, const char *token) {
    size_t n = strlen(token);
    const int32_t *i = tok_strmap_get(&t->added_by_content, token, n);
    if (i) return t->added[*i].id;
    const int32_t *v = tok_strmap_get(&t->bpe.vocab, token, n);
    return v ? *v : -1;
}

bool tokenizer_is_special(const Tokenizer *t, int id) { return id >= 0 && id < t->vocab_size && t->special_of_id[id]; }

void tokenizer_template_ids(const Tokenizer *t, const int **before, int *n_before, const int **after, int *n_after) {
    *before = t->tmpl_before;
    *n_before = t->n_before;
    *after = t->tmpl_after;
    *n_after = t->n_after;
}

const uint8_t *tokenizer_raw(const Tokenizer *t, size_t *len) {
    *len = t->raw_len;
    return t->raw;
}
