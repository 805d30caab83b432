/* chat_template.c - the chat template API: loading a template as transformers finds it (a .jinja file,
 * tokenizer_config.json's chat_template, a model directory), refusing names outside the subset at
 * parse time, and rendering messages with the assistant spans (the rule is in chat_template.h). */
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "chat_template_internal.h"

/* ---- names outside the subset are refused when the template is parsed ---- */

static void collect_macros(const CtNode *n, const char **names, size_t *count, size_t cap, int depth) {
    if (!n || depth > CT_MAX_EVAL_DEPTH) return;
    if (n->kind == N_MACRO && *count < cap) names[(*count)++] = n->name;
    if (n->kind >= N_BODY) { /* statements hold the bodies */
        collect_macros(n->b, names, count, cap, depth + 1);
        collect_macros(n->c, names, count, cap, depth + 1);
        collect_macros(n->d, names, count, cap, depth + 1);
        if (n->kind == N_GENERATION) collect_macros(n->a, names, count, cap, depth + 1);
        for (size_t i = 0; i < n->n_kids; i++) collect_macros(n->kids[i], names, count, cap, depth + 1);
    }
}

static int verr(const ChatTemplate *t, const CtNode *n, GtError *err, const char *what, const char *name) {
    return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%d:%d: the %s '%s' is outside the supported template subset", t->name,
                    n->line, n->col, what, name);
}

static int validate(const ChatTemplate *t, const CtNode *n, const char **macros, size_t nm, int depth, GtError *err) {
    if (!n) return 0;
    if (depth > CT_MAX_EVAL_DEPTH)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%d:%d: the template nests deeper than %d", t->name, n->line, n->col,
                        CT_MAX_EVAL_DEPTH);
    if (n->kind == N_FILTER && !ct_known_filter(n->name)) return verr(t, n, err, "filter", n->name);
    if (n->kind == N_TEST && !ct_known_test(n->name)) return verr(t, n, err, "test", n->name);
    if (n->kind == N_CALL) {
        const CtNode *c = n->a;
        uint8_t f;
        if (c->kind == N_ATTR) {
            if (!ct_known_method(c->name)) return verr(t, c, err, "method", c->name);
        } else if (c->kind == N_NAME) {
            bool ok = ct_known_func(c->name, &f);
            for (size_t i = 0; i < nm && !ok; i++) ok = !strcmp(macros[i], c->name);
            if (!ok) return verr(t, c, err, "function", c->name);
        } else {
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%d:%d: calling the result of an expression is outside the "
                            "supported template subset", t->name, n->line, n->col);
        }
    }
    if (validate(t, n->a, macros, nm, depth + 1, err) || validate(t, n->b, macros, nm, depth + 1, err) ||
        validate(t, n->c, macros, nm, depth + 1, err) || validate(t, n->d, macros, nm, depth + 1, err))
        return -1;
    for (size_t i = 0; i < n->n_kids; i++)
        if (validate(t, n->kids[i], macros, nm, depth + 1, err)) return -1;
    return 0;
}

int chat_template_check(ChatTemplate *t, GtError *err) {
    const char *macros[256];
    size_t nm = 0;
    collect_macros(t->root, macros, &nm, 256, 0);
    return validate(t, t->root, macros, nm, 0, err);
}

/* ---- rendering ---- */

/* transformers' _alias_reasoning_fields: reasoning under any of its names is also reasoning_content and
 * thinking, {"thinking": r, **message, "reasoning_content": r} */
static CtVal alias_reasoning(CtArena *a, CtVal m) {
    static const char *const fields[] = {"reasoning_content", "thinking", "reasoning"};
    CtVal r = {.k = V_UNDEF}, v;
    for (int i = 0; i < 3 && r.k == V_UNDEF; i++)
        if (ct_dict_get(m.u.d, fields[i], strlen(fields[i]), &v) && v.k != V_NONE) r = v;
    if (r.k == V_UNDEF) return m;
    CtDict *d = ct_dict_new(a, m.u.d->n + 2);
    ct_dict_set(a, d, "thinking", 8, r);
    for (size_t i = 0; i < m.u.d->n; i++) ct_dict_set(a, d, m.u.d->key[i], m.u.d->klen[i], m.u.d->v[i]);
    ct_dict_set(a, d, "reasoning_content", 17, r);
    return (CtVal){.k = V_DICT, .u.d = d};
}

static int render_once(const ChatTemplate *t, CtArena *a, CtList *msgs, const ChatRenderOptions *o, bool gen_prompt,
                       GtBytes *out, CtRender *keep, GtError *err) {
    CtRender r = {.t = t, .a = a, .out = out, .main = out, .err = err, .o = o, .messages = msgs};
    CtFrame *g = ct_alloc(a, sizeof *g), *root = ct_alloc(a, sizeof *root);
    g->vars = ct_dict_new(a, 8);
    static const char *const funcs[] = {"raise_exception", "strftime_now", "namespace", "dict", "range", NULL};
    for (int i = 0; funcs[i]; i++) {
        uint8_t f = 0;
        ct_known_func(funcs[i], &f);
        ct_dict_set(a, g->vars, funcs[i], strlen(funcs[i]), (CtVal){.k = V_FUNC, .func = f});
    }
    root->parent = g;
    root->vars = ct_dict_new(a, 16);
    if (o && o->bos_token) ct_dict_set(a, root->vars, "bos_token", 9, ct_strv(o->bos_token, strlen(o->bos_token)));
    if (o && o->eos_token) ct_dict_set(a, root->vars, "eos_token", 9, ct_strv(o->eos_token, strlen(o->eos_token)));
    ct_dict_set(a, root->vars, "tools", 5, (CtVal){.k = V_NONE});
    ct_dict_set(a, root->vars, "documents", 9, (CtVal){.k = V_NONE});
    if (o && o->extra && cJSON_IsObject(o->extra))
        for (const cJSON *e = o->extra->child; e; e = e->next)
            if (e->string) ct_dict_set(a, root->vars, e->string, strlen(e->string), ct_from_cjson(a, e));
    ct_dict_set(a, root->vars, "messages", 8, (CtVal){.k = V_LIST, .u.l = msgs});
    ct_dict_set(a, root->vars, "add_generation_prompt", 21, (CtVal){.k = V_BOOL, .u.b = gen_prompt});
    r.frame = root;
    if (keep) {
        r.msg_start = gt_xmalloc((msgs->n + 1) * sizeof *r.msg_start);
        r.msg_end = gt_xmalloc((msgs->n + 1) * sizeof *r.msg_end);
        for (size_t i = 0; i < msgs->n; i++) r.msg_start[i] = r.msg_end[i] = SIZE_MAX;
    } else {
        r.messages = NULL;
    }
    int rc = ct_run(&r, t->root);
    if (keep) *keep = r;
    else free(r.gen);
    return rc;
}

static bool is_assistant(CtVal m) {
    CtVal role;
    return m.k == V_DICT && ct_dict_get(m.u.d, "role", 4, &role) && role.k == V_STR && role.u.s.n == 9 &&
           !memcmp(role.u.s.p, "assistant", 9);
}

int chat_template_render(const ChatTemplate *t, const cJSON *messages, const ChatRenderOptions *o, GtBytes *out,
                         ChatSpan **assistant, size_t *n_assistant, GtError *err) {
    if (assistant) *assistant = NULL;
    if (n_assistant) *n_assistant = 0;
    if (!cJSON_IsArray(messages))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: messages: expected an array of objects", t->name);
    CtArena a = {0};
    CtList *msgs = ct_list_new(&a, (size_t)cJSON_GetArraySize(messages));
    size_t idx = 0;
    for (const cJSON *m = messages->child; m; m = m->next, idx++) {
        if (!cJSON_IsObject(m)) {
            ct_arena_free(&a);
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: messages[%zu]: expected an object", t->name, idx);
        }
        ct_list_push(&a, msgs, alias_reasoning(&a, ct_from_cjson(&a, m)));
    }
    size_t base = out->n;
    GtBytes text = {0};
    CtRender r;
    int rc = render_once(t, &a, msgs, o, o && o->add_generation_prompt, &text, &r, err);
    ChatSpan *spans = NULL;
    size_t ns = 0;
    cJSON *header_extra = NULL;
    const ChatRenderOptions *header_o = o;
    if (!rc && assistant && t->has_generation) {
        spans = r.gen;
        ns = r.n_gen;
        r.gen = NULL;
    } else if (!rc && assistant) {
        /* the header is the generation prompt as it opens a turn the model writes: without
         * enable_thinking=false's empty think block, which TRL's training templates count as the
         * assistant's (they open {% generation %} right after the role header) */
        ChatRenderOptions ho = o ? *o : (ChatRenderOptions){0};
        if (o && cJSON_GetObjectItemCaseSensitive(o->extra, "enable_thinking")) {
            header_extra = cJSON_Duplicate(o->extra, true);
            if (!header_extra) {
                rc = gt_error(err, GT_EXIT_FAILURE, "out of memory");
            } else {
                cJSON_DeleteItemFromObjectCaseSensitive(header_extra, "enable_thinking");
                ho.extra = header_extra;
            }
        }
        header_o = &ho;
        spans = gt_xmalloc((msgs->n + 1) * sizeof *spans);
        for (size_t i = 0; i < msgs->n && !rc; i++) {
            if (!is_assistant(msgs->v[i])) continue;
            size_t end = r.msg_end[i], start;
            CtList view = *msgs;
            GtBytes pre = {0};
            GtError perr = {0};
            if (end == SIZE_MAX) { /* the template did not loop over the messages: where messages[:i+1] ends */
                view.n = i + 1;
                if (!render_once(t, &a, &view, o, false, &pre, NULL, &perr) && pre.n <= text.n &&
                    !memcmp(pre.p, text.p, pre.n))
                    end = pre.n;
                pre.n = 0;
            }
            if (end == SIZE_MAX) {
                rc = gt_error(err, GT_EXIT_BAD_INPUT, "%s: messages[%zu]: cannot tell where the assistant turn is in "
                              "the rendered text (the template has no {%% generation %%} block)", t->name, i);
                gt_bytes_free(&pre);
                break;
            }
            /* the turn starts where messages[:i] with the generation prompt stops matching */
            view.n = i;
            start = r.msg_start[i] == SIZE_MAX ? 0 : r.msg_start[i];
            if (!render_once(t, &a, &view, header_o, true, &pre, NULL, &perr)) {
                size_t k = 0;
                while (k < pre.n && k < text.n && pre.p[k] == text.p[k]) k++;
                if (k > start) start = k;
            }
            if (start > end) start = end;
            gt_bytes_free(&pre);
            spans[ns++] = (ChatSpan){start, end};
        }
    }
    cJSON_Delete(header_extra);
    free(r.gen);
    free(r.msg_start);
    free(r.msg_end);
    ct_arena_free(&a);
    if (rc) {
        free(spans);
        gt_bytes_free(&text);
        return -1;
    }
    for (size_t i = 0; i < ns; i++) {
        spans[i].start += base;
        spans[i].end += base;
    }
    if (text.n) gt_bytes_put(out, text.p, text.n);
    gt_bytes_free(&text);
    if (assistant) {
        if (!ns) {
            free(spans);
            spans = NULL;
        }
        *assistant = spans;
        *n_assistant = ns;
    } else {
        free(spans);
    }
    return 0;
}

/* ---- loading ---- */

#define CT_MAX_FILE (16u << 20)

static int from_config(ChatTemplate **out, const char *path, GtError *err) {
    uint8_t *buf;
    size_t len;
    if (gt_read_input(path, "tokenizer config", CT_MAX_FILE, &buf, &len, err)) return -1;
    cJSON *j = cJSON_ParseWithLength((const char *)buf, len);
    free(buf);
    if (!j) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: not valid JSON", path);
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    const char *src = NULL;
    if (cJSON_IsString(ct)) {
        src = ct->valuestring;
    } else if (cJSON_IsArray(ct)) {
        for (const cJSON *e = ct->child; e; e = e->next) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name"), *tp = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (cJSON_IsString(nm) && !strcmp(nm->valuestring, "default") && cJSON_IsString(tp)) src = tp->valuestring;
        }
        if (!src) {
            cJSON_Delete(j);
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: chat_template: expected a template named \"default\" in its list",
                            path);
        }
    } else {
        cJSON_Delete(j);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: chat_template: expected a string or a list of {name, template}, "
                        "found %s", path, ct ? "another type" : "no chat_template");
    }
    char name[GT_PATH_MAX + 32];
    snprintf(name, sizeof name, "%s (chat_template)", path);
    int rc = chat_template_parse(out, src, strlen(src), name, err);
    cJSON_Delete(j);
    return rc;
}

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

int chat_template_load(ChatTemplate **out, const char *path, GtError *err) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: chat template: no such file or directory", path);
    if (S_ISDIR(st.st_mode)) {
        char p[GT_PATH_MAX + 64];
        snprintf(p, sizeof p, "%s/chat_template.jinja", path);
        if (stat(p, &st) == 0) return chat_template_load(out, p, err);
        snprintf(p, sizeof p, "%s/chat_template.json", path);
        if (stat(p, &st) == 0) return from_config(out, p, err);
        snprintf(p, sizeof p, "%s/tokenizer_config.json", path);
        if (stat(p, &st) != 0)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: no chat template (no chat_template.jinja or tokenizer_config.json)", path);
        return from_config(out, p, err);
    }
    if (ends_with(path, ".json")) return from_config(out, path, err);
    uint8_t *buf;
    size_t len;
    if (gt_read_input(path, "chat template", CT_MAX_FILE, &buf, &len, err)) return -1;
    int rc = chat_template_parse(out, (const char *)buf, len, path, err);
    free(buf);
    return rc;
}
