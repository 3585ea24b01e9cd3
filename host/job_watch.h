/* job_watch.h: launch's watch over a running mpirun job (job_watch.c):
 * mpirun's stderr copied through while the lines that say why the job
 * ended are remembered, and a one-line reason naming the rank's host. */
#ifndef ACCEL_HOST_JOB_WATCH_H
#define ACCEL_HOST_JOB_WATCH_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
    char line[4096];        /* the line being assembled (longer ones are cut) */
    size_t len;
    int killed_rank, signal; /* mpirun's "process rank R ... exited on signal S" */
    char killed_node[256], signal_name[64];
    int error_rank;          /* the first "accel-lua: rank R: <message>" */
    char error[4096];
    int abort_rank;          /* "MPI_ABORT was invoked on rank R" */
    char lost_node[256];     /* "Remote daemon: ... on node N" */
} JobWatch;

/* Where the ranks went: the hostfile's machines in order, and ranks per
 * machine (0 when launch did not fix the placement). */
typedef struct {
    const char *hostfile;
    long per_machine;
} JobPlacement;

void job_watch_init(JobWatch *w);

/* How many machines a hostfile lists (lines that are not blank or a
 * comment), or -1 with errno set when it cannot be read. */
long job_hostfile_machines(const char *path);

/* Takes a chunk of mpirun's stderr (already copied to the console). */
void job_watch_feed(JobWatch *w, const char *buf, size_t n);

/* Copies fd (mpirun's stderr) to stderr, feeding w, until child pid has
 * ended (checked every `interval` seconds) and the pipe is drained;
 * stores the wait status in *status. */
void job_watch_wait(JobWatch *w, pid_t pid, int fd, double interval, int *status);

/* The reason the job ended, "rank 3 (host 10.0.0.2, machine_rank 1) was
 * killed by signal 9 (Killed)", or "" when nothing was recognised. */
void job_watch_reason(const JobWatch *w, const JobPlacement *p, char *out, size_t n);

#endif
