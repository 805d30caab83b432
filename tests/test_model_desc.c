/* test_model_desc.c - the model JSON (Hugging Face GPT-2 config.json): fields, defaults, every
 * refusal, hostile JSON, and the parameter count (124,439,808 for GPT-2 small, a published fact). */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include "test_util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model_desc.h"


static int parse(ModelDesc *d, const char *json, GtError *err) {
    memset(err, 0, sizeof *err);
    return model_desc_parse(d, json, strlen(json), "model.json", err);
}

static void expect_bad(const char *json, const char *n1, const char *n2) {
    ModelDesc d;
    GtError err;
    int rc = parse(&d, json, &err);
    cr_assert_eq(rc, -1, "accepted: %s", json);
    cr_expect_eq(err.code, GT_EXIT_BAD_INPUT);
    cr_expect_null(strchr(err.msg, '\n'), "%s", err.msg);
    cr_expect(strstr(err.msg, "model.json"), "no file name: %s", err.msg);
    if (n1) cr_expect(strstr(err.msg, n1), "'%s' not in: %s", n1, err.msg);
    if (n2) cr_expect(strstr(err.msg, n2), "'%s' not in: %s", n2, err.msg);
}

#define MIN_FIELDS "\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": 16"

Test(model_desc, hf_gpt2_small) {
    ModelDesc d;
    GtError err;
    cr_assert_eq(parse(&d, TEST_HF_GPT2_CONFIG, &err), 0, "%s", err.msg);
    cr_expect_eq(d.n_layer, 12);
    cr_expect_eq(d.n_head, 12);
    cr_expect_eq(d.n_embd, 768);
    cr_expect_eq(d.n_inner, 3072);
    cr_expect_eq(d.vocab_size, 50257);
    cr_expect_eq(d.n_positions, 1024);
    cr_expect_float_eq(d.layer_norm_epsilon, 1e-5, 1e-20);
    cr_expect(d.tie_word_embeddings);
    cr_expect_str_eq(d.path, "model.json");
    cr_expect_eq(model_desc_num_params(&d), 124439808ull);
    d.tie_word_embeddings = false; /* + an lm_head of 50257 x 768 */
    cr_expect_eq(model_desc_num_params(&d), 124439808ull + 50257ull * 768ull);
}

Test(model_desc, num_params_by_hand) {
    /* L=1, C=4, I=16, V=10, P=8: wte 40 + wpe 32 + block (ln 8, qkv 48+12, proj 16+4, ln 8,
     * fc 64+16, proj 64+4 = 244) + ln_f 8 = 324 */
    ModelDesc d;
    GtError err;
    cr_assert_eq(parse(&d, "{\"n_layer\":1,\"n_head\":2,\"n_embd\":4,\"n_inner\":16,\"vocab_size\":10,\"n_positions\":8}", &err),
                 0, "%s", err.msg);
    cr_expect_eq(model_desc_num_params(&d), 324ull);
    /* the largest model allowed: no overflow (fits comfortably in 64 bits) */
    cr_assert_eq(parse(&d, "{\"n_layer\":1024,\"n_head\":1024,\"n_embd\":65536,\"n_inner\":262144,"
                           "\"vocab_size\":16777216,\"n_positions\":1048576,\"tie_word_embeddings\":false}",
                       &err),
                 0, "%s", err.msg);
    unsigned long long C = 65536, I = 262144, V = 16777216, P = 1048576, L = 1024;
    unsigned long long per = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + C * I + I + I * C + C;
    cr_expect_eq(model_desc_num_params(&d), 2 * V * C + P * C + L * per + 2 * C);
}

Test(model_desc, defaults_and_alternatives) {
    ModelDesc d;
    GtError err;
    cr_assert_eq(parse(&d, "{" MIN_FIELDS "}", &err), 0, "%s", err.msg);
    cr_expect_eq(d.n_inner, 32);
    cr_expect_float_eq(d.layer_norm_epsilon, 1e-5, 1e-20);
    cr_expect(d.tie_word_embeddings);
    cr_assert_eq(parse(&d, "{" MIN_FIELDS ", \"n_inner\": null}", &err), 0, "%s", err.msg);
    cr_expect_eq(d.n_inner, 32);
    cr_assert_eq(parse(&d, "{" MIN_FIELDS ", \"n_inner\": 20, \"layer_norm_epsilon\": 1e-6, \"tie_word_embeddings\": false,"
                           " \"activation_function\": \"gelu_pytorch_tanh\", \"model_type\": \"gpt2\"}",
                       &err),
                 0, "%s", err.msg);
    cr_expect_eq(d.n_inner, 20);
    cr_expect_float_eq(d.layer_norm_epsilon, 1e-6, 1e-20);
    cr_expect_not(d.tie_word_embeddings);
    /* n_ctx when n_positions is absent */
    cr_assert_eq(parse(&d, "{\"n_layer\": 1, \"n_head\": 1, \"n_embd\": 4, \"vocab_size\": 256, \"n_ctx\": 77}", &err), 0,
                 "%s", err.msg);
    cr_expect_eq(d.n_positions, 77);
    /* integral numbers written as 12.0 are integers; a BOM is fine */
    cr_assert_eq(parse(&d, "\xEF\xBB\xBF{\"n_layer\": 2.0, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": 16}", &err),
                 0, "%s", err.msg);
    cr_expect_eq(d.n_layer, 2);
}

Test(model_desc, extra_fields_ignored) {
    ModelDesc d;
    GtError err;
    cr_assert_eq(parse(&d, "{" MIN_FIELDS ", \"foo\": [1, {\"a\": null}], \"bar\": \"x\", \"n_head_kv\": \"?\","
                           " \"torch_dtype\": \"float32\", \"transformers_version\": \"4.40.0\"}",
                       &err),
                 0, "%s", err.msg);
}

Test(model_desc, field_errors) {
    expect_bad("{\"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": 16}", "n_layer", "no such field");
    expect_bad("{\"n_layer\": 2, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": 16}", "n_head", NULL);
    expect_bad("{\"n_layer\": 2, \"n_head\": 2, \"vocab_size\": 300, \"n_positions\": 16}", "n_embd", NULL);
    expect_bad("{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"n_positions\": 16}", "vocab_size", NULL);
    expect_bad("{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 300}", "n_positions", NULL);
    expect_bad("{\"n_layer\": \"12\", \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": 16}",
               "model.json: n_layer: expected an integer", "found \"12\"");
    expect_bad("{\"n_layer\": 0, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": 16}", "n_layer", "found 0");
    expect_bad("{\"n_layer\": -1, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": 16}", "n_layer", "found -1");
    expect_bad("{\"n_layer\": 1.5, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": 16}", "n_layer", "1.5");
    expect_bad("{\"n_layer\": 1025, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": 16}", "n_layer", NULL);
    expect_bad("{\"n_layer\": 1e300, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": 16}", "n_layer", NULL);
    expect_bad("{\"n_layer\": 1e999, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": 16}", "n_layer", NULL);
    expect_bad("{\"n_layer\": null, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": 16}", "n_layer", "null");
    expect_bad("{\"n_layer\": true, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": 16}", "n_layer", "true");
    expect_bad("{\"n_layer\": 2, \"n_head\": 3, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": 16}",
               "n_head: expected a divisor of n_embd = 8", "found 3");
    expect_bad("{\"n_layer\": 2, \"n_head\": 0, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": 16}", "n_head", NULL);
    expect_bad("{\"n_layer\": 2, \"n_head\": 1, \"n_embd\": 65537, \"vocab_size\": 300, \"n_positions\": 16}", "n_embd", NULL);
    expect_bad("{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 16777217, \"n_positions\": 16}", "vocab_size", NULL);
    expect_bad("{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 300, \"n_positions\": -16}", "n_positions", NULL);
    expect_bad("{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 300, \"n_ctx\": 0}", "n_ctx", NULL);
    expect_bad("{" MIN_FIELDS ", \"n_inner\": 0}", "n_inner", NULL);
    expect_bad("{" MIN_FIELDS ", \"n_inner\": \"big\"}", "n_inner", "\"big\"");
    expect_bad("{" MIN_FIELDS ", \"model_type\": \"gpt_neox\"}", "model_type: expected \"gpt2\"", "\"gpt_neox\"");
    expect_bad("{" MIN_FIELDS ", \"model_type\": 2}", "model_type", NULL);
    expect_bad("{" MIN_FIELDS ", \"activation_function\": \"gelu\"}", "activation_function", "\"gelu\"");
    expect_bad("{" MIN_FIELDS ", \"activation_function\": \"relu\"}", "activation_function", "gelu_new");
    expect_bad("{" MIN_FIELDS ", \"activation_function\": null}", "activation_function", NULL);
    expect_bad("{" MIN_FIELDS ", \"tie_word_embeddings\": \"false\"}", "tie_word_embeddings", "true or false");
    expect_bad("{" MIN_FIELDS ", \"tie_word_embeddings\": 0}", "tie_word_embeddings", NULL);
    expect_bad("{" MIN_FIELDS ", \"layer_norm_epsilon\": 0}", "layer_norm_epsilon", NULL);
    expect_bad("{" MIN_FIELDS ", \"layer_norm_epsilon\": -1e-5}", "layer_norm_epsilon", NULL);
    expect_bad("{" MIN_FIELDS ", \"layer_norm_epsilon\": 1e999}", "layer_norm_epsilon", NULL);
    expect_bad("{" MIN_FIELDS ", \"layer_norm_epsilon\": \"1e-5\"}", "layer_norm_epsilon", NULL);
    expect_bad("{" MIN_FIELDS ", \"n_layer\": 3}", "n_layer", "twice");
}

Test(model_desc, json_shapes) {
    expect_bad("", "empty", NULL);
    expect_bad("[1, 2]", "JSON object", "array");
    expect_bad("42", "JSON object", NULL);
    expect_bad("null", "JSON object", NULL);
    expect_bad("{\"n_layer\": 12,\n \"n_head\": ", "model.json:2:", "truncated");
    expect_bad("{\"n_layer\": 12,\n \"n_head\": 12,\n oops}", "model.json:3:", "JSON");
    expect_bad("{" MIN_FIELDS "} trailing", "model.json:1:", "end of the JSON");
    expect_bad("{" MIN_FIELDS "}{}", "model.json:1:", NULL);
    expect_bad("{\"n_layer\": NaN}", "model.json:1:", NULL);
    expect_bad("\xff\xfe\x01\x02", "model.json:1:1", NULL);
}

Test(model_desc, nul_bytes_and_size) {
    ModelDesc d;
    GtError err = {0};
    const char j[] = "{\"n_layer\": 2\0, \"n_head\": 2}";
    cr_expect_eq(model_desc_parse(&d, j, sizeof j - 1, "model.json", &err), -1);
    cr_expect(strstr(err.msg, "model.json:1:14") && strstr(err.msg, "NUL"), "%s", err.msg);
    size_t n = (1u << 20) + 1;
    char *big = malloc(n + 1);
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    big[n] = '\0';
    cr_expect_eq(model_desc_parse(&d, big, n, "model.json", &err), -1);
    cr_expect(strstr(err.msg, "1 MiB"), "%s", err.msg);
    free(big);
}

Test(model_desc, deep_nesting_does_not_crash) {
    size_t n = 100000;
    char *j = malloc(6 * n + 64);
    cr_assert_not_null(j);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) j[o++] = '[';
    for (size_t i = 0; i < n; i++) j[o++] = ']';
    j[o] = '\0';
    expect_bad(j, "nested", NULL);
    /* deep but unclosed, hidden in an ignored field */
    strcpy(j, "{\"n_layer\": 2, \"x\": ");
    o = strlen(j);
    for (size_t i = 0; i < n; i++) {
        memcpy(j + o, "{\"a\":", 5);
        o += 5;
    }
    j[o] = '\0';
    expect_bad(j, "nested", NULL);
    /* 64 levels are fine (brackets inside strings do not count) */
    o = 0;
    o += (size_t)sprintf(j, "{" MIN_FIELDS ", \"s\": \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\", \"x\": ");
    for (int i = 0; i < 63; i++) j[o++] = '[';
    for (int i = 0; i < 63; i++) j[o++] = ']';
    j[o++] = '}';
    j[o] = '\0';
    ModelDesc d;
    GtError err;
    cr_expect_eq(parse(&d, j, &err), 0, "%s", err.msg);
    free(j);
}

Test(model_desc, load_files) {
    char dir[] = "/tmp/gt_test_model_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char p[256];
    ModelDesc d;
    GtError err = {0};
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    fputs(TEST_HF_GPT2_CONFIG, f);
    fclose(f);
    cr_expect_eq(model_desc_load(&d, p, &err), 0, "%s", err.msg);
    cr_expect_str_eq(d.path, p);
    cr_expect_eq(model_desc_num_params(&d), 124439808ull);
    unlink(p);

    cr_expect_eq(model_desc_load(&d, p, &err), -1);
    cr_expect(strstr(err.msg, "config.json") && strstr(err.msg, "No such file"), "%s", err.msg);
    cr_expect_eq(err.code, GT_EXIT_BAD_INPUT);
    cr_expect_eq(model_desc_load(&d, dir, &err), -1);
    cr_expect(strstr(err.msg, dir) && strstr(err.msg, "directory"), "%s", err.msg);
    cr_expect_eq(model_desc_load(&d, "/dev/null", &err), -1);
    cr_expect(strstr(err.msg, "/dev/null"), "%s", err.msg);

    f = fopen(p, "w");
    for (int i = 0; i < 70000; i++) fputs("                ", f);
    fclose(f);
    cr_expect_eq(model_desc_load(&d, p, &err), -1);
    cr_expect(strstr(err.msg, "config.json") && strstr(err.msg, "1 MiB"), "%s", err.msg);
    unlink(p);
    rmdir(dir);
}

Test(model_desc, shipped_configs) {
    const char *root = getenv("GTRAIN_ROOT");
    char p[1024];
    ModelDesc d;
    GtError err = {0};
    snprintf(p, sizeof p, "%s/configs/gpt2-124m.json", root ? root : ".");
    cr_assert_eq(model_desc_load(&d, p, &err), 0, "%s", err.msg);
    cr_expect_eq(model_desc_num_params(&d), 124439808ull);
}
