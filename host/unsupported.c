/* unsupported.c: Accelerate's launch flags and config keys for things that
 * do not exist in accel-lua, each with the reason `launch` gives when it
 * refuses one (DESIGN §3: a flag Accelerate knows is never "unknown").
 *
 * The rows come from `accelerate launch`'s argument parser
 * (src/accelerate/commands/launch.py, launch_command_parser) and the keys
 * `accelerate config` writes (commands/config/config_args.py). Every flag
 * there is either a setting (settings.c), one of launch's own switches
 * (cmd_launch.c), or a row here; scripts/test-cli.sh checks that against a
 * list taken from Accelerate's source (scripts/fixtures/accelerate_launch_flags.txt).
 *
 * A row's neutral values ask for nothing we lack (`--dynamo_backend no`,
 * `tpu_use_cluster: false`, `gpu_ids: all`): those are accepted, because
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
#define R_FP8 "fp8 recipes need the GPU backend (TransformerEngine / MS-AMP / torchao), " \
              "which this build does not have"
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
    {"gpu_ids", "gpu_ids", 1, "all", "this build has no CUDA backend, so there are no GPUs "
                                     "to select"},
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
    {NULL, "ipex_config.*", 1, NO, "Intel Extension for PyTorch does not exist here"},
    {"deepspeed_exclusion_filter", "deepspeed_config.deepspeed_exclusion_filter", 1, NULL,
     R_FILTER},
    {"deepspeed_inclusion_filter", "deepspeed_config.deepspeed_inclusion_filter", 1, NULL,
     R_FILTER},
    {"deepspeed_multinode_launcher", "deepspeed_config.deepspeed_multinode_launcher", 1, "*",
     "mpirun starts the ranks on every machine, whichever launcher is named"},
    {NULL, "mpirun_config.mpirun_ccl", 1, "*",
     "oneCCL is not used: OpenMPI carries the collectives"},
    {"use_megatron_lm", NULL, 0, NULL, R_MEGATRON},
    {"megatron_lm_tp_degree", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_use_custom_fsdp", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_no_load_optim", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_eod_mask_loss", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_overlap_cpu_optimizer_d2h_h2d", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_no_save_optim", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_optimizer_cpu_offload", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_use_precision_aware_optimizer", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_decoder_last_pipeline_num_layers", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_pp_degree", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_num_micro_batches", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_sequence_parallelism", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_recompute_activations", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_use_distributed_optimizer", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_gradient_clipping", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_recompute_granularity", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_recompute_method", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_recompute_num_layers", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_attention_backend", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_expert_model_parallel_size", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_context_parallel_size", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_attention_dropout", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_hidden_dropout", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_attention_softmax_in_fp32", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_expert_tensor_parallel_size", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_calculate_per_token_loss", NULL, 1, NULL, R_MEGATRON},
    {"megatron_lm_use_rotary_position_embeddings", NULL, 1, NULL, R_MEGATRON},
    {NULL, "megatron_lm_config.*", 1, NULL, R_MEGATRON},
    {"use_parallelism_config", NULL, 0, NULL, R_PARALLEL},
    {"parallelism_config_dp_replicate_size", NULL, 1, NULL, R_PARALLEL},
    {"parallelism_config_dp_shard_size", NULL, 1, NULL, R_PARALLEL},
    {"parallelism_config_tp_size", NULL, 1, NULL, R_PARALLEL},
    {"parallelism_config_cp_size", NULL, 1, NULL, R_PARALLEL},
    {"parallelism_config_cp_backend", NULL, 1, NULL, R_PARALLEL},
    {"parallelism_config_cp_comm_strategy", NULL, 1, NULL, R_PARALLEL},
    {"parallelism_config_sp_size", NULL, 1, NULL, R_PARALLEL},
    {"parallelism_config_sp_backend", NULL, 1, NULL, R_PARALLEL},
    {"parallelism_config_sp_seq_length", NULL, 1, NULL, R_PARALLEL},
    {"parallelism_config_sp_seq_length_is_variable", NULL, 1, NULL, R_PARALLEL},
    {"parallelism_config_sp_attn_implementation", NULL, 1, NULL, R_PARALLEL},
    {NULL, "parallelism_config.*", 1, NULL, R_PARALLEL},
    {"fp8_backend", NULL, 1, NULL, R_FP8},
    {"fp8_use_autocast_during_eval", NULL, 0, NULL, R_FP8},
    {"fp8_margin", NULL, 1, NULL, R_FP8},
    {"fp8_interval", NULL, 1, NULL, R_FP8},
    {"fp8_format", NULL, 1, NULL, R_FP8},
    {"fp8_amax_history_len", NULL, 1, NULL, R_FP8},
    {"fp8_amax_compute_algo", NULL, 1, NULL, R_FP8},
    {"fp8_override_linear_precision", NULL, 1, NULL, R_FP8},
    {"fp8_opt_level", NULL, 1, NULL, R_FP8},
    {"fp8_enable_fsdp_float8_all_gather", NULL, 1, NULL, R_FP8},
    {"fp8_pad_inner_dim", NULL, 1, NULL, R_FP8},
    {NULL, "fp8_config.*", 1, NULL, R_FP8},
    {"aws_access_key_id", NULL, 1, NULL, R_AWS},
    {"aws_secret_access_key", NULL, 1, NULL, R_AWS},
};

const int host_unsupported_count = (int)(sizeof host_unsupported / sizeof host_unsupported[0]);

const Unsupported *unsupported_by_flag(const char *flag) {
    for (int i = 0; i < host_unsupported_count; i++)
        if (host_unsupported[i].flag != NULL && strcmp(host_unsupported[i].flag, flag) == 0)
            return &host_unsupported[i];
    return NULL;
}

/* "section.*" matches every key of the section. */
static int key_matches(const char *pattern, const char *key) {
    size_t n = strlen(pattern);
    if (n >= 2 && strcmp(pattern + n - 2, ".*") == 0) return strncmp(pattern, key, n - 1) == 0;
    return strcmp(pattern, key) == 0;
}

const Unsupported *unsupported_by_key(const char *key) {
    for (int i = 0; i < host_unsupported_count; i++)
        if (host_unsupported[i].key != NULL && key_matches(host_unsupported[i].key, key))
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
