/* settings.h: the launch settings (DESIGN §3) in one table. Each setting
 * has its YAML key (Accelerate's names; "section.key" inside
 * deepspeed_config / fsdp_config / mpirun_config), its `launch` flag, the
 * ACCEL_LUA_* variable that carries it to the ranks, a type, allowed values
 * and a default. A LaunchConfig holds one canonical text value per setting
 * and where it came from, so flags, the YAML reader and writer, `config`,
 * `launch`, `env` and `test` all share one validator. The list of settings
 * and variables is documented in settings.c. */
#ifndef ACCEL_HOST_SETTINGS_H
#define ACCEL_HOST_SETTINGS_H

#include <stddef.h>

typedef enum { ST_INT, ST_FLOAT, ST_BOOL, ST_STR, ST_ENUM } SettingType;

typedef struct {
    const char *key;     /* YAML key: "num_processes", "deepspeed_config.zero_stage";
                            NULL = a launch flag only (--tee, --log_dir ...) */
    const char *flag;    /* launch flag without "--"; NULL = none */
    const char *env;     /* variable exported to the ranks; NULL = none */
    SettingType type;
    const char *choices; /* ST_ENUM: "no|fp16|bf16"; ST_INT: "min..max" or "min..";
                            ST_FLOAT: ">0" for a positive number, else NULL */
    const char *def;     /* default as text; NULL = unset */
    const char *help;    /* one line for --help */
} Setting;

/* Indices into the table (settings.c keeps the same order). */
enum {
    S_COMPUTE_ENVIRONMENT,
    S_DISTRIBUTED_TYPE,
    S_NUM_PROCESSES,
    S_NUM_MACHINES,
    S_MACHINE_RANK,
    S_MAIN_PROCESS_IP,
    S_MAIN_PROCESS_PORT,
    S_HOSTFILE,
    S_MIXED_PRECISION,
    S_GRADIENT_ACCUMULATION_STEPS,
    S_USE_CPU,
    S_NUM_THREADS,
    S_MAX_RESTARTS,
    S_DEBUG,
    S_TEE,
    S_REDIRECTS,
    S_LOG_DIR,
    S_MONITOR_INTERVAL,
    S_ZERO_STAGE,
    S_OFFLOAD_OPTIMIZER_DEVICE,
    S_OFFLOAD_PARAM_DEVICE,
    S_GRADIENT_CLIPPING,
    S_ZERO3_INIT_FLAG,
    S_DEEPSPEED_CONFIG_FILE,
    S_OFFLOAD_OPTIMIZER_NVME_PATH,
    S_OFFLOAD_PARAM_NVME_PATH,
    S_ZERO3_SAVE_16BIT_MODEL,
    S_DEEPSPEED_MOE_LAYER_CLS_NAMES,
    S_FSDP_VERSION,
    S_FSDP_SHARDING_STRATEGY,
    S_FSDP_OFFLOAD_PARAMS,
    S_FSDP_AUTO_WRAP_POLICY,
    S_FSDP_MIN_NUM_PARAMS,
    S_FSDP_TRANSFORMER_LAYER_CLS,
    S_FSDP_BACKWARD_PREFETCH,
    S_FSDP_STATE_DICT_TYPE,
    S_FSDP_RESHARD_AFTER_FORWARD,
    S_FSDP_FORWARD_PREFETCH,
    S_FSDP_USE_ORIG_PARAMS,
    S_FSDP_CPU_RAM_EFFICIENT_LOADING,
    S_FSDP_SYNC_MODULE_STATES,
    S_FSDP_ACTIVATION_CHECKPOINTING,
    S_GPU_IDS,
    S_COUNT
};

typedef enum { SRC_UNSET, SRC_DEFAULT, SRC_FILE, SRC_FLAG } SettingSource;

typedef struct {
    char *value[S_COUNT]; /* canonical text (malloc'd); NULL = unset */
    SettingSource source[S_COUNT];
    int ds_gradient_accumulation; /* gradient_accumulation_steps came from deepspeed_config
                                     (it applies to DeepSpeed jobs only) */
} LaunchConfig;

extern const Setting host_settings[S_COUNT];

/* Setting by YAML key (aliases such as deepspeed_config.
 * gradient_accumulation_steps included); -1 if unknown. */
int setting_by_key(const char *key);
/* 1 if name is a section of the YAML file (deepspeed_config, fsdp_config,
 * mpirun_config, and Accelerate's sections that accel-lua refuses:
 * dynamo_config, megatron_lm_config, fp8_config ...). */
int setting_is_section(const char *name);
/* Setting by launch flag name ("num_processes", no dashes; Accelerate's
 * other spellings such as "mpirun_hostfile" included); -1 if none. */
int setting_by_flag(const char *flag);

/* Accelerate's launch flags and config keys that accel-lua does not
 * support (unsupported.c). Each is refused with its reason, unless its
 * value is one that asks for nothing we lack (`--dynamo_backend no`,
 * `tpu_use_cluster: false`). */
typedef struct {
    const char *flag;    /* launch flag without "--"; NULL = config key only */
    const char *key;     /* YAML key ("section.key"; "section.*" = every key
                            in it); NULL = flag only */
    int takes_value;     /* the flag is followed by a value */
    const char *neutral; /* "|"-separated values accepted as no-ops (case
                            ignored); "*" = any value; NULL = always refused */
    const char *reason;
} Unsupported;

const Unsupported *unsupported_by_flag(const char *flag);
const Unsupported *unsupported_by_key(const char *key);
/* 1 if value (NULL: a switch given without one) is accepted as a no-op. */
int unsupported_is_neutral(const Unsupported *u, const char *value);
extern const Unsupported host_unsupported[];
extern const int host_unsupported_count;

/* Validates text for setting id and stores its canonical form. Returns 0,
 * or -1 with "'abc' is not an integer" (or similar) in err. */
int config_set(LaunchConfig *c, int id, const char *text, SettingSource src,
               char *err, size_t errlen);
/* Copies every setting that `from` has over `to` (keeping its source). */
void config_merge(LaunchConfig *to, const LaunchConfig *from);
void config_unset(LaunchConfig *c, int id);
void config_free(LaunchConfig *c);

const char *config_str(const LaunchConfig *c, int id); /* NULL if unset */
long config_int(const LaunchConfig *c, int id, long fallback);
int config_bool(const LaunchConfig *c, int id);        /* unset = 0 */
/* 1 / 0 for the boolean words settings take (true/yes/on/1/y, false/...), -1 otherwise */
int setting_bool(const char *text);

/* 1 if setting id applies under the config's distributed_type (the
 * deepspeed_config keys only for DEEPSPEED, fsdp_config only for FSDP). */
int config_applies(const LaunchConfig *c, int id);
/* Fills unset settings that apply with their defaults (use_cpu: true in
 * a build without CUDA). */
void config_fill_defaults(LaunchConfig *c);

/* gpus.c: "all" (or NULL) gives 0; a list of distinct indices fills ids
 * and gives their number; -1 with err on anything else. */
int gpu_ids_parse(const char *s, int *ids, int max, char *err, size_t n);
/* launch's MULTI_GPU / gpu_ids / use_cpu checks (gpus.c); -1 after printing why. */
int launch_resolve_gpus(LaunchConfig *c, int dry_run);

#endif
