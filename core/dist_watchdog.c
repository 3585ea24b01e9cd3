/* dist_watchdog.c: the collective watchdog. Every collective in flight is
 * on a list (oldest first) from its start until its completion is
 * observed; a background thread wakes every tenth of the timeout (at most
 * every second) and, when the oldest has been in flight longer than the
 * timeout, prints which rank and which collective stalled and ends the
 * whole job through the backend's abort (MPI_Abort), so a rank that died
 * or skipped a collective never leaves the others hanging. Started only
 * for multi-process backends. */
#include "dist.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT 300.0

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static DistTrack *oldest, *newest;
static double timeout_s = -1; /* < 0: not read from the environment yet */
static int running, stopping;
static pthread_t thread;
static DistComm *watched;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double dist_env_timeout(void) {
    const char *s = getenv("ACCEL_LUA_COLLECTIVE_TIMEOUT");
    if (!s || !*s) return DEFAULT_TIMEOUT;
    char *end;
    double v = strtod(s, &end);
    if (*end == 0) return v;
    fprintf(stderr, "accel-lua: ignoring ACCEL_LUA_COLLECTIVE_TIMEOUT=%s (not a number of seconds); using %g\n", s, DEFAULT_TIMEOUT);
    return DEFAULT_TIMEOUT;
}

static double current_timeout(void) {
    if (timeout_s < 0) timeout_s = dist_env_timeout();
    return timeout_s;
}

void dist_set_timeout(double seconds) {
    pthread_mutex_lock(&mu);
    timeout_s = seconds > 0 ? seconds : 0;
    if (running) pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
}

double dist_get_timeout(void) {
    pthread_mutex_lock(&mu);
    double t = current_timeout();
    pthread_mutex_unlock(&mu);
    return t;
}

void dist_watch_begin(DistTrack *t, const char *name, uint64_t seq) {
    t->name = name;
    t->seq = seq;
    t->t0 = now();
    t->next = NULL;
    pthread_mutex_lock(&mu);
    t->prev = newest;
    if (newest) newest->next = t;
    else oldest = t;
    newest = t;
    pthread_mutex_unlock(&mu);
}

void dist_watch_end(DistTrack *t) {
    pthread_mutex_lock(&mu);
    if (t->prev) t->prev->next = t->next;
    else if (oldest == t) oldest = t->next;
    if (t->next) t->next->prev = t->prev;
    else if (newest == t) newest = t->prev;
    t->prev = t->next = NULL;
    pthread_mutex_unlock(&mu);
}

/* Called with mu held; never returns. */
static void fire(const DistTrack *t, double limit) {
    char name[64];
    uint64_t seq = t->seq;
    snprintf(name, sizeof name, "%s", t->name);
    pthread_mutex_unlock(&mu);
    fprintf(stderr, "accel-lua: rank %d: collective %s #%llu timed out after %g s (other ranks may have died)\n",
            watched->rank, name, (unsigned long long)seq, limit);
    fflush(stderr);
    watched->ops->abort(watched, 1);
    _exit(1);
}

static void *watch_loop(void *arg) {
    (void)arg;
    pthread_mutex_lock(&mu);
    while (!stopping) {
        double limit = current_timeout();
        if (limit > 0 && oldest && now() - oldest->t0 > limit) fire(oldest, limit);
        double nap = limit > 0 && limit < 10 ? limit / 10 : 1.0;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double at = ts.tv_sec + ts.tv_nsec * 1e-9 + (nap < 0.01 ? 0.01 : nap);
        ts.tv_sec = (time_t)at;
        ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&cv, &mu, &ts);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

int dist_watchdog_start(DistComm *c) {
    if (running) return 0;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&cv, &attr);
    pthread_condattr_destroy(&attr);
    watched = c;
    stopping = 0;
    int rc = pthread_create(&thread, NULL, watch_loop, NULL);
    if (rc) return accel_fail_int("dist: cannot start the watchdog thread (error %d)", rc);
    running = 1;
    return 0;
}

void dist_watchdog_stop(void) {
    if (!running) return;
    pthread_mutex_lock(&mu);
    stopping = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(thread, NULL);
    pthread_cond_destroy(&cv);
    running = 0;
}
