/* settings.c: the table of launch settings and their validation.
 *
 * Settings reach every rank as environment variables (set by `launch`,
 * forwarded by mpirun's -x), read by the runtime and the Accelerator:
 *
 *   ACCEL_LUA_DISTRIBUTED_TYPE            NO | MULTI_CPU | MULTI_GPU | DEEPSPEED | FSDP
 *   ACCEL_LUA_NUM_PROCESSES               ranks in the job (the communicator asks MPI)
 *   ACCEL_LUA_NUM_MACHINES                machines in the job
 *   ACCEL_LUA_MIXED_PRECISION             no | fp16 | bf16 | fp8
 *   ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS integer >= 1
 *   ACCEL_LUA_USE_CPU                     true | false
 *   ACCEL_LUA_NUM_THREADS                 compute threads per rank (default 1 when
 *                                         several ranks; the host applies it at start,
 *                                         OMP_NUM_THREADS / OPENBLAS_NUM_THREADS too)
 *   ACCEL_LUA_USE_DEEPSPEED, ACCEL_LUA_USE_FSDP   true | false (from distributed_type)
 *   with DEEPSPEED: ACCEL_LUA_ZERO_STAGE (0-3), ACCEL_LUA_OFFLOAD_OPTIMIZER_DEVICE,
 *     ACCEL_LUA_OFFLOAD_PARAM_DEVICE (none | cpu), ACCEL_LUA_GRADIENT_CLIPPING,
 *     ACCEL_LUA_ZERO3_INIT_FLAG, ACCEL_LUA_DEEPSPEED_CONFIG_FILE
 *   with FSDP: ACCEL_LUA_FSDP_SHARDING_STRATEGY, ACCEL_LUA_FSDP_OFFLOAD_PARAMS,
 *     ACCEL_LUA_FSDP_AUTO_WRAP_POLICY, ACCEL_LUA_FSDP_MIN_NUM_PARAMS,
 *     ACCEL_LUA_FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP, ACCEL_LUA_FSDP_BACKWARD_PREFETCH,
 *     ACCEL_LUA_FSDP_STATE_DICT_TYPE
 *   ACCEL_LUA_RESTART_COUNT               0 on the first attempt, k on restart k
 *
 * main_process_ip / main_process_port / machine_rank are accepted for
 * Accelerate compatibility but not exported: under MPI, mpirun (started
 * once, on machine 0) places and wires the ranks. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/settings.h"

#define DS "deepspeed_config."
#define FS "fsdp_config."

const Setting host_settings[S_COUNT] = {
    [S_COMPUTE_ENVIRONMENT] = {"compute_environment", NULL, NULL, ST_ENUM, "LOCAL_MACHINE",
                               "LOCAL_MACHINE", "where the job runs"},
    [S_DISTRIBUTED_TYPE] = {"distributed_type", NULL, "ACCEL_LUA_DISTRIBUTED_TYPE", ST_ENUM,
                            "NO|MULTI_CPU|MULTI_GPU|DEEPSPEED|FSDP", "NO",
                            "NO, MULTI_CPU, MULTI_GPU, DEEPSPEED or FSDP"},
    [S_NUM_PROCESSES] = {"num_processes", "num_processes", "ACCEL_LUA_NUM_PROCESSES", ST_INT,
                         "1..", "1", "ranks in total, over all machines"},
    [S_NUM_MACHINES] = {"num_machines", "num_machines", "ACCEL_LUA_NUM_MACHINES", ST_INT, "1..",
                        "1", "machines (>1 needs --hostfile)"},
    [S_MACHINE_RANK] = {"machine_rank", "machine_rank", NULL, ST_INT, "0..", "0",
                        "this machine's index; only machine 0 launches"},
    [S_MAIN_PROCESS_IP] = {"main_process_ip", "main_process_ip", NULL, ST_STR, NULL, NULL,
                           "machine 0's address (informational under MPI)"},
    [S_MAIN_PROCESS_PORT] = {"main_process_port", "main_process_port", NULL, ST_INT, "1..65535",
                             NULL, "machine 0's port (informational under MPI)"},
    [S_HOSTFILE] = {"mpirun_config.mpirun_hostfile", "hostfile", NULL, ST_STR, NULL, NULL,
                    "mpirun hostfile listing the machines"},
    [S_MIXED_PRECISION] = {"mixed_precision", "mixed_precision", "ACCEL_LUA_MIXED_PRECISION",
                           ST_ENUM, "no|fp16|bf16|fp8", "no", "no, fp16, bf16 or fp8"},
    [S_GRADIENT_ACCUMULATION_STEPS] = {"gradient_accumulation_steps",
                                       "gradient_accumulation_steps",
                                       "ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS", ST_INT, "1..", "1",
                                       "micro-batches per optimizer step"},
    /* No CUDA backend is built yet: the default is the CPU. */
    [S_USE_CPU] = {"use_cpu", "cpu", "ACCEL_LUA_USE_CPU", ST_BOOL, NULL, "true",
                   "run on the CPU even if a GPU is available"},
    [S_NUM_THREADS] = {"num_cpu_threads_per_process", "num_cpu_threads_per_process",
                       "ACCEL_LUA_NUM_THREADS", ST_INT, "1..", NULL,
                       "compute threads per rank (default 1 with several ranks)"},
    [S_MAX_RESTARTS] = {"max_restarts", "max_restarts", NULL, ST_INT, "0..", NULL,
                        "relaunch a failed job up to this many times"},
    [S_ZERO_STAGE] = {DS "zero_stage", "zero_stage", "ACCEL_LUA_ZERO_STAGE", ST_INT, "0..3", "2",
                      "ZeRO stage 0-3 (with --use_deepspeed)"},
    [S_OFFLOAD_OPTIMIZER_DEVICE] = {DS "offload_optimizer_device", "offload_optimizer_device",
                                    "ACCEL_LUA_OFFLOAD_OPTIMIZER_DEVICE", ST_ENUM, "none|cpu",
                                    "none", "none or cpu"},
    [S_OFFLOAD_PARAM_DEVICE] = {DS "offload_param_device", "offload_param_device",
                                "ACCEL_LUA_OFFLOAD_PARAM_DEVICE", ST_ENUM, "none|cpu", "none",
                                "none or cpu (stage 3)"},
    [S_GRADIENT_CLIPPING] = {DS "gradient_clipping", "gradient_clipping",
                             "ACCEL_LUA_GRADIENT_CLIPPING", ST_FLOAT, NULL, NULL,
                             "clip gradients to this norm"},
    [S_ZERO3_INIT_FLAG] = {DS "zero3_init_flag", "zero3_init_flag", "ACCEL_LUA_ZERO3_INIT_FLAG",
                           ST_BOOL, NULL, "false", "create parameters sharded (stage 3)"},
    [S_DEEPSPEED_CONFIG_FILE] = {DS "deepspeed_config_file", "deepspeed_config_file",
                                 "ACCEL_LUA_DEEPSPEED_CONFIG_FILE", ST_STR, NULL, NULL,
                                 "DeepSpeed JSON config"},
    [S_FSDP_SHARDING_STRATEGY] = {FS "fsdp_sharding_strategy", "fsdp_sharding_strategy",
                                  "ACCEL_LUA_FSDP_SHARDING_STRATEGY", ST_ENUM,
                                  "FULL_SHARD|SHARD_GRAD_OP|NO_SHARD", "FULL_SHARD",
                                  "FULL_SHARD, SHARD_GRAD_OP or NO_SHARD"},
    [S_FSDP_OFFLOAD_PARAMS] = {FS "fsdp_offload_params", "fsdp_offload_params",
                               "ACCEL_LUA_FSDP_OFFLOAD_PARAMS", ST_BOOL, NULL, "false",
                               "offload parameters and gradients to the CPU"},
    [S_FSDP_AUTO_WRAP_POLICY] = {FS "fsdp_auto_wrap_policy", "fsdp_auto_wrap_policy",
                                 "ACCEL_LUA_FSDP_AUTO_WRAP_POLICY", ST_ENUM,
                                 "NO_WRAP|SIZE_BASED_WRAP|TRANSFORMER_BASED_WRAP", "NO_WRAP",
                                 "NO_WRAP, SIZE_BASED_WRAP or TRANSFORMER_BASED_WRAP"},
    [S_FSDP_MIN_NUM_PARAMS] = {FS "fsdp_min_num_params", "fsdp_min_num_params",
                               "ACCEL_LUA_FSDP_MIN_NUM_PARAMS", ST_INT, "1..", NULL,
                               "parameters per unit (SIZE_BASED_WRAP)"},
    [S_FSDP_TRANSFORMER_LAYER_CLS] = {FS "fsdp_transformer_layer_cls_to_wrap",
                                      "fsdp_transformer_layer_cls_to_wrap",
                                      "ACCEL_LUA_FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP", ST_STR, NULL,
                                      NULL, "module class names to wrap, comma-separated"},
    [S_FSDP_BACKWARD_PREFETCH] = {FS "fsdp_backward_prefetch", "fsdp_backward_prefetch",
                                  "ACCEL_LUA_FSDP_BACKWARD_PREFETCH", ST_ENUM,
                                  "BACKWARD_PRE|BACKWARD_POST|NO_PREFETCH", "BACKWARD_PRE",
                                  "BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH"},
    [S_FSDP_STATE_DICT_TYPE] = {FS "fsdp_state_dict_type", "fsdp_state_dict_type",
                                "ACCEL_LUA_FSDP_STATE_DICT_TYPE", ST_ENUM,
                                "FULL_STATE_DICT|SHARDED_STATE_DICT|LOCAL_STATE_DICT",
                                "SHARDED_STATE_DICT", "how save_state writes the model"},
};

/* Other spellings Accelerate's configs use for the same settings. */
static const struct { const char *key; int id; } aliases[] = {
    {DS "gradient_accumulation_steps", S_GRADIENT_ACCUMULATION_STEPS},
    {DS "deepspeed_hostfile", S_HOSTFILE},
};

/* Keys Accelerate writes that mean nothing here: accepted, ignored. */
static const char *const ignored_keys[] = {
    "debug", "downcast_bf16", "dynamo_config", "enable_cpu_affinity", "gpu_ids",
    "ipex_config", "main_training_function", "megatron_lm_config", "rdzv_backend",
    "same_network", "tpu_env", "tpu_use_cluster", "tpu_use_sudo", "use_mps_device",
    DS "deepspeed_multinode_launcher", DS "zero3_save_16bit_model",
    FS "fsdp_use_orig_params", FS "fsdp_sync_module_states", FS "fsdp_forward_prefetch",
    FS "fsdp_cpu_ram_efficient_loading", FS "fsdp_activation_checkpointing",
    "mpirun_config.mpirun_ccl",
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

int setting_by_key(const char *key) {
    for (int i = 0; i < S_COUNT; i++)
        if (strcmp(host_settings[i].key, key) == 0) return i;
    for (size_t i = 0; i < COUNT(aliases); i++)
        if (strcmp(aliases[i].key, key) == 0) return aliases[i].id;
    return -1;
}

int setting_key_ignored(const char *key) {
    for (size_t i = 0; i < COUNT(ignored_keys); i++)
        if (strcmp(ignored_keys[i], key) == 0) return 1;
    return 0;
}

int setting_is_section(const char *name) {
    return strcmp(name, "deepspeed_config") == 0 || strcmp(name, "fsdp_config") == 0 ||
           strcmp(name, "mpirun_config") == 0;
}

/* Case-insensitive, '-' and '_' alike, whole of a against b[0..blen). */
static int loose_equal(const char *a, const char *b, size_t blen) {
    size_t i = 0;
    for (; i < blen && a[i] != '\0'; i++) {
        int ca = a[i] == '-' ? '_' : tolower((unsigned char)a[i]);
        int cb = b[i] == '-' ? '_' : tolower((unsigned char)b[i]);
        if (ca != cb) return 0;
    }
    return i == blen && a[i] == '\0';
}

int setting_by_flag(const char *flag) {
    for (int i = 0; i < S_COUNT; i++)
        if (host_settings[i].flag != NULL && strcmp(host_settings[i].flag, flag) == 0) return i;
    return -1;
}

static int parse_long(const char *s, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0) return 0;
    *out = v;
    return 1;
}

/* Checks v against "min..max" / "min.."; writes the error. */
static int check_range(long v, const char *range, char *err, size_t errlen) {
    long lo = 0, hi = 0;
    int has_hi = 0;
    if (range == NULL) return 1;
    const char *dots = strstr(range, "..");
    lo = strtol(range, NULL, 10);
    if (dots[2] != '\0') { hi = strtol(dots + 2, NULL, 10); has_hi = 1; }
    if (v >= lo && (!has_hi || v <= hi)) return 1;
    if (has_hi) snprintf(err, errlen, "%ld is out of range (%ld to %ld)", v, lo, hi);
    else snprintf(err, errlen, "%ld is out of range (at least %ld)", v, lo);
    return 0;
}

static char *canon_int(const Setting *s, const char *text, char *err, size_t errlen) {
    long v;
    char buf[32];
    if (!parse_long(text, &v)) {
        snprintf(err, errlen, "'%s' is not an integer", text);
        return NULL;
    }
    if (!check_range(v, s->choices, err, errlen)) return NULL;
    snprintf(buf, sizeof buf, "%ld", v);
    return strdup(buf);
}

static char *canon_float(const char *text, char *err, size_t errlen) {
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || !isfinite(v)) {
        snprintf(err, errlen, "'%s' is not a number", text);
        return NULL;
    }
    return strdup(text);
}

static char *canon_bool(const char *text, char *err, size_t errlen) {
    static const char *const yes[] = {"true", "yes", "on", "1", "y"};
    static const char *const no[] = {"false", "no", "off", "0", "n"};
    for (size_t i = 0; i < COUNT(yes); i++) {
        if (loose_equal(text, yes[i], strlen(yes[i]))) return strdup("true");
        if (loose_equal(text, no[i], strlen(no[i]))) return strdup("false");
    }
    snprintf(err, errlen, "'%s' is not a boolean (true or false)", text);
    return NULL;
}

/* The choice matching text (case and -/_ ignored), in its canonical case. */
static char *canon_enum(const Setting *s, const char *text, char *err, size_t errlen) {
    const char *p = s->choices;
    while (*p != '\0') {
        size_t n = strcspn(p, "|");
        if (loose_equal(text, p, n)) return strndup(p, n);
        p += n + (p[n] == '|');
    }
    char list[256];
    snprintf(list, sizeof list, "%s", s->choices);
    for (char *q = list; *q != '\0'; q++)
        if (*q == '|') *q = ',';
    snprintf(err, errlen, "'%s' is not one of %s", text, list);
    return NULL;
}

int config_set(LaunchConfig *c, int id, const char *text, SettingSource src, char *err,
               size_t errlen) {
    const Setting *s = &host_settings[id];
    char *v = NULL;
    if (text[0] == '\0') {
        snprintf(err, errlen, "empty value");
        return -1;
    }
    switch (s->type) {
    case ST_INT: v = canon_int(s, text, err, errlen); break;
    case ST_FLOAT: v = canon_float(text, err, errlen); break;
    case ST_BOOL: v = canon_bool(text, err, errlen); break;
    case ST_ENUM: v = canon_enum(s, text, err, errlen); break;
    case ST_STR: v = strdup(text); break;
    }
    if (v == NULL) return -1;
    free(c->value[id]);
    c->value[id] = v;
    c->source[id] = src;
    return 0;
}

void config_unset(LaunchConfig *c, int id) {
    free(c->value[id]);
    c->value[id] = NULL;
    c->source[id] = SRC_UNSET;
}

void config_merge(LaunchConfig *to, const LaunchConfig *from) {
    for (int i = 0; i < S_COUNT; i++) {
        if (from->value[i] == NULL) continue;
        free(to->value[i]);
        to->value[i] = strdup(from->value[i]);
        to->source[i] = from->source[i];
    }
}

void config_free(LaunchConfig *c) {
    for (int i = 0; i < S_COUNT; i++) config_unset(c, i);
}

const char *config_str(const LaunchConfig *c, int id) { return c->value[id]; }

long config_int(const LaunchConfig *c, int id, long fallback) {
    long v;
    return c->value[id] != NULL && parse_long(c->value[id], &v) ? v : fallback;
}

int config_bool(const LaunchConfig *c, int id) {
    return c->value[id] != NULL && strcmp(c->value[id], "true") == 0;
}

int config_applies(const LaunchConfig *c, int id) {
    const char *key = host_settings[id].key;
    const char *type = c->value[S_DISTRIBUTED_TYPE] ? c->value[S_DISTRIBUTED_TYPE] : "NO";
    if (strncmp(key, DS, strlen(DS)) == 0) return strcmp(type, "DEEPSPEED") == 0;
    if (strncmp(key, FS, strlen(FS)) == 0) return strcmp(type, "FSDP") == 0;
    return 1;
}

void config_fill_defaults(LaunchConfig *c) {
    for (int i = 0; i < S_COUNT; i++) {
        if (c->value[i] != NULL || host_settings[i].def == NULL || !config_applies(c, i))
            continue;
        c->value[i] = strdup(host_settings[i].def);
        c->source[i] = SRC_DEFAULT;
    }
}
