/*
 * test-sync.c -- the synchronisation primitives (loop/src/sync.c) without
 * python3: wrong use (releasing an unlocked lock, over-releasing a bounded
 * semaphore, waiting on a condition without its lock, task_done too often,
 * waits outside a task or across loops), the lock's holder, queue storage
 * against a reference model, zeroed objects, and the task_suspend /
 * task_wake records each wait leaves for a tracer.  The orderings
 * themselves are checked against asyncio by tests/diff's sync_* scenarios.
 */
#define _GNU_SOURCE
#include "task.h"
#include "evl-internal.h"
#include "batch_rec.h"

#define IARG(x) ((void *)(intptr_t)(x))

/* Run fn(arg) as the only task of a fresh loop; its result. */
static intptr_t run_task(evl_task_fn fn, void *arg)
{
    evl_loop *loop = test_loop(EVL_LOOP_VIRTUAL_CLOCK, 0);
    evl_task *t = evl_spawn(loop, "main", fn, arg);
    ASSERT_NOT_NULL(t);
    intptr_t r = evl_run_until_complete(loop, t);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return r;
}

/* ------------------------------------------------------------- lock */

static intptr_t lock_release_unlocked_main(void *arg)
{
    evl_lock lock;
    evl_lock_init(&lock);
    ASSERT_ERR(evl_lock_release(&lock), EVL_EINVAL);
    ASSERT_EQ(evl_lock_locked(&lock), 0);
    ASSERT_EQ(evl_lock_acquire(&lock), 0);
    ASSERT_EQ(evl_lock_release(&lock), 0);
    ASSERT_ERR(evl_lock_release(&lock), EVL_EINVAL);   /* twice */
    ASSERT_EQ(evl_lock_locked(&lock), 0);
    ASSERT_U64_EQ(evl_lock_holder(&lock), 0);
    return 7;
}

TEST_IMPL(sync_lock_release_unlocked)
{
    /* Also outside any task: release never needs one. */
    evl_lock lock;
    evl_lock_init(&lock);
    ASSERT_ERR(evl_lock_release(&lock), EVL_EINVAL);
    ASSERT_EQ(run_task(lock_release_unlocked_main, NULL), 7);
    return 0;
}

struct holder_ctx {
    evl_lock lock;
    uint64_t main_id, b_id;
    int step;
};

static intptr_t holder_b(void *arg)
{
    struct holder_ctx *c = arg;
    c->b_id = evl_task_id(evl_current_task());
    ASSERT_U64_EQ(evl_lock_holder(&c->lock), c->main_id);
    ASSERT_EQ(evl_lock_acquire(&c->lock), 0);          /* waits for main */
    ASSERT_U64_EQ(evl_lock_holder(&c->lock), c->b_id);
    c->step = 1;
    evl_sleep(0);
    return 0;                                          /* leaves it locked */
}

static intptr_t holder_main(void *arg)
{
    struct holder_ctx *c = arg;
    evl_lock_init(&c->lock);
    c->main_id = evl_task_id(evl_current_task());
    ASSERT_U64_EQ(evl_lock_holder(&c->lock), 0);
    ASSERT_EQ(evl_lock_acquire(&c->lock), 0);
    ASSERT_U64_EQ(evl_lock_holder(&c->lock), c->main_id);
    evl_task *b = evl_spawn(NULL, "b", holder_b, c);
    evl_sleep(0);                                      /* b now waits */
    ASSERT_EQ(evl_lock_release(&c->lock), 0);
    /* Released, promised to b, which has not run yet: nobody holds it. */
    ASSERT_U64_EQ(evl_lock_holder(&c->lock), 0);
    ASSERT_EQ(evl_lock_locked(&c->lock), 0);
    ASSERT_EQ(evl_await(b), 0);
    ASSERT_EQ(c->step, 1);
    ASSERT_U64_EQ(evl_lock_holder(&c->lock), c->b_id);
    /* Anybody may release it (asyncio's Lock has no owner). */
    ASSERT_EQ(evl_lock_release(&c->lock), 0);
    ASSERT_U64_EQ(evl_lock_holder(&c->lock), 0);
    evl_future_unref(b);
    return 0;
}

TEST_IMPL(sync_lock_holder)
{
    struct holder_ctx c = { 0 };
    ASSERT_EQ(run_task(holder_main, &c), 0);
    ASSERT_U64_NE(c.b_id, 0);
    ASSERT_U64_NE(c.b_id, c.main_id);
    return 0;
}

/* --------------------------------------------------- outside a task */

static int true_pred(void *arg) { return 1; }

TEST_IMPL(sync_not_in_task)
{
    evl_lock lock;
    evl_event ev;
    evl_cond cond;
    evl_sem sem;
    evl_queue q;
    evl_lock_init(&lock);
    evl_event_init(&ev);
    evl_cond_init(&cond, NULL);
    ASSERT_EQ(evl_sem_init(&sem, 1, 0), 0);
    ASSERT_EQ(evl_queue_init(&q, EVL_QUEUE_FIFO, 1), 0);
    /* Even the calls that would not wait: they are task only. */
    ASSERT_ERR(evl_lock_acquire(&lock), EVL_ENOTTASK);
    ASSERT_EQ(evl_lock_locked(&lock), 0);
    evl_event_set(&ev);
    ASSERT_ERR(evl_event_wait(&ev), EVL_ENOTTASK);
    ASSERT_ERR(evl_cond_wait(&cond), EVL_ENOTTASK);
    ASSERT_ERR(evl_cond_wait_for(&cond, true_pred, NULL), EVL_ENOTTASK);
    ASSERT_ERR(evl_sem_acquire(&sem), EVL_ENOTTASK);
    ASSERT_EQ(evl_sem_value(&sem), 1);
    ASSERT_ERR(evl_queue_put(&q, 1), EVL_ENOTTASK);
    ASSERT_EQ(evl_queue_qsize(&q), 0);
    intptr_t item = -1;
    ASSERT_ERR(evl_queue_get(&q, &item), EVL_ENOTTASK);
    ASSERT_ERR(evl_queue_join(&q), EVL_ENOTTASK);
    /* The non-waiting calls work anywhere on the loop thread. */
    ASSERT_EQ(evl_queue_put_nowait(&q, 5), 0);
    ASSERT_ERR(evl_queue_put_nowait(&q, 6), EVL_EAGAIN);
    ASSERT_EQ(evl_queue_get_nowait(&q, &item), 0);
    ASSERT_EQ(item, 5);
    ASSERT_EQ(evl_queue_task_done(&q), 0);
    ASSERT_EQ(evl_sem_release(&sem), 0);
    ASSERT_EQ(evl_sem_value(&sem), 2);
    evl_queue_destroy(&q);
    return 0;
}

/* --------------------------------------------------------- condition */

static intptr_t cond_unlocked_main(void *arg)
{
    evl_cond cond;
    evl_cond_init(&cond, NULL);
    ASSERT_ERR(evl_cond_wait(&cond), EVL_EINVAL);
    ASSERT_ERR(evl_cond_notify(&cond, 1), EVL_EINVAL);
    ASSERT_ERR(evl_cond_notify_all(&cond), EVL_EINVAL);
    ASSERT_EQ(evl_cond_wait_for(&cond, true_pred, NULL), 1);   /* true at once: no wait */
    ASSERT_ERR(evl_cond_wait_for(&cond, NULL, NULL), EVL_EINVAL);
    ASSERT_EQ(evl_lock_locked(evl_cond_lock(&cond)), 0);       /* nothing released */
    /* With the lock held, notify without waiters wakes nobody. */
    ASSERT_EQ(evl_lock_acquire(evl_cond_lock(&cond)), 0);
    ASSERT_EQ(evl_cond_notify(&cond, 3), 0);
    ASSERT_EQ(evl_cond_notify_all(&cond), 0);
    ASSERT_EQ(evl_lock_release(evl_cond_lock(&cond)), 0);
    /* A condition over a lock of the caller's uses that lock. */
    evl_lock lock;
    evl_lock_init(&lock);
    evl_cond_init(&cond, &lock);
    ASSERT_PTR_EQ(evl_cond_lock(&cond), &lock);
    ASSERT_ERR(evl_cond_wait(&cond), EVL_EINVAL);
    ASSERT_EQ(evl_lock_acquire(&lock), 0);
    ASSERT_EQ(evl_cond_notify(&cond, 1), 0);
    ASSERT_EQ(evl_lock_release(&lock), 0);
    return 0;
}

TEST_IMPL(sync_cond_unlocked)
{
    ASSERT_EQ(run_task(cond_unlocked_main, NULL), 0);
    return 0;
}

/* --------------------------------------------------------- semaphore */

TEST_IMPL(sync_sem_invalid)
{
    evl_sem sem;
    ASSERT_ERR(evl_sem_init(&sem, -1, 0), EVL_EINVAL);
    ASSERT_ERR(evl_sem_init(&sem, 1, 1u << 5), EVL_EINVAL);
    ASSERT_EQ(evl_sem_init(&sem, 0, 0), 0);
    ASSERT_EQ(evl_sem_locked(&sem), 1);
    ASSERT_EQ(evl_sem_init(&sem, INT64_MAX, 0), 0);
    ASSERT_ERR(evl_sem_release(&sem), EVL_EOVERFLOW);  /* would overflow */
    ASSERT_EQ(evl_sem_value(&sem), INT64_MAX);
    /* Bounded at INT64_MAX: its bound is what it meets first. */
    ASSERT_EQ(evl_sem_init(&sem, INT64_MAX, EVL_SEM_BOUNDED), 0);
    ASSERT_ERR(evl_sem_release(&sem), EVL_EINVAL);
    ASSERT_EQ(evl_sem_value(&sem), INT64_MAX);
    return 0;
}

static intptr_t bounded_main(void *arg)
{
    evl_sem sem;
    ASSERT_EQ(evl_sem_init(&sem, 2, EVL_SEM_BOUNDED), 0);
    ASSERT_ERR(evl_sem_release(&sem), EVL_EINVAL);     /* at its bound already */
    ASSERT_EQ(evl_sem_value(&sem), 2);
    ASSERT_EQ(evl_sem_acquire(&sem), 0);
    ASSERT_EQ(evl_sem_acquire(&sem), 0);
    ASSERT_EQ(evl_sem_locked(&sem), 1);
    ASSERT_EQ(evl_sem_release(&sem), 0);
    ASSERT_EQ(evl_sem_release(&sem), 0);
    ASSERT_ERR(evl_sem_release(&sem), EVL_EINVAL);
    ASSERT_EQ(evl_sem_value(&sem), 2);
    /* Unbounded: releasing above the initial value is fine. */
    ASSERT_EQ(evl_sem_init(&sem, 2, 0), 0);
    ASSERT_EQ(evl_sem_release(&sem), 0);
    ASSERT_EQ(evl_sem_value(&sem), 3);
    return 0;
}

TEST_IMPL(sync_bounded_over_release)
{
    ASSERT_EQ(run_task(bounded_main, NULL), 0);
    return 0;
}

/* ------------------------------------------------------------- queue */

static intptr_t queue_errors_main(void *arg)
{
    evl_queue q;
    ASSERT_ERR(evl_queue_init(&q, 3, 0), EVL_EINVAL);
    ASSERT_ERR(evl_queue_init(&q, -1, 0), EVL_EINVAL);
    ASSERT_EQ(evl_queue_init(&q, EVL_QUEUE_LIFO, 2), 0);
    ASSERT_ERR(evl_queue_task_done(&q), EVL_EINVAL);
    intptr_t item = 42;
    ASSERT_ERR(evl_queue_get_nowait(&q, &item), EVL_EAGAIN);
    ASSERT_EQ(item, 42);                               /* untouched */
    ASSERT_EQ(evl_queue_join(&q), 0);                  /* nothing unfinished */
    ASSERT_EQ(evl_queue_put(&q, -7), 0);               /* negative items are items */
    ASSERT_EQ(evl_queue_put_nowait(&q, 8), 0);
    ASSERT_EQ(evl_queue_full(&q), 1);
    ASSERT_ERR(evl_queue_put_nowait(&q, 9), EVL_EAGAIN);
    ASSERT_ERR(evl_queue_put_key_nowait(&q, 1, 9), EVL_EAGAIN);
    ASSERT_EQ(evl_queue_qsize(&q), 2);
    ASSERT_EQ(evl_queue_get(&q, &item), 0);
    ASSERT_EQ(item, 8);
    ASSERT_EQ(evl_queue_get(&q, NULL), 0);             /* item may be NULL */
    ASSERT_EQ(evl_queue_empty(&q), 1);
    ASSERT_EQ(evl_queue_task_done(&q), 0);
    ASSERT_EQ(evl_queue_task_done(&q), 0);
    ASSERT_ERR(evl_queue_task_done(&q), EVL_EINVAL);   /* one too many */
    ASSERT_EQ(evl_queue_join(&q), 0);
    evl_queue_destroy(&q);
    evl_queue_destroy(&q);                             /* twice is harmless */
    return 0;
}

TEST_IMPL(sync_queue_errors)
{
    size_t before = test_heap_in_use();
    ASSERT_EQ(run_task(queue_errors_main, NULL), 0);
    ASSERT_HEAP_BACK_TO(before);
    return 0;
}

/* The storage of each kind against a reference model (a plain array),
 * through growth, FIFO ring wrap-around and a capped maxsize. */
static void queue_model(int kind, size_t maxsize, uint64_t seed)
{
    evl_queue q;
    ASSERT_EQ(evl_queue_init(&q, kind, maxsize), 0);
    enum { MAXN = 4096 };
    static int64_t mkey[MAXN];
    static intptr_t mitem[MAXN];
    size_t n = 0;
    uint64_t s = seed;
    for (int step = 0; step < 20000; step++) {
        uint64_t r = test_rand(&s);
        bool put = (r % 100) < (step < 10000 ? 60u : 40u);
        if (put) {
            int64_t key = (int64_t)(test_rand(&s) % 7) - 3;
            intptr_t item = (intptr_t)(test_rand(&s) % 50) - 25;
            int rc = evl_queue_put_key_nowait(&q, key, item);
            if (maxsize && n >= maxsize) {
                ASSERT_ERR(rc, EVL_EAGAIN);
                continue;
            }
            ASSERT_EQ(rc, 0);
            ASSERT_LT(n, MAXN);                        /* about 2300 at most */
            mkey[n] = key;
            mitem[n] = item;
            n++;
        } else {
            intptr_t got = 12345;
            int rc = evl_queue_get_nowait(&q, &got);
            if (n == 0) {
                ASSERT_ERR(rc, EVL_EAGAIN);
                continue;
            }
            ASSERT_EQ(rc, 0);
            size_t at;
            if (kind == EVL_QUEUE_FIFO) {
                at = 0;
            } else if (kind == EVL_QUEUE_LIFO) {
                at = n - 1;
            } else {
                at = 0;
                for (size_t i = 1; i < n; i++)
                    if (mkey[i] < mkey[at] || (mkey[i] == mkey[at] && mitem[i] < mitem[at]))
                        at = i;
            }
            ASSERT_EQ(got, mitem[at]);
            memmove(&mkey[at], &mkey[at + 1], (n - at - 1) * sizeof(mkey[0]));
            memmove(&mitem[at], &mitem[at + 1], (n - at - 1) * sizeof(mitem[0]));
            n--;
        }
        ASSERT_EQ(evl_queue_qsize(&q), n);
        ASSERT_EQ(evl_queue_empty(&q), n == 0);
        ASSERT_EQ(evl_queue_full(&q), maxsize && n >= maxsize);
        if (maxsize)
            ASSERT_LE(q.evl__cap, maxsize);            /* never more room than allowed */
    }
    evl_queue_destroy(&q);
}

TEST_IMPL(sync_queue_model)
{
    size_t before = test_heap_in_use();
    for (int kind = EVL_QUEUE_FIFO; kind <= EVL_QUEUE_PRIORITY; kind++) {
        queue_model(kind, 0, 1 + (uint64_t)kind);
        queue_model(kind, 5, 11 + (uint64_t)kind);
        queue_model(kind, 100, 21 + (uint64_t)kind);
    }
    ASSERT_HEAP_BACK_TO(before);
    return 0;
}

/* --------------------------------------------------- zeroed objects */

static intptr_t zero_main(void *arg)
{
    static evl_lock lock;                              /* static: zeroed */
    static evl_event ev;
    static evl_cond cond;
    static evl_sem sem;
    static evl_queue q;
    ASSERT_EQ(evl_lock_acquire(&lock), 0);
    ASSERT_EQ(evl_lock_release(&lock), 0);
    ASSERT_EQ(evl_event_is_set(&ev), 0);
    evl_event_set(&ev);
    ASSERT_EQ(evl_event_wait(&ev), 0);
    ASSERT_PTR_EQ(evl_cond_lock(&cond), &cond.evl__own);
    ASSERT_EQ(evl_lock_acquire(evl_cond_lock(&cond)), 0);
    ASSERT_EQ(evl_cond_notify(&cond, 1), 0);
    ASSERT_EQ(evl_lock_release(evl_cond_lock(&cond)), 0);
    ASSERT_EQ(evl_sem_locked(&sem), 1);
    ASSERT_EQ(evl_sem_release(&sem), 0);
    ASSERT_EQ(evl_sem_acquire(&sem), 0);
    ASSERT_EQ(evl_queue_maxsize(&q), 0);               /* an unbounded FIFO */
    for (int i = 0; i < 100; i++)
        ASSERT_EQ(evl_queue_put(&q, i), 0);
    ASSERT_EQ(evl_queue_full(&q), 0);
    for (int i = 0; i < 100; i++) {
        intptr_t item;
        ASSERT_EQ(evl_queue_get(&q, &item), 0);
        ASSERT_EQ(item, i);
        ASSERT_EQ(evl_queue_task_done(&q), 0);
    }
    ASSERT_EQ(evl_queue_join(&q), 0);
    evl_queue_destroy(&q);
    return 0;
}

TEST_IMPL(sync_zero_initialised)
{
    ASSERT_EQ(run_task(zero_main, NULL), 0);
    return 0;
}

/* -------------------------------------------------------- two loops */

static evl_event wl_ev;
static evl_lock wl_lock;

static intptr_t wl_setter(void *arg)
{
    evl_event_set(&wl_ev);
    return 0;
}

static intptr_t wl_first(void *arg)
{
    /* Binds the event and the lock to the first loop. */
    evl_task *s = evl_spawn(NULL, "setter", wl_setter, NULL);
    ASSERT_EQ(evl_event_wait(&wl_ev), 0);
    evl_future_unref(s);
    ASSERT_EQ(evl_lock_acquire(&wl_lock), 0);
    return 0;
}

static intptr_t wl_other_waiter(void *arg)
{
    ASSERT_EQ(evl_lock_acquire(&wl_lock), 0);
    ASSERT_EQ(evl_lock_release(&wl_lock), 0);
    return 0;
}

static intptr_t wl_first_lock(void *arg)
{
    /* The lock is held: a second task waits, which binds the lock. */
    evl_task *o = evl_spawn(NULL, "other", wl_other_waiter, NULL);
    evl_sleep(0);
    ASSERT_EQ(evl_lock_release(&wl_lock), 0);
    ASSERT_EQ(evl_await(o), 0);
    evl_future_unref(o);
    ASSERT_EQ(evl_lock_acquire(&wl_lock), 0);          /* held again */
    return 0;
}

static evl_cond wl_cond;

static intptr_t wl_notifier(void *arg)
{
    ASSERT_EQ(evl_lock_acquire(&wl_lock), 0);          /* free: no wait */
    ASSERT_EQ(evl_cond_notify(&wl_cond, 1), 1);
    evl_sleep(0);                                      /* the waiter runs now */
    ASSERT_EQ(evl_lock_release(&wl_lock), 0);
    return 0;
}

static intptr_t wl_second(void *arg)
{
    evl_event_clear(&wl_ev);
    ASSERT_ERR(evl_event_wait(&wl_ev), EVL_EWRONGLOOP);
    ASSERT_ERR(evl_lock_acquire(&wl_lock), EVL_EWRONGLOOP);
    ASSERT_EQ(evl_lock_locked(&wl_lock), 1);
    /* A wait that does not suspend does not need the loop (as in asyncio). */
    evl_event_set(&wl_ev);
    ASSERT_EQ(evl_event_wait(&wl_ev), 0);
    /* A condition of this loop over that lock: re-acquiring it after the
     * wait would have to wait on the other loop's lock.  The error comes
     * out; it is not retried as a cancellation is. */
    ASSERT_EQ(evl_lock_release(&wl_lock), 0);
    evl_cond_init(&wl_cond, &wl_lock);
    ASSERT_EQ(evl_lock_acquire(&wl_lock), 0);
    evl_task *n = evl_spawn(NULL, "notifier", wl_notifier, NULL);
    ASSERT_ERR(evl_cond_wait(&wl_cond), EVL_EWRONGLOOP);
    ASSERT_EQ(evl_await(n), 0);
    evl_future_unref(n);
    ASSERT_EQ(evl_lock_locked(&wl_lock), 0);
    return 0;
}

TEST_IMPL(sync_wrong_loop)
{
    evl_loop *a = test_loop(0, 0);
    evl_task *t = evl_spawn(a, "first", wl_first, NULL);
    ASSERT_EQ(evl_run_until_complete(a, t), 0);
    evl_future_unref(t);
    t = evl_spawn(a, "first_lock", wl_first_lock, NULL);
    ASSERT_EQ(evl_run_until_complete(a, t), 0);
    evl_future_unref(t);
    evl_loop *b = test_loop(0, 0);
    t = evl_spawn(b, "second", wl_second, NULL);
    ASSERT_EQ(evl_run_until_complete(b, t), 0);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(b, 0);
    ASSERT_LOOP_FREE(a, 0);
    return 0;
}

/* ------------------------------------------------------ trace records */

/*
 * The tracer's view, read from the loop's batch buffer (the batch
 * semaphore is raised by hand, as a tracer would).  A waiter and a checker
 * are spawned together, so their first steps run in the same iteration,
 * waiter first, with no poll (the only place the buffer is handed over)
 * between the waiter's suspend and the checker's look at the buffer; the
 * wake record is written by the checker's own step.
 */
enum { TR_LOCK, TR_EVENT, TR_COND, TR_SEM, TR_QGET, TR_QPUT, TR_QJOIN, TR_CANCEL, TR_N };

static struct {
    evl_lock lock;
    evl_event ev;
    evl_cond cond;
    evl_sem sem;
    evl_queue q;
    evl_event cancel_ev;
    uint64_t main_id;
    int checked;
} tr;

struct tr_pair {
    int which;
    evl_task *waiter;
};

static intptr_t tr_waiter(void *arg)
{
    struct tr_pair *p = arg;
    switch (p->which) {
    case TR_LOCK:
        ASSERT_EQ(evl_lock_acquire(&tr.lock), 0);
        ASSERT_EQ(evl_lock_release(&tr.lock), 0);
        break;
    case TR_EVENT:
        ASSERT_EQ(evl_event_wait(&tr.ev), 0);
        break;
    case TR_COND:
        ASSERT_EQ(evl_lock_acquire(evl_cond_lock(&tr.cond)), 0);
        ASSERT_EQ(evl_cond_wait(&tr.cond), 0);
        ASSERT_EQ(evl_lock_release(evl_cond_lock(&tr.cond)), 0);
        break;
    case TR_SEM:
        ASSERT_EQ(evl_sem_acquire(&tr.sem), 0);
        break;
    case TR_QGET:
        ASSERT_EQ(evl_queue_get(&tr.q, NULL), 0);      /* q empty */
        break;
    case TR_QPUT:
        ASSERT_EQ(evl_queue_put(&tr.q, 2), 0);         /* q full (maxsize 1) */
        break;
    case TR_QJOIN:
        ASSERT_EQ(evl_queue_join(&tr.q), 0);           /* one unfinished */
        break;
    case TR_CANCEL:
        return evl_event_wait(&tr.cancel_ev);
    }
    return 0;
}

static intptr_t tr_checker(void *arg)
{
    struct tr_pair *p = arg;
#ifdef EVL_PROBES
    evl_loop *loop = evl_loop_current();
    uint64_t wid = evl_task_id(p->waiter), me = evl_task_id(evl_current_task());
    static const struct { int reason, waker; } want[TR_N] = {
        [TR_LOCK] = { EVL_SUSPEND_LOCK, EVL_WAKER_LOCK },
        [TR_EVENT] = { EVL_SUSPEND_EVENT, EVL_WAKER_EVENT },
        [TR_COND] = { EVL_SUSPEND_CONDITION, EVL_WAKER_CONDITION },
        [TR_SEM] = { EVL_SUSPEND_SEMAPHORE, EVL_WAKER_SEMAPHORE },
        [TR_QGET] = { EVL_SUSPEND_QUEUE_GET, EVL_WAKER_QUEUE },
        [TR_QPUT] = { EVL_SUSPEND_QUEUE_PUT, EVL_WAKER_QUEUE },
        [TR_QJOIN] = { EVL_SUSPEND_QUEUE_JOIN, EVL_WAKER_QUEUE },
        [TR_CANCEL] = { EVL_SUSPEND_EVENT, EVL_WAKER_CANCEL },
    };
    const void *obj[TR_N] = { &tr.lock, &tr.ev, &tr.cond, &tr.sem, &tr.q, &tr.q, &tr.q,
                              &tr.cancel_ev };
    const struct evl_rec *s = last_rec(loop, EVL_PROBE_ID_task_suspend, wid);
    ASSERT_NOT_NULL(s);
    ASSERT_EQ(s->a32, want[p->which].reason);
    ASSERT_U64_EQ(s->a0, (uintptr_t)obj[p->which]);
    /* A lock wait names the holder; the others carry 0. */
    ASSERT_U64_EQ(s->a1, p->which == TR_LOCK ? tr.main_id : 0);
    ASSERT_NULL(last_rec(loop, EVL_PROBE_ID_task_wake, wid));
#endif
    switch (p->which) {
    case TR_LOCK:
        ASSERT_EQ(evl_lock_release(&tr.lock), 0);      /* held by main */
        break;
    case TR_EVENT:
        evl_event_set(&tr.ev);
        break;
    case TR_COND:
        ASSERT_EQ(evl_lock_acquire(evl_cond_lock(&tr.cond)), 0);
        ASSERT_EQ(evl_cond_notify(&tr.cond, 1), 1);
        ASSERT_EQ(evl_lock_release(evl_cond_lock(&tr.cond)), 0);
        break;
    case TR_SEM:
        ASSERT_EQ(evl_sem_release(&tr.sem), 0);
        break;
    case TR_QGET:
        ASSERT_EQ(evl_queue_put_nowait(&tr.q, 1), 0);
        break;
    case TR_QPUT:
        ASSERT_EQ(evl_queue_get_nowait(&tr.q, NULL), 0);
        break;
    case TR_QJOIN:
        ASSERT_EQ(evl_queue_task_done(&tr.q), 0);
        break;
    case TR_CANCEL:
        ASSERT_EQ(evl_cancel(p->waiter), 1);
        break;
    }
#ifdef EVL_PROBES
    const struct evl_rec *w = last_rec(loop, EVL_PROBE_ID_task_wake, wid);
    ASSERT_NOT_NULL(w);
    ASSERT_EQ(w->a32, want[p->which].waker);
    ASSERT_U64_EQ(w->a0, me);                          /* the waker task */
#else
    (void)p;
#endif
    tr.checked++;
    return 0;
}

static intptr_t tr_main(void *arg)
{
    tr.main_id = evl_task_id(evl_current_task());
    evl_lock_init(&tr.lock);
    evl_event_init(&tr.ev);
    evl_cond_init(&tr.cond, NULL);
    ASSERT_EQ(evl_sem_init(&tr.sem, 0, 0), 0);
    ASSERT_EQ(evl_queue_init(&tr.q, EVL_QUEUE_FIFO, 1), 0);
    evl_event_init(&tr.cancel_ev);
    for (int which = 0; which < TR_N; which++) {
        switch (which) {
        case TR_LOCK:
            ASSERT_EQ(evl_lock_acquire(&tr.lock), 0);  /* the checker releases it */
            break;
        case TR_QPUT:                                  /* full: the putter waits */
            ASSERT_EQ(evl_queue_put_nowait(&tr.q, 7), 0);
            ASSERT_EQ(evl_queue_full(&tr.q), 1);
            break;
        case TR_QJOIN:                                 /* one item left unfinished */
            ASSERT_EQ(evl_queue_get_nowait(&tr.q, NULL), 0);
            ASSERT_EQ(evl_queue_task_done(&tr.q), 0);
            ASSERT_EQ(evl_queue_task_done(&tr.q), 0);
            ASSERT_EQ(evl_queue_empty(&tr.q), 1);
            break;
        }
        struct tr_pair p = { which, NULL };
        p.waiter = evl_spawn(NULL, "waiter", tr_waiter, &p);
        evl_task *c = evl_spawn(NULL, "checker", tr_checker, &p);
        intptr_t r = evl_await(p.waiter);
        ASSERT_EQ(r, which == TR_CANCEL ? EVL_ECANCELED : 0);
        ASSERT_EQ(evl_await(c), 0);
        evl_future_unref(p.waiter);
        evl_future_unref(c);
    }
    ASSERT_EQ(tr.checked, TR_N);
    evl_queue_destroy(&tr.q);
    return 0;
}

TEST_IMPL(sync_trace_records)
{
#ifdef EVL_PROBES
    evl_batch_semaphore++;                             /* as a tracer would */
#endif
    intptr_t r = run_task(tr_main, NULL);
#ifdef EVL_PROBES
    evl_batch_semaphore--;
#endif
    ASSERT_EQ(r, 0);
    return 0;
}
