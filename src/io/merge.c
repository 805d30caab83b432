/* merge.c - gtrain merge: W + scale * B @ A for every adapted module of a base model (DoRA: that
 * times m / ||W + scale B @ A|| per output row), streamed from the base's shards into
 * save_pretrained's shards a staging buffer at a time. See merge.h. */
#include "merge.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arch.h"
#include "checkpoint.h"
#include "cli.h"
#include "hf_weights.h"
#include "hf_writer.h"
#include "lora.h"
#include "model_desc.h"
#include "outguard.h"
#include "peft.h"

#define BAD(...) gt_error(err, GT_EXIT_BAD_INPUT, __VA_ARGS__)

float merge_round_bf16(double x) {
    if (isnan(x) || isinf(x) || x == 0) return (float)x;
    int e;
    (void)frexp(x, &e);   /* |x| in [2^(e-1), 2^e) */
    int qe = e - 8;       /* 8 significant bits: the spacing of bf16 values there */
    if (qe < -133) qe = -133; /* below 2^-126 the subnormal spacing 2^-133 */
    double y = ldexp(nearbyint(ldexp(x, -qe)), qe); /* exact scalings; nearbyint: ties to even */
    if (fabs(y) > 0x1.fep127) return x > 0 ? INFINITY : -INFINITY; /* past bf16's largest finite value */
    return (float)y; /* exact: y has at most 8 significant bits */
}

/* ---------------------------------------------------------------- the plan: which base tensor each entry adapts */

typedef struct {
    int tensor;      /* in the base's hf_weights */
    bool transposed; /* HF stores it [in, out] (Conv1D) */
} Target;

static int plan_targets(const ModelDesc *d, const HfWeights *w, const PeftEntry *entries, int n, const char *adapter_file,
                        Target *tg, int *entry_of, GtError *err) {
    for (int k = 0; k < hf_weights_count(w); k++) entry_of[k] = -1;
    for (int e = 0; e < n; e++) { /* the entry's weight: where its module sits in the arch table (lora.c) */
        char name[PEFT_KEY_MAX];
        LoraSite s;
        if (!lora_module_site(d, entries[e].module, &s)) /* peft_entries_for lists only modules that sit somewhere */
            return gt_error(err, GT_EXIT_FAILURE, "merge: %s (adapted by %s) is not a weight of arch.c's %s table",
                            peft_module_path(entries[e].module), adapter_file, arch_hf_class(d));
        snprintf(name, sizeof name, s.tensor->blocks[s.block].hf, entries[e].layer);
        tg[e].transposed = s.tensor->transposed;
        const int64_t shape[2] = {s.tensor->transposed ? s.in : s.rows, s.tensor->transposed ? s.rows : s.in};
        int k = hf_weights_find_prefixed(w, name, arch_spec(d->arch)->hf_optional_prefix);
        if (k < 0)
            return BAD("%s: tensor %s: expected in the base (%s adapts it), found no such tensor", hf_weights_path(w), name,
                       adapter_file);
        if (hf_weights_check_shape(w, k, 2, shape, err)) return -1;
        tg[e].tensor = k;
        entry_of[k] = e;
    }
    return 0;
}

/* ---------------------------------------------------------------- streaming */

typedef struct {
    const HfWeights *w;
    const PeftAdapter *a;
    const PeftEntry *entries;
    const Target *tg;
    const int *entry_of; /* [base tensors]: the entry adapting it, or -1 */
    int r;
    double scale;
    bool bf16;
    int cached;          /* the entry whose A and B are in At, Bd; -1 */
    double *At, *Bd;     /* A transposed [in, r], B [out, r] */
    const AdapterParts *kind; /* the adapter's kind (adapter_config.json's use_dora) */
    bool row_norm;       /* the kind's merge_row_norm (DoRA): each output row is scaled by factor */
    double *factor;      /* m / ||W + scale B A|| per output row [out] */
} FillCtx;

static void free_cached(FillCtx *c) {
    free(c->At), free(c->Bd), free(c->factor);
    c->At = c->Bd = c->factor = NULL;
    c->cached = -1;
}

/* (W + scale B A)[o, i] of entry e in double, from the base's value w */
static double merged(const FillCtx *c, int e, size_t o, size_t i, float w) {
    const size_t r = (size_t)c->r;
    const double *b = c->Bd + o * r, *a = c->At + i * (size_t)r;
    double s = 0;
    for (size_t q = 0; q < r; q++) s += b[q] * a[q];
    (void)e;
    return (double)w + c->scale * s;
}

/* merge_row_norm (DoRA): factor[o] = m[o] / ||W[o, :] + scale B[o, :] A|| (PEFT's merge: the norm of
 * the unmerged weight plus the delta; m the kind's PART_ROWS part), one pass over the base tensor in
 * bounded chunks */
static int row_norm_factors(FillCtx *c, int e, GtError *err) {
    const size_t in = (size_t)c->entries[e].in, out = (size_t)c->entries[e].out, total = in * out;
    const bool tr = c->tg[e].transposed;
    const size_t chunk = (size_t)1 << 16;
    double *acc = calloc(out, sizeof *acc);
    float *buf = malloc((chunk > out ? chunk : out) * sizeof *buf);
    c->factor = malloc(out * sizeof *c->factor);
    int rc = -1;
    if (!acc || !buf || !c->factor) {
        gt_error(err, GT_EXIT_FAILURE, "merge: out of host memory for DoRA's norms of %zu rows", out);
        goto out;
    }
    for (size_t e0 = 0; e0 < total; e0 += chunk) {
        const size_t n = total - e0 < chunk ? total - e0 : chunk;
        if (hf_weights_read_range_f32(c->w, c->tg[e].tensor, e0, n, buf, err)) goto out;
        for (size_t k = 0; k < n; k++) {
            const size_t idx = e0 + k, o = tr ? idx % out : idx / in, i = tr ? idx / out : idx % in;
            const double v = merged(c, e, o, i, buf[k]);
            acc[o] += v * v;
        }
    }
    int pm = 0; /* the per-row part */
    while (c->kind->shape[pm] != PART_ROWS) pm++;
    if (peft_adapter_read(c->a, e, pm, buf, out, err)) goto out;
    for (size_t o = 0; o < out; o++) c->factor[o] = (double)buf[o] / sqrt(acc[o]);
    rc = 0;
out:
    free(acc), free(buf);
    return rc;
}

/* entry e's A (as At [in, r]) and B [out, r], in double */
static int load_entry(FillCtx *c, int e, GtError *err) {
    if (c->cached == e) return 0;
    free_cached(c);
    const size_t r = (size_t)c->r, in = (size_t)c->entries[e].in, out = (size_t)c->entries[e].out;
    size_t na = r * in, nb = out * r;
    float *f = malloc((na > nb ? na : nb) * sizeof *f);
    c->At = malloc(na * sizeof *c->At);
    c->Bd = malloc(nb * sizeof *c->Bd);
    int rc = -1;
    if (!f || !c->At || !c->Bd) {
        gt_error(err, GT_EXIT_FAILURE, "merge: out of host memory for an adapter of %zu + %zu values", na, nb);
        goto out;
    }
    if (peft_adapter_read(c->a, e, false, f, na, err)) goto out;
    for (size_t k = 0; k < r; k++)
        for (size_t i = 0; i < in; i++) c->At[i * r + k] = f[k * in + i];
    if (peft_adapter_read(c->a, e, true, f, nb, err)) goto out;
    for (size_t q = 0; q < nb; q++) c->Bd[q] = f[q];
    c->cached = e;
    if (c->row_norm && row_norm_factors(c, e, err)) goto out;
    rc = 0;
out:
    free(f);
    if (rc) free_cached(c);
    return rc;
}

/* every adapter value read once before anything is created: a NaN or an infinity is refused by the
 * reader (hf_weights.h), naming the file and the tensor */
static int check_adapter(const PeftAdapter *a, const AdapterParts *kind, const PeftEntry *entries, int n,
                         GtError *err) {
    const size_t r = (size_t)peft_adapter_r(a);
    size_t widest = 0;
    for (int e = 0; e < n; e++) {
        const size_t wd = (size_t)(entries[e].in > entries[e].out ? entries[e].in : entries[e].out);
        if (wd > widest) widest = wd;
    }
    float *f = malloc(r * widest * sizeof *f);
    if (!f) return gt_error(err, GT_EXIT_FAILURE, "merge: out of host memory for an adapter of %zu values", r * widest);
    int rc = 0;
    for (int e = 0; e < n && rc == 0; e++)
        for (int p = 0; p < kind->n && rc == 0; p++) { /* every part of the kind */
            int64_t d0, d1;
            adapter_parts_shape(kind, p, (int64_t)r, entries[e].in, entries[e].out, &d0, &d1);
            rc = peft_adapter_read(a, e, p, f, (size_t)d0 * (size_t)d1, err);
        }
    free(f);
    return rc;
}

/* elements [e0, e0 + n) of base tensor t, merged, in the output's layout (the base's) */
static int merge_fill(void *vctx, int t, uint64_t e0, size_t n, float *dst, GtError *err) {
    FillCtx *c = vctx;
    int sig = gt_stop_signal();
    if (sig) return gt_error(err, GT_EXIT_FAILURE, "merge: stopped by signal %d; nothing was written", sig);
    if (hf_weights_read_range_f32(c->w, t, e0, n, dst, err)) return -1;
    const int e = c->entry_of[t];
    if (e < 0) return 0; /* copied: hf_save rounds it to the output dtype */
    if (load_entry(c, e, err)) return -1;
    const size_t r = (size_t)c->r, in = (size_t)c->entries[e].in, out = (size_t)c->entries[e].out;
    const bool tr = c->tg[e].transposed, bf16 = c->bf16;
    const double *factor = c->factor;
    size_t bad = n; /* the first merged value that is not finite in the output dtype */
    (void)r;
#pragma omp parallel for schedule(static) if (n * r > 65536) reduction(min : bad)
    for (size_t k = 0; k < n; k++) {
        const size_t idx = (size_t)e0 + k;
        const size_t o = tr ? idx % out : idx / in, i = tr ? idx / out : idx % in; /* [in, out] or [out, in] */
        double v = merged(c, e, o, i, dst[k]);
        if (factor) v *= factor[o];
        dst[k] = bf16 ? merge_round_bf16(v) : (float)v;
        if (!isfinite(dst[k]) && k < bad) bad = k;
    }
    if (bad < n) {
        HfTensorInfo info;
        hf_weights_info(c->w, t, &info);
        return gt_error(err, GT_EXIT_BAD_INPUT, "merge: tensor %.200s: element %llu: expected a finite merged weight "
                        "(W + scale B @ A in %s), found %g: the adapter's layer %d %s overflows it; nothing was written",
                        info.name, (unsigned long long)(e0 + bad), bf16 ? "bf16" : "fp32", (double)dst[bad],
                        c->entries[e].layer, peft_module_path(c->entries[e].module));
    }
    return 0;
}

/* ---------------------------------------------------------------- the output directory */

/* out, checked: absent, or an empty directory (never a link). 0, or -1 (code 2 / 1). */
static int check_out(const char *out, GtError *err) {
    struct stat sb;
    if (lstat(out, &sb) != 0) {
        if (errno == ENOENT) return 0;
        return gt_error(err, errno == ENOTDIR ? GT_EXIT_BAD_INPUT : GT_EXIT_FAILURE, "%s: cannot inspect --out: %s", out,
                        strerror(errno));
    }
    if (S_ISLNK(sb.st_mode)) return BAD("%s: expected a new or empty directory for --out, found a symbolic link (not followed)", out);
    if (!S_ISDIR(sb.st_mode)) return BAD("%s: expected a new or empty directory for --out, found a file that is not a directory", out);
    DIR *dir = opendir(out);
    if (!dir) return gt_error(err, GT_EXIT_FAILURE, "%s: cannot list --out: %s", out, strerror(errno));
    const char *first = NULL;
    for (struct dirent *de; (de = readdir(dir));)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
            first = de->d_name;
            break;
        }
    int rc = 0;
    if (first)
        rc = BAD("%s: expected a new or empty directory for --out, found one holding %.200s (merge never writes over "
                 "files; remove it or choose another --out)", out, first);
    closedir(dir);
    return rc;
}

/* --out before any work (links never followed, "link/" included: the slash is dropped first): not
 * the base's or the adapter's directory, new or empty, in a directory that exists; then the
 * temporaries of a killed merge beside it are removed. */
static int check_out_first(const MergeOptions *opt, GtError *err) {
    char out[GT_PATH_MAX], parent[GT_PATH_MAX];
    snprintf(out, sizeof out, "%s", opt->out);
    size_t len = strlen(out);
    while (len > 1 && out[len - 1] == '/') out[--len] = '\0';
    const char *slash = strrchr(out, '/'), *name = slash ? slash + 1 : out;
    if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
        return BAD("%s: expected a directory name for --out (not /, . or ..)", opt->out);
    OutGuard g = {0};
    out_guard_add(&g, opt->base, "base model directory");
    out_guard_add(&g, opt->adapter, "adapter directory");
    int rc = out_guard_dir(&g, opt->out, "merge: --out", false, false, err);
    out_guard_free(&g);
    if (rc || check_out(out, err)) return -1;
    gt_parent_dir(parent, sizeof parent, out);
    struct stat sb;
    if (stat(parent, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return BAD("%s: expected the directory that holds --out to exist, found %s %s", opt->out,
                   errno == ENOENT ? "no directory" : "not a directory:", parent);
    char prefix[GT_PATH_MAX + 16];
    snprintf(prefix, sizeof prefix, ".%s.merge-", name);
    out_guard_clean_stale(parent, prefix);
    return 0;
}

/* tmp = "<parent of out>/.<name of out>.merge-<pid>-XXXXXX", created (mode 0777 & ~umask); a
 * killed merge's is recognised by its pid (check_out_first) */
static int make_tmp(const char *out, char *tmp, size_t cap, GtError *err) {
    size_t len = strlen(out);
    while (len > 1 && out[len - 1] == '/') len--; /* "merged/" is "merged" */
    size_t name0 = len;
    while (name0 > 0 && out[name0 - 1] != '/') name0--;
    const char *name = out + name0;
    size_t nlen = len - name0;
    /* check_out_first refused a name that is empty, . or .. */
    const long pid = (long)getpid();
    int k = name0 == 0 ? snprintf(tmp, cap, ".%.*s.merge-%ld-XXXXXX", (int)nlen, name, pid)
                       : snprintf(tmp, cap, "%.*s.%.*s.merge-%ld-XXXXXX", (int)name0, out, (int)nlen, name, pid);
    if (k < 0 || (size_t)k >= cap) return BAD("%.200s...: expected a shorter path for --out", out);
    if (!mkdtemp(tmp)) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            return BAD("%s: expected the directory that holds --out to exist, found none", out);
        return gt_error(err, GT_EXIT_FAILURE, "%s: cannot create a directory beside --out: %s", out, strerror(e));
    }
    mode_t mask = umask(0);
    umask(mask);
    (void)chmod(tmp, 0777 & ~mask);
    return 0;
}

/* tmp and every entry in it (only files of this merge: hf_save's and config.json), links unlinked */
static void remove_tmp(const char *tmp) { gt_remove_dir_of_files(AT_FDCWD, tmp); }

static void fsync_parent(const char *path) {
    char dir[GT_PATH_MAX + 8];
    gt_parent_dir(dir, sizeof dir, path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd); /* best effort */
        close(fd);
    }
}

/* ---------------------------------------------------------------- merge */

int merge_run(const MergeOptions *opt, MergeSummary *summary, GtError *err) {
    if (!opt || !opt->base || !opt->adapter || !opt->out || !*opt->base || !*opt->adapter || !*opt->out)
        return BAD("merge: expected --base DIR, --adapter DIR and --out DIR");
    if (strlen(opt->out) >= GT_PATH_MAX - 64) return BAD("%.200s...: expected a shorter path for --out", opt->out);
    if (check_out_first(opt, err)) return -1;
    ModelDesc d;
    char *config_bytes = NULL; /* the base's config.json as read now: what the merged model's is written from */
    if (model_desc_load_source(&d, opt->base, &config_bytes, err)) return -1;

    char cfile[GT_PATH_MAX + 32], wfile[GT_PATH_MAX + 32], tmp[GT_PATH_MAX + 64];
    snprintf(cfile, sizeof cfile, "%s/%s", opt->adapter, PEFT_CONFIG_FILE);
    snprintf(wfile, sizeof wfile, "%s/%s", opt->adapter, PEFT_WEIGHTS_FILE);
    PeftConfig cfg;
    bool mask[PEFT_MODULE_COUNT];
    if (peft_config_read(cfile, &cfg, err) || peft_config_targets(&cfg, d.arch, mask, cfile, err)) {
        free(config_bytes);
        return -1;
    }
    PeftEntry *entries = NULL;
    int n_entries = peft_entries_for(&d, mask, &entries);
    HfWeights *w = NULL;
    PeftAdapter *a = NULL;
    Target *tg = NULL;
    int *entry_of = NULL;
    StTensorOut *ts = NULL;
    FillCtx ctx = {.cached = -1};
    bool tmp_made = false;
    int rc = -1, tmp_slot = -1;
    if (n_entries < 1) {
        BAD("%s: target_modules: expected modules of the base's %d layers, found none to adapt", cfile, d.n_layer);
        goto done;
    }
    if (peft_adapter_open(&a, opt->adapter, d.arch, entries, n_entries, &cfg, err) ||
        check_adapter(a, peft_kind(&cfg), entries, n_entries, err))
        goto done;
    peft_warn_unconverted(&cfg, cfile);

    if (hf_weights_open(&w, opt->base, err)) goto done;
    for (int k = 0; k < hf_weights_warning_count(w); k++) gt_warn("%s\n", hf_weights_warning(w, k));
    const int n = hf_weights_count(w);
    if (n < 1) {
        BAD("%s: expected the base's tensors, found none", hf_weights_path(w));
        goto done;
    }
    tg = gt_xcalloc((size_t)n_entries, sizeof *tg);
    entry_of = gt_xcalloc((size_t)n, sizeof *entry_of);
    if (plan_targets(&d, w, entries, n_entries, wfile, tg, entry_of, err)) goto done;

    /* the output dtype: the base's when all its tensors share F32 or BF16, else F32 */
    bool bf16 = opt->dtype == MERGE_DTYPE_BF16;
    ts = gt_xcalloc((size_t)n, sizeof *ts);
    int n_bf16 = 0, n_nf4 = 0;
    for (int k = 0; k < n; k++) {
        HfTensorInfo info;
        hf_weights_info(w, k, &info);
        n_bf16 += info.dtype == ST_BF16; /* a 4-bit weight: the dtype it dequantizes to */
        n_nf4 += info.quant == HF_QUANT_NF4;
        ts[k].name = info.name;
        ts[k].ndim = info.ndim;
        for (int q = 0; q < info.ndim; q++) ts[k].shape[q] = info.shape[q];
    }
    if (opt->dtype == MERGE_DTYPE_AUTO) bf16 = n_bf16 == n;
    for (int k = 0; k < n; k++) ts[k].dtype = bf16 ? ST_BF16 : ST_F32;
    if (n_nf4)
        fprintf(stderr, "gtrain merge: %s holds a 4-bit (bitsandbytes nf4) base: dequantized to fp32 before merging; the "
                "merged model is full precision (%s)\n", opt->base, bf16 ? "bf16" : "fp32");

    if (check_out(opt->out, err) || make_tmp(opt->out, tmp, sizeof tmp, err)) goto done;
    tmp_made = true;
    tmp_slot = gt_tmp_register(tmp, true); /* removed if the allocator exits */
    ctx = (FillCtx){w, a, entries, tg, entry_of, cfg.r, peft_scaling(&cfg), bf16, -1, NULL, NULL, peft_kind(&cfg),
                    peft_kind(&cfg)->merge_row_norm, NULL};
    HfSaveOptions so = {.max_shard_bytes = opt->max_shard_bytes, .staging_bytes = opt->staging_bytes};
    HfShardPlan plan;
    if (hf_plan_shards(&plan, ts, n, opt->max_shard_bytes, err)) goto done;
    int n_shards = plan.n_shards;
    hf_shard_plan_free(&plan);
    if (hf_save(tmp, ts, n, &so, merge_fill, &ctx, err) || checkpoint_write_config(tmp, d.path, d.source, d.source_len, bf16, err)) goto done;
    if (rename(tmp, opt->out) != 0) {
        gt_error(err, GT_EXIT_FAILURE, "%s: cannot rename the merged model %s to it: %s", opt->out, tmp, strerror(errno));
        goto done;
    }
    tmp_made = false;
    fsync_parent(opt->out);
    if (summary) {
        int adapted = 0;
        for (int k = 0; k < n; k++) adapted += entry_of[k] >= 0;
        *summary = (MergeSummary){n, adapted, n_shards, bf16, ctx.scale, cfg.r};
    }
    rc = 0;
done:
    if (tmp_made) remove_tmp(tmp);
    gt_tmp_forget(tmp_slot);
    free(config_bytes);
    free_cached(&ctx);
    free(ts);
    free(entry_of);
    free(tg);
    hf_weights_close(w);
    peft_adapter_close(a);
    free(entries);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * the command */

/* a required directory option's value, or NULL after its usage error (*rc set) */
static const char *required_dir(const CliArgs *a, const char *name, const char *what, int *rc) {
    const char *v = cli_value(a, name);
    if (v && *v) return v;
    *rc = cli_error(a->cmd, "--%s DIR is required (%s)%s", name, what, v ? "; found \"\"" : "");
    return NULL;
}

int merge_command(CliArgs *a) {
    MergeOptions mo = {0};
    int rc = 0;
    const char *size = cli_value(a, "max-shard-size"), *dtype = cli_value(a, "dtype");
    char why[256];
    if (size && hf_parse_size(size, &mo.max_shard_bytes, why, sizeof why))
        return cli_error(a->cmd, "--max-shard-size: %s", why);
    if (dtype && (strcmp(dtype, "fp32") == 0 || strcmp(dtype, "float32") == 0)) mo.dtype = MERGE_DTYPE_FP32;
    else if (dtype && (strcmp(dtype, "bf16") == 0 || strcmp(dtype, "bfloat16") == 0)) mo.dtype = MERGE_DTYPE_BF16;
    else if (dtype) return cli_error(a->cmd, "--dtype: expected fp32 or bf16, found \"%s\"", dtype);
    if (!(mo.base = required_dir(a, "base", "the model directory the adapter was trained on", &rc)) ||
        !(mo.adapter = required_dir(a, "adapter", "a PEFT LoRA adapter directory", &rc)) ||
        !(mo.out = required_dir(a, "out", "a new or empty directory for the merged model", &rc)))
        return rc;
    MergeSummary ms;
    GtError err = {0};
    if (merge_run(&mo, &ms, &err)) return cli_fail(&err);
    printf("%s: %d tensors (%d merged with the adapter: r %d, scale %g), %s, %d weight file%s\n", mo.out, ms.n_tensors,
           ms.n_adapted, ms.r, ms.scale, ms.bf16 ? "bf16" : "fp32", ms.n_shards, ms.n_shards == 1 ? "" : "s");
    return GT_EXIT_OK;
}
