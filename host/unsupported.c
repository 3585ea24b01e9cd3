/* unsupported.c: Accelerate's launch flags and config keys for things that
 * do not exist in accel-lua, each with the reason `launch` gives when it
 * refuses one (DESIGN §3: a flag Accelerate knows is never "unknown").
 *
 * The rows come from `accelerate launch`'s argument parser
 * (src/accelerate/commands/launch.py, launch_command_parser) and the keys
 * `accelerate config` writes (commands/config/config_args.py). Every flag
 * there is either a setting (settings.c), one of launch's own switches
 * (cmd_launch.c), or a row here; scripts/test-launch-flags.sh checks that against a
 * list taken from Accelerate's source (tests/fixtures/accelerate_launch_flags.txt).
 *
 * A flag or key ending in '*' covers every name it begins (all of
 * Megatron-LM's, ParallelismConfig's and the fp8 recipe's; first match
 * wins). A row's neutral values ask for nothing we lack (`--dynamo_backend
 * no`, `tpu_use_cluster: false`): those are accepted, because
 * `accelerate config` writes them into every file. Any other value is an
 * error naming the flag or key and the reason. "*" marks the few whose
 * every value is fine here because mpirun does the job they configure. */
#include <string.h>
#include <strings.h>

#include "host/settings.h"

#define R_TPU "there is no TPU backend"
#define R_TPU_POD "there is no TPU backend (nor TPU pods, accelerate tpu-config)"
#define R_DYNAMO "torch.compile does not exist here (operations run eagerly)"
#define R_MEGATRON "there is no Megatron-LM engine (tensor / pipeline parallelism)"
#define R_PARALLEL "there is no ParallelismConfig (tensor, context, sequence parallel, " \
                   "2-D sharding); use --use_fsdp or --use_deepspeed"
#define R_FP8 "the fp8 recipe is set in the script with accel.FP8RecipeKwargs{...} " \
              "(--mixed_precision fp8 turns it on); there are no TransformerEngine / MS-AMP / torchao backends"
#define R_AWS "there are no SageMaker launches"
#define R_RDZV "mpirun starts and wires the ranks: there is no torchrun rendezvous"
#define R_FILTER "there are no DeepSpeed node filters: list the machines to use in the " \
                 "hostfile"
#define NO "false|no"

const Unsupported host_unsupported[] = {
    {"tpu", NULL, 0, NULL, R_TPU},
    {"tpu_cluster", "tpu_use_cluster", 0, NO, R_TPU_POD},
    {"no_tpu_cluster", NULL, 0, NULL, R_TPU_POD},
    {"tpu_use_sudo", "tpu_use_sudo", 0, NO, R_TPU_POD},
    {"vm", "tpu_vm", 1, NULL, R_TPU_POD},
    {"env", "tpu_env", 1, NULL, R_TPU_POD},
    {NULL, "tpu_name", 1, NULL, R_TPU_POD},
    {NULL, "tpu_zone", 1, NULL, R_TPU_POD},
    {NULL, "commands", 1, NULL, R_TPU_POD},
    {NULL, "command_file", 1, NULL, R_TPU_POD},
    {"main_training_function", "main_training_function", 1, "main",
     "only TPU launches call a named function; the script runs as a whole"},
    {"downcast_bf16", "downcast_bf16", 0, NO, R_TPU},
    {NULL, "use_mps_device", 1, NO, "there is no MPS (Apple GPU) backend"},
    {"enable_cpu_affinity", "enable_cpu_affinity", 0, NO,
     "it pins ranks to the CPUs next to their NVIDIA GPU; here mpirun places the ranks "
     "(--num_cpu_threads_per_process cores each)"},
    {"same_network", "same_network", 0, "*", R_RDZV},
    {"role", NULL, 1, "default", "torchrun's worker roles: mpirun starts one kind of rank"},
    {"rdzv_backend", "rdzv_backend", 1, "static", R_RDZV},
    {"rdzv_conf", NULL, 1, "", R_RDZV},
    {"dynamo_backend", "dynamo_config.dynamo_backend", 1, "no", R_DYNAMO},
    {"dynamo_mode", "dynamo_config.dynamo_mode", 1, "default", R_DYNAMO},
    {"dynamo_use_fullgraph", "dynamo_config.dynamo_use_fullgraph", 0, NO, R_DYNAMO},
    {"dynamo_use_dynamic", "dynamo_config.dynamo_use_dynamic", 0, NO, R_DYNAMO},
    {"dynamo_use_regional_compilation", "dynamo_config.dynamo_use_regional_compilation", 0, NO,
     R_DYNAMO},
    {NULL, "dynamo_config.*", 1, NULL, R_DYNAMO},
    {NULL, "dynamo_backend", 1, "no", R_DYNAMO}, /* older Accelerate's top-level key */
    {NULL, "ipex_config.*", 1, NO, "Intel Extension for PyTorch does not exist here"},
    {"deepspeed_exclusion_filter", "deepspeed_config.deepspeed_exclusion_filter", 1, NULL,
     R_FILTER},
    {"deepspeed_inclusion_filter", "deepspeed_config.deepspeed_inclusion_filter", 1, NULL,
     R_FILTER},
    {"deepspeed_multinode_launcher", "deepspeed_config.deepspeed_multinode_launcher", 1, "*",
     "mpirun starts the ranks on every machine, whichever launcher is named"},
    {NULL, "mpirun_config.mpirun_ccl", 1, "*",
     "oneCCL is not used: OpenMPI carries the collectives"},
    {"fsdp_activation_checkpointing_offload", "fsdp_config.fsdp_activation_checkpointing_offload", 1,
     NO,
     "checkpointed activations are not offloaded to host memory (torch's offload_wrapper); "
     "--fsdp_activation_checkpointing alone recomputes them in backward"},
    {NULL, "fsdp_config.fsdp_ignored_modules", 1, NULL,
     "every parameter of the model is sharded (FullyShardedDataParallelPlugin refuses "
     "ignored_modules too)"},
    {"use_megatron_lm", NULL, 0, NULL, R_MEGATRON},
    {"megatron_lm_*", "megatron_lm_config.*", 1, NULL, R_MEGATRON},
    {"use_parallelism_config", NULL, 0, NULL, R_PARALLEL},
    {"parallelism_config_*", "parallelism_config.*", 1, NULL, R_PARALLEL},
    {"fp8_use_autocast_during_eval", NULL, 0, NULL, R_FP8},
    {"fp8_*", "fp8_config.*", 1, NULL, R_FP8},
    {"aws_access_key_id", NULL, 1, NULL, R_AWS},
    {"aws_secret_access_key", NULL, 1, NULL, R_AWS},
};

const int host_unsupported_count = (int)(sizeof host_unsupported / sizeof host_unsupported[0]);

/* A pattern ending in '*' matches every name it begins ("fp8_*",
 * "fp8_config.*"); any other only itself. */
static int matches(const char *pattern, const char *name) {
    size_t n = strlen(pattern);
    if (n > 0 && pattern[n - 1] == '*') return strncmp(pattern, name, n - 1) == 0;
    return strcmp(pattern, name) == 0;
}

const Unsupported *unsupported_by_flag(const char *flag) {
    for (int i = 0; i < host_unsupported_count; i++)
        if (host_unsupported[i].flag != NULL && matches(host_unsupported[i].flag, flag))
            return &host_unsupported[i];
    return NULL;
}

const Unsupported *unsupported_by_key(const char *key) {
    for (int i = 0; i < host_unsupported_count; i++)
        if (host_unsupported[i].key != NULL && matches(host_unsupported[i].key, key))
            return &host_unsupported[i];
    return NULL;
}

int unsupported_is_neutral(const Unsupported *u, const char *value) {
    const char *p = u->neutral;
    if (p == NULL) return 0;
    if (strcmp(p, "*") == 0) return 1;
    if (value == NULL) return 0; /* a switch asks for the thing itself */
    for (;;) {
        size_t n = strcspn(p, "|");
        if (strlen(value) == n && strncasecmp(p, value, n) == 0) return 1;
        if (p[n] == '\0') return 0;
        p += n + 1;
    }
}
