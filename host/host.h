/* host.h: shared pieces of the accel-lua program (the Lua host): version
 * string, creating a Lua state with the standard libraries and `accel`,
 * and running chunks under lua_pcall with a traceback message handler.
 * Used by main.c, repl.c and the CLI subcommands; also the rank and
 * machine facts (rank.c, sysinfo.c) those share. */
#ifndef ACCEL_HOST_H
#define ACCEL_HOST_H

#include <stddef.h>

#include "bindings/lua_compat.h"

#define ACCEL_LUA_NAME "accel-lua"
#define ACCEL_LUA_VERSION "0.1.0"

/* Prints "accel-lua 0.1.0 (Lua 5.4.x)" and a newline to stdout. */
void host_print_version(void);

/* A new Lua state with its GC stopped (restart it once the libraries are
 * open); NULL after printing "<who>: cannot create state" when out of memory. */
lua_State *host_new_state(const char *who);

/* Opens the standard libraries, then requires `accel` (kept as a global).
 * Call inside a protected call: errors are raised as Lua errors. */
void host_open_libs(lua_State *L);

/* Calls the function below `narg` arguments on the stack in protected mode
 * with a traceback handler. Returns the Lua status; on error the message
 * (with traceback) is left on the stack. */
int host_pcall(lua_State *L, int narg, int nres);

/* Like host_pcall, and Ctrl-C interrupts the call with an error. */
int host_docall(lua_State *L, int narg, int nres);
/* Pushes require(module).main and a table of argv[1..argc-1] (a
 * subcommand's arguments), ready for lua_call with the table as the first
 * argument. */
void host_push_module_main(lua_State *L, const char *module, int argc, char **argv);

/* On error status, prints "accel-lua: <message>" to stderr and pops it
 * ("accel-lua: rank R: <message>" in a rank of a multi-process job).
 * Returns status unchanged. */
int host_report(lua_State *L, int status);

/* Loads and runs a file (NULL = stdin) or a string, reporting errors. */
int host_dofile(lua_State *L, const char *name);
int host_dostring(lua_State *L, const char *code, const char *chunkname);

/* Runs a script file (NULL = stdin), passing the positive entries of the
 * global `arg` table as `...`, reporting errors. */
int host_doscript(lua_State *L, const char *fname);

/* Interactive read-eval-print loop on stdin until EOF. */
void host_repl(lua_State *L);

/* This process's rank when it is one of several started by mpirun / srun
 * (from their environment variables), else -1; the job's size (1 when
 * not launched). */
int host_rank(void);
int host_world_size(void);
/* A start by a PMIx launcher that exports no size (PMIX_RANK and
 * PMIX_NAMESPACE only): ACCEL_LUA_DIST_BACKEND=mpi, so MPI says the size. */
void host_join_pmix_job(void);
/* In one of several ranks: RANK, WORLD_SIZE, LOCAL_RANK and
 * LOCAL_WORLD_SIZE as torchrun / accelerate launch export them (from the
 * MPI launcher's variables; one already set is kept). */
void host_export_rank_vars(void);
/* In a rank: at exit with status 0, starts the communicator if the script
 * never did (one rank leaving before its Accelerator would leave the
 * others waiting in MPI_Init forever). */
void host_join_job_at_exit(void);

/* Sets the compute threads from ACCEL_LUA_NUM_THREADS (1 per rank by
 * default when several ranks run); needs the global `accel`. */
void host_apply_threads(lua_State *L);

/* Per-rank log files from ACCEL_LUA_LOG_DIR / _TEE / _REDIRECTS (rank_log.c);
 * call before anything runs. Returns 0, or -1 after printing why. */
int host_setup_rank_logs(void);
/* Which streams (bit 1 stdout, bit 2 stderr) a torchrun stream spec ("3",
 * "0:1,1:2") gives `rank` (-1: only check the spec). Returns 0, or -1 with
 * the reason in err. */
int host_stream_bits(const char *spec, int rank, int *bits, char *err, size_t n);

/* mkdir -p of path[0..len); 0, or -1 with errno set. */
int host_make_dirs(const char *path, size_t len);

/* CPUs (logical) and physical cores in this process's affinity mask. */
int host_logical_cpus(void);
int host_physical_cores(void);
/* The CPU's model name; which of the space-separated flag names in
 * `wanted` it has and which it lacks (each buffer n bytes). */
void host_cpu_model(char *buf, size_t n);
void host_cpu_flags(const char *wanted, char *have, char *missing, size_t n);

#endif
