/*
 * test-future.c -- futures: completion, errors, done-callbacks (scheduled,
 * never inline, in order), removal, references and the abandoned verdict.
 */
#define _GNU_SOURCE
#include "task.h"
#include "evl-internal.h"

TEST_IMPL(future_set_result)
{
    evl_loop *loop = test_loop(0, 0);
    ASSERT_NULL(evl_future_new(NULL));           /* no current loop */
    evl_future *f = evl_future_new(loop);
    ASSERT_NOT_NULL(f);
    ASSERT_PTR_EQ(evl_future_loop(f), loop);
    ASSERT_FALSE(evl_is_task(f));
    ASSERT_EQ(evl_future_state(f), EVL_FUTURE_PENDING);
    ASSERT_FALSE(evl_future_done(f));
    ASSERT_ERR(evl_future_result(f), EVL_ENOTDONE);
    ASSERT_ERR(evl_future_set_result(f, -1), EVL_EINVAL);
    ASSERT_ERR(evl_future_set_error(f, 0), EVL_EINVAL);
    ASSERT_ERR(evl_future_set_error(f, 5), EVL_EINVAL);
    ASSERT_ERR(evl_future_set_result(NULL, 1), EVL_EINVAL);
    ASSERT_EQ(evl_future_state(f), EVL_FUTURE_PENDING);

    ASSERT_EQ(evl_future_set_result(f, 42), 0);
    ASSERT_EQ(evl_future_state(f), EVL_FUTURE_DONE);
    ASSERT_TRUE(evl_future_done(f));
    ASSERT_ERR(evl_future_set_result(f, 43), EVL_EDONE);
    ASSERT_ERR(evl_future_set_error(f, EVL_EINVAL), EVL_EDONE);
    ASSERT_EQ(evl_cancel(f), 0);                 /* already done */
    ASSERT_EQ(evl_future_state(f), EVL_FUTURE_DONE);
    ASSERT_FALSE(f->retrieved);
    ASSERT_EQ(evl_future_result(f), 42);
    ASSERT_TRUE(f->retrieved);
    ASSERT_EQ(evl_future_result(f), 42);         /* reading twice is fine */
    evl_future_unref(f);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

TEST_IMPL(future_set_error)
{
    evl_loop *loop = test_loop(0, 0);
    evl_future *f = evl_future_new(loop);
    ASSERT_EQ(evl_future_set_error(f, EVL_ETIMEDOUT), 0);
    ASSERT_EQ(evl_future_state(f), EVL_FUTURE_DONE);   /* not CANCELLED */
    ASSERT_ERR(evl_future_set_result(f, 1), EVL_EDONE);
    ASSERT_ERR(evl_future_result(f), EVL_ETIMEDOUT);
    evl_future_unref(f);

    /* A plain future may also carry EVL_ECANCELED as an error and stay DONE. */
    f = evl_future_new(loop);
    ASSERT_EQ(evl_future_set_error(f, -ENOENT), 0);
    ASSERT_ERR(evl_future_result(f), -ENOENT);
    evl_future_unref(f);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

TEST_IMPL(future_cancel)
{
    evl_loop *loop = test_loop(0, 0);
    evl_future *f = evl_future_new(loop);
    ASSERT_EQ(evl_cancel(f), 1);
    ASSERT_EQ(evl_future_state(f), EVL_FUTURE_CANCELLED);
    ASSERT_TRUE(evl_future_done(f));
    ASSERT_EQ(evl_cancel(f), 0);
    ASSERT_ERR(evl_future_set_result(f, 1), EVL_EDONE);
    ASSERT_ERR(evl_future_result(f), EVL_ECANCELED);
    ASSERT_EQ(evl_cancel(NULL), 0);
    evl_future_unref(f);
    evl_future_unref(NULL);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* ------------------------------------------------------- done-callbacks */

static int inline_guard;

static void done_cb(evl_future *f, void *arg)
{
    ASSERT_FALSE(inline_guard);                  /* never from set_result */
    ASSERT_TRUE(evl_future_done(f));
    test_log("%s=%d", (const char *)arg, (int)evl_future_result(f));
}

static void soon_cb(evl_loop *loop, void *arg)
{
    test_log("%s", (const char *)arg);
}

TEST_IMPL(future_done_callbacks_order)
{
    evl_loop *loop = test_loop(0, 0);
    evl_future *f = evl_future_new(loop);
    test_log_reset();
    ASSERT_EQ(evl_future_add_done(f, done_cb, "cb1"), 0);
    ASSERT_EQ(evl_future_add_done(f, done_cb, "cb2"), 0);
    ASSERT_EQ(evl_future_add_done(f, done_cb, "cb3"), 0);
    ASSERT_ERR(evl_future_add_done(f, NULL, NULL), EVL_EINVAL);
    ASSERT_EQ(evl_call_soon(loop, soon_cb, "before"), 0);
    inline_guard = 1;
    ASSERT_EQ(evl_future_set_result(f, 7), 0);
    inline_guard = 0;
    ASSERT_STR_EQ(test_trace, "");               /* nothing ran inline */
    /* Scheduled with call_soon at completion: after "before", ahead of
     * "after". */
    ASSERT_EQ(evl_call_soon(loop, soon_cb, "after"), 0);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "before cb1=7 cb2=7 cb3=7 after ");
    evl_future_unref(f);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

TEST_IMPL(future_remove_done)
{
    evl_loop *loop = test_loop(0, 0);
    evl_future *f = evl_future_new(loop);
    test_log_reset();
    ASSERT_EQ(evl_future_add_done(f, done_cb, "a"), 0);
    ASSERT_EQ(evl_future_add_done(f, done_cb, "b"), 0);
    ASSERT_EQ(evl_future_add_done(f, done_cb, "a"), 0);
    ASSERT_EQ(evl_future_add_done(f, done_cb, "c"), 0);
    ASSERT_EQ(f->holds, 4);
    ASSERT_EQ(evl_future_remove_done(f, done_cb, "a"), 2);
    ASSERT_EQ(evl_future_remove_done(f, done_cb, "a"), 0);
    ASSERT_EQ(evl_future_remove_done(f, done_cb, "zz"), 0);
    ASSERT_EQ(f->holds, 2);
    ASSERT_EQ(evl_future_remove_done(f, done_cb, "c"), 1);   /* the tail */
    ASSERT_EQ(evl_future_add_done(f, done_cb, "d"), 0);      /* after the new tail */
    ASSERT_EQ(evl_future_set_result(f, 1), 0);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "b=1 d=1 ");
    ASSERT_EQ(f->holds, 0);
    evl_future_unref(f);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

TEST_IMPL(future_add_done_on_done)
{
    evl_loop *loop = test_loop(0, 0);
    evl_future *f = evl_future_new(loop);
    test_log_reset();
    ASSERT_EQ(evl_future_set_result(f, 3), 0);
    ASSERT_EQ(evl_call_soon(loop, soon_cb, "first"), 0);
    inline_guard = 1;
    ASSERT_EQ(evl_future_add_done(f, done_cb, "late"), 0);
    inline_guard = 0;
    ASSERT_STR_EQ(test_trace, "");
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "first late=3 ");
    evl_future_unref(f);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* The callback may drop the last reference of the future it runs for. */
static void unref_in_cb(evl_future *f, void *arg)
{
    test_log("unref");
    evl_future_unref(f);
}

TEST_IMPL(future_unref_in_done_callback)
{
    evl_loop *loop = test_loop(0, 0);
    test_log_reset();
    evl_future *f = evl_future_new(loop);
    ASSERT_EQ(evl_future_add_done(f, unref_in_cb, NULL), 0);
    ASSERT_EQ(evl_future_add_done(f, done_cb, "next"), 0);
    ASSERT_EQ(evl_future_set_result(f, 9), 0);
    ASSERT_EQ(evl_run(loop), 0);                 /* "next" still sees f */
    ASSERT_STR_EQ(test_trace, "unref next=9 ");
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

TEST_IMPL(future_refcount)
{
    evl_loop *loop = test_loop(0, 0);
    evl_future *f = evl_future_new(loop);
    ASSERT_EQ(f->refs, 1);
    ASSERT_PTR_EQ(evl_future_ref(f), f);
    ASSERT_PTR_EQ(evl_future_ref(f), f);
    ASSERT_EQ(f->refs, 3);
    evl_future_unref(f);
    evl_future_unref(f);
    ASSERT_EQ(f->refs, 1);
    ASSERT_EQ(evl_future_set_result(f, 1), 0);
    evl_future_unref(f);                         /* freed here (ASan checks) */
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Several tasks awaiting one future wake in the order they started
 * waiting, all with its value. */
static intptr_t await_value(void *arg)
{
    intptr_t r = evl_await(arg);
    test_log("%s=%d", evl_task_name(evl_current_task()), (int)r);
    return r;
}

static intptr_t set_later(void *arg)
{
    ASSERT_EQ(evl_sleep(EVL_MS(1)), 0);
    test_log("set");
    ASSERT_EQ(evl_future_set_result(arg, 5), 0);
    return 0;
}

TEST_IMPL(future_many_waiters)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    evl_future *f = evl_future_new(loop);
    test_log_reset();
    evl_task *t[4];
    t[0] = evl_spawn(loop, "w1", await_value, f);
    t[1] = evl_spawn(loop, "setter", set_later, f);
    t[2] = evl_spawn(loop, "w2", await_value, f);
    t[3] = evl_spawn(loop, "w3", await_value, f);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "set w1=5 w2=5 w3=5 ");
    for (int i = 0; i < 4; i++) {
        ASSERT_EQ(evl_task_state(t[i]), EVL_TASK_FINISHED);
        evl_future_unref(t[i]);
    }
    evl_future_unref(f);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* --------------------------------------------------------- abandoned */

static intptr_t await_forever(void *arg)
{
    test_log("waiting");
    intptr_t r = evl_await(arg);
    test_log("woke");                            /* must never happen */
    return r;
}

TEST_IMPL(future_abandoned)
{
    evl_loop *loop = test_loop(EVL_LOOP_DEBUG, 0);
    evl_future *f = evl_future_new(loop);
    test_log_reset();
    evl_task *t = evl_spawn(loop, "orphan", await_forever, f);
    ASSERT_EQ(evl_run(loop), 0);                 /* nothing keeps the loop alive */
    ASSERT_EQ(evl_task_state(t), EVL_TASK_SUSPENDED);
    ASSERT_FALSE(evl__task_of(t)->leak_reported);

    test_capture cap;
    capture_begin(&cap);
    evl_future_unref(f);                         /* last reference: abandoned */
    char *err = capture_end(&cap);
    ASSERT_STR_CONTAINS(err, "task 'orphan'");
    ASSERT_STR_CONTAINS(err, "awaits a future that nothing can complete any more");
    free(err);
    ASSERT_TRUE(evl__task_of(t)->leak_reported);

    /* The task stays suspended: nothing can wake it. */
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_task_state(t), EVL_TASK_SUSPENDED);
    ASSERT_STR_EQ(test_trace, "waiting ");

    /* At close it is counted, but not reported a second time. */
    capture_begin(&cap);
    ASSERT_LOOP_FREE(loop, 1);
    err = capture_end(&cap);
    ASSERT_STR_NOT_CONTAINS(err, "still pending");
    free(err);
    evl_future_unref(t);
    return 0;
}

/* An unreferenced pending future nobody awaits is just freed: no verdict. */
TEST_IMPL(future_unref_unawaited)
{
    evl_loop *loop = test_loop(EVL_LOOP_DEBUG, 0);
    test_capture cap;
    capture_begin(&cap);
    evl_future *f = evl_future_new(loop);
    evl_future_unref(f);
    ASSERT_LOOP_FREE(loop, 0);
    char *err = capture_end(&cap);
    ASSERT_STR_EQ(err, "");
    free(err);
    return 0;
}
