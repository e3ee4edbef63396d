/*
 * bench_timers.c -- one million one-shot timers with random deadlines within
 * one second: CPU time per timer (arm + fire) for libevl, libev and libuv.
 *
 * Every implementation gets the same delays (fixed seed).  In "timers" each
 * is a whole number of milliseconds in [1, window], so all three wake up at
 * the same ~1000 instants (libuv's resolution is 1 ms) and about a thousand
 * timers share each deadline: ties are the common case, as in an asyncio
 * program where many tasks sleep the same delay from the same cached time.
 * "timers-ns" gives the same delays nanosecond resolution (distinct
 * deadlines, no ties) for libevl and libev only.  With a million timers
 * the loops are CPU-bound (always behind the deadlines); "timers-sparse"
 * arms 1e4 timers at ns resolution within the same second, so the loops
 * mostly sleep and the cost of each wakeup (poll timeout resolution, timer
 * coalescing) shows.  The time is
 * CPU time of the process (CLOCK_PROCESS_CPUTIME_ID, user + system) from the
 * first start to the last callback; the loops sleep in between, which costs
 * no CPU.  Timer memory is allocated and touched before the clock starts.
 *
 * "evl-vclock" is libevl under EVL_LOOP_VIRTUAL_CLOCK: the same work without
 * the sleeps (time jumps to the next deadline), a line for information.
 * See tests/bench/README.md.
 */
#include "bench.h"

#include <ev.h>
#include <evl.h>
#include <uv.h>

static long n_timers;
static uint64_t *delay;     /* the shared random delays, ns */
static long fired;

/* ------------------------------------------------------------- libevl */

static void evl_cb(evl_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    fired++;
}

static double run_evl(unsigned flags, int ns)
{
    evl_loop_options opts;
    evl_loop_options_init(&opts);
    opts.flags = flags;
    evl_loop *loop = evl_loop_new(&opts);
    BENCH_CHECK(loop != NULL);
    evl_timer *t = malloc(sizeof *t * (size_t)n_timers);
    BENCH_CHECK(t != NULL);
    memset(t, 0, sizeof *t * (size_t)n_timers);
    fired = 0;

    uint64_t c0 = bench_cpu_ns();
    for (long i = 0; i < n_timers; i++) {
        evl_timer_init(&t[i]);
        uint64_t d = ns ? delay[i] : delay[i] / 1000000 * 1000000;
        int rc = evl_timer_start(loop, &t[i], d, evl_cb, NULL);
        if (rc != 0)
            BENCH_DIE("evl_timer_start: %s", evl_strerror(rc));
    }
    BENCH_CHECK_EQ(evl_run(loop), 0);
    uint64_t c1 = bench_cpu_ns();

    BENCH_CHECK_EQ(fired, n_timers);
    BENCH_CHECK_EQ(evl_loop_free(loop), 0);
    free(t);
    return (double)(c1 - c0) / (double)n_timers;
}

/* --------------------------------------------------------------- libev */

static void libev_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    fired++;
}

static double run_libev(int ns)
{
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    BENCH_CHECK(loop != NULL);
    ev_timer *t = malloc(sizeof *t * (size_t)n_timers);
    BENCH_CHECK(t != NULL);
    memset(t, 0, sizeof *t * (size_t)n_timers);
    fired = 0;
    ev_now_update(loop);

    uint64_t c0 = bench_cpu_ns();
    for (long i = 0; i < n_timers; i++) {
        uint64_t d = ns ? delay[i] : delay[i] / 1000000 * 1000000;
        ev_timer_init(&t[i], libev_timer_cb, (double)d * 1e-9, 0.);
        ev_timer_start(loop, &t[i]);
    }
    ev_run(loop, 0);
    uint64_t c1 = bench_cpu_ns();

    BENCH_CHECK_EQ(fired, n_timers);
    ev_loop_destroy(loop);
    free(t);
    return (double)(c1 - c0) / (double)n_timers;
}

/* --------------------------------------------------------------- libuv */

static void libuv_timer_cb(uv_timer_t *t)
{
    (void)t;
    fired++;
}

static double run_libuv(void)
{
    uv_loop_t loop;
    BENCH_CHECK_EQ(uv_loop_init(&loop), 0);
    uv_timer_t *t = malloc(sizeof *t * (size_t)n_timers);
    BENCH_CHECK(t != NULL);
    memset(t, 0, sizeof *t * (size_t)n_timers);
    fired = 0;
    uv_update_time(&loop);

    uint64_t c0 = bench_cpu_ns();
    for (long i = 0; i < n_timers; i++) {
        uv_timer_init(&loop, &t[i]);
        uv_timer_start(&t[i], libuv_timer_cb, delay[i] / 1000000, 0);
    }
    BENCH_CHECK_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    uint64_t c1 = bench_cpu_ns();

    BENCH_CHECK_EQ(fired, n_timers);
    /* Handles must be closed before the loop; not part of the measurement. */
    for (long i = 0; i < n_timers; i++)
        uv_close((uv_handle_t *)&t[i], NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    BENCH_CHECK_EQ(uv_loop_close(&loop), 0);
    free(t);
    return (double)(c1 - c0) / (double)n_timers;
}

int main(int argc, char **argv)
{
    bench_opts o;
    bench_parse(&o, argc, argv);
    n_timers = bench_count(&o, 1000000, 2000);
    uint64_t window_ms = o.quick ? 20 : 1000;

    /* Delays in [1 ms, window + 1 ms); "timers" truncates them to whole ms. */
    delay = malloc(sizeof *delay * (size_t)n_timers);
    BENCH_CHECK(delay != NULL);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (long i = 0; i < n_timers; i++)
        delay[i] = EVL_MS(1) + bench_rand(&seed) % EVL_MS(window_ms);

    bench_series evl = {.bench = "timers", .impl = "evl", .unit = "cpu-ns/timer"};
    bench_series evlv = {.bench = "timers", .impl = "evl-vclock", .unit = "cpu-ns/timer"};
    bench_series ev = {.bench = "timers", .impl = "libev", .unit = "cpu-ns/timer"};
    bench_series uv = {.bench = "timers", .impl = "libuv", .unit = "cpu-ns/timer"};
    bench_series evl_ns = {.bench = "timers-ns", .impl = "evl", .unit = "cpu-ns/timer"};
    bench_series ev_ns = {.bench = "timers-ns", .impl = "libev", .unit = "cpu-ns/timer"};
    bench_series evl_sp = {.bench = "timers-sparse", .impl = "evl", .unit = "cpu-ns/timer"};
    bench_series ev_sp = {.bench = "timers-sparse", .impl = "libev", .unit = "cpu-ns/timer"};
    bench_series uv_sp = {.bench = "timers-sparse", .impl = "libuv", .unit = "cpu-ns/timer"};
    long n_full = n_timers, n_sparse = n_timers / 100 > 0 ? n_timers / 100 : 1;
    for (int r = 0; r < o.repeats; r++) {
        if (bench_want(&o, "evl"))
            bench_add(&evl, run_evl(0, 0));
        if (bench_want(&o, "libev"))
            bench_add(&ev, run_libev(0));
        if (bench_want(&o, "libuv"))
            bench_add(&uv, run_libuv());
        if (bench_want(&o, "evl-vclock"))
            bench_add(&evlv, run_evl(EVL_LOOP_VIRTUAL_CLOCK, 0));
        if (bench_want(&o, "evl"))
            bench_add(&evl_ns, run_evl(0, 1));
        if (bench_want(&o, "libev"))
            bench_add(&ev_ns, run_libev(1));
        n_timers = n_sparse;    /* the first n_sparse delays */
        if (bench_want(&o, "evl"))
            bench_add(&evl_sp, run_evl(0, 1));
        if (bench_want(&o, "libev"))
            bench_add(&ev_sp, run_libev(1));
        if (bench_want(&o, "libuv"))
            bench_add(&uv_sp, run_libuv());
        n_timers = n_full;
    }
    bench_print(&evl);
    bench_print(&ev);
    bench_print(&uv);
    bench_print(&evlv);
    bench_print(&evl_ns);
    bench_print(&ev_ns);
    bench_print(&evl_sp);
    bench_print(&ev_sp);
    bench_print(&uv_sp);
    free(delay);
    return 0;
}
