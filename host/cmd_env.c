/* cmd_env.c: `accel-lua env [--config_file PATH]`: the facts a bug report
 * needs, in the style of `accelerate env`: versions of accel-lua, Lua,
 * oneDNN, OpenBLAS and OpenMPI (`mpirun --version`, or $ACCEL_LUA_MPIRUN),
 * NCCL / CUDA (not built yet), the platform, the CPU (model, logical CPUs
 * and physical cores available, SIMD flags, the kernel build the dispatcher
 * picked: backend_cpu_kernels)), thread settings, and the
 * config file in force with its contents (checked). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include <cblas.h>
#include <dnnl.h>
#include "bindings/lua_compat.h"

#include "core/backend/backend.h"
#include "host/config_yaml.h"
#include "host/host.h"
#include "host/subcommands.h"

#define WHO "accel-lua env"

/* First line of `mpirun --version`, or why there is none. */
static void mpi_version(char *buf, size_t n) {
    const char *mpirun = getenv("ACCEL_LUA_MPIRUN");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --version 2>/dev/null", mpirun && mpirun[0] ? mpirun : "mpirun");
    FILE *p = popen(cmd, "r");
    buf[0] = '\0';
    if (p != NULL) {
        if (fgets(buf, (int)n, p) == NULL) buf[0] = '\0';
        pclose(p);
    }
    buf[strcspn(buf, "\n")] = '\0';
    if (buf[0] == '\0') snprintf(buf, n, "not found (mpirun missing: apt-get install openmpi-bin)");
}

static void print_versions(void) {
    const dnnl_version_t *d = dnnl_version();
    struct utsname u;
    char mpi[256];
    mpi_version(mpi, sizeof mpi);
    printf("- accel-lua version: %s\n", ACCEL_LUA_VERSION);
    printf("- Lua version: %s\n", ACCEL_LUA_RELEASE);
    if (uname(&u) == 0) printf("- Platform: %s %s %s\n", u.sysname, u.release, u.machine);
    printf("- oneDNN version: %d.%d.%d (commit %s)\n", d->major, d->minor, d->patch, d->hash);
    printf("- OpenBLAS: %s\n", openblas_get_config());
    printf("- OpenMPI: %s\n", mpi);
    printf("- NCCL: not built\n");
    printf("- CUDA: not built (make CUDA=1)\n");
}

static void print_cpu(void) {
    char model[256], have[512], missing[512];
    host_cpu_model(model, sizeof model);
    host_cpu_flags("sse4_2 avx avx2 fma f16c avx512f avx512bw avx512_bf16 avx512_fp16 "
                   "amx_tile amx_bf16",
                   have, missing, sizeof have);
    printf("- CPU: %s; %d logical CPUs, %d physical cores available\n", model,
           host_logical_cpus(), host_physical_cores());
    printf("- CPU features: %s%s%s\n", have[0] ? have : "(none of the listed)",
           missing[0] ? "; missing: " : "", missing);
    printf("- CPU kernels: %s\n", backend_cpu_kernels());
}

static void print_threads(void) {
    static const char *const vars[] = {"ACCEL_LUA_NUM_THREADS", "OMP_NUM_THREADS",
                                       "OPENBLAS_NUM_THREADS"};
    printf("- Threads:");
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        printf(" %s=%s", vars[i], v ? v : "(unset)");
    }
    printf("\n");
}

/* The config file in force, checked, and its lines. Returns 0 if fine. */
static int print_config(const char *given) {
    char buf[4096], line[1024];
    LaunchConfig c = {0};
    const char *path = config_path_in_force(given, buf, sizeof buf);
    if (path == NULL) {
        printf("- Config file: none (defaults; `accel-lua config` writes %s)\n",
               config_default_path(buf, sizeof buf));
        return 0;
    }
    int ok = config_read(&c, path, WHO) == 0;
    config_free(&c);
    printf("- Config file: %s%s\n- Config:\n", path, ok ? "" : " (invalid: see above)");
    FILE *f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (line[0] != '#' && line[0] != '\n') printf("\t%s", line);
    if (f != NULL) fclose(f);
    return ok ? 0 : 1;
}

int cmd_env(int argc, char **argv) {
    const char *given = NULL;
    if (host_help_asked(argc, argv)) {
        printf("usage: accel-lua env [--config_file PATH]\n\n"
               "Prints what a bug report needs: the versions of accel-lua, Lua, oneDNN,\n"
               "OpenBLAS and OpenMPI, the platform, the CPU, the thread settings, and the\n"
               "config file in force with its contents.\n\n"
               "  --config_file PATH   the config to show [$ACCEL_LUA_CONFIG, else\n"
               "                       ~/.cache/accel-lua/default_config.yaml;\n"
               "                       $XDG_CACHE_HOME replaces ~/.cache when set]\n"
               "  -h, --help           this help\n\n"
               "Example:\n  accel-lua env --config_file ./accel.yaml\n");
        return 0;
    }
    if (host_parse_config_file(argc, argv, WHO, "usage: accel-lua env [--config_file PATH]\n",
                               &given) != 0)
        return 2;
    printf("\nCopy-and-paste the text below in your GitHub issue\n\n");
    print_versions();
    print_cpu();
    print_threads();
    int status = print_config(given);
    fflush(stdout);
    return status;
}
