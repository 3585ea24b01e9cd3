/* cmd_launch.c: `accel-lua launch [flags] script.lua [args]` (DESIGN §3).
 *
 * Settings come from flags, then the config file (--config_file, else
 * $ACCEL_LUA_CONFIG / ~/.cache/accel-lua/default_config.yaml when it
 * exists), then defaults; they reach the ranks as ACCEL_LUA_* variables
 * (list in settings.c). Flags use Accelerate's spellings (also
 * --mpirun_hostfile / --deepspeed_hostfile for --hostfile, -t, -m, -q);
 * Accelerate's flags for what does not exist here are refused, each with
 * its reason (unsupported.c), all named at once, exit 2. One process and
 * no machines: the script runs directly (this same binary). Otherwise this
 * builds an OpenMPI 4 `mpirun` command line running /proc/self/exe on the
 * script:
 *   --allow-run-as-root   when run as root
 *   --quiet               with -q / --quiet (no mpirun banners)
 *   -np N                 N = num_processes, over all machines
 *   one machine:          --oversubscribe --bind-to none when N exceeds the
 *                         physical cores (mpirun's slots); --bind-to none
 *                         when N x threads exceeds them; --map-by slot:PE=T
 *                         (T cores per rank) when T > 1 fits
 *   --hostfile H          machines from mpirun's hostfile; with
 *                         num_machines M > 1 also --map-by ppr:N/M:node
 *                         (ranks iK..iK+K-1 on the hostfile's i-th machine);
 *                         a hostfile that cannot be read or lists fewer than
 *                         M machines is refused before mpirun starts
 *   --mca rtc ^hwloc      with a hostfile, unless OMPI_MCA_rtc is set: Open
 *                         MPI 4.1's remote daemon (orted) was seen to crash at
 *                         start in hwloc_shmem_topology_write (its rtc hwloc
 *                         component, which shares the machine's topology with
 *                         the ranks through a file and binds them); without it
 *                         the daemons start every time, and the ranks of a
 *                         multi-machine job are not bound to cores (ppr
 *                         placement did not bind them here either)
 *   -x NAME=VALUE         each setting, OMP/OPENBLAS_NUM_THREADS, and
 *                         -x LUA_PATH etc. when set here; also
 *                         ACCEL_LUA_STDOUT_TTY / ACCEL_LUA_STDERR_TTY (1
 *                         when launch's stdout / stderr is a terminal, else
 *                         0) and ACCEL_LUA_COLUMNS (its width): a rank
 *                         cannot tell by itself (stderr is a pipe, stdout
 *                         a pseudo-terminal of Open MPI's even when the
 *                         output goes to a file), and rank 0's progress bar
 *                         redraws in place only on a terminal
 *                         (docs/progress.md)
 * -m / --module: the script is a module name; each rank runs
 * `accel-lua -m NAME args` (found on package.path, host/main.c).
 * --no_python: each rank runs the script itself as a program; on several
 * ranks through /bin/sh, which first exports RANK, WORLD_SIZE, LOCAL_RANK
 * and LOCAL_WORLD_SIZE from OpenMPI's variables (as accel-lua's ranks do,
 * host/rank.c; torchrun sets them for every program).
 * The script "-" (standard input) is refused with more than one process:
 * mpirun gives stdin to rank 0 only.
 * --multi_gpu / --use_deepspeed / --use_fsdp take a boolean like the
 * settings; false drops a config file's distributed_type of that kind.
 * --log_dir / --tee / --redirects (torchrun's): each rank writes its own
 * logs (host/rank_log.c); --log_dir alone means --tee 3; a non-zero --tee
 * or --redirects without --log_dir is an error.
 * mpirun is started once, on machine 0: on a machine with machine_rank > 0
 * launch explains that and exits 0. main_process_ip / main_process_port are
 * informational (MPI wires the ranks). A job started by `mpirun -np N
 * accel-lua train.lua` or `srun accel-lua train.lua` needs none of this:
 * the communicator reads MPI's / Slurm's variables itself.
 *
 * Failure: OpenMPI's default already ends the whole job when one rank exits
 * non-zero or is killed (a failing rank prints "accel-lua: rank R: <error>",
 * host/run.c). mpirun's stderr reaches launch through a pipe and is copied
 * on as it comes, and launch adds one line saying why the attempt failed:
 * the killed rank, or the first rank's error, with its host and
 * machine_rank (host/job_watch.c). launch checks on the job (mpirun, or
 * the single process) every --monitor_interval seconds (default 0.1, Accelerate's), so a
 * finished or failed attempt is seen within that time. With --max_restarts
 * K a failed job is started again, up to K times (ACCEL_LUA_RESTART_COUNT
 * tells the script which attempt it is; it is expected to resume with
 * load_state). --dry_run prints the command instead of running it.
 * ACCEL_LUA_MPIRUN names another mpirun. Exit status: the job's (128 +
 * signal if killed), 2 for bad usage. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "host/config_yaml.h"
#include "host/host.h"
#include "host/job_watch.h"
#include "host/settings.h"
#include "host/subcommands.h"

#define WHO "accel-lua launch"

/* A growable NULL-terminated list of strings (an argv, or NAME=VALUE). */
typedef struct {
    char **v;
    int n, cap;
} StrList;

__attribute__((format(printf, 2, 3)))
static void list_add(StrList *l, const char *fmt, ...) {
    va_list ap;
    if (l->n + 2 > l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    va_start(ap, fmt);
    if (vasprintf(&l->v[l->n], fmt, ap) < 0) abort();
    va_end(ap);
    l->v[++l->n] = NULL;
}

static void list_free(StrList *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    *l = (StrList){0};
}

/* --multi_gpu, --use_deepspeed, --use_fsdp: booleans like the settings'
 * (alone = true; `=false` / `false` after it turns that type off). */
static const struct { const char *flag, *dist_type; } dist_switches[] = {
    {"multi_gpu", "MULTI_GPU"}, {"use_deepspeed", "DEEPSPEED"}, {"use_fsdp", "FSDP"},
};
#define DIST_SWITCHES (sizeof dist_switches / sizeof dist_switches[0])

/* What the command line said. */
typedef struct {
    LaunchConfig flags;      /* settings given as flags (SRC_FLAG) */
    const char *config_file; /* --config_file */
    int dist[DIST_SWITCHES]; /* per dist_switches: 1 on, -1 off, 0 not given */
    int dry_run, help, quiet, module, no_python;
    int script;              /* argv index of the script; 0 = none */
    StrList unknown;         /* unknown flags, to name them all at once */
    StrList refused;         /* Accelerate's flags we lack: "--flag: reason" */
} LaunchArgs;

/* launch's own switches (not settings: they shape the command only). */
static const struct { const char *flag; size_t offset; } switches[] = {
    {"dry_run", offsetof(LaunchArgs, dry_run)},
    {"quiet", offsetof(LaunchArgs, quiet)},
    {"module", offsetof(LaunchArgs, module)},
    {"no_python", offsetof(LaunchArgs, no_python)},
};

/* Accelerate's one-letter spellings. */
static const struct { const char *shorthand, *flag; } short_flags[] = {
    {"-t", "--tee"}, {"-m", "--module"}, {"-q", "--quiet"},
};

/* Prints "accel-lua launch: <message>" and a hint; returns -1. */
__attribute__((format(printf, 1, 2)))
static int usage_fail(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s: ", WHO);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(accel-lua launch --help lists the flags)\n");
    return -1;
}

/* 1 / 0 for a boolean word (true/false, yes/no, 1/0, on/off, any case);
 * -1 for anything else. */
static int bool_word(const char *s) {
    static const char *const words[] = {"true", "false", "yes", "no", "1", "0", "on", "off"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcasecmp(s, words[i]) == 0) return i % 2 == 0;
    return -1;
}

/* A boolean flag's value: inline (--flag=v), else the next argument when
 * it is a boolean word (consumed: *i advances), else "true". */
static const char *bool_flag_value(const char *inline_value, int argc, char **argv, int *i) {
    if (inline_value != NULL) return inline_value;
    return *i + 1 < argc && bool_word(argv[*i + 1]) >= 0 ? argv[++*i] : "true";
}

/* --name[=value] for a setting: the value is inline, the next argument,
 * or (booleans) absent = true. Advances *i past a consumed value. */
static int parse_setting(LaunchArgs *a, int id, const char *name, const char *inline_value,
                         int argc, char **argv, int *i) {
    char err[256];
    const char *value = inline_value;
    if (host_settings[id].type == ST_BOOL) value = bool_flag_value(value, argc, argv, i);
    if (value == NULL && *i + 1 < argc) value = argv[++*i];
    if (value == NULL) return usage_fail("--%s needs a value", name);
    if (config_set(&a->flags, id, value, SRC_FLAG, err, sizeof err) != 0)
        return usage_fail("--%s: %s", name, err);
    return 0;
}

/* An Accelerate flag for something accel-lua lacks: consumes its value
 * (not a next word starting with "--": that is the next flag, as argparse
 * reads it, refused or not in its own right); a neutral value
 * (`--dynamo_backend no`) is accepted, anything else is noted in
 * a->refused with the reason. */
static void parse_unsupported(LaunchArgs *a, const Unsupported *u, const char *name,
                              const char *value, int argc, char **argv, int *i) {
    if (value == NULL && u->takes_value && *i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0)
        value = argv[++*i];
    if (unsupported_is_neutral(u, value)) return;
    if (value != NULL && u->neutral != NULL)
        list_add(&a->refused, "--%s %s: not supported: %s", name, value, u->reason);
    else
        list_add(&a->refused, "--%s: not supported: %s", name, u->reason);
}

/* --multi_gpu / --use_deepspeed / --use_fsdp (dist_switches[k]) with its
 * boolean value; two types switched on conflict. */
static int parse_dist_switch(LaunchArgs *a, size_t k, const char *value) {
    int on = bool_word(value);
    if (on < 0)
        return usage_fail("--%s: '%s' is not a boolean (true or false)", dist_switches[k].flag, value);
    for (size_t j = 0; on && j < DIST_SWITCHES; j++)
        if (j != k && a->dist[j] > 0)
            return usage_fail("--%s conflicts with --%s", dist_switches[k].flag, dist_switches[j].flag);
    a->dist[k] = on ? 1 : -1;
    return 0;
}

static const char *long_spelling(const char *arg) {
    for (size_t k = 0; k < sizeof short_flags / sizeof short_flags[0]; k++)
        if (strcmp(arg, short_flags[k].shorthand) == 0) return short_flags[k].flag;
    return arg;
}

/* Handles argv[*i] (starting with '-'); returns -1 on a bad value. */
static int parse_flag(LaunchArgs *a, int argc, char **argv, int *i) {
    const char *arg = long_spelling(argv[*i]);
    char name[128];
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
        a->help = 1;
        return 0;
    }
    if (strncmp(arg, "--", 2) != 0 || strlen(arg) >= sizeof name) {
        list_add(&a->unknown, "%s", arg);
        return 0;
    }
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    snprintf(name, sizeof name, "%.*s", (int)len, arg + 2);
    for (char *p = name; *p != '\0'; p++)
        if (*p == '-') *p = '_';
    const char *value = eq ? eq + 1 : NULL;
    for (size_t k = 0; k < sizeof switches / sizeof switches[0]; k++) {
        if (strcmp(name, switches[k].flag) != 0) continue;
        if (value != NULL) return usage_fail("--%s takes no value", name);
        *(int *)((char *)a + switches[k].offset) = 1;
        return 0;
    }
    for (size_t k = 0; k < DIST_SWITCHES; k++)
        if (strcmp(name, dist_switches[k].flag) == 0)
            return parse_dist_switch(a, k, bool_flag_value(value, argc, argv, i));
    if (strcmp(name, "config_file") == 0) {
        a->config_file = value ? value : *i + 1 < argc ? argv[++*i] : NULL;
        return a->config_file ? 0 : usage_fail("--config_file needs a path");
    }
    int id = setting_by_flag(name);
    if (id >= 0) return parse_setting(a, id, name, value, argc, argv, i);
    const Unsupported *u = unsupported_by_flag(name);
    if (u != NULL) parse_unsupported(a, u, name, value, argc, argv, i);
    else list_add(&a->unknown, "%s", arg);
    return 0;
}

static int parse_args(LaunchArgs *a, int argc, char **argv) {
    for (int i = 1; i < argc && a->script == 0; i++) {
        if (strcmp(argv[i], "--") == 0) {
            if (i + 1 < argc) a->script = i + 1;
            break;
        }
        if (argv[i][0] != '-' || strcmp(argv[i], "-") == 0)
            a->script = i;
        else if (parse_flag(a, argc, argv, &i) != 0)
            return -1;
    }
    for (int i = 0; i < a->refused.n; i++) fprintf(stderr, "%s: %s\n", WHO, a->refused.v[i]);
    if (a->unknown.n > 0) {
        fprintf(stderr, "%s: unknown flag%s:", WHO, a->unknown.n > 1 ? "s" : "");
        for (int i = 0; i < a->unknown.n; i++) fprintf(stderr, " %s", a->unknown.v[i]);
        fprintf(stderr, "\n");
    }
    if (a->unknown.n > 0 || a->refused.n > 0) {
        fprintf(stderr, "(accel-lua launch --help lists the flags)\n");
        return -1;
    }
    if (a->script == 0 && !a->help) return usage_fail("no script given");
    return 0;
}

/* The flags of host_unsupported whose every value is a no-op here
 * (any_value = 1) or the others (0), wrapped at 79 columns. */
static void print_unsupported_flags(int any_value) {
    for (int i = 0, col = 1; i < host_unsupported_count; i++) {
        const char *f = host_unsupported[i].flag, *neutral = host_unsupported[i].neutral;
        int star = neutral != NULL && strcmp(neutral, "*") == 0;
        if (f == NULL || star != any_value) continue;
        if (col + strlen(f) + 3 > 79) printf("\n "), col = 1;
        col += printf(" --%s", f);
    }
}

static void print_help(void) {
    printf("usage: accel-lua launch [flags] script.lua [args]\n"
           "Runs the script on num_processes ranks through OpenMPI's mpirun (directly\n"
           "when there is one process on one machine). Flags override the config file\n"
           "(--config_file, else $ACCEL_LUA_CONFIG, else\n"
           "~/.cache/accel-lua/default_config.yaml, $XDG_CACHE_HOME replacing ~/.cache),\n"
           "which overrides the defaults.\n\n"
           "  --config_file PATH                     the YAML config to read\n"
           "  --multi_gpu                            distributed_type MULTI_GPU (needs a CUDA build)\n"
           "  --use_deepspeed                        distributed_type DEEPSPEED (ZeRO sharding)\n"
           "  --use_fsdp                             distributed_type FSDP\n"
           "                                         (these three: =false turns off the config\n"
           "                                         file's type; then it follows the counts)\n"
           "  -m, --module                           the script is a Lua module name, found on\n"
           "                                         package.path, run as the script\n"
           "  --no_python                            run the script as a program (not through\n"
           "                                         accel-lua)\n"
           "  -q, --quiet                            mpirun --quiet, and no \"job failed\" line\n"
           "  --dry_run                              print the command instead of running it\n"
           "  --mpirun_hostfile, --deepspeed_hostfile  the same as --hostfile; -t is --tee\n");
    for (int i = 0; i < S_COUNT; i++) {
        const Setting *s = &host_settings[i];
        if (s->flag == NULL) continue;
        const char *arg = s->type == ST_BOOL ? "" : s->type == ST_STR ? " S" : " N";
        char left[64];
        snprintf(left, sizeof left, "--%s%s", s->flag, s->type == ST_ENUM ? " X" : arg);
        printf("  %-38s %s%s%s%s\n", left, s->help, s->def ? " [" : "", s->def ? s->def : "",
               s->def ? "]" : "");
    }
    printf("\nAccelerate flags for what does not exist here are refused, each with its "
           "reason\n(a value that asks for nothing, such as --dynamo_backend no, is "
           "accepted):\n ");
    print_unsupported_flags(0);
    printf("\n\nAccepted with no effect, because mpirun does what they configure:\n ");
    print_unsupported_flags(1);
    printf("\n\nExample:\n  accel-lua launch --num_processes 2 --mixed_precision bf16 "
           "train.lua --epochs 3\n");
}

/* ---- settings: file, flags, defaults, consistency ---- */

static int type_is(const LaunchConfig *c, const char *type) {
    const char *t = config_str(c, S_DISTRIBUTED_TYPE);
    return t != NULL && strcmp(t, type) == 0;
}

/* A switch turned on sets its distributed_type; one turned off drops the
 * config file's distributed_type when it is that one (resolve then derives
 * NO / MULTI_CPU from the process count). */
static int load_settings(LaunchConfig *c, const LaunchArgs *a) {
    char buf[4096];
    char err[256];
    const char *path = config_path_in_force(a->config_file, buf, sizeof buf);
    /* as Accelerate: --cpu without --config_file leaves the default config file out */
    const char *cpu = a->flags.value[S_USE_CPU];
    if (a->config_file == NULL && cpu != NULL && strcmp(cpu, "true") == 0) path = NULL;
    if (path != NULL && config_read(c, path, WHO) != 0) return -1;
    config_merge(c, &a->flags);
    for (size_t k = 0; k < DIST_SWITCHES; k++) {
        const char *type = dist_switches[k].dist_type;
        if (a->dist[k] > 0) config_set(c, S_DISTRIBUTED_TYPE, type, SRC_FLAG, err, sizeof err);
        else if (a->dist[k] < 0 && type_is(c, type)) config_unset(c, S_DISTRIBUTED_TYPE);
    }
    return 0;
}

/* --tee / --redirects: valid specs, and a --log_dir to write to (a spec
 * of 0 asks for no file); --log_dir alone tees everything (--tee 3). */
static int resolve_logs(LaunchConfig *c) {
    static const int specs[] = {S_TEE, S_REDIRECTS};
    char err[256];
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        const char *spec = config_str(c, specs[k]);
        int bits;
        if (spec == NULL) continue;
        if (host_stream_bits(spec, -1, &bits, err, sizeof err) != 0) {
            fprintf(stderr, "%s: --%s: %s\n", WHO, host_settings[specs[k]].flag, err);
            return -1;
        }
        if (config_str(c, S_LOG_DIR) == NULL && strcmp(spec, "0") != 0) {
            fprintf(stderr, "%s: --%s %s needs --log_dir DIR (where the rank logs go)\n", WHO,
                    host_settings[specs[k]].flag, spec);
            return -1;
        }
    }
    if (config_str(c, S_LOG_DIR) != NULL && config_str(c, S_TEE) == NULL &&
        config_str(c, S_REDIRECTS) == NULL)
        config_set(c, S_TEE, "3", SRC_DEFAULT, err, sizeof err);
    return 0;
}

/* A DeepSpeed or FSDP flag without its distributed_type would be dropped
 * (as Accelerate drops it): refused instead, naming the flag. A config
 * file's sections for another distributed_type stay unused, as in
 * Accelerate. Returns -1 after printing why. */
static int check_flags_apply(const LaunchConfig *c) {
    for (int i = 0; i < S_COUNT; i++) {
        if (c->source[i] != SRC_FLAG || config_applies(c, i)) continue;
        int ds = strncmp(host_settings[i].key, "deepspeed_config.", 17) == 0;
        const char *type = config_str(c, S_DISTRIBUTED_TYPE);
        fprintf(stderr, "%s: --%s applies to %s only; this launch is %s (add --%s)\n", WHO,
                host_settings[i].flag, ds ? "DeepSpeed" : "FSDP", type ? type : "NO",
                ds ? "use_deepspeed" : "use_fsdp");
        return -1;
    }
    return 0;
}

/* Derives distributed_type from the counts, fills defaults, checks what
 * cannot work; returns -1 after printing why. */
static int resolve(LaunchConfig *c, int dry_run) {
    char err[256];
    long n = config_int(c, S_NUM_PROCESSES, 1), m = config_int(c, S_NUM_MACHINES, 1);
    /* use_cpu wins over MULTI_GPU when given at the same or a higher level
     * (--cpu over the file's MULTI_GPU, not the file's use_cpu over --multi_gpu). */
    int cpu_asked = config_bool(c, S_USE_CPU) &&
                    c->source[S_USE_CPU] >= c->source[S_DISTRIBUTED_TYPE];
    if (type_is(c, "MULTI_GPU") && config_bool(c, S_USE_CPU) && c->source[S_USE_CPU] == SRC_FLAG &&
        c->source[S_DISTRIBUTED_TYPE] == SRC_FLAG) { /* Accelerate's ValueError */
        fprintf(stderr, "%s: you can only use one of --cpu and --multi_gpu at a time\n", WHO);
        return -1;
    }
    if (type_is(c, "MULTI_GPU") && cpu_asked)
        config_set(c, S_DISTRIBUTED_TYPE, "MULTI_CPU", c->source[S_USE_CPU], err, sizeof err);
    if ((config_str(c, S_DISTRIBUTED_TYPE) == NULL || type_is(c, "NO")) && (n > 1 || m > 1))
        config_set(c, S_DISTRIBUTED_TYPE, "MULTI_CPU", SRC_DEFAULT, err, sizeof err);
    if (launch_resolve_gpus(c, dry_run) != 0) return -1;
    if (check_flags_apply(c) != 0) return -1;
    if (c->ds_gradient_accumulation && !type_is(c, "DEEPSPEED") && c->source[S_GRADIENT_ACCUMULATION_STEPS] == SRC_FILE)
        config_unset(c, S_GRADIENT_ACCUMULATION_STEPS); /* deepspeed_config's key: for DeepSpeed jobs only */
    config_fill_defaults(c);
    if (n > 1 && config_str(c, S_NUM_THREADS) == NULL) { /* the caller's OMP_NUM_THREADS, as Accelerate's default */
        const char *omp = getenv("OMP_NUM_THREADS");
        char *end = NULL;
        long t = omp != NULL ? strtol(omp, &end, 10) : 0;
        const int caller = omp != NULL && end != omp && *end == '\0' && t >= 1;
        config_set(c, S_NUM_THREADS, caller ? omp : "1", SRC_DEFAULT, err, sizeof err);
    }
    if (m > 1 && config_str(c, S_HOSTFILE) == NULL) {
        fprintf(stderr, "%s: num_machines %ld needs --hostfile (or mpirun_config.mpirun_hostfile "
                        "in the config): mpirun starts the ranks on every machine\n", WHO, m);
        return -1;
    }
    if (n % m != 0) {
        fprintf(stderr, "%s: num_processes %ld is not a multiple of num_machines %ld\n", WHO, n, m);
        return -1;
    }
    return resolve_logs(c);
}

/* ---- the command ---- */

/* Whether launch's stdout / stderr is a terminal (1 or 0, always set, so a
 * value inherited from an outer launch never leaks through) and, when one
 * is, its width: what mpirun gives the ranks says nothing about where
 * their output ends, so this is how rank 0's progress bar
 * (bindings/lua/accel/progress.lua) knows it may redraw in place. */
static void add_terminal_env(StrList *env) {
    struct winsize ws;
    int out = isatty(STDOUT_FILENO), err = isatty(STDERR_FILENO);
    list_add(env, "ACCEL_LUA_STDOUT_TTY=%d", out);
    list_add(env, "ACCEL_LUA_STDERR_TTY=%d", err);
    if ((out || err) && ioctl(out ? STDOUT_FILENO : STDERR_FILENO, TIOCGWINSZ, &ws) == 0 &&
        ws.ws_col > 0)
        list_add(env, "ACCEL_LUA_COLUMNS=%d", (int)ws.ws_col);
}

/* NAME=VALUE for each setting the ranks see, for attempt `attempt`. */
static void build_env(const LaunchConfig *c, int attempt, StrList *env) {
    for (int i = 0; i < S_COUNT; i++)
        if (host_settings[i].env != NULL && c->value[i] != NULL && config_applies(c, i))
            list_add(env, "%s=%s", host_settings[i].env, c->value[i]);
    list_add(env, "ACCEL_LUA_USE_DEEPSPEED=%s", type_is(c, "DEEPSPEED") ? "true" : "false");
    list_add(env, "ACCEL_LUA_USE_FSDP=%s", type_is(c, "FSDP") ? "true" : "false");
    if (config_str(c, S_NUM_THREADS) != NULL) {
        list_add(env, "OMP_NUM_THREADS=%s", config_str(c, S_NUM_THREADS));
        list_add(env, "OPENBLAS_NUM_THREADS=%s", config_str(c, S_NUM_THREADS));
    }
    if (config_str(c, S_GPU_IDS) != NULL && strcmp(config_str(c, S_GPU_IDS), "all") != 0)
        list_add(env, "CUDA_VISIBLE_DEVICES=%s", config_str(c, S_GPU_IDS));
    list_add(env, "ACCEL_LUA_RESTART_COUNT=%d", attempt);
    add_terminal_env(env);
}

static int uses_mpirun(const LaunchConfig *c) {
    return config_int(c, S_NUM_PROCESSES, 1) > 1 || config_int(c, S_NUM_MACHINES, 1) > 1 ||
           config_str(c, S_HOSTFILE) != NULL;
}

/* Where the ranks go and what they are bound to (see the top comment). */
static void add_placement(const LaunchConfig *c, StrList *cmd) {
    long n = config_int(c, S_NUM_PROCESSES, 1), m = config_int(c, S_NUM_MACHINES, 1);
    long t = config_int(c, S_NUM_THREADS, 1);
    const char *hostfile = config_str(c, S_HOSTFILE);
    if (hostfile != NULL) {
        list_add(cmd, "--hostfile");
        list_add(cmd, "%s", hostfile);
        if (getenv("OMPI_MCA_rtc") == NULL)
            list_add(cmd, "--mca"), list_add(cmd, "rtc"), list_add(cmd, "^hwloc");
        if (m > 1) list_add(cmd, "--map-by"), list_add(cmd, "ppr:%ld:node", n / m);
        if (t > 1) list_add(cmd, "--bind-to"), list_add(cmd, "none");
        return;
    }
    long cores = host_physical_cores();
    if (n > cores) list_add(cmd, "--oversubscribe");
    if (n * t > cores)
        list_add(cmd, "--bind-to"), list_add(cmd, "none");
    else if (t > 1)
        list_add(cmd, "--map-by"), list_add(cmd, "slot:PE=%ld", t);
}

static void build_command(const LaunchConfig *c, const LaunchArgs *a, const StrList *env,
                          int argc, char **argv, StrList *cmd) {
    static const char *const forwarded[] = {"LUA_PATH", "LUA_CPATH", "LUA_PATH_5_4",
                                            "LUA_CPATH_5_4", "LUA_INIT", "LUA_INIT_5_4"};
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    self[len > 0 ? len : 0] = '\0';
    if (uses_mpirun(c)) {
        const char *mpirun = getenv("ACCEL_LUA_MPIRUN");
        list_add(cmd, "%s", mpirun && mpirun[0] ? mpirun : "mpirun");
        if (geteuid() == 0) list_add(cmd, "--allow-run-as-root");
        if (a->quiet) list_add(cmd, "--quiet");
        list_add(cmd, "-np");
        list_add(cmd, "%ld", config_int(c, S_NUM_PROCESSES, 1));
        add_placement(c, cmd);
        for (int i = 0; i < env->n; i++) list_add(cmd, "-x"), list_add(cmd, "%s", env->v[i]);
        for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
            if (getenv(forwarded[i]) != NULL) list_add(cmd, "-x"), list_add(cmd, "%s", forwarded[i]);
    }
    static const char rank_vars_sh[] =
        "export RANK=\"${RANK:-$OMPI_COMM_WORLD_RANK}\" WORLD_SIZE=\"${WORLD_SIZE:-$OMPI_COMM_WORLD_SIZE}\" "
        "LOCAL_RANK=\"${LOCAL_RANK:-$OMPI_COMM_WORLD_LOCAL_RANK}\" "
        "LOCAL_WORLD_SIZE=\"${LOCAL_WORLD_SIZE:-$OMPI_COMM_WORLD_LOCAL_SIZE}\"; exec \"$0\" \"$@\"";
    if (a->no_python && uses_mpirun(c)) list_add(cmd, "/bin/sh"), list_add(cmd, "-c"), list_add(cmd, "%s", rank_vars_sh);
    if (!a->no_python) list_add(cmd, "%s", len > 0 ? self : "accel-lua");
    if (a->module) list_add(cmd, "-m");
    /* a program named without a '/' is the file launch checked here, not one on PATH */
    if (a->no_python && !strchr(argv[a->script], '/')) list_add(cmd, "./%s", argv[a->script]);
    else list_add(cmd, "%s", argv[a->script]);
    for (int i = a->script + 1; i < argc; i++) list_add(cmd, "%s", argv[i]);
}

/* Prints a word so that a shell reads it back unchanged. */
static void print_quoted(const char *s) {
    if (s[0] != '\0' && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                  "0123456789_-./=:,@%+") == strlen(s)) {
        fputs(s, stdout);
        return;
    }
    putchar('\'');
    for (; *s != '\0'; s++) {
        if (*s == '\'') fputs("'\\'", stdout);
        putchar(*s);
    }
    putchar('\'');
}

/* One line: NAME=VALUE words (direct run only), then the command. */
static void print_command(const StrList *env, const StrList *cmd, int direct) {
    for (int i = 0; direct && i < env->n; i++) print_quoted(env->v[i]), putchar(' ');
    for (int i = 0; i < cmd->n; i++) print_quoted(cmd->v[i]), putchar(i + 1 < cmd->n ? ' ' : '\n');
    fflush(stdout);
}

/* The ranks make their own log folders; on one machine launch makes
 * --log_dir first, so a bad one is one error, before anything starts. */
static int prepare_log_dir(const LaunchConfig *c, int dry_run) {
    const char *dir = config_str(c, S_LOG_DIR);
    if (dir == NULL || dry_run || config_str(c, S_HOSTFILE) != NULL) return 0;
    if (host_make_dirs(dir, strlen(dir)) == 0 && access(dir, W_OK) == 0) return 0;
    fprintf(stderr, "%s: --log_dir %s: cannot create or write it: %s\n", WHO, dir,
            strerror(errno));
    return -1;
}

/* The script "-" (standard input) on several ranks: mpirun hands stdin to
 * rank 0 only, so the other ranks would run an empty script. Refused; 1
 * after printing why. */
static int stdin_script_for_many(const LaunchConfig *c, const LaunchArgs *a, const char *script) {
    long n = config_int(c, S_NUM_PROCESSES, 1);
    if (strcmp(script, "-") != 0 || a->module || a->no_python || n < 2) return 0;
    fprintf(stderr, "%s: the script '-' (standard input) reaches rank 0 only (mpirun gives stdin to "
                    "rank 0); with num_processes %ld save the script to a file and launch that\n",
            WHO, n);
    return 1;
}

/* A hostfile mpirun can use: readable, listing num_machines machines at
 * least (mpirun's own errors for these are banners about ORTE and ppr). */
static int check_hostfile(const LaunchConfig *c, int dry_run) {
    const char *path = config_str(c, S_HOSTFILE);
    long m = config_int(c, S_NUM_MACHINES, 1);
    if (path == NULL || dry_run) return 0;
    long listed = job_hostfile_machines(path);
    if (listed < 0) {
        fprintf(stderr, "%s: --hostfile %s: cannot read it: %s\n", WHO, path, strerror(errno));
        return -1;
    }
    if (listed >= m) return 0;
    fprintf(stderr, "%s: --hostfile %s lists %ld machine%s, num_machines is %ld (one line per "
                    "machine: HOST slots=N)\n", WHO, path, listed, listed == 1 ? "" : "s", m);
    return -1;
}

/* ---- running, with restarts ---- */

static volatile sig_atomic_t stop_signal;
static volatile pid_t running_child;

/* Ctrl-C at a terminal (si_code SI_KERNEL) reaches the job through the
 * terminal's process group; any other SIGINT, and SIGTERM / SIGHUP, sent
 * to launch (by a scheduler, a parent process, `kill`) are passed on.
 * Either way: no restart. */
static void on_stop_signal(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    stop_signal = sig;
    int from_terminal = sig == SIGINT && info != NULL && info->si_code == SI_KERNEL;
    if (!from_terminal && running_child > 0) kill(running_child, sig);
}

static void catch_stop_signals(void) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_stop_signal;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
}

/* Waits for the job, checking on it every `interval` seconds (the
 * --monitor_interval); signals only cut a nap short. */
static void wait_job(pid_t pid, double interval, int *status) {
    struct timespec nap = {(time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9)};
    for (;;) {
        pid_t got = waitpid(pid, status, WNOHANG);
        if (got == pid || (got < 0 && errno != EINTR)) return;
        nanosleep(&nap, NULL);
    }
}

/* Runs cmd with env added; returns its exit status (128 + signal when
 * killed), or -1 if it could not be started. With `w`, the job's stderr
 * goes through a pipe to job_watch_wait (copied on, and read for why the
 * job ended). */
static int run_once(const StrList *cmd, const StrList *env, double interval, JobWatch *w) {
    int fds[2], errfd[2] = {-1, -1}, err = 0, status = 0;
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    if (w != NULL && pipe2(errfd, O_CLOEXEC) != 0) w = NULL, errfd[0] = errfd[1] = -1;
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < env->n; i++) putenv(env->v[i]);
        if (errfd[1] >= 0 && dup2(errfd[1], STDERR_FILENO) < 0) _exit(127);
        execvp(cmd->v[0], cmd->v);
        err = errno;
        if (write(fds[1], &err, sizeof err) < 0) _exit(127);
        _exit(127);
    }
    close(fds[1]);
    if (errfd[1] >= 0) close(errfd[1]);
    running_child = pid;
    ssize_t got;
    while ((got = read(fds[0], &err, sizeof err)) < 0 && errno == EINTR) {}
    close(fds[0]);
    if (pid > 0 && w != NULL) job_watch_wait(w, pid, errfd[0], interval, &status);
    else if (pid > 0) wait_job(pid, interval, &status);
    if (errfd[0] >= 0 && (pid <= 0 || w == NULL)) close(errfd[0]);
    running_child = 0;
    if (pid < 0 || got == (ssize_t)sizeof err) {
        fprintf(stderr, "%s: cannot run %s: %s%s\n", WHO, cmd->v[0],
                strerror(pid < 0 ? errno : err),
                strstr(cmd->v[0], "mpirun") ? " (OpenMPI: apt-get install openmpi-bin)" : "");
        return -1;
    }
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

/* Prints why the attempt failed, naming the rank's host, when mpirun's
 * output said. */
static void report_reason(const LaunchConfig *c, const JobWatch *w) {
    long m = config_int(c, S_NUM_MACHINES, 1);
    JobPlacement p = {config_str(c, S_HOSTFILE),
                      m > 1 ? config_int(c, S_NUM_PROCESSES, 1) / m : 0};
    char reason[4608];
    job_watch_reason(w, &p, reason, sizeof reason);
    if (reason[0] != '\0') fprintf(stderr, "%s: %s\n", WHO, reason);
}

static int run_job(const LaunchConfig *c, const LaunchArgs *a, int argc, char **argv) {
    long restarts = config_int(c, S_MAX_RESTARTS, 0);
    double interval = strtod(config_str(c, S_MONITOR_INTERVAL), NULL);
    int status = 0;
    catch_stop_signals();
    for (int attempt = 0;; attempt++) {
        StrList env = {0}, cmd = {0};
        build_env(c, attempt, &env);
        build_command(c, a, &env, argc, argv, &cmd);
        JobWatch w;
        job_watch_init(&w);
        if (a->dry_run) print_command(&env, &cmd, !uses_mpirun(c));
        else status = run_once(&cmd, &env, interval, uses_mpirun(c) ? &w : NULL);
        list_free(&cmd);
        list_free(&env);
        if (status > 0 && !a->quiet) report_reason(c, &w);
        if (status <= 0 || stop_signal || attempt >= restarts) break;
        if (!a->quiet)
            fprintf(stderr, "%s: job failed (exit %d), restart %d/%ld\n", WHO, status, attempt + 1, restarts);
    }
    if (status > 0 && !a->quiet)
        fprintf(stderr, "%s: job failed (exit %d)%s\n", WHO, status,
                stop_signal ? ", interrupted" : restarts > 0 ? ", no restarts left" : "");
    return status < 0 ? 127 : status;
}

int cmd_launch(int argc, char **argv) {
    LaunchArgs a = {0};
    LaunchConfig c = {0};
    int status = 2;
    if (parse_args(&a, argc, argv) != 0) goto done;
    if (a.help) {
        print_help();
        status = 0;
        goto done;
    }
    if (load_settings(&c, &a) != 0 || resolve(&c, a.dry_run) != 0) goto done;
    if (config_int(&c, S_NUM_MACHINES, 1) > 1 && config_int(&c, S_MACHINE_RANK, 0) > 0) {
        fprintf(stderr, "%s: machine_rank %ld: nothing to do here; under MPI only machine 0 runs "
                        "`accel-lua launch`, and mpirun starts the ranks on the others "
                        "(listed in the hostfile)\n", WHO, config_int(&c, S_MACHINE_RANK, 0));
        status = 0;
        goto done;
    }
    const char *script = argv[a.script];
    /* With a hostfile the script may live on the other machines only; a
     * module is looked up by each rank. */
    if (config_str(&c, S_HOSTFILE) == NULL && strcmp(script, "-") != 0 && !a.module &&
        access(script, a.no_python ? X_OK : R_OK) != 0) {
        fprintf(stderr, "%s: cannot %s script %s: %s\n", WHO, a.no_python ? "execute" : "read",
                script, strerror(errno));
        goto done;
    }
    if (stdin_script_for_many(&c, &a, script) || prepare_log_dir(&c, a.dry_run) != 0 ||
        check_hostfile(&c, a.dry_run) != 0)
        goto done;
    if (a.module && a.no_python) {
        fprintf(stderr, "%s: --module and --no_python: a module runs through accel-lua\n", WHO);
        goto done;
    }
    status = run_job(&c, &a, argc, argv);
done:
    config_free(&a.flags);
    config_free(&c);
    list_free(&a.unknown);
    list_free(&a.refused);
    return status;
}
