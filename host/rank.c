/* rank.c: what the host knows about being one rank of a job, started by
 * `accel-lua launch`, by `mpirun -np N accel-lua ...` directly, or by
 * Slurm's `srun`: its rank (for "accel-lua: rank R: <error>") and its
 * compute-thread count. The communicator (core/dist) finds the ranks on
 * its own; this only reads the launchers' environment variables, except
 * for a start by a PMIx launcher that sets none of the size variables
 * (PMIX_RANK / PMIX_NAMESPACE only, as PRRTE's prun or a bare PMIx server
 * do): there the size is known only to MPI, so host_join_pmix_job makes
 * the communicator start MPI (ACCEL_LUA_DIST_BACKEND=mpi) instead of
 * running every task as a job of its own. A rank whose script ends
 * without having used the communicator still joins the job's MPI start-up
 * at exit (host_join_job_at_exit), so the ranks that did are not left
 * waiting for it. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bindings/lua_compat.h"

#include "core/dist/dist.h"
#include "core/error.h"
#include "host/host.h"

/* The first of the variables that holds a non-negative integer, or -1. */
static long env_first(const char *const *names) {
    for (; *names != NULL; names++) {
        const char *s = getenv(*names);
        char *end;
        if (s == NULL || s[0] == '\0') continue;
        long v = strtol(s, &end, 10);
        if (*end == '\0' && v >= 0) return v;
    }
    return -1;
}

/* OpenMPI, PMIx, MPICH/PMI, Slurm job steps (srun). */
static const char *const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                        "SLURM_PROCID", NULL};
static const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                        "SLURM_STEP_NUM_TASKS", NULL};

int host_rank(void) {
    static const char *const mpi_vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", NULL};
    long r = env_first(mpi_vars);
    if (r >= 0) return (int)r;
    /* SLURM_PROCID alone is also set in a batch script's single task. */
    return env_first(size_vars) > 1 ? (int)env_first(rank_vars) : -1;
}

void host_join_pmix_job(void) {
    static const char *const sized[] = {"OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS",
                                        "ACCEL_LUA_DIST_BACKEND", NULL};
    const char *ns = getenv("PMIX_NAMESPACE");
    if (ns == NULL || ns[0] == '\0' || getenv("PMIX_RANK") == NULL) return;
    for (const char *const *v = sized; *v != NULL; v++)
        if (getenv(*v) != NULL) return;
    if (setenv("ACCEL_LUA_DIST_BACKEND", "mpi", 1) != 0)
        fprintf(stderr, "%s: cannot set ACCEL_LUA_DIST_BACKEND for a PMIx start\n", ACCEL_LUA_NAME);
}

void host_export_rank_vars(void) {
    static const char *const local_rank_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                                                  NULL};
    static const char *const local_size_vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", NULL};
    int rank = host_rank();
    if (rank < 0) return;
    long values[4] = {rank, host_world_size(), env_first(local_rank_vars), env_first(local_size_vars)};
    static const char *const names[4] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
    for (int i = 0; i < 4; i++) {
        char buf[32];
        if (values[i] < 0) continue;
        snprintf(buf, sizeof buf, "%ld", values[i]);
        if (setenv(names[i], buf, 0) != 0) fprintf(stderr, "%s: cannot set %s\n", ACCEL_LUA_NAME, names[i]);
    }
}

static pid_t rank_pid;

/* Exit handler of a rank (status 0 only; a failing rank makes mpirun end
 * the job): a rank that never started the communicator starts it now.
 * The ranks that did wait in MPI_Init until every rank has called it;
 * this one joins them, then the communicator's own exit handler (glibc
 * runs one registered during exit) marks it finished, so a rank waiting
 * for it in a collective fails at once, naming it, and finalises MPI
 * with the others. */
static void join_job_at_exit(int status, void *arg) {
    (void)arg;
    if (status != 0 || getpid() != rank_pid || dist_is_initialized()) return;
    if (dist_world() == NULL)
        fprintf(stderr, "%s: rank %d: at exit: %s\n", ACCEL_LUA_NAME, host_rank(), accel_last_error());
}

/* Only for a rank that `accel-lua launch` started (its settings carry
 * ACCEL_LUA_NUM_PROCESSES; tasks started by srun or mpirun directly keep
 * the lazy start: a script that never communicates never loads MPI), and
 * only in the rank's own process, marked by ACCEL_LUA_RANK_PID: an
 * accel-lua that the script starts inherits the MPI variables but is no
 * rank (its MPI_Init would fail). */
void host_join_job_at_exit(void) {
    char pid[32];
    if (host_rank() < 0 || getenv("ACCEL_LUA_NUM_PROCESSES") == NULL || getenv("ACCEL_LUA_RANK_PID") != NULL) return;
    rank_pid = getpid();
    snprintf(pid, sizeof pid, "%ld", (long)rank_pid);
    if (setenv("ACCEL_LUA_RANK_PID", pid, 1) == 0) on_exit(join_job_at_exit, NULL);
}

int host_world_size(void) {
    long n = env_first(size_vars);
    return n > 0 ? (int)n : 1;
}

/* ACCEL_LUA_NUM_THREADS if set; else 1 when this is one of several ranks
 * and OMP_NUM_THREADS does not say otherwise (never more compute threads
 * than cores, DESIGN §5); else the runtime's default (all cores). Applied
 * through accel.num_threads, which sets the OpenMP and OpenBLAS pools. */
void host_apply_threads(lua_State *L) {
    const char *s = getenv("ACCEL_LUA_NUM_THREADS");
    long n = 0;
    if (s != NULL && s[0] != '\0') {
        char *end;
        n = strtol(s, &end, 10);
        if (*end != '\0' || n < 1)
            luaL_error(L, "ACCEL_LUA_NUM_THREADS: '%s' is not a positive integer", s);
    } else if (host_world_size() > 1 && getenv("OMP_NUM_THREADS") == NULL) {
        n = 1;
    }
    if (n == 0) return;
    lua_getglobal(L, "accel");
    lua_getfield(L, -1, "num_threads");
    lua_pushinteger(L, n);
    lua_call(L, 1, 0);
    lua_pop(L, 1);
}
