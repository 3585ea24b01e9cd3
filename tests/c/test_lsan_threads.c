/* test_lsan_threads.c: guards the entry for ASan's thread start-up race in
 * scripts/lsan.supp (read it for the race). The program runs itself as a
 * child CHILD_RUNS times; each child starts THREADS threads and calls
 * exit() at once, as an MPI rank that ends while OpenMPI's threads start.
 * In a sanitizer build (make asan-test, whose LSAN_OPTIONS name the
 * suppressions) the children run with fast_unwind_on_malloc=0, the setting
 * of the MPI tests, under which the race shows; a child whose exit-time
 * leak check reports fails. Without the suppression the first child
 * already fails on this toolchain; a plain build checks nothing and counts
 * nothing. Last line: "N passed, N failed". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 256
#define CHILD_RUNS 5
#define CHILD_FLAG "ACCEL_LSAN_THREADS_CHILD"

static void *thread_main(void *arg) { return arg; }

static int child(void) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, thread_main, NULL) != 0) return 2;
    exit(0); /* while the threads are still starting */
}

/* ASAN_OPTIONS for the child: the caller's, with fast unwinding off. */
static void child_env(void) {
    const char *asan = getenv("ASAN_OPTIONS");
    char opts[2048];
    snprintf(opts, sizeof opts, "%s%sfast_unwind_on_malloc=0", asan ? asan : "", asan && *asan ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
    setenv(CHILD_FLAG, "1", 1);
}

/* Runs /proc/self/exe as a child; its exit status (-1 if it did not exit). */
static int run_child(void) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execl("/proc/self/exe", "test_lsan_threads", (char *)NULL);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

int main(void) {
    if (getenv(CHILD_FLAG)) return child();
#ifndef __SANITIZE_ADDRESS__
    /* Nothing to check without LeakSanitizer: count nothing as passed. */
    printf("not a sanitizer build (make asan-test runs this check)\n0 passed, 0 failed\n");
    return 0;
#endif
    child_env();
    int passed = 0, failed = 0;
    for (int i = 0; i < CHILD_RUNS; i++) {
        int rc = run_child();
        if (rc == 0) {
            passed++;
        } else {
            failed++;
            printf("child %d of %d exited with %d: a LeakSanitizer report from thread start-up (see scripts/lsan.supp)\n",
                   i + 1, CHILD_RUNS, rc);
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
