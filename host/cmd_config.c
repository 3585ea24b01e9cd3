/* cmd_config.c: `accel-lua config [--config_file PATH]` asks questions like
 * `accelerate config` and writes the answers as YAML;
 * `accel-lua config default [--config_file PATH] [--mixed_precision X]`
 * writes sensible defaults (and, like Accelerate, leaves an existing file
 * alone); `accel-lua config update [--config_file PATH]` (Accelerate's
 * `accelerate config update`) reads an existing file, checks it as launch
 * does, adds the settings it lacks with their defaults, drops Accelerate's
 * keys that ask for nothing here (`tpu_use_cluster: false` ...), and
 * writes it back, saying what changed. The file goes to --config_file,
 * else $ACCEL_LUA_CONFIG, else $XDG_CACHE_HOME (or ~/.cache)/accel-lua/default_config.yaml
 * (folders created).
 *
 * Answers are read from stdin one line each, so they can be piped in; an
 * empty line (or end of input) takes the default shown in brackets; a
 * choice is given by its number or its name. A bad answer is asked again
 * on a terminal; from a pipe it is an error naming the question and the
 * answer (exit 2), since later lines would no longer match. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "host/config_yaml.h"
#include "host/settings.h"
#include "host/subcommands.h"

#define WHO "accel-lua config"

typedef struct {
    LaunchConfig c;
    int tty; /* stdin is a terminal */
} Session;

/* Prints the question, reads one line into buf (the default if empty or
 * at end of input). Echoes piped answers so the transcript reads well. */
static void read_answer(const Session *s, const char *question, const char *def, char *buf,
                        size_t n) {
    char *line = NULL;
    size_t cap = 0;
    printf("%s [%s]: ", question, def ? def : "");
    fflush(stdout);
    ssize_t len = getline(&line, &cap, stdin);
    if (len < 0) len = 0;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '))
        len--;
    size_t start = len > 0 ? strspn(line, " \t") : 0; /* at end of input line holds no string */
    if ((size_t)len <= start)
        snprintf(buf, n, "%s", def ? def : "");
    else
        snprintf(buf, n, "%.*s", (int)((size_t)len - start), line + start);
    free(line);
    if (!s->tty) printf("%s\n", buf);
}

/* After a bad answer: 1 = ask again (terminal), 0 = give up (pipe). */
static int retry(const Session *s, const char *question, const char *answer, const char *why) {
    if (s->tty) {
        printf("  %s; please answer again.\n", why);
        return 1;
    }
    fprintf(stderr, "%s: \"%s\": answer '%s': %s\n", WHO, question, answer, why);
    return 0;
}

/* Asks for setting id; an empty answer with no default leaves it unset. */
static int ask(Session *s, int id, const char *question, const char *def) {
    char buf[1024], err[256];
    for (;;) {
        read_answer(s, question, def, buf, sizeof buf);
        if (buf[0] == '\0') return 0;
        if (config_set(&s->c, id, buf, SRC_FILE, err, sizeof err) == 0) return 0;
        if (!retry(s, question, buf, err)) return -1;
    }
}

/* "not one of the choices (0 to 2, or NO, MULTI_CPU, MULTI_GPU)" into err. */
static void choices_error(const char *const *values, int n, char *err, size_t len) {
    size_t used = (size_t)snprintf(err, len, "not one of the choices (%s%d, or ", n > 1 ? "0 to " : "",
                                   n - 1);
    for (int i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(err + used, len - used, "%s%s", values[i], i + 1 < n ? ", " : ")");
}

/* Asks to pick one of values[0..n) (by number or name) for setting id. */
static int ask_choice(Session *s, int id, const char *question, const char *const *values,
                      const char *const *labels, int n, int def) {
    char buf[256], err[256], num[16];
    printf("%s\n", question);
    for (int i = 0; i < n; i++) printf("  [%d] %s\n", i, labels ? labels[i] : values[i]);
    snprintf(num, sizeof num, "%d", def);
    for (;;) {
        read_answer(s, "Your choice", num, buf, sizeof buf);
        char *end;
        long k = strtol(buf, &end, 10);
        const char *text = *end == '\0' && k >= 0 && k < n ? values[k] : buf;
        int ok = config_set(&s->c, id, text, SRC_FILE, err, sizeof err) == 0;
        for (int i = 0; ok && i < n; i++)
            if (strcmp(s->c.value[id], values[i]) == 0) return 0;
        choices_error(values, n, err, sizeof err); /* the menu's numbers and names say more than config_set's */
        if (!retry(s, question, buf, err)) return -1;
    }
}

/* The enum choices of setting id as a list (at most 8). */
static int setting_choices(int id, char store[8][64], const char *values[8]) {
    const char *p = host_settings[id].choices;
    int n = 0;
    while (*p != '\0' && n < 8) {
        size_t len = strcspn(p, "|");
        snprintf(store[n], 64, "%.*s", (int)len, p);
        values[n] = store[n];
        n++;
        p += len + (p[len] == '|');
    }
    return n;
}

static int ask_enum(Session *s, int id, const char *question) {
    char store[8][64];
    const char *values[8];
    int n = setting_choices(id, store, values), def = 0;
    for (int i = 0; i < n; i++)
        if (host_settings[id].def && strcmp(values[i], host_settings[id].def) == 0) def = i;
    return ask_choice(s, id, question, values, NULL, n, def);
}

/* A yes/no question that is not itself a setting; -1 on a bad answer. */
static int ask_yes_no(Session *s, const char *question, int def) {
    char buf[64];
    for (;;) {
        read_answer(s, question, def ? "yes" : "no", buf, sizeof buf);
        if (strcasecmp(buf, "yes") == 0 || strcasecmp(buf, "y") == 0) return 1;
        if (strcasecmp(buf, "no") == 0 || strcasecmp(buf, "n") == 0) return 0;
        if (!retry(s, question, buf, "answer yes or no")) return -1;
    }
}

static void set(Session *s, int id, const char *value) {
    char err[256];
    config_set(&s->c, id, value, SRC_FILE, err, sizeof err);
}

static int is(const Session *s, int id, const char *value) {
    return s->c.value[id] != NULL && strcmp(s->c.value[id], value) == 0;
}

static int ask_machines(Session *s) {
    if (ask(s, S_NUM_MACHINES, "How many different machines will you use (more than 1 for "
                               "multi-node training)?", "1") != 0)
        return -1;
    if (config_int(&s->c, S_NUM_MACHINES, 1) == 1) return 0;
    return ask(s, S_MACHINE_RANK, "What is the rank of this machine (machine 0 runs launch)?",
               "0") ||
           ask(s, S_MAIN_PROCESS_IP, "What is the IP address of the machine that will host the "
                                     "main process?", NULL) ||
           ask(s, S_MAIN_PROCESS_PORT, "What is the port you will use to communicate with the "
                                       "main process?", "29500") ||
           ask(s, S_HOSTFILE, "Which mpirun hostfile lists the machines (one line per machine, "
                              "'host slots=N')?", NULL)
               ? -1 : 0;
}

static int ask_deepspeed(Session *s) {
    set(s, S_DISTRIBUTED_TYPE, "DEEPSPEED");
    if (ask(s, S_ZERO_STAGE, "What should be your DeepSpeed's ZeRO optimization stage (0-3)?",
            "2") ||
        ask_enum(s, S_OFFLOAD_OPTIMIZER_DEVICE, "Where to offload optimizer states?"))
        return -1;
    if (config_int(&s->c, S_ZERO_STAGE, 2) == 3 &&
        (ask_enum(s, S_OFFLOAD_PARAM_DEVICE, "Where to offload parameters?") ||
         ask(s, S_ZERO3_INIT_FLAG, "Do you want to create the model's parameters already "
                                   "sharded (zero3_init_flag)?", "no")))
        return -1;
    int clip = ask_yes_no(s, "Do you want to use gradient clipping?", 0);
    if (clip < 0) return -1;
    return clip ? ask(s, S_GRADIENT_CLIPPING, "What is the gradient clipping value?", "1.0") : 0;
}

static int ask_fsdp(Session *s) {
    set(s, S_DISTRIBUTED_TYPE, "FSDP");
    if (ask_enum(s, S_FSDP_SHARDING_STRATEGY, "What should be your sharding strategy?") ||
        ask(s, S_FSDP_OFFLOAD_PARAMS, "Do you want to offload parameters and gradients to "
                                      "the CPU?", "no") ||
        ask_enum(s, S_FSDP_AUTO_WRAP_POLICY, "What should be your auto wrap policy?"))
        return -1;
    if (is(s, S_FSDP_AUTO_WRAP_POLICY, "SIZE_BASED_WRAP") &&
        ask(s, S_FSDP_MIN_NUM_PARAMS, "What should be your FSDP's minimum number of parameters "
                                      "per unit?", "100000000"))
        return -1;
    if (is(s, S_FSDP_AUTO_WRAP_POLICY, "TRANSFORMER_BASED_WRAP") &&
        ask(s, S_FSDP_TRANSFORMER_LAYER_CLS, "Which module classes are the transformer layers "
                                             "to wrap (comma-separated names)?", NULL))
        return -1;
    return ask_enum(s, S_FSDP_BACKWARD_PREFETCH, "What should be your backward prefetch?") ||
                   ask_enum(s, S_FSDP_STATE_DICT_TYPE, "What should be your state dict type?")
               ? -1 : 0;
}

/* Processes, threads and the sharding engine of a distributed setup. */
static int ask_distributed(Session *s) {
    if (ask_machines(s) ||
        ask(s, S_DEBUG, "Should distributed operations be checked while running for errors? "
                        "This can avoid timeout issues but will be slower.", "no") ||
        ask(s, S_NUM_PROCESSES, "How many processes should be used for distributed training "
                                "(in total, over all machines)?", "2") ||
        ask(s, S_NUM_THREADS, "How many CPU threads should each process use?", "1"))
        return -1;
    int ds = ask_yes_no(s, "Do you want to use DeepSpeed (ZeRO sharding)?", 0);
    if (ds < 0) return -1;
    if (ds) return ask_deepspeed(s);
    int fsdp = ask_yes_no(s, "Do you want to use FullyShardedDataParallel?", 0);
    if (fsdp < 0) return -1;
    return fsdp ? ask_fsdp(s) : 0;
}

static int interview(Session *s) {
    static const char *const env_values[] = {"LOCAL_MACHINE"};
    static const char *const env_labels[] = {"This machine (and machines mpirun can reach)"};
    static const char *const dist_values[] = {"NO", "MULTI_CPU", "MULTI_GPU"};
    static const char *const dist_labels[] = {"No distributed training", "multi-CPU",
                                              "multi-GPU"};
    if (ask_choice(s, S_COMPUTE_ENVIRONMENT, "In which compute environment are you running?",
                   env_values, env_labels, 1, 0) ||
        ask_choice(s, S_DISTRIBUTED_TYPE, "Which type of machine are you using?", dist_values,
                   dist_labels, 3, 0))
        return -1;
    if (is(s, S_DISTRIBUTED_TYPE, "MULTI_GPU"))
        printf("  note: this accel-lua is built without CUDA; launch refuses MULTI_GPU until it "
               "is built with make CUDA=1\n");
    if (is(s, S_DISTRIBUTED_TYPE, "NO")) {
        set(s, S_NUM_PROCESSES, "1");
        if (ask(s, S_USE_CPU, "Do you want to run your training on CPU only (even if a GPU is "
                              "available)?", "yes"))
            return -1;
    } else {
        set(s, S_USE_CPU, is(s, S_DISTRIBUTED_TYPE, "MULTI_GPU") ? "false" : "true");
        if (ask_distributed(s)) return -1;
    }
    return ask(s, S_GRADIENT_ACCUMULATION_STEPS, "How many gradient accumulation steps?", "1") ||
                   ask_enum(s, S_MIXED_PRECISION, "Do you wish to use mixed precision?")
               ? -1 : 0;
}

/* Appends key to the ", "-separated list in buf. */
static void note_key(char *buf, size_t n, const char *key) {
    size_t used = strlen(buf);
    snprintf(buf + used, n - used, "%s%s", used ? ", " : "", key);
}

/* config update: see the top comment. Returns the exit status. */
static int update(Session *s, const char *path) {
    char dropped[2048], added[2048] = "";
    int had[S_COUNT];
    if (access(path, F_OK) != 0) {
        fprintf(stderr, "%s: %s does not exist: nothing to update (`accel-lua config` or "
                        "`accel-lua config default` writes one)\n", WHO, path);
        return 1;
    }
    size_t len = strlen(path);
    if (len >= 5 && strcmp(path + len - 5, ".json") == 0) {
        fprintf(stderr, "%s: %s: update writes YAML, not JSON; rename the file to .yaml "
                        "first\n", WHO, path);
        return 2;
    }
    if (config_read_noting(&s->c, path, WHO, dropped, sizeof dropped) != 0) return 2;
    for (int i = 0; i < S_COUNT; i++) had[i] = s->c.value[i] != NULL;
    config_fill_defaults(&s->c);
    for (int i = 0; i < S_COUNT; i++)
        if (!had[i] && s->c.value[i] != NULL && host_settings[i].key != NULL)
            note_key(added, sizeof added, host_settings[i].key);
    if (config_write(&s->c, path, WHO) != 0) return 1;
    printf("%s: updated %s\n  added with their defaults: %s\n  removed (Accelerate keys that "
           "ask for nothing here): %s\n", WHO, path, added[0] ? added : "none",
           dropped[0] ? dropped : "none");
    return 0;
}

#define CONFIG_USAGE                                                                        \
    "usage: accel-lua config [--config_file PATH]\n"                                         \
    "       accel-lua config default [--config_file PATH] [--mixed_precision no|fp16|bf16|fp8]\n" \
    "       accel-lua config update [--config_file PATH]\n"

/* `config [default|update] --help`: what the form does, its flags, an example. */
static void print_help(const char *sub) {
    printf(CONFIG_USAGE "\n");
    if (sub == NULL)
        printf("Asks the launch questions (machines, processes, mixed precision, sharding ...)\n"
               "and writes the answers as YAML; an empty answer takes the default in brackets.\n"
               "Answers may be piped in, one per line.\n");
    else if (strcmp(sub, "default") == 0)
        printf("Writes a config with the defaults (one machine, one process); an existing file\n"
               "is left alone.\n");
    else
        printf("Reads an existing config, adds the settings it lacks with their defaults, drops\n"
               "Accelerate keys that ask for nothing here, and writes it back.\n");
    printf("\n  --config_file PATH       the file to write [$ACCEL_LUA_CONFIG, else\n"
           "                           ~/.cache/accel-lua/default_config.yaml;\n"
           "                           $XDG_CACHE_HOME replaces ~/.cache when set]\n"
           "  --mixed_precision X      (config default) no, fp16, bf16 or fp8 [no]\n"
           "  -h, --help               this help\n\n"
           "Example:\n  accel-lua config %s--config_file ./accel.yaml\n",
           sub == NULL ? "" : strcmp(sub, "default") == 0 ? "default --mixed_precision bf16 " : "update ");
}

/* --config_file PATH and (config default only) --mixed_precision X. */
static int parse_flags(Session *s, int argc, char **argv, int is_default, const char **path) {
    char err[256];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int missing = 0;
        if ((v = host_flag_value(argc, argv, &i, "config_file", &missing)) != NULL) {
            *path = v;
        } else if (is_default && (v = host_flag_value(argc, argv, &i, "mixed_precision", &missing)) != NULL) {
            if (config_set(&s->c, S_MIXED_PRECISION, v, SRC_FLAG, err, sizeof err)) {
                fprintf(stderr, "%s: --mixed_precision: %s\n", WHO, err);
                return -1;
            }
        } else {
            fprintf(stderr, "%s: %s: %s\n" CONFIG_USAGE, WHO, missing ? "missing value" : "unknown flag", a);
            return -1;
        }
    }
    return 0;
}

int cmd_config(int argc, char **argv) {
    Session s = {.tty = isatty(STDIN_FILENO)};
    int is_default = argc > 1 && strcmp(argv[1], "default") == 0;
    int is_update = argc > 1 && strcmp(argv[1], "update") == 0;
    int sub = is_default || is_update;
    const char *path = NULL;
    char buf[4096];
    int status = 2;
    if (host_help_asked(argc - sub, argv + sub)) {
        print_help(sub ? argv[1] : NULL);
        return 0;
    }
    if (parse_flags(&s, argc - sub, argv + sub, is_default, &path) != 0) goto done;
    if (path == NULL) path = config_default_path(buf, sizeof buf);
    if (is_update) {
        status = update(&s, path);
        goto done;
    }
    if (is_default && access(path, F_OK) == 0) { /* as `accelerate config default`: kept, exit 0 */
        fprintf(stderr, "%s: %s already exists; not overwritten (run `accel-lua config`, or pass "
                        "--config_file elsewhere)\n", WHO, path);
        status = 0;
        goto done;
    }
    if (!is_default && interview(&s) != 0) goto done;
    config_fill_defaults(&s.c);
    if (config_write(&s.c, path, WHO) != 0) {
        status = 1;
        goto done;
    }
    printf("%s: configuration saved at %s\n", WHO, path);
    status = 0;
done:
    config_free(&s.c);
    return status;
}
