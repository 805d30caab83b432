/* trainer.c - see trainer.h. One optimizer step:
 *   rows of all micro-batches drawn first -> num_items (valid targets, all micro-batches, all ranks)
 *   for each micro-batch: forward + backward with the loss gradient scaled by 1/num_items, issued
 *     without a host wait (model_step_async: the batch from pinned step buffers, the losses back
 *     the same way); the host reads the next step's rows meanwhile, then one synchronize
 *   grad norm -> skip on NaN/Inf -> clip -> AdamW -> zero grads -> log, eval, checkpoint
 * The run is opened in trainer_open.c, evaluated in trainer_eval.c; its collectives are dist.h's DistComm. */
#include "trainer_internal.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval.h"
#include "optim.h"
#include "hf_weights.h"
#include "hf_writer.h"
#include "lora.h"
#include "report.h"

long count_items(const int *targets, size_t n) {
    long c = 0;
    for (size_t i = 0; i < n; i++) c += targets[i] != -100;
    return c;
}

/* The micro-batches of one step, issued without waiting for the device (model_step_async): the
 * per-token losses of micro-batch a land in losses[a * B * T ..], valid after the next synchronize. */
static int accumulate_issue(Model *m, const int *tokens, const int *targets, const int *positions, int B, int A,
                            int world, LossNormalization norm, long num_items, float *losses, GtError *err) {
    const size_t rows = (size_t)B * model_seq_len(m);
    /* a grad-ready hook (data-parallel all-reduce) fires on the last micro-batch only: no
     * communication while gradients are still accumulating (DDP's no_sync) */
    void *hook_ctx;
    GradReadyFn hook = model_grad_ready(m, &hook_ctx);
    model_set_grad_ready(m, NULL, NULL);
    for (int a = 0; a < A; a++) {
        if (a == A - 1) model_set_grad_ready(m, hook, hook_ctx);
        model_set_dropout_row0(m, ((long)a * world + model_data_rank(m)) * B); /* fill_step's rows: dropout.h's index */
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
        if (model_step_async(m, tk, tg, positions ? positions + (size_t)a * rows : NULL, B, scale,
                             losses + (size_t)a * rows, err)) {
            model_set_grad_ready(m, hook, hook_ctx);
            return -1;
        }
    }
    model_set_grad_ready(m, hook, hook_ctx);
    return 0;
}

/* After the synchronize: *loss_sum, the token-loss sum of the step's micro-batches, and *steps_loss,
 * this rank's share of the loss whose gradient LOSS_NORM_STEPS applies, sum over its micro-batches
 * of (their token-loss sum / their targets) / (A * world), in double (a micro-batch without targets
 * adds 0). Summed over the ranks it is HF Trainer's logged loss when the loss is not normalised by
 * num_items_in_batch: the mean of the micro-batches' mean losses. */
static void accumulate_sums(const float *losses, const int *targets, size_t rows, int A, int world, double *loss_sum,
                            double *steps_loss) {
    double total = 0.0, mean_sum = 0.0;
    for (int a = 0; a < A; a++) {
        const double s = model_loss_sum(losses + (size_t)a * rows, (int)rows);
        const long n = count_items(targets + (size_t)a * rows, rows);
        total += s;
        if (n > 0) mean_sum += s / (double)n;
    }
    *loss_sum = total;
    if (steps_loss) *steps_loss = mean_sum / ((double)A * world);
}

int trainer_accumulate(Model *m, const int *tokens, const int *targets, int B, int A, int world,
                       LossNormalization norm, long num_items, double *loss_sum, GtError *err) {
    const size_t rows = (size_t)B * model_seq_len(m);
    float *losses = gt_xmalloc((size_t)A * rows * sizeof(float));
    int rc = accumulate_issue(m, tokens, targets, NULL, B, A, world, norm, num_items, losses, err);
    m->be->ops->synchronize(m->be); /* the losses (and, after a failure, nothing in flight reads the arrays) */
    if (rc == 0) accumulate_sums(losses, targets, rows, A, world, loss_sum, NULL);
    free(losses);
    return rc;
}

/* the step's batch into the step buffers of parity `slot` (trainer_open.c: two, so the host reads
 * the next step's while the device still copies this one's) */
static void fill_step(Trainer *t, long step, int slot) {
    const int B = t->plan.B, A = t->plan.A, T = t->cfg->data.seq_len;
    int *tok = t->tok_buf[slot], *tgt = t->tgt_buf[slot], *pos = data_packed(t->train) ? t->pos_buf[slot] : NULL;
    /* rows g = (a * world + rank) * B + b of the step's global batch */
    for (int a = 0; a < A; a++)
        data_fill_train_pos(t->train, t->cfg->seed, t->cfg->data.shuffle, step, t->plan.effective_batch,
                            ((long)a * t->world + t->rank) * B, B, tok + (size_t)a * B * T, tgt + (size_t)a * B * T,
                            pos ? pos + (size_t)a * B * T : NULL);
}

static int check_weights(Trainer *t, long step, const char *when, GtError *err);

/* Every rank calls this: under ZeRO-1 the AdamW shards are gathered first (the checkpoint format
 * does not depend on sharding); rank 0 writes. Never weights that are not finite (every rank holds
 * all of them, so every rank refuses alike). */
static int save_checkpoint(Trainer *t, GtError *err) {
    Model *m = t->model;
    float *full[2] = {NULL, NULL};
    if (check_weights(t, t->state.global_step, "before a checkpoint is saved (none saved)", err)) return -1;
    const ModelShard sh = model_shard(m);
    if (sh.world > 1) {
        float *shard[2] = {sh.adam_m, sh.adam_v};
        for (int w = 0; w < 2; w++) {
            full[w] = gt_xcalloc(sh.padded_total, sizeof(float));
            if (t->be->ops->to_host(t->be, full[w] + (size_t)sh.rank * sh.size, shard[w], sh.size * sizeof(float), err) ||
                dist_comm_allgather_host(t->comm, full[w], sh.size, err)) {
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
    if (dist_comm_allreduce_start(t->comm, grads, n, &t->sync_err)) t->sync_failed = 1;
}

/* After accumulation: sum the gradients over the ranks, take the global norm, skip on NaN/Inf,
 * clip and step AdamW (on this rank's shard under ZeRO-1, then gather the weights). */
static int optimizer_step(Trainer *t, double lr, double *norm_out, bool *skipped, double loss, GtError *err) {
    Model *m = t->model;
    Backend *be = t->be;
    const RunConfig *cfg = t->cfg;
    double norm;
    const ModelShard sh = model_shard(m);
    size_t lo = 0, hi = model_num_trainable(m);
    if (sh.world > 1) {
        if (dist_comm_reduce_scatter(t->comm, model_grads(m), sh.size, err)) return -1;
        lo = (size_t)sh.rank * sh.size;
        hi = lo + sh.size;
        double sq = be->ops->sum_squares(be, model_grads(m) + lo, sh.size);
        if (dist_comm_sum_f64(t->comm, &sq, 1, err)) return -1;
        norm = sqrt(sq);
    } else {
        if (t->world > 1) {
            if (t->sync_failed) {
                *err = t->sync_err;
                return -1;
            }
            if (dist_comm_wait_all(t->comm, err)) return -1;
        }
        norm = grad_global_norm(m);
    }
    *norm_out = norm;
    *skipped = !isfinite(loss) || !isfinite(norm);
    if (!*skipped) {
        clip_grads_range(m, norm, cfg->max_grad_norm, lo, hi);
        adamw_step_range(m, lr, cfg, (int)++t->state.adam_t, lo, hi);
    }
    if (sh.world > 1) { /* the other ranks' shards of the weights arrive here */
        if (dist_comm_allgather(t->comm, model_params(m), sh.size, err)) return -1;
        model_params_changed(m);
    }
    return 0;
}

/* The weights must be finite: one sum of squares (in double) over them. */
static int check_weights(Trainer *t, long step, const char *when, GtError *err) {
    const double sq = t->be->ops->sum_squares(t->be, model_params(t->model), model_num_trainable(t->model));
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
    if (t->world > 1 && dist_comm_max_i32(t->comm, &early, err)) return -1;
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
    if (t->state.global_step < max_steps) fill_step(t, t->state.global_step, (int)(t->state.global_step & 1));
    for (long step = t->state.global_step; step < max_steps; step++) {
        double t0 = gt_now_seconds();
        const uint64_t waits0 = t->be->host_waits, syncs0 = t->be->syncs;
        const int cur = (int)(step & 1);
        t->tok = t->tok_buf[cur], t->tgt = t->tgt_buf[cur];
        t->pos = data_packed(t->train) ? t->pos_buf[cur] : NULL;
        const size_t n_tok = (size_t)t->plan.B * t->plan.A * cfg->data.seq_len;
        /* num_items_in_batch: valid targets of every micro-batch on every rank */
        int64_t items = count_items(t->tgt, n_tok);
        if (dist_comm_sum_i64(t->comm, &items, 1, err)) return -1;
        const long num_items = (long)items;
        double sums[2] = {0.0, 0.0}; /* token-loss sum; LOSS_NORM_STEPS's loss (accumulate) */
        /* no target token in any micro-batch on any rank: nothing to learn from, and no 0/0 loss */
        const bool empty = num_items == 0;
        t->be->ops->timer_start(t->be); /* device time: forward, backward, optimizer */
        model_set_dropout_step(m, step);
        if (!empty && accumulate_issue(m, t->tok, t->tgt, t->pos, t->plan.B, t->plan.A, t->world, cfg->loss_normalization,
                                       num_items, t->losses, err))
            return -1;
        /* the host reads the next step's batch while the device computes this one */
        if (step + 1 < max_steps) fill_step(t, step + 1, (int)((step + 1) & 1));
        /* the step's one device-wide sync: every micro-batch done, its losses on the host */
        t->be->ops->synchronize(t->be);
        if (!empty)
            accumulate_sums(t->losses, t->tgt, (size_t)t->plan.B * cfg->data.seq_len, t->plan.A, t->world, &sums[0],
                            &sums[1]);
        if (dist_comm_sum_f64(t->comm, sums, 2, err)) return -1;
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
        summary->host_waits += t->be->host_waits - waits0; /* the step's, eval and checkpoints apart */
        summary->syncs += t->be->syncs - syncs0;
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
        if (t->rank == 0 && (t->val || t->gen) && ((cfg->eval_steps > 0 && (step + 1) % cfg->eval_steps == 0) || last) &&
            trainer_eval(t, step + 1, summary, err))
            return -1;
        bool save = cfg->save_steps > 0 && ((step + 1) % cfg->save_steps == 0 || last);
        int sig = gt_stop_signal();
        if (t->world > 1 && dist_comm_max_i32(t->comm, &sig, err)) return -1; /* every rank stops at the same step */
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
    int rc = trainer_open(&t, summary, err);
    if (rc == 0) {
        if (t.world > 1 && model_shard(t.model).world == 1) /* plain data parallel: overlap with backward */
            model_set_grad_ready(t.model, allreduce_when_ready, &t);
        rc = train_loop(&t, summary, err);
    }
    if (rc == 0 && t.rank == 0 && !summary->stopped_by_signal) {
        const bool bf16 = cfg->save_dtype == SAVE_DTYPE_BF16;
        if (desc->adapter.r > 0) { /* the adapter alone, never a copy of the base */
            rc = lora_save_adapter(cfg->output_dir, t.model, bf16, err);
            if (rc == 0) snprintf(summary->weights, sizeof summary->weights, "%s (PEFT LoRA adapter)", cfg->output_dir);
            if (rc == 0)
                gt_log("adapter: %s (PEFT LoRA, r %d%s, %s; base %s)\n", cfg->output_dir,
                       t.model->ad.pissa_init_dir ? 2 * desc->adapter.r : desc->adapter.r,
                       t.model->ad.pissa_init_dir ? ": PiSSA converted to a plain LoRA of rank 2r" : "",
                       bf16 ? "bf16" : "fp32", cfg->model);
        } else {
            rc = checkpoint_save_weights(cfg->output_dir, t.model, bf16, trainer_max_shard_bytes(cfg), err);
            if (rc == 0) snprintf(summary->weights, sizeof summary->weights, "%s", cfg->output_dir);
            if (rc == 0)
                gt_log("weights: %s (Hugging Face %s layout, %s)\n", cfg->output_dir, arch_hf_class(desc),
                       bf16 ? "bf16" : "fp32");
        }
        if (rc == 0 && t.tokenizer) rc = trainer_save_tokenizer(&t, err);
        trainer_sample_at_end(&t);
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
    if (t.step_mem) { /* a failed step may have left copies of them in flight */
        t.be->ops->synchronize(t.be);
        backend_free(t.be, MEM_HOST_STAGING, t.step_mem, t.step_mem_bytes);
    }
    dist_comm_close(t.comm, rc == 0); /* before the buffers it may still read go */
    eval_gen_free(t.gen);
    kv_cache_free(t.kv);
    model_free(t.model);
    data_close(t.train);
    data_close(t.val);
    tokenizer_free(t.tokenizer);
    backend_close(t.be);
    return rc;
}

