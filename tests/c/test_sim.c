/* test_sim.c: the simulated device proves the seam. (1) Its memory is not
 * host-addressable: dereferencing a sim tensor's data pointer outside the
 * backend faults (checked in a child process, which must die of SIGSEGV),
 * while the host-access API reads the same values. (2) Its work is
 * asynchronous: with the worker held, a read that skips the
 * synchronisation sees the old bytes (the stale read a missing sync would
 * give, so a test comparing values catches it), and the synchronising
 * to_host sees the new ones after the worker runs. (3) Queued work runs in
 * stream order and events order the host after it. (4) The op profiler's
 * device_sync makes an op's event end after its queued work ran.
 * Last line "N passed, N failed". */
#include "core/backend/backend.h"
#include "core/ops.h"
#include "core/profile.h"
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int n_pass, n_fail;

static void check(int ok, const char *what) {
    if (ok) n_pass++;
    else n_fail++, printf("test_sim: FAIL %s\n", what);
}

static const Device SIM = {DEV_SIM, 0};

/* Whether reading *p in a child process dies of SIGSEGV. */
static int faults_in_child(const volatile float *p) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 0;
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        float v = *p; /* must fault */
        _exit(v == v ? 0 : 1);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return 0;
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV;
}

static void test_fault(void) {
    Tensor *t = tensor_full((int64_t[]){4}, 1, 3.5, DT_F32, SIM);
    check(t != NULL, "a sim tensor is created");
    if (!t) return;
    check(backend_sim_is_handle(tensor_data(t)), "its data pointer is a sim handle");
    check(faults_in_child(tensor_data(t)), "dereferencing a sim data pointer outside the backend faults");
    float host[4] = {0};
    check(tensor_to_host(t, host) == 0 && host[0] == 3.5f && host[3] == 3.5f, "the host-access API reads the values");
    check(tensor_host_ptr(t) == NULL, "sim memory has no host address");
    tensor_release(t);
    Tensor *c = tensor_full((int64_t[]){4}, 1, 1.0, DT_F32, (Device){DEV_CPU, 0});
    check(c && !faults_in_child(tensor_data(c)), "a cpu data pointer reads fine in the same child setup");
    tensor_release(c);
}

static void test_stale(void) {
    const int64_t n = 1000;
    Tensor *t = tensor_zeros(&n, 1, DT_F32, SIM);
    float v[1000];
    check(t && tensor_to_host(t, v) == 0 && v[0] == 0 && v[999] == 0, "zeros read back as zeros");
    if (!t) return;
    backend_sim_debug_hold(1);
    tensor_fill_(t, 7.0); /* queued, not run */
    backend_sim_debug_peek(v, tensor_data(t), sizeof v);
    check(v[0] == 0 && v[999] == 0, "a read that skips the synchronisation sees stale data");
    backend_sim_debug_hold(0);
    check(tensor_to_host(t, v) == 0 && v[0] == 7 && v[999] == 7, "to_host synchronises: the fill is visible");
    tensor_release(t);
}

static void test_order(void) {
    const Backend *be = &backend_sim;
    const int64_t n = 512;
    Tensor *a = tensor_zeros(&n, 1, DT_F64, SIM), *b = tensor_empty(&n, 1, DT_F64, SIM);
    if (!a || !b) {
        check(0, "sim tensors for the ordering test");
        return;
    }
    void *ev = be->event_new();
    backend_sim_debug_hold(1);
    for (int k = 0; k < 50; k++) { /* a = a + 1, fifty times, then b = a */
        Tensor *one = tensor_full(NULL, 0, 1.0, DT_F64, SIM);
        StridedIter it;
        iter_init_run(&it, n);
        iter_add_run(&it, a, 1), iter_add_run(&it, a, 1), iter_add_run(&it, one, 0);
        be->binary(KB_ADD, DT_F64, &it);
        tensor_release(one); /* freed while queued work still reads it: reuse is ordered after it */
    }
    tensor_copy_flat(b, a);
    be->event_record(ev);
    backend_sim_debug_hold(0);
    check(be->event_sync(ev) == 0, "event_sync waits for the recorded work");
    double hb[512];
    backend_sim_debug_peek(hb, tensor_data(b), sizeof hb); /* after event_sync no other wait is needed */
    check(hb[0] == 50 && hb[511] == 50, "queued work ran in stream order (50 adds, then the copy)");
    be->event_free(ev);
    tensor_release(a), tensor_release(b);
}

/* A child forked after sim work gets its own worker and sees the parent's data. */
static void test_fork(void) {
    const int64_t n = 64;
    Tensor *t = tensor_full(&n, 1, 2.0, DT_F32, SIM);
    if (!t || backend_sim.synchronize() != 0) {
        check(0, "a sim tensor before the fork");
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        float v[64];
        alarm(20); /* a child without a worker would wait forever */
        tensor_fill_(t, 5.0);
        _exit(tensor_to_host(t, v) == 0 && v[0] == 5 && v[63] == 5 ? 0 : 1);
    }
    int st = 0;
    check(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "a forked child runs sim work on its own worker");
    float v[64];
    check(tensor_to_host(t, v) == 0 && v[0] == 2, "the parent's tensor is untouched by the child");
    tensor_release(t);
}

/* In place a = a + a on the sim device, under the profiler; a's first value
 * as a read without synchronisation sees it right after the op returns. */
static float add_and_peek(Tensor *a) {
    float v = -1;
    check(op_binary_(KB_ADD, a, a) == 0, "a += a on the sim device");
    backend_sim_debug_peek(&v, tensor_data(a), sizeof v);
    return v;
}

static void test_profile_sync(void) {
    const int64_t n = 4096;
    Tensor *a = tensor_full(&n, 1, 1.0, DT_F32, SIM);
    if (!a || backend_sim.synchronize() != 0) {
        check(0, "a sim tensor for the profiler test");
        return;
    }
    profile_start(false);
    backend_sim_debug_hold(1);
    check(add_and_peek(a) == 1.0f, "without device_sync an op's event ends while its work is still queued");
    backend_sim_debug_hold(0);
    check(backend_sim.synchronize() == 0, "the queued add runs once the worker is released");
    profile_stop();
    profile_start(true);
    check(add_and_peek(a) == 4.0f, "with device_sync an op's event ends after its device work ran");
    profile_stop();
    int64_t count = 0, dropped = 0;
    const ProfEvent *ev = profile_events(&count, &dropped);
    check(count == 1 && dropped == 0 && strcmp(ev[0].name, "add") == 0 && ev[0].end_ns >= ev[0].start_ns,
          "the synchronised add is recorded once, by name");
    profile_free();
    tensor_release(a);
}

int main(void) {
    test_fork();
    test_fault();
    test_stale();
    test_order();
    test_profile_sync();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
