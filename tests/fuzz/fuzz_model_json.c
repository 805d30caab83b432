/* fuzz_model_json.c - libFuzzer target: the model JSON reader (model_desc_parse: GPT-2, the
 * Llama family and the families added by description: Phi-3, Qwen3; quantization_config). The input is copied into an exact-size buffer without a terminating NUL, so any
 * read past len is caught; an accepted description must be buildable. */
#include <stdlib.h>
#include <string.h>

#include "model_desc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    ModelDesc desc;
    GtError err = {0};
    if (model_desc_parse(&desc, buf, size, "fuzz.json", &err) == 0) {
        if (desc.n_layer < 1 || desc.n_head < 1 || desc.n_embd < 1 || desc.vocab_size < 1 || desc.n_positions < 1)
            abort(); /* accepted a description that cannot be a model */
        if (desc.arch != ARCH_GPT2 &&
            (desc.n_kv_head < 1 || desc.n_head % desc.n_kv_head != 0 || desc.head_dim < 2 || desc.head_dim % 2 != 0 ||
             model_desc_attn_dim(&desc) > 65536 || model_desc_qkv_dim(&desc) > 3 * 65536 || desc.n_inner < 1 ||
             !(desc.rope_theta > 0) || desc.sliding_window < 0 ||
             (desc.rope_llama3 && !(desc.rope_factor >= 1 && desc.rope_low_freq_factor > 0 &&
                                    desc.rope_high_freq_factor > desc.rope_low_freq_factor &&
                                    desc.rope_original_max_positions >= 1))))
            abort(); /* a RoPE-family description the model could not build */
        if (desc.arch == ARCH_PHI3 && (desc.qkv_bias || desc.o_bias || desc.mlp_bias || desc.rope_llama3))
            abort(); /* HF's Phi3 has none of these */
        if (desc.arch == ARCH_QWEN3 && desc.mlp_bias) abort(); /* nor Qwen3 an MLP bias */
        if (desc.quant.nf4 && !(desc.quant.prequantized && desc.quant.blocksize == 64))
            abort(); /* quantization_config: only a bitsandbytes nf4 base, pre-quantized */
        (void)model_desc_num_params(&desc);
    } else if (err.code == 0 || !err.msg[0]) {
        abort();
    }
    free(buf);
    return 0;
}
