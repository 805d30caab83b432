/* test_data_formats.c - data as downloaded: JSON arrays (streamed), parquet (written by pyarrow)
 * and jsonl rows of text, messages,
 * prompt/completion or templates, with columns mapped by data.columns, read by `gtrain tokenize
 * --data` (the trainer's own reader) and compared, ids and labels, with TRL's own SFTTrainer data
 * preparation (tests/tools/trl_sft_labels.py, in the references' venv) on the same rows through the
 * shared folder's real tokenizers; the JSON array reader over a file larger than its read chunk in
 * memory bounded by the tokens (peak RSS against the same data as jsonl, which is read whole);
 * and a table of bad inputs: one line naming the file and the row, exit 2, nothing printed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "run_util.h"
#include "test_backend_select.h"
#include "test_util.h"
#include "tok_hf_util.h"

/* MetaMathQA-like (query/response), GSM8K-like (question/answer), pissa-dataset-like
 * (instruction/output, with its `type` column), and plain text rows. */
static const char *const ROWS_MATH =
    "{\"query\": \"What is 12 plus 30?\", \"response\": \"12 + 30 = 42. The answer is: 42\", \"type\": \"GSM_AnsAug\"}\n"
    "{\"query\": \"Résumé: the café's menu — 2 items at €3.50 each; total?\", \"response\": \"2 * 3.50 = 7.00.\\nThe "
    "answer is: €7.00\", \"type\": \"MATH_Rephrased\"}\n"
    "{\"query\": \"日本語で 1+1 は?\", \"response\": \"1+1 = 2。The answer is: 2\", \"type\": \"GSM_SV\"}\n";
static const char *const ROWS_GSM =
    "{\"question\": \"Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?\", \"answer\": \"Natalia sold 48/2 = <<48/2=24>>24 "
    "clips in May.\\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\\n#### 72\"}\n"
    "{\"question\": \"Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How "
    "much did she earn?\", \"answer\": \"Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\\n#### 10\"}\n";
static const char *const ROWS_PISSA =
    "{\"instruction\": \"Write a Python function that returns the square of x.\", \"output\": \"def square(x):\\n    "
    "return x * x\", \"type\": \"python\"}\n"
    "{\"instruction\": \"Solve: 3x = 12\", \"output\": \"x = 4\", \"type\": \"metamath\"}\n";
static const char *const ROWS_TEXT =
    "{\"text\": \"The quick brown fox jumps over the lazy dog.\"}\n"
    "{\"text\": \"Spaces, tabs\\tand\\nnewlines; unicode: naïve café 日本 🙂\"}\n"
    "{\"text\": \"x\"}\n";

/* jsonl text as a JSON array of the same objects */
static char *as_array(const char *jsonl) {
    size_t n = strlen(jsonl);
    char *out = malloc(2 * n + 16);
    cr_assert_not_null(out);
    size_t o = 0;
    out[o++] = '[';
    const char *p = jsonl;
    bool first = true;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len) {
            o += (size_t)sprintf(out + o, "%s\n  ", first ? "" : ",");
            memcpy(out + o, p, len);
            o += len;
            first = false;
        }
        p += len + (nl ? 1 : 0);
    }
    o += (size_t)sprintf(out + o, "\n]\n");
    out[o] = 0;
    return out;
}

/* `gtrain tokenize --data` with args: "ids<TAB>labels" a line, as the reference prints them */
static char *gtrain_ids_labels(const char *dir, const char *tok, const char *file, const char *args) {
    char *ids = test_sh_output(false, "cd '%s' && '%s' tokenize --data '%s' --tokenizer '%s' %s", dir,
                               test_gtrain_bin(), file, tok, args);
    char *labels = test_sh_output(false, "cd '%s' && '%s' tokenize --data '%s' --tokenizer '%s' %s --mask", dir,
                                  test_gtrain_bin(), file, tok, args);
    cr_assert(ids && labels, "gtrain tokenize --data %s failed", file);
    size_t cap = 2 * (strlen(ids) + strlen(labels)) + 16, o = 0;
    char *out = malloc(cap);
    cr_assert_not_null(out);
    const char *a = ids, *b = labels;
    while (*a && *b) {
        const char *na = strchr(a, '\n'), *nb = strchr(b, '\n');
        cr_assert(na && nb);
        o += (size_t)snprintf(out + o, cap - o, "%.*s\t%.*s\n", (int)(na - a), a, (int)(nb - b), b);
        a = na + 1;
        b = nb + 1;
    }
    cr_assert(!*a && !*b, "ids and labels differ in their line counts");
    out[o] = 0;
    free(ids);
    free(labels);
    return out;
}

/* the rows in dir as jsonl and as a JSON array, through gtrain and through TRL (renamed as mapped) */
static void check_against_trl(const char *tok_dir, const char *name, const char *rows, const char *gt_args,
                              const char *trl_args) {
    test_require_refs();
    char tok_json[600], dir[128];
    ref_tokenizer_file(tok_dir, tok_json, sizeof tok_json);
    char tokdir[600];
    snprintf(tokdir, sizeof tokdir, "%.*s", (int)(strrchr(tok_json, '/') - tok_json), tok_json);
    test_scratch_make(dir, sizeof dir, "gt_data_formats");
    char jl[64], js[64];
    snprintf(jl, sizeof jl, "%s.jsonl", name);
    snprintf(js, sizeof js, "%s.json", name);
    test_write_file(test_join(dir, jl), rows, strlen(rows));
    char *arr = as_array(rows);
    test_write_file(test_join(dir, js), arr, strlen(arr));
    free(arr);
    char *ref = test_sh_output(false, "cd '%s' && timeout 300 " PY " '%s/tests/tools/trl_sft_labels.py' '%s' '%s' %s", dir,
                               getenv("GTRAIN_ROOT"), tokdir, jl, trl_args);
    cr_assert(ref && *ref, "the TRL reference failed on %s", jl);
    /* the same rows as parquet, written by pyarrow (strings; messages as list<struct<role, content>>) */
    char pq[64];
    snprintf(pq, sizeof pq, "%s.parquet", name);
    char *w = test_sh_output(true, "cd '%s' && " PY " -c 'import json, sys, pyarrow as pa, pyarrow.parquet as pq; "
                                   "rows = [json.loads(l) for l in open(sys.argv[1], encoding=\"utf-8\") if l.strip()]; "
                                   "pq.write_table(pa.Table.from_pylist(rows), sys.argv[2], row_group_size=2, "
                                   "compression=\"zstd\")' '%s' '%s' && echo ok",
                             dir, jl, pq);
    cr_assert(w && strstr(w, "ok"), "pyarrow could not write %s: %s", pq, w ? w : "");
    free(w);
    char *c = gtrain_ids_labels(dir, tokdir, pq, gt_args);
    cr_expect_str_eq(c, ref, "%s/%s: gtrain's ids/labels (parquet) differ from TRL's:\n%s\nTRL:\n%s", tok_dir, name, c,
                     ref);
    free(c);
    char *a = gtrain_ids_labels(dir, tokdir, jl, gt_args);
    char *b = gtrain_ids_labels(dir, tokdir, js, gt_args);
    cr_expect_str_eq(a, ref, "%s/%s: gtrain's ids/labels (jsonl) differ from TRL's:\n%s\nTRL:\n%s", tok_dir, name, a, ref);
    cr_expect_str_eq(b, ref, "%s/%s: gtrain's ids/labels (JSON array) differ from TRL's:\n%s\nTRL:\n%s", tok_dir, name, b,
                     ref);
    cr_log_info("%s/%s: %d examples equal TRL's", tok_dir, name, count_lines(ref));
    free(ref);
    free(a);
    free(b);
    test_scratch_remove(dir);
}

static void all_kinds(const char *tok_dir) {
    check_against_trl(tok_dir, "metamath", ROWS_MATH, "--column prompt=query --column completion=response",
                      "prompt=query completion=response");
    check_against_trl(tok_dir, "gsm8k", ROWS_GSM, "--column prompt=question --column completion=answer",
                      "prompt=question completion=answer");
    check_against_trl(tok_dir, "pissa", ROWS_PISSA, "--column prompt=instruction --column completion=output",
                      "prompt=instruction completion=output");
    check_against_trl(tok_dir, "text", ROWS_TEXT, "", "");
}

/* conversations: system, multi-turn, unicode, an empty assistant turn; mapped from `conversations` */
static const char *const ROWS_CHAT =
    "{\"conversations\": [{\"role\": \"system\", \"content\": \"You are a careful math tutor.\"}, {\"role\": "
    "\"user\", \"content\": \"What is 2+2?\"}, {\"role\": \"assistant\", \"content\": \"2 + 2 = 4.\"}, "
    "{\"role\": \"user\", \"content\": \"And 3·3? Answer in français.\"}, {\"role\": \"assistant\", \"content\": "
    "\"3 · 3 = 9 — neuf 🙂\"}]}\n"
    "{\"conversations\": [{\"role\": \"user\", \"content\": \"Say nothing.\"}, {\"role\": \"assistant\", "
    "\"content\": \"\"}]}\n"
    "{\"conversations\": [{\"role\": \"user\", \"content\": \"Résumé:\\n- line one\\n- line two\"}, {\"role\": "
    "\"assistant\", \"content\": \"Two lines.\\nDone.\"}]}\n";

/* Llama-3.1: its own template (TRL swaps in its llama3 training template, whose spans the renderer
 * follows); Qwen3: TRL's qwen3_training.jinja (TRL cannot patch this checkpoint's template), given
 * to both as --chat-template. */
Test(data_formats, llama3_1_messages_match_trl_assistant_masks, .timeout = 600) {
    check_against_trl("llama3_1", "chat", ROWS_CHAT, "--column messages=conversations", "messages=conversations");
}
Test(data_formats, qwen3_messages_match_trl_assistant_masks, .timeout = 600) {
    test_require_refs();
    char *tmpl = test_sh_output(false, PY " -c 'import os, trl; print(os.path.join(os.path.dirname(trl.__file__), "
                                       "\"chat_templates\", \"qwen3_training.jinja\"), end=\"\")'");
    cr_assert(tmpl && *tmpl, "no TRL chat template path");
    char gt_args[700], trl_args[700];
    snprintf(gt_args, sizeof gt_args, "--column messages=conversations --chat-template '%s'", tmpl);
    snprintf(trl_args, sizeof trl_args, "messages=conversations '--chat-template=%s'", tmpl);
    check_against_trl("qwen3", "chat", ROWS_CHAT, gt_args, trl_args);
    free(tmpl);
}

/* Llama-2 (SentencePiece-style: a prepended and replaced ▁, <0xXX> byte tokens): Meta's
 * Llama-2-chat template with {% generation %} around each answer (TRL's assistant_only_loss needs
 * the markers; the space before the answer is outside, so the ▁ token that holds it tests the
 * offsets' overlap rule), given to both as --chat-template. The mask follows the tokenizer's
 * offsets (tok_encode_offsets), as transformers' char_to_token does. */
static const char LLAMA2_CHAT[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' }}{% generation %}{{ content.strip() + ' ' + eos_token }}"
    "{% endgeneration %}{% endif %}{% endfor %}";
Test(data_formats, llama2_messages_match_trl_assistant_masks, .timeout = 600) {
    char dir[128], gt_args[300], trl_args[300];
    test_scratch_make(dir, sizeof dir, "gt_llama2_chat");
    const char *tmpl = test_join(dir, "llama2-chat.jinja");
    test_write_file(tmpl, LLAMA2_CHAT, strlen(LLAMA2_CHAT));
    snprintf(gt_args, sizeof gt_args, "--column messages=conversations --chat-template '%s'", tmpl);
    snprintf(trl_args, sizeof trl_args, "messages=conversations '--chat-template=%s'", tmpl);
    check_against_trl("llama2", "chat", ROWS_CHAT, gt_args, trl_args);
    test_scratch_remove(dir);
}

Test(data_formats, llama3_1_rows_match_trl, .timeout = 600) { all_kinds("llama3_1"); }
Test(data_formats, qwen3_rows_match_trl, .timeout = 600) { all_kinds("qwen3"); }
Test(data_formats, llama2_rows_match_trl, .timeout = 600) { all_kinds("llama2"); }

/* ------------------------------------------------------------------------------------------- */

/* Byte-level: every example's tokens are its prompt bytes (mask 0) then completion bytes (mask 1);
 * a JSON array over 3 MiB (elements crossing the 1 MiB read chunks, one element larger than a
 * chunk) gives exactly those, in order. */
Test(data_formats, json_array_across_read_chunks_byte_level) {
    char dir[128];
    test_scratch_make(dir, sizeof dir, "gt_data_formats");
    enum { N = 700 };
    static char prompt[N][48], completion[N][48];
    size_t cap = (size_t)8 << 20, o = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    o += (size_t)sprintf(buf + o, "[\n");
    uint64_t st = 7;
    for (int i = 0; i < N; i++) {
        snprintf(prompt[i], sizeof prompt[i], "q%d:%llu", i, (unsigned long long)(rng_next(&st) % 100000));
        snprintf(completion[i], sizeof completion[i], "a%d", i);
        size_t pad = i == 300 ? ((size_t)1 << 20) + 12345 : (size_t)(rng_next(&st) % 8000); /* an ignored member */
        o += (size_t)sprintf(buf + o, "%s{\"q\": \"%s\", \"pad\": \"", i ? ",\n " : " ", prompt[i]);
        memset(buf + o, 'x', pad);
        o += pad;
        o += (size_t)sprintf(buf + o, "\", \"r\": \"%s\", \"n\": [1, {\"k\": \"]}\"}]}", completion[i]);
        cr_assert_lt(o, cap - 4096);
    }
    o += (size_t)sprintf(buf + o, "\n]\n");
    cr_assert_gt(o, (size_t)3 << 20);
    const char *path = test_join(dir, "big.json");
    test_write_file(path, buf, o);
    free(buf);
    DataText text = {.col_prompt = "q", .col_completion = "r", .eos_id = -1};
    DataSource *d = NULL;
    GtError err = {0};
    cr_assert_eq(data_open_text(&d, path, DATA_AUTO, false, 40, 256, DATA_SPLIT_ALL, 0, &text, &err), 0, "%s", err.msg);
    cr_assert_eq(data_num_examples(d), (uint64_t)N);
    for (int i = 0; i < N; i++) {
        const int32_t *tok;
        const uint8_t *m;
        int32_t n = data_example(d, (uint64_t)i, &tok, &m);
        size_t pl = strlen(prompt[i]), cl = strlen(completion[i]);
        cr_assert_eq((size_t)n, pl + cl, "example %d: %d tokens, expected %zu", i, n, pl + cl);
        for (size_t j = 0; j < pl + cl; j++) {
            int want = (unsigned char)(j < pl ? prompt[i][j] : completion[i][j - pl]);
            cr_assert_eq(tok[j], want, "example %d token %zu", i, j);
            cr_assert_eq(m[j], j >= pl, "example %d mask %zu", i, j);
        }
    }
    data_close(d);
    test_scratch_remove(dir);
}

/* this process's peak resident set (VmHWM), KiB */
static long peak_rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    cr_assert_not_null(f);
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kib = strtol(line + 6, NULL, 10);
    fclose(f);
    cr_assert_gt(kib, 0);
    return kib;
}

/* how much the peak RSS grows while path is opened (byte-level, prompt/completion) */
static long open_growth_kib(const char *path) {
    long before = peak_rss_kib();
    DataSource *d = NULL;
    GtError err = {0};
    cr_assert_eq(data_open_text(&d, path, DATA_AUTO, false, 16, 256, DATA_SPLIT_ALL, 0, NULL, &err), 0, "%s", err.msg);
    long after = peak_rss_kib();
    cr_assert_eq(data_num_examples(d), 64);
    data_close(d);
    return after - before;
}

/* 64 elements of 1 MiB each (an ignored member) and tiny examples: as a JSON array the reader holds
 * about one element (a 1-2 MiB window); the same rows as jsonl are read whole (64 MiB more). The
 * array is measured first (the peak only grows). */
Test(data_formats, json_array_memory_is_bounded_by_the_tokens, .timeout = 120) {
    char dir[128];
    test_scratch_make(dir, sizeof dir, "gt_data_formats");
    enum { N = 64 };
    const size_t pad = (size_t)1 << 20;
    char *el = malloc(pad + 128);
    cr_assert_not_null(el);
    FILE *fa = fopen(test_join(dir, "big.json"), "w"), *fl = fopen(test_join(dir, "big.jsonl"), "w");
    cr_assert(fa && fl);
    fputs("[", fa);
    for (int i = 0; i < N; i++) {
        int k = sprintf(el, "{\"prompt\": \"p%d\", \"completion\": \"c%d\", \"blob\": \"", i, i);
        memset(el + k, 'b', pad);
        strcpy(el + k + pad, "\"}");
        fprintf(fa, "%s%s", i ? ",\n" : "", el);
        fprintf(fl, "%s\n", el);
    }
    fputs("]\n", fa);
    fclose(fa);
    fclose(fl);
    free(el);
    long grow_array = open_growth_kib(test_join(dir, "big.json"));
    long grow_lines = open_growth_kib(test_join(dir, "big.jsonl"));
    cr_log_info("peak RSS growth: JSON array %ld KiB, jsonl %ld KiB (file %d MiB)", grow_array, grow_lines, N);
    if (UNDER_SANITIZER) { /* both files were read (the sanitizer checked the reading); the RSS says nothing */
        test_scratch_remove(dir);
        return;
    }
    cr_expect_gt(grow_lines, 48 * 1024, "jsonl grew the peak by %ld KiB only: the measure does not work", grow_lines);
    cr_expect_lt(grow_array, 8 * 1024, "the JSON array grew the peak by %ld KiB: not streamed", grow_array);
    test_scratch_remove(dir);
}

/* ------------------------------------------------------------------------------------------- */

typedef struct {
    const char *file, *content, *args, *n1, *n2;
} BadCase;

Test(data_formats, bad_input_is_one_line_naming_file_and_row) {
    static const BadCase cases[] = {
        {"m.json", "[{\"query\": \"a\", \"response\": \"b\"}, {\"query\": \"a\"}]",
         "--column prompt=query --column completion=response", "m.json: element 2", "\"response\""},
        {"m.jsonl", "{\"query\": \"a\", \"response\": \"b\"}\n{\"query\": \"a\", \"response\": 7}\n",
         "--column prompt=query --column completion=response", "m.jsonl:2", "\"response\""},
        {"t.json", "[{\"text\": \"a\"}, {\"text\": 3}]", "", "t.json: element 2", "\"text\""},
        {"t2.json", "[{\"text\": \"a\"}, {\"prompt\": \"b\", \"completion\": \"c\"}]", "", "t2.json: element 2",
         "\"text\" is missing"},
        {"c.json", "[{\"text\": \"a\"} {\"text\": \"b\"}]", "", "c.json: byte offset 15", "',' or ']' after element 1"},
        {"e.json", "[{\"text\": \"a\"},", "", "e.json: byte offset 15", "the end of the file"},
        {"o.json", "{\"text\": \"a\"}", "", "o.json: byte offset 0", "'['"},
        {"s.json", "[{\"text\": \"a\"}, \"b\"]", "", "s.json: element 2", "expected an object"},
        {"g.json", "[{\"text\": \"a\"}] x", "", "g.json: byte offset 16", "end of the file"},
        {"j.json", "[{\"text\": \"a\"}, {\"text\": \"b}]", "", "j.json: element 2", "bad JSON"},
        {"d.json", "[{\"text\": \"a\", \"text\": \"b\"}]", "", "d.json: element 1", "twice"},
        {"two.json", "[{\"text\": \"a\", \"q\": \"b\"}]", "--column text=text --column prompt=q", "two.json",
         "more than one kind"},
        {"n.json", "[]", "", "n.json", "holds no examples"},
        {"p.parquet", "PAR1 not really", "", "p.parquet", "expected"},
        {"r.json", "[{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\"}]}]",
         "--chat-template ct.jinja", "r.json: element 1", "\"messages\"[1] has no string \"content\""},
        {"r2.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n{\"msgs\": []}\n",
         "--chat-template ct.jinja", "r2.jsonl:2", "\"messages\" is missing"},
        {"r3.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n{\"messages\": [{\"role\": \"bot\", \"content\": \"b\"}]}\n",
         "--chat-template ct.jinja", "r3.jsonl:2", "unknown role bot"},
    };
    char dir[128];
    test_scratch_make(dir, sizeof dir, "gt_data_formats");
    static const char ct[] = "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
                             "{{ raise_exception('unknown role ' + m.role) }}{% endif %}<{{ m.role }}>{{ m.content }}"
                             "{% endfor %}";
    test_write_file(test_join(dir, "ct.jinja"), ct, strlen(ct));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const BadCase *c = &cases[i];
        test_write_file(test_join(dir, c->file), c->content, strlen(c->content));
        char *out = test_sh_output(true, "cd '%s' && '%s' tokenize --data '%s' --tokenizer none %s > out.txt 2> err.txt; "
                                         "echo \"rc=$?\"; cat err.txt; wc -c < out.txt",
                                   dir, test_gtrain_bin(), c->file, c->args);
        cr_assert_not_null(out);
        cr_expect(strncmp(out, "rc=2\n", 5) == 0, "%s: expected exit 2: %s", c->file, out);
        const char *msg = strchr(out, '\n') ? strchr(out, '\n') + 1 : out;
        const char *end = strchr(msg, '\n');
        cr_expect(end && strcmp(end + 1, "0\n") == 0, "%s: expected one line and nothing printed: %s", c->file, out);
        cr_expect(strstr(msg, c->n1) && strstr(msg, c->n2), "%s: expected \"%s\" and \"%s\" in: %s", c->file, c->n1,
                  c->n2, msg);
        free(out);
    }
    test_scratch_remove(dir);
}

/* The trainer reads the same way: a JSON array through data.format auto and data.columns, one step
 * over both examples; num_items (the targets that count) is the completion bytes, counted here. */
Test(data_formats, trainer_reads_a_json_array_through_data_columns, .timeout = 120) {
    char dir[128];
    test_scratch_make(dir, sizeof dir, "gt_data_formats");
    static const char *const query[] = {"What is 12 plus 30?", "Compute 7 * 8."};
    static const char *const response[] = {"42", "7 * 8 = 56"};
    char data[512];
    snprintf(data, sizeof data, "[{\"query\": \"%s\", \"response\": \"%s\"},\n {\"query\": \"%s\", \"response\": \"%s\"}]\n",
             query[0], response[0], query[1], response[1]);
    test_write_file(test_join(dir, "d.json"), data, strlen(data));
    static const char model[] =
        "{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 256, \"n_positions\": 64}";
    test_write_file(test_join(dir, "m.json"), model, strlen(model));
    static const char cfg[] = "model: m.json\ntokenizer: none\ndata:\n  train: d.json\n  format: auto\n  seq_len: 48\n"
                              "  columns: {prompt: query, completion: response}\nper_device_train_batch_size: 2\n"
                              "max_steps: 1\nlogging_steps: 1\noutput_dir: out\noverwrite_output_dir: true\n"
                              "sample_max_new_tokens: 0\n";
    test_write_file(test_join(dir, "r.yaml"), cfg, strlen(cfg));
    char *out = test_sh_output(true, "cd '%s' && '%s' train --config r.yaml > log.txt 2>&1; echo $?", dir,
                               test_gtrain_bin());
    cr_assert(out && strcmp(out, "0\n") == 0, "gtrain train failed: %s", out ? out : "");
    free(out);
    Losses l;
    read_train_metrics(test_join(dir, "out"), &l);
    long expected = (long)(strlen(response[0]) + strlen(response[1]));
    cr_assert_eq(l.num_items[0], expected, "num_items %ld, expected %ld (the completion bytes)", l.num_items[0],
                 expected);
    test_scratch_remove(dir);
}

/* --render: each messages row's text is transformers' apply_chat_template text, for byte-level
 * tokenizers (Llama-3.1, Qwen3) and a SentencePiece one (Llama-2, whose ids decode to other text:
 * "<s> [INST]" for "<s>[INST]"); a templated prompt/completion row's is the filled templates end to end. */
Test(data_formats, render_is_transformers_chat_text, .timeout = 300) {
    test_require_refs();
    static const char *const toks[] = {"llama2", "llama3_1", "qwen3"};
    char tok_json[600], tokdir[3][600], dir[128];
    for (int i = 0; i < 3; i++) {
        ref_tokenizer_file(toks[i], tok_json, sizeof tok_json);
        snprintf(tokdir[i], sizeof tokdir[i], "%.*s", (int)(strrchr(tok_json, '/') - tok_json), tok_json);
    }
    test_scratch_make(dir, sizeof dir, "gt_data_formats");
    test_write_file(test_join(dir, "chat.jsonl"), ROWS_CHAT, strlen(ROWS_CHAT));
    test_write_file(test_join(dir, "llama2.jinja"), LLAMA2_CHAT, strlen(LLAMA2_CHAT));
    static const char qa[] = "{\"q\": \"2+2?\", \"a\": \"4 \\u00e9\"}\n{\"q\": \"\", \"a\": \"x\\ny\"}\n";
    test_write_file(test_join(dir, "qa.jsonl"), qa, strlen(qa));
    char *out = test_sh_output(
        true,
        "cd '%s' && G='%s' && C='--data chat.jsonl --column messages=conversations --render' && "
        "$G tokenize $C --tokenizer '%s' --chat-template llama2.jinja > r.txt && "
        "$G tokenize $C --tokenizer '%s' >> r.txt && $G tokenize $C --tokenizer '%s' >> r.txt && "
        "$G tokenize --data qa.jsonl --tokenizer '%s' --prompt-template \"$(printf 'Q: {q}\\nA:')\" --completion-template ' {a}' "
        "--render > qa.txt && "
        PY " -c 'import json, sys; from transformers import AutoTokenizer; "
        "rows = [json.loads(l)[\"conversations\"] for l in open(\"chat.jsonl\", encoding=\"utf-8\")]; "
        "got = [json.loads(l) for l in open(\"r.txt\", encoding=\"utf-8\")]; "
        "tmpl = [open(\"llama2.jinja\").read(), None, None]; "
        "want = [AutoTokenizer.from_pretrained(d).apply_chat_template(r, chat_template=t, tokenize=False) "
        "for d, t in zip(sys.argv[1:], tmpl) for r in rows]; "
        "qa = [json.loads(l) for l in open(\"qa.jsonl\", encoding=\"utf-8\")]; "
        "got_qa = [json.loads(l) for l in open(\"qa.txt\", encoding=\"utf-8\")]; "
        "want_qa = [\"Q: %%s\\nA: %%s\" %% (r[\"q\"], r[\"a\"]) for r in qa]; "
        "print(\"ok\" if got == want and got_qa == want_qa else \"differ: %%r vs %%r, %%r vs %%r\" %% (got, want, got_qa, want_qa))' "
        "'%s' '%s' '%s' 2>/dev/null",
        dir, test_gtrain_bin(), tokdir[0], tokdir[1], tokdir[2], tokdir[0], tokdir[0], tokdir[1], tokdir[2]);
    cr_assert(out && strstr(out, "ok\n"), "--render vs apply_chat_template: %s", out ? out : "(no output)");
    free(out);
    test_scratch_remove(dir);
}
