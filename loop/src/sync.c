/*
 * sync.c -- asyncio's synchronisation primitives: Lock, Event, Condition,
 * Semaphore / BoundedSemaphore and Queue / LifoQueue / PriorityQueue.
 *
 * A transcription of CPython 3.11.7's asyncio/locks.py and queues.py (the
 * version tests/diff compares against; the comments name the Python method
 * each function follows), so the wakeups follow loop/ORDERING.md rule 10.
 * Where asyncio appends a future to a deque and awaits it, a task here
 * links an evl__syncw (a stack future plus list links, on its own stack)
 * into the object's waiter list and suspends on the future with
 * evl__task_wait; waking a waiter is completing its future, so the task
 * runs one iteration later (rule 4) and the wake probe names the waker
 * kind and the task that completed it.  The deques' remove() is an O(1)
 * unlink; a waiter knows whether it is still linked (Queue's wakeups pop
 * waiters, Lock's leave them for the waiter to remove), which replaces
 * catching ValueError.
 *
 * The stack future is always done when evl__task_wait returns (it returns
 * from the future's wakeup only), so nothing of the waiter outlives the
 * wait except its links, which every wait removes before returning.
 */
#include "evl-internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- waiters */

struct evl__syncw {
    evl_future fut;                   /* EVL__FUT_STACK, the waker kind */
    struct evl__syncw *next, *prev;
    evl__syncq *q;                    /* the list it is on; NULL once off */
};

static void evl__syncq_push(evl__syncq *q, struct evl__syncw *w)
{
    w->q = q;
    w->next = NULL;
    w->prev = q->evl__tail;
    if (q->evl__tail)
        q->evl__tail->next = w;
    else
        q->evl__head = w;
    q->evl__tail = w;
}

static void evl__syncw_unlink(struct evl__syncw *w)
{
    evl__syncq *q = w->q;
    if (!q)
        return;
    if (w->prev)
        w->prev->next = w->next;
    else
        q->evl__head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        q->evl__tail = w->prev;
    w->next = w->prev = NULL;
    w->q = NULL;
}

static inline bool evl__syncw_pending(const struct evl__syncw *w)
{
    return w->fut.state == EVL_FUTURE_PENDING;
}

/* future.set_result(...): the waiter's task runs one iteration later. */
static inline void evl__syncw_wake(struct evl__syncw *w)
{
    evl__future_complete(&w->fut, EVL_FUTURE_DONE, 0);
}

/* mixins._LoopBoundMixin._get_loop: bind at the first wait. */
static int evl__sync_bind(evl_loop **bound, evl__task *t)
{
    if (!*bound)
        *bound = t->fut.loop;
    return *bound == t->fut.loop ? 0 : EVL_EWRONGLOOP;
}

/* Link w at the back of q and suspend on it: create_future(), append,
 * await.  The caller unlinks w afterwards (if still linked). */
static intptr_t evl__sync_wait(evl__task *t, evl__syncq *q, struct evl__syncw *w,
                               uint8_t waker, int reason, const void *obj, uint64_t arg)
{
    evl__future_init(&w->fut, t->fut.loop, EVL__FUT_STACK, waker);
    evl__syncq_push(q, w);
    return evl__task_wait(t, &w->fut, reason, (uint64_t)(uintptr_t)obj, arg);
}

/* ----------------------------------------------------------------- Lock */

void evl_lock_init(evl_lock *lock)
{
    memset(lock, 0, sizeof(*lock));
}

int evl_lock_locked(const evl_lock *lock) { return lock->evl__locked; }
uint64_t evl_lock_holder(const evl_lock *lock) { return lock->evl__holder; }

/* Lock._wake_up_first: the first waiter, unless already woken (it will
 * then take the lock, or pass it on if it was cancelled). */
static void evl__lock_wake_up_first(evl_lock *lock)
{
    struct evl__syncw *w = lock->evl__waiters.evl__head;
    if (w && evl__syncw_pending(w))
        evl__syncw_wake(w);
}

/* Lock.acquire. */
int evl_lock_acquire(evl_lock *lock)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    if (!lock->evl__locked) {
        bool all_cancelled = true;
        for (struct evl__syncw *w = lock->evl__waiters.evl__head; w && all_cancelled; w = w->next)
            all_cancelled = w->fut.state == EVL_FUTURE_CANCELLED;
        if (all_cancelled) {
            lock->evl__locked = 1;
            lock->evl__holder = t->id;
            return 0;
        }
    }
    int rc = evl__sync_bind(&lock->evl__loop, t);
    if (rc < 0)
        return rc;
    struct evl__syncw w;
    /* The holder rides in the suspend's timeout argument (evl.h). */
    intptr_t r = evl__sync_wait(t, &lock->evl__waiters, &w, EVL_WAKER_LOCK, EVL_SUSPEND_LOCK,
                                lock, lock->evl__holder);
    evl__syncw_unlink(&w);
    if (r < 0) {
        /* Cancelled, maybe after release() woke it: pass the wakeup on. */
        if (!lock->evl__locked)
            evl__lock_wake_up_first(lock);
        return (int)r;
    }
    lock->evl__locked = 1;
    lock->evl__holder = t->id;
    return 0;
}

/* Lock.release. */
int evl_lock_release(evl_lock *lock)
{
    if (!lock->evl__locked)
        return EVL_EINVAL;
    lock->evl__locked = 0;
    lock->evl__holder = 0;
    evl__lock_wake_up_first(lock);
    return 0;
}

/* ---------------------------------------------------------------- Event */

void evl_event_init(evl_event *ev)
{
    memset(ev, 0, sizeof(*ev));
}

int evl_event_is_set(const evl_event *ev) { return ev->evl__set; }
void evl_event_clear(evl_event *ev) { ev->evl__set = 0; }

/* Event.set. */
void evl_event_set(evl_event *ev)
{
    if (ev->evl__set)
        return;
    ev->evl__set = 1;
    for (struct evl__syncw *w = ev->evl__waiters.evl__head; w; w = w->next)
        if (evl__syncw_pending(w))
            evl__syncw_wake(w);
}

/* Event.wait, with the waker kind and suspend reason of its user (a queue's
 * join waits on the queue's own event). */
static int evl__event_wait(evl__task *t, evl_event *ev, uint8_t waker, int reason,
                           const void *obj)
{
    if (ev->evl__set)
        return 0;
    int rc = evl__sync_bind(&ev->evl__loop, t);
    if (rc < 0)
        return rc;
    struct evl__syncw w;
    intptr_t r = evl__sync_wait(t, &ev->evl__waiters, &w, waker, reason, obj, 0);
    evl__syncw_unlink(&w);
    return r < 0 ? (int)r : 0;
}

int evl_event_wait(evl_event *ev)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    return evl__event_wait(t, ev, EVL_WAKER_EVENT, EVL_SUSPEND_EVENT, ev);
}

/* ------------------------------------------------------------ Condition */

void evl_cond_init(evl_cond *cond, evl_lock *lock)
{
    memset(cond, 0, sizeof(*cond));
    cond->evl__lock = lock;
}

evl_lock *evl_cond_lock(evl_cond *cond)
{
    return cond->evl__lock ? cond->evl__lock : &cond->evl__own;
}

/* Condition.wait. */
int evl_cond_wait(evl_cond *cond)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    evl_lock *lock = evl_cond_lock(cond);
    if (!lock->evl__locked)
        return EVL_EINVAL;
    int rc = evl__sync_bind(&cond->evl__loop, t);
    if (rc < 0)
        return rc;
    evl_lock_release(lock);
    struct evl__syncw w;
    intptr_t r = evl__sync_wait(t, &cond->evl__waiters, &w, EVL_WAKER_CONDITION,
                                EVL_SUSPEND_CONDITION, cond, 0);
    evl__syncw_unlink(&w);
    /* Must re-acquire the lock even if the wait is cancelled; a
     * cancellation of the re-acquire is remembered and the acquire
     * retried.  Any other error (a lock bound to another loop than the
     * condition's) propagates, as acquire's RuntimeError does. */
    bool cancelled = r == EVL_ECANCELED;
    for (;;) {
        rc = evl_lock_acquire(lock);
        if (rc == 0)
            break;
        if (rc != EVL_ECANCELED)
            return rc;
        cancelled = true;
    }
    return cancelled ? EVL_ECANCELED : 0;
}

/* Condition.wait_for. */
int evl_cond_wait_for(evl_cond *cond, int (*pred)(void *arg), void *arg)
{
    if (!evl__current_task())
        return EVL_ENOTTASK;
    if (!pred)
        return EVL_EINVAL;
    int result = pred(arg);
    while (!result) {
        int rc = evl_cond_wait(cond);
        if (rc < 0)
            return rc;
        result = pred(arg);
    }
    return result;
}

/* Condition.notify: the first n waiters not woken yet. */
int evl_cond_notify(evl_cond *cond, size_t n)
{
    if (!evl_cond_lock(cond)->evl__locked)
        return EVL_EINVAL;
    int woken = 0;
    for (struct evl__syncw *w = cond->evl__waiters.evl__head; w && (size_t)woken < n; w = w->next) {
        if (evl__syncw_pending(w)) {
            evl__syncw_wake(w);
            woken++;
        }
    }
    return woken;
}

int evl_cond_notify_all(evl_cond *cond)
{
    return evl_cond_notify(cond, SIZE_MAX);
}

/* ------------------------------------------------------------ Semaphore */

int evl_sem_init(evl_sem *sem, int64_t value, unsigned flags)
{
    if (value < 0 || (flags & ~(unsigned)EVL_SEM_BOUNDED))
        return EVL_EINVAL;
    memset(sem, 0, sizeof(*sem));
    sem->evl__value = value;
    sem->evl__bound = value;
    sem->evl__bounded = (flags & EVL_SEM_BOUNDED) != 0;
    return 0;
}

int64_t evl_sem_value(const evl_sem *sem) { return sem->evl__value; }

/* Semaphore.locked: no free unit, or a waiter that was not cancelled. */
int evl_sem_locked(const evl_sem *sem)
{
    if (sem->evl__value == 0)
        return 1;
    for (const struct evl__syncw *w = sem->evl__waiters.evl__head; w; w = w->next)
        if (w->fut.state != EVL_FUTURE_CANCELLED)
            return 1;
    return 0;
}

/* Semaphore._wake_up_next: hand one unit to the first waiter not woken. */
static void evl__sem_wake_up_next(evl_sem *sem)
{
    for (struct evl__syncw *w = sem->evl__waiters.evl__head; w; w = w->next) {
        if (evl__syncw_pending(w)) {
            sem->evl__value--;
            evl__syncw_wake(w);
            return;
        }
    }
}

/* Semaphore.acquire. */
int evl_sem_acquire(evl_sem *sem)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    if (!evl_sem_locked(sem)) {
        sem->evl__value--;
        return 0;
    }
    int rc = evl__sync_bind(&sem->evl__loop, t);
    if (rc < 0)
        return rc;
    struct evl__syncw w;
    intptr_t r = evl__sync_wait(t, &sem->evl__waiters, &w, EVL_WAKER_SEMAPHORE,
                                EVL_SUSPEND_SEMAPHORE, sem, 0);
    evl__syncw_unlink(&w);
    if (r < 0) {
        /* Woken (handed a unit) and then cancelled: give the unit on. */
        if (w.fut.state != EVL_FUTURE_CANCELLED) {
            sem->evl__value++;
            evl__sem_wake_up_next(sem);
        }
        return (int)r;
    }
    if (sem->evl__value > 0)
        evl__sem_wake_up_next(sem);
    return 0;
}

/* Semaphore.release / BoundedSemaphore.release. */
int evl_sem_release(evl_sem *sem)
{
    if (sem->evl__bounded && sem->evl__value >= sem->evl__bound)
        return EVL_EINVAL;
    if (sem->evl__value == INT64_MAX)
        return EVL_EOVERFLOW;
    sem->evl__value++;
    evl__sem_wake_up_next(sem);
    return 0;
}

/* ---------------------------------------------------------------- Queue */

struct evl__qent {
    int64_t key;                      /* EVL_QUEUE_PRIORITY only */
    intptr_t item;
};

int evl_queue_init(evl_queue *q, int kind, size_t maxsize)
{
    if (kind != EVL_QUEUE_FIFO && kind != EVL_QUEUE_LIFO && kind != EVL_QUEUE_PRIORITY)
        return EVL_EINVAL;
    memset(q, 0, sizeof(*q));
    q->evl__kind = kind;
    q->evl__maxsize = maxsize;
    q->evl__finished.evl__set = 1;    /* nothing unfinished */
    return 0;
}

void evl_queue_destroy(evl_queue *q)
{
    free(q->evl__buf);
    q->evl__buf = NULL;
    q->evl__cap = q->evl__head = q->evl__len = 0;
}

size_t evl_queue_qsize(const evl_queue *q) { return q->evl__len; }
size_t evl_queue_maxsize(const evl_queue *q) { return q->evl__maxsize; }
int evl_queue_empty(const evl_queue *q) { return q->evl__len == 0; }

int evl_queue_full(const evl_queue *q)
{
    return q->evl__maxsize > 0 && q->evl__len >= q->evl__maxsize;
}

/* Room for one more entry.  A FIFO ring is unwrapped into the new block. */
static int evl__queue_grow(evl_queue *q)
{
    if (q->evl__len < q->evl__cap)
        return 0;
    size_t cap = q->evl__cap ? q->evl__cap * 2 : 8;
    if (q->evl__maxsize && cap > q->evl__maxsize)
        cap = q->evl__maxsize;
    if (cap <= q->evl__cap || cap > SIZE_MAX / sizeof(struct evl__qent))
        return EVL_ENOMEM;
    struct evl__qent *buf = malloc(cap * sizeof(*buf));
    if (!buf)
        return EVL_ENOMEM;
    for (size_t i = 0; i < q->evl__len; i++)
        buf[i] = q->evl__buf[(q->evl__head + i) % q->evl__cap];
    free(q->evl__buf);
    q->evl__buf = buf;
    q->evl__cap = cap;
    q->evl__head = 0;
    return 0;
}

/* heapq orders (key, item) tuples: key first, then item. */
static inline bool evl__qent_less(const struct evl__qent *a, const struct evl__qent *b)
{
    return a->key < b->key || (a->key == b->key && a->item < b->item);
}

/* Queue._put / LifoQueue._put / PriorityQueue._put (heappush). */
static void evl__queue_store(evl_queue *q, int64_t key, intptr_t item)
{
    struct evl__qent e = { key, item };
    struct evl__qent *a = q->evl__buf;
    switch (q->evl__kind) {
    case EVL_QUEUE_FIFO:
        a[(q->evl__head + q->evl__len) % q->evl__cap] = e;
        q->evl__len++;
        break;
    case EVL_QUEUE_LIFO:
        a[q->evl__len++] = e;
        break;
    default: {
        size_t i = q->evl__len++;
        while (i > 0) {
            size_t parent = (i - 1) / 2;
            if (!evl__qent_less(&e, &a[parent]))
                break;
            a[i] = a[parent];
            i = parent;
        }
        a[i] = e;
        break;
    }
    }
}

/* Queue._get / LifoQueue._get / PriorityQueue._get (heappop). */
static intptr_t evl__queue_take(evl_queue *q)
{
    struct evl__qent *a = q->evl__buf;
    intptr_t item;
    switch (q->evl__kind) {
    case EVL_QUEUE_FIFO:
        item = a[q->evl__head].item;
        q->evl__head = (q->evl__head + 1) % q->evl__cap;
        q->evl__len--;
        break;
    case EVL_QUEUE_LIFO:
        item = a[--q->evl__len].item;
        break;
    default: {
        item = a[0].item;
        struct evl__qent last = a[--q->evl__len];
        size_t n = q->evl__len, i = 0;
        for (;;) {
            size_t c = 2 * i + 1;
            if (c >= n)
                break;
            if (c + 1 < n && evl__qent_less(&a[c + 1], &a[c]))
                c++;
            if (!evl__qent_less(&a[c], &last))
                break;
            a[i] = a[c];
            i = c;
        }
        a[i] = last;
        break;
    }
    }
    if (q->evl__len == 0)
        q->evl__head = 0;
    return item;
}

/* Queue._wakeup_next: pop waiters until one not done yet, and wake it. */
static void evl__queue_wakeup_next(evl__syncq *waiters)
{
    struct evl__syncw *w;
    while ((w = waiters->evl__head)) {
        evl__syncw_unlink(w);
        if (evl__syncw_pending(w)) {
            evl__syncw_wake(w);
            break;
        }
    }
}

/* Queue.put_nowait. */
int evl_queue_put_key_nowait(evl_queue *q, int64_t key, intptr_t item)
{
    if (evl_queue_full(q))
        return EVL_EAGAIN;
    int rc = evl__queue_grow(q);
    if (rc < 0)
        return rc;
    evl__queue_store(q, key, item);
    q->evl__unfinished++;
    evl_event_clear(&q->evl__finished);
    evl__queue_wakeup_next(&q->evl__getters);
    return 0;
}

int evl_queue_put_nowait(evl_queue *q, intptr_t item)
{
    return evl_queue_put_key_nowait(q, 0, item);
}

/* Queue.put. */
int evl_queue_put_key(evl_queue *q, int64_t key, intptr_t item)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    while (evl_queue_full(q)) {
        int rc = evl__sync_bind(&q->evl__loop, t);
        if (rc < 0)
            return rc;
        struct evl__syncw w;
        intptr_t r = evl__sync_wait(t, &q->evl__putters, &w, EVL_WAKER_QUEUE,
                                    EVL_SUSPEND_QUEUE_PUT, q, 0);
        if (r < 0) {
            /* putter.cancel() is a no-op here (the future is done); a
             * get_nowait may have popped it already. */
            evl__syncw_unlink(&w);
            if (!evl_queue_full(q) && w.fut.state != EVL_FUTURE_CANCELLED)
                evl__queue_wakeup_next(&q->evl__putters);   /* woken, cannot take it */
            return (int)r;
        }
        evl__syncw_unlink(&w);        /* popped by its waker already */
    }
    return evl_queue_put_key_nowait(q, key, item);
}

int evl_queue_put(evl_queue *q, intptr_t item)
{
    return evl_queue_put_key(q, 0, item);
}

/* Queue.get_nowait. */
int evl_queue_get_nowait(evl_queue *q, intptr_t *item)
{
    if (q->evl__len == 0)
        return EVL_EAGAIN;
    intptr_t v = evl__queue_take(q);
    if (item)
        *item = v;
    evl__queue_wakeup_next(&q->evl__putters);
    return 0;
}

/* Queue.get. */
int evl_queue_get(evl_queue *q, intptr_t *item)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    while (q->evl__len == 0) {
        int rc = evl__sync_bind(&q->evl__loop, t);
        if (rc < 0)
            return rc;
        struct evl__syncw w;
        intptr_t r = evl__sync_wait(t, &q->evl__getters, &w, EVL_WAKER_QUEUE,
                                    EVL_SUSPEND_QUEUE_GET, q, 0);
        evl__syncw_unlink(&w);
        if (r < 0) {
            if (q->evl__len != 0 && w.fut.state != EVL_FUTURE_CANCELLED)
                evl__queue_wakeup_next(&q->evl__getters);   /* woken, cannot take it */
            return (int)r;
        }
    }
    return evl_queue_get_nowait(q, item);
}

/* Queue.task_done. */
int evl_queue_task_done(evl_queue *q)
{
    if (q->evl__unfinished == 0)
        return EVL_EINVAL;
    if (--q->evl__unfinished == 0)
        evl_event_set(&q->evl__finished);
    return 0;
}

/* Queue.join. */
int evl_queue_join(evl_queue *q)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    if (q->evl__unfinished == 0)
        return 0;
    return evl__event_wait(t, &q->evl__finished, EVL_WAKER_QUEUE, EVL_SUSPEND_QUEUE_JOIN, q);
}
