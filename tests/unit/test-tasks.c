/*
 * test-tasks.c -- tasks: scheduling, results and errors, awaits outside a
 * task and on oneself, awaiting done futures, names, ids, states, parents.
 */
#define _GNU_SOURCE
#include "task.h"
#include "evl-internal.h"

#include <sys/socket.h>
#include <unistd.h>

static int body_ran;

static intptr_t mark_ran(void *arg)
{
    body_ran++;
    test_log("%s", evl_task_name(evl_current_task()));
    return (intptr_t)arg;
}

TEST_IMPL(task_spawn_schedules)
{
    evl_loop *loop = test_loop(0, 0);
    test_log_reset();
    evl_task *a = evl_spawn(loop, "a", mark_ran, (void *)1);
    evl_task *b = evl_spawn(loop, "b", mark_ran, (void *)2);
    ASSERT_NOT_NULL(a);
    ASSERT_NOT_NULL(b);
    ASSERT_TRUE(evl_is_task(a));
    ASSERT_EQ(body_ran, 0);                      /* nothing runs at spawn */
    ASSERT_EQ(evl_task_state(a), EVL_TASK_READY);
    ASSERT_EQ(evl_future_state(a), EVL_FUTURE_PENDING);
    ASSERT_ERR(evl_future_result(a), EVL_ENOTDONE);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(body_ran, 2);
    ASSERT_STR_EQ(test_trace, "a b ");
    ASSERT_EQ(evl_task_state(a), EVL_TASK_FINISHED);
    ASSERT_EQ(evl_future_result(a), 1);
    ASSERT_EQ(evl_future_result(b), 2);
    evl_future_unref(a);
    evl_future_unref(b);
    ASSERT_NULL(evl_spawn(loop, "x", NULL, NULL));
    ASSERT_EQ(errno, EINVAL);
    ASSERT_NULL(evl_spawn(NULL, "x", mark_ran, NULL));   /* no current loop */
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* A task spawned by a running task runs after the tasks already ready. */
static intptr_t spawner(void *arg)
{
    test_log("p");
    evl_task *c = evl_spawn(NULL, "c", mark_ran, (void *)3);  /* current loop */
    ASSERT_NOT_NULL(c);
    ASSERT_EQ(evl_task_state(c), EVL_TASK_READY);
    test_log("p-spawned");
    intptr_t r = evl_await(c);
    evl_future_unref(c);
    return r;
}

TEST_IMPL(task_spawn_from_task)
{
    evl_loop *loop = test_loop(0, 0);
    test_log_reset();
    evl_task *p = evl_spawn(loop, "p", spawner, NULL);
    evl_task *b = evl_spawn(loop, "b", mark_ran, NULL);
    ASSERT_EQ(evl_run_until_complete(loop, p), 3);
    ASSERT_STR_EQ(test_trace, "p p-spawned b c ");
    evl_future_unref(p);
    evl_future_unref(b);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

static intptr_t return_arg(void *arg) { return (intptr_t)arg; }

TEST_IMPL(task_result_and_error)
{
    evl_loop *loop = test_loop(0, 0);
    evl_task *ok = evl_spawn(loop, "ok", return_arg, (void *)42);
    evl_task *bad = evl_spawn(loop, "bad", return_arg, (void *)(intptr_t)EVL_EINVAL);
    evl_task *cxl = evl_spawn(loop, "cxl", return_arg, (void *)(intptr_t)EVL_ECANCELED);
    ASSERT_EQ(evl_run_until_complete(loop, ok), 42);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_task_state(ok), EVL_TASK_FINISHED);
    ASSERT_EQ(evl_future_state(ok), EVL_FUTURE_DONE);
    ASSERT_EQ(evl_task_state(bad), EVL_TASK_FAILED);
    ASSERT_EQ(evl_future_state(bad), EVL_FUTURE_DONE);
    ASSERT_ERR(evl_future_result(bad), EVL_EINVAL);
    /* Returning EVL_ECANCELED ends the task CANCELLED. */
    ASSERT_EQ(evl_task_state(cxl), EVL_TASK_CANCELLED);
    ASSERT_EQ(evl_future_state(cxl), EVL_FUTURE_CANCELLED);
    ASSERT_ERR(evl_future_result(cxl), EVL_ECANCELED);
    /* Tasks cannot be completed from outside. */
    ASSERT_ERR(evl_future_set_result(ok, 1), EVL_EINVAL);
    ASSERT_ERR(evl_future_set_error(bad, EVL_EBUSY), EVL_EINVAL);
    evl_future_unref(ok);
    evl_future_unref(bad);
    evl_future_unref(cxl);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Errors propagate through awaits of tasks. */
static intptr_t await_child_error(void *arg)
{
    evl_task *c = evl_spawn(NULL, "child", return_arg, (void *)(intptr_t)-ENOENT);
    intptr_t r = evl_await(c);
    evl_future_unref(c);
    return r;
}

TEST_IMPL(task_error_propagates)
{
    evl_loop *loop = test_loop(0, 0);
    evl_task *t = evl_spawn(loop, "parent", await_child_error, NULL);
    ASSERT_ERR(evl_run_until_complete(loop, t), -ENOENT);
    ASSERT_EQ(evl_task_state(t), EVL_TASK_FAILED);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* ----------------------------------------------- awaits outside a task */

static void await_in_callback(evl_loop *loop, void *arg)
{
    evl_future *f = arg;
    ASSERT_NULL(evl_current_task());
    ASSERT_PTR_EQ(evl_loop_current(), loop);
    ASSERT_ERR(evl_await(f), EVL_ENOTTASK);
    ASSERT_ERR(evl_sleep(0), EVL_ENOTTASK);
    ASSERT_ERR(evl_yield(), EVL_ENOTTASK);
    ASSERT_ERR(evl_sleep(EVL_MS(1)), EVL_ENOTTASK);
    test_log("cb-ok");
}

TEST_IMPL(task_await_outside_task)
{
    evl_loop *loop = test_loop(0, 0);
    evl_future *f = evl_future_new(loop);
    test_log_reset();
    /* Outside any loop. */
    ASSERT_NULL(evl_current_task());
    ASSERT_NULL(evl_loop_current());
    ASSERT_ERR(evl_await(f), EVL_ENOTTASK);
    ASSERT_ERR(evl_sleep(EVL_MS(1)), EVL_ENOTTASK);
    ASSERT_ERR(evl_yield(), EVL_ENOTTASK);
    ASSERT_ERR(evl_wait_for(f, EVL_MS(1)), EVL_ENOTTASK);
    ASSERT_ERR(evl_gather(&f, 1, 0, NULL), EVL_ENOTTASK);
    ASSERT_ERR(evl_wait_fd(0, EVL_READABLE), EVL_ENOTTASK);
    ASSERT_ERR(evl_run_in_executor((evl_work_fn)return_arg, NULL), EVL_ENOTTASK);
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    char c;
    /* Would block: the helper must report ENOTTASK, not block or crash. */
    ASSERT_ERR(evl_recv(sv[0], &c, 1, 0), EVL_ENOTTASK);
    ASSERT_ERR(evl_read(sv[0], &c, 1), EVL_ENOTTASK);
    close(sv[0]);
    close(sv[1]);
    /* Inside a running loop but in a plain callback. */
    ASSERT_EQ(evl_call_soon(loop, await_in_callback, f), 0);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "cb-ok ");
    ASSERT_EQ(evl_future_state(f), EVL_FUTURE_PENDING);
    evl_future_unref(f);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

static evl_loop *foreign_loop;

static intptr_t await_self(void *arg)
{
    ASSERT_ERR(evl_await(evl_current_task()), EVL_EINVAL);
    ASSERT_ERR(evl_await(NULL), EVL_EINVAL);
    ASSERT_ERR(evl_wait_for(NULL, 1), EVL_EINVAL);
    evl_future *f = evl_future_new(foreign_loop);
    ASSERT_ERR(evl_await(f), EVL_EWRONGLOOP);
    ASSERT_ERR(evl_wait_for(f, EVL_MS(1)), EVL_EWRONGLOOP);
    evl_future_unref(f);
    return 11;
}

TEST_IMPL(task_await_self)
{
    evl_loop *loop = test_loop(0, 0);
    foreign_loop = test_loop(0, 0);
    evl_task *t = evl_spawn(loop, "self", await_self, NULL);
    ASSERT_EQ(evl_run_until_complete(loop, t), 11);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(foreign_loop, 0);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* ------------------------------------------ awaiting a done future */

static int other_ran;
static intptr_t count_other(void *arg)
{
    other_ran++;
    return 0;
}

static intptr_t await_done(void *arg)
{
    evl_task *finished = arg;
    evl_future *f = evl_future_new(NULL);
    ASSERT_EQ(evl_future_set_result(f, 3), 0);
    intptr_t r = evl_await(f);                   /* must not suspend */
    ASSERT_EQ(r, 3);
    ASSERT_EQ(other_ran, 0);                     /* nobody else ran */
    ASSERT_EQ(evl_task_state(evl_current_task()), EVL_TASK_RUNNING);
    ASSERT_TRUE(f->retrieved);
    evl_future_unref(f);
    /* Same for a finished task and a cancelled future. */
    ASSERT_EQ(evl_await(finished), 77);
    f = evl_future_new(NULL);
    evl_cancel(f);
    ASSERT_ERR(evl_await(f), EVL_ECANCELED);
    ASSERT_EQ(evl_gather(NULL, 0, 0, NULL), 0);  /* empty gather: done */
    ASSERT_EQ(other_ran, 0);
    /* wait_for with a timeout follows CPython 3.11's wait_for, which
     * awaits its internal waiter even for a done future: it may suspend,
     * but must still return the outcome. */
    ASSERT_ERR(evl_wait_for(f, EVL_MS(1)), EVL_ECANCELED);
    evl_future_unref(f);
    return r;
}

TEST_IMPL(task_await_done_no_suspend)
{
    evl_loop *loop = test_loop(0, 0);
    evl_task *first = evl_spawn(loop, "first", return_arg, (void *)77);
    ASSERT_EQ(evl_run_until_complete(loop, first), 77);
    evl_task *a = evl_spawn(loop, "a", await_done, first);
    evl_task *b = evl_spawn(loop, "b", count_other, NULL);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_future_result(a), 3);
    ASSERT_EQ(other_ran, 1);
    evl_future_unref(first);
    evl_future_unref(a);
    evl_future_unref(b);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* ------------------------------------------------ names, ids, states */

static intptr_t check_identity(void *arg)
{
    evl_task *self = evl_current_task();
    ASSERT_PTR_EQ(self, arg);
    ASSERT_PTR_EQ(evl_future_loop(self), evl_loop_current());
    ASSERT_EQ(evl_task_state(self), EVL_TASK_RUNNING);
    return 0;
}

TEST_IMPL(task_names_and_ids)
{
    evl_loop *loop = test_loop(0, 0);
    char longname[100];
    memset(longname, 'n', sizeof(longname) - 1);
    longname[99] = 0;
    evl_task *t1 = evl_spawn(loop, "worker", return_arg, NULL);
    evl_task *t2 = evl_spawn(loop, NULL, return_arg, NULL);
    evl_task *t3 = evl_spawn(loop, longname, return_arg, NULL);
    evl_task *t4 = evl_spawn(loop, "", return_arg, NULL);
    ASSERT_STR_EQ(evl_task_name(t1), "worker");
    ASSERT_STR_EQ(evl_task_name(t2), "task");
    ASSERT_EQ(strlen(evl_task_name(t3)), 47);
    ASSERT_TRUE(strncmp(evl_task_name(t3), longname, 47) == 0);
    ASSERT_STR_EQ(evl_task_name(t4), "");
    ASSERT_U64_GT(evl_task_id(t1), 0);
    ASSERT_U64_LT(evl_task_id(t1), evl_task_id(t2));
    ASSERT_U64_LT(evl_task_id(t2), evl_task_id(t3));
    ASSERT_U64_LT(evl_task_id(t3), evl_task_id(t4));
    /* A plain future is not a task. */
    evl_future *f = evl_future_new(loop);
    ASSERT_FALSE(evl_is_task(f));
    ASSERT_FALSE(evl_is_task(NULL));
    ASSERT_STR_EQ(evl_task_name(f), "");
    ASSERT_U64_EQ(evl_task_id(f), 0);
    ASSERT_ERR(evl_task_state(f), EVL_EINVAL);
    evl_future_unref(f);

    evl_task *me = evl_spawn(loop, "me", check_identity, NULL);
    evl__task_of(me)->arg = me;                  /* let it check itself */
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_future_result(me), 0);
    /* The name outlives the run. */
    ASSERT_STR_EQ(evl_task_name(t1), "worker");
    evl_task *all[] = { t1, t2, t3, t4, me };
    for (int i = 0; i < 5; i++)
        evl_future_unref(all[i]);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* States seen from another task: READY before the first step, RUNNING,
 * SUSPENDED while it sleeps, READY once woken but not yet run, and the
 * final states. */
static evl_task *watched;
static intptr_t watched_body(void *arg)
{
    ASSERT_EQ(evl_task_state(watched), EVL_TASK_RUNNING);
    ASSERT_EQ(evl_sleep(EVL_MS(2)), 0);
    ASSERT_EQ(evl_await(arg), 1);
    return 5;
}

static intptr_t watcher_body(void *arg)
{
    evl_future *f = arg;
    ASSERT_EQ(evl_task_state(watched), EVL_TASK_READY);   /* spawned after us */
    ASSERT_EQ(evl_sleep(EVL_MS(1)), 0);
    ASSERT_EQ(evl_task_state(watched), EVL_TASK_SUSPENDED);
    ASSERT_EQ(evl_sleep(EVL_MS(2)), 0);
    ASSERT_EQ(evl_task_state(watched), EVL_TASK_SUSPENDED);  /* on f now */
    ASSERT_EQ(evl_future_set_result(f, 1), 0);
    ASSERT_EQ(evl_task_state(watched), EVL_TASK_READY);      /* woken */
    ASSERT_EQ(evl_await(watched), 5);
    ASSERT_EQ(evl_task_state(watched), EVL_TASK_FINISHED);
    return 0;
}

TEST_IMPL(task_states)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    evl_future *f = evl_future_new(loop);
    evl_task *w = evl_spawn(loop, "watcher", watcher_body, f);
    watched = evl_spawn(loop, "watched", watched_body, f);
    ASSERT_EQ(evl_run_until_complete(loop, w), 0);
    ASSERT_EQ(evl_task_state(watched), EVL_TASK_FINISHED);
    evl_future_unref(w);
    evl_future_unref(watched);
    evl_future_unref(f);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Parent ids (white-box: not in the public API, but in the probes). */
static uint64_t child_parent, grandchild_parent, child_id;

static intptr_t grandchild(void *arg)
{
    grandchild_parent = evl__task_of(evl_current_task())->parent_id;
    return 0;
}

static intptr_t child(void *arg)
{
    child_id = evl_task_id(evl_current_task());
    child_parent = evl__task_of(evl_current_task())->parent_id;
    evl_task *g = evl_spawn(NULL, "grandchild", grandchild, NULL);
    intptr_t r = evl_await(g);
    evl_future_unref(g);
    return r;
}

TEST_IMPL(task_parent_ids)
{
    evl_loop *loop = test_loop(0, 0);
    evl_task *root = evl_spawn(loop, "root", child, NULL);
    ASSERT_U64_EQ(evl__task_of(root)->parent_id, 0);   /* spawned outside tasks */
    ASSERT_EQ(evl_run_until_complete(loop, root), 0);
    ASSERT_U64_EQ(child_parent, 0);
    ASSERT_U64_EQ(child_id, evl_task_id(root));
    ASSERT_U64_EQ(grandchild_parent, evl_task_id(root));
    evl_future_unref(root);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* evl_all_tasks is asyncio.all_tasks: the tasks not done yet, oldest
 * first, each with a reference; then asyncio.Runner.close's shutdown. */
static intptr_t at_sleeper(void *arg)
{
    intptr_t r = evl_sleep(EVL_SEC(3600));
    return arg && r == EVL_ECANCELED ? 5 : r;    /* arg: swallows it */
}

static intptr_t at_main(void *arg)
{
    evl_loop *loop = evl_loop_current();
    evl_task *me = evl_current_task(), *ts[8];
    ASSERT_EQ(evl_all_tasks(NULL, NULL, 0), 1);
    ASSERT_EQ(evl_all_tasks(NULL, ts, 8), 1);
    ASSERT_PTR_EQ(ts[0], me);
    evl_future_unref(ts[0]);
    evl_task *a = evl_spawn(NULL, "a", mark_ran, NULL);
    evl_task *b = evl_spawn(NULL, "b", at_sleeper, (void *)1);
    evl_task *c = evl_spawn(NULL, "c", at_sleeper, NULL);
    /* Not started yet counts; fewer slots than tasks: the oldest. */
    ts[2] = NULL;
    ASSERT_EQ(evl_all_tasks(loop, ts, 2), 4);
    ASSERT_PTR_EQ(ts[0], me);
    ASSERT_PTR_EQ(ts[1], a);
    ASSERT_NULL(ts[2]);                          /* not written */
    evl_future_unref(ts[0]);
    evl_future_unref(ts[1]);
    ASSERT_EQ(evl_yield(), 0);                   /* a ran and is done */
    ASSERT_EQ(evl_task_state(a), EVL_TASK_FINISHED);
    ASSERT_EQ(evl_all_tasks(loop, ts, 8), 3);
    ASSERT_PTR_EQ(ts[0], me);
    ASSERT_PTR_EQ(ts[1], b);
    ASSERT_PTR_EQ(ts[2], c);
    for (int i = 0; i < 3; i++)
        evl_future_unref(ts[i]);
    evl_future_unref(a);
    evl_future_unref(b);
    evl_future_unref(c);
    return 0;                                    /* b and c left running */
}

TEST_IMPL(task_all_tasks)
{
    size_t heap0 = test_heap_in_use();
    evl_task *ts[4];
    ASSERT_EQ(evl_all_tasks(NULL, ts, 4), 0);    /* no loop runs here */
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    ASSERT_EQ(evl_all_tasks(loop, ts, 4), 0);
    evl_task *m = evl_spawn(loop, "main", at_main, NULL);
    ASSERT_EQ(evl_all_tasks(loop, NULL, 0), 1);  /* a loop not running */
    ASSERT_EQ(evl_run_until_complete(loop, m), 0);
    evl_future_unref(m);

    /* Runner.close: cancel what is left, gather it, run until done.  The
     * array's references are the only ones left on b and c. */
    size_t n = evl_all_tasks(loop, ts, 4);
    ASSERT_EQ(n, 2);
    ASSERT_STR_EQ(evl_task_name(ts[0]), "b");
    ASSERT_STR_EQ(evl_task_name(ts[1]), "c");
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(evl_cancel(ts[i]), 1);
    evl_future *all = evl_gather_new(loop, ts, n, EVL_GATHER_COLLECT);
    ASSERT_NOT_NULL(all);
    ASSERT_EQ(evl_run_until_complete(loop, all), 0);
    evl_future_unref(all);
    ASSERT_EQ(evl_all_tasks(loop, NULL, 0), 0);
    ASSERT_EQ(evl_task_state(ts[0]), EVL_TASK_FINISHED);   /* swallowed it */
    ASSERT_EQ(evl_future_result(ts[0]), 5);
    ASSERT_EQ(evl_task_state(ts[1]), EVL_TASK_CANCELLED);
    for (size_t i = 0; i < n; i++)
        evl_future_unref(ts[i]);
    ASSERT_LOOP_FREE(loop, 0);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}

/* sleep(0) is a round-robin yield. */
static intptr_t yielder(void *arg)
{
    for (int i = 0; i < 3; i++) {
        test_log("%s%d", evl_task_name(evl_current_task()), i);
        ASSERT_EQ(evl_yield(), 0);
    }
    return 0;
}

TEST_IMPL(task_yield_round_robin)
{
    evl_loop *loop = test_loop(0, 0);
    test_log_reset();
    evl_task *t[3];
    t[0] = evl_spawn(loop, "a", yielder, NULL);
    t[1] = evl_spawn(loop, "b", yielder, NULL);
    t[2] = evl_spawn(loop, "c", yielder, NULL);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "a0 b0 c0 a1 b1 c1 a2 b2 c2 ");
    for (int i = 0; i < 3; i++)
        evl_future_unref(t[i]);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* A task may use most of its stack (the stack_size is honoured). */
static intptr_t use_stack(void *arg)
{
    size_t n = (size_t)arg;
    volatile char *buf = __builtin_alloca(n);
    for (size_t i = 0; i < n; i += 256)
        buf[i] = (char)i;
    ASSERT_EQ(evl_yield(), 0);
    intptr_t sum = 0;
    for (size_t i = 0; i < n; i += 256)
        sum += buf[i] == (char)i;
    return sum;
}

TEST_IMPL(task_large_stack_use)
{
    evl_loop *loop = test_loop(0, 512 * 1024);
    size_t n = 400 * 1024;
    evl_task *t = evl_spawn(loop, "big", use_stack, (void *)n);
    ASSERT_EQ(evl_run_until_complete(loop, t), (intptr_t)(n / 256));
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Stacks are pooled: many short tasks one after another reuse them. */
TEST_IMPL(task_stack_reuse)
{
    evl_loop *loop = test_loop(0, 0);
    for (int round = 0; round < 3; round++) {
        evl_task *t[50];
        for (int i = 0; i < 50; i++)
            t[i] = evl_spawn(loop, "short", use_stack, (void *)(size_t)4096);
        ASSERT_EQ(evl_run(loop), 0);
        for (int i = 0; i < 50; i++) {
            ASSERT_EQ(evl_future_result(t[i]), 16);
            evl_future_unref(t[i]);
        }
        /* 50 tasks were alive at once: 50 stacks, all back in the pool */
        ASSERT_EQ(loop->stack_pool_n, 50);
    }
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}
