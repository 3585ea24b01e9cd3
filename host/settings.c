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
 *   ACCEL_LUA_DEBUG_MODE                  true | false (--debug; Accelerate's
 *                                         ACCELERATE_DEBUG_MODE: collectives check
 *                                         shapes across ranks first)
 *   ACCEL_LUA_LOG_DIR, ACCEL_LUA_TEE, ACCEL_LUA_REDIRECTS
 *                                         per-rank log files (host/rank_log.c)
 *   ACCEL_LUA_USE_DEEPSPEED, ACCEL_LUA_USE_FSDP   true | false (from distributed_type)
 *   with DEEPSPEED: ACCEL_LUA_ZERO_STAGE (0-3), ACCEL_LUA_OFFLOAD_OPTIMIZER_DEVICE,
 *     ACCEL_LUA_OFFLOAD_PARAM_DEVICE (none | cpu | nvme), ACCEL_LUA_OFFLOAD_*_NVME_PATH,
 *     ACCEL_LUA_GRADIENT_CLIPPING, ACCEL_LUA_ZERO3_INIT_FLAG,
 *     ACCEL_LUA_ZERO3_SAVE_16BIT_MODEL, ACCEL_LUA_DEEPSPEED_CONFIG_FILE,
 *     ACCEL_LUA_DEEPSPEED_MOE_LAYER_CLS_NAMES
 *   with FSDP: ACCEL_LUA_FSDP_VERSION, ACCEL_LUA_FSDP_SHARDING_STRATEGY,
 *     ACCEL_LUA_FSDP_OFFLOAD_PARAMS, ACCEL_LUA_FSDP_AUTO_WRAP_POLICY,
 *     ACCEL_LUA_FSDP_MIN_NUM_PARAMS, ACCEL_LUA_FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP,
 *     ACCEL_LUA_FSDP_BACKWARD_PREFETCH, ACCEL_LUA_FSDP_STATE_DICT_TYPE,
 *     ACCEL_LUA_FSDP_RESHARD_AFTER_FORWARD, ACCEL_LUA_FSDP_FORWARD_PREFETCH,
 *     ACCEL_LUA_FSDP_USE_ORIG_PARAMS, ACCEL_LUA_FSDP_CPU_RAM_EFFICIENT_LOADING,
 *     ACCEL_LUA_FSDP_SYNC_MODULE_STATES, ACCEL_LUA_FSDP_ACTIVATION_CHECKPOINTING
 *   ACCEL_LUA_RESTART_COUNT               0 on the first attempt, k on restart k
 *
 * Every sharding setting Accelerate has is carried to the ranks as it is
 * given; the Accelerator decides (and says) what it cannot do.
 * fsdp_sharding_strategy and fsdp_reshard_after_forward (two spellings of
 * one choice, which must agree when both are given) have no launch
 * default: only a flag or a config key reaches the ranks, so the plugin
 * can tell what the user asked for (its defaults: FULL_SHARD, true). Accelerate's
 * flags and keys for what does not exist here are in unsupported.c.
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
    /* The CPU by default; a CUDA build's launch makes the default false (gpus.c). */
    [S_USE_CPU] = {"use_cpu", "cpu", "ACCEL_LUA_USE_CPU", ST_BOOL, NULL, "true",
                   "run on the CPU even if a GPU is available"},
    [S_NUM_THREADS] = {"num_cpu_threads_per_process", "num_cpu_threads_per_process",
                       "ACCEL_LUA_NUM_THREADS", ST_INT, "1..", NULL,
                       "compute threads per rank (default 1 with several ranks)"},
    [S_MAX_RESTARTS] = {"max_restarts", "max_restarts", NULL, ST_INT, "0..", NULL,
                        "relaunch a failed job up to this many times"},
    [S_DEBUG] = {"debug", "debug", "ACCEL_LUA_DEBUG_MODE", ST_BOOL, NULL, "false",
                 "collectives check shapes and dtypes across ranks first"},
    [S_TEE] = {NULL, "tee", "ACCEL_LUA_TEE", ST_STR, NULL, NULL,
               "streams copied to --log_dir and the console: 0-3 or R:N,..."},
    [S_REDIRECTS] = {NULL, "redirects", "ACCEL_LUA_REDIRECTS", ST_STR, NULL, NULL,
                     "streams sent to --log_dir only: 0-3 or R:N,..."},
    [S_LOG_DIR] = {NULL, "log_dir", "ACCEL_LUA_LOG_DIR", ST_STR, NULL, NULL,
                   "per-rank logs: DIR/attempt_K/rank_R/{stdout,stderr}.log"},
    [S_MONITOR_INTERVAL] = {NULL, "monitor_interval", NULL, ST_FLOAT, ">0", "0.1",
                            "seconds between launch's checks of the job"},
    [S_ZERO_STAGE] = {DS "zero_stage", "zero_stage", "ACCEL_LUA_ZERO_STAGE", ST_INT, "0..3", "2",
                      "ZeRO stage 0-3 (with --use_deepspeed)"},
    [S_OFFLOAD_OPTIMIZER_DEVICE] = {DS "offload_optimizer_device", "offload_optimizer_device",
                                    "ACCEL_LUA_OFFLOAD_OPTIMIZER_DEVICE", ST_ENUM,
                                    "none|cpu|nvme", "none", "none, cpu or nvme"},
    [S_OFFLOAD_PARAM_DEVICE] = {DS "offload_param_device", "offload_param_device",
                                "ACCEL_LUA_OFFLOAD_PARAM_DEVICE", ST_ENUM, "none|cpu|nvme",
                                "none", "none, cpu or nvme (stage 3)"},
    [S_GRADIENT_CLIPPING] = {DS "gradient_clipping", "gradient_clipping",
                             "ACCEL_LUA_GRADIENT_CLIPPING", ST_FLOAT, NULL, NULL,
                             "clip gradients to this norm"},
    [S_ZERO3_INIT_FLAG] = {DS "zero3_init_flag", "zero3_init_flag", "ACCEL_LUA_ZERO3_INIT_FLAG",
                           ST_BOOL, NULL, "false", "create parameters sharded (stage 3)"},
    [S_DEEPSPEED_CONFIG_FILE] = {DS "deepspeed_config_file", "deepspeed_config_file",
                                 "ACCEL_LUA_DEEPSPEED_CONFIG_FILE", ST_STR, NULL, NULL,
                                 "DeepSpeed JSON config"},
    [S_OFFLOAD_OPTIMIZER_NVME_PATH] = {DS "offload_optimizer_nvme_path",
                                       "offload_optimizer_nvme_path",
                                       "ACCEL_LUA_OFFLOAD_OPTIMIZER_NVME_PATH", ST_STR, NULL, NULL,
                                       "folder for optimizer states (nvme offload)"},
    [S_OFFLOAD_PARAM_NVME_PATH] = {DS "offload_param_nvme_path", "offload_param_nvme_path",
                                   "ACCEL_LUA_OFFLOAD_PARAM_NVME_PATH", ST_STR, NULL, NULL,
                                   "folder for parameters (nvme offload)"},
    [S_ZERO3_SAVE_16BIT_MODEL] = {DS "zero3_save_16bit_model", "zero3_save_16bit_model",
                                  "ACCEL_LUA_ZERO3_SAVE_16BIT_MODEL", ST_BOOL, NULL, "false",
                                  "save the gathered 16-bit model (stage 3)"},
    [S_DEEPSPEED_MOE_LAYER_CLS_NAMES] = {DS "deepspeed_moe_layer_cls_names",
                                         "deepspeed_moe_layer_cls_names",
                                         "ACCEL_LUA_DEEPSPEED_MOE_LAYER_CLS_NAMES", ST_STR, NULL,
                                         NULL, "mixture-of-experts layer classes"},
    [S_FSDP_VERSION] = {FS "fsdp_version", "fsdp_version", "ACCEL_LUA_FSDP_VERSION", ST_ENUM,
                        "1|2", "1", "FSDP version 1 or 2"},
    [S_FSDP_SHARDING_STRATEGY] = {FS "fsdp_sharding_strategy", "fsdp_sharding_strategy",
                                  "ACCEL_LUA_FSDP_SHARDING_STRATEGY", ST_ENUM,
                                  "FULL_SHARD|SHARD_GRAD_OP|NO_SHARD|HYBRID_SHARD|"
                                  "HYBRID_SHARD_ZERO2", NULL,
                                  "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD(_ZERO2); "
                                  "unset: FULL_SHARD"},
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
                                "FULL_STATE_DICT|SHARDED_STATE_DICT|LOCAL_STATE_DICT", NULL,
                                "how save_state writes the model; unset: FULL_STATE_DICT (FSDP1), "
                                "SHARDED_STATE_DICT (FSDP2)"},
    [S_FSDP_RESHARD_AFTER_FORWARD] = {FS "fsdp_reshard_after_forward",
                                      "fsdp_reshard_after_forward",
                                      "ACCEL_LUA_FSDP_RESHARD_AFTER_FORWARD", ST_ENUM,
                                      "true|false|FULL_SHARD|SHARD_GRAD_OP|NO_SHARD|HYBRID_SHARD|"
                                      "HYBRID_SHARD_ZERO2", NULL,
                                      "true/false (FSDP2) or a strategy (FSDP1); unset: true"},
    [S_FSDP_FORWARD_PREFETCH] = {FS "fsdp_forward_prefetch", "fsdp_forward_prefetch",
                                 "ACCEL_LUA_FSDP_FORWARD_PREFETCH", ST_BOOL, NULL, "false",
                                 "prefetch the next unit during forward"},
    [S_FSDP_USE_ORIG_PARAMS] = {FS "fsdp_use_orig_params", "fsdp_use_orig_params",
                                "ACCEL_LUA_FSDP_USE_ORIG_PARAMS", ST_BOOL, NULL, "true",
                                "keep the original parameters visible"},
    [S_FSDP_CPU_RAM_EFFICIENT_LOADING] = {FS "fsdp_cpu_ram_efficient_loading",
                                          "fsdp_cpu_ram_efficient_loading",
                                          "ACCEL_LUA_FSDP_CPU_RAM_EFFICIENT_LOADING", ST_BOOL,
                                          NULL, "true", "load weights on rank 0 only"},
    [S_FSDP_SYNC_MODULE_STATES] = {FS "fsdp_sync_module_states", "fsdp_sync_module_states",
                                   "ACCEL_LUA_FSDP_SYNC_MODULE_STATES", ST_BOOL, NULL, "true",
                                   "broadcast rank 0's weights at prepare"},
    [S_FSDP_ACTIVATION_CHECKPOINTING] = {FS "fsdp_activation_checkpointing",
                                         "fsdp_activation_checkpointing",
                                         "ACCEL_LUA_FSDP_ACTIVATION_CHECKPOINTING", ST_BOOL, NULL,
                                         "false", "recompute activations in backward"},
    /* unset means all; the ranks get CUDA_VISIBLE_DEVICES (gpus.c) */
    [S_GPU_IDS] = {"gpu_ids", "gpu_ids", NULL, ST_STR, NULL, NULL,
                   "GPUs the ranks use: all or indices 0,1,... (CUDA builds)"},
};

/* Other spellings Accelerate's configs use for the same settings. */
static const struct { const char *key; int id; } aliases[] = {
    {DS "gradient_accumulation_steps", S_GRADIENT_ACCUMULATION_STEPS},
    {DS "deepspeed_hostfile", S_HOSTFILE},
    {FS "fsdp_backward_prefetch_policy", S_FSDP_BACKWARD_PREFETCH}, /* Accelerate < 0.27 */
};

/* Accelerate's other flag spellings for the same settings. */
static const struct { const char *flag; int id; } flag_aliases[] = {
    {"mpirun_hostfile", S_HOSTFILE},
    {"deepspeed_hostfile", S_HOSTFILE},
    {"fsdp_backward_prefetch_policy", S_FSDP_BACKWARD_PREFETCH},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

int setting_by_key(const char *key) {
    for (int i = 0; i < S_COUNT; i++)
        if (host_settings[i].key != NULL && strcmp(host_settings[i].key, key) == 0) return i;
    for (size_t i = 0; i < COUNT(aliases); i++)
        if (strcmp(aliases[i].key, key) == 0) return aliases[i].id;
    return -1;
}

int setting_is_section(const char *name) {
    static const char *const sections[] = {
        "deepspeed_config", "fsdp_config",     "mpirun_config", "dynamo_config",
        "megatron_lm_config", "fp8_config", "parallelism_config", "ipex_config",
    };
    for (size_t i = 0; i < COUNT(sections); i++)
        if (strcmp(sections[i], name) == 0) return 1;
    return 0;
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
    for (size_t i = 0; i < COUNT(flag_aliases); i++)
        if (strcmp(flag_aliases[i].flag, flag) == 0) return flag_aliases[i].id;
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

static char *canon_float(const Setting *s, const char *text, char *err, size_t errlen) {
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || !isfinite(v)) {
        snprintf(err, errlen, "'%s' is not a number", text);
        return NULL;
    }
    if (s->choices != NULL && strcmp(s->choices, ">0") == 0 && !(v > 0)) {
        snprintf(err, errlen, "%s is not a positive number", text);
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

int setting_bool(const char *text) {
    char err[64];
    char *v = canon_bool(text, err, sizeof err);
    int on = v ? strcmp(v, "true") == 0 : -1;
    free(v);
    return on;
}

/* The choice matching text (case and -/_ ignored), in its canonical case. */
/* The n-th (1-based) choice of s, for text "n"; NULL when text is not a
 * number in range. Only the sharding strategy takes numbers: PyTorch's
 * ShardingStrategy values 1-5, as older Accelerate configs write them. */
static char *numbered_choice(const Setting *s, const char *text) {
    long n;
    if (s != &host_settings[S_FSDP_SHARDING_STRATEGY] || !parse_long(text, &n) || n < 1) return NULL;
    const char *p = s->choices;
    for (; n > 1 && *p != '\0'; n--) p += strcspn(p, "|") + (p[strcspn(p, "|")] == '|');
    return *p != '\0' ? strndup(p, strcspn(p, "|")) : NULL;
}

static char *canon_enum(const Setting *s, const char *text, char *err, size_t errlen) {
    char *numbered = numbered_choice(s, text);
    if (numbered != NULL) return numbered;
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
    case ST_FLOAT: v = canon_float(s, text, err, errlen); break;
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
    if (key == NULL) return 1;
    if (strncmp(key, DS, strlen(DS)) == 0) return strcmp(type, "DEEPSPEED") == 0;
    if (strncmp(key, FS, strlen(FS)) == 0) return strcmp(type, "FSDP") == 0;
    return 1;
}

static int env_set(const char *var) {
    const char *v = var != NULL ? getenv(var) : NULL;
    return v != NULL && v[0] != '\0';
}

/* Settings whose default launch leaves out when the caller exported
 * Accelerate's variable for it (or, for debug mode, accel-lua's own), so
 * the ranks see that one (Accelerate's launcher passes the caller's
 * environment through and sets debug mode only for --debug). */
static int caller_sets(int id) {
    if (id == S_DEBUG) return env_set("ACCEL_LUA_DEBUG_MODE") || env_set("ACCELERATE_DEBUG_MODE");
    return id == S_GRADIENT_ACCUMULATION_STEPS && env_set("ACCELERATE_GRADIENT_ACCUMULATION_STEPS");
}

void config_fill_defaults(LaunchConfig *c) {
    for (int i = 0; i < S_COUNT; i++) {
        if (c->value[i] != NULL || host_settings[i].def == NULL || !config_applies(c, i) || caller_sets(i))
            continue;
        c->value[i] = strdup(host_settings[i].def);
        c->source[i] = SRC_DEFAULT;
    }
}
