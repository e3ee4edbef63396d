/*
 * wait.c -- asyncio.wait and asyncio.as_completed (CPython 3.11 tasks.py).
 *
 * Both put one done-callback on every future (an evl__cb, scheduled with
 * call_soon when the future completes, loop/ORDERING.md rule 4) and make the
 * calling task await a waiter future that those callbacks, or a timeout
 * timer, complete: the same futures and callbacks as tasks.py's _wait and
 * as_completed, so the same number of iterations (rule 13).  The task
 * suspends with reason EVL_SUSPEND_WAIT on that waiter, which wakes it with
 * EVL_WAKER_WAIT.
 *
 * Their state is on the heap, not on the task's stack: the callbacks stay
 * registered on futures the task does not own, and evl_loop_free may still
 * run them (bookkeeping only) after the task's stack is gone; the waiter is
 * an evl__owned_fut, so that evl_loop_free, destroying a task still inside
 * evl_wait, lets the wait release its state.
 */
#include "evl-internal.h"

#include <stdlib.h>
#include <string.h>

/* asyncio takes set(fs): mark the entries of futs that repeat an earlier
 * one (dup[i] = 1).  Sorting (address, index) pairs keeps it O(n log n). */
typedef struct evl__ptr_idx {
    uintptr_t p;
    size_t i;
} evl__ptr_idx;

static int evl__ptr_idx_cmp(const void *a, const void *b)
{
    const evl__ptr_idx *x = a, *y = b;
    if (x->p != y->p)
        return x->p < y->p ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* Returns the number of distinct futures, or 0 on ENOMEM. */
static size_t evl__mark_dups(evl_future *const *futs, size_t n, unsigned char *dup)
{
    memset(dup, 0, n);
    if (n < 2)
        return n;
    evl__ptr_idx *v = malloc(n * sizeof(*v));
    if (!v)
        return 0;
    for (size_t i = 0; i < n; i++)
        v[i] = (evl__ptr_idx){ (uintptr_t)futs[i], i };
    qsort(v, n, sizeof(*v), evl__ptr_idx_cmp);
    size_t distinct = n;
    for (size_t i = 1; i < n; i++)
        if (v[i].p == v[i - 1].p) {
            dup[v[i].i] = 1;
            distinct--;
        }
    free(v);
    return distinct;
}

/* Common argument checks: every future non-NULL and of loop. */
static int evl__check_futs(evl_loop *loop, evl_future *const *futs, size_t n)
{
    if (n && !futs)
        return EVL_EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (!futs[i])
            return EVL_EINVAL;
        if (futs[i]->loop != loop)
            return EVL_EWRONGLOOP;
    }
    return 0;
}

/* ------------------------------------------------------------------- wait */

typedef struct evl__wait_node {
    evl__cb cb;               /* _on_completion on one future */
    struct evl__waitset *ws;
    evl_future *f;            /* a reference (asyncio's set holds one), NULL
                               * for a repeat */
} evl__wait_node;

typedef struct evl__waitset {
    evl__owned_fut waiter;    /* first: the future the task awaits */
    evl_timer timeout;
    size_t n;
    size_t counter;
    int mode;
    unsigned char *dup;       /* [n]: futs[i] repeats an earlier entry */
    evl__wait_node nodes[];   /* [n], unused for repeats */
} evl__waitset;

static void evl__wait_release(evl__waitset *ws)
{
    if (ws->waiter.fut.state == EVL_FUTURE_PENDING)
        evl__future_complete(&ws->waiter.fut, EVL_FUTURE_DONE, 0);
}

/* finally: timeout_handle.cancel(), remove_done_callback on each. */
static void evl__wait_cleanup(evl__waitset *ws)
{
    evl_timer_stop(&ws->timeout);
    for (size_t i = 0; i < ws->n; i++)
        evl__cb_remove(&ws->nodes[i].cb);
}

static void evl__wait_free(evl__waitset *ws)
{
    for (size_t i = 0; i < ws->n; i++)
        evl_future_unref(ws->nodes[i].f);
    free(ws);
}

/* evl_loop_free destroyed the waiting task. */
static void evl__wait_abandon(evl__owned_fut *f)
{
    evl__waitset *ws = (evl__waitset *)(void *)f;
    evl__wait_cleanup(ws);
    evl__wait_free(ws);
}

/* tasks.py _release_waiter as the timeout's call_later callback. */
static void evl__wait_timeout(evl_loop *loop, void *arg)
{
    (void)loop;
    evl__wait_release(arg);
}

/* tasks.py _wait's _on_completion. */
static void evl__wait_on_completion(evl__cb *c, evl_future *f)
{
    evl__waitset *ws = evl__container_of(c, evl__wait_node, cb)->ws;
    ws->counter--;
    bool release = ws->counter == 0 || ws->mode == EVL_FIRST_COMPLETED;
    if (!release && ws->mode == EVL_FIRST_EXCEPTION && f->state != EVL_FUTURE_CANCELLED) {
        f->retrieved = 1;             /* f.exception() */
        release = f->result < 0;
    }
    if (release) {
        evl_timer_stop(&ws->timeout);
        evl__wait_release(ws);
    }
}

int evl_wait(evl_future *const *futs, size_t n, int return_when, uint64_t timeout_ns,
             evl_future **done, size_t *ndone, evl_future **pending, size_t *npending)
{
    if (ndone)
        *ndone = 0;
    if (npending)
        *npending = 0;
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    evl_loop *loop = t->fut.loop;
    if (n == 0 || (return_when != EVL_ALL_COMPLETED && return_when != EVL_FIRST_COMPLETED &&
                   return_when != EVL_FIRST_EXCEPTION))
        return EVL_EINVAL;
    int rc = evl__check_futs(loop, futs, n);
    if (rc < 0)
        return rc;
    if (n > (SIZE_MAX - sizeof(evl__waitset)) / (sizeof(evl__wait_node) + 1))
        return EVL_ENOMEM;
    evl__waitset *ws = malloc(sizeof(*ws) + n * (sizeof(evl__wait_node) + 1));
    if (!ws)
        return EVL_ENOMEM;
    ws->dup = (unsigned char *)(ws->nodes + n);
    ws->counter = evl__mark_dups(futs, n, ws->dup);
    if (ws->counter == 0) {
        free(ws);
        return EVL_ENOMEM;
    }
    ws->n = n;
    ws->mode = return_when;
    evl__owned_fut_init(&ws->waiter, loop, EVL_WAKER_WAIT, evl__wait_abandon);
    evl_timer_init(&ws->timeout);
    if (timeout_ns != EVL_NO_TIMEOUT) {
        rc = evl_timer_start(loop, &ws->timeout, timeout_ns, evl__wait_timeout, ws);
        if (rc < 0) {
            free(ws);
            return rc;
        }
    }
    for (size_t i = 0; i < n; i++) {
        evl__wait_node *node = &ws->nodes[i];
        node->ws = ws;
        node->cb.w.fut = NULL;
        node->f = NULL;
        if (!ws->dup[i]) {
            node->f = evl_future_ref(futs[i]);
            evl__cb_add(node->f, &node->cb, evl__wait_on_completion);
        }
    }
    intptr_t r = evl__task_wait(t, &ws->waiter.fut, EVL_SUSPEND_WAIT, (uintptr_t)&ws->waiter, 0);
    evl__wait_cleanup(ws);
    if (r >= 0) {
        size_t nd = 0, np = 0;
        for (size_t i = 0; i < n; i++) {
            evl_future *f = ws->nodes[i].f;
            if (!f)
                continue;
            if (f->state != EVL_FUTURE_PENDING) {
                if (done)
                    done[nd] = f;
                nd++;
            } else {
                if (pending)
                    pending[np] = f;
                np++;
            }
        }
        if (ndone)
            *ndone = nd;
        if (npending)
            *npending = np;
        r = 0;
    }
    evl__wait_free(ws);
    return (int)r;
}

/* ----------------------------------------------------------- as_completed */

typedef struct evl__ac_node {
    evl__cb cb;               /* _on_completion on one future */
    evl_as_completed *it;
    evl_future *f;            /* a reference, NULL for a repeat */
} evl__ac_node;

struct evl_as_completed {
    evl_loop *loop;
    evl__owned_fut getter;    /* what next() awaits (Queue.get's getter) */
    evl__task *waiting;       /* the task in next(), or NULL */
    evl_timer timeout;
    size_t n;                 /* entries in nodes[] */
    size_t todo;              /* futures not yet done (asyncio's todo) */
    size_t turns;             /* items still to hand out: len(todo) at first */
    size_t qhead, qlen;       /* the done queue: futures, NULL = timed out */
    evl_future **queue;       /* [distinct] */
    evl__ac_node nodes[];     /* [n] */
};

static void evl__ac_put(evl_as_completed *it, evl_future *f)
{
    /* At most one put per distinct future: n slots are enough. */
    it->queue[(it->qhead + it->qlen) % it->n] = f;
    it->qlen++;
    /* Queue.put_nowait wakes the first getter. */
    if (it->waiting && it->getter.fut.state == EVL_FUTURE_PENDING)
        evl__future_complete(&it->getter.fut, EVL_FUTURE_DONE, 0);
}

/* evl_loop_free destroyed the task in next(): the iterator is the
 * program's to free. */
static void evl__ac_abandon(evl__owned_fut *f)
{
    evl_as_completed *it = evl__container_of(f, evl_as_completed, getter);
    it->waiting = NULL;
}

/* as_completed's _on_completion. */
static void evl__ac_on_completion(evl__cb *c, evl_future *f)
{
    evl_as_completed *it = evl__container_of(c, evl__ac_node, cb)->it;
    if (!it->todo)
        return;                       /* _on_timeout() was here first */
    it->todo--;
    evl__ac_put(it, f);
    if (!it->todo)
        evl_timer_stop(&it->timeout);
}

/* as_completed's _on_timeout: every future still to come times out. */
static void evl__ac_on_timeout(evl_loop *loop, void *arg)
{
    (void)loop;
    evl_as_completed *it = arg;
    for (size_t i = 0; i < it->n; i++)
        if (evl__cb_remove(&it->nodes[i].cb))
            evl__ac_put(it, NULL);
    it->todo = 0;
}

evl_as_completed *evl_as_completed_new(evl_loop *loop, evl_future *const *futs, size_t n,
                                       uint64_t timeout_ns)
{
    if (!loop)
        loop = evl__tls_loop;
    if (!loop || evl__check_futs(loop, futs, n) < 0) {
        errno = EINVAL;
        return NULL;
    }
    size_t each = sizeof(evl__ac_node) + sizeof(evl_future *) + 1;
    if (n > (SIZE_MAX - sizeof(evl_as_completed)) / each) {
        errno = ENOMEM;
        return NULL;
    }
    evl_as_completed *it = malloc(sizeof(*it) + n * each);
    if (!it) {
        errno = ENOMEM;
        return NULL;
    }
    it->queue = (evl_future **)(void *)(it->nodes + n);
    unsigned char *dup = (unsigned char *)(it->queue + n);
    size_t distinct = evl__mark_dups(futs, n, dup);
    if (n && !distinct) {
        free(it);
        errno = ENOMEM;
        return NULL;
    }
    it->loop = loop;
    it->waiting = NULL;
    evl__owned_fut_init(&it->getter, loop, EVL_WAKER_WAIT, evl__ac_abandon);
    evl_timer_init(&it->timeout);
    it->n = n;
    it->todo = it->turns = distinct;
    it->qhead = it->qlen = 0;
    if (distinct && timeout_ns != EVL_NO_TIMEOUT) {
        int rc = evl_timer_start(loop, &it->timeout, timeout_ns, evl__ac_on_timeout, it);
        if (rc < 0) {
            free(it);
            errno = ENOMEM;
            return NULL;
        }
    }
    for (size_t i = 0; i < n; i++) {
        evl__ac_node *node = &it->nodes[i];
        node->it = it;
        node->cb.w.fut = NULL;
        node->f = NULL;
        if (dup[i])
            continue;
        node->f = evl_future_ref(futs[i]);
        evl__cb_add(futs[i], &node->cb, evl__ac_on_completion);
    }
    return it;
}

/* as_completed's _wait_for_one. */
intptr_t evl_as_completed_next(evl_as_completed *it, evl_future **done)
{
    if (done)
        *done = NULL;
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    if (!it)
        return EVL_EINVAL;
    if (it->loop != t->fut.loop)
        return EVL_EWRONGLOOP;
    if (it->waiting)
        return EVL_EBUSY;
    if (!it->turns)
        return EVL_EDONE;
    /* Queue.get: await a getter only while the queue is empty. */
    while (!it->qlen) {
        evl__owned_fut_init(&it->getter, it->loop, EVL_WAKER_WAIT, evl__ac_abandon);
        it->waiting = t;
        intptr_t r = evl__task_wait(t, &it->getter.fut, EVL_SUSPEND_WAIT,
                                    (uintptr_t)&it->getter, 0);
        it->waiting = NULL;
        if (r < 0)
            return r;                 /* cancelled: what is queued stays */
    }
    evl_future *f = it->queue[it->qhead];
    it->qhead = (it->qhead + 1) % it->n;
    it->qlen--;
    it->turns--;
    if (!f)
        return EVL_ETIMEDOUT;
    if (done)
        *done = f;
    return evl_future_result(f);      /* f.result(): marks it retrieved */
}

int evl_as_completed_free(evl_as_completed *it)
{
    if (!it)
        return 0;
    if (it->waiting)
        return EVL_EBUSY;
    evl_timer_stop(&it->timeout);
    for (size_t i = 0; i < it->n; i++) {
        evl__cb_remove(&it->nodes[i].cb);
        evl_future_unref(it->nodes[i].f);
    }
    free(it);
    return 0;
}
