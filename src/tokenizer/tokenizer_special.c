/* tokenizer_special.c - a tokenizer's BOS, EOS and PAD ids, taken as Hugging Face takes them from
 * the files beside its tokenizer.json, and the one line a run prints about them.
 *
 * Sources, first that names the token wins, per token:
 *   1. tokenizer_config.json: bos_token, eos_token, pad_token: a string, or an AddedToken object
 *      {"content": "...", ...} (what AutoTokenizer.from_pretrained reads);
 *   2. special_tokens_map.json: the same keys (older tokenizers keep them there);
 *   3. generation_config.json: bos_token_id, eos_token_id, pad_token_id: an id or a list of ids;
 *   4. config.json: the same.
 * A list of EOS ids (Llama-3.1-Instruct's [128001, 128008, 128009], Qwen3's [151645, 151643])
 * gives its first: TRL's SFTTrainer puts the tokenizer's eos_token first in that list, so the first
 * is the end of turn a fine-tune learns. null, absent (or a negative id, old Llama configs' -1 for
 * none): the next source. A token that is not in
 * the tokenizer, or an id outside its vocabulary, is refused naming the file and the key (code 2).
 * Only when none of the four files exists do the older rules apply (tokenizer_load.c): BOS the
 * post-processor's first special token before $A, EOS its last after $A, else the added special
 * token </s>, <|end_of_text|>, <|endoftext|>, <|im_end|>, <|eot_id|> (first present); no PAD. */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer_internal.h"

#define SPECIAL_FILE_MAX_BYTES (16u << 20) /* a tokenizer_config.json with chat templates is ~50 KB */

enum { BOS, EOS, PAD, N_SPECIAL };
static const char *const WHAT[N_SPECIAL] = {"bos", "eos", "pad"};
static const char *const TOKEN_KEYS[N_SPECIAL] = {"bos_token", "eos_token", "pad_token"};
static const char *const ID_KEYS[N_SPECIAL] = {"bos_token_id", "eos_token_id", "pad_token_id"};
static const char *const FILES[] = {"tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                                    "config.json"};
#define N_FILES 4
#define N_TOKEN_FILES 2 /* the first two name tokens, the others ids */

static int fallback_eos(const Tokenizer *t) {
    if (t->n_after > 0) return t->tmpl_after[t->n_after - 1];
    static const char *const names[] = {"</s>", "<|end_of_text|>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int id = tokenizer_token_to_id(t, names[i]);
        if (id >= 0 && tokenizer_is_special(t, id)) return id;
    }
    return -1;
}

void tok_special_defaults(Tokenizer *t) {
    t->special_id[BOS] = t->n_before > 0 ? t->tmpl_before[0] : -1;
    t->special_id[EOS] = fallback_eos(t);
    t->special_id[PAD] = -1;
    for (int s = 0; s < N_SPECIAL; s++)
        snprintf(t->special_from[s], sizeof t->special_from[s], "%s",
                 t->special_id[s] < 0 ? "" : s == BOS ? "post-processor" : t->n_after > 0 ? "post-processor" : "name list");
    t->special_files = false;
}

/* dir/name as a JSON object: 1, 0 when there is no such file, -1 with err */
static int read_object(const char *dir, const char *name, cJSON **out, char *file, size_t cap, GtError *err) {
    *out = NULL;
    if (snprintf(file, cap, "%s/%s", dir, name) >= (int)cap)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%.200s...: expected a shorter path", dir);
    struct stat sb;
    if (stat(file, &sb) != 0) {
        if (errno == ENOENT) return 0;
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: cannot read: %s", file, strerror(errno));
    }
    char *text = NULL;
    size_t len = 0;
    if (gt_read_small_file(file, "tokenizer config", SPECIAL_FILE_MAX_BYTES, &text, &len, err)) return -1;
    long at = gt_json_too_deep(text, len, 64);
    cJSON *j = at < 0 ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    if (at >= 0) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: byte %ld: expected JSON nested at most 64 deep, found deeper", file, at);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected a JSON object, found %s", file, j ? "another JSON value" : "invalid JSON");
    }
    *out = j;
    return 1;
}

static const char *type_of(const cJSON *j) {
    return cJSON_IsString(j) ? "a string" : cJSON_IsNumber(j) ? "a number" : cJSON_IsBool(j) ? "a boolean"
           : cJSON_IsArray(j) ? "a list" : cJSON_IsObject(j) ? "an object" : "another value";
}

/* key of tokenizer_config.json / special_tokens_map.json: *id, or -1 when null or absent */
static int token_field(const Tokenizer *t, const cJSON *o, const char *key, const char *file, int *id, GtError *err) {
    *id = -1;
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j || cJSON_IsNull(j)) return 0;
    const cJSON *c = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "content") : j;
    if (!cJSON_IsString(c))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected a token (a string or {\"content\": string}), found %s",
                        file, key, cJSON_IsObject(j) ? "an object without a string content" : type_of(j));
    *id = tokenizer_token_to_id(t, c->valuestring);
    if (*id < 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected a token of %s, found \"%.80s\", which it does not have",
                        file, key, t->path, c->valuestring);
    return 0;
}

static bool is_id(const cJSON *j, int vocab) {
    return cJSON_IsNumber(j) && isfinite(j->valuedouble) && j->valuedouble == floor(j->valuedouble) &&
           j->valuedouble >= 0 && j->valuedouble < vocab;
}

/* key of generation_config.json / config.json: an id, or a list of ids (its first); -1 when null,
 * absent or an empty list */
static int id_field(const Tokenizer *t, const cJSON *o, const char *key, const char *file, int *id, GtError *err) {
    *id = -1;
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j || cJSON_IsNull(j)) return 0;
    /* old Llama configs say "pad_token_id": -1 for none */
    if (cJSON_IsNumber(j) && j->valuedouble < 0 && j->valuedouble >= -1e9 && j->valuedouble == floor(j->valuedouble))
        return 0;
    bool ok = is_id(j, t->vocab_size);
    if (cJSON_IsArray(j)) {
        ok = true;
        for (const cJSON *e = j->child; e; e = e->next) ok = ok && is_id(e, t->vocab_size);
        if (ok && !j->child) return 0;
        if (ok) j = j->child;
    }
    if (!ok)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected a token id in [0, %d) of %s or a list of them, found %s",
                        file, key, t->vocab_size, t->path, cJSON_IsArray(j) ? "a list with another value" : type_of(j));
    *id = (int)j->valuedouble;
    return 0;
}

int tok_special_from_files(Tokenizer *t, const char *dir, GtError *err) {
    int id[N_SPECIAL] = {-1, -1, -1};
    const char *from[N_SPECIAL] = {NULL, NULL, NULL};
    bool any = false;
    char file[GT_PATH_MAX + 64];
    for (int f = 0; f < N_FILES; f++) {
        cJSON *o;
        int r = read_object(dir, FILES[f], &o, file, sizeof file, err);
        if (r < 0) return -1;
        if (r == 0) continue;
        any = true;
        for (int s = 0; s < N_SPECIAL && r; s++) {
            if (from[s]) continue;
            int v;
            if (f < N_TOKEN_FILES ? token_field(t, o, TOKEN_KEYS[s], file, &v, err) : id_field(t, o, ID_KEYS[s], file, &v, err)) {
                cJSON_Delete(o);
                return -1;
            }
            if (v >= 0) id[s] = v, from[s] = FILES[f];
        }
        cJSON_Delete(o);
    }
    if (!any) return 0; /* the defaults stay */
    for (int s = 0; s < N_SPECIAL; s++) {
        t->special_id[s] = id[s];
        snprintf(t->special_from[s], sizeof t->special_from[s], "%s", from[s] ? from[s] : "");
    }
    t->special_files = true;
    return 0;
}

int tokenizer_bos_id(const Tokenizer *t) { return t->special_id[BOS]; }
int tokenizer_eos_id(const Tokenizer *t) { return t->special_id[EOS]; }
int tokenizer_pad_id(const Tokenizer *t) { return t->special_id[PAD]; }

const char *tokenizer_special_line(const Tokenizer *t, char *buf, size_t cap) {
    size_t o = 0;
    o += (size_t)snprintf(buf, cap, "special tokens:");
    for (int s = 0; s < N_SPECIAL && o < cap; s++) {
        const int i = t->special_id[s];
        const char *name = i >= 0 ? tokenizer_id_to_token(t, i) : NULL;
        if (i < 0)
            o += (size_t)snprintf(buf + o, cap - o, "%s %s none", s ? "," : "", WHAT[s]);
        else
            o += (size_t)snprintf(buf + o, cap - o, "%s %s %d %.60s (%s)", s ? "," : "", WHAT[s], i, name ? name : "?",
                                  t->special_from[s]);
    }
    if (!t->special_files && o < cap)
        snprintf(buf + o, cap - o, "; no tokenizer_config.json, special_tokens_map.json, generation_config.json or "
                 "config.json beside %s: gtrain's fallback rules", t->path);
    return buf;
}
