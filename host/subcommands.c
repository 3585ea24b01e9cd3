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

int host_is_help(const char *arg) {
    return arg != NULL && (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0);
}

int host_help_asked(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (host_is_help(argv[i])) return 1;
    return 0;
}

const char *host_flag_value(int argc, char **argv, int *i, const char *name, int *missing) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, "--", 2) != 0) return NULL;
    for (size_t k = 0; k < n; k++) /* "-" and "_" alike */
        if (a[2 + k] != name[k] && !(name[k] == '_' && a[2 + k] == '-')) return NULL;
    if (a[2 + n] == '=') return a + 3 + n;
    if (a[2 + n] != '\0') return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

int host_parse_config_file(int argc, char **argv, const char *who, const char *usage,
                           const char **path) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int missing = 0;
        const char *v = host_flag_value(argc, argv, &i, "config_file", &missing);
        if (v == NULL) {
            fprintf(stderr, "%s: %s: %s\n%s", who, missing ? "missing value" : "unknown flag", arg,
                    usage);
            return -1;
        }
        *path = v;
    }
    return 0;
}

/* Levenshtein distance of a and b (both short words; longer ones count as
 * far apart). */
static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 64;
    size_t row[64];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *host_suggest_subcommand(const char *word) {
    const char *best = NULL;
    size_t best_d = 3; /* at most two edits away */
    for (const HostSubcommand *c = subcommands; c->name != NULL; c++) {
        size_t d = edit_distance(word, c->name);
        if (d < best_d) best = c->name, best_d = d;
    }
    return best;
}
