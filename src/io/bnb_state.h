/* bnb_state.h - bitsandbytes' 4-bit quant_state: the JSON object transformers' save_pretrained
 * stores (as uint8 bytes) in the tensor "X.weight.quant_state.bitsandbytes__nf4" beside a 4-bit
 * weight X.weight, e.g.
 *   {"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [out, in],
 *    "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.0517}
 * (without double quantization no nested_* keys). Read from the internet, so hostile until
 * checked: at most BNB_STATE_MAX_BYTES, no NUL, nested at most 4 deep, valid JSON with nothing
 * after it, an object, each key at most once;
 *   quant_type  "nf4" ("fp4" and anything else refused: gtrain reads NF4 only);
 *   blocksize   an integer nf4_format_check accepts (a power of two in [32, 4096]);
 *   dtype       "float32", "bfloat16" or "float16" (the dtype bitsandbytes dequantizes to);
 *   shape       1 or 2 positive integers, their product at most 2^53;
 *   nested_blocksize, nested_dtype, nested_offset: all three or none (double quantization);
 *               NF4_NESTED_BLOCK, "float32" and a finite number.
 * Other keys are ignored (bitsandbytes writes none today). Pure: no files; the caller names the
 * file and the tensor in front of `why`. */
#ifndef GT_BNB_STATE_H
#define GT_BNB_STATE_H

#include "nf4.h"
#include "safetensors.h"

#define BNB_STATE_MAX_BYTES 4096 /* bitsandbytes writes ~170 */
#define BNB_STATE_SUFFIX ".quant_state.bitsandbytes__"

typedef struct {
    Nf4Format f;              /* numel = the product of shape */
    int ndim;                 /* 1 or 2 */
    int64_t shape[2];
    StDtype dtype;            /* ST_F32, ST_BF16 or ST_F16 */
    float offset;             /* nested_offset (nested only, else 0) */
} BnbState;

/* Parse text[len] into *s: 0, or -1 with why[cap] = "KEY: expected ..., found ..." (one line). */
int bnb_state_parse(const char *text, size_t len, BnbState *s, char *why, size_t cap);

#endif
