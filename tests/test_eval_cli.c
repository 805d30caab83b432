/* test_eval_cli.c - `gtrain eval` as a process: the validation loss against the trainer's own eval
 * of the same weights (a learning-rate-0 step), nothing written into the run directory; a generation
 * task on a tiny byte-level Llama trained here to answer tests/data's arithmetic (the accuracy line
 * against the results file, the results against score_answer re-applied to the data's gold field);
 * bad input (one line naming the file and row or key, exit 2, no results file); SIGTERM in the
 * middle of generating (no results file under its name, no temporary left). */
#include <cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run_util.h"
#include "scorers.h"
#include "test_backend_select.h"
#include "test_util.h"
#include "tok_hf_util.h"

static const char MODEL_JSON[] =
    "{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
    " \"hidden_size\": 64, \"intermediate_size\": 128, \"vocab_size\": 256, \"max_position_embeddings\": 96,\n"
    " \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, \"tie_word_embeddings\": false}\n";

static const char *root(void) {
    const char *r = getenv("GTRAIN_ROOT");
    cr_assert_not_null(r, "GTRAIN_ROOT is not set (run through make test)");
    return r;
}

/* the fixture's training steps: on the CUDA simulator (about 10x slower a step) a tenth, which
 * checks the same paths but trains too little to answer (the accuracy bound is then not asked) */
static int fixture_steps(void) { return test_on_cudasim() ? 12 : 400; } /* a step is ~0.6 s on the simulator */

/* dir/run.yaml: the tiny model on tests/data/eval_train.jsonl, its gsm8k generation section */
static void write_config(const char *dir) {
    char cfg[4096];
    snprintf(cfg, sizeof cfg,
             "model: model.json\n"
             "data:\n"
             "  train: %s/tests/data/eval_train.jsonl\n"
             "  val: %s/tests/data/eval_train.jsonl\n"
             "  format: jsonl\n"
             "  seq_len: 64\n"
             "per_device_train_batch_size: 8\n"
             "per_device_eval_batch_size: 8\n"
             "max_steps: %d\n"
             "learning_rate: 3.0e-3\n"
             "lr_scheduler_type: constant\n"
             "logging_steps: 100\n"
             "save_steps: 0\n"
             "seed: 3\n"
             "num_threads: 1\n"
             "output_dir: out\n"
             "generation:\n"
             "  task: gsm8k\n"
             "  data: %s/tests/data/gsm8k_tiny.jsonl\n"
             "  prompt_template: \"Q: {query}\\nA:\"\n"
             "  columns:\n"
             "    answer: response\n"
             "  max_new_tokens: 40\n"
             "  batch_size: 5\n",
             root(), root(), fixture_steps(), root());
    test_write_file(test_join(dir, "run.yaml"), cfg, strlen(cfg));
    test_write_file(test_join(dir, "model.json"), MODEL_JSON, strlen(MODEL_JSON));
}

/* `gtrain ARGS` in dir, stdout and stderr to dir/TAG.out, dir/TAG.err; the exit status */
static int gtrain(const char *dir, const char *tag, const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >'%s.out' 2>'%s.err'", dir, test_gtrain_bin(), args, tag, tag);
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s: did not exit (signal %d)", cmd, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    return WEXITSTATUS(st);
}

static char *text_of(const char *path) {
    size_t n;
    char *s = slurp(path, &n);
    cr_assert_not_null(s, "%s: cannot read", path);
    return s;
}

/* The fixture model is trained once per run of the suite and copied into each test that needs it
 * (four tests trained the same config with the same seed: the same weights, four times). It lives
 * in /tmp/gt_evalcli_model_PID_KEY, PID the test runner (the parent of Criterion's workers), KEY
 * the training steps and the gtrain binary's size and mtime; the first test to get the lock
 * (flock) trains it and marks it done, the others wait on the lock and copy it. A directory whose
 * runner has ended is removed by the next run. */
static void remove_stale_models(void) {
    DIR *d = opendir("/tmp");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long pid;
        if (sscanf(e->d_name, "gt_evalcli_model_%ld_", &pid) != 1 || pid <= 1 || pid == (long)getppid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* its runner is alive (or not ours) */
        char path[600];
        snprintf(path, sizeof path, "/tmp/%s", e->d_name);
        test_scratch_remove(path);
    }
    closedir(d);
}

/* the tiny model trained on the arithmetic (dir/out) */
static void train_model(const char *dir) {
    write_config(dir);
    struct stat bin;
    cr_assert_eq(stat(test_gtrain_bin(), &bin), 0, "%s: %s", test_gtrain_bin(), strerror(errno));
    char cache[256], lock[300], done[300];
    snprintf(cache, sizeof cache, "/tmp/gt_evalcli_model_%ld_%d_%lld_%lld.%09ld", (long)getppid(), fixture_steps(),
             (long long)bin.st_size, (long long)bin.st_mtim.tv_sec, (long)bin.st_mtim.tv_nsec);
    snprintf(lock, sizeof lock, "%s/lock", cache);
    snprintf(done, sizeof done, "%s/done", cache);
    cr_assert(mkdir(cache, 0755) == 0 || errno == EEXIST, "mkdir %s: %s", cache, strerror(errno));
    int fd = open(lock, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    cr_assert(fd >= 0, "%s: %s", lock, strerror(errno));
    cr_assert_eq(flock(fd, LOCK_EX), 0, "flock %s: %s", lock, strerror(errno)); /* released if this test dies */
    if (access(done, F_OK) != 0) {
        remove_stale_models();
        char out[300];
        snprintf(out, sizeof out, "%s/out", cache);
        test_scratch_remove(out); /* a run that died half way */
        write_config(cache);
        int rc = gtrain(cache, "train", "train --config run.yaml --set generation.task=none");
        cr_assert_eq(rc, 0, "training the fixture failed: %s", text_of(test_join(cache, "train.err")));
        test_write_file(done, "", 0);
    }
    cr_assert_eq(flock(fd, LOCK_UN), 0);
    close(fd);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cp -a '%s/out' '%s/out'", cache, dir);
    cr_assert_eq(system(cmd), 0, "%s failed", cmd);
}

Test(eval_cli, loss_equals_the_trainers_eval_and_touches_no_run_directory, .timeout = 120) {
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_evalcli");
    write_config(dir);
    /* the trainer's eval of the initial weights: one step at learning rate 0 changes none of them */
    int rc = gtrain(dir, "train", "train --config run.yaml --set generation.task=none --set max_steps=1 "
                                  "--set learning_rate=0 --set init=random");
    cr_assert_eq(rc, 0, "%s", text_of(test_join(dir, "train.err")));
    Losses l;
    read_train_metrics(test_join(dir, "out"), &l);
    cr_assert_eq(l.n_eval, 1);
    char *before = tree_snapshot(test_join(dir, "out"));
    /* the same weights through gtrain eval, with output_dir naming a directory that does not exist */
    rc = gtrain(dir, "eval", "eval --config run.yaml --checkpoint out --set generation.task=none --set output_dir=never");
    cr_assert_eq(rc, 0, "%s", text_of(test_join(dir, "eval.err")));
    char *out = text_of(test_join(dir, "eval.out"));
    const char *at = strstr(out, "eval_loss: ");
    cr_assert_not_null(at, "%s", out);
    double loss = strtod(at + 11, NULL);
    cr_assert(fabs(loss - l.eval_loss[0]) <= 1e-5 * fabs(l.eval_loss[0]), "gtrain eval %.9g, the trainer's eval %.9g",
              loss, l.eval_loss[0]);
    const char *ppl = strstr(out, "eval_perplexity: ");
    cr_assert_not_null(ppl);
    cr_assert(fabs(strtod(ppl + 17, NULL) - exp(loss)) <= 1e-3 * exp(loss));
    char *after = tree_snapshot(test_join(dir, "out"));
    cr_assert_str_eq(before, after, "gtrain eval changed the run directory");
    struct stat sb;
    cr_assert_neq(stat(test_join(dir, "never"), &sb), 0, "gtrain eval created output_dir");
    free(out), free(before), free(after);
    test_scratch_remove(dir);
}

/* the gold field of line i of the data file */
static char *gold_field(const char *data, long i, const char *col) {
    const char *p = data;
    for (long k = 0; k < i; k++) {
        p = strchr(p, '\n');
        cr_assert_not_null(p);
        p++;
    }
    const char *nl = strchr(p, '\n');
    char *line = strndup(p, nl ? (size_t)(nl - p) : strlen(p));
    cJSON *j = cJSON_Parse(line);
    cr_assert_not_null(j, "%s", line);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, col);
    cr_assert(cJSON_IsString(g));
    char *s = strdup(g->valuestring);
    cJSON_Delete(j);
    free(line);
    return s;
}

static void check_results(const char *dir, const char *tag, const char *results, const char *data_file,
                          const char *col, GenTask task) {
    char *out = text_of(test_join(dir, tag));
    const char *acc = strstr(out, "accuracy: ");
    cr_assert_not_null(acc, "%s", out);
    double a;
    long n, total;
    char name[32];
    cr_assert_eq(sscanf(acc, "accuracy: %lf (%ld/%ld) task %31s", &a, &n, &total, name), 4, "%s", acc);
    cr_assert_str_eq(name, gen_task_name(task));
    char *data = text_of(data_file);
    cr_assert_eq(total, count_lines(data));
    char *res = text_of(results);
    cr_assert_eq(count_lines(res), total);
    long correct = 0, id = 0;
    for (char *line = strtok(res, "\n"); line; line = strtok(NULL, "\n"), id++) {
        cJSON *j = cJSON_Parse(line);
        cr_assert_not_null(j, "%s", line);
        cr_assert_eq((long)cJSON_GetObjectItem(j, "id")->valuedouble, id, "lines in prompt order");
        const cJSON *gen = cJSON_GetObjectItem(j, "generated"), *ex = cJSON_GetObjectItem(j, "extracted"),
                    *gold = cJSON_GetObjectItem(j, "gold"), *ok = cJSON_GetObjectItem(j, "correct"),
                    *fin = cJSON_GetObjectItem(j, "finish"), *pr = cJSON_GetObjectItem(j, "prompt");
        cr_assert(cJSON_IsString(gen) && cJSON_IsBool(ok) && cJSON_IsString(fin) && cJSON_IsString(pr));
        cr_assert(strncmp(pr->valuestring, "Q: ", 3) == 0, "%s", pr->valuestring);
        char *g = gold_field(data, id, col);
        ScoreResult r;
        score_answer(task, gen->valuestring, g, &r);
        cr_assert_eq(cJSON_IsTrue(ok), r.correct, "line %ld: %s", id, line);
        cr_assert(r.extracted ? cJSON_IsString(ex) && strcmp(ex->valuestring, r.extracted) == 0 : cJSON_IsNull(ex),
                  "line %ld: %s", id, line);
        cr_assert(r.gold ? cJSON_IsString(gold) && strcmp(gold->valuestring, r.gold) == 0 : cJSON_IsNull(gold),
                  "line %ld: %s", id, line);
        correct += r.correct;
        score_result_free(&r);
        free(g);
        cJSON_Delete(j);
    }
    cr_assert_eq(correct, n);
    cr_assert(fabs(a - (double)n / (double)total) < 6e-5);
    free(out), free(data), free(res);
}

Test(eval_cli, generation_accuracy_matches_its_results_file, .timeout = 180) {
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_evalcli");
    train_model(dir);
    int rc = gtrain(dir, "gsm8k", "eval --config run.yaml --checkpoint out --output res.jsonl");
    cr_assert_eq(rc, 0, "%s", text_of(test_join(dir, "gsm8k.err")));
    char data[512];
    snprintf(data, sizeof data, "%s/tests/data/gsm8k_tiny.jsonl", root());
    check_results(dir, "gsm8k.out", test_join(dir, "res.jsonl"), data, "response", TASK_GSM8K);
    /* the trained model answers most of what it was trained on: the scorer sees real answers */
    char *out = text_of(test_join(dir, "gsm8k.out"));
    long n, total;
    cr_assert_eq(sscanf(strstr(out, "accuracy: "), "accuracy: %*f (%ld/%ld)", &n, &total), 2);
    if (!test_on_cudasim()) cr_assert(n >= total / 2, "only %ld of %ld correct: %s", n, total, out);
    free(out);
    /* MATH, the same way, from the config's generation.output; batch auto; a stop string is refused
     * without a tokenizer */
    snprintf(data, sizeof data, "%s/tests/data/math_tiny.jsonl", root());
    char args[2048];
    snprintf(args, sizeof args, "eval --config run.yaml --checkpoint out --set generation.task=math --set "
             "generation.data=%s --set 'generation.prompt_template=\"Q: {instruction}\\nA:\"' --set "
             "generation.columns.answer=output --set generation.output=math.jsonl --set generation.batch_size=auto", data);
    rc = gtrain(dir, "math", args);
    cr_assert_eq(rc, 0, "%s", text_of(test_join(dir, "math.err")));
    check_results(dir, "math.out", test_join(dir, "math.jsonl"), data, "output", TASK_MATH);
    test_scratch_remove(dir);
}

Test(eval_cli, bad_input_is_one_line_with_exit_2_and_no_results, .timeout = 180) {
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_evalcli");
    train_model(dir);
    char long_prompt[400] = "{\"query\": \"";
    for (int i = 0; i < 200; i++) strcat(long_prompt, "x");
    strcat(long_prompt, "\", \"response\": \"#### 1\"}\n");
    const char *good = "{\"query\": \"1+1?\", \"response\": \"#### 2\"}\n";
    char buf[1024];
    test_write_file(test_join(dir, "long.jsonl"), buf, (size_t)snprintf(buf, sizeof buf, "%s%s", good, long_prompt));
    test_write_file(test_join(dir, "empty.jsonl"), "", 0);
    test_write_file(test_join(dir, "nogold.jsonl"), buf,
                    (size_t)snprintf(buf, sizeof buf, "%s%s{\"query\": \"1+2?\"}\n", good, good));
    test_write_file(test_join(dir, "noprompt.jsonl"), buf,
                    (size_t)snprintf(buf, sizeof buf, "%s{\"q\": \"1+2?\", \"response\": \"#### 3\"}\n", good));
    test_write_file(test_join(dir, "stop.yaml"), buf,
                    (size_t)snprintf(buf, sizeof buf, "model: model.json\ndata:\n  train: x.jsonl\n  seq_len: 64\n"
                                     "generation:\n  task: gsm8k\n  data: nogold.jsonl\n  stop: [\"a, b\", \"\"]\n"));
    static const struct { const char *args, *says1, *says2; } cases[] = {
        {"--set generation.data=long.jsonl", "long.jsonl:2:", "the prompt has 206 tokens, expected at most 95"},
        {"--set generation.data=empty.jsonl", "empty.jsonl", "is empty"},
        {"--set generation.data=nogold.jsonl", "nogold.jsonl:3:", "the answer column \"response\""},
        {"--set generation.data=noprompt.jsonl", "noprompt.jsonl:2:", "the template's field {query} is missing"},
        {"--set generation.task=gsm9k", "generation.task", "expected one of none, gsm8k, math, found gsm9k"},
        {"--set generation.stop=", NULL, NULL}, /* an empty scalar is no stop strings: runs */
        {"--set generation.stop=Q", "generation.stop", "without a tokenizer"},
        {"--set generation.task=none --output r.jsonl", "--output", "expected generation.task"},
        {"--output run.yaml", "--output", "found the config"},
        {"--set generation.data=missing.jsonl", "missing.jsonl", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char args[1024];
        snprintf(args, sizeof args, "eval --config run.yaml --checkpoint out --output res%zu.jsonl %s", i, cases[i].args);
        if (strstr(cases[i].args, "--output")) snprintf(args, sizeof args, "eval --config run.yaml --checkpoint out %s", cases[i].args);
        int rc = gtrain(dir, "bad", args);
        char *err = text_of(test_join(dir, "bad.err")), *out = text_of(test_join(dir, "bad.out"));
        if (!cases[i].says1) {
            cr_assert_eq(rc, 0, "%s: %s", args, err);
        } else {
            cr_assert_eq(rc, 2, "%s: exit %d: %s", args, rc, err);
            cr_assert_eq(count_lines(err), 1, "%s: %s", args, err);
            cr_assert(strstr(err, cases[i].says1) && strstr(err, cases[i].says2), "%s: %s", args, err);
            cr_assert_str_eq(out, "", "%s: output before the error: %s", args, out);
            char res[64];
            snprintf(res, sizeof res, "res%zu.jsonl", i);
            cr_assert(!exists(test_join(dir, res)), "%s", args);
        }
        free(err), free(out);
    }
    /* an empty stop string in the list, a --checkpoint that is not a model */
    int rc = gtrain(dir, "bad", "eval --config stop.yaml --checkpoint out");
    char *err = text_of(test_join(dir, "bad.err"));
    cr_assert(rc == 2 && count_lines(err) == 1 && strstr(err, "stop.yaml:8:") && strstr(err, "generation.stop"), "%s", err);
    free(err);
    rc = gtrain(dir, "bad", "eval --config run.yaml --checkpoint .");
    err = text_of(test_join(dir, "bad.err"));
    cr_assert(rc == 2 && count_lines(err) == 1 && strstr(err, "--checkpoint") && strstr(err, "config.json"), "%s", err);
    free(err);
    test_scratch_remove(dir);
}

Test(eval_cli, sigterm_while_generating_leaves_no_results_file, .timeout = 180) {
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_evalcli");
    train_model(dir);
    /* enough prompts to take a while: 4000 copies of the tiny set's first line */
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/gsm8k_tiny.jsonl", root());
    char *data = text_of(path);
    const char *nl = strchr(data, '\n');
    {
        FILE *f = fopen(test_join(dir, "many.jsonl"), "w");
        cr_assert_not_null(f);
        for (int i = 0; i < 4000; i++) fwrite(data, 1, (size_t)(nl - data) + 1, f);
        fclose(f);
    }
    free(data);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && exec '%s' eval --config run.yaml --checkpoint out --output res.jsonl --set "
             "generation.data=many.jsonl --set generation.max_new_tokens=60 >sig.out 2>sig.err", dir, test_gtrain_bin());
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* wait for the first progress line past 0 examples, then SIGTERM */
    bool seen = false;
    for (int i = 0; i < 6000 && !seen; i++) {
        size_t n;
        char *o = slurp(test_join(dir, "sig.out"), &n);
        seen = o && strstr(o, "generating: ") && !strstr(o, "accuracy: ");
        free(o);
        if (!seen) usleep(10000);
    }
    cr_assert(seen, "no progress line");
    cr_assert_eq(kill(pid, SIGTERM), 0);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0, "status %d", st);
    char *err = text_of(test_join(dir, "sig.err"));
    cr_assert(strstr(err, "SIGTERM") && strstr(err, "no results written"), "%s", err);
    free(err);
    cr_assert(!exists(test_join(dir, "res.jsonl")), "a results file under its final name");
    cr_assert(!exists(test_join(dir, "res.jsonl.tmp")), "a temporary left");
    test_scratch_remove(dir);
}

/* the "train" records' losses of dir/metrics.jsonl, as text (exact), and its eval records */
static void metrics_lines(const char *dir, char **train, char **eval) {
    char *m = text_of(test_join(dir, "metrics.jsonl"));
    size_t tn = 0, en = 0;
    *train = calloc(1, strlen(m) + 1), *eval = calloc(1, strlen(m) + 1);
    for (char *line = strtok(m, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        cr_assert_not_null(j, "%s", line);
        const char *type = cJSON_GetObjectItem(j, "type")->valuestring;
        if (strcmp(type, "train") == 0)
            tn += (size_t)sprintf(*train + tn, "%ld %.17g\n", (long)cJSON_GetObjectItem(j, "step")->valuedouble,
                                  cJSON_GetObjectItem(j, "loss")->valuedouble);
        if (strcmp(type, "eval") == 0) {
            const cJSON *a = cJSON_GetObjectItem(j, "eval_accuracy"), *c = cJSON_GetObjectItem(j, "eval_correct"),
                        *x = cJSON_GetObjectItem(j, "eval_examples");
            en += (size_t)sprintf(*eval + en, "%ld %s %ld %ld\n", (long)cJSON_GetObjectItem(j, "step")->valuedouble,
                                  cJSON_IsNumber(a) ? "acc" : "-", c ? (long)c->valuedouble : -1L,
                                  x ? (long)x->valuedouble : -1L);
        }
        cJSON_Delete(j);
    }
    free(m);
}

Test(eval_cli, accuracy_at_each_training_eval_is_gtrain_evals_and_changes_no_step, .timeout = 180) {
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_evalcli");
    write_config(dir);
    const int last = fixture_steps(), mid = last / 2;
    char args[512], want[160];
    snprintf(args, sizeof args, "train --config run.yaml --set eval_steps=%d --set output_dir=gen", mid);
    int rc = gtrain(dir, "gen", args);
    cr_assert_eq(rc, 0, "%s", text_of(test_join(dir, "gen.err")));
    snprintf(args, sizeof args, "train --config run.yaml --set eval_steps=%d --set output_dir=plain --set generation.task=none",
             mid);
    rc = gtrain(dir, "plain", args);
    cr_assert_eq(rc, 0, "%s", text_of(test_join(dir, "plain.err")));
    /* generating at each eval changes no training step: the same losses and final weights */
    char *tg, *eg, *tp, *ep;
    metrics_lines(test_join(dir, "gen"), &tg, &eg);
    metrics_lines(test_join(dir, "plain"), &tp, &ep);
    cr_assert_str_eq(tg, tp);
    cr_assert(files_equal(test_join(dir, "gen/model.safetensors"), test_join(dir, "plain/model.safetensors")));
    snprintf(want, sizeof want, "%d acc ", mid);
    cr_assert_eq(strncmp(eg, want, strlen(want)), 0, "%s", eg);
    snprintf(want, sizeof want, "\n%d acc ", last);
    cr_assert(strstr(eg, want) && strstr(eg, " 24\n"), "%s", eg);
    snprintf(want, sizeof want, "%d - -1 -1\n", mid);
    cr_assert(strstr(ep, want), "%s", ep);
    /* the log's accuracy line, its results file, and gtrain eval of the final weights: the same */
    char *log = text_of(test_join(dir, "gen.out"));
    char line[64], res[64];
    snprintf(line, sizeof line, "eval step %d | eval accuracy: ", last);
    snprintf(res, sizeof res, "eval_results-%d.jsonl", last);
    cr_assert(strstr(log, line) && strstr(log, res), "%s", log);
    snprintf(res, sizeof res, "gen/eval_results-%d.jsonl", mid);
    cr_assert(exists(test_join(dir, res)));
    rc = gtrain(dir, "final", "eval --config run.yaml --checkpoint gen --output final.jsonl");
    cr_assert_eq(rc, 0, "%s", text_of(test_join(dir, "final.err")));
    snprintf(res, sizeof res, "gen/eval_results-%d.jsonl", last);
    cr_assert(files_equal(test_join(dir, "final.jsonl"), test_join(dir, res)));
    char *fo = text_of(test_join(dir, "final.out"));
    const char *acc = strstr(fo, "accuracy: ");
    cr_assert_not_null(acc);
    snprintf(want, sizeof want, "eval step %d | eval %.*s", last, (int)strcspn(acc, "\n"), acc);
    cr_assert(strstr(log, want), "%s not in the training log", want);
    /* TensorBoard's scalar beside the loss */
    char *tb = test_sh_output(false, "grep -c -a 'eval/accuracy' '%s'/gen/events.out.tfevents.*", dir);
    cr_assert(atoi(tb) >= 1, "no eval/accuracy in the events file: %s", tb);
    free(tg), free(eg), free(tp), free(ep), free(log), free(fo), free(tb);
    test_scratch_remove(dir);
}

Test(eval_cli, a_column_key_leaves_the_keys_after_it_alone, .timeout = 60) {
    /* a column name's field is shorter than a path's: setting one (generation.columns.answer in the file,
     * data.columns.messages by --set) must not clear the keys stored after it */
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_evalcli");
    write_config(dir);
    int rc = gtrain(dir, "plan", "plan --config run.yaml --set data.columns.messages=msgs --set data.format=jsonl");
    char *out = text_of(test_join(dir, "plan.out"));
    cr_assert_eq(rc, 0, "%s", text_of(test_join(dir, "plan.err")));
    static const char *const want[] = {"generation.temperature         1 ", "generation.top_k               50 ",
                                       "generation.top_p               1 ", "generation.max_new_tokens      40 ",
                                       "data.assistant_only_loss       true ", "generation.columns.answer      response "};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) cr_assert(strstr(out, want[i]), "no \"%s\" in\n%s", want[i], out);
    free(out);
    test_scratch_remove(dir);
}

/* example 0's "generated" and "finish" of a results file */
static void first_result(const char *path, char *gen, size_t cap, char *finish, size_t fcap) {
    char *res = text_of(path);
    cJSON *j = cJSON_Parse(strtok(res, "\n"));
    cr_assert_not_null(j);
    snprintf(gen, cap, "%s", cJSON_GetObjectItem(j, "generated")->valuestring);
    snprintf(finish, fcap, "%s", cJSON_GetObjectItem(j, "finish")->valuestring);
    cJSON_Delete(j);
    free(res);
}

Test(eval_cli, chat_messages_and_stop_strings_through_a_real_tokenizer, .timeout = 180) {
    /* a one-layer Llama over Llama-3.1's tokenizer (random weights, saved by a learning-rate-0 step):
     * messages rendered with the generation prompt, and a stop string cutting the text before it */
    char dir[256], tok[1024];
    test_scratch_make(dir, sizeof dir, "gt_evalcli");
    ref_tokenizer_file("llama3_1", tok, sizeof tok);
    char tokdir[1024];
    snprintf(tokdir, sizeof tokdir, "%.*s", (int)(strrchr(tok, '/') - tok), tok);
    static const char cfgjson[] =
        "{\"model_type\": \"llama\", \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
        " \"hidden_size\": 16, \"intermediate_size\": 32, \"vocab_size\": 128256, \"max_position_embeddings\": 256,"
        " \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, \"tie_word_embeddings\": true}\n";
    test_write_file(test_join(dir, "config.json"), cfgjson, strlen(cfgjson));
    char buf[4096];
    int n = snprintf(buf, sizeof buf,
                     "model: config.json\ntokenizer: %s\ninit: random\ndata:\n  train: %s/tests/data/eval_train.jsonl\n"
                     "  format: jsonl\n  seq_len: 64\nper_device_train_batch_size: 4\nmax_steps: 1\nlearning_rate: 0\n"
                     "save_steps: 0\nnum_threads: 1\noutput_dir: out\ngeneration:\n  task: gsm8k\n  data: msgs.jsonl\n"
                     "  columns:\n    messages: conversation\n    answer: response\n  max_new_tokens: 12\n",
                     tokdir, root());
    test_write_file(test_join(dir, "run.yaml"), buf, (size_t)n);
    n = 0;
    for (int i = 0; i < 5; i++)
        n += snprintf(buf + n, sizeof buf - (size_t)n,
                      "{\"conversation\": [{\"role\": \"user\", \"content\": \"What is %d+%d?\"}], \"response\": \"#### %d\"}\n",
                      i, i, 2 * i);
    test_write_file(test_join(dir, "msgs.jsonl"), buf, (size_t)n);
    int rc = gtrain(dir, "train", "train --config run.yaml --set generation.task=none");
    cr_assert_eq(rc, 0, "%s", text_of(test_join(dir, "train.err")));
    rc = gtrain(dir, "a", "eval --config run.yaml --checkpoint out --output a.jsonl");
    cr_assert_eq(rc, 0, "%s", text_of(test_join(dir, "a.err")));
    char *res = text_of(test_join(dir, "a.jsonl"));
    cr_assert(strstr(res, "What is 0+0?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n\\n\", \"generated\""),
              "no generation prompt after the messages: %s", res);
    free(res);
    char gen[1024], fin[32];
    first_result(test_join(dir, "a.jsonl"), gen, sizeof gen, fin, sizeof fin);
    cr_assert_str_eq(fin, "length");
    size_t len = strlen(gen);
    cr_assert(len >= 4, "%s", gen);
    /* a stop string from inside the greedy text (which it first appears at): the text ends before it */
    char stop[8], args[256];
    snprintf(stop, sizeof stop, "%.3s", gen + 1);
    size_t first = (size_t)(strstr(gen, stop) - gen);
    FILE *f = fopen(test_join(dir, "stop.yaml"), "w");
    cr_assert_not_null(f);
    fprintf(f, "generation:\n  stop: [\"a, b\\nc\", ");
    for (const char *c = stop; *c; c++) fprintf(f, c == stop ? "\"\\u%04x" : "\\u%04x", (unsigned char)*c);
    fprintf(f, "\"]\n");
    fclose(f);
    char *cfg = text_of(test_join(dir, "run.yaml")), *extra = text_of(test_join(dir, "stop.yaml"));
    char *joined = malloc(strlen(cfg) + strlen(extra) + 1);
    strcpy(joined, cfg);
    *strstr(joined, "  max_new_tokens") = '\0';
    strcat(joined, "  max_new_tokens: 12\n");
    strcat(joined, strstr(extra, "  stop"));
    test_write_file(test_join(dir, "run_stop.yaml"), joined, strlen(joined));
    free(cfg), free(extra), free(joined);
    snprintf(args, sizeof args, "eval --config run_stop.yaml --checkpoint out --output b.jsonl");
    rc = gtrain(dir, "b", args);
    cr_assert_eq(rc, 0, "%s", text_of(test_join(dir, "b.err")));
    char gen_b[1024], fin_b[32];
    first_result(test_join(dir, "b.jsonl"), gen_b, sizeof gen_b, fin_b, sizeof fin_b);
    cr_assert_str_eq(fin_b, "stop", "stop \"%s\" in \"%s\": %s", stop, gen, gen_b);
    cr_assert(strlen(gen_b) == first && strncmp(gen_b, gen, first) == 0, "stop \"%s\": \"%s\" from \"%s\"", stop, gen_b, gen);
    test_scratch_remove(dir);
}

Test(eval_cli, jsonl_json_and_parquet_prompts_give_the_same_results, .timeout = 180) {
    /* tests/data's gsm8k set as a JSON array (written here) and as parquet (pyarrow's writer, through
     * the references' Python): the same prompts, gold answers and results as the jsonl */
    test_require_refs();
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_evalcli");
    train_model(dir);
    char *o = test_sh_output(true,
                             PY " -c \"import json, pyarrow as pa, pyarrow.parquet as pq; rows = [json.loads(l) for l in "
                                "open('%s/tests/data/gsm8k_tiny.jsonl')]; json.dump(rows, open('%s/g.json', 'w')); "
                                "pq.write_table(pa.table({'n': list(range(len(rows))), 'query': [r['query'] for r in rows], "
                                "'response': [r['response'] for r in rows]}), '%s/g.parquet')\"",
                             root(), dir, dir);
    free(o);
    static const char *const files[] = {"", "g.json", "g.parquet"};
    char *want = NULL;
    for (int i = 0; i < 3; i++) {
        char args[512], res[32];
        snprintf(res, sizeof res, "res%d.jsonl", i);
        snprintf(args, sizeof args, "eval --config run.yaml --checkpoint out --output %s %s%s", res,
                 i ? "--set generation.data=" : "", files[i]);
        int rc = gtrain(dir, "fmt", args);
        cr_assert_eq(rc, 0, "%s: %s", args, text_of(test_join(dir, "fmt.err")));
        char *got = text_of(test_join(dir, res));
        if (!want) want = got;
        else {
            cr_assert_str_eq(got, want, "%s", files[i]);
            free(got);
        }
    }
    free(want);
    /* a parquet file without the answer column: one line naming it */
    o = test_sh_output(true, PY " -c \"import pyarrow as pa, pyarrow.parquet as pq; pq.write_table(pa.table({'query': "
                                "['1+1?']}), '%s/noans.parquet')\"", dir);
    free(o);
    int rc = gtrain(dir, "fmt", "eval --config run.yaml --checkpoint out --set generation.data=noans.parquet");
    char *err = text_of(test_join(dir, "fmt.err"));
    cr_assert(rc == 2 && count_lines(err) == 1 && strstr(err, "noans.parquet") && strstr(err, "\"response\""), "%s", err);
    free(err);
    test_scratch_remove(dir);
}
