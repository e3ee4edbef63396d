/*
 * test-stress.c -- volume: a million trivial tasks, 1e5 concurrent sleepers,
 * and a seeded cancel storm whose every task must end in a consistent
 * state with nothing leaked.  Each case stays well under 20 s on two cores,
 * also under ASan+UBSan.
 */
#define _GNU_SOURCE
#include "task.h"
#include "evl-internal.h"

#include <fcntl.h>
#include <unistd.h>

/* ---------------------------------------------------- 1e6 trivial tasks */

static uint64_t ran;

static intptr_t trivial(void *arg)
{
    ran++;
    return (intptr_t)arg & 0xff;
}

static intptr_t batch_spawner(void *arg)
{
    intptr_t total = (intptr_t)arg;
    for (intptr_t i = 0; i < total; i++) {
        evl_task *t = evl_spawn(NULL, "trivial", trivial, (void *)i);
        ASSERT_NOT_NULL(t);
        evl_future_unref(t);
        if (i % 1000 == 999)
            ASSERT_EQ(evl_yield(), 0);           /* let the batch run */
    }
    return 0;
}

TEST_IMPL(stress_1e6_tasks)
{
    evl_loop *loop = test_loop(0, 0);
    const uint64_t N = 1000000;
    uint64_t w0 = test_wall_ns();
    /* All spawned before the loop runs: a million entries in the queue. */
    evl_task *last = NULL;
    for (uint64_t i = 0; i < N; i++) {
        evl_task *t = evl_spawn(loop, "trivial", trivial, (void *)(uintptr_t)i);
        ASSERT_NOT_NULL(t);
        if (i == N - 1)
            last = t;
        else
            evl_future_unref(t);
    }
    ASSERT_EQ(loop->ntasks, N);
    ASSERT_EQ(ran, 0);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(ran, N);
    ASSERT_EQ(loop->ntasks, 0);
    ASSERT_EQ(evl_future_result(last), (intptr_t)((N - 1) & 0xff));
    evl_future_unref(last);
    ASSERT_LE(loop->stack_pool_n, 1);            /* one at a time: one stack */
    uint64_t w1 = test_wall_ns();
    /* And as many again, spawned by a task in batches (struct reuse). */
    evl_task *sp = evl_spawn(loop, "spawner", batch_spawner, (void *)(intptr_t)N);
    ASSERT_EQ(evl_run_until_complete(loop, sp), 0);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(ran, 2 * N);
    evl_future_unref(sp);
    ASSERT_LOOP_FREE(loop, 0);
    printf("1e6 tasks: %.2f s spawned up front, %.2f s in batches\n",
           (w1 - w0) / 1e9, (test_wall_ns() - w1) / 1e9);
    return 0;
}

/* ---------------------------------------------------- 1e5 sleepers */

#define MAP_COUNT_PATH "/proc/sys/vm/max_map_count"
#define MAP_COUNT_WANT 262144L

static long map_count_old = -1;

static long read_map_count(void)
{
    FILE *f = fopen(MAP_COUNT_PATH, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

static int write_map_count(long v)
{
    int fd = open(MAP_COUNT_PATH, O_WRONLY);
    if (fd < 0)
        return -1;
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%ld\n", v);
    int ok = write(fd, buf, (size_t)n) == n;
    close(fd);
    return ok ? 0 : -1;
}

/* Put back the old limit, unless somebody changed it meanwhile. */
static void restore_map_count(void)
{
    if (map_count_old >= 0 && read_map_count() == MAP_COUNT_WANT)
        write_map_count(map_count_old);
    map_count_old = -1;
}

/* 0 when the limit is high enough (raising it if needed), else 77. */
static int ensure_map_count(void)
{
    long cur = read_map_count();
    if (cur >= MAP_COUNT_WANT)
        return 0;
    if (geteuid() != 0) {
        fprintf(stderr, "skip: vm.max_map_count is %ld (< %ld) and we are not root\n",
                cur, MAP_COUNT_WANT);
        return TEST_SKIP;
    }
    if (write_map_count(MAP_COUNT_WANT) < 0 || read_map_count() < MAP_COUNT_WANT) {
        fprintf(stderr, "skip: cannot raise vm.max_map_count from %ld to %ld\n",
                cur, MAP_COUNT_WANT);
        return TEST_SKIP;
    }
    map_count_old = cur;
    test_on_fail(restore_map_count);
    return 0;
}

#define NSLEEPERS 100000

typedef struct sleeper_arg {
    uint64_t delay;
    uint32_t index;
} sleeper_arg;

static uint64_t wake_prev_time;
static uint32_t wake_prev_index;
static uint64_t wakes;
static uint64_t sleep_t0;

static intptr_t sleeper(void *arg)
{
    sleeper_arg *a = arg;
    evl_loop *loop = evl_loop_current();
    ASSERT_U64_EQ(evl_now(loop), sleep_t0);      /* all start in iteration 1 */
    ASSERT_EQ(evl_sleep(a->delay), 0);
    uint64_t now = evl_now(loop);
    ASSERT_U64_EQ(now - sleep_t0, a->delay);     /* exact virtual deadline */
    /* Wakes come in (deadline, start order) order. */
    if (wakes) {
        ASSERT_U64_GE(now, wake_prev_time);
        if (now == wake_prev_time)
            ASSERT_GT(a->index, wake_prev_index);
    }
    wake_prev_time = now;
    wake_prev_index = a->index;
    wakes++;
    return 0;
}

TEST_IMPL(stress_1e5_sleepers)
{
    int rc = ensure_map_count();
    if (rc)
        return rc;
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 16 * 1024);
    sleep_t0 = evl_now(loop);
    sleeper_arg *args = malloc(sizeof(*args) * NSLEEPERS);
    uint64_t seed = 12345;
    for (uint32_t i = 0; i < NSLEEPERS; i++) {
        args[i].delay = EVL_MS(1 + test_rand(&seed) % 1000);
        args[i].index = i;
        evl_task *t = evl_spawn(loop, "sleeper", sleeper, &args[i]);
        ASSERT_NOT_NULL(t);
        evl_future_unref(t);
    }
    uint64_t w0 = test_wall_ns();
    ASSERT_EQ(evl_run(loop), 0);
    uint64_t wall = test_wall_ns() - w0;
    ASSERT_EQ(wakes, NSLEEPERS);
    ASSERT_EQ(loop->ntasks, 0);
    ASSERT_EQ(loop->timers.n, 0);
    ASSERT_LE(evl_now(loop) - sleep_t0, EVL_MS(1000));
    ASSERT_LE(loop->stack_pool_n, 256);          /* the pool is bounded */
    ASSERT_LOOP_FREE(loop, 0);
    free(args);
    restore_map_count();
    printf("1e5 sleepers: %.2f s wall for %.3f s of virtual time\n", wall / 1e9,
           1.0 * 1000);
    return 0;
}

/* ------------------------------------------------------- cancel storm */

#define STORM_N 3000

typedef struct storm_task {
    evl_task *task;
    uint64_t rng;
    int started;
    int returned;             /* the body returned (ret is valid) */
    intptr_t ret;
    int saw_cancel;
} storm_task;

static storm_task storm[STORM_N];
static uint64_t storm_rng = 0xC0FFEE;
static evl_timer chaos;
static int chaos_left = 40;
static uint64_t children_spawned, cancels_taken;

static intptr_t storm_child(void *arg)
{
    uint64_t ms = (uintptr_t)arg;
    int r = evl_sleep(EVL_MS(ms));
    return r < 0 ? r : 1;
}

/* 1: go on, 0: give up (return EVL_ECANCELED). */
static int on_result(storm_task *s, intptr_t r)
{
    if (r != EVL_ECANCELED)
        return 1;
    s->saw_cancel++;
    return test_rand(&s->rng) % 2;               /* swallow half of them */
}

static intptr_t storm_body(void *arg)
{
    storm_task *s = arg;
    int i = (int)(s - storm);
    s->started = 1;
    int rounds = 1 + (int)(test_rand(&s->rng) % 6);
    for (int k = 0; k < rounds; k++) {
        intptr_t r = 0;
        int later = i + 1 + (int)(test_rand(&s->rng) % 64);   /* a DAG */
        if (later >= STORM_N)
            later = -1;
        switch (test_rand(&s->rng) % 8) {
        case 0:
            r = evl_sleep(EVL_MS(test_rand(&s->rng) % 4));
            break;
        case 1: {
            int j = (int)(test_rand(&s->rng) % STORM_N);
            if (j != i && evl_cancel(storm[j].task))
                cancels_taken++;
            r = evl_yield();
            break;
        }
        case 2:
            if (later >= 0)
                r = evl_await(storm[later].task);
            break;
        case 3:
            if (later >= 0)
                r = evl_wait_for(storm[later].task, EVL_MS(test_rand(&s->rng) % 4));
            break;
        case 4:
            if (later >= 0) {
                int other = later + 1 < STORM_N ? later + 1 : later;
                evl_future *kids[2] = { storm[later].task, storm[other].task };
                intptr_t res[2];
                r = evl_gather(kids, 2, test_rand(&s->rng) % 2 ? EVL_GATHER_COLLECT : 0, res);
            }
            break;
        case 5:
            evl_cancel(evl_current_task());
            r = evl_sleep(EVL_MS(1));
            break;
        case 6: {
            evl_task *c = evl_spawn(NULL, "child", storm_child,
                                    (void *)(uintptr_t)(test_rand(&s->rng) % 3));
            ASSERT_NOT_NULL(c);
            children_spawned++;
            if (test_rand(&s->rng) % 2) {
                r = evl_await(c);
            } else {
                evl_cancel(c);
                r = evl_yield();
            }
            evl_future_unref(c);
            break;
        }
        default:
            r = evl_yield();
            break;
        }
        if (!on_result(s, r)) {
            s->ret = EVL_ECANCELED;
            s->returned = 1;
            return EVL_ECANCELED;
        }
    }
    uint64_t x = test_rand(&s->rng) % 10;
    s->ret = x == 0 ? EVL_EINVAL : x == 1 ? -EPIPE : (intptr_t)(i + rounds);
    s->returned = 1;
    return s->ret;
}

static void chaos_cb(evl_loop *loop, void *arg)
{
    for (int n = 0; n < 50; n++) {
        int j = (int)(test_rand(&storm_rng) % STORM_N);
        if (evl_cancel(storm[j].task))
            cancels_taken++;
    }
    if (--chaos_left > 0)
        evl_timer_start(loop, &chaos, EVL_US(700), chaos_cb, NULL);
}

TEST_IMPL(stress_cancel_storm)
{
    size_t heap0 = test_heap_in_use();
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 64 * 1024);
    for (int i = 0; i < STORM_N; i++) {
        storm[i].rng = 0x5EED0000ull + (uint64_t)i * 7919;
        storm[i].task = evl_spawn(loop, "storm", storm_body, &storm[i]);
        ASSERT_NOT_NULL(storm[i].task);
    }
    /* Some are cancelled before they ever run. */
    for (int n = 0; n < STORM_N / 20; n++)
        evl_cancel(storm[test_rand(&storm_rng) % STORM_N].task);
    evl_timer_init(&chaos);
    ASSERT_EQ(evl_timer_start(loop, &chaos, EVL_US(300), chaos_cb, NULL), 0);
    ASSERT_EQ(evl_run(loop), 0);

    int nstate[8] = { 0 };
    int unstarted = 0, saw = 0;
    for (int i = 0; i < STORM_N; i++) {
        storm_task *s = &storm[i];
        evl_task *t = s->task;
        int st = evl_task_state(t);
        ASSERT_TRUE(evl_future_done(t));
        nstate[st]++;
        saw += s->saw_cancel > 0;
        intptr_t res = evl_future_result(t);
        switch (st) {
        case EVL_TASK_FINISHED:
            ASSERT_TRUE(s->returned);
            ASSERT_EQ(evl_future_state(t), EVL_FUTURE_DONE);
            ASSERT_GE(res, 0);
            ASSERT_EQ(res, s->ret);
            break;
        case EVL_TASK_FAILED:
            ASSERT_TRUE(s->returned);
            ASSERT_EQ(evl_future_state(t), EVL_FUTURE_DONE);
            ASSERT_LT(res, 0);
            ASSERT_NE(res, EVL_ECANCELED);
            ASSERT_EQ(res, s->ret);
            break;
        case EVL_TASK_CANCELLED:
            ASSERT_EQ(evl_future_state(t), EVL_FUTURE_CANCELLED);
            ASSERT_ERR(res, EVL_ECANCELED);
            /* Either it never ran, or it returned (maybe with a
             * cancellation still pending). */
            ASSERT_TRUE(!s->started || s->returned);
            break;
        default:
            FAIL("task %d ended in state %d", i, st);
        }
        if (!s->started) {
            ASSERT_EQ(st, EVL_TASK_CANCELLED);
            unstarted++;
        }
    }
    printf("storm: %d finished, %d failed, %d cancelled (%d never started), "
           "%d saw a cancellation, %" PRIu64 " cancels taken, %" PRIu64 " children\n",
           nstate[EVL_TASK_FINISHED], nstate[EVL_TASK_FAILED], nstate[EVL_TASK_CANCELLED],
           unstarted, saw, cancels_taken, children_spawned);
    /* The storm really stormed. */
    ASSERT_GT(nstate[EVL_TASK_CANCELLED], STORM_N / 20);
    ASSERT_GT(nstate[EVL_TASK_FINISHED], STORM_N / 20);
    ASSERT_GT(nstate[EVL_TASK_FAILED], 0);
    ASSERT_GT(unstarted, 0);
    ASSERT_GT(saw, STORM_N / 20);
    ASSERT_EQ(loop->ntasks, 0);
    ASSERT_EQ(loop->timers.n, 0);
    for (int i = 0; i < STORM_N; i++)
        evl_future_unref(storm[i].task);
    ASSERT_LOOP_FREE(loop, 0);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}
