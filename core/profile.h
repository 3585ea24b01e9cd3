/* profile.h: a tiny op profiler. While it is on (profile_start), every
 * public op (op_* in ops.h) and every autograd backward function records
 * one event: its name, start and end on CLOCK_MONOTONIC, the calling thread
 * and the shapes of up to two inputs. Events go into one growable buffer
 * (mutex-protected, so a thread other than the Lua one may record too).
 * While it is off, PROF_SCOPE costs one load and a predictable branch at
 * entry and a test of a local at exit; nothing is recorded.
 * Device work is asynchronous, so an op's host time is only its launch;
 * started with device_sync, every event's end waits for the queued work of
 * its first tensor's device first, so the event covers the op's device
 * time too (and the device runs one op at a time meanwhile).
 *
 *   Tensor *op_x(Tensor *a, Tensor *b) {
 *       PROF_SCOPE("x", PROF_FORWARD, a, b);   // records when the scope ends
 *       ...
 *   }
 */
#ifndef ACCEL_PROFILE_H
#define ACCEL_PROFILE_H

#include <stdbool.h>
#include <stdint.h>
#include "tensor.h"

typedef enum { PROF_FORWARD = 0, PROF_INPLACE = 1, PROF_BACKWARD = 2 } ProfKind;

#define PROF_MAX_INPUTS 2

typedef struct ProfEvent {
    const char *name;      /* static string (op or autograd node name) */
    ProfKind kind;
    uint64_t start_ns, end_ns;
    int tid;               /* the recording thread (Linux thread id) */
    int n_inputs;
    int ndim[PROF_MAX_INPUTS];
    int64_t shape[PROF_MAX_INPUTS][TENSOR_MAX_DIMS];
} ProfEvent;

/* The recording switch; read by PROF_SCOPE, written by profile_start/stop. */
extern volatile int profile_active;

/* Clears the buffer and starts recording, waiting for the devices at each
 * event's end when device_sync. Returns the start time (ns). */
uint64_t profile_start(bool device_sync);
/* Stops recording (the events stay until the next start or profile_free). */
void profile_stop(void);
/* The recorded events (ordered by end time) and their count; events dropped
 * because the buffer could not grow. */
const ProfEvent *profile_events(int64_t *count, int64_t *dropped);
void profile_free(void);
uint64_t profile_now_ns(void);
void profile_record(const char *name, ProfKind kind, uint64_t start_ns, uint64_t end_ns, const Tensor *a,
                    const Tensor *b);
struct ProfScope;
/* Records a scope ending now (after the device wait of device_sync). */
void profile_scope_record(const struct ProfScope *s);

typedef struct ProfScope {
    uint64_t start_ns; /* 0: not recording */
    const char *name;
    ProfKind kind;
    const Tensor *a, *b;
} ProfScope;

static inline void profile_scope_end(ProfScope *s) {
    if (__builtin_expect(s->start_ns != 0, 0)) profile_scope_record(s);
}

static inline ProfScope profile_scope_begin(const char *name, ProfKind kind, const Tensor *a, const Tensor *b) {
    ProfScope s = {profile_now_ns(), name, kind, a, b};
    return s;
}

/* Times the rest of the enclosing block (name is evaluated only when on). */
#define PROF_SCOPE(name, kind, a, b)                                                                \
    ProfScope prof_scope_ __attribute__((cleanup(profile_scope_end))) =                            \
        __builtin_expect(profile_active, 0) ? profile_scope_begin((name), (kind), (a), (b)) : (ProfScope){0}

#endif
