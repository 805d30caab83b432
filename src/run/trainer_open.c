/* trainer_open.c - a training run opened: backend and collectives, the memory plan, tokenizer and
 * data, the model and its initial weights, output_dir claimed (its lock, the run it holds, resume
 * from a checkpoint, in two phases so that a refused run changes nothing), the resolved config,
 * the adapters' initialisation. See trainer_internal.h. */
#include "trainer_internal.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "adapter.h"
#include "eval.h"
#include "lora.h"
#include "scorers.h"

/* ---------------------------------------------------------------- output_dir ownership */

/* What makes two runs the same run: the model, the data, its order and the seed (gtrain_run.json's "run"). */
static char *run_identity(const Trainer *t) {
    cJSON *j = cJSON_CreateObject();
    const ModelDesc *d = t->desc;
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)t->cfg->seed);
    cJSON_AddStringToObject(j, "seed", seed);
    cJSON_AddStringToObject(j, "train", t->cfg->data.train);
    if (t->cfg->init_from[0]) cJSON_AddStringToObject(j, "init_from", t->cfg->init_from); /* absent when random, as before */
    if (!t->cfg->data.shuffle) cJSON_AddFalseToObject(j, "shuffle"); /* file order (absent when shuffled, as before) */
    cJSON_AddNumberToObject(j, "n_layer", d->n_layer);
    cJSON_AddNumberToObject(j, "n_head", d->n_head);
    cJSON_AddNumberToObject(j, "n_embd", d->n_embd);
    cJSON_AddNumberToObject(j, "vocab_size", d->vocab_size);
    cJSON_AddNumberToObject(j, "effective_batch", (double)t->plan.effective_batch);
    if (d->adapter.r > 0) { /* a LoRA run: its adapters' shape and initialisation too (absent otherwise, as before) */
        cJSON_AddNumberToObject(j, "lora_r", d->adapter.r);
        cJSON_AddNumberToObject(j, "lora_targets", d->adapter.targets);
        cJSON_AddStringToObject(j, "lora_init", t->cfg->lora.init_from[0] ? t->cfg->lora.init_from : t->cfg->lora.init_lora_weights);
    }
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

static int record_events(void *rundir, const char *file_name, GtError *err) {
    return rundir_record_events(rundir, file_name, err);
}

/* output_dir and resume, in two phases so that a refused run changes nothing: first everything is
 * read and checked (the directory's lock taken, its run identified, the checkpoint to resume from
 * loaded and validated, the checkpoints a save would replace looked for); then the directory is
 * written (an earlier run wiped on overwrite, abandoned later checkpoints removed, metrics cut
 * back, this run's identity recorded). */
static int claim_output_dir(Trainer *t, GtError *err) {
    const RunConfig *cfg = t->cfg;
    const char *rf = cfg->resume_from_checkpoint;
    const ResumeMode rm = config_resume_mode(cfg);
    const bool overwrite = cfg->overwrite_output_dir;
    bool resuming = rm != RESUME_NEVER, restart = false;
    char *identity = run_identity(t);
    int rc = -1;
    if (rundir_open(&t->rundir, cfg->config_path, cfg->output_dir, t->rank == 0, err)) goto out;
    const bool same_run = rundir_holds(t->rundir, identity);
    char dir[GT_PATH_MAX];
    dir[0] = '\0';
    if (rm == RESUME_AUTO && overwrite) {
        resuming = false; /* as HF's scripts: overwrite_output_dir ignores the checkpoints there */
    } else if (rm == RESUME_AUTO) {
        /* auto: this run's latest complete checkpoint when output_dir holds this run; else fresh
         * (rundir_check refuses a different run, naming what differs) */
        long at = -1;
        GtError none = {0};
        if (same_run && rundir_latest(t->rundir, dir, sizeof dir, &at, &none) == 0) {
            gt_log("resume_from_checkpoint: auto: %s holds this run; resuming from its latest checkpoint, %s\n",
                   cfg->output_dir, dir);
        } else if (same_run && !overwrite && rundir_has_weights(t->rundir)) {
            gt_error(err, GT_EXIT_BAD_INPUT,
                     "%s: output_dir: %s holds this run, finished (its weights are there) with no checkpoint to "
                     "resume from; expected an empty directory: choose a new output_dir (overwrite_output_dir: true "
                     "would DELETE those weights)",
                     cfg->config_path, cfg->output_dir);
            goto out;
        } else {
            resuming = false;
            restart = same_run; /* this run, killed before its first checkpoint: started again */
            if (restart) gt_log("resume_from_checkpoint: auto: %s holds this run with no complete checkpoint; "
                                "starting it again from step 0\n", cfg->output_dir);
        }
    }
    if (t->rank == 0 && rundir_check(t->rundir, identity, resuming || restart, overwrite, err)) goto out;
    long resumed_at = -1;
    if (resuming) {
        if (dir[0]) {
            /* auto found it */
        } else if (rm == RESUME_LATEST) {
            if (rundir_latest(t->rundir, dir, sizeof dir, NULL, err)) goto out;
        } else {
            snprintf(dir, sizeof dir, "%s", rf);
        }
        TrainerState st;
        if (checkpoint_load(dir, t->model, &st, err)) goto out;
        if (st.effective_batch != t->state.effective_batch || st.world_size != t->world || st.seed != cfg->seed) {
            gt_error(err, GT_EXIT_BAD_INPUT,
                     "%s/trainer_state.json: expected effective batch %ld, world size %d, seed %llu as this run; "
                     "found %ld, %d, %llu (exact resume needs the same)",
                     dir, t->state.effective_batch, t->world, (unsigned long long)cfg->seed, st.effective_batch,
                     st.world_size, (unsigned long long)st.seed);
            goto out;
        }
        if (st.global_step >= t->state.max_steps) {
            gt_error(err, GT_EXIT_BAD_INPUT,
                     "%s: max_steps: expected more than the %ld steps %s already holds, found %ld (nothing to train; "
                     "raise max_steps or num_train_epochs to continue%s)",
                     cfg->config_path, st.global_step, dir, t->state.max_steps,
                     rm == RESUME_AUTO ? "; resume_from_checkpoint: auto found it: for a new run, choose a new "
                                               "output_dir" : "");
            goto out;
        }
        int later = same_run ? rundir_count_after(t->rundir, st.global_step) : 0;
        if (t->rank == 0 && later && !overwrite) {
            gt_error(err, GT_EXIT_BAD_INPUT,
                     "%s: resume_from_checkpoint: %s is step %ld, but %s holds %d later checkpoint%s of this run; "
                     "expected the latest (resume_from_checkpoint: latest), or overwrite_output_dir: true to discard "
                     "the later ones",
                     cfg->config_path, dir, st.global_step, cfg->output_dir, later, later == 1 ? "" : "s");
            goto out;
        }
        t->state.global_step = st.global_step;
        t->state.epoch = st.epoch;
        t->state.skipped_steps = st.skipped_steps;
        t->state.empty_steps = st.empty_steps;
        t->state.adam_t = st.adam_t;
        resumed_at = st.global_step;
        snprintf(t->resumed_from, sizeof t->resumed_from, "%s", dir);
        gt_log("resumed from %s at step %ld\n", dir, st.global_step);
    }
    t->start_step = t->state.global_step;
    if (t->rank == 0) {
        const bool keep = resuming && same_run; /* continue this directory's run */
        long foreign = cfg->save_steps > 0
                           ? rundir_foreign_checkpoint(t->rundir, t->start_step, t->state.max_steps, cfg->save_steps)
                           : -1;
        if (foreign >= 0) {
            gt_error(err, GT_EXIT_BAD_INPUT,
                     "%s: output_dir: %s/checkpoint-%ld is not this run's, and saving step %ld would replace it; "
                     "expected no such directory (move it away, or use another output_dir)",
                     cfg->config_path, cfg->output_dir, foreign, foreign);
            goto out;
        }
        /* phase 2: write */
        if (rundir_commit(t->rundir, identity, (overwrite || restart) && !keep, keep ? resumed_at : -1, err)) goto out;
        if (keep && metrics_prune(cfg->output_dir, t->state.global_step, err)) goto out;
        if (!(t->metrics = metrics_open(cfg->output_dir, keep, err))) goto out;
        GtError tberr = {0};
        if (tboard_open_recorded(&t->tb, cfg->output_dir, record_events, t->rundir, &tberr))
            gt_warn("%s (no TensorBoard events)\n", tberr.msg);
    }
    rc = 0;
out:
    free(identity);
    return rc;
}

/* output_dir/resolved_config.yaml: every key's final value, auto-fit's layout included */
static int write_resolved_config(const Trainer *t, GtError *err) {
    RunConfig *c = gt_xmalloc(sizeof *c);
    *c = *t->cfg;
    const RecomputePolicy *p = &t->plan.policy;
    config_set_fitted(c, t->plan.B, t->plan.A, p->every_n > 0, p->every_n > 0 ? p->every_n : 1, p->offload);
    char path[GT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", c->output_dir, CONFIG_RESOLVED_FILE);
    int rc = config_write_resolved(c, path, err);
    if (rc == 0) gt_log("resolved config: %s\n", path);
    free(c);
    return rc;
}

/* A fresh LoRA run's PiSSA adapters, from the loaded base (lora.init_from's are loaded before
 * output_dir is claimed; the others are model_create's). Every rank computes the same; rank 0
 * writes the initial adapter. */
static int init_adapters(Trainer *t, GtError *err) {
    const RunConfig *cfg = t->cfg;
    Model *m = t->model;
    if (cfg->lora.init_from[0]) return 0; /* loaded before output_dir was claimed (open_run) */
    if (adapter_init_from_base(m, err)) return -1; /* DoRA's magnitude from the loaded base (not with PiSSA) */
    const int niter = lora_pissa_niter_of(cfg->lora.init_lora_weights);
    if (niter == -2) return 0;
    double t0 = gt_now_seconds();
    if (lora_pissa_init(m, niter, cfg->seed, t->rank == 0, err)) return -1;
    gt_log("adapters: PiSSA (%s) from the %s in %.1f s; initial adapter in %s\n",
           niter < 0 ? "exact SVD" : "randomised SVD",
           !m->desc.quant.nf4      ? "base weights"
           : lora_qpissa_made(m)   ? "full-precision weights as they loaded, the residual quantized (QPiSSA)"
                                   : "dequantized 4-bit base, the residual quantized again",
           gt_now_seconds() - t0, m->ad.pissa_init_dir);
    return 0;
}

/* The splits of the run's data: a text file with val_fraction and no val file splits itself;
 * returns the val path ("" for none). */
const char *trainer_data_splits(const RunConfig *cfg, int *split_train, int *split_val) {
    *split_train = *split_val = DATA_SPLIT_ALL;
    if (!cfg->data.val[0] && cfg->data.format == DATA_TEXT && cfg->data.val_fraction > 0) {
        *split_train = DATA_SPLIT_TRAIN, *split_val = DATA_SPLIT_VAL;
        return cfg->data.train;
    }
    return cfg->data.val;
}

void trainer_data_text(const RunConfig *cfg, const Tokenizer *tok, DataText *out) {
    *out = (DataText){.tok = tok, .prompt_template = cfg->data.prompt_template,
                      .completion_template = cfg->data.completion_template, .add_eos = cfg->data.add_eos,
                      .eos_id = tok ? tokenizer_eos_id(tok) : -1, .col_text = cfg->data.columns.text,
                      .col_prompt = cfg->data.columns.prompt, .col_completion = cfg->data.columns.completion,
                      .col_messages = cfg->data.columns.messages, .chat_template = cfg->data.chat_template,
                      .assistant_only_loss = cfg->data.assistant_only_loss};
}
static DataText data_text(const RunConfig *cfg, const Tokenizer *tok) {
    DataText t;
    trainer_data_text(cfg, tok, &t);
    return t;
}

int trainer_plan_data(const RunConfig *cfg, const ModelDesc *desc, GtError *err) {
    int split_train, split_val;
    trainer_data_splits(cfg, &split_train, &split_val);
    Tokenizer *tok = NULL;
    DataSource *train = NULL;
    if (tokenizer_load_for_model(&tok, cfg->tokenizer, cfg->model, err)) return -1;
    const DataText text = data_text(cfg, tok);
    int rc = data_open_text(&train, cfg->data.train, cfg->data.format, cfg->data.packing, cfg->data.seq_len,
                            desc->vocab_size, split_train, cfg->data.val_fraction, &text, err);
    if (rc == 0) trainer_log_data(split_train == DATA_SPLIT_TRAIN ? "train split of" : "train", cfg->data.train, train);
    data_close(train);
    tokenizer_free(tok);
    return rc;
}

/* generation.task (rank 0): the task's prompts read now (bad input refused before anything is
 * written), and a KV cache of generation.batch_size rows (auto: as many as fit beside the plan, at
 * most the prompts, 256 and the model's tokens per call) counted in the plan's kv_cache line; made
 * once the model is (trainer_open). */
static int open_generation(Trainer *t, uint64_t limit, int *slots, GtError *err) {
    const RunConfig *cfg = t->cfg;
    const ModelDesc *desc = t->desc;
    struct stat sb;
    const char *model_dir = cfg->init_from[0] ? cfg->init_from : cfg->model;
    if (stat(model_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) model_dir = NULL;
    if (eval_gen_open(&t->gen, cfg, desc, t->tokenizer, model_dir, desc->n_positions, err)) return -1;
    const int ctx = eval_gen_ctx(t->gen), per_call = t->plan.B * cfg->data.seq_len;
    const long n = eval_gen_count(t->gen);
    long most = n < 256 ? n : 256;
    if (most > per_call) most = per_call;
    *slots = cfg->generation.batch_size;
    const uint64_t room = limit > t->plan.device_total ? limit - t->plan.device_total : 0;
    if (*slots == 0) {
        while (most > 1 && kv_cache_bytes(desc, (int)most, ctx, t->plan.act) > room) most /= 2;
        *slots = (int)most;
    }
    if (*slots > per_call)
        return config_key_error(cfg, "generation.batch_size", err,
                                "expected at most the training model's tokens per call (per_device_train_batch_size x "
                                "data.seq_len), found more");
    const uint64_t kv = kv_cache_bytes(desc, *slots, ctx, t->plan.act);
    if (kv == UINT64_MAX || kv > room) {
        char a[32], b[32];
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: generation.batch_size %d: the KV cache of %d rows x %d positions "
                        "needs %s, and %s is left beside the training plan; expected fewer rows (or a lower "
                        "memory use)", cfg->config_path, *slots, *slots, ctx, gt_format_bytes(a, sizeof a, kv),
                        gt_format_bytes(b, sizeof b, room));
    }
    t->plan.bytes[MEM_KV_CACHE] += kv;
    t->plan.device_total += kv;
    gt_log("generation: %s, %ld prompts from %s, %d rows at once over %d positions, at most %d new tokens, at each "
           "eval\n", gen_task_name((GenTask)cfg->generation.task), n, cfg->generation.data, *slots, ctx,
           cfg->generation.max_new_tokens);
    return 0;
}

/* The step buffers, as plan_step_batch_bytes plans them (host_staging): one allocation carved into
 * tok[2], tgt[2], pos[2] (data.packing) of A x B x T ints each, then the A x B x T losses. */
static int alloc_step_buffers(Trainer *t, GtError *err) {
    const bool packing = t->cfg->data.packing;
    const size_t n = (size_t)t->plan.B * t->plan.A * t->cfg->data.seq_len;
    t->step_mem_bytes = (size_t)plan_step_batch_bytes(t->plan.B, t->plan.A, t->cfg->data.seq_len, packing);
    t->step_mem = backend_alloc(t->be, MEM_HOST_STAGING, t->step_mem_bytes, err);
    if (!t->step_mem) return -1;
    int *p = t->step_mem;
    for (int s = 0; s < 2; s++) {
        t->tok_buf[s] = p, p += n;
        t->tgt_buf[s] = p, p += n;
        if (packing) t->pos_buf[s] = p, p += n;
    }
    t->losses = (float *)p;
    return 0;
}

int trainer_open(Trainer *t, TrainSummary *summary, GtError *err) {
    const RunConfig *cfg = t->cfg;
    const ModelDesc *desc = t->desc;
    if (backend_open(&t->be, cfg->device, dist_local_rank(t->dist), cfg->num_threads, err)) return -1;
    if (dist_comm_open(&t->comm, t->dist, t->be, cfg->dist_init_file, cfg->dist_timeout,
                       cfg->ddp_grad_dtype == PREC_BF16, cfg->config_path, err))
        return -1;
    backend_set_act_dtype(t->be, plan_act_dtype(cfg->precision));
    if (cfg->precision == PREC_BF16 && !(t->be->ops->caps & GT_CAP_NATIVE_BF16) && t->rank == 0)
        gt_warn("precision: bf16 on the cpu backend rounds activations as the GPU does, for checking: it is slower "
                "than fp32 there\n");
    uint64_t limit = cfg->memory_limit ? cfg->memory_limit : backend_auto_limit(t->be);
    if (!cfg->memory_limit && t->be->runtime_reserve && t->rank == 0) {
        char a[32], b[32], c[32];
        gt_log("memory_limit auto: %s free on the device at start - %s runtime_reserve = %s for the plan\n",
               gt_format_bytes(a, sizeof a, t->be->device_free_bytes), gt_format_bytes(b, sizeof b, t->be->runtime_reserve),
               gt_format_bytes(c, sizeof c, limit));
    }
    const int refused = plan_resolve(&t->plan, desc, cfg, t->world, limit, err);
    t->plan.runtime_reserve = t->be->runtime_reserve;
    snprintf(t->plan.runtime_reserve_what, sizeof t->plan.runtime_reserve_what, "%s", t->be->runtime_reserve_what);
    if (refused) {
        if (t->rank == 0 && !t->plan.overflow) plan_print(&t->plan, NULL, stdout); /* an overflowed plan shows nothing true */
        return -1;
    }
    const int T = cfg->data.seq_len;
    gt_log("gtrain: device %s\n", t->be->device_name);
    gt_log("model: %s (%s), %d layers, %d heads (%d kv), %d wide, vocab %d, %llu parameters\n", desc->model_type,
           arch_hf_class(desc), desc->n_layer, desc->n_head, desc->n_kv_head, desc->n_embd, desc->vocab_size,
           (unsigned long long)t->plan.n_params);
    gt_log("effective batch size = %d x %d x %d = %ld (per_device_train_batch_size x world x "
           "gradient_accumulation_steps), %ld tokens per step, loss normalised by %s\n",
           t->plan.B, t->world, t->plan.A, t->plan.effective_batch, t->plan.tokens_per_step,
           cfg->loss_normalization == LOSS_NORM_TOKENS ? "the step's token count (num_items_in_batch)"
                                                       : "micro-batch mean / accumulation steps");

    int split_train, split_val;
    const char *val_path = trainer_data_splits(cfg, &split_train, &split_val);
    if (tokenizer_load_for_model(&t->tokenizer, cfg->tokenizer, cfg->model, err)) return -1;
    if (t->tokenizer) {
        char sl[600];
        gt_log("tokenizer: %s, %d tokens\n", tokenizer_path(t->tokenizer), tokenizer_vocab_size(t->tokenizer));
        gt_log("%s\n", tokenizer_special_line(t->tokenizer, sl, sizeof sl));
        if (tokenizer_vocab_size(t->tokenizer) > desc->vocab_size)
            gt_warn("tokenizer %s has %d tokens, the model's vocab_size is %d: data with the larger ids will be refused\n",
                    tokenizer_path(t->tokenizer), tokenizer_vocab_size(t->tokenizer), desc->vocab_size);
    }
    const DataText text = data_text(cfg, t->tokenizer);
    if (data_open_text(&t->train, cfg->data.train, cfg->data.format, cfg->data.packing, T, desc->vocab_size,
                       split_train, cfg->data.val_fraction, &text, err))
        return -1;
    if (val_path[0] &&
        data_open_text(&t->val, val_path, cfg->data.format, cfg->data.packing, T, desc->vocab_size, split_val,
                       cfg->data.val_fraction, &text, err))
        return -1;
    if (data_packed(t->train) && !(t->be->ops->caps & GT_CAP_POSITIONS))
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: data.packing: true needs per-token positions, which the %s backend does not have yet; "
                        "expected data.packing: false on it", cfg->config_path, t->be->ops->name);
    trainer_log_data(split_train == DATA_SPLIT_TRAIN ? "train split of" : "train", cfg->data.train, t->train);
    if (t->val) trainer_log_data(split_val == DATA_SPLIT_VAL ? "val split of" : "val", val_path, t->val);

    int gen_slots = 0;
    if (cfg->generation.task && t->rank == 0 && open_generation(t, limit, &gen_slots, err)) return -1;
    int shards = t->plan.zero1 ? t->world : 1;
    if (model_create_sharded(&t->model, desc, t->be, t->plan.B, T, t->plan.policy, cfg->seed, shards,
                             shards > 1 ? t->rank : 0, t->plan.logits_rows, err)) {
        /* the plan fitted, so something else took the memory: show the plan and what would help */
        if (t->rank == 0) plan_print(&t->plan, NULL, stdout);
        char need[32], msg[GT_ERR_MAX + 400];
        snprintf(msg, sizeof msg, "%.600s; the plan needs %s in all: free memory held by other processes, or lower "
                 "per_device_train_batch_size (raising gradient_accumulation_steps), or set gradient_checkpointing "
                 "(and offload), or set memory_limit to what is really free",
                 err->msg, gt_format_bytes(need, sizeof need, t->plan.device_total));
        return gt_error(err, GT_EXIT_FAILURE, "%s", msg);
    }
    /* ddp_grad_dtype bf16: the gradients' bf16 copy (the plan's grads include it) */
    if (dist_comm_grads(t->comm, model_grads(t->model), model_shard(t->model).padded_total, err)) return -1;
    if (t->gen && kv_cache_create(&t->kv, t->model, gen_slots, eval_gen_ctx(t->gen), err)) return -1;
    if (alloc_step_buffers(t, err)) return -1;
    if (t->rank == 0) {
        plan_print(&t->plan, &t->be->mem, stdout);
        uint64_t free_b = 0, total_b = 0;
        t->be->ops->memory_info(t->be, &free_b, &total_b);
        char a[32], b[32];
        if (total_b)
            gt_log("  %s's view: %s in use of %s (the process's own buffers, the runtime's and other processes')\n",
                   t->be->ops->caps & GT_CAP_DRIVER_MEM_VIEW ? "driver" : "system", gt_format_bytes(a, sizeof a, total_b - free_b),
                   gt_format_bytes(b, sizeof b, total_b));
    }
    /* model: a Hugging Face model directory brings its weights, unless init_from names others or
     * init is random (model: DIR/config.json takes the architecture alone: random init); config.c
     * refused a directory without weights unless init: random */
    struct stat isb;
    const bool model_dir = stat(cfg->model, &isb) == 0 && S_ISDIR(isb.st_mode);
    const char *init = cfg->init == INIT_RANDOM ? "" : cfg->init_from[0] ? cfg->init_from : model_dir ? cfg->model : "";
    /* QPiSSA (PiSSA on a 4-bit base): the SVD on the full-precision W as each unit loads, the residual
     * quantized (lora_qpissa_arm); a run that resumes rebuilds that residual from its checkpoint
     * instead (below), so with resume_from_checkpoint latest or a path the hook waits for that */
    const int pniter = lora_pissa_niter_of(cfg->lora.init_lora_weights);
    const bool qpissa = desc->adapter.r > 0 && desc->quant.nf4 && pniter != -2 && !cfg->lora.init_from[0] && init[0];
    const ResumeMode rm = config_resume_mode(cfg);
    if (qpissa && rm != RESUME_LATEST && rm != RESUME_PATH && lora_qpissa_arm(t->model, pniter, cfg->seed, NULL, err))
        return -1;
    if (init[0]) {
        WeightsLoadInfo wi;
        const int lrc = checkpoint_load_weights_info(t->model, init, &wi, err);
        lora_qpissa_disarm(t->model);
        if (lrc) return -1;
        gt_log("weights: initialised from %s: %d tensors, %llu parameters, %s, %d file%s\n", wi.path, wi.n_tensors,
               (unsigned long long)wi.n_values, wi.dtypes, wi.n_shards, wi.n_shards == 1 ? "" : "s");
    } else {
        gt_log("weights: random init (seed %llu; %s)%s\n", (unsigned long long)cfg->seed,
               cfg->init == INIT_RANDOM ? "init: random" : "model is a config.json file, no init_from",
               cfg->resume_from_checkpoint[0] ? ", replaced by the checkpoint's if the run resumes" : "");
    }
    model_set_dropout_run(t->model, cfg->seed, t->rank); /* dropout's rows of the step's batch (trainer_accumulate) */
    if (desc->adapter.r > 0) { /* the adapter files' config; a PiSSA run's initial adapter goes to output_dir/pissa_init */
        char dir[GT_PATH_MAX + 32];
        snprintf(dir, sizeof dir, "%s/%s", cfg->output_dir, RUNDIR_PISSA_INIT);
        lora_set_run(t->model, t->peft, lora_pissa_niter_of(cfg->lora.init_lora_weights) != -2 ? dir : NULL);
    }

    long max_steps = cfg->max_steps;
    if (max_steps <= 0) {
        double steps = ceil(cfg->num_train_epochs * data_rows_per_epoch(t->train) / (double)t->plan.effective_batch);
        if (!(steps <= 2147483647.0)) /* AdamW's step counter is an int (and NaN compares false) */
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: num_train_epochs: expected at most 2147483647 optimizer steps, found %.3g x %.0f rows / "
                            "effective batch %ld = %.3g steps",
                            cfg->config_path, cfg->num_train_epochs, data_rows_per_epoch(t->train),
                            t->plan.effective_batch, steps);
        max_steps = steps < 1 ? 1 : (long)steps;
    }
    t->state = (TrainerState){.max_steps = max_steps, .seed = cfg->seed, .effective_batch = t->plan.effective_batch,
                              .world_size = t->world, .per_device_train_batch_size = t->plan.B,
                              .gradient_accumulation_steps = t->plan.A};

    /* lora.init_from is read and checked before output_dir is claimed: a refused adapter leaves the
     * directory as it was (a resumed run's adapters are its checkpoint's: with auto, the checkpoint's
     * replace these when it finds one) */
    if (desc->adapter.r > 0 && cfg->lora.init_from[0] && (rm == RESUME_NEVER || rm == RESUME_AUTO)) {
        if (lora_load_adapter(t->model, cfg->lora.init_from, err)) return -1;
        gt_log("adapters: continued from %s\n", cfg->lora.init_from);
    }
    if (claim_output_dir(t, err)) return -1;
    if (t->rank == 0 && write_resolved_config(t, err)) return -1;
    /* a resumed run's adapters (and a PiSSA run's residual base) are the checkpoint's, checkpoint-0 included:
     * initialising them again would take PiSSA's SVD of the residual base */
    if (desc->adapter.r > 0 && !t->resumed_from[0] && init_adapters(t, err)) return -1;
    if (qpissa && t->resumed_from[0]) { /* the 4-bit residual from the full-precision W and the checkpoint's B0 A0 */
        if (lora_qpissa_arm(t->model, pniter, cfg->seed, t->resumed_from, err)) return -1;
        const int lrc = checkpoint_load_weights(t->model, init, err);
        lora_qpissa_disarm(t->model);
        if (lrc) return -1;
        gt_log("adapters: QPiSSA's 4-bit residual base rebuilt from %s and %s's initial adapter\n", init, t->resumed_from);
    }
    struct stat sb;
    if (t->model->ad.pissa_init_dir && t->resumed_from[0] && t->rank == 0 && stat(t->model->ad.pissa_init_dir, &sb) != 0) {
        /* resumed into another output_dir: its initial adapter, which the conversion reads, from the checkpoint */
        if (lora_write_pissa_init(t->model, t->resumed_from, err)) return -1;
        gt_log("adapters: the initial PiSSA adapter rebuilt in %s from %s\n", t->model->ad.pissa_init_dir, t->resumed_from);
    }
    summary->steps = t->state.global_step;
    return 0;
}

