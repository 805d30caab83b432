/* lora_fixture.h - what the LoRA test suites share (test_lora_model.c, test_lora_train.c,
 * test_lora_pissa.c, test_dora_ref.c, ...): the tiny model descriptions, the modules' widths
 * written from the model's dims (not from gtrain's layout), PEFT's scaling written here, the
 * dropout key for the reference, a xorshift generator unlike the module's, and the
 * double-precision reference of a model's frozen base with its loss. */
#ifndef GT_LORA_FIXTURE_H
#define GT_LORA_FIXTURE_H

#include "lora.h"
#include "model.h"
#include "ref_llama.h"
#include "ref_lora.h"

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

/* n tokens and targets in [0, V) from seed; every mask_every-th target from the 4th (i % mask_every
 * == 3) is -100 (mask_every 0: none) */
void lora_fix_tokens(int *tok, int *tgt, size_t n, int V, uint64_t seed, int mask_every);

/* A DoRA model's random weights from generator s: the frozen base (norm weights 1 + U(-0.3, 0.3),
 * every other value U(-0.3, 0.3)) into base_h [m->base_layout.total] and uploaded, the magnitudes
 * from it (adapter_init_from_base); then, with params_h [m->layout.total] (NULL: the model's own
 * adapters kept), A and B U(-0.3, 0.3) (B nonzero) and the magnitudes 0.5 + U(0, 1) into params_h
 * and the model */
void lora_fix_dora_weights(Model *m, uint64_t *s, float *base_h, float *params_h);

/* The independent double-precision reference of a model's frozen base: a Llama's HF tensors
 * (tests/ref_llama.c, its config from d, each tensor of gtrain's base layout bl copied into its HF
 * blocks by arch_block_name) or GPT-2's base as double in layout bl (tests/ref_gpt.c). bl is the
 * caller's and must outlive r; base_h holds bl->total floats. */
typedef struct {
    ModelDesc d;
    const ParamLayout *bl;
    bool llama;
    RefLlamaCfg rc;
    RefTensor *ref; /* Llama */
    int n_ref;
    double *base_d; /* GPT-2 */
} LoraFixRef;

/* the Llama reference's config from the model's dims (no rope scaling: lora_fix_base has none) */
RefLlamaCfg lora_fix_ref_cfg(const ModelDesc *d);
void lora_fix_ref_open(LoraFixRef *r, const ModelDesc *d, const ParamLayout *bl, const float *base_h);
void lora_fix_ref_close(LoraFixRef *r);
/* a model's gradient g [n] against the reference's fd [n]: the largest |g - fd| into *diff (its first
 * index into *at) and the largest |fd| into *big */
void lora_fix_grad_diff(const float *g, const double *fd, size_t n, double *diff, double *big, size_t *at);
/* the reference's mean loss of rows tok/tgt [B, T] over their items (0 with none), with adapters lo
 * (NULL: the base alone) */
double lora_fix_ref_loss(const LoraFixRef *r, const RefLora *lo, const int *tok, const int *tgt, int B, int T);

#endif
