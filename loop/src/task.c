/*
 * task.c -- tasks: stackful coroutines driven by the ready queue.
 *
 * A task step is a callback (t->step, or t->wait when woken by a future)
 * that switches from the loop's stack onto the task's and back.  The step
 * logic is asyncio's Task.__step / __wakeup / cancel, with "throwing an
 * exception into the coroutine" replaced by the await returning an error:
 *
 *   - a pending cancellation (must_cancel) makes the next step's await
 *     return EVL_ECANCELED; a task cancelled before its first step ends
 *     CANCELLED without running its body;
 *   - cancelling a suspended task cancels the future it awaits, so its
 *     wakeup (one iteration later) carries EVL_ECANCELED;
 *   - a task returning while a cancellation is pending ends CANCELLED.
 */
#define _GNU_SOURCE
#include "evl-internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef EVL_ASAN_FIBERS
#include <sanitizer/common_interface_defs.h>
#endif

static atomic_uint_fast64_t evl__next_task_id;
#define EVL__TASK_ID_BLOCK 1024

/* ------------------------------------------------------------ switching */

static inline void evl__switch_to_task(evl_loop *loop, evl__task *t)
{
#ifdef EVL_ASAN_FIBERS
    __sanitizer_start_switch_fiber(&loop->asan_fake, t->stack->lo,
                                   (size_t)((char *)t->stack->hi - (char *)t->stack->lo));
#endif
    evl__ctx_switch(&loop->loop_sp, t->sp);
#ifdef EVL_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(loop->asan_fake, NULL, NULL);
#endif
}

static inline void evl__switch_to_loop(evl_loop *loop, evl__task *t, bool final)
{
#ifdef EVL_ASAN_FIBERS
    __sanitizer_start_switch_fiber(final ? NULL : &t->asan_fake, loop->asan_bottom, loop->asan_size);
#else
    (void)final;
#endif
    evl__ctx_switch(&t->sp, loop->loop_sp);
#ifdef EVL_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(t->asan_fake, &loop->asan_bottom, &loop->asan_size);
#endif
}

static void evl__task_main(void *p)
{
    evl__task *t = p;
    evl_loop *loop = t->fut.loop;
#ifdef EVL_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(NULL, &loop->asan_bottom, &loop->asan_size);
#endif
    t->ret = t->fn(t->arg);
    t->returned = 1;
    evl__switch_to_loop(loop, t, true);
    abort();                          /* a finished task is never resumed */
}

/* --------------------------------------------------------------- lifecycle */

static void evl__task_step_run(evl__handle *h);

evl_task *evl_spawn(evl_loop *loop, const char *name, evl_task_fn fn, void *arg)
{
    if (!loop)
        loop = evl__tls_loop;
    if (!loop || !fn) {
        errno = EINVAL;
        return NULL;
    }
    if (loop->closing) {
        errno = EINVAL;
        return NULL;
    }
    evl__task *t = loop->task_free;
    if (t)
        loop->task_free = t->next;
    else if (!(t = malloc(sizeof(*t)))) {
        errno = ENOMEM;
        return NULL;
    }
    loop->task_structs++;
    evl__future_init(&t->fut, loop, EVL__FUT_TASK, EVL_WAKER_TASK);
    t->fut.refs = 2;                  /* the caller's and the loop's */
    t->step.next = t->step.prev = NULL;
    t->step.run = evl__task_step_run;
    t->wait.h.next = t->wait.h.prev = NULL;
    t->wait.fut = NULL;
    t->wait.next = NULL;
    t->fut_waiter = NULL;
    t->fn = fn;
    t->arg = arg;
    t->sp = NULL;
    t->stack = NULL;
    t->asan_fake = NULL;
    /* Process-unique ids, handed to each loop in blocks: no atomic
     * operation per spawn. */
    if (EVL__UNLIKELY(loop->next_task_id == loop->task_id_end)) {
        loop->next_task_id = atomic_fetch_add_explicit(&evl__next_task_id, EVL__TASK_ID_BLOCK,
                                                       memory_order_relaxed) + 1;
        loop->task_id_end = loop->next_task_id + EVL__TASK_ID_BLOCK;
    }
    t->id = loop->next_task_id++;
    t->parent_id = loop->current ? loop->current->id : 0;
    t->resume = 0;
    t->ret = 0;
    t->ncancels = 0;
    t->must_cancel = 0;
    t->returned = 0;
    t->leak_reported = 0;
    size_t len = name ? strnlen(name, sizeof(t->name) - 1) : 4;
    memcpy(t->name, name ? name : "task", len);
    t->name[len] = 0;
    /* pending-task list */
    t->prev = NULL;
    t->next = loop->tasks;
    if (loop->tasks)
        loop->tasks->prev = t;
    loop->tasks = t;
    loop->ntasks++;
    evl__tr_task_create(loop, t->id, t->parent_id, t->name, (uintptr_t)fn);
    t->tstate = EVL_TASK_READY;
    evl__queue_push(&loop->ready, &t->step);
    return &t->fut;
}

static void evl__task_unlink(evl_loop *loop, evl__task *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        loop->tasks = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->prev = t->next = NULL;
    loop->ntasks--;
}

/* The task's body returned r (or never ran, with r the thrown error). */
static void evl__task_finalize(evl__task *t, intptr_t r)
{
    evl_loop *loop = t->fut.loop;
    if (t->stack) {
        evl__stack_put(loop, t->stack);
        t->stack = NULL;
    }
    int final;
    /* asyncio: a pending cancellation wins over a normal return, never
     * over an error (an exception raised while cancelling propagates). */
    if (r == EVL_ECANCELED || (t->must_cancel && r >= 0)) {
        t->must_cancel = 0;
        final = EVL_TASK_CANCELLED;
        r = EVL_ECANCELED;
    } else {
        final = r < 0 ? EVL_TASK_FAILED : EVL_TASK_FINISHED;
    }
    evl__task_unlink(loop, t);
    t->tstate = (uint8_t)final;
    evl__tr_task_finish(loop, t->id, final, r < 0 ? r : 0);
    evl__future_complete(&t->fut,
                         final == EVL_TASK_CANCELLED ? EVL_FUTURE_CANCELLED : EVL_FUTURE_DONE, r);
    evl_future_unref(&t->fut);        /* the loop's reference */
}

/* asyncio Task.__step: exc is the error thrown into the task (0: none). */
static void evl__task_step(evl__task *t, intptr_t exc)
{
    evl_loop *loop = t->fut.loop;
    if (t->must_cancel) {
        exc = EVL_ECANCELED;
        t->must_cancel = 0;
    }
    t->fut_waiter = NULL;
    if (EVL__UNLIKELY(!t->stack)) {
        if (exc) {                    /* thrown into an unstarted coroutine */
            evl__task_finalize(t, exc);
            return;
        }
        t->stack = evl__stack_get(loop);
        if (!t->stack) {
            evl__task_finalize(t, EVL_ENOMEM);
            return;
        }
        t->sp = evl__ctx_make(t->stack->top, evl__task_main, t);
    } else if (exc) {
        t->resume = exc;
    }
    t->tstate = EVL_TASK_RUNNING;
    loop->current = t;
    evl__tls_running_task = t;
    evl__tr_task_run(loop, t->id);
    uint64_t t0 = evl__debug(loop) ? evl__clock_now() : 0;
    evl__switch_to_task(loop, t);
    loop->current = NULL;
    evl__tls_running_task = NULL;
    loop->pub.task = 0;
    loop->pub.phase = EVL_PHASE_OTHER;
    if (EVL__UNLIKELY(t0)) {
        uint64_t dt = evl__clock_now() - t0;
        if (dt >= loop->slow_step_ns)
            evl__warn(loop, "task '%s' (id %llu) ran %.3f ms without yielding",
                      t->name, (unsigned long long)t->id, dt / 1e6);
    }
    if (t->returned)
        evl__task_finalize(t, t->ret);
}

static void evl__task_step_run(evl__handle *h)
{
    evl__task_step(evl__container_of(h, evl__task, step), 0);
}

/* asyncio Task.__wakeup: the awaited future is done. */
void evl__task_wakeup_run(evl__handle *h)
{
    evl__task *t = evl__container_of(h, evl__task, wait.h);
    evl_future *f = t->wait.fut;
    t->wait.fut = NULL;
    intptr_t out = evl__future_outcome(f);
    f->retrieved = 1;
    evl__future_unhold(f);
    t->resume = out;
    evl__task_step(t, out < 0 ? out : 0);
}

/* The wake event's arguments are worked out only while tracing: left in
 * the hot path, the compiler loads them before the test. */
EVL__COLD void evl__task_wake_traced(evl_loop *loop, evl__task *t, evl_future *f)
{
    evl__tr_task_wake_slow(loop, t->id,
                           f->state == EVL_FUTURE_CANCELLED && f->kind != EVL__FUT_TASK
                               ? EVL_WAKER_CANCEL : f->waker_kind,
                           loop->current ? loop->current->id : 0);
}

static intptr_t evl__task_switch_out(evl__task *t)
{
    evl__switch_to_loop(t->fut.loop, t, false);
    return t->resume;
}

intptr_t evl__task_wait(evl__task *t, evl_future *f, int reason, uint64_t obj, uint64_t timeout)
{
    /* The event first: reason, obj and timeout are then dead before the
     * call below instead of held in saved registers across it. */
    evl__tr_task_suspend(t->fut.loop, t->id, reason, obj, timeout);
    t->wait_reason = (uint32_t)reason;
    t->wait_obj = obj;
    t->wait_timeout = timeout;
    t->wait_since = t->fut.loop->now;
    evl__future_add_waiter(f, &t->wait, evl__task_wakeup_run);
    t->fut_waiter = f;
    t->tstate = EVL_TASK_SUSPENDED;
    if (t->must_cancel && evl_cancel(f))
        t->must_cancel = 0;
    return evl__task_switch_out(t);
}

/* asyncio Task.cancel. */
int evl__task_cancel(evl__task *t)
{
    if (t->fut.state != EVL_FUTURE_PENDING)
        return 0;
    evl_loop *loop = t->fut.loop;
    t->ncancels++;
    evl__tr_task_cancel(loop, t->id, loop->current ? loop->current->id : 0);
    if (t->fut_waiter && evl_cancel(t->fut_waiter))
        return 1;
    t->must_cancel = 1;
    return 1;
}

void evl__task_report_leak(evl__task *t, int kind)
{
    static const char *const what[] = {
        [EVL_LEAK_PENDING_AT_CLOSE] = "still pending when its loop closed",
        [EVL_LEAK_ABANDONED] = "awaits a future that nothing can complete any more",
        [EVL_LEAK_UNRETRIEVED] = "failed and nobody retrieved its error",
    };
    if (t->leak_reported)
        return;
    t->leak_reported = 1;
    evl_loop *loop = t->fut.loop;
    evl__tr_task_leak(loop, t->id, kind);
    if (evl__debug(loop)) {
        if (kind == EVL_LEAK_UNRETRIEVED)
            evl__warn(loop, "task '%s' (id %llu) leaked: %s (%s)", t->name,
                      (unsigned long long)t->id, what[kind], evl_err_name((int)t->fut.result));
        else
            evl__warn(loop, "task '%s' (id %llu) leaked: %s", t->name,
                      (unsigned long long)t->id, what[kind]);
    }
}

void evl__task_free(evl__task *t)
{
    evl_loop *loop = t->fut.loop;
    if (t->fut.state == EVL_FUTURE_DONE && t->fut.result < 0 && !t->fut.retrieved)
        evl__task_report_leak(t, EVL_LEAK_UNRETRIEVED);
    loop->task_structs--;
    if (!loop->closing) {
        t->next = loop->task_free;
        loop->task_free = t;
        return;
    }
    free(t);
    if (loop->closing == 2 && loop->task_structs == 0)
        free(loop);                   /* the last task of a freed loop */
}

/* evl_loop_free: give every pending task its verdict and drop it. */
void evl__task_destroy_pending(evl_loop *loop)
{
    while (loop->tasks) {
        evl__task *t = loop->tasks;
        evl__task_report_leak(t, EVL_LEAK_PENDING_AT_CLOSE);
        evl__task_unlink(loop, t);
        if (evl__handle_queued(&t->step))
            evl__queue_remove(&t->step);
        if (t->wait.fut) {
            evl_future *f = t->wait.fut;
            if (evl__handle_queued(&t->wait.h))
                evl__queue_remove(&t->wait.h);
            else
                evl__future_remove_waiter(f, &t->wait);
            t->wait.fut = NULL;
            /* (unhold may free f: look at it first) */
            evl__owned_fut *owned = f->kind == EVL__FUT_OWNED ? (evl__owned_fut *)(void *)f : NULL;
            evl__future_unhold(f);
            if (owned)
                owned->abandon(owned);
        }
        if (t->stack) {
            evl__stack_put(loop, t->stack);
            t->stack = NULL;
        }
        /* It ends cancelled; its done-callbacks are queued and then
         * released unrun by evl_loop_free. */
        t->tstate = EVL_TASK_CANCELLED;
        evl__future_complete(&t->fut, EVL_FUTURE_CANCELLED, EVL_ECANCELED);
        evl_future_unref(&t->fut);
    }
}

void evl__trace_snapshot(evl_loop *loop, bool fresh)
{
    /* A fresh attach: records made since the semaphore rose mid-iteration
     * are dropped, the trace starts here, with every pending task.  On a
     * request, what is buffered belongs to tracers already attached: it
     * goes out first. */
    if (fresh)
        evl__trace_begin(loop);
    else
        evl__trace_flush(loop);
    loop->pub.snapshot_done = *(volatile uint32_t *)&loop->pub.snapshot_req;
    for (evl__task *t = loop->tasks; t; t = t->next)
        evl__rec_task_create(loop, t->id, t->parent_id, t->name, (uintptr_t)t->fn,
                             EVL_REC_PREEXISTING);
    /* Out at once (even empty: the batch also announces the loop thread),
     * before any callback of this iteration can block. */
    evl__trace_hand_over(loop);
}

/* Some probe is up, or batching was on: has batching started or stopped,
 * or does a tracer ask for the snapshot again?  It asks by raising the
 * batch semaphore while batching is on (above the value this loop saw
 * last: the probe evl_gate:batch, evl-probes.h), or through
 * pub.snapshot_req.  A fall only updates the value seen. */
EVL__COLD void evl__trace_attach_slow(evl_loop *loop)
{
    uint16_t sem = EVL_PROBE_SEM(batch);
    bool on = sem != 0, rose = sem > loop->trace_sem;
    loop->trace_sem = sem;
    if (on != loop->trace_on) {
        loop->trace_on = on;
        if (on)
            evl__trace_snapshot(loop, true);
        else
            evl__trace_end(loop, false);
    } else if (on && (rose || *(volatile uint32_t *)&loop->pub.snapshot_req !=
                                 loop->pub.snapshot_done)) {
        evl__trace_snapshot(loop, false);
    }
}

/* ----------------------------------------------------------- public calls */

evl_task *evl_current_task(void)
{
    evl__task *t = evl__current_task();
    return t ? &t->fut : NULL;
}

const char *evl_task_name(const evl_task *task)
{
    return task->kind == EVL__FUT_TASK ? ((const evl__task *)(const void *)task)->name : "";
}

uint64_t evl_task_id(const evl_task *task)
{
    return task->kind == EVL__FUT_TASK ? ((const evl__task *)(const void *)task)->id : 0;
}

int evl_task_state(const evl_task *task)
{
    return task->kind == EVL__FUT_TASK ? ((const evl__task *)(const void *)task)->tstate : EVL_EINVAL;
}

int evl_is_task(const evl_future *fut)
{
    return fut && fut->kind == EVL__FUT_TASK;
}

intptr_t evl_await(evl_future *f)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    if (!f || f == &t->fut)
        return EVL_EINVAL;
    if (f->loop != t->fut.loop)
        return EVL_EWRONGLOOP;
    if (f->state != EVL_FUTURE_PENDING) {
        f->retrieved = 1;
        return evl__future_outcome(f);
    }
    static const uint8_t reason[] = {
        [EVL__FUT_PLAIN] = EVL_SUSPEND_FUTURE,
        [EVL__FUT_TASK] = EVL_SUSPEND_TASK,
        [EVL__FUT_GATHER] = EVL_SUSPEND_GATHER,
        [EVL__FUT_EXEC] = EVL_SUSPEND_EXECUTOR,
        [EVL__FUT_STACK] = EVL_SUSPEND_FUTURE,
        [EVL__FUT_SHIELD] = EVL_SUSPEND_FUTURE,   /* (never: see below) */
        [EVL__FUT_OWNED] = EVL_SUSPEND_FUTURE,
    };
    /* A shield keeps the reason and object of the future it shields. */
    evl_future *what = evl__shield_inner(f);
    uint64_t obj = what->kind == EVL__FUT_TASK ? evl__task_of(what)->id : (uintptr_t)what;
    return evl__task_wait(t, f, reason[what->kind], obj, 0);
}

/* asyncio.all_tasks: the pending-task list is newest first, so the i-th
 * from its head is number count - 1 - i in creation order. */
size_t evl_all_tasks(evl_loop *loop, evl_task **tasks, size_t n)
{
    if (!loop)
        loop = evl_loop_current();
    if (!loop)
        return 0;
    size_t count = (size_t)loop->ntasks, i = count;
    for (evl__task *t = loop->tasks; t; t = t->next)
        if (--i < n)
            tasks[i] = evl_future_ref(&t->fut);
    return count;
}

/* asyncio Task.cancelling / uncancel: NULL is the calling task. */
static evl__task *evl__task_arg(const evl_task *task, int *err)
{
    if (!task) {
        evl__task *t = evl__current_task();
        *err = t ? 0 : EVL_ENOTTASK;
        return t;
    }
    *err = task->kind == EVL__FUT_TASK ? 0 : EVL_EINVAL;
    return *err ? NULL : (evl__task *)(void *)task;
}

int evl_task_cancelling(const evl_task *task)
{
    int err;
    evl__task *t = evl__task_arg(task, &err);
    if (!t)
        return err;
    return t->ncancels > INT32_MAX ? INT32_MAX : (int)t->ncancels;
}

int evl_task_uncancel(evl_task *task)
{
    int err;
    evl__task *t = evl__task_arg(task, &err);
    if (!t)
        return err;
    /* 3.11: only the count; a cancellation already pending (must_cancel)
     * is still delivered. */
    if (t->ncancels > 0)
        t->ncancels--;
    return t->ncancels > INT32_MAX ? INT32_MAX : (int)t->ncancels;
}

static void evl__sleep_timer_cb(evl_loop *loop, void *arg)
{
    evl_future *f = arg;              /* futures._set_result_unless_cancelled */
    if (f->state == EVL_FUTURE_PENDING)
        evl__future_complete(f, EVL_FUTURE_DONE, 0);
}

int evl_sleep(uint64_t ns)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    evl_loop *loop = t->fut.loop;
    if (ns == 0) {
        /* asyncio's bare yield: call_soon(step); a pending cancellation
         * is delivered by that step. */
        evl__tr_task_yield(loop, t->id);
        t->resume = 0;
        t->tstate = EVL_TASK_READY;
        evl__queue_push(&loop->ready, &t->step);
        return (int)evl__task_switch_out(t);
    }
    evl_future f;
    evl__future_init(&f, loop, EVL__FUT_STACK, EVL_WAKER_TIMER);
    evl_timer tm;
    evl_timer_init(&tm);
    int rc = evl_timer_start(loop, &tm, ns, evl__sleep_timer_cb, &f);
    if (rc < 0)
        return rc;
    intptr_t r = evl__task_wait(t, &f, EVL_SUSPEND_SLEEP, tm.evl__deadline, ns);
    evl_timer_stop(&tm);
    return r < 0 ? (int)r : 0;
}
