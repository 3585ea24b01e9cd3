/* subcommands.h: the seam for accel-lua's CLI subcommands
 * (`accel-lua <name> ...`, e.g. launch, config, env, test, estimate-memory,
 * merge-weights). A subcommand is a C function given argv starting at its
 * own name; it returns the process exit status. The table lives in
 * subcommands.c. */
#ifndef ACCEL_HOST_SUBCOMMANDS_H
#define ACCEL_HOST_SUBCOMMANDS_H

#include <stdio.h>

typedef int (*HostSubcommandFn)(int argc, char **argv);

typedef struct {
    const char *name;    /* word after `accel-lua` */
    const char *summary; /* one line for the usage text */
    HostSubcommandFn run;
} HostSubcommand;

/* The registered subcommand called `name`, or NULL. */
const HostSubcommand *host_find_subcommand(const char *name);

/* Lists the registered subcommands for the usage text (nothing if none). */
void host_print_subcommands(FILE *out);

/* 1 when arg is -h or --help. */
int host_is_help(const char *arg);

/* 1 when any of argv[1..argc) is -h or --help (help is asked for anywhere
 * on the command line, as argparse does). */
int host_help_asked(int argc, char **argv);

/* The value of flag `name` ("config_file") at argv[*i], spelled --name VALUE,
 * --name=VALUE or with dashes (--config-file): the value (*i moved past it),
 * NULL when argv[*i] is not that flag. *missing is set when the flag has
 * no value. */
const char *host_flag_value(int argc, char **argv, int *i, const char *name, int *missing);

/* Reads `[--config_file PATH]`, the only flag of env and test, into *path
 * (left alone when absent). Returns 0, or -1 after printing
 * "WHO: unknown flag: ARG" or "WHO: missing value: --config_file", then usage. */
int host_parse_config_file(int argc, char **argv, const char *who, const char *usage,
                           const char **path);

/* The registered subcommand at most two edits away from word (the
 * closest), or NULL: for "unknown command 'lauch', did you mean launch?". */
const char *host_suggest_subcommand(const char *word);

/* The subcommands (host/cmd_*.c); argv[0] is the subcommand's name. */
int cmd_launch(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_env(int argc, char **argv);
int cmd_test(int argc, char **argv);
int cmd_merge_weights(int argc, char **argv); /* cmd_merge.c */
int cmd_estimate_memory(int argc, char **argv);

#endif
