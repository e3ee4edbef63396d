/*
 * trace.c -- the slow paths of trace.h: fire an event's USDT probe and, while
 * a tracer raised the batch semaphore, append its record to the loop's
 * batch buffer (evl-probes.h explains batching).  Only reached while some
 * tracer is attached; kept out of line and cold so that the event sites in
 * the loop stay small.
 */
#include "evl-internal.h"

#define EVL__REC(loop, name, task, a32, a0, a1)                                \
    do {                                                                      \
        if (EVL_BATCHING())                                                   \
            evl__trace_rec(loop, EVL_PROBE_ID_##name, sizeof(struct evl_rec), \
                           task, a32, a0, a1);                                \
    } while (0)

EVL__COLD void evl__rec_task_create(evl_loop *loop, uint64_t task, uint64_t parent,
                                    const char *name, uintptr_t fn, uint32_t flags)
{
    size_t n = strlen(name);
    uint16_t size = (uint16_t)(sizeof(struct evl_rec) + ((n + 7) & ~(size_t)7));
    struct evl_rec *r = evl__trace_rec(loop, EVL_PROBE_ID_task_create, size, task,
                                       (uint32_t)n | flags, parent, fn);
    memcpy(r + 1, name, n);
}

EVL__COLD void evl__tr_task_create_slow(evl_loop *loop, uint64_t task, uint64_t parent,
                                        const char *name, uintptr_t fn)
{
    EVL_PROBE(task_create, loop->id, task, parent, name, fn);
    if (EVL_BATCHING())
        evl__rec_task_create(loop, task, parent, name, fn, 0);
}

EVL__COLD void evl__tr_task_run_slow(evl_loop *loop, uint64_t task)
{
    EVL_PROBE(task_run, loop->id, task);
    if (EVL_BATCHING())
        loop->pub.since = evl__trace_rec(loop, EVL_PROBE_ID_task_run, sizeof(struct evl_rec),
                                         task, 0, 0, 0)->ts;
}

EVL__COLD void evl__tr_task_suspend_slow(evl_loop *loop, uint64_t task, int reason,
                                         uint64_t obj, uint64_t timeout)
{
    EVL_PROBE(task_suspend, loop->id, task, reason, obj, timeout);
    EVL__REC(loop, task_suspend, task, (uint32_t)reason, obj, timeout);
}

/* One clock read for both records of a yield. */
EVL__COLD void evl__tr_task_yield_slow(evl_loop *loop, uint64_t task)
{
    EVL_PROBE(task_suspend, loop->id, task, EVL_SUSPEND_YIELD, 0, 0);
    EVL_PROBE(task_wake, loop->id, task, EVL_WAKER_YIELD, task);
    if (EVL_BATCHING()) {
        struct evl_rec *r = evl__trace_rec(loop, EVL_PROBE_ID_task_suspend, sizeof(*r), task,
                                           EVL_SUSPEND_YIELD, 0, 0);
        uint64_t ts = r->ts;
        evl__trace_rec_at(loop, EVL_PROBE_ID_task_wake, sizeof(*r), task, EVL_WAKER_YIELD,
                          task, 0, ts);
    }
}

EVL__COLD void evl__tr_task_wake_slow(evl_loop *loop, uint64_t task, int kind, uint64_t waker)
{
    EVL_PROBE(task_wake, loop->id, task, kind, waker);
    EVL__REC(loop, task_wake, task, (uint32_t)kind, waker, 0);
}

EVL__COLD void evl__tr_task_finish_slow(evl_loop *loop, uint64_t task, int state, intptr_t err)
{
    EVL_PROBE(task_finish, loop->id, task, state, err);
    EVL__REC(loop, task_finish, task, (uint32_t)state, (uint64_t)err, 0);
}

EVL__COLD void evl__tr_task_cancel_slow(evl_loop *loop, uint64_t task, uint64_t requester)
{
    EVL_PROBE(task_cancel, loop->id, task, requester);
    EVL__REC(loop, task_cancel, task, 0, requester, 0);
}

EVL__COLD void evl__tr_task_leak_slow(evl_loop *loop, uint64_t task, int kind)
{
    EVL_PROBE(task_leak, loop->id, task, kind);
    EVL__REC(loop, task_leak, task, (uint32_t)kind, 0, 0);
}

EVL__COLD int64_t evl__tr_poll_enter_slow(evl_loop *loop, int64_t timeout)
{
    EVL_PROBE(poll_enter, loop->id, timeout);
    if (!EVL_BATCHING())
        return timeout;
    uint64_t now = evl__trace_rec(loop, EVL_PROBE_ID_poll_enter, sizeof(struct evl_rec), 0, 0,
                                  (uint64_t)timeout, 0)->ts;
    /* The records go to the tracer once the oldest has waited
     * EVL_TRACE_FLUSH_NS; until then a poll sleeps no longer than that
     * (the record keeps the timeout the loop asked for). */
    uint64_t age = now - evl__trace_first(loop);
    if (age >= EVL_TRACE_FLUSH_NS) {
        evl__trace_flush(loop);
        return timeout;
    }
    int64_t left = (int64_t)(EVL_TRACE_FLUSH_NS - age);
    return timeout < 0 || timeout > left ? left : timeout;
}

EVL__COLD void evl__tr_poll_exit_slow(evl_loop *loop, int n)
{
    EVL_PROBE(poll_exit, loop->id, n);
    EVL__REC(loop, poll_exit, 0, (uint32_t)n, 0, 0);
}

EVL__COLD void evl__tr_callback_begin_slow(evl_loop *loop, uintptr_t fn)
{
    EVL_PROBE(callback_begin, loop->id, fn);
    if (EVL_BATCHING())
        loop->pub.since = evl__trace_rec(loop, EVL_PROBE_ID_callback_begin,
                                         sizeof(struct evl_rec), 0, 0, fn, 0)->ts;
}

EVL__COLD void evl__tr_callback_end_slow(evl_loop *loop, uintptr_t fn)
{
    EVL_PROBE(callback_end, loop->id, fn);
    EVL__REC(loop, callback_end, 0, 0, fn, 0);
}
