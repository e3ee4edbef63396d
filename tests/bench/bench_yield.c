/*
 * bench_yield.c -- evl_sleep(0) among many tasks: nanoseconds per yield.
 *
 * "yield" runs 1000 tasks that each yield K times; "yield-2" runs two tasks
 * (a ping between two stacks through the ready queue: the task-level cost of
 * a switch, against the raw primitive of bench_switch.c).  The clock starts
 * when the last task reaches its first yield and stops when the first task
 * returns from its last one, so the first steps (stack mapping, first page
 * touch) and the task ends (stacks beyond the pool are unmapped) are outside
 * it: in between, every task has resumed and yielded K-1 times.  The
 * CPython asyncio reference (asyncio.sleep(0) in 1000 tasks) is
 * bench_asyncio.py, run by run.sh.  Built a second time against the library
 * without probes (bench_yield_noprobes), for the probes comparison of run.sh
 * on a CPU-bound path.  See tests/bench/README.md.
 */
#include "bench.h"

#include <evl.h>

/* "evl-noprobes" in bench_yield_noprobes (CMakeLists.txt). */
#ifndef BENCH_EVL_IMPL
#define BENCH_EVL_IMPL "evl"
#endif

static long n_tasks, n_yields;
static long started, finished;
static uint64_t t_start, t_end;

static intptr_t yielder(void *arg)
{
    (void)arg;
    if (++started == n_tasks)
        t_start = bench_wall_ns();
    for (long i = 0; i < n_yields; i++) {
        int rc = evl_sleep(0);
        if (rc != 0)
            return rc;
    }
    if (++finished == 1)
        t_end = bench_wall_ns();
    return 0;
}

static double run_evl(long tasks, long yields)
{
    evl_loop *loop = evl_loop_new(NULL);
    BENCH_CHECK(loop != NULL);
    n_tasks = tasks;
    n_yields = yields;
    started = finished = 0;
    for (long i = 0; i < tasks; i++) {
        evl_task *t = evl_spawn(loop, "yielder", yielder, NULL);
        BENCH_CHECK(t != NULL);
        evl_future_unref(t);
    }
    BENCH_CHECK_EQ(evl_run(loop), 0);
    BENCH_CHECK_EQ(finished, tasks);
    BENCH_CHECK_EQ(evl_loop_free(loop), 0);
    /* Between the clock reads: iterations 2..K, each resuming every task
     * from one yield into the next. */
    double counted = (double)tasks * (double)(yields - 1);
    return (double)(t_end - t_start) / counted;
}

int main(int argc, char **argv)
{
    bench_opts o;
    bench_parse(&o, argc, argv);
    long yields = bench_count(&o, 1000, 10);
    if (yields < 2)
        BENCH_DIE("--n must be at least 2");

    bench_series many = {.bench = "yield", .impl = BENCH_EVL_IMPL, .unit = "ns/yield"};
    bench_series two = {.bench = "yield-2", .impl = BENCH_EVL_IMPL, .unit = "ns/yield"};
    for (int r = 0; r < o.repeats; r++) {
        if (!bench_want(&o, BENCH_EVL_IMPL))
            continue;
        if (bench_series_want(&o, many.bench))
            bench_add(&many, run_evl(1000, yields));
        if (bench_series_want(&o, two.bench))
            bench_add(&two, run_evl(2, yields * 1000));
    }
    bench_print(&many);
    bench_print(&two);
    return 0;
}
