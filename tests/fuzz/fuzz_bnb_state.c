/* fuzz_bnb_state.c - libFuzzer target: bitsandbytes' quant_state JSON (bnb_state_parse, what
 * hf_weights reads from each "X.quant_state.bitsandbytes__nf4" tensor). The input is copied into
 * an exact-size buffer without a terminating NUL, so any read past len is caught. Must hold: a
 * refusal is one non-empty line; an accepted state is one nf4.h handles (nf4_format_check), its
 * shape 1 or 2 positive dimensions whose product is numel, its dtype a float one, nested exactly
 * when an offset is finite and given, and its unit layout (nf4_layout) covers the packed codes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bnb_state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    BnbState s;
    char why[GT_ERR_MAX];
    why[0] = '\0';
    if (bnb_state_parse(buf, size, &s, why, sizeof why) == 0) {
        char fw[160];
        if (nf4_format_check(&s.f, fw, sizeof fw) != 0) abort();
        if (s.ndim < 1 || s.ndim > 2 || s.shape[0] < 1 || (s.ndim == 2 && s.shape[1] < 1)) abort();
        if ((s.ndim == 1 ? s.shape[0] : s.shape[0] * s.shape[1]) != s.f.numel) abort();
        if (s.dtype != ST_F32 && s.dtype != ST_BF16 && s.dtype != ST_F16) abort();
        if (!isfinite(s.offset) || (!s.f.nested && s.offset != 0)) abort();
        Nf4Layout l;
        nf4_layout(&s.f, &l);
        if (l.bytes < (uint64_t)(s.f.numel + 1) / 2 || l.bytes % NF4_ALIGN) abort();
    } else if (!why[0] || strchr(why, '\n')) {
        abort();
    }
    free(buf);
    return 0;
}
