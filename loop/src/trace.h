/*
 * trace.h -- one inline function per lifecycle event: it fires the event's
 * own USDT probe (for bpftrace and friends) and, while a tracer has raised
 * the batch semaphore, appends a record to the loop's batch buffer
 * (evl-probes.h explains batching).  Included by evl-internal.h only.
 */
#ifndef EVL_TRACE_H
#define EVL_TRACE_H

#include <string.h>
#include <time.h>

#define EVL_BATCHING() EVL_PROBE_ENABLED(batch)

/* Hand the buffer to the tracer (no-op when empty or nobody listens). */
static inline void evl__trace_flush(evl_loop *loop)
{
    if (loop->trace_len) {
        EVL_PROBE(batch, loop->id, (uintptr_t)loop->trace_buf, loop->trace_len,
                  (uintptr_t)&loop->pub, loop->trace_nrec);
        loop->trace_len = 0;
        loop->trace_nrec = 0;
    }
}

/* Reserve size bytes (multiple of 8) for a record stamped ts, flushing if
 * full. */
static inline struct evl_rec *evl__trace_rec_at(evl_loop *loop, uint16_t kind, uint16_t size,
                                                uint64_t task, uint32_t a32, uint64_t a0,
                                                uint64_t a1, uint64_t ts)
{
    if (EVL__UNLIKELY(loop->trace_len + size > EVL_BATCH_BYTES))
        evl__trace_flush(loop);
    struct evl_rec *r = (struct evl_rec *)(void *)(loop->trace_buf + loop->trace_len);
    r->ts = ts;
    r->task = task;
    r->a0 = a0;
    r->a1 = a1;
    r->a32 = a32;
    r->kind = kind;
    r->size = size;
    loop->trace_len += size;
    loop->trace_nrec++;
    return r;
}

static inline uint64_t evl__trace_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The same, stamped now. */
static inline struct evl_rec *evl__trace_rec(evl_loop *loop, uint16_t kind, uint16_t size,
                                             uint64_t task, uint32_t a32, uint64_t a0, uint64_t a1)
{
    return evl__trace_rec_at(loop, kind, size, task, a32, a0, a1, evl__trace_clock());
}

#define EVL__REC(loop, name, task, a32, a0, a1)                                \
    do {                                                                      \
        if (EVL_BATCHING())                                                   \
            evl__trace_rec(loop, EVL_PROBE_ID_##name, sizeof(struct evl_rec), \
                           task, a32, a0, a1);                                \
    } while (0)

static inline void evl__rec_task_create(evl_loop *loop, uint64_t task, uint64_t parent,
                                        const char *name, uintptr_t fn, uint32_t flags)
{
    size_t n = strlen(name);
    uint16_t size = (uint16_t)(sizeof(struct evl_rec) + ((n + 7) & ~(size_t)7));
    struct evl_rec *r = evl__trace_rec(loop, EVL_PROBE_ID_task_create, size, task,
                                       (uint32_t)n | flags, parent, fn);
    memcpy(r + 1, name, n);
}

static inline void evl__tr_task_create(evl_loop *loop, uint64_t task, uint64_t parent,
                                       const char *name, uintptr_t fn)
{
    EVL_PROBE(task_create, loop->id, task, parent, name, fn);
    if (EVL_BATCHING())
        evl__rec_task_create(loop, task, parent, name, fn, 0);
}

/* Once per iteration: a tracer that just attached first learns the tasks
 * that already exist. */
void evl__trace_snapshot(evl_loop *loop);
static inline void evl__trace_check_attach(evl_loop *loop)
{
    bool on = EVL_BATCHING();
    if (EVL__UNLIKELY(on != loop->trace_on)) {
        loop->trace_on = on;
        if (on)
            evl__trace_snapshot(loop);
    }
}

/* A task step or callback begins: publish it (evl_loop_pub). */
static inline void evl__pub_begin(evl_loop *loop, uint64_t task, uint32_t phase,
                                  const struct evl_rec *r)
{
    loop->pub.task = task;
    loop->pub.phase = phase;
    loop->pub.steps++;
    if (r)
        loop->pub.since = r->ts;
}

static inline void evl__tr_task_run(evl_loop *loop, uint64_t task)
{
    EVL_PROBE(task_run, loop->id, task);
    struct evl_rec *r = NULL;
    if (EVL_BATCHING())
        r = evl__trace_rec(loop, EVL_PROBE_ID_task_run, sizeof(*r), task, 0, 0, 0);
    evl__pub_begin(loop, task, EVL_PHASE_TASK, r);
}

static inline void evl__tr_task_suspend(evl_loop *loop, uint64_t task, int reason,
                                        uint64_t obj, uint64_t timeout)
{
    EVL_PROBE(task_suspend, loop->id, task, reason, obj, timeout);
    EVL__REC(loop, task_suspend, task, (uint32_t)reason, obj, timeout);
}

/* sleep(0): suspended and woken at once, one clock read for both. */
static inline void evl__tr_task_yield(evl_loop *loop, uint64_t task)
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

static inline void evl__tr_task_wake(evl_loop *loop, uint64_t task, int kind, uint64_t waker)
{
    EVL_PROBE(task_wake, loop->id, task, kind, waker);
    EVL__REC(loop, task_wake, task, (uint32_t)kind, waker, 0);
}

static inline void evl__tr_task_finish(evl_loop *loop, uint64_t task, int state, intptr_t err)
{
    EVL_PROBE(task_finish, loop->id, task, state, err);
    EVL__REC(loop, task_finish, task, (uint32_t)state, (uint64_t)err, 0);
}

static inline void evl__tr_task_cancel(evl_loop *loop, uint64_t task, uint64_t requester)
{
    EVL_PROBE(task_cancel, loop->id, task, requester);
    EVL__REC(loop, task_cancel, task, 0, requester, 0);
}

static inline void evl__tr_task_leak(evl_loop *loop, uint64_t task, int kind)
{
    EVL_PROBE(task_leak, loop->id, task, kind);
    EVL__REC(loop, task_leak, task, (uint32_t)kind, 0, 0);
}

static inline void evl__tr_poll_enter(evl_loop *loop, int64_t timeout)
{
    EVL_PROBE(poll_enter, loop->id, timeout);
    EVL__REC(loop, poll_enter, 0, 0, (uint64_t)timeout, 0);
    /* Hand the records over before the thread may sleep; a busy loop
     * (timeout 0) flushes when the buffer is full: a uprobe hit costs
     * microseconds, the fewer the better. */
    if (timeout != 0)
        evl__trace_flush(loop);
}

static inline void evl__tr_poll_exit(evl_loop *loop, int n)
{
    EVL_PROBE(poll_exit, loop->id, n);
    EVL__REC(loop, poll_exit, 0, (uint32_t)n, 0, 0);
}

static inline void evl__tr_callback_begin(evl_loop *loop, uintptr_t fn)
{
    EVL_PROBE(callback_begin, loop->id, fn);
    struct evl_rec *r = NULL;
    if (EVL_BATCHING())
        r = evl__trace_rec(loop, EVL_PROBE_ID_callback_begin, sizeof(*r), 0, 0, fn, 0);
    evl__pub_begin(loop, 0, EVL_PHASE_CALLBACK, r);
}

static inline void evl__tr_callback_end(evl_loop *loop, uintptr_t fn)
{
    EVL_PROBE(callback_end, loop->id, fn);
    EVL__REC(loop, callback_end, 0, 0, fn, 0);
    loop->pub.phase = EVL_PHASE_OTHER;
}

#endif /* EVL_TRACE_H */
