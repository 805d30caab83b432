/* test_model_desc_llama.c - the Llama-family config.json (llama, mistral, qwen2; suite
 * model_desc): the published configs of tests/fixtures/hf_configs load with their values and
 * their published parameter counts (by a closed-form count written here, independent of
 * src/), defaults, and every refusal (a table: one line, exit code 2, naming the field and the
 * value). */
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

static void load_fixture(ModelDesc *d, const char *name) {
    const char *root = getenv("GTRAIN_ROOT");
    char p[1024];
    GtError err = {0};
    snprintf(p, sizeof p, "%s/tests/fixtures/hf_configs/%s", root ? root : ".", name);
    cr_assert_eq(model_desc_load(d, p, &err), 0, "%s: %s", name, err.msg);
    cr_assert_eq(d->arch, ARCH_LLAMA, "%s", name);
}

/* The parameter count of a Llama-family model, written from the HF module list (embed_tokens,
 * per layer q/k/v/o_proj, gate/up/down_proj, two RMSNorm weights; the final norm; lm_head
 * unless tied): a computation of this test, not model_desc_num_params. */
static uint64_t llama_params(const ModelDesc *d) {
    uint64_t C = (uint64_t)d->n_embd, I = (uint64_t)d->n_inner, L = (uint64_t)d->n_layer, V = (uint64_t)d->vocab_size;
    uint64_t q = (uint64_t)d->n_head * (uint64_t)d->head_dim, kv = (uint64_t)d->n_kv_head * (uint64_t)d->head_dim;
    uint64_t attn = C * q + 2 * C * kv + q * C;
    if (d->qkv_bias) attn += q + 2 * kv;
    if (d->o_bias) attn += C;
    uint64_t mlp = 3 * C * I;
    if (d->mlp_bias) mlp += 2 * I + C;
    uint64_t layer = attn + mlp + 2 * C;
    return V * C + L * layer + C + (d->tie_word_embeddings ? 0 : V * C);
}

static void expect_sizes(const ModelDesc *d, int L, int H, int KV, int hd, int C, int I, int V, int P) {
    cr_expect_eq(d->n_layer, L);
    cr_expect_eq(d->n_head, H);
    cr_expect_eq(d->n_kv_head, KV);
    cr_expect_eq(d->head_dim, hd);
    cr_expect_eq(d->n_embd, C);
    cr_expect_eq(d->n_inner, I);
    cr_expect_eq(d->vocab_size, V);
    cr_expect_eq(d->n_positions, P);
}

Test(model_desc, llama_param_formula_by_hand) {
    /* tiny-llama: C 64, H 4, KV 2, hd 16, I 128, L 2, V 256, untied: q 4096 + k 2048 + v 2048 +
     * o 4096 + mlp 24576 + norms 128 = 36992 a layer; 2 x 16384 embeddings; final norm 64 */
    ModelDesc d;
    load_fixture(&d, "tiny-llama.json");
    cr_expect_eq(llama_params(&d), 2ull * 36992 + 2 * 16384 + 64);
}

Test(model_desc, hf_mistral_7b_v01) {
    ModelDesc d;
    load_fixture(&d, "mistral-7b-v0.1.json");
    cr_expect_str_eq(d.model_type, "mistral");
    expect_sizes(&d, 32, 32, 8, 128, 4096, 14336, 32000, 32768);
    cr_expect_float_eq(d.layer_norm_epsilon, 1e-5, 1e-20);
    cr_expect_float_eq(d.rope_theta, 10000.0, 1e-9);
    cr_expect_not(d.rope_llama3);
    cr_expect_eq(d.sliding_window, 4096);
    cr_expect_not(d.tie_word_embeddings);
    cr_expect_not(d.qkv_bias || d.o_bias || d.mlp_bias);
    cr_expect_eq(llama_params(&d), 7241732096ull);
    cr_expect_eq(model_desc_qkv_dim(&d), 6144);
    cr_expect_eq(model_desc_attn_dim(&d), 4096);
}

Test(model_desc, hf_llama_3_8b) {
    ModelDesc d;
    load_fixture(&d, "llama-3-8b.json");
    cr_expect_str_eq(d.model_type, "llama");
    expect_sizes(&d, 32, 32, 8, 128, 4096, 14336, 128256, 8192);
    cr_expect_float_eq(d.rope_theta, 500000.0, 1e-9);
    cr_expect_not(d.rope_llama3);
    cr_expect_eq(d.sliding_window, 0);
    cr_expect_not(d.tie_word_embeddings);
    cr_expect_not(d.qkv_bias || d.o_bias || d.mlp_bias);
    cr_expect_eq(llama_params(&d), 8030261248ull);
}

Test(model_desc, hf_llama_31_8b) {
    ModelDesc d;
    load_fixture(&d, "llama-3.1-8b.json");
    expect_sizes(&d, 32, 32, 8, 128, 4096, 14336, 128256, 131072);
    cr_expect_float_eq(d.rope_theta, 500000.0, 1e-9);
    cr_expect(d.rope_llama3);
    cr_expect_float_eq(d.rope_factor, 8.0, 1e-12);
    cr_expect_float_eq(d.rope_low_freq_factor, 1.0, 1e-12);
    cr_expect_float_eq(d.rope_high_freq_factor, 4.0, 1e-12);
    cr_expect_eq(d.rope_original_max_positions, 8192);
    cr_expect_eq(llama_params(&d), 8030261248ull);
}

Test(model_desc, hf_llama_32_1b) {
    ModelDesc d;
    load_fixture(&d, "llama-3.2-1b.json");
    expect_sizes(&d, 16, 32, 8, 64, 2048, 8192, 128256, 131072);
    cr_expect(d.tie_word_embeddings);
    cr_expect(d.rope_llama3);
    cr_expect_float_eq(d.rope_factor, 32.0, 1e-12);
    cr_expect_float_eq(d.rope_low_freq_factor, 1.0, 1e-12);
    cr_expect_float_eq(d.rope_high_freq_factor, 4.0, 1e-12);
    cr_expect_eq(d.rope_original_max_positions, 8192);
    cr_expect_eq(llama_params(&d), 1235814400ull); /* published: 1.24B */
}

Test(model_desc, hf_qwen25_7b) {
    ModelDesc d;
    load_fixture(&d, "qwen2.5-7b.json");
    cr_expect_str_eq(d.model_type, "qwen2");
    expect_sizes(&d, 28, 28, 4, 128, 3584, 18944, 152064, 131072);
    cr_expect_float_eq(d.layer_norm_epsilon, 1e-6, 1e-20);
    cr_expect_float_eq(d.rope_theta, 1000000.0, 1e-9);
    cr_expect_eq(d.sliding_window, 0); /* use_sliding_window false: 131072 is ignored */
    cr_expect(d.qkv_bias);
    cr_expect_not(d.o_bias || d.mlp_bias);
    cr_expect_not(d.tie_word_embeddings);
    cr_expect_eq(llama_params(&d), 7615616512ull);
}

Test(model_desc, hf_qwen25_05b) {
    ModelDesc d;
    load_fixture(&d, "qwen2.5-0.5b.json");
    expect_sizes(&d, 24, 14, 2, 64, 896, 4864, 151936, 32768);
    cr_expect(d.tie_word_embeddings);
    cr_expect(d.qkv_bias);
    cr_expect_eq(d.sliding_window, 0);
    cr_expect_eq(llama_params(&d), 494032768ull); /* published: 0.49B */
}

Test(model_desc, tiny_fixtures) {
    ModelDesc d;
    load_fixture(&d, "tiny-llama.json");
    cr_expect_str_eq(d.model_type, "llama");
    expect_sizes(&d, 2, 4, 2, 16, 64, 128, 256, 256);
    cr_expect_float_eq(d.layer_norm_epsilon, 1e-5, 1e-20);
    cr_expect_not(d.tie_word_embeddings || d.qkv_bias || d.o_bias || d.mlp_bias || d.rope_llama3);
    cr_expect_eq(d.sliding_window, 0);
    cr_expect_eq(model_desc_qkv_dim(&d), 128);

    load_fixture(&d, "tiny-qwen2.json");
    cr_expect_str_eq(d.model_type, "qwen2");
    expect_sizes(&d, 2, 4, 2, 16, 64, 96, 256, 256);
    cr_expect(d.tie_word_embeddings && d.qkv_bias);
    cr_expect_not(d.o_bias || d.mlp_bias);
    cr_expect_eq(d.sliding_window, 0);
    cr_expect_float_eq(d.rope_theta, 1e6, 1e-9);
    cr_expect_eq(llama_params(&d), 256ull * 64 + 2 * (64 * 64 + 64 + 2 * (64 * 32 + 32) + 64 * 64 + 3 * 64 * 96 + 128) + 64);

    load_fixture(&d, "tiny-mistral.json");
    cr_expect_str_eq(d.model_type, "mistral");
    expect_sizes(&d, 2, 4, 2, 16, 64, 128, 256, 256);
    cr_expect_eq(d.sliding_window, 16);
    cr_expect_not(d.tie_word_embeddings || d.qkv_bias || d.o_bias || d.mlp_bias);
}

/* minimal configs: every required field, nothing else */
#define LLAMA_MIN                                                                                                      \
    "\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"            \
    " \"num_attention_heads\": 4, \"vocab_size\": 256, \"max_position_embeddings\": 256"
#define MISTRAL_MIN                                                                                                    \
    "\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"          \
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 256, \"max_position_embeddings\": 256"
#define MISTRAL_MIN_W MISTRAL_MIN ", \"sliding_window\": 16"
#define QWEN_MIN                                                                                                       \
    "\"model_type\": \"qwen2\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2,"             \
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 256, \"max_position_embeddings\": 256"
#define L3 "\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0"
#define L3_FULL L3 ", \"original_max_position_embeddings\": 8192"
#define QWEN_SW QWEN_MIN ", \"use_sliding_window\": true, \"sliding_window\": 16"

static ModelDesc accept(const char *json) {
    ModelDesc d;
    GtError err;
    cr_assert_eq(parse(&d, json, &err), 0, "refused %s: %s", json, err.msg);
    cr_assert_eq(d.arch, ARCH_LLAMA, "%s", json);
    return d;
}

Test(model_desc, llama_defaults) {
    ModelDesc d = accept("{" LLAMA_MIN "}");
    cr_expect_str_eq(d.model_type, "llama");
    cr_expect_eq(d.n_kv_head, 4);
    cr_expect_eq(d.head_dim, 16);
    cr_expect_float_eq(d.layer_norm_epsilon, 1e-6, 1e-20);
    cr_expect_float_eq(d.rope_theta, 10000.0, 1e-12);
    cr_expect_not(d.rope_llama3);
    cr_expect_not(d.tie_word_embeddings || d.qkv_bias || d.o_bias || d.mlp_bias);
    cr_expect_eq(d.sliding_window, 0);
    cr_expect_str_eq(d.path, "model.json");

    d = accept("{" MISTRAL_MIN_W "}");
    cr_expect_str_eq(d.model_type, "mistral");
    cr_expect_eq(d.sliding_window, 16);
    cr_expect_float_eq(d.layer_norm_epsilon, 1e-6, 1e-20);
    cr_expect_not(d.tie_word_embeddings || d.qkv_bias || d.o_bias || d.mlp_bias);

    d = accept("{" QWEN_MIN "}");
    cr_expect_str_eq(d.model_type, "qwen2");
    cr_expect(d.qkv_bias);
    cr_expect_not(d.o_bias || d.mlp_bias || d.tie_word_embeddings);
    cr_expect_eq(d.sliding_window, 0);
    cr_expect_float_eq(d.rope_theta, 10000.0, 1e-12);
}

Test(model_desc, llama_accepted_variants) {
    ModelDesc d;
    /* null means the default, as in HF */
    d = accept("{" LLAMA_MIN ", \"num_key_value_heads\": null, \"head_dim\": null, \"rope_scaling\": null,"
               " \"rope_parameters\": null, \"attention_dropout\": null, \"pretraining_tp\": null, \"architectures\": null}");
    cr_expect_eq(d.n_kv_head, 4);
    cr_expect_eq(d.head_dim, 16);
    d = accept("{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
               " \"num_attention_heads\": 4, \"num_key_value_heads\": null, \"vocab_size\": 256,"
               " \"max_position_embeddings\": 256, \"sliding_window\": null}");
    cr_expect_eq(d.n_kv_head, 4);
    cr_expect_eq(d.sliding_window, 0);
    /* biases */
    d = accept("{" LLAMA_MIN ", \"attention_bias\": true}");
    cr_expect(d.qkv_bias && d.o_bias);
    cr_expect_not(d.mlp_bias);
    d = accept("{" LLAMA_MIN ", \"mlp_bias\": true}");
    cr_expect(d.mlp_bias);
    cr_expect_not(d.qkv_bias || d.o_bias);
    d = accept("{" QWEN_MIN ", \"attention_bias\": true, \"mlp_bias\": false}");
    cr_expect(d.qkv_bias);
    cr_expect_not(d.o_bias || d.mlp_bias);
    d = accept("{" MISTRAL_MIN_W ", \"attention_bias\": false, \"mlp_bias\": false}");
    cr_expect_not(d.qkv_bias || d.o_bias || d.mlp_bias);
    /* head_dim apart from hidden_size / heads; hidden need not divide by heads then */
    d = accept("{" LLAMA_MIN ", \"head_dim\": 32}");
    cr_expect_eq(d.head_dim, 32);
    cr_expect_eq(model_desc_attn_dim(&d), 128);
    cr_expect_eq(model_desc_qkv_dim(&d), 384);
    d = accept("{\"model_type\": \"llama\", \"hidden_size\": 66, \"intermediate_size\": 100, \"num_hidden_layers\": 1,"
               " \"num_attention_heads\": 4, \"num_key_value_heads\": 1, \"head_dim\": 8, \"vocab_size\": 10,"
               " \"max_position_embeddings\": 8}");
    cr_expect_eq(d.n_kv_head, 1);
    cr_expect_eq(model_desc_qkv_dim(&d), 48);
    /* swish is silu; integral numbers written as floats; a BOM */
    d = accept("\xEF\xBB\xBF{" LLAMA_MIN ", \"hidden_act\": \"swish\", \"num_key_value_heads\": 2.0, \"rms_norm_eps\": 1e-5,"
               " \"tie_word_embeddings\": true}");
    cr_expect_eq(d.n_kv_head, 2);
    cr_expect(d.tie_word_embeddings);
    cr_expect_float_eq(d.layer_norm_epsilon, 1e-5, 1e-20);
    /* the defaults written out */
    d = accept("{" LLAMA_MIN ", \"attention_dropout\": 0.0, \"pretraining_tp\": 1, \"partial_rotary_factor\": 1.0,"
               " \"rope_interleaved\": false, \"rope_traditional\": false, \"quantization_config\": null,"
               " \"sliding_window_pattern\": null, \"layer_types\": [\"full_attention\", \"full_attention\"]}");
    d = accept("{" QWEN_MIN ", \"use_mrope\": false, \"attention_dropout\": 0}");
    /* architectures */
    accept("{" LLAMA_MIN ", \"architectures\": [\"LlamaForCausalLM\"]}");
    accept("{" LLAMA_MIN ", \"architectures\": []}");
    accept("{" MISTRAL_MIN_W ", \"architectures\": [\"MistralForCausalLM\"]}");
    accept("{" QWEN_MIN ", \"architectures\": [\"Qwen2ForCausalLM\"]}");
    /* harmless fields are ignored, whatever they hold */
    accept("{" LLAMA_MIN ", \"bos_token_id\": 1, \"eos_token_id\": [128001, 128008, 128009], \"pad_token_id\": null,"
           " \"torch_dtype\": \"bfloat16\", \"dtype\": \"bfloat16\", \"transformers_version\": \"5.0.0\","
           " \"use_cache\": true, \"initializer_range\": 0.02, \"_name_or_path\": \"x\", \"foo\": [1, {\"a\": null}]}");
    /* HF's Llama reads no sliding window: ignored */
    d = accept("{" LLAMA_MIN ", \"sliding_window\": 4096, \"use_sliding_window\": true, \"max_window_layers\": 1}");
    cr_expect_eq(d.sliding_window, 0);
}

Test(model_desc, llama_rope_variants) {
    ModelDesc d;
    d = accept("{" LLAMA_MIN ", \"rope_theta\": 500000.0, \"rope_scaling\": {" L3_FULL "}}");
    cr_expect(d.rope_llama3);
    cr_expect_float_eq(d.rope_theta, 500000.0, 1e-9);
    cr_expect_float_eq(d.rope_factor, 8.0, 1e-12);
    cr_expect_float_eq(d.rope_low_freq_factor, 1.0, 1e-12);
    cr_expect_float_eq(d.rope_high_freq_factor, 4.0, 1e-12);
    cr_expect_eq(d.rope_original_max_positions, 8192);
    /* the older key "type"; both keys when they agree; integers for floats */
    d = accept("{" LLAMA_MIN ", \"rope_scaling\": {\"type\": \"llama3\", \"factor\": 2, \"low_freq_factor\": 0.5,"
               " \"high_freq_factor\": 0.75, \"original_max_position_embeddings\": 128}}");
    cr_expect(d.rope_llama3);
    cr_expect_float_eq(d.rope_factor, 2.0, 1e-12);
    cr_expect_eq(d.rope_original_max_positions, 128);
    d = accept("{" LLAMA_MIN ", \"rope_scaling\": {\"type\": \"llama3\", " L3_FULL "}}");
    cr_expect(d.rope_llama3);
    /* factor 1 is no scaling but still llama3 */
    d = accept("{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 1, \"low_freq_factor\": 1,"
               " \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}}");
    cr_expect(d.rope_llama3);
    /* default: no scaling */
    d = accept("{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"default\"}}");
    cr_expect_not(d.rope_llama3);
    d = accept("{" LLAMA_MIN ", \"rope_scaling\": {\"type\": \"default\"}}");
    cr_expect_not(d.rope_llama3);
    d = accept("{" LLAMA_MIN ", \"rope_scaling\": {}}");
    cr_expect_not(d.rope_llama3);
    /* transformers 5: rope_parameters holds rope_theta */
    d = accept("{" LLAMA_MIN ", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000000.0}}");
    cr_expect_not(d.rope_llama3);
    cr_expect_float_eq(d.rope_theta, 1e6, 1e-6);
    d = accept("{" LLAMA_MIN ", \"rope_parameters\": {\"rope_theta\": 500000.0, " L3_FULL "}}");
    cr_expect(d.rope_llama3);
    cr_expect_float_eq(d.rope_theta, 500000.0, 1e-9);
    d = accept("{" LLAMA_MIN ", \"rope_theta\": 5e5, \"rope_parameters\": {\"rope_theta\": 500000.0, " L3_FULL "}}");
    cr_expect_float_eq(d.rope_theta, 500000.0, 1e-9);
    d = accept("{" QWEN_MIN ", \"rope_scaling\": null, \"rope_parameters\": {\"rope_theta\": 1e6, \"partial_rotary_factor\": 1}}");
    cr_expect_float_eq(d.rope_theta, 1e6, 1e-6);
    d = accept("{" MISTRAL_MIN_W ", \"rope_theta\": 1000000.0, \"rope_scaling\": {" L3_FULL "}}");
    cr_expect(d.rope_llama3);
}

Test(model_desc, llama_sliding_window) {
    ModelDesc d;
    /* qwen2: use_sliding_window false ignores sliding_window and max_window_layers (Qwen2.5 configs) */
    d = accept("{" QWEN_MIN ", \"use_sliding_window\": false, \"sliding_window\": 131072, \"max_window_layers\": 28}");
    cr_expect_eq(d.sliding_window, 0);
    d = accept("{" QWEN_MIN ", \"sliding_window\": 4096, \"max_window_layers\": 1}");
    cr_expect_eq(d.sliding_window, 0);
    d = accept("{" QWEN_MIN ", \"sliding_window\": null, \"max_window_layers\": null}");
    cr_expect_eq(d.sliding_window, 0);
    d = accept("{" QWEN_MIN ", \"sliding_window\": 0}");
    cr_expect_eq(d.sliding_window, 0);
    /* use_sliding_window true: layers from max_window_layers on are windowed */
    d = accept("{" QWEN_SW ", \"max_window_layers\": 0}");
    cr_expect_eq(d.sliding_window, 16);
    d = accept("{" QWEN_SW ", \"max_window_layers\": 2}");
    cr_expect_eq(d.sliding_window, 0);
    d = accept("{" QWEN_SW ", \"max_window_layers\": 28}");
    cr_expect_eq(d.sliding_window, 0);
    d = accept("{" QWEN_MIN ", \"use_sliding_window\": true, \"sliding_window\": null}");
    cr_expect_eq(d.sliding_window, 0);
    /* layer_types (transformers 5) overrides max_window_layers */
    d = accept("{" QWEN_SW ", \"max_window_layers\": 1, \"layer_types\": [\"sliding_attention\", \"sliding_attention\"]}");
    cr_expect_eq(d.sliding_window, 16);
    d = accept("{" QWEN_SW ", \"layer_types\": [\"full_attention\", \"full_attention\"]}");
    cr_expect_eq(d.sliding_window, 0);
    d = accept("{" QWEN_MIN ", \"layer_types\": [\"full_attention\", \"full_attention\"]}");
    cr_expect_eq(d.sliding_window, 0);
    /* mistral: every layer */
    d = accept("{" MISTRAL_MIN ", \"sliding_window\": 4096}");
    cr_expect_eq(d.sliding_window, 4096);
    d = accept("{" MISTRAL_MIN_W ", \"layer_types\": [\"sliding_attention\", \"sliding_attention\"]}");
    cr_expect_eq(d.sliding_window, 16);
    d = accept("{" MISTRAL_MIN ", \"sliding_window\": null, \"layer_types\": [\"full_attention\", \"full_attention\"]}");
    cr_expect_eq(d.sliding_window, 0);
    /* a window wider than the positions is stored as it is */
    d = accept("{" MISTRAL_MIN ", \"sliding_window\": 1048576}");
    cr_expect_eq(d.sliding_window, 1048576);
}

typedef struct {
    const char *json, *want1, *want2;
} BadCase;

static const BadCase BAD[] = {
    /* model_type and architectures */
    {"{" LLAMA_MIN ", \"model_type\": \"llama\"}", "model_type", "twice"},
    {"{\"model_type\": \"gpt_neox\", \"hidden_size\": 64}", "model_type: expected \"gpt2\", \"llama\"", "\"gpt_neox\""},
    {"{\"model_type\": \"Llama\", \"hidden_size\": 64}", "model_type", "\"Llama\""},
    {"{" LLAMA_MIN ", \"architectures\": [\"LlamaForSequenceClassification\"]}", "architectures",
     "\"LlamaForSequenceClassification\""},
    {"{" LLAMA_MIN ", \"architectures\": [\"MistralForCausalLM\"]}", "architectures: expected [\"LlamaForCausalLM\"]",
     "\"MistralForCausalLM\""},
    {"{" QWEN_MIN ", \"architectures\": [\"Qwen2ForCausalLM\", \"Qwen2ForTokenClassification\"]}", "architectures",
     "Qwen2ForTokenClassification"},
    {"{" QWEN_MIN ", \"architectures\": [\"Qwen2VLForConditionalGeneration\"]}", "architectures", "Qwen2VL"},
    {"{" LLAMA_MIN ", \"architectures\": \"LlamaForCausalLM\"}", "architectures: expected a list", "found \"LlamaForCausalLM\""},
    {"{" LLAMA_MIN ", \"architectures\": [1]}", "architectures", "found 1"},
    /* required sizes */
    {"{\"model_type\": \"llama\", \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
     " \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "hidden_size", "no such field"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
     " \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "intermediate_size", "no such field"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4,"
     " \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "num_hidden_layers", "no such field"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
     " \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "num_attention_heads", "no such field"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 4, \"max_position_embeddings\": 256}",
     "vocab_size", "no such field"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 4, \"vocab_size\": 256}",
     "max_position_embeddings", "no such field"},
    /* a GPT-2 config that says llama names the first missing Llama field */
    {"{\"model_type\": \"llama\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 256, \"n_positions\": 32}",
     "num_hidden_layers", "no such field"},
    /* wrong types and values */
    {"{" LLAMA_MIN ", \"hidden_size\": 64}", "hidden_size", "twice"},
    {"{\"model_type\": \"llama\", \"hidden_size\": \"64\", \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 4, \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "hidden_size: expected an integer", "\"64\""},
    {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2.5,"
     " \"num_attention_heads\": 4, \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "num_hidden_layers", "2.5"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 4, \"vocab_size\": true, \"max_position_embeddings\": 256}",
     "vocab_size", "true"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 0, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 4, \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "intermediate_size", "found 0"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 1025,"
     " \"num_attention_heads\": 4, \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "num_hidden_layers", "1025"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 65537, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 1, \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "hidden_size", "65537"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 262145, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 4, \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "intermediate_size", "262145"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 4, \"vocab_size\": 1e15, \"max_position_embeddings\": 256}",
     "vocab_size", "1e+15"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 4, \"vocab_size\": 256, \"max_position_embeddings\": 1048577}",
     "max_position_embeddings", "1048577"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 4, \"vocab_size\": 256, \"max_position_embeddings\": 0}",
     "max_position_embeddings", "found 0"},
    {"{" LLAMA_MIN ", \"rms_norm_eps\": \"1e-6\"}", "rms_norm_eps", "\"1e-6\""},
    {"{" LLAMA_MIN ", \"rms_norm_eps\": 0}", "rms_norm_eps", "found 0"},
    {"{" LLAMA_MIN ", \"rms_norm_eps\": 1}", "rms_norm_eps", "found 1"},
    {"{" LLAMA_MIN ", \"rms_norm_eps\": null}", "rms_norm_eps", "null"},
    {"{" LLAMA_MIN ", \"tie_word_embeddings\": \"true\"}", "tie_word_embeddings", "true or false"},
    {"{" LLAMA_MIN ", \"tie_word_embeddings\": 1}", "tie_word_embeddings", "found 1"},
    {"{" LLAMA_MIN ", \"attention_bias\": 0}", "attention_bias", "found 0"},
    {"{" LLAMA_MIN ", \"mlp_bias\": \"no\"}", "mlp_bias", "\"no\""},
    {"{" QWEN_MIN ", \"use_sliding_window\": \"false\"}", "use_sliding_window", "\"false\""},
    /* heads */
    {"{" LLAMA_MIN ", \"num_key_value_heads\": 3}", "num_key_value_heads: expected a divisor of num_attention_heads = 4",
     "found 3"},
    {"{" LLAMA_MIN ", \"num_key_value_heads\": 8}", "num_key_value_heads", "found 8"},
    {"{" LLAMA_MIN ", \"num_key_value_heads\": 0}", "num_key_value_heads", "found 0"},
    {"{" LLAMA_MIN ", \"num_key_value_heads\": \"2\"}", "num_key_value_heads", "\"2\""},
    {"{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 4, \"vocab_size\": 256, \"max_position_embeddings\": 256, \"sliding_window\": 16}",
     "num_key_value_heads", "no such field"},
    {"{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 4, \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "num_key_value_heads", "32 in HF's Qwen2"},
    {"{" LLAMA_MIN ", \"head_dim\": 15}", "head_dim: expected an even number", "found 15"},
    {"{" LLAMA_MIN ", \"head_dim\": 0}", "head_dim", "found 0"},
    {"{" LLAMA_MIN ", \"head_dim\": 4097}", "head_dim", "4097"},
    {"{" LLAMA_MIN ", \"head_dim\": 16.5}", "head_dim", "16.5"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 3, \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "num_attention_heads: expected a divisor of hidden_size = 64 (or a head_dim field)", "found 3"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 66, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 2, \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "head_dim: expected an even number", "hidden_size / num_attention_heads = 33"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 65536, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 8, \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "head_dim", "hidden_size / num_attention_heads = 8192"},
    {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
     " \"num_attention_heads\": 1024, \"head_dim\": 128, \"vocab_size\": 256, \"max_position_embeddings\": 256}",
     "num_attention_heads * head_dim <= 65536", "1024 * 128 = 131072"},
    /* activation */
    {"{" LLAMA_MIN ", \"hidden_act\": \"gelu\"}", "hidden_act: expected \"silu\"", "\"gelu\""},
    {"{" QWEN_MIN ", \"hidden_act\": \"relu\"}", "hidden_act", "\"relu\""},
    {"{" LLAMA_MIN ", \"hidden_act\": null}", "hidden_act", "null"},
    {"{" LLAMA_MIN ", \"hidden_act\": \"silu\\u0001\"}", "hidden_act", "\\x01"},
    /* rope_theta */
    {"{" LLAMA_MIN ", \"rope_theta\": 0}", "rope_theta: expected a number > 0", "found 0"},
    {"{" LLAMA_MIN ", \"rope_theta\": -10000}", "rope_theta", "-10000"},
    {"{" LLAMA_MIN ", \"rope_theta\": \"10000\"}", "rope_theta", "\"10000\""},
    {"{" LLAMA_MIN ", \"rope_theta\": null}", "rope_theta", "null"},
    {"{" LLAMA_MIN ", \"rope_theta\": 1e999}", "rope_theta", NULL},
    /* rope_scaling: types gtrain does not implement */
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}}", "rope_scaling.type: expected \"default\" or \"llama3\"",
     "\"linear\""},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0}}", "rope_scaling.rope_type", "\"linear\""},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}}", "rope_scaling.type", "\"dynamic\""},
    {"{" QWEN_MIN ", \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 32768}}",
     "rope_scaling.type", "\"yarn\""},
    {"{" QWEN_MIN ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", "rope_scaling.rope_type", "\"yarn\""},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"longrope\", \"long_factor\": [1], \"short_factor\": [1]}}",
     "rope_scaling.rope_type", "\"longrope\""},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"type\": \"su\", \"long_factor\": [1], \"short_factor\": [1]}}", "rope_scaling.type",
     "\"su\""},
    {"{" MISTRAL_MIN_W ", \"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}}", "rope_scaling.rope_type",
     "\"dynamic\""},
    {"{" LLAMA_MIN ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 10000, \"factor\": 4}}",
     "rope_parameters.rope_type", "\"yarn\""},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": 3}}", "rope_scaling.rope_type: expected a string", "found 3"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"type\": null}}", "rope_scaling.type", "null"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"type\": \"linear\", \"factor\": 8}}",
     "rope_scaling.type: expected the same as rope_scaling.rope_type = \"llama3\"", "\"linear\""},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"default\", \"rope_type\": \"llama3\"}}", "rope_scaling.rope_type",
     "twice"},
    {"{" LLAMA_MIN ", \"rope_scaling\": \"llama3\"}", "rope_scaling: expected an object or null", "\"llama3\""},
    {"{" LLAMA_MIN ", \"rope_scaling\": [1]}", "rope_scaling", "an array"},
    {"{" LLAMA_MIN ", \"rope_parameters\": 10000}", "rope_parameters: expected an object or null", "10000"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"default\"}, \"rope_parameters\": {\"rope_theta\": 1}}",
     "rope_parameters: expected either rope_scaling or rope_parameters", "both"},
    /* keys a type does not use */
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"factor\": 8.0}}", "rope_scaling.factor: expected no such field with rope_type \"default\"",
     "found 8"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"default\", \"factor\": 2}}", "rope_scaling.factor", "found 2"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {" L3_FULL ", \"beta_fast\": 32}}", "rope_scaling.beta_fast: expected no such field",
     "found 32"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {" L3_FULL ", \"attention_factor\": 1.0}}", "rope_scaling.attention_factor", NULL},
    {"{" LLAMA_MIN ", \"rope_scaling\": {" L3_FULL ", \"a\\nb\": 1}}", "rope_scaling.\"a\\x0ab\"", NULL},
    /* llama3's numbers */
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
     " \"original_max_position_embeddings\": 8192}}",
     "rope_scaling.factor: expected a number >= 1", "no such field"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 0.5, \"low_freq_factor\": 1.0,"
     " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}",
     "rope_scaling.factor: expected a number >= 1", "0.5"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": \"8\", \"low_freq_factor\": 1.0,"
     " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}",
     "rope_scaling.factor", "\"8\""},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"high_freq_factor\": 4.0,"
     " \"original_max_position_embeddings\": 8192}}",
     "rope_scaling.low_freq_factor", "no such field"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 0,"
     " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}",
     "rope_scaling.low_freq_factor: expected a number > 0", "found 0"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1,"
     " \"original_max_position_embeddings\": 8192}}",
     "rope_scaling.high_freq_factor", "no such field"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4,"
     " \"high_freq_factor\": 1, \"original_max_position_embeddings\": 8192}}",
     "rope_scaling.high_freq_factor: expected a number > low_freq_factor = 4", "found 1"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4,"
     " \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}}",
     "rope_scaling.high_freq_factor", "found 4"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {" L3 "}}", "rope_scaling.original_max_position_embeddings", "no such field"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {" L3 ", \"original_max_position_embeddings\": 0}}",
     "rope_scaling.original_max_position_embeddings", "found 0"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {" L3 ", \"original_max_position_embeddings\": 8192.5}}",
     "rope_scaling.original_max_position_embeddings", "8192.5"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {" L3 ", \"original_max_position_embeddings\": null}}",
     "rope_scaling.original_max_position_embeddings", "null"},
    {"{" LLAMA_MIN ", \"rope_scaling\": {" L3_FULL ", \"factor\": 8}}", "rope_scaling.factor", "twice"},
    {"{" LLAMA_MIN ", \"rope_parameters\": {" L3 "}}", "rope_parameters.original_max_position_embeddings", "no such field"},
    /* rope_theta in two places */
    {"{" LLAMA_MIN ", \"rope_theta\": 10000, \"rope_parameters\": {\"rope_theta\": 500000}}",
     "rope_theta: expected the same value as rope_parameters.rope_theta = 500000", "found 10000"},
    {"{" LLAMA_MIN ", \"rope_parameters\": {\"rope_theta\": 0}}", "rope_parameters.rope_theta", "found 0"},
    {"{" LLAMA_MIN ", \"rope_parameters\": {\"rope_theta\": \"1e4\"}}", "rope_parameters.rope_theta", "\"1e4\""},
    /* partial rotary */
    {"{" LLAMA_MIN ", \"partial_rotary_factor\": 0.5}", "partial_rotary_factor: expected 1", "0.5"},
    {"{" LLAMA_MIN ", \"partial_rotary_factor\": \"1\"}", "partial_rotary_factor", "\"1\""},
    {"{" LLAMA_MIN ", \"rope_parameters\": {\"rope_theta\": 1e4, \"partial_rotary_factor\": 0.25}}",
     "rope_parameters.partial_rotary_factor: expected 1", "0.25"},
    /* dropout, tensor-parallel pretraining, other RoPE layouts, quantization */
    {"{" LLAMA_MIN ", \"attention_dropout\": 0.1}", "attention_dropout: expected 0", "0.1"},
    {"{" QWEN_MIN ", \"attention_dropout\": 0.05}", "attention_dropout", "0.05"},
    {"{" MISTRAL_MIN_W ", \"attention_dropout\": 1}", "attention_dropout", "found 1"},
    {"{" LLAMA_MIN ", \"attention_dropout\": \"0\"}", "attention_dropout", "\"0\""},
    {"{" LLAMA_MIN ", \"pretraining_tp\": 2}", "pretraining_tp: expected 1", "found 2"},
    {"{" LLAMA_MIN ", \"pretraining_tp\": 0}", "pretraining_tp", "found 0"},
    {"{" LLAMA_MIN ", \"pretraining_tp\": \"1\"}", "pretraining_tp", "\"1\""},
    {"{" LLAMA_MIN ", \"rope_interleaved\": true}", "rope_interleaved: expected false", "found true"},
    {"{" LLAMA_MIN ", \"rope_traditional\": true}", "rope_traditional", "found true"},
    {"{" LLAMA_MIN ", \"rope_interleaved\": \"no\"}", "rope_interleaved", "\"no\""},
    {"{" QWEN_MIN ", \"use_mrope\": true}", "use_mrope", "found true"},
    {"{" LLAMA_MIN ", \"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4}}", "quantization_config",
     "found \"gptq\""},
    {"{" LLAMA_MIN ", \"sliding_window_pattern\": 6}", "sliding_window_pattern", "found 6"},
    /* biases HF's Mistral and Qwen2 do not have or always have */
    {"{" MISTRAL_MIN_W ", \"attention_bias\": true}", "attention_bias: expected false or no such field", "found true"},
    {"{" MISTRAL_MIN_W ", \"mlp_bias\": true}", "mlp_bias", "found true"},
    {"{" QWEN_MIN ", \"attention_bias\": false}", "attention_bias: expected true or no such field", "found false"},
    {"{" QWEN_MIN ", \"mlp_bias\": true}", "mlp_bias", "found true"},
    {"{" QWEN_MIN ", \"attention_bias\": null}", "attention_bias", "null"},
    /* mistral's window */
    {"{" MISTRAL_MIN "}", "sliding_window", "no such field"},
    {"{" MISTRAL_MIN ", \"sliding_window\": 0}", "sliding_window", "found 0"},
    {"{" MISTRAL_MIN ", \"sliding_window\": -1}", "sliding_window", "found -1"},
    {"{" MISTRAL_MIN ", \"sliding_window\": \"4096\"}", "sliding_window", "\"4096\""},
    {"{" MISTRAL_MIN ", \"sliding_window\": 1048577}", "sliding_window", "1048577"},
    {"{" MISTRAL_MIN_W ", \"layer_types\": [\"full_attention\", \"full_attention\"]}", "layer_types",
     "\"full_attention\""},
    {"{" MISTRAL_MIN_W ", \"layer_types\": [\"sliding_attention\", \"full_attention\"]}", "layer_types",
     "1 \"sliding_attention\" and 1 \"full_attention\""},
    /* qwen2's window: a per-layer pattern, or a window the config does not give */
    {"{" QWEN_SW ", \"max_window_layers\": 1}", "max_window_layers: expected 0 (every layer windowed) or at least num_hidden_layers = 2",
     "found 1"},
    {"{" QWEN_SW "}", "max_window_layers", "no such field"},
    {"{" QWEN_SW ", \"max_window_layers\": -1}", "max_window_layers", "found -1"},
    {"{" QWEN_MIN ", \"use_sliding_window\": true, \"max_window_layers\": 0}", "sliding_window", "no such field"},
    {"{" QWEN_MIN ", \"use_sliding_window\": true, \"sliding_window\": 0, \"max_window_layers\": 0}", "sliding_window",
     "found 0"},
    {"{" QWEN_MIN ", \"use_sliding_window\": false, \"sliding_window\": -5}", "sliding_window", "found -5"},
    {"{" QWEN_MIN ", \"use_sliding_window\": false, \"sliding_window\": \"4096\"}", "sliding_window", "\"4096\""},
    {"{" QWEN_MIN ", \"use_sliding_window\": false, \"max_window_layers\": \"28\"}", "max_window_layers", "\"28\""},
    {"{" QWEN_SW ", \"layer_types\": [\"full_attention\", \"sliding_attention\"]}", "layer_types: expected the same type for every layer",
     "1 \"sliding_attention\" and 1 \"full_attention\""},
    {"{" QWEN_MIN ", \"layer_types\": [\"sliding_attention\", \"sliding_attention\"]}", "layer_types",
     "use_sliding_window false"},
    {"{" QWEN_MIN ", \"use_sliding_window\": true, \"sliding_window\": null, \"layer_types\": [\"sliding_attention\","
     " \"sliding_attention\"]}",
     "layer_types", "sliding_window null"},
    {"{" QWEN_SW ", \"layer_types\": [\"sliding_attention\"]}", "layer_types: expected num_hidden_layers = 2 entries",
     "found 1"},
    {"{" QWEN_SW ", \"layer_types\": [\"chunked_attention\", \"chunked_attention\"]}", "layer_types",
     "\"chunked_attention\" at index 0"},
    {"{" QWEN_SW ", \"layer_types\": \"sliding_attention\"}", "layer_types: expected a list", "found \"sliding_attention\""},
    {"{" LLAMA_MIN ", \"layer_types\": [\"sliding_attention\", \"sliding_attention\"]}", "layer_types",
     "HF's Llama has no sliding window"},
    {"{" LLAMA_MIN ", \"layer_types\": [\"full_attention\", 2]}", "layer_types", "found 2 at index 1"},
};

Test(model_desc, llama_refusals) {
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

/* Every fixture with one of its fields doubled is refused naming that field. */
Test(model_desc, llama_fixture_duplicates) {
    static const char *const names[] = {"tiny-llama.json", "tiny-qwen2.json", "tiny-mistral.json", "llama-3.1-8b.json"};
    const char *root = getenv("GTRAIN_ROOT");
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/tests/fixtures/hf_configs/%s", root ? root : ".", names[k]);
        FILE *f = fopen(p, "rb");
        cr_assert_not_null(f, "%s", p);
        char buf[8192];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        /* insert `"vocab_size": 7,` right after the opening brace */
        char *brace = strchr(buf, '{');
        cr_assert_not_null(brace);
        char dup[8300];
        snprintf(dup, sizeof dup, "{\"vocab_size\": 7,%s", brace + 1);
        ModelDesc d;
        GtError err;
        cr_expect_eq(parse(&d, dup, &err), -1, "%s", names[k]);
        cr_expect(strstr(err.msg, "vocab_size") && strstr(err.msg, "twice"), "%s: %s", names[k], err.msg);
    }
}
