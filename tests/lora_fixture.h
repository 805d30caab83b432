/* lora_fixture.h - what the LoRA test suites share (test_lora_model.c, test_lora_train.c): the
 * tiny model descriptions, the modules' widths written from the model's dims (not from gtrain's
 * layout), PEFT's scaling written here, the dropout key for the reference, and a xorshift
 * generator unlike the module's. */
#ifndef GT_LORA_FIXTURE_H
#define GT_LORA_FIXTURE_H

#include "lora.h"

#define LORA_FIX_LLAMA_ALL 0x7fu
#define LORA_FIX_GPT_ALL (0xfu << PEFT_C_ATTN)

/* L layers: a GQA Llama with q/k/v and o biases, untied; a tied GPT-2 (n_positions 32) */
ModelDesc lora_fix_base(bool llama, int L);
/* the same with adapters: r, alpha (scale lora_fix_scaling), targets (bit PeftModule), dropout p */
ModelDesc lora_fix_desc(bool llama, int L, int r, double alpha, uint32_t targets, bool rslora, double p, LoraInit init);
/* PEFT's scaling: alpha / r, or alpha / sqrt(r) with rslora */
double lora_fix_scaling(double alpha, int r, bool rslora);
/* a module's input and output widths */
void lora_fix_module_dims(const ModelDesc *d, int module, int *in, int *out);
/* the key function the reference (ref_lora.h) is given */
uint64_t lora_fix_key(uint64_t seed, long step, int layer, int module);

uint64_t lora_fix_rng_next(uint64_t *s);
double lora_fix_rng_uniform(uint64_t *s); /* [0, 1) */
double lora_fix_rng_normal(uint64_t *s);

#endif
