/* trainer.c - see trainer.h. */
#include "trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"
#include "optim.h"
#include "plan.h"

long count_items(const int *targets, size_t n) {
    long c = 0;
    for (size_t i = 0; i < n; i++) c += targets[i] != -100;
    return c;
}

int trainer_accumulate(Model *m, const int *tokens, const int *targets, int B, int A, LossNormalization norm,
                       long num_items, double *loss_sum, GtError *err) {
    const size_t rows = (size_t)B * m->T;
    double total = 0.0;
    for (int a = 0; a < A; a++) {
        const int *tk = tokens + (size_t)a * rows, *tg = targets + (size_t)a * rows;
        float scale;
        if (norm == LOSS_NORM_TOKENS) {
            scale = num_items > 0 ? (float)(1.0 / (double)num_items) : 0.0f;
        } else {
            long n = count_items(tg, rows);
            scale = n > 0 ? (float)(1.0 / ((double)n * A)) : 0.0f;
        }
        double s = 0.0;
        if (model_step(m, tk, tg, B, scale, true, &s, err)) return -1;
        total += s;
    }
    *loss_sum = total;
    return 0;
}

/* Mean loss over the fixed eval windows: the first eval_max_batches * eval batch windows (all if
 * eval_max_batches is 0), in order, in chunks of at most the model's micro-batch. */
static int evaluate(Model *m, const DataSource *val, const RunConfig *cfg, int *tok, int *tgt, double *mean_loss,
                    long *n_tokens, GtError *err) {
    long n_windows = data_num_eval_windows(val);
    if (cfg->eval_max_batches > 0 && cfg->eval_max_batches * (long)cfg->per_device_eval_batch_size < n_windows)
        n_windows = cfg->eval_max_batches * (long)cfg->per_device_eval_batch_size;
    double sum = 0.0;
    long items = 0;
    for (long w = 0; w < n_windows; w += m->B) {
        int rows = (int)(n_windows - w < m->B ? n_windows - w : m->B);
        data_fill_eval(val, w, rows, tok, tgt);
        double s = 0.0;
        if (model_step(m, tok, tgt, rows, 0.0f, false, &s, err)) return -1;
        sum += s;
        items += count_items(tgt, (size_t)rows * m->T);
    }
    *mean_loss = items > 0 ? sum / (double)items : NAN;
    *n_tokens = items;
    return 0;
}

static void format_mem(char *buf, size_t cap, const MemTracker *mt) {
    char cur[32], peak[32];
    snprintf(buf, cap, "mem %s (peak %s)", gt_format_bytes(cur, sizeof cur, mt->device_current),
             gt_format_bytes(peak, sizeof peak, mt->device_peak));
}

int trainer_run(const RunConfig *cfg, const ModelDesc *desc, TrainSummary *summary, GtError *err) {
    int rc = -1;
    const int world = 1, rank = 0;
    Backend *be = NULL;
    Model *model = NULL;
    DataSource *train = NULL, *val = NULL;
    int *tok = NULL, *tgt = NULL;
    memset(summary, 0, sizeof *summary);
    summary->last_val_loss = summary->first_val_loss = NAN;

    if (backend_open(&be, cfg->device, 0, cfg->num_threads, err)) goto done;
    uint64_t limit = cfg->memory_limit ? cfg->memory_limit : be->device_free_bytes;
    MemPlan plan;
    if (plan_resolve(&plan, desc, cfg, world, limit, err)) goto done;
    const int B = plan.B, A = plan.A, T = cfg->data.seq_len;

    gt_log("gtrain: device %s\n", be->device_name);
    gt_log("model: %d layers, %d heads, %d wide, vocab %d, %llu parameters\n", desc->n_layer, desc->n_head,
           desc->n_embd, desc->vocab_size, (unsigned long long)plan.n_params);
    gt_log("effective batch size = %d x %d x %d = %ld (per_device_train_batch_size x world x "
           "gradient_accumulation_steps), %ld tokens per step\n",
           B, world, A, plan.effective_batch, plan.tokens_per_step);

    int split_train = DATA_SPLIT_ALL, split_val = DATA_SPLIT_ALL;
    const char *val_path = cfg->data.val;
    if (!val_path[0] && cfg->data.format == DATA_TEXT) {
        split_train = DATA_SPLIT_TRAIN;
        split_val = DATA_SPLIT_VAL;
        val_path = cfg->data.train;
    }
    if (data_open(&train, cfg->data.train, cfg->data.format, T, desc->vocab_size, split_train, cfg->data.val_fraction, err))
        goto done;
    if (val_path[0] &&
        data_open(&val, val_path, cfg->data.format, T, desc->vocab_size, split_val, cfg->data.val_fraction, err))
        goto done;

    RecomputePolicy pol = plan.policy;
    if (model_create(&model, desc, be, B, T, pol, cfg->seed, err)) goto done;
    plan_print(&plan, &be->mem, stdout);

    long max_steps = cfg->max_steps;
    if (max_steps <= 0) {
        double steps = ceil(cfg->num_train_epochs * (double)data_num_tokens(train) / (double)plan.tokens_per_step);
        max_steps = steps < 1 ? 1 : (long)steps;
    }
    const size_t step_rows = (size_t)B * A;
    tok = gt_xmalloc(step_rows * T * sizeof(int));
    tgt = gt_xmalloc(step_rows * T * sizeof(int));

    double t_start = gt_now_seconds(), tokens_done = 0;
    for (long step = 0; step < max_steps; step++) {
        double t0 = gt_now_seconds();
        /* all micro-batches of the step first: rows g = (a * world + rank) * B + b of the global batch */
        for (int a = 0; a < A; a++)
            data_fill_train(train, cfg->seed, step, plan.effective_batch, ((long)a * world + rank) * B, B,
                            tok + (size_t)a * B * T, tgt + (size_t)a * B * T);
        long num_items = count_items(tgt, step_rows * T);
        double loss_sum = 0.0;
        if (trainer_accumulate(model, tok, tgt, B, A, cfg->loss_normalization, num_items, &loss_sum, err)) goto done;
        double loss = num_items > 0 ? loss_sum / (double)num_items : NAN;
        double norm = grad_global_norm(model);
        clip_grads(model, norm, cfg->max_grad_norm);
        double lr = cfg->learning_rate * lr_multiplier(cfg->lr_scheduler_type, step, cfg->warmup_steps, max_steps);
        adamw_step(model, lr, cfg, (int)(step + 1));
        model_zero_grads(model);
        be->ops->synchronize(be);
        double dt = gt_now_seconds() - t0;
        tokens_done += (double)plan.tokens_per_step;
        if (step == 0) summary->first_loss = loss;
        summary->last_loss = loss;
        summary->steps = step + 1;

        bool last = step + 1 == max_steps;
        if ((cfg->logging_steps > 0 && (step + 1) % cfg->logging_steps == 0) || step == 0 || last) {
            char mem[96];
            format_mem(mem, sizeof mem, &be->mem);
            gt_log("step %ld/%ld | loss %.4f | lr %.3e | grad norm %.4f | %.0f tok/s | %.1f ms | eff batch %ld | "
                   "items %ld | %s\n",
                   step + 1, max_steps, loss, lr, norm, (double)plan.tokens_per_step / dt, dt * 1e3,
                   plan.effective_batch, num_items, mem);
        }
        if (val && ((cfg->eval_steps > 0 && (step + 1) % cfg->eval_steps == 0) || last)) {
            double vl;
            long vt;
            int *etok = gt_xmalloc((size_t)B * T * sizeof(int)), *etgt = gt_xmalloc((size_t)B * T * sizeof(int));
            int erc = evaluate(model, val, cfg, etok, etgt, &vl, &vt, err);
            free(etok);
            free(etgt);
            if (erc) goto done;
            if (isnan(summary->first_val_loss)) summary->first_val_loss = vl;
            summary->last_val_loss = vl;
            gt_log("eval step %ld | val loss %.4f | perplexity %.3f | %ld tokens\n", step + 1, vl, exp(vl), vt);
        }
    }
    summary->tokens_per_sec = tokens_done / (gt_now_seconds() - t_start);
    rc = 0;
done:
    free(tok);
    free(tgt);
    model_free(model);
    data_close(train);
    data_close(val);
    backend_close(be);
    return rc;
}
