/* data_messages.c - chat `messages` rows into examples: each row's messages rendered through the
 * model's chat template (chat_template.h: tokenizer_config.json's, or data.chat_template), the text
 * tokenized without adding special tokens again (TRL renders then tokenizes with
 * add_special_tokens=False), and each token's train mask from the assistant spans the renderer
 * returns (assistant_only_loss) or all ones. A token trains when its span in the text (the
 * tokenizer's offsets, HF's offset_mapping) overlaps an assistant span, as HF's char_to_token maps
 * a span's first and last byte to tokens: any tokenizer, byte-level or SentencePiece-style. */
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "data_internal.h"

struct DataChat {
    ChatTemplate *tmpl;
    const Tokenizer *tok; /* NULL: byte-level */
    TokEncoder *enc;
    char *bos, *eos; /* the tokenizer's BOS/EOS strings, NULL when none */
    bool assistant_only;
    bool gen; /* generation prompts: rendered with add_generation_prompt */
    GtBytes text;
    TokOffsets offs;
};

static char *token_string(const Tokenizer *t, int id) {
    const char *s = id >= 0 ? tokenizer_id_to_token(t, id) : NULL;
    return s ? gt_xstrdup(s) : NULL;
}

int data_chat_open(DataChat **out, const DataText *text, const char *name, GtError *err) {
    *out = NULL;
    char path[GT_PATH_MAX];
    if (text && text->chat_template && text->chat_template[0]) {
        snprintf(path, sizeof path, "%s", text->chat_template);
    } else if (text && text->tok) {
        gt_parent_dir(path, sizeof path, tokenizer_path(text->tok));
    } else {
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: messages rows need a chat template, expected data.chat_template or a tokenizer whose "
                        "directory has one", name);
    }
    DataChat *c = gt_xcalloc(1, sizeof *c);
    if (chat_template_load(&c->tmpl, path, err) != 0) {
        free(c);
        return -1;
    }
    c->tok = text->tok;
    c->assistant_only = text->assistant_only_loss && !text->gen_prompts;
    c->gen = text->gen_prompts;
    if (c->tok) {
        c->enc = tok_encoder_new(c->tok);
        c->bos = token_string(c->tok, tokenizer_bos_id(c->tok));
        c->eos = token_string(c->tok, tokenizer_eos_id(c->tok));
    }
    *out = c;
    return 0;
}

void data_chat_free(DataChat *c) {
    if (!c) return;
    chat_template_free(c->tmpl);
    tok_encoder_free(c->enc);
    free(c->bos);
    free(c->eos);
    gt_bytes_free(&c->text);
    tok_offsets_free(&c->offs);
    free(c);
}

int data_chat_example(DataChat *c, const cJSON *messages, const char *pre, size_t row, const char *col, TokIds *ids,
                      GtBytes *mask, GtError *err) {
    if (!cJSON_IsArray(messages))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu: \"%s\" is not an array, expected a list of {role, content}",
                        pre, row, col);
    size_t i = 0;
    for (const cJSON *m = messages->child; m; m = m->next, i++) {
        const cJSON *role = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "role") : NULL;
        const cJSON *content = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "content") : NULL;
        if (!cJSON_IsString(role) || !cJSON_IsString(content))
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s%zu: \"%s\"[%zu] %s, expected an object with string \"role\" and \"content\"", pre, row,
                            col, i, !cJSON_IsObject(m) ? "is not an object" : !cJSON_IsString(role) ? "has no string \"role\"" : "has no string \"content\"");
    }
    ChatRenderOptions o = {.add_generation_prompt = c->gen, .bos_token = c->bos, .eos_token = c->eos};
    ChatSpan *spans = NULL;
    size_t n_spans = 0;
    GtError rerr = {0};
    c->text.n = 0;
    if (chat_template_render(c->tmpl, messages, &o, &c->text, &spans, &n_spans, &rerr) != 0)
        return gt_error(err, rerr.code ? rerr.code : GT_EXIT_BAD_INPUT, "%s%zu: %s", pre, row, rerr.msg);
    const char *s = c->text.p ? c->text.p : "";
    size_t len = c->text.n;
    ids->n = 0;
    int rc = 0;
    if (c->tok) {
        char where[GT_PATH_MAX + 64];
        snprintf(where, sizeof where, "%s%zu: the rendered messages", pre, row);
        c->offs.n = 0;
        rc = tok_encode_offsets(c->enc, where, s, len, false, ids, &c->offs, err);
    } else {
        for (size_t k = 0; k < len; k++) tok_ids_push(ids, (unsigned char)s[k]);
    }
    mask->n = 0;
    for (size_t k = 0; rc == 0 && k < ids->n; k++) {
        size_t at = c->tok ? c->offs.v[2 * k] : k, end = c->tok ? c->offs.v[2 * k + 1] : k + 1;
        bool in = false; /* the spans are few (one per assistant turn): each is looked at */
        for (size_t sp = 0; sp < n_spans && !in && end > at; sp++) in = spans[sp].start < end && spans[sp].end > at;
        char bit = (char)(!c->assistant_only || in);
        gt_bytes_put(mask, &bit, 1);
    }
    free(spans);
    return rc;
}

const char *data_chat_text(const DataChat *c, size_t *len) {
    *len = c->text.n;
    return c->text.p ? c->text.p : "";
}
