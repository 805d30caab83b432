/* tokenize_data.c - `gtrain tokenize --data FILE`: a training data file read exactly as the trainer
 * reads it (data.h: the same format detection, column mapping, templates, tokenizer and EOS rule),
 * each example printed as one line: its token ids, or with --mask its labels (the id where the
 * token trains, -100 where it does not: TRL's `labels`), or with --render the text that was
 * tokenized (the rendered chat, the filled templates) as one JSON string; a row of token ids, which
 * has no text, renders as its ids decoded (special tokens kept).
 * See tokenize_cmd.h. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "data.h"
#include "json_string.h"
#include "tokenize_cmd.h"
#include "tokenizer.h"

/* --column ROLE=COLUMN into text's column of that role; false when it names none */
static bool set_column(DataText *text, const char *v) {
    const char *eq = strchr(v, '=');
    size_t n = eq ? (size_t)(eq - v) : 0;
    const char **slot = !eq                                         ? NULL
                        : n == 4 && strncmp(v, "text", 4) == 0        ? &text->col_text
                        : n == 6 && strncmp(v, "prompt", 6) == 0      ? &text->col_prompt
                        : n == 10 && strncmp(v, "completion", 10) == 0 ? &text->col_completion
                        : n == 8 && strncmp(v, "messages", 8) == 0    ? &text->col_messages
                                                                      : NULL;
    if (!slot || !eq[1]) return false;
    *slot = eq + 1;
    return true;
}

int tokenize_data_command(const CliArgs *a) {
    const char *path = cli_value(a, "data"), *tokenizer = cli_value(a, "tokenizer"), *fmt = cli_value(a, "format");
    DataFormat format = DATA_AUTO;
    DataText text = {.add_eos = !cli_given(a, "no-eos"), .assistant_only_loss = true,
                     .prompt_template = cli_value(a, "prompt-template"),
                     .completion_template = cli_value(a, "completion-template"),
                     .chat_template = cli_value(a, "chat-template")};
    const bool mask = cli_given(a, "mask"), render = cli_given(a, "render");
    text.keep_text = render;
    if (fmt) {
        int f = -1;
        for (int i = 0; strcmp(config_data_format_name((DataFormat)i), "?") != 0; i++)
            if (strcmp(fmt, config_data_format_name((DataFormat)i)) == 0) f = i;
        if (f < 0 || f == DATA_TOKENS)
            return cli_error(a->cmd, "--format: expected auto, text, jsonl, json or parquet, found \"%s\"", fmt);
        format = (DataFormat)f;
    }
    const char **columns = gt_xcalloc((size_t)a->n_values + 1, sizeof *columns);
    const int n_columns = cli_values(a, "column", columns);
    for (int i = 0; i < n_columns; i++)
        if (!set_column(&text, columns[i])) {
            int rc = cli_error(a->cmd, "--column: expected text|prompt|completion|messages=COLUMN, found \"%s\"", columns[i]);
            free(columns);
            return rc;
        }
    free(columns);
    if (a->n_operands > 0)
        return cli_error(a->cmd, "%s: --data reads one file, expected no other input", a->operands[0]);
    if (!*path) return cli_error(a->cmd, "--data: expected a file name");
    if (mask && render) return cli_error(a->cmd, "--mask and --render: expected one of them");
    if (!tokenizer) return cli_error(a->cmd, "--tokenizer FILE|DIR (or none: byte-level) is required with --data");
    char why[200];
    if ((text.prompt_template && data_template_why(text.prompt_template, why, sizeof why) != 0) ||
        (text.completion_template && data_template_why(text.completion_template, why, sizeof why) != 0))
        return cli_error(a->cmd, "--prompt-template/--completion-template: %s", why);
    GtError err = {0};
    Tokenizer *tok = NULL;
    DataSource *d = NULL;
    int rc = 0;
    if (strcmp(tokenizer, "none") != 0) rc = tokenizer_load(&tok, tokenizer, &err);
    if (rc == 0) {
        text.tok = tok;
        text.eos_id = tok ? tokenizer_eos_id(tok) : -1;
        if (!tok) text.add_eos = false;
        /* unpacked with the longest rows there are: every example whole, untruncated (the rows
         * themselves are not used) */
        rc = data_open_text(&d, path, format, false, INT32_MAX - 1, tok ? tokenizer_vocab_size(tok) : 256,
                            DATA_SPLIT_ALL, 0.0, &text, &err);
    }
    if (rc == 0) {
        GtBytes line = {0};
        for (uint64_t e = 0; e < data_num_examples(d); e++) {
            const int32_t *ids;
            const uint8_t *m;
            int32_t n = data_example(d, e, &ids, &m);
            line.n = 0;
            size_t kl;
            const char *kept = render ? data_example_text(d, e, &kl) : NULL;
            if (kept) {
                json_string_encode(&line, kept, kl);
                n = 0;
            } else if (render) { /* a row of ids: the text they spell */
                char *txt = NULL;
                size_t tl = 0;
                if (tok && tokenizer_decode(tok, ids, (size_t)n, false, &txt, &tl, &err) != 0) {
                    rc = -1;
                    break;
                }
                if (!tok) {
                    txt = gt_xmalloc((size_t)n + 1);
                    for (int32_t j = 0; j < n; j++) txt[j] = (char)ids[j];
                    tl = (size_t)n;
                }
                json_string_encode(&line, txt, tl);
                free(txt);
                n = 0;
            }
            for (int32_t j = 0; j < n; j++) {
                char num[16];
                int k = snprintf(num, sizeof num, "%s%d", j ? " " : "", mask && !m[j] ? -100 : ids[j]);
                gt_bytes_put(&line, num, (size_t)k);
            }
            gt_bytes_put(&line, "\n", 1);
            if (fwrite(line.p, 1, line.n, stdout) != line.n) {
                rc = gt_error(&err, GT_EXIT_FAILURE, "tokenize: cannot write to standard output");
                break;
            }
        }
        gt_bytes_free(&line);
    }
    data_close(d);
    tokenizer_free(tok);
    if (fflush(stdout) != 0 && rc == 0) rc = gt_error(&err, GT_EXIT_FAILURE, "tokenize: cannot write to standard output");
    return rc != 0 ? cli_fail(&err) : GT_EXIT_OK;
}
