/* subcommands.c: the table of accel-lua CLI subcommands. `accel-lua NAME
 * args...` runs the entry called NAME instead of the Lua interpreter; any
 * other first argument is a script or an option. To add one, write
 * `int cmd_NAME(int argc, char **argv)` in its own host/cmd_NAME.c,
 * declare it in subcommands.h and add a row. */
#include <string.h>

#include "host/subcommands.h"

static const HostSubcommand subcommands[] = {
    {"launch", "run a script on N ranks (mpirun underneath)", cmd_launch},
    {"config", "write the config file (questions, or `config default`)", cmd_config},
    {"env", "versions, CPU, MPI and the config in force", cmd_env},
    {"test", "a short end-to-end check on the configured setup", cmd_test},
    {"merge-weights", "a sharded save_state folder -> one safetensors file of the full weights", cmd_merge_weights},
    {"estimate-memory", "per-rank memory of a training run (ZeRO stages, measured activations)", cmd_estimate_memory},
    {NULL, NULL, NULL},
};

const HostSubcommand *host_find_subcommand(const char *name) {
    for (const HostSubcommand *c = subcommands; c->name != NULL; c++)
        if (strcmp(c->name, name) == 0) return c;
    return NULL;
}

void host_print_subcommands(FILE *out) {
    if (subcommands[0].name == NULL) return;
    fprintf(out, "Commands:\n");
    for (const HostSubcommand *c = subcommands; c->name != NULL; c++)
        fprintf(out, "  %-16s %s\n", c->name, c->summary);
}
