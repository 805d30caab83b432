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
#include <sys/stat.h>
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

/* ---------------------------------------------------------------------------------------------
 * the Jinja subset against transformers' own jinja2 environment */

typedef struct {
    const char *tpl, *ctx; /* ctx: JSON object of variables (messages among them) */
} JCase;

static const JCase JCASES[] = {
    {"{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/"
     "{{ loop.last }}/{{ loop.length }}:{{ x }}{{ loop.previtem }}{{ loop.nextitem }}\n{% endfor %}",
     "{\"xs\": [\"a\", \"b\", \"c\"]}"},
    {"{% for x in xs if x > 1 %}{{ x }}{{ ',' if not loop.last }}{% else %}none{% endfor %}|{% for y in [] %}{{ y }}"
     "{% else %}empty{% endfor %}|{% for x in xs if x > 9 %}{{ x }}{% else %}filtered{% endfor %}",
     "{\"xs\": [1, 2, 3]}"},
    {"  {%- if true -%}  \n  a  \n  {%- endif -%}  b\n  {% if true %}\n    c\n  {% endif %}\n{{ ' d ' }}  \n"
     "{# comment #}\ne {%+ if true %}f{% endif +%}\ng\n   {# indented comment #}\nh {{- ' i ' -}} j\n{% if true %}k{% endif %}",
     "{}"},
    {"x\n\t {% set a = 1 %}\n\t {{ a }}\n  {# c #}\ny{% if true %}\n\n{% endif %}\nz   {% if true %}w{% endif %}   \n", "{}"},
    {"{% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}"
     "{% set ns.n = ns.n + 1 %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}, "
     "{\"role\": \"user\", \"content\": \"c\"}]}"},
    {"{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set x = 9 %}"
     "{% endif %}{{ x }}",
     "{}"},
    {"{{ xs[::-1] }} {{ xs[1:] }} {{ xs[:-1] }} {{ xs[::2] }} {{ s[::-1] }} {{ s[1:3] }} {{ xs[-1] }} {{ s[0] }} "
     "{{ xs[10] }}| {{ xs[-10:2] }} {{ xs[3:1:-1] }} {{ s[-2:] }}",
     "{\"xs\": [1, 2, 3, 4, 5], \"s\": \"h\\u00e9llo\"}"},
    {"{{ d | tojson }}\n{{ d | tojson(indent=2) }}\n{{ d | tojson(sort_keys=true) }}\n"
     "{{ d | tojson(separators=(',', ':')) }}\n{{ 'é\"\\n\\u0001<>&' | tojson }} {{ [] | tojson(indent=4) }}",
     "{\"d\": {\"b\": [1, 2.5, null, true, -0.001, 100000000000000000000], \"a\": {\"x\": \"\\u00fc\"}, \"c\": [], "
     "\"e\": {}}}"},
    {"{{ '  hi  ' | trim }}|{{ xs | length }}|{{ 'abc' | upper }}|{{ 'ABC' | lower }}|{{ 'hello world' | title }}|"
     "{{ undefined_var | default('dflt') }}|{{ '' | default('e', true) }}|{{ xs | join(', ') }}|{{ xs | first }}|"
     "{{ xs | last }}|{{ 'ab' | list }}|{{ d | items | list }}|{{ 5 | string }}|{{ '42' | int + 1 }}|"
     "{{ '3.5' | float }}|{{ xs | reverse | list }}|{{ -3 | abs }}|{{ 'aXbX' | replace('X', '-') }}|{{ 'héllo' | length }}|"
     "{{ 'xx' | int }}|{{ 'hello' | capitalize }}|{{ xs | sum }} {{ xs | min }} {{ xs | max }}|{{ [1, 1, 2] | unique | list }}|"
     "{{ ' \\u00a0pad\\u3000 ' | trim }}|{{ 'abc' | trim('ac') }}",
     "{\"xs\": [3, 1, 2], \"d\": {\"k\": \"v\", \"n\": 1}}"},
    {"{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(';') }}|"
     "{{ messages | rejectattr('role', 'eq', 'user') | list | length }}|{{ messages | selectattr('tool_calls') | list | length }}|"
     "{{ messages | selectattr('tool_calls', 'defined') | list | length }}|{{ messages | map(attribute='role') | list }}|"
     "{{ messages | map(attribute='name', default='-') | join }}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\", "
     "\"tool_calls\": []}, {\"role\": \"user\", \"content\": \"c\"}]}"},
    {"{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} "
     "{{ 'a' ~ 1 ~ none }} {{ 'a' * 3 }} {{ 1 < 2 < 3 }} {{ 'b' in 'abc' }} {{ 3 not in xs }} {{ not true or false }} "
     "{{ true and 'x' }} {{ none or 'y' }} {{ 1 == 1.0 }} {{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v', 'n': 1} }} "
     "{{ 'yes' if xs else 'no' }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.0 }} {{ 0.00001 }} {{ 0.0001 }} {{ 123456789.125 }} "
     "{{ -1.5e-7 }} {{ 2.0 * 3 }} {{ 10 / 4 }} {{ -x }} {{ xs + [9] }} {{ 'q' if false }}|{{ \"it's\" }} {{ ['it\\'s'] }}",
     "{\"xs\": [1, 2], \"x\": 5}"},
    {"{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ 'a' is string }} {{ 1 is number }} "
     "{{ 1 is integer }} {{ 1.5 is float }} {{ d is mapping }} {{ xs is iterable }} {{ true is boolean }} "
     "{{ false is false }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is in 'cat' }} "
     "{{ x is not none }} {{ 'abc' is lower }} {{ 2 is eq 2 }} {{ xs is sequence }} {{ 1 is string }}",
     "{\"x\": 1, \"xs\": [1], \"d\": {}}"},
    {"{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' x') }}|{{ s.split() }}|{{ 'a,b,,c'.split(',') }}|"
     "{{ 'a b c'.split(' ', 1) }}|{{ s.startswith('  x') }}|{{ s.endswith(('y ', 'z')) }}|{{ 'Hi'.upper() }}"
     "{{ 'Hi'.lower() }}{{ 'hi there'.title() }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ d.get('a') }}"
     "{{ d.get('zz', 'dflt') }}{{ d.get('zz') }}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|"
     "{{ d.keys() | list }} {{ d.values() | list }}|{{ 'x</think>y</think>z'.split('</think>')[-1] }}|"
     "{{ '  a  b '.split(none, 1) }}|{{ 'abcabc'.find('c') }} {{ 'abcabc'.count('bc') }}",
     "{\"s\": \"  xhello worldy \", \"d\": {\"a\": 1, \"b\": [2]}}"},
    {"{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} "
     "{{ greet(name='c', punct='.') }}{% macro outer(x) %}<{{ greet(x) }}>{% endmacro %}{{ outer('d') }}",
     "{}"},
    {"{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"
     "{% set b %}inner {{ 1 + 1 }}{% endset %}[{{ b }}]",
     "{\"xs\": [1, 2, 3, 4, 5]}"},
    {"{{ strftime_now('%d %B %Y') }} {{ strftime_now('%Y-%m-%d') }} {{ strftime_now('%-d %b %A') }}", "{}"},
    {"[{{ nothing }}][{{ d.zz }}][{{ messages[5] }}]{% for x in nothing %}{{ x }}{% endfor %}{% if nothing %}x{% endif %}"
     "{% for k in d %}{{ k }} {% endfor %}{% for k, v in d | items %}{{ k }}:{{ v | tojson }} {% endfor %}",
     "{\"d\": {\"p\": [1], \"q\": \"s\"}}"},
    {"{% for i in range(3) %}{{ i }}{% endfor %}|{% for i in range(1, 10, 3) %}{{ i }}{% endfor %}|"
     "{% for c in 'hé' %}[{{ c }}]{% endfor %}|{{ 'a\\nb\\t\\'c\\'' }}|{{ \"x\\\"y\" }}|{{ '\\u00e9\\x41' }}|{{ 'it' 's' }}|"
     "{{ dict(a=1, b='x') }}|{{ add_generation_prompt }}|{{ tools }}|{{ (x.y.z is defined) if x is defined else 'no x' }}|{{ (1,) }} {{ () }}",
     "{}"},
    {"{% if messages | length == 0 %}{{ raise_exception('No messages!') }}{% endif %}", "{}"},
    {"{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
     "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
     "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
     "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
     "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
     "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
     "{\"bos_token\": \"<bos>\", \"add_generation_prompt\": true, \"messages\": [{\"role\": \"user\", \"content\": \" hi \"}, "
     "{\"role\": \"assistant\", \"content\": \"yo\"}, {\"role\": \"user\", \"content\": \"more\"}]}"},
    {"{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
     "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
     "{% endfor %}",
     "{\"bos_token\": \"<s>\", \"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]}"},
    {"{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
     "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
     "{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}{% set content = "
     "'<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = "
     "message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + "
     "' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
     "{% endfor %}",
     "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, "
     "{\"role\": \"user\", \"content\": \" u1 \"}, {\"role\": \"assistant\", \"content\": \"a1\"}, "
     "{\"role\": \"user\", \"content\": \"u2\"}]}"},
    {"{{ (1, 2) | list }} {{ xs[0] if xs | length > 0 else 'empty' }} {{ 'abc'[1:] ~ 'x' }} {{ xs.0 }} {{ 'x' + xs | "
     "length | string }} {{ - 3 + 1 }} {{ not xs }}",
     "{\"xs\": [7]}"},
};

static int jinja_case(const JCase *c, GtBytes *out, GtError *err) {
    ChatTemplate *t;
    if (chat_template_parse(&t, c->tpl, strlen(c->tpl), "case.jinja", err)) return -1;
    cJSON *ctx = cJSON_Parse(c->ctx);
    cr_assert(ctx, "bad context JSON %s", c->ctx);
    cJSON *msgs = cJSON_DetachItemFromObject(ctx, "messages");
    if (!msgs) msgs = cJSON_CreateArray();
    const cJSON *bos = cJSON_GetObjectItem(ctx, "bos_token"), *eos = cJSON_GetObjectItem(ctx, "eos_token"),
                *gen = cJSON_GetObjectItem(ctx, "add_generation_prompt");
    ChatRenderOptions o = {.add_generation_prompt = cJSON_IsTrue(gen), .extra = ctx,
                           .bos_token = bos ? bos->valuestring : NULL, .eos_token = eos ? eos->valuestring : NULL};
    int rc = chat_template_render(t, msgs, &o, out, NULL, NULL, err);
    cJSON_Delete(msgs);
    cJSON_Delete(ctx);
    chat_template_free(t);
    return rc;
}

Test(chat_template, jinja_subset_matches_jinja2) {
    test_require_refs();
    size_t n = sizeof JCASES / sizeof *JCASES;
    cJSON *in = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "template", JCASES[i].tpl);
        cJSON *ctx = cJSON_Parse(JCASES[i].ctx);
        cr_assert(ctx, "case %zu: bad context", i);
        cJSON_AddItemToObject(c, "context", ctx);
        cJSON_AddItemToArray(in, c);
    }
    char *s = cJSON_PrintUnformatted(in), p_in[512], p_out[512];
    cJSON_Delete(in);
    snprintf(p_in, sizeof p_in, "%s/jinja_in.json", g_dir);
    snprintf(p_out, sizeof p_out, "%s/jinja_out.json", g_dir);
    FILE *f = fopen(p_in, "w");
    cr_assert(f && fputs(s, f) >= 0 && fclose(f) == 0);
    free(s);
    free(test_sh_output(true, PY " '%s/tests/tools/chat_template_ref.py' jinja '%s' '%s'", getenv("GTRAIN_ROOT"), p_in, p_out));
    cJSON *res = read_json(p_out);
    size_t bad = 0, errors = 0;
    for (size_t i = 0; i < n; i++) {
        const cJSON *r = cJSON_GetArrayItem(res, (int)i), *want = cJSON_GetObjectItem(r, "text");
        GtBytes out = {0};
        GtError err = {0};
        int rc = jinja_case(&JCASES[i], &out, &err);
        if (!want) {
            const char *perr = cJSON_GetObjectItem(r, "error")->valuestring;
            errors++;
            /* both refuse; a raise_exception carries its message */
            const char *msg = strstr(perr, "TemplateError: ") ? perr + strlen("TemplateError: ") : NULL;
            if (rc == 0 || err.code != GT_EXIT_BAD_INPUT || (msg && !strstr(err.msg, msg))) {
                cr_log_error("case %zu: jinja2 raised %s; gtrain: rc %d %s", i, perr, rc, err.msg);
                bad++;
            }
        } else if (rc) {
            cr_log_error("case %zu: %s", i, err.msg);
            bad++;
        } else if (out.n != strlen(want->valuestring) || memcmp(out.p, want->valuestring, out.n)) {
            show_diff("case", want->valuestring, strlen(want->valuestring), out.p ? out.p : "", out.n);
            cr_log_error("case %zu differs", i);
            bad++;
        }
        gt_bytes_free(&out);
    }
    cJSON_Delete(res);
    cr_assert(errors == 2, "expected jinja2 to raise in the two raise_exception cases, it raised in %zu", errors);
    cr_assert(bad == 0, "%zu of %zu cases differ from jinja2", bad, n);
}

/* Every chat template TRL ships (Gemma, Phi-3, Qwen2.5, DeepSeek, GLM, Cohere, LFM2, Nemotron, ...):
 * each is either refused at parse time with one "file:line:col: ..." line, or renders exactly as
 * transformers does (text, {% generation %} spans, or both raising). Most must parse. */
Test(chat_template, trl_shipped_templates_parse_or_refuse) {
    test_require_refs();
    char p[512];
    snprintf(p, sizeof p, "%s/trl.json", g_dir);
    free(test_sh_output(true, PY " '%s/tests/tools/chat_template_ref.py' trl-templates '%s'", getenv("GTRAIN_ROOT"), p));
    cJSON *j = read_json(p), *convs = cJSON_GetObjectItem(j, "conversations");
    const cJSON *tp;
    size_t parsed = 0, refused = 0, bad = 0, rendered = 0;
    cJSON_ArrayForEach(tp, cJSON_GetObjectItem(j, "templates")) {
        const char *file = cJSON_GetObjectItem(tp, "file")->valuestring, *src = cJSON_GetObjectItem(tp, "template")->valuestring;
        ChatTemplate *t;
        GtError err = {0};
        if (chat_template_parse(&t, src, strlen(src), file, &err)) {
            char prefix[256];
            snprintf(prefix, sizeof prefix, "%s:", file);
            if (err.code != GT_EXIT_BAD_INPUT || strncmp(err.msg, prefix, strlen(prefix)) || strchr(err.msg, '\n')) {
                cr_log_error("%s: a bad refusal: %s", file, err.msg);
                bad++;
            }
            cr_log_info("refused: %s", err.msg);
            refused++;
            continue;
        }
        parsed++;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(tp, "cases")) {
            const cJSON *conv = cJSON_GetArrayItem(convs, cJSON_GetObjectItem(c, "conv")->valueint);
            ChatRenderOptions o = {.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItem(c, "gen")), .bos_token = "<s>",
                                   .eos_token = "</s>"};
            GtBytes out = {0};
            ChatSpan *s = NULL;
            size_t ns = 0;
            const cJSON *want = cJSON_GetObjectItem(c, "text"), *spans = cJSON_GetObjectItem(c, "spans");
            int rc = chat_template_render(t, conv, &o, &out, spans ? &s : NULL, spans ? &ns : NULL, &err);
            char desc[1024];
            if (!want) {
                if (rc == 0 || err.code != GT_EXIT_BAD_INPUT) {
                    cr_log_error("%s conversation %d: transformers raised %s, gtrain rendered", file,
                                 cJSON_GetObjectItem(c, "conv")->valueint, cJSON_GetObjectItem(c, "error")->valuestring);
                    bad++;
                }
            } else if (rc) {
                cr_log_error("%s conversation %d: %s", file, cJSON_GetObjectItem(c, "conv")->valueint, err.msg);
                bad++;
            } else if (out.n != strlen(want->valuestring) || memcmp(out.p, want->valuestring, out.n)) {
                show_diff(file, want->valuestring, strlen(want->valuestring), out.p ? out.p : "", out.n);
                bad++;
            } else if (spans && !spans_equal(s, ns, spans, desc, sizeof desc)) {
                cr_log_error("%s conversation %d: spans %s", file, cJSON_GetObjectItem(c, "conv")->valueint, desc);
                bad++;
            } else {
                rendered++;
            }
            free(s);
            gt_bytes_free(&out);
        }
        chat_template_free(t);
    }
    cJSON_Delete(j);
    cr_log_info("%zu templates parsed (%zu renders identical), %zu refused", parsed, rendered, refused);
    cr_assert(bad == 0, "%zu template renders or refusals wrong", bad);
    cr_assert(parsed >= 40, "only %zu of TRL's templates parse", parsed);
}

/* ---------------------------------------------------------------------------------------------
 * refusals */

typedef struct {
    const char *src, *where, *what; /* the message holds "t.jinja:LINE:COL:" and the construct's words */
} Refusal;

static const Refusal REFUSALS[] = {
    {"{% include 'other.jinja' %}", "t.jinja:1:4:", "'include' tag"},
    {"ok\n{% extends 'base' %}", "t.jinja:2:4:", "'extends' tag"},
    {"{{ x | wordcount }}", "t.jinja:1:8:", "filter 'wordcount'"},
    {"line1\n  {{ x.format(1) }}", "t.jinja:2:8:", "method 'format'"},
    {"{% if x is sameas y %}{% endif %}", "t.jinja:1:12:", "test 'sameas'"},
    {"{{ cycler(1, 2) }}", "t.jinja:1:4:", "function 'cycler'"},
    {"{% for x in y recursive %}{% endfor %}", "t.jinja:1:15:", "recursive"},
    {"{{ f(*args) }}", "t.jinja:1:6:", "*args"},
    {"{% raw %}x{% endraw %}", "t.jinja:1:4:", "'raw' tag"},
    {"{% call m() %}x{% endcall %}", "t.jinja:1:4:", "'call' tag"},
    {"{% set a, b = 1, 2 %}", "t.jinja:1:9:", "several variables"},
    {"{{ x", "t.jinja:1:1:", "unclosed"},
    {"{% if x %}never closed", "t.jinja:1:4:", "'if' block is never closed (expected 'endif')"},
    {"{% endfor %}", "t.jinja:1:4:", "unexpected 'endfor'"},
    {"{# open comment", "t.jinja:1:1:", "unclosed comment"},
    {"{{ 'unterminated }}", "t.jinja:1:4:", "unterminated string"},
    {"{{ x y }}", "t.jinja:1:6:", "expected '}}'"},
    {"{{ (1 + }}", "t.jinja:1:9:", "unbalanced"},
    {"{{ x[0]() }}", "t.jinja:1:8:", "calling the result"},
    {"\n\n   {{ 'é' | tojson | e }}", "t.jinja:3:22:", "filter 'e'"},
};

Test(chat_template, unsupported_constructs_refused_at_parse) {
    for (size_t i = 0; i < sizeof REFUSALS / sizeof *REFUSALS; i++) {
        const Refusal *r = &REFUSALS[i];
        ChatTemplate *t = NULL;
        GtError err = {0};
        int rc = chat_template_parse(&t, r->src, strlen(r->src), "t.jinja", &err);
        cr_expect(rc == -1 && !t && err.code == GT_EXIT_BAD_INPUT, "case %zu (%s): not refused", i, r->src);
        cr_expect(!strncmp(err.msg, r->where, strlen(r->where)) && strstr(err.msg, r->what) && !strchr(err.msg, '\n'),
                  "case %zu (%s): message \"%s\", expected \"%s ... %s ...\"", i, r->src, err.msg, r->where, r->what);
        chat_template_free(t);
    }
}

Test(chat_template, raise_exception_gives_its_message) {
    const char *src = "{% for m in messages %}\n{% if m.role not in ['user', 'assistant'] %}"
                      "{{ raise_exception('Unknown role: ' + m.role) }}{% endif %}{{ m.content }}{% endfor %}";
    ChatTemplate *t;
    GtError err = {0};
    cr_assert(chat_template_parse(&t, src, strlen(src), "roles.jinja", &err) == 0, "%s", err.msg);
    cJSON *msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"critic\", \"content\": \"b\"}]");
    GtBytes out = {0};
    ChatSpan *s = (ChatSpan *)1;
    size_t ns = 7;
    int rc = chat_template_render(t, msgs, NULL, &out, &s, &ns, &err);
    cr_expect(rc == -1 && err.code == GT_EXIT_BAD_INPUT && !s && ns == 0);
    cr_expect(strstr(err.msg, "roles.jinja:2:") && strstr(err.msg, "Unknown role: critic") && !strchr(err.msg, '\n'),
              "%s", err.msg);
    /* not an array of objects */
    cJSON *bad = cJSON_Parse("[{\"role\": \"user\"}, 3]");
    rc = chat_template_render(t, bad, NULL, &out, NULL, NULL, &err);
    cr_expect(rc == -1 && err.code == GT_EXIT_BAD_INPUT && strstr(err.msg, "messages[1]"), "%s", err.msg);
    cJSON_Delete(bad);
    gt_bytes_free(&out);
    cJSON_Delete(msgs);
    chat_template_free(t);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert(f && fputs(text, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
}

static void expect_loads(const char *path, const char *want) {
    ChatTemplate *t;
    GtError err = {0};
    cr_assert(chat_template_load(&t, path, &err) == 0, "%s: %s", path, err.msg);
    cJSON *msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": \"hi\"}]");
    GtBytes out = {0};
    cr_assert(chat_template_render(t, msgs, NULL, &out, NULL, NULL, &err) == 0, "%s", err.msg);
    cr_expect(out.n == strlen(want) && !memcmp(out.p, want, out.n), "%s: rendered \"%.*s\", expected \"%s\"", path,
              (int)out.n, out.p ? out.p : "", want);
    gt_bytes_free(&out);
    cJSON_Delete(msgs);
    chat_template_free(t);
}

/* As transformers looks: a .jinja file, tokenizer_config.json's string or its list's "default", a
 * directory's chat_template.jinja before its tokenizer_config.json; none is one line, code 2. */
Test(chat_template, load_finds_the_template_as_transformers_does) {
    char p[1024], d[768];
    snprintf(p, sizeof p, "%s/t.jinja", g_dir);
    write_file(p, "{% for m in messages %}[{{ m.content }}]{% endfor %}\n");
    expect_loads(p, "[hi]");
    snprintf(p, sizeof p, "%s/tokenizer_config.json", g_dir);
    write_file(p, "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"tool\"}, "
                  "{\"name\": \"default\", \"template\": \"<{{ messages[0].content }}>\"}]}");
    expect_loads(p, "<hi>");
    expect_loads(g_dir, "<hi>"); /* no chat_template.jinja there: t.jinja is not looked at, the config is */
    snprintf(d, sizeof d, "%s/model", g_dir);
    cr_assert(mkdir(d, 0700) == 0);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", d);
    write_file(p, "{\"chat_template\": \"cfg {{ messages | length }}\"}");
    expect_loads(d, "cfg 1");
    snprintf(p, sizeof p, "%s/chat_template.jinja", d);
    write_file(p, "jinja {{ messages[0].role }}");
    expect_loads(d, "jinja user");

    char llama2[1024];
    snprintf(llama2, sizeof llama2, "%s/llama2", tok_root());
    ChatTemplate *t = NULL;
    GtError err = {0};
    cr_expect(chat_template_load(&t, llama2, &err) == -1 && !t && err.code == GT_EXIT_BAD_INPUT &&
                  strstr(err.msg, "chat_template") && !strchr(err.msg, '\n'),
              "%s", err.msg);
    snprintf(p, sizeof p, "%s/missing", g_dir);
    cr_expect(chat_template_load(&t, p, &err) == -1 && err.code == GT_EXIT_BAD_INPUT, "%s", err.msg);
    snprintf(p, sizeof p, "%s/bad.jinja", g_dir);
    write_file(p, "a\n{% for %}");
    cr_expect(chat_template_load(&t, p, &err) == -1 && strstr(err.msg, "bad.jinja:2:8:"), "%s", err.msg);
}

/* What a hostile template can ask for ends in one line, code 2: runaway loops, output, nesting. */
Test(chat_template, hostile_templates_end_in_one_line) {
    GtBytes chain = {0}, parens = {0};
    gt_bytes_put(&chain, "{{ 1", 4);
    for (int i = 0; i < 5000; i++) gt_bytes_put(&chain, " + 1", 4);
    gt_bytes_put(&chain, " }}", 3);
    gt_bytes_put(&parens, "{{ ", 3);
    for (int i = 0; i < 5000; i++) gt_bytes_put(&parens, "(", 1);
    const char *parse_refused[] = {chain.p, parens.p};
    size_t parse_len[] = {chain.n, parens.n};
    for (int i = 0; i < 2; i++) {
        ChatTemplate *t = NULL;
        GtError err = {0};
        cr_expect(chat_template_parse(&t, parse_refused[i], parse_len[i], "deep.jinja", &err) == -1 &&
                      err.code == GT_EXIT_BAD_INPUT && strstr(err.msg, "deep.jinja:1:") && strstr(err.msg, "deep"),
                  "case %d: %s", i, err.msg);
    }
    gt_bytes_free(&chain);
    gt_bytes_free(&parens);
    const char *render_refused[][2] = {
        {"{% for a in range(1000) %}{% for b in range(1000) %}x{% endfor %}{% endfor %}", "loop iterations"},
        {"{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
         "nested deeper"},
        {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested deeper"},
        {"{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}", "MiB"},
        {"{{ 'x' * 100000000 }}", "too large"},
        {"{{ 1 // 0 }}", "division by zero"},
        {"{{ messages.nope.deeper }}", "undefined value has no attribute 'deeper'"},
        {"{{ 'a' + 1 }}", "unsupported operand types str and int"},
    };
    cJSON *msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": \"hi\"}]");
    for (size_t i = 0; i < sizeof render_refused / sizeof *render_refused; i++) {
        ChatTemplate *t = NULL;
        GtError err = {0};
        const char *src = render_refused[i][0];
        cr_assert(chat_template_parse(&t, src, strlen(src), "h.jinja", &err) == 0, "case %zu: %s", i, err.msg);
        GtBytes out = {0};
        cr_expect(chat_template_render(t, msgs, NULL, &out, NULL, NULL, &err) == -1 && err.code == GT_EXIT_BAD_INPUT &&
                      strstr(err.msg, "h.jinja:1:") && strstr(err.msg, render_refused[i][1]) && !strchr(err.msg, '\n'),
                  "case %zu: %s", i, err.msg);
        gt_bytes_free(&out);
        chat_template_free(t);
    }
    cJSON_Delete(msgs);
}
