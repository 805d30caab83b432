/* cli.h - the command line: one table of commands (cli_table.c), each an entry with its name,
 * summary, usage, options (long name, short letter, argument, help line) and the function that
 * runs it; one parser for all of them (cli.c, getopt_long built from the entry) with one shape of
 * error, and the help printed from the same entries (`gtrain help [COMMAND]`, `gtrain COMMAND
 * --help`, `gtrain help --markdown` for docs/commands.md).
 *
 *   gtrain [COMMAND] [OPTION]... [OPERAND]...   COMMAND first; without one, train
 *
 * A usage error is one line on stderr and exit status 2:
 *   gtrain: COMMAND: MESSAGE (see gtrain help COMMAND)
 * An option's value is checked by the command that reads it (cli_value and friends); a command
 * asking for an option its entry does not list is a programming error (abort), so the table and
 * what a command reads cannot drift apart. */
#ifndef GT_CLI_H
#define GT_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "common.h"

#define GTRAIN_VERSION "0.2.0"

typedef struct {
    const char *name;  /* long name, without the dashes */
    char letter;       /* the short option (-c), 0 when none */
    const char *arg;   /* the argument's name in help (FILE), NULL for a flag */
    bool repeatable;   /* may be given more than once (each value kept); else twice is an error */
    const char *help;  /* what it does, one sentence or a few (wrapped when printed) */
} CliOption;

typedef struct CliArgs CliArgs;

typedef struct {
    const char *name;
    const char *summary;    /* one line, for `gtrain help` */
    const char *usage;      /* after "gtrain ": "plan --config RUN.yaml [--set KEY=VALUE]..." */
    const char *details;    /* paragraphs after the summary (wrapped), NULL when none */
    const CliOption *options; /* ends with {0}; -h, --help is added to every command */
    int min_operands, max_operands; /* positional arguments; max -1: any number */
    int (*run)(CliArgs *a); /* returns the exit status */
} CliCommand;

struct CliArgs {
    const CliCommand *cmd;
    int argc;               /* the process's own (dist_init may change them, a resume line shows them) */
    char **argv;
    char **operands;        /* the positional arguments, in order */
    int n_operands;
    int *given;             /* per option of cmd: how many times */
    const char **last;      /* per option of cmd: its last value ("" for a flag), NULL when not given */
    const char **values;    /* every value given, in order; opt_of[i] the option index of values[i] */
    int *opt_of;
    int n_values;
};

/* the table (cli_table.c), ending with {0}; the first entry, train, is the command by default */
extern const CliCommand CLI_COMMANDS[];
const CliCommand *cli_command(const char *name); /* NULL when there is none */

/* main(): the command argv names (or train), its options parsed, run; returns the exit status. */
int cli_main(int argc, char **argv);

/* Parse args (args[0] the command's name, skipped) for cmd into a. Returns 0 to run, -1 when
 * --help was printed (exit 0), else the exit status of a usage error already printed. */
int cli_parse(const CliCommand *cmd, int n_args, char **args, CliArgs *a);
void cli_args_free(CliArgs *a);

/* What a command reads of its options; name must be in its entry (else abort). */
const char *cli_value(const CliArgs *a, const char *name); /* the last value, NULL when not given */
bool cli_given(const CliArgs *a, const char *name);
/* every value of a repeatable option in order into out[] (room for a->n_values); returns how many */
int cli_values(const CliArgs *a, const char *name, const char **out);

/* "gtrain: CMD: MESSAGE (see gtrain help CMD)" on stderr; returns 2 */
int cli_error(const CliCommand *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "gtrain: MESSAGE" (err's) on stderr after what stdout holds; returns err's exit status */
int cli_fail(const GtError *err);
/* a decimal integer in [min, max], digits only (no sign, space or exponent) */
bool cli_parse_count(const char *s, long long min, long long max, long long *out);

/* A command's help (usage, summary, details, options), as text or as a markdown section. */
void cli_print_command_help(const CliCommand *cmd, FILE *out, bool markdown);
/* Every command with its summary; markdown: the whole reference (docs/commands.md). */
void cli_print_overview(FILE *out, bool markdown);

/* the commands' functions, each with its subsystem */
int train_command(CliArgs *a); /* src/run/train_cmd.c */
int eval_command(CliArgs *a);  /* src/run/train_cmd.c */
int plan_command(CliArgs *a);  /* src/run/plan_cmd.c */
int sample_command(CliArgs *a);   /* src/run/sample.c */
int merge_command(CliArgs *a);    /* src/io/merge.c */
int report_command(CliArgs *a);   /* src/run/report.c */
int tokenize_command(CliArgs *a); /* src/tokenizer/tokenize_cmd.c */
int help_command(CliArgs *a);     /* src/cli.c */

#endif
