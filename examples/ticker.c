/*
 * ticker.c -- a long-running libevl program to attach to by pid: every
 * tick it spawns a few short tasks that sleep, yield and finish, and a
 * `--burst N` mode that spawns N trivial tasks as fast as it can (to fill a
 * tracer's ring buffer).  `--threads K` runs K loops on K threads.
 * `--ticks N` ends each loop after N ticks rather than S seconds, and
 * `--start-on-stdin` holds the loops back until a line (or EOF) comes on
 * stdin: a test attaches first, then lets it run a known amount of work.
 *
 * Usage: ticker [--seconds S | --ticks N] [--tick-ms T] [--burst N] [--threads K]
 *               [--start-on-stdin]
 * Prints "pid N" first; at exit "created C finished F" (tasks it made).
 */
#include "evl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double seconds = 5;
static int tick_ms = 20;
static long burst;
static long ticks = -1;          /* -1: until `seconds` have passed */
static atomic_long created, finished;

static intptr_t worker(void *arg)
{
    evl_sleep(EVL_MS(2));
    evl_yield();
    atomic_fetch_add(&finished, 1);
    return (intptr_t)arg;
}

static intptr_t trivial(void *arg)
{
    atomic_fetch_add(&finished, 1);
    return 0;
}

static intptr_t ticker(void *arg)
{
    evl_loop *loop = evl_loop_current();
    uint64_t end = evl_now(loop) + (uint64_t)(seconds * 1e9);
    for (long i = 0; ticks < 0 ? evl_now(loop) < end : i < ticks; i++) {
        if (burst) {
            for (long k = 0; k < burst; k++) {
                evl_future_unref(evl_spawn(NULL, "trivial", trivial, NULL));
                atomic_fetch_add(&created, 1);
            }
        }
        evl_task *t[3];
        for (int k = 0; k < 3; k++) {
            char name[32];
            snprintf(name, sizeof(name), "worker-%ld", i * 3 + k);
            t[k] = evl_spawn(NULL, name, worker, (void *)(intptr_t)k);
            atomic_fetch_add(&created, 1);
        }
        evl_gather(t, 3, 0, NULL);
        for (int k = 0; k < 3; k++)
            evl_future_unref(t[k]);
        evl_sleep(EVL_MS(tick_ms));
    }
    return 0;
}

static void *run_loop(void *arg)
{
    evl_loop *loop = evl_loop_new(NULL);
    evl_task *m = evl_spawn(loop, "ticker", ticker, NULL);
    evl_run_until_complete(loop, m);
    evl_future_unref(m);
    evl_loop_free(loop);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = 1, start_on_stdin = 0;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(opt, "--start-on-stdin")) {
            start_on_stdin = 1;
            continue;
        }
        if (!val)
            goto usage;
        i++;
        if (!strcmp(opt, "--seconds"))
            seconds = atof(val);
        else if (!strcmp(opt, "--tick-ms"))
            tick_ms = atoi(val);
        else if (!strcmp(opt, "--burst"))
            burst = atol(val);
        else if (!strcmp(opt, "--threads"))
            threads = atoi(val);
        else if (!strcmp(opt, "--ticks"))
            ticks = atol(val);
        else {
        usage:
            fprintf(stderr, "usage: ticker [--seconds S | --ticks N] [--tick-ms T] [--burst N] "
                            "[--threads K] [--start-on-stdin]\n");
            return 2;
        }
    }
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    if (start_on_stdin) {
        char line[64];
        if (!fgets(line, sizeof(line), stdin) && ferror(stdin)) {
            perror("ticker: stdin");
            return 1;
        }
    }
    pthread_t th[64];
    if (threads < 1 || threads > 64)
        threads = 1;
    for (int i = 1; i < threads; i++)
        pthread_create(&th[i], NULL, run_loop, NULL);
    run_loop(NULL);
    for (int i = 1; i < threads; i++)
        pthread_join(th[i], NULL);
    printf("created %ld finished %ld\n", (long)created, (long)finished);
    return 0;
}
