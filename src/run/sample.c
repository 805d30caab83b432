/* sample.c - see sample.h. The prompt runs once over its own length, then each new token runs
 * alone against the keys and values the model kept (model_forward_rows). When the sequence fills
 * the model's T positions the window slides by one token a time, and as the positions of every
 * token shift, each token past that point re-runs the whole last window (what the model saw in
 * training; GPT-2's learned positions leave no cheaper exact way). */
#include "sample.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "cli.h"
#include "lora.h"
#include "rundir.h"

uint64_t sample_rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int sample_token(const float *logits, int V, double temperature, int top_k, uint64_t *rng) {
    int best = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (temperature <= 0.0) return best;
    /* top-k threshold: the k-th largest logit (k small: partial selection by repeated scans) */
    double threshold = -INFINITY;
    if (top_k > 0 && top_k < V) {
        float *copy = gt_xmalloc((size_t)V * sizeof *copy);
        memcpy(copy, logits, (size_t)V * sizeof *copy);
        for (int k = 0; k < top_k; k++) {
            int arg = 0;
            for (int v = 1; v < V; v++)
                if (copy[v] > copy[arg]) arg = v;
            threshold = copy[arg];
            copy[arg] = -INFINITY;
        }
        free(copy);
    }
    double sum = 0.0;
    for (int v = 0; v < V; v++)
        if (logits[v] >= threshold) sum += exp((logits[v] - logits[best]) / temperature);
    double u = (double)(sample_rng_next(rng) >> 11) / 9007199254740992.0 * sum, acc = 0.0;
    for (int v = 0; v < V; v++) {
        if (logits[v] < threshold) continue;
        acc += exp((logits[v] - logits[best]) / temperature);
        if (acc >= u) return v;
    }
    return best;
}

static int parse_ids(const char *s, int V, int **out, int *n, GtError *err) {
    int cap = 16;
    *out = gt_xmalloc((size_t)cap * sizeof **out);
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= V) {
            free(*out);
            return gt_error(err, GT_EXIT_BAD_INPUT, "--prompt-ids: expected comma-separated token ids in [0, %d), found \"%.20s\"", V, s);
        }
        if (*n == cap) *out = gt_xrealloc(*out, (size_t)(cap *= 2) * sizeof **out);
        (*out)[(*n)++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            free(*out);
            return gt_error(err, GT_EXIT_BAD_INPUT, "--prompt-ids: expected a comma, found \"%.20s\"", end);
        }
    }
    return 0;
}

/* Streaming decode, as HF's DecodeStream: the text of prompt + generated ids, printed from where
 * the prompt's own text ends, held back while it ends in an incomplete character (U+FFFD). */
typedef struct {
    const Tokenizer *tok;
    TokIds ids;
    size_t printed;
} TextOut;

static int text_out_put(TextOut *o, int id, bool last, FILE *out, GtError *err) {
    if (id >= 0) tok_ids_push(&o->ids, id);
    char *s;
    size_t n;
    if (tokenizer_decode(o->tok, o->ids.ids, o->ids.n, false, &s, &n, err)) return -1;
    bool incomplete = n >= 3 && memcmp(s + n - 3, "\xEF\xBF\xBD", 3) == 0;
    if (id < 0) o->printed = n; /* the prompt itself: printed already */
    else if ((!incomplete || last) && n > o->printed) {
        fwrite(s + o->printed, 1, n - o->printed, out);
        o->printed = n;
    }
    free(s);
    return 0;
}

int sample_continue(Model *m, const int *prompt, int n_prompt, int n_new, double temperature, int top_k,
                    uint64_t *rng, const Tokenizer *tok, bool text, FILE *out, GtError *err) {
    TextOut to = {.tok = tok};
    if (tok) {
        for (int i = 0; i < n_prompt; i++) tok_ids_push(&to.ids, prompt[i]);
        if (text_out_put(&to, -1, false, out, err)) {
            tok_ids_free(&to.ids);
            return -1;
        }
    }
    const int T = m->T, V = m->desc.vocab_size;
    int *row = gt_xcalloc((size_t)T, sizeof *row);
    float *logits = gt_xmalloc((size_t)V * sizeof *logits);
    int rc = 0;
    /* the last T prompt tokens form the window; the model holds the keys and values of its first
     * `kept` positions */
    int len = n_prompt < T ? n_prompt : T, kept = 0;
    const bool keep = model_keeps_kv(m);
    memcpy(row, prompt + (n_prompt - len), (size_t)len * sizeof *row);
    for (int i = 0; i < n_new; i++) {
        if (gt_stop_signal()) break; /* SIGTERM/SIGINT: the sample so far, then a clean exit */
        if ((rc = model_forward_rows(m, row + kept, kept, len - kept, logits, err))) break;
        kept = keep ? len : 0;
        int next = sample_token(logits, V, temperature, top_k, rng);
        if (len < T) {
            row[len++] = next;
        } else { /* slide the window: every position changes */
            memmove(row, row + 1, (size_t)(T - 1) * sizeof *row);
            row[T - 1] = next;
            kept = 0;
        }
        if (tok) {
            if ((rc = text_out_put(&to, next, i == n_new - 1, out, err))) break;
        } else if (text)
            fputc((next >= 32 && next < 127) || next == '\n' || next == '\t' ? next : '?', out);
        else
            fprintf(out, "%s%d", i ? "," : "", next);
    }
    fputc('\n', out);
    fflush(out);
    free(row), free(logits);
    tok_ids_free(&to.ids);
    return rc;
}

/* a gtrain run's output_dir (its identity file) or one of its checkpoints (trainer_state.json) */
static bool written_by_gtrain(const char *dir) {
    char f[GT_PATH_MAX + 32];
    struct stat sb;
    snprintf(f, sizeof f, "%s/%s", dir, RUNDIR_IDENTITY);
    if (stat(f, &sb) == 0) return true;
    snprintf(f, sizeof f, "%s/trainer_state.json", dir);
    return stat(f, &sb) == 0;
}

int checkpoint_model_open(CheckpointModel *cm, const char *dir, const char *key, GtError *err) {
    memset(cm, 0, sizeof *cm);
    char adapter[GT_PATH_MAX + 32];
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s %s: expected a run directory, a checkpoint-N or a PEFT adapter "
                        "directory, found %s", key, dir, stat(dir, &sb) != 0 ? "nothing there" : "no directory");
    /* a PEFT adapter directory (a LoRA run's output): its base model, with the adapter on it */
    snprintf(adapter, sizeof adapter, "%s/%s", dir, PEFT_CONFIG_FILE);
    cm->lora = stat(adapter, &sb) == 0;
    PeftConfig *pc = &cm->pc;
    if (cm->lora) {
        if (peft_config_read(adapter, pc, err)) return -1;
        if (!pc->base_model[0])
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: base_model_name_or_path: expected the base model's directory, "
                            "found null", adapter);
        /* a base moved or deleted since the adapter was written: said against the key that names it */
        char base_cfg[GT_PATH_MAX + 16];
        snprintf(base_cfg, sizeof base_cfg, "%s/config.json", pc->base_model);
        if (stat(pc->base_model, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: base_model_name_or_path: expected the base model's directory, found \"%.300s\", %s "
                            "(moved or deleted? set the key to where the base model is now)",
                            adapter, pc->base_model, stat(pc->base_model, &sb) != 0 ? "which does not exist" : "not a directory");
        if (stat(base_cfg, &sb) != 0)
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: base_model_name_or_path: expected the base model's directory (with config.json), found "
                            "\"%.300s\" without config.json",
                            adapter, pc->base_model);
    }
    snprintf(cm->dir, sizeof cm->dir, "%s", dir);
    snprintf(cm->model_dir, sizeof cm->model_dir, "%s", cm->lora ? pc->base_model : dir);
    snprintf(cm->cfg_path, sizeof cm->cfg_path, "%s/config.json", cm->model_dir);
    if (!cm->lora && stat(cm->cfg_path, &sb) != 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s %s: expected a run directory, a checkpoint-N (config.json and weights) "
                        "or a PEFT adapter directory (%s), found neither config.json nor %s", key, dir, PEFT_CONFIG_FILE,
                        PEFT_CONFIG_FILE);
    return model_desc_load(&cm->desc, cm->cfg_path, err) || (cm->lora && lora_desc_apply(&cm->desc, pc, adapter, err)) ? -1 : 0;
}

int checkpoint_model_load(Model *m, const CheckpointModel *cm, GtError *err) {
    return checkpoint_load_weights(m, cm->model_dir, err) || (cm->lora && lora_load_adapter(m, cm->dir, err)) ? -1 : 0;
}

int checkpoint_model_tokenizer(Tokenizer **tok, const CheckpointModel *cm, const char *given, GtError *err) {
    /* the tokenizer, only from files named for it: given, else the checkpoint's own tokenizer.json (a
     * gtrain run saves its tokenizer in output_dir and every checkpoint-N), else, for an adapter not
     * written by gtrain (a PEFT adapter), the base model's that adapter_config.json names; never a
     * neighbouring directory's: a run without one has none */
    const bool named = given && given[0];
    *tok = NULL;
    if (tokenizer_load_for_model(tok, named ? given : "", named ? NULL : cm->dir, err)) return -1;
    if (!*tok && !named && cm->lora && !written_by_gtrain(cm->dir) && tokenizer_load_for_model(tok, "", cm->model_dir, err))
        return -1;
    return 0;
}

int sample_run(const SampleOptions *o, FILE *out, GtError *err) {
    CheckpointModel cmv, *cm = &cmv;
    if (checkpoint_model_open(cm, o->checkpoint, "--checkpoint", err)) return -1;
    const ModelDesc d = cm->desc;
    const char *cfg_path = cm->cfg_path;
    int top_k = o->top_k < 0 ? (d.vocab_size < 40 ? 0 : 40) : o->top_k;
    if (o->top_k > d.vocab_size)
        return gt_error(err, GT_EXIT_BAD_INPUT, "--top-k %d: more than the %d tokens of the vocabulary (%s)", o->top_k,
                        d.vocab_size, cfg_path);
    Tokenizer *tok = NULL;
    if (checkpoint_model_tokenizer(&tok, cm, o->tokenizer, err)) return -1;
    int *prompt = NULL, n_prompt = 0;
    bool text = o->prompt_ids == NULL;
    if (!text) {
        if (parse_ids(o->prompt_ids, d.vocab_size, &prompt, &n_prompt, err)) return -1;
        if (n_prompt == 0) {
            free(prompt);
            return gt_error(err, GT_EXIT_BAD_INPUT, "--prompt-ids: expected at least one token id");
        }
    } else if (tok) { /* the prompt as HF's encode(prompt, add_special_tokens=True) gives it */
        TokEncoder *e = tok_encoder_new(tok);
        TokIds ids = {0};
        const char *p = o->prompt ? o->prompt : "";
        int erc = tok_encode(e, "--prompt", p, strlen(p), true, &ids, err);
        tok_encoder_free(e);
        for (size_t i = 0; erc == 0 && i < ids.n; i++)
            if (ids.ids[i] >= d.vocab_size)
                erc = gt_error(err, GT_EXIT_BAD_INPUT, "--prompt: the tokenizer gives id %d, >= the model's vocab_size %d",
                               ids.ids[i], d.vocab_size);
        if (erc == 0 && ids.n == 0) erc = gt_error(err, GT_EXIT_BAD_INPUT, "--prompt: no tokens (and the tokenizer adds no BOS); give a prompt");
        if (erc) {
            tok_ids_free(&ids);
            tokenizer_free(tok);
            return -1;
        }
        n_prompt = (int)ids.n;
        prompt = ids.ids;
    } else {
        if (d.vocab_size < 256)
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: vocab_size %d: --prompt text needs a byte-level model (vocab >= 256); use --prompt-ids",
                            cfg_path, d.vocab_size);
        const char *p = o->prompt && o->prompt[0] ? o->prompt : "\n";
        n_prompt = (int)strlen(p);
        prompt = gt_xmalloc((size_t)n_prompt * sizeof *prompt);
        for (int i = 0; i < n_prompt; i++) prompt[i] = (unsigned char)p[i];
    }
    Backend *be = NULL;
    Model *m = NULL;
    int rc = -1;
    if (backend_open(&be, DEVICE_AUTO, 0, 0, err)) goto done;
    /* positions beyond prompt + new tokens are never reached: the same window as n_positions */
    long T = (long)n_prompt + o->max_new_tokens;
    if (model_create_inference(&m, &d, be, T < d.n_positions ? (int)T : d.n_positions, err)) goto done;
    if (checkpoint_model_load(m, cm, err)) goto done;
    uint64_t rng = o->seed;
    if (text && o->prompt) fputs(o->prompt, out);
    rc = sample_continue(m, prompt, n_prompt, o->max_new_tokens, o->temperature, top_k, &rng, tok, text, out, err);
done:
    free(prompt);
    tokenizer_free(tok);
    model_free(m);
    backend_close(be);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * the command */

/* --max-new-tokens, --top-k, --seed: an integer in [0, max] into *v (else *v kept); 0, or the
 * usage error's exit status */
static int count_option(const CliArgs *a, const char *name, long long max, long long *v) {
    const char *s = cli_value(a, name);
    if (s && !cli_parse_count(s, 0, max, v))
        return cli_error(a->cmd, "--%s: expected an integer in [0, %lld], found \"%s\"", name, max, s);
    return 0;
}

int sample_command(CliArgs *a) {
    SampleOptions so = {.checkpoint = cli_value(a, "checkpoint"), .prompt = cli_value(a, "prompt"),
                        .prompt_ids = cli_value(a, "prompt-ids"), .tokenizer = cli_value(a, "tokenizer"),
                        .temperature = 0.8};
    long long max_new = 200, top_k = -1, seed = 1;
    /* --top-k is checked against the vocabulary once the model is read (sample_run) */
    int rc = count_option(a, "max-new-tokens", SAMPLE_MAX_NEW_TOKENS, &max_new);
    if (!rc) rc = count_option(a, "top-k", INT_MAX, &top_k);
    if (!rc) rc = count_option(a, "seed", LLONG_MAX, &seed);
    if (rc) return rc;
    const char *t = cli_value(a, "temperature");
    if (t) {
        char *end;
        errno = 0;
        so.temperature = strtod(t, &end);
        if (errno || *end || !*t || *t == ' ' || !isfinite(so.temperature) || so.temperature < 0)
            return cli_error(a->cmd, "--temperature: expected a non-negative number (0: greedy), found \"%s\"", t);
    }
    so.max_new_tokens = (int)max_new;
    so.top_k = (int)top_k;
    so.seed = (uint64_t)seed;
    if (!so.checkpoint || !*so.checkpoint)
        return cli_error(a->cmd, "--checkpoint DIR is required%s", so.checkpoint ? " (found \"\")" : "");
    if (so.prompt && so.prompt_ids) return cli_error(a->cmd, "--prompt and --prompt-ids exclude each other");
    if (so.prompt && !*so.prompt)
        return cli_error(a->cmd, "--prompt: expected text, found \"\" (without --prompt a sample starts from a newline)");
    gt_log_to_stderr(true); /* stdout is the sample: the backend's notes must not end up in it */
    GtError err = {0};
    return sample_run(&so, stdout, &err) ? cli_fail(&err) : GT_EXIT_OK;
}
