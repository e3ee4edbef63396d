/*
 * bench_switch.c -- the raw context switch: libevl's evl__ctx_switch against
 * glibc swapcontext, measured in the same run.
 *
 * Both sides bounce between the main stack and one coroutine stack; one
 * round trip is two switches, and the result is nanoseconds per switch.  The
 * task-level cost (switch + ready queue + step bookkeeping) is measured by
 * bench_yield.c.  See tests/bench/README.md.
 */
#include "bench.h"

#include <stdint.h>
#include <stdlib.h>
#include <ucontext.h>

/* libevl's internal switch primitive (loop/src/evl-internal.h).  Declared
 * here rather than included: the bench links the static library only. */
void evl__ctx_switch(void **from, void *to);
void *evl__ctx_make(void *stack_hi, void (*entry)(void *), void *arg);

#define STACK_SIZE (64 * 1024)

/* ------------------------------------------------------------- libevl */

static void *evl_main_sp;  /* main stack while the coroutine runs */
static void *evl_co_sp;    /* coroutine stack while main runs */

static void evl_co_entry(void *arg)
{
    (void)arg;
    for (;;)
        evl__ctx_switch(&evl_co_sp, evl_main_sp);
}

static double run_evl(long rounds)
{
    void *stack = aligned_alloc(64, STACK_SIZE);
    BENCH_CHECK(stack != NULL);
    evl_co_sp = evl__ctx_make((char *)stack + STACK_SIZE, evl_co_entry, NULL);
    evl__ctx_switch(&evl_main_sp, evl_co_sp); /* warm up: enter the loop */
    uint64_t t0 = bench_wall_ns();
    for (long i = 0; i < rounds; i++)
        evl__ctx_switch(&evl_main_sp, evl_co_sp);
    uint64_t t1 = bench_wall_ns();
    /* The coroutine is parked inside its loop; dropping its stack is safe
     * because nothing will switch to it again. */
    free(stack);
    return (double)(t1 - t0) / (2.0 * (double)rounds);
}

/* -------------------------------------------------------- swapcontext */

static ucontext_t uc_main, uc_co;

static void uc_co_entry(void)
{
    for (;;)
        swapcontext(&uc_co, &uc_main);
}

static double run_ucontext(long rounds)
{
    void *stack = aligned_alloc(64, STACK_SIZE);
    BENCH_CHECK(stack != NULL);
    BENCH_CHECK(getcontext(&uc_co) == 0);
    uc_co.uc_stack.ss_sp = stack;
    uc_co.uc_stack.ss_size = STACK_SIZE;
    uc_co.uc_link = NULL;
    makecontext(&uc_co, uc_co_entry, 0);
    BENCH_CHECK(swapcontext(&uc_main, &uc_co) == 0);
    uint64_t t0 = bench_wall_ns();
    for (long i = 0; i < rounds; i++)
        swapcontext(&uc_main, &uc_co);
    uint64_t t1 = bench_wall_ns();
    free(stack);
    return (double)(t1 - t0) / (2.0 * (double)rounds);
}

int main(int argc, char **argv)
{
    bench_opts o;
    bench_parse(&o, argc, argv);
    long rounds = bench_count(&o, 10000000, 10000);
    long uc_rounds = rounds / 10 > 0 ? rounds / 10 : 1; /* ~20x slower */

    bench_series evl = {.bench = "switch", .impl = "evl", .unit = "ns/switch"};
    bench_series uc = {.bench = "switch", .impl = "swapcontext", .unit = "ns/switch"};
    for (int r = 0; r < o.repeats; r++) {
        if (bench_want(&o, "evl"))
            bench_add(&evl, run_evl(rounds));
        if (bench_want(&o, "swapcontext"))
            bench_add(&uc, run_ucontext(uc_rounds));
    }
    bench_print(&evl);
    bench_print(&uc);
    return 0;
}
