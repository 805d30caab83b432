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

/* "--name" listed as an option in the options part of a help text: "  -c, --name" or "      --name" */
static bool lists_option(const char *opts, const char *name) {
    char a[96], b[96];
    snprintf(a, sizeof a, ", --%s", name);
    snprintf(b, sizeof b, "\n      --%s", name);
    for (const char *want[] = {a, b, NULL}, **w = want; *w; w++)
        for (const char *p = opts; (p = strstr(p, *w)); p++) {
            char after = p[strlen(*w)];
            if (after == ' ' || after == '\n') return true;
        }
    return false;
}

/* word in s after a space and before a space, ',' or ')' */
static bool has_word(const char *s, const char *word) {
    size_t n = strlen(word);
    for (const char *p = s; (p = strstr(p, word)); p++)
        if (p > s && p[-1] == ' ' && (p[n] == ' ' || p[n] == ',' || p[n] == ')')) return true;
    return false;
}

Test(cli, every_command_answers_help_and_dash_dash_help_alike_naming_its_options, .timeout = 180) {
    int n_commands = 0;
    for (const CliCommand *c = CLI_COMMANDS; c->name; c++, n_commands++) {
        const char *help_args[] = {"help", c->name, NULL}, *dash_args[] = {c->name, "--help", NULL};
        Result a = run_args(help_args), b = run_args(dash_args);
        cr_assert(WIFEXITED(a.status) && WEXITSTATUS(a.status) == 0, "gtrain help %s: %s", c->name, a.err);
        cr_assert(WIFEXITED(b.status) && WEXITSTATUS(b.status) == 0, "gtrain %s --help: %s", c->name, b.err);
        cr_assert_str_eq(a.err, "");
        cr_assert_str_eq(a.out, b.out, "gtrain help %s and gtrain %s --help differ", c->name, c->name);
        char usage[64];
        snprintf(usage, sizeof usage, "usage: gtrain %s", c == CLI_COMMANDS ? "[train]" : c->name);
        cr_assert(strncmp(a.out, usage, strlen(usage)) == 0, "gtrain help %s: starts \"%.60s\"", c->name, a.out);
        const char *opts = strstr(a.out, "\noptions:\n");
        cr_assert_not_null(opts, "gtrain help %s: no options part", c->name);
        cr_assert(lists_option(opts, "help"), "gtrain help %s lacks --help", c->name);
        /* each option it takes is listed (with its letter), and no other command's */
        for (const CliCommand *other = CLI_COMMANDS; other->name; other++)
            for (const CliOption *o = other->options; o->name; o++) {
                bool own = false;
                for (const CliOption *m = c->options; m->name; m++) own = own || strcmp(m->name, o->name) == 0;
                cr_assert(lists_option(opts, o->name) == own, "gtrain help %s: --%s (an option of %s) %s:\n%s", c->name,
                          o->name, other->name, own ? "not listed" : "listed", a.out);
                char letter[16];
                snprintf(letter, sizeof letter, "-%c, --%s", o->letter, o->name);
                cr_assert(!own || !o->letter || strstr(opts, letter), "gtrain help %s lacks %s", c->name, letter);
            }
        done(&a), done(&b);
    }
    cr_assert_geq(n_commands, 8);
    /* the overview: gtrain help, gtrain --help, -h, each naming every command */
    const char *help[] = {"help", NULL}, *dash[] = {"--help", NULL}, *h[] = {"-h", NULL};
    Result a = run_args(help), b = run_args(dash), c = run_args(h);
    cr_assert(WIFEXITED(a.status) && WEXITSTATUS(a.status) == 0, "%s", a.err);
    cr_assert(WIFEXITED(b.status) && WEXITSTATUS(b.status) == 0, "%s", b.err);
    cr_assert_str_eq(a.out, b.out);
    cr_assert_str_eq(a.out, c.out);
    for (const CliCommand *cmd = CLI_COMMANDS; cmd->name; cmd++) {
        char line[64];
        snprintf(line, sizeof line, "\n  %s ", cmd->name);
        cr_assert_not_null(strstr(a.out, line), "gtrain help does not list %s:\n%s", cmd->name, a.out);
    }
    cr_assert(lists_option(a.out, "config") && lists_option(a.out, "version"), "gtrain --help: train's options:\n%s", a.out);
    done(&a), done(&b), done(&c);
}

/* the binary: an unknown option for each command, unknown commands, misplaced arguments */
Test(cli, unknown_options_and_commands_are_one_line_and_exit_2, .timeout = 180) {
    for (const CliCommand *c = CLI_COMMANDS; c->name; c++) {
        char see[64];
        snprintf(see, sizeof see, "see gtrain help %s", c->name);
        const char *unknown[] = {c->name, "--no-such-option", NULL};
        Result r = run_args(unknown);
        expect_usage_error(&r, unknown, "--no-such-option: unknown", see, NULL);
        done(&r);
    }
    const char *bad[][4] = {{"no-such-command", NULL}, {"no-such-command", "--config", "x", NULL}, {"", NULL},
                            {"help", "no-such-command", NULL}, {"help", "plan", "eval", NULL}, {"report", NULL},
                            {"report", "a", "b", NULL}, {"--config", "run.yaml", "plan", NULL}, {"-Z", NULL},
                            {"sample", "--config", "run.yaml", NULL}};
    const char *says[] = {"unknown command 'no-such-command'", "unknown command 'no-such-command'", "unknown command ''",
                          "unknown command 'no-such-command'", "unexpected argument 'eval'", "missing argument",
                          "unexpected argument 'b'", "a command comes first: gtrain plan", "-Z: unknown option",
                          "--config: not for gtrain sample (only for gtrain train, plan and eval)"};
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

/* cli_parse in process, its stderr captured into err; args NULL-terminated, args[0] the command */
static int parse_captured(const CliCommand *c, const char *const *args, char *err, size_t cap, CliArgs *a) {
    char *argv[16];
    int n = 0;
    for (; args[n]; n++) {
        cr_assert_lt(n, 15);
        argv[n] = (char *)args[n];
    }
    argv[n] = NULL;
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    cr_assert(saved >= 0 && tmp && dup2(fileno(tmp), 2) == 2);
    int rc = cli_parse(c, n, argv, a);
    fflush(stderr);
    cr_assert_eq(dup2(saved, 2), 2);
    close(saved);
    rewind(tmp);
    size_t k = fread(err, 1, cap - 1, tmp);
    err[k] = '\0';
    fclose(tmp);
    return rc;
}

/* rc 2 and one line "gtrain: CMD: ... (see gtrain help CMD)" holding needle */
static void expect_parse_error(const CliCommand *c, const char *const *args, const char *needle) {
    char err[1024], see[64];
    CliArgs a;
    int rc = parse_captured(c, args, err, sizeof err, &a);
    cli_args_free(&a);
    const char *what = show(args);
    cr_assert_eq(rc, 2, "%s: rc %d: %s", what, rc, err);
    size_t len = strlen(err);
    cr_assert(len > 0 && strchr(err, '\n') == err + len - 1, "%s: expected one line, found \"%s\"", what, err);
    snprintf(see, sizeof see, "gtrain: %s: ", c->name);
    cr_assert(strncmp(err, see, strlen(see)) == 0, "%s: %s", what, err);
    snprintf(see, sizeof see, " (see gtrain help %s)\n", c->name);
    cr_assert(len > strlen(see) && strcmp(err + len - strlen(see), see) == 0, "%s: %s", what, err);
    cr_assert_not_null(strstr(err, needle), "%s: expected \"%s\" in: %s", what, needle, err);
}

/* The parser against every entry: each listed option (and its letter) parses, with its value; twice,
 * without its value, or (a flag) with one, it is refused naming it; every other command's option is
 * refused naming the commands that take it; unknown options are refused. */
Test(cli, every_listed_option_parses_and_misuse_is_one_line) {
    for (const CliCommand *c = CLI_COMMANDS; c->name; c++) {
        for (const CliOption *o = c->options; o->name; o++) {
            char opt[80], with_value[96], letter[4] = {'-', o->letter, 0}, err[1024];
            snprintf(opt, sizeof opt, "--%s", o->name);
            snprintf(with_value, sizeof with_value, "--%s=v", o->name);
            for (int form = 0; form < (o->letter ? 3 : 2); form++) {
                const char *args[] = {c->name, form == 2 ? letter : opt, "v", "v2", NULL};
                if (form == 1) args[1] = o->arg ? with_value : opt, args[2] = "v2", args[3] = NULL;
                if (!o->arg && form != 1) args[2] = "v2", args[3] = NULL;
                CliArgs a;
                const bool operand_ok = c->max_operands != 0;
                if (!operand_ok) args[o->arg && form != 1 ? 3 : 2] = NULL;
                int rc = parse_captured(c, args, err, sizeof err, &a);
                cr_assert_eq(rc, 0, "gtrain%s: rc %d: %s", show(args), rc, err);
                cr_assert(cli_given(&a, o->name), "gtrain%s", show(args));
                cr_assert_str_eq(cli_value(&a, o->name), o->arg ? "v" : "");
                cr_assert_eq(a.n_operands, operand_ok ? 1 : 0);
                cli_args_free(&a);
            }
            const char *twice[] = {c->name, opt, "v", opt, "v", NULL}, *flag_twice[] = {c->name, opt, opt, NULL},
                       *missing[] = {c->name, opt, NULL}, *flag_value[] = {c->name, with_value, NULL};
            if (o->arg && o->repeatable) {
                CliArgs a;
                cr_assert_eq(parse_captured(c, twice, err, sizeof err, &a), 0, "%s", err);
                const char *vals[8];
                cr_assert_eq(cli_values(&a, o->name, vals), 2);
                cli_args_free(&a);
            } else if (o->arg) {
                expect_parse_error(c, twice, "given more than once");
            } else {
                expect_parse_error(c, flag_twice, "given more than once");
                expect_parse_error(c, flag_value, "takes no value");
            }
            if (o->arg) expect_parse_error(c, missing, "expected a value");
        }
        /* every other command's option it does not take: named as theirs */
        for (const CliCommand *other = CLI_COMMANDS; other->name; other++)
            for (const CliOption *o = other->options; o->name; o++) {
                bool own = false; /* or an abbreviation of its own (getopt_long's: eval --out is --output) */
                for (const CliOption *m = c->options; m->name; m++) own = own || strncmp(m->name, o->name, strlen(o->name)) == 0;
                if (own) continue;
                char opt[80], says[128];
                snprintf(opt, sizeof opt, "--%s", o->name);
                snprintf(says, sizeof says, "--%s: not for gtrain %s (only for gtrain ", o->name, c->name);
                const char *args[] = {c->name, opt, "v", NULL};
                if (!o->arg) args[2] = NULL;
                expect_parse_error(c, args, says);
                char err[1024];
                CliArgs a;
                parse_captured(c, args, err, sizeof err, &a);
                cli_args_free(&a);
                cr_assert(has_word(strstr(err, "(only for"), other->name), "gtrain %s %s: %s not named: %s", c->name, opt,
                          other->name, err);
            }
        const char *unknown[] = {c->name, "--no-such-option", NULL}, *unknown_value[] = {c->name, "--no-such-option=1", NULL},
                   *short_unknown[] = {c->name, "-Z", NULL};
        expect_parse_error(c, unknown, "--no-such-option: unknown or ambiguous option");
        expect_parse_error(c, unknown_value, "--no-such-option: unknown or ambiguous option");
        expect_parse_error(c, short_unknown, "-Z: unknown option");
    }
}

/* The commands read the options their entries list: values each command checks itself, given
 * wrong, are refused naming their option (an option a command never read would pass unnoticed;
 * one it read without listing it would abort). The binary, each once. */
Test(cli, commands_read_their_options, .timeout = 120) {
    static const char *const refused[][8] = {
        {"sample", "--checkpoint", "ck", "--max-new-tokens", "x", NULL}, {"sample", "--checkpoint", "ck", "--top-k", "-1", NULL},
        {"sample", "--checkpoint", "ck", "--seed", "1.5", NULL},         {"sample", "--checkpoint", "ck", "--temperature", "-1", NULL},
        {"sample", "--prompt", "a", NULL},                               {"sample", "--checkpoint", "", NULL},
        {"sample", "--checkpoint", "c", "--prompt", "a", "--prompt-ids", NULL},
        {"merge", "--base", "b", "--dtype", "f16", NULL},                {"merge", "--base", "b", "--max-shard-size", "5Gb", NULL},
        {"merge", "--base", "b", "--out", "o", NULL},                    {"merge", "--adapter", "a", NULL},
        {"tokenize", "--tokenizer", "t", "--threads", "0", NULL},        {"tokenize", "--data", "d", "--format", "tokens", NULL},
        {"tokenize", "--data", "d", "--column", "colour=x", NULL},       {"tokenize", "--format", "text", NULL},
        {"tokenize", "--data", "d", "--jsonl", NULL},                    {"tokenize", "--data", "d", "--mask", "--render", NULL},
        {"tokenize", "--tokenizer", "t", "--decode", "--out", "o", NULL}, {"tokenize", "--data", "", NULL},
        {"train", "--markdown", NULL},                                   {"eval", "--checkpoint", "ck", NULL},
        {"tokenize", "--tokenizer", "t", "--skip-special-tokens", NULL},
    };
    static const char *const named[] = {"--max-new-tokens", "--top-k", "--seed", "--temperature",
                                        "--checkpoint DIR is required", "--checkpoint DIR is required",
                                        "--prompt-ids: expected a value", "--dtype", "--max-shard-size",
                                        "--adapter DIR is required", "--base DIR is required", "--threads", "--format",
                                        "--column", "--format: only with --data", "--jsonl: not with --data",
                                        "--mask and --render", "--out: only when encoding", "--data: expected a file name",
                                        "--markdown: only with --help-config", "--config FILE is required",
                                        "--skip-special-tokens: only with --decode"};
    cr_assert_eq(sizeof named / sizeof *named, sizeof refused / sizeof *refused);
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
    /* the flags that print and exit 0 */
    const char *const printing[][3] = {{"--version", NULL}, {"-V", NULL}, {"--help-config", NULL}, {"help", "--markdown", NULL}};
    for (size_t i = 0; i < 4; i++) {
        r = run_args(printing[i]);
        cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "gtrain%s: %s", show(printing[i]), r.err);
        cr_assert(strlen(r.out) > 20, "gtrain%s printed \"%s\"", show(printing[i]), r.out);
        done(&r);
    }
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
