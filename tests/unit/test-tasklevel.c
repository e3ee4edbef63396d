/*
 * test-tasklevel.c -- the task-level API (evl.h's "task-level asyncio API"
 * section): error paths, reference and memory bookkeeping, what a tracer
 * sees of the new waits, and loops freed while tasks are inside them.  The
 * orderings themselves are checked against CPython by tests/diff
 * (tasks_* scenarios).
 */
#define _GNU_SOURCE
#include "task.h"
#include "evl-internal.h"
#include "batch_rec.h"

#include <errno.h>

static intptr_t run_main(evl_task_fn fn, void *arg)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    evl_task *t = evl_spawn(loop, "main", fn, arg);
    ASSERT_NOT_NULL(t);
    intptr_t r = evl_run_until_complete(loop, t);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return r;
}

static intptr_t sleep_ms(void *arg)
{
    return evl_sleep(EVL_MS((intptr_t)arg));
}

static intptr_t sleep_then_fail(void *arg)
{
    intptr_t r = evl_sleep(EVL_MS((intptr_t)arg));
    return r < 0 ? r : -EIO;
}

/* ------------------------------------------------- cancelling / uncancel */

static intptr_t cancelling_main(void *arg)
{
    evl_future *plain = evl_future_new(NULL);
    ASSERT_ERR(evl_task_cancelling(plain), EVL_EINVAL);
    ASSERT_ERR(evl_task_uncancel(plain), EVL_EINVAL);
    evl_future_unref(plain);
    ASSERT_EQ(evl_task_cancelling(NULL), 0);
    ASSERT_EQ(evl_task_cancelling(evl_current_task()), 0);

    evl_task *t = evl_spawn(NULL, "sleeper", sleep_ms, (void *)1000);
    ASSERT_EQ(evl_sleep(0), 0);                  /* it sleeps now */
    ASSERT_EQ(evl_cancel(t), 1);
    ASSERT_EQ(evl_cancel(t), 1);
    ASSERT_EQ(evl_task_cancelling(t), 2);
    ASSERT_EQ(evl_task_uncancel(t), 1);
    ASSERT_EQ(evl_task_uncancel(t), 0);
    ASSERT_EQ(evl_task_uncancel(t), 0);          /* never below 0 */
    /* 3.11: uncancel changes the count only; the request is delivered. */
    ASSERT_ERR(evl_await(t), EVL_ECANCELED);
    ASSERT_EQ(evl_task_state(t), EVL_TASK_CANCELLED);
    ASSERT_EQ(evl_cancel(t), 0);                 /* done: not counted */
    ASSERT_EQ(evl_task_cancelling(t), 0);
    evl_future_unref(t);
    return 0;
}

TEST_IMPL(tasklevel_cancelling)
{
    ASSERT_ERR(evl_task_cancelling(NULL), EVL_ENOTTASK);
    ASSERT_ERR(evl_task_uncancel(NULL), EVL_ENOTTASK);
    ASSERT_EQ(run_main(cancelling_main, NULL), 0);
    return 0;
}

/* ------------------------------------------------------------------ shield */

static intptr_t shield_main(void *arg)
{
    errno = 0;
    ASSERT_NULL(evl_shield(NULL));
    ASSERT_EQ(errno, EINVAL);

    /* Done: the future itself, one more reference. */
    evl_future *f = evl_future_new(NULL);
    ASSERT_EQ(evl_future_set_result(f, 3), 0);
    uint32_t refs = f->refs;
    evl_future *s = evl_shield(f);
    ASSERT_PTR_EQ(s, f);
    ASSERT_EQ(f->refs, refs + 1);
    evl_future_unref(s);
    evl_future_unref(f);

    /* Cancelling the outer future directly leaves inner alone. */
    evl_task *inner = evl_spawn(NULL, "inner", sleep_ms, (void *)10);
    s = evl_shield(inner);
    ASSERT_NOT_NULL(s);
    ASSERT_PTR_NE(s, inner);
    ASSERT_EQ(evl_is_task(s), 0);
    ASSERT_EQ(evl_cancel(s), 1);
    ASSERT_ERR(evl_await(s), EVL_ECANCELED);
    ASSERT_EQ(evl_future_state(inner), EVL_FUTURE_PENDING);
    ASSERT_EQ(evl_task_cancelling(inner), 0);
    evl_future_unref(s);
    ASSERT_EQ(evl_await(inner), 0);
    evl_future_unref(inner);

    /* The program drops the outer future while inner runs: the shield
     * lives until inner is done (heap checked by the caller). */
    inner = evl_spawn(NULL, "inner2", sleep_ms, (void *)10);
    s = evl_shield(inner);
    evl_future_unref(s);
    ASSERT_EQ(evl_await(inner), 0);
    evl_future_unref(inner);

    /* An error passes through and counts as retrieved on inner. */
    inner = evl_spawn(NULL, "bad", sleep_then_fail, (void *)10);
    s = evl_shield(inner);
    ASSERT_ERR(evl_await(s), -EIO);
    ASSERT_EQ(inner->retrieved, 1);
    evl_future_unref(s);
    evl_future_unref(inner);
    return 0;
}

TEST_IMPL(tasklevel_shield)
{
    size_t heap0 = test_heap_in_use();
    ASSERT_EQ(run_main(shield_main, NULL), 0);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}

/* -------------------------------------------------------------------- wait */

static evl_loop *other_loop;

static intptr_t wait_errors_main(void *arg)
{
    evl_future *f = evl_future_new(NULL);
    evl_future *foreign = evl_future_new(other_loop);
    evl_future *d[2], *p[2];
    size_t nd = 99, np = 99;
    ASSERT_ERR(evl_wait(&f, 0, EVL_ALL_COMPLETED, EVL_NO_TIMEOUT, d, &nd, p, &np), EVL_EINVAL);
    ASSERT_EQ(nd, 0);
    ASSERT_EQ(np, 0);
    ASSERT_ERR(evl_wait(&f, 1, 3, EVL_NO_TIMEOUT, d, &nd, p, &np), EVL_EINVAL);
    ASSERT_ERR(evl_wait(&f, 1, -1, EVL_NO_TIMEOUT, d, &nd, p, &np), EVL_EINVAL);
    ASSERT_ERR(evl_wait(NULL, 1, EVL_ALL_COMPLETED, EVL_NO_TIMEOUT, d, &nd, p, &np), EVL_EINVAL);
    evl_future *withnull[2] = {f, NULL};
    ASSERT_ERR(evl_wait(withnull, 2, EVL_ALL_COMPLETED, 0, d, &nd, p, &np), EVL_EINVAL);
    evl_future *mixed[2] = {f, foreign};
    ASSERT_ERR(evl_wait(mixed, 2, EVL_ALL_COMPLETED, 0, d, &nd, p, &np), EVL_EWRONGLOOP);
    ASSERT_EQ(f->holds, 0);                      /* nothing was registered */

    /* timeout 0: returns at the next iterations with f pending. */
    nd = np = 99;
    ASSERT_EQ(evl_wait(&f, 1, EVL_ALL_COMPLETED, 0, d, &nd, p, &np), 0);
    ASSERT_EQ(nd, 0);
    ASSERT_EQ(np, 1);
    ASSERT_PTR_EQ(p[0], f);
    ASSERT_EQ(f->holds, 0);                      /* its callback is gone */
    /* NULL arrays and counts are fine. */
    ASSERT_EQ(evl_future_set_result(f, 1), 0);
    ASSERT_EQ(evl_wait(&f, 1, EVL_FIRST_COMPLETED, EVL_NO_TIMEOUT, NULL, NULL, NULL, NULL), 0);
    evl_future_unref(f);
    evl_future_unref(foreign);
    return 0;
}

TEST_IMPL(tasklevel_wait_errors)
{
    evl_future *f = NULL;
    size_t nd = 5;
    ASSERT_ERR(evl_wait(&f, 1, EVL_ALL_COMPLETED, EVL_NO_TIMEOUT, NULL, &nd, NULL, NULL),
               EVL_ENOTTASK);
    ASSERT_EQ(nd, 0);
    size_t heap0 = test_heap_in_use();
    other_loop = test_loop(0, 0);
    ASSERT_EQ(run_main(wait_errors_main, NULL), 0);
    ASSERT_LOOP_FREE(other_loop, 0);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}

/* A task cancelled in evl_wait: EVL_ECANCELED, no counts, its callbacks
 * are off the futures, which go on. */
static intptr_t wait_cancelled_waiter(void *arg)
{
    evl_future **fs = arg;
    size_t nd = 9, np = 9;
    evl_future *d[2], *p[2];
    intptr_t r = evl_wait(fs, 2, EVL_ALL_COMPLETED, EVL_SEC(5), d, &nd, p, &np);
    ASSERT_EQ(nd, 0);
    ASSERT_EQ(np, 0);
    return r;
}

static intptr_t wait_cancel_main(void *arg)
{
    evl_future *fs[2] = {evl_future_new(NULL), evl_spawn(NULL, "s", sleep_ms, (void *)50)};
    evl_task *w = evl_spawn(NULL, "waiter", wait_cancelled_waiter, fs);
    ASSERT_EQ(evl_sleep(EVL_MS(10)), 0);
    ASSERT_EQ(evl_task_state(w), EVL_TASK_SUSPENDED);
    ASSERT_EQ(evl_cancel(w), 1);
    ASSERT_ERR(evl_await(w), EVL_ECANCELED);
    ASSERT_NULL(fs[0]->cbs_head);
    ASSERT_EQ(fs[0]->holds, 0);
    ASSERT_EQ(evl_future_state(fs[1]), EVL_FUTURE_PENDING);
    ASSERT_EQ(evl_await(fs[1]), 0);
    /* Its 5 s timer went with it: the loop ends at 50 ms (the caller
     * checks). */
    evl_future_unref(w);
    evl_future_unref(fs[0]);
    evl_future_unref(fs[1]);
    return 0;
}

TEST_IMPL(tasklevel_wait_cancelled)
{
    size_t heap0 = test_heap_in_use();
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    uint64_t t0 = evl_now(loop);
    evl_task *t = evl_spawn(loop, "main", wait_cancel_main, NULL);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_U64_EQ(evl_now(loop) - t0, EVL_MS(50));
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}

/* ------------------------------------------------------------ as_completed */

static evl_as_completed *ac_shared;

static intptr_t ac_second_reader(void *arg)
{
    evl_future *got;
    ASSERT_ERR(evl_as_completed_next(ac_shared, &got), EVL_EBUSY);
    ASSERT_NULL(got);
    ASSERT_ERR(evl_as_completed_free(ac_shared), EVL_EBUSY);
    return 0;
}

static intptr_t ac_reader(void *arg)
{
    evl_future *got;
    return evl_as_completed_next(ac_shared, &got);
}

static intptr_t as_completed_main(void *arg)
{
    errno = 0;
    evl_future *none = NULL;
    ASSERT_NULL(evl_as_completed_new(NULL, NULL, 1, EVL_NO_TIMEOUT));
    ASSERT_EQ(errno, EINVAL);
    ASSERT_NULL(evl_as_completed_new(NULL, &none, 1, EVL_NO_TIMEOUT));
    evl_future *foreign = evl_future_new(other_loop);
    ASSERT_NULL(evl_as_completed_new(NULL, &foreign, 1, EVL_NO_TIMEOUT));
    evl_future_unref(foreign);

    /* Empty: done at once. */
    evl_as_completed *it = evl_as_completed_new(NULL, NULL, 0, EVL_SEC(1));
    ASSERT_NOT_NULL(it);
    evl_future *got = (evl_future *)1;
    ASSERT_ERR(evl_as_completed_next(it, &got), EVL_EDONE);
    ASSERT_NULL(got);
    ASSERT_EQ(evl_as_completed_free(it), 0);
    ASSERT_EQ(evl_as_completed_free(NULL), 0);
    ASSERT_ERR(evl_as_completed_next(NULL, &got), EVL_EINVAL);

    /* One reader at a time; a cancelled next consumes nothing. */
    evl_future *f = evl_future_new(NULL);
    ac_shared = evl_as_completed_new(NULL, &f, 1, EVL_NO_TIMEOUT);
    ASSERT_NOT_NULL(ac_shared);
    ASSERT_EQ(f->refs, 2);                       /* the iterator's reference */
    evl_task *r1 = evl_spawn(NULL, "reader", ac_reader, NULL);
    ASSERT_EQ(evl_sleep(0), 0);                  /* r1 waits in next */
    evl_task *r2 = evl_spawn(NULL, "second", ac_second_reader, NULL);
    ASSERT_EQ(evl_await(r2), 0);
    evl_future_unref(r2);
    ASSERT_EQ(evl_cancel(r1), 1);
    ASSERT_ERR(evl_await(r1), EVL_ECANCELED);
    evl_future_unref(r1);
    ASSERT_EQ(evl_future_set_result(f, 4), 0);
    ASSERT_EQ(evl_as_completed_next(ac_shared, &got), 4);
    ASSERT_PTR_EQ(got, f);
    ASSERT_ERR(evl_as_completed_next(ac_shared, &got), EVL_EDONE);
    ASSERT_EQ(evl_as_completed_free(ac_shared), 0);
    ASSERT_EQ(f->refs, 1);
    evl_future_unref(f);

    /* Freed before the futures complete: they go on, nothing is left on them. */
    evl_task *t = evl_spawn(NULL, "t", sleep_ms, (void *)10);
    it = evl_as_completed_new(NULL, &t, 1, EVL_MS(5));
    ASSERT_EQ(evl_as_completed_free(it), 0);
    ASSERT_NULL(t->cbs_head);
    ASSERT_EQ(evl_await(t), 0);
    evl_future_unref(t);
    return 0;
}

TEST_IMPL(tasklevel_as_completed_errors)
{
    evl_future *got = (evl_future *)1;
    ASSERT_ERR(evl_as_completed_next(NULL, &got), EVL_ENOTTASK);
    ASSERT_NULL(got);
    size_t heap0 = test_heap_in_use();
    other_loop = test_loop(0, 0);
    ASSERT_EQ(run_main(as_completed_main, NULL), 0);
    ASSERT_LOOP_FREE(other_loop, 0);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}

/* evl.h's evl_await: EVL_ECANCELED for "I was cancelled" and for "what I
 * awaited was cancelled", told apart by evl_task_cancelling(NULL). */
static int whose_cancelling = -1;

static intptr_t whose_waiter(void *arg)
{
    intptr_t r = evl_await(arg);
    whose_cancelling = evl_task_cancelling(NULL);
    return r == EVL_ECANCELED && whose_cancelling > 0 ? r : 0;   /* evl.h's pattern */
}

static intptr_t whose_main(void *arg)
{
    for (int mode = 0; mode < 3; mode++) {
        evl_task *child = evl_spawn(NULL, "child", sleep_ms, (void *)1000);
        evl_task *w = evl_spawn(NULL, "waiter", whose_waiter, child);
        ASSERT_EQ(evl_sleep(0), 0);              /* both wait now */
        whose_cancelling = -1;
        if (mode == 0) {                         /* the child is cancelled */
            ASSERT_EQ(evl_cancel(child), 1);
            ASSERT_EQ(evl_await(w), 0);
            ASSERT_EQ(whose_cancelling, 0);
        } else if (mode == 1) {                  /* the waiter is */
            ASSERT_EQ(evl_cancel(w), 1);         /* (which cancels the child) */
            ASSERT_ERR(evl_await(w), EVL_ECANCELED);
            ASSERT_EQ(whose_cancelling, 1);
        } else {                                 /* the child, then the waiter */
            ASSERT_EQ(evl_cancel(child), 1);
            ASSERT_EQ(evl_sleep(0), 0);          /* the child ends; w is woken */
            ASSERT_EQ(evl_task_state(child), EVL_TASK_CANCELLED);
            ASSERT_EQ(evl_task_state(w), EVL_TASK_READY);
            ASSERT_EQ(evl_cancel(w), 1);
            ASSERT_ERR(evl_await(w), EVL_ECANCELED);
            ASSERT_EQ(whose_cancelling, 1);
        }
        ASSERT_EQ(evl_task_state(child), EVL_TASK_CANCELLED);
        evl_future_unref(child);
        evl_future_unref(w);
    }
    return 0;
}

TEST_IMPL(tasklevel_await_cancel_whose)
{
    ASSERT_EQ(run_main(whose_main, NULL), 0);
    return 0;
}

/* ----------------------------------------------------------------- timeout */

static evl_timeout *tm_shared;

static intptr_t tm_stranger(void *arg)
{
    ASSERT_ERR(evl_timeout_exit(tm_shared, 0), EVL_EINVAL);
    /* Anyone may reschedule. */
    ASSERT_EQ(evl_timeout_reschedule(tm_shared, EVL_NO_TIMEOUT), 0);
    return 0;
}

static intptr_t timeout_main(void *arg)
{
    evl_loop *loop = evl_loop_current();
    evl_timeout tm;
    ASSERT_EQ(evl_timeout_enter(&tm, EVL_MS(10)), 0);
    ASSERT_U64_EQ(evl_timeout_when(&tm), evl_now(loop) + EVL_MS(10));
    tm_shared = &tm;
    evl_task *s = evl_spawn(NULL, "stranger", tm_stranger, NULL);
    ASSERT_EQ(evl_await(s), 0);                  /* now without deadline */
    evl_future_unref(s);
    ASSERT_EQ(evl_sleep(EVL_MS(20)), 0);
    ASSERT_EQ(evl_timeout_exit(&tm, 5), 5);
    ASSERT_EQ(evl_timeout_expired(&tm), 0);
    ASSERT_ERR(evl_timeout_exit(&tm, 0), EVL_EINVAL);           /* twice */
    ASSERT_ERR(evl_timeout_reschedule(&tm, EVL_NO_TIMEOUT), EVL_EINVAL);
    ASSERT_ERR(evl_timeout_reschedule(NULL, 0), EVL_EINVAL);
    ASSERT_ERR(evl_timeout_exit(NULL, 0), EVL_EINVAL);

    /* Expired, body swallowed it and returns a value: no conversion; an
     * expired scope cannot be rescheduled. */
    ASSERT_EQ(evl_timeout_enter(&tm, EVL_MS(10)), 0);
    ASSERT_ERR(evl_sleep(EVL_SEC(1)), EVL_ECANCELED);
    ASSERT_EQ(evl_timeout_expired(&tm), 1);
    ASSERT_EQ(evl_task_cancelling(NULL), 1);
    ASSERT_ERR(evl_timeout_reschedule(&tm, EVL_NO_TIMEOUT), EVL_EINVAL);
    ASSERT_EQ(evl_timeout_exit(&tm, 7), 7);
    ASSERT_EQ(evl_task_cancelling(NULL), 0);
    /* Expired and the body failed otherwise: the error stays. */
    ASSERT_EQ(evl_timeout_enter(&tm, 0), 0);
    ASSERT_ERR(evl_sleep(0), EVL_ECANCELED);
    ASSERT_ERR(evl_timeout_exit(&tm, -EIO), -EIO);
    ASSERT_EQ(evl_task_cancelling(NULL), 0);
    /* Left before its call_soon expiry ran: it never fires. */
    ASSERT_EQ(evl_timeout_enter(&tm, 0), 0);
    ASSERT_EQ(evl_timeout_exit(&tm, 0), 0);
    ASSERT_EQ(evl_sleep(0), 0);
    ASSERT_EQ(evl_sleep(0), 0);
    ASSERT_EQ(evl_task_cancelling(NULL), 0);
    /* A delay that overflows the clock is no deadline. */
    ASSERT_EQ(evl_timeout_enter(&tm, UINT64_MAX - 1), 0);
    ASSERT_U64_EQ(evl_timeout_when(&tm), EVL_NO_TIMEOUT);
    ASSERT_EQ(evl_timeout_exit(&tm, 0), 0);
    ASSERT_EQ(loop->timers.n, 0);
    return 0;
}

TEST_IMPL(tasklevel_timeout_errors)
{
    evl_timeout tm;
    ASSERT_ERR(evl_timeout_enter(&tm, EVL_MS(1)), EVL_ENOTTASK);
    ASSERT_ERR(evl_timeout_enter_at(&tm, 0), EVL_ENOTTASK);
    ASSERT_ERR(evl_timeout_exit(&tm, 0), EVL_ENOTTASK);
    size_t heap0 = test_heap_in_use();
    ASSERT_EQ(run_main(timeout_main, NULL), 0);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}

/* Current asyncio's rule (CPython 3.11.7, 3.12+): at exit an expired scope
 * compares the count left after its uncancel with the count when it was
 * entered, not with 0 (3.11.2's rule, which libevl followed before). */
static intptr_t timeout_cancelling_main(void *arg)
{
    evl_timeout tm;
    /* A cancellation caught and not uncancelled: the count stays 1. */
    ASSERT_EQ(evl_cancel(evl_current_task()), 1);
    ASSERT_ERR(evl_sleep(0), EVL_ECANCELED);
    ASSERT_EQ(evl_task_cancelling(NULL), 1);

    /* Entered at 1, expires (2), exit withdraws its request (1): the
     * timeout is this scope's (3.11.2: EVL_ECANCELED). */
    ASSERT_EQ(evl_timeout_enter(&tm, EVL_MS(10)), 0);
    ASSERT_ERR(evl_sleep(EVL_SEC(1)), EVL_ECANCELED);
    ASSERT_EQ(evl_task_cancelling(NULL), 2);
    ASSERT_ERR(evl_timeout_exit(&tm, EVL_ECANCELED), EVL_ETIMEDOUT);
    ASSERT_EQ(evl_task_cancelling(NULL), 1);

    /* Entered at 1, cancelled from elsewhere (2), then expired (3): one
     * request newer than the scope is left, the cancellation stays. */
    ASSERT_EQ(evl_timeout_enter(&tm, 0), 0);
    ASSERT_EQ(evl_cancel(evl_current_task()), 1);
    ASSERT_ERR(evl_sleep(0), EVL_ECANCELED);     /* the expiry runs first */
    ASSERT_EQ(evl_timeout_expired(&tm), 1);
    ASSERT_EQ(evl_task_cancelling(NULL), 3);
    ASSERT_ERR(evl_timeout_exit(&tm, EVL_ECANCELED), EVL_ECANCELED);
    ASSERT_EQ(evl_task_cancelling(NULL), 2);
    ASSERT_EQ(evl_task_uncancel(NULL), 1);

    /* Entered at 1, the old request withdrawn inside (0), expired (1):
     * below the entry count after exit's uncancel is a timeout too. */
    ASSERT_EQ(evl_timeout_enter(&tm, EVL_MS(10)), 0);
    ASSERT_EQ(evl_task_uncancel(NULL), 0);
    ASSERT_ERR(evl_sleep(EVL_SEC(1)), EVL_ECANCELED);
    ASSERT_ERR(evl_timeout_exit(&tm, EVL_ECANCELED), EVL_ETIMEDOUT);
    ASSERT_EQ(evl_task_cancelling(NULL), 0);

    /* Entered at 1 and not expired: the body's cancellation is its own. */
    ASSERT_EQ(evl_cancel(evl_current_task()), 1);
    ASSERT_ERR(evl_sleep(0), EVL_ECANCELED);
    ASSERT_EQ(evl_timeout_enter(&tm, EVL_SEC(1)), 0);
    ASSERT_ERR(evl_timeout_exit(&tm, EVL_ECANCELED), EVL_ECANCELED);
    ASSERT_EQ(evl_timeout_expired(&tm), 0);
    ASSERT_EQ(evl_task_cancelling(NULL), 1);
    ASSERT_EQ(evl_task_uncancel(NULL), 0);
    return 0;
}

TEST_IMPL(tasklevel_timeout_cancelling)
{
    size_t heap0 = test_heap_in_use();
    ASSERT_EQ(run_main(timeout_cancelling_main, NULL), 0);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}

/* --------------------------------------------------------------- taskgroup */

static evl_taskgroup *tg_shared;

static intptr_t tg_stranger(void *arg)
{
    ASSERT_ERR(evl_taskgroup_exit(tg_shared, 0), EVL_EINVAL);
    return 0;
}

static intptr_t taskgroup_main(void *arg)
{
    errno = 0;
    ASSERT_NULL(evl_taskgroup_spawn(NULL, "x", sleep_ms, NULL));
    ASSERT_EQ(errno, EINVAL);

    /* Only the parent exits, once. */
    evl_taskgroup *g = evl_taskgroup_new();
    ASSERT_NOT_NULL(g);
    tg_shared = g;
    evl_task *s = evl_spawn(NULL, "stranger", tg_stranger, NULL);
    ASSERT_EQ(evl_await(s), 0);
    evl_future_unref(s);
    ASSERT_EQ(evl_taskgroup_exit(g, 0), 0);
    ASSERT_ERR(evl_taskgroup_exit(g, 0), EVL_EINVAL);
    ASSERT_EQ(evl_taskgroup_errors(g, NULL, 0), 0);
    evl_taskgroup_free(g);
    evl_taskgroup_free(NULL);

    /* 20 failures: all counted, the first EVL_TASKGROUP_ERRORS kept; once
     * shutting down, spawning is refused. */
    g = evl_taskgroup_new();
    for (int i = 0; i < 20; i++)
        evl_future_unref(evl_taskgroup_spawn(g, "bad", sleep_then_fail, (void *)10));
    ASSERT_ERR(evl_sleep(EVL_SEC(1)), EVL_ECANCELED);
    errno = 0;
    ASSERT_NULL(evl_taskgroup_spawn(g, "late", sleep_ms, NULL));
    ASSERT_EQ(errno, ECANCELED);
    ASSERT_ERR(evl_taskgroup_exit(g, EVL_ECANCELED), EVL_EGROUP);
    int errs[EVL_TASKGROUP_ERRORS + 4];
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
        errs[i] = 1;
    ASSERT_EQ(evl_taskgroup_errors(g, errs, sizeof errs / sizeof errs[0]), 20);
    for (int i = 0; i < EVL_TASKGROUP_ERRORS; i++)
        ASSERT_ERR(errs[i], -EIO);
    ASSERT_EQ(errs[EVL_TASKGROUP_ERRORS], 1);    /* not written */
    ASSERT_EQ(evl_task_cancelling(NULL), 0);
    evl_taskgroup_free(g);

    /* A body error is appended after the children's; the group keeps the
     * parent's count untouched when it did not cancel it.  Alone, it is a
     * group error all the same (asyncio wraps it in an ExceptionGroup). */
    g = evl_taskgroup_new();
    evl_future_unref(evl_taskgroup_spawn(g, "ok", sleep_ms, (void *)10));
    ASSERT_ERR(evl_taskgroup_exit(g, -ENOENT), EVL_EGROUP);
    ASSERT_EQ(evl_taskgroup_errors(g, errs, 1), 1);
    ASSERT_ERR(errs[0], -ENOENT);
    evl_taskgroup_free(g);

    /* One child failing is an ExceptionGroup of one; a plain cancellation
     * from elsewhere is not a group error. */
    g = evl_taskgroup_new();
    evl_future_unref(evl_taskgroup_spawn(g, "bad", sleep_then_fail, (void *)10));
    ASSERT_ERR(evl_taskgroup_exit(g, 0), EVL_EGROUP);
    ASSERT_EQ(evl_taskgroup_errors(g, errs, 2), 1);
    ASSERT_ERR(errs[0], -EIO);
    /* The group's request came while exit waited: 3.11 leaves it counted
     * (tasks_taskgroup_exit_error). */
    ASSERT_EQ(evl_task_uncancel(NULL), 0);
    evl_taskgroup_free(g);
    g = evl_taskgroup_new();
    evl_future_unref(evl_taskgroup_spawn(g, "ok", sleep_ms, (void *)10));
    ASSERT_EQ(evl_cancel(evl_current_task()), 1);
    ASSERT_ERR(evl_taskgroup_exit(g, 0), EVL_ECANCELED);
    ASSERT_EQ(evl_taskgroup_errors(g, NULL, 0), 0);
    ASSERT_EQ(evl_task_uncancel(NULL), 0);
    evl_taskgroup_free(g);

    /* Freed without exit while a child runs: the child goes on and the
     * group is released after it (heap checked by the caller). */
    g = evl_taskgroup_new();
    evl_task *c = evl_taskgroup_spawn(g, "child", sleep_ms, (void *)10);
    evl_taskgroup_free(g);
    ASSERT_EQ(evl_await(c), 0);
    evl_future_unref(c);
    ASSERT_EQ(evl_sleep(0), 0);                  /* its done-callback runs */
    return 0;
}

TEST_IMPL(tasklevel_taskgroup_errors)
{
    errno = 0;
    ASSERT_NULL(evl_taskgroup_new());
    ASSERT_EQ(errno, EPERM);
    ASSERT_ERR(evl_taskgroup_exit(NULL, 0), EVL_ENOTTASK);
    size_t heap0 = test_heap_in_use();
    ASSERT_EQ(run_main(taskgroup_main, NULL), 0);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}

/* ------------------------------------------------------ tracer's view */

/* What a tracer sees (the batch semaphore raised by hand, as a tracer
 * would; with the virtual clock and no fds no poll hands the buffer over,
 * so every record of the run stays in it). */
#ifdef EVL_PROBES
static void check_suspend(uint64_t task, int reason, uint64_t obj)
{
    const struct evl_rec *r = last_rec(evl_loop_current(), EVL_PROBE_ID_task_suspend, task);
    ASSERT_NOT_NULL(r);
    ASSERT_EQ(r->a32, reason);
    ASSERT_U64_EQ(r->a0, obj);
}

static void check_wake(uint64_t task, int kind)
{
    const struct evl_rec *r = last_rec(evl_loop_current(), EVL_PROBE_ID_task_wake, task);
    ASSERT_NOT_NULL(r);
    ASSERT_EQ(r->a32, kind);
}

enum { TW_WAIT, TW_AC, TW_TG, TW_SHIELD, TW_TIMEOUT, TW_SHIELD_CANCEL, TW_N };

struct tw {
    int which;
    evl_future *fut;          /* what the waiter waits for */
    evl_taskgroup *g;
};

static intptr_t tw_waiter(void *arg)
{
    struct tw *w = arg;
    switch (w->which) {
    case TW_WAIT: {
        size_t nd;
        ASSERT_EQ(evl_wait(&w->fut, 1, EVL_ALL_COMPLETED, EVL_NO_TIMEOUT, NULL, &nd, NULL, NULL),
                  0);
        ASSERT_EQ(nd, 1);
        break;
    }
    case TW_AC: {
        evl_as_completed *it = evl_as_completed_new(NULL, &w->fut, 1, EVL_NO_TIMEOUT);
        ASSERT_EQ(evl_as_completed_next(it, NULL), 1);
        ASSERT_EQ(evl_as_completed_free(it), 0);
        break;
    }
    case TW_TG: {
        w->g = evl_taskgroup_new();
        evl_future_unref(evl_taskgroup_spawn(w->g, "child", sleep_ms, (void *)10));
        ASSERT_EQ(evl_taskgroup_exit(w->g, 0), 0);
        evl_taskgroup_free(w->g);
        break;
    }
    case TW_SHIELD:
    case TW_SHIELD_CANCEL: {
        evl_future *s = evl_shield(w->fut);
        intptr_t r = evl_await(s);
        ASSERT_EQ(r, w->which == TW_SHIELD ? 0 : EVL_ECANCELED);
        evl_future_unref(s);
        break;
    }
    case TW_TIMEOUT: {
        evl_timeout tm;
        ASSERT_EQ(evl_timeout_enter(&tm, EVL_MS(5)), 0);
        ASSERT_ERR(evl_timeout_exit(&tm, evl_sleep(EVL_MS(10))), EVL_ETIMEDOUT);
        break;
    }
    }
    return 0;
}

static intptr_t tw_main(void *arg)
{
    for (int which = 0; which < TW_N; which++) {
        struct tw w = { which, NULL, NULL };
        if (which == TW_WAIT || which == TW_AC)
            w.fut = evl_future_new(NULL);
        else if (which == TW_SHIELD || which == TW_SHIELD_CANCEL)
            w.fut = evl_spawn(NULL, "inner", sleep_ms, (void *)10);
        evl_task *t = evl_spawn(NULL, "waiter", tw_waiter, &w);
        uint64_t id = evl_task_id(t);
        ASSERT_EQ(evl_sleep(0), 0);              /* it is suspended now */
        ASSERT_EQ(evl_task_state(t), EVL_TASK_SUSPENDED);
        evl_future *waited = evl__task_of(t)->fut_waiter;
        ASSERT_NOT_NULL(waited);
        switch (which) {
        case TW_WAIT:
        case TW_AC:
            check_suspend(id, EVL_SUSPEND_WAIT, (uintptr_t)waited);
            ASSERT_EQ(evl_future_set_result(w.fut, 1), 0);
            break;
        case TW_TG:
            check_suspend(id, EVL_SUSPEND_TASKGROUP, (uintptr_t)w.g);
            break;
        case TW_SHIELD:
        case TW_SHIELD_CANCEL:
            /* The shield keeps the reason and object of what it wraps. */
            check_suspend(id, EVL_SUSPEND_TASK, evl_task_id(w.fut));
            if (which == TW_SHIELD_CANCEL)
                ASSERT_EQ(evl_cancel(t), 1);
            break;
        case TW_TIMEOUT: {
            const struct evl_rec *r =
                last_rec(evl_loop_current(), EVL_PROBE_ID_task_suspend, id);
            ASSERT_NOT_NULL(r);
            ASSERT_EQ(r->a32, EVL_SUSPEND_SLEEP);
            ASSERT_U64_EQ(r->a1, EVL_MS(10));
            break;
        }
        }
        ASSERT_EQ(evl_await(t), 0);
        static const int waker[TW_N] = {
            [TW_WAIT] = EVL_WAKER_WAIT,
            [TW_AC] = EVL_WAKER_WAIT,
            [TW_TG] = EVL_WAKER_TASKGROUP,
            [TW_SHIELD] = EVL_WAKER_TASK,
            [TW_TIMEOUT] = EVL_WAKER_CANCEL,
            [TW_SHIELD_CANCEL] = EVL_WAKER_CANCEL,
        };
        check_wake(id, waker[which]);
        if (which == TW_SHIELD_CANCEL)
            ASSERT_EQ(evl_await(w.fut), 0);      /* inner went on */
        evl_future_unref(t);
        evl_future_unref(w.fut);
    }
    return 0;
}
#endif

TEST_IMPL(tasklevel_trace_records)
{
#ifdef EVL_PROBES
    evl_batch_semaphore++;                       /* as a tracer would */
    intptr_t r = run_main(tw_main, NULL);
    evl_batch_semaphore--;
    ASSERT_EQ(r, 0);
#endif
    return 0;
}

/* ------------------------------------------------- loop freed meanwhile */

/* Tasks still inside wait, as_completed, a task group's exit or a timeout
 * scope when the loop is freed: each leaks (pending at close), nothing
 * touches freed memory and the helpers' memory is released (the sanitizer
 * build checks both; the heap count here).  (A shield awaited there is the
 * task's own reference, lost with its frame, as a gather's would be.) */
static intptr_t stuck_wait(void *arg)
{
    evl_future *f = arg;
    return evl_wait(&f, 1, EVL_ALL_COMPLETED, EVL_SEC(100), NULL, NULL, NULL, NULL);
}

static evl_as_completed *stuck_it;

static intptr_t stuck_ac(void *arg)
{
    evl_future *f = arg;
    stuck_it = evl_as_completed_new(NULL, &f, 1, EVL_SEC(100));
    return evl_as_completed_next(stuck_it, NULL);
}

static intptr_t stuck_tg(void *arg)
{
    evl_taskgroup *g = evl_taskgroup_new();
    evl_future_unref(evl_taskgroup_spawn(g, "child", sleep_ms, (void *)100000));
    intptr_t r = evl_taskgroup_exit(g, 0);
    evl_taskgroup_free(g);
    return r;
}

static intptr_t stuck_timeout(void *arg)
{
    evl_timeout tm;
    evl_timeout_enter(&tm, EVL_SEC(100));
    return evl_timeout_exit(&tm, evl_await(arg));
}

static void stop_soon(evl_loop *loop, void *arg)
{
    evl_stop(loop);
}

TEST_IMPL(tasklevel_loop_free_inside)
{
    size_t heap0 = test_heap_in_use();
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    evl_future *f = evl_future_new(loop);
    evl_task *ts[] = {
        evl_spawn(loop, "wait", stuck_wait, f),
        evl_spawn(loop, "ac", stuck_ac, f),
        evl_spawn(loop, "tg", stuck_tg, NULL),
        evl_spawn(loop, "timeout", stuck_timeout, f),
    };
    ASSERT_EQ(evl_call_later(loop, EVL_MS(1), stop_soon, NULL), 0);
    ASSERT_EQ(evl_run(loop), 0);
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        ASSERT_EQ(evl_task_state(ts[i]), EVL_TASK_SUSPENDED);
    /* The four and the task group's child. */
    ASSERT_LOOP_FREE(loop, 5);
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        evl_future_unref(ts[i]);
    /* As documented: an iterator may be freed after its loop. */
    ASSERT_EQ(evl_as_completed_free(stuck_it), 0);
    evl_future_unref(f);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}
