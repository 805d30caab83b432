/* test_sft_templates.c - SFT jsonl through data.prompt_template / data.completion_template, with
 * and without a tokenizer, through the binary: the step's num_items (the targets that count)
 * against counts made independently — the completion's bytes for byte-level data, and for the
 * Llama-2 tokenizer (the shared folder's real file, ../shared/data/tokenizers/llama2) Hugging
 * Face's own tokenizers (PyPI, run by $GTRAIN_REFS_PY) encoding prompt + completion and prompt, plus
 * EOS; and the errors: a missing field, a bad template, add_eos with a tokenizer that has no
 * end-of-sequence token. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/tok_fixture.h"
#include "run_util.h"
#include "test_backend_select.h"
#include "test_util.h"
#include "tok_hf_util.h"

#define N_LINES 6
static const char *const QUERY[N_LINES] = {
    "What is 12 plus 30?", "Tom has 3 apples and buys 4 more. How many now?", "Compute 7 * 8.",
    "Is 91 prime? Say why.", "Résumé: the café's menu — 2 items at €3.50 each; total?", "日本語で 1+1 は?"};
static const char *const RESPONSE[N_LINES] = {
    "12 + 30 = 42. The answer is: 42", "3 + 4 = 7. The answer is: 7", "7 * 8 = 56.\nThe answer is: 56",
    "No: 91 = 7 * 13. The answer is: no", "2 * 3.50 = 7.00. The answer is: €7.00", "1+1 = 2。The answer is: 2"};

#define PROMPT_TEMPLATE \
    "Below is an instruction that describes a task. Write a response that appropriately completes the request.\\n\\n" \
    "### Instruction:\\n{query}\\n\\n### Response:"

/* a JSON string literal of s (the lines are plain text: quotes, backslashes and newlines escaped) */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if (*s == '\n') fputs("\\n", f);
        else fputc(*s, f);
    }
    fputc('"', f);
}

static void write_data(const Ws *w, const char *name, bool drop_query_of_line_3) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", w->dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < N_LINES; i++) {
        fputs("{", f);
        if (!(drop_query_of_line_3 && i == 2)) {
            fputs("\"query\": ", f);
            json_str(f, QUERY[i]);
            fputs(", ", f);
        }
        fputs("\"response\": ", f);
        json_str(f, RESPONSE[i]);
        fputs(", \"type\": \"GSM_AnsAug\"}\n", f);
    }
    fclose(f);
}

/* A run config over w's data: one step of all N_LINES examples (one epoch: each exactly once). */
static void write_config(const Ws *w, const char *name, const char *model, const char *tokenizer, const char *data,
                         const char *prompt_template) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", w->dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "model: %s\ntokenizer: %s\ndata:\n  train: %s\n  format: jsonl\n  seq_len: %s\n"
            "  prompt_template: \"%s\"\n  completion_template: \" {response}\"\n"
            "per_device_train_batch_size: %d\nmax_steps: 1\nlearning_rate: 1.0e-3\nlogging_steps: 1\n"
            "output_dir: out-%s\noverwrite_output_dir: true\nsample_max_new_tokens: 0\n",
            model, tokenizer, data, strstr(model, "tiny-llama") ? "96" : "31", prompt_template, N_LINES, name);
    fclose(f);
}

static long step1_num_items(const Ws *w, const char *cfg_name) {
    char path[500];
    snprintf(path, sizeof path, "%s/out-%s/metrics.jsonl", w->dir, cfg_name);
    char *m = slurp(path, NULL);
    cr_assert_not_null(m, "no %s", path);
    const char *k = strstr(m, "\"num_items\":");
    cr_assert_not_null(k, "no num_items in %s", path);
    long n = strtol(k + 12, NULL, 10);
    free(m);
    return n;
}

static int run_cfg(const Ws *w, const char *cfg_name, const char *tag) {
    char cfg[400];
    snprintf(cfg, sizeof cfg, "%s/%s", w->dir, cfg_name);
    Proc p;
    start_v(&p, w, cfg, NULL, tag, NULL, 0);
    return wait_proc(&p);
}

/* w/tok.json: a byte-level BPE whose specials are <|bos|> and <eot> (no EOS the reader knows);
 * w/model300.json: a model with room for its ids. */
static void write_fixture_tokenizer(const Ws *w) {
    char path[400], *json = tok_fixture_json();
    snprintf(path, sizeof path, "%s/tok.json", w->dir);
    put_file(path, json, strlen(json));
    free(json);
    snprintf(path, sizeof path, "%s/model300.json", w->dir);
    const char *m = "{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 300, "
                    "\"n_positions\": 32}";
    put_file(path, m, strlen(m));
}

Test(sft_templates, byte_level_counts_the_completion_bytes) {
    Ws w;
    ws_init(&w); /* model.json: a byte-level model, 32 positions */
    write_data(&w, "math.jsonl", false);
    write_config(&w, "byte.yaml", "model.json", "none", "math.jsonl", "Q: {query}\\nA:");
    int st = run_cfg(&w, "byte.yaml", "byte");
    expect_exit(&w, "byte", st, 0);
    /* row = prompt bytes then completion bytes, cut at seq_len+1 = 32; a target counts where the
     * token it predicts is a completion byte (positions 1..31) */
    long expected = 0;
    for (int i = 0; i < N_LINES; i++) {
        long plen = (long)strlen("Q: \nA:") + (long)strlen(QUERY[i]), clen = 1 + (long)strlen(RESPONSE[i]);
        long len = plen + clen < 32 ? plen + clen : 32;
        expected += len > plen ? len - plen : 0;
    }
    cr_assert_eq(step1_num_items(&w, "byte.yaml"), expected, "num_items %ld, expected %ld (completion bytes)",
                 step1_num_items(&w, "byte.yaml"), expected);
    ws_fini(&w);
}

Test(sft_templates, a_missing_field_names_its_line) {
    Ws w;
    ws_init(&w);
    write_data(&w, "holes.jsonl", true);
    write_config(&w, "holes.yaml", "model.json", "none", "holes.jsonl", "Q: {query}\\nA:");
    int st = run_cfg(&w, "holes.yaml", "holes");
    expect_one_line(&w, "holes", st, 2, "holes.jsonl:3", "{query}");
    ws_fini(&w);
}

Test(sft_templates, a_bad_template_is_a_config_error) {
    Ws w;
    ws_init(&w);
    write_data(&w, "math.jsonl", false);
    write_config(&w, "bad.yaml", "model.json", "none", "math.jsonl", "Q: {query\\nA:");
    int st = run_cfg(&w, "bad.yaml", "bad");
    expect_one_line(&w, "bad", st, 2, "data.prompt_template", "'{'");
    write_config(&w, "bad2.yaml", "model.json", "none", "math.jsonl", "Q: {}");
    st = run_cfg(&w, "bad2.yaml", "bad2");
    expect_one_line(&w, "bad2", st, 2, "data.prompt_template", "empty field");
    ws_fini(&w);
}

Test(sft_templates, add_eos_needs_an_eos_token) {
    Ws w;
    ws_init(&w);
    write_data(&w, "math.jsonl", false);
    write_fixture_tokenizer(&w);
    write_config(&w, "noeos.yaml", "model300.json", "tok.json", "math.jsonl", "Q: {query}\\nA:");
    int st = run_cfg(&w, "noeos.yaml", "noeos");
    expect_one_line(&w, "noeos", st, 2, "data.add_eos", "end-of-sequence");
    ws_fini(&w);
}

/* The reference count: Hugging Face's tokenizers on prompt + completion and on the prompt (both
 * with special tokens), the difference, plus EOS (tokenizer_config.json's eos_token, beside the
 * tokenizer.json) when the encoding does not end with it; a row holds seq_len + 1 = 97 tokens. */
static const char *const PY_COUNT =
    "import json, os, sys\n"
    "from tokenizers import Tokenizer\n"
    "tok = Tokenizer.from_file(sys.argv[1])\n"
    "with open(os.path.join(os.path.dirname(sys.argv[1]), 'tokenizer_config.json'), encoding='utf-8') as f:\n"
    "    eos = json.load(f)['eos_token']\n"
    "eos = tok.token_to_id(eos['content'] if isinstance(eos, dict) else eos)\n"
    "assert eos is not None, 'the eos_token of tokenizer_config.json is not in ' + sys.argv[1]\n"
    "head = ('Below is an instruction that describes a task. Write a response that appropriately completes '\n"
    "        'the request.\\n\\n### Instruction:\\n')\n"
    "total = 0\n"
    "with open(sys.argv[2], encoding='utf-8') as f:\n"
    "    for line in f:\n"
    "        if not line.strip():\n"
    "            continue\n"
    "        j = json.loads(line)\n"
    "        prompt, completion = head + j['query'] + '\\n\\n### Response:', ' ' + j['response']\n"
    "        full = tok.encode(prompt + completion, add_special_tokens=True).ids\n"
    "        p = tok.encode(prompt, add_special_tokens=True).ids\n"
    "        assert len(p) < 97, 'a prompt fills the row'\n"
    "        n = len(full) + (0 if full[-1] == eos else 1)\n"
    "        total += min(n, 97) - len(p)\n"
    "print(total)\n";

/* One step of SFT over the real tokenizer of the shared folder (a tiny Llama with room for its ids):
 * num_items must be Hugging Face's count, and the run keeps the tokenizer.json beside its weights. */
static void sft_counts_match_hf(const char *tok_dir, int vocab_size) {
    test_require_refs();
    char path[600], tok[600], model[64], cfg[64];
    ref_tokenizer_file(tok_dir, tok, sizeof tok);
    Ws w;
    ws_init(&w);
    write_data(&w, "math.jsonl", false);
    snprintf(model, sizeof model, "tiny-llama-%d.json", vocab_size);
    snprintf(cfg, sizeof cfg, "%s.yaml", tok_dir);
    snprintf(path, sizeof path, "%s/%s", w.dir, model);
    char m[600];
    snprintf(m, sizeof m,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 32, "
             "\"intermediate_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
             "\"num_key_value_heads\": 1, \"max_position_embeddings\": 128, \"vocab_size\": %d, "
             "\"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": true}",
             vocab_size);
    put_file(path, m, strlen(m));
    write_config(&w, cfg, model, tok, "math.jsonl", PROMPT_TEMPLATE);
    int st = run_cfg(&w, cfg, tok_dir);
    expect_exit(&w, tok_dir, st, 0);
    long got = step1_num_items(&w, cfg);

    snprintf(path, sizeof path, "%s/count.py", w.dir);
    put_file(path, PY_COUNT, strlen(PY_COUNT));
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "timeout 120 " PY " '%s/count.py' '%s' '%s/math.jsonl' > '%s/count.txt'", w.dir, tok, w.dir,
             w.dir);
    cr_assert_eq(system(cmd), 0, "the reference count failed (its error above): %s", cmd);
    snprintf(path, sizeof path, "%s/count.txt", w.dir);
    char *c = slurp(path, NULL);
    cr_assert_not_null(c);
    long expected = strtol(c, NULL, 10);
    free(c);
    cr_assert_gt(expected, 6 * 10, "the reference counted %ld", expected);
    cr_log_info("%s: num_items %ld, Hugging Face's count %ld", tok_dir, got, expected);
    cr_assert_eq(got, expected, "%s: num_items %ld, Hugging Face's count of completion tokens + EOS %ld", tok_dir, got,
                 expected);
    snprintf(path, sizeof path, "%s/out-%s/tokenizer.json", w.dir, cfg);
    cr_assert(files_equal(path, tok), "the run did not save its tokenizer.json beside the weights");
    ws_fini(&w);
}

/* Llama-2: Metaspace-style BPE with byte fallback, a template that adds <s> */
Test(sft_templates, llama2_tokenizer_counts_completion_tokens_and_eos, .timeout = 240) { sft_counts_match_hf("llama2", 32000); }
/* Llama-3.1: byte-level BPE, a Sequence post-processor that adds <|begin_of_text|> */
Test(sft_templates, llama3_1_tokenizer_counts_completion_tokens_and_eos, .timeout = 240) {
    sft_counts_match_hf("llama3_1", 128256);
}

Test(sft_templates, the_first_bad_line_is_named_though_lines_are_tokenized_in_batches) {
    Ws w;
    ws_init(&w);
    write_fixture_tokenizer(&w);
    char path[400];
    /* line 2: a raw 0xFF byte in its query (not UTF-8); line 3: not JSON */
    const char *data = "{\"query\": \"fine\", \"response\": \"ok\"}\n{\"query\": \"bad \xff here\", \"response\": \"ok\"}\n{\"query\": \n";
    snprintf(path, sizeof path, "%s/mixed.jsonl", w.dir);
    put_file(path, data, strlen(data));
    write_config(&w, "mixed.yaml", "model300.json", "tok.json", "mixed.jsonl", "Q: {query}\\nA:");
    char cfg[400];
    snprintf(cfg, sizeof cfg, "%s/mixed.yaml", w.dir);
    Proc p;
    const char *sets[] = {"data.add_eos=false"};
    start_v(&p, &w, cfg, NULL, "mixed", sets, 1);
    int st = wait_proc(&p);
    expect_one_line(&w, "mixed", st, 2, "mixed.jsonl:2", "UTF-8");
    ws_fini(&w);
}

/* A run with a tokenizer saves it beside its weights, and gtrain sample decodes with it; with
 * --tokenizer none the same continuation prints as ids (a 300-token model is not byte-level). */
Test(sft_templates, sample_decodes_with_the_runs_tokenizer_or_none) {
    Ws w;
    ws_init(&w);
    write_fixture_tokenizer(&w);
    write_data(&w, "math.jsonl", false);
    write_config(&w, "tok.yaml", "model300.json", "tok.json", "math.jsonl", "Q: {query}\\nA:");
    char cfg[400];
    snprintf(cfg, sizeof cfg, "%s/tok.yaml", w.dir);
    Proc p;
    const char *sets[] = {"data.add_eos=false"};
    start_v(&p, &w, cfg, NULL, "tok", sets, 1);
    expect_exit(&w, "tok", wait_proc(&p), 0);
    char cmd[1400], path[500];
    for (int none = 0; none < 2; none++) {
        snprintf(cmd, sizeof cmd,
                 "cd %s && %s sample --checkpoint out-tok.yaml %s --prompt-ids 264,116,104 --max-new-tokens 4 "
                 "--temperature 0 > sample%d.out 2> sample%d.err",
                 w.dir, test_gtrain_bin(), none ? "--tokenizer none" : "", none, none);
        cr_assert_eq(system(cmd), 0, "%s", cmd);
    }
    snprintf(path, sizeof path, "%s/sample1.out", w.dir);
    char *ids = slurp(path, NULL);
    snprintf(path, sizeof path, "%s/sample0.out", w.dir);
    char *text = slurp(path, NULL);
    cr_assert(ids && text);
    cr_assert_eq(strspn(ids, "0123456789,\n"), strlen(ids), "--tokenizer none printed \"%s\", expected ids", ids);
    cr_assert_neq(strcmp(ids, text), 0, "the tokenizer's decoding printed ids too: \"%s\"", text);
    cr_assert_neq(strspn(text, "0123456789,\n"), strlen(text), "no decoded text: \"%s\"", text);
    free(ids);
    free(text);
    ws_fini(&w);
}
