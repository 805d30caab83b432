/* test_cli.c - the command table (src/cli_table.c) against the binary: every command answers
 * `gtrain help COMMAND` and `gtrain COMMAND --help` alike and names each option its entry lists;
 * an unknown option, another command's option, an option twice and an unknown command are each one
 * line and exit 2; every option an entry lists is accepted by that command (given alone, it is never
 * called unknown, and the command never reads an option its entry lacks: that aborts); and
 * docs/commands.md is what `gtrain help --markdown` prints now. The binary runs as a child process
 * ($GTRAIN_BIN) in a scratch directory, stdin /dev/null. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "test_backend_select.h"
#include "test_util.h"

typedef struct {
    int status; /* waitpid's */
    char *out, *err;
} Result;

static char g_dir[256];

static void setup(void) { test_scratch_make(g_dir, sizeof g_dir, "gt_cli"); }
static void teardown(void) { test_scratch_remove(g_dir); }
TestSuite(cli, .init = setup, .fini = teardown);

static char *slurp_file(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    cr_assert_not_null(s);
    for (size_t k; (k = fread(s + n, 1, cap - n - 1, f)) > 0;) {
        n += k;
        if (n + 1 == cap) {
            s = realloc(s, cap *= 2);
            cr_assert_not_null(s);
        }
    }
    s[n] = '\0';
    fclose(f);
    return s;
}

/* gtrain with args[] (NULL-terminated, args[0] the first argument), in g_dir */
static Result run_args(const char *const *args) {
    const char *bin = test_gtrain_bin();
    if (!bin) cr_skip_test("GTRAIN_BIN not set (run through make test)");
    char out[300], err[300];
    snprintf(out, sizeof out, "%s/out", g_dir);
    snprintf(err, sizeof err, "%s/err", g_dir);
    const char *argv[64] = {bin};
    int n = 1;
    for (; args[n - 1]; n++) {
        cr_assert_lt(n, 63);
        argv[n] = args[n - 1];
    }
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY), o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644),
            e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in < 0 || o < 0 || e < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || chdir(g_dir) != 0) _exit(127);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    Result r = {0};
    cr_assert_eq(waitpid(pid, &r.status, 0), pid);
    r.out = slurp_file(out);
    r.err = slurp_file(err);
    return r;
}

static void done(Result *r) {
    free(r->out);
    free(r->err);
}

static const char *show(const char *const *args) {
    static char buf[1024];
    buf[0] = '\0';
    for (int i = 0; args[i]; i++) {
        strncat(buf, " ", sizeof buf - strlen(buf) - 1);
        strncat(buf, args[i], sizeof buf - strlen(buf) - 1);
    }
    return buf;
}

/* exit 2 and one line on stderr, "gtrain: " first, holding each of the NULL-terminated needles */
static void expect_usage_error(const Result *r, const char *const *args, const char *n1, const char *n2, const char *n3) {
    const char *what = show(args);
    cr_assert(WIFEXITED(r->status), "gtrain%s: killed by signal %d: %s", what, WTERMSIG(r->status), r->err);
    cr_assert_eq(WEXITSTATUS(r->status), 2, "gtrain%s: exit %d, expected 2: %s", what, WEXITSTATUS(r->status), r->err);
    size_t len = strlen(r->err);
    cr_assert(len > 0 && strchr(r->err, '\n') == r->err + len - 1, "gtrain%s: expected one line on stderr, found \"%s\"",
              what, r->err);
    cr_assert(strncmp(r->err, "gtrain: ", 8) == 0, "gtrain%s: %s", what, r->err);
    const char *needles[] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        if (needles[i]) cr_assert_not_null(strstr(r->err, needles[i]), "gtrain%s: expected \"%s\" in: %s", what, needles[i], r->err);
}

/* "--name" as a whole word of s (not the prefix of a longer option: --prompt vs --prompt-ids) */
static bool names_option(const char *s, const char *name) {
    char want[80];
    snprintf(want, sizeof want, "--%s", name);
    for (const char *p = s; (p = strstr(p, want)); p++) {
        char after = p[strlen(want)];
        if (!(after == '-' || (after >= 'a' && after <= 'z'))) return true;
    }
    return false;
}

Test(cli, every_command_answers_help_and_dash_dash_help_alike_naming_its_options, .timeout = 60) {
    int n_commands = 0;
    for (const CliCommand *c = CLI_COMMANDS; c->name; c++, n_commands++) {
        const char *help_args[] = {"help", c->name, NULL}, *dash_args[] = {c->name, "--help", NULL},
                   *h_args[] = {c->name, "-h", NULL};
        Result a = run_args(help_args), b = run_args(dash_args), h = run_args(h_args);
        cr_assert(WIFEXITED(a.status) && WEXITSTATUS(a.status) == 0, "gtrain help %s: %s", c->name, a.err);
        cr_assert(WIFEXITED(b.status) && WEXITSTATUS(b.status) == 0, "gtrain %s --help: %s", c->name, b.err);
        cr_assert(WIFEXITED(h.status) && WEXITSTATUS(h.status) == 0, "gtrain %s -h: %s", c->name, h.err);
        cr_assert_str_eq(a.err, "");
        cr_assert_str_eq(a.out, b.out, "gtrain help %s and gtrain %s --help differ", c->name, c->name);
        cr_assert_str_eq(a.out, h.out);
        char usage[64];
        snprintf(usage, sizeof usage, "usage: gtrain %s", c == CLI_COMMANDS ? "[train]" : c->name);
        cr_assert(strncmp(a.out, usage, strlen(usage)) == 0, "gtrain help %s: starts \"%.60s\"", c->name, a.out);
        cr_assert(names_option(a.out, "help"), "gtrain help %s lacks --help", c->name);
        for (const CliOption *o = c->options; o->name; o++) {
            cr_assert(names_option(a.out, o->name), "gtrain help %s does not name --%s:\n%s", c->name, o->name, a.out);
            if (o->letter) {
                char letter[8];
                snprintf(letter, sizeof letter, "-%c, --", o->letter);
                cr_assert_not_null(strstr(a.out, letter), "gtrain help %s does not name -%c", c->name, o->letter);
            }
        }
        /* the options it does not take are not named as its own */
        for (const CliCommand *other = CLI_COMMANDS; other->name; other++)
            for (const CliOption *o = other->options; o->name; o++) {
                bool own = false;
                for (const CliOption *m = c->options; m->name; m++) own = own || strcmp(m->name, o->name) == 0;
                const char *opts = strstr(a.out, "\noptions:\n");
                cr_assert_not_null(opts);
                cr_assert(own || !names_option(opts, o->name), "gtrain help %s lists --%s, which is %s's", c->name,
                          o->name, other->name);
            }
        done(&a), done(&b), done(&h);
    }
    cr_assert_geq(n_commands, 8);
    /* the overview: gtrain help, gtrain --help, each naming every command */
    const char *help[] = {"help", NULL}, *dash[] = {"--help", NULL};
    Result a = run_args(help), b = run_args(dash);
    cr_assert(WIFEXITED(a.status) && WEXITSTATUS(a.status) == 0, "%s", a.err);
    cr_assert(WIFEXITED(b.status) && WEXITSTATUS(b.status) == 0, "%s", b.err);
    cr_assert_str_eq(a.out, b.out);
    for (const CliCommand *c = CLI_COMMANDS; c->name; c++) {
        char line[64];
        snprintf(line, sizeof line, "\n  %s ", c->name);
        cr_assert_not_null(strstr(a.out, line), "gtrain help does not list %s:\n%s", c->name, a.out);
    }
    done(&a), done(&b);
}

Test(cli, unknown_options_commands_and_repeats_are_one_line_and_exit_2, .timeout = 60) {
    for (const CliCommand *c = CLI_COMMANDS; c->name; c++) {
        char see[64];
        snprintf(see, sizeof see, "see gtrain help %s", c->name);
        const char *unknown[] = {c->name, "--no-such-option", NULL}, *short_unknown[] = {c->name, "-Z", NULL},
                   *unknown_value[] = {c->name, "--no-such-option=1", NULL};
        Result r = run_args(unknown);
        expect_usage_error(&r, unknown, "--no-such-option: unknown", see, NULL);
        done(&r);
        r = run_args(short_unknown);
        expect_usage_error(&r, short_unknown, "-Z: unknown option", see, NULL);
        done(&r);
        r = run_args(unknown_value);
        expect_usage_error(&r, unknown_value, "--no-such-option: unknown", see, NULL);
        done(&r);
        for (const CliOption *o = c->options; o->name; o++) {
            char opt[80], with_value[96];
            snprintf(opt, sizeof opt, "--%s", o->name);
            snprintf(with_value, sizeof with_value, "--%s=x", o->name);
            /* twice (a repeatable one is fine twice: given once more without its value instead) */
            const char *twice[] = {c->name, opt, "v", opt, "v", NULL}, *flag_twice[] = {c->name, opt, opt, NULL},
                       *missing[] = {c->name, opt, NULL}, *flag_value[] = {c->name, with_value, NULL};
            if (o->arg && !o->repeatable) {
                r = run_args(twice);
                expect_usage_error(&r, twice, opt, "given more than once", see);
                done(&r);
            }
            if (!o->arg) {
                r = run_args(flag_twice);
                expect_usage_error(&r, flag_twice, opt, "given more than once", see);
                done(&r);
                r = run_args(flag_value);
                expect_usage_error(&r, flag_value, opt, "takes no value", see);
                done(&r);
            } else {
                r = run_args(missing);
                expect_usage_error(&r, missing, opt, "expected a value", see);
                done(&r);
            }
        }
        /* every other command's option it does not take: named as theirs */
        for (const CliCommand *other = CLI_COMMANDS; other->name; other++)
            for (const CliOption *o = other->options; o->name; o++) {
                bool own = false;
                for (const CliOption *m = c->options; m->name; m++) own = own || strcmp(m->name, o->name) == 0;
                if (own) continue;
                char opt[80], says[128], only[96];
                snprintf(opt, sizeof opt, "--%s", o->name);
                snprintf(says, sizeof says, "--%s: not for gtrain %s", o->name, c->name);
                snprintf(only, sizeof only, "gtrain %s", other->name);
                const char *args[] = {c->name, opt, "v", NULL};
                r = run_args(o->arg ? args : (const char *const[]){c->name, opt, NULL});
                expect_usage_error(&r, args, says, only, see);
                done(&r);
            }
    }
    const char *bad[][4] = {{"no-such-command", NULL}, {"no-such-command", "--config", "x", NULL}, {"", NULL},
                            {"help", "no-such-command", NULL}, {"help", "plan", "eval", NULL}, {"report", NULL},
                            {"report", "a", "b", NULL}, {"--config", "run.yaml", "plan", NULL}, {NULL}};
    const char *says[] = {"unknown command 'no-such-command'", "unknown command 'no-such-command'", "unknown command ''",
                          "unknown command 'no-such-command'", "unexpected argument 'eval'", "missing argument",
                          "unexpected argument 'b'", "a command comes first: gtrain plan"};
    for (int i = 0; i < (int)(sizeof says / sizeof *says); i++) {
        Result r = run_args(bad[i]);
        expect_usage_error(&r, bad[i], says[i], NULL, NULL);
        done(&r);
    }
    const char *none[] = {NULL};
    Result r = run_args(none);
    expect_usage_error(&r, none, "see gtrain help", NULL, NULL);
    done(&r);
}

/* Every option each entry lists, given alone (with a value when it takes one, and the operands the
 * command needs): never refused as unknown or as another command's, never an abort (a command
 * reading an option its entry lacks aborts), and the value reaches the command: an option the
 * command does not read would leave no trace, so each is also given a value it refuses, and the
 * refusal must name it, except where a value cannot be wrong here (a path that is only opened
 * later, a text, a flag). */
Test(cli, every_listed_option_is_accepted_by_its_command, .timeout = 120) {
    for (const CliCommand *c = CLI_COMMANDS; c->name; c++) {
        for (const CliOption *o = c->options; o->name; o++) {
            char opt[80];
            snprintf(opt, sizeof opt, "--%s", o->name);
            const char *args[8] = {c->name, opt};
            int n = 2;
            if (o->arg) args[n++] = "no-such-path";
            for (int k = 0; k < c->min_operands; k++) args[n++] = "no-such-dir";
            args[n] = NULL;
            Result r = run_args(args);
            cr_assert(WIFEXITED(r.status), "gtrain%s: killed by signal %d: %s", show(args), WTERMSIG(r.status), r.err);
            cr_assert_neq(WEXITSTATUS(r.status), 127);
            cr_assert_null(strstr(r.err, "unknown"), "gtrain%s: %s", show(args), r.err);
            cr_assert_null(strstr(r.err, "not for gtrain"), "gtrain%s: %s", show(args), r.err);
            cr_assert_null(strstr(r.err, "internal error"), "gtrain%s: %s", show(args), r.err);
            if (c->run == help_command || (c->run == train_command && o->letter == 'V')) {
                cr_assert_eq(WEXITSTATUS(r.status), 0, "gtrain%s: %s", show(args), r.err);
                cr_assert_str_neq(r.out, "");
            }
            done(&r);
            /* the short letter is the same option */
            if (o->letter) {
                char letter[4] = {'-', o->letter, 0};
                args[1] = letter;
                Result s = run_args(args);
                cr_assert(WIFEXITED(s.status), "gtrain%s: killed", show(args));
                cr_assert_null(strstr(s.err, "unknown"), "gtrain%s: %s", show(args), s.err);
                done(&s);
            }
        }
    }
    /* values each command checks itself name their option when wrong */
    static const char *const refused[][6] = {
        {"sample", "--checkpoint", "ck", "--max-new-tokens", "x", NULL}, {"sample", "--checkpoint", "ck", "--top-k", "-1", NULL},
        {"sample", "--checkpoint", "ck", "--seed", "1.5", NULL},         {"sample", "--checkpoint", "ck", "--temperature", "-1", NULL},
        {"merge", "--base", "b", "--dtype", "f16", NULL},                {"merge", "--base", "b", "--max-shard-size", "5Gb", NULL},
        {"tokenize", "--tokenizer", "t", "--threads", "0", NULL},        {"tokenize", "--data", "d", "--format", "tokens", NULL},
        {"tokenize", "--data", "d", "--column", "colour=x", NULL},       {"tokenize", "--format", "text", NULL},
        {"tokenize", "--data", "d", "--jsonl", NULL},                    {"train", "--markdown", NULL},
    };
    static const char *const named[] = {"--max-new-tokens", "--top-k", "--seed", "--temperature", "--dtype",
                                        "--max-shard-size", "--threads", "--format", "--column", "--format: only with --data",
                                        "--jsonl: not with --data", "--markdown: only with --help-config"};
    for (size_t i = 0; i < sizeof named / sizeof *named; i++) {
        Result r = run_args(refused[i]);
        expect_usage_error(&r, refused[i], named[i], NULL, NULL);
        done(&r);
    }
    /* repeatable: every --set reaches the config (the second one is the refused key) */
    const char *sets[] = {"plan", "--config", "run.yaml", "--set", "seed=1", "--set", "no_such_key=1", NULL};
    test_write_file(test_join(g_dir, "run.yaml"), "model: m.json\n", 14);
    Result r = run_args(sets);
    cr_assert_eq(WEXITSTATUS(r.status), 2, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "no_such_key"), "%s", r.err);
    done(&r);
}

/* in process: the parser keeps each value of a repeatable option in order, the last of the others */
Test(cli, parser_keeps_values_and_operands) {
    const CliCommand *t = cli_command("tokenize");
    cr_assert_not_null(t);
    char *args[] = {"tokenize", "--column", "text=a", "in1", "--data=d", "--column", "prompt=b", "--", "--in2", NULL};
    CliArgs a;
    cr_assert_eq(cli_parse(t, 9, args, &a), 0);
    const char *cols[16];
    cr_assert_eq(cli_values(&a, "column", cols), 2);
    cr_assert_str_eq(cols[0], "text=a");
    cr_assert_str_eq(cols[1], "prompt=b");
    cr_assert_str_eq(cli_value(&a, "data"), "d");
    cr_assert(cli_given(&a, "data") && !cli_given(&a, "jsonl"));
    cr_assert_null(cli_value(&a, "out"));
    cr_assert_eq(a.n_operands, 2);
    cr_assert_str_eq(a.operands[0], "in1");
    cr_assert_str_eq(a.operands[1], "--in2");
    cli_args_free(&a);
    cr_assert_null(cli_command("no-such-command"));
}

/* docs/commands.md is generated from the table (gtrain help --markdown > docs/commands.md) */
Test(cli, docs_commands_md_is_up_to_date, .timeout = 30) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT not set (run through make test)");
    const char *args[] = {"help", "--markdown", NULL};
    Result r = run_args(args);
    cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "%s", r.err);
    char path[512];
    snprintf(path, sizeof path, "%s/docs/commands.md", root);
    char *doc = slurp_file(path);
    cr_assert(strcmp(doc, r.out) == 0,
              "docs/commands.md is stale: regenerate it with `build/gtrain help --markdown > docs/commands.md`");
    for (const CliCommand *c = CLI_COMMANDS; c->name; c++) {
        char head[64];
        snprintf(head, sizeof head, "\n## gtrain %s\n", c->name);
        cr_assert_not_null(strstr(doc, head), "docs/commands.md lacks %s", c->name);
    }
    free(doc);
    done(&r);
}
