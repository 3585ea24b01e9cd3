/* matmul.c: direct oneDNN GEMM baseline for scripts/bench/matmul.lua.
 * Times square n x n row-major products through oneDNN with no accel-lua in
 * between: dnnl_sgemm (f32) and the bf16 matmul primitive (bf16 A, B ->
 * f32 C, the form accel's kernel uses; also bf16 -> bf16 C, as PyTorch
 * returns). oneDNN 2.6 has no bf16 matmul without AVX-512 (prints 0 then);
 * so it also times the fallback accel uses there: widen A and B to f32 and
 * call dnnl_sgemm. Prints GFLOP/s (2 n^3 / best time of up to 50 runs) per n.
 *
 *   gcc -O2 -o /tmp/bench_matmul scripts/bench/matmul.c -ldnnl
 *   OMP_NUM_THREADS=1 /tmp/bench_matmul [--offset BYTES] [n ...]   (default 256 512 1024 2048)
 *
 * Matrices start 64-byte aligned, as accel's CPU allocator returns them;
 * --offset BYTES moves them that far past the boundary (plain malloc gives
 * 16). This matters: oneDNN 2.6's sgemm at n = 512 on this AVX2 machine runs
 * ~40% faster when B is NOT 64-byte aligned. The widened-bf16 copies use
 * malloc, as accel's fallback does.
 *
 * One line per n: "RESULT direct n=<n> sgemm=<GF/s> bf16=<GF/s> bf16_bf16=<GF/s>
 * bf16_widened=<GF/s>" (0 = not available).
 * Written against the oneDNN 2.x C API (Debian 12: libdnnl 2.6). */
#define _POSIX_C_SOURCE 199309L
#include <dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                      \
    do {                                                                                 \
        dnnl_status_t st_ = (call);                                                      \
        if (st_ != dnnl_success) {                                                       \
            fprintf(stderr, "matmul.c:%d: %s failed: status %d\n", __LINE__, #call, st_); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs fn once to warm up, then enough times for ~0.5 s (3..50 runs);
 * returns the fastest run's seconds (best of: robust on a shared machine). */
typedef void (*bench_fn)(void *ctx);
static double time_best(bench_fn fn, void *ctx) {
    double runs[50];
    int n = 0;
    fn(ctx);
    double start = now();
    while (n < 50 && (n < 3 || now() - start < 0.5)) {
        double t0 = now();
        fn(ctx);
        runs[n++] = now() - t0;
    }
    qsort(runs, (size_t)n, sizeof runs[0], cmp_double);
    return runs[0];
}

static uint32_t rng_state = 12345u;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 8388608.0f - 1.0f;
}

static uint16_t to_bf16(float f) { /* round to nearest even */
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ---- f32: dnnl_sgemm ---- */
struct sgemm_ctx {
    int64_t n;
    const float *a, *b;
    float *c;
};
static void run_sgemm(void *p) {
    struct sgemm_ctx *s = p;
    CHECK(dnnl_sgemm('N', 'N', s->n, s->n, s->n, 1.0f, s->a, s->n, s->b, s->n, 0.0f, s->c, s->n));
}

/* ---- bf16 without a bf16 matmul: widen A and B to f32, then dnnl_sgemm ---- */
struct widen_ctx {
    int64_t n;
    const uint16_t *a, *b;
    float *fa, *fb, *c;
};
static void widen(const uint16_t *x, float *out, size_t count) {
    for (size_t i = 0; i < count; i++) {
        uint32_t u = (uint32_t)x[i] << 16;
        memcpy(&out[i], &u, 4);
    }
}
static void run_widened(void *p) {
    struct widen_ctx *s = p;
    widen(s->a, s->fa, (size_t)(s->n * s->n));
    widen(s->b, s->fb, (size_t)(s->n * s->n));
    CHECK(dnnl_sgemm('N', 'N', s->n, s->n, s->n, 1.0f, s->fa, s->n, s->fb, s->n, 0.0f, s->c, s->n));
}

/* ---- bf16: matmul primitive ---- */
struct prim_ctx {
    dnnl_primitive_t prim;
    dnnl_stream_t stream;
    dnnl_memory_t a, b, c;
};
static void run_prim(void *p) {
    struct prim_ctx *s = p;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, s->a}, {DNNL_ARG_WEIGHTS, s->b}, {DNNL_ARG_DST, s->c}};
    CHECK(dnnl_primitive_execute(s->prim, s->stream, 3, args));
    CHECK(dnnl_stream_wait(s->stream));
}

/* Builds a bf16 x bf16 -> dst_dt matmul for n x n row-major matrices and
 * times it; returns seconds per call, or -1 if oneDNN has no such matmul. */
static double time_bf16(dnnl_engine_t eng, dnnl_stream_t stream, int64_t n, void *a, void *b, void *c,
                        dnnl_data_type_t dst_dt) {
    dnnl_dims_t dims = {n, n};
    dnnl_memory_desc_t ad, bd, cd;
    CHECK(dnnl_memory_desc_init_by_tag(&ad, 2, dims, dnnl_bf16, dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&bd, 2, dims, dnnl_bf16, dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&cd, 2, dims, dst_dt, dnnl_ab));
    dnnl_matmul_desc_t desc;
    CHECK(dnnl_matmul_desc_init(&desc, &ad, &bd, NULL, &cd));
    dnnl_primitive_desc_t pd;
    static int shown[2];
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, NULL, eng, NULL);
    if (st != dnnl_success) {
        if (!shown[dst_dt == dnnl_bf16]++)
            fprintf(stderr, "  oneDNN bf16 matmul (dst %s): not available on this CPU (status %d)\n",
                    dst_dt == dnnl_bf16 ? "bf16" : "f32", st);
        return -1;
    }
    struct prim_ctx s = {.stream = stream};
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    if (!shown[dst_dt == dnnl_bf16]++)
        fprintf(stderr, "  oneDNN bf16 matmul (dst %s) implementation: %s\n", dst_dt == dnnl_bf16 ? "bf16" : "f32",
                impl ? impl : "?");
    CHECK(dnnl_primitive_create(&s.prim, pd));
    CHECK(dnnl_memory_create(&s.a, &ad, eng, a));
    CHECK(dnnl_memory_create(&s.b, &bd, eng, b));
    CHECK(dnnl_memory_create(&s.c, &cd, eng, c));
    double t = time_best(run_prim, &s);
    dnnl_memory_destroy(s.a);
    dnnl_memory_destroy(s.b);
    dnnl_memory_destroy(s.c);
    dnnl_primitive_destroy(s.prim);
    dnnl_primitive_desc_destroy(pd);
    return t;
}

/* nbytes at `offset` bytes past a 64-byte boundary; free with free_at. */
static void *alloc_at(size_t nbytes, size_t offset) {
    char *p = aligned_alloc(64, (nbytes + offset + 63) / 64 * 64);
    return p ? p + offset : NULL;
}
static void free_at(void *p, size_t offset) {
    if (p) free((char *)p - offset);
}

int main(int argc, char **argv) {
    int64_t sizes[16] = {256, 512, 1024, 2048};
    int nsizes = 0;
    size_t off = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--offset") && i + 1 < argc) off = (size_t)atoll(argv[++i]);
        else if (nsizes < 16) sizes[nsizes++] = atoll(argv[i]);
    }
    if (!nsizes) nsizes = 4;
    const dnnl_version_t *v = dnnl_version();
    fprintf(stderr, "oneDNN %d.%d.%d (cpu runtime %u), direct calls, matrices at 64-byte boundary + %zu\n",
            v->major, v->minor, v->patch, v->cpu_runtime, off);

    dnnl_engine_t eng;
    dnnl_stream_t stream;
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));

    for (int k = 0; k < nsizes; k++) {
        int64_t n = sizes[k];
        size_t nn = (size_t)(n * n);
        float *a = alloc_at(nn * 4, off), *b = alloc_at(nn * 4, off), *c = alloc_at(nn * 4, off);
        uint16_t *a16 = alloc_at(nn * 2, off), *b16 = alloc_at(nn * 2, off), *c16 = alloc_at(nn * 2, off);
        if (!a || !b || !c || !a16 || !b16 || !c16) {
            fprintf(stderr, "matmul.c: out of memory at n=%lld\n", (long long)n);
            return 1;
        }
        for (size_t i = 0; i < nn; i++) {
            a[i] = frand(), b[i] = frand();
            a16[i] = to_bf16(a[i]), b16[i] = to_bf16(b[i]);
        }
        double flop = 2.0 * (double)n * (double)n * (double)n;
        struct sgemm_ctx sg = {n, a, b, c};
        double t_f32 = time_best(run_sgemm, &sg);
        double t_bf = time_bf16(eng, stream, n, a16, b16, c, dnnl_f32);
        double t_bfbf = time_bf16(eng, stream, n, a16, b16, c16, dnnl_bf16);
        float *fa = malloc(nn * 4), *fb = malloc(nn * 4);
        if (!fa || !fb) {
            fprintf(stderr, "matmul.c: out of memory at n=%lld\n", (long long)n);
            return 1;
        }
        struct widen_ctx w = {n, a16, b16, fa, fb, c};
        double t_wide = time_best(run_widened, &w);
        free(fa), free(fb);
        printf("RESULT direct n=%lld sgemm=%.2f bf16=%.2f bf16_bf16=%.2f bf16_widened=%.2f\n", (long long)n,
               flop / t_f32 * 1e-9, t_bf > 0 ? flop / t_bf * 1e-9 : 0.0, t_bfbf > 0 ? flop / t_bfbf * 1e-9 : 0.0,
               flop / t_wide * 1e-9);
        fflush(stdout);
        free_at(a, off), free_at(b, off), free_at(c, off);
        free_at(a16, off), free_at(b16, off), free_at(c16, off);
    }
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    return 0;
}
