/* checkpoint.c - run checkpoints (see checkpoint.h): the AdamW state, trainer_state.json, the
 * atomic checkpoint-N directory; the weights themselves are hf_checkpoint.c's. */
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

#include "buffers.h"
#include "lora.h"
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


/* ---------------------------------------------------------------- optimizer state */

/* The AdamW state, exp_avg.NAME and exp_avg_sq.NAME per tensor (fp32, flat), streamed through the
 * model's staging buffer. m_full/v_full: the whole state on the host (gathered from the ranks
 * under ZeRO-1), or NULL to read it from an unsharded model. */
static int save_optimizer(const char *dir, Model *m, long adam_t, const float *m_full, const float *v_full,
                          GtError *err) {
    const ParamLayout *pl = &m->layout;
    int n = 2 * pl->n_tensors, rc = -1;
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
        }
    }
    char path[GT_PATH_MAX * 2 + 32], tbuf[32];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    snprintf(tbuf, sizeof tbuf, "%ld", adam_t);
    const char *meta[] = {"optimizer", "adamw", "step", tbuf};
    StWriter *sw = NULL;
    const size_t chunk = m->stage_io_bytes / sizeof(float);
    if (st_writer_open(&sw, path, ts, n, meta, 2, err)) goto done;
    for (int i = 0; i < pl->n_tensors; i++) {
        const ParamTensor *t = &pl->tensors[i];
        for (int w = 0; w < 2; w++)
            for (size_t k0 = 0; k0 < t->numel; k0 += chunk) {
                size_t k = t->numel - k0 < chunk ? t->numel - k0 : chunk;
                const float *src;
                if (m_full) {
                    src = (w ? v_full : m_full) + t->offset + k0;
                } else {
                    if (m->be->ops->to_host(m->be, m->staging, (w ? m->adam_v : m->adam_m) + t->offset + k0,
                                            k * sizeof(float), err))
                        goto done;
                    src = m->staging;
                }
                if (st_writer_put(sw, src, k * sizeof(float), err)) goto done;
            }
    }
    rc = st_writer_close(sw, err) || st_writer_commit(sw, err) ? -1 : 0;
done:
    st_writer_free(sw);
    free(ts), free(names);
    return rc;
}

/* Into this rank's shard [shard_rank * shard, +shard) of the AdamW state (all of it without
 * ZeRO), tensor by tensor through the staging buffer; the padding past the parameters stays zero. */
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
    const size_t lo = (size_t)m->shard_rank * m->shard, hi = lo + m->shard, chunk = m->stage_io_bytes / sizeof(float);
    int rc = -1;
    m->be->ops->zero(m->be, m->adam_m, m->shard * sizeof(float));
    m->be->ops->zero(m->be, m->adam_v, m->shard * sizeof(float));
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
            if ((uint64_t)safetensors_numel(st, k) != (uint64_t)t->numel) {
                gt_error(err, GT_EXIT_BAD_INPUT, "%s: tensor %s: expected %zu elements, found %lld", path, name,
                         t->numel, (long long)safetensors_numel(st, k));
                goto done;
            }
            for (size_t k0 = 0; k0 < t->numel; k0 += chunk) {
                size_t n = t->numel - k0 < chunk ? t->numel - k0 : chunk;
                float *x = m->staging;
                if (safetensors_read_f32_range(st, k, k0, n, x, err)) goto done;
                /* AdamW divides by sqrt(v): a NaN, an infinity or a negative v poisons every later step */
                for (size_t q = 0; q < n; q++)
                    if (!isfinite(x[q]) || (w && x[q] < 0)) {
                        gt_error(err, GT_EXIT_BAD_INPUT, "%s: tensor %s: element %zu: expected a finite %s, found %g",
                                 path, name, k0 + q, w ? "second moment >= 0" : "first moment", (double)x[q]);
                        goto done;
                    }
                /* the part of [g0, g1) inside this rank's shard */
                size_t g0 = t->offset + k0, g1 = g0 + n, a = g0 > lo ? g0 : lo, b = g1 < hi ? g1 : hi;
                if (a < b && m->be->ops->to_device(m->be, (w ? m->adam_v : m->adam_m) + (a - lo), x + (a - g0),
                                                   (b - a) * sizeof(float), err))
                    goto done;
            }
        }
    }
    rc = 0;
done:
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
    if (d->adapter.r > 0) cJSON_AddNumberToObject(j, "num_trainable_parameters", (double)lora_num_params(d)); /* the adapters */
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
                    const float *adam_v_full, uint64_t max_shard_bytes, const Tokenizer *tok, GtError *err) {
    char tmp[GT_PATH_MAX + 64], final[GT_PATH_MAX + 64], old[GT_PATH_MAX + 80];
    snprintf(tmp, sizeof tmp, "%s/.checkpoint-%ld.tmp", output_dir, st->global_step);
    snprintf(final, sizeof final, "%s/checkpoint-%ld", output_dir, st->global_step);
    rundir_remove_owned(tmp, RUNDIR_CHECKPOINT_FILES);
    if (mkdir(tmp, 0755) != 0) return gt_error(err, GT_EXIT_FAILURE, "%s: cannot create: %s", tmp, strerror(errno));
    /* the weights: every one, or a LoRA run's adapters (its base is the model's, unchanged) */
    int wrc = m->desc.adapter.r > 0 ? lora_save_adapter(tmp, m, false, err)
                                 : checkpoint_save_weights(tmp, m, false, max_shard_bytes, err);
    size_t tok_len = 0;
    const uint8_t *tok_json = tok ? tokenizer_raw(tok, &tok_len) : NULL;
    char tok_file[GT_PATH_MAX + 96];
    snprintf(tok_file, sizeof tok_file, "%s/tokenizer.json", tmp);
    if (wrc || (tok_json && gt_write_file_atomic(tok_file, tok_json, tok_len, err)) ||
        save_optimizer(tmp, m, st->adam_t, adam_m_full, adam_v_full, err) ||
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
    if (m->desc.adapter.r > 0 ? lora_load_adapter(m, dir, err) : checkpoint_load_weights(m, dir, err)) return -1;
    return load_optimizer(dir, m, st->adam_t, err);
}
