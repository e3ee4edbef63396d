/*
 * lifecycle.c -- every task lifecycle step once, in a fixed order: spawn,
 * sleep, await a task, gather, cancel (a sleeping task and one that never
 * started), a failure, and a leak (a task still pending at loop close).
 *
 * The tracer's tests record it with `loopscope record -- lifecycle` and
 * check the exact sequence of events per named task; it is also a small
 * tour of the libevl API.  Usage: lifecycle [--wait-ms N]  (N: pause before
 * starting, so a tracer can attach by pid).
 */
#include "evl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static intptr_t sleeper(void *arg)
{
    int rc = evl_sleep(EVL_MS((intptr_t)arg));
    return rc < 0 ? rc : 1;           /* propagate cancellation */
}

static intptr_t failer(void *arg)
{
    evl_yield();
    return -EIO;
}

static intptr_t forever(void *arg)
{
    evl_future *never = arg;          /* nobody completes it */
    return evl_await(never);
}

static intptr_t main_task(void *arg)
{
    /* spawn + await */
    evl_task *a = evl_spawn(NULL, "child", sleeper, (void *)10);
    printf("child -> %ld\n", (long)evl_await(a));

    /* gather of two */
    evl_task *g[2] = { evl_spawn(NULL, "g1", sleeper, (void *)20),
                       evl_spawn(NULL, "g2", sleeper, (void *)5) };
    intptr_t res[2];
    printf("gather -> %d [%ld %ld]\n", evl_gather(g, 2, 0, res), (long)res[0], (long)res[1]);

    /* cancel a sleeping task, and one that has not started */
    evl_task *c = evl_spawn(NULL, "sleepy", sleeper, (void *)1000);
    evl_sleep(EVL_MS(1));
    evl_cancel(c);
    printf("sleepy -> %s\n", evl_err_name((int)evl_await(c)));
    evl_task *n = evl_spawn(NULL, "unstarted", sleeper, (void *)1);
    evl_cancel(n);
    printf("unstarted -> %s\n", evl_err_name((int)evl_await(n)));

    /* a failure, retrieved */
    evl_task *f = evl_spawn(NULL, "failer", failer, NULL);
    printf("failer -> %s\n", evl_err_name((int)evl_await(f)));

    /* a leak: still pending when the loop closes */
    evl_future_unref(evl_spawn(NULL, "leaker", forever, arg));

    evl_task *all[] = { a, g[0], g[1], c, n, f };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        evl_future_unref(all[i]);
    evl_yield();                      /* let leaker start and suspend */
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--wait-ms") == 0) {
        printf("pid %d\n", (int)getpid());
        fflush(stdout);
        usleep((useconds_t)atoi(argv[2]) * 1000);
    }
    evl_loop *loop = evl_loop_new(NULL);
    if (!loop) {
        perror("evl_loop_new");
        return 1;
    }
    evl_future *never = evl_future_new(loop);
    evl_task *m = evl_spawn(loop, "main", main_task, never);
    intptr_t r = evl_run_until_complete(loop, m);
    evl_future_unref(m);
    int leaked = evl_loop_free(loop);
    evl_future_unref(never);
    printf("main -> %ld, leaked %d\n", (long)r, leaked);
    fflush(stdout);
    return r == 0 && leaked == 1 ? 0 : 1;
}
