/*
 * bench_queue.c -- the synchronisation primitives' wait path: two tasks
 * hand items through an evl_queue of maxsize 1, so every get and every put
 * past the first suspends (reason queue_get / queue_put) and is woken by
 * the other task (waker kind queue).  Nanoseconds per item handed over.
 *
 * Built a second time against the library without probes
 * (bench_queue_noprobes, impl "evl-noprobes"): run.sh alternates the two
 * for the "probes: queue" row, the check that the new suspend reasons cost
 * nothing while no tracer is attached.  See tests/bench/README.md.
 */
#include "bench.h"

#include <evl.h>

#ifndef BENCH_EVL_IMPL
#define BENCH_EVL_IMPL "evl"
#endif

static evl_queue q;
static long n_items;
static uint64_t t_start, t_end;

static intptr_t producer(void *arg)
{
    (void)arg;
    t_start = bench_wall_ns();
    for (long i = 0; i < n_items; i++)
        BENCH_CHECK_EQ(evl_queue_put(&q, (intptr_t)i), 0);
    return 0;
}

static intptr_t consumer(void *arg)
{
    (void)arg;
    intptr_t item;
    for (long i = 0; i < n_items; i++) {
        BENCH_CHECK_EQ(evl_queue_get(&q, &item), 0);
        BENCH_CHECK_EQ(item, (intptr_t)i);
    }
    t_end = bench_wall_ns();
    return 0;
}

static double run_evl(long items)
{
    evl_loop *loop = evl_loop_new(NULL);
    BENCH_CHECK(loop != NULL);
    BENCH_CHECK_EQ(evl_queue_init(&q, EVL_QUEUE_FIFO, 1), 0);
    n_items = items;
    evl_task *c = evl_spawn(loop, "consumer", consumer, NULL);
    evl_task *p = evl_spawn(loop, "producer", producer, NULL);
    BENCH_CHECK(c != NULL && p != NULL);
    evl_future_unref(c);
    evl_future_unref(p);
    BENCH_CHECK_EQ(evl_run(loop), 0);
    BENCH_CHECK_EQ(evl_loop_free(loop), 0);
    evl_queue_destroy(&q);
    return (double)(t_end - t_start) / (double)items;
}

int main(int argc, char **argv)
{
    bench_opts o;
    bench_parse(&o, argc, argv);
    long items = bench_count(&o, 1000000, 1000);
    bench_series s = {.bench = "queue", .impl = BENCH_EVL_IMPL, .unit = "ns/item"};
    for (int r = 0; r < o.repeats; r++)
        if (bench_want(&o, BENCH_EVL_IMPL))
            bench_add(&s, run_evl(items));
    bench_print(&s);
    return 0;
}
