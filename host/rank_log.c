/* rank_log.c: per-rank log files, as torchrun's --log_dir / --tee /
 * --redirects make them (`accel-lua launch --log_dir DIR`). Each rank
 * sets them up at start, before any Lua or MPI, from
 *   ACCEL_LUA_LOG_DIR     DIR: the rank writes DIR/attempt_K/rank_R/stdout.log
 *                         and stderr.log (K = ACCEL_LUA_RESTART_COUNT, R = the
 *                         global rank; folders created, files truncated)
 *   ACCEL_LUA_TEE         streams copied to the files AND the console
 *   ACCEL_LUA_REDIRECTS   streams sent to the files only
 * A stream spec is torchrun's: "0" none, "1" stdout, "2" stderr, "3" both,
 * for every rank, or "R:N,R:N" per rank (ranks not named: 0). A stream in
 * neither goes to the console only. With neither variable set, all of a
 * rank's output is teed (launch sets --tee 3 when only --log_dir is given).
 *
 * A teed stream becomes a pipe read by a small child process that writes
 * each chunk to the file and to the console; it ends when the rank's end
 * of the pipe closes, so output written just before a crash (even a
 * SIGKILL) still reaches the file. The child ignores the stop signals so
 * it can drain. Once set up, ACCEL_LUA_LOGS_OPEN=1 is exported so that
 * accel-lua processes the script starts write into the rank's streams
 * instead of truncating its files again. A stream sent to the file only is
 * no terminal any more: ACCEL_LUA_STDOUT_TTY / ACCEL_LUA_STDERR_TTY (launch's
 * word for accel.progress) become 0 for it. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host/host.h"

int host_stream_bits(const char *spec, int rank, int *bits, char *err, size_t n) {
    const char *p = spec;
    *bits = 0;
    if (strchr(spec, ':') == NULL) {
        if (spec[0] >= '0' && spec[0] <= '3' && spec[1] == '\0') {
            *bits = spec[0] - '0';
            return 0;
        }
        snprintf(err, n, "'%s' is not 0-3 or RANK:0-3,...", spec);
        return -1;
    }
    while (*p != '\0') {
        char *end;
        long r = strtol(p, &end, 10);
        if (end == p || r < 0 || *end != ':' || end[1] < '0' || end[1] > '3' ||
            (end[2] != ',' && end[2] != '\0') || (end[2] == ',' && end[3] == '\0')) {
            snprintf(err, n, "'%s' is not 0-3 or RANK:0-3,... (at '%s')", spec, p);
            return -1;
        }
        if (r == rank) *bits = end[1] - '0';
        p = end[2] == ',' ? end + 3 : end + 2;
    }
    return 0;
}

/* The bits that variable `name` gives this rank; -1 after printing why. */
static int env_bits(const char *name, int rank, int *bits) {
    char err[256];
    const char *spec = getenv(name);
    *bits = 0;
    if (spec == NULL || spec[0] == '\0') return 0;
    if (host_stream_bits(spec, rank, bits, err, sizeof err) == 0) return 0;
    fprintf(stderr, "%s: %s: %s\n", ACCEL_LUA_NAME, name, err);
    return -1;
}

int host_make_dirs(const char *path, size_t len) {
    char buf[4096];
    if (len >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, len);
    buf[len] = '\0';
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        int bad = mkdir(buf, 0755) != 0 && errno != EEXIST;
        *p = c;
        if (bad || c == '\0') return bad ? -1 : 0;
    }
}

/* The copier: each pipe in[s] (s = 0 stdout, 1 stderr; -1 = none) goes to
 * file[s] and to the console (fd s + 1) until all have closed. */
static void copy_streams(const int in[2], const int file[2]) {
    static const int stop[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (size_t i = 0; i < sizeof stop / sizeof stop[0]; i++) signal(stop[i], SIG_IGN);
    struct pollfd fds[2];
    int open_count = 0;
    for (int s = 0; s < 2; s++) {
        fds[s] = (struct pollfd){.fd = in[s], .events = POLLIN};
        open_count += in[s] >= 0;
    }
    char buf[65536];
    while (open_count > 0) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int s = 0; s < 2; s++) {
            if (fds[s].fd < 0 || fds[s].revents == 0) continue;
            ssize_t got = read(fds[s].fd, buf, sizeof buf);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                close(fds[s].fd);
                fds[s].fd = -1;
                open_count--;
                continue;
            }
            /* A full disk or a closed console must not stop the other copy. */
            if (write(file[s], buf, (size_t)got) < 0) {}
            if (write(s + 1, buf, (size_t)got) < 0) {}
        }
    }
    _exit(0);
}

/* Opens the files, starts the copier for the teed streams and points fds
 * 1 and 2 at their file or pipe. */
static int redirect(const char *folder, int files, int tee) {
    static const char *const names[] = {"stdout.log", "stderr.log"};
    int file[2] = {-1, -1}, rd[2] = {-1, -1}, wr[2] = {-1, -1};
    char path[4096 + 16];
    for (int s = 0; s < 2; s++) {
        if (!(files & (1 << s))) continue;
        snprintf(path, sizeof path, "%s/%s", folder, names[s]);
        file[s] = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
        if (file[s] < 0) {
            fprintf(stderr, "%s: cannot write %s: %s\n", ACCEL_LUA_NAME, path, strerror(errno));
            return -1;
        }
        int p[2];
        if ((tee & (1 << s)) && pipe(p) != 0) return -1;
        if (tee & (1 << s)) rd[s] = p[0], wr[s] = p[1];
    }
    fflush(NULL);
    if (tee != 0) {
        pid_t pid = fork();
        if (pid < 0) return -1;
        if (pid == 0) {
            for (int s = 0; s < 2; s++)
                if (wr[s] >= 0) close(wr[s]);
            copy_streams(rd, file);
        }
    }
    for (int s = 0; s < 2; s++) {
        if (file[s] < 0) continue;
        if (dup2(wr[s] >= 0 ? wr[s] : file[s], s + 1) < 0) return -1;
        close(file[s]);
        if (wr[s] >= 0) close(wr[s]), close(rd[s]);
    }
    if (tee & 1) setvbuf(stdout, NULL, _IOLBF, 0);
    return 0;
}

/* A stream sent to its file only no longer ends on launch's terminal:
 * say so to accel.progress (ACCEL_LUA_STDOUT_TTY / _STDERR_TTY, set by
 * launch from its own stdout / stderr). A teed stream keeps launch's word. */
static int mark_redirected(int redirects) {
    static const char *const vars[] = {"ACCEL_LUA_STDOUT_TTY", "ACCEL_LUA_STDERR_TTY"};
    for (int s = 0; s < 2; s++)
        if ((redirects & (1 << s)) && getenv(vars[s]) != NULL && setenv(vars[s], "0", 1) != 0)
            return -1;
    return 0;
}

int host_setup_rank_logs(void) {
    const char *dir = getenv("ACCEL_LUA_LOG_DIR");
    if (dir == NULL || dir[0] == '\0' || getenv("ACCEL_LUA_LOGS_OPEN") != NULL) return 0;
    int rank = host_rank() >= 0 ? host_rank() : 0, tee, redirects;
    const char *attempt = getenv("ACCEL_LUA_RESTART_COUNT");
    if (env_bits("ACCEL_LUA_TEE", rank, &tee) != 0 ||
        env_bits("ACCEL_LUA_REDIRECTS", rank, &redirects) != 0)
        return -1;
    if (getenv("ACCEL_LUA_TEE") == NULL && getenv("ACCEL_LUA_REDIRECTS") == NULL) tee = 3;
    tee &= ~redirects;
    if ((tee | redirects) == 0) return 0;
    char folder[4096];
    snprintf(folder, sizeof folder, "%s/attempt_%s/rank_%d", dir,
             attempt && attempt[0] ? attempt : "0", rank);
    if (host_make_dirs(folder, strlen(folder)) != 0) {
        fprintf(stderr, "%s: rank %d: cannot create the log folder %s: %s\n", ACCEL_LUA_NAME,
                rank, folder, strerror(errno));
        return -1;
    }
    if (redirect(folder, tee | redirects, tee) == 0 && mark_redirected(redirects) == 0)
        return setenv("ACCEL_LUA_LOGS_OPEN", "1", 1);
    fprintf(stderr, "%s: rank %d: cannot set up the logs in %s: %s\n", ACCEL_LUA_NAME, rank,
            folder, strerror(errno));
    return -1;
}
