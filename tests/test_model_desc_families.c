/* test_model_desc_families.c - the config.json of the families added by description (suite
 * model_desc): Phi-3 (model_type phi3) and Qwen3 (qwen3). What is accepted (sizes, the window, the tied head), the
 * published parameter count (a closed-form count written here from HF's module list, independent
 * of src/), and every refusal of what would change the computation (a table: one line, exit code
 * 2, naming the file, the field and the value). */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_desc.h"

static int parse(ModelDesc *d, const char *json, GtError *err) {
    memset(err, 0, sizeof *err);
    return model_desc_parse(d, json, strlen(json), "model.json", err);
}

static ModelDesc accept(const char *json) {
    ModelDesc d;
    GtError err;
    cr_assert_eq(parse(&d, json, &err), 0, "%s: %s", json, err.msg);
    return d;
}

#define PHI3_MIN                                                                                                       \
    "\"model_type\": \"phi3\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2,"              \
    " \"num_attention_heads\": 4, \"vocab_size\": 256, \"max_position_embeddings\": 256"

/* microsoft/Phi-3-mini-4k-instruct's config.json (its size fields and the ones gtrain reads) */
static const char PHI3_MINI[] =
    "{\"architectures\": [\"Phi3ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 1, \"embd_pdrop\": 0.0,"
    " \"eos_token_id\": 32000, \"hidden_act\": \"silu\", \"hidden_size\": 3072, \"initializer_range\": 0.02,"
    " \"intermediate_size\": 8192, \"max_position_embeddings\": 4096, \"model_type\": \"phi3\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 32,"
    " \"original_max_position_embeddings\": 4096, \"pad_token_id\": 32000, \"resid_pdrop\": 0.0, \"rms_norm_eps\": 1e-05,"
    " \"rope_scaling\": null, \"rope_theta\": 10000.0, \"sliding_window\": 2047, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.40.2\", \"use_cache\": true, \"vocab_size\": 32064}";

/* Phi3ForCausalLM's parameters from HF's module list: embed_tokens, per layer qkv_proj
 * [(H + 2 KV) hd, C], o_proj [C, H hd], gate_up_proj [2 I, C], down_proj [C, I], two RMSNorm
 * weights; the final norm; lm_head unless tied */
static uint64_t phi3_params(const ModelDesc *d) {
    const uint64_t C = (uint64_t)d->n_embd, I = (uint64_t)d->n_inner, hd = (uint64_t)d->head_dim;
    const uint64_t H = (uint64_t)d->n_head, KV = (uint64_t)d->n_kv_head, V = (uint64_t)d->vocab_size;
    const uint64_t layer = (H + 2 * KV) * hd * C + C * H * hd + 2 * I * C + C * I + 2 * C;
    return V * C + (uint64_t)d->n_layer * layer + C + (d->tie_word_embeddings ? 0 : V * C);
}

Test(model_desc, phi3_mini_4k) {
    ModelDesc d = accept(PHI3_MINI);
    cr_expect_eq(d.arch, ARCH_PHI3);
    cr_expect_str_eq(d.model_type, "phi3");
    cr_expect(d.n_layer == 32 && d.n_head == 32 && d.n_kv_head == 32 && d.head_dim == 96 && d.n_embd == 3072 &&
              d.n_inner == 8192 && d.vocab_size == 32064 && d.n_positions == 4096);
    cr_expect_eq(d.sliding_window, 2047);
    cr_expect(!d.qkv_bias && !d.o_bias && !d.mlp_bias && !d.tie_word_embeddings && !d.rope_llama3);
    cr_expect_eq(d.layer_norm_epsilon, 1e-5);
    cr_expect_eq(phi3_params(&d), 3821079552ull, "the published 3.82B");
    cr_expect_eq(model_desc_num_params(&d), phi3_params(&d));
}

Test(model_desc, phi3_defaults_and_variants) {
    ModelDesc d = accept("{" PHI3_MIN "}");
    cr_expect_eq(d.arch, ARCH_PHI3);
    cr_expect_eq(d.n_kv_head, 4, "num_key_value_heads absent: num_attention_heads (HF's Phi3Config)");
    cr_expect_eq(d.head_dim, 16);
    cr_expect_eq(d.sliding_window, 0, "sliding_window absent: none (HF's default None)");
    cr_expect_eq(d.rope_theta, 10000);
    d = accept("{" PHI3_MIN ", \"sliding_window\": null, \"num_key_value_heads\": 2, \"tie_word_embeddings\": true}");
    cr_expect(d.sliding_window == 0 && d.n_kv_head == 2 && d.tie_word_embeddings);
    cr_expect_eq(model_desc_num_params(&d), phi3_params(&d));
    d = accept("{" PHI3_MIN ", \"sliding_window\": 8, \"resid_pdrop\": 0, \"embd_pdrop\": 0.0, \"attention_dropout\": 0,"
               " \"partial_rotary_factor\": 1.0, \"rope_scaling\": {\"rope_type\": \"default\"}}");
    cr_expect_eq(d.sliding_window, 8);
    d = accept("{" PHI3_MIN ", \"architectures\": [\"Phi3ForCausalLM\"], \"head_dim\": 8}");
    cr_expect_eq(d.head_dim, 8);
}

#define QWEN3_MIN                                                                                                      \
    "\"model_type\": \"qwen3\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2,"             \
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 32, \"vocab_size\": 256,"                  \
    " \"max_position_embeddings\": 256"

#define QWEN3_NO_HD                                                                                                    \
    "\"model_type\": \"qwen3\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2,"             \
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 256, \"max_position_embeddings\": 256"

/* Qwen/Qwen3-0.6B's config.json (its size fields and the ones gtrain reads) */
static const char QWEN3_06B[] =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 128, \"hidden_act\": \"silu\","
    " \"hidden_size\": 1024, \"initializer_range\": 0.02, \"intermediate_size\": 3072,"
    " \"max_position_embeddings\": 40960, \"max_window_layers\": 28, \"model_type\": \"qwen3\","
    " \"num_attention_heads\": 16, \"num_hidden_layers\": 28, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06,"
    " \"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null, \"tie_word_embeddings\": true,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\", \"use_cache\": true,"
    " \"use_sliding_window\": false, \"vocab_size\": 151936}";

/* Qwen3ForCausalLM's parameters from HF's module list: Llama's (q/k/v/o with attention_bias) plus
 * q_norm and k_norm [head_dim] per layer */
static uint64_t qwen3_params(const ModelDesc *d) {
    const uint64_t C = (uint64_t)d->n_embd, I = (uint64_t)d->n_inner, hd = (uint64_t)d->head_dim;
    const uint64_t H = (uint64_t)d->n_head, KV = (uint64_t)d->n_kv_head, V = (uint64_t)d->vocab_size;
    const uint64_t bias = d->qkv_bias ? (H + 2 * KV) * hd + C : 0;
    const uint64_t layer = (H + 2 * KV) * hd * C + C * H * hd + 3 * I * C + 2 * C + 2 * hd + bias;
    return V * C + (uint64_t)d->n_layer * layer + C + (d->tie_word_embeddings ? 0 : V * C);
}

Test(model_desc, qwen3_06b) {
    ModelDesc d = accept(QWEN3_06B);
    cr_expect_eq(d.arch, ARCH_QWEN3);
    cr_expect(d.n_layer == 28 && d.n_head == 16 && d.n_kv_head == 8 && d.head_dim == 128 && d.n_embd == 1024 &&
              d.n_inner == 3072 && d.vocab_size == 151936 && d.n_positions == 40960);
    cr_expect(d.tie_word_embeddings && !d.qkv_bias && !d.o_bias && !d.mlp_bias && d.sliding_window == 0);
    cr_expect_eq(d.rope_theta, 1e6);
    cr_expect_eq(qwen3_params(&d), 596049920ull, "the published 0.6B (0.44B without the embedding)");
    cr_expect_eq(model_desc_num_params(&d), qwen3_params(&d));
}

Test(model_desc, qwen3_variants) {
    ModelDesc d = accept("{" QWEN3_MIN ", \"attention_bias\": true}");
    cr_expect(d.qkv_bias && d.o_bias && !d.mlp_bias && !d.tie_word_embeddings);
    cr_expect_eq(model_desc_num_params(&d), qwen3_params(&d));
    d = accept("{" QWEN3_MIN ", \"use_sliding_window\": true, \"sliding_window\": 8, \"max_window_layers\": 0}");
    cr_expect_eq(d.sliding_window, 8);
    d = accept("{" QWEN3_MIN ", \"use_sliding_window\": false, \"sliding_window\": 4096}");
    cr_expect_eq(d.sliding_window, 0);
    d = accept("{" QWEN3_MIN ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
               " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}}");
    cr_expect(d.rope_llama3);
}

typedef struct {
    const char *json, *want1, *want2;
} BadCase;

static const BadCase BAD[] = {
    {"{" PHI3_MIN ", \"architectures\": [\"LlamaForCausalLM\"]}", "architectures: expected [\"Phi3ForCausalLM\"]",
     "\"LlamaForCausalLM\""},
    {"{" PHI3_MIN ", \"resid_pdrop\": 0.1}", "resid_pdrop: expected 0", "found 0.1"},
    {"{" PHI3_MIN ", \"embd_pdrop\": 0.05}", "embd_pdrop: expected 0", "found 0.05"},
    {"{" PHI3_MIN ", \"attention_dropout\": 0.2}", "attention_dropout: expected 0", "found 0.2"},
    {"{" PHI3_MIN ", \"resid_pdrop\": \"0\"}", "resid_pdrop", "found \"0\""},
    {"{" PHI3_MIN ", \"partial_rotary_factor\": 0.75}", "partial_rotary_factor: expected 1", "found 0.75"},
    {"{" PHI3_MIN ", \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": [1.0], \"long_factor\": [1.0]}}",
     "rope_scaling.type: expected \"default\" (gtrain", "\"longrope\""},
    {"{" PHI3_MIN ", \"rope_scaling\": {\"rope_type\": \"su\"}}", "rope_scaling.rope_type", "\"su\""},
    {"{" PHI3_MIN ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
     " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}}",
     "HF's Phi3 has no llama3 RoPE", "\"llama3\""},
    {"{" PHI3_MIN ", \"attention_bias\": true}", "attention_bias", "HF's Phi3 has no attention biases"},
    {"{" PHI3_MIN ", \"mlp_bias\": true}", "mlp_bias", "HF's Phi3 has no MLP biases"},
    {"{" PHI3_MIN ", \"sliding_window\": 0}", "sliding_window: expected an integer in [1, ", "found 0"},
    {"{" PHI3_MIN ", \"sliding_window\": 8, \"layer_types\": [\"full_attention\", \"full_attention\"]}", "layer_types",
     "HF's Phi3 applies sliding_window to every layer"},
    {"{" PHI3_MIN ", \"hidden_act\": \"gelu\"}", "hidden_act", "\"gelu\""},
    {"{" PHI3_MIN ", \"num_key_value_heads\": 3}", "num_key_value_heads: expected a divisor", "found 3"},
    {"{\"model_type\": \"phi3\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
     " \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "intermediate_size", "no such field"},
    {"{" PHI3_MIN ", \"quantization_config\": {\"bits\": 4}}", "quantization_config", "found"},
    /* Qwen3 */
    {"{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "head_dim: expected an integer in [1, 4096] (absent means 128 in HF's Qwen3", "no such field"},
    {"{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 4, \"head_dim\": 16, \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "num_key_value_heads: expected an integer in [1, 4] (absent means 32 in HF's Qwen3", "no such field"},
    {"{" QWEN3_MIN ", \"mlp_bias\": true}", "mlp_bias", "HF's Qwen3 has no MLP biases"},
    {"{" QWEN3_MIN ", \"attention_bias\": 1}", "attention_bias: expected true or false", "found 1"},
    {"{" QWEN3_NO_HD ", \"head_dim\": 15}", "head_dim: expected an even number", "found 15"},
    {"{" QWEN3_NO_HD ", \"head_dim\": 32768}", "head_dim: expected an integer in [1, 4096]", "found 32768"},
    {"{" QWEN3_MIN ", \"attention_dropout\": 0.1}", "attention_dropout: expected 0", "found 0.1"},
    {"{" QWEN3_MIN ", \"use_sliding_window\": true, \"sliding_window\": 8, \"max_window_layers\": 1}",
     "max_window_layers", "found 1"},
    {"{" QWEN3_MIN ", \"use_sliding_window\": true, \"max_window_layers\": 0}", "sliding_window",
     "absent means 4096 in HF's Qwen3"},
    {"{" QWEN3_MIN ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", "rope_scaling.rope_type: expected \"default\" or \"llama3\"",
     "\"yarn\""},
    {"{" QWEN3_MIN ", \"architectures\": [\"Qwen2ForCausalLM\"]}", "architectures: expected [\"Qwen3ForCausalLM\"]",
     "\"Qwen2ForCausalLM\""},
    {"{\"model_type\": \"phi\", \"hidden_size\": 64}", "model_type: expected \"gpt2\", \"llama\"", "\"phi\""},
};

Test(model_desc, family_refusals) {
    int n = (int)(sizeof BAD / sizeof BAD[0]);
    for (int i = 0; i < n; i++) {
        const BadCase *b = &BAD[i];
        ModelDesc d;
        GtError err;
        int rc = parse(&d, b->json, &err);
        cr_expect_eq(rc, -1, "case %d accepted: %s", i, b->json);
        if (rc != -1) continue;
        cr_expect_eq(err.code, GT_EXIT_BAD_INPUT, "case %d: %s", i, err.msg);
        cr_expect_null(strchr(err.msg, '\n'), "case %d: %s", i, err.msg);
        cr_expect(strncmp(err.msg, "model.json: ", 12) == 0, "case %d: no file name: %s", i, err.msg);
        cr_expect(strstr(err.msg, "expected"), "case %d: %s", i, err.msg);
        cr_expect(strstr(err.msg, "found"), "case %d: %s", i, err.msg);
        if (b->want1) cr_expect(strstr(err.msg, b->want1), "case %d: '%s' not in: %s", i, b->want1, err.msg);
        if (b->want2) cr_expect(strstr(err.msg, b->want2), "case %d: '%s' not in: %s", i, b->want2, err.msg);
    }
}

/* LoRA on Phi-3 names the fused modules: PEFT has no default target_modules for phi3 (none given is
 * refused, naming them) and Llama's q_proj is not one of its modules; one line each, exit 2 */
Test(model_desc, phi3_lora_targets_are_the_fused_names, .timeout = 60) {
    const char *bin = getenv("GTRAIN_BIN"), *root = getenv("GTRAIN_ROOT");
    if (!bin || !root) cr_skip_test("GTRAIN_BIN / GTRAIN_ROOT not set (run through make test)");
    static const char *const sets[][2] = {
        {"lora.target_modules=", "PEFT has no default targets for model_type phi3; its modules: qkv_proj, o_proj, "
                                 "gate_up_proj, down_proj), found none"},
        {"lora.target_modules=q_proj", "expected modules of a Phi-3 (qkv_proj, o_proj, gate_up_proj, down_proj) model, "
                                       "found \"q_proj\""},
    };
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "cd '%s' && '%s' plan --config configs/llama-shakespeare-lora.yaml --set "
                 "model=tests/fixtures/hf_configs/tiny-phi3.json --set '%s' 2>&1; echo \"rc=$?\"", root, bin, sets[i][0]);
        FILE *p = popen(cmd, "r");
        cr_assert(p);
        char out[4096] = "";
        size_t n = fread(out, 1, sizeof out - 1, p);
        out[n] = '\0';
        pclose(p);
        cr_expect(strstr(out, sets[i][1]), "%s: '%s' not in: %s", sets[i][0], sets[i][1], out);
        cr_expect(strstr(out, "rc=2\n"), "%s: expected exit 2: %s", sets[i][0], out);
        const char *nl = strchr(out, '\n');
        cr_expect(nl && strncmp(nl + 1, "rc=", 3) == 0, "%s: expected one line: %s", sets[i][0], out);
    }
}
