/* fuzz_hf_index.c - libFuzzer target: a Hugging Face model.safetensors.index.json (hf_weights.c's
 * index reader and everything that trusts it). The input is written as the index of a scratch
 * directory that holds two valid shards (model-00001-of-00002.safetensors {x, y}, model-00002-of-
 * 00002.safetensors {z}), a third that repeats x and z (dup.safetensors), a file that is no
 * safetensors, a FIFO and a directory named like shards. Must hold: a refusal has a code and a
 * one-line message; an accepted index gives a table whose every tensor is found by its name and
 * reads back, whole and by rows, from a shard it names; at most HF_MAX_WARNINGS warnings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "hf_weights.h"

static char g_dir[64]; /* the scratch directory, made on the first input */

static void cleanup(void) { fuzz_rm_tree(g_dir); }

static void put(const char *name, const void *data, size_t n) { fuzz_put(g_dir, name, data, n); }

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/gtrain-fuzz-hfindex-XXXXXX");
    if (!mkdtemp(g_dir)) abort();
    atexit(cleanup);
    static const float x[6] = {0, 1, 2, 3, 4, 5}, z[3] = {-1, -2, -3};
    static const uint16_t y[4] = {0x3F80, 0x4000, 0x4040, 0x4080};
    const StTensorOut a[] = {{.name = "x", .dtype = ST_F32, .ndim = 2, .shape = {2, 3}, .data = x},
                             {.name = "y", .dtype = ST_BF16, .ndim = 1, .shape = {4}, .data = y}};
    const StTensorOut b[] = {{.name = "z", .dtype = ST_F32, .ndim = 1, .shape = {3}, .data = z}};
    const StTensorOut d[] = {b[0], a[0]};
    GtError err = {0};
    char p[128];
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", g_dir);
    if (safetensors_write(p, a, 2, NULL, 0, &err)) abort();
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", g_dir);
    if (safetensors_write(p, b, 1, NULL, 0, &err)) abort();
    snprintf(p, sizeof p, "%s/dup.safetensors", g_dir);
    if (safetensors_write(p, d, 2, NULL, 0, &err)) abort();
    put("garbage.safetensors", "no safetensors here", 19);
    snprintf(p, sizeof p, "%s/fifo.safetensors", g_dir);
    if (mkfifo(p, 0644) != 0) abort();
    snprintf(p, sizeof p, "%s/dir.safetensors", g_dir);
    if (mkdir(p, 0755) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) setup();
    put(HF_INDEX_FILE, data, size);
    HfWeights *w = NULL;
    GtError err = {0};
    if (hf_weights_open(&w, g_dir, &err) != 0) {
        if (w || err.code == 0 || !err.msg[0] || strchr(err.msg, '\n')) abort();
        return 0;
    }
    const int n = hf_weights_count(w);
    if (n < 1 || n > 3 || hf_weights_warning_count(w) > HF_MAX_WARNINGS) abort();
    for (int k = 0; k < hf_weights_warning_count(w); k++)
        if (!hf_weights_warning(w, k) || strchr(hf_weights_warning(w, k), '\n')) abort();
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) {
        HfTensorInfo t;
        if (hf_weights_info(w, i, &t) != 0 || hf_weights_find(w, t.name) != i) abort();
        if (t.numel < 0 || t.numel > 6) abort();
        bytes += (uint64_t)t.numel * st_dtype_size(t.dtype);
        float v[6];
        GtError rerr = {0};
        if (hf_weights_read_f32(w, i, v, (size_t)t.numel, &rerr) != 0) abort(); /* validated: must read */
        if (t.ndim >= 1 && t.shape[0] > 0 && hf_weights_read_rows_f32(w, i, t.shape[0] - 1, 1, v, 6, &rerr) != 0)
            abort();
        if (hf_weights_read_rows_f32(w, i, 0, 3, v, 6, &rerr) == 0 && !(t.ndim >= 1 && t.shape[0] >= 3)) abort();
    }
    if (bytes != hf_weights_data_bytes(w)) abort();
    (void)hf_weights_find(w, "nope");
    hf_weights_close(w);
    return 0;
}
