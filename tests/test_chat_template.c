/* test_chat_template.c - src/tokenizer/chat_template*.c against independent references: the real
 * templates of ../shared/data/tokenizers rendered byte for byte as transformers'
 * apply_chat_template(tokenize=False) renders them over a corpus of conversations (with and without
 * add_generation_prompt, Qwen3's thinking and tool branches); the assistant spans against the
 * {% generation %} spans of TRL's training templates (tests/tools/chat_template_ref.py); small
 * templates of the Jinja subset against transformers' own jinja2 environment; and the refusals: a
 * construct outside the subset names file:line:col and the construct, raise_exception its message. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_template.h"
#include "common.h"
#include "test_util.h"

static char g_dir[256];

static void scratch_init(void) { test_scratch_make(g_dir, sizeof g_dir, "gt_test_chat_template"); }
static void scratch_fini(void) { test_scratch_remove(g_dir); }

TestSuite(chat_template, .init = scratch_init, .fini = scratch_fini, .timeout = 240);

static const char *tok_root(void) {
    static char path[1024];
    const char *root = getenv("GTRAIN_ROOT");
    cr_assert(root && *root, "GTRAIN_ROOT is not set (run through make test)");
    snprintf(path, sizeof path, "%s/../shared/data/tokenizers", root);
    cr_assert(access(path, R_OK) == 0, "the shared tokenizers folder %s is missing", path);
    return path;
}

static cJSON *read_json(const char *path) {
    uint8_t *buf;
    size_t len;
    GtError err = {0};
    cr_assert(gt_read_input(path, "json", 1u << 30, &buf, &len, &err) == 0, "%s", err.msg);
    cJSON *j = cJSON_ParseWithLength((const char *)buf, len);
    free(buf);
    cr_assert(j, "%s: not JSON", path);
    return j;
}

/* bos/eos as tokenizer_config.json names them (a string or {"content": ...}) */
static const char *special(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(c)) return c->valuestring;
    }
    return NULL;
}

static cJSON *corpus(void) {
    static cJSON *c;
    if (c) return c;
    test_require_refs();
    const char *root = getenv("GTRAIN_ROOT");
    char *o = test_sh_output(true, PY " '%s/tests/tools/chat_template_ref.py' corpus '%s' '%s/corpus.json'", root,
                             tok_root(), g_dir);
    free(o);
    char p[512];
    snprintf(p, sizeof p, "%s/corpus.json", g_dir);
    c = read_json(p);
    return c;
}

static void show_diff(const char *what, const char *want, size_t wn, const char *got, size_t gn) {
    size_t k = 0;
    while (k < wn && k < gn && want[k] == got[k]) k++;
    size_t from = k > 40 ? k - 40 : 0;
    cr_log_error("%s: first difference at byte %zu\n want: %.*s\n got:  %.*s", what, k, (int)((wn - from) > 120 ? 120 : wn - from),
                 want + from, (int)((gn - from) > 120 ? 120 : gn - from), got + from);
}

/* Render one corpus case with the template t; returns the text (caller frees) and spans. */
static int render_case(const ChatTemplate *t, const cJSON *cfg, const cJSON *conv, const cJSON *c, GtBytes *out,
                       ChatSpan **spans, size_t *ns, GtError *err) {
    ChatRenderOptions o = {
        .add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItem(c, "gen")),
        .bos_token = special(cfg, "bos_token"),
        .eos_token = special(cfg, "eos_token"),
        .extra = cJSON_GetObjectItem(c, "extra"),
    };
    return chat_template_render(t, conv, &o, out, spans, ns, err);
}

static cJSON *tok_config(const char *name) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s/tokenizer_config.json", tok_root(), name);
    return read_json(p);
}

Test(chat_template, real_templates_render_as_transformers) {
    cJSON *cj = corpus(), *convs = cJSON_GetObjectItem(cj, "conversations");
    const cJSON *c;
    size_t checked = 0, bad = 0;
    char last[64] = "";
    ChatTemplate *t = NULL;
    cJSON *cfg = NULL;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(cj, "cases")) {
        const char *tok = cJSON_GetObjectItem(c, "tok")->valuestring;
        if (strcmp(tok, last)) {
            chat_template_free(t);
            cJSON_Delete(cfg);
            char dir[1024];
            snprintf(dir, sizeof dir, "%s/%s", tok_root(), tok);
            GtError err = {0};
            cr_assert(chat_template_load(&t, dir, &err) == 0, "%s", err.msg);
            cfg = tok_config(tok);
            snprintf(last, sizeof last, "%s", tok);
        }
        const cJSON *conv = cJSON_GetArrayItem(convs, cJSON_GetObjectItem(c, "conv")->valueint);
        GtBytes out = {0};
        GtError err = {0};
        int rc = render_case(t, cfg, conv, c, &out, NULL, NULL, &err);
        const cJSON *want = cJSON_GetObjectItem(c, "text");
        char label[160];
        snprintf(label, sizeof label, "%s conversation %d gen=%d extra=%s", tok, cJSON_GetObjectItem(c, "conv")->valueint,
                 cJSON_IsTrue(cJSON_GetObjectItem(c, "gen")), cJSON_GetObjectItem(c, "extra")->child ? cJSON_GetObjectItem(c, "extra")->child->string : "-");
        if (!want) {
            if (rc == 0) {
                cr_log_error("%s: transformers raised (%s), gtrain rendered", label, cJSON_GetObjectItem(c, "error")->valuestring);
                bad++;
            }
        } else if (rc != 0) {
            cr_log_error("%s: %s", label, err.msg);
            bad++;
        } else if (out.n != strlen(want->valuestring) || memcmp(out.p, want->valuestring, out.n)) {
            show_diff(label, want->valuestring, strlen(want->valuestring), out.p ? out.p : "", out.n);
            bad++;
        }
        checked++;
        gt_bytes_free(&out);
    }
    chat_template_free(t);
    cJSON_Delete(cfg);
    cr_assert(checked >= 400, "only %zu cases", checked);
    cr_assert(bad == 0, "%zu of %zu renders differ from transformers", bad, checked);
}

static bool spans_equal(const ChatSpan *s, size_t ns, const cJSON *want, char *desc, size_t cap) {
    int n = 0;
    n += snprintf(desc + n, cap - (size_t)n, "got [");
    for (size_t i = 0; i < ns && (size_t)n < cap - 40; i++) n += snprintf(desc + n, cap - (size_t)n, "[%zu,%zu]", s[i].start, s[i].end);
    n += snprintf(desc + n, cap - (size_t)n, "] want [");
    const cJSON *w;
    cJSON_ArrayForEach(w, want) {
        if ((size_t)n < cap - 40)
            n += snprintf(desc + n, cap - (size_t)n, "[%d,%d]", cJSON_GetArrayItem(w, 0)->valueint, cJSON_GetArrayItem(w, 1)->valueint);
    }
    snprintf(desc + n, cap - (size_t)n, "]");
    if ((size_t)cJSON_GetArraySize(want) != ns) return false;
    size_t i = 0;
    cJSON_ArrayForEach(w, want) {
        if ((size_t)cJSON_GetArrayItem(w, 0)->valuedouble != s[i].start || (size_t)cJSON_GetArrayItem(w, 1)->valuedouble != s[i].end)
            return false;
        i++;
    }
    return true;
}

/* TRL's training templates ({% generation %} blocks) rendered here: the same text, and the blocks'
 * byte spans as transformers records them for return_assistant_tokens_mask. */
Test(chat_template, generation_blocks_match_transformers) {
    cJSON *cj = corpus(), *convs = cJSON_GetObjectItem(cj, "conversations"), *train = cJSON_GetObjectItem(cj, "training");
    const cJSON *c;
    size_t checked = 0, bad = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(cj, "cases")) {
        const cJSON *tt = cJSON_GetObjectItem(c, "train_text");
        if (!tt) continue;
        const char *tok = cJSON_GetObjectItem(c, "tok")->valuestring;
        const char *src = cJSON_GetObjectItem(cJSON_GetObjectItem(train, tok), "template")->valuestring;
        ChatTemplate *t;
        GtError err = {0};
        cr_assert(chat_template_parse(&t, src, strlen(src), "training.jinja", &err) == 0, "%s", err.msg);
        cJSON *cfg = tok_config(tok);
        GtBytes out = {0};
        ChatSpan *s = NULL;
        size_t ns = 0;
        const cJSON *conv = cJSON_GetArrayItem(convs, cJSON_GetObjectItem(c, "conv")->valueint);
        int rc = render_case(t, cfg, conv, c, &out, &s, &ns, &err);
        char label[128], desc[1024];
        snprintf(label, sizeof label, "%s training template, conversation %d gen=%d", tok,
                 cJSON_GetObjectItem(c, "conv")->valueint, cJSON_IsTrue(cJSON_GetObjectItem(c, "gen")));
        if (rc) {
            cr_log_error("%s: %s", label, err.msg);
            bad++;
        } else if (out.n != strlen(tt->valuestring) || memcmp(out.p, tt->valuestring, out.n)) {
            show_diff(label, tt->valuestring, strlen(tt->valuestring), out.p ? out.p : "", out.n);
            bad++;
        } else if (!spans_equal(s, ns, cJSON_GetObjectItem(c, "train_spans"), desc, sizeof desc)) {
            cr_log_error("%s: spans %s", label, desc);
            bad++;
        }
        checked++;
        free(s);
        gt_bytes_free(&out);
        cJSON_Delete(cfg);
        chat_template_free(t);
    }
    cr_assert(checked >= 200, "only %zu cases", checked);
    cr_assert(bad == 0, "%zu of %zu training-template renders differ from transformers", bad, checked);
}

/* The spans of the shipped templates (no generation blocks) against TRL's training template of the
 * family, on every row where the two templates render the same text. */
Test(chat_template, assistant_spans_match_trl) {
    cJSON *cj = corpus(), *convs = cJSON_GetObjectItem(cj, "conversations");
    const cJSON *c;
    size_t bad = 0, per_tok[8] = {0}, with_assistant = 0;
    const char *names[8] = {0};
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(cj, "cases")) {
        const cJSON *tt = cJSON_GetObjectItem(c, "train_text"), *text = cJSON_GetObjectItem(c, "text");
        if (!tt || !text || strcmp(tt->valuestring, text->valuestring)) continue;
        const char *tok = cJSON_GetObjectItem(c, "tok")->valuestring;
        int k = 0;
        while (names[k] && strcmp(names[k], tok)) k++;
        names[k] = tok;
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", tok_root(), tok);
        ChatTemplate *t;
        GtError err = {0};
        cr_assert(chat_template_load(&t, dir, &err) == 0, "%s", err.msg);
        cJSON *cfg = tok_config(tok);
        GtBytes out = {0};
        ChatSpan *s = NULL;
        size_t ns = 0;
        const cJSON *conv = cJSON_GetArrayItem(convs, cJSON_GetObjectItem(c, "conv")->valueint);
        int rc = render_case(t, cfg, conv, c, &out, &s, &ns, &err);
        char desc[1024];
        if (rc) {
            cr_log_error("%s conversation %d: %s", tok, cJSON_GetObjectItem(c, "conv")->valueint, err.msg);
            bad++;
        } else if (!spans_equal(s, ns, cJSON_GetObjectItem(c, "train_spans"), desc, sizeof desc)) {
            cr_log_error("%s conversation %d gen=%d: spans %s", tok, cJSON_GetObjectItem(c, "conv")->valueint,
                         cJSON_IsTrue(cJSON_GetObjectItem(c, "gen")), desc);
            bad++;
        }
        per_tok[k]++;
        with_assistant += ns > 0;
        free(s);
        gt_bytes_free(&out);
        cJSON_Delete(cfg);
        chat_template_free(t);
    }
    for (int k = 0; k < 8 && names[k]; k++) cr_log_info("%s: %zu rows compared", names[k], per_tok[k]);
    cr_assert(names[0] && names[1] && names[2], "the spans were compared on fewer than three templates");
    for (int k = 0; k < 3; k++) cr_assert(per_tok[k] >= 20, "%s: only %zu rows compared", names[k], per_tok[k]);
    cr_assert(with_assistant >= 50);
    cr_assert(bad == 0, "%zu rows' spans differ from TRL's", bad);
}
