/*
 * test-executor.c -- run_in_executor: results, pool threads, many jobs,
 * cancellation of the awaiting task and of a job not yet started.
 */
#define _GNU_SOURCE
#include "task.h"
#include "evl-internal.h"

#include <unistd.h>

static intptr_t times_three(void *arg) { return (intptr_t)arg * 3; }

static intptr_t worker_tid(void *arg)
{
    ASSERT_NULL(evl_loop_current());             /* not a loop thread */
    ASSERT_NULL(evl_current_task());
    return (intptr_t)gettid();
}

static intptr_t use_executor(void *arg)
{
    ASSERT_EQ(evl_run_in_executor(times_three, (void *)41), 123);
    intptr_t tid = evl_run_in_executor(worker_tid, NULL);
    ASSERT_GT(tid, 0);
    ASSERT_NE(tid, gettid());                    /* ran off the loop thread */
    ASSERT_NE(getpid(), tid);
    return 0;
}

TEST_IMPL(executor_result_and_thread)
{
    evl_loop *loop = test_loop(0, 0);
    evl_task *t = evl_spawn(loop, "exec", use_executor, NULL);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* ------------------------------------------------------------ many jobs */

static atomic_int running_now, max_running;

static intptr_t slow_double(void *arg)
{
    int r = atomic_fetch_add(&running_now, 1) + 1;
    int m = atomic_load(&max_running);
    while (r > m && !atomic_compare_exchange_weak(&max_running, &m, r))
        ;
    usleep(5000);
    atomic_fetch_sub(&running_now, 1);
    return (intptr_t)arg * 2;
}

#define NJOBS 30
static intptr_t many_jobs(void *arg)
{
    evl_future *f[NJOBS];
    for (int i = 0; i < NJOBS; i++) {
        f[i] = evl_executor_submit(NULL, slow_double, (void *)(intptr_t)i);
        ASSERT_NOT_NULL(f[i]);
    }
    intptr_t res[NJOBS];
    ASSERT_EQ(evl_gather(f, NJOBS, 0, res), 0);
    for (int i = 0; i < NJOBS; i++) {
        ASSERT_EQ(res[i], 2 * i);
        evl_future_unref(f[i]);
    }
    return 0;
}

TEST_IMPL(executor_many_jobs)
{
    evl_loop_options o;
    evl_loop_options_init(&o);
    o.executor_threads = 3;
    evl_loop *loop = evl_loop_new(&o);
    evl_task *t = evl_spawn(loop, "many", many_jobs, NULL);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    ASSERT_LE(atomic_load(&max_running), 3);
    ASSERT_GE(atomic_load(&max_running), 2);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* A future from evl_executor_submit, awaited from outside any task. */
TEST_IMPL(executor_submit_future)
{
    evl_loop *loop = test_loop(0, 0);
    ASSERT_NULL(evl_executor_submit(NULL, times_three, NULL));   /* no loop */
    ASSERT_NULL(evl_executor_submit(loop, NULL, NULL));
    evl_future *f = evl_executor_submit(loop, times_three, (void *)5);
    ASSERT_NOT_NULL(f);
    ASSERT_FALSE(evl_is_task(f));
    ASSERT_EQ(evl_run_until_complete(loop, f), 15);
    evl_future_unref(f);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* --------------------------------------------------------- cancellation */

static atomic_int job_started, job_finished;
static uint64_t cancelled_at_wall;

static intptr_t slow_job(void *arg)
{
    atomic_store(&job_started, 1);
    usleep(200 * 1000);
    atomic_store(&job_finished, 1);
    return 1;
}

static intptr_t await_slow(void *arg)
{
    intptr_t r = evl_run_in_executor(slow_job, NULL);
    cancelled_at_wall = test_wall_ns();
    ASSERT_ERR(r, EVL_ECANCELED);
    ASSERT_EQ(atomic_load(&job_finished), 0);    /* returned at once */
    return r;
}

static intptr_t cancel_soon(void *arg)
{
    /* Once the job runs (a job cancelled before it starts is skipped, like
     * concurrent.futures; that case is executor_cancel_not_started). */
    while (!atomic_load(&job_started))
        ASSERT_EQ(evl_sleep(EVL_MS(1)), 0);
    ASSERT_EQ(evl_cancel(arg), 1);
    return 0;
}

TEST_IMPL(executor_cancel_awaiting_task)
{
    evl_loop *loop = test_loop(0, 0);
    uint64_t w0 = test_wall_ns();
    evl_task *a = evl_spawn(loop, "awaiter", await_slow, NULL);
    evl_task *b = evl_spawn(loop, "canceller", cancel_soon, a);
    ASSERT_EQ(evl_run(loop), 0);                 /* waits for the job */
    ASSERT_EQ(atomic_load(&job_finished), 1);
    ASSERT_U64_LT(cancelled_at_wall - w0, EVL_MS(150));   /* not after 200 ms */
    ASSERT_EQ(evl_task_state(a), EVL_TASK_CANCELLED);
    ASSERT_EQ(loop->exec_inflight, 0);
    evl_future_unref(a);
    evl_future_unref(b);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

static atomic_int second_ran;
static intptr_t block_50ms(void *arg)
{
    usleep(50 * 1000);
    return 50;
}
static intptr_t mark_second(void *arg)
{
    atomic_store(&second_ran, 1);
    return 2;
}

TEST_IMPL(executor_cancel_not_started)
{
    evl_loop_options o;
    evl_loop_options_init(&o);
    o.executor_threads = 1;
    evl_loop *loop = evl_loop_new(&o);
    evl_future *f1 = evl_executor_submit(loop, block_50ms, NULL);
    evl_future *f2 = evl_executor_submit(loop, mark_second, NULL);
    ASSERT_EQ(evl_cancel(f2), 1);
    ASSERT_EQ(evl_future_state(f2), EVL_FUTURE_CANCELLED);
    ASSERT_EQ(evl_cancel(f2), 0);
    ASSERT_EQ(evl_run_until_complete(loop, f1), 50);
    ASSERT_EQ(evl_run(loop), 0);                 /* until the skipped job reports */
    ASSERT_EQ(loop->exec_inflight, 0);
    ASSERT_EQ(atomic_load(&second_ran), 0);
    ASSERT_ERR(evl_future_result(f2), EVL_ECANCELED);
    evl_future_unref(f1);
    evl_future_unref(f2);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Freeing a loop joins its pool; a job still queued is skipped. */
TEST_IMPL(executor_loop_free_with_jobs)
{
    evl_loop_options o;
    evl_loop_options_init(&o);
    o.executor_threads = 1;
    evl_loop *loop = evl_loop_new(&o);
    atomic_store(&second_ran, 0);
    evl_future *f1 = evl_executor_submit(loop, block_50ms, NULL);
    evl_future *f2 = evl_executor_submit(loop, mark_second, NULL);
    evl_future_unref(f1);
    evl_future_unref(f2);
    ASSERT_LOOP_FREE(loop, 0);
    ASSERT_EQ(atomic_load(&second_ran), 0);
    return 0;
}
