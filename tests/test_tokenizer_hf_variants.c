/* test_tokenizer_hf_variants.c - the tokenizer.json features the real files do not use, against
 * Hugging Face's tokenizers: each variant is a real file (Llama-3, Llama-2/Mistral, Qwen3, from the
 * shared folder $GTRAIN_ROOT/../shared/data/tokenizers/) with one or two of its parts replaced (a
 * pre-tokenizer, a normalizer, the post-processor, the BPE options, the added tokens' flags), written
 * here with cJSON, and a small corpus (tests/tools/make_tok_corpus.py with fewer lines) goes through
 * `gtrain tokenize --jsonl --add-special-tokens` and tests/tools/hf_tokenize.py (PyPI `tokenizers`,
 * run by $GTRAIN_REFS_PY). Every line of ids must be identical; a variant whose decoder changed is
 * decoded too (HF's ids and random arrays; the texts must be HF's).
 * The variants start from the file trimmed to its first 8000 ids (tests/tools/trim_tokenizer.py: a
 * valid, smaller BPE that loads quickly), so that two dozen loads cost little.
 * Every variant here uses only what src/tokenizer/tokenizer.h says gtrain implements, so a refusal to load
 * one fails too (reported as such). A failure lists each variant that differs, with its first
 * differing inputs, and keeps the workspace (the variant files are there). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "run_util.h"
#include "tok_hf_util.h"

/* One change to a tokenizer.json: path is a top-level key ("normalizer"), "model.KEY", "added.KEY"
 * (that key in every added token) or "added+" (one more added token: json is the object). */
typedef struct {
    const char *path;
    const char *json;
} Edit;

typedef struct {
    const char *name;
    bool decode; /* the decoder changed: compare decodes too */
    Edit edits[3];
} Variant;

#define TRIM_TO_IDS 8000

#define BYTE_LEVEL_NO_REGEX "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}"
#define LLAMA3_SPLIT                                                                                                   \
    "{\"type\": \"Split\", \"pattern\": {\"Regex\": "                                                                \
    "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "                       \
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", " \
    "\"invert\": false}"
#define SPLIT_SPACE(behavior)                                                                                          \
    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, "         \
    "\"behavior\": \"" behavior "\", \"invert\": false}, " BYTE_LEVEL_NO_REGEX "]}"
#define TEMPLATE(bos, bos_id, eos, eos_id)                                                                             \
    "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"" bos "\", \"type_id\": 0}}, "  \
    "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"" eos "\", \"type_id\": 0}}], " \
    "\"pair\": [{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}], " \
    "\"special_tokens\": {\"" bos "\": {\"id\": \"" bos "\", \"ids\": [" bos_id "], \"tokens\": [\"" bos "\"]}, "   \
    "\"" eos "\": {\"id\": \"" eos "\", \"ids\": [" eos_id "], \"tokens\": [\"" eos "\"]}}}"
#define METASPACE(kind, scheme, split)                                                                                 \
    "{\"type\": \"" kind "\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"" scheme "\", \"split\": " split "}"

static const Variant LLAMA3_PRE[] = {
    {"gpt2_regex", false, {{"pre_tokenizer", "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
                                      "\"use_regex\": true}"}}},
    {"gpt2_regex_add_prefix_space", false, {{"pre_tokenizer", "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                                                       "\"trim_offsets\": true, \"use_regex\": true}"}}},
    {"digits_individual", false, {{"pre_tokenizer", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "
                                             "\"individual_digits\": true}, " LLAMA3_SPLIT ", " BYTE_LEVEL_NO_REGEX "]}"}}},
    {"digits_grouped", false, {{"pre_tokenizer", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "
                                          "\"individual_digits\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": "
                                          "false, \"trim_offsets\": true, \"use_regex\": true}]}"}}},
    {"split_space_removed", false, {{"pre_tokenizer", SPLIT_SPACE("Removed")}}},
    {"split_space_merged_with_previous", false, {{"pre_tokenizer", SPLIT_SPACE("MergedWithPrevious")}}},
    {"split_space_merged_with_next", false, {{"pre_tokenizer", SPLIT_SPACE("MergedWithNext")}}},
    {"split_space_contiguous", false, {{"pre_tokenizer", SPLIT_SPACE("Contiguous")}}},
    {"split_punctuation_inverted", false, {{"pre_tokenizer", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
                                                      "\"Split\", \"pattern\": {\"Regex\": \"\\\\p{P}+\"}, \"behavior\": "
                                                      "\"Isolated\", \"invert\": true}, " BYTE_LEVEL_NO_REGEX "]}"}}},
};

static const Variant LLAMA3_MODEL_AND_ADDED[] = {
    {"ignore_merges_false", false, {{"model.ignore_merges", "false"}}},
    {"template_bos_eos", false, {{"post_processor", TEMPLATE("<|begin_of_text|>", "128000", "<|end_of_text|>", "128001")}}},
    {"sequence_byte_level_then_template_bos_eos", false,
     {{"post_processor", "{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                         "\"trim_offsets\": false, \"use_regex\": true}, "
                         TEMPLATE("<|begin_of_text|>", "128000", "<|eot_id|>", "128009") "]}"}}},
    {"added_lstrip_rstrip", false, {{"added.lstrip", "true"}, {"added.rstrip", "true"}}},
    {"added_single_word", false, {{"added.single_word", "true"}}},
    {"added_words_not_special", false,
     {{"added+", "{\"id\": 128256, \"content\": \" world\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
                 "\"normalized\": false, \"special\": false}"},
      {"added+", "{\"id\": 128257, \"content\": \"ing\", \"single_word\": true, \"lstrip\": false, \"rstrip\": false, "
                 "\"normalized\": false, \"special\": false}"}}},
    {"nfkc_and_added_normalized", false, {{"normalizer", "{\"type\": \"NFKC\"}"}, {"added.normalized", "true"}}},
    {"nfd", false, {{"normalizer", "{\"type\": \"NFD\"}"}}},
    {"nfkd_replace_whitespace", false, {{"normalizer", "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKD\"}, "
                                                "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"\\\\s+\"}, "
                                                "\"content\": \" \"}]}"}}},
};

static const Variant LLAMA2_VARIANTS[] = {
    {"metaspace_first", true,
     {{"normalizer", "null"}, {"pre_tokenizer", METASPACE("Metaspace", "first", "false")},
      {"decoder", METASPACE("Metaspace", "first", "false")}}},
    {"metaspace_always_split", true,
     {{"normalizer", "null"}, {"pre_tokenizer", METASPACE("Metaspace", "always", "true")},
      {"decoder", METASPACE("Metaspace", "always", "true")}}},
    {"metaspace_never", true,
     {{"normalizer", "null"}, {"pre_tokenizer", METASPACE("Metaspace", "never", "false")},
      {"decoder", METASPACE("Metaspace", "never", "false")}}},
    {"unk_fused_without_byte_fallback", false, {{"model.byte_fallback", "false"}}},
    {"unk_unfused_without_byte_fallback", false, {{"model.byte_fallback", "false"}, {"model.fuse_unk", "false"}}},
    {"template_bos_eos", false, {{"post_processor", TEMPLATE("<s>", "1", "</s>", "2")}}},
    {"added_lstrip_rstrip", false, {{"added.lstrip", "true"}, {"added.rstrip", "true"}}},
    {"nfkc_prepend_replace", false, {{"normalizer", "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"}, "
                                             "{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"}, {\"type\": \"Replace\", "
                                             "\"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]}"}}},
};

static const Variant QWEN3_VARIANTS[] = {
    {"nfd", false, {{"normalizer", "{\"type\": \"NFD\"}"}}},
    {"nfkc", false, {{"normalizer", "{\"type\": \"NFKC\"}"}}},
    {"no_normalizer", false, {{"normalizer", "null"}}},
};

static cJSON *parse_or_fail(const char *json, const char *what) {
    cJSON *v = cJSON_Parse(json);
    cr_assert_not_null(v, "%s: the test's JSON does not parse: %s", what, json);
    return v;
}

static void set_key(cJSON *obj, const char *key, cJSON *val) {
    if (cJSON_HasObjectItem(obj, key)) cJSON_ReplaceItemInObjectCaseSensitive(obj, key, val);
    else cJSON_AddItemToObject(obj, key, val);
}

static void apply_edit(cJSON *root, const Edit *e, const char *variant) {
    cJSON *val = parse_or_fail(e->json, variant);
    cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (strncmp(e->path, "model.", 6) == 0) {
        cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
        cr_assert(cJSON_IsObject(model));
        set_key(model, e->path + 6, val);
    } else if (strcmp(e->path, "added+") == 0) {
        cr_assert(cJSON_IsArray(added));
        cJSON_AddItemToArray(added, val);
    } else if (strncmp(e->path, "added.", 6) == 0) {
        cr_assert(cJSON_IsArray(added));
        cJSON *tok;
        cJSON_ArrayForEach(tok, added) set_key(tok, e->path + 6, cJSON_Duplicate(val, true));
        cJSON_Delete(val);
    } else {
        set_key(root, e->path, val);
    }
}

/* The variant's tokenizer.json into path: the base file (text) parsed again and edited. */
static void write_variant(const char *base_json, const Variant *v, const char *path) {
    cJSON *root = cJSON_Parse(base_json);
    cr_assert_not_null(root, "the reference tokenizer.json does not parse with cJSON");
    for (int k = 0; k < 3 && v->edits[k].path; k++) apply_edit(root, &v->edits[k], v->name);
    char *text = cJSON_PrintUnformatted(root);
    cr_assert_not_null(text);
    test_write_file(path, text, strlen(text));
    free(text);
    cJSON_Delete(root);
}

static void check_variants(const RefTokenizer *t, const char *group, const Variant *vs, size_t n) {
    HfWs w;
    ws_open(&w, "gt_tok_hf_var");
    char base[512];
    ref_tokenizer_path(t, base, sizeof base);
    bool small = tok_small_corpus();
    const char *in = corpus_with(&w, small ? "--shakespeare-lines 100 --paragraphs 10 --random 200"
                                           : "--shakespeare-lines 400 --paragraphs 40 --random 600");
    /* the variants are made from the file trimmed to its first 8000 ids: each loads in a fraction of
     * the full file's time (the full files are test_tokenizer_hf.c's) */
    char trimmed[512], cmd[2048];
    snprintf(trimmed, sizeof trimmed, "%s/trimmed.json", w.dir);
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/trim_tokenizer.py' '%s' '%s' %d 2>'%s.err'", w.root, base, trimmed,
             TRIM_TO_IDS, trimmed);
    sh_ok(cmd, test_join(w.dir, "trimmed.json.err"), "trim_tokenizer.py");
    char *base_json = slurp(trimmed, NULL);
    cr_assert_not_null(base_json, "cannot read %s", trimmed);
    Report *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    long failed = 0;
    double t0 = now_seconds();
    for (size_t i = 0; i < n; i++) {
        const Variant *v = &vs[i];
        char tok[512], ref[512], got[512];
        snprintf(tok, sizeof tok, "%s/%s.json", w.dir, v->name);
        snprintf(ref, sizeof ref, "%s/%s.hf.ids", w.dir, v->name);
        snprintf(got, sizeof got, "%s/%s.gtrain.ids", w.dir, v->name);
        write_variant(base_json, v, tok);
        run_hf(&w, tok, "--add-special-tokens", in, ref);
        int rc = run_gtrain_status(&w, tok, "--add-special-tokens", in, got);
        if (rc != 0) {
            char err[600];
            snprintf(err, sizeof err, "%s.err", got);
            size_t n_err = 0;
            char *e = slurp(err, &n_err);
            report_add(r, "%s %s: gtrain tokenize exited %d (HF loads this file):\n", t->name, v->name, rc);
            report_line(r, "stderr:", e ? e : "", e ? n_err : 0, 500);
            free(e);
            failed++;
            continue;
        }
        Report one = {0};
        long differ = compare_id_lines(in, ref, got, &one, 3);
        if (differ) {
            report_add(r, "%s %s: %ld lines differ from HF's (%s, %s):\n%s", t->name, v->name, differ, ref, got, one.text);
            failed++;
            continue;
        }
        if (v->decode) {
            char arrays[512], hf_dec[512], gt_dec[512];
            snprintf(arrays, sizeof arrays, "%s/%s.ids.jsonl", w.dir, v->name);
            snprintf(hf_dec, sizeof hf_dec, "%s/%s.hf.decoded", w.dir, v->name);
            snprintf(gt_dec, sizeof gt_dec, "%s/%s.gtrain.decoded", w.dir, v->name);
            char plain[512];
            snprintf(plain, sizeof plain, "%s/%s.hf.plain.ids", w.dir, v->name);
            run_hf(&w, tok, "", in, plain);
            write_id_arrays(t, plain, arrays);
            run_decodes(&w, tok, "", arrays, hf_dec, gt_dec);
            Report dr = {0}, lossy = {0};
            long ddiff = compare_decodes(arrays, hf_dec, gt_dec, NULL, 0, &dr, &lossy);
            if (ddiff) {
                report_add(r, "%s %s: %ld decoded texts differ from HF's:\n%s", t->name, v->name, ddiff, dr.text);
                failed++;
            }
        }
    }
    cr_log_info("%s %s: %zu variants in %.1f s", t->name, group, n, now_seconds() - t0);
    free(base_json);
    if (failed) {
        char msg[sizeof r->text + 256];
        snprintf(msg, sizeof msg, "%s %s: %ld of %zu variants differ from Hugging Face's (workspace %s):\n%s", t->name,
                 group, failed, n, w.dir, r->text);
        free(r);
        cr_assert_fail("%s", msg);
    }
    free(r);
    ws_close(&w);
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

Test(tokenizer_hf_variants, llama3_pre_tokenizers, .timeout = 300) {
    check_variants(&REF_LLAMA3, "pre-tokenizers", LLAMA3_PRE, N_OF(LLAMA3_PRE));
}
Test(tokenizer_hf_variants, llama3_model_added_tokens_normalizers_templates, .timeout = 300) {
    check_variants(&REF_LLAMA3, "model, added tokens, normalizers, template", LLAMA3_MODEL_AND_ADDED,
                   N_OF(LLAMA3_MODEL_AND_ADDED));
}
Test(tokenizer_hf_variants, llama2_metaspace_unk_template_normalizers, .timeout = 300) {
    check_variants(&REF_LLAMA2, "metaspace, unk, template, normalizers", LLAMA2_VARIANTS, N_OF(LLAMA2_VARIANTS));
}
Test(tokenizer_hf_variants, qwen3_normalizers, .timeout = 300) {
    check_variants(&REF_QWEN3, "normalizers", QWEN3_VARIANTS, N_OF(QWEN3_VARIANTS));
}
