/* tokenize_data.c - `gtrain tokenize --data FILE`: a training data file read exactly as the trainer
 * reads it (data.h: the same format detection, column mapping, templates, tokenizer and EOS rule),
 * each example printed as one line: its token ids, or with --mask its labels (the id where the
 * token trains, -100 where it does not: TRL's `labels`), or with --render the text that was
 * tokenized (the rendered chat, the filled templates) as one JSON string; a row of token ids, which
 * has no text, renders as its ids decoded (special tokens kept).
 * See tokenize_cmd.h. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "data.h"
#include "json_string.h"
#include "tokenize_cmd.h"
#include "tokenizer.h"

bool tokenize_data_wanted(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) return false;
        if (strcmp(argv[i], "--data") == 0 || strncmp(argv[i], "--data=", 7) == 0) return true;
    }
    return false;
}

enum { D_DATA = 1, D_TOKENIZER, D_FORMAT, D_COLUMN, D_PROMPT_T, D_COMPLETION_T, D_NO_EOS, D_MASK, D_RENDER, D_CHAT, D_HELP };

int tokenize_data_command(int argc, char **argv) {
    static const struct option opts[] = {
        {"data", required_argument, NULL, D_DATA},
        {"tokenizer", required_argument, NULL, D_TOKENIZER},
        {"format", required_argument, NULL, D_FORMAT},
        {"column", required_argument, NULL, D_COLUMN},
        {"prompt-template", required_argument, NULL, D_PROMPT_T},
        {"completion-template", required_argument, NULL, D_COMPLETION_T},
        {"no-eos", no_argument, NULL, D_NO_EOS},
        {"mask", no_argument, NULL, D_MASK},
        {"render", no_argument, NULL, D_RENDER},
        {"chat-template", required_argument, NULL, D_CHAT},
        {"help", no_argument, NULL, D_HELP},
        {0, 0, 0, 0},
    };
    const char *path = NULL, *tokenizer = NULL;
    DataFormat format = DATA_AUTO;
    DataText text = {.add_eos = true, .assistant_only_loss = true};
    bool mask = false, render = false;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case D_DATA: path = optarg; break;
        case D_TOKENIZER: tokenizer = optarg; break;
        case D_FORMAT: {
            int f = -1;
            for (int i = 0; strcmp(config_data_format_name((DataFormat)i), "?") != 0; i++)
                if (strcmp(optarg, config_data_format_name((DataFormat)i)) == 0) f = i;
            if (f < 0 || f == DATA_TOKENS)
                return tokenize_usage_error("--format: expected auto, text, jsonl, json or parquet, found \"%s\"", optarg);
            format = (DataFormat)f;
            break;
        }
        case D_COLUMN: { /* NAME=COLUMN */
            const char *eq = strchr(optarg, '=');
            size_t n = eq ? (size_t)(eq - optarg) : 0;
            const char **slot = !eq                                           ? NULL
                                : n == 4 && strncmp(optarg, "text", 4) == 0        ? &text.col_text
                                : n == 6 && strncmp(optarg, "prompt", 6) == 0      ? &text.col_prompt
                                : n == 10 && strncmp(optarg, "completion", 10) == 0 ? &text.col_completion
                                : n == 8 && strncmp(optarg, "messages", 8) == 0    ? &text.col_messages
                                                                                   : NULL;
            if (!slot || !eq[1])
                return tokenize_usage_error("--column: expected text|prompt|completion|messages=COLUMN, found \"%s\"", optarg);
            *slot = eq + 1;
            break;
        }
        case D_PROMPT_T: text.prompt_template = optarg; break;
        case D_COMPLETION_T: text.completion_template = optarg; break;
        case D_NO_EOS: text.add_eos = false; break;
        case D_MASK: mask = true; break;
        case D_RENDER: render = text.keep_text = true; break;
        case D_CHAT: text.chat_template = optarg; break;
        case D_HELP: tokenize_print_usage(stdout); return GT_EXIT_OK;
        case ':': return tokenize_usage_error("%s: expected a value", argv[optind - 1]);
        default: return tokenize_usage_error("%s: unknown option with --data", argv[optind - 1]);
        }
    }
    if (optind < argc) return tokenize_usage_error("%s: --data reads one file, expected no other input", argv[optind]);
    if (!path || !*path) return tokenize_usage_error("--data: expected a file name");
    if (mask && render) return tokenize_usage_error("--mask and --render: expected one of them");
    if (!tokenizer) return tokenize_usage_error("--tokenizer FILE|DIR (or none: byte-level) is required with --data");
    char why[200];
    if ((text.prompt_template && data_template_why(text.prompt_template, why, sizeof why) != 0) ||
        (text.completion_template && data_template_why(text.completion_template, why, sizeof why) != 0))
        return tokenize_usage_error("--prompt-template/--completion-template: %s", why);
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
    if (rc != 0) {
        fprintf(stderr, "gtrain: %s\n", err.msg);
        return err.code ? err.code : GT_EXIT_FAILURE;
    }
    return GT_EXIT_OK;
}
