/* fuzz_bnb_weights.c - libFuzzer target: one .safetensors file read through hf_weights, where
 * bitsandbytes' 4-bit weights and their siblings are linked and checked (hf_weights_bnb.c). Must
 * hold: a refusal has a code and one line; an accepted file gives a table without siblings whose
 * every tensor reads whole (or is refused, code 2, for a value that is not finite), by ranges the
 * same values; a 4-bit weight's unit (hf_weights_read_nf4) dequantized by nf4.h gives those values
 * when its dtype is float32. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "hf_weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = fuzz_memfd(data, size, path, sizeof path);
    if (fd < 0) return 0;
    HfWeights *w = NULL;
    GtError err = {0};
    if (hf_weights_open(&w, path, &err) != 0) {
        if (w || err.code == 0 || !err.msg[0] || strchr(err.msg, '\n')) abort();
        close(fd);
        return 0;
    }
    for (int i = 0; i < hf_weights_count(w); i++) {
        HfTensorInfo t;
        if (hf_weights_info(w, i, &t) != 0 || hf_weights_find(w, t.name) != i) abort();
        if (strstr(t.name, ".quant_state.bitsandbytes__")) abort(); /* a sibling is no tensor */
        if (t.numel < 0 || t.numel > (int64_t)(4 * size + 64)) abort(); /* 4-bit: two values a byte */
        float *v = malloc((size_t)(t.numel ? t.numel : 1) * sizeof *v), *r = malloc((size_t)(t.numel ? t.numel : 1) * sizeof *r);
        if (!v || !r) abort();
        GtError rerr = {0};
        if (hf_weights_read_f32(w, i, v, (size_t)t.numel, &rerr) != 0) {
            if (rerr.code != GT_EXIT_BAD_INPUT || !strstr(rerr.msg, "finite")) abort();
        } else {
            for (int64_t e0 = 0; e0 < t.numel; e0 += 13) {
                const size_t n = t.numel - e0 < 13 ? (size_t)(t.numel - e0) : 13;
                if (hf_weights_read_range_f32(w, i, (uint64_t)e0, n, r + e0, &rerr) != 0) abort();
            }
            if (t.numel && memcmp(v, r, (size_t)t.numel * sizeof *v) != 0) abort();
            Nf4Format f;
            if (hf_weights_nf4(w, i, &f) != (t.quant == HF_QUANT_NF4)) abort();
            if (t.quant == HF_QUANT_NF4) {
                void *u = malloc(nf4_bytes(&f));
                if (!u || f.numel != t.numel || hf_weights_read_nf4(w, i, u, &rerr) != 0) abort();
                if (t.dtype == ST_F32) {
                    nf4_dequantize_f32(&f, u, 0, f.numel, r);
                    if (memcmp(v, r, (size_t)t.numel * sizeof *v) != 0) abort();
                }
                free(u);
            }
        }
        free(v);
        free(r);
    }
    hf_weights_close(w);
    close(fd);
    return 0;
}
