/*
 * future.c -- futures, done-callbacks, gather and wait_for.
 *
 * Ownership: `refs` counts references that may still complete or read the
 * future (the creator's, the loop's for a pending task, a gather's on its
 * children, a running executor job's); `holds` counts done-callback
 * registrations, which keep the memory alive until they have run.  The
 * future is freed when both reach zero.  When the last reference of a
 * pending future goes while tasks await it, nothing can ever complete it:
 * each of those tasks gets an "abandoned" leak verdict.
 *
 * gather, wait_for and shield follow CPython 3.11's asyncio/tasks.py step
 * by step (same futures, same done-callbacks), so they take the same number
 * of loop iterations as asyncio's and interleave with other tasks
 * identically.  (wait and as_completed are in wait.c, task groups in
 * taskgroup.c, timeout scopes in timeout.c.)
 */
#include "evl-internal.h"

#include <stdlib.h>
#include <string.h>


evl_future *evl_future_new(evl_loop *loop)
{
    if (!loop)
        loop = evl__tls_loop;
    if (!loop)
        return NULL;
    evl_future *f = malloc(sizeof(*f));
    if (f)
        evl__future_init(f, loop, EVL__FUT_PLAIN, EVL_WAKER_FUTURE);
    return f;
}

/* call_soon every registered done-callback, in registration order; a
 * task's wakeup makes it READY (and is a wake event while traced). */
static EVL__COLD void evl__future_schedule_callbacks_traced(evl_future *f)
{
    evl__waiter *w = f->cbs_head;
    f->cbs_head = f->cbs_tail = NULL;
    while (w) {
        evl__waiter *next = w->next;
        w->next = NULL;
        if (w->h.run == evl__task_wakeup_run && !f->loop->closing)
            evl__task_wake_probe(evl__container_of(w, evl__task, wait), f);
        evl__queue_push(&f->loop->ready, &w->h);
        w = next;
    }
}

/* The same untraced: no call in the loop (the tracing test once, outside
 * it, so that a build with probes pays one load and branch a completion). */
static void evl__future_schedule_callbacks(evl_future *f)
{
    evl_loop *loop = f->loop;
    if (EVL__TRACING(loop)) {
        evl__future_schedule_callbacks_traced(f);
        return;
    }
    evl__waiter *w = f->cbs_head;
    f->cbs_head = f->cbs_tail = NULL;
    while (w) {
        evl__waiter *next = w->next;
        w->next = NULL;
        if (w->h.run == evl__task_wakeup_run && !loop->closing)
            evl__container_of(w, evl__task, wait)->tstate = EVL_TASK_READY;
        evl__queue_push(&loop->ready, &w->h);
        w = next;
    }
}

void evl__future_complete(evl_future *f, int state, intptr_t result)
{
    assert(f->state == EVL_FUTURE_PENDING);
    f->state = (uint8_t)state;
    f->result = result;
    evl__future_schedule_callbacks(f);
}

void evl__future_add_waiter(evl_future *f, evl__waiter *w, void (*run)(evl__handle *))
{
    w->h.next = w->h.prev = NULL;
    w->h.run = run;
    w->next = NULL;
    w->fut = f;
    f->holds++;
    if (f->state != EVL_FUTURE_PENDING) {
        evl__queue_push(&f->loop->ready, &w->h);
        return;
    }
    if (f->cbs_tail)
        f->cbs_tail->next = w;
    else
        f->cbs_head = w;
    f->cbs_tail = w;
}

bool evl__future_remove_waiter(evl_future *f, evl__waiter *w)
{
    evl__waiter *prev = NULL;
    for (evl__waiter *c = f->cbs_head; c; prev = c, c = c->next) {
        if (c != w)
            continue;
        if (prev)
            prev->next = c->next;
        else
            f->cbs_head = c->next;
        if (f->cbs_tail == c)
            f->cbs_tail = prev;
        c->next = NULL;
        return true;
    }
    return false;
}

/* ------------------------------------------------- internal done-callbacks */

static void evl__cb_run(evl__handle *h)
{
    evl__cb *c = evl__container_of(h, evl__cb, w.h);
    evl_future *f = c->w.fut;
    c->w.fut = NULL;                  /* fn may free c */
    c->fn(c, f);
    evl__future_unhold(f);
}

void evl__cb_add(evl_future *f, evl__cb *c, evl__cb_fn fn)
{
    c->fn = fn;
    evl__future_add_waiter(f, &c->w, evl__cb_run);
}

bool evl__cb_remove(evl__cb *c)
{
    evl_future *f = c->w.fut;
    if (!f)
        return false;
    if (evl__handle_queued(&c->w.h))
        evl__queue_remove(&c->w.h);
    else
        evl__future_remove_waiter(f, &c->w);
    c->w.fut = NULL;
    evl__future_unhold(f);
    return true;
}

static void evl__gather_free(evl_future *f);
static void evl__shield_free(evl_future *f);

void evl__future_free_now(evl_future *f)
{
    switch (f->kind) {
    case EVL__FUT_PLAIN:
        free(f);
        break;
    case EVL__FUT_TASK:
        evl__task_free(evl__task_of(f));
        break;
    case EVL__FUT_GATHER:
        evl__gather_free(f);
        break;
    case EVL__FUT_EXEC:
        evl__job_free(f);
        break;
    case EVL__FUT_STACK:
        break;
    case EVL__FUT_SHIELD:
        evl__shield_free(f);
        break;
    case EVL__FUT_OWNED:
        break;
    }
}

evl_future *evl_future_ref(evl_future *f)
{
    f->refs++;
    return f;
}

void evl_future_unref(evl_future *f)
{
    if (!f)
        return;
    assert(f->refs > 0);
    if (--f->refs == 0 && f->state == EVL_FUTURE_PENDING && f->kind == EVL__FUT_PLAIN) {
        for (evl__waiter *w = f->cbs_head; w; w = w->next)
            if (w->h.run == evl__task_wakeup_run)
                evl__task_report_leak(evl__container_of(w, evl__task, wait), EVL_LEAK_ABANDONED);
    }
    evl__future_maybe_free(f);
}

int evl_future_set_result(evl_future *f, intptr_t value)
{
    if (!f || value < 0 || f->kind == EVL__FUT_TASK)
        return EVL_EINVAL;
    if (f->state != EVL_FUTURE_PENDING)
        return EVL_EDONE;
    evl__future_complete(f, EVL_FUTURE_DONE, value);
    return 0;
}

int evl_future_set_error(evl_future *f, int err)
{
    if (!f || err >= 0 || f->kind == EVL__FUT_TASK)
        return EVL_EINVAL;
    if (f->state != EVL_FUTURE_PENDING)
        return EVL_EDONE;
    evl__future_complete(f, EVL_FUTURE_DONE, err);
    return 0;
}

static int evl__gather_cancel(evl_future *f);

int evl_cancel(evl_future *f)
{
    if (!f)
        return 0;
    switch (f->kind) {
    case EVL__FUT_TASK:
        return evl__task_cancel(evl__task_of(f));
    case EVL__FUT_GATHER:
        return evl__gather_cancel(f);
    case EVL__FUT_EXEC:
        if (f->state == EVL_FUTURE_PENDING)
            evl__job_cancel(f);
        break;
    }
    if (f->state != EVL_FUTURE_PENDING)
        return 0;
    evl__future_complete(f, EVL_FUTURE_CANCELLED, EVL_ECANCELED);
    return 1;
}

int evl_future_state(const evl_future *f) { return f->state; }
int evl_future_done(const evl_future *f) { return f->state != EVL_FUTURE_PENDING; }
evl_loop *evl_future_loop(const evl_future *f) { return f->loop; }

intptr_t evl_future_result(evl_future *f)
{
    if (f->state == EVL_FUTURE_PENDING)
        return EVL_ENOTDONE;
    f->retrieved = 1;
    return evl__future_outcome(f);
}

/* ---------------------------------------------------- user done-callbacks */

typedef struct evl__donecb {
    evl__waiter w;
    evl_done_fn cb;
    void *arg;
} evl__donecb;

static void evl__donecb_run(evl__handle *h)
{
    evl__donecb *d = evl__container_of(h, evl__donecb, w.h);
    evl_future *f = d->w.fut;
    evl_loop *loop = f->loop;
    evl__tr_callback_begin(loop, (uintptr_t)d->cb);
    d->cb(f, d->arg);
    evl__tr_callback_end(loop, (uintptr_t)d->cb);
    free(d);
    evl__future_unhold(f);
}

int evl_future_add_done(evl_future *f, evl_done_fn cb, void *arg)
{
    if (!f || !cb)
        return EVL_EINVAL;
    evl__donecb *d = malloc(sizeof(*d));
    if (!d)
        return EVL_ENOMEM;
    d->cb = cb;
    d->arg = arg;
    evl__future_add_waiter(f, &d->w, evl__donecb_run);
    return 0;
}

int evl_future_remove_done(evl_future *f, evl_done_fn cb, void *arg)
{
    int removed = 0;
    evl__waiter *w = f->cbs_head;
    while (w) {
        evl__waiter *next = w->next;
        if (w->h.run == evl__donecb_run) {
            evl__donecb *d = evl__container_of(w, evl__donecb, w);
            if (d->cb == cb && d->arg == arg) {
                evl__future_remove_waiter(f, w);
                free(d);
                f->holds--;
                removed++;
            }
        }
        w = next;
    }
    evl__future_maybe_free(f);
    return removed;
}

/* ----------------------------------------------------------------- gather */

static void evl__gather_child_done(evl__handle *h);

bool evl__future_discard(evl__handle *h)
{
    if (h->run == evl__donecb_run) {
        evl__donecb *d = evl__container_of(h, evl__donecb, w.h);
        evl_future *f = d->w.fut;
        free(d);
        evl__future_unhold(f);
        return true;
    }
    if (h->run == evl__gather_child_done || h->run == evl__cb_run) {
        h->run(h);                    /* bookkeeping only: no user code */
        return true;
    }
    return false;
}

typedef struct evl__gather_node {
    evl__waiter w;            /* registered on one child */
    struct evl__gather *g;
} evl__gather_node;

typedef struct evl__gather {
    evl_future fut;           /* first: the outer future */
    size_t n;
    size_t nfinished;
    unsigned flags;
    uint8_t cancel_requested;
    evl_future **children;    /* a reference on each */
    evl__gather_node *nodes;
} evl__gather;

static void evl__gather_free(evl_future *f)
{
    evl__gather *g = (evl__gather *)(void *)f;
    for (size_t i = 0; i < g->n; i++)
        evl_future_unref(g->children[i]);
    free(g);
}

/* tasks.py gather's _done_callback. */
static void evl__gather_child_done(evl__handle *h)
{
    evl__gather_node *node = evl__container_of(h, evl__gather_node, w.h);
    evl__gather *g = node->g;
    evl_future *child = node->w.fut;
    evl_future *outer = &g->fut;
    g->nfinished++;
    if (outer->state != EVL_FUTURE_PENDING) {
        if (child->state != EVL_FUTURE_CANCELLED)
            child->retrieved = 1;
    } else if (!(g->flags & EVL_GATHER_COLLECT) &&
               (child->state == EVL_FUTURE_CANCELLED || child->result < 0)) {
        child->retrieved = 1;
        evl__future_complete(outer, EVL_FUTURE_DONE, evl__future_outcome(child));
    } else if (g->nfinished == g->n) {
        for (size_t i = 0; i < g->n; i++)
            g->children[i]->retrieved = 1;
        evl__future_complete(outer, EVL_FUTURE_DONE, g->cancel_requested ? EVL_ECANCELED : 0);
    }
    evl__future_unhold(child);
    if (g->nfinished == g->n)
        evl_future_unref(outer);      /* the self-reference of a running gather */
}

evl_future *evl_gather_new(evl_loop *loop, evl_future *const *futs, size_t n, unsigned flags)
{
    if (!loop)
        loop = evl__tls_loop;
    if (!loop || (n && !futs))
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!futs[i] || futs[i]->loop != loop)
            return NULL;
    evl__gather *g = malloc(sizeof(*g) + n * (sizeof(evl_future *) + sizeof(evl__gather_node)));
    if (!g)
        return NULL;
    evl__future_init(&g->fut, loop, EVL__FUT_GATHER, EVL_WAKER_GATHER);
    g->n = n;
    g->nfinished = 0;
    g->flags = flags;
    g->cancel_requested = 0;
    g->nodes = (evl__gather_node *)(g + 1);
    g->children = (evl_future **)(g->nodes + n);
    if (n == 0) {
        evl__future_complete(&g->fut, EVL_FUTURE_DONE, 0);
        return &g->fut;
    }
    g->fut.refs++;                    /* self-reference until all children report */
    for (size_t i = 0; i < n; i++) {
        g->children[i] = evl_future_ref(futs[i]);
        g->nodes[i].g = g;
        evl__future_add_waiter(futs[i], &g->nodes[i].w, evl__gather_child_done);
    }
    return &g->fut;
}

/* _GatheringFuture.cancel: cancel the children, not the outer future. */
static int evl__gather_cancel(evl_future *f)
{
    evl__gather *g = (evl__gather *)(void *)f;
    if (f->state != EVL_FUTURE_PENDING)
        return 0;
    int ret = 0;
    for (size_t i = 0; i < g->n; i++)
        if (evl_cancel(g->children[i]))
            ret = 1;
    if (ret)
        g->cancel_requested = 1;
    return ret;
}

int evl_gather_results(evl_future *f, intptr_t *results, size_t n)
{
    if (!f || f->kind != EVL__FUT_GATHER)
        return EVL_EINVAL;
    evl__gather *g = (evl__gather *)(void *)f;
    if (n > g->n)
        n = g->n;
    for (size_t i = 0; i < n; i++) {
        evl_future *c = g->children[i];
        results[i] = c->state == EVL_FUTURE_PENDING ? EVL_ENOTDONE : evl__future_outcome(c);
    }
    return 0;
}

int evl_gather(evl_future *const *futs, size_t n, unsigned flags, intptr_t *results)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    if (n && !futs)
        return EVL_EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (!futs[i])
            return EVL_EINVAL;
        if (futs[i]->loop != t->fut.loop)
            return EVL_EWRONGLOOP;
    }
    evl_future *g = evl_gather_new(t->fut.loop, futs, n, flags);
    if (!g)
        return EVL_ENOMEM;
    intptr_t r = evl_await(g);
    if (r == 0 && results)
        evl_gather_results(g, results, n);
    evl_future_unref(g);
    return (int)r;
}

/* --------------------------------------------------------------- wait_for */

/* tasks.py _release_waiter as a done-callback; holds a ref on the waiter. */
static void evl__release_waiter(evl_future *fut, void *arg)
{
    evl_future *waiter = arg;
    if (waiter->state == EVL_FUTURE_PENDING)
        evl__future_complete(waiter, EVL_FUTURE_DONE, 0);
    evl_future_unref(waiter);
}

/* tasks.py _release_waiter as the timeout's call_later callback. */
static void evl__release_waiter_timer(evl_loop *loop, void *arg)
{
    evl_future *waiter = arg;
    if (waiter->state == EVL_FUTURE_PENDING)
        evl__future_complete(waiter, EVL_FUTURE_DONE, 0);
}

static int evl__watch(evl_future *fut, evl_future *waiter)
{
    int rc = evl_future_add_done(fut, evl__release_waiter, evl_future_ref(waiter));
    if (rc < 0)
        evl_future_unref(waiter);
    return rc;
}

static void evl__unwatch(evl_future *fut, evl_future *waiter)
{
    if (evl_future_remove_done(fut, evl__release_waiter, waiter))
        evl_future_unref(waiter);
}

/* tasks.py _cancel_and_wait. */
static intptr_t evl__cancel_and_wait(evl_loop *loop, evl_future *fut)
{
    evl_future *waiter = evl_future_new(loop);
    if (!waiter)
        return EVL_ENOMEM;
    intptr_t r = evl__watch(fut, waiter);
    if (r == 0) {
        evl_cancel(fut);
        r = evl_await(waiter);
        evl__unwatch(fut, waiter);
    }
    evl_future_unref(waiter);
    return r;
}

/* wait_for after cancelling fut for its timeout: "return fut.result(),
 * except CancelledError: raise TimeoutError" -- a CancelledError as fut's
 * error (a gather whose child was cancelled) as much as fut cancelled. */
static intptr_t evl__timed_out(evl_future *fut)
{
    intptr_t r = evl_future_result(fut);
    return r == EVL_ECANCELED ? EVL_ETIMEDOUT : r;
}

intptr_t evl_wait_for(evl_future *fut, uint64_t timeout_ns)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    if (!fut)
        return EVL_EINVAL;
    evl_loop *loop = t->fut.loop;
    if (fut->loop != loop)
        return EVL_EWRONGLOOP;
    if (timeout_ns == 0) {
        if (fut->state != EVL_FUTURE_PENDING)
            return evl_future_result(fut);
        intptr_t r = evl__cancel_and_wait(loop, fut);
        if (r < 0 && fut->state == EVL_FUTURE_PENDING)
            return r;                         /* cancelled meanwhile, or ENOMEM */
        return evl__timed_out(fut);
    }
    evl_future *waiter = evl_future_new(loop);
    if (!waiter)
        return EVL_ENOMEM;
    evl_timer timeout;
    evl_timer_init(&timeout);
    intptr_t ret = evl_timer_start(loop, &timeout, timeout_ns, evl__release_waiter_timer, waiter);
    if (ret == 0)
        ret = evl__watch(fut, waiter);
    if (ret < 0)
        goto out;
    ret = evl_await(waiter);
    if (ret == EVL_ECANCELED) {               /* this task was cancelled */
        if (fut->state != EVL_FUTURE_PENDING) {
            ret = evl_future_result(fut);
            goto out;
        }
        evl__unwatch(fut, waiter);
        evl__cancel_and_wait(loop, fut);
        ret = EVL_ECANCELED;
        goto out;
    }
    if (fut->state != EVL_FUTURE_PENDING) {
        ret = evl_future_result(fut);
        goto out;
    }
    evl__unwatch(fut, waiter);
    ret = evl__cancel_and_wait(loop, fut);
    if (ret == EVL_ECANCELED && fut->state == EVL_FUTURE_PENDING)
        goto out;                             /* cancelled while cleaning up */
    ret = evl__timed_out(fut);
out:
    evl_timer_stop(&timeout);
    evl_future_unref(waiter);
    return ret;
}

/* ----------------------------------------------------------------- shield */

/* asyncio.shield: the outer future the caller awaits.  Cancelling it (what
 * cancelling the awaiting task does) leaves inner alone. */
typedef struct evl__shield {
    evl_future fut;           /* first: the outer future */
    evl_future *inner;        /* a reference */
    evl__cb on_inner;         /* _inner_done_callback, on inner */
    evl__cb on_outer;         /* _outer_done_callback, on the outer future */
} evl__shield;

static void evl__shield_free(evl_future *f)
{
    evl__shield *sh = (evl__shield *)(void *)f;
    evl_future_unref(sh->inner);
    free(sh);
}

/* tasks.py shield's _inner_done_callback.  While it is registered the
 * shield holds a reference on itself, dropped here. */
static void evl__shield_inner_done(evl__cb *c, evl_future *inner)
{
    evl__shield *sh = evl__container_of(c, evl__shield, on_inner);
    evl_future *outer = &sh->fut;
    if (outer->state == EVL_FUTURE_CANCELLED) {
        if (inner->state != EVL_FUTURE_CANCELLED)
            inner->retrieved = 1;     /* inner.exception() */
    } else if (outer->state == EVL_FUTURE_PENDING) {
        /* (asyncio raises InvalidStateError in the callback when the
         * program completed outer itself; nothing to do here.) */
        if (inner->state == EVL_FUTURE_CANCELLED) {
            evl__future_complete(outer, EVL_FUTURE_CANCELLED, EVL_ECANCELED);
        } else {
            inner->retrieved = 1;
            evl__future_complete(outer, EVL_FUTURE_DONE, inner->result);
        }
    }
    evl_future_unref(outer);
}

/* tasks.py shield's _outer_done_callback. */
static void evl__shield_outer_done(evl__cb *c, evl_future *outer)
{
    evl__shield *sh = evl__container_of(c, evl__shield, on_outer);
    if (sh->inner->state == EVL_FUTURE_PENDING && evl__cb_remove(&sh->on_inner))
        evl_future_unref(outer);      /* _inner_done_callback's reference */
}

evl_future *evl_shield(evl_future *inner)
{
    if (!inner || !inner->loop) {
        errno = EINVAL;
        return NULL;
    }
    if (inner->state != EVL_FUTURE_PENDING)
        return evl_future_ref(inner); /* asyncio's shortcut: inner itself */
    evl__shield *sh = malloc(sizeof(*sh));
    if (!sh) {
        errno = ENOMEM;
        return NULL;
    }
    /* Waiters woken by the outer future see what woke it: inner's kind. */
    evl__future_init(&sh->fut, inner->loop, EVL__FUT_SHIELD, inner->waker_kind);
    sh->fut.refs = 2;                 /* the caller's, on_inner's */
    sh->inner = evl_future_ref(inner);
    evl__cb_add(inner, &sh->on_inner, evl__shield_inner_done);
    evl__cb_add(&sh->fut, &sh->on_outer, evl__shield_outer_done);
    return &sh->fut;
}

evl_future *evl__shield_inner(evl_future *f)
{
    while (f->kind == EVL__FUT_SHIELD)
        f = ((evl__shield *)(void *)f)->inner;
    return f;
}
