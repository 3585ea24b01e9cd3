/* cpu_check.c: refuses to start on a CPU the build cannot run on. The
 * kernels are compiled with -march=x86-64-v3 (AVX2, FMA, F16C, BMI1/2,
 * LZCNT, MOVBE), so on an older x86-64 the first kernel would die with
 * SIGILL ("Illegal instruction") and no hint why. This file alone is
 * compiled for the baseline x86-64 (Makefile), and its constructor runs
 * before main (and when lua5.4 loads accel.so, before luaopen_accel):
 * without x86-64-v3 it names the missing features on stderr and exits 1.
 * No other code of ours runs before it (we have no other constructors). */
#include <stdio.h>
#include <unistd.h>

/* Appends NAME to the list when the CPU lacks it (a literal is required
 * by __builtin_cpu_supports, hence a macro and not a table). */
#define NOTE_MISSING(name)                                                                     \
    do {                                                                                       \
        if (!__builtin_cpu_supports(name) && len < sizeof missing)                             \
            len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%s",               \
                                    len ? ", " : "", name);                                    \
    } while (0)

__attribute__((constructor)) static void cpu_check(void) {
    char missing[128] = "";
    size_t len = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("x86-64-v3")) return;
    NOTE_MISSING("avx");
    NOTE_MISSING("avx2");
    NOTE_MISSING("fma");
    NOTE_MISSING("f16c");
    NOTE_MISSING("bmi");
    NOTE_MISSING("bmi2");
    NOTE_MISSING("movbe");
    fprintf(stderr,
            "accel-lua: this CPU lacks %s; this build of accel-lua needs an x86-64-v3 CPU "
            "(AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE: Intel Haswell / AMD Excavator or newer)\n",
            len ? missing : "part of x86-64-v3 (lzcnt or xsave)");
    _exit(1);
}
