/* peft.h - Hugging Face PEFT LoRA adapter directories, read and written: adapter_config.json
 * (LoraConfig's names) and adapter_model.safetensors (PEFT's state-dict keys). Model-independent:
 * which layers and modules exist and their dimensions are the caller's (peft_entries_for builds
 * the list from a ModelDesc); this layer names, validates, reads and writes.
 *
 * Keys are what PEFT's get_peft_model_state_dict saves (the adapter name "default" removed):
 *   base_model.model.<HF module>.lora_A.weight  [r, in]
 *   base_model.model.<HF module>.lora_B.weight  [out, r]
 *   base_model.model.<HF module>.lora_magnitude_vector  [out]   (DoRA, use_dora true, only)
 * with the HF module of arch.c's names: Llama family "model.layers.L.self_attn.q_proj", ...
 * "model.layers.L.mlp.down_proj"; GPT-2 "transformer.h.L.attn.c_attn", "...attn.c_proj",
 * "...mlp.c_fc", "...mlp.c_proj". GPT-2's Conv1D stores its weight [in, out], but PEFT's lora_A /
 * lora_B are nn.Linear(in, r) / nn.Linear(r, out) for every layer type, so they are [r, in] and
 * [out, r] there too; fan_in_fan_out (true for Conv1D, PEFT forces it) only transposes the merged
 * delta B·A to the base weight's layout.
 *
 * adapter_config.json is read as hostile (every refusal one line "FILE: KEY: expected ..., found
 * ...", code 2): at most PEFT_CONFIG_MAX_BYTES, nested at most PEFT_CONFIG_MAX_DEPTH, no NUL,
 * valid JSON object, every key once. Accepted: peft_type "LORA"; task_type "CAUSAL_LM" (or null:
 * the keys are the same for PeftModel); r an integer in [1, PEFT_MAX_R]; lora_alpha a finite
 * number > 0; lora_dropout in [0, 1); use_rslora, use_dora, fan_in_fan_out, inference_mode booleans;
 * init_lora_weights true, false, "gaussian", "pissa", "pissa_niter_N" (N in [0, 1000]);
 * target_modules a list of module names (q_proj k_proj v_proj o_proj gate_proj up_proj
 * down_proj c_attn c_proj c_fc, or one qualified by its parent as PEFT's suffix match allows:
 * "self_attn.q_proj", "attn.c_proj", "mlp.c_proj"..., or a full module name
 * "model.layers.N.self_attn.q_proj" / "transformer.h.N.attn.c_attn", which PEFT writes when it
 * adapts fewer than 20 modules and which is read as its module path in every layer: the
 * tensors say which layers, and a missing layer's key is refused) or the string "all-linear". PEFT reads any
 * other string as a regular expression matched against full module names; that form is refused
 * (one line), not interpreted. Refused rather than silently ignored (gtrain does not implement
 * them): bias other than "none", use_qalora / lora_bias true, non-null
 * modules_to_save, layers_to_transform, layers_pattern, exclude_modules, layer_replication,
 * trainable_token_indices, target_parameters, megatron_config, eva/corda/lora_ga configs, a
 * non-empty rank_pattern, alpha_pattern or loftq_config. Inert bookkeeping keys (revision,
 * auto_mapping, megatron_core, peft_version, qalora_group_size, runtime_config,
 * ensure_weight_tying false...) are accepted; any other key is accepted only when its value is
 * null, false, {} or [] (a newer PEFT's feature left off), refused otherwise.
 *
 * Writing (peft_config_write, peft_adapter_write): json.dumps(config, indent=2, sort_keys=True)
 * as PEFT's save_pretrained writes it, with the keys every PEFT since 0.10 accepts; the tensors
 * streamed through a bounded staging buffer into adapter_model.safetensors (__metadata__
 * {"format": "pt"}), F32 or BF16. Each file is written as NAME.tmp, fsynced and renamed. */
#ifndef GT_PEFT_H
#define GT_PEFT_H

#include "adapter_parts.h"
#include "arch.h" /* PeftModule: each architecture lists its modules */
#include "safetensors.h"

#define PEFT_CONFIG_FILE "adapter_config.json"
#define PEFT_WEIGHTS_FILE "adapter_model.safetensors"
#define PEFT_CONFIG_MAX_BYTES (1u << 20)
#define PEFT_CONFIG_MAX_DEPTH 16
#define PEFT_MAX_R 65536
#define PEFT_MAX_TARGETS 16
#define PEFT_KEY_MAX 160


typedef struct {
    int r;
    double lora_alpha, lora_dropout;
    bool use_rslora;
    bool use_dora; /* DoRA: each entry also has lora_magnitude_vector [out] */
    char init[32]; /* "true", "false", "gaussian", "pissa", "pissa_niter_N" */
    char target_modules[PEFT_MAX_TARGETS][32]; /* as written (a full module name: its path); "all-linear" alone */
    int n_targets;
    bool all_linear;
    char base_model[GT_PATH_MAX]; /* base_model_name_or_path ("" : null) */
    bool fan_in_fan_out;
    bool inference_mode;
} PeftConfig;

/* PEFT's defaults (r 8, alpha 8, dropout 0, init "true", bias none); no targets. */
void peft_config_defaults(PeftConfig *cfg);
/* Parse adapter_config.json text (path names it in messages). 0, or -1 with err (code 2). */
int peft_config_parse(PeftConfig *cfg, const char *json, size_t len, const char *path, GtError *err);
/* DIR/adapter_config.json (or the file itself when path is not a directory). */
int peft_config_read(const char *path, PeftConfig *cfg, GtError *err);
/* DIR/adapter_config.json, atomically. 0, or -1 (code 1; code 2 for a config that would not read back). */
int peft_config_write(const char *dir, const PeftConfig *cfg, GtError *err);
/* The config as text (what peft_config_write writes): a fresh NUL-terminated buffer, or NULL. */
char *peft_config_to_json(const PeftConfig *cfg);

/* lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora. */
double peft_scaling(const PeftConfig *cfg);
/* init_lora_weights "pissa": -1 (exact SVD); "pissa_niter_N" (N in [0, 1000], digits without sign
 * or leading zero): N; anything else: -2. The one rule for the run config's lora.init_lora_weights
 * and adapter_config.json's, so a run never writes an init it would not read back. */
int peft_init_pissa_niter(const char *init);
/* peft_init_pissa_niter of cfg->init */
int peft_pissa_niter(const PeftConfig *cfg);
/* An adapter applied to a base as a plain LoRA (merge, lora.init_from, sample) that is an
 * unconverted PiSSA adapter ("pissa" or "pissa_niter_N", exact or randomised alike): one warning
 * naming config_file's init_lora_weights (it is right only on PiSSA's residual base). */
void peft_warn_unconverted(const PeftConfig *cfg, const char *config_file);

/* The modules' names, from the architectures' descriptions (arch.h): PEFT's target name ("q_proj",
 * "c_proj"), the path inside a layer ("self_attn.q_proj", "attn.c_proj"), and the first
 * architecture that has it. */
const char *peft_module_name(PeftModule m);
const char *peft_module_path(PeftModule m);
ModelArch peft_module_arch(PeftModule m);

/* A target_modules entry naming a module of some architecture (bare, or qualified by its parent). */
bool peft_target_known(const char *name);

/* Which modules of arch the config targets (PEFT's suffix match; "all-linear": every one, the
 * output layer excluded as PEFT does). A target naming no module of arch is refused (code 2,
 * naming adapter_config.json's target_modules), as PEFT refuses targets not found in the model. */
int peft_config_targets(const PeftConfig *cfg, ModelArch arch, bool mask[PEFT_MODULE_COUNT], const char *path,
                        GtError *err);
/* Set target_modules to the names of the modules in mask (PEFT saves "all-linear" resolved). */
void peft_config_set_targets(PeftConfig *cfg, const bool mask[PEFT_MODULE_COUNT]);

/* The tensors of one adapted module ("part"): lora_A, lora_B and, under DoRA, the magnitude. */
enum { PEFT_PART_A = 0, PEFT_PART_B = 1, PEFT_PART_M = 2 };
/* the adapter kind the config names (use_dora: DoRA): its parts per entry and their shapes */
static inline const AdapterParts *peft_kind(const PeftConfig *cfg) { return adapter_parts_of_peft(cfg->use_dora); }

/* PEFT's key of layer's module: part PEFT_PART_A (lora_A), _B or _M (lora_magnitude_vector).
 * Returns 0, or -1 when it does not fit. */
int peft_key(char *buf, size_t cap, ModelArch arch, int layer, PeftModule module, int part);
/* The inverse: 0 with layer (0..PEFT_MAX_LAYER), module, part; -1 for a key that is not one. */
#define PEFT_MAX_LAYER 100000
int peft_key_parse(const char *key, ModelArch arch, int *layer, PeftModule *module, int *part);

/* One adapted module: A [r, in], B [out, r]. */
typedef struct {
    int layer;
    PeftModule module;
    int64_t in, out;
} PeftEntry;

/* Every (layer, module) of d that mask selects, layer-major in the model's order, with its
 * dimensions. *out is freshly allocated (free()). Returns the count. */
int peft_entries_for(const ModelDesc *d, const bool mask[PEFT_MODULE_COUNT], PeftEntry **out);

typedef struct PeftAdapter PeftAdapter;

/* Open DIR: read and check adapter_config.json (into *cfg), then adapter_model.safetensors
 * through hf_weights: every entry's lora_A [r, in] and lora_B [out, r] (and with use_dora its
 * lora_magnitude_vector [out]) present in a float dtype, and no other tensor (a key of a module
 * or layer not in the list, a DoRA magnitude without use_dora, a bias: one line naming the key
 * and the file). The config's targets must select exactly the entries'
 * modules for arch. Code 2 for a bad adapter. *out is NULL on failure. */
int peft_adapter_open(PeftAdapter **out, const char *dir, ModelArch arch, const PeftEntry *entries, int n,
                      PeftConfig *cfg, GtError *err);
void peft_adapter_close(PeftAdapter *a); /* NULL is fine */
/* Entry e's part (PEFT_PART_A: lora_A, _B: lora_B, _M: the magnitude) as fp32 into dst[n]
 * (n = r*in, out*r or out). */
int peft_adapter_read(const PeftAdapter *a, int e, int part, float *dst, size_t n, GtError *err);

/* Elements [off, off + n) of entry e's part (row-major) as fp32 into dst. */
int peft_adapter_read_range(const PeftAdapter *a, int e, int part, uint64_t off, size_t n, float *dst, GtError *err);
/* The adapter's rank (its config's r, which every tensor's shape was checked against). */
int peft_adapter_r(const PeftAdapter *a);

/* Fill dst[n] with elements [off, off + n) of entry e's part (row-major, lora_A [r, in], lora_B
 * [out, r], the magnitude [out]) as fp32. Return 0, or -1 with err (stops the write, nothing left
 * behind). */
typedef int (*PeftFillFn)(void *ctx, int e, int part, uint64_t off, size_t n, float *dst, GtError *err);

/* Write DIR/adapter_model.safetensors (lora_A, lora_B and with cfg->use_dora the magnitude of
 * each entry, in order; dtype ST_F32
 * or ST_BF16) and DIR/adapter_config.json. staging_floats 0: 1 Mi floats. 0, or -1 (code 1). */
int peft_adapter_write(const char *dir, const PeftConfig *cfg, ModelArch arch, const PeftEntry *entries, int n,
                       StDtype dtype, size_t staging_floats, PeftFillFn fill, void *ctx, GtError *err);

#endif
