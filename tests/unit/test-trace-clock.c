/*
 * test-trace-clock.c -- the records' clock (loop/src/trace.h,
 * evl__trace_now): CLOCK_MONOTONIC read at anchors and the TSC in
 * between.  Its times must follow clock_gettime closely, never go
 * backwards, and never be handed over later than the clock at the
 * hand-over, whatever the TSC does.
 */
#define _GNU_SOURCE
#include "task.h"
#include "evl-internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#ifdef EVL_PROBES
/* What trace.c decides from the CPU and the environment: may the TSC
 * stand in for the clock? */
static bool invariant_tsc(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    const char *env = getenv("EVL_TRACE_TSC");
    return (!env || strcmp(env, "0")) && __get_cpuid(0x80000007, &a, &b, &c, &d) &&
           (d & (1u << 8));
#else
    return false;
#endif
}

static void sleep_us(long us)
{
    struct timespec ts = { 0, us * 1000 };
    nanosleep(&ts, NULL);
}

/* 60 ms of readings, some 100 us apart and some back to back: each within
 * 20 us of a clock_gettime bracket around it (the anchors are 20 ms apart
 * at most, so this allows a rate 1000 ppm off), and in order. */
static void check_follows(evl_loop *loop, uint64_t *max_err)
{
    uint64_t prev = 0, start = test_wall_ns();
    *max_err = 0;
    for (int i = 0; test_wall_ns() - start < 60000000ull; i++) {
        uint64_t before = test_wall_ns();
        uint64_t t = evl__trace_now(loop);
        uint64_t after = test_wall_ns();
        ASSERT_GE(t, prev);
        ASSERT_GE(t + 20000, before);
        ASSERT_LE(t, after + 20000);
        uint64_t err = t < before ? before - t : t > after ? t - after : 0;
        if (err > *max_err)
            *max_err = err;
        prev = t;
        if (i % 16 == 0)
            sleep_us(100);
    }
}
#endif

TEST_IMPL(trace_clock_follows_clock)
{
#ifdef EVL_PROBES
    evl_loop *loop = test_loop(0, 0);
    uint64_t max_err;
    check_follows(loop, &max_err);
    /* past the calibration, the TSC is in use where it may be */
    ASSERT_EQ(loop->tc_span != 0, invariant_tsc());
    fprintf(stderr, "largest distance to the clock: %llu ns\n", (unsigned long long)max_err);
    ASSERT_LOOP_FREE(loop, 0);
#endif
    return 0;
}

/* EVL_TRACE_TSC=0 turns the TSC off (read once a process: each case runs
 * in a process of its own): every time then comes from the clock. */
TEST_IMPL(trace_clock_env_off)
{
#ifdef EVL_PROBES
    setenv("EVL_TRACE_TSC", "0", 1);
    evl_loop *loop = test_loop(0, 0);
    uint64_t max_err;
    check_follows(loop, &max_err);
    ASSERT_EQ(loop->tc_span, 0);
    ASSERT_EQ(max_err, 0);
    ASSERT_LOOP_FREE(loop, 0);
#endif
    return 0;
}

/* A TSC that runs ahead (here: an anchor moved 1 ms into the future) is
 * caught up at the hand-over: records later than the clock are brought
 * back to it, in order, and the times after go on from there.  A TSC
 * reading behind the anchor (another CPU's) takes the clock instead. */
TEST_IMPL(trace_clock_settle)
{
#ifdef EVL_PROBES
    if (!invariant_tsc())
        return 77;
    evl_loop *loop = test_loop(0, 0);
    uint64_t max_err;
    check_follows(loop, &max_err);            /* calibrated */
    ASSERT_NE(loop->tc_span, 0);
    loop->trace_len = loop->trace_nrec = 0;
    evl__trace_anchor(loop);                  /* a fresh anchor, then */
    loop->tc_ns += 1000000;                   /* 1 ms ahead from it */
    uint64_t ahead = 0;
    for (int i = 0; i < 100; i++) {
        struct evl_rec *r = evl__trace_rec(loop, EVL_PROBE_ID_task_run, sizeof(*r), 1, 0, 0, 0);
        if (r->ts > test_wall_ns())
            ahead++;
    }
    ASSERT_GT(ahead, 0);
    evl__trace_settle(loop);
    uint64_t now = test_wall_ns(), prev = 0;
    ASSERT_EQ(loop->trace_nrec, 100);
    for (uint32_t off = 0; off < loop->trace_len; off += sizeof(struct evl_rec)) {
        const struct evl_rec *r = (const struct evl_rec *)(const void *)(loop->trace_buf + off);
        ASSERT_LE(r->ts, now);
        ASSERT_GE(r->ts, prev);
        prev = r->ts;
    }
    uint64_t next = evl__trace_now(loop);
    ASSERT_GE(next, prev);
    ASSERT_LE(next, test_wall_ns() + 20000);
    /* the TSC behind the anchor: the clock, not a time from a huge count */
    loop->tc_tsc = __builtin_ia32_rdtsc() + (1ull << 40);
    uint64_t before = test_wall_ns();
    uint64_t t = evl__trace_now(loop);
    ASSERT_GE(t, next);
    ASSERT_GE(t, before);
    ASSERT_LE(t, test_wall_ns());
    loop->trace_len = loop->trace_nrec = 0;
    ASSERT_LOOP_FREE(loop, 0);
#endif
    return 0;
}
