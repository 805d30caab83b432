/* cli.c - the one parser of gtrain's command line (getopt_long built from a command's entry in
 * cli_table.c), its one shape of usage error, the help printed from the entries, and main()'s
 * dispatch. */
#include "cli.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

enum { OPT_VAL0 = 1000 }; /* getopt_long's val of option k is OPT_VAL0 + k; --help's is 'h' */
enum { HELP_WIDTH = 100, OPTION_COLUMN = 28 };

const CliCommand *cli_command(const char *name) {
    for (const CliCommand *c = CLI_COMMANDS; c->name; c++)
        if (strcmp(c->name, name) == 0) return c;
    return NULL;
}

static int n_options(const CliCommand *cmd) {
    int n = 0;
    while (cmd->options[n].name) n++;
    return n;
}

int cli_error(const CliCommand *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout); /* what was printed comes before the error */
    fprintf(stderr, "gtrain: %s: ", cmd->name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see gtrain help %s)\n", cmd->name);
    va_end(ap);
    return GT_EXIT_BAD_INPUT;
}

int cli_fail(const GtError *err) {
    fflush(stdout); /* what was printed comes before the error, in a shared terminal too */
    fprintf(stderr, "gtrain: %s\n", err->msg);
    return err->code ? err->code : GT_EXIT_FAILURE;
}

bool cli_parse_count(const char *s, long long min, long long max, long long *out) {
    long long v = 0;
    if (!*s) return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (max - (*s - '0')) / 10) return false;
        v = 10 * v + (*s - '0');
    }
    if (v < min) return false;
    *out = v;
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * parsing */

/* the option index of a getopt value (OPT_VAL0 + k, a short letter, 'h' for help: n), or -1 */
static int option_of(const CliCommand *cmd, int n, int v) {
    if (v >= OPT_VAL0 && v < OPT_VAL0 + n) return v - OPT_VAL0;
    if (v == 'h') return n;
    for (int k = 0; k < n && v > 0; k++)
        if (cmd->options[k].letter == v) return k;
    return -1;
}

static const char *option_name(const CliCommand *cmd, int n, int k) { return k == n ? "help" : cmd->options[k].name; }

/* An unknown long option: named with the commands that take it, when some do. */
static int unknown_long(const CliCommand *cmd, const char *arg) {
    size_t len = strcspn(arg, "=");
    char names[256] = "";
    int found = 0;
    for (const CliCommand *c = CLI_COMMANDS; c->name; c++)
        for (const CliOption *o = c->options; o->name; o++)
            if (strncmp(arg, "--", 2) == 0 && strlen(o->name) == len - 2 && strncmp(o->name, arg + 2, len - 2) == 0)
                found++;
    if (!found) return cli_error(cmd, "%.*s: unknown or ambiguous option", (int)len, arg);
    int listed = 0;
    for (const CliCommand *c = CLI_COMMANDS; c->name; c++)
        for (const CliOption *o = c->options; o->name; o++)
            if (strlen(o->name) == len - 2 && strncmp(o->name, arg + 2, len - 2) == 0) {
                size_t at = strlen(names);
                snprintf(names + at, sizeof names - at, "%s%s", listed == 0 ? "" : listed == found - 1 ? " and " : ", ",
                         c->name);
                listed++;
            }
    return cli_error(cmd, "%.*s: not for gtrain %s (only for gtrain %s)", (int)len, arg, cmd->name, names);
}

int cli_parse(const CliCommand *cmd, int n_args, char **args, CliArgs *a) {
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    const int n = n_options(cmd);
    struct option *lo = gt_xcalloc((size_t)n + 2, sizeof *lo);
    char *shorts = gt_xcalloc(3 * (size_t)n + 4, 1), *sp = shorts;
    *sp++ = ':'; /* a missing value is ':' (not '?') */
    for (int k = 0; k < n; k++) {
        const CliOption *o = &cmd->options[k];
        lo[k] = (struct option){o->name, o->arg ? required_argument : no_argument, NULL, OPT_VAL0 + k};
        if (o->letter) {
            *sp++ = o->letter;
            if (o->arg) *sp++ = ':';
        }
    }
    lo[n] = (struct option){"help", no_argument, NULL, 'h'};
    *sp++ = 'h';
    a->given = gt_xcalloc((size_t)n + 1, sizeof *a->given);
    a->last = gt_xcalloc((size_t)n + 1, sizeof *a->last);
    a->values = gt_xcalloc((size_t)n_args + 1, sizeof *a->values);
    a->opt_of = gt_xcalloc((size_t)n_args + 1, sizeof *a->opt_of);
    a->operands = gt_xcalloc((size_t)n_args + 1, sizeof *a->operands);
    int rc = 0, c;
    optind = 0; /* glibc: a full restart (the parser may run more than once in a process) */
    opterr = 0; /* one line of our own, not getopt's */
    while (rc == 0 && (c = getopt_long(n_args, args, shorts, lo, NULL)) != -1) {
        int k = option_of(cmd, n, c == ':' || c == '?' ? optopt : c);
        if (c == ':') {
            rc = cli_error(cmd, "--%s: expected a value", k >= 0 ? option_name(cmd, n, k) : "?");
        } else if (c == '?') { /* optopt: the option given a value it takes none of, an unknown short
                                * option, or 0 for an unknown long one (then args[optind - 1]) */
            if (optopt && k >= 0) rc = cli_error(cmd, "--%s: takes no value", option_name(cmd, n, k));
            else if (optopt) rc = cli_error(cmd, "-%c: unknown option", optopt);
            else rc = unknown_long(cmd, args[optind - 1]);
        } else if (k == n) {
            cli_print_command_help(cmd, stdout, false);
            rc = -1;
        } else if (k < 0) {
            rc = cli_error(cmd, "%s: unknown option", args[optind - 1]);
        } else if (a->given[k]++ && !cmd->options[k].repeatable) {
            rc = cli_error(cmd, "--%s: given more than once", cmd->options[k].name);
        } else {
            a->last[k] = optarg ? optarg : "";
            a->values[a->n_values] = a->last[k];
            a->opt_of[a->n_values++] = k;
        }
    }
    for (int i = optind; rc == 0 && i < n_args; i++) a->operands[a->n_operands++] = args[i];
    if (rc == 0 && cmd->max_operands >= 0 && a->n_operands > cmd->max_operands) {
        const char *x = a->operands[cmd->max_operands];
        if (cmd == CLI_COMMANDS && cli_command(x))
            rc = cli_error(cmd, "unexpected argument '%s' (a command comes first: gtrain %s ...)", x, x);
        else
            rc = cli_error(cmd, "unexpected argument '%s'", x);
    }
    if (rc == 0 && a->n_operands < cmd->min_operands) rc = cli_error(cmd, "missing argument: gtrain %s", cmd->usage);
    free(lo);
    free(shorts);
    return rc;
}

void cli_args_free(CliArgs *a) {
    free(a->given);
    free(a->last);
    free(a->values);
    free(a->opt_of);
    free(a->operands);
    memset(a, 0, sizeof *a);
}

/* the index of option name in a's command; a name the entry lacks is a bug in the command */
static int option_named(const CliArgs *a, const char *name) {
    for (int k = 0; a->cmd->options[k].name; k++)
        if (strcmp(a->cmd->options[k].name, name) == 0) return k;
    fprintf(stderr, "gtrain: internal error: gtrain %s reads --%s, which its entry in cli_table.c lacks\n", a->cmd->name,
            name);
    abort();
}

const char *cli_value(const CliArgs *a, const char *name) { return a->last[option_named(a, name)]; }

bool cli_given(const CliArgs *a, const char *name) { return a->given[option_named(a, name)] > 0; }

int cli_values(const CliArgs *a, const char *name, const char **out) {
    int k = option_named(a, name), m = 0;
    for (int i = 0; i < a->n_values; i++)
        if (a->opt_of[i] == k) out[m++] = a->values[i];
    return m;
}

/* ---------------------------------------------------------------------------------------------
 * help */

/* the length of the word at p: to the next space or newline (outside [...] when whole_brackets) */
static int word_length(const char *p, bool whole_brackets) {
    int n = 0, depth = 0;
    for (; p[n] && p[n] != '\n' && (p[n] != ' ' || depth > 0); n++) {
        if (whole_brackets && p[n] == '[') depth++;
        if (whole_brackets && p[n] == ']' && depth > 0) depth--;
    }
    return n;
}

/* text from column col (where the cursor is) wrapped at HELP_WIDTH, continued lines indented
 * by indent; a "\n" in text starts a new line (a blank line for "\n\n"); a usage line
 * (whole_brackets) breaks only between its [...] groups */
static void put_wrapped(FILE *out, const char *text, int col, int indent, bool whole_brackets) {
    const char *p = text;
    bool line_start = true;
    while (*p) {
        if (*p == '\n') {
            fputc('\n', out);
            p++;
            if (*p && *p != '\n') fprintf(out, "%*s", indent, "");
            col = indent;
            line_start = true;
            continue;
        }
        if (*p == ' ') {
            p++;
            continue;
        }
        int w = word_length(p, whole_brackets);
        if (!line_start && col + 1 + w > HELP_WIDTH) {
            fprintf(out, "\n%*s", indent, "");
            col = indent;
            line_start = true;
        }
        if (!line_start) {
            fputc(' ', out);
            col++;
        }
        fwrite(p, 1, (size_t)w, out);
        col += w;
        p += w;
        line_start = false;
    }
    fputc('\n', out);
}

/* "-c, --config FILE" / "    --set KEY=VALUE" (text) or "-c, --config FILE" (markdown) */
static void option_label(const CliOption *o, char *buf, size_t cap, bool markdown) {
    char letter[8] = "    ";
    if (o->letter) snprintf(letter, sizeof letter, "-%c, ", o->letter);
    snprintf(buf, cap, "%s--%s%s%s", markdown && !o->letter ? "" : letter, o->name, o->arg ? " " : "",
             o->arg ? o->arg : "");
}

/* markdown table cell text: '|' escaped */
static void put_cell(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputc('\\', out);
        fputc(*s == '\n' ? ' ' : *s, out);
    }
}

static const CliOption HELP_OPTION = {"help", 'h', NULL, false, "this text"};
static void print_options(const CliCommand *cmd, FILE *out);

void cli_print_command_help(const CliCommand *cmd, FILE *out, bool markdown) {
    if (markdown) {
        fprintf(out, "## gtrain %s\n\n%s\n\n```\ngtrain ", cmd->name, cmd->summary);
        for (const char *u = cmd->usage; *u; u++) fprintf(out, u[0] == '\n' ? "\ngtrain " : "%c", *u);
        fprintf(out, "\n```\n\n");
        if (cmd->details) fprintf(out, "%s\n\n", cmd->details);
        fprintf(out, "| option | meaning |\n|---|---|\n");
        for (int k = 0; k <= n_options(cmd); k++) {
            const CliOption *o = cmd->options[k].name ? &cmd->options[k] : &HELP_OPTION;
            char label[128];
            option_label(o, label, sizeof label, true);
            fprintf(out, "| `%s` | ", label);
            put_cell(out, o->help);
            fprintf(out, "%s |\n", o->repeatable ? " (repeatable)" : "");
        }
        fputc('\n', out);
        return;
    }
    for (const char *u = cmd->usage; *u;) { /* a line per form, each wrapped under its command */
        char line[512];
        size_t len = strcspn(u, "\n");
        snprintf(line, sizeof line, "%.*s", (int)len, u);
        fprintf(out, "%s gtrain ", u == cmd->usage ? "usage:" : "      ");
        put_wrapped(out, line, 14, 15 + (int)strlen(cmd->name), true);
        u += len + (u[len] == '\n');
    }
    fputc('\n', out);
    put_wrapped(out, cmd->summary, 0, 0, false);
    if (cmd->details) {
        fputc('\n', out);
        put_wrapped(out, cmd->details, 0, 0, false);
    }
    fprintf(out, "\noptions:\n");
    print_options(cmd, out);
    fprintf(out, "\nexit status: 0 success, 1 failure while running, 2 bad input (usage, config, model, data)\n");
}

static void print_options(const CliCommand *cmd, FILE *out) {
    for (int k = 0; k <= n_options(cmd); k++) {
        const CliOption *o = cmd->options[k].name ? &cmd->options[k] : &HELP_OPTION;
        char label[128], help[1024];
        option_label(o, label, sizeof label, false);
        snprintf(help, sizeof help, "%s%s", o->help, o->repeatable ? " (repeatable)" : "");
        int col = fprintf(out, "  %s", label);
        if (col >= OPTION_COLUMN - 1) {
            fputc('\n', out);
            col = 0;
        }
        fprintf(out, "%*s", OPTION_COLUMN - col, "");
        put_wrapped(out, help, OPTION_COLUMN, OPTION_COLUMN, false);
    }
}

static const char OVERVIEW[] =
    "Train a transformer a Hugging Face config.json describes (GPT-2, Llama, Mistral, Qwen2, Qwen3, Phi-3): every "
    "weight, or LoRA / PiSSA adapters on a frozen base (a lora: section in the run config).";

void cli_print_overview(FILE *out, bool markdown) {
    if (markdown) {
        fprintf(out, "<!-- generated by `gtrain help --markdown` from src/cli_table.c; do not edit: a test checks it -->\n"
                     "# gtrain commands\n\n%s\n\n```\ngtrain COMMAND [OPTION]... [ARGUMENT]...\n"
                     "gtrain --config RUN.yaml        (train, the default command)\n```\n\n"
                     "| command | what it does |\n|---|---|\n", OVERVIEW);
        for (const CliCommand *c = CLI_COMMANDS; c->name; c++) {
            fprintf(out, "| [`%s`](#gtrain-%s) | ", c->name, c->name);
            put_cell(out, c->summary);
            fprintf(out, " |\n");
        }
        fprintf(out, "\nA usage error is one line, `gtrain: COMMAND: MESSAGE (see gtrain help COMMAND)`, and exit "
                     "status 2. Exit status: 0 success, 1 failure while running, 2 bad input (usage, config, model, "
                     "data).\n\n");
        for (const CliCommand *c = CLI_COMMANDS; c->name; c++) cli_print_command_help(c, out, true);
        return;
    }
    fprintf(out, "usage: gtrain COMMAND [OPTION]... [ARGUMENT]...\n       gtrain --config RUN.yaml [--set KEY=VALUE]..."
                 "   (train, the default command)\n\n");
    put_wrapped(out, OVERVIEW, 0, 0, false);
    fprintf(out, "\ncommands:\n");
    for (const CliCommand *c = CLI_COMMANDS; c->name; c++) {
        int col = fprintf(out, "  %s", c->name);
        fprintf(out, "%*s", 20 - col, "");
        put_wrapped(out, c->summary, 20, 20, false);
    }
    fprintf(out, "\ngtrain help COMMAND (or gtrain COMMAND --help): a command's usage and options.\n"
                 "\noptions of train, the default command:\n");
    print_options(CLI_COMMANDS, out);
    fprintf(out, "\nexit status: 0 success, 1 failure while running, 2 bad input (usage, config, model, data)\n");
}

int help_command(CliArgs *a) {
    bool markdown = cli_given(a, "markdown");
    if (a->n_operands == 0) {
        cli_print_overview(stdout, markdown);
        return GT_EXIT_OK;
    }
    const CliCommand *c = cli_command(a->operands[0]);
    if (!c) return cli_error(a->cmd, "unknown command '%s'", a->operands[0]);
    cli_print_command_help(c, stdout, markdown);
    return GT_EXIT_OK;
}

/* ---------------------------------------------------------------------------------------------
 * dispatch */

int cli_main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "gtrain: expected a command, or --config RUN.yaml to train (see gtrain help)\n");
        return GT_EXIT_BAD_INPUT;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        cli_print_overview(stdout, false);
        return GT_EXIT_OK;
    }
    const CliCommand *cmd = CLI_COMMANDS; /* train: `gtrain --config run.yaml` */
    int n_args = argc;
    char **args = argv;
    if (argv[1][0] != '-') {
        cmd = cli_command(argv[1]);
        if (!cmd) {
            char names[256] = "";
            for (const CliCommand *c = CLI_COMMANDS; c->name; c++) {
                size_t at = strlen(names);
                snprintf(names + at, sizeof names - at, "%s%s", c == CLI_COMMANDS ? "" : c[1].name ? ", " : " or ", c->name);
            }
            fprintf(stderr, "gtrain: unknown command '%s' (expected %s; see gtrain help)\n", argv[1], names);
            return GT_EXIT_BAD_INPUT;
        }
        n_args = argc - 1;
        args = argv + 1;
    }
    CliArgs a;
    int rc = cli_parse(cmd, n_args, args, &a);
    if (rc == 0) {
        a.argc = argc;
        a.argv = argv;
        rc = cmd->run(&a);
    }
    cli_args_free(&a);
    return rc < 0 ? GT_EXIT_OK : rc;
}
