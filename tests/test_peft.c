/* test_peft.c - PEFT LoRA adapter directories (src/io/peft.c): adapter_config.json round trips and a
 * table of hostile configs (each one line naming the file and the key, code 2), PEFT's key names
 * and their inverse, adapter round trips (F32, BF16) for the Llama family and GPT-2, hostile
 * adapter files, and PEFT itself reading ours (PeftModel.from_pretrained on a transformers model: every
 * value, and LoraConfig's reading of the config) and writing what ours reads (get_peft_model +
 * save_pretrained): tests/tools/peft_adapter_check.py. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "peft.h"
#include "test_util.h"

static void assert_one_line_code2(const GtError *err, const char *path, const char *key) {
    cr_assert_eq(err->code, GT_EXIT_BAD_INPUT, "code %d: %s", err->code, err->msg);
    cr_assert(strchr(err->msg, '\n') == NULL, "%s", err->msg);
    cr_assert(strstr(err->msg, path) != NULL, "no file in: %s", err->msg);
    cr_assert(strstr(err->msg, key) != NULL, "no '%s' in: %s", key, err->msg);
}

#define MIN_OK "\"peft_type\": \"LORA\", \"target_modules\": [\"q_proj\"]"

Test(peft_config, round_trip_and_python_json_layout) {
    PeftConfig c, back;
    peft_config_defaults(&c);
    c.r = 16;
    c.lora_alpha = 32;
    c.lora_dropout = 0.05;
    c.use_rslora = true;
    snprintf(c.init, sizeof c.init, "pissa_niter_4");
    snprintf(c.base_model, sizeof c.base_model, "meta/llama \"3\"\\x");
    bool mask[PEFT_MODULE_COUNT] = {0};
    mask[PEFT_Q_PROJ] = mask[PEFT_V_PROJ] = mask[PEFT_DOWN_PROJ] = true;
    peft_config_set_targets(&c, mask);
    cr_assert_eq(c.n_targets, 3);
    char dir[256];
    test_scratch_make(dir, sizeof dir, "peft_cfg");
    GtError err = {0};
    cr_assert_eq(peft_config_write(dir, &c, &err), 0, "%s", err.msg);
    cr_assert_eq(peft_config_read(dir, &back, &err), 0, "%s", err.msg);
    cr_assert_eq(back.r, 16);
    cr_assert_eq(back.lora_alpha, 32);
    cr_assert_eq(back.lora_dropout, 0.05);
    cr_assert(back.use_rslora);
    cr_assert_str_eq(back.init, "pissa_niter_4");
    cr_assert_eq(peft_pissa_niter(&back), 4);
    /* exact and randomised PiSSA apart, niter 0 included */
    cr_assert_eq(peft_init_pissa_niter("pissa"), -1);
    cr_assert_eq(peft_init_pissa_niter("pissa_niter_0"), 0);
    cr_assert_eq(peft_init_pissa_niter("pissa_niter_1000"), 1000);
    cr_assert_eq(peft_init_pissa_niter("pissa_niter_01"), -2);
    cr_assert_eq(peft_init_pissa_niter("pissa_niter_"), -2);
    cr_assert_eq(peft_init_pissa_niter("gaussian"), -2);
    cr_assert_str_eq(back.base_model, c.base_model);
    cr_assert_eq(back.n_targets, 3);
    cr_assert_str_eq(back.target_modules[2], "down_proj");
    cr_assert_float_eq(peft_scaling(&back), 32 / 4.0, 1e-12);
    bool m2[PEFT_MODULE_COUNT];
    cr_assert_eq(peft_config_targets(&back, ARCH_LLAMA, m2, "x", &err), 0, "%s", err.msg);
    cr_assert_arr_eq(m2, mask, sizeof mask);
    cr_assert_eq(peft_config_targets(&back, ARCH_GPT2, m2, "x", &err), -1); /* q_proj: not a GPT-2 module */
    cr_assert(strstr(err.msg, "q_proj"), "%s", err.msg);
    char *text = peft_config_to_json(&c);
    cr_assert(strstr(text, "{\n  \"alpha_pattern\": {},\n  \"auto_mapping\": null,\n"), "%s", text);
    cr_assert(strstr(text, "\"lora_alpha\": 32,\n  \"lora_dropout\": 0.05,\n"), "%s", text);
    cr_assert(strstr(text, "\"target_modules\": [\n    \"q_proj\",\n    \"v_proj\",\n    \"down_proj\"\n  ],\n"), "%s",
              text);
    free(text);
    /* GPT-2: one c_proj without the other is named by its parent; all-linear resolves */
    bool g[PEFT_MODULE_COUNT] = {0};
    g[PEFT_C_ATTN] = g[PEFT_MLP_C_PROJ] = true;
    peft_config_set_targets(&c, g);
    cr_assert_eq(c.n_targets, 2);
    cr_assert_str_eq(c.target_modules[1], "mlp.c_proj");
    g[PEFT_ATTN_C_PROJ] = true;
    peft_config_set_targets(&c, g);
    cr_assert_eq(c.n_targets, 2);
    cr_assert_str_eq(c.target_modules[1], "c_proj");
    const char *al = "{" "\"peft_type\": \"LORA\", \"target_modules\": \"all-linear\", \"task_type\": null}";
    cr_assert_eq(peft_config_parse(&back, al, strlen(al), "a.json", &err), 0, "%s", err.msg);
    cr_assert_eq(peft_config_targets(&back, ARCH_GPT2, m2, "a.json", &err), 0);
    cr_assert(m2[PEFT_C_ATTN] && m2[PEFT_ATTN_C_PROJ] && m2[PEFT_C_FC] && m2[PEFT_MLP_C_PROJ] && !m2[PEFT_Q_PROJ]);
    test_scratch_remove(dir);
}

Test(peft_config, accepts_what_peft_writes) {
    const char *ok[] = {
        "{" MIN_OK "}",
        "{" MIN_OK ", \"r\": 8.0, \"lora_alpha\": 0.5, \"init_lora_weights\": false, \"bias\": \"none\"}",
        "{" MIN_OK ", \"init_lora_weights\": \"gaussian\", \"revision\": \"main\", \"peft_version\": \"0.18.1\"}",
        "{" MIN_OK ", \"init_lora_weights\": \"pissa\", \"modules_to_save\": null, \"rank_pattern\": {}}",
        /* PEFT: "[number of iters] ... must be a nonnegative integer"; a gtrain run with pissa_niter_0 writes it */
        "{" MIN_OK ", \"init_lora_weights\": \"pissa_niter_0\"}",
        "{" MIN_OK ", \"use_dora\": false, \"layers_to_transform\": null, \"some_new_feature\": null}",
        "{" MIN_OK ", \"runtime_config\": {\"ephemeral_gpu_offload\": false}, \"qalora_group_size\": 16}",
        "{\"peft_type\": \"LORA\", \"target_modules\": [\"self_attn.q_proj\", \"mlp.c_proj\", \"q_proj\"]}",
        /* full module names, as PEFT 0.21 writes them below 20 adapted modules */
        "{\"peft_type\": \"LORA\", \"target_modules\": [\"transformer.h.3.mlp.c_proj\", \"transformer.h.0.attn.c_attn\"]}",
        "{\"peft_type\": \"LORA\", \"target_modules\": [\"model.layers.1.self_attn.k_proj\", "
        "\"model.layers.0.self_attn.k_proj\", \"model.layers.12.mlp.down_proj\"]}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        PeftConfig c;
        GtError err = {0};
        cr_assert_eq(peft_config_parse(&c, ok[i], strlen(ok[i]), "ok.json", &err), 0, "case %zu: %s", i, err.msg);
    }
    /* full names are their module's path in every layer: one entry per module */
    PeftConfig c;
    GtError err = {0};
    const char *full = ok[sizeof ok / sizeof *ok - 1];
    cr_assert_eq(peft_config_parse(&c, full, strlen(full), "ok.json", &err), 0, "%s", err.msg);
    cr_assert_eq(c.n_targets, 2);
    cr_assert_str_eq(c.target_modules[0], "self_attn.k_proj");
    cr_assert_str_eq(c.target_modules[1], "mlp.down_proj");
    bool mask[PEFT_MODULE_COUNT];
    cr_assert_eq(peft_config_targets(&c, ARCH_LLAMA, mask, "ok.json", &err), 0, "%s", err.msg);
    for (int m = 0; m < PEFT_MODULE_COUNT; m++)
        cr_assert_eq(mask[m], m == PEFT_K_PROJ || m == PEFT_DOWN_PROJ, "module %d", m);
}

Test(peft_config, hostile_configs_are_one_line_naming_the_key) {
    static const struct {
        const char *json, *key;
    } cases[] = {
        {"{\"peft_type\": \"PREFIX_TUNING\", \"target_modules\": [\"q_proj\"]}", "peft_type"},
        {"{\"peft_type\": \"lora\", \"target_modules\": [\"q_proj\"]}", "peft_type"},
        {"{\"target_modules\": [\"q_proj\"]}", "peft_type"},
        {"{\"peft_type\": \"LORA\"}", "target_modules"},
        {"{" MIN_OK ", \"task_type\": \"SEQ_CLS\"}", "task_type"},
        {"{" MIN_OK ", \"r\": 0}", "r:"},
        {"{" MIN_OK ", \"r\": 8.5}", "r:"},
        {"{" MIN_OK ", \"r\": 1e12}", "r:"},
        {"{" MIN_OK ", \"r\": \"8\"}", "r:"},
        {"{" MIN_OK ", \"lora_alpha\": 0}", "lora_alpha"},
        {"{" MIN_OK ", \"lora_alpha\": -16}", "lora_alpha"},
        {"{" MIN_OK ", \"lora_alpha\": \"16\"}", "lora_alpha"},
        {"{" MIN_OK ", \"lora_dropout\": 1}", "lora_dropout"},
        {"{" MIN_OK ", \"lora_dropout\": -0.1}", "lora_dropout"},
        {"{" MIN_OK ", \"use_rslora\": 1}", "use_rslora"},
        {"{" MIN_OK ", \"fan_in_fan_out\": \"yes\"}", "fan_in_fan_out"},
        {"{" MIN_OK ", \"init_lora_weights\": \"olora\"}", "init_lora_weights"},
        {"{" MIN_OK ", \"init_lora_weights\": \"pissa_niter_01\"}", "init_lora_weights"},
        {"{" MIN_OK ", \"init_lora_weights\": \"pissa_niter_1001\"}", "init_lora_weights"},
        {"{" MIN_OK ", \"init_lora_weights\": \"pissa_niter_-1\"}", "init_lora_weights"},
        {"{" MIN_OK ", \"init_lora_weights\": \"pissa_niter_x\"}", "init_lora_weights"},
        {"{" MIN_OK ", \"init_lora_weights\": \"loftq\"}", "init_lora_weights"},
        {"{\"peft_type\": \"LORA\", \"target_modules\": [\"qkv\"]}", "target_modules"},
        {"{\"peft_type\": \"LORA\", \"target_modules\": [\"model.layers.01.self_attn.q_proj\"]}", "target_modules"},
        {"{\"peft_type\": \"LORA\", \"target_modules\": [\"model.layers.x.self_attn.q_proj\"]}", "target_modules"},
        {"{\"peft_type\": \"LORA\", \"target_modules\": [\"model.layers.0.q_proj\"]}", "target_modules"},
        {"{\"peft_type\": \"LORA\", \"target_modules\": [\"model.layers.0.self_attn.qkv\"]}", "target_modules"},
        {"{\"peft_type\": \"LORA\", \"target_modules\": []}", "target_modules"},
        {"{\"peft_type\": \"LORA\", \"target_modules\": [1]}", "target_modules"},
        {"{\"peft_type\": \"LORA\", \"target_modules\": \".*\\\\.(q_proj|v_proj)\"}", "regular expression"},
        {"{\"peft_type\": \"LORA\", \"target_modules\": [\"all-linear\"]}", "target_modules"},
        {"{\"peft_type\": \"LORA\", \"target_modules\": null}", "target_modules"},
        {"{" MIN_OK ", \"bias\": \"all\"}", "bias"},
        {"{" MIN_OK ", \"bias\": \"lora_only\"}", "bias"},
        {"{" MIN_OK ", \"modules_to_save\": [\"lm_head\"]}", "modules_to_save"},
        {"{" MIN_OK ", \"layers_to_transform\": [0, 1]}", "layers_to_transform"},
        {"{" MIN_OK ", \"layers_pattern\": \"layers\"}", "layers_pattern"},
        {"{" MIN_OK ", \"rank_pattern\": {\"q_proj\": 4}}", "rank_pattern"},
        {"{" MIN_OK ", \"alpha_pattern\": {\"q_proj\": 4}}", "alpha_pattern"},
        {"{" MIN_OK ", \"use_dora\": 1}", "use_dora"},
        {"{" MIN_OK ", \"lora_bias\": true}", "lora_bias"},
        {"{" MIN_OK ", \"exclude_modules\": [\"k_proj\"]}", "exclude_modules"},
        {"{" MIN_OK ", \"loftq_config\": {\"loftq_bits\": 4}}", "loftq_config"},
        {"{" MIN_OK ", \"layer_replication\": [[0, 2]]}", "layer_replication"},
        {"{" MIN_OK ", \"some_new_feature\": 3}", "some_new_feature"},
        {"{" MIN_OK ", \"r\": 8, \"r\": 16}", "twice"},
        {"{" MIN_OK ", \"base_model_name_or_path\": 5}", "base_model_name_or_path"},
        {"[" MIN_OK "]", "expected"},
        {"{" MIN_OK "} {}", "after"},
        {"{" MIN_OK ", \"x\": [[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]}", "nested"},
        {"{" MIN_OK ", \"revision\": \"a\\u0000b\"}", "NUL"},
        {"{" MIN_OK, "valid JSON"},
        {"", "valid JSON"},
    };
    char dir[256];
    test_scratch_make(dir, sizeof dir, "peft_hostile");
    const char *path = test_join(dir, PEFT_CONFIG_FILE);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        test_write_file(path, cases[i].json, strlen(cases[i].json));
        PeftConfig c;
        GtError err = {0};
        cr_assert_eq(peft_config_read(dir, &c, &err), -1, "case %zu accepted: %s", i, cases[i].json);
        assert_one_line_code2(&err, path, cases[i].key);
    }
    test_scratch_remove(dir);
}

Test(peft_files, keys_and_their_inverse) {
    char k[PEFT_KEY_MAX];
    cr_assert_eq(peft_key(k, sizeof k, ARCH_LLAMA, 0, PEFT_Q_PROJ, false), 0);
    cr_assert_str_eq(k, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
    cr_assert_eq(peft_key(k, sizeof k, ARCH_LLAMA, 31, PEFT_DOWN_PROJ, true), 0);
    cr_assert_str_eq(k, "base_model.model.model.layers.31.mlp.down_proj.lora_B.weight");
    cr_assert_eq(peft_key(k, sizeof k, ARCH_GPT2, 3, PEFT_C_ATTN, false), 0);
    cr_assert_str_eq(k, "base_model.model.transformer.h.3.attn.c_attn.lora_A.weight");
    cr_assert_eq(peft_key(k, sizeof k, ARCH_GPT2, 1, PEFT_MLP_C_PROJ, true), 0);
    cr_assert_str_eq(k, "base_model.model.transformer.h.1.mlp.c_proj.lora_B.weight");
    cr_assert_eq(peft_key(k, sizeof k, ARCH_GPT2, 1, PEFT_Q_PROJ, true), -1);
    cr_assert_eq(peft_key(k, 20, ARCH_LLAMA, 1, PEFT_Q_PROJ, true), -1);
    for (int a = 0; a < ARCH_COUNT; a++)
        for (int m = 0; m < PEFT_MODULE_COUNT; m++)
            for (int b = 0; b < 3; b++) { /* lora_A, lora_B, DoRA's lora_magnitude_vector */
                if (peft_module_arch((PeftModule)m) != (ModelArch)a) continue;
                cr_assert_eq(peft_key(k, sizeof k, (ModelArch)a, 12, (PeftModule)m, b), 0);
                int l;
                PeftModule pm;
                int pb;
                cr_assert_eq(peft_key_parse(k, (ModelArch)a, &l, &pm, &pb), 0, "%s", k);
                cr_assert(l == 12 && pm == (PeftModule)m && pb == b, "%s", k);
                if (a != ARCH_PHI3) /* Phi-3's o_proj and down_proj keys are the Llama family's too */
                    cr_assert_eq(peft_key_parse(k, a == ARCH_GPT2 ? ARCH_LLAMA : ARCH_GPT2, &l, &pm, &pb), -1, "%s", k);
            }
    const char *bad[] = {"base_model.model.model.layers.01.self_attn.q_proj.lora_A.weight",
                         "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight",
                         "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector.weight",
                         "base_model.model.model.layers.0.self_attn.q_proj.lora_B.bias",
                         "base_model.model.model.layers.-1.self_attn.q_proj.lora_A.weight",
                         "base_model.model.model.layers.999999999999.self_attn.q_proj.lora_A.weight",
                         "model.layers.0.self_attn.q_proj.lora_A.weight",
                         "base_model.model.lm_head.lora_A.weight", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int l;
        PeftModule pm;
        int pb;
        cr_assert_eq(peft_key_parse(bad[i], ARCH_LLAMA, &l, &pm, &pb), -1, "%s", bad[i]);
    }
}

/* element k of tensor t = 2e + lora_B: exact in fp32 and bf16 (as peft_adapter_check.py) */
static float value(uint64_t k, int t) { return (float)((int)((7 * k + 13 * (uint64_t)t) % 251) - 125) / 64.0f; }
static int fill(void *ctx, int e, int lora_B, uint64_t off, size_t n, float *dst, GtError *err) {
    for (size_t k = 0; k < n; k++) dst[k] = value(off + k, 2 * e + lora_B);
    return 0;
}

/* d: a small model; mask: q_proj + down_proj (Llama) or c_attn + mlp.c_proj (GPT-2) */
static int small_model(ModelDesc *d, ModelArch arch, bool mask[PEFT_MODULE_COUNT], PeftEntry **e) {
    memset(d, 0, sizeof *d);
    d->arch = arch;
    d->n_layer = 2;
    d->n_head = 4;
    d->n_kv_head = arch == ARCH_LLAMA ? 2 : 4;
    d->n_embd = 32;
    d->n_inner = 48;
    d->vocab_size = 64;
    d->n_positions = 16;
    model_desc_defaults(d);
    memset(mask, 0, PEFT_MODULE_COUNT * sizeof *mask);
    if (arch == ARCH_LLAMA) mask[PEFT_Q_PROJ] = mask[PEFT_DOWN_PROJ] = true;
    else mask[PEFT_C_ATTN] = mask[PEFT_MLP_C_PROJ] = true;
    return peft_entries_for(d, mask, e);
}

static void config_for(PeftConfig *c, const bool *mask, int r, bool gpt2) {
    peft_config_defaults(c);
    c->r = r;
    c->lora_alpha = 2 * r;
    c->lora_dropout = 0.05;
    c->use_rslora = true;
    c->fan_in_fan_out = gpt2;
    snprintf(c->init, sizeof c->init, "pissa_niter_4");
    snprintf(c->base_model, sizeof c->base_model, "some/base \"model\"");
    peft_config_set_targets(c, mask);
}

static void round_trip(ModelArch arch, StDtype dtype, size_t staging) {
    ModelDesc d;
    bool mask[PEFT_MODULE_COUNT];
    PeftEntry *e;
    int n = small_model(&d, arch, mask, &e);
    cr_assert_eq(n, 4);
    PeftConfig c, back;
    config_for(&c, mask, 4, arch == ARCH_GPT2);
    char dir[256];
    test_scratch_make(dir, sizeof dir, "peft_rt");
    GtError err = {0};
    cr_assert_eq(peft_adapter_write(dir, &c, arch, e, n, dtype, staging, fill, NULL, &err), 0, "%s", err.msg);
    PeftAdapter *a;
    cr_assert_eq(peft_adapter_open(&a, dir, arch, e, n, &back, &err), 0, "%s", err.msg);
    cr_assert_eq(back.r, 4);
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 2; b++) {
            size_t numel = (size_t)(b ? e[i].out : e[i].in) * 4;
            float *buf = malloc(numel * sizeof *buf);
            cr_assert(buf);
            cr_assert_eq(peft_adapter_read(a, i, b, buf, numel, &err), 0, "%s", err.msg);
            for (size_t k = 0; k < numel; k++) cr_assert_eq(buf[k], value(k, 2 * i + b), "%d %d %zu", i, b, k);
            free(buf);
        }
    peft_adapter_close(a);
    test_scratch_remove(dir);
    free(e);
}

Test(peft_files, round_trip_llama_f32) { round_trip(ARCH_LLAMA, ST_F32, 0); }
Test(peft_files, round_trip_gpt2_bf16_small_staging) { round_trip(ARCH_GPT2, ST_BF16, 7); }

/* an adapter written for (mask, r), then opened with what the test changes */
Test(peft_files, hostile_adapters_are_one_line_naming_the_key) {
    ModelDesc d;
    bool mask[PEFT_MODULE_COUNT];
    PeftEntry *e;
    int n = small_model(&d, ARCH_LLAMA, mask, &e);
    PeftConfig c, got;
    config_for(&c, mask, 4, false);
    char dir[256];
    test_scratch_make(dir, sizeof dir, "peft_bad");
    const char *wfile = test_join(dir, PEFT_WEIGHTS_FILE), *cfile = test_join(dir, PEFT_CONFIG_FILE);
    GtError err = {0};
    PeftAdapter *a = NULL;
    cr_assert_eq(peft_adapter_write(dir, &c, ARCH_LLAMA, e, n, ST_F32, 0, fill, NULL, &err), 0, "%s", err.msg);

    /* the config says r = 8, the tensors have r = 4 */
    PeftConfig c8 = c;
    c8.r = 8;
    cr_assert_eq(peft_config_write(dir, &c8, &err), 0);
    cr_assert_eq(peft_adapter_open(&a, dir, ARCH_LLAMA, e, n, &got, &err), -1);
    assert_one_line_code2(&err, wfile, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
    cr_assert(strstr(err.msg, "r = 8"), "%s", err.msg);
    cr_assert_null(a);
    cr_assert_eq(peft_config_write(dir, &c, &err), 0);

    /* shapes that do not match the base: a model with n_embd 48 */
    PeftEntry *e2 = malloc((size_t)n * sizeof *e2);
    cr_assert(e2);
    memcpy(e2, e, (size_t)n * sizeof *e2);
    e2[0].in = 48;
    cr_assert_eq(peft_adapter_open(&a, dir, ARCH_LLAMA, e2, n, &got, &err), -1);
    assert_one_line_code2(&err, wfile, "layers.0.self_attn.q_proj.lora_A.weight");
    cr_assert(strstr(err.msg, "[4, 48]") && strstr(err.msg, "[4, 32]"), "%s", err.msg);

    /* a key for a module the config does not target */
    PeftConfig cq = c;
    cq.n_targets = 1;
    snprintf(cq.target_modules[0], sizeof cq.target_modules[0], "q_proj");
    cr_assert_eq(peft_config_write(dir, &cq, &err), 0);
    int nq = 0;
    for (int i = 0; i < n; i++)
        if (e[i].module == PEFT_Q_PROJ) e2[nq++] = e[i];
    cr_assert_eq(peft_adapter_open(&a, dir, ARCH_LLAMA, e2, nq, &got, &err), -1);
    assert_one_line_code2(&err, wfile, "mlp.down_proj.lora_A.weight");
    cr_assert(strstr(err.msg, "target_modules"), "%s", err.msg);
    /* ... and the caller expecting a module the config does not target */
    cr_assert_eq(peft_adapter_open(&a, dir, ARCH_LLAMA, e, n, &got, &err), -1);
    assert_one_line_code2(&err, cfile, "target_modules");
    cr_assert_eq(peft_config_write(dir, &c, &err), 0);

    /* a layer the model does not have: the adapter of a 2-layer model onto a 1-layer one */
    cr_assert_eq(peft_adapter_open(&a, dir, ARCH_LLAMA, e, n / 2, &got, &err), -1);
    assert_one_line_code2(&err, wfile, "layers.1.");

    /* a missing key: the model has a third layer */
    PeftEntry *e3 = malloc((size_t)(n + 1) * sizeof *e3);
    cr_assert(e3);
    memcpy(e3, e, (size_t)n * sizeof *e3);
    e3[n] = (PeftEntry){2, PEFT_Q_PROJ, 32, 32};
    cr_assert_eq(peft_adapter_open(&a, dir, ARCH_LLAMA, e3, n + 1, &got, &err), -1);
    assert_one_line_code2(&err, wfile, "base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight");

    /* the Llama adapter opened as GPT-2's */
    bool gm[PEFT_MODULE_COUNT];
    PeftEntry *eg;
    ModelDesc dg;
    int ng = small_model(&dg, ARCH_GPT2, gm, &eg);
    cr_assert_eq(peft_adapter_open(&a, dir, ARCH_GPT2, eg, ng, &got, &err), -1);
    assert_one_line_code2(&err, cfile, "target_modules");

    /* a config that says another peft_type */
    const char *ia3 = "{\"peft_type\": \"IA3\", \"target_modules\": [\"q_proj\"]}";
    test_write_file(cfile, ia3, strlen(ia3));
    cr_assert_eq(peft_adapter_open(&a, dir, ARCH_LLAMA, e, n, &got, &err), -1);
    assert_one_line_code2(&err, cfile, "peft_type");
    cr_assert_eq(peft_config_write(dir, &c, &err), 0);

    /* a tensor that is not a LoRA weight (a DoRA magnitude), and a non-float dtype */
    float v[32] = {0};
    StTensorOut t[2] = {{"base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", ST_F32, 1, {32}, v}};
    cr_assert_eq(safetensors_write(wfile, t, 1, NULL, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(peft_adapter_open(&a, dir, ARCH_LLAMA, e, n, &got, &err), -1);
    assert_one_line_code2(&err, wfile, "lora_magnitude_vector");
    const char hdr[] = "{\"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight\":"
                       "{\"dtype\":\"I64\",\"shape\":[4,32],\"data_offsets\":[0,1024]}}";
    size_t hl = sizeof hdr - 1, total = 8 + hl + 1024;
    char *raw = calloc(1, total);
    cr_assert(raw);
    uint64_t hl64 = hl;
    memcpy(raw, &hl64, 8);
    memcpy(raw + 8, hdr, hl);
    test_write_file(wfile, raw, total);
    free(raw);
    cr_assert_eq(peft_adapter_open(&a, dir, ARCH_LLAMA, e, n, &got, &err), -1);
    assert_one_line_code2(&err, wfile, "I64");

    /* only a pickled adapter_model.bin */
    unlink(wfile);
    test_write_file(test_join(dir, "adapter_model.bin"), "PK", 2);
    cr_assert_eq(peft_adapter_open(&a, dir, ARCH_LLAMA, e, n, &got, &err), -1);
    assert_one_line_code2(&err, "adapter_model.bin", "safetensors");
    test_scratch_remove(dir);
    free(e);
    free(e2);
    free(e3);
    free(eg);
}

Test(peft_files, peft_reads_ours_and_we_read_peft_s, .timeout = 120) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT not set (run through make test)");
    test_require_refs();
    for (int arch = ARCH_GPT2; arch <= ARCH_LLAMA; arch++) {
        ModelDesc d;
        bool mask[PEFT_MODULE_COUNT];
        PeftEntry *e;
        int n = small_model(&d, (ModelArch)arch, mask, &e);
        PeftConfig c, got;
        config_for(&c, mask, 4, arch == ARCH_GPT2);
        char dir[256], cmd[1024];
        test_scratch_make(dir, sizeof dir, "peft_py");
        GtError err = {0};
        cr_assert_eq(peft_adapter_write(dir, &c, (ModelArch)arch, e, n, ST_F32, 0, fill, NULL, &err), 0, "%s",
                     err.msg);
        const char *an = arch == ARCH_GPT2 ? "gpt2" : "llama";
        snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/peft_adapter_check.py' check '%s' %s 2 4 32 48",
                 root, dir, an);
        cr_assert_eq(system(cmd), 0, "%s", cmd);
        snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/peft_adapter_check.py' write '%s' %s 2 4 32 48",
                 root, dir, an);
        cr_assert_eq(system(cmd), 0, "%s", cmd);
        PeftAdapter *a;
        cr_assert_eq(peft_adapter_open(&a, dir, (ModelArch)arch, e, n, &got, &err), 0, "%s", err.msg);
        cr_assert_eq(got.lora_alpha, 16);
        for (int i = 0; i < n; i++) {
            size_t numel = (size_t)e[i].out * 4;
            float *buf = malloc(numel * sizeof *buf);
            cr_assert(buf);
            cr_assert_eq(peft_adapter_read(a, i, true, buf, numel, &err), 0, "%s", err.msg);
            for (size_t k = 0; k < numel; k++) cr_assert_eq(buf[k], value(k, 2 * i + 1));
            free(buf);
        }
        peft_adapter_close(a);
        test_scratch_remove(dir);
        free(e);
    }
}
