/* fuzz_safetensors.c - libFuzzer target: the safetensors reader (safetensors_open on the input as
 * a file), then every accessor and a read of each (small enough) tensor (a U8 one as bytes: the
 * float read refuses it). */
#include <stdlib.h>

#include "fuzz_util.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = fuzz_memfd(data, size, path, sizeof path);
    if (fd < 0) return 0;
    SafeTensors *st = NULL;
    GtError err = {0};
    if (safetensors_open(&st, path, &err) == 0) {
        int n = safetensors_count(st);
        (void)safetensors_metadata(st, "format");
        for (int i = 0; i < n; i++) {
            const char *name = safetensors_name(st, i);
            if (!name || safetensors_find(st, name) < 0) abort();
            int64_t shape[ST_MAX_DIMS];
            int nd;
            if (safetensors_shape(st, i, shape, &nd) != 0 || nd < 0 || nd > ST_MAX_DIMS) abort();
            (void)st_dtype_name(safetensors_dtype(st, i));
            int64_t numel = safetensors_numel(st, i);
            if (numel < 0) abort();
            /* the data of an opened file lies inside it, so numel is bounded by the file size */
            if ((uint64_t)numel > size) abort();
            float *dst = malloc((size_t)(numel ? numel : 1) * sizeof(float));
            if (!dst) continue;
            GtError rerr = {0};
            if (safetensors_dtype(st, i) == ST_U8) { /* bytes only: the float read refuses it (code 2) */
                if (safetensors_read_f32(st, i, dst, (size_t)numel, &rerr) == 0 || rerr.code != GT_EXIT_BAD_INPUT) abort();
                if (safetensors_read_bytes(st, i, 0, (size_t)numel, dst, &rerr) != 0) abort();
                if (safetensors_read_bytes(st, i, 1, (size_t)numel, dst, &rerr) == 0) abort(); /* past its end */
                free(dst);
                continue;
            }
            if (safetensors_read_f32(st, i, dst, (size_t)numel, &rerr) != 0) abort(); /* validated: must read */
            if (numel > 0 && safetensors_read_f32(st, i, dst, (size_t)numel - 1, &rerr) == 0) abort(); /* wrong n */
            free(dst);
        }
        (void)safetensors_name(st, n);
        (void)safetensors_numel(st, -1);
        safetensors_close(st);
    } else if (st != NULL || err.code == 0 || !err.msg[0]) {
        abort();
    }
    close(fd);
    return 0;
}
