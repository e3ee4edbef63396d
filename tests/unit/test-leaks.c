/*
 * test-leaks.c -- leak verdicts (pending at close, unretrieved errors),
 * debug mode's slow-step warning, stack overflow reports, evl_loop_free
 * with objects the program still references, and what evl_loop_free must
 * release.
 */
#define _GNU_SOURCE
#include "task.h"
#include "evl-internal.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static intptr_t return_arg(void *arg) { return (intptr_t)arg; }

static intptr_t await_arg(void *arg) { return evl_await(arg); }

static intptr_t sleep_long(void *arg)
{
    return evl_sleep(EVL_SEC(100));
}

static intptr_t stop_loop(void *arg)
{
    evl_stop(evl_loop_current());
    return 0;
}

TEST_IMPL(leak_pending_at_close)
{
    evl_loop *loop = test_loop(EVL_LOOP_DEBUG, 0);
    evl_future *f = evl_future_new(loop);
    evl_task *waiter = evl_spawn(loop, "waiter-on-future", await_arg, f);
    evl_task *sleeper = evl_spawn(loop, "sleeper", sleep_long, NULL);
    evl_task *stopper = evl_spawn(loop, "stopper", stop_loop, NULL);
    /* A task awaiting a pending task. */
    evl_task *chain = evl_spawn(loop, "chain", await_arg, waiter);
    ASSERT_EQ(evl_run(loop), 0);                 /* stopped after one iteration */
    ASSERT_EQ(evl_task_state(stopper), EVL_TASK_FINISHED);
    ASSERT_EQ(evl_task_state(sleeper), EVL_TASK_SUSPENDED);
    /* Never started. */
    evl_task *unstarted = evl_spawn(loop, "never-ran", return_arg, NULL);
    evl_future_unref(stopper);
    evl_future_unref(unstarted);                 /* the loop keeps its own */
    evl_future_unref(chain);

    test_capture cap;
    capture_begin(&cap);
    int leaked = evl_loop_free(loop);
    char *err = capture_end(&cap);
    ASSERT_EQ(leaked, 4);
    ASSERT_STR_CONTAINS(err, "task 'waiter-on-future'");
    ASSERT_STR_CONTAINS(err, "task 'sleeper'");
    ASSERT_STR_CONTAINS(err, "task 'never-ran'");
    ASSERT_STR_CONTAINS(err, "task 'chain'");
    ASSERT_STR_CONTAINS(err, "still pending when its loop closed");
    ASSERT_STR_NOT_CONTAINS(err, "'stopper'");
    free(err);
    /* What the program still holds stays valid until unreferenced. */
    evl_future_unref(waiter);
    evl_future_unref(sleeper);
    evl_future_unref(f);
    return 0;
}

/* Without debug mode nothing is printed, but the count is the same. */
TEST_IMPL(leak_pending_count_quiet)
{
    evl_loop *loop = test_loop(0, 0);
    test_capture cap;
    capture_begin(&cap);
    for (int i = 0; i < 10; i++)
        evl_future_unref(evl_spawn(loop, "t", return_arg, NULL));
    int leaked = evl_loop_free(loop);
    char *err = capture_end(&cap);
    ASSERT_EQ(leaked, 10);
    ASSERT_STR_EQ(err, "");
    free(err);
    return 0;
}

TEST_IMPL(leak_unretrieved_error)
{
    evl_loop *loop = test_loop(EVL_LOOP_DEBUG, 0);
    evl_task *lost = evl_spawn(loop, "lost-error", return_arg, (void *)(intptr_t)EVL_EBUSY);
    evl_task *read = evl_spawn(loop, "read-error", return_arg, (void *)(intptr_t)EVL_EBUSY);
    evl_task *ok = evl_spawn(loop, "fine", return_arg, (void *)1);
    /* Fails with nobody holding a reference: verdict when it finishes. */
    evl_future_unref(evl_spawn(loop, "fire-and-forget", return_arg, (void *)(intptr_t)-EPIPE));
    test_capture cap;
    capture_begin(&cap);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_ERR(evl_future_result(read), EVL_EBUSY);
    evl_future_unref(lost);                      /* last reference, never read */
    evl_future_unref(read);
    evl_future_unref(ok);
    ASSERT_LOOP_FREE(loop, 0);
    char *err = capture_end(&cap);
    ASSERT_STR_CONTAINS(err, "task 'lost-error'");
    ASSERT_STR_CONTAINS(err, "failed and nobody retrieved its error (EBUSY)");
    ASSERT_STR_CONTAINS(err, "task 'fire-and-forget'");
    ASSERT_STR_CONTAINS(err, "(EPIPE)");
    ASSERT_STR_NOT_CONTAINS(err, "read-error");
    ASSERT_STR_NOT_CONTAINS(err, "'fine'");
    free(err);
    return 0;
}

/* ------------------------------------------------------ slow-step warning */

static intptr_t busy_30ms(void *arg)
{
    uint64_t end = test_wall_ns() + EVL_MS(30);
    while (test_wall_ns() < end)
        ;
    return 0;
}

TEST_IMPL(debug_slow_step_warning)
{
    evl_loop_options o;
    evl_loop_options_init(&o);
    o.flags = EVL_LOOP_DEBUG;
    o.slow_step_ns = EVL_MS(10);
    evl_loop *loop = evl_loop_new(&o);
    ASSERT_NOT_NULL(loop);
    evl_task *slow = evl_spawn(loop, "busy-bee", busy_30ms, NULL);
    evl_task *fast = evl_spawn(loop, "quick", return_arg, NULL);
    test_capture cap;
    capture_begin(&cap);
    ASSERT_EQ(evl_run(loop), 0);
    char *err = capture_end(&cap);
    ASSERT_STR_CONTAINS(err, "task 'busy-bee'");
    ASSERT_STR_CONTAINS(err, "without yielding");
    ASSERT_STR_NOT_CONTAINS(err, "quick");
    /* The reported duration is at least the 30 ms it spun. */
    const char *p = strstr(err, " ran ");
    ASSERT_NOT_NULL(p);
    ASSERT_GE(strtod(p + 5, NULL), 30.0);
    free(err);
    evl_future_unref(slow);
    evl_future_unref(fast);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

TEST_IMPL(debug_off_no_warning)
{
    evl_loop_options o;
    evl_loop_options_init(&o);
    o.slow_step_ns = EVL_MS(10);
    unsetenv("EVL_DEBUG");
    evl_loop *loop = evl_loop_new(&o);
    evl_task *slow = evl_spawn(loop, "busy-bee", busy_30ms, NULL);
    test_capture cap;
    capture_begin(&cap);
    ASSERT_EQ(evl_run(loop), 0);
    char *err = capture_end(&cap);
    ASSERT_STR_EQ(err, "");
    free(err);
    evl_future_unref(slow);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* --------------------------------------------------------- stack overflow */

static volatile intptr_t depth_limit = INTPTR_MAX;

/* The frame's address escapes to the callee, so the recursion cannot be
 * turned into a loop: every level really takes 512+ bytes of stack. */
static intptr_t deep(intptr_t depth, volatile char *parent)
{
    volatile char frame[512];
    if (depth >= depth_limit)
        return 0;
    for (size_t i = 0; i < sizeof(frame); i += 64)
        frame[i] = (char)depth;
    intptr_t r = deep(depth + 1, frame);
    return r + parent[0] + frame[64];
}

static intptr_t recurse(void *arg)
{
    volatile char top[8] = { 0 };
    return deep(0, top);
}

static void overflow_child(void *arg)
{
    evl_loop *loop = test_loop(0, 16 * 1024);
    evl_task *t = evl_spawn(loop, "deep-recursion", recurse, NULL);
    evl_run_until_complete(loop, t);
    fprintf(stderr, "survived the overflow\n");
    _exit(3);
}

TEST_IMPL(stack_overflow_report)
{
    char *err = NULL;
    int status = test_fork_run(overflow_child, NULL, &err);
    ASSERT_STR_CONTAINS(err, "stack overflow in task 'deep-recursion'");
    ASSERT_STR_CONTAINS(err, "16384-byte stack");
    ASSERT_STR_NOT_CONTAINS(err, "survived");
    if (TEST_ASAN) {
        /* ASan's own SEGV handler (chained) reports and exits non-zero. */
        ASSERT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0));
    } else {
        ASSERT_TRUE(WIFSIGNALED(status));
        ASSERT_EQ(WTERMSIG(status), SIGSEGV);
    }
    free(err);
    return 0;
}

/* A segfault that is not a stack overflow is not reported as one. */
static intptr_t null_deref(void *arg)
{
    volatile int *p = arg;
    return *p;
}

static void segv_child(void *arg)
{
    evl_loop *loop = test_loop(0, 0);
    evl_task *t = evl_spawn(loop, "null-deref", null_deref, NULL);
    evl_run_until_complete(loop, t);
    _exit(3);
}

TEST_IMPL(stack_overflow_other_segv)
{
    char *err = NULL;
    int status = test_fork_run(segv_child, NULL, &err);
    ASSERT_STR_NOT_CONTAINS(err, "stack overflow in task");
    if (!TEST_ASAN) {
        ASSERT_TRUE(WIFSIGNALED(status));
        ASSERT_EQ(WTERMSIG(status), SIGSEGV);
    } else {
        ASSERT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    free(err);
    return 0;
}

/* --------------------------------------- loop freed, references remain */

static intptr_t failing(void *arg) { return EVL_EINVAL; }

TEST_IMPL(loop_free_with_references)
{
    size_t heap0 = test_heap_in_use();
    evl_loop *loop = test_loop(EVL_LOOP_DEBUG, 0);
    evl_task *done[8];
    for (int i = 0; i < 8; i++)
        done[i] = evl_spawn(loop, "done", return_arg, (void *)(intptr_t)i);
    evl_task *bad = evl_spawn(loop, "bad", failing, NULL);
    evl_future *f = evl_future_new(loop);
    evl_task *pending = evl_spawn(loop, "pending", await_arg, f);
    evl_future *g = evl_gather_new(loop, done, 8, 0);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_future_result(g), 0);
    test_capture cap;
    capture_begin(&cap);
    ASSERT_LOOP_FREE(loop, 1);
    /* The program drops its references after the loop is gone: no use
     * after free (ASan), nothing leaked (LSan / heap count). */
    for (int i = 0; i < 8; i++)
        evl_future_unref(done[i]);
    evl_future_unref(g);
    evl_future_unref(pending);
    evl_future_unref(f);
    evl_future_unref(bad);                       /* unretrieved: reported now */
    char *err = capture_end(&cap);
    ASSERT_STR_CONTAINS(err, "task 'pending'");
    ASSERT_STR_CONTAINS(err, "task 'bad'");
    ASSERT_STR_CONTAINS(err, "nobody retrieved its error");
    free(err);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}

static void nop_cb(evl_loop *loop, void *arg) { }

/* Everything a simple run allocates comes back at evl_loop_free. */
static intptr_t busy_life(void *arg)
{
    ASSERT_EQ(evl_sleep(EVL_MS(1)), 0);
    ASSERT_EQ(evl_yield(), 0);
    evl_task *c = evl_spawn(NULL, "c", return_arg, (void *)1);
    ASSERT_EQ(evl_wait_for(c, EVL_MS(10)), 1);
    evl_future_unref(c);
    ASSERT_EQ(evl_call_later(evl_loop_current(), EVL_US(5), nop_cb, NULL), 0);
    ASSERT_EQ(evl_sleep(EVL_MS(1)), 0);
    return 0;
}

TEST_IMPL(loop_free_releases_memory)
{
    size_t heap0 = test_heap_in_use();
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    evl_task *t[20];
    for (int i = 0; i < 20; i++)
        t[i] = evl_spawn(loop, "life", busy_life, NULL);
    for (int i = 0; i < 20; i++) {
        ASSERT_EQ(evl_run_until_complete(loop, t[i]), 0);
        evl_future_unref(t[i]);
    }
    ASSERT_LOOP_FREE(loop, 0);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}

/* A call_later that never fired (the loop was stopped, or never run) must
 * be released by evl_loop_free: the program has no handle to cancel it. */
static void never(evl_loop *loop, void *arg) { FAIL("must not run"); }

TEST_IMPL(loop_free_pending_call_later)
{
    size_t heap0 = test_heap_in_use();
    evl_loop *loop = test_loop(0, 0);
    ASSERT_EQ(evl_call_later(loop, EVL_SEC(100), never, NULL), 0);
    ASSERT_EQ(evl_call_later(loop, EVL_SEC(200), never, NULL), 0);
    ASSERT_LOOP_FREE(loop, 0);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}

/* evl_stop leaves what the last run phase queued in the ready queue; a
 * done-callback among it must not leak (nor keep its future alive). */
static void note(evl_future *f, void *arg) { FAIL("must not run"); }
static void complete_and_stop(evl_loop *loop, void *arg)
{
    ASSERT_EQ(evl_future_set_result(arg, 1), 0);   /* queues note() */
    evl_stop(loop);
}

TEST_IMPL(loop_free_queued_done_callback)
{
    size_t heap0 = test_heap_in_use();
    evl_loop *loop = test_loop(0, 0);
    evl_future *f = evl_future_new(loop);
    ASSERT_EQ(evl_future_add_done(f, note, NULL), 0);
    ASSERT_EQ(evl_call_soon(loop, complete_and_stop, f), 0);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_LOOP_FREE(loop, 0);
    evl_future_unref(f);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}

/* A done-callback registered on a task that is still pending at close. */
TEST_IMPL(loop_free_pending_task_done_callback)
{
    size_t heap0 = test_heap_in_use();
    evl_loop *loop = test_loop(0, 0);
    evl_future *f = evl_future_new(loop);
    evl_task *t = evl_spawn(loop, "pending", await_arg, f);
    ASSERT_EQ(evl_future_add_done(t, note, NULL), 0);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_LOOP_FREE(loop, 1);
    evl_future_unref(t);
    evl_future_unref(f);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}
