/* test_hf_writer.c - the sharded Hugging Face writer (src/io/hf_writer.c): max_shard_size parsing as
 * transformers / huggingface_hub read it, the shard split on hand-computed cases, round trips read
 * back through hf_weights (whole and by rows, bit for bit, F32 and BF16), the index byte for byte,
 * stale files, failures that leave nothing behind, and the Hugging Face stack's own split and reader
 * (tests/tools/hf_shards_check.py: huggingface_hub's split_torch_state_dict_into_shards,
 * safetensors.safe_open). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "hf_weights.h"
#include "hf_writer.h"
#include "run_util.h"
#include "test_util.h"

/* element k of the tensor with seed t: exact in fp32 and bf16 (as hf_shards_check.py computes it) */
static float value(uint64_t k, int t) { return (float)((int)((7 * k + 13 * (uint64_t)t) % 251) - 125) * ldexpf(1.0f, t % 5 - 2); }

typedef struct {
    const StTensorOut *specs;
    int fail_at;       /* tensor whose fill fails, -1: none */
    int calls, order[64], n_order;
    bool rows_ok;      /* every call covered whole rows (when a row fits the staging buffer) */
    size_t max_n, stage_elems;
} Fill;

static int fill_values(void *ctx, int t, uint64_t off, size_t n, float *dst, GtError *err) {
    Fill *f = ctx;
    f->calls++;
    if (f->n_order == 0 || f->order[f->n_order - 1] != t) f->order[f->n_order++ % 64] = t;
    if (n > f->max_n) f->max_n = n;
    const StTensorOut *s = &f->specs[t];
    if (s->ndim >= 2 && s->shape[0] > 0) {
        uint64_t numel = 1;
        for (int k = 0; k < s->ndim; k++) numel *= (uint64_t)s->shape[k];
        const uint64_t row = numel / (uint64_t)s->shape[0];
        if (row <= f->stage_elems && (off % row != 0 || (n % row != 0 && off + n != numel))) f->rows_ok = false;
    }
    if (t == f->fail_at) return gt_error(err, GT_EXIT_FAILURE, "fill of tensor %d failed on purpose", t);
    for (size_t j = 0; j < n; j++) dst[j] = value(off + j, t);
    return 0;
}

static uint64_t numel_of(const StTensorOut *t) {
    uint64_t n = 1;
    for (int k = 0; k < t->ndim; k++) n *= (uint64_t)t->shape[k];
    return n;
}

/* every file name in dir, sorted, joined with spaces */
static void list_dir(const char *dir, char *out, size_t cap) {
    struct dirent **es;
    int n = scandir(dir, &es, NULL, alphasort);
    cr_assert_geq(n, 0);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (es[i]->d_name[0] != '.' || strlen(es[i]->d_name) > 2) {
            if (out[0]) strncat(out, " ", cap - strlen(out) - 1);
            strncat(out, es[i]->d_name, cap - strlen(out) - 1);
        }
        free(es[i]);
    }
    free(es);
}

/* ------------------------------------------------------------------ sizes */

Test(hf_writer, parse_size_as_hf) {
    struct {
        const char *s;
        uint64_t v;
    } ok[] = {{"5GB", 5000000000ULL},      {"5GiB", 5ULL << 30},       {"500MB", 500000000ULL},
              {"100KB", 100000ULL},         {"1000", 1000},             {"1000B", 1000},
              {" 5 GB ", 5000000000ULL},    {"1.5GB", 1500000000ULL},   {"0.5KB", 500},
              {"5gib", 5ULL << 30},         {"5kB", 5000},              {"1TB", 1000000000000ULL},
              {"2TiB", 2ULL << 40},         {"10MiB", 10ULL << 20},     {"3KiB", 3072},
              {".5MB", 500000},             {"2.MB", 2000000},                  {"0.1GB", 100000000ULL},
              {"1.0000000001GB", 1000000000ULL}, {"1", 1}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 0;
        char why[256] = "";
        cr_expect_eq(hf_parse_size(ok[i].s, &v, why, sizeof why), 0, "%s: %s", ok[i].s, why);
        cr_expect_eq(v, ok[i].v, "%s: %llu", ok[i].s, (unsigned long long)v);
    }
    struct {
        const char *s, *why;
    } bad[] = {{"", "expected a size"},          {"GB", "expected a size"},    {"5Gb", "ambiguous"},
               {"5gb", "ambiguous"},             {"5mb", "ambiguous"},         {"5XB", "units"},
               {"-5GB", "expected a size"},      {"0", "at least 1 byte"},     {"0GB", "at least 1 byte"},
               {"1.5", "whole number"},          {"2000000TB", "at most"},     {"99999999999999999999", "at most"},
               {"5 G B", "units"},               {"1e9", "units"},             {"5b", "units"},
               {"0.0001B", "whole number"},      {"2.", "whole number"},      {"5GB extra", "units"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 7;
        char why[256] = "";
        cr_expect_eq(hf_parse_size(bad[i].s, &v, why, sizeof why), -1, "%s accepted as %llu", bad[i].s,
                     (unsigned long long)v);
        cr_expect(strstr(why, bad[i].why), "%s: %s", bad[i].s, why);
        cr_expect(strstr(why, "found \""), "%s: %s", bad[i].s, why);
        cr_expect_eq(v, 7u, "%s: *out written on failure", bad[i].s);
    }
}

/* ------------------------------------------------------------------ the split */

/* n F32 1-D tensors of the given byte sizes (multiples of 4) split with max: shard of each, as a string */
static void split(const uint64_t *bytes, int n, uint64_t max, char *out, size_t cap, HfShardPlan *plan) {
    StTensorOut ts[16];
    static char names[16][8];
    for (int i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "t%d", i);
        ts[i] = (StTensorOut){.name = names[i], .dtype = ST_F32, .ndim = 1, .shape = {(int64_t)(bytes[i] / 4)}};
    }
    GtError err = {0};
    cr_assert_eq(hf_plan_shards(plan, ts, n, max, &err), 0, "%s", err.msg);
    out[0] = '\0';
    for (int s = 0; s < plan->n_shards; s++) {
        strncat(out, "{", cap - strlen(out) - 1);
        for (int k = plan->first[s]; k < plan->first[s + 1]; k++) {
            char b[16];
            snprintf(b, sizeof b, "%s%d", k > plan->first[s] ? "," : "", plan->order[k]);
            strncat(out, b, cap - strlen(out) - 1);
        }
        strncat(out, "}", cap - strlen(out) - 1);
    }
}

Test(hf_writer, split_follows_huggingface_hub) {
    struct {
        uint64_t bytes[8];
        int n;
        uint64_t max;
        const char *want;
    } cases[] = {
        {{60, 40}, 2, 100, "{0,1}"},                   /* exactly filling the shard: one shard */
        {{60, 40, 4}, 3, 100, "{0,1}{2}"},             /* one byte (here four) over: a new shard */
        {{4, 400, 4}, 3, 100, "{1}{0,2}"},             /* bigger than the max: its own shard, appended at once */
        {{400}, 1, 100, "{0}"},                        /* one oversized tensor: still model.safetensors */
        {{52, 60, 52}, 3, 100, "{0}{1}{2}"},
        {{0, 200, 0}, 3, 100, "{1}{0,2}"},             /* zero-size tensors never split */
        {{24, 24, 8, 24, 8, 8}, 6, 40, "{0}{1,2}{3,4,5}"}, /* the docstring's [6,6,2,6,2,2] GB at 10 GB */
        {{100, 100, 200, 100}, 4, 100, "{0}{2}{1}{3}"},  /* the oversized one lands before the open shard */
        {{8, 8, 8}, 3, 0, "{0,1,2}"},                  /* 0: the 5 GB default */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char got[128];
        HfShardPlan plan;
        split(cases[c].bytes, cases[c].n, cases[c].max, got, sizeof got, &plan);
        cr_expect_str_eq(got, cases[c].want, "case %zu", c);
        uint64_t total = 0, sum = 0;
        for (int i = 0; i < cases[c].n; i++) total += cases[c].bytes[i];
        for (int s = 0; s < plan.n_shards; s++) sum += plan.shard_bytes[s];
        cr_expect_eq(plan.total_bytes, total);
        cr_expect_eq(sum, total);
        for (int i = 0; i < cases[c].n; i++) {
            const int s = plan.shard_of[i];
            bool in = false;
            for (int k = plan.first[s]; k < plan.first[s + 1]; k++) in |= plan.order[k] == i;
            cr_expect(in, "case %zu: tensor %d not in its shard", c, i);
        }
        hf_shard_plan_free(&plan);
    }
    char name[64];
    hf_shard_file_name(name, sizeof name, 0, 1);
    cr_expect_str_eq(name, "model.safetensors");
    hf_shard_file_name(name, sizeof name, 2, 12);
    cr_expect_str_eq(name, "model-00003-of-00012.safetensors");
}

Test(hf_writer, plan_rejects_bad_tensors) {
    StTensorOut ts[2] = {{.name = "a", .dtype = ST_F32, .ndim = 1, .shape = {2}},
                         {.name = "a", .dtype = ST_BF16, .ndim = 1, .shape = {2}}};
    HfShardPlan plan;
    GtError err = {0};
    cr_expect_eq(hf_plan_shards(&plan, ts, 2, 100, &err), -1);
    cr_expect(strstr(err.msg, "twice"), "%s", err.msg);
    ts[1].name = "b\xff";
    cr_expect_eq(hf_plan_shards(&plan, ts, 2, 100, &err), -1);
    cr_expect(strstr(err.msg, "UTF-8"), "%s", err.msg);
    ts[1].name = "b";
    ts[1].dtype = ST_F16;
    cr_expect_eq(hf_plan_shards(&plan, ts, 2, 100, &err), -1);
    ts[1].dtype = ST_BF16;
    ts[1].shape[0] = -1;
    cr_expect_eq(hf_plan_shards(&plan, ts, 2, 100, &err), -1);
    cr_expect_eq(hf_plan_shards(&plan, ts, 0, 100, &err), -1);
    cr_expect_eq(err.code, GT_EXIT_FAILURE);
}

/* ------------------------------------------------------------------ round trips */

/* a mixed model: 2-D, 1-D, 3-D, a scalar, an empty tensor; F32 and BF16 */
static const StTensorOut MODEL[] = {
    {.name = "model.embed_tokens.weight", .dtype = ST_BF16, .ndim = 2, .shape = {37, 24}},
    {.name = "model.layers.0.input_layernorm.weight", .dtype = ST_F32, .ndim = 1, .shape = {24}},
    {.name = "model.layers.0.self_attn.q_proj.weight", .dtype = ST_F32, .ndim = 2, .shape = {24, 24}},
    {.name = "model.layers.0.mlp.up_proj.weight", .dtype = ST_BF16, .ndim = 2, .shape = {64, 24}},
    {.name = "model.layers.0.conv.weight", .dtype = ST_F32, .ndim = 3, .shape = {5, 3, 7}},
    {.name = "model.scale.\xc3\xa9\xf0\x9f\x98\x80", .dtype = ST_F32, .ndim = 0}, /* non-ASCII: escaped as \\uXXXX in the index */
    {.name = "model.empty", .dtype = ST_BF16, .ndim = 2, .shape = {0, 24}},
    {.name = "model.norm.weight", .dtype = ST_BF16, .ndim = 1, .shape = {24}},
    {.name = "lm_head.weight", .dtype = ST_F32, .ndim = 2, .shape = {37, 24}},
};
#define N_MODEL ((int)(sizeof MODEL / sizeof MODEL[0]))

/* every tensor read back whole and in row blocks of 1..4 rows, bit for bit */
static void expect_model(const char *path, int want_shards) {
    HfWeights *w = NULL;
    GtError err = {0};
    cr_assert_eq(hf_weights_open(&w, path, &err), 0, "%s", err.msg);
    cr_expect_eq(hf_weights_shard_count(w), want_shards);
    cr_expect_eq(hf_weights_is_sharded(w), want_shards > 1);
    cr_expect_eq(hf_weights_warning_count(w), 0, "%s", hf_weights_warning(w, 0));
    cr_assert_eq(hf_weights_count(w), N_MODEL);
    uint64_t bytes = 0;
    for (int t = 0; t < N_MODEL; t++) {
        const StTensorOut *s = &MODEL[t];
        int i = hf_weights_find(w, s->name);
        cr_assert_geq(i, 0, "%s missing", s->name);
        HfTensorInfo info;
        cr_assert_eq(hf_weights_info(w, i, &info), 0);
        cr_expect_str_eq(info.name, s->name);
        cr_expect_eq(info.dtype, s->dtype, "%s", s->name);
        cr_expect_eq(hf_weights_check_shape(w, i, s->ndim, s->shape, &err), 0, "%s", err.msg);
        const uint64_t n = numel_of(s);
        bytes += n * st_dtype_size(s->dtype);
        float *x = calloc(n + 1, sizeof *x);
        cr_assert_eq(hf_weights_read_f32(w, i, x, n, &err), 0, "%s", err.msg);
        for (uint64_t k = 0; k < n; k++) {
            const float want = s->dtype == ST_BF16 ? gt_bf16_to_f32(gt_f32_to_bf16(value(k, t))) : value(k, t);
            cr_assert(memcmp(&x[k], &want, 4) == 0, "%s[%llu] = %g, expected %g", s->name, (unsigned long long)k,
                      (double)x[k], (double)want);
        }
        if (s->ndim >= 1) {
            const int64_t rows = s->shape[0], row = rows ? (int64_t)(n / (uint64_t)rows) : 0;
            for (int64_t block = 1; block <= 4; block++)
                for (int64_t r0 = 0; r0 < rows; r0 += block) {
                    const int64_t nr = rows - r0 < block ? rows - r0 : block;
                    float y[4 * 64];
                    cr_assert_eq(hf_weights_read_rows_f32(w, i, r0, nr, y, sizeof y / sizeof y[0], &err), 0, "%s", err.msg);
                    cr_assert(memcmp(y, x + r0 * row, (size_t)(nr * row) * sizeof *y) == 0, "%s rows %lld+%lld", s->name,
                              (long long)r0, (long long)nr);
                }
        }
        free(x);
    }
    cr_expect_eq(hf_weights_data_bytes(w), bytes);
    hf_weights_close(w);
}

static void save_model(const char *dir, uint64_t max, size_t staging, Fill *f) {
    *f = (Fill){.specs = MODEL, .fail_at = -1, .rows_ok = true, .stage_elems = staging / 4};
    HfSaveOptions o = {.max_shard_bytes = max, .staging_bytes = staging};
    GtError err = {0};
    cr_assert_eq(hf_save(dir, MODEL, N_MODEL, &o, fill_values, f, &err), 0, "%s", err.msg);
}

Test(hf_writer, sharded_round_trip) {
    char dir[256], files[1024];
    test_scratch_make(dir, sizeof dir, "gt_hfw");
    /* bytes: 1776, 96, 2304, 3072, 420, 4, 0, 48, 3552; max 2500 */
    Fill f;
    save_model(dir, 2500, 200, &f);
    cr_expect(f.rows_ok, "a fill call cut a row");
    cr_expect_leq(f.max_n, 50u);
    HfShardPlan plan;
    GtError err = {0};
    cr_assert_eq(hf_plan_shards(&plan, MODEL, N_MODEL, 2500, &err), 0);
    /* {0, 1} closes when 2 arrives; 3 (3072 > 2500) is appended alone at once; {2} closes when 4
     * arrives; 8 is appended alone; {4, 5, 6, 7} closes at the end */
    cr_expect_eq(plan.n_shards, 5);
    cr_expect_eq(plan.shard_of[3], 1);
    cr_expect_eq(plan.shard_of[2], 2);
    cr_expect_eq(plan.shard_of[8], 3);
    cr_expect_eq(plan.shard_of[7], 4);
    hf_shard_plan_free(&plan);
    list_dir(dir, files, sizeof files);
    cr_expect_str_eq(files, "model-00001-of-00005.safetensors model-00002-of-00005.safetensors "
                            "model-00003-of-00005.safetensors model-00004-of-00005.safetensors "
                            "model-00005-of-00005.safetensors model.safetensors.index.json");
    expect_model(dir, 5);
    expect_model(test_join(dir, "model.safetensors.index.json"), 5); /* the index given directly */
    /* one shard file read alone is a plain safetensors file */
    HfWeights *w = NULL;
    cr_assert_eq(hf_weights_open(&w, test_join(dir, "model-00002-of-00005.safetensors"), &err), 0, "%s", err.msg);
    cr_expect_eq(hf_weights_count(w), 1);
    cr_expect_geq(hf_weights_find(w, "model.layers.0.mlp.up_proj.weight"), 0);
    hf_weights_close(w);
    test_scratch_remove(dir);
}

Test(hf_writer, one_shard_is_model_safetensors_without_index) {
    char dir[256], files[1024];
    test_scratch_make(dir, sizeof dir, "gt_hfw");
    Fill f;
    save_model(dir, 0, 0, &f); /* 5 GB, 16 MiB staging: one call per tensor */
    list_dir(dir, files, sizeof files);
    cr_expect_str_eq(files, "model.safetensors");
    expect_model(dir, 1);
    expect_model(test_join(dir, "model.safetensors"), 1);
    cr_expect_eq(f.calls, N_MODEL - 1, "%d calls (one per tensor, none for the empty one)", f.calls);
    test_scratch_remove(dir);
}

Test(hf_writer, index_is_what_transformers_writes) {
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_hfw");
    const StTensorOut ts[] = {
        {.name = "x\"y", .dtype = ST_F32, .ndim = 1, .shape = {2}},
        {.name = "caf\xc3\xa9", .dtype = ST_BF16, .ndim = 1, .shape = {3}},
        {.name = "emoji\xf0\x9f\x98\x80\x7f\t", .dtype = ST_F32, .ndim = 1, .shape = {1}},
        {.name = "a", .dtype = ST_F32, .ndim = 2, .shape = {1, 2}},
    };
    Fill f = {.specs = ts, .fail_at = -1, .rows_ok = true, .stage_elems = 1 << 20};
    HfSaveOptions o = {.max_shard_bytes = 20}; /* 8 + 6 + 4, then 8 */
    GtError err = {0};
    cr_assert_eq(hf_save(dir, ts, 4, &o, fill_values, &f, &err), 0, "%s", err.msg);
    uint8_t *text;
    size_t len;
    cr_assert_eq(gt_read_input(test_join(dir, "model.safetensors.index.json"), "index", 1 << 20, &text, &len, &err), 0);
    const char *want = "{\n"
                       "  \"metadata\": {\n"
                       "    \"total_size\": 26\n"
                       "  },\n"
                       "  \"weight_map\": {\n"
                       "    \"a\": \"model-00002-of-00002.safetensors\",\n"
                       "    \"caf\\u00e9\": \"model-00001-of-00002.safetensors\",\n"
                       "    \"emoji\\ud83d\\ude00\\u007f\\t\": \"model-00001-of-00002.safetensors\",\n"
                       "    \"x\\\"y\": \"model-00001-of-00002.safetensors\"\n"
                       "  }\n"
                       "}\n";
    cr_expect_str_eq((char *)text, want);
    free(text);
    HfWeights *w = NULL;
    cr_assert_eq(hf_weights_open(&w, dir, &err), 0, "%s", err.msg);
    cr_expect_geq(hf_weights_find(w, "caf\xc3\xa9"), 0);
    cr_expect_geq(hf_weights_find(w, "emoji\xf0\x9f\x98\x80\x7f\t"), 0);
    hf_weights_close(w);
    test_scratch_remove(dir);
}

Test(hf_writer, a_new_save_removes_what_contradicts_it) {
    char dir[256], files[1024];
    test_scratch_make(dir, sizeof dir, "gt_hfw");
    test_write_file(test_join(dir, "config.json"), "{}", 2);
    test_write_file(test_join(dir, "model-00001-of-00009.safetensors.bak"), "x", 1);
    mkdir(test_join(dir, "model-00007-of-00009.safetensors"), 0755); /* a directory is never removed */
    Fill f;
    save_model(dir, 2500, 1 << 20, &f); /* 5 shards */
    save_model(dir, 0, 1 << 20, &f);    /* one: the index and the shards go */
    list_dir(dir, files, sizeof files);
    cr_expect_str_eq(files, "config.json model-00001-of-00009.safetensors.bak model-00007-of-00009.safetensors "
                            "model.safetensors");
    expect_model(dir, 1);
    save_model(dir, 5000, 1 << 20, &f); /* sharded again: model.safetensors would shadow the index */
    list_dir(dir, files, sizeof files);
    cr_expect(strstr(files, "model-00001-of-00003.safetensors") && !strstr(files, "model.safetensors "), "%s", files);
    expect_model(dir, 3);
    save_model(dir, 2500, 1 << 20, &f); /* another split: the 3-shard files go */
    list_dir(dir, files, sizeof files);
    cr_expect(!strstr(files, "-of-00003"), "%s", files);
    expect_model(dir, 5);
    test_scratch_remove(dir);
}

Test(hf_writer, a_failing_fill_leaves_nothing) {
    char dir[256], files[1024];
    test_scratch_make(dir, sizeof dir, "gt_hfw");
    for (int fail = 0; fail < N_MODEL; fail++) {
        if (numel_of(&MODEL[fail]) == 0) continue;
        Fill f = {.specs = MODEL, .fail_at = fail, .rows_ok = true, .stage_elems = 64};
        HfSaveOptions o = {.max_shard_bytes = 2500, .staging_bytes = 256};
        GtError err = {0};
        cr_expect_eq(hf_save(dir, MODEL, N_MODEL, &o, fill_values, &f, &err), -1);
        cr_expect(strstr(err.msg, "failed on purpose"), "%s", err.msg);
        list_dir(dir, files, sizeof files);
        cr_expect_str_eq(files, "", "tensor %d: left behind: %s", fail, files);
    }
    test_scratch_remove(dir);
}

/* a file-size limit (EFBIG, as a full disk): one line naming the file; nothing under a final name,
 * no .tmp, and the previous save untouched */
Test(hf_writer, file_size_limit_leaves_the_previous_save, .timeout = 30) {
    char dir[256], files[1024], before[1024];
    test_scratch_make(dir, sizeof dir, "gt_hfw");
    Fill f;
    save_model(dir, 2500, 1 << 20, &f);
    list_dir(dir, before, sizeof before);
    char errfile[300];
    snprintf(errfile, sizeof errfile, "%s.err", dir);
    for (rlim_t lim = 1000; lim <= 3000; lim += 2000) { /* the first shard fails; the third */
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            signal(SIGXFSZ, SIG_IGN);
            struct rlimit r = {lim, lim};
            if (setrlimit(RLIMIT_FSIZE, &r) != 0) _exit(3);
            Fill g = {.specs = MODEL, .fail_at = -1, .rows_ok = true, .stage_elems = 1 << 18};
            HfSaveOptions o = {.max_shard_bytes = 400}; /* another split: 6 shards */
            GtError err = {0};
            int rc = hf_save(dir, MODEL, N_MODEL, &o, fill_values, &g, &err);
            FILE *e = fopen(errfile, "w");
            if (e) fprintf(e, "%s", err.msg), fclose(e);
            _exit(rc == -1 && err.code == GT_EXIT_FAILURE ? 0 : 1);
        }
        int st;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "limit %llu: hf_save did not fail as expected",
                  (unsigned long long)lim);
        uint8_t *msg;
        size_t len;
        GtError err;
        cr_assert_eq(gt_read_input(errfile, "err", 4096, &msg, &len, &err), 0);
        cr_expect(strstr((char *)msg, "File too large") && strstr((char *)msg, ".safetensors.tmp") &&
                      !strchr((char *)msg, '\n'),
                  "%s", msg);
        free(msg);
        list_dir(dir, files, sizeof files);
        cr_expect_str_eq(files, before);
        expect_model(dir, 5);
    }
    unlink(errfile);
    test_scratch_remove(dir);
}

/* ------------------------------------------------------------------ independent reader */

Test(hf_writer, python_reads_what_we_wrote, .timeout = 120) {
    test_require_refs();
    const char *root = getenv("GTRAIN_ROOT");
    char dir[256], spec[300], cmd[1200];
    test_scratch_make(dir, sizeof dir, "gt_hfw");
    snprintf(spec, sizeof spec, "%s.jsonl", dir);
    const uint64_t maxes[] = {2500, 1000, 5000000000ULL};
    for (size_t m = 0; m < sizeof maxes / sizeof maxes[0]; m++) {
        Fill f;
        save_model(dir, maxes[m], 512, &f);
        FILE *s = fopen(spec, "w");
        cr_assert_not_null(s);
        for (int t = 0; t < N_MODEL; t++) {
            fprintf(s, "{\"name\": \"%s\", \"dtype\": \"%s\", \"shape\": [", MODEL[t].name, st_dtype_name(MODEL[t].dtype));
            for (int k = 0; k < MODEL[t].ndim; k++) fprintf(s, "%s%lld", k ? ", " : "", (long long)MODEL[t].shape[k]);
            fprintf(s, "], \"seed\": %d}\n", t);
        }
        fclose(s);
        snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/hf_shards_check.py' '%s' %llu '%s' 2>&1",
                 root ? root : ".", dir, (unsigned long long)maxes[m], spec);
        FILE *p = popen(cmd, "r");
        cr_assert_not_null(p);
        char out[4096] = "";
        size_t got = fread(out, 1, sizeof out - 1, p);
        out[got] = '\0';
        int st = pclose(p);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "max %llu: %s", (unsigned long long)maxes[m], out);
        cr_expect(strstr(out, "hf_shards_check: ok"), "%s", out);
        cr_log_info("%s", out);
    }
    unlink(spec);
    test_scratch_remove(dir);
}

/* ------------------------------------------------------------------ the run config's keys */

Test(hf_writer, config_keys) {
    RunConfig *c = calloc(1, sizeof *c);
    cr_assert_not_null(c);
    GtError err = {0};
    config_defaults(c);
    cr_expect_str_eq(c->save_max_shard_size, "5GB");
    cr_expect_eq(c->save_dtype, SAVE_DTYPE_AUTO);
    cr_expect_str_eq(config_save_dtype_name(c->save_dtype), "auto");
    const char *ok[] = {"model=m.json", "data.train=t.txt", "save_max_shard_size=10GiB", "save_dtype=bf16"};
    cr_assert_eq(config_load(c, NULL, ok, 4, &err), 0, "%s", err.msg);
    cr_expect_str_eq(c->save_max_shard_size, "10GiB");
    cr_expect_eq(c->save_dtype, SAVE_DTYPE_BF16);
    uint64_t bytes = 0;
    char why[256];
    cr_expect_eq(hf_parse_size(c->save_max_shard_size, &bytes, why, sizeof why), 0);
    cr_expect_eq(bytes, 10ULL << 30);
    const char *bad_size[] = {"model=m.json", "data.train=t.txt", "save_max_shard_size=5Gb"};
    cr_expect_eq(config_load(c, NULL, bad_size, 3, &err), -1);
    cr_expect(strstr(err.msg, "--set save_max_shard_size: expected a size") && strstr(err.msg, "ambiguous") &&
                  err.code == GT_EXIT_BAD_INPUT && !strchr(err.msg, '\n'),
              "%s", err.msg);
    const char *bad_dtype[] = {"model=m.json", "data.train=t.txt", "save_dtype=fp16"};
    cr_expect_eq(config_load(c, NULL, bad_dtype, 3, &err), -1);
    cr_expect(strstr(err.msg, "save_dtype") && strstr(err.msg, "auto, bf16, fp32"), "%s", err.msg);
    /* in a file: file:line:col */
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_hfw");
    const char *yaml = "model: m.json\ndata:\n  train: t.txt\nsave_max_shard_size: 12 XB\n";
    test_write_file(test_join(dir, "run.yaml"), yaml, strlen(yaml));
    cr_expect_eq(config_load(c, test_join(dir, "run.yaml"), NULL, 0, &err), -1);
    cr_expect(strstr(err.msg, "run.yaml:4:22: save_max_shard_size: expected a size") && strstr(err.msg, "\"12 XB\""),
              "%s", err.msg);
    yaml = "model: m.json\ndata:\n  train: t.txt\nsave_max_shard_size: 2000000\n";
    test_write_file(test_join(dir, "run.yaml"), yaml, strlen(yaml));
    cr_expect_eq(config_load(c, test_join(dir, "run.yaml"), NULL, 0, &err), 0, "%s", err.msg);
    cr_expect_str_eq(c->save_max_shard_size, "2000000");
    test_scratch_remove(dir);
    free(c);
}

/* save_dtype: bf16 makes the final weights bf16; the checkpoint a resume reads stays fp32 */
Test(hf_writer, save_dtype_bf16_final_weights_only, .timeout = 120) {
    Ws w;
    ws_init(&w);
    int st = run(&w, NULL, "bf16", "max_steps=2", "save_steps=2", "save_dtype=bf16", NULL);
    expect_exit(&w, "bf16", st, 0);
    const char *files[] = {"model.safetensors", "checkpoint-2/model.safetensors"};
    for (int f = 0; f < 2; f++) {
        HfWeights *hw = NULL;
        GtError err = {0};
        cr_assert_eq(hf_weights_open(&hw, test_join(w.out, files[f]), &err), 0, "%s", err.msg);
        cr_assert_gt(hf_weights_count(hw), 0);
        for (int i = 0; i < hf_weights_count(hw); i++) {
            HfTensorInfo t;
            hf_weights_info(hw, i, &t);
            cr_expect_eq(t.dtype, f == 0 ? ST_BF16 : ST_F32, "%s: %s is %s", files[f], t.name, st_dtype_name(t.dtype));
        }
        hf_weights_close(hw);
    }
    char *cfg = slurp(test_join(w.out, "config.json"), NULL);
    cr_expect(strstr(cfg, "\"torch_dtype\":\t\"bfloat16\"") || strstr(cfg, "\"torch_dtype\": \"bfloat16\""), "%s", cfg);
    free(cfg);
    ws_fini(&w);
}
