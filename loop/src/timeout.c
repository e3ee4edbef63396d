/*
 * timeout.c -- timeout scopes: current asyncio's asyncio/timeouts.py
 * (CPython 3.11.7 and 3.12+; 3.13 differs only in exception chaining).
 *
 * A scope (evl_timeout, caller-owned) remembers its task, its deadline and
 * the task's count of cancellation requests when it was entered.  On
 * expiry a loop callback cancels the task (one more cancellation request)
 * and marks the scope EXPIRING; at exit the scope withdraws that request
 * with uncancel and turns the body's EVL_ECANCELED into EVL_ETIMEDOUT only
 * if the count is then back at (or below) the one taken at entry: no
 * request made since is left, which is how nested scopes and cancellations
 * from elsewhere keep their meaning (loop/ORDERING.md rule 14).  CPython
 * 3.11.2 compared with 0 instead, so a scope entered while its task was
 * already being cancelled (a CancelledError caught and not uncancelled)
 * passed the cancellation on where current asyncio reports the timeout.
 *
 * The expiry callback is what asyncio's is: a timer at the deadline
 * (call_at), or call_soon when the deadline is not in the future.
 */
#include "evl-internal.h"

enum {
    EVL__TM_CREATED = 0,
    EVL__TM_ENTERED = 1,
    EVL__TM_EXPIRING = 2,
    EVL__TM_EXPIRED = 3,
    EVL__TM_EXITED = 4,
};

/* Timeout._on_timeout. */
static void evl__timeout_fire(evl_loop *loop, void *arg)
{
    (void)loop;
    evl_timeout *tm = arg;
    tm->evl__soon = NULL;             /* the handle was recycled already */
    assert(tm->evl__state == EVL__TM_ENTERED);
    evl_cancel(tm->evl__task);
    tm->evl__state = EVL__TM_EXPIRING;
}

/* timeout_handler.cancel(). */
static void evl__timeout_disarm(evl_timeout *tm)
{
    evl_timer_stop(&tm->evl__timer);
    evl__cbhandle *c = tm->evl__soon;
    if (c) {
        tm->evl__soon = NULL;
        if (evl__handle_queued(&c->h))
            evl__queue_remove(&c->h);
        evl__cbhandle_put(c->loop, c);
    }
}

static int evl__timeout_arm(evl_timeout *tm, uint64_t when)
{
    evl_loop *loop = tm->evl__task->loop;
    if (when == EVL_NO_TIMEOUT)
        return 0;
    uint64_t now = evl__loop_now(loop);
    if (when <= now) {                /* call_soon(self._on_timeout) */
        evl__cbhandle *c = evl__cbhandle_get(loop);
        if (!c)
            return EVL_ENOMEM;
        c->cb = evl__timeout_fire;
        c->arg = tm;
        evl__queue_push(&loop->ready, &c->h);
        tm->evl__soon = c;
        return 0;
    }
    return evl_timer_start(loop, &tm->evl__timer, when - now, evl__timeout_fire, tm);
}

int evl_timeout_enter_at(evl_timeout *tm, uint64_t when)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    if (!tm)
        return EVL_EINVAL;
    evl_timer_init(&tm->evl__timer);
    tm->evl__soon = NULL;
    tm->evl__task = &t->fut;
    tm->evl__cancelling = t->ncancels;    /* self._cancelling */
    tm->evl__when = when;
    tm->evl__state = EVL__TM_ENTERED;
    int rc = evl__timeout_arm(tm, when);
    if (rc < 0)
        tm->evl__state = EVL__TM_CREATED;
    return rc;
}

int evl_timeout_enter(evl_timeout *tm, uint64_t delay_ns)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    uint64_t now = evl__loop_now(t->fut.loop);
    uint64_t when = delay_ns == EVL_NO_TIMEOUT || now + delay_ns < now ? EVL_NO_TIMEOUT
                                                                       : now + delay_ns;
    return evl_timeout_enter_at(tm, when);
}

int evl_timeout_reschedule(evl_timeout *tm, uint64_t when)
{
    if (!tm || tm->evl__state != EVL__TM_ENTERED)
        return EVL_EINVAL;
    evl__timeout_disarm(tm);
    tm->evl__when = when;
    return evl__timeout_arm(tm, when);
}

uint64_t evl_timeout_when(const evl_timeout *tm)
{
    return tm->evl__when;
}

int evl_timeout_expired(const evl_timeout *tm)
{
    return tm->evl__state == EVL__TM_EXPIRING || tm->evl__state == EVL__TM_EXPIRED;
}

/* Timeout.__aexit__. */
intptr_t evl_timeout_exit(evl_timeout *tm, intptr_t body)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    if (!tm || tm->evl__task != &t->fut ||
        (tm->evl__state != EVL__TM_ENTERED && tm->evl__state != EVL__TM_EXPIRING))
        return EVL_EINVAL;
    evl__timeout_disarm(tm);
    if (tm->evl__state == EVL__TM_EXPIRING) {
        tm->evl__state = EVL__TM_EXPIRED;
        /* Converted only if no request made since enter is left. */
        evl_task_uncancel(&t->fut);
        if (t->ncancels <= tm->evl__cancelling && body == EVL_ECANCELED)
            return EVL_ETIMEDOUT;
    } else {
        tm->evl__state = EVL__TM_EXITED;
    }
    return body;
}
