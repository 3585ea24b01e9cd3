/* dist_watchdog.c: the collective watchdog. Every collective in flight is
 * on a list (oldest first) from its start until its completion is
 * observed; a background thread wakes every tenth of the timeout (at most
 * every second) and, when the oldest has been in flight longer than the
 * timeout, prints which rank and which collective stalled, which ranks did
 * not enter it and what each was last doing, and ends the whole job through
 * the backend's abort (MPI_Abort), so a rank that died or skipped a
 * collective never leaves the others hanging. Started only for
 * multi-process backends.
 *
 * Who did not arrive: every rank publishes, in a slot of a small file
 * shared by the communicator's ranks on one machine (/dev/shm, else
 * $TMPDIR or /tmp; mapped MAP_SHARED, named by the communicator's rank 0
 * when it is made and unlinked once every rank has it open, so nothing is
 * left behind even after a crash): one file per communicator (the world
 * and each sub-communicator, dist_split), slots indexed by the rank in it,
 * counting the collectives entered on that communicator only, since
 * members of different sub-communicators issue different sequences. Each
 * slot holds how many collectives it has entered, the name and number of the last one,
 * whether it is inside it, and when it entered / left it (CLOCK_MONOTONIC,
 * which the processes of one machine share). A stalled rank compares the
 * slots with its own count: a rank with a smaller count never entered the
 * collective. Ranks on other machines have no slot here; the message then
 * says so (their state is unknown). Without the file (it could not be
 * created) the message names only the waiting rank. A rank whose script
 * has ended (dist_watch_finished, from the exit handler) or whose process
 * is gone will never enter a collective it has not entered yet: a rank
 * waiting for it fails at the watchdog's next wake, not at the timeout.
 *
 * The timeout: ACCEL_LUA_COLLECTIVE_TIMEOUT in seconds (a number >= 0; 0
 * turns the watchdog off; anything else is an error when the communicator
 * starts), default 300; dist_set_timeout overrides it. */
#include "dist.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT 300.0

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static DistTrack *oldest, *newest;
static double timeout_s = -1; /* < 0: not read from the environment yet */
static int running, stopping;
static pthread_t thread;
static DistComm *watched; /* the world: its abort ends the job */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double dist_env_timeout(void) {
    const char *s = getenv("ACCEL_LUA_COLLECTIVE_TIMEOUT");
    if (!s || !*s) return DEFAULT_TIMEOUT;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != 0 || isnan(v) || v < 0 || errno == ERANGE)
        return accel_fail_int("dist init: ACCEL_LUA_COLLECTIVE_TIMEOUT=%s is not a number of seconds >= 0 (0 turns the "
                              "collective watchdog off; unset means %g)", s, DEFAULT_TIMEOUT);
    return v;
}

static double current_timeout(void) {
    if (timeout_s < 0) {
        double v = dist_env_timeout(); /* checked when the communicator started */
        timeout_s = v < 0 ? DEFAULT_TIMEOUT : v;
    }
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

/* ---- the ranks' shared slots (see the top) ---- */

typedef struct {
    int32_t pid;      /* 0: never written (a rank on another machine) */
    int32_t inside;   /* collectives this rank is in now */
    int32_t finished; /* its script has ended (it waits in MPI_Finalize) */
    uint64_t entered; /* collectives it has entered */
    uint64_t seq;     /* the last one's number (per kind) */
    double t_enter, t_leave;
    char name[32];
} RankSlot;

struct DistWatchSlots {
    RankSlot *slots; /* [comm->size] */
    size_t bytes;
};

static RankSlot *slots_of(const DistComm *c) { return c->watch ? c->watch->slots : NULL; }

static void slot_path(char *buf, size_t n) {
    const char *dir = "/dev/shm";
    if (access(dir, W_OK) != 0) dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(buf, n, "%s/accel-lua-watch-%ld-%llx", dir, (long)getpid(), (unsigned long long)(now() * 1e9));
}

/* Rank 0 names the file, every rank maps it, then it is unlinked. Any
 * failure leaves c without slots (the messages then name only the waiting rank). */
static void open_slots(DistComm *c) {
    char path[256] = {0};
    if (c->rank == 0) slot_path(path, sizeof path);
    if (c->ops->broadcast(c, path, sizeof path, DT_U8, 0, NULL)) return;
    path[sizeof path - 1] = 0;
    size_t bytes = sizeof(RankSlot) * (size_t)c->size;
    void *m = MAP_FAILED;
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd >= 0 && ftruncate(fd, (off_t)bytes) == 0) m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);
    int rc = c->ops->barrier(c, NULL); /* every rank has it open */
    if (fd >= 0) unlink(path);        /* the first unlink wins; ENOENT for the others */
    DistWatchSlots *w = m == MAP_FAILED || rc ? NULL : malloc(sizeof *w);
    if (!w) {
        if (m != MAP_FAILED) munmap(m, bytes);
        return;
    }
    *w = (DistWatchSlots){.slots = m, .bytes = bytes};
    w->slots[c->rank].pid = (int32_t)getpid();
    pthread_mutex_lock(&mu);
    c->watch = w;
    pthread_mutex_unlock(&mu);
}

void dist_watch_attach(DistComm *c) {
    if (running && !c->watch) open_slots(c);
}

void dist_watch_detach(DistComm *c) {
    pthread_mutex_lock(&mu);
    DistWatchSlots *w = c->watch;
    c->watch = NULL;
    pthread_mutex_unlock(&mu);
    if (!w) return;
    munmap(w->slots, w->bytes);
    free(w);
}

static void publish_begin(const DistTrack *t) {
    RankSlot *slots = slots_of(t->comm);
    if (!slots) return;
    RankSlot *s = &slots[t->comm->rank];
    snprintf(s->name, sizeof s->name, "%s", t->name);
    s->seq = t->seq;
    s->t_enter = t->t0;
    __atomic_add_fetch(&s->inside, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&s->entered, t->order, __ATOMIC_RELEASE);
}

void dist_watch_finished(DistComm *c) {
    pthread_mutex_lock(&mu);
    RankSlot *slots = slots_of(c);
    if (slots) __atomic_store_n(&slots[c->rank].finished, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mu);
}

static void publish_end(const DistTrack *t) {
    RankSlot *slots = slots_of(t->comm);
    if (!slots) return;
    RankSlot *s = &slots[t->comm->rank];
    s->t_leave = now();
    __atomic_sub_fetch(&s->inside, 1, __ATOMIC_RELEASE);
}

static DistSiteFn site_fn;
static void *site_ctx;

void dist_set_site_fn(DistSiteFn fn, void *ctx) {
    site_fn = fn;
    site_ctx = ctx;
}

void *dist_site_ctx(void) { return site_ctx; }

void dist_watch_begin(DistTrack *t, DistComm *c, const char *name, uint64_t seq) {
    t->comm = c;
    t->name = name;
    t->site[0] = 0;
    if (site_fn) site_fn(site_ctx, t->site, sizeof t->site);
    t->seq = seq;
    t->t0 = now();
    t->next = NULL;
    pthread_mutex_lock(&mu);
    t->order = ++c->entered;
    t->prev = newest;
    if (newest) newest->next = t;
    else oldest = t;
    newest = t;
    publish_begin(t);
    pthread_mutex_unlock(&mu);
}

void dist_watch_end(DistTrack *t) {
    pthread_mutex_lock(&mu);
    if (t->prev) t->prev->next = t->next;
    else if (oldest == t) oldest = t->next;
    if (t->next) t->next->prev = t->prev;
    else if (newest == t) newest = t->prev;
    t->prev = t->next = NULL;
    publish_end(t);
    pthread_mutex_unlock(&mu);
}

/* ---- the message ---- */

/* What rank q's slot says about the stalled collective t, appended to buf
 * (nothing when q is waiting in it too). */
/* Appends what rank q is doing to buf; true when its script has ended. */
static bool describe_rank(const DistTrack *t, int q, char *buf, size_t n) {
    const RankSlot *s = &slots_of(t->comm)[q];
    size_t at = strlen(buf);
    double t_now = now();
    char who[48];
    dist_rank_str(t->comm, q, who, sizeof who);
    if (__atomic_load_n(&s->pid, __ATOMIC_ACQUIRE) == 0) {
        snprintf(buf + at, n - at, "; %s: on another machine, state unknown", who);
        return false;
    }
    uint64_t e = __atomic_load_n(&s->entered, __ATOMIC_ACQUIRE);
    int inside = __atomic_load_n(&s->inside, __ATOMIC_ACQUIRE);
    if (e >= t->order && (inside == 0 || strcmp(s->name, t->name) == 0)) return false; /* there (or past it) */
    if (e >= t->order) {
        snprintf(buf + at, n - at, "; %s is in %s #%llu instead", who, s->name, (unsigned long long)s->seq);
        return false;
    }
    if (kill(s->pid, 0) != 0 && errno == ESRCH)
        snprintf(buf + at, n - at, "; not entered by %s (its process has exited)", who);
    else if (__atomic_load_n(&s->finished, __ATOMIC_ACQUIRE)) {
        snprintf(buf + at, n - at, "; not entered by %s (its script has ended)", who);
        return true;
    } else if (e == 0) snprintf(buf + at, n - at, "; not entered by %s (no collective yet)", who);
    else if (inside)
        snprintf(buf + at, n - at, "; not entered by %s (still in %s #%llu, for %.1f s)", who, s->name,
                 (unsigned long long)s->seq, t_now - s->t_enter);
    else
        snprintf(buf + at, n - at, "; not entered by %s (last in %s #%llu, left it %.1f s ago)", who, s->name,
                 (unsigned long long)s->seq, t_now - s->t_leave);
    return false;
}

/* Whether a rank of t's communicator will never enter t: it has not yet,
 * and its script has ended or its process is gone. Called with mu held. */
static bool never_entered(const DistTrack *t) {
    const RankSlot *slots = slots_of(t->comm);
    for (int q = 0; slots && q < t->comm->size; q++) {
        const RankSlot *s = &slots[q];
        if (q == t->comm->rank || __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE) == 0) continue;
        if (__atomic_load_n(&s->entered, __ATOMIC_ACQUIRE) >= t->order) continue;
        if (__atomic_load_n(&s->finished, __ATOMIC_ACQUIRE) || (kill(s->pid, 0) != 0 && errno == ESRCH)) return true;
    }
    return false;
}

/* Called with mu held; never returns. limit < 0: a rank will never enter
 * it (never_entered), so it cannot complete. */
static void fire(const DistTrack *t, double limit) {
    const DistComm *c = t->comm;
    size_t n = 256 + 160 * (size_t)c->size;
    char *msg = malloc(n + 512), *others = malloc(n), where[64] = ""; /* msg: others, the header and a hint */
    if (!msg || !others) _exit(1);
    others[0] = 0;
    bool ended = false; /* a rank's script ended without entering it */
    for (int q = 0; slots_of(c) && q < c->size; q++)
        if (q != c->rank && describe_rank(t, q, others, n)) ended = true;
    if (!slots_of(c)) snprintf(others, n, " (other ranks may have died)");
    else if (!others[0]) snprintf(others, n, "; every rank entered it (one may be stuck inside it)");
    if (c->world_ranks) snprintf(where, sizeof where, " on the %s communicator", c->label);
    char why[64] = "cannot complete";
    if (limit >= 0) snprintf(why, sizeof why, "timed out after %g s", limit);
    const char *hint = ended ? "; a collective must be called on every process (one called only under "
                                   "`if accelerator.is_main_process`, such as get_state_dict under stage 3, is not)"
                                 : "";
    char site[160] = "";
    if (t->site[0]) snprintf(site, sizeof site, " (called at %s)", t->site);
    snprintf(msg, n + 512, "accel-lua: rank %d: collective %s #%llu%s%s %s%s%s\n", watched->rank, t->name,
             (unsigned long long)t->seq, site, where, why, others, hint);
    pthread_mutex_unlock(&mu);
    fputs(msg, stderr);
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
        if (limit > 0 && oldest && never_entered(oldest)) fire(oldest, -1);
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
    open_slots(c);
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
    dist_watch_detach(watched);
}
