/* job_watch.c: why an mpirun job ended, said with the host it ended on.
 *
 * `accel-lua launch` reads mpirun's stderr through a pipe and copies every
 * chunk to its own stderr unchanged and at once (the ranks' errors and
 * mpirun's banners still appear as they are written), while it remembers
 * the lines that tell why the job ended:
 *   mpirun noticed that process rank R with PID P on node N exited on
 *     signal S (NAME).                      a rank was killed (SIGKILL, a crash)
 *   Remote daemon: [[J,0],D] on node N      mpirun lost a machine's daemon
 *   accel-lua: rank R: MESSAGE              a rank's error (host/run.c); the
 *                                           first one is the cause, later ones
 *                                           are usually other ranks noticing
 *   MPI_ABORT was invoked on rank R         a rank ended the job
 * in that order of precedence (a carriage return ends a line too, and a
 * line is read from after its last erase-line code: a progress bar redrawn
 * in place, with no newline, must not hide the error line that follows).
 * Its host: mpirun names the node of a killed rank; for the others,
 * launch placed the ranks itself (--map-by ppr:K:node: ranks iK..iK+K-1 on
 * the hostfile's i-th machine), so the hostfile says which machine a rank
 * ran on. Open MPI 4.1's wording; a line not recognised costs only the
 * summary, never the output. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "host/job_watch.h"

void job_watch_init(JobWatch *w) {
    memset(w, 0, sizeof *w);
    w->killed_rank = w->error_rank = w->abort_rank = -1;
}

static void take_line(JobWatch *w, const char *s) {
    int rank, sig, at = 0;
    char node[256], name[64] = "";
    const char *p;
    while ((p = strstr(s, "\33[K")) != NULL) s = p + 3; /* after a bar's last redraw */
    if (w->killed_rank < 0 && (p = strstr(s, "noticed that process rank ")) != NULL &&
        sscanf(p, "noticed that process rank %d with PID %*d on node %255s exited on signal %d "
                  "(%63[^)]", &rank, node, &sig, name) >= 3) {
        w->killed_rank = rank, w->signal = sig;
        snprintf(w->killed_node, sizeof w->killed_node, "%s", node);
        snprintf(w->signal_name, sizeof w->signal_name, "%s", name);
    } else if (w->lost_node[0] == '\0' && strstr(s, "Remote daemon:") != NULL &&
               (p = strstr(s, " on node ")) != NULL && sscanf(p, " on node %255s", node) == 1) {
        snprintf(w->lost_node, sizeof w->lost_node, "%s", node);
    } else if (w->error_rank < 0 && (p = strstr(s, "accel-lua: rank ")) == s &&
               sscanf(p, "accel-lua: rank %d: %n", &rank, &at) >= 1 && at > 0) {
        w->error_rank = rank;
        snprintf(w->error, sizeof w->error, "%s", s + at);
    } else if (w->abort_rank < 0 && (p = strstr(s, "MPI_ABORT was invoked on rank ")) != NULL &&
               sscanf(p, "MPI_ABORT was invoked on rank %d", &rank) == 1) {
        w->abort_rank = rank;
    }
}

void job_watch_feed(JobWatch *w, const char *buf, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (buf[i] != '\n' && buf[i] != '\r') {
            if (w->len + 1 < sizeof w->line) w->line[w->len++] = buf[i];
            continue;
        }
        w->line[w->len] = '\0';
        take_line(w, w->line);
        w->len = 0;
    }
}

/* Copies what fd has to stderr; returns 0 at end of file or error. */
static int copy_some(JobWatch *w, int fd) {
    char buf[65536];
    ssize_t got = read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) return 1;
    if (got <= 0) return 0;
    if (write(STDERR_FILENO, buf, (size_t)got) < 0) {} /* a closed console must not stop the job */
    job_watch_feed(w, buf, (size_t)got);
    return 1;
}

void job_watch_wait(JobWatch *w, pid_t pid, int fd, double interval, int *status) {
    int ended = 0, wait_ms = (int)(interval * 1000.0);
    if (wait_ms < 1) wait_ms = 1;
    while (fd >= 0 || !ended) {
        if (!ended) {
            pid_t got = waitpid(pid, status, WNOHANG);
            ended = got == pid || (got < 0 && errno != EINTR);
        }
        if (fd < 0) {
            if (!ended) poll(NULL, 0, wait_ms);
            continue;
        }
        /* Once mpirun is gone, a remote agent (ssh) may still hold the
         * pipe open: read what is left until it is quiet for 0.2 s. */
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ready = poll(&pfd, 1, ended ? 200 : wait_ms);
        if (ready < 0 && errno == EINTR) continue;
        if ((ready > 0 && !copy_some(w, fd)) || ready < 0 || (ready == 0 && ended)) {
            close(fd);
            fd = -1;
        }
    }
    if (w->len > 0) job_watch_feed(w, "\n", 1);
}

/* The next machine named in a hostfile (the first word of a line that is
 * not blank or a comment) into word[256]; 0 at the end. */
static int next_machine(FILE *f, char *word) {
    char line[1024];
    while (fgets(line, sizeof line, f) != NULL) {
        char *hash = strchr(line, '#');
        if (hash != NULL) *hash = '\0';
        if (sscanf(line, "%255s", word) == 1) return 1;
    }
    return 0;
}

long job_hostfile_machines(const char *path) {
    FILE *f = fopen(path, "r");
    char word[256];
    long count = 0;
    if (f == NULL) return -1;
    while (next_machine(f, word)) count++;
    fclose(f);
    return count;
}

/* The `want`-th machine (0-based) of the hostfile, or the index of the
 * machine named `name`; -1 when there is none. */
static long hostfile_lookup(const char *path, long want, const char *name, char *out, size_t n) {
    FILE *f = path ? fopen(path, "r") : NULL;
    char word[256];
    long index = -1, found = -1;
    if (f == NULL) return -1;
    while (found < 0 && next_machine(f, word)) {
        index++;
        if (index == want || (name != NULL && strcmp(word, name) == 0)) found = index;
    }
    fclose(f);
    if (found >= 0 && out != NULL) snprintf(out, n, "%s", word);
    return found;
}

/* "host H, machine_rank I" (I: its line among the hostfile's machines)
 * for the machine named `node`, else for the one rank `rank` was placed
 * on; "" when neither is known. */
static void describe_host(const JobPlacement *p, int rank, const char *node, char *out, size_t n) {
    char host[256] = "";
    long index = -1;
    if (node != NULL && node[0] != '\0') {
        snprintf(host, sizeof host, "%s", node);
        index = hostfile_lookup(p->hostfile, -1, node, NULL, 0);
    } else if (p->per_machine > 0 && rank >= 0) {
        index = hostfile_lookup(p->hostfile, rank / p->per_machine, NULL, host, sizeof host);
    }
    if (index >= 0)
        snprintf(out, n, "host %s, machine_rank %ld", host, index);
    else
        snprintf(out, n, "%s%s", host[0] ? "host " : "", host);
}

/* "rank R (host H, machine_rank I)", as much of it as is known. */
static void describe_rank(const JobPlacement *p, int rank, const char *node, char *out, size_t n) {
    char host[400];
    describe_host(p, rank, node, host, sizeof host);
    if (host[0] != '\0')
        snprintf(out, n, "rank %d (%s)", rank, host);
    else
        snprintf(out, n, "rank %d", rank);
}

void job_watch_reason(const JobWatch *w, const JobPlacement *p, char *out, size_t n) {
    char who[512];
    out[0] = '\0';
    if (w->killed_rank >= 0) {
        describe_rank(p, w->killed_rank, w->killed_node, who, sizeof who);
        snprintf(out, n, "%s was killed by signal %d%s%s%s", who, w->signal,
                 w->signal_name[0] ? " (" : "", w->signal_name, w->signal_name[0] ? ")" : "");
    } else if (w->lost_node[0] != '\0') {
        describe_host(p, -1, w->lost_node, who, sizeof who);
        snprintf(out, n, "lost contact with %s: its Open MPI daemon died or the network "
                         "between the machines failed", who);
    } else if (w->error_rank >= 0) {
        describe_rank(p, w->error_rank, NULL, who, sizeof who);
        snprintf(out, n, "%s failed first: %s", who, w->error);
    } else if (w->abort_rank >= 0) {
        describe_rank(p, w->abort_rank, NULL, who, sizeof who);
        snprintf(out, n, "%s ended the job (MPI_Abort)", who);
    }
}
