/* fuzz_chat_template.c - libFuzzer target: a chat template's source (chat_template_parse), rendered
 * when it parses over a fixed conversation (system, user, assistant with reasoning and a tool call,
 * tool, user; tools and enable_thinking among the variables), with and without the generation prompt
 * by the first byte. Must hold: a refusal (parse or render) is code 2 with one line naming the
 * template; a render gives assistant spans inside the text, in order, start <= end; nothing hangs
 * (the renderer's limits on nesting, iterations, output and memory). */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "fuzz_util.h"

static const char MESSAGES[] =
    "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"What is 2*3? \\u00e9\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>\\nx\\n</think>\\n\\nIt is 6.\", \"reasoning_content\": \"r\","
    " \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"mul\", \"arguments\": {\"a\": 2, \"b\": 3.5}}}]},"
    " {\"role\": \"tool\", \"content\": \"6\"}, {\"role\": \"user\", \"content\": \"\"}]";
static const char EXTRA[] =
    "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"mul\", \"parameters\": {\"a\": [1, null, true]}}}],"
    " \"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static cJSON *msgs, *extra;
    if (!msgs) {
        msgs = cJSON_Parse(MESSAGES);
        extra = cJSON_Parse(EXTRA);
        if (!msgs || !extra) abort();
    }
    if (size < 1) return 0;
    ChatTemplate *t = NULL;
    GtError err = {0};
    if (chat_template_parse(&t, (const char *)data + 1, size - 1, "fuzz.jinja", &err)) {
        if (t || err.code != GT_EXIT_BAD_INPUT || strncmp(err.msg, "fuzz.jinja:", 11) || strchr(err.msg, '\n')) abort();
        return 0;
    }
    ChatRenderOptions o = {.add_generation_prompt = data[0] & 1, .bos_token = "<s>", .eos_token = "</s>",
                           .extra = (data[0] & 2) ? extra : NULL, .date_string = (data[0] & 4) ? "26 Jul 2024" : NULL};
    GtBytes out = {0};
    ChatSpan *s = NULL;
    size_t ns = 0;
    if (chat_template_render(t, msgs, &o, &out, &s, &ns, &err) == 0) {
        for (size_t i = 0; i < ns; i++)
            if (s[i].start > s[i].end || s[i].end > out.n || (i && s[i].start < s[i - 1].start)) abort();
    } else if (s || ns || err.code != GT_EXIT_BAD_INPUT || strncmp(err.msg, "fuzz.jinja", 10) || strchr(err.msg, '\n')) {
        abort();
    }
    free(s);
    gt_bytes_free(&out);
    chat_template_free(t);
    return 0;
}
