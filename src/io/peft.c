/* peft.c - Hugging Face PEFT LoRA adapter directories (adapter_config.json and
 * adapter_model.safetensors), read as hostile input and written as PEFT's save_pretrained writes
 * them. See peft.h for the rules. */
#include "peft.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf_weights.h"
#include "lora.h"
#include "model_desc_internal.h"

/* the modules' names and each architecture's list are its description's (arch.h) */
const char *peft_module_name(PeftModule m) {
    const ArchPeft *p = arch_peft_any(m);
    return p ? p->name : "?";
}
const char *peft_module_path(PeftModule m) {
    const ArchPeft *p = arch_peft_any(m);
    return p ? p->path : "?";
}
ModelArch peft_module_arch(PeftModule m) {
    for (int a = 0; a < ARCH_COUNT; a++)
        if (arch_peft_module((ModelArch)a, m)) return (ModelArch)a;
    return ARCH_COUNT;
}

static const char *layer_prefix(ModelArch arch) { return arch_spec(arch)->layer_prefix; }
#define KEY_ROOT "base_model.model."

void peft_config_defaults(PeftConfig *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->r = 8;
    cfg->lora_alpha = 8;
    snprintf(cfg->init, sizeof cfg->init, "true");
}

double peft_scaling(const PeftConfig *cfg) {
    return cfg->use_rslora ? cfg->lora_alpha / sqrt((double)cfg->r) : cfg->lora_alpha / cfg->r;
}

int peft_init_pissa_niter(const char *init) {
    if (strcmp(init, "pissa") == 0) return -1;
    if (strncmp(init, "pissa_niter_", 12) != 0) return -2;
    const char *s = init + 12;
    size_t n = strlen(s);
    /* N in [0, 1000], decimal digits only, no sign and no leading zero (PEFT writes the string back as given) */
    if (n < 1 || n > 4 || (s[0] == '0' && n > 1)) return -2;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return -2;
    int v = atoi(s);
    return v <= 1000 ? v : -2;
}

int peft_pissa_niter(const PeftConfig *cfg) { return peft_init_pissa_niter(cfg->init); }

void peft_warn_unconverted(const PeftConfig *cfg, const char *config_file) {
    if (peft_pissa_niter(cfg) == -2) return;
    gt_warn("%s: init_lora_weights is \"%.40s\": an unconverted PiSSA adapter, applied here as a plain LoRA to the "
            "base as given, which is right only for PiSSA's residual base W - B0 A0 (PEFT recomputes that residual "
            "by SVD of the original base when it loads such an adapter, gtrain does not); for the original base "
            "convert it first (PEFT's save_pretrained with path_initial_model_for_weight_conversion)\n",
            config_file, cfg->init);
}

/* a target name (bare or qualified by its parent) matches module m: PEFT's suffix match */
static bool target_matches(const char *t, PeftModule m) {
    return strcmp(t, peft_module_name(m)) == 0 || strcmp(t, peft_module_path(m)) == 0;
}

bool peft_target_known(const char *t) {
    for (int m = 0; m < PEFT_MODULE_COUNT; m++)
        if (target_matches(t, (PeftModule)m)) return true;
    return false;
}

/* null, false, "", {} or []: a feature left at its default */
static bool default_like(const cJSON *j) {
    if (cJSON_IsNull(j) || cJSON_IsFalse(j)) return true;
    if (cJSON_IsString(j)) return j->valuestring[0] == '\0';
    if (cJSON_IsObject(j) || cJSON_IsArray(j)) return j->child == NULL;
    return false;
}

/* bookkeeping keys with no effect on the adapter's values */
static bool inert_key(const char *k) {
    static const char *const inert[] = {"revision", "auto_mapping", "megatron_core", "peft_version",
                                        "qalora_group_size", "runtime_config"};
    for (size_t i = 0; i < sizeof inert / sizeof *inert; i++)
        if (strcmp(k, inert[i]) == 0) return true;
    return false;
}

#define BAD(...) gt_error(err, GT_EXIT_BAD_INPUT, __VA_ARGS__)

/* A module's full name, "model.layers.N.self_attn.q_proj" or "transformer.h.N.attn.c_attn", as
 * PEFT writes target_modules when it adapts fewer than 20 modules (all-linear or a list resolved
 * to the modules found: MIN_TARGET_MODULES_FOR_OPTIMIZATION): its module path
 * ("self_attn.q_proj"), which names that module in every layer. The layers an adapter really
 * adapts are its tensors': one that adapts only some layers is refused by the tensors' check (the
 * first missing key named). Any other name is returned as it is. */
static const char *unqualified(const char *t) {
    for (int a = 0; a < ARCH_COUNT; a++) {
        const char *pre = layer_prefix((ModelArch)a);
        size_t n = strlen(pre);
        if (strncmp(t, pre, n) != 0) continue;
        const char *p = t + n;
        if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9')) return t;
        while (*p >= '0' && *p <= '9') p++;
        if (*p != '.' || p - (t + n) > 9) return t;
        for (int m = 0; m < PEFT_MODULE_COUNT; m++)
            if (strcmp(p + 1, peft_module_path((PeftModule)m)) == 0) return p + 1;
        return t;
    }
    return t;
}

static int parse_targets(PeftConfig *cfg, const cJSON *j, const char *path, GtError *err) {
    char f[MJ_FOUND_MAX];
    if (cJSON_IsString(j)) {
        if (strcmp(j->valuestring, "all-linear") == 0) {
            cfg->all_linear = true;
            cfg->n_targets = 1;
            snprintf(cfg->target_modules[0], sizeof cfg->target_modules[0], "all-linear");
            return 0;
        }
        return BAD("%s: target_modules: expected a list of module names or \"all-linear\", found the string %s "
                   "(PEFT reads it as a regular expression over full module names; gtrain does not)",
                   path, mj_found(j, f, sizeof f));
    }
    if (!cJSON_IsArray(j) || !j->child)
        return BAD("%s: target_modules: expected a non-empty list of module names or \"all-linear\", found %s", path,
                   mj_found(j, f, sizeof f));
    cfg->n_targets = 0;
    for (const cJSON *it = j->child; it; it = it->next) {
        if (!cJSON_IsString(it))
            return BAD("%s: target_modules: expected module names (strings), found %s", path, mj_found(it, f, sizeof f));
        const char *name = unqualified(it->valuestring);
        if (!peft_target_known(name))
            return BAD("%s: target_modules: expected q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj "
                       "(Llama family) or c_attn, c_proj, c_fc (GPT-2), found %s",
                       path, mj_found(it, f, sizeof f));
        bool dup = false;
        for (int k = 0; k < cfg->n_targets; k++) dup |= strcmp(cfg->target_modules[k], name) == 0;
        if (dup) continue; /* PEFT keeps a set */
        if (cfg->n_targets == PEFT_MAX_TARGETS)
            return BAD("%s: target_modules: expected at most %d names, found more", path, PEFT_MAX_TARGETS);
        snprintf(cfg->target_modules[cfg->n_targets++], sizeof cfg->target_modules[0], "%s", name);
    }
    return 0;
}

static int parse_member(PeftConfig *cfg, const cJSON *j, const char *k, bool *seen_type, bool *seen_targets,
                        const char *path, GtError *err) {
    char f[MJ_FOUND_MAX];
    if (strcmp(k, "peft_type") == 0) {
        if (!cJSON_IsString(j) || strcmp(j->valuestring, "LORA") != 0)
            return BAD("%s: peft_type: expected \"LORA\", found %s", path, mj_found(j, f, sizeof f));
        *seen_type = true;
    } else if (strcmp(k, "task_type") == 0) {
        if (!cJSON_IsNull(j) && !(cJSON_IsString(j) && strcmp(j->valuestring, "CAUSAL_LM") == 0))
            return BAD("%s: task_type: expected \"CAUSAL_LM\", found %s", path, mj_found(j, f, sizeof f));
    } else if (strcmp(k, "r") == 0) {
        if (!cJSON_IsNumber(j) || !(j->valuedouble >= 1 && j->valuedouble <= PEFT_MAX_R) ||
            j->valuedouble != floor(j->valuedouble))
            return BAD("%s: r: expected an integer in [1, %d], found %s", path, PEFT_MAX_R, mj_found(j, f, sizeof f));
        cfg->r = (int)j->valuedouble;
    } else if (strcmp(k, "lora_alpha") == 0) {
        if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || !(j->valuedouble > 0) || j->valuedouble > 1e9)
            return BAD("%s: lora_alpha: expected a number in (0, 1e9], found %s", path, mj_found(j, f, sizeof f));
        cfg->lora_alpha = j->valuedouble;
    } else if (strcmp(k, "lora_dropout") == 0) {
        if (!cJSON_IsNumber(j) || !(j->valuedouble >= 0 && j->valuedouble < 1))
            return BAD("%s: lora_dropout: expected a number in [0, 1), found %s", path, mj_found(j, f, sizeof f));
        cfg->lora_dropout = j->valuedouble;
    } else if (strcmp(k, "use_rslora") == 0 || strcmp(k, "use_dora") == 0 || strcmp(k, "fan_in_fan_out") == 0 ||
               strcmp(k, "inference_mode") == 0) {
        if (!cJSON_IsBool(j)) return BAD("%s: %s: expected true or false, found %s", path, k, mj_found(j, f, sizeof f));
        bool v = cJSON_IsTrue(j);
        if (strcmp(k, "use_dora") == 0) cfg->use_dora = v;
        else if (k[0] == 'u') cfg->use_rslora = v;
        else if (k[0] == 'f') cfg->fan_in_fan_out = v;
        else cfg->inference_mode = v;
    } else if (strcmp(k, "init_lora_weights") == 0) {
        if (cJSON_IsBool(j))
            snprintf(cfg->init, sizeof cfg->init, "%s", cJSON_IsTrue(j) ? "true" : "false");
        else if (cJSON_IsString(j) && (strcmp(j->valuestring, "gaussian") == 0 || peft_init_pissa_niter(j->valuestring) != -2))
            snprintf(cfg->init, sizeof cfg->init, "%s", j->valuestring);
        else
            return BAD("%s: init_lora_weights: expected true, false, \"gaussian\", \"pissa\" or \"pissa_niter_N\" "
                       "(N in [0, 1000]), found %s", path, mj_found(j, f, sizeof f));
    } else if (strcmp(k, "target_modules") == 0) {
        if (parse_targets(cfg, j, path, err)) return -1;
        *seen_targets = true;
    } else if (strcmp(k, "base_model_name_or_path") == 0) {
        if (cJSON_IsNull(j)) cfg->base_model[0] = '\0';
        else if (!cJSON_IsString(j) || strlen(j->valuestring) >= sizeof cfg->base_model)
            return BAD("%s: base_model_name_or_path: expected a string of at most %d bytes or null, found %s", path,
                       GT_PATH_MAX - 1, mj_found(j, f, sizeof f));
        else snprintf(cfg->base_model, sizeof cfg->base_model, "%s", j->valuestring);
    } else if (strcmp(k, "bias") == 0) {
        if (!cJSON_IsString(j) || strcmp(j->valuestring, "none") != 0)
            return BAD("%s: bias: expected \"none\" (gtrain trains no biases), found %s", path, mj_found(j, f, sizeof f));
    } else if (!inert_key(k) && !default_like(j)) {
        /* modules_to_save, layers_to_transform, rank_pattern, ... or a newer PEFT's feature */
        return BAD("%s: %s: expected null, false or empty (gtrain does not implement it), found %s", path, k,
                   mj_found(j, f, sizeof f));
    }
    return 0;
}

int peft_config_parse(PeftConfig *cfg, const char *json, size_t len, const char *path, GtError *err) {
    peft_config_defaults(cfg);
    if (len > PEFT_CONFIG_MAX_BYTES)
        return BAD("%s: expected at most %u bytes, found %zu", path, PEFT_CONFIG_MAX_BYTES, len);
    if (memchr(json, '\0', len) || gt_json_nul_at(json, len) >= 0)
        return BAD("%s: expected JSON text without NUL, found a NUL byte or \\u0000", path);
    long deep = gt_json_too_deep(json, len, PEFT_CONFIG_MAX_DEPTH);
    if (deep >= 0)
        return BAD("%s: expected JSON nested at most %d deep, found deeper nesting at byte %ld", path,
                   PEFT_CONFIG_MAX_DEPTH, deep);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!root) {
        long off = end ? (long)(end - json) : 0;
        return BAD("%s: expected valid JSON, found an error near byte %ld", path, off);
    }
    size_t rest = end ? (size_t)(end - json) : len;
    while (rest < len && (json[rest] == ' ' || json[rest] == '\n' || json[rest] == '\r' || json[rest] == '\t')) rest++;
    int rc = -1;
    bool seen_type = false, seen_targets = false;
    if (rest < len && json[rest] != '\0') {
        BAD("%s: expected nothing after the JSON object, found more at byte %zu", path, rest);
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        BAD("%s: expected a JSON object, found %s", path, mj_type_name(root));
        goto out;
    }
    int count = 0;
    for (const cJSON *it = root->child; it; it = it->next, count++) {
        if (count >= 256) {
            BAD("%s: expected at most 256 keys, found more", path);
            goto out;
        }
        for (const cJSON *p = root->child; p != it; p = p->next)
            if (strcmp(p->string, it->string) == 0) {
                char q[64];
                BAD("%s: %s: expected the key once, found it twice", path, mj_quote(it->string, q, sizeof q));
                goto out;
            }
        if (parse_member(cfg, it, it->string, &seen_type, &seen_targets, path, err)) goto out;
    }
    if (!seen_type) {
        BAD("%s: peft_type: expected \"LORA\", found nothing", path);
        goto out;
    }
    if (!seen_targets) {
        BAD("%s: target_modules: expected a list of module names or \"all-linear\", found nothing (PEFT's "
            "per-model default is not implemented)", path);
        goto out;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

static int join(char *buf, size_t cap, const char *dir, const char *name, GtError *err) {
    if (snprintf(buf, cap, "%s/%s", dir, name) >= (int)cap)
        return BAD("%.200s...: expected a path of at most %zu bytes", dir, cap - 1);
    return 0;
}

int peft_config_read(const char *path, PeftConfig *cfg, GtError *err) {
    char file[GT_PATH_MAX];
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (join(file, sizeof file, path, PEFT_CONFIG_FILE, err)) return -1;
    } else if (snprintf(file, sizeof file, "%s", path) >= (int)sizeof file) {
        return BAD("%.200s...: expected a path of at most %d bytes", path, GT_PATH_MAX - 1);
    }
    char *buf;
    size_t n;
    if (gt_read_small_file(file, "adapter config", PEFT_CONFIG_MAX_BYTES, &buf, &n, err)) return -1;
    int rc = peft_config_parse(cfg, buf, n, file, err);
    free(buf);
    return rc;
}

/* a growing text buffer; on out of memory it exits (gt_xrealloc) */
typedef struct {
    char *s;
    size_t len, cap;
} Text;

static void put(Text *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->s = gt_xrealloc(t->s, t->cap);
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}
static void puts_(Text *t, const char *s) { put(t, s, strlen(s)); }

static void put_string(Text *t, const char *s) {
    puts_(t, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char e[8];
        if (*p == '"' || *p == '\\') snprintf(e, sizeof e, "\\%c", *p);
        else if (*p == '\n') snprintf(e, sizeof e, "\\n");
        else if (*p == '\t') snprintf(e, sizeof e, "\\t");
        else if (*p < 0x20 || *p == 0x7f) snprintf(e, sizeof e, "\\u%04x", *p);
        else snprintf(e, sizeof e, "%c", *p);
        puts_(t, e);
    }
    puts_(t, "\"");
}

/* Python's repr of a float: shortest round trip, ".0" on an integral value */
static void put_float(Text *t, double v) {
    char b[40];
    mj_num(v, b, sizeof b);
    puts_(t, b);
    if (!strpbrk(b, ".eEn")) puts_(t, ".0");
}

char *peft_config_to_json(const PeftConfig *cfg) {
    Text t = {0};
    char b[64];
    puts_(&t, "{\n  \"alpha_pattern\": {},\n  \"auto_mapping\": null,\n  \"base_model_name_or_path\": ");
    if (cfg->base_model[0]) put_string(&t, cfg->base_model);
    else puts_(&t, "null");
    puts_(&t, ",\n  \"bias\": \"none\",\n  \"fan_in_fan_out\": ");
    puts_(&t, cfg->fan_in_fan_out ? "true" : "false");
    puts_(&t, ",\n  \"inference_mode\": ");
    puts_(&t, cfg->inference_mode ? "true" : "false");
    puts_(&t, ",\n  \"init_lora_weights\": ");
    if (strcmp(cfg->init, "true") == 0 || strcmp(cfg->init, "false") == 0) puts_(&t, cfg->init);
    else put_string(&t, cfg->init);
    puts_(&t, ",\n  \"layer_replication\": null,\n  \"layers_pattern\": null,\n  \"layers_to_transform\": null,\n"
              "  \"loftq_config\": {},\n  \"lora_alpha\": ");
    if (cfg->lora_alpha == floor(cfg->lora_alpha) && fabs(cfg->lora_alpha) < 1e15) {
        snprintf(b, sizeof b, "%.0f", cfg->lora_alpha);
        puts_(&t, b);
    } else {
        put_float(&t, cfg->lora_alpha);
    }
    puts_(&t, ",\n  \"lora_dropout\": ");
    put_float(&t, cfg->lora_dropout);
    puts_(&t, ",\n  \"megatron_config\": null,\n  \"megatron_core\": \"megatron.core\",\n  \"modules_to_save\": null,\n"
              "  \"peft_type\": \"LORA\",\n  \"r\": ");
    snprintf(b, sizeof b, "%d", cfg->r);
    puts_(&t, b);
    puts_(&t, ",\n  \"rank_pattern\": {},\n  \"revision\": null,\n  \"target_modules\": ");
    if (cfg->all_linear) {
        puts_(&t, "\"all-linear\"");
    } else {
        puts_(&t, "[");
        for (int i = 0; i < cfg->n_targets; i++) {
            puts_(&t, i ? ",\n    " : "\n    ");
            put_string(&t, cfg->target_modules[i]);
        }
        puts_(&t, cfg->n_targets ? "\n  ]" : "]");
    }
    puts_(&t, ",\n  \"task_type\": \"CAUSAL_LM\",\n  \"use_dora\": ");
    puts_(&t, cfg->use_dora ? "true" : "false");
    puts_(&t, ",\n  \"use_rslora\": ");
    puts_(&t, cfg->use_rslora ? "true" : "false");
    puts_(&t, "\n}");
    return t.s;
}

int peft_config_write(const char *dir, const PeftConfig *cfg, GtError *err) {
    char file[GT_PATH_MAX];
    if (join(file, sizeof file, dir, PEFT_CONFIG_FILE, err)) return -1;
    char *text = peft_config_to_json(cfg);
    PeftConfig back;
    int rc = peft_config_parse(&back, text, strlen(text), file, err); /* never write what would not read back */
    if (rc == 0) rc = gt_write_file_atomic(file, text, strlen(text), err);
    free(text);
    return rc;
}

int peft_config_targets(const PeftConfig *cfg, ModelArch arch, bool mask[PEFT_MODULE_COUNT], const char *path,
                        GtError *err) {
    for (int m = 0; m < PEFT_MODULE_COUNT; m++) mask[m] = cfg->all_linear && arch_peft_module(arch, (PeftModule)m);
    if (cfg->all_linear) return 0;
    if (cfg->n_targets < 1)
        return BAD("%s: target_modules: expected at least one module name, found none", path);
    for (int i = 0; i < cfg->n_targets; i++) {
        bool any = false;
        for (int m = 0; m < PEFT_MODULE_COUNT; m++)
            if (arch_peft_module(arch, (PeftModule)m) && target_matches(cfg->target_modules[i], (PeftModule)m))
                mask[m] = any = true;
        if (!any)
            return BAD("%s: target_modules: expected modules of a %s (%s) model, found \"%s\"", path,
                       arch_spec(arch)->name, arch_spec(arch)->peft_summary, cfg->target_modules[i]);
    }
    return 0;
}

void peft_config_set_targets(PeftConfig *cfg, const bool mask[PEFT_MODULE_COUNT]) {
    cfg->all_linear = false;
    cfg->n_targets = 0;
    bool one_c_proj = mask[PEFT_ATTN_C_PROJ] != mask[PEFT_MLP_C_PROJ];
    for (int m = 0; m < PEFT_MODULE_COUNT; m++) {
        if (!mask[m]) continue;
        /* GPT-2's two c_proj share PEFT's name: one without the other is named by its parent */
        const char *name = one_c_proj && (m == PEFT_ATTN_C_PROJ || m == PEFT_MLP_C_PROJ) ? peft_module_path((PeftModule)m)
                                                                                       : peft_module_name((PeftModule)m);
        bool dup = false;
        for (int k = 0; k < cfg->n_targets; k++) dup |= strcmp(cfg->target_modules[k], name) == 0;
        if (!dup && cfg->n_targets < PEFT_MAX_TARGETS)
            snprintf(cfg->target_modules[cfg->n_targets++], sizeof cfg->target_modules[0], "%s", name);
    }
}

/* the key's end after the module's path, per part */
static const char *const PART_SUFFIX[3] = {".lora_A.weight", ".lora_B.weight", ".lora_magnitude_vector"};
static const char *const PART_NAME[3] = {"lora_A", "lora_B", "DoRA magnitude"};

int peft_key(char *buf, size_t cap, ModelArch arch, int layer, PeftModule module, int part) {
    const ArchPeft *ap = (unsigned)arch < ARCH_COUNT ? arch_peft_module(arch, module) : NULL;
    if (!ap || layer < 0 || (unsigned)part > 2) return -1;
    int n = snprintf(buf, cap, KEY_ROOT "%s%d.%s%s", layer_prefix(arch), layer, ap->path, PART_SUFFIX[part]);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int peft_key_parse(const char *key, ModelArch arch, int *layer, PeftModule *module, int *part) {
    const char *p = key, *pre = layer_prefix(arch);
    if (strncmp(p, KEY_ROOT, strlen(KEY_ROOT)) != 0) return -1;
    p += strlen(KEY_ROOT);
    if (strncmp(p, pre, strlen(pre)) != 0) return -1;
    p += strlen(pre);
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9')) return -1;
    long l = 0;
    while (*p >= '0' && *p <= '9') {
        l = l * 10 + (*p++ - '0');
        if (l > PEFT_MAX_LAYER) return -1;
    }
    if (*p++ != '.') return -1;
    const ArchSpec *spec = arch_spec(arch);
    for (int i = 0; i < spec->n_peft; i++) {
        size_t n = strlen(spec->peft[i].path);
        if (strncmp(p, spec->peft[i].path, n) != 0) continue;
        const char *s = p + n;
        for (int k = 0; k < 3; k++)
            if (strcmp(s, PART_SUFFIX[k]) == 0) {
                *layer = (int)l;
                *module = spec->peft[i].module;
                *part = k;
                return 0;
            }
    }
    return -1;
}

int peft_entries_for(const ModelDesc *d, const bool mask[PEFT_MODULE_COUNT], PeftEntry **out) {
    const ArchSpec *spec = arch_spec(d->arch);
    LoraSite site[PEFT_MODULE_COUNT];
    int per = 0;
    for (int i = 0; i < spec->n_peft; i++) /* the modules' widths, in the layer's order: where each sits (lora.c) */
        if (mask[spec->peft[i].module] && lora_module_site(d, spec->peft[i].module, &site[per])) per++;
    PeftEntry *e = gt_xcalloc((size_t)(per * d->n_layer) + 1, sizeof *e);
    int n = 0;
    for (int l = 0; l < d->n_layer; l++)
        for (int k = 0; k < per; k++) e[n++] = (PeftEntry){l, site[k].module, site[k].in, site[k].rows};
    *out = e;
    return n;
}

struct PeftAdapter {
    HfWeights *w;
    int n, r, parts;
    int *idx; /* [parts * n]: lora_A, lora_B (and the magnitude) of each entry */
    int64_t *numel;
};

void peft_adapter_close(PeftAdapter *a) {
    if (!a) return;
    hf_weights_close(a->w);
    free(a->idx);
    free(a->numel);
    free(a);
}

int peft_adapter_open(PeftAdapter **out, const char *dir, ModelArch arch, const PeftEntry *entries, int n,
                      PeftConfig *cfg, GtError *err) {
    *out = NULL;
    char cfile[GT_PATH_MAX], wfile[GT_PATH_MAX];
    if (join(cfile, sizeof cfile, dir, PEFT_CONFIG_FILE, err) || join(wfile, sizeof wfile, dir, PEFT_WEIGHTS_FILE, err))
        return -1;
    if (peft_config_read(cfile, cfg, err)) return -1;
    bool mask[PEFT_MODULE_COUNT];
    if (peft_config_targets(cfg, arch, mask, cfile, err)) return -1;
    if (n < 1) return gt_error(err, GT_EXIT_FAILURE, "%s: no adapted modules given", dir);
    for (int e = 0; e < n; e++)
        if ((unsigned)entries[e].module >= PEFT_MODULE_COUNT || !mask[entries[e].module])
            return BAD("%s: target_modules: expected %s (the adapter to continue adapts it), found it missing", cfile,
                       peft_module_path(entries[e].module));
    struct stat sb;
    if (stat(wfile, &sb) != 0) {
        char bin[GT_PATH_MAX];
        if (join(bin, sizeof bin, dir, "adapter_model.bin", err)) return -1;
        if (stat(bin, &sb) == 0)
            return BAD("%s: expected adapter_model.safetensors, found only a pickled adapter_model.bin (not read)", bin);
        return BAD("%s: expected the adapter's weights, found no such file", wfile);
    }
    PeftAdapter *a = gt_xcalloc(1, sizeof *a);
    const AdapterParts *kind = peft_kind(cfg);
    const int P = kind->n;
    a->n = n;
    a->r = cfg->r;
    a->parts = P;
    a->idx = gt_xmalloc((size_t)P * (size_t)n * sizeof *a->idx);
    a->numel = gt_xmalloc((size_t)P * (size_t)n * sizeof *a->numel);
    for (int i = 0; i < P * n; i++) a->idx[i] = -1;
    if (hf_weights_open(&a->w, wfile, err)) goto fail;
    const char *file = hf_weights_path(a->w);
    int count = hf_weights_count(a->w);
    for (int i = 0; i < count; i++) {
        HfTensorInfo t;
        hf_weights_info(a->w, i, &t);
        int layer;
        PeftModule m;
        int B;
        if (peft_key_parse(t.name, arch, &layer, &m, &B)) {
            BAD("%s: tensor %s: expected only lora_A/lora_B weights of %s modules (base_model.model.%s...), found a "
                "tensor that is not one", file, t.name, arch_spec(arch)->name, layer_prefix(arch));
            goto fail;
        }
        if (!mask[m]) {
            BAD("%s: tensor %s: expected only modules %s's target_modules selects, found %s", file, t.name,
                PEFT_CONFIG_FILE, peft_module_path(m));
            goto fail;
        }
        int e = 0;
        while (e < n && !(entries[e].layer == layer && entries[e].module == m)) e++;
        if (e == n) {
            BAD("%s: tensor %s: expected only the model's layers and modules, found layer %d's %s, which the model "
                "does not have", file, t.name, layer, peft_module_path(m));
            goto fail;
        }
        if (B >= P) { /* a part of another kind: only DoRA's magnitude can be (use_dora false) */
            BAD("%s: tensor %s: expected no %s (use_dora is %s in %s), found one", file, t.name, PART_NAME[B],
                kind->peft_use_dora ? "true" : "false", PEFT_CONFIG_FILE);
            goto fail;
        }
        int64_t want[2]; /* the kind says each part's shape */
        const int ndim = adapter_parts_shape(kind, B, cfg->r, entries[e].in, entries[e].out, &want[0], &want[1]);
        if (ndim == 1 && (t.ndim != 1 || t.shape[0] != want[0])) {
            BAD("%s: tensor %s: expected shape [%lld] (%s's output rows), found %d dimension(s), the first %lld",
                file, t.name, (long long)want[0], peft_module_path(m), t.ndim,
                t.ndim > 0 ? (long long)t.shape[0] : 0LL);
            goto fail;
        }
        if (ndim == 2 && (t.ndim != 2 || t.shape[0] != want[0] || t.shape[1] != want[1])) {
            char found[64] = "[";
            for (int d = 0; d < t.ndim; d++)
                snprintf(found + strlen(found), sizeof found - strlen(found), "%s%lld", d ? ", " : "",
                         (long long)t.shape[d]);
            BAD("%s: tensor %s: expected shape [%lld, %lld] (r = %d from %s, %s [out, in] = [%lld, %lld]), found %s]",
                file, t.name, (long long)want[0], (long long)want[1], cfg->r, PEFT_CONFIG_FILE,
                peft_module_path(m), (long long)entries[e].out, (long long)entries[e].in, found);
            goto fail;
        }
        a->idx[P * e + B] = i;
        a->numel[P * e + B] = t.numel;
    }
    for (int i = 0; i < P * n; i++)
        if (a->idx[i] < 0) {
            char key[PEFT_KEY_MAX];
            if (peft_key(key, sizeof key, arch, entries[i / P].layer, entries[i / P].module, i % P))
                snprintf(key, sizeof key, "(layer %d, %s)", entries[i / P].layer, peft_module_path(entries[i / P].module));
            BAD("%s: tensor %s: expected it (%s), found nothing", file, key,
                kind->shape[i % P] == PART_ROWS ? "use_dora is true in " PEFT_CONFIG_FILE
                                     : "target_modules of " PEFT_CONFIG_FILE " selects the module, and gtrain adapts a "
                                       "module in every layer");
            goto fail;
        }
    *out = a;
    return 0;
fail:
    peft_adapter_close(a);
    return -1;
}

int peft_adapter_read(const PeftAdapter *a, int e, int part, float *dst, size_t n, GtError *err) {
    if (e < 0 || e >= a->n || part < 0 || part >= a->parts)
        return gt_error(err, GT_EXIT_FAILURE, "peft_adapter_read: entry %d part %d out of range", e, part);
    return hf_weights_read_f32(a->w, a->idx[a->parts * e + part], dst, n, err);
}

int peft_adapter_read_range(const PeftAdapter *a, int e, int part, uint64_t off, size_t n, float *dst, GtError *err) {
    if (e < 0 || e >= a->n || part < 0 || part >= a->parts)
        return gt_error(err, GT_EXIT_FAILURE, "peft_adapter_read_range: entry %d part %d out of range", e, part);
    return hf_weights_read_range_f32(a->w, a->idx[a->parts * e + part], off, n, dst, err);
}

int peft_adapter_r(const PeftAdapter *a) { return a->r; }

int peft_adapter_write(const char *dir, const PeftConfig *cfg, ModelArch arch, const PeftEntry *entries, int n,
                       StDtype dtype, size_t staging_floats, PeftFillFn fill, void *ctx, GtError *err) {
    char wfile[GT_PATH_MAX];
    if (join(wfile, sizeof wfile, dir, PEFT_WEIGHTS_FILE, err)) return -1;
    if (n < 1 || (dtype != ST_F32 && dtype != ST_BF16) || cfg->r < 1)
        return gt_error(err, GT_EXIT_FAILURE, "%s: expected at least one entry, F32 or BF16 and r >= 1", wfile);
    if (staging_floats == 0) staging_floats = (size_t)1 << 20;
    const AdapterParts *kind = peft_kind(cfg);
    const int P = kind->n;
    StTensorOut *t = gt_xcalloc((size_t)P * (size_t)n, sizeof *t);
    char *names = gt_xmalloc((size_t)P * (size_t)n * PEFT_KEY_MAX);
    float *stage = gt_xmalloc(staging_floats * sizeof *stage);
    StWriter *w = NULL;
    int rc = -1;
    for (int i = 0; i < P * n; i++) {
        const PeftEntry *e = &entries[i / P];
        const int part = i % P;
        char *name = names + (size_t)i * PEFT_KEY_MAX;
        if (e->in < 1 || e->out < 1 || peft_key(name, PEFT_KEY_MAX, arch, e->layer, e->module, part)) {
            gt_error(err, GT_EXIT_FAILURE, "%s: entry %d: expected a module of this architecture, a layer >= 0 and "
                     "dimensions >= 1", wfile, i / P);
            goto out;
        }
        int64_t d0, d1; /* the kind says each part's shape */
        const int ndim = adapter_parts_shape(kind, part, cfg->r, e->in, e->out, &d0, &d1);
        t[i] = (StTensorOut){name, dtype, ndim, {d0, ndim == 2 ? d1 : 0, 0, 0}, NULL};
    }
    static const char *const meta[] = {"format", "pt"};
    if (st_writer_open(&w, wfile, t, P * n, meta, 1, err)) goto out;
    for (int i = 0; i < P * n; i++) {
        uint64_t numel = (uint64_t)t[i].shape[0] * (uint64_t)(t[i].ndim == 2 ? t[i].shape[1] : 1);
        for (uint64_t off = 0; off < numel;) {
            size_t c = numel - off < staging_floats ? (size_t)(numel - off) : staging_floats;
            if (fill(ctx, i / P, i % P, off, c, stage, err)) goto out;
            if (dtype == ST_BF16) { /* in place: element k's 2 bytes land at or before its 4 */
                uint16_t *h = (uint16_t *)(void *)stage;
                for (size_t k = 0; k < c; k++) {
                    uint16_t b = gt_f32_to_bf16(stage[k]);
                    memcpy(h + k, &b, 2);
                }
            }
            if (st_writer_put(w, stage, c * st_dtype_size(dtype), err)) goto out;
            off += c;
        }
    }
    if (st_writer_close(w, err) || st_writer_commit(w, err)) goto out;
    rc = peft_config_write(dir, cfg, err);
out:
    st_writer_free(w);
    free(stage);
    free(names);
    free(t);
    return rc;
}
