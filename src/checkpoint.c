/* checkpoint.c - see checkpoint.h. */
#include "checkpoint.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rundir.h"
#include "safetensors.h"

#define STATE_FILE "trainer_state.json"
#define STATE_MAX_BYTES (1u << 20)

/* ---------------------------------------------------------------- small file helpers */

static int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static int write_text_atomic(const char *path, const char *text, GtError *err) {
    return gt_write_file_atomic(path, text, strlen(text), err);
}


/* ---------------------------------------------------------------- weights */

/* HF name of a gtrain tensor in a saved GPT2LMHeadModel */
static void hf_name(char *buf, size_t cap, const ParamTensor *t, const ModelDesc *d) {
    arch_block_name(t, 0, buf, cap, d, NULL, NULL);
}

/* copy the model's params (or any flat buffer of layout.total floats) to the host */
static float *device_to_host(Model *m, const float *dev, GtError *err) {
    size_t bytes = m->layout.total * sizeof(float);
    float *h = malloc(bytes);
    if (!h) {
        gt_error(err, GT_EXIT_FAILURE, "out of host memory (%zu bytes) saving a checkpoint", bytes);
        return NULL;
    }
    if (m->be->ops->to_host(m->be, h, dev, bytes, err)) {
        free(h);
        return NULL;
    }
    return h;
}

/* HF layout of one tensor: Conv1D weights transposed to [in, out] */
static void to_hf_layout(const ParamTensor *t, const float *src, float *dst, int64_t shape[2]) {
    if (t->transposed) {
        const int64_t out = t->shape[0], in = t->shape[1];
        for (int64_t o = 0; o < out; o++)
            for (int64_t i = 0; i < in; i++) dst[i * out + o] = src[o * in + i];
        shape[0] = in, shape[1] = out;
    } else {
        memcpy(dst, src, t->numel * sizeof(float));
        shape[0] = t->shape[0], shape[1] = t->shape[1];
    }
}

static int write_config_json(const char *dir, const ModelDesc *d, bool bf16, GtError *err) {
    cJSON *j = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(j, "model_type", "gpt2");
    cJSON_AddNumberToObject(j, "n_layer", d->n_layer);
    cJSON_AddNumberToObject(j, "n_head", d->n_head);
    cJSON_AddNumberToObject(j, "n_embd", d->n_embd);
    cJSON_AddNumberToObject(j, "n_inner", d->n_inner);
    cJSON_AddNumberToObject(j, "vocab_size", d->vocab_size);
    cJSON_AddNumberToObject(j, "n_positions", d->n_positions);
    cJSON_AddNumberToObject(j, "n_ctx", d->n_positions);
    cJSON_AddNumberToObject(j, "layer_norm_epsilon", d->layer_norm_epsilon);
    cJSON_AddStringToObject(j, "activation_function", "gelu_new");
    cJSON_AddBoolToObject(j, "tie_word_embeddings", d->tie_word_embeddings);
    /* gtrain trains without dropout */
    cJSON_AddNumberToObject(j, "attn_pdrop", 0.0);
    cJSON_AddNumberToObject(j, "embd_pdrop", 0.0);
    cJSON_AddNumberToObject(j, "resid_pdrop", 0.0);
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddBoolToObject(j, "scale_attn_weights", true);
    cJSON_AddStringToObject(j, "torch_dtype", bf16 ? "bfloat16" : "float32");
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return gt_error(err, GT_EXIT_FAILURE, "out of memory writing config.json");
    char path[GT_PATH_MAX * 2 + 32];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = write_text_atomic(path, text, err);
    free(text);
    return rc;
}

int checkpoint_save_weights(const char *dir, Model *m, bool bf16, GtError *err) {
    const ParamLayout *pl = &m->layout;
    float *host = device_to_host(m, m->params, err);
    if (!host) return -1;
    float *hf = malloc(pl->total * sizeof(float));
    uint16_t *half = bf16 ? malloc(pl->total * sizeof(uint16_t)) : NULL;
    StTensorOut *ts = calloc((size_t)pl->n_tensors, sizeof *ts);
    char(*names)[128] = calloc((size_t)pl->n_tensors, sizeof *names);
    int rc = -1;
    if (!hf || !ts || !names || (bf16 && !half)) {
        gt_error(err, GT_EXIT_FAILURE, "out of host memory saving %s/model.safetensors", dir);
        goto done;
    }
    for (int i = 0; i < pl->n_tensors; i++) {
        const ParamTensor *t = &pl->tensors[i];
        hf_name(names[i], sizeof names[i], t, &m->desc);
        int64_t shape[2];
        to_hf_layout(t, host + t->offset, hf + t->offset, shape);
        ts[i].name = names[i];
        ts[i].ndim = t->ndim;
        ts[i].shape[0] = shape[0];
        ts[i].shape[1] = shape[1];
        if (bf16) {
            for (size_t k = 0; k < t->numel; k++) half[t->offset + k] = gt_f32_to_bf16(hf[t->offset + k]);
            ts[i].dtype = ST_BF16;
            ts[i].data = half + t->offset;
        } else {
            ts[i].dtype = ST_F32;
            ts[i].data = hf + t->offset;
        }
    }
    char path[GT_PATH_MAX * 2 + 32];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *meta[] = {"format", "pt"};
    if (safetensors_write(path, ts, pl->n_tensors, meta, 1, err)) goto done;
    rc = write_config_json(dir, &m->desc, bf16, err);
done:
    free(host), free(hf), free(half), free(ts), free(names);
    return rc;
}

/* find a model tensor in a HF file: "transformer.X", "X", and for lm_head only "lm_head.weight" */
static int find_hf_tensor(const SafeTensors *st, const ParamTensor *t, const ModelDesc *d) {
    char name[128];
    hf_name(name, sizeof name, t, d);
    int i = safetensors_find(st, name);
    const char *pre = arch_spec(d->arch)->hf_optional_prefix;
    if (i < 0 && pre && strncmp(name, pre, strlen(pre)) == 0) i = safetensors_find(st, name + strlen(pre));
    return i;
}

int checkpoint_load_weights(Model *m, const char *path, GtError *err) {
    char file[GT_PATH_MAX * 2 + 32];
    struct stat sb;
    if (stat(path, &sb) != 0) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: cannot open: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        snprintf(file, sizeof file, "%s/model.safetensors", path);
    else
        snprintf(file, sizeof file, "%s", path);
    SafeTensors *st = NULL;
    if (safetensors_open(&st, file, err)) return -1;
    const ParamLayout *pl = &m->layout;
    float *host = malloc(pl->total * sizeof(float)), *tmp = malloc(pl->total * sizeof(float));
    int rc = -1;
    long nonfinite = 0;
    if (!host || !tmp) {
        gt_error(err, GT_EXIT_FAILURE, "out of host memory loading %s", file);
        goto done;
    }
    for (int i = 0; i < pl->n_tensors; i++) {
        const ParamTensor *t = &pl->tensors[i];
        int k = find_hf_tensor(st, t, &m->desc);
        if (k < 0) {
            gt_error(err, GT_EXIT_BAD_INPUT, "%s: tensor %s: expected in the file (with or without the transformer. "
                     "prefix), not found", file, t->name);
            goto done;
        }
        int64_t shape[4];
        int nd;
        safetensors_shape(st, k, shape, &nd);
        int64_t want0 = t->transposed ? t->shape[1] : t->shape[0], want1 = t->transposed ? t->shape[0] : t->shape[1];
        bool ok = nd == t->ndim && shape[0] == want0 && (t->ndim == 1 || shape[1] == want1);
        if (!ok) {
            if (t->ndim == 1)
                gt_error(err, GT_EXIT_BAD_INPUT, "%s: tensor %s: expected shape [%lld], found %d dims [%lld%s]", file,
                         safetensors_name(st, k), (long long)want0, nd, nd > 0 ? (long long)shape[0] : 0LL, nd > 1 ? ", ..." : "");
            else
                gt_error(err, GT_EXIT_BAD_INPUT, "%s: tensor %s: expected shape [%lld, %lld], found %d dims [%lld, %lld]",
                         file, safetensors_name(st, k), (long long)want0, (long long)want1, nd,
                         nd > 0 ? (long long)shape[0] : 0LL, nd > 1 ? (long long)shape[1] : 0LL);
            goto done;
        }
        if (safetensors_read_f32(st, k, tmp, t->numel, err)) goto done;
        float *dst = host + t->offset;
        if (t->transposed) { /* [in, out] -> [out, in] */
            const int64_t out = t->shape[0], in = t->shape[1];
            for (int64_t o = 0; o < out; o++)
                for (int64_t ii = 0; ii < in; ii++) dst[o * in + ii] = tmp[ii * out + o];
        } else {
            memcpy(dst, tmp, t->numel * sizeof(float));
        }
        for (size_t q = 0; q < t->numel; q++) nonfinite += !isfinite(dst[q]);
    }
    if (nonfinite) gt_warn("%s: %ld weights are NaN or infinite\n", file, nonfinite);
    rc = m->be->ops->to_device(m->be, m->params, host, pl->total * sizeof(float), err);
    model_params_changed(m);
done:
    free(host), free(tmp);
    safetensors_close(st);
    return rc;
}

/* ---------------------------------------------------------------- optimizer state */

/* m_full/v_full: the whole AdamW state on the host (gathered from the ranks under ZeRO-1), or
 * NULL to read it from an unsharded model */
static int save_optimizer(const char *dir, Model *m, long adam_t, const float *m_full, const float *v_full,
                          GtError *err) {
    const ParamLayout *pl = &m->layout;
    float *mh = NULL, *vh = NULL;
    if (!m_full) {
        if (!(mh = device_to_host(m, m->adam_m, err))) return -1;
        if (!(vh = device_to_host(m, m->adam_v, err))) {
            free(mh);
            return -1;
        }
        m_full = mh, v_full = vh;
    }
    int n = 2 * pl->n_tensors, rc;
    StTensorOut *ts = gt_xcalloc((size_t)n, sizeof *ts);
    char(*names)[128] = gt_xcalloc((size_t)n, sizeof *names);
    for (int i = 0; i < pl->n_tensors; i++) {
        const ParamTensor *t = &pl->tensors[i];
        for (int w = 0; w < 2; w++) {
            StTensorOut *o = &ts[2 * i + w];
            snprintf(names[2 * i + w], sizeof names[0], "%s.%s", w ? "exp_avg_sq" : "exp_avg", t->name);
            o->name = names[2 * i + w];
            o->dtype = ST_F32;
            o->ndim = 1;
            o->shape[0] = (int64_t)t->numel;
            o->data = (w ? v_full : m_full) + t->offset;
        }
    }
    char path[GT_PATH_MAX * 2 + 32], tbuf[32];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    snprintf(tbuf, sizeof tbuf, "%ld", adam_t);
    const char *meta[] = {"optimizer", "adamw", "step", tbuf};
    rc = safetensors_write(path, ts, n, meta, 2, err);
    free(ts), free(names), free(mh), free(vh);
    return rc;
}

static int load_optimizer(const char *dir, Model *m, long adam_t, GtError *err) {
    char path[GT_PATH_MAX * 2 + 32];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    SafeTensors *st = NULL;
    if (safetensors_open(&st, path, err)) return -1;
    char want[32];
    snprintf(want, sizeof want, "%ld", adam_t);
    const char *step = safetensors_metadata(st, "step");
    if (step && strcmp(step, want) != 0) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: __metadata__.step: expected %s (trainer_state.json's adam_step), found \"%.40s\"",
                 path, want, step);
        safetensors_close(st);
        return -1;
    }
    const ParamLayout *pl = &m->layout;
    int rc = -1;
    float *mh = malloc(pl->total * sizeof(float)), *vh = malloc(pl->total * sizeof(float));
    if (!mh || !vh) {
        gt_error(err, GT_EXIT_FAILURE, "out of host memory loading %s", path);
        goto done;
    }
    for (int i = 0; i < pl->n_tensors; i++) {
        const ParamTensor *t = &pl->tensors[i];
        for (int w = 0; w < 2; w++) {
            char name[128];
            snprintf(name, sizeof name, "%s.%s", w ? "exp_avg_sq" : "exp_avg", t->name);
            int k = safetensors_find(st, name);
            if (k < 0) {
                gt_error(err, GT_EXIT_BAD_INPUT, "%s: tensor %s: expected, not found", path, name);
                goto done;
            }
            if (safetensors_dtype(st, k) != ST_F32) {
                gt_error(err, GT_EXIT_BAD_INPUT, "%s: tensor %s: expected dtype F32, found %s", path, name,
                         st_dtype_name(safetensors_dtype(st, k)));
                goto done;
            }
            float *x = (w ? vh : mh) + t->offset;
            if (safetensors_read_f32(st, k, x, t->numel, err)) goto done;
            /* AdamW divides by sqrt(v): a NaN, an infinity or a negative v poisons every later step */
            for (size_t q = 0; q < t->numel; q++)
                if (!isfinite(x[q]) || (w && x[q] < 0)) {
                    gt_error(err, GT_EXIT_BAD_INPUT, "%s: tensor %s: element %zu: expected a finite %s, found %g",
                             path, name, q, w ? "second moment >= 0" : "first moment", (double)x[q]);
                    goto done;
                }
        }
    }
    /* this rank's shard (all of it without ZeRO); the padding past the parameters stays zero */
    size_t lo = (size_t)m->shard_rank * m->shard, n = lo < pl->total ? pl->total - lo : 0;
    if (n > m->shard) n = m->shard;
    m->be->ops->zero(m->be, m->adam_m, m->shard * sizeof(float));
    m->be->ops->zero(m->be, m->adam_v, m->shard * sizeof(float));
    if (n && (m->be->ops->to_device(m->be, m->adam_m, mh + lo, n * sizeof(float), err) ||
              m->be->ops->to_device(m->be, m->adam_v, vh + lo, n * sizeof(float), err)))
        goto done;
    rc = 0;
done:
    free(mh), free(vh);
    safetensors_close(st);
    return rc;
}

/* ---------------------------------------------------------------- trainer state */

static int write_state(const char *dir, const TrainerState *s, const ModelDesc *d, GtError *err) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "global_step", (double)s->global_step);
    cJSON_AddNumberToObject(j, "max_steps", (double)s->max_steps);
    cJSON_AddNumberToObject(j, "epoch", s->epoch);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)s->seed); /* 64-bit: as a string, exact */
    cJSON_AddStringToObject(j, "seed", seed);
    cJSON_AddNumberToObject(j, "effective_batch", (double)s->effective_batch);
    cJSON_AddNumberToObject(j, "world_size", s->world_size);
    cJSON_AddNumberToObject(j, "per_device_train_batch_size", s->per_device_train_batch_size);
    cJSON_AddNumberToObject(j, "gradient_accumulation_steps", s->gradient_accumulation_steps);
    cJSON_AddNumberToObject(j, "skipped_steps", (double)s->skipped_steps);
    cJSON_AddNumberToObject(j, "empty_steps", (double)s->empty_steps);
    cJSON_AddNumberToObject(j, "adam_step", (double)s->adam_t);
    cJSON_AddNumberToObject(j, "num_parameters", (double)model_desc_num_params(d));
    /* the data position: rows of step s are a pure function of (seed, s, row) */
    cJSON *data = cJSON_AddObjectToObject(j, "data");
    cJSON_AddStringToObject(data, "sampler", "splitmix64(seed, step, row); resumes at global_step");
    cJSON_AddNumberToObject(data, "next_step", (double)s->global_step);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return gt_error(err, GT_EXIT_FAILURE, "out of memory writing %s", STATE_FILE);
    char path[GT_PATH_MAX * 2 + 32];
    snprintf(path, sizeof path, "%s/%s", dir, STATE_FILE);
    int rc = write_text_atomic(path, text, err);
    free(text);
    return rc;
}

static int state_number(const cJSON *j, const char *key, double lo, double hi, double *out, const char *path,
                        GtError *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi ||
        (hi > 1 && v->valuedouble != floor(v->valuedouble) && strcmp(key, "epoch") != 0))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected a number in [%g, %g], found %s", path, key, lo, hi,
                        v ? (cJSON_IsNumber(v) ? "an out-of-range number" : "another type") : "nothing");
    *out = v->valuedouble;
    return 0;
}

int checkpoint_read_state(const char *dir, TrainerState *s, GtError *err) {
    char path[GT_PATH_MAX * 2 + 32];
    snprintf(path, sizeof path, "%s/%s", dir, STATE_FILE);
    char *text = NULL;
    size_t len;
    if (gt_read_small_file(path, "trainer state", STATE_MAX_BYTES, &text, &len, err)) return -1;
    if (gt_json_nul_at(text, len) >= 0) {
        free(text);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected names and strings without NUL, found \\u0000 or a 0 byte", path);
    }
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected a JSON object", path);
    }
    memset(s, 0, sizeof *s);
    double v;
    int rc = -1;
    const double big = 9007199254740992.0; /* 2^53: exact in a double */
    if (state_number(j, "global_step", 0, big, &v, path, err)) goto done;
    s->global_step = (long)v;
    if (state_number(j, "max_steps", 0, big, &v, path, err)) goto done;
    s->max_steps = (long)v;
    if (state_number(j, "epoch", 0, 1e12, &v, path, err)) goto done;
    s->epoch = v;
    if (state_number(j, "effective_batch", 1, 1 << 30, &v, path, err)) goto done;
    s->effective_batch = (long)v;
    if (state_number(j, "world_size", 1, 1 << 20, &v, path, err)) goto done;
    s->world_size = (int)v;
    if (state_number(j, "per_device_train_batch_size", 1, 1 << 30, &v, path, err)) goto done;
    s->per_device_train_batch_size = (int)v;
    if (state_number(j, "gradient_accumulation_steps", 1, 1 << 30, &v, path, err)) goto done;
    s->gradient_accumulation_steps = (int)v;
    if (state_number(j, "skipped_steps", 0, big, &v, path, err)) goto done;
    s->skipped_steps = (long)v;
    if (cJSON_GetObjectItemCaseSensitive(j, "empty_steps")) { /* absent in checkpoints older than it */
        if (state_number(j, "empty_steps", 0, big, &v, path, err)) goto done;
        s->empty_steps = (long)v;
    }
    if (state_number(j, "adam_step", 0, big, &v, path, err)) goto done;
    s->adam_t = (long)v;
    /* every step either updated (adam_step counts it) or was skipped or empty */
    if (s->skipped_steps + s->empty_steps > s->global_step || s->adam_t != s->global_step - s->skipped_steps - s->empty_steps) {
        gt_error(err, GT_EXIT_BAD_INPUT,
                 "%s: adam_step: expected global_step - skipped_steps - empty_steps = %ld - %ld - %ld, found %ld", path,
                 s->global_step, s->skipped_steps, s->empty_steps, s->adam_t);
        goto done;
    }
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(j, "seed");
    char *end = NULL;
    if (!cJSON_IsString(seed) || !seed->valuestring[0]) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: seed: expected a decimal string, found %s", path, seed ? "another type" : "nothing");
        goto done;
    }
    errno = 0;
    s->seed = strtoull(seed->valuestring, &end, 10);
    if (errno || *end || seed->valuestring[0] == '-') {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: seed: expected a decimal 64-bit integer, found \"%.40s\"", path,
                 seed->valuestring);
        goto done;
    }
    if (s->global_step > s->max_steps && s->max_steps > 0) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: global_step: expected at most max_steps %ld, found %ld", path,
                 s->max_steps, s->global_step);
        goto done;
    }
    rc = 0;
done:
    cJSON_Delete(j);
    return rc;
}

/* ---------------------------------------------------------------- run checkpoints */

int checkpoint_save(const char *output_dir, Model *m, const TrainerState *st, const float *adam_m_full,
                    const float *adam_v_full, GtError *err) {
    char tmp[GT_PATH_MAX + 64], final[GT_PATH_MAX + 64], old[GT_PATH_MAX + 80];
    snprintf(tmp, sizeof tmp, "%s/.checkpoint-%ld.tmp", output_dir, st->global_step);
    snprintf(final, sizeof final, "%s/checkpoint-%ld", output_dir, st->global_step);
    rundir_remove_owned(tmp, RUNDIR_CHECKPOINT_FILES);
    if (mkdir(tmp, 0755) != 0) return gt_error(err, GT_EXIT_FAILURE, "%s: cannot create: %s", tmp, strerror(errno));
    if (checkpoint_save_weights(tmp, m, false, err) || save_optimizer(tmp, m, st->adam_t, adam_m_full, adam_v_full, err) ||
        write_state(tmp, st, &m->desc, err) || fsync_dir(tmp) != 0) {
        rundir_remove_owned(tmp, RUNDIR_CHECKPOINT_FILES);
        if (!err || !err->msg[0]) gt_error(err, GT_EXIT_FAILURE, "%s: sync failed", tmp);
        return -1;
    }
    /* an older checkpoint of the same step (a resumed run) is moved aside, then removed; lstat: a
     * link of that name is moved and unlinked, never followed */
    struct stat sb;
    bool had_old = lstat(final, &sb) == 0;
    snprintf(old, sizeof old, "%s/.checkpoint-%ld.old.tmp", output_dir, st->global_step);
    if (had_old && rename(final, old) != 0) {
        rundir_remove_owned(tmp, RUNDIR_CHECKPOINT_FILES);
        return gt_error(err, GT_EXIT_FAILURE, "%s: cannot replace: %s", final, strerror(errno));
    }
    if (rename(tmp, final) != 0) {
        int e = errno;
        rundir_remove_owned(tmp, RUNDIR_CHECKPOINT_FILES);
        return gt_error(err, GT_EXIT_FAILURE, "%s: cannot rename into place: %s", final, strerror(e));
    }
    fsync_dir(output_dir);
    if (had_old) rundir_remove_owned(old, RUNDIR_CHECKPOINT_FILES);
    return 0;
}

int checkpoint_load(const char *dir, Model *m, TrainerState *st, GtError *err) {
    if (checkpoint_read_state(dir, st, err)) return -1;
    if (checkpoint_load_weights(m, dir, err)) return -1;
    return load_optimizer(dir, m, st->adam_t, err);
}
