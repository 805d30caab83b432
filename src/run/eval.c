/* eval.c - `gtrain eval` and the generation task a training run evaluates: see eval.h. */
#include "eval.h"

#include <cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arch.h"
#include "checkpoint.h"
#include "data.h"
#include "generate.h"
#include "json_string.h"
#include "lora.h"
#include "metrics.h"
#include "outguard.h"
#include "plan.h"
#include "sample.h"
#include "scorers.h"
#include "trainer.h"

#define EVAL_MAX_AUTO_SLOTS 256 /* generation.batch_size auto: at most this many rows */
#define EVAL_PREFILL_CHUNK 512  /* prompt tokens per model_decode call */

struct EvalGen {
    const RunConfig *cfg;
    const Tokenizer *tok;
    DataSource *src;
    char path[GT_PATH_MAX];
    long n;
    int ctx, max_prompt;
    GenOptions o;
    char stop_buf[GT_PATH_MAX]; /* generation.stop with its separators made NULs: o.stop points in */
    GenPrompt *prompts;
    int **prompt_ids;           /* int copies of the prompts' tokens */
    char **text;                /* per example: the generated text (malloc'd), NULL until done */
    GenFinish *finish;
    bool *done;
};

/* ---------------------------------------------------------------- EOS */

static void add_eos(GenOptions *o, int id, int vocab) {
    if (id < 0 || id >= vocab || o->n_eos == GEN_MAX_EOS) return;
    for (int i = 0; i < o->n_eos; i++)
        if (o->eos[i] == id) return;
    o->eos[o->n_eos++] = id;
}

/* The tokenizer's EOS, and generation_config.json's eos_token_id (an id or a list) beside the model,
 * as transformers' generate stops at either. */
static int read_eos(GenOptions *o, const Tokenizer *tok, const char *model_dir, int vocab, GtError *err) {
    if (tok) add_eos(o, tokenizer_eos_id(tok), vocab);
    if (!model_dir || !model_dir[0]) return 0;
    char path[GT_PATH_MAX + 32];
    struct stat sb;
    snprintf(path, sizeof path, "%s/generation_config.json", model_dir);
    if (stat(path, &sb) != 0) return 0;
    char *buf = NULL;
    size_t len = 0;
    if (gt_read_small_file(path, "generation config", 1 << 20, &buf, &len, err)) return -1;
    cJSON *j = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!j) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: bad JSON, expected an object", path);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id");
    int rc = 0;
    if (cJSON_IsNumber(e)) {
        add_eos(o, (int)e->valuedouble, vocab);
    } else if (cJSON_IsArray(e)) {
        for (const cJSON *x = e->child; x; x = x->next)
            if (cJSON_IsNumber(x)) add_eos(o, (int)x->valuedouble, vocab);
    } else if (e && !cJSON_IsNull(e)) {
        rc = gt_error(err, GT_EXIT_BAD_INPUT, "%s: eos_token_id: expected an id or a list of ids", path);
    }
    cJSON_Delete(j);
    return rc;
}

/* ---------------------------------------------------------------- the task's data */

static DataFormat gen_format(const RunConfig *cfg) {
    switch ((GenDataFormat)cfg->generation.format) {
    case GEN_FORMAT_JSONL: return DATA_JSONL;
    case GEN_FORMAT_JSON: return DATA_JSON;
    case GEN_FORMAT_PARQUET: return DATA_PARQUET;
    default: return data_format_for_path(cfg->generation.data);
    }
}

int eval_gen_open(EvalGen **out, const RunConfig *cfg, const ModelDesc *desc, const Tokenizer *tok, const char *model_dir,
                  int ctx_max, GtError *err) {
    *out = NULL;
    const DataFormat fmt = gen_format(cfg);
    if (fmt != DATA_JSONL && fmt != DATA_JSON && fmt != DATA_PARQUET)
        return config_key_error(cfg, "generation.data", err,
                                "expected records: a .jsonl, .json or .parquet file (or set generation.format)");
    if (ctx_max < 2)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: the model's context of %d positions leaves no room to generate",
                        desc->path, ctx_max);
    if (!tok && cfg->generation.stop[0])
        return config_key_error(cfg, "generation.stop", err,
                                "expected no stop strings on a model without a tokenizer (byte-level), found some");
    EvalGen *g = gt_xcalloc(1, sizeof *g);
    g->cfg = cfg;
    g->tok = tok;
    snprintf(g->path, sizeof g->path, "%s", cfg->generation.data);
    DataText text;
    trainer_data_text(cfg, tok, &text); /* the tokenizer and data.chat_template; the rest is the task's */
    text.prompt_template = cfg->generation.prompt_template;
    text.completion_template = "";
    text.add_eos = false;
    text.col_text = text.col_completion = "";
    text.col_prompt = cfg->generation.columns.prompt;
    text.col_messages = cfg->generation.columns.messages;
    text.col_answer = cfg->generation.columns.answer;
    text.assistant_only_loss = false;
    text.keep_text = true;
    text.gen_prompts = true;
    /* seq_len ctx_max - 1: a prompt must leave one position for the first new token */
    if (data_open_text(&g->src, g->path, fmt, false, ctx_max - 1, desc->vocab_size, DATA_SPLIT_ALL, 0.0, &text, err))
        goto fail;
    g->n = (long)data_num_examples(g->src);
    if (cfg->generation.max_examples > 0 && cfg->generation.max_examples < g->n) g->n = cfg->generation.max_examples;
    g->prompts = gt_xcalloc((size_t)g->n, sizeof *g->prompts);
    g->prompt_ids = gt_xcalloc((size_t)g->n, sizeof *g->prompt_ids);
    g->text = gt_xcalloc((size_t)g->n, sizeof *g->text);
    g->finish = gt_xcalloc((size_t)g->n, sizeof *g->finish);
    g->done = gt_xcalloc((size_t)g->n, sizeof *g->done);
    for (long e = 0; e < g->n; e++) {
        const int32_t *ids;
        const uint8_t *mask;
        int32_t len = data_example(g->src, (uint64_t)e, &ids, &mask);
        g->prompt_ids[e] = gt_xmalloc((size_t)len * sizeof(int));
        for (int32_t k = 0; k < len; k++) g->prompt_ids[e][k] = ids[k];
        g->prompts[e] = (GenPrompt){.ids = g->prompt_ids[e], .n = len};
        if (len > g->max_prompt) g->max_prompt = len;
    }
    long need = (long)g->max_prompt + cfg->generation.max_new_tokens;
    g->ctx = need < ctx_max ? (int)need : ctx_max;
    GenOptions *o = &g->o;
    o->max_new_tokens = cfg->generation.max_new_tokens;
    o->do_sample = cfg->generation.do_sample;
    o->temperature = cfg->generation.temperature;
    o->top_k = cfg->generation.top_k;
    o->top_p = cfg->generation.top_p;
    o->seed = cfg->seed;
    o->tok = tok;
    snprintf(g->stop_buf, sizeof g->stop_buf, "%s", cfg->generation.stop);
    for (char *p = g->stop_buf; *p && o->n_stop < GEN_MAX_STOP;) { /* config.c checked: none empty, at most 16 */
        o->stop[o->n_stop++] = p;
        char *sep = strchr(p, CONFIG_LIST_SEP);
        if (!sep) break;
        *sep = '\0';
        p = sep + 1;
    }
    if (read_eos(o, tok, model_dir, desc->vocab_size, err)) goto fail;
    *out = g;
    return 0;
fail:
    eval_gen_free(g);
    return -1;
}

void eval_gen_free(EvalGen *g) {
    if (!g) return;
    for (long e = 0; e < g->n; e++) {
        if (g->prompt_ids) free(g->prompt_ids[e]);
        if (g->text) free(g->text[e]);
    }
    free(g->prompts);
    free(g->prompt_ids);
    free(g->text);
    free(g->finish);
    free(g->done);
    data_close(g->src);
    free(g);
}

long eval_gen_count(const EvalGen *g) { return g->n; }
int eval_gen_ctx(const EvalGen *g) { return g->ctx; }
int eval_gen_prefill(const EvalGen *g, int max_tokens) {
    int p = g->max_prompt < EVAL_PREFILL_CHUNK ? g->max_prompt : EVAL_PREFILL_CHUNK;
    return p < max_tokens ? p : max_tokens;
}

/* ---------------------------------------------------------------- generating and scoring */

typedef struct {
    EvalGen *g;
    bool tty;
    double t0;
    long next_log; /* examples done at which a non-TTY progress line is due */
    long tokens;   /* generated so far */
} GenCtx;

static int on_done(void *ctx, const GenResult *r, GtError *err) {
    EvalGen *g = ((GenCtx *)ctx)->g;
    if (r->index < 0 || r->index >= g->n || g->done[r->index])
        return gt_error(err, GT_EXIT_FAILURE, "generate: result for example %ld out of range or twice", r->index);
    if (r->text) {
        g->text[r->index] = gt_xstrdup(r->text);
    } else { /* no tokenizer: byte-level ids are the text's bytes */
        char *s = gt_xmalloc((size_t)r->n + 1);
        int k = 0;
        for (int i = 0; i < r->n; i++)
            if (r->ids[i] > 0 && r->ids[i] < 256) s[k++] = (char)r->ids[i];
        s[k] = '\0';
        g->text[r->index] = s;
    }
    g->finish[r->index] = r->finish;
    g->done[r->index] = true;
    return 0;
}

static void on_progress(void *ctx, long done, long total, long tokens) {
    GenCtx *c = ctx;
    c->tokens = tokens;
    double secs = gt_now_seconds() - c->t0, rate = secs > 0 ? (double)tokens / secs : 0.0;
    if (c->tty) {
        printf("\r  generating: %ld/%ld examples, %ld tokens, %.1f tokens/s  ", done, total, tokens, rate);
        fflush(stdout);
    } else if (done >= c->next_log) { /* every tenth, and the last */
        gt_log("generating: %ld/%ld examples, %ld tokens, %.1f tokens/s\n", done, total, tokens, rate);
        c->next_log = done >= total ? total + 1 : done + (total + 9) / 10 < total ? done + (total + 9) / 10 : total;
    }
}

static void put_str(GtBytes *b, const char *key, const char *s) {
    gt_bytes_put(b, ", \"", 3);
    gt_bytes_put(b, key, strlen(key));
    gt_bytes_put(b, "\": ", 3);
    if (s) json_string_encode(b, s, strlen(s));
    else gt_bytes_put(b, "null", 4);
}

int eval_gen_run(EvalGen *g, Model *m, KvCache *kv, bool tty, GtBytes *jsonl, EvalGenSummary *s, GtError *err) {
    memset(s, 0, sizeof *s);
    for (long e = 0; e < g->n; e++) {
        free(g->text[e]);
        g->text[e] = NULL;
        g->done[e] = false;
    }
    GenCtx c = {.g = g, .tty = tty, .t0 = gt_now_seconds(), .next_log = 0};
    GenOptions o = g->o;
    o.prefill_chunk = eval_gen_prefill(g, model_decode_max_tokens(m));
    int rc = generate_run(m, kv, g->prompts, g->n, &o, on_done, on_progress, &c, err);
    if (tty) printf("\n");
    s->seconds = gt_now_seconds() - c.t0;
    s->tokens = c.tokens;
    if (rc < 0) return -1;
    if (rc == 1) { /* a stop signal: the rows so far were reported, nothing is complete */
        s->stopped = true;
        return 0;
    }
    const GenTask task = (GenTask)g->cfg->generation.task;
    for (long e = 0; e < g->n; e++) {
        if (!g->done[e]) return gt_error(err, GT_EXIT_FAILURE, "generate: example %ld never finished", e);
        size_t glen;
        const char *gold_field = data_example_text(g->src, (uint64_t)e, &glen);
        char *gold = gt_xmalloc(glen + 1);
        if (glen) memcpy(gold, gold_field, glen);
        gold[glen] = '\0';
        ScoreResult r;
        score_answer(task, g->text[e], gold, &r);
        s->n++;
        s->correct += r.correct;
        if (jsonl) {
            char num[32];
            gt_bytes_put(jsonl, "{\"id\": ", 7);
            gt_bytes_put(jsonl, num, (size_t)snprintf(num, sizeof num, "%ld", e));
            char *prompt = NULL;
            size_t pn = 0;
            GtError ignored = {0};
            if (g->tok && tokenizer_decode(g->tok, g->prompts[e].ids, (size_t)g->prompts[e].n, false, &prompt, &pn, &ignored) != 0)
                prompt = NULL;
            if (!g->tok) { /* bytes */
                prompt = gt_xmalloc((size_t)g->prompts[e].n + 1);
                for (int k = 0; k < g->prompts[e].n; k++) prompt[k] = (char)g->prompts[e].ids[k];
                pn = (size_t)g->prompts[e].n;
            }
            gt_bytes_put(jsonl, ", \"prompt\": ", 12);
            if (prompt) json_string_encode(jsonl, prompt, pn);
            else gt_bytes_put(jsonl, "null", 4);
            free(prompt);
            put_str(jsonl, "generated", g->text[e]);
            put_str(jsonl, "extracted", r.extracted);
            put_str(jsonl, "gold", r.gold);
            gt_bytes_put(jsonl, r.correct ? ", \"correct\": true" : ", \"correct\": false",
                         r.correct ? 17 : 18);
            put_str(jsonl, "finish", gen_finish_name(g->finish[e]));
            gt_bytes_put(jsonl, "}\n", 2);
        }
        score_result_free(&r);
        free(gold);
    }
    s->accuracy = s->n ? (double)s->correct / (double)s->n : NAN;
    return 0;
}

const char *eval_gen_format(char *buf, size_t cap, const EvalGenSummary *s, const RunConfig *cfg) {
    snprintf(buf, cap, "accuracy: %.4f (%ld/%ld) task %s", s->accuracy, s->correct, s->n,
             gen_task_name((GenTask)cfg->generation.task));
    return buf;
}

/* ---------------------------------------------------------------- the command */

/* The model to measure: --checkpoint's, else the config's (model / init_from, lora.init_from). */
typedef struct {
    CheckpointModel cm; /* with a checkpoint */
    bool from_checkpoint;
    ModelDesc desc;
    char model_dir[GT_PATH_MAX + 16]; /* where generation_config.json may be ("" none) */
    char init[GT_PATH_MAX];           /* without a checkpoint: the weights (model's directory or init_from) */
    Tokenizer *tok;
} EvalModel;

static int eval_model_open(EvalModel *em, const RunConfig *cfg, const ModelDesc *desc, const EvalOptions *o, GtError *err) {
    memset(em, 0, sizeof *em);
    struct stat sb;
    if (o->checkpoint) {
        em->from_checkpoint = true;
        if (checkpoint_model_open(&em->cm, o->checkpoint, "--checkpoint", err)) return -1;
        em->desc = em->cm.desc;
        snprintf(em->model_dir, sizeof em->model_dir, "%s", em->cm.model_dir);
        /* the config's tokenizer when it names one, else the checkpoint's */
        const char *given = strcmp(cfg->tokenizer, "none") == 0 ? NULL : cfg->tokenizer;
        if (strcmp(cfg->tokenizer, "none") != 0 && checkpoint_model_tokenizer(&em->tok, &em->cm, given, err)) return -1;
    } else {
        em->desc = *desc;
        const bool dir = stat(cfg->model, &sb) == 0 && S_ISDIR(sb.st_mode);
        if (dir) snprintf(em->model_dir, sizeof em->model_dir, "%s", cfg->model);
        const char *init = cfg->init == INIT_RANDOM ? "" : cfg->init_from[0] ? cfg->init_from : dir ? cfg->model : "";
        if (!init[0])
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: model: expected weights to evaluate (a model directory, "
                            "init_from or --checkpoint), found %s", cfg->config_path,
                            cfg->init == INIT_RANDOM ? "init: random" : "a config.json alone");
        snprintf(em->init, sizeof em->init, "%s", init);
        if (tokenizer_load_for_model(&em->tok, cfg->tokenizer, cfg->model, err)) return -1;
    }
    return 0;
}

static int eval_model_load(EvalModel *em, Model *m, const RunConfig *cfg, GtError *err) {
    if (em->from_checkpoint) {
        if (checkpoint_model_load(m, &em->cm, err)) return -1;
        gt_log("weights: %s%s%s\n", em->cm.model_dir, em->cm.lora ? ", adapter " : "", em->cm.lora ? em->cm.dir : "");
        return 0;
    }
    if (checkpoint_load_weights(m, em->init, err)) return -1;
    gt_log("weights: %s\n", em->init);
    if (em->desc.adapter.r > 0 && cfg->lora.init_from[0]) {
        if (lora_load_adapter(m, cfg->lora.init_from, err)) return -1;
        gt_log("adapters: %s\n", cfg->lora.init_from);
    } else if (em->desc.adapter.r > 0) {
        gt_log("adapters: none to load (lora.init_from is empty): the adapters as initialised\n");
    }
    return 0;
}

static void loss_progress(void *ctx, long done, long total) {
    const double *t0 = ctx;
    metrics_progress(stdout, done, total, gt_now_seconds() - *t0);
}

/* the first line of output, once the inputs are read */
static void log_model(const EvalModel *em, const Backend *be) {
    gt_log("gtrain eval: device %s, model %s (%s), %d layers, vocab %d%s\n", be->device_name, em->desc.model_type,
           arch_hf_class(&em->desc), em->desc.n_layer, em->desc.vocab_size, em->desc.adapter.r > 0 ? ", with adapters" : "");
}

static int eval_loss(const RunConfig *cfg, EvalModel *em, Backend *be, GtError *err) {
    int split_train, split_val;
    const char *val_path = trainer_data_splits(cfg, &split_train, &split_val);
    if (!val_path[0])
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: data.val: expected validation data (data.val, or data.val_fraction of "
                        "a text data.train) or a generation.task, found none", cfg->config_path);
    const int T = cfg->data.seq_len;
    DataText text;
    trainer_data_text(cfg, em->tok, &text);
    DataSource *val = NULL;
    Model *m = NULL;
    int *tok = NULL, *tgt = NULL, *pos = NULL, rc = -1;
    if (data_open_text(&val, val_path, cfg->data.format, cfg->data.packing, T, em->desc.vocab_size, split_val,
                       cfg->data.val_fraction, &text, err))
        goto out;
    log_model(em, be);
    trainer_log_data(split_val == DATA_SPLIT_VAL ? "val split of" : "val", val_path, val);
    if (data_packed(val) && !(be->ops->caps & GT_CAP_POSITIONS)) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: data.packing: true needs per-token positions, which the %s backend does "
                 "not have yet", cfg->config_path, be->ops->name);
        goto out;
    }
    if (model_create_inference(&m, &em->desc, be, T, err) || eval_model_load(em, m, cfg, err)) goto out;
    const long windows = trainer_eval_windows(cfg, val);
    const int B = model_batch_rows(m);
    tok = gt_xmalloc((size_t)B * T * sizeof *tok);
    tgt = gt_xmalloc((size_t)B * T * sizeof *tgt);
    if (data_packed(val)) pos = gt_xmalloc((size_t)B * T * sizeof *pos);
    char line[256];
    gt_log("%s\n", metrics_format_eval_start(line, sizeof line, 0, windows, T,
                                             cfg->data.val[0] ? cfg->data.val : "data.val_fraction of data.train"));
    double t0 = gt_now_seconds(), loss;
    long n_tokens;
    const bool tty = isatty(STDOUT_FILENO);
    if (trainer_eval_loss(m, val, windows, tok, tgt, pos, tty ? loss_progress : NULL, &t0, &loss, &n_tokens, err)) goto out;
    if (tty) metrics_progress_clear(stdout);
    printf("eval_loss: %.6f\neval_perplexity: %.4f\neval_tokens: %ld\n", loss, exp(loss), n_tokens);
    rc = 0;
out:
    free(tok), free(tgt), free(pos);
    model_free(m);
    data_close(val);
    return rc;
}

/* g: the prompts, read and checked before the backend opened (bad input says so before anything
 * else is printed); freed here */
static int eval_generate(const RunConfig *cfg, EvalModel *em, EvalGen *g, Backend *be, const char *output, GtError *err) {
    const ModelDesc *d = &em->desc;
    Model *m = NULL;
    KvCache *kv = NULL;
    GtBytes jsonl = {0};
    int rc = -1;
    log_model(em, be);
    const int ctx = eval_gen_ctx(g), prefill = eval_gen_prefill(g, INT32_MAX);
    const GtDtype act = plan_act_dtype(cfg->precision);
    const uint64_t limit = cfg->memory_limit ? cfg->memory_limit : backend_auto_limit(be);
    const long n = eval_gen_count(g);
    int slots = cfg->generation.batch_size;
    if (slots == 0) {
        slots = plan_decode_fit(d, prefill, n < EVAL_MAX_AUTO_SLOTS ? (int)n : EVAL_MAX_AUTO_SLOTS, ctx, act, limit);
        if (slots == 0) {
            char b[32];
            gt_error(err, GT_EXIT_BAD_INPUT, "%s: generation.batch_size auto: not even one row of %d positions fits "
                     "memory_limit %s", cfg->config_path, ctx, gt_format_bytes(b, sizeof b, limit));
            goto out;
        }
    }
    const int n_tokens = prefill > slots ? prefill : slots;
    MemPlan plan;
    memset(&plan, 0, sizeof plan);
    if (plan_decode_memory(&plan, d, n_tokens, slots, ctx, act)) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: generation.batch_size %d x %d positions: the plan overflows",
                 cfg->config_path, slots, ctx);
        goto out;
    }
    plan.runtime_reserve = be->runtime_reserve;
    snprintf(plan.runtime_reserve_what, sizeof plan.runtime_reserve_what, "%s", be->runtime_reserve_what);
    gt_log("generation: %ld prompts from %s (the longest %d tokens), %d rows at once, %d positions each, at most %d "
           "new tokens, %s\n", n, cfg->generation.data, g->max_prompt,
           slots, ctx, cfg->generation.max_new_tokens, cfg->generation.do_sample ? "sampled" : "greedy");
    plan_print(&plan, NULL, stdout);
    if (plan.device_total > limit) {
        char a[32], b[32];
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: generation.batch_size %d: the plan needs %s, more than memory_limit %s; "
                 "expected a smaller batch (or auto)", cfg->config_path, slots, gt_format_bytes(a, sizeof a, plan.device_total),
                 gt_format_bytes(b, sizeof b, limit));
        goto out;
    }
    if (model_create_decode(&m, d, be, n_tokens, slots, err) || eval_model_load(em, m, cfg, err) ||
        kv_cache_create(&kv, m, slots, ctx, err))
        goto out;
    EvalGenSummary s;
    if (eval_gen_run(g, m, kv, isatty(STDOUT_FILENO), output ? &jsonl : NULL, &s, err)) goto out;
    if (s.stopped) {
        gt_error(err, GT_EXIT_FAILURE, "stopped by %s before the end: no results written",
                 gt_stop_signal() == SIGTERM ? "SIGTERM" : "SIGINT");
        goto out;
    }
    if (output && gt_write_file_atomic(output, jsonl.p ? jsonl.p : "", jsonl.n, err)) goto out;
    char line[160];
    gt_log("generated %ld tokens in %.1f s\n", s.tokens, s.seconds);
    printf("%s\n", eval_gen_format(line, sizeof line, &s, cfg));
    if (output) printf("results: %s\n", output);
    rc = 0;
out:
    gt_bytes_free(&jsonl);
    kv_cache_free(kv);
    model_free(m);
    eval_gen_free(g);
    return rc;
}

int eval_run(const RunConfig *cfg, const ModelDesc *desc, const EvalOptions *o, GtError *err) {
    const char *output = o->output && o->output[0] ? o->output : cfg->generation.output[0] ? cfg->generation.output : NULL;
    if (o->output && !o->output[0]) return gt_error(err, GT_EXIT_BAD_INPUT, "eval: --output: expected a file, found \"\"");
    if (output && cfg->generation.task == TASK_NONE)
        return gt_error(err, GT_EXIT_BAD_INPUT, "eval: %s: expected generation.task (the results file is the "
                        "generations'), found none", o->output ? "--output" : "generation.output");
    EvalModel *em = gt_xcalloc(1, sizeof *em);
    Backend *be = NULL;
    EvalGen *g = NULL;
    int rc = -1;
    if (eval_model_open(em, cfg, desc, o, err)) goto out;
    if (cfg->generation.task != TASK_NONE &&
        eval_gen_open(&g, cfg, &em->desc, em->tok, em->model_dir, em->desc.n_positions, err))
        goto out;
    if (output) { /* the results file: never an input, never a directory or FIFO */
        OutGuard guard = {0};
        out_guard_add(&guard, cfg->generation.data, "generation.data");
        out_guard_add(&guard, cfg->config_path, "config");
        out_guard_add(&guard, em->model_dir[0] ? em->model_dir : cfg->model, "model directory");
        if (o->checkpoint) out_guard_add(&guard, o->checkpoint, "--checkpoint directory");
        const int grc = out_guard_file(&guard, output, o->output ? "eval: --output" : "generation.output", err);
        out_guard_free(&guard);
        if (grc) goto out;
    }
    if (backend_open(&be, cfg->device, 0, cfg->num_threads, err)) goto out;
    backend_set_act_dtype(be, plan_act_dtype(cfg->precision));
    rc = cfg->generation.task == TASK_NONE ? eval_loss(cfg, em, be, err) : eval_generate(cfg, em, g, be, output, err);
    g = NULL; /* eval_generate's now */
out:
    eval_gen_free(g);
    backend_close(be);
    tokenizer_free(em->tok);
    free(em);
    return rc;
}
