/* lora_train_fixture.h - what suite lora_train's two files share (test_lora_train.c: accumulation,
 * recompute and offload, the memory plan; test_lora_pissa.c: PiSSA on a model, the rank-2r
 * conversion, lora_init_tensor): the target-set shorthands, the base's parameter count from the
 * dims, random base weights and moving weights between the host and a model. Include it after
 * every other header: it defines BIT. */
#ifndef GT_LORA_TRAIN_FIXTURE_H
#define GT_LORA_TRAIN_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "lora_fixture.h"
#include "model.h"

#define LLAMA_ALL LORA_FIX_LLAMA_ALL
#define GPT_ALL LORA_FIX_GPT_ALL
#define BIT(m) (1u << (m))

/* the architecture's parameter count, from the dims (HF's tensors, a tied head once) */
uint64_t base_params_from_dims(const ModelDesc *d);
/* n floats of device memory dev copied into a new host buffer (free it) */
float *dev_floats(Backend *be, const float *dev, size_t n);
/* every base weight uniform(-0.3, 0.3), norm weights around 1, biases +-0.2 (a new buffer of bl->total) */
float *random_base(const ParamLayout *bl, uint64_t seed);
/* the base weights into the model (the frozen base under LoRA, narrowed to the act dtype; the
 * params of a plain model) */
void put_base(Model *m, const float *h);

#endif
