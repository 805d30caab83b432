/* hf_weights.c - a Hugging Face model directory's weights (model.safetensors or sharded through
 * model.safetensors.index.json) as one validated table of tensors, read one at a time; see
 * hf_weights.h for what is accepted and refused. A name -> tensor hash table (open addressing,
 * FNV-1a) keeps lookups O(1) for any number of tensors; no allocation is sized by a field of the
 * index before the index has been parsed and bounded. */
#include "hf_weights_internal.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ a string -> int table */

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) h = (h ^ *p) * 1099511628211ULL;
    return h;
}

static void map_free(StrMap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* the slot holding key, or the empty slot where it would go */
static Slot *map_slot(const StrMap *m, const char *key) {
    size_t i = (size_t)fnv1a(key) & (m->cap - 1);
    while (m->slots[i].key && strcmp(m->slots[i].key, key) != 0) i = (i + 1) & (m->cap - 1);
    return &m->slots[i];
}

static int map_get(const StrMap *m, const char *key) {
    if (m->cap == 0) return -1;
    const Slot *s = map_slot(m, key);
    return s->key ? s->val : -1;
}

/* Insert key -> val. Returns -1 when inserted, else the value already there (nothing changed). */
static int map_put(StrMap *m, const char *key, int val) {
    if (2 * (m->n + 1) > m->cap) {
        StrMap g = {.cap = m->cap ? 2 * m->cap : 64};
        g.slots = gt_xcalloc(g.cap, sizeof *g.slots);
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].key) *map_slot(&g, m->slots[i].key) = m->slots[i];
        g.n = m->n;
        free(m->slots);
        *m = g;
    }
    Slot *s = map_slot(m, key);
    if (s->key) return s->val;
    s->key = key;
    s->val = val;
    m->n++;
    return -1;
}

/* ------------------------------------------------------------------ the table */

static void add_warning(HfWeights *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_warning(HfWeights *w, const char *fmt, ...) {
    if (w->n_warn >= HF_MAX_WARNINGS) return;
    GtError e;
    char raw[GT_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    gt_error(&e, 0, "%s", raw); /* escapes control characters: one line */
    snprintf(w->warn[w->n_warn++], GT_ERR_MAX, "%s", e.msg);
}

void hf_weights_close(HfWeights *w) {
    if (!w) return;
    for (int s = 0; w->shards && s < w->n_shards; s++) safetensors_close(w->shards[s]);
    free(w->shards);
    free(w->t);
    free(w->vis);
    free(w->bnb);
    map_free(&w->by_name);
    cJSON_Delete(w->index);
    free(w->path);
    free(w);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* dir + "/" + name into out[cap] ("name" alone when dir is NULL); false if it does not fit */
static bool join(char *out, size_t cap, const char *dir, const char *name) {
    int k = dir ? snprintf(out, cap, "%s/%s", dir, name) : snprintf(out, cap, "%s", name);
    return k >= 0 && (size_t)k < cap;
}

/* ------------------------------------------------------------------ one .safetensors */

static int open_single(HfWeights *w, const char *path, GtError *err) {
    w->shards = gt_xcalloc(1, sizeof *w->shards);
    if (safetensors_open(&w->shards[0], path, err) != 0) return -1;
    w->n_shards = 1;
    const SafeTensors *st = w->shards[0];
    w->n = safetensors_count(st);
    w->t = gt_xcalloc((size_t)w->n + 1, sizeof *w->t);
    for (int j = 0; j < w->n; j++) {
        w->t[j] = (Entry){safetensors_name(st, j), 0, j, -1, -1};
        (void)map_put(&w->by_name, w->t[j].name, j); /* header names are unique (validated) */
        w->data_bytes += (uint64_t)safetensors_numel(st, j) * st_dtype_size(safetensors_dtype(st, j));
    }
    return 0;
}

/* ------------------------------------------------------------------ the index */

/* why a shard name is refused, or NULL */
static const char *bad_shard_name(const char *s) {
    if (!*s) return "an empty name";
    if (s[0] == '/') return "an absolute path";
    if (strchr(s, '/')) return "a path with '/'";
    if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return "a directory name";
    if (strlen(s) > 255) return "a name longer than 255 bytes";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f) return "a control character";
    return NULL;
}

/* the one member of obj called key; twice is an error */
static int member_once(const char *path, const cJSON *obj, const char *key, const char *where, const cJSON **out,
                       GtError *err) {
    *out = NULL;
    for (const cJSON *c = obj->child; c; c = c->next)
        if (strcmp(c->string, key) == 0) {
            if (*out)
                return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s%s: expected the key once, found it twice", path, where,
                                key);
            *out = c;
        }
    return 0;
}

static const char *json_kind(const cJSON *v) {
    if (!v) return "nothing";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an invalid value";
}

/* parse the index text into w->index; validate its top level; *wm = weight_map, *total = the
 * total_size member or NULL */
static int parse_index(HfWeights *w, const char *path, const char *buf, size_t len, const cJSON **wm,
                       const cJSON **total, GtError *err) {
    if (len == 0) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected a JSON object, found an empty file", path);
    long at = gt_json_nul_at(buf, len);
    if (at >= 0)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: expected names and strings without NUL, found one (\\u0000 or a 0 byte) at byte %ld", path,
                        at);
    at = gt_json_too_deep(buf, len, HF_INDEX_MAX_DEPTH);
    if (at >= 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected JSON nested at most %d deep, found deeper nesting at byte %ld",
                        path, HF_INDEX_MAX_DEPTH, at);
    const char *end = NULL;
    w->index = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!w->index) {
        size_t off = (end && end >= buf && end <= buf + len) ? (size_t)(end - buf) : 0;
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected valid JSON, found an error at byte %zu of %zu", path, off,
                        len);
    }
    for (const char *p = end; p < buf + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected the end of the JSON, found more text at byte %zu", path,
                            (size_t)(p - buf));
    if (!cJSON_IsObject(w->index))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected a JSON object {\"metadata\", \"weight_map\"}, found %s",
                        path, json_kind(w->index));
    const cJSON *meta;
    if (member_once(path, w->index, "metadata", "", &meta, err) || member_once(path, w->index, "weight_map", "", wm, err))
        return -1;
    *total = NULL;
    if (meta) {
        if (!cJSON_IsObject(meta))
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: metadata: expected an object, found %s", path, json_kind(meta));
        if (member_once(path, meta, "total_size", "metadata.", total, err)) return -1;
    }
    if (!*wm)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: weight_map: expected an object {tensor name: shard file}, found no such key", path);
    if (!cJSON_IsObject(*wm))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: weight_map: expected an object {tensor name: shard file}, found %s",
                        path, json_kind(*wm));
    if (!(*wm)->child)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: weight_map: expected at least one tensor, found an empty object",
                        path);
    return 0;
}

/* total_size as a non-negative exact integer */
static int total_size_value(const char *path, const cJSON *v, uint64_t *out, GtError *err) {
    const double d = cJSON_IsNumber(v) ? v->valuedouble : -1.0;
    if (!cJSON_IsNumber(v) || !(d >= 0.0) || d > 9007199254740992.0 || floor(d) != d) {
        char f[64];
        if (cJSON_IsNumber(v))
            snprintf(f, sizeof f, "%.17g", v->valuedouble);
        else
            snprintf(f, sizeof f, "%s", json_kind(v));
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: metadata.total_size: expected a non-negative integer (bytes, at most 2^53), found %s", path,
                        f);
    }
    *out = (uint64_t)d;
    return 0;
}

/* Before any shard is parsed (a parsed header stays in memory): no two shard names may be one
 * file (a symlink, a hard link), and the shards' headers together are bounded as one file's is,
 * so memory follows the size of the input, not the number of names for it. */
typedef struct {
    dev_t dev;
    ino_t ino;
    int shard;
} FileId;

static int file_id_cmp(const void *a, const void *b) {
    const FileId *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return x->shard - y->shard;
}

static int check_shard_files(const char *path, const char *const *spaths, const char *const *names, int n,
                             GtError *err) {
    FileId *ids = gt_xcalloc((size_t)n + 1, sizeof *ids);
    int m = 0, rc = 0;
    uint64_t headers = 0;
    for (int s = 0; s < n && rc == 0; s++) {
        struct stat sb;
        if (stat(spaths[s], &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 8) continue; /* safetensors_open says why */
        ids[m++] = (FileId){.dev = sb.st_dev, .ino = sb.st_ino, .shard = s};
        int fd = open(spaths[s], O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        unsigned char b[8];
        if (fd < 0) continue;
        ssize_t got = pread(fd, b, 8, 0);
        close(fd);
        if (got != 8) continue;
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
        if (hlen > ST_MAX_HEADER_BYTES || hlen > (uint64_t)sb.st_size - 8) continue; /* safetensors_open says why */
        headers += hlen;
        if (headers > ST_MAX_HEADER_BYTES)
            rc = gt_error(err, GT_EXIT_BAD_INPUT,
                          "%s: weight_map: expected shard headers of at most %u bytes together, found more by shard "
                          "\"%.200s\" (%d shards read of %d)",
                          path, ST_MAX_HEADER_BYTES, names[s], s + 1, n);
    }
    qsort(ids, (size_t)m, sizeof *ids, file_id_cmp);
    for (int i = 1; i < m && rc == 0; i++)
        if (ids[i].dev == ids[i - 1].dev && ids[i].ino == ids[i - 1].ino)
            rc = gt_error(err, GT_EXIT_BAD_INPUT,
                          "%s: weight_map: expected each shard to be its own file, found \"%.200s\" and \"%.200s\" "
                          "naming the same file (a link)",
                          path, names[ids[i - 1].shard], names[ids[i].shard]);
    free(ids);
    return rc;
}

static int open_index(HfWeights *w, const char *path, GtError *err) {
    uint8_t *text = NULL;
    size_t len = 0;
    if (gt_read_input(path, "safetensors index", HF_INDEX_MAX_BYTES, &text, &len, err) != 0) return -1;
    const cJSON *wm = NULL, *total = NULL;
    int rc = parse_index(w, path, (const char *)text, len, &wm, &total, err);
    free(text);
    if (rc != 0) return -1;

    /* the directory the shards lie in */
    char dir[GT_PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (slash && (size_t)(slash - path) >= sizeof dir)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%.200s...: expected a path shorter than %d bytes", path, GT_PATH_MAX);
    if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);

    /* entries: names, shards; duplicates and bad names refused */
    int n = 0;
    for (const cJSON *c = wm->child; c; c = c->next)
        if (++n > HF_MAX_TENSORS)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: weight_map: expected at most %d tensors, found more", path,
                            HF_MAX_TENSORS);
    w->t = gt_xcalloc((size_t)n, sizeof *w->t);
    StrMap shard_ids = {0};
    const char **shard_names = NULL;
    char spath[2 * GT_PATH_MAX];
    char **spaths = NULL;
    rc = -1;
    for (const cJSON *c = wm->child; c; c = c->next) {
        if (!cJSON_IsString(c)) {
            gt_error(err, GT_EXIT_BAD_INPUT, "%s: weight_map: tensor %.200s: expected a shard file name (a string), found %s",
                     path, c->string, json_kind(c));
            goto done;
        }
        const char *why = bad_shard_name(c->valuestring);
        if (why) {
            gt_error(err, GT_EXIT_BAD_INPUT,
                     "%s: weight_map: tensor %.200s: shard \"%.200s\": expected a file name beside the index (no '/', "
                     "not empty, not . or ..), found %s",
                     path, c->string, c->valuestring, why);
            goto done;
        }
        int prev = map_put(&w->by_name, c->string, w->n);
        if (prev >= 0) {
            gt_error(err, GT_EXIT_BAD_INPUT,
                     "%s: weight_map: tensor %.200s: expected each tensor once, found it twice (shards \"%.200s\" and "
                     "\"%.200s\")",
                     path, c->string, shard_names[w->t[prev].shard], c->valuestring);
            goto done;
        }
        int s = map_get(&shard_ids, c->valuestring);
        if (s < 0) {
            if (w->n_shards == HF_MAX_SHARDS) {
                gt_error(err, GT_EXIT_BAD_INPUT, "%s: weight_map: expected at most %d shard files, found more", path,
                         HF_MAX_SHARDS);
                goto done;
            }
            s = w->n_shards++;
            (void)map_put(&shard_ids, c->valuestring, s);
            shard_names = gt_xrealloc(shard_names, (size_t)w->n_shards * sizeof *shard_names);
            shard_names[s] = c->valuestring;
        }
        w->t[w->n++] = (Entry){c->string, s, -1, -1, -1};
    }

    /* the shards' paths; no two the same file, their headers bounded together */
    spaths = gt_xcalloc((size_t)w->n_shards + 1, sizeof *spaths);
    for (int s = 0; s < w->n_shards; s++) {
        if (!join(spath, sizeof spath, slash ? dir : NULL, shard_names[s])) {
            gt_error(err, GT_EXIT_BAD_INPUT, "%s: weight_map: shard \"%.200s\": expected a path shorter than %zu bytes",
                     path, shard_names[s], sizeof spath);
            goto done;
        }
        spaths[s] = gt_xstrdup(spath);
    }
    if (check_shard_files(path, (const char *const *)spaths, shard_names, w->n_shards, err) != 0) goto done;

    /* open every shard (each validates its header) */
    w->shards = gt_xcalloc((size_t)w->n_shards, sizeof *w->shards);
    uint64_t file_bytes = 0;
    for (int s = 0; s < w->n_shards; s++) {
        snprintf(spath, sizeof spath, "%s", spaths[s]);
        struct stat sb;
        if (lstat(spath, &sb) != 0 && errno == ENOENT) {
            const char *first = "";
            for (int i = 0; i < w->n; i++)
                if (w->t[i].shard == s) {
                    first = w->t[i].name;
                    break;
                }
            gt_error(err, GT_EXIT_BAD_INPUT,
                     "%s: weight_map: shard \"%.200s\" (of tensor %.200s): expected the file %s beside the index, found "
                     "none",
                     path, shard_names[s], first, spath);
            goto done;
        }
        if (safetensors_open(&w->shards[s], spath, err) != 0) goto done;
        uint64_t fb = safetensors_file_size(w->shards[s]);
        file_bytes = fb > UINT64_MAX - file_bytes ? UINT64_MAX : file_bytes + fb;
    }

    /* every shard's tensors against the index */
    int unlisted = 0;
    const char *first_unlisted = NULL, *first_unlisted_in = NULL;
    for (int s = 0; s < w->n_shards; s++) {
        const SafeTensors *st = w->shards[s];
        for (int j = 0; j < safetensors_count(st); j++) {
            const char *name = safetensors_name(st, j);
            int i = map_get(&w->by_name, name);
            if (i < 0) {
                if (!unlisted++) first_unlisted = name, first_unlisted_in = safetensors_path(st);
                continue;
            }
            if (w->t[i].shard != s) {
                gt_error(err, GT_EXIT_BAD_INPUT,
                         "%s: tensor %.200s: expected only in %.200s (where %s maps it), found in this shard too",
                         safetensors_path(st), name, shard_names[w->t[i].shard], path);
                goto done;
            }
            w->t[i].idx = j;
        }
    }
    for (int i = 0; i < w->n; i++) {
        const Entry *e = &w->t[i];
        if (e->idx < 0) {
            gt_error(err, GT_EXIT_BAD_INPUT,
                     "%s: tensor %.200s: expected in this file (%s maps it here), not found in its header",
                     safetensors_path(w->shards[e->shard]), e->name, path);
            goto done;
        }
        const SafeTensors *st = w->shards[e->shard];
        w->data_bytes += (uint64_t)safetensors_numel(st, e->idx) * st_dtype_size(safetensors_dtype(st, e->idx));
    }
    if (total) {
        uint64_t ts = 0;
        if (total_size_value(path, total, &ts, err) != 0) goto done;
        if (ts > file_bytes) {
            gt_error(err, GT_EXIT_BAD_INPUT,
                     "%s: metadata.total_size: expected at most %llu (the size of the %d shard files), found %llu", path,
                     (unsigned long long)file_bytes, w->n_shards, (unsigned long long)ts);
            goto done;
        }
        if (ts != w->data_bytes)
            add_warning(w, "%s: metadata.total_size is %llu, the listed tensors hold %llu bytes (ignored)", path,
                        (unsigned long long)ts, (unsigned long long)w->data_bytes);
    }
    if (unlisted)
        add_warning(w, "%s: %d tensor%s in the shards %s not in weight_map and ignored (the first: %.200s in %s)", path,
                    unlisted, unlisted == 1 ? "" : "s", unlisted == 1 ? "is" : "are", first_unlisted, first_unlisted_in);
    rc = 0;
done:
    for (int s = 0; spaths && s < w->n_shards; s++) free(spaths[s]);
    free(spaths);
    free(shard_names);
    map_free(&shard_ids);
    return rc;
}

/* ------------------------------------------------------------------ open */

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

bool hf_weights_dir_has_weights(const char *dir, char *found, size_t cap) {
    char file[2 * GT_PATH_MAX];
    struct stat lb;
    if (found && cap) found[0] = '\0';
    if ((join(file, sizeof file, dir, HF_SINGLE_FILE) && lstat(file, &lb) == 0) ||
        (join(file, sizeof file, dir, HF_INDEX_FILE) && lstat(file, &lb) == 0))
        return true;
    if (!found || !cap) return false;
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(found, cap, "a directory that cannot be listed (%s)", strerror(errno));
        return false;
    }
    enum { SHOWN = 6 };
    char *names[SHOWN + 1];
    int n = 0, more = 0;
    bool bin = false;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        bin = bin || strncmp(e->d_name, "pytorch_model", 13) == 0;
        if (n < SHOWN) names[n++] = gt_xstrdup(e->d_name);
        else more++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_name);
    size_t o = 0;
    o += (size_t)snprintf(found + o, cap - o, n == 0 ? "an empty directory" : n == 1 && !more ? "only " : "");
    for (int i = 0; i < n; i++) {
        if (o < cap) o += (size_t)snprintf(found + o, cap - o, "%s%.80s", i ? ", " : "", names[i]);
        free(names[i]);
    }
    if (more && o < cap) o += (size_t)snprintf(found + o, cap - o, " and %d more", more);
    if (bin && o < cap) snprintf(found + o, cap - o, " (PyTorch pickle weights are not read: convert them to safetensors)");
    return false;
}

int hf_weights_open(HfWeights **out, const char *path, GtError *err) {
    *out = NULL;
    if (!path || !*path) return gt_error(err, GT_EXIT_BAD_INPUT, "no model weights given, expected a path");
    HfWeights *w = gt_xcalloc(1, sizeof *w);
    char file[2 * GT_PATH_MAX];
    struct stat sb;
    int rc;
    if (stat(path, &sb) != 0) {
        rc = gt_error(err, GT_EXIT_BAD_INPUT, "%s: cannot open the model weights: %s", path, strerror(errno));
    } else if (S_ISDIR(sb.st_mode)) {
        struct stat lb;
        if (!join(file, sizeof file, path, HF_SINGLE_FILE)) {
            rc = gt_error(err, GT_EXIT_BAD_INPUT, "%.200s...: expected a path shorter than %d bytes", path, GT_PATH_MAX);
        } else if (lstat(file, &lb) == 0) {
            w->path = gt_xstrdup(file);
            rc = open_single(w, file, err);
        } else if (join(file, sizeof file, path, HF_INDEX_FILE) && lstat(file, &lb) == 0) {
            w->path = gt_xstrdup(file);
            rc = open_index(w, file, err);
        } else {
            rc = gt_error(err, GT_EXIT_BAD_INPUT,
                          "%s: expected a Hugging Face model directory holding " HF_SINGLE_FILE " or " HF_INDEX_FILE
                          ", found neither",
                          path);
        }
    } else {
        w->path = gt_xstrdup(path);
        rc = ends_with(path, ".json") ? open_index(w, path, err) : open_single(w, path, err);
    }
    if (rc == 0) rc = hf_weights_bnb_link(w, err);
    if (rc != 0) {
        hf_weights_close(w);
        return -1;
    }
    *out = w;
    return 0;
}

/* ------------------------------------------------------------------ accessors */

const char *hf_weights_path(const HfWeights *w) { return w->path; }
bool hf_weights_is_sharded(const HfWeights *w) { return w->index != NULL; }
int hf_weights_count(const HfWeights *w) { return w->n_vis; }
int hf_weights_raw_find(const HfWeights *w, const char *name) { return name ? map_get(&w->by_name, name) : -1; }
int hf_weights_find(const HfWeights *w, const char *name) {
    int k = hf_weights_raw_find(w, name);
    return k < 0 ? -1 : w->t[k].logical;
}

int hf_weights_find_prefixed(const HfWeights *w, const char *name, const char *optional_prefix) {
    int k = hf_weights_find(w, name);
    const size_t n = optional_prefix ? strlen(optional_prefix) : 0;
    if (k < 0 && n && strncmp(name, optional_prefix, n) == 0) k = hf_weights_find(w, name + n);
    return k;
}
int hf_weights_shard_count(const HfWeights *w) { return w->n_shards; }
uint64_t hf_weights_data_bytes(const HfWeights *w) { return w->data_bytes; }
int hf_weights_warning_count(const HfWeights *w) { return w->n_warn; }
const char *hf_weights_warning(const HfWeights *w, int k) { return (k >= 0 && k < w->n_warn) ? w->warn[k] : NULL; }

/* logical tensor i's entry, or NULL */
static const Entry *entry(const HfWeights *w, int i) { return (i >= 0 && i < w->n_vis) ? &w->t[w->vis[i]] : NULL; }

int hf_weights_info(const HfWeights *w, int i, HfTensorInfo *info) {
    const Entry *e = entry(w, i);
    if (!e) return -1;
    const SafeTensors *st = w->shards[e->shard];
    info->name = e->name;
    info->shard = st;
    info->shard_index = e->idx;
    info->quant = HF_QUANT_NONE;
    info->dtype = safetensors_dtype(st, e->idx);
    safetensors_shape(st, e->idx, info->shape, &info->ndim);
    info->numel = safetensors_numel(st, e->idx);
    if (e->bnb >= 0) { /* the logical tensor bitsandbytes dequantizes to */
        const BnbState *b = &w->bnb[e->bnb].s;
        info->quant = HF_QUANT_NF4;
        info->dtype = b->dtype;
        info->ndim = b->ndim;
        memset(info->shape, 0, sizeof info->shape);
        for (int k = 0; k < b->ndim; k++) info->shape[k] = b->shape[k];
        info->numel = b->f.numel;
    }
    return 0;
}

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(buf, cap, "[");
    for (int k = 0; k < ndim && o < cap; k++) o += (size_t)snprintf(buf + o, cap - o, "%s%lld", k ? ", " : "", (long long)shape[k]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

int hf_weights_check_shape(const HfWeights *w, int i, int ndim, const int64_t *shape, GtError *err) {
    HfTensorInfo t;
    if (hf_weights_info(w, i, &t) != 0)
        return gt_error(err, GT_EXIT_FAILURE, "%s: tensor index %d out of range [0, %d)", w->path, i, w->n_vis);
    bool same = t.ndim == ndim;
    for (int k = 0; same && k < ndim; k++) same = t.shape[k] == shape[k];
    if (same) return 0;
    char want[160], found[160];
    shape_text(want, sizeof want, ndim < 0 ? 0 : ndim > ST_MAX_DIMS ? ST_MAX_DIMS : ndim, shape);
    shape_text(found, sizeof found, t.ndim, t.shape);
    return gt_error(err, GT_EXIT_BAD_INPUT, "%s: tensor %.200s: expected shape %s, found %s", safetensors_path(t.shard),
                    t.name, want, found);
}

/* every value read is a weight: a NaN or an infinity refuses the read, naming the file, the tensor
 * and the element (the first one) */
static int finite_or_refuse(const HfWeights *w, const Entry *e, const float *x, size_t n, uint64_t elem_offset,
                            GtError *err) {
    for (size_t q = 0; q < n; q++)
        if (!isfinite(x[q]))
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: tensor %.200s: element %llu: expected a finite weight, found %g, which is not finite",
                            safetensors_path(w->shards[e->shard]), e->name,
                            (unsigned long long)(elem_offset + q), (double)x[q]);
    return 0;
}

/* elements [elem_offset, elem_offset + n) of logical tensor e (range checked by the caller's reader) */
static int read_range(const HfWeights *w, const Entry *e, uint64_t elem_offset, size_t n, float *dst, GtError *err) {
    if (e->bnb >= 0) {
        const BnbTensor *b = &w->bnb[e->bnb];
        if (elem_offset > (uint64_t)b->s.f.numel || (uint64_t)n > (uint64_t)b->s.f.numel - elem_offset)
            return gt_error(err, GT_EXIT_FAILURE,
                            "%s: tensor %.200s: expected elements within [0, %lld), asked for [%llu, %llu + %zu)",
                            safetensors_path(w->shards[e->shard]), e->name, (long long)b->s.f.numel,
                            (unsigned long long)elem_offset, (unsigned long long)elem_offset, n);
        if (hf_weights_bnb_read_range(w, b, elem_offset, n, dst, err)) return -1;
    } else if (safetensors_read_f32_range(w->shards[e->shard], e->idx, elem_offset, n, dst, err)) {
        return -1;
    }
    return finite_or_refuse(w, e, dst, n, elem_offset, err);
}

int hf_weights_read_f32(const HfWeights *w, int i, float *dst, size_t n, GtError *err) {
    const Entry *e = entry(w, i);
    if (!e) return gt_error(err, GT_EXIT_FAILURE, "%s: tensor index %d out of range [0, %d)", w->path, i, w->n_vis);
    HfTensorInfo t;
    hf_weights_info(w, i, &t);
    if ((uint64_t)t.numel != (uint64_t)n)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: tensor %.200s: expected %zu elements, found %lld",
                        safetensors_path(t.shard), t.name, n, (long long)t.numel);
    return read_range(w, e, 0, n, dst, err);
}

int hf_weights_read_range_f32(const HfWeights *w, int i, uint64_t elem_offset, size_t n, float *dst, GtError *err) {
    const Entry *e = entry(w, i);
    if (!e) return gt_error(err, GT_EXIT_FAILURE, "%s: tensor index %d out of range [0, %d)", w->path, i, w->n_vis);
    return read_range(w, e, elem_offset, n, dst, err);
}

int hf_weights_read_rows_f32(const HfWeights *w, int i, int64_t row0, int64_t nrows, float *dst, size_t cap,
                             GtError *err) {
    HfTensorInfo t;
    if (hf_weights_info(w, i, &t) != 0)
        return gt_error(err, GT_EXIT_FAILURE, "%s: tensor index %d out of range [0, %d)", w->path, i, w->n_vis);
    const char *file = safetensors_path(t.shard);
    if (t.ndim < 1)
        return gt_error(err, GT_EXIT_FAILURE, "%s: tensor %.200s: expected at least one dimension to read rows of, found a scalar",
                        file, t.name);
    const int64_t rows = t.shape[0];
    if (row0 < 0 || nrows < 0 || row0 > rows || nrows > rows - row0)
        return gt_error(err, GT_EXIT_FAILURE, "%s: tensor %.200s: expected rows within [0, %lld), asked for [%lld, %lld + %lld)",
                        file, t.name, (long long)rows, (long long)row0, (long long)row0, (long long)nrows);
    const uint64_t row_len = rows > 0 ? (uint64_t)t.numel / (uint64_t)rows : 0;
    const uint64_t n = row_len * (uint64_t)nrows; /* <= numel */
    if (n > cap)
        return gt_error(err, GT_EXIT_FAILURE, "%s: tensor %.200s: %lld rows of %llu elements do not fit a buffer of %zu",
                        file, t.name, (long long)nrows, (unsigned long long)row_len, cap);
    return read_range(w, entry(w, i), row_len * (uint64_t)row0, (size_t)n, dst, err);
}
