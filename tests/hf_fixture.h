/* hf_fixture.h - what the suites that hold gtrain against transformers share (test_hf_transformers.c,
 * test_packing.c): the tiny GPT-2 config, a tiny checkpoint with random weights made by
 * tests/tools/hf_models.py, a number read from a reference program's output, and one gtrain
 * tensor's gradient against transformers' gradients of its blocks. */
#ifndef GT_TEST_HF_FIXTURE_H
#define GT_TEST_HF_FIXTURE_H

#include <stdint.h>

#include "hf_weights.h"
#include "model.h"

/* GPT-2 with openai-community/gpt2's field names, made tiny; dropouts 0 (both sides run without) */
extern const char HF_FIX_TINY_GPT2[];

/* `hf_models.py make CONFIG REF ARGS` from the source tree root: CONFIG is
 * root/tests/fixtures/hf_configs/config, or with config NULL HF_FIX_TINY_GPT2 written to
 * dir/gpt2.json; the test fails unless it succeeds */
void hf_fix_make(const char *root, const char *dir, const char *config, const char *ref, const char *args);

/* the number after key in a reference program's output out (the test fails without key) */
double hf_fix_after(const char *out, const char *key);

/* gtrain tensor t's gradient (in g, the model's whole gradient on the host) against the tensors of
 * transformers' gradient file w that hold its blocks (HF names through arch_block_name, d's; a
 * Conv1D's [in, out] transposed): the largest |difference| and |transformers' gradient| raised
 * into *dmax and *gmax, and over rows [k0, k1) of t (none when k0 == k1; then kb_ours and
 * kb_theirs may be NULL) the largest |gtrain| and |transformers| into *kb_ours and *kb_theirs.
 * The test fails where w lacks a block or holds another number of values. Returns the number of
 * w's tensors read. */
int hf_fix_grad_blocks(const ModelDesc *d, const ParamTensor *t, const float *g, HfWeights *w, const char *what,
                       int64_t k0, int64_t k1, double *dmax, double *gmax, double *kb_ours, double *kb_theirs);

#endif
