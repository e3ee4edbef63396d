/*
 * trace_workload.c -- the traced program of tracer_bench.py: a task-switch
 * heavy libevl workload whose own timing is the measurement.
 *
 *   trace_workload --tasks N --yields Y            N tasks yield Y times in
 *                                                  all; prints wall and CPU
 *                                                  ns per yield
 *   trace_workload --tasks N --rate R --seconds S  paced: about R lifecycle
 *                                                  events/s (3 per yield) for
 *                                                  S seconds (ingest test)
 */
#include "evl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long per_task, yields_done;
static double rate, seconds;

static uint64_t clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

static intptr_t yielder(void *arg)
{
    for (long i = 0; i < per_task; i++) {
        evl_yield();
        yields_done++;
    }
    return 0;
}

/* Paced: a yielder that is ahead of the schedule sleeps 1 ms. */
static uint64_t pace_start, pace_end;

static intptr_t paced_yielder(void *arg)
{
    double yields_per_ns = rate / 3.0 / 1e9;
    for (;;) {
        uint64_t t = now_ns();
        if (t >= pace_end)
            return 0;
        if (yields_done >= (long)((double)(t - pace_start) * yields_per_ns)) {
            evl_sleep(EVL_MS(1));
            continue;
        }
        evl_yield();
        yields_done++;
    }
}

int main(int argc, char **argv)
{
    long ntasks = 100, yields = 1000000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--tasks"))
            ntasks = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--yields"))
            yields = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--rate"))
            rate = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
    }
    evl_loop *loop = evl_loop_new(NULL);
    uint64_t t0 = now_ns(), c0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    if (rate > 0) {
        pace_start = now_ns();
        pace_end = pace_start + (uint64_t)(seconds * 1e9);
        for (long i = 0; i < ntasks; i++)
            evl_future_unref(evl_spawn(loop, "yielder", paced_yielder, NULL));
    } else {
        per_task = yields / ntasks;
        for (long i = 0; i < ntasks; i++)
            evl_future_unref(evl_spawn(loop, "yielder", yielder, NULL));
    }
    evl_run(loop);
    uint64_t dt = now_ns() - t0, dc = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - c0;
    evl_loop_free(loop);
    /* CPU time counts what tracing costs this process (uprobe traps and the
     * BPF programs run on its thread), not time lost to other processes. */
    printf("yields %ld ns %llu ns_per_yield %.1f cpu_ns_per_yield %.1f\n", yields_done,
           (unsigned long long)dt, (double)dt / (double)yields_done,
           (double)dc / (double)yields_done);
    return 0;
}
