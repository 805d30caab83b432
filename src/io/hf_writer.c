/* hf_writer.c - weights written as Hugging Face's save_pretrained writes them: the shard split,
 * the streamed shards (st_writer of safetensors.c fed through a bounded staging buffer), the
 * index as transformers' json.dumps writes it, the renames last; and hf_parse_size, the
 * max_shard_size spelling. See hf_writer.h. */
#include "hf_writer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ sizes */

int hf_parse_size(const char *text, uint64_t *out, char *why, size_t cap) {
    static const struct {
        const char *unit;
        uint64_t mult;
    } units[] = {{"", 1},
                 {"B", 1},
                 {"KB", 1000ULL},
                 {"MB", 1000000ULL},
                 {"GB", 1000000000ULL},
                 {"TB", 1000000000000ULL},
                 {"KiB", 1ULL << 10},
                 {"MiB", 1ULL << 20},
                 {"GiB", 1ULL << 30},
                 {"TiB", 1ULL << 40}};
    const char *expected = "a size such as \"5GB\", \"500MB\", \"10GiB\" or a number of bytes";
    const char *s = text ? text : "";
    const char *p = s;
    while (*p == ' ' || *p == '\t') p++;
    uint64_t ip = 0, frac = 0, frac_den = 1;
    bool digits = false, overflow = false, has_frac = false;
    for (; *p >= '0' && *p <= '9'; p++, digits = true) {
        if (ip > (UINT64_MAX - 9) / 10) overflow = true;
        else ip = ip * 10 + (uint64_t)(*p - '0');
    }
    if (*p == '.') {
        has_frac = true;
        for (p++; *p >= '0' && *p <= '9'; p++, digits = true)
            if (frac_den <= 100000000000000000ULL) { /* 18 digits are exact; later ones cannot matter */
                frac = frac * 10 + (uint64_t)(*p - '0');
                frac_den *= 10;
            }
    }
    while (*p == ' ' || *p == '\t') p++;
    const char *unit = p;
    size_t ulen = strlen(unit);
    while (ulen > 0 && (unit[ulen - 1] == ' ' || unit[ulen - 1] == '\t')) ulen--;
    char shown[80];
    snprintf(shown, sizeof shown, "\"%.60s%s\"", s, strlen(s) > 60 ? "..." : "");
    if (!digits) {
        snprintf(why, cap, "expected %s, found %s", expected, shown);
        return -1;
    }
    uint64_t mult = 0;
    for (size_t k = 0; k < sizeof units / sizeof units[0]; k++)
        if (strlen(units[k].unit) == ulen && strncasecmp(unit, units[k].unit, ulen) == 0) mult = units[k].mult;
    if (ulen == 1 && unit[0] == 'b') mult = 0; /* "100b": bits or bytes? */
    if (ulen == 2 && unit[1] == 'b' && mult > 1) {
        snprintf(why, cap,
                 "expected %s, found %s (ambiguous: transformers reads a lowercase final b as bits, huggingface_hub "
                 "as bytes; write %c%c)",
                 expected, shown, (char)(unit[0] & ~0x20), 'B');
        return -1;
    }
    if (mult == 0) {
        snprintf(why, cap, "expected %s (units KB, MB, GB, TB, KiB, MiB, GiB, TiB), found %s", expected, shown);
        return -1;
    }
    if (has_frac && mult == 1) {
        snprintf(why, cap, "expected a whole number of bytes (or a unit such as MB after a fraction), found %s", shown);
        return -1;
    }
    /* ip * mult + floor(frac / frac_den * mult), exactly, within HF_MAX_SIZE_BYTES */
    unsigned __int128 v = (unsigned __int128)ip * mult + (unsigned __int128)frac * mult / frac_den;
    if (overflow || v > HF_MAX_SIZE_BYTES) {
        snprintf(why, cap, "expected a size of at most %llu bytes (2^60), found %s", (unsigned long long)HF_MAX_SIZE_BYTES,
                 shown);
        return -1;
    }
    if (v == 0) {
        snprintf(why, cap, "expected a size of at least 1 byte, found %s", shown);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* ------------------------------------------------------------------ the split */

/* length of the UTF-8 sequence at s and its code point, 0 if invalid (overlong, surrogate, > U+10FFFF) */
static int utf8_next(const unsigned char *s, uint32_t *cp) {
    const unsigned c = s[0];
    int len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if ((c & 0xE0) == 0xC0) len = 2, v = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, v = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    for (int i = 1; i < len; i++) { /* stops at the NUL: it is not a continuation byte */
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

static bool valid_utf8(const char *s) {
    uint32_t cp;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int k = utf8_next(p, &cp);
        if (!k) return false;
        p += k;
    }
    return true;
}

static int cmp_str_ptr(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

void hf_shard_plan_free(HfShardPlan *plan) {
    if (!plan) return;
    free(plan->shard_of), free(plan->order), free(plan->first), free(plan->shard_bytes);
    memset(plan, 0, sizeof *plan);
}

int hf_plan_shards(HfShardPlan *plan, const StTensorOut *tensors, int n, uint64_t max_shard_bytes, GtError *err) {
    memset(plan, 0, sizeof *plan);
    if (n < 1 || !tensors) return gt_error(err, GT_EXIT_FAILURE, "hf_save: expected at least one tensor, found %d", n);
    const uint64_t max = max_shard_bytes ? max_shard_bytes : HF_DEFAULT_MAX_SHARD_BYTES;
    uint64_t *bytes = gt_xcalloc((size_t)n, sizeof *bytes);
    for (int i = 0; i < n; i++) {
        const StTensorOut *t = &tensors[i];
        if (!t->name || !valid_utf8(t->name) || strcmp(t->name, "__metadata__") == 0 || t->ndim < 0 ||
            t->ndim > ST_MAX_DIMS || (t->dtype != ST_F32 && t->dtype != ST_BF16)) {
            free(bytes);
            return gt_error(err, GT_EXIT_FAILURE,
                            "hf_save: tensor %.200s: expected a UTF-8 name, dtype F32 or BF16 and ndim 0..%d, found "
                            "dtype %s, ndim %d",
                            t->name ? t->name : "(null)", ST_MAX_DIMS, st_dtype_name(t->dtype), t->ndim);
        }
        uint64_t numel = 1;
        for (int k = 0; k < t->ndim; k++) {
            const uint64_t d = (uint64_t)t->shape[k];
            if (t->shape[k] < 0 || (d != 0 && numel > (UINT64_MAX / 8) / d)) {
                free(bytes);
                return gt_error(err, GT_EXIT_FAILURE, "hf_save: tensor %.200s: bad shape", t->name);
            }
            numel *= d;
        }
        bytes[i] = numel * st_dtype_size(t->dtype);
        if (plan->total_bytes > UINT64_MAX - bytes[i]) {
            free(bytes);
            return gt_error(err, GT_EXIT_FAILURE, "hf_save: tensors too large");
        }
        plan->total_bytes += bytes[i];
    }
    const char **names = gt_xcalloc((size_t)n, sizeof *names);
    for (int i = 0; i < n; i++) names[i] = tensors[i].name;
    qsort(names, (size_t)n, sizeof *names, cmp_str_ptr);
    for (int i = 1; i < n; i++)
        if (strcmp(names[i], names[i - 1]) == 0) {
            gt_error(err, GT_EXIT_FAILURE, "hf_save: tensor %.200s: name given twice", names[i]);
            free(names), free(bytes);
            return -1;
        }
    free(names);

    /* huggingface_hub's loop: shards are numbered as they are appended to its list. An oversized
     * tensor is appended at once; the shard being filled (its members pending) when it closes. */
    plan->shard_of = gt_xcalloc((size_t)n, sizeof *plan->shard_of);
    plan->shard_bytes = gt_xcalloc((size_t)n, sizeof *plan->shard_bytes);
    int *pending = gt_xcalloc((size_t)n, sizeof *pending);
    int n_pending = 0;
    uint64_t cur_size = 0;
    for (int i = 0; i <= n; i++) {
        const bool end = i == n;
        if (!end && bytes[i] > max) {
            plan->shard_of[i] = plan->n_shards;
            plan->shard_bytes[plan->n_shards++] = bytes[i];
            continue;
        }
        if (n_pending > 0 && (end || bytes[i] > max - cur_size)) { /* cur_size + size > max, no overflow */
            for (int k = 0; k < n_pending; k++) plan->shard_of[pending[k]] = plan->n_shards;
            plan->shard_bytes[plan->n_shards++] = cur_size;
            n_pending = 0;
            cur_size = 0;
        }
        if (end) break;
        pending[n_pending++] = i;
        cur_size += bytes[i];
    }
    free(pending);
    free(bytes);

    plan->first = gt_xcalloc((size_t)plan->n_shards + 1, sizeof *plan->first);
    plan->order = gt_xcalloc((size_t)n, sizeof *plan->order);
    for (int i = 0; i < n; i++) plan->first[plan->shard_of[i] + 1]++;
    for (int s = 0; s < plan->n_shards; s++) plan->first[s + 1] += plan->first[s];
    int *fill = gt_xcalloc((size_t)plan->n_shards, sizeof *fill);
    for (int i = 0; i < n; i++) {
        const int s = plan->shard_of[i];
        plan->order[plan->first[s] + fill[s]++] = i;
    }
    free(fill);
    return 0;
}

void hf_shard_file_name(char *buf, size_t cap, int shard, int n_shards) {
    if (n_shards <= 1)
        snprintf(buf, cap, "model.safetensors");
    else
        snprintf(buf, cap, "model-%05d-of-%05d.safetensors", shard + 1, n_shards);
}

/* ------------------------------------------------------------------ the index, as json.dumps writes it */

/* s as Python's json.dumps(ensure_ascii=True) writes a string; false if s is not UTF-8 */
static bool py_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        uint32_t cp;
        int k = utf8_next(p, &cp);
        if (!k) return false;
        p += k;
        if (cp == '"' || cp == '\\') fprintf(f, "\\%c", (char)cp);
        else if (cp == '\b') fputs("\\b", f);
        else if (cp == '\f') fputs("\\f", f);
        else if (cp == '\n') fputs("\\n", f);
        else if (cp == '\r') fputs("\\r", f);
        else if (cp == '\t') fputs("\\t", f);
        else if (cp >= 0x20 && cp <= 0x7e) fputc((int)cp, f);
        else if (cp < 0x10000) fprintf(f, "\\u%04x", (unsigned)cp);
        else {
            const uint32_t v = cp - 0x10000;
            fprintf(f, "\\u%04x\\u%04x", (unsigned)(0xD800 | (v >> 10)), (unsigned)(0xDC00 | (v & 0x3FF)));
        }
    }
    fputc('"', f);
    return true;
}

typedef struct {
    const char *name;
    int shard;
} MapItem;

static int cmp_item(const void *a, const void *b) { return strcmp(((const MapItem *)a)->name, ((const MapItem *)b)->name); }

/* json.dumps({"metadata": {"total_size": N}, "weight_map": {...}}, indent=2, sort_keys=True) + "\n" */
static char *index_text(const StTensorOut *tensors, int n, const HfShardPlan *plan, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f) return NULL;
    MapItem *items = gt_xcalloc((size_t)n, sizeof *items);
    for (int i = 0; i < n; i++) items[i] = (MapItem){tensors[i].name, plan->shard_of[i]};
    qsort(items, (size_t)n, sizeof *items, cmp_item); /* UTF-8 byte order is code point order */
    fprintf(f, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {", (unsigned long long)plan->total_bytes);
    bool ok = true;
    char file[64];
    for (int i = 0; i < n && ok; i++) {
        fputs(i ? ",\n    " : "\n    ", f);
        ok = py_json_string(f, items[i].name);
        hf_shard_file_name(file, sizeof file, items[i].shard, plan->n_shards);
        fprintf(f, ": \"%s\"", file);
    }
    fputs("\n  }\n}\n", f);
    free(items);
    if (ferror(f)) ok = false;
    if (fclose(f) != 0) ok = false;
    if (!ok) {
        free(text);
        return NULL;
    }
    return text;
}

/* ------------------------------------------------------------------ files */

static int write_tmp_file(const char *tmp, const char *data, size_t len, GtError *err) {
    int fd = gt_open_for_write(tmp, O_WRONLY | O_CREAT | O_TRUNC);
    if (fd < 0) return gt_error(err, GT_EXIT_FAILURE, "%s: cannot create: %s", tmp, strerror(errno));
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, data + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    bool ok = done == len && fsync(fd) == 0;
    int e = errno;
    if (close(fd) != 0 && ok) ok = false, e = errno;
    if (!ok) {
        unlink(tmp);
        return gt_error(err, GT_EXIT_FAILURE, "%s: write failed: %s", tmp, strerror(e ? e : EIO));
    }
    return 0;
}

/* dir/name, if it is there and not a directory: unlinked (a link itself, never what it points to) */
static int remove_stale(const char *dir, const char *name, GtError *err) {
    char path[2 * GT_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat sb;
    if (lstat(path, &sb) != 0 || S_ISDIR(sb.st_mode)) return 0;
    if (unlink(path) != 0 && errno != ENOENT)
        return gt_error(err, GT_EXIT_FAILURE, "%s: cannot remove the stale file: %s", path, strerror(errno));
    return 0;
}

/* "model-KKKKK-of-NNNNN.safetensors": *k and *of */
static bool shard_name_parts(const char *s, int *k, int *of) {
    if (strlen(s) != 32 || strncmp(s, "model-", 6) != 0 || strncmp(s + 11, "-of-", 4) != 0 ||
        strcmp(s + 20, ".safetensors") != 0)
        return false;
    for (int i = 0; i < 5; i++)
        if (s[6 + i] < '0' || s[6 + i] > '9' || s[15 + i] < '0' || s[15 + i] > '9') return false;
    *k = atoi(s + 6);
    *of = atoi(s + 15);
    return true;
}

/* model-*-of-*.safetensors files of another split than this one (n_shards == 1: all of them) */
static int remove_stale_shards(const char *dir, int n_shards, GtError *err) {
    DIR *d = opendir(dir);
    if (!d) return gt_error(err, GT_EXIT_FAILURE, "%s: cannot list the directory: %s", dir, strerror(errno));
    char **stale = NULL;
    int n_stale = 0, rc = 0;
    for (struct dirent *de; (de = readdir(d));) {
        int k, of;
        if (!shard_name_parts(de->d_name, &k, &of)) continue;
        if (n_shards > 1 && of == n_shards && k >= 1 && k <= of) continue;
        stale = gt_xrealloc(stale, (size_t)(n_stale + 1) * sizeof *stale);
        stale[n_stale++] = gt_xstrdup(de->d_name);
    }
    closedir(d);
    for (int i = 0; i < n_stale; i++) {
        if (rc == 0) rc = remove_stale(dir, stale[i], err);
        free(stale[i]);
    }
    free(stale);
    return rc;
}

static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd); /* best effort, as safetensors.c */
        close(fd);
    }
}

/* ------------------------------------------------------------------ save */

/* tensor t's data through fill and the staging buffer into w */
static int stream_tensor(StWriter *w, const StTensorOut *spec, int t, float *stage, size_t stage_elems, HfFillFn fill,
                         void *ctx, GtError *err) {
    uint64_t numel = 1;
    for (int k = 0; k < spec->ndim; k++) numel *= (uint64_t)spec->shape[k]; /* checked by the plan */
    size_t chunk = stage_elems;
    if (spec->ndim >= 2 && spec->shape[0] > 0) {
        const uint64_t row = numel / (uint64_t)spec->shape[0];
        if (row > 0 && row <= chunk) chunk -= chunk % row; /* whole rows */
    }
    for (uint64_t off = 0; off < numel;) {
        const size_t m = numel - off < chunk ? (size_t)(numel - off) : chunk;
        GtError fe = {0};
        if (fill(ctx, t, off, m, stage, &fe) != 0) {
            if (fe.code == 0)
                return gt_error(err, GT_EXIT_FAILURE, "%s: tensor %.200s: its values could not be produced",
                                st_writer_path(w), spec->name);
            if (err) *err = fe;
            return -1;
        }
        size_t nbytes = m * 4;
        if (spec->dtype == ST_BF16) { /* in place: element j's 2 bytes land on floats already read */
            unsigned char *b = (unsigned char *)stage;
            for (size_t j = 0; j < m; j++) {
                float x;
                memcpy(&x, b + 4 * j, 4);
                const uint16_t h = gt_f32_to_bf16(x);
                memcpy(b + 2 * j, &h, 2);
            }
            nbytes = m * 2;
        }
        if (st_writer_put(w, stage, nbytes, err) != 0) return -1;
        off += m;
    }
    return 0;
}

int hf_save(const char *dir, const StTensorOut *tensors, int n, const HfSaveOptions *opt, HfFillFn fill, void *ctx,
            GtError *err) {
    static const char *const default_meta[] = {"format", "pt"};
    const HfSaveOptions o = opt ? *opt : (HfSaveOptions){0};
    const char *const *meta = o.meta_kv ? o.meta_kv : default_meta;
    const int n_meta = o.meta_kv ? o.n_meta : 1;
    const size_t staging = o.staging_bytes ? o.staging_bytes : HF_DEFAULT_STAGING_BYTES;
    if (!dir || !fill || staging < 4)
        return gt_error(err, GT_EXIT_FAILURE, "hf_save: expected a directory, a fill callback and a staging buffer of at "
                                              "least 4 bytes");
    if (strlen(dir) >= GT_PATH_MAX)
        return gt_error(err, GT_EXIT_FAILURE, "%.200s...: expected a path shorter than %d bytes", dir, GT_PATH_MAX);
    HfShardPlan plan;
    if (hf_plan_shards(&plan, tensors, n, o.max_shard_bytes, err) != 0) return -1;
    const size_t stage_elems = staging / 4;
    float *stage = o.staging ? o.staging : malloc(stage_elems * sizeof *stage);
    StWriter **ws = gt_xcalloc((size_t)plan.n_shards, sizeof *ws);
    StTensorOut *specs = gt_xcalloc((size_t)n, sizeof *specs);
    char path[2 * GT_PATH_MAX + 64], name[64], index_path[2 * GT_PATH_MAX], index_tmp[2 * GT_PATH_MAX + 8];
    char *index_json = NULL;
    bool index_tmp_written = false;
    int rc = -1;
    snprintf(index_path, sizeof index_path, "%s/" "model.safetensors.index.json", dir);
    snprintf(index_tmp, sizeof index_tmp, "%s.tmp", index_path);
    if (!stage) {
        gt_error(err, GT_EXIT_FAILURE, "%s: out of host memory allocating a %zu-byte staging buffer", dir, staging);
        goto done;
    }
    /* every shard, complete under its .tmp name */
    for (int s = 0; s < plan.n_shards; s++) {
        const int a = plan.first[s], b = plan.first[s + 1];
        for (int k = a; k < b; k++) {
            specs[k - a] = tensors[plan.order[k]];
            specs[k - a].data = NULL;
        }
        hf_shard_file_name(name, sizeof name, s, plan.n_shards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (st_writer_open(&ws[s], path, specs, b - a, meta, n_meta, err) != 0) goto done;
        for (int k = a; k < b; k++)
            if (stream_tensor(ws[s], &specs[k - a], plan.order[k], stage, stage_elems, fill, ctx, err) != 0) goto done;
        if (st_writer_close(ws[s], err) != 0) goto done;
    }
    if (plan.n_shards > 1) {
        size_t len = 0;
        index_json = index_text(tensors, n, &plan, &len);
        if (!index_json) {
            gt_error(err, GT_EXIT_FAILURE, "%s: out of host memory writing the index", index_path);
            goto done;
        }
        if (write_tmp_file(index_tmp, index_json, len, err) != 0) goto done;
        index_tmp_written = true;
        /* a stale model.safetensors would be loaded before the index (transformers, hf_weights) */
        if (remove_stale(dir, "model.safetensors", err) != 0) goto done;
    }
    /* into place: the shards, then the index */
    for (int s = 0; s < plan.n_shards; s++)
        if (st_writer_commit(ws[s], err) != 0) goto done;
    if (index_tmp_written) {
        if (rename(index_tmp, index_path) != 0) {
            gt_error(err, GT_EXIT_FAILURE, "%s: cannot rename to %s: %s", index_tmp, index_path, strerror(errno));
            goto done;
        }
        index_tmp_written = false;
    } else if (remove_stale(dir, "model.safetensors.index.json", err) != 0) {
        goto done;
    }
    if (remove_stale_shards(dir, plan.n_shards, err) != 0) goto done;
    fsync_dir(dir);
    rc = 0;
done:
    for (int s = 0; s < plan.n_shards; s++) st_writer_free(ws[s]); /* unlinks what was not committed */
    if (index_tmp_written) unlink(index_tmp);
    free(ws), free(specs), free(index_json);
    if (!o.staging) free(stage);
    hf_shard_plan_free(&plan);
    return rc;
}
