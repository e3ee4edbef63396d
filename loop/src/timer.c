/*
 * timer.c -- timers: a 4-ary min-heap stored in an array, keyed on
 * (deadline, sequence number).  Like libev's, each entry carries a copy of
 * its key so sifting compares in place (equal deadlines are common: sleeps
 * started in one iteration share the cached time); the sequence number
 * makes equal deadlines fire in scheduling order.  Removal is eager (the index lives in the timer), so a
 * timer may sit in a task's stack frame.
 */
#include "evl-internal.h"

#include <stdlib.h>

enum { EVL__TIMER_IDLE = 0, EVL__TIMER_HEAP = 1, EVL__TIMER_QUEUED = 2 };

static void evl__call_later_fire(evl_loop *loop, void *arg);
#define EVL__NO_INDEX UINT32_MAX

static inline bool evl__before(const evl__heap_entry *a, const evl__heap_entry *b)
{
    return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq < b->seq);
}

static inline void evl__heap_place(evl__heap *h, uint32_t k, evl__heap_entry e)
{
    h->a[k] = e;
    e.t->evl__index = k;
}

static void evl__upheap(evl__heap *h, uint32_t k)
{
    evl__heap_entry e = h->a[k];
    while (k > 0) {
        uint32_t p = (k - 1) / 4;
        if (!evl__before(&e, &h->a[p]))
            break;
        evl__heap_place(h, k, h->a[p]);
        k = p;
    }
    evl__heap_place(h, k, e);
}

static void evl__downheap(evl__heap *h, uint32_t k)
{
    evl__heap_entry e = h->a[k];
    uint32_t n = h->n;
    for (;;) {
        uint32_t c = 4 * k + 1;
        if (c >= n)
            break;
        uint32_t best = c, end = c + 4 < n ? c + 4 : n;
        for (uint32_t i = c + 1; i < end; i++)
            if (evl__before(&h->a[i], &h->a[best]))
                best = i;
        if (!evl__before(&h->a[best], &e))
            break;
        evl__heap_place(h, k, h->a[best]);
        k = best;
    }
    evl__heap_place(h, k, e);
}

static int evl__heap_push(evl__heap *h, evl_timer *t)
{
    if (h->n == h->cap) {
        uint32_t cap = h->cap ? h->cap * 2 : 64;
        evl__heap_entry *a = realloc(h->a, (size_t)cap * sizeof(*a));
        if (!a)
            return EVL_ENOMEM;
        h->a = a;
        h->cap = cap;
    }
    uint32_t k = h->n++;
    h->a[k] = (evl__heap_entry){ t->evl__deadline, t->evl__seq, t };
    evl__upheap(h, k);
    return 0;
}

static void evl__heap_remove(evl__heap *h, uint32_t k)
{
    assert(k < h->n);
    h->a[k].t->evl__index = EVL__NO_INDEX;
    uint32_t last = --h->n;
    if (k == last)
        return;
    h->a[k] = h->a[last];
    h->a[k].t->evl__index = k;
    if (k > 0 && evl__before(&h->a[k], &h->a[(k - 1) / 4]))
        evl__upheap(h, k);
    else
        evl__downheap(h, k);
}

void evl__heap_release(evl__heap *h)
{
    free(h->a);
    h->a = NULL;
    h->n = h->cap = 0;
}

/* The ready-queue step of a due timer. */
static void evl__timer_run(evl__handle *hd)
{
    evl_timer *t = evl__container_of(hd, evl_timer, evl__ready);
    if (t->evl__state != EVL__TIMER_QUEUED)
        return;
    t->evl__state = EVL__TIMER_IDLE;
    evl_loop *loop = t->evl__loop;
    evl_callback cb = t->evl__cb;
    /* t may be freed or re-armed by cb: read nothing from it afterwards. */
    evl__tr_callback_begin(loop, (uintptr_t)cb);
    cb(loop, t->evl__arg);
    evl__tr_callback_end(loop, (uintptr_t)cb);
}

void evl_timer_init(evl_timer *t)
{
    t->evl__ready.next = t->evl__ready.prev = NULL;
    t->evl__ready.run = evl__timer_run;
    t->evl__loop = NULL;
    t->evl__index = EVL__NO_INDEX;
    t->evl__state = EVL__TIMER_IDLE;
}

int evl_timer_start(evl_loop *loop, evl_timer *t, uint64_t delay_ns, evl_callback cb, void *arg)
{
    if (!loop || !t || !cb)
        return EVL_EINVAL;
    if (t->evl__ready.run != evl__timer_run)
        evl_timer_init(t);      /* zero-initialised timer */
    evl_timer_stop(t);
    t->evl__loop = loop;
    t->evl__cb = cb;
    t->evl__arg = arg;
    uint64_t now = evl__loop_now(loop);
    t->evl__deadline = now + delay_ns;
    if (t->evl__deadline < now)
        t->evl__deadline = UINT64_MAX;    /* saturate: "never" */
    t->evl__seq = loop->timer_seq++;
    int rc = evl__heap_push(&loop->timers, t);
    if (rc < 0)
        return rc;
    t->evl__state = EVL__TIMER_HEAP;
    return 0;
}

void evl_timer_stop(evl_timer *t)
{
    if (t->evl__state == EVL__TIMER_HEAP)
        evl__heap_remove(&t->evl__loop->timers, t->evl__index);
    else if (t->evl__state == EVL__TIMER_QUEUED && evl__handle_queued(&t->evl__ready))
        evl__queue_remove(&t->evl__ready);
    t->evl__state = EVL__TIMER_IDLE;
}

int evl_timer_active(const evl_timer *t)
{
    return t->evl__state != EVL__TIMER_IDLE;
}

/* evl__timers_run_due with timers armed. */
void evl__timers_fire_due(evl_loop *loop)
{
    evl__heap *h = &loop->timers;
    while (h->n > 0 && h->a[0].deadline <= evl__loop_now(loop)) {
        evl_timer *t = h->a[0].t;
        evl__heap_remove(h, 0);
        t->evl__state = EVL__TIMER_QUEUED;
        if (!evl__handle_queued(&t->evl__ready))
            evl__queue_push(&loop->ready, &t->evl__ready);
    }
}

/* evl_loop_free: forget every armed timer (call_later ones are ours to
 * free; user timers become idle, so stopping them later is harmless). */
void evl__timers_release(evl_loop *loop)
{
    evl__heap *h = &loop->timers;
    for (uint32_t i = 0; i < h->n; i++) {
        evl_timer *t = h->a[i].t;
        t->evl__state = EVL__TIMER_IDLE;
        t->evl__index = EVL__NO_INDEX;
        if (t->evl__cb == evl__call_later_fire)
            free(evl__container_of(t, evl__cbhandle, timer));
    }
    evl__heap_release(h);
}

/* evl_loop_free: a due timer left in the ready queue goes idle. */
bool evl__timer_discard(evl__handle *hd)
{
    if (hd->run != evl__timer_run)
        return false;
    evl_timer *t = evl__container_of(hd, evl_timer, evl__ready);
    t->evl__state = EVL__TIMER_IDLE;
    if (t->evl__cb == evl__call_later_fire)
        free(evl__container_of(t, evl__cbhandle, timer));
    return true;
}

/* ---------------------------------------------------------- call_later */

static void evl__call_later_fire(evl_loop *loop, void *arg)
{
    evl__cbhandle *c = arg;
    evl_callback cb = c->cb;
    void *cbarg = c->arg;
    evl__cbhandle_put(loop, c);       /* recycle before running cb */
    cb(loop, cbarg);
}


int evl_call_later(evl_loop *loop, uint64_t delay_ns, evl_callback cb, void *arg)
{
    if (!loop || !cb)
        return EVL_EINVAL;
    evl__cbhandle *c = evl__cbhandle_get(loop);
    if (!c)
        return EVL_ENOMEM;
    c->cb = cb;
    c->arg = arg;
    evl_timer_init(&c->timer);
    int rc = evl_timer_start(loop, &c->timer, delay_ns, evl__call_later_fire, c);
    if (rc < 0) {
        evl__cbhandle_put(loop, c);
    }
    return rc;
}
