/*
 * test-gather.c -- gather (argument order, first error, COLLECT, cancel,
 * empty) and wait_for (timeout, in time, swallowed cancellation, outer
 * cancel).
 */
#define _GNU_SOURCE
#include "task.h"
#include "evl-internal.h"

static uint64_t t0;
static uint64_t ms_now(void)
{
    return (evl_now(evl_loop_current()) - t0) / 1000000;
}

/* arg packs (delay ms << 16) | (result + 0x8000) */
#define JOB(ms, res) ((void *)(intptr_t)(((intptr_t)(ms) << 16) | ((res) + 0x8000)))

static intptr_t job(void *arg)
{
    intptr_t v = (intptr_t)arg;
    int ms = (int)(v >> 16);
    intptr_t res = (v & 0xffff) - 0x8000;
    int r = evl_sleep(EVL_MS(ms));
    test_log("%s:%s@%" PRIu64, evl_task_name(evl_current_task()),
             r ? evl_err_name(r) : "done", ms_now());
    return r ? r : res;
}

static intptr_t gather_order(void *arg)
{
    evl_task *t[3];
    t[0] = evl_spawn(NULL, "slow", job, JOB(30, 1));
    t[1] = evl_spawn(NULL, "fast", job, JOB(10, 2));
    t[2] = evl_spawn(NULL, "mid", job, JOB(20, 3));
    intptr_t res[3] = { -1, -1, -1 };
    int r = evl_gather(t, 3, 0, res);
    test_log("gather@%" PRIu64, ms_now());
    ASSERT_EQ(r, 0);
    ASSERT_EQ(res[0], 1);
    ASSERT_EQ(res[1], 2);
    ASSERT_EQ(res[2], 3);
    for (int i = 0; i < 3; i++)
        evl_future_unref(t[i]);
    return 0;
}

TEST_IMPL(gather_argument_order)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    t0 = evl_now(loop);
    evl_task *t = evl_spawn(loop, "main", gather_order, NULL);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    ASSERT_STR_EQ(test_trace, "fast:done@10 mid:done@20 slow:done@30 gather@30 ");
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

static evl_task *fe[3];
static intptr_t gather_first_error(void *arg)
{
    fe[0] = evl_spawn(NULL, "a", job, JOB(10, 1));
    fe[1] = evl_spawn(NULL, "b", job, JOB(5, EVL_EINVAL));
    fe[2] = evl_spawn(NULL, "c", job, JOB(20, 3));
    intptr_t res[3] = { -7, -7, -7 };
    int r = evl_gather(fe, 3, 0, res);
    test_log("gather:%s@%" PRIu64, evl_err_name(r), ms_now());
    ASSERT_ERR(r, EVL_EINVAL);
    ASSERT_EQ(res[0], -7);                       /* untouched on error */
    /* The others keep running. */
    ASSERT_EQ(evl_future_state(fe[0]), EVL_FUTURE_PENDING);
    ASSERT_EQ(evl_future_state(fe[2]), EVL_FUTURE_PENDING);
    return r;
}

TEST_IMPL(gather_first_error)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK | EVL_LOOP_DEBUG, 0);
    test_log_reset();
    t0 = evl_now(loop);
    evl_task *t = evl_spawn(loop, "main", gather_first_error, NULL);
    test_capture cap;
    capture_begin(&cap);
    ASSERT_ERR(evl_run_until_complete(loop, t), EVL_EINVAL);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "b:done@5 gather:EINVAL@5 a:done@10 c:done@20 ");
    ASSERT_EQ(evl_task_state(fe[0]), EVL_TASK_FINISHED);
    ASSERT_EQ(evl_task_state(fe[1]), EVL_TASK_FAILED);
    ASSERT_EQ(evl_task_state(fe[2]), EVL_TASK_FINISHED);
    for (int i = 0; i < 3; i++)
        evl_future_unref(fe[i]);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    char *err = capture_end(&cap);
    /* b's error was retrieved by the gather: no "unretrieved" verdict. */
    ASSERT_STR_NOT_CONTAINS(err, "leaked");
    free(err);
    return 0;
}

static intptr_t gather_collect(void *arg)
{
    evl_task *t[4];
    t[0] = evl_spawn(NULL, "a", job, JOB(10, 1));
    t[1] = evl_spawn(NULL, "b", job, JOB(5, EVL_EINVAL));
    t[2] = evl_spawn(NULL, "c", job, JOB(20, 3));
    t[3] = evl_spawn(NULL, "d", job, JOB(1, EVL_ECANCELED));  /* ends CANCELLED */
    intptr_t res[4] = { -7, -7, -7, -7 };
    int r = evl_gather(t, 4, EVL_GATHER_COLLECT, res);
    test_log("gather@%" PRIu64, ms_now());
    ASSERT_EQ(r, 0);
    ASSERT_EQ(res[0], 1);
    ASSERT_ERR(res[1], EVL_EINVAL);
    ASSERT_EQ(res[2], 3);
    ASSERT_ERR(res[3], EVL_ECANCELED);
    for (int i = 0; i < 4; i++)
        evl_future_unref(t[i]);
    return 0;
}

TEST_IMPL(gather_collect)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    t0 = evl_now(loop);
    evl_task *t = evl_spawn(loop, "main", gather_collect, NULL);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    ASSERT_STR_EQ(test_trace, "d:done@1 b:done@5 a:done@10 c:done@20 gather@20 ");
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Cancelling the task awaiting a gather cancels the gather's children. */
static evl_task *gc[2];
static intptr_t gather_long(void *arg)
{
    gc[0] = evl_spawn(NULL, "x", job, JOB(1000, 1));
    gc[1] = evl_spawn(NULL, "y", job, JOB(2000, 2));
    int r = evl_gather(gc, 2, 0, NULL);
    test_log("gather:%s@%" PRIu64, evl_err_name(r), ms_now());
    return r;
}

static intptr_t cancel_after_1ms(void *arg)
{
    ASSERT_EQ(evl_sleep(EVL_MS(1)), 0);
    test_log("cancel");
    ASSERT_EQ(evl_cancel(arg), 1);
    return 0;
}

TEST_IMPL(gather_cancel_children)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    t0 = evl_now(loop);
    evl_task *g = evl_spawn(loop, "g", gather_long, NULL);
    evl_task *c = evl_spawn(loop, "c", cancel_after_1ms, g);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "cancel x:ECANCELED@1 y:ECANCELED@1 gather:ECANCELED@1 ");
    ASSERT_EQ(evl_task_state(gc[0]), EVL_TASK_CANCELLED);
    ASSERT_EQ(evl_task_state(gc[1]), EVL_TASK_CANCELLED);
    ASSERT_EQ(evl_task_state(g), EVL_TASK_CANCELLED);
    ASSERT_U64_EQ(evl_now(loop) - t0, EVL_MS(1));
    evl_future_unref(gc[0]);
    evl_future_unref(gc[1]);
    evl_future_unref(g);
    evl_future_unref(c);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* evl_cancel on a gather future itself (from outside any task). */
TEST_IMPL(gather_cancel_future)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    t0 = evl_now(loop);
    evl_task *t[2];
    t[0] = evl_spawn(loop, "p", job, JOB(5, 1));
    evl_future *plain = evl_future_new(loop);
    t[1] = plain;
    evl_future *g = evl_gather_new(loop, t, 2, 0);
    ASSERT_NOT_NULL(g);
    ASSERT_EQ(evl_cancel(g), 1);
    ASSERT_EQ(evl_future_state(plain), EVL_FUTURE_CANCELLED);  /* at once */
    ASSERT_ERR(evl_run_until_complete(loop, g), EVL_ECANCELED);
    ASSERT_EQ(evl_task_state(t[0]), EVL_TASK_CANCELLED);
    intptr_t res[2];
    ASSERT_EQ(evl_gather_results(g, res, 2), 0);
    ASSERT_ERR(res[0], EVL_ECANCELED);
    ASSERT_ERR(res[1], EVL_ECANCELED);
    ASSERT_EQ(evl_cancel(g), 0);                 /* done */
    ASSERT_ERR(evl_gather_results(plain, res, 2), EVL_EINVAL);
    evl_future_unref(g);
    evl_future_unref(plain);
    evl_future_unref(t[0]);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

TEST_IMPL(gather_empty)
{
    evl_loop *loop = test_loop(0, 0);
    evl_future *g = evl_gather_new(loop, NULL, 0, 0);
    ASSERT_NOT_NULL(g);
    ASSERT_TRUE(evl_future_done(g));
    ASSERT_EQ(evl_future_result(g), 0);
    ASSERT_EQ(evl_cancel(g), 0);
    ASSERT_EQ(evl_gather_results(g, NULL, 0), 0);
    evl_future_unref(g);
    /* NULL children are refused. */
    evl_future *bad[1] = { NULL };
    ASSERT_NULL(evl_gather_new(loop, bad, 1, 0));
    ASSERT_NULL(evl_gather_new(loop, NULL, 2, 0));
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Plain futures completed in reverse order; the same future twice. */
static intptr_t gather_plain(void *arg)
{
    evl_future **f = arg;
    evl_future *kids[4] = { f[0], f[1], f[2], f[0] };
    intptr_t res[4];
    ASSERT_EQ(evl_gather(kids, 4, 0, res), 0);
    ASSERT_EQ(res[0], 10);
    ASSERT_EQ(res[1], 11);
    ASSERT_EQ(res[2], 12);
    ASSERT_EQ(res[3], 10);
    return 0;
}

static intptr_t complete_reverse(void *arg)
{
    evl_future **f = arg;
    for (int i = 2; i >= 0; i--) {
        ASSERT_EQ(evl_future_set_result(f[i], 10 + i), 0);
        ASSERT_EQ(evl_yield(), 0);
    }
    return 0;
}

TEST_IMPL(gather_plain_futures)
{
    evl_loop *loop = test_loop(0, 0);
    evl_future *f[3];
    for (int i = 0; i < 3; i++)
        f[i] = evl_future_new(loop);
    evl_task *a = evl_spawn(loop, "gather", gather_plain, f);
    evl_task *b = evl_spawn(loop, "completer", complete_reverse, f);
    ASSERT_EQ(evl_run_until_complete(loop, a), 0);
    for (int i = 0; i < 3; i++)
        evl_future_unref(f[i]);
    evl_future_unref(a);
    evl_future_unref(b);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Invalid children are argument errors, not out-of-memory: a NULL entry
 * is EVL_EINVAL, a future of another loop EVL_EWRONGLOOP (as evl_await
 * says for the same future) or at least EVL_EINVAL. */
static evl_loop *foreign;
static intptr_t gather_bad_children(void *arg)
{
    evl_future *mine = evl_future_new(NULL);
    evl_future_set_result(mine, 1);
    evl_future *other = evl_future_new(foreign);
    evl_future *with_null[2] = { mine, NULL };
    evl_future *with_foreign[2] = { mine, other };
    ASSERT_ERR(evl_gather(NULL, 2, 0, NULL), EVL_EINVAL);
    ASSERT_ERR(evl_gather(with_null, 2, 0, NULL), EVL_EINVAL);
    int r = evl_gather(with_foreign, 2, 0, NULL);
    if (r != EVL_EWRONGLOOP && r != EVL_EINVAL)
        FAIL("evl_gather with a child of another loop returned %d (%s), "
             "expected EWRONGLOOP or EINVAL", r, evl_err_name(r));
    evl_future_unref(mine);
    evl_future_unref(other);
    return 0;
}

TEST_IMPL(gather_invalid_children)
{
    evl_loop *loop = test_loop(0, 0);
    foreign = test_loop(0, 0);
    evl_task *t = evl_spawn(loop, "bad", gather_bad_children, NULL);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(foreign, 0);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* ------------------------------------------------------------ wait_for */

static evl_task *wf_inner;

static intptr_t wait_for_timeout(void *arg)
{
    wf_inner = evl_spawn(NULL, "inner", job, JOB(10000, 1));
    intptr_t r = evl_wait_for(wf_inner, EVL_MS(5));
    test_log("wait_for:%s@%" PRIu64, evl_err_name((int)r), ms_now());
    ASSERT_ERR(r, EVL_ETIMEDOUT);
    ASSERT_EQ(evl_task_state(wf_inner), EVL_TASK_CANCELLED);
    return 0;
}

TEST_IMPL(wait_for_timeout)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    t0 = evl_now(loop);
    evl_task *t = evl_spawn(loop, "outer", wait_for_timeout, NULL);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    ASSERT_STR_EQ(test_trace, "inner:ECANCELED@5 wait_for:ETIMEDOUT@5 ");
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_U64_EQ(evl_now(loop) - t0, EVL_MS(5));    /* inner's 10 s timer is gone */
    evl_future_unref(wf_inner);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

static intptr_t wait_for_in_time(void *arg)
{
    wf_inner = evl_spawn(NULL, "inner", job, JOB(2, 5));
    intptr_t r = evl_wait_for(wf_inner, EVL_MS(100));
    test_log("wait_for:%d@%" PRIu64, (int)r, ms_now());
    ASSERT_EQ(r, 5);
    /* Also a plain future completed by a timer, and an error. */
    evl_future *f = evl_future_new(NULL);
    evl_future_set_error(f, -EPIPE);
    ASSERT_ERR(evl_wait_for(f, EVL_MS(1)), -EPIPE);
    evl_future_unref(f);
    return 0;
}

TEST_IMPL(wait_for_in_time)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    t0 = evl_now(loop);
    evl_task *t = evl_spawn(loop, "outer", wait_for_in_time, NULL);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    ASSERT_STR_EQ(test_trace, "inner:done@2 wait_for:5@2 ");
    ASSERT_EQ(evl_run(loop), 0);
    /* The 100 ms timeout timer was stopped: the loop ended at 2 ms. */
    ASSERT_U64_EQ(evl_now(loop) - t0, EVL_MS(2));
    ASSERT_EQ(evl_task_state(wf_inner), EVL_TASK_FINISHED);
    evl_future_unref(wf_inner);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* The inner task swallows the cancellation and returns a value: wait_for
 * returns that value (asyncio 3.11). */
static intptr_t stubborn(void *arg)
{
    int r = evl_sleep(EVL_SEC(10));
    test_log("inner:%s@%" PRIu64, evl_err_name(r), ms_now());
    ASSERT_EQ(evl_sleep(EVL_MS(1)), 0);
    return 9;
}

static intptr_t wait_for_swallow(void *arg)
{
    wf_inner = evl_spawn(NULL, "inner", stubborn, NULL);
    intptr_t r = evl_wait_for(wf_inner, EVL_MS(5));
    test_log("wait_for:%d@%" PRIu64, (int)r, ms_now());
    return r;
}

TEST_IMPL(wait_for_swallowed)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    t0 = evl_now(loop);
    evl_task *t = evl_spawn(loop, "outer", wait_for_swallow, NULL);
    ASSERT_EQ(evl_run_until_complete(loop, t), 9);
    ASSERT_STR_EQ(test_trace, "inner:ECANCELED@5 wait_for:9@6 ");
    evl_future_unref(wf_inner);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* The task calling wait_for is cancelled: the inner task is cancelled too
 * and wait_for returns EVL_ECANCELED. */
static intptr_t wait_for_long(void *arg)
{
    wf_inner = evl_spawn(NULL, "inner", job, JOB(10000, 1));
    intptr_t r = evl_wait_for(wf_inner, EVL_SEC(100));
    test_log("wait_for:%s@%" PRIu64, evl_err_name((int)r), ms_now());
    return r;
}

TEST_IMPL(wait_for_outer_cancelled)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    t0 = evl_now(loop);
    evl_task *t = evl_spawn(loop, "outer", wait_for_long, NULL);
    evl_task *c = evl_spawn(loop, "c", cancel_after_1ms, t);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "cancel inner:ECANCELED@1 wait_for:ECANCELED@1 ");
    ASSERT_EQ(evl_task_state(wf_inner), EVL_TASK_CANCELLED);
    ASSERT_EQ(evl_task_state(t), EVL_TASK_CANCELLED);
    ASSERT_U64_EQ(evl_now(loop) - t0, EVL_MS(1));
    evl_future_unref(wf_inner);
    evl_future_unref(t);
    evl_future_unref(c);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* timeout 0: a done future returns its result, a pending one is cancelled
 * and EVL_ETIMEDOUT returned. */
static intptr_t wait_for_zero(void *arg)
{
    evl_future *f = evl_future_new(NULL);
    ASSERT_ERR(evl_wait_for(f, 0), EVL_ETIMEDOUT);
    ASSERT_EQ(evl_future_state(f), EVL_FUTURE_CANCELLED);
    evl_future_unref(f);
    f = evl_future_new(NULL);
    evl_future_set_result(f, 4);
    ASSERT_EQ(evl_wait_for(f, 0), 4);
    evl_future_unref(f);
    return 0;
}

TEST_IMPL(wait_for_zero_timeout)
{
    evl_loop *loop = test_loop(0, 0);
    evl_task *t = evl_spawn(loop, "z", wait_for_zero, NULL);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}
