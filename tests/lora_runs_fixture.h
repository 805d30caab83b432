/* lora_runs_fixture.h - what suite lora_runs' two files (test_lora_runs.c: resume and data
 * parallel; test_lora_runs_refuse.c: hostile adapters, gtrain plan, PiSSA's r) share: the workspace
 * (a tiny Llama base written by a 1-step full fine-tuning run of gtrain itself, train.txt and
 * lora.yaml), `gtrain --config` runs with --set overrides, the model's dimensions read from its
 * config.json, safetensors files as fp32 tensors, the checks of an adapter directory and a LoRA
 * checkpoint, and the lora.init_from run configs. $GTRAIN_BIN is the binary, $GTRAIN_ROOT the repo
 * root. Include it after every other header: it defines R. */
#ifndef GT_LORA_RUNS_FIXTURE_H
#define GT_LORA_RUNS_FIXTURE_H

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "run_util.h"
#include "safetensors.h"

#define R 4 /* lora.r of lora.yaml */

/* ---------------------------------------------------------------- the workspace */

/* dir/name in one of 64 rotating buffers (test_join's 8 are too few for paths held across calls) */
const char *J(const char *dir, const char *name);
/* a path under the workspace */
const char *wpath(const Ws *w, const char *name);
/* text into the workspace's file name */
void write_text(const Ws *w, const char *name, const char *text);
/* config.json of the tiny Llama fixture, with some fields replaced (0: as it is) */
void write_llama_json(const Ws *w, const char *name, int hidden, int inter, int layers);
/* a base model directory name/ from model JSON mjson, by a 1-step full fine-tuning run */
void make_base(const Ws *w, const char *mjson, const char *name);
/* /tmp/gtrain-lora-XXXXXX with model.json (tiny Llama), train.txt, base/ and lora.yaml (w->cfg) */
void lws_init(Ws *w);
/* run `gtrain --config cfg` with the sets; returns the wait status */
int run_cfg(const Ws *w, const char *cfg, const char *tag, const char *const *sets, int n);
/* "key=value" in one of 16 rotating buffers */
const char *kv(const char *key, const char *value);

/* ---------------------------------------------------------------- the model's adapters */

typedef struct {
    int L, C, Q, KV, I; /* layers, hidden, q rows, k/v rows, intermediate */
    int V, P;           /* vocab, positions (GPT-2) */
    bool tied;
} Dims;

/* Llama's modules in PEFT's order: name, in, out */
typedef struct {
    const char *path;
    int in, out;
} Mod;

/* A safetensors file, every tensor as fp32 */
typedef struct {
    int n;
    char **name;
    int64_t (*shape)[ST_MAX_DIMS];
    int *ndim;
    float **data;
} StFile;

/* the dimensions from a Llama config.json, read here */
Dims llama_dims(const char *path);
/* Llama's 7 modules in PEFT's order into m; returns 7 */
int llama_mods(const Dims *d, Mod m[7]);
/* every tensor of the safetensors file path as fp32 into f (st_free frees it) */
void st_load(const char *path, StFile *f);
/* tensor i's element count */
int64_t st_numel(const StFile *f, int i);
/* the index of the tensor named name, -1 if none */
int st_find(const StFile *f, const char *name);
/* f as an fp32 safetensors file at path */
void st_save(const char *path, const StFile *f);
void st_free(StFile *f);
/* dir holds an adapter and no copy of the base */
void expect_adapter_dir(const char *dir);
/* the adapter's r from DIR/adapter_config.json */
int adapter_r(const char *dir);
/* checkpoint ck: the adapter (rank r_saved) and optimizer.safetensors with exactly exp_avg. and
 * exp_avg_sq. of every adapter key of the model (rank r, shapes from d), all finite, the second
 * moments >= 0; nothing named after a base tensor */
void expect_lora_checkpoint(const char *ck, const Dims *d, int r, int r_saved, const char *base_dir);
/* largest |a - b| over two adapters of the same keys and shapes; *scale the largest |a| */
double adapter_diff(const char *fa, const char *fb, double *scale);

/* ---------------------------------------------------------------- the init_from configs */

/* the JSON file at path (cJSON_Delete it) */
cJSON *read_json(const char *path);
/* init.yaml (lora.yaml with lora: init_from alone) and init_r.yaml (lora.r 8 against the adapter's 4,
 * on its line 24) in the workspace */
void write_init_configs(const Ws *w);

#endif
