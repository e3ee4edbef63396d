/*
 * bench_spawn.c -- spawn, run and finish a million trivial tasks:
 * nanoseconds per task for evl_spawn + evl_future_unref of every task, then
 * one evl_run that runs them all to completion.
 *
 * "spawn" uses a fresh loop each repeat: every task struct is new memory
 * (malloc, first-touch page faults).  "spawn-warm" then repeats the run on
 * the same loop, whose million finished task structs are recycled.  Stacks
 * are pooled; every task finishes in its first step, so one stack serves
 * them all.  The loop's creation and destruction are outside the clock.
 * The CPython asyncio reference (create_task of a million trivial
 * coroutines, then run) is bench_asyncio.py, run by run.sh.
 * See tests/bench/README.md.
 */
#include "bench.h"

#include <evl.h>

static long ran;

static intptr_t trivial(void *arg)
{
    (void)arg;
    ran++;
    return 0;
}

static double run_evl(evl_loop *loop, long n)
{
    ran = 0;

    uint64_t t0 = bench_wall_ns();
    for (long i = 0; i < n; i++) {
        evl_task *t = evl_spawn(loop, NULL, trivial, NULL);
        BENCH_CHECK(t != NULL);
        evl_future_unref(t);
    }
    BENCH_CHECK_EQ(evl_run(loop), 0);
    uint64_t t1 = bench_wall_ns();

    BENCH_CHECK_EQ(ran, n);
    return (double)(t1 - t0) / (double)n;
}

int main(int argc, char **argv)
{
    bench_opts o;
    bench_parse(&o, argc, argv);
    long n = bench_count(&o, 1000000, 1000);

    bench_series cold = {.bench = "spawn", .impl = "evl", .unit = "ns/task"};
    bench_series warm = {.bench = "spawn-warm", .impl = "evl", .unit = "ns/task"};
    for (int r = 0; r < o.repeats; r++) {
        if (!bench_want(&o, "evl"))
            continue;
        evl_loop *loop = evl_loop_new(NULL);
        BENCH_CHECK(loop != NULL);
        bench_add(&cold, run_evl(loop, n));
        bench_add(&warm, run_evl(loop, n));
        BENCH_CHECK_EQ(evl_loop_free(loop), 0);
    }
    bench_print(&cold);
    bench_print(&warm);
    return 0;
}
