/* chat_template.h - Hugging Face chat templates (a Jinja subset) rendered in C, as transformers'
 * apply_chat_template(messages, tokenize=False) renders them, with the byte spans each assistant
 * message contributes (what TRL's assistant_only_loss trains).
 *
 * The subset: {{ }}, {% %}, {# #}, whitespace control ({%- -%}) with trim_blocks and lstrip_blocks on
 * (transformers' ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)); if/elif/else,
 * for (loop.*, `for x in y if cond`, else), set (namespace() and ns.attr), macro/call of macros,
 * expressions, the filters and string methods real templates use, raise_exception(msg),
 * strftime_now(fmt), and transformers' {% generation %}...{% endgeneration %}. Anything else is
 * refused when the template is parsed ("name:line:col: ..."), never rendered wrongly.
 *
 * Assistant spans (what TRL's assistant_only_loss trains): where the template has {% generation %}
 * blocks, each block's output is a span, as transformers' return_assistant_tokens_mask records them.
 * Otherwise, for each message i whose role is "assistant": the span starts where messages[:i]
 * rendered with add_generation_prompt (the turn's header; rendered without enable_thinking, so a
 * Qwen3 empty think block counts as the assistant's) stops matching the text, and ends where the
 * template's loop iteration over that message ends (its end-of-turn marker and what the template
 * writes after it before the next message, "<|eot_id|>" or "<|im_end|>\n"); a template that does
 * not loop over the messages ends it where messages[:i+1] rendered alone ends. That is what TRL
 * 1.16's training templates of these families (llama3_training, qwen3_training) mark with
 * {% generation %}; the suite chat_template checks it on every row where the two render the same text. */
#ifndef GT_CHAT_TEMPLATE_H
#define GT_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "../common.h"

typedef struct ChatTemplate ChatTemplate;

typedef struct {
    bool add_generation_prompt;
    const char *bos_token, *eos_token; /* the strings from tokenizer_config.json; NULL = undefined */
    const cJSON *extra;                /* further top-level variables (tools, enable_thinking, ...), NULL = none */
    const char *date_string;           /* what strftime_now returns ("26 Jul 2024" style per its format); NULL = "1 Jan 2026" */
} ChatRenderOptions;

typedef struct {
    size_t start, end;
} ChatSpan; /* bytes [start, end) of the rendered text */

/* Parse a template's source; name (a file name) is for messages. Code 2 with "name:line:col: ..." on a
 * construct outside the subset or a syntax error. */
int chat_template_parse(ChatTemplate **out, const char *source, size_t len, const char *name, GtError *err);

/* Load from a path: a .jinja file (the template itself), a tokenizer_config.json (its chat_template: a
 * string, or a list of {name, template} of which "default" is taken), or a directory holding
 * chat_template.jinja or a tokenizer_config.json with one (as transformers looks). Code 2 when there
 * is none. */
int chat_template_load(ChatTemplate **out, const char *path, GtError *err);

void chat_template_free(ChatTemplate *t);

/* Render messages (a cJSON array of objects: role, content, and whatever else the template reads) as
 * transformers' apply_chat_template(messages, tokenize=False, add_generation_prompt=...) does.
 * *assistant (malloc'ed, may be NULL when n is 0): the byte spans each assistant message contributes
 * (the rule above). A raise_exception is code 2 with its message. */
int chat_template_render(const ChatTemplate *t, const cJSON *messages, const ChatRenderOptions *o, GtBytes *out,
                         ChatSpan **assistant, size_t *n_assistant, GtError *err);

#endif
