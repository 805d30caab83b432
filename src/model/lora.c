/* lora.c - LoRA adapters as data (see lora.h): where each PEFT module sits in gtrain's fused
 * tensors (read from the arch table's HF blocks, not a second table), the adapters' layout and
 * parameter count, their initialisation, the dropout key, and the run config's lora: section
 * applied to a model description. */
#include "lora.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "adapter.h"
#include "dropout.h"
#include "svd.h"
#include "model.h"

_Static_assert(PEFT_MODULE_COUNT <= MODEL_LORA_SLOTS, "AdapterState.idx has a slot per module");
_Static_assert(PEFT_MODULE_COUNT <= 32, "ModelDesc.lora_targets has a bit per module");
_Static_assert(CONFIG_LORA_MAX_R == PEFT_MAX_R && CONFIG_LORA_MAX_TARGETS == PEFT_MAX_TARGETS &&
                   CONFIG_LORA_NAME_MAX == sizeof ((PeftConfig *)0)->target_modules[0],
               "the run config's lora: bounds are PEFT's");

bool lora_module_site(const ModelDesc *d, PeftModule module, LoraSite *s) {
    const ArchSpec *spec = arch_spec(d->arch);
    char want[64];
    snprintf(want, sizeof want, ".%s.weight", peft_module_path(module));
    const size_t wl = strlen(want);
    for (int i = 0; i < spec->n_tensors; i++) {
        const ArchTensor *t = &spec->tensors[i];
        if (!t->per_layer || t->dim1 == DIM_1 || !arch_tensor_present(d, t)) continue;
        int64_t row0 = 0;
        for (int b = 0; b < t->n_blocks; b++) {
            const size_t hl = strlen(t->blocks[b].hf);
            const int64_t rows = arch_dim(d, t->blocks[b].rows);
            if (hl >= wl && strcmp(t->blocks[b].hf + hl - wl, want) == 0) {
                *s = (LoraSite){module, t->role, row0, rows, arch_dim(d, t->dim1), t, b};
                return true;
            }
            row0 += rows;
        }
    }
    return false;
}

int lora_sites(const ModelDesc *d, LoraSite out[PEFT_MODULE_COUNT]) {
    int n = 0;
    if (d->adapter.r <= 0) return 0;
    const ArchSpec *spec = arch_spec(d->arch); /* its modules, in the layer's forward order */
    for (int i = 0; i < spec->n_peft; i++)
        if ((d->adapter.targets >> spec->peft[i].module & 1u) && lora_module_site(d, spec->peft[i].module, &out[n])) n++;
    return n;
}

int lora_group_max(const ModelDesc *d) {
    LoraSite s[PEFT_MODULE_COUNT];
    const int n = lora_sites(d, s);
    int most = 0;
    for (int k = 0, run = 0; k < n; k++) {
        run = k > 0 && s[k].role == s[k - 1].role ? run + 1 : 1;
        if (run > most) most = run;
    }
    return most;
}

int lora_h_stride(const ModelDesc *d) {
    if (d->adapter.r <= 0) return 0;
    if (d->adapter.dora) return d->adapter.r;
    const int width = d->adapter.r * lora_group_max(d);
    return (width + 7) / 8 * 8;
}

void lora_targets_mask(const ModelDesc *d, bool mask[PEFT_MODULE_COUNT]) {
    for (int m = 0; m < PEFT_MODULE_COUNT; m++) mask[m] = d->adapter.targets >> m & 1u;
}

uint64_t lora_num_params(const ModelDesc *d) {
    LoraSite s[PEFT_MODULE_COUNT];
    const int n = lora_sites(d, s);
    const AdapterKind *kind = adapter_kind(d);
    uint64_t per_layer = 0;
    for (int k = 0; k < n && kind; k++)
        for (int p = 0; p < kind->parts->n; p++) { /* the kind's parts' shapes */
            int64_t d0, d1;
            adapter_part_shape(kind, p, &s[k], d->adapter.r, &d0, &d1);
            per_layer += (uint64_t)d0 * (uint64_t)d1;
        }
    return per_layer * (uint64_t)d->n_layer;
}

static void add_adapter(ParamLayout *pl, int *cap, const ModelDesc *d, const LoraSite *s, int layer, int part) {
    if (pl->n_tensors == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        pl->tensors = gt_xrealloc(pl->tensors, (size_t)*cap * sizeof *pl->tensors);
    }
    ParamTensor *t = &pl->tensors[pl->n_tensors];
    memset(t, 0, sizeof *t);
    if (peft_key(t->name, sizeof t->name, d->arch, layer, s->module, part) != 0)
        snprintf(t->name, sizeof t->name, "lora.%d.%d.%c", layer, (int)s->module, "ABM"[part]);
    int64_t d0, d1; /* the kind says each part's shape */
    t->ndim = adapter_part_shape(adapter_kind(d), part, s, d->adapter.r, &d0, &d1);
    t->shape[0] = d0;
    t->shape[1] = t->ndim == 2 ? d1 : 0;
    t->numel = (size_t)d0 * (size_t)d1;
    t->offset = pl->total;
    t->decay = true;
    t->layer = layer;
    t->role = s->role;
    pl->n_tensors++;
    pl->total += t->numel;
}

/* the sites in a layer of d's layout, at least 1 (a description without targets: one site a layer, so
 * the part is i % lora_parts, as for any one-site layout) */
static int layout_sites(const ModelDesc *d, LoraSite s[PEFT_MODULE_COUNT]) {
    const int n = lora_sites(d, s);
    return n > 0 ? n : 1;
}

PeftModule lora_tensor_module(const ModelDesc *d, int i) {
    LoraSite s[PEFT_MODULE_COUNT];
    const int n = lora_sites(d, s);
    return n > 0 && i >= 0 ? s[(i % (n * lora_parts(d))) % n].module : PEFT_MODULE_COUNT;
}

int lora_tensor_part(const ModelDesc *d, int i) {
    LoraSite s[PEFT_MODULE_COUNT];
    const int n = layout_sites(d, s);
    return i >= 0 ? (i % (n * lora_parts(d))) / n : -1;
}

int lora_entry_tensor(const ModelDesc *d, int e, int part) {
    LoraSite s[PEFT_MODULE_COUNT];
    const int n = layout_sites(d, s);
    return e >= 0 ? (e / n) * n * lora_parts(d) + part * n + e % n : -1;
}

int lora_tensor_entry(const ModelDesc *d, int i) {
    LoraSite s[PEFT_MODULE_COUNT];
    const int n = layout_sites(d, s), per = n * lora_parts(d);
    return i >= 0 ? (i / per) * n + (i % per) % n : -1;
}

void lora_layout_init(ParamLayout *pl, const ModelDesc *d) {
    memset(pl, 0, sizeof *pl);
    const int L = d->n_layer;
    LoraSite s[PEFT_MODULE_COUNT];
    const int n = lora_sites(d, s);
    int cap = 0;
    pl->n_layer = L;
    pl->layer = gt_xcalloc((size_t)(L > 0 ? L : 1), sizeof *pl->layer);
    pl->layer_begin = gt_xcalloc((size_t)L + 1, sizeof *pl->layer_begin);
    for (int r = 0; r < ROLE_COUNT; r++) pl->global[r] = -1;
    for (int l = 0; l < L; l++) {
        for (int r = 0; r < ROLE_COUNT; r++) pl->layer[l][r] = -1;
        pl->layer_begin[l] = pl->total;
        for (int part = 0; part < lora_parts(d); part++) /* part-major (lora.h) */
            for (int k = 0; k < n; k++) add_adapter(pl, &cap, d, &s[k], l, part);
    }
    pl->layer_begin[L] = pl->total;
}

uint64_t lora_pissa_host_bytes(const ModelDesc *d, int niter) {
    LoraSite s[PEFT_MODULE_COUNT];
    const int n = lora_sites(d, s);
    uint64_t most = 0;
    for (int k = 0; k < n; k++) { /* the block in fp32, A and B, and the SVD's own */
        const uint64_t rows = (uint64_t)s[k].rows, in = (uint64_t)s[k].in, r = (uint64_t)d->adapter.r;
        const uint64_t b = 4 * (rows * in + r * (rows + in)) + pissa_host_bytes((int)rows, (int)in, d->adapter.r, niter);
        if (b > most) most = b;
    }
    return most;
}

uint64_t lora_dropout_key(uint64_t seed, long step, int layer, PeftModule module) {
    uint64_t k = gt_mix64(seed ^ 0x4c6f5241ull); /* "LoRA": apart from every other use of the seed */
    k = gt_mix64(k ^ (uint64_t)step);
    k = gt_mix64(k ^ (uint64_t)(uint32_t)layer);
    return gt_mix64(k ^ (uint64_t)module);
}

/* uniform in (0, 1) from the counter (seed, tensor, element, draw) */
static double draw01(uint64_t seed, int i, size_t e, int draw) {
    uint64_t z = gt_mix64(seed ^ gt_mix64(0x6c6f7261ull + (uint64_t)i));
    z = gt_mix64(z ^ ((uint64_t)e * 2 + (uint64_t)draw));
    return ((double)(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

void lora_init_tensor(const ParamTensor *t, const ModelDesc *d, uint64_t seed, int i, size_t k0, size_t n,
                      float *dst) {
    const LoraInit init = (LoraInit)d->adapter.init;
    if (t->ndim == 1) { /* DoRA's magnitude: 1 here; the row norms of W + s B A once the base is loaded (lora_dora_init) */
        for (size_t k = 0; k < n; k++) dst[k] = 1.0f;
        return;
    }
    if (lora_tensor_part(d, i) == PEFT_PART_B && init != LORA_INIT_FALSE) {
        memset(dst, 0, n * sizeof *dst);
        return;
    }
    const double fan_in = (double)t->shape[1];
    /* the draws are keyed by the tensor's place in entry order (entry, part), as before the layout
     * became part-major: the same seed gives the same adapters */
    const int key = lora_tensor_entry(d, i) * lora_parts(d) + lora_tensor_part(d, i);
    for (size_t k = 0; k < n; k++) {
        const size_t e = k0 + k;
        if (init == LORA_INIT_GAUSSIAN) { /* nn.init.normal_(std = 1 / r) */
            double u1 = draw01(seed, key, e, 0), u2 = draw01(seed, key, e, 1);
            dst[k] = (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2) / d->adapter.r);
        } else { /* kaiming_uniform_(a = sqrt(5)): bound = sqrt(6 / ((1 + a^2) fan_in)) = 1 / sqrt(fan_in) */
            dst[k] = (float)((2.0 * draw01(seed, key, e, 0) - 1.0) / sqrt(fan_in));
        }
    }
}

/* ---------------------------------------------------------------- the run config's lora: */

static int init_kind(const char *s, LoraInit *kind, int *niter) {
    *niter = -2; /* not PiSSA */
    if (strcmp(s, "true") == 0) return *kind = LORA_INIT_TRUE, 0;
    if (strcmp(s, "gaussian") == 0) return *kind = LORA_INIT_GAUSSIAN, 0;
    if (strcmp(s, "false") == 0) return *kind = LORA_INIT_FALSE, 0;
    *kind = LORA_INIT_TRUE;
    *niter = peft_init_pissa_niter(s); /* the rule adapter_config.json is read by: what the run writes reads back */
    return *niter == -2 ? -1 : 0;
}

int lora_pissa_niter_of(const char *init) {
    LoraInit k;
    int niter;
    return init_kind(init, &k, &niter) == 0 ? niter : -2;
}

/* PEFT's default targets when target_modules is None (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING) */
static const char *default_targets(ModelArch arch) { return arch_spec(arch)->peft_default_targets; }

/* cfg's comma-separated target_modules into PeftConfig form */
static int set_targets(PeftConfig *pc, const char *list, const char *where, GtError *err) {
    pc->n_targets = 0;
    pc->all_linear = false;
    if (strcmp(list, "all-linear") == 0) {
        pc->all_linear = true;
        snprintf(pc->target_modules[0], sizeof pc->target_modules[0], "all-linear");
        pc->n_targets = 1;
        return 0;
    }
    const char *p = list;
    while (*p) {
        const char *q = strchr(p, ',');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        if (len == 0 || len >= sizeof pc->target_modules[0] || pc->n_targets == PEFT_MAX_TARGETS)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: lora.target_modules: expected at most %d module names, found \"%.60s\"",
                            where, PEFT_MAX_TARGETS, list);
        memcpy(pc->target_modules[pc->n_targets], p, len);
        pc->target_modules[pc->n_targets++][len] = '\0';
        p = q ? q + 1 : p + len;
    }
    return 0;
}

static void apply_peft(ModelDesc *d, const PeftConfig *pc, const bool mask[PEFT_MODULE_COUNT]) {
    d->adapter.r = pc->r;
    d->adapter.scale = peft_scaling(pc);
    d->adapter.dropout = pc->lora_dropout;
    d->adapter.dora = pc->use_dora;
    d->adapter.targets = 0;
    for (int m = 0; m < PEFT_MODULE_COUNT; m++)
        if (mask[m]) d->adapter.targets |= 1u << m;
}

int lora_desc_apply(ModelDesc *d, const PeftConfig *pc, const char *cfile, GtError *err) {
    bool mask[PEFT_MODULE_COUNT];
    if (peft_config_targets(pc, d->arch, mask, cfile, err)) return -1;
    apply_peft(d, pc, mask);
    d->adapter.init = LORA_INIT_TRUE;
    return 0;
}

int lora_desc_from_adapter(ModelDesc *d, const char *dir, PeftConfig *pc, GtError *err) {
    char cfile[GT_PATH_MAX + 32];
    snprintf(cfile, sizeof cfile, "%s/%s", dir, PEFT_CONFIG_FILE);
    return peft_config_read(dir, pc, err) || lora_desc_apply(d, pc, cfile, err) ? -1 : 0;
}

/* the key's value came from the run config (file or --set) rather than its default */
static bool given(const RunConfig *cfg, const char *key) {
    const char *file;
    int line, col;
    return config_key_source(cfg, key, &file, &line, &col) != CFG_SRC_DEFAULT;
}

/* a run-config key's value refused: "file:line:col: key: ..." where it was read (at_value), else
 * "file:line: key: ..." (checked against the model or an adapter), or "--set key: ..." */
static int key_error_at(const RunConfig *cfg, const char *key, bool at_value, GtError *err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int key_error_at(const RunConfig *cfg, const char *key, bool at_value, GtError *err, const char *fmt, ...) {
    char msg[GT_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *file;
    int line, col;
    config_key_source(cfg, key, &file, &line, &col);
    return gt_key_error(err, file, line, at_value ? col : 0, key, msg);
}
#define key_error(cfg, key, err, ...) key_error_at(cfg, key, false, err, __VA_ARGS__)

int lora_check_config(const RunConfig *cfg, GtError *err) {
    const char *init = cfg->lora.init_lora_weights;
    LoraInit kind;
    int niter;
    if (init_kind(init, &kind, &niter) != 0)
        return key_error_at(cfg, "lora.init_lora_weights", true, err, "expected true, false, gaussian, pissa or "
                            "pissa_niter_N (N in [0, 1000], no leading zero), found \"%.40s\"", init);
    const char *list = cfg->lora.target_modules;
    for (const char *p = list; strcmp(list, "all-linear") != 0 && *p;) { /* its form is the config's */
        char name[CONFIG_LORA_NAME_MAX];
        const size_t len = strcspn(p, ",");
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), p);
        if (!peft_target_known(name)) /* which of them the model has is checked against the model */
            return key_error_at(cfg, "lora.target_modules", true, err, "expected module names of q_proj, k_proj, "
                                "v_proj, o_proj, gate_proj, up_proj, down_proj (Llama family), c_attn, c_proj, c_fc "
                                "(GPT-2) or all-linear, found \"%s\" in \"%.60s\"", name, list);
        p += len + (p[len] == ',');
    }
    if (cfg->lora.init_from[0] && niter != -2)
        return key_error_at(cfg, "lora.init_lora_weights", true, err, "expected no PiSSA initialisation with "
                            "lora.init_from (the adapter is the initialisation), found %.40s", init);
    return 0;
}

/* the run config's targets against the model: peft_config_targets, its refusal as lora.target_modules' */
static int run_targets(const PeftConfig *pc, const RunConfig *cfg, ModelArch arch, bool mask[PEFT_MODULE_COUNT],
                       GtError *err) {
    if (peft_config_targets(pc, arch, mask, "", err) == 0) return 0;
    const char *why = strstr(err->msg, "expected"); /* ": target_modules: expected ..." without the path */
    return key_error(cfg, "lora.target_modules", err, "%s", why ? why : err->msg);
}

/* the base's 4-bit storage (d->quant): config.json's bitsandbytes base as it is, or the run's
 * lora.quantize_base nf4 (blocksize 64, as bitsandbytes' default; nesting from
 * lora.bnb_4bit_use_double_quant); the dequantized weights are in the activation dtype */
static int quant_configure(ModelDesc *d, const RunConfig *cfg, GtError *err) {
    if (cfg->lora.quantize_base == QUANTIZE_BASE_NF4) {
        if (d->quant.prequantized)
            return key_error(cfg, "lora.quantize_base", err, "%s: already 4-bit (bitsandbytes nf4): it loads as it is; "
                             "expected lora.quantize_base: none, found nf4", d->path);
        d->quant.nf4 = true;
        d->quant.blocksize = 64;
        d->quant.nested = cfg->lora.bnb_4bit_use_double_quant;
    }
    if (!d->quant.nf4) return 0;
    if (cfg->lora.base_dtype != BASE_DTYPE_AUTO)
        return key_error(cfg, "lora.base_dtype", err, "expected auto with a 4-bit base (%s; its linear weights are "
                         "nf4, the rest in the activation dtype), found %s", d->quant.prequantized ? d->path :
                         "lora.quantize_base: nf4", cfg->lora.base_dtype == BASE_DTYPE_BF16 ? "bf16" : "fp32");
    const int want = cfg->precision == PREC_BF16 ? COMPUTE_DTYPE_BF16 : COMPUTE_DTYPE_FP32;
    if (cfg->lora.bnb_4bit_compute_dtype != COMPUTE_DTYPE_AUTO && cfg->lora.bnb_4bit_compute_dtype != want)
        return key_error(cfg, "lora.bnb_4bit_compute_dtype", err, "expected auto or %s (precision %s: a 4-bit weight is "
                         "dequantized to the activation dtype), found %s", want == COMPUTE_DTYPE_BF16 ? "bfloat16" :
                         "float32", want == COMPUTE_DTYPE_BF16 ? "bf16" : "fp32",
                         want == COMPUTE_DTYPE_BF16 ? "float32" : "bfloat16");
    return 0;
}

int lora_configure(ModelDesc *d, PeftConfig *pc, const RunConfig *cfg, GtError *err) {
    d->adapter.r = 0;
    d->adapter.targets = 0;
    d->adapter.dora = false;
    d->adapter.base_dtype = BASE_DTYPE_AUTO;
    peft_config_defaults(pc);
    if (!cfg->lora.enabled) {
        if (d->quant.nf4)
            return key_error(cfg, "model", err, "expected a lora: section with a 4-bit base (%s: quantization_config, "
                             "bitsandbytes nf4: a frozen base only adapters train on), found full fine-tuning", d->path);
        return 0;
    }
    if (lora_check_config(cfg, err)) return -1;
    const char *where = cfg->config_path[0] ? cfg->config_path : "config";
    LoraInit kind;
    int niter;
    init_kind(cfg->lora.init_lora_weights, &kind, &niter); /* checked */
    bool mask[PEFT_MODULE_COUNT];
    if (cfg->lora.init_from[0]) {
        /* continuing an adapter: its config says what the adapter is; keys given here must agree */
        struct stat sb;
        if (stat(cfg->lora.init_from, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return key_error(cfg, "lora.init_from", err, "expected a PEFT adapter directory (adapter_config.json and "
                             "adapter_model.safetensors), found %s %s", stat(cfg->lora.init_from, &sb) != 0 ? "nothing at" :
                             "the file", cfg->lora.init_from);
        if (lora_desc_from_adapter(d, cfg->lora.init_from, pc, err)) return -1;
        char cfile[GT_PATH_MAX + 32];
        snprintf(cfile, sizeof cfile, "%s/%s", cfg->lora.init_from, PEFT_CONFIG_FILE);
        lora_targets_mask(d, mask);
        if (given(cfg, "lora.r") && cfg->lora.r != pc->r)
            return key_error(cfg, "lora.r", err, "expected the adapter's r %d (%s), found %d", pc->r, cfile, cfg->lora.r);
        if (given(cfg, "lora.lora_alpha") && cfg->lora.lora_alpha != pc->lora_alpha)
            return key_error(cfg, "lora.lora_alpha", err, "expected the adapter's %g (%s), found %g", pc->lora_alpha, cfile,
                             cfg->lora.lora_alpha);
        if (given(cfg, "lora.use_rslora") && cfg->lora.use_rslora != pc->use_rslora)
            return key_error(cfg, "lora.use_rslora", err, "expected the adapter's %s (%s), found %s",
                             pc->use_rslora ? "true" : "false", cfile, cfg->lora.use_rslora ? "true" : "false");
        if (given(cfg, "lora.target_modules")) {
            PeftConfig mine = *pc;
            bool m2[PEFT_MODULE_COUNT];
            if (set_targets(&mine, cfg->lora.target_modules, where, err) || run_targets(&mine, cfg, d->arch, m2, err))
                return -1;
            if (memcmp(m2, mask, sizeof mask) != 0)
                return key_error(cfg, "lora.target_modules", err, "expected the adapter's modules (%s), found others",
                                 cfile);
        }
        if (given(cfg, "lora.use_dora") && cfg->lora.use_dora != pc->use_dora)
            return key_error(cfg, "lora.use_dora", err, "expected the adapter's %s (%s), found %s",
                             pc->use_dora ? "true" : "false", cfile, cfg->lora.use_dora ? "true" : "false");
        if (given(cfg, "lora.lora_dropout")) pc->lora_dropout = cfg->lora.lora_dropout;
        pc->inference_mode = false;
    } else {
        pc->r = cfg->lora.r;
        pc->lora_alpha = cfg->lora.lora_alpha;
        pc->lora_dropout = cfg->lora.lora_dropout;
        pc->use_rslora = cfg->lora.use_rslora;
        pc->use_dora = cfg->lora.use_dora;
        if (pc->use_dora && niter != -2) /* the rank-2r conversion gtrain saves is exact for LoRA only */
            return key_error(cfg, "lora.use_dora", err, "expected false with init_lora_weights %s (PiSSA's rank-2r "
                             "conversion is a plain LoRA's; a DoRA magnitude does not convert), found true",
                             cfg->lora.init_lora_weights);
        snprintf(pc->init, sizeof pc->init, "%.31s", cfg->lora.init_lora_weights); /* checked: short */
        if (!cfg->lora.target_modules[0] && !default_targets(d->arch))
            return key_error(cfg, "lora.target_modules", err, "expected module names (PEFT has no default targets for "
                             "model_type %s; its modules: %s), found none", d->model_type, arch_spec(d->arch)->peft_summary);
        if (set_targets(pc, cfg->lora.target_modules[0] ? cfg->lora.target_modules : default_targets(d->arch), where, err) ||
            run_targets(pc, cfg, d->arch, mask, err))
            return -1;
        /* PEFT saves "all-linear" resolved to the module names */
        peft_config_set_targets(pc, mask);
        if (niter != -2) { /* PiSSA takes r singular vectors of each matrix: checked here, before plan or run */
            PeftEntry *e = NULL;
            const int n = peft_entries_for(d, mask, &e);
            for (int i = 0; i < n; i++) {
                const int64_t rank = e[i].in < e[i].out ? e[i].in : e[i].out;
                if (pc->r > rank) {
                    const int64_t in = e[i].in, out = e[i].out;
                    const int layer = e[i].layer;
                    const char *mod = peft_module_path(e[i].module);
                    free(e);
                    return key_error(cfg, "lora.r", err, "expected at most %lld with init_lora_weights %s (PiSSA takes r "
                                     "singular vectors of each adapted matrix; layer %d %s is %lld x %lld, rank at most "
                                     "%lld), found %d", (long long)rank, cfg->lora.init_lora_weights, layer, mod,
                                     (long long)out, (long long)in, (long long)rank, pc->r);
                }
            }
            free(e);
        }
    }
    /* base_model_name_or_path: the model's directory, absolute, so the adapter finds it from anywhere */
    char abs[GT_PATH_MAX];
    snprintf(pc->base_model, sizeof pc->base_model, "%s", realpath(cfg->model, abs) ? abs : cfg->model);
    apply_peft(d, pc, mask);
    d->adapter.init = (int)kind;
    d->adapter.base_dtype = cfg->lora.base_dtype;
    return quant_configure(d, cfg, err);
}
