/* sysinfo.c: what `launch` and `env` need to know about this machine:
 * logical CPUs and physical cores in the process's affinity mask (mpirun
 * counts one slot per physical core), the CPU model and its SIMD flags. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/host.h"

int host_logical_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    int n = CPU_COUNT(&set);
    return n > 0 ? n : 1;
}

static long read_long(const char *fmt, int cpu) {
    char path[128];
    snprintf(path, sizeof path, fmt, cpu);
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f == NULL) return -1;
    if (fscanf(f, "%ld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

/* Distinct (package, core) pairs among the CPUs we may run on. */
int host_physical_cores(void) {
    cpu_set_t set;
    long seen[CPU_SETSIZE];
    int n = 0;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        long pkg = read_long("/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        long core = read_long("/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        long id = pkg < 0 || core < 0 ? -1 - cpu : pkg * 100000 + core;
        int dup = 0;
        for (int i = 0; i < n && !dup; i++) dup = seen[i] == id;
        if (!dup) seen[n++] = id;
    }
    return n > 0 ? n : 1;
}

/* The value of the first "<field>\t: value" line of /proc/cpuinfo. */
static int cpuinfo_field(const char *field, char *buf, size_t n) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char *line = NULL;
    size_t cap = 0;
    int found = 0;
    if (f == NULL) return 0;
    while (!found && getline(&line, &cap, f) > 0) {
        const char *colon = strchr(line, ':');
        if (strncmp(line, field, strlen(field)) != 0 || colon == NULL) continue;
        snprintf(buf, n, "%s", colon + (colon[1] == ' ' ? 2 : 1));
        buf[strcspn(buf, "\n")] = '\0';
        found = 1;
    }
    free(line);
    fclose(f);
    return found;
}

void host_cpu_model(char *buf, size_t n) {
    if (!cpuinfo_field("model name", buf, n)) snprintf(buf, n, "unknown");
}

/* Of the space-separated names in `wanted`, those the CPU has go to
 * `have`, the others to `missing`. */
void host_cpu_flags(const char *wanted, char *have, char *missing, size_t n) {
    char flags[8192] = "";
    have[0] = missing[0] = '\0';
    cpuinfo_field("flags", flags, sizeof flags);
    strcat(flags, " ");
    for (const char *p = wanted; *p != '\0';) {
        size_t len = strcspn(p, " ");
        char word[64];
        snprintf(word, sizeof word, " %.*s ", (int)len, p);
        char *out = strstr(flags, word) != NULL || strncmp(flags, word + 1, len + 1) == 0
                        ? have : missing;
        size_t used = strlen(out);
        snprintf(out + used, n - used, "%s%.*s", used ? " " : "", (int)len, p);
        p += len + (p[len] == ' ');
    }
}
