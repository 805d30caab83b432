/* test_storage_plan.c - a frozen base stored in its own dtype (lora.base_dtype), suite
 * storage_plan: the run config's key reaches the model description (and a bad value is one line
 * naming the key, exit code 2); the memory plan equals what model_create allocates, category by
 * category, for every base dtype under both act dtypes, recompute and offload; and the categories
 * it changes, computed here from the model's dims alone: the frozen base is its linear weights
 * (the layers' matrices) in the base dtype plus the rest in the act dtype, and the workspace gains
 * one linear weight (the largest) in the act dtype exactly when the two dtypes differ. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "config.h"
#include "lora.h"
#include "lora_fixture.h"
#include "model.h"
#include "plan.h"
#include "test_backend_select.h"

/* the linear weights of d from its dims: [count, largest] */
static void linear_from_dims(const ModelDesc *d, uint64_t *count, uint64_t *largest) {
    const uint64_t C = (uint64_t)d->n_embd, I = (uint64_t)d->n_inner, Q = (uint64_t)d->n_head * d->head_dim,
                   KV = (uint64_t)d->n_kv_head * d->head_dim;
    const bool llama = d->arch == ARCH_LLAMA;
    const uint64_t m[4] = {(Q + 2 * KV) * C, C * Q, (llama ? 2 * I : I) * C, C * I};
    *count = 0, *largest = 0;
    for (int k = 0; k < 4; k++) {
        *count += m[k] * (uint64_t)d->n_layer;
        if (m[k] > *largest) *largest = m[k];
    }
}

Test(storage_plan, planned_equals_measured_for_every_base_dtype, .timeout = 120) {
    const int L = 3, B = 2, T = 8;
    int cases = 0;
    for (int llama = 0; llama <= 1; llama++)
    for (int act = GT_F32; act <= GT_BF16; act++)
    for (int bd = BASE_DTYPE_AUTO; bd <= BASE_DTYPE_BF16; bd++)
    for (int pk = 0; pk < 3; pk++) {
        const GtDtype a = (GtDtype)act;
        const RecomputePolicy pol = recompute_policy(pk > 0, 1, pk == 2, L);
        ModelDesc d = lora_fix_desc(llama, L, 4, 8.0, llama ? LORA_FIX_LLAMA_ALL : LORA_FIX_GPT_ALL, false, 0.1,
                                    LORA_INIT_TRUE);
        ModelDesc dauto = d;
        d.adapter.base_dtype = bd;
        char what[128];
        snprintf(what, sizeof what, "%s act %s base_dtype %d recompute %d", llama ? "llama" : "gpt2", gt_dtype_name(a),
                 bd, pk);
        MemPlan p, pa;
        cr_assert_eq(plan_memory(&p, &d, B, 1, 1, T, pol, false, a), 0, "%s", what);
        cr_assert_eq(plan_memory(&pa, &dauto, B, 1, 1, T, pol, false, a), 0, "%s", what);
        Backend *be = test_backend_open();
        backend_set_act_dtype(be, a);
        Model *m = NULL;
        GtError err = {0};
        cr_assert_eq(model_create(&m, &d, be, B, T, pol, 1, &err), 0, "%s: %s", what, err.msg);
        for (int c = 0; c < MEM_COUNT; c++)
            cr_assert_eq(p.bytes[c], be->mem.peak[c], "%s: %s planned %llu, measured %llu", what,
                         mem_category_name((MemCategory)c), (unsigned long long)p.bytes[c],
                         (unsigned long long)be->mem.peak[c]);
        cr_assert_eq(p.device_total, be->mem.device_peak, "%s", what);

        /* from the dims (the fixtures' vectors have even lengths: no alignment padding) */
        const GtDtype base = bd == BASE_DTYPE_AUTO ? a : bd == BASE_DTYPE_BF16 ? GT_BF16 : GT_F32;
        const uint64_t sa = a == GT_BF16 ? 2 : 4, sb = base == GT_BF16 ? 2 : 4;
        uint64_t nlin, largest;
        linear_from_dims(&d, &nlin, &largest);
        const uint64_t nb = arch_num_params(&d);
        cr_assert_eq(be->mem.peak[MEM_FROZEN], nlin * sb + (nb - nlin) * sa, "%s: frozen %llu, from the dims %llu", what,
                     (unsigned long long)be->mem.peak[MEM_FROZEN], (unsigned long long)(nlin * sb + (nb - nlin) * sa));
        cr_assert_eq(p.base_linear, base, "%s: the plan says the linear weights are %s", what,
                     gt_dtype_name(p.base_linear));
        const uint64_t extra = base != a ? largest * sa : 0;
        cr_assert_eq(p.bytes[MEM_WORKSPACE], pa.bytes[MEM_WORKSPACE] + extra, "%s: workspace %llu, auto's %llu + %llu",
                     what, (unsigned long long)p.bytes[MEM_WORKSPACE], (unsigned long long)pa.bytes[MEM_WORKSPACE],
                     (unsigned long long)extra);
        for (int c = 0; c < MEM_COUNT; c++)
            if (c != MEM_FROZEN && c != MEM_WORKSPACE)
                cr_assert_eq(p.bytes[c], pa.bytes[c], "%s: %s changed with the base's dtype", what,
                             mem_category_name((MemCategory)c));
        model_free(m);
        for (int c = 0; c < MEM_COUNT; c++)
            cr_assert_eq(be->mem.current[c], 0, "%s: leaked %s", what, mem_category_name((MemCategory)c));
        backend_close(be);
        cases++;
    }
    cr_log_info("storage plan: %d configurations, planned == measured", cases);
}

/* plan_print names the base's storage when it is not the act dtype, and says what it said before
 * otherwise */
Test(storage_plan, the_plan_names_the_base_storage) {
    ModelDesc d = lora_fix_desc(true, 2, 4, 8.0, LORA_FIX_LLAMA_ALL, false, 0.0, LORA_INIT_TRUE);
    for (int bd = BASE_DTYPE_AUTO; bd <= BASE_DTYPE_BF16; bd++) {
        d.adapter.base_dtype = bd;
        MemPlan p;
        cr_assert_eq(plan_memory(&p, &d, 1, 1, 1, 8, recompute_policy(false, 1, false, 2), false, GT_F32), 0);
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        cr_assert_not_null(f);
        plan_print(&p, NULL, f);
        fclose(f);
        if (bd == BASE_DTYPE_BF16)
            cr_assert(strstr(buf, "frozen (linear weights bf16, converted to fp32 for each matrix multiply; the rest fp32; "
                                  "once)"), "%s", buf);
        else
            cr_assert(strstr(buf, "frozen (fp32, once)"), "base_dtype %d: %s", bd, buf);
        free(buf);
    }
}

static const char *write_yaml(char *path, size_t cap, const char *text) {
    snprintf(path, cap, "/tmp/gtrain-storage-XXXXXX");
    const int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

/* lora.base_dtype: auto by default, fp32 and bf16 reach the description through lora_configure; a
 * value it does not know is refused by the config reader with the key, the values it takes and
 * what it found, code 2 */
Test(storage_plan, lora_base_dtype_reaches_the_description_and_a_bad_value_is_refused) {
    const char *vals[3] = {NULL, "fp32", "bf16"};
    const int want[3] = {BASE_DTYPE_AUTO, BASE_DTYPE_FP32, BASE_DTYPE_BF16};
    char path[64];
    for (int k = 0; k < 3; k++) {
        char text[256];
        snprintf(text, sizeof text, "model: m\ndata:\n  train: t\noutput_dir: o\nlora:\n  r: 4\n%s%s\n", vals[k] ? "  base_dtype: " : "",
                 vals[k] ? vals[k] : "");
        write_yaml(path, sizeof path, text);
        RunConfig *cfg = calloc(1, sizeof *cfg);
        GtError err = {0};
        cr_assert_eq(config_load(cfg, path, NULL, 0, &err), 0, "%s", err.msg);
        unlink(path);
        ModelDesc d = lora_fix_base(true, 2);
        d.adapter.base_dtype = 99; /* lora_configure sets it */
        PeftConfig pc;
        cr_assert_eq(lora_configure(&d, &pc, cfg, &err), 0, "%s", err.msg);
        cr_assert_eq(d.adapter.r, 4);
        cr_assert_eq(d.adapter.base_dtype, want[k], "base_dtype %s: %d", vals[k] ? vals[k] : "(default)", d.adapter.base_dtype);
        free(cfg);
    }
    write_yaml(path, sizeof path, "model: m\ndata:\n  train: t\noutput_dir: o\nlora:\n  r: 4\n  base_dtype: fp16\n");
    RunConfig *cfg = calloc(1, sizeof *cfg);
    GtError err = {0};
    cr_assert_eq(config_load(cfg, path, NULL, 0, &err), -1);
    unlink(path);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT, "code %d", err.code);
    cr_assert(strstr(err.msg, "lora.base_dtype") && strstr(err.msg, "fp16") && strstr(err.msg, "bf16") &&
              !strchr(err.msg, '\n'), "%s", err.msg);
    free(cfg);
}
