/*
 * ordering.c -- the classic asyncio ordering examples, in libevl.  Each
 * scenario prints what happens and when; the comment above it is the
 * Python it mirrors, which prints the same lines in the same order
 * (tests/diff checks this kind of equivalence against CPython).  Runs on the
 * virtual clock, so it finishes at once and prints the same times every run.
 *
 * Usage: ordering
 */
#include "evl.h"

#include <stdio.h>

static evl_loop *loop;
static uint64_t t0;

static void say(const char *what)
{
    printf("  +%3llums  %s\n", (unsigned long long)((evl_now(loop) - t0) / 1000000), what);
}

struct job {
    const char *what;
    unsigned ms;
};

/* async def say_after(delay, what): await asyncio.sleep(delay); print(what) */
static intptr_t say_after(void *arg)
{
    struct job *j = arg;
    int rc = evl_sleep(EVL_MS(j->ms));
    if (rc < 0) {
        say("  (cancelled while sleeping: cleaning up)");
        return rc;
    }
    say(j->what);
    return (intptr_t)j->ms;
}

static void scenario(const char *title)
{
    printf("%s\n", title);
    t0 = evl_now(loop);
}

static intptr_t main_task(void *arg)
{
    /* await say_after(1, 'hello'); await say_after(2, 'world')  -> 3 s */
    scenario("1. awaiting coroutines one after the other: 100 ms + 200 ms");
    struct job hello = { "hello", 100 }, world = { "world", 200 };
    say_after(&hello);                /* a plain call: no task, runs in ours */
    say_after(&world);

    /* t1 = create_task(say_after(1, 'hello')); t2 = create_task(...)
     * await t1; await t2  -> 2 s: both were started before awaiting */
    scenario("2. tasks created first, then awaited: max(100, 200) ms");
    evl_task *t1 = evl_spawn(NULL, "hello", say_after, &hello);
    evl_task *t2 = evl_spawn(NULL, "world", say_after, &world);
    evl_await(t1);
    evl_await(t2);
    evl_future_unref(t1);
    evl_future_unref(t2);

    /* three tasks with delays 30, 10, 20 ms: they finish in delay order;
     * three with equal delays: in the order they were started */
    scenario("3. unequal delays wake in deadline order, equal ones in start order");
    struct job u[3] = { { "30 ms", 30 }, { "10 ms", 10 }, { "20 ms", 20 } };
    struct job e[3] = { { "equal A", 40 }, { "equal B", 40 }, { "equal C", 40 } };
    evl_task *ts[6];
    for (int i = 0; i < 3; i++) {
        ts[i] = evl_spawn(NULL, u[i].what, say_after, &u[i]);
        ts[3 + i] = evl_spawn(NULL, e[i].what, say_after, &e[i]);
    }
    evl_gather(ts, 6, 0, NULL);
    for (int i = 0; i < 6; i++)
        evl_future_unref(ts[i]);

    /* results = await gather(say_after(.03), say_after(.01), say_after(.02))
     * -> results in argument order, whatever the finishing order */
    scenario("4. gather: results in argument order, not finishing order");
    for (int i = 0; i < 3; i++)
        ts[i] = evl_spawn(NULL, u[i].what, say_after, &u[i]);
    intptr_t res[3];
    evl_gather(ts, 3, 0, res);
    say("gather returned:");
    printf("           [%ld, %ld, %ld]\n", (long)res[0], (long)res[1], (long)res[2]);
    for (int i = 0; i < 3; i++)
        evl_future_unref(ts[i]);

    /* t = create_task(say_after(1, 'never')); await sleep(.05); t.cancel()
     * try: await t  except CancelledError: print('cancelled') */
    scenario("5. cancelling a sleeping task");
    struct job never = { "never printed", 1000 };
    evl_task *t = evl_spawn(NULL, "never", say_after, &never);
    evl_sleep(EVL_MS(50));
    say("cancel it");
    evl_cancel(t);
    intptr_t r = evl_await(t);
    say(r == EVL_ECANCELED ? "its await says: cancelled" : "its await says: finished?");
    evl_future_unref(t);
    return 0;
}

int main(void)
{
    evl_loop_options o;
    evl_loop_options_init(&o);
    o.flags |= EVL_LOOP_VIRTUAL_CLOCK;
    loop = evl_loop_new(&o);
    if (!loop) {
        perror("evl_loop_new");
        return 1;
    }
    evl_task *m = evl_spawn(loop, "main", main_task, NULL);
    intptr_t r = evl_run_until_complete(loop, m);
    evl_future_unref(m);
    evl_loop_free(loop);
    return r == 0 ? 0 : 1;
}
