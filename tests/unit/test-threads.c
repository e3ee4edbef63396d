/*
 * test-threads.c -- several loops on several threads at once, each with its
 * own tasks, plus call_soon_threadsafe between them.
 */
#define _GNU_SOURCE
#include "task.h"
#include "evl-internal.h"

#include <pthread.h>
#include <unistd.h>

typedef struct thread_ctx {
    evl_loop *loop;
    evl_loop *peer;           /* gets call_soon_threadsafe posts from us */
    struct thread_ctx *peer_ctx;
    int ntasks;
    int rounds;
    pthread_barrier_t *start;
    atomic_int received;      /* posts received from the peer */
    int posts;                /* posts sent to the peer */
    intptr_t sum;
    uint64_t last_id;
    pid_t tid;
} thread_ctx;

static void peer_cb(evl_loop *loop, void *arg)
{
    thread_ctx *c = arg;      /* the receiving side's context */
    ASSERT_PTR_EQ(evl_loop_current(), c->loop);
    ASSERT_EQ(gettid(), c->tid);
    atomic_fetch_add(&c->received, 1);
}

typedef struct task_arg {
    thread_ctx *ctx;
    intptr_t i;
} task_arg;

static intptr_t child_double(void *arg)
{
    ASSERT_EQ(evl_yield(), 0);
    return (intptr_t)arg * 2;
}

static intptr_t worker(void *arg)
{
    task_arg *a = arg;
    thread_ctx *c = a->ctx;
    for (int r = 0; r < c->rounds; r++) {
        ASSERT_PTR_EQ(evl_loop_current(), c->loop);
        ASSERT_PTR_EQ(evl_future_loop(evl_current_task()), c->loop);
        ASSERT_EQ(gettid(), c->tid);
        if (r % 2)
            ASSERT_EQ(evl_yield(), 0);
        else
            ASSERT_EQ(evl_sleep(EVL_US(1 + (a->i % 7))), 0);
    }
    evl_task *ch = evl_spawn(NULL, "child", child_double, (void *)a->i);
    intptr_t v = evl_await(ch);
    evl_future_unref(ch);
    if (a->i % 100 == 0 && c->peer) {
        ASSERT_EQ(evl_call_soon_threadsafe(c->peer, peer_cb, c->peer_ctx), 0);
        c->posts++;
    }
    return v;
}

static intptr_t collector(void *arg)
{
    thread_ctx *c = arg;
    evl_task **t = malloc(sizeof(*t) * (size_t)c->ntasks);
    task_arg *args = malloc(sizeof(*args) * (size_t)c->ntasks);
    for (int i = 0; i < c->ntasks; i++) {
        args[i] = (task_arg){ c, i };
        t[i] = evl_spawn(NULL, "worker", worker, &args[i]);
        ASSERT_NOT_NULL(t[i]);
        ASSERT_U64_GT(evl_task_id(t[i]), c->last_id);
        c->last_id = evl_task_id(t[i]);
    }
    intptr_t *res = malloc(sizeof(*res) * (size_t)c->ntasks);
    ASSERT_EQ(evl_gather(t, (size_t)c->ntasks, 0, res), 0);
    for (int i = 0; i < c->ntasks; i++) {
        ASSERT_EQ(res[i], 2 * i);
        c->sum += res[i];
        evl_future_unref(t[i]);
    }
    free(res);
    free(args);
    free(t);
    if (c->peer)
        evl_loop_release(c->peer);               /* done posting to it */
    return 0;
}

static void *thread_main(void *arg)
{
    thread_ctx *c = arg;
    c->tid = gettid();
    pthread_barrier_wait(c->start);
    evl_task *t = evl_spawn(c->loop, "collector", collector, c);
    ASSERT_EQ(evl_run_until_complete(c->loop, t), 0);
    evl_future_unref(t);
    ASSERT_EQ(evl_run(c->loop), 0);              /* until the peer lets go */
    ASSERT_NULL(evl_loop_current());
    return NULL;
}

static int run_two_loops(int ntasks, int rounds, unsigned flags)
{
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    thread_ctx c[2];
    memset(c, 0, sizeof(c));
    for (int k = 0; k < 2; k++) {
        c[k].loop = test_loop(flags, 32 * 1024);
        c[k].ntasks = ntasks;
        c[k].rounds = rounds;
        c[k].start = &bar;
    }
    for (int k = 0; k < 2; k++) {
        c[k].peer = c[1 - k].loop;
        c[k].peer_ctx = &c[1 - k];
        evl_loop_hold(c[k].loop);                /* released by the peer */
    }
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
        ASSERT_EQ(pthread_create(&th[k], NULL, thread_main, &c[k]), 0);
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    intptr_t want = (intptr_t)ntasks * (ntasks - 1);
    for (int k = 0; k < 2; k++) {
        ASSERT_EQ(c[k].sum, want);
        ASSERT_EQ(atomic_load(&c[k].received), c[1 - k].posts);
        ASSERT_GT(c[k].posts, 0);
        ASSERT_NE(c[k].tid, c[1 - k].tid);
    }
    for (int k = 0; k < 2; k++)
        ASSERT_LOOP_FREE(c[k].loop, 0);
    pthread_barrier_destroy(&bar);
    return 0;
}

TEST_IMPL(threads_two_loops)
{
    return run_two_loops(500, 6, 0);
}

TEST_IMPL(stress_threads_many_tasks)
{
    /* 5000 live tasks (+ children) per loop: 2 mappings per stack stays
     * below the default vm.max_map_count with both loops at once. */
    return run_two_loops(5000, 20, EVL_LOOP_VIRTUAL_CLOCK);
}
