/*
 * uv_blocking.c -- a libuv program with a blocking timer callback, for
 * tests/tracer/test_generic.py (the generic loop mode on plain libuv).
 *
 *   uv_blocking [--seconds S]
 *
 * Every 250 ms a timer callback (slow_timer_cb) calls usleep(50 ms) on the
 * loop thread: a blocking bug the recorder must report, with this file's
 * line of the usleep.  Each callback also queues a work item whose work
 * callback (pool_work_cb) sleeps 200 ms on libuv's thread pool: that must
 * NOT be reported (it blocks no loop).
 *
 * Prints "pid N" first, then one line per finished measurement, each an
 * independent CLOCK_MONOTONIC interval (ns) to compare the trace with:
 *
 *   cb T0 T1 TID        slow_timer_cb's usleep, on thread TID
 *   work T0 T1 TID      pool_work_cb's usleep, on thread TID
 *
 * Exits after S seconds (default 30).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct job {
    uv_work_t req;
    uint64_t t0, t1;
    pid_t tid;
};

static void pool_work_cb(uv_work_t *req)
{
    struct job *j = req->data;
    j->tid = gettid();
    j->t0 = mono_ns();
    usleep(200 * 1000);   /* POOL: on a thread-pool thread, not a loop */
    j->t1 = mono_ns();
}

static void pool_done_cb(uv_work_t *req, int status)
{
    struct job *j = req->data;
    if (status == 0)
        printf("work %llu %llu %d\n", (unsigned long long)j->t0, (unsigned long long)j->t1,
               (int)j->tid);
    free(j);
}

static void slow_timer_cb(uv_timer_t *t)
{
    uint64_t t0 = mono_ns();
    usleep(50 * 1000);    /* BUG: blocks the loop thread */
    uint64_t t1 = mono_ns();
    printf("cb %llu %llu %d\n", (unsigned long long)t0, (unsigned long long)t1, (int)gettid());
    struct job *j = calloc(1, sizeof(*j));
    if (j) {
        j->req.data = j;
        if (uv_queue_work(t->loop, &j->req, pool_work_cb, pool_done_cb) != 0)
            free(j);
    }
}

static void stop_cb(uv_timer_t *t)
{
    uv_stop(t->loop);
}

int main(int argc, char **argv)
{
    double seconds = 30;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    uv_loop_t *loop = uv_default_loop();
    uv_timer_t slow, stop;
    uv_timer_init(loop, &slow);
    uv_timer_init(loop, &stop);
    uv_timer_start(&slow, slow_timer_cb, 250, 250);
    uv_timer_start(&stop, stop_cb, (uint64_t)(seconds * 1000), 0);
    printf("pid %d\n", (int)getpid());
    uv_run(loop, UV_RUN_DEFAULT);
    return 0;
}
