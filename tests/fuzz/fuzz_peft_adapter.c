/* fuzz_peft_adapter.c - libFuzzer target: a PEFT adapter's adapter_model.safetensors
 * (peft_adapter_open's checks of its tensors against the model, and everything that reads them:
 * lora.init_from, a PiSSA run's resume, gtrain sample and merge). The input is written as the
 * weights of a scratch adapter directory whose adapter_config.json is valid (r 2, q_proj and
 * v_proj of a 2-layer Llama with hidden 8, kv width 4); an input of odd length is read under a
 * config with use_dora true (DoRA: each entry's lora_magnitude_vector [out] too). Must hold: a
 * refusal has a code and a one-line message; an accepted adapter has exactly the model's entries
 * with PEFT's shapes, and each reads back whole and by ranges, the same values both ways. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "peft.h"

static char g_dir[64]; /* the scratch adapter directory, made on the first input */
static int g_dora = -1; /* the config written: use_dora (1) or not (0) */

static void cleanup(void) { fuzz_rm_tree(g_dir); }

static void put(const char *name, const void *data, size_t n) { fuzz_put(g_dir, name, data, n); }

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/gtrain-fuzz-peft-XXXXXX");
    if (!mkdtemp(g_dir)) abort();
    atexit(cleanup);
}

static void write_config(bool dora) {
    if (g_dora == (int)dora) return;
    g_dora = dora;
    char cfg[256];
    int n = snprintf(cfg, sizeof cfg, "{\"peft_type\": \"LORA\", \"task_type\": \"CAUSAL_LM\", \"r\": 2, \"lora_alpha\": 4, "
                     "\"target_modules\": [\"q_proj\", \"v_proj\"], \"bias\": \"none\", \"use_dora\": %s}",
                     dora ? "true" : "false");
    put(PEFT_CONFIG_FILE, cfg, (size_t)n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) setup();
    const bool dora = size & 1;
    write_config(dora);
    put(PEFT_WEIGHTS_FILE, data, size);
    ModelDesc d;
    memset(&d, 0, sizeof d);
    d.arch = ARCH_LLAMA, d.n_layer = 2, d.n_head = 2, d.n_kv_head = 1, d.n_embd = 8, d.n_inner = 16;
    d.vocab_size = 32, d.n_positions = 16, d.layer_norm_epsilon = 1e-5, d.rope_theta = 10000;
    model_desc_defaults(&d);
    bool mask[PEFT_MODULE_COUNT] = {0};
    mask[PEFT_Q_PROJ] = mask[PEFT_V_PROJ] = true;
    PeftEntry *ent = NULL;
    const int n = peft_entries_for(&d, mask, &ent);
    PeftAdapter *a = NULL;
    PeftConfig cfg;
    GtError err = {0};
    if (peft_adapter_open(&a, g_dir, d.arch, ent, n, &cfg, &err) != 0) {
        if (a || err.code == 0 || !err.msg[0] || strchr(err.msg, '\n')) abort();
        free(ent);
        return 0;
    }
    if (cfg.r != 2 || peft_adapter_r(a) != 2 || cfg.use_dora != dora) abort();
    float whole[64], part[64];
    for (int e = 0; e < n; e++)
        for (int b = 0; b < peft_kind(&cfg)->n; b++) {
            const size_t numel = b == PEFT_PART_M ? (size_t)ent[e].out : (size_t)(b ? ent[e].out : ent[e].in) * 2;
            if (numel > 64) abort();
            GtError e2 = {0};
            if (peft_adapter_read(a, e, b, whole, numel, &e2) != 0) {
                if (e2.code == 0 || !e2.msg[0] || strchr(e2.msg, '\n')) abort();
                continue;
            }
            for (size_t off = 0; off < numel; off += 3) {
                size_t k = numel - off < 3 ? numel - off : 3;
                if (peft_adapter_read_range(a, e, b, off, k, part + off, &e2) != 0) abort();
            }
            for (size_t k = 0; k < numel; k++)
                if (memcmp(&whole[k], &part[k], sizeof whole[k]) != 0 && !(isnan(whole[k]) && isnan(part[k]))) abort();
        }
    peft_adapter_close(a);
    free(ent);
    return 0;
}
