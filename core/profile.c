/* profile.c: the op profiler's event buffer and clock (see profile.h). */
#include "profile.h"
#include "backend/backend.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PROF_MAX_EVENTS ((int64_t)1 << 21) /* 2M events (~370 MB) at most; beyond that they are counted as dropped */

volatile int profile_active = 0;
static int device_sync; /* written only while not recording */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static ProfEvent *events;
static int64_t n_events, cap_events, n_dropped;

uint64_t profile_now_ns(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 1; /* cannot fail for CLOCK_MONOTONIC on Linux */
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int thread_id(void) {
    static __thread int tid;
    if (!tid) {
        long t = syscall(SYS_gettid);
        tid = t > 0 ? (int)t : (int)getpid();
    }
    return tid;
}

/* Room for one more event (lock held); false when the buffer cannot grow. */
static bool reserve(void) {
    if (n_events < cap_events) return true;
    int64_t cap = cap_events ? cap_events * 2 : 4096;
    if (cap > PROF_MAX_EVENTS) return false;
    ProfEvent *e = realloc(events, (size_t)cap * sizeof *e);
    if (!e) return false;
    events = e, cap_events = cap;
    return true;
}

static void fill_inputs(ProfEvent *e, const Tensor *a, const Tensor *b) {
    const Tensor *in[PROF_MAX_INPUTS] = {a, b};
    e->n_inputs = 0;
    for (int k = 0; k < PROF_MAX_INPUTS && in[k]; k++) {
        e->ndim[k] = in[k]->ndim;
        memcpy(e->shape[k], in[k]->shape, sizeof(int64_t) * (size_t)in[k]->ndim);
        e->n_inputs = k + 1;
    }
}

void profile_record(const char *name, ProfKind kind, uint64_t start_ns, uint64_t end_ns, const Tensor *a,
                    const Tensor *b) {
    pthread_mutex_lock(&lock);
    if (profile_active && reserve()) {
        ProfEvent *e = &events[n_events++];
        e->name = name, e->kind = kind, e->start_ns = start_ns, e->end_ns = end_ns, e->tid = thread_id();
        fill_inputs(e, a, b);
    } else if (profile_active) {
        n_dropped++;
    }
    pthread_mutex_unlock(&lock);
}

/* The device of the scope's first tensor waits for its queued work (a
 * failed kernel then reports itself at the op's next synchronisation). */
static void wait_for_device(const ProfScope *s) {
    const Tensor *t = s->a ? s->a : s->b;
    if (!t || t->device.type == DEV_CPU) return;
    const Backend *be = backend_for(t->device);
    if (be) (void)be->synchronize();
}

void profile_scope_record(const ProfScope *s) {
    if (device_sync) wait_for_device(s);
    profile_record(s->name, s->kind, s->start_ns, profile_now_ns(), s->a, s->b);
}

uint64_t profile_start(bool sync) {
    pthread_mutex_lock(&lock);
    device_sync = sync;
    n_events = n_dropped = 0;
    profile_active = 1;
    pthread_mutex_unlock(&lock);
    return profile_now_ns();
}

void profile_stop(void) {
    pthread_mutex_lock(&lock);
    profile_active = 0;
    pthread_mutex_unlock(&lock);
}

const ProfEvent *profile_events(int64_t *count, int64_t *dropped) {
    *count = n_events;
    *dropped = n_dropped;
    return events;
}

void profile_free(void) {
    pthread_mutex_lock(&lock);
    free(events);
    events = NULL;
    n_events = cap_events = n_dropped = 0;
    pthread_mutex_unlock(&lock);
}
