/*
 * probe_target -- a small libevl program for tracers to attach to.
 *
 *   probe_target [seconds [tasks_per_second [child_sleep_ms]]]
 *
 * Runs a scripted workload for `seconds` (default 5; 0: until SIGINT or
 * SIGTERM, so a test ends it on an event, not a guess of how long its
 * tracer takes under load): a "main" task spawns
 * `tasks_per_second` (default 200) "child" tasks per second on a fixed
 * schedule; each child sleeps child_sleep_ms (default 2) and returns 0.
 * Once per second main also spawns a "victim" task that sleeps for a minute
 * and cancels it, so task_cancel and a CANCELLED task_finish are fired too.
 *
 * Output (stdout, line-buffered, flushed at once):
 *   pid=<pid>                         at start, so a tracer can attach
 *   created=<n> finished=<n> cancelled=<n> children=<n> max_alive=<n>   at exit
 * created counts every evl_spawn (main, children, victims); finished counts
 * every task whose state became FINISHED or CANCELLED (each fires exactly
 * one task_create and one task_finish).  max_alive is the most tasks alive
 * at once: created less finished, taken after each spawn.  A done callback
 * counts a task after its task_finish fired, so at any instant the tasks
 * whose task_create fired and task_finish did not are at most max_alive.
 * Main keeps to its schedule: a loop held off the CPU spawns the children
 * it owes in one go, so max_alive grows with the longest such stall.
 */
#include "evl.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static unsigned long n_created, n_finished, n_cancelled, n_children, max_alive;
static uint64_t child_sleep_ns;
static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
    (void)sig;
    stop = 1;
}

static void count_done(evl_future *fut, void *arg)
{
    (void)arg;
    n_finished++;
    if (evl_future_state(fut) == EVL_FUTURE_CANCELLED)
        n_cancelled++;
    else
        (void)evl_future_result(fut);
    evl_future_unref(fut);
}

static evl_task *spawn_counted(evl_loop *loop, const char *name, evl_task_fn fn, void *arg)
{
    evl_task *t = evl_spawn(loop, name, fn, arg);
    if (!t) {
        perror("evl_spawn");
        exit(2);
    }
    n_created++;
    if (n_created - n_finished > max_alive)
        max_alive = n_created - n_finished;
    /* The done-callback takes over the caller's reference. */
    if (evl_future_add_done(t, count_done, NULL) != 0) {
        fprintf(stderr, "evl_future_add_done failed\n");
        exit(2);
    }
    return t;
}

static intptr_t child(void *arg)
{
    (void)arg;
    evl_sleep(child_sleep_ns);
    return 0;
}

static intptr_t victim(void *arg)
{
    (void)arg;
    return evl_sleep(EVL_SEC(60)); /* cancelled long before */
}

struct plan {
    unsigned seconds, rate;
};

static intptr_t main_task(void *arg)
{
    const struct plan *p = arg;
    evl_loop *loop = evl_loop_current();
    uint64_t start = evl_now(loop);
    uint64_t period = EVL_SEC(1) / p->rate;
    uint64_t total = p->seconds ? (uint64_t)p->seconds * p->rate : UINT64_MAX;
    for (uint64_t i = 0; i < total && !stop; i++) {
        uint64_t due = start + i * period;
        uint64_t now = evl_now(loop);
        if (due > now)
            evl_sleep(due - now);
        if (i % p->rate == 0) {
            evl_task *v = spawn_counted(loop, "victim", victim, NULL);
            evl_yield();              /* let it start and suspend */
            evl_cancel(v);
        }
        spawn_counted(loop, "child", child, NULL);
        n_children++;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct plan p = {5, 200};
    unsigned sleep_ms = 2;
    if (argc > 1)
        p.seconds = (unsigned)strtoul(argv[1], NULL, 10);
    if (argc > 2)
        p.rate = (unsigned)strtoul(argv[2], NULL, 10);
    if (argc > 3)
        sleep_ms = (unsigned)strtoul(argv[3], NULL, 10);
    if (p.rate == 0 || p.rate > 1000000) {
        fprintf(stderr, "usage: %s [seconds [tasks_per_second [child_sleep_ms]]]\n", argv[0]);
        return 2;
    }
    child_sleep_ns = EVL_MS(sleep_ms);
    if (p.seconds == 0) {
        struct sigaction sa = {.sa_handler = on_stop};
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }

    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("pid=%ld\n", (long)getpid());
    fflush(stdout);

    evl_loop *loop = evl_loop_new(NULL);
    if (!loop) {
        perror("evl_loop_new");
        return 2;
    }
    evl_task *m = spawn_counted(loop, "main", main_task, &p);
    evl_future_ref(m);                /* keep it readable after count_done */
    intptr_t r = evl_run_until_complete(loop, m);
    evl_future_unref(m);
    evl_run(loop);                    /* drain the last children */
    int leaked = evl_loop_free(loop);

    printf("created=%lu finished=%lu cancelled=%lu children=%lu max_alive=%lu\n",
           n_created, n_finished, n_cancelled, n_children, max_alive);
    fflush(stdout);
    if (r != 0 || leaked != 0 || n_created != n_finished) {
        fprintf(stderr, "probe_target: main=%ld leaked=%d created=%lu finished=%lu\n",
                (long)r, leaked, n_created, n_finished);
        return 1;
    }
    return 0;
}
