/* trainer.c - see trainer.h. One optimizer step:
 *   rows of all micro-batches drawn first -> num_items (valid targets, all micro-batches, all ranks)
 *   for each micro-batch: forward + backward with the loss gradient scaled by 1/num_items
 *   grad norm -> skip on NaN/Inf -> clip -> AdamW -> zero grads -> log, eval, checkpoint */
#include "trainer.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "data.h"
#include "dist.h"
#ifdef GT_HAVE_NCCL
#include "dist_nccl.h"
#endif
#include "metrics.h"
#include "optim.h"
#include "hf_weights.h"
#include "hf_writer.h"
#include "adapter.h"
#include "lora.h"
#include "plan.h"
#include "report.h"
#include "rundir.h"
#include "sample.h"
#include "tboard.h"

long count_items(const int *targets, size_t n) {
    long c = 0;
    for (size_t i = 0; i < n; i++) c += targets[i] != -100;
    return c;
}

/* trainer_accumulate, also giving *steps_loss: this rank's share of the loss whose gradient
 * LOSS_NORM_STEPS applies, sum over its micro-batches of (their token-loss sum / their targets) /
 * (A * world), in double (a micro-batch without targets adds 0). Summed over the ranks it is HF
 * Trainer's logged loss when the loss is not normalised by num_items_in_batch: the mean of the
 * micro-batches' mean losses. */
static int accumulate(Model *m, const int *tokens, const int *targets, int B, int A, int world, LossNormalization norm,
                      long num_items, double *loss_sum, double *steps_loss, GtError *err) {
    const size_t rows = (size_t)B * m->T;
    double total = 0.0, mean_sum = 0.0;
    /* a grad-ready hook (data-parallel all-reduce) fires on the last micro-batch only: no
     * communication while gradients are still accumulating (DDP's no_sync) */
    GradReadyFn hook = m->grad_ready;
    m->grad_ready = NULL;
    for (int a = 0; a < A; a++) {
        if (a == A - 1) m->grad_ready = hook;
        m->dropout_row0 = ((long)a * world + m->data_rank) * B; /* fill_step's rows: dropout.h's index */
        const int *tk = tokens + (size_t)a * rows, *tg = targets + (size_t)a * rows;
        long n = count_items(tg, rows);
        float scale;
        if (norm == LOSS_NORM_TOKENS) {
            scale = num_items > 0 ? (float)(1.0 / (double)num_items) : 0.0f;
        } else {
            /* HF: each micro-batch's mean loss / accumulation steps, averaged over the ranks (our
             * all-reduce sums, so the ranks' average is a division by world here) */
            scale = n > 0 ? (float)(1.0 / ((double)n * A * world)) : 0.0f;
        }
        double s = 0.0;
        if (model_step(m, tk, tg, B, scale, true, &s, err)) {
            m->grad_ready = hook;
            return -1;
        }
        total += s;
        if (n > 0) mean_sum += s / (double)n;
    }
    m->grad_ready = hook;
    *loss_sum = total;
    if (steps_loss) *steps_loss = mean_sum / ((double)A * world);
    return 0;
}

int trainer_accumulate(Model *m, const int *tokens, const int *targets, int B, int A, int world,
                       LossNormalization norm, long num_items, double *loss_sum, GtError *err) {
    return accumulate(m, tokens, targets, B, A, world, norm, num_items, loss_sum, NULL, err);
}

typedef struct {
    const RunConfig *cfg;
    const ModelDesc *desc;
    const PeftConfig *peft; /* the adapter files' config (LoRA runs) */
    Backend *be;
    Model *model;
    DataSource *train, *val;
    Tokenizer *tokenizer; /* the run's tokenizer, or NULL (byte-level) */
    MemPlan plan;
    MetricsWriter *metrics;
    RunDir *rundir; /* output_dir: rank 0 holds its lock; other ranks read it to find `latest` */
    TBoard *tb;
    TrainerState state;
    int world, rank;
    Dist *dist;
    struct NcclComm *nccl; /* CUDA backend, world > 1: gradients (and host scalars without MPI) */
    GtError sync_err; /* an all-reduce started from backward that failed */
    int sync_failed;
    int *tok, *tgt;
    char resumed_from[GT_PATH_MAX + 64]; /* the checkpoint resumed from, or "" */
    bool tty;
    double t_start;
    long start_step;
    long win_steps; /* the logging window: steps since the last logged one, their wall time and tokens */
    double win_secs, win_tokens;
} Trainer;

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
    if (d->lora_r > 0) { /* a LoRA run: its adapters' shape and initialisation too (absent otherwise, as before) */
        cJSON_AddNumberToObject(j, "lora_r", d->lora_r);
        cJSON_AddNumberToObject(j, "lora_targets", d->lora_targets);
        cJSON_AddStringToObject(j, "lora_init", t->cfg->lora.init_from[0] ? t->cfg->lora.init_from : t->cfg->lora.init_lora_weights);
    }
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

/* ---------------------------------------------------------------- eval */

/* Mean loss over the fixed eval windows: the first eval_max_batches * per_device_eval_batch_size
 * windows (all when eval_max_batches is 0), in order, in chunks of at most the model's micro-batch. */
static int evaluate(Trainer *t, double *mean_loss, long *n_tokens, GtError *err) {
    Model *m = t->model;
    long n_windows = data_num_eval_windows(t->val);
    long cap = t->cfg->eval_max_batches * (long)t->cfg->per_device_eval_batch_size;
    if (t->cfg->eval_max_batches > 0 && cap < n_windows) n_windows = cap;
    double sum = 0.0;
    long items = 0;
    for (long w = 0; w < n_windows; w += m->B) {
        int rows = (int)(n_windows - w < m->B ? n_windows - w : m->B);
        data_fill_eval(t->val, w, rows, t->tok, t->tgt);
        double s = 0.0;
        if (model_step(m, t->tok, t->tgt, rows, 0.0f, false, &s, err)) return -1;
        sum += s;
        items += count_items(t->tgt, (size_t)rows * m->T);
    }
    *mean_loss = items > 0 ? sum / (double)items : NAN;
    *n_tokens = items;
    return 0;
}

static int run_eval(Trainer *t, long step, TrainSummary *summary, GtError *err) {
    double vl;
    long vt;
    char line[256];
    long windows = data_num_eval_windows(t->val), cap = t->cfg->eval_max_batches * (long)t->cfg->per_device_eval_batch_size;
    if (t->cfg->eval_max_batches > 0 && cap < windows) windows = cap; /* as evaluate counts them */
    if (t->tty) metrics_progress_clear(stdout);
    gt_log("%s\n", metrics_format_eval_start(line, sizeof line, step, windows, t->cfg->data.seq_len,
                                             t->cfg->data.val[0] ? t->cfg->data.val : "data.val_fraction of data.train"));
    if (evaluate(t, &vl, &vt, err)) return -1;
    EvalRecord r = {.step = step, .epoch = t->state.epoch, .eval_loss = vl, .eval_perplexity = exp(vl), .eval_tokens = vt};
    gt_log("%s\n", metrics_format_eval(line, sizeof line, &r));
    if (!summary->first_val_step) summary->first_val_loss = vl, summary->first_val_step = step;
    summary->last_val_loss = vl;
    summary->last_val_step = step;
    if (isfinite(vl) && !(vl >= summary->best_val_loss)) summary->best_val_loss = vl, summary->best_val_step = step;
    if (t->metrics && metrics_write_eval(t->metrics, &r, err)) return -1;
    if (t->tb) tboard_scalar(t->tb, "eval/loss", step, tboard_wall_time(), (float)vl);
    return 0;
}

/* ---------------------------------------------------------------- the run */

/* output_dir/tokenizer.json: the run's tokenizer beside its weights, as HF's Trainer saves it, so
 * the directory (and gtrain sample on it) reads text again. */
static int save_tokenizer(Trainer *t, GtError *err) {
    size_t len;
    const uint8_t *buf = tokenizer_raw(t->tokenizer, &len); /* as read at start, never read again */
    char dst[GT_PATH_MAX + 32];
    snprintf(dst, sizeof dst, "%s/tokenizer.json", t->cfg->output_dir);
    return gt_write_file_atomic(dst, buf, len, err);
}

static void sample_at_end(Trainer *t) {
    const int n = t->cfg->sample_max_new_tokens;
    if (n <= 0 || t->rank != 0 || (!t->tokenizer && t->desc->vocab_size > 256)) return; /* ids alone say nothing */
    int start = '\n';
    if (t->tokenizer) { /* from BOS, or a newline's first token */
        const int *before, *after;
        int nb, na;
        tokenizer_template_ids(t->tokenizer, &before, &nb, &after, &na);
        TokEncoder *e = tok_encoder_new(t->tokenizer);
        TokIds ids = {0};
        GtError ignored = {0};
        if (nb > 0) start = before[0];
        else if (tok_encode(e, "sample", "\n", 1, false, &ids, &ignored) == 0 && ids.n > 0) start = ids.ids[0];
        tok_ids_free(&ids);
        tok_encoder_free(e);
        if (start >= t->desc->vocab_size) return;
    }
    uint64_t rng = t->cfg->seed;
    GtError err = {0};
    gt_log("sample (%d tokens, temperature 0.8, top-k 40):\n", n);
    if (sample_continue(t->model, &start, 1, n, 0.8, 40, &rng, t->tokenizer, true, stdout, &err))
        gt_warn("sample: %s\n", err.msg);
}

static void fill_step(Trainer *t, long step) {
    const int B = t->plan.B, A = t->plan.A, T = t->cfg->data.seq_len;
    /* rows g = (a * world + rank) * B + b of the step's global batch */
    for (int a = 0; a < A; a++)
        data_fill_train(t->train, t->cfg->seed, t->cfg->data.shuffle, step, t->plan.effective_batch,
                        ((long)a * t->world + t->rank) * B, B, t->tok + (size_t)a * B * T, t->tgt + (size_t)a * B * T);
}

/* ---------------------------------------------------------------- collectives: MPI or NCCL
 * Device buffers (gradients, ZeRO-1 shards) go over NCCL on the CUDA backend, over MPI on the CPU.
 * Host values go over MPI when it is up (no queueing behind the gradients on NCCL's stream), else
 * over NCCL (srun alone: no MPI, the NCCL id came through dist_init_file). */
#ifdef GT_HAVE_NCCL
static bool host_over_nccl(const Trainer *t) {
    return t->nccl && strcmp(dist_transport(t->dist), "mpi") != 0;
}
#endif
static int sum_i64(Trainer *t, int64_t *v, int n, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (host_over_nccl(t)) return nccl_allreduce_i64_host(t->nccl, v, n, err);
#endif
    return dist_allreduce_i64(t->dist, v, n, err);
}
static int sum_f64(Trainer *t, double *v, int n, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (host_over_nccl(t)) return nccl_allreduce_f64_host(t->nccl, v, n, err);
#endif
    return dist_allreduce_f64(t->dist, v, n, err);
}
static int max_i32(Trainer *t, int *v, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (host_over_nccl(t)) return nccl_allreduce_max_i32_host(t->nccl, v, err);
#endif
    return dist_allreduce_max_i32(t->dist, v, err);
}
static int allgather_host(Trainer *t, float *buf, size_t shard, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (host_over_nccl(t)) return nccl_allgather_host(t->nccl, buf, shard, err);
#endif
    return dist_allgather_f32(t->dist, buf, shard, err);
}
/* model buffers (device memory on CUDA) */
static int grads_reduce_scatter(Trainer *t, float *buf, size_t shard, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (t->nccl) return nccl_reduce_scatter(t->nccl, buf, shard, err);
#endif
    return dist_reduce_scatter_f32(t->dist, buf, shard, err);
}
static int params_allgather(Trainer *t, float *buf, size_t shard, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (t->nccl) return nccl_allgather(t->nccl, buf, shard, err);
#endif
    return dist_allgather_f32(t->dist, buf, shard, err);
}
/* the started gradient all-reduces: done before the optimizer reads the gradients. NCCL: the
 * compute stream waits on the device, and the host waits (bounded) before the grad norm's sync. */
static int grads_wait(Trainer *t, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (t->nccl) return nccl_wait_all(t->nccl, err) || nccl_sync(t->nccl, NULL, err) ? -1 : 0;
#endif
    return dist_wait_all(t->dist, err);
}

/* world > 1: NCCL on the CUDA backend; MPI is then only the launcher (or absent: srun alone) */
static int open_comm(Trainer *t, GtError *err) {
    const RunConfig *cfg = t->cfg;
    if (t->world > 1 && strcmp(t->be->ops->name, "cpu") != 0) {
#ifdef GT_HAVE_NCCL
        if (nccl_open(&t->nccl, t->dist, t->be, cfg->dist_init_file, cfg->dist_timeout, err)) return -1;
        char v[64];
        gt_log("data parallel: %d ranks, gradients over %s (id %s)\n", t->world, nccl_version_string(v, sizeof v),
               strcmp(dist_transport(t->dist), "mpi") == 0 ? "over MPI" : "through dist_init_file");
#else
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: device: several ranks on the %s backend need NCCL, and this gtrain was built without it "
                        "(make CUDA=1 NCCL=1, needs nccl.h); or use device: cpu",
                        cfg->config_path, t->be->ops->name);
#endif
    }
    if (t->world > 1 && !t->nccl && strcmp(dist_transport(t->dist), "mpi") != 0)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: %d ranks without MPI run only on GPUs (device: cuda, with dist_init_file); on the %s "
                        "backend launch with mpirun or srun --mpi=pmix",
                        cfg->config_path, t->world, t->be->ops->name);
    return 0;
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
    gt_log("adapters: PiSSA (%s) from the base weights in %.1f s; initial adapter in %s\n",
           niter < 0 ? "exact SVD" : "randomised SVD", gt_now_seconds() - t0, m->pissa_init_dir);
    return 0;
}

static int open_run(Trainer *t, TrainSummary *summary, GtError *err) {
    const RunConfig *cfg = t->cfg;
    const ModelDesc *desc = t->desc;
    if (backend_open(&t->be, cfg->device, dist_local_rank(t->dist), cfg->num_threads, err)) return -1;
    if (open_comm(t, err)) return -1;
    backend_set_act_dtype(t->be, plan_act_dtype(cfg->precision));
    if (cfg->precision == PREC_BF16 && strcmp(t->be->ops->name, "cpu") == 0 && t->rank == 0)
        gt_warn("precision: bf16 on the cpu backend rounds activations as the GPU does, for checking: it is slower "
                "than fp32 there\n");
    uint64_t limit = cfg->memory_limit ? cfg->memory_limit : t->be->device_free_bytes;
    if (plan_resolve(&t->plan, desc, cfg, t->world, limit, err)) {
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

    int split_train = DATA_SPLIT_ALL, split_val = DATA_SPLIT_ALL;
    const char *val_path = cfg->data.val;
    if (!val_path[0] && cfg->data.format == DATA_TEXT && cfg->data.val_fraction > 0) {
        split_train = DATA_SPLIT_TRAIN, split_val = DATA_SPLIT_VAL;
        val_path = cfg->data.train;
    }
    if (tokenizer_load_for_model(&t->tokenizer, cfg->tokenizer, cfg->model, err)) return -1;
    if (t->tokenizer) {
        char sl[600];
        gt_log("tokenizer: %s, %d tokens\n", tokenizer_path(t->tokenizer), tokenizer_vocab_size(t->tokenizer));
        gt_log("%s\n", tokenizer_special_line(t->tokenizer, sl, sizeof sl));
        if (tokenizer_vocab_size(t->tokenizer) > desc->vocab_size)
            gt_warn("tokenizer %s has %d tokens, the model's vocab_size is %d: data with the larger ids will be refused\n",
                    tokenizer_path(t->tokenizer), tokenizer_vocab_size(t->tokenizer), desc->vocab_size);
    }
    DataText text = {.tok = t->tokenizer, .prompt_template = cfg->data.prompt_template,
                     .completion_template = cfg->data.completion_template, .add_eos = cfg->data.add_eos,
                     .eos_id = t->tokenizer ? tokenizer_eos_id(t->tokenizer) : -1};
    if (data_open_text(&t->train, cfg->data.train, cfg->data.format, cfg->data.packing, T, desc->vocab_size,
                       split_train, cfg->data.val_fraction, &text, err))
        return -1;
    if (val_path[0] &&
        data_open_text(&t->val, val_path, cfg->data.format, cfg->data.packing, T, desc->vocab_size, split_val,
                       cfg->data.val_fraction, &text, err))
        return -1;
    trainer_log_data(split_train == DATA_SPLIT_TRAIN ? "train split of" : "train", cfg->data.train, t->train);
    if (t->val) trainer_log_data(split_val == DATA_SPLIT_VAL ? "val split of" : "val", val_path, t->val);

    int shards = t->plan.zero1 ? t->world : 1;
    if (model_create_sharded(&t->model, desc, t->be, t->plan.B, T, t->plan.policy, cfg->seed, shards,
                             shards > 1 ? t->rank : 0, err)) {
        /* the plan fitted, so something else took the memory: show the plan and what would help */
        if (t->rank == 0) plan_print(&t->plan, NULL, stdout);
        char need[32], msg[GT_ERR_MAX + 400];
        snprintf(msg, sizeof msg, "%.600s; the plan needs %s in all: free memory held by other processes, or lower "
                 "per_device_train_batch_size (raising gradient_accumulation_steps), or set gradient_checkpointing "
                 "(and offload), or set memory_limit to what is really free",
                 err->msg, gt_format_bytes(need, sizeof need, t->plan.device_total));
        return gt_error(err, GT_EXIT_FAILURE, "%s", msg);
    }
    if (t->rank == 0) {
        plan_print(&t->plan, &t->be->mem, stdout);
        uint64_t free_b = 0, total_b = 0;
        t->be->ops->memory_info(t->be, &free_b, &total_b);
        char a[32], b[32];
        if (total_b)
            gt_log("  %s's view: %s in use of %s (the process's own buffers, the runtime's and other processes')\n",
                   strcmp(t->be->ops->name, "cuda") == 0 ? "driver" : "system", gt_format_bytes(a, sizeof a, total_b - free_b),
                   gt_format_bytes(b, sizeof b, total_b));
    }
    /* model: a Hugging Face model directory brings its weights, unless init_from names others or
     * init is random (model: DIR/config.json takes the architecture alone: random init); config.c
     * refused a directory without weights unless init: random */
    struct stat isb;
    const bool model_dir = stat(cfg->model, &isb) == 0 && S_ISDIR(isb.st_mode);
    const char *init = cfg->init == INIT_RANDOM ? "" : cfg->init_from[0] ? cfg->init_from : model_dir ? cfg->model : "";
    if (init[0]) {
        WeightsLoadInfo wi;
        if (checkpoint_load_weights_info(t->model, init, &wi, err)) return -1;
        gt_log("weights: initialised from %s: %d tensors, %llu parameters, %s, %d file%s\n", wi.path, wi.n_tensors,
               (unsigned long long)wi.n_values, wi.dtypes, wi.n_shards, wi.n_shards == 1 ? "" : "s");
    } else {
        gt_log("weights: random init (seed %llu; %s)%s\n", (unsigned long long)cfg->seed,
               cfg->init == INIT_RANDOM ? "init: random" : "model is a config.json file, no init_from",
               cfg->resume_from_checkpoint[0] ? ", replaced by the checkpoint's if the run resumes" : "");
    }
    t->model->dropout_seed = cfg->seed;
    t->model->data_rank = t->rank; /* dropout's rows of the step's batch (trainer_accumulate) */
    if (desc->lora_r > 0) { /* the adapter files' config; a PiSSA run's initial adapter goes to output_dir/pissa_init */
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
    const ResumeMode rm = config_resume_mode(cfg);
    if (desc->lora_r > 0 && cfg->lora.init_from[0] && (rm == RESUME_NEVER || rm == RESUME_AUTO)) {
        if (lora_load_adapter(t->model, cfg->lora.init_from, err)) return -1;
        gt_log("adapters: continued from %s\n", cfg->lora.init_from);
    }
    if (claim_output_dir(t, err)) return -1;
    if (t->rank == 0 && write_resolved_config(t, err)) return -1;
    /* a resumed run's adapters (and a PiSSA run's residual base) are the checkpoint's, checkpoint-0 included:
     * initialising them again would take PiSSA's SVD of the residual base */
    if (desc->lora_r > 0 && !t->resumed_from[0] && init_adapters(t, err)) return -1;
    struct stat sb;
    if (t->model->pissa_init_dir && t->resumed_from[0] && t->rank == 0 && stat(t->model->pissa_init_dir, &sb) != 0) {
        /* resumed into another output_dir: its initial adapter, which the conversion reads, from the checkpoint */
        if (lora_write_pissa_init(t->model, t->resumed_from, err)) return -1;
        gt_log("adapters: the initial PiSSA adapter rebuilt in %s from %s\n", t->model->pissa_init_dir, t->resumed_from);
    }
    const size_t step_rows = (size_t)t->plan.B * t->plan.A;
    t->tok = gt_xmalloc(step_rows * T * sizeof(int));
    t->tgt = gt_xmalloc(step_rows * T * sizeof(int));
    summary->steps = t->state.global_step;
    return 0;
}

static int check_weights(Trainer *t, long step, const char *when, GtError *err);

/* Every rank calls this: under ZeRO-1 the AdamW shards are gathered first (the checkpoint format
 * does not depend on sharding); rank 0 writes. Never weights that are not finite (every rank holds
 * all of them, so every rank refuses alike). */
static int save_checkpoint(Trainer *t, GtError *err) {
    Model *m = t->model;
    float *full[2] = {NULL, NULL};
    if (check_weights(t, t->state.global_step, "before a checkpoint is saved (none saved)", err)) return -1;
    if (m->shard_world > 1) {
        float *shard[2] = {m->adam_m, m->adam_v};
        for (int w = 0; w < 2; w++) {
            full[w] = gt_xcalloc(m->padded_total, sizeof(float));
            if (m->be->ops->to_host(m->be, full[w] + (size_t)m->shard_rank * m->shard, shard[w], m->shard * sizeof(float), err) ||
                allgather_host(t, full[w], m->shard, err)) {
                free(full[0]), free(full[1]);
                return -1;
            }
        }
    }
    int rc = 0;
    if (t->rank == 0) {
        const long step = t->state.global_step;
        if (rundir_foreign_checkpoint(t->rundir, step - 1, step, 0) >= 0)
            rc = gt_error(err, GT_EXIT_FAILURE, "%s/checkpoint-%ld is not this run's: not replaced, no checkpoint saved",
                          t->cfg->output_dir, step);
        /* recorded before it is renamed into place: a kill in between never leaves one that is not ours */
        else if (rundir_record_checkpoint(t->rundir, step, err) ||
                 checkpoint_save(t->cfg->output_dir, m, &t->state, full[0], full[1], trainer_max_shard_bytes(t->cfg),
                                 t->tokenizer, err) ||
                 rundir_rotate(t->rundir, t->cfg->save_total_limit, err))
            rc = -1;
    }
    free(full[0]), free(full[1]);
    if (rc || t->rank != 0) return rc;
    if (t->tty) metrics_progress_clear(stdout);
    gt_log("saved %s/checkpoint-%ld\n", t->cfg->output_dir, t->state.global_step);
    return 0;
}

/* data parallel: a layer's gradients start their all-reduce as soon as its backward is done */
static void allreduce_when_ready(void *ctx, float *grads, size_t n) {
    Trainer *t = ctx;
    if (t->sync_failed) return;
#ifdef GT_HAVE_NCCL
    if (t->nccl) { /* on NCCL's stream, after this layer's backward on the compute stream */
        if (nccl_allreduce_start(t->nccl, grads, n, &t->sync_err)) t->sync_failed = 1;
        return;
    }
#endif
    if (dist_allreduce_f32_start(t->dist, grads, n, &t->sync_err) || dist_poll(t->dist, &t->sync_err))
        t->sync_failed = 1;
}

/* After accumulation: sum the gradients over the ranks, take the global norm, skip on NaN/Inf,
 * clip and step AdamW (on this rank's shard under ZeRO-1, then gather the weights). */
static int optimizer_step(Trainer *t, double lr, double *norm_out, bool *skipped, double loss, GtError *err) {
    Model *m = t->model;
    Backend *be = t->be;
    const RunConfig *cfg = t->cfg;
    double norm;
    size_t lo = 0, hi = m->layout.total;
    if (m->shard_world > 1) {
        if (grads_reduce_scatter(t, m->grads, m->shard, err)) return -1;
        lo = (size_t)m->shard_rank * m->shard;
        hi = lo + m->shard;
        double sq = be->ops->sum_squares(be, m->grads + lo, m->shard);
        if (sum_f64(t, &sq, 1, err)) return -1;
        norm = sqrt(sq);
    } else {
        if (t->world > 1) {
            if (t->sync_failed) {
                *err = t->sync_err;
                return -1;
            }
            if (grads_wait(t, err)) return -1;
        }
        norm = grad_global_norm(m);
    }
    *norm_out = norm;
    *skipped = !isfinite(loss) || !isfinite(norm);
    if (!*skipped) {
        clip_grads_range(m, norm, cfg->max_grad_norm, lo, hi);
        adamw_step_range(m, lr, cfg, (int)++t->state.adam_t, lo, hi);
    }
    if (m->shard_world > 1) { /* the other ranks' shards of the weights arrive here */
        if (params_allgather(t, m->params, m->shard, err)) return -1;
        model_params_changed(m);
    }
    return 0;
}

/* The weights must be finite: one sum of squares (in double) over them. */
static int check_weights(Trainer *t, long step, const char *when, GtError *err) {
    const double sq = t->be->ops->sum_squares(t->be, t->model->params, t->model->layout.total);
    if (isfinite(sq)) return 0;
    return gt_error(err, GT_EXIT_FAILURE,
                    "step %ld: the weights are not finite %s (sum of squares %g); stopped, the last good checkpoint "
                    "is kept in %s",
                    step, when, sq, t->cfg->output_dir);
}

static int train_loop(Trainer *t, TrainSummary *summary, GtError *err) {
    const RunConfig *cfg = t->cfg;
    Model *m = t->model;
    const long max_steps = t->state.max_steps;
    const double rows_per_epoch = data_rows_per_epoch(t->train);
    /* a signal while loading: the state to resume from is the one loaded, saved as it is */
    int early = gt_stop_signal();
    if (t->world > 1 && max_i32(t, &early, err)) return -1;
    if (early) {
        gt_log("received %s before step %ld: saving the state and stopping\n", early == SIGTERM ? "SIGTERM" : "SIGINT",
               t->state.global_step + 1);
        if (save_checkpoint(t, err)) return -1;
        summary->stopped_by_signal = 1;
        return 0;
    }
    long skipped_in_a_row = 0, updates = 0, skipped = 0; /* this invocation's */
    /* HF's get_warmup_steps: warmup_steps when > 0, else ceil(warmup_ratio * steps) */
    const long warmup = cfg->warmup_steps > 0 ? cfg->warmup_steps : (long)ceil(cfg->warmup_ratio * (double)max_steps);
    t->t_start = gt_now_seconds();
    double tokens_done = 0;
    for (long step = t->state.global_step; step < max_steps; step++) {
        double t0 = gt_now_seconds();
        fill_step(t, step);
        const size_t n_tok = (size_t)t->plan.B * t->plan.A * cfg->data.seq_len;
        /* num_items_in_batch: valid targets of every micro-batch on every rank */
        int64_t items = count_items(t->tgt, n_tok);
        if (sum_i64(t, &items, 1, err)) return -1;
        const long num_items = (long)items;
        double sums[2] = {0.0, 0.0}; /* token-loss sum; LOSS_NORM_STEPS's loss (accumulate) */
        /* no target token in any micro-batch on any rank: nothing to learn from, and no 0/0 loss */
        const bool empty = num_items == 0;
        t->be->ops->timer_start(t->be); /* device time: forward, backward, optimizer */
        m->dropout_step = step;
        if (!empty && accumulate(m, t->tok, t->tgt, t->plan.B, t->plan.A, t->world, cfg->loss_normalization, num_items,
                                 &sums[0], &sums[1], err))
            return -1;
        if (sum_f64(t, sums, 2, err)) return -1;
        /* the loss whose gradient the step applies, as HF's Trainer logs it: the token mean over the
         * whole step (tokens), or the mean of the micro-batches' mean losses (steps) */
        double loss = num_items == 0 ? NAN : cfg->loss_normalization == LOSS_NORM_TOKENS ? sums[0] / (double)num_items
                                                                                          : sums[1];
        double lr = cfg->learning_rate * lr_multiplier(cfg->lr_scheduler_type, step, warmup, max_steps, cfg->min_lr_rate);
        double norm = NAN;
        bool skip = false;
        if (empty) {
            t->state.empty_steps++;
        } else {
            if (optimizer_step(t, lr, &norm, &skip, loss, err)) return -1;
            if (skip) {
                t->state.skipped_steps++;
                skipped_in_a_row++;
                skipped++;
            } else {
                skipped_in_a_row = 0;
                updates++;
            }
            model_zero_grads(m);
        }
        /* an update can overflow with a finite loss and gradient: never train on from it */
        if (!skip && !empty && check_weights(t, step + 1, "after the optimizer update", err)) return -1;
        const double device_ms = t->be->ops->timer_elapsed_ms(t->be);
        t->be->ops->synchronize(t->be);
        double dt = gt_now_seconds() - t0;
        tokens_done += (double)t->plan.tokens_per_step;
        t->state.global_step = step + 1;
        t->state.epoch = (double)t->state.global_step * (double)t->plan.effective_batch / rows_per_epoch;
        if (step == t->start_step) summary->first_loss = loss, summary->first_step = step + 1;
        summary->last_loss = loss;
        summary->steps = step + 1;
        if (isfinite(loss) && !(loss >= summary->best_loss)) summary->best_loss = loss, summary->best_step = step + 1;
        t->win_steps++;
        t->win_secs += dt;
        t->win_tokens += (double)t->plan.tokens_per_step;
        const double elapsed = gt_now_seconds() - t->t_start;

        TrainRecord r = {.step = step + 1, .epoch = t->state.epoch, .loss = loss, .lr = lr, .grad_norm = norm,
                         .tokens_per_sec = (double)t->plan.tokens_per_step / dt, .step_time_ms = dt * 1e3, .device_time_ms = device_ms,
                         .effective_batch = t->plan.effective_batch, .num_items = num_items, .skipped = skip,
                         .empty = empty, .window_steps = t->win_steps,
                         .window_step_time_ms = t->win_secs * 1e3 / (double)t->win_steps,
                         .window_tokens_per_sec = t->win_tokens / t->win_secs,
                         .eta_s = metrics_eta_seconds(step + 1, t->start_step, max_steps, elapsed)};
        memcpy(r.mem_current, t->be->mem.current, sizeof r.mem_current);
        memcpy(r.mem_peak, t->be->mem.peak, sizeof r.mem_peak);
        bool last = step + 1 == max_steps;
        bool log_now = (cfg->logging_steps > 0 && (step + 1) % cfg->logging_steps == 0) || step == t->start_step ||
                       last || skip || empty;
        if (log_now) {
            char line[512];
            if (t->tty) metrics_progress_clear(stdout);
            gt_log("%s\n", metrics_format_console(line, sizeof line, &r, max_steps));
            if (t->metrics && metrics_write_train(t->metrics, &r, err)) return -1;
            if (t->tb) {
                double wt = tboard_wall_time();
                tboard_scalar(t->tb, "train/loss", step + 1, wt, (float)loss);
                tboard_scalar(t->tb, "train/lr", step + 1, wt, (float)lr);
                tboard_scalar(t->tb, "train/grad_norm", step + 1, wt, (float)norm);
                tboard_scalar(t->tb, "train/tokens_per_sec", step + 1, wt, (float)r.window_tokens_per_sec);
            }
            t->win_steps = 0, t->win_secs = t->win_tokens = 0.0;
        } else if (t->metrics && metrics_write_step(t->metrics, &r, err)) {
            return -1;
        }
        if (t->tty && t->rank == 0) metrics_progress_from(stdout, step + 1, t->start_step, max_steps, gt_now_seconds() - t->t_start);
        if (empty) gt_warn("step %ld: no target token in the step's batch: no update (%ld empty steps so far)\n",
                           step + 1, t->state.empty_steps);
        if (skip) {
            gt_warn("step %ld: %s is not finite: step skipped, weights unchanged (%ld in a row)\n", step + 1,
                    isfinite(loss) ? "the gradient norm" : "the loss", skipped_in_a_row);
            if (cfg->nan_policy == NAN_STOP)
                return gt_error(err, GT_EXIT_FAILURE,
                                "step %ld: non-finite loss or gradient norm and nan_policy is stop; the last good "
                                "checkpoint is kept in %s",
                                step + 1, cfg->output_dir);
            if (cfg->max_skipped_steps > 0 && skipped_in_a_row >= cfg->max_skipped_steps)
                return gt_error(err, GT_EXIT_FAILURE,
                                "step %ld: %ld steps in a row skipped for non-finite loss or gradient norm "
                                "(max_skipped_steps %ld); the last good checkpoint is kept in %s",
                                step + 1, skipped_in_a_row, cfg->max_skipped_steps, cfg->output_dir);
        }
        if (t->rank == 0 && t->val && ((cfg->eval_steps > 0 && (step + 1) % cfg->eval_steps == 0) || last) &&
            run_eval(t, step + 1, summary, err))
            return -1;
        bool save = cfg->save_steps > 0 && ((step + 1) % cfg->save_steps == 0 || last);
        int sig = gt_stop_signal();
        if (t->world > 1 && max_i32(t, &sig, err)) return -1; /* every rank stops at the same step */
        if (sig) {
            if (t->tty) metrics_progress_clear(stdout);
            gt_log("received %s: finishing at step %ld\n", sig == SIGTERM ? "SIGTERM" : "SIGINT", step + 1);
            if (save_checkpoint(t, err)) return -1;
            summary->stopped_by_signal = 1;
            break;
        }
        if (save && save_checkpoint(t, err)) return -1;
    }
    /* skipped steps leave weights that were loaded non-finite as they were: never exit 0 with them */
    if (!summary->stopped_by_signal &&
        check_weights(t, t->state.global_step, "at the end of the run (skipped steps left them so)", err))
        return -1;
    /* a run whose every step was skipped trained nothing: not a success, and no weights saved as its result */
    if (!summary->stopped_by_signal && skipped > 0 && updates == 0)
        return gt_error(err, GT_EXIT_FAILURE,
                        "steps %ld-%ld: every step was skipped for a non-finite loss or gradient norm (%ld of %ld): "
                        "nothing was trained, no final weights saved; look at the data, learning_rate and the initial weights",
                        t->start_step + 1, t->state.global_step, skipped, t->state.global_step - t->start_step);
    summary->seconds = gt_now_seconds() - t->t_start;
    summary->tokens = tokens_done;
    summary->tokens_per_sec = tokens_done / summary->seconds;
    return 0;
}

uint64_t trainer_max_shard_bytes(const RunConfig *cfg) {
    uint64_t bytes = 0;
    char why[128];
    /* checked when the config was read: a failure here can only be a default that never fails */
    return hf_parse_size(cfg->save_max_shard_size, &bytes, why, sizeof why) == 0 ? bytes : HF_DEFAULT_MAX_SHARD_BYTES;
}

int trainer_run(const RunConfig *cfg, const ModelDesc *desc, const PeftConfig *peft, Dist *dist, TrainSummary *summary,
                GtError *err) {
    Trainer t = {.cfg = cfg, .desc = desc, .peft = peft, .dist = dist, .world = dist_world(dist), .rank = dist_rank(dist)};
    /* a progress bar only for one process on a terminal (mpirun gives every rank a tty) */
    t.tty = t.world == 1 && isatty(STDOUT_FILENO);
    memset(summary, 0, sizeof *summary);
    summary->last_val_loss = summary->first_val_loss = summary->best_val_loss = NAN;
    summary->first_loss = summary->last_loss = summary->best_loss = NAN;
    int rc = open_run(&t, summary, err);
    if (rc == 0) {
        if (t.world > 1 && t.model->shard_world == 1) { /* plain data parallel: overlap with backward */
            t.model->grad_ready = allreduce_when_ready;
            t.model->grad_ready_ctx = &t;
        }
        rc = train_loop(&t, summary, err);
    }
    if (rc == 0 && t.rank == 0 && !summary->stopped_by_signal) {
        const bool bf16 = cfg->save_dtype == SAVE_DTYPE_BF16;
        if (desc->lora_r > 0) { /* the adapter alone, never a copy of the base */
            rc = lora_save_adapter(cfg->output_dir, t.model, bf16, err);
            if (rc == 0) snprintf(summary->weights, sizeof summary->weights, "%s (PEFT LoRA adapter)", cfg->output_dir);
            if (rc == 0)
                gt_log("adapter: %s (PEFT LoRA, r %d%s, %s; base %s)\n", cfg->output_dir,
                       t.model->pissa_init_dir ? 2 * desc->lora_r : desc->lora_r,
                       t.model->pissa_init_dir ? ": PiSSA converted to a plain LoRA of rank 2r" : "",
                       bf16 ? "bf16" : "fp32", cfg->model);
        } else {
            rc = checkpoint_save_weights(cfg->output_dir, t.model, bf16, trainer_max_shard_bytes(cfg), err);
            if (rc == 0) snprintf(summary->weights, sizeof summary->weights, "%s", cfg->output_dir);
            if (rc == 0)
                gt_log("weights: %s (Hugging Face %s layout, %s)\n", cfg->output_dir, arch_hf_class(desc),
                       bf16 ? "bf16" : "fp32");
        }
        if (rc == 0 && t.tokenizer) rc = save_tokenizer(&t, err);
        sample_at_end(&t);
    }
    GtError cerr = {0};
    if (metrics_close(t.metrics, &cerr) && rc == 0) {
        *err = cerr;
        rc = -1;
    }
    tboard_close(t.tb);
    if (rc == 0 && t.rank == 0 && t.metrics) { /* a failed run (a full disk) keeps to its one line */
        GtError rerr = {0};
        if (report_write(cfg->output_dir, &rerr) == 0)
            gt_log("report: %s/report.svg\n", cfg->output_dir);
        else
            gt_warn("%s\n", rerr.msg);
    }
    if (rc == 0 && t.rank == 0 && t.model) {
        summary->start_step = t.start_step;
        summary->max_steps = t.state.max_steps;
        summary->mem_planned = t.plan.device_total;
        summary->mem_measured = t.be->mem.device_peak;
        if (summary->stopped_by_signal)
            snprintf(summary->weights, sizeof summary->weights, "%s/checkpoint-%ld (resume_from_checkpoint: latest)",
                     cfg->output_dir, t.state.global_step);
        trainer_summary_print(summary);
    }
    rundir_close(t.rundir); /* after the last file is written: releases the lock */
    free(t.tok);
    free(t.tgt);
#ifdef GT_HAVE_NCCL
    /* before the buffers it may still read go; on a failure abort, so no finalize waits for peers */
    if (rc == 0)
        nccl_close(t.nccl);
    else
        nccl_abort(t.nccl);
#endif
    model_free(t.model);
    data_close(t.train);
    data_close(t.val);
    tokenizer_free(t.tokenizer);
    backend_close(t.be);
    return rc;
}
