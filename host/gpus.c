/* gpus.c: launch's GPU settings (cmd_launch.c calls launch_resolve_gpus).
 *  - gpu_ids ("all", the default, or distinct GPU indices "0,2,3"): as
 *    Accelerate's --gpu_ids, the ranks get CUDA_VISIBLE_DEVICES=<ids>, so
 *    the GPUs they see are renumbered from 0 and rank r on a machine takes
 *    cuda:<local rank r> among them. num_processes per machine may not
 *    exceed the number of ids when the ranks run on GPUs (a CUDA build
 *    without --cpu), with or without --multi_gpu.
 *  - MULTI_GPU (--multi_gpu) and gpu_ids other than "all" need a CUDA build
 *    (refused, saying so, in a CPU build) and a GPU: a CUDA build without a
 *    usable GPU refuses MULTI_GPU with the reason, except under --dry_run,
 *    which only prints the command.
 *  - A CUDA build runs the ranks on their GPUs unless --cpu / use_cpu says
 *    otherwise: use_cpu's default becomes false there (true in a CPU build). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend/backend.h"
#include "host/settings.h"

#define WHO "accel-lua launch"
#define MAX_GPU_IDS 64

int gpu_ids_parse(const char *s, int *ids, int max, char *err, size_t n) {
    if (s == NULL || strcmp(s, "all") == 0) return 0;
    int count = 0;
    for (const char *p = s;; p++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1023 || (*end != ',' && *end != '\0'))
            return snprintf(err, n, "'%s' is not \"all\" or a comma-separated list of GPU indices (0,1,...)", s), -1;
        for (int k = 0; k < count; k++)
            if (ids[k] == (int)v) return snprintf(err, n, "'%s' names GPU %ld twice", s, v), -1;
        if (count == max) return snprintf(err, n, "'%s' names more than %d GPUs", s, max), -1;
        ids[count++] = (int)v;
        p = end;
        if (*end == '\0') return count;
    }
}

static int is_multi_gpu(const LaunchConfig *c) {
    const char *t = config_str(c, S_DISTRIBUTED_TYPE);
    return t != NULL && strcmp(t, "MULTI_GPU") == 0;
}

/* Checks the GPU settings against this build and machine; -1 after printing why. */
int launch_resolve_gpus(LaunchConfig *c, int dry_run) {
    char err[256], why[256];
    int ids[MAX_GPU_IDS];
    const int nids = gpu_ids_parse(config_str(c, S_GPU_IDS), ids, MAX_GPU_IDS, err, sizeof err);
    if (nids < 0) return fprintf(stderr, "%s: --gpu_ids: %s\n", WHO, err), -1;
    if (!backend_cuda_built() && (nids > 0 || is_multi_gpu(c))) {
        fprintf(stderr, "%s: %s: this accel-lua is built without CUDA (make CUDA=1), so there are no GPUs; "
                        "%s\n", WHO,
                is_multi_gpu(c) ? "distributed_type MULTI_GPU (--multi_gpu)" : "--gpu_ids",
                is_multi_gpu(c) ? "use --cpu or MULTI_CPU" : "leave --gpu_ids out (the ranks run on the CPU)");
        return -1;
    }
    if (backend_cuda_built() && config_str(c, S_USE_CPU) == NULL)
        config_set(c, S_USE_CPU, "false", SRC_DEFAULT, err, sizeof err);
    /* ranks on GPUs (a CUDA build without --cpu, --multi_gpu or not): one listed GPU each */
    const long per_machine = config_int(c, S_NUM_PROCESSES, 1) / config_int(c, S_NUM_MACHINES, 1);
    if (backend_cuda_built() && !config_bool(c, S_USE_CPU) && nids > 0 && per_machine > nids) {
        fprintf(stderr, "%s: --gpu_ids %s lists %d GPU%s for %ld processes per machine (one GPU each)\n", WHO,
                config_str(c, S_GPU_IDS), nids, nids == 1 ? "" : "s", per_machine);
        return -1;
    }
    if (is_multi_gpu(c) && !dry_run && backend_cuda_count(why, sizeof why) == 0) {
        fprintf(stderr, "%s: distributed_type MULTI_GPU (--multi_gpu): %s\n", WHO, why);
        return -1;
    }
    return 0;
}
