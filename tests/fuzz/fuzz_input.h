/* fuzz_input.h: shared by the libFuzzer targets in tests/fuzz/ (`make
 * fuzz`). The readers under test take a path, so each input is written to
 * one temporary file per process (in /dev/shm when it exists, a RAM disk,
 * else /tmp), rewritten for every input; the file is removed at exit. */
#ifndef ACCEL_FUZZ_INPUT_H
#define ACCEL_FUZZ_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_path[64];

static void fuzz_remove_file(void) { unlink(fuzz_path); }

/* Writes data to this process's temporary file; returns its path. Aborts
 * (a finding) if the file cannot be written: the run would test nothing. */
static const char *fuzz_input_file(const uint8_t *data, size_t size, const char *suffix) {
    if (!fuzz_path[0]) {
        const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(fuzz_path, sizeof fuzz_path, "%s/accel-fuzz-%ld%s", dir, (long)getpid(), suffix);
        atexit(fuzz_remove_file);
    }
    FILE *f = fopen(fuzz_path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(fuzz_path);
        abort();
    }
    return fuzz_path;
}

#endif
