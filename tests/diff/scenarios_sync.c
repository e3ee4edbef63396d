/*
 * scenarios_sync.c -- the libevl side of the synchronisation scenarios
 * (locks, events, conditions, semaphores, queues): each sc_sync_<name> is a
 * line-by-line translation of tests/diff/py/sync_<name>.py.
 *
 * These functions have external linkage: scenarios.c's table (built from
 * scenario-list.h) sees their declarations through a header that
 * CMakeLists.txt generates from the `intptr_t sc_<name>(void *arg)` lines
 * of this file.  The helpers and output conventions all files share are
 * scenario_common.h's.
 */
#define _POSIX_C_SOURCE 200809L

#include "evl.h"
#include "scenario_common.h"
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- helpers */

/* A named task argument: the object it works on. */
struct named {
    const char *name;
    void *obj;
    int n;
};

/* --------------------------------------------------- sync_lock_fairness */

static intptr_t lf_worker(void *arg)
{
    struct named *w = arg;
    evl_lock *lock = w->obj;
    say("%s wants locked %s", w->name, tf(evl_lock_locked(lock)));
    MUST(evl_lock_acquire(lock));
    say("%s got", w->name);
    evl_sleep(0);
    say("%s releases", w->name);
    MUST(evl_lock_release(lock));
    return 0;
}

intptr_t sc_sync_lock_fairness(void *arg)
{
    evl_lock lock;
    evl_lock_init(&lock);
    MUST(evl_lock_acquire(&lock));
    say("main locked %s", tf(evl_lock_locked(&lock)));
    struct named w[3] = { { "a", &lock, 0 }, { "b", &lock, 0 }, { "c", &lock, 0 } };
    evl_task *ts[3];
    for (int i = 0; i < 3; i++)
        ts[i] = spawn(w[i].name, lf_worker, &w[i]);
    evl_sleep(0);
    MUST(evl_lock_release(&lock));
    say("main released locked %s", tf(evl_lock_locked(&lock)));
    evl_task *tick = spawn("tick", ticker, IARG(10));
    MUST(evl_lock_acquire(&lock));
    say("main got again locked %s", tf(evl_lock_locked(&lock)));
    MUST(evl_lock_release(&lock));
    for (int i = 0; i < 3; i++)
        say("%s -> %s", w[i].name, str_of(await_drop(ts[i])));
    await_drop(tick);
    MUST(evl_lock_acquire(&lock));
    say("main with locked %s", tf(evl_lock_locked(&lock)));
    MUST(evl_lock_release(&lock));
    say("main end locked %s", tf(evl_lock_locked(&lock)));
    return 0;
}

/* ----------------------------------------------------- sync_lock_cancel */

static intptr_t lc_waiter(void *arg)
{
    struct named *w = arg;
    evl_lock *lock = w->obj;
    say("%s wants", w->name);
    int r = evl_lock_acquire(lock);
    if (r == EVL_ECANCELED) {
        say("%s cancelled locked %s", w->name, tf(evl_lock_locked(lock)));
        return r;
    }
    MUST(r);
    say("%s got", w->name);
    evl_sleep(0);
    MUST(evl_lock_release(lock));
    say("%s released", w->name);
    return 0;
}

intptr_t sc_sync_lock_cancel(void *arg)
{
    evl_lock lock;
    evl_lock_init(&lock);
    /* 1 */
    MUST(evl_lock_acquire(&lock));
    struct named wa = { "a", &lock, 0 }, wb = { "b", &lock, 0 };
    evl_task *a = spawn("a", lc_waiter, &wa);
    evl_task *b = spawn("b", lc_waiter, &wb);
    evl_sleep(0);
    say("main cancel a %s", tf(evl_cancel(a)));
    MUST(evl_lock_release(&lock));
    say("main released");
    evl_task *tick = spawn("tick", ticker, IARG(6));
    say("a -> %s", str_of(await_drop(a)));
    say("b -> %s", str_of(await_drop(b)));
    await_drop(tick);
    /* 2 */
    MUST(evl_lock_acquire(&lock));
    struct named wd = { "d", &lock, 0 }, we = { "e", &lock, 0 };
    evl_task *d = spawn("d", lc_waiter, &wd);
    evl_task *e = spawn("e", lc_waiter, &we);
    evl_sleep(0);
    MUST(evl_lock_release(&lock));
    say("main released, cancel d %s", tf(evl_cancel(d)));
    tick = spawn("tick", ticker, IARG(6));
    say("d -> %s", str_of(await_drop(d)));
    say("e -> %s", str_of(await_drop(e)));
    await_drop(tick);
    /* 3 */
    MUST(evl_lock_acquire(&lock));
    struct named wx = { "x", &lock, 0 };
    evl_task *x = spawn("x", lc_waiter, &wx);
    evl_sleep(0);
    say("main cancel x %s", tf(evl_cancel(x)));
    MUST(evl_lock_release(&lock));
    MUST(evl_lock_acquire(&lock));
    say("main took it at once locked %s", tf(evl_lock_locked(&lock)));
    say("x -> %s", str_of(await_drop(x)));
    MUST(evl_lock_release(&lock));
    say("main end locked %s", tf(evl_lock_locked(&lock)));
    return 0;
}

/* ------------------------------------------------------------ sync_event */

static intptr_t ev_waiter(void *arg)
{
    struct named *w = arg;
    evl_event *ev = w->obj;
    say("%s waits", w->name);
    int r = evl_event_wait(ev);
    if (r < 0)
        return r;
    say("%s woke True is_set %s", w->name, tf(evl_event_is_set(ev)));
    return 0;
}

intptr_t sc_sync_event(void *arg)
{
    evl_event ev;
    evl_event_init(&ev);
    say("main is_set %s", tf(evl_event_is_set(&ev)));
    struct named w[6] = { { "a", &ev, 0 }, { "b", &ev, 0 }, { "c", &ev, 0 },
                          { "d", &ev, 0 }, { "e", &ev, 0 }, { "f", &ev, 0 } };
    evl_task *ts[3];
    for (int i = 0; i < 3; i++)
        ts[i] = spawn(w[i].name, ev_waiter, &w[i]);
    evl_sleep(0);
    evl_event_set(&ev);
    say("main set is_set %s", tf(evl_event_is_set(&ev)));
    evl_event_clear(&ev);
    say("main cleared is_set %s", tf(evl_event_is_set(&ev)));
    evl_task *d = spawn("d", ev_waiter, &w[3]);
    evl_task *tick = spawn("tick", ticker, IARG(4));
    for (int i = 0; i < 3; i++)
        say("%s -> %s", w[i].name, str_of(await_drop(ts[i])));
    await_drop(tick);
    evl_event_set(&ev);
    evl_event_set(&ev);
    say("main set twice");
    say("d -> %s", str_of(await_drop(d)));
    MUST(evl_event_wait(&ev));
    say("main wait True");
    evl_event_clear(&ev);
    evl_task *e = spawn("e", ev_waiter, &w[4]);
    evl_task *f = spawn("f", ev_waiter, &w[5]);
    evl_sleep(0);
    say("main cancel e %s", tf(evl_cancel(e)));
    evl_event_set(&ev);
    say("e -> %s", str_of(await_drop(e)));
    say("f -> %s", str_of(await_drop(f)));
    return 0;
}

/* ------------------------------------------------------ sync_cond_notify */

static intptr_t cn_waiter(void *arg)
{
    struct named *w = arg;
    evl_cond *cond = w->obj;
    MUST(evl_lock_acquire(evl_cond_lock(cond)));
    say("%s waits", w->name);
    int r = evl_cond_wait(cond);
    if (r < 0)
        return r;
    say("%s woke True locked %s", w->name, tf(evl_lock_locked(evl_cond_lock(cond))));
    evl_sleep(0);
    say("%s leaves", w->name);
    MUST(evl_lock_release(evl_cond_lock(cond)));
    say("%s out", w->name);
    return 0;
}

static int cn_box;

static int cn_pred(void *arg)
{
    (void)arg;
    return cn_box >= 2 ? cn_box : 0;
}

static intptr_t cn_pred_waiter(void *arg)
{
    evl_cond *cond = arg;
    MUST(evl_lock_acquire(evl_cond_lock(cond)));
    say("p waits for 2");
    int r = evl_cond_wait_for(cond, cn_pred, NULL);
    if (r < 0)
        return r;
    say("p woke with %d", r);
    MUST(evl_lock_release(evl_cond_lock(cond)));
    return 0;
}

intptr_t sc_sync_cond_notify(void *arg)
{
    evl_cond cond;
    evl_cond_init(&cond, NULL);
    evl_lock *lock = evl_cond_lock(&cond);
    struct named w[4] = { { "a", &cond, 0 }, { "b", &cond, 0 }, { "c", &cond, 0 },
                          { "d", &cond, 0 } };
    evl_task *ts[4];
    for (int i = 0; i < 4; i++)
        ts[i] = spawn(w[i].name, cn_waiter, &w[i]);
    evl_sleep(0);
    MUST(evl_lock_acquire(lock));
    say("main notify 2");
    MUST(evl_cond_notify(&cond, 2));
    evl_sleep(0);
    say("main still holds");
    MUST(evl_lock_release(lock));
    evl_task *tick = spawn("tick", ticker, IARG(8));
    say("a -> %s", str_of(await_drop(ts[0])));
    say("b -> %s", str_of(await_drop(ts[1])));
    await_drop(tick);
    MUST(evl_lock_acquire(lock));
    say("main notify_all");
    MUST(evl_cond_notify_all(&cond));
    MUST(evl_lock_release(lock));
    for (int i = 2; i < 4; i++)
        say("%s -> %s", w[i].name, str_of(await_drop(ts[i])));
    if (evl_cond_notify(&cond, 1) == EVL_EINVAL)
        say("notify unlocked RuntimeError");
    struct named v[3] = { { "e", &cond, 0 }, { "f", &cond, 0 }, { "g", &cond, 0 } };
    for (int i = 0; i < 3; i++)
        ts[i] = spawn(v[i].name, cn_waiter, &v[i]);
    evl_sleep(0);
    MUST(evl_lock_acquire(lock));
    MUST(evl_cond_notify(&cond, 1));
    MUST(evl_cond_notify(&cond, 1));
    say("main notified 1 twice");
    MUST(evl_lock_release(lock));
    say("e -> %s", str_of(await_drop(ts[0])));
    say("f -> %s", str_of(await_drop(ts[1])));
    MUST(evl_lock_acquire(lock));
    say("main notify_all woke g");
    MUST(evl_cond_notify_all(&cond));
    MUST(evl_lock_release(lock));
    say("g -> %s", str_of(await_drop(ts[2])));
    cn_box = 0;
    evl_task *p = spawn("p", cn_pred_waiter, &cond);
    evl_sleep(0);
    for (int i = 1; i <= 2; i++) {
        MUST(evl_lock_acquire(lock));
        cn_box = i;
        say("main value %d", i);
        MUST(evl_cond_notify(&cond, 1));
        MUST(evl_lock_release(lock));
        evl_sleep(0);
        evl_sleep(0);
    }
    say("p -> %s", str_of(await_drop(p)));
    return 0;
}

/* ------------------------------------------------------ sync_cond_cancel */

static intptr_t cc_waiter(void *arg)
{
    struct named *w = arg;
    evl_cond *cond = w->obj;
    evl_lock *lock = evl_cond_lock(cond);
    MUST(evl_lock_acquire(lock));
    say("%s waits", w->name);
    int r = evl_cond_wait(cond);
    if (r == EVL_ECANCELED) {
        say("%s cancelled locked %s", w->name, tf(evl_lock_locked(lock)));
        MUST(evl_lock_release(lock));
        return r;
    }
    MUST(r);
    say("%s woke True", w->name);
    MUST(evl_lock_release(lock));
    say("%s released", w->name);
    return 0;
}

intptr_t sc_sync_cond_cancel(void *arg)
{
    evl_lock lock;                    /* a Condition over a lock of the caller's */
    evl_lock_init(&lock);
    evl_cond cond;
    evl_cond_init(&cond, &lock);
    /* 1 */
    struct named wa = { "a", &cond, 0 }, wb = { "b", &cond, 0 }, wc = { "c", &cond, 0 };
    evl_task *a = spawn("a", cc_waiter, &wa);
    evl_sleep(0);
    MUST(evl_lock_acquire(&lock));
    say("main holds, cancel a %s", tf(evl_cancel(a)));
    evl_task *tick = spawn("tick", ticker, IARG(4));
    evl_sleep(0);
    evl_sleep(0);
    say("main releases");
    MUST(evl_lock_release(&lock));
    say("a -> %s", str_of(await_drop(a)));
    await_drop(tick);
    /* 2 */
    evl_task *b = spawn("b", cc_waiter, &wb);
    evl_task *c = spawn("c", cc_waiter, &wc);
    evl_sleep(0);
    MUST(evl_lock_acquire(&lock));
    MUST(evl_cond_notify(&cond, 1));
    say("main notified, cancel b %s", tf(evl_cancel(b)));
    evl_sleep(0);
    evl_sleep(0);
    say("main releases");
    MUST(evl_lock_release(&lock));
    say("b -> %s", str_of(await_drop(b)));
    /* 3 */
    MUST(evl_lock_acquire(&lock));
    MUST(evl_cond_notify(&cond, 1));
    say("main notified c");
    evl_sleep(0);
    evl_sleep(0);
    say("main cancel c %s", tf(evl_cancel(c)));
    evl_sleep(0);
    evl_sleep(0);
    say("main releases");
    MUST(evl_lock_release(&lock));
    say("c -> %s", str_of(await_drop(c)));
    say("main end locked %s", tf(evl_lock_locked(&lock)));
    return 0;
}

/* ----------------------------------------------------- sync_sem_fairness */

static intptr_t sf_worker(void *arg)
{
    struct named *w = arg;
    evl_sem *sem = w->obj;
    say("%s wants locked %s value %lld", w->name, tf(evl_sem_locked(sem)),
        (long long)evl_sem_value(sem));
    int r = evl_sem_acquire(sem);
    if (r < 0)
        return r;
    say("%s got value %lld", w->name, (long long)evl_sem_value(sem));
    for (int i = 0; i < w->n; i++)
        evl_sleep(0);
    MUST(evl_sem_release(sem));
    say("%s released value %lld", w->name, (long long)evl_sem_value(sem));
    return 0;
}

intptr_t sc_sync_sem_fairness(void *arg)
{
    evl_sem sem;
    MUST(evl_sem_init(&sem, 2, 0));
    struct named w[5] = { { "a", &sem, 3 }, { "b", &sem, 1 }, { "c", &sem, 2 },
                          { "d", &sem, 1 }, { "e", &sem, 1 } };
    evl_task *ts[5];
    for (int i = 0; i < 5; i++)
        ts[i] = spawn(w[i].name, sf_worker, &w[i]);
    evl_task *tick = spawn("tick", ticker, IARG(12));
    for (int i = 0; i < 5; i++)
        say("%s -> %s", w[i].name, str_of(await_drop(ts[i])));
    await_drop(tick);
    say("main value %lld", (long long)evl_sem_value(&sem));
    MUST(evl_sem_acquire(&sem));
    MUST(evl_sem_acquire(&sem));
    say("main took both locked %s", tf(evl_sem_locked(&sem)));
    struct named v[4] = { { "f", &sem, 1 }, { "g", &sem, 1 }, { "h", &sem, 1 },
                          { "late", &sem, 0 } };
    evl_task *vs[4];
    for (int i = 0; i < 3; i++)
        vs[i] = spawn(v[i].name, sf_worker, &v[i]);
    evl_sleep(0);
    MUST(evl_sem_release(&sem));
    MUST(evl_sem_release(&sem));
    say("main released two value %lld locked %s", (long long)evl_sem_value(&sem),
        tf(evl_sem_locked(&sem)));
    vs[3] = spawn("late", sf_worker, &v[3]);
    MUST(evl_sem_release(&sem));
    MUST(evl_sem_release(&sem));
    say("main released four value %lld locked %s", (long long)evl_sem_value(&sem),
        tf(evl_sem_locked(&sem)));
    MUST(evl_sem_acquire(&sem));
    say("main got again value %lld", (long long)evl_sem_value(&sem));
    MUST(evl_sem_release(&sem));
    for (int i = 0; i < 4; i++)
        say("%s -> %s", v[i].name, str_of(await_drop(vs[i])));
    say("main end value %lld", (long long)evl_sem_value(&sem));
    return 0;
}

/* -------------------------------------------------------- sync_sem_cancel */

static intptr_t sk_worker(void *arg)
{
    struct named *w = arg;
    evl_sem *sem = w->obj;
    say("%s wants", w->name);
    int r = evl_sem_acquire(sem);
    if (r == EVL_ECANCELED) {
        say("%s cancelled value %lld", w->name, (long long)evl_sem_value(sem));
        return r;
    }
    MUST(r);
    say("%s got value %lld", w->name, (long long)evl_sem_value(sem));
    evl_sleep(0);
    MUST(evl_sem_release(sem));
    say("%s released value %lld", w->name, (long long)evl_sem_value(sem));
    return 0;
}

intptr_t sc_sync_sem_cancel(void *arg)
{
    evl_sem sem;
    MUST(evl_sem_init(&sem, 0, 0));
    struct named w[3] = { { "a", &sem, 0 }, { "b", &sem, 0 }, { "c", &sem, 0 } };
    evl_task *ts[3];
    for (int i = 0; i < 3; i++)
        ts[i] = spawn(w[i].name, sk_worker, &w[i]);
    evl_sleep(0);
    say("main cancel a %s", tf(evl_cancel(ts[0])));
    MUST(evl_sem_release(&sem));
    say("main released value %lld", (long long)evl_sem_value(&sem));
    say("main cancel b %s", tf(evl_cancel(ts[1])));
    evl_task *tick = spawn("tick", ticker, IARG(6));
    for (int i = 0; i < 3; i++)
        say("%s -> %s", w[i].name, str_of(await_drop(ts[i])));
    await_drop(tick);
    say("main value %lld locked %s", (long long)evl_sem_value(&sem), tf(evl_sem_locked(&sem)));
    evl_sem bs;
    MUST(evl_sem_init(&bs, 2, EVL_SEM_BOUNDED));
    MUST(evl_sem_acquire(&bs));
    MUST(evl_sem_release(&bs));
    say("bounded released value %lld", (long long)evl_sem_value(&bs));
    if (evl_sem_release(&bs) == EVL_EINVAL)
        say("bounded over-release ValueError value %lld", (long long)evl_sem_value(&bs));
    else
        say("bounded over-release accepted");
    evl_sem neg;
    if (evl_sem_init(&neg, -1, 0) == EVL_EINVAL)
        say("negative ValueError");
    return 0;
}

/* ------------------------------------------------------- sync_queue_order */

static void say_drain(const char *label, evl_queue *q)
{
    char line[1024];
    size_t len = (size_t)snprintf(line, sizeof line, "%s", label);
    intptr_t item;
    while (!evl_queue_empty(q) && len < sizeof line) {
        MUST(evl_queue_get_nowait(q, &item));
        len += (size_t)snprintf(line + len, sizeof line - len, " %ld", (long)item);
    }
    say("%s", line);
}

/* The priority drains print key:item; the item encodes key * 1000 + item
 * so that the key can be printed back (Python prints the tuple). */
static void say_drain_prio(const char *label, evl_queue *q)
{
    char line[2048];
    size_t len = (size_t)snprintf(line, sizeof line, "%s", label);
    intptr_t item;
    while (!evl_queue_empty(q) && len < sizeof line) {
        MUST(evl_queue_get_nowait(q, &item));
        long key = (long)(item >= 0 ? item / 1000 : -((-item + 999) / 1000));
        long v = (long)(item - key * 1000);
        len += (size_t)snprintf(line + len, sizeof line - len, " %ld:%ld", key, v);
    }
    say("%s", line);
}

intptr_t sc_sync_queue_order(void *arg)
{
    evl_queue fifo, lifo, pq;
    MUST(evl_queue_init(&fifo, EVL_QUEUE_FIFO, 0));
    MUST(evl_queue_init(&lifo, EVL_QUEUE_LIFO, 0));
    static const int vals[] = { 3, 1, 4, 1, 5, 9, 2, 6 };
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        MUST(evl_queue_put_nowait(&fifo, vals[i]));
        MUST(evl_queue_put_nowait(&lifo, vals[i]));
    }
    say("fifo qsize %zu full %s", evl_queue_qsize(&fifo), tf(evl_queue_full(&fifo)));
    say_drain("fifo", &fifo);
    say_drain("lifo", &lifo);
    MUST(evl_queue_init(&pq, EVL_QUEUE_PRIORITY, 0));
    /* The item carries key * 1000 + value: for a fixed key, items order
     * as Python's values do, so ties break the same way. */
    static const int kv[][2] = { { 5, 50 }, { 1, 12 }, { 3, 30 }, { 1, 10 }, { -2, 7 },
                                 { 3, 31 }, { 1, 11 }, { 0, 99 }, { 5, 40 }, { 1, 10 } };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        MUST(evl_queue_put_key_nowait(&pq, kv[i][0], (intptr_t)kv[i][0] * 1000 + kv[i][1]));
    say_drain_prio("prio", &pq);
    long x = 7;
    for (int i = 0; i < 100; i++) {
        x = (x * 1103515245L + 12345) % 2147483648L;
        MUST(evl_queue_put_key_nowait(&pq, x % 13, (intptr_t)(x % 13) * 1000 + i));
    }
    say_drain_prio("prio100", &pq);
    evl_queue small;
    MUST(evl_queue_init(&small, EVL_QUEUE_FIFO, 2));
    MUST(evl_queue_put_nowait(&small, 1));
    MUST(evl_queue_put_nowait(&small, 2));
    say("small full %s qsize %zu maxsize %zu", tf(evl_queue_full(&small)),
        evl_queue_qsize(&small), evl_queue_maxsize(&small));
    if (evl_queue_put_nowait(&small, 3) == EVL_EAGAIN)
        say("small QueueFull");
    while (!evl_queue_empty(&small))
        MUST(evl_queue_get_nowait(&small, NULL));
    if (evl_queue_get_nowait(&small, NULL) == EVL_EAGAIN)
        say("small QueueEmpty");
    evl_sleep(0);
    evl_queue_destroy(&fifo);
    evl_queue_destroy(&lifo);
    evl_queue_destroy(&pq);
    evl_queue_destroy(&small);
    return 0;
}

/* ---------------------------------------------------- sync_queue_put_wait */

struct producer {
    const char *name;
    evl_queue *q;
    const int *items;
    int n;
};

static intptr_t qp_producer(void *arg)
{
    struct producer *p = arg;
    for (int k = 0; k < p->n; k++) {
        int i = p->items[k];
        say("%s put %d full %s", p->name, i, tf(evl_queue_full(p->q)));
        int r = evl_queue_put(p->q, i);
        if (r == EVL_ECANCELED) {
            say("%s cancelled at %d qsize %zu", p->name, i, evl_queue_qsize(p->q));
            return r;
        }
        MUST(r);
        say("%s put %d done qsize %zu", p->name, i, evl_queue_qsize(p->q));
    }
    return 0;
}

static intptr_t qp_consumer(void *arg)
{
    struct named *c = arg;
    evl_queue *q = c->obj;
    for (int k = 0; k < c->n; k++) {
        intptr_t item;
        int r = evl_queue_get(q, &item);
        if (r < 0)
            return r;
        say("got %ld qsize %zu", (long)item, evl_queue_qsize(q));
        evl_sleep(0);
    }
    return 0;
}

intptr_t sc_sync_queue_put_wait(void *arg)
{
    evl_queue q;
    MUST(evl_queue_init(&q, EVL_QUEUE_FIFO, 2));
    static const int i1[] = { 1, 2, 3, 4 }, i2[] = { 10, 11 };
    struct producer pp1 = { "p1", &q, i1, 4 }, pp2 = { "p2", &q, i2, 2 };
    evl_task *p1 = spawn("p1", qp_producer, &pp1);
    evl_task *p2 = spawn("p2", qp_producer, &pp2);
    evl_task *tick = spawn("tick", ticker, IARG(3));
    await_drop(tick);
    struct named cc = { "c", &q, 6 };
    evl_task *c = spawn("c", qp_consumer, &cc);
    say("p1 -> %s", str_of(await_drop(p1)));
    say("p2 -> %s", str_of(await_drop(p2)));
    say("c -> %s", str_of(await_drop(c)));
    MUST(evl_queue_put_nowait(&q, 100));
    MUST(evl_queue_put_nowait(&q, 101));
    static const int ix[] = { 200 }, iy[] = { 300 }, iz[] = { 400 };
    struct producer px = { "x", &q, ix, 1 }, py = { "y", &q, iy, 1 }, pz = { "z", &q, iz, 1 };
    evl_task *x = spawn("x", qp_producer, &px);
    evl_task *y = spawn("y", qp_producer, &py);
    evl_task *z = spawn("z", qp_producer, &pz);
    evl_sleep(0);
    say("main cancel x %s", tf(evl_cancel(x)));
    evl_sleep(0);
    intptr_t item;
    MUST(evl_queue_get_nowait(&q, &item));
    say("main get %ld", (long)item);
    say("main cancel y %s", tf(evl_cancel(y)));
    say("x -> %s", str_of(await_drop(x)));
    say("y -> %s", str_of(await_drop(y)));
    say("z -> %s", str_of(await_drop(z)));
    say_drain("left", &q);
    evl_queue_destroy(&q);
    return 0;
}

/* -------------------------------------------------------- sync_queue_join */

static intptr_t qj_worker(void *arg)
{
    struct named *w = arg;
    evl_queue *q = w->obj;
    for (;;) {
        intptr_t item;
        int r = evl_queue_get(q, &item);
        if (r < 0)
            return r;
        say("%s got %ld", w->name, (long)item);
        for (long i = 0; i < labs((long)item); i++)
            evl_sleep(0);
        MUST(evl_queue_task_done(q));
        say("%s done %ld", w->name, (long)item);
        if (item < 0)
            return 0;
    }
}

static intptr_t qj_joiner(void *arg)
{
    struct named *j = arg;
    say("%s joins", j->name);
    int r = evl_queue_join(j->obj);
    if (r < 0)
        return r;
    say("%s joined", j->name);
    return 0;
}

intptr_t sc_sync_queue_join(void *arg)
{
    evl_queue q;
    MUST(evl_queue_init(&q, EVL_QUEUE_FIFO, 0));
    MUST(evl_queue_join(&q));
    say("main join on empty returned");
    for (int i = 1; i < 4; i++)
        MUST(evl_queue_put_nowait(&q, i));
    struct named n[5] = { { "j1", &q, 0 }, { "j2", &q, 0 }, { "w1", &q, 0 },
                          { "w2", &q, 0 }, { "j3", &q, 0 } };
    evl_task *j1 = spawn("j1", qj_joiner, &n[0]);
    evl_task *j2 = spawn("j2", qj_joiner, &n[1]);
    evl_task *w1 = spawn("w1", qj_worker, &n[2]);
    evl_task *w2 = spawn("w2", qj_worker, &n[3]);
    say("j1 -> %s", str_of(await_drop(j1)));
    say("j2 -> %s", str_of(await_drop(j2)));
    MUST(evl_queue_put_nowait(&q, -1));
    MUST(evl_queue_put_nowait(&q, -2));
    evl_task *j3 = spawn("j3", qj_joiner, &n[4]);
    evl_sleep(0);
    say("main cancel j3 %s", tf(evl_cancel(j3)));
    say("j3 -> %s", str_of(await_drop(j3)));
    MUST(evl_queue_join(&q));
    say("main joined");
    say("w1 -> %s", str_of(await_drop(w1)));
    say("w2 -> %s", str_of(await_drop(w2)));
    if (evl_queue_task_done(&q) == EVL_EINVAL)
        say("task_done ValueError");
    evl_queue_destroy(&q);
    return 0;
}

/* --------------------------------------------------- sync_queue_get_cancel */

static intptr_t qg_getter(void *arg)
{
    struct named *g = arg;
    evl_queue *q = g->obj;
    say("%s gets", g->name);
    intptr_t item;
    int r = evl_queue_get(q, &item);
    if (r == EVL_ECANCELED) {
        say("%s cancelled qsize %zu", g->name, evl_queue_qsize(q));
        return r;
    }
    MUST(r);
    say("%s got %ld", g->name, (long)item);
    return item;
}

intptr_t sc_sync_queue_get_cancel(void *arg)
{
    evl_queue q;
    MUST(evl_queue_init(&q, EVL_QUEUE_FIFO, 0));
    struct named n[5] = { { "a", &q, 0 }, { "b", &q, 0 }, { "c", &q, 0 },
                          { "d", &q, 0 }, { "e", &q, 0 } };
    evl_task *a = spawn("a", qg_getter, &n[0]);
    evl_task *b = spawn("b", qg_getter, &n[1]);
    evl_sleep(0);
    say("main cancel a %s", tf(evl_cancel(a)));
    MUST(evl_queue_put_nowait(&q, 1));
    say("main put 1");
    evl_task *tick = spawn("tick", ticker, IARG(3));
    say("a -> %s", str_of(await_drop(a)));
    say("b -> %s", str_of(await_drop(b)));
    await_drop(tick);
    evl_task *c = spawn("c", qg_getter, &n[2]);
    evl_task *d = spawn("d", qg_getter, &n[3]);
    evl_task *e = spawn("e", qg_getter, &n[4]);
    evl_sleep(0);
    MUST(evl_queue_put_nowait(&q, 2));
    say("main put 2, cancel c %s", tf(evl_cancel(c)));
    tick = spawn("tick", ticker, IARG(3));
    say("c -> %s", str_of(await_drop(c)));
    say("d -> %s", str_of(await_drop(d)));
    await_drop(tick);
    MUST(evl_queue_put_nowait(&q, 3));
    say("e -> %s", str_of(await_drop(e)));
    say("main qsize %zu", evl_queue_qsize(&q));
    evl_queue_destroy(&q);
    return 0;
}
