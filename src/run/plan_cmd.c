/* plan_cmd.c - `gtrain plan`: the model, the trainable parameters, the resolved config with
 * auto-fit's choices, the effective batch and the memory plan (plan.h), the packed data's rows;
 * nothing allocated for the model. Exit 2 when the plan does not fit its limit (printed first). */
#include <string.h>

#include "arch.h"
#include "backend.h"
#include "lora.h"
#include "plan.h"
#include "recompute.h"
#include "run_cmd.h"
#include "trainer.h"

/* n with thousands separators: 41,943,040 */
static const char *group_digits(char *buf, size_t cap, uint64_t n) {
    char d[32];
    int len = snprintf(d, sizeof d, "%llu", (unsigned long long)n), o = 0;
    for (int i = 0; i < len && o + 2 < (int)cap; i++) {
        if (i && (len - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = d[i];
    }
    buf[o] = '\0';
    return buf;
}

static void print_adapter(const RunInputs *r) {
    const ModelDesc *desc = &r->desc;
    const RunConfig *cfg = r->cfg;
    const uint64_t n = lora_num_params(desc), total = model_desc_num_params(desc);
    char grouped[40];
    printf("trainable parameters: %llu (%s; %s r %d, lora_alpha %g, scale %g, init %s), %.4f%% of %llu; the "
           "base is frozen\n", (unsigned long long)n, group_digits(grouped, sizeof grouped, n),
           desc->adapter.dora ? "DoRA" : "LoRA", r->peft.r, r->peft.lora_alpha, desc->adapter.scale,
           cfg->lora.init_from[0] ? cfg->lora.init_from : r->peft.init, 100.0 * (double)n / (double)total,
           (unsigned long long)total);
    printf("target modules:");
    for (int i = 0; i < r->peft.n_targets; i++) printf(" %s", r->peft.target_modules[i]);
    printf("\n");
    const int niter = cfg->lora.init_from[0] ? -2 : lora_pissa_niter_of(cfg->lora.init_lora_weights);
    if (niter != -2) {
        char b[32];
        printf("PiSSA initialisation (%s): on the host before step 1, a block at a time, about %s at its "
               "peak, freed before training\n", niter < 0 ? "exact SVD" : "randomised SVD",
               gt_format_bytes(b, sizeof b, lora_pissa_host_bytes(desc, niter)));
    }
}

/* memory_limit auto: on the CPU, the RAM available now (what a run would check); a GPU's free
 * memory is read only by a run (asking the driver costs a context), so no limit here */
static uint64_t memory_limit(const RunConfig *cfg) {
    uint64_t limit = cfg->memory_limit;
    const bool on_cpu = cfg->device == DEVICE_CPU || (cfg->device == DEVICE_AUTO && backend_gpu_count() == 0);
    if (!limit && on_cpu) {
        Backend *cpu = NULL;
        GtError err = {0};
        if (cpu_backend_create(&cpu, 1, &err) == 0) {
            limit = cpu->device_free_bytes;
            backend_close(cpu);
        }
    }
    char lim[32];
    if (limit)
        printf("memory limit: %s (%s)\n", gt_format_bytes(lim, sizeof lim, limit),
               cfg->memory_limit ? "memory_limit" : "available RAM");
    else
        printf("memory limit: none here (memory_limit auto: a run on the GPU checks its free memory at start, less "
               "the runtime_reserve it prints)\n");
    return limit;
}

int plan_command(CliArgs *a) {
    RunInputs r;
    int rc = run_inputs_load(&r, a, true);
    if (rc) return rc;
    const ModelDesc *desc = &r.desc;
    RunConfig *cfg = r.cfg;
    printf("model: %s (%s), %d layers, hidden %d, %d heads (%d kv), vocab %d\n", desc->model_type, arch_hf_class(desc),
           desc->n_layer, desc->n_embd, desc->n_head, desc->n_kv_head, desc->vocab_size);
    printf("parameters: %llu\n", (unsigned long long)model_desc_num_params(desc));
    if (desc->adapter.r > 0) print_adapter(&r);
    const uint64_t limit = memory_limit(cfg);
    MemPlan plan;
    memset(&plan, 0, sizeof plan);
    GtError err = {0};
    const int refused = plan_resolve(&plan, desc, cfg, 1, limit, &err);
    if (!refused) /* the resolved table shows auto-fit's choices */
        config_set_fitted(cfg, plan.B, plan.A, plan.policy.every_n > 0, plan.policy.every_n > 0 ? plan.policy.every_n : 1,
                          plan.policy.offload);
    config_print_resolved(cfg, stdout);
    if (refused) {
        if (plan.B > 0 && !plan.overflow) { /* the plan that was refused: where the bytes would go */
            printf("the plan that does not fit:\n");
            plan_print(&plan, NULL, stdout);
        }
        rc = cli_fail(&err);
    } else {
        printf("effective batch size = %d x %d x %d = %ld (per_device_train_batch_size x world x "
               "gradient_accumulation_steps)\n", plan.B, plan.world, plan.A, plan.effective_batch);
        printf("tokens per optimizer step: %ld\n", plan.tokens_per_step);
        char layout[96];
        printf("layout: micro-batch %d x accumulation %d, recompute %s\n", plan.B, plan.A,
               recompute_describe(&plan.policy, layout, sizeof layout));
        plan_print(&plan, NULL, stdout);
        /* packed data: how many rows the examples pack into and the padding left (reads the data) */
        if (cfg->data.packing && cfg->data.format == DATA_JSONL && trainer_plan_data(cfg, desc, &err)) rc = cli_fail(&err);
    }
    run_inputs_free(&r);
    return rc;
}
