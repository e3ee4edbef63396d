/*
 * test-cancel.c -- task cancellation (loop/ORDERING.md rule 9): sleeping,
 * not started, awaiting a task, woken but not run, swallowed, returning with
 * a pending cancellation, done.
 */
#define _GNU_SOURCE
#include "task.h"
#include "evl-internal.h"

static uint64_t t0;

static uint64_t ms_now(void)
{
    return (evl_now(evl_loop_current()) - t0) / 1000000;
}

static intptr_t sleep_10s(void *arg)
{
    int r = evl_sleep(EVL_SEC(10));
    test_log("%s:%s@%" PRIu64, evl_task_name(evl_current_task()), evl_err_name(r), ms_now());
    return r;
}

static intptr_t cancel_after_1ms(void *arg)
{
    ASSERT_EQ(evl_sleep(EVL_MS(1)), 0);
    test_log("cancel");
    ASSERT_EQ(evl_cancel(arg), 1);
    return 0;
}

TEST_IMPL(cancel_sleeping)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    t0 = evl_now(loop);
    evl_task *a = evl_spawn(loop, "a", sleep_10s, NULL);
    evl_task *b = evl_spawn(loop, "b", cancel_after_1ms, a);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "cancel a:ECANCELED@1 ");
    ASSERT_EQ(evl_task_state(a), EVL_TASK_CANCELLED);
    ASSERT_EQ(evl_future_state(a), EVL_FUTURE_CANCELLED);
    ASSERT_ERR(evl_future_result(a), EVL_ECANCELED);
    /* The 10 s timer went away with the sleep: the loop ended at 1 ms. */
    ASSERT_U64_EQ(evl_now(loop) - t0, EVL_MS(1));
    ASSERT_EQ(loop->timers.n, 0);
    evl_future_unref(a);
    evl_future_unref(b);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

static int body_ran;
static intptr_t must_not_run(void *arg)
{
    body_ran = 1;
    return 1;
}

static void note_done(evl_future *f, void *arg) { test_log("done-cb"); }

TEST_IMPL(cancel_not_started)
{
    evl_loop *loop = test_loop(0, 0);
    test_log_reset();
    evl_task *a = evl_spawn(loop, "a", must_not_run, NULL);
    ASSERT_EQ(evl_future_add_done(a, note_done, NULL), 0);
    ASSERT_EQ(evl_cancel(a), 1);
    ASSERT_EQ(evl_cancel(a), 1);                 /* still pending */
    ASSERT_EQ(evl_future_state(a), EVL_FUTURE_PENDING);
    ASSERT_ERR(evl_run_until_complete(loop, a), EVL_ECANCELED);
    ASSERT_EQ(body_ran, 0);
    ASSERT_EQ(evl_task_state(a), EVL_TASK_CANCELLED);
    ASSERT_EQ(evl_future_state(a), EVL_FUTURE_CANCELLED);
    ASSERT_NULL(evl__task_of(a)->stack);         /* never got a stack */
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "done-cb ");
    ASSERT_EQ(evl_cancel(a), 0);
    evl_future_unref(a);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Cancelling a task that awaits another task cancels the inner one. */
static intptr_t await_inner(void *arg)
{
    evl_task *inner = evl_spawn(NULL, "inner", sleep_10s, NULL);
    *(evl_task **)arg = inner;
    intptr_t r = evl_await(inner);
    test_log("outer:%s@%" PRIu64, evl_err_name((int)r), ms_now());
    ASSERT_EQ(evl_task_state(inner), EVL_TASK_CANCELLED);
    return r;
}

TEST_IMPL(cancel_awaiting_task)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    t0 = evl_now(loop);
    evl_task *inner = NULL;
    evl_task *outer = evl_spawn(loop, "outer", await_inner, &inner);
    evl_task *c = evl_spawn(loop, "canceller", cancel_after_1ms, outer);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "cancel inner:ECANCELED@1 outer:ECANCELED@1 ");
    ASSERT_EQ(evl_task_state(outer), EVL_TASK_CANCELLED);
    ASSERT_NOT_NULL(inner);
    ASSERT_EQ(evl_task_state(inner), EVL_TASK_CANCELLED);
    evl_future_unref(inner);
    evl_future_unref(outer);
    evl_future_unref(c);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Woken (its future completed) but not run yet: the await still returns
 * EVL_ECANCELED. */
static intptr_t await_plain(void *arg)
{
    intptr_t r = evl_await(arg);
    test_log("a:%s", evl_err_name((int)r));
    return r;
}

static intptr_t complete_then_cancel(void *arg)
{
    evl_task *a = arg;
    evl_future *f = evl__task_of(a)->arg;
    ASSERT_EQ(evl_task_state(a), EVL_TASK_SUSPENDED);
    ASSERT_EQ(evl_future_set_result(f, 1), 0);
    ASSERT_EQ(evl_task_state(a), EVL_TASK_READY);       /* woken */
    ASSERT_EQ(evl_cancel(a), 1);
    test_log("b");
    return 0;
}

TEST_IMPL(cancel_woken_not_run)
{
    evl_loop *loop = test_loop(0, 0);
    test_log_reset();
    evl_future *f = evl_future_new(loop);
    evl_task *a = evl_spawn(loop, "a", await_plain, f);
    evl_task *b = evl_spawn(loop, "b", complete_then_cancel, a);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "b a:ECANCELED ");
    ASSERT_EQ(evl_task_state(a), EVL_TASK_CANCELLED);
    /* The future itself completed normally. */
    ASSERT_EQ(evl_future_state(f), EVL_FUTURE_DONE);
    ASSERT_EQ(evl_future_result(f), 1);
    evl_future_unref(a);
    evl_future_unref(b);
    evl_future_unref(f);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* The same when the wake came from a timer: the sleep's timer fired in this
 * run phase, then a callback later in the same phase cancels the task. */
static evl_task *sleeper_task;
static void cancel_from_timer(evl_loop *loop, void *arg)
{
    ASSERT_EQ(evl_task_state(sleeper_task), EVL_TASK_READY);
    test_log("timer-cancel");
    ASSERT_EQ(evl_cancel(sleeper_task), 1);
}

static intptr_t sleep_1ms_log(void *arg)
{
    int r = evl_sleep(EVL_MS(1));
    test_log("sleeper:%s", evl_err_name(r));
    return 0;                                    /* swallows it */
}

static evl_timer cancel_tm;
static void start_cancel_timer(evl_loop *loop, void *arg)
{
    /* Same cached time as the sleep started just before: same deadline,
     * later sequence number. */
    ASSERT_EQ(evl_timer_start(loop, &cancel_tm, EVL_MS(1), cancel_from_timer, NULL), 0);
}

TEST_IMPL(cancel_woken_by_timer_not_run)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    sleeper_task = evl_spawn(loop, "sleeper", sleep_1ms_log, NULL);
    ASSERT_EQ(evl_call_soon(loop, start_cancel_timer, NULL), 0);
    ASSERT_EQ(evl_run_until_complete(loop, sleeper_task), 0);
    ASSERT_STR_EQ(test_trace, "timer-cancel sleeper:ECANCELED ");
    ASSERT_EQ(evl_task_state(sleeper_task), EVL_TASK_FINISHED);
    evl_future_unref(sleeper_task);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Swallowing the cancellation: the task goes on and finishes normally. */
static intptr_t swallow(void *arg)
{
    int r = evl_sleep(EVL_SEC(10));
    ASSERT_ERR(r, EVL_ECANCELED);
    test_log("swallowed@%" PRIu64, ms_now());
    ASSERT_EQ(evl_sleep(EVL_MS(1)), 0);          /* no longer cancelled */
    test_log("slept@%" PRIu64, ms_now());
    return 7;
}

TEST_IMPL(cancel_swallow)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    t0 = evl_now(loop);
    evl_task *a = evl_spawn(loop, "a", swallow, NULL);
    evl_task *b = evl_spawn(loop, "b", cancel_after_1ms, a);
    ASSERT_EQ(evl_run_until_complete(loop, a), 7);
    ASSERT_STR_EQ(test_trace, "cancel swallowed@1 slept@2 ");
    ASSERT_EQ(evl_task_state(a), EVL_TASK_FINISHED);
    evl_future_unref(a);
    evl_future_unref(b);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Two cancel requests before the task runs deliver one cancellation. */
static intptr_t cancel_twice(void *arg)
{
    ASSERT_EQ(evl_sleep(EVL_MS(1)), 0);
    ASSERT_EQ(evl_cancel(arg), 1);
    ASSERT_EQ(evl_cancel(arg), 1);
    ASSERT_EQ(evl__task_of(arg)->ncancels, 2);
    return 0;
}

TEST_IMPL(cancel_twice_delivers_once)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    t0 = evl_now(loop);
    evl_task *a = evl_spawn(loop, "a", swallow, NULL);
    evl_task *b = evl_spawn(loop, "b", cancel_twice, a);
    ASSERT_EQ(evl_run_until_complete(loop, a), 7);
    ASSERT_STR_EQ(test_trace, "swallowed@1 slept@2 ");
    evl_future_unref(a);
    evl_future_unref(b);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* A task returning while its cancellation is pending ends CANCELLED. */
static intptr_t self_cancel_return(void *arg)
{
    ASSERT_EQ(evl_cancel(evl_current_task()), 1);
    ASSERT_EQ(evl_task_state(evl_current_task()), EVL_TASK_RUNNING);
    return 5;
}

/* Awaiting a done future does not deliver it; the next real await does. */
static intptr_t self_cancel_then_await(void *arg)
{
    ASSERT_EQ(evl_cancel(evl_current_task()), 1);
    evl_future *f = evl_future_new(NULL);
    evl_future_set_result(f, 3);
    ASSERT_EQ(evl_await(f), 3);
    evl_future_unref(f);
    ASSERT_ERR(evl_yield(), EVL_ECANCELED);
    ASSERT_EQ(evl_yield(), 0);                   /* delivered once */
    return 4;
}

TEST_IMPL(cancel_pending_at_return)
{
    evl_loop *loop = test_loop(0, 0);
    evl_task *a = evl_spawn(loop, "a", self_cancel_return, NULL);
    evl_task *b = evl_spawn(loop, "b", self_cancel_then_await, NULL);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_task_state(a), EVL_TASK_CANCELLED);
    ASSERT_EQ(evl_future_state(a), EVL_FUTURE_CANCELLED);
    ASSERT_ERR(evl_future_result(a), EVL_ECANCELED);
    ASSERT_EQ(evl_task_state(b), EVL_TASK_FINISHED);
    ASSERT_EQ(evl_future_result(b), 4);
    evl_future_unref(a);
    evl_future_unref(b);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* A task cancelled while it is ready after a yield. */
static intptr_t yield_once(void *arg)
{
    int r = evl_yield();
    test_log("y:%s", evl_err_name(r));
    return r;
}

static intptr_t cancel_arg_now(void *arg)
{
    ASSERT_EQ(evl_task_state(arg), EVL_TASK_READY);
    ASSERT_EQ(evl_cancel(arg), 1);
    test_log("c");
    return 0;
}

TEST_IMPL(cancel_yielded)
{
    evl_loop *loop = test_loop(0, 0);
    test_log_reset();
    evl_task *a = evl_spawn(loop, "a", yield_once, NULL);
    evl_task *b = evl_spawn(loop, "b", cancel_arg_now, a);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "c y:ECANCELED ");
    ASSERT_EQ(evl_task_state(a), EVL_TASK_CANCELLED);
    evl_future_unref(a);
    evl_future_unref(b);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

static intptr_t return_arg(void *arg) { return (intptr_t)arg; }

TEST_IMPL(cancel_done_task)
{
    evl_loop *loop = test_loop(0, 0);
    evl_task *ok = evl_spawn(loop, "ok", return_arg, (void *)9);
    evl_task *bad = evl_spawn(loop, "bad", return_arg, (void *)(intptr_t)EVL_EBUSY);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_cancel(ok), 0);
    ASSERT_EQ(evl_cancel(bad), 0);
    ASSERT_EQ(evl_task_state(ok), EVL_TASK_FINISHED);
    ASSERT_EQ(evl_task_state(bad), EVL_TASK_FAILED);
    ASSERT_EQ(evl_future_result(ok), 9);
    ASSERT_ERR(evl_future_result(bad), EVL_EBUSY);
    evl_future_unref(ok);
    evl_future_unref(bad);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}
