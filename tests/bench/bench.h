/*
 * bench.h -- the tiny timing helper shared by the benchmarks in tests/bench/.
 * tests/bench/README.md says what each benchmark measures; run.sh runs them
 * and turns their RESULT lines into one table.
 *
 * Every benchmark binary takes the same options:
 *
 *   --quick         tiny iteration counts (the bench.smoke ctest entry)
 *   --repeats N     measurements per implementation (default 7)
 *   --impl NAME     measure only this implementation (e.g. "evl")
 *   --n N           override the main iteration count
 *
 * and prints, per implementation, one line that run.sh parses:
 *
 *   RESULT <bench> <impl> <unit> best=<x> median=<y> repeats=<r>
 *
 * best is the minimum of the samples, or the maximum for rates (units that
 * end in "/s"): the run least disturbed by the rest of the machine.
 * Repeats of different implementations are interleaved (impl A, impl B,
 * impl A, ...) so that a slow phase of the machine hurts all of them alike.
 * Nothing here judges speed: a benchmark fails only when the code under test
 * misbehaves (wrong count, error return), never because it is slow.
 */
#ifndef LOOPSCOPE_BENCH_H
#define LOOPSCOPE_BENCH_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_MAX_REPEATS 64

/* --traced raises libevl's batch semaphore by hand, as an attached
 * recorder does: the loop then records every event into its buffer and
 * hands it to the batch probe, a no-op with no uprobe on it, so what is
 * measured is libevl's own share of recording.  Weak: benchmarks without
 * libevl, or with its probes compiled out, still link (and refuse the
 * option). */
extern volatile unsigned short evl_batch_semaphore __attribute__((weak));

typedef struct bench_opts {
    int quick;           /* --quick: smoke-test sizes */
    int repeats;         /* --repeats N */
    const char *impl;    /* --impl NAME, or NULL for all */
    long n;              /* --n N, or 0 for the benchmark's default */
    const char *series;  /* --series NAME: only that series, or NULL for all */
} bench_opts;

static inline uint64_t bench_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* Wall time, and CPU time of the whole process (user + system). */
static inline uint64_t bench_wall_ns(void) { return bench_ns(CLOCK_MONOTONIC); }
static inline uint64_t bench_cpu_ns(void) { return bench_ns(CLOCK_PROCESS_CPUTIME_ID); }

#define BENCH_DIE(...)                                                        \
    do {                                                                      \
        fprintf(stderr, "error: " __VA_ARGS__);                               \
        fputc('\n', stderr);                                                  \
        exit(1);                                                              \
    } while (0)
#define BENCH_CHECK(expr)                                                     \
    do {                                                                      \
        if (!(expr))                                                          \
            BENCH_DIE("%s:%d: check failed: %s (errno %d: %s)", __FILE__,     \
                      __LINE__, #expr, errno, strerror(errno));               \
    } while (0)
/* Compare two integers and print both values when they differ. */
#define BENCH_CHECK_EQ(a, b)                                                  \
    do {                                                                      \
        long long bench_a_ = (long long)(a), bench_b_ = (long long)(b);       \
        if (bench_a_ != bench_b_)                                             \
            BENCH_DIE("%s:%d: %s == %s failed: %lld != %lld", __FILE__,       \
                      __LINE__, #a, #b, bench_a_, bench_b_);                  \
    } while (0)

static inline void bench_parse(bench_opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    o->repeats = 7;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--quick")) {
            o->quick = 1;
        } else if (!strcmp(a, "--repeats") && i + 1 < argc) {
            o->repeats = atoi(argv[++i]);
        } else if (!strcmp(a, "--impl") && i + 1 < argc) {
            o->impl = argv[++i];
        } else if (!strcmp(a, "--n") && i + 1 < argc) {
            o->n = atol(argv[++i]);
        } else if (!strcmp(a, "--series") && i + 1 < argc) {
            o->series = argv[++i];
        } else if (!strcmp(a, "--traced")) {
            if (!&evl_batch_semaphore)
                BENCH_DIE("--traced: this binary has no libevl probes");
            evl_batch_semaphore = 1;
        } else {
            fprintf(stderr,
                    "usage: %s [--quick] [--repeats N] [--impl NAME] [--n N] [--series NAME]"
                    " [--traced]\n", argv[0]);
            exit(2);
        }
    }
    if (o->quick && o->repeats == 7)
        o->repeats = 2;
    if (o->repeats < 1 || o->repeats > BENCH_MAX_REPEATS)
        BENCH_DIE("--repeats must be within 1..%d", BENCH_MAX_REPEATS);
}

/* Whether implementation name should be measured in this run. */
static inline int bench_want(const bench_opts *o, const char *name)
{
    return o->impl == NULL || strcmp(o->impl, name) == 0;
}

/* Whether the series named name (bench_series.bench) should be measured. */
static inline int bench_series_want(const bench_opts *o, const char *name)
{
    return o->series == NULL || strcmp(o->series, name) == 0;
}

/* The iteration count: --n, else the quick or the full default. */
static inline long bench_count(const bench_opts *o, long full, long quick)
{
    return o->n > 0 ? o->n : o->quick ? quick : full;
}

/* Samples of one implementation, printed as a RESULT line at the end. */
typedef struct bench_series {
    const char *bench;
    const char *impl;
    const char *unit;
    double v[BENCH_MAX_REPEATS];
    int n;
} bench_series;

static inline void bench_add(bench_series *s, double value) { s->v[s->n++] = value; }

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline void bench_print(bench_series *s)
{
    if (s->n == 0)
        return;
    double v[BENCH_MAX_REPEATS];
    memcpy(v, s->v, sizeof(double) * (size_t)s->n);
    qsort(v, (size_t)s->n, sizeof v[0], bench_cmp_double);
    double med = s->n % 2 ? v[s->n / 2] : (v[s->n / 2 - 1] + v[s->n / 2]) / 2;
    size_t ul = strlen(s->unit);
    int rate = ul >= 2 && strcmp(s->unit + ul - 2, "/s") == 0;
    double best = rate ? v[s->n - 1] : v[0];
    printf("RESULT %s %s %s best=%.5g median=%.5g repeats=%d\n", s->bench,
           s->impl, s->unit, best, med, s->n);
    fflush(stdout);
}

/* A small deterministic generator (xorshift64*) so every peer sees the same
 * random numbers in every run. */
static inline uint64_t bench_rand(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Keep the compiler from deleting a computation whose result is unused. */
#define BENCH_KEEP(x) __asm__ volatile("" : : "g"(x) : "memory")

#endif /* LOOPSCOPE_BENCH_H */
