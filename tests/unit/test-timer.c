/*
 * test-timer.c -- the timer heap (white-box against a sorted reference),
 * ordering of equal deadlines, stopping due timers, re-arming, call_later
 * and the virtual clock.
 */
#define _GNU_SOURCE
#include "task.h"
#include "evl-internal.h"

/* ------------------------------------------------------- heap vs reference */

#define NT 1500

typedef struct rtimer {
    evl_timer t;
    int id;
    int active;
    uint64_t deadline;
    uint64_t order;           /* start order: the reference tie-breaker */
} rtimer;

static rtimer rt[NT];
static int fired[NT];
static int nfired;

static bool heap_before(const evl__heap_entry *a, const evl__heap_entry *b)
{
    if (a->deadline != b->deadline)
        return a->deadline < b->deadline;
    return a->t->evl__seq < b->t->evl__seq;
}

static void heap_check(evl_loop *loop, int nactive)
{
    evl__heap *h = &loop->timers;
    ASSERT_EQ(h->n, nactive);
    ASSERT_LE(h->n, h->cap);
    for (uint32_t k = 0; k < h->n; k++) {
        ASSERT_EQ(h->a[k].t->evl__index, k);
        ASSERT_U64_EQ(h->a[k].deadline, h->a[k].t->evl__deadline);
        if (k > 0 && heap_before(&h->a[k], &h->a[(k - 1) / 4]))
            FAIL("heap order broken at %u (parent %u)", k, (k - 1) / 4);
    }
}

static void record_fire(evl_loop *loop, void *arg)
{
    rtimer *r = arg;
    ASSERT_TRUE(r->active);
    ASSERT_U64_EQ(evl_now(loop), r->deadline);   /* virtual clock: exact */
    ASSERT_FALSE(evl_timer_active(&r->t));
    r->active = 0;
    fired[nfired++] = r->id;
}

static int ref_cmp(const void *pa, const void *pb)
{
    const rtimer *a = &rt[*(const int *)pa], *b = &rt[*(const int *)pb];
    if (a->deadline != b->deadline)
        return a->deadline < b->deadline ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

TEST_IMPL(timer_heap_random)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    uint64_t order = 0;
    int nactive = 0;
    uint64_t now = evl_now(loop);
    for (int i = 0; i < NT; i++) {
        evl_timer_init(&rt[i].t);
        rt[i].id = i;
    }
    for (int op = 0; op < 20000; op++) {
        int i = (int)(test_rand(&seed) % NT);
        if (test_rand(&seed) % 10 < 6) {
            /* few distinct deadlines: many ties */
            uint64_t delay = (test_rand(&seed) % 300) * 1000;
            ASSERT_EQ(evl_timer_start(loop, &rt[i].t, delay, record_fire, &rt[i]), 0);
            if (!rt[i].active)
                nactive++;
            rt[i].active = 1;
            rt[i].deadline = now + delay;
            rt[i].order = order++;
            ASSERT_TRUE(evl_timer_active(&rt[i].t));
        } else {
            evl_timer_stop(&rt[i].t);
            if (rt[i].active)
                nactive--;
            rt[i].active = 0;
            ASSERT_FALSE(evl_timer_active(&rt[i].t));
        }
        heap_check(loop, nactive);
    }
    ASSERT_GT(nactive, NT / 4);

    int ref[NT], nref = 0;
    for (int i = 0; i < NT; i++)
        if (rt[i].active)
            ref[nref++] = i;
    qsort(ref, (size_t)nref, sizeof(int), ref_cmp);

    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(nfired, nref);
    for (int k = 0; k < nref; k++)
        if (fired[k] != ref[k])
            FAIL("firing order differs at %d: fired timer %d (deadline %" PRIu64
                 "), reference %d (deadline %" PRIu64 ")", k, fired[k],
                 rt[fired[k]].deadline, ref[k], rt[ref[k]].deadline);
    heap_check(loop, 0);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* ------------------------------------------------------ equal deadlines */

static void log_cb(evl_loop *loop, void *arg)
{
    test_log("%s", (const char *)arg);
}

TEST_IMPL(timer_equal_deadlines)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    static evl_timer t[40];
    static char names[40][8];
    char expect[512] = "";
    test_log_reset();
    /* Start them in reverse address order: the tie-breaker is the start
     * order, not the timer's address. */
    for (int k = 0; k < 40; k++) {
        int i = 39 - k;
        snprintf(names[i], sizeof(names[i]), "t%d", i);
        ASSERT_EQ(evl_timer_start(loop, &t[i], EVL_MS(5), log_cb, names[i]), 0);
    }
    evl_timer_stop(&t[30]);     /* removed from the middle of a tie */
    for (int k = 0; k < 40; k++) {
        int i = 39 - k;
        if (i == 30)
            continue;
        size_t len = strlen(expect);
        snprintf(expect + len, sizeof(expect) - len, "t%d ", i);
    }
    uint64_t t0 = evl_now(loop);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, expect);
    ASSERT_U64_EQ(evl_now(loop) - t0, EVL_MS(5));
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Equal deadlines reached from different iterations: the one started
 * first fires first. */
static evl_timer late_b, late_c, early_a, kick;

static void kick_cb(evl_loop *loop, void *arg)
{
    test_log("kick");
    /* now = t0 + 1 ms: deadline t0 + 3 ms, like early_a's */
    evl_timer_start(loop, &late_b, EVL_MS(2), log_cb, "b");
    evl_timer_start(loop, &late_c, EVL_MS(1), log_cb, "c");
}

TEST_IMPL(timer_equal_deadlines_across_iterations)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    evl_timer_init(&late_b);
    evl_timer_init(&late_c);
    ASSERT_EQ(evl_timer_start(loop, &early_a, EVL_MS(3), log_cb, "a"), 0);
    ASSERT_EQ(evl_timer_start(loop, &kick, EVL_MS(1), kick_cb, NULL), 0);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "kick c a b ");
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* ------------------------------------------- stop a due, queued timer */

static evl_timer *victim;
static int victim_fired;

static void victim_cb(evl_loop *loop, void *arg)
{
    victim_fired++;
    test_log("victim@%" PRIu64, (evl_now(loop) - *(uint64_t *)arg) / 1000000);
}

static void stopper_free_cb(evl_loop *loop, void *arg)
{
    test_log("stopper");
    /* victim has the same deadline: it is already in the ready queue. */
    ASSERT_EQ(victim->evl__state, 2);           /* EVL__TIMER_QUEUED */
    ASSERT_TRUE(evl__handle_queued(&victim->evl__ready));
    ASSERT_TRUE(evl_timer_active(victim));
    evl_timer_stop(victim);
    ASSERT_FALSE(evl_timer_active(victim));
    ASSERT_FALSE(evl__handle_queued(&victim->evl__ready));
    free(victim);                               /* allowed after stop */
    victim = NULL;
}

TEST_IMPL(timer_stop_due_in_ready_queue)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    static evl_timer stopper, after;
    uint64_t t0 = evl_now(loop);
    test_log_reset();
    victim = calloc(1, sizeof(*victim));
    ASSERT_EQ(evl_timer_start(loop, &stopper, EVL_MS(1), stopper_free_cb, NULL), 0);
    ASSERT_EQ(evl_timer_start(loop, victim, EVL_MS(1), victim_cb, &t0), 0);
    ASSERT_EQ(evl_timer_start(loop, &after, EVL_MS(1), log_cb, "after"), 0);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(victim_fired, 0);
    ASSERT_STR_EQ(test_trace, "stopper after ");
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

static evl_timer restart_victim;

static void stopper_restart_cb(evl_loop *loop, void *arg)
{
    test_log("stopper");
    ASSERT_TRUE(evl__handle_queued(&restart_victim.evl__ready));
    /* Re-arming a queued timer takes it out of this run phase. */
    ASSERT_EQ(evl_timer_start(loop, &restart_victim, EVL_MS(2), victim_cb, arg), 0);
    ASSERT_FALSE(evl__handle_queued(&restart_victim.evl__ready));
}

TEST_IMPL(timer_restart_due_in_ready_queue)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    static evl_timer stopper;
    uint64_t t0 = evl_now(loop);
    test_log_reset();
    victim_fired = 0;
    ASSERT_EQ(evl_timer_start(loop, &stopper, EVL_MS(1), stopper_restart_cb, &t0), 0);
    ASSERT_EQ(evl_timer_start(loop, &restart_victim, EVL_MS(1), victim_cb, &t0), 0);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(victim_fired, 1);
    ASSERT_STR_EQ(test_trace, "stopper victim@3 ");
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* ---------------------------------------------- re-arm in own callback */

static evl_timer self_timer;
static uint64_t fire_times[8];
static int nfires;

static void rearm_cb(evl_loop *loop, void *arg)
{
    ASSERT_FALSE(evl_timer_active(&self_timer));  /* idle while it runs */
    fire_times[nfires++] = evl_now(loop);
    if (nfires < 5) {
        ASSERT_EQ(evl_timer_start(loop, &self_timer, EVL_MS(nfires), rearm_cb, arg), 0);
        ASSERT_TRUE(evl_timer_active(&self_timer));
    }
}

TEST_IMPL(timer_rearm_in_callback)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    uint64_t t0 = evl_now(loop);
    ASSERT_EQ(evl_timer_start(loop, &self_timer, EVL_MS(1), rearm_cb, NULL), 0);
    /* Re-arming an armed timer replaces its deadline. */
    ASSERT_EQ(evl_timer_start(loop, &self_timer, EVL_MS(2), rearm_cb, NULL), 0);
    ASSERT_EQ(loop->timers.n, 1);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(nfires, 5);
    /* delays 2, then 1, 2, 3, 4 ms */
    ASSERT_U64_EQ(fire_times[0] - t0, EVL_MS(2));
    ASSERT_U64_EQ(fire_times[1] - t0, EVL_MS(3));
    ASSERT_U64_EQ(fire_times[2] - t0, EVL_MS(5));
    ASSERT_U64_EQ(fire_times[3] - t0, EVL_MS(8));
    ASSERT_U64_EQ(fire_times[4] - t0, EVL_MS(12));
    ASSERT_FALSE(evl_timer_active(&self_timer));
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

TEST_IMPL(timer_zero_initialised)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    evl_timer t;
    memset(&t, 0, sizeof(t));
    ASSERT_FALSE(evl_timer_active(&t));
    evl_timer_stop(&t);                     /* safe on an idle timer */
    test_log_reset();
    ASSERT_ERR(evl_timer_start(loop, &t, 10, NULL, NULL), EVL_EINVAL);
    ASSERT_ERR(evl_timer_start(NULL, &t, 10, log_cb, "x"), EVL_EINVAL);
    ASSERT_EQ(evl_timer_start(loop, &t, EVL_US(10), log_cb, "z"), 0);
    ASSERT_TRUE(evl_timer_active(&t));
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "z ");
    ASSERT_FALSE(evl_timer_active(&t));
    evl_timer_stop(&t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* ------------------------------------------------------------ call_later */

static uint64_t later_t0;

static void later_cb(evl_loop *loop, void *arg)
{
    test_log("%s@%" PRIu64, (const char *)arg, (evl_now(loop) - later_t0) / 1000000);
    if (strcmp(arg, "b") == 0)   /* from inside a callback too */
        ASSERT_EQ(evl_call_later(loop, EVL_MS(5), later_cb, "f"), 0);
}

TEST_IMPL(timer_call_later)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    later_t0 = evl_now(loop);
    ASSERT_EQ(evl_call_later(loop, EVL_MS(3), later_cb, "a"), 0);
    ASSERT_EQ(evl_call_later(loop, EVL_MS(1), later_cb, "b"), 0);
    ASSERT_EQ(evl_call_later(loop, EVL_MS(2), later_cb, "c"), 0);
    ASSERT_EQ(evl_call_later(loop, EVL_MS(1), later_cb, "d"), 0);
    ASSERT_EQ(evl_call_later(loop, 0, later_cb, "e"), 0);
    ASSERT_ERR(evl_call_later(loop, 0, NULL, NULL), EVL_EINVAL);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "e@0 b@1 d@1 c@2 a@3 f@6 ");
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* A 10 s sleep under the virtual clock: instant in wall time, and the
 * loop's clock moves by exactly 10 s. */
static intptr_t sleeper10(void *arg)
{
    evl_loop *loop = evl_loop_current();
    uint64_t before = evl_now(loop);
    ASSERT_EQ(evl_sleep(EVL_SEC(10)), 0);
    ASSERT_U64_EQ(evl_now(loop) - before, EVL_SEC(10));
    *(uint64_t *)arg = evl_now(loop) - before;
    return 0;
}

TEST_IMPL(timer_virtual_clock)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    uint64_t slept = 0;
    uint64_t w0 = test_wall_ns();
    evl_task *t = evl_spawn(loop, "sleeper", sleeper10, &slept);
    ASSERT_NOT_NULL(t);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    uint64_t wall = test_wall_ns() - w0;
    ASSERT_U64_EQ(slept, EVL_SEC(10));
    ASSERT_U64_LT(wall, EVL_SEC(1));
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Sleeps of different lengths wake in deadline order, each at its exact
 * virtual deadline; equal sleeps started in one iteration wake in order. */
static intptr_t sleep_n_ms(void *arg)
{
    intptr_t ms = (intptr_t)arg;
    evl_loop *loop = evl_loop_current();
    uint64_t t0 = evl_now(loop);
    ASSERT_EQ(evl_sleep(EVL_MS(ms)), 0);
    ASSERT_U64_EQ(evl_now(loop) - t0, EVL_MS(ms));
    test_log("%s", evl_task_name(evl_current_task()));
    return ms;
}

TEST_IMPL(timer_sleep_order)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    test_log_reset();
    static const struct { const char *n; intptr_t ms; } s[] = {
        { "a3", 3 }, { "b1", 1 }, { "c2", 2 }, { "d1", 1 }, { "e3", 3 }, { "f1", 1 },
    };
    evl_task *t[6];
    for (int i = 0; i < 6; i++)
        ASSERT_NOT_NULL(t[i] = evl_spawn(loop, s[i].n, sleep_n_ms, (void *)s[i].ms));
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "b1 d1 f1 c2 a3 e3 ");
    for (int i = 0; i < 6; i++) {
        ASSERT_EQ(evl_future_result(t[i]), s[i].ms);
        evl_future_unref(t[i]);
    }
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Real clock: a short sleep lasts at least its delay. */
static intptr_t sleep_real(void *arg)
{
    uint64_t w0 = test_wall_ns();
    ASSERT_EQ(evl_sleep(EVL_MS(20)), 0);
    return (intptr_t)(test_wall_ns() - w0);
}

TEST_IMPL(timer_real_clock_sleep)
{
    evl_loop *loop = test_loop(0, 0);
    evl_task *t = evl_spawn(loop, "real", sleep_real, NULL);
    intptr_t took = evl_run_until_complete(loop, t);
    ASSERT_GE(took, (intptr_t)EVL_MS(20));
    ASSERT_LT(took, (intptr_t)EVL_SEC(5));
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* A delay too large for the clock ("forever") must not wrap around to a
 * deadline in the past: deadlines saturate. */
static intptr_t sleep_forever(void *arg)
{
    int r = evl_sleep(UINT64_MAX);
    test_log("sleep:%s", evl_err_name(r));
    return r;
}

static intptr_t wait_for_forever(void *arg)
{
    evl_future *f = arg;
    intptr_t r = evl_wait_for(f, UINT64_MAX);
    test_log("wait_for:%s", r < 0 ? evl_err_name((int)r) : "value");
    return r;
}

static intptr_t finish_after_5ms(void *arg)
{
    evl_task **t = arg;
    ASSERT_EQ(evl_sleep(EVL_MS(5)), 0);
    test_log("cancel");
    evl_cancel(t[0]);
    evl_future_set_result(t[2], 1);       /* EDONE if wait_for gave up */
    return 0;
}

TEST_IMPL(timer_huge_delay)
{
    evl_loop *loop = test_loop(0, 0);
    test_log_reset();
    evl_task *t[3];
    t[2] = evl_future_new(loop);
    t[0] = evl_spawn(loop, "forever", sleep_forever, NULL);
    t[1] = evl_spawn(loop, "wait", wait_for_forever, t[2]);
    evl_task *c = evl_spawn(loop, "c", finish_after_5ms, t);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "cancel sleep:ECANCELED wait_for:value ");
    for (int i = 0; i < 3; i++)
        evl_future_unref(t[i]);
    evl_future_unref(c);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}
