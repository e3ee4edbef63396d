/*
 * loop.c -- the loop object and its run loop.
 *
 * One iteration (asyncio's BaseEventLoop._run_once, loop/ORDERING.md rule 1):
 *
 *   poll      wait for I/O: 0 if callbacks are ready, else until the first
 *             timer, else forever; queue the handles of ready fds
 *   time      read the clock once and cache it (or advance the virtual clock)
 *   timers    move every due timer's handle to the ready queue, heap order
 *   run       run exactly the callbacks queued at this point; what they
 *             queue runs in the next iteration
 */
#define _GNU_SOURCE
#include "evl-internal.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

__thread evl_loop *evl__tls_loop;
static atomic_uint_fast64_t evl__next_loop_id;

uint64_t evl__clock_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void evl__warn(evl_loop *loop, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "evl: loop %llu: %s\n", (unsigned long long)loop->id, buf);
}

void evl_loop_options_init(evl_loop_options *o)
{
    memset(o, 0, sizeof(*o));
    o->stack_size = 128 * 1024;
    o->slow_step_ns = EVL_MS(100);
    o->executor_threads = 4;
}

evl_loop *evl_loop_new(const evl_loop_options *opts)
{
    evl_loop_options o;
    evl_loop_options_init(&o);
    if (opts) {
        o.flags = opts->flags;
        if (opts->stack_size)
            o.stack_size = opts->stack_size;
        if (opts->slow_step_ns)
            o.slow_step_ns = opts->slow_step_ns;
        if (opts->executor_threads)
            o.executor_threads = opts->executor_threads;
    }
    const char *dbg = getenv("EVL_DEBUG");
    if (dbg && *dbg && strcmp(dbg, "0") != 0)
        o.flags |= EVL_LOOP_DEBUG;
    if (o.stack_size < 16 * 1024)
        o.stack_size = 16 * 1024;

    evl_loop *loop = calloc(1, sizeof(*loop));
    if (!loop)
        return NULL;
    evl__queue_init(&loop->ready);
    evl__queue_init(&loop->ts_queue);
    pthread_mutex_init(&loop->ts_lock, NULL);
    loop->flags = o.flags;
    loop->stack_size = o.stack_size;
    loop->slow_step_ns = o.slow_step_ns;
    loop->executor_threads = o.executor_threads;
    loop->id = atomic_fetch_add(&evl__next_loop_id, 1) + 1;
    loop->now = evl__clock_now();
    loop->epfd = -1;
    loop->wakefd = -1;
    loop->trace_buf = loop->trace_spill;
    loop->trace_on = EVL_BATCHING();  /* a tracer already attached sees it all */
    loop->trace_sem = EVL_PROBE_SEM(batch);
    if (loop->trace_on)
        evl__trace_begin(loop);
    evl__trace_refresh(loop);
    if (evl__poll_init(loop) < 0)
        goto fail;
    loop->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (loop->wakefd < 0 || evl__poll_arm(loop, loop->wakefd, EVL_READABLE) < 0)
        goto fail;
    loop->fds[loop->wakefd].internal = 1;
    evl__stack_install_overflow_handler();
    evl__debug_add(loop);
    return loop;
fail:;
    int e = errno;
    if (loop->wakefd >= 0)
        close(loop->wakefd);
    evl__poll_release(loop);
    pthread_mutex_destroy(&loop->ts_lock);
    free(loop);
    errno = e;
    return NULL;
}

/* ------------------------------------------------------------- call_soon */

static void evl__cbhandle_run(evl__handle *h)
{
    evl__cbhandle *c = evl__container_of(h, evl__cbhandle, h);
    evl_loop *loop = c->loop;
    evl_callback cb = c->cb;
    void *arg = c->arg;
    evl__cbhandle_put(loop, c);       /* recycle first: cb may call_soon */
    evl__tr_callback_begin(loop, (uintptr_t)cb);
    cb(loop, arg);
    evl__tr_callback_end(loop, (uintptr_t)cb);
}

void evl__cbhandle_put(evl_loop *loop, evl__cbhandle *c)
{
    c->h.next = (evl__handle *)loop->cb_free;
    loop->cb_free = c;
}

evl__cbhandle *evl__cbhandle_get(evl_loop *loop)
{
    evl__cbhandle *c = loop->cb_free;
    if (c)
        loop->cb_free = (evl__cbhandle *)(void *)c->h.next;
    else if (!(c = malloc(sizeof(*c))))
        return NULL;
    c->h.next = c->h.prev = NULL;
    c->h.run = evl__cbhandle_run;
    c->loop = loop;
    return c;
}

int evl_call_soon(evl_loop *loop, evl_callback cb, void *arg)
{
    if (!loop || !cb)
        return EVL_EINVAL;
    evl__cbhandle *c = evl__cbhandle_get(loop);
    if (!c)
        return EVL_ENOMEM;
    c->cb = cb;
    c->arg = arg;
    evl__queue_push(&loop->ready, &c->h);
    return 0;
}

static void evl__wakeup(evl_loop *loop)
{
    uint64_t one = 1;
    ssize_t r = write(loop->wakefd, &one, sizeof(one));
    (void)r;                          /* EAGAIN: counter saturated, still readable */
}

/* Queue a handle from any thread (executor completions, threadsafe calls). */
void evl__post(evl_loop *loop, evl__handle *h)
{
    pthread_mutex_lock(&loop->ts_lock);
    evl__queue_push(&loop->ts_queue, h);
    atomic_store_explicit(&loop->ts_pending, 1, memory_order_release);
    pthread_mutex_unlock(&loop->ts_lock);
    evl__wakeup(loop);
}

int evl_call_soon_threadsafe(evl_loop *loop, evl_callback cb, void *arg)
{
    if (!loop || !cb)
        return EVL_EINVAL;
    evl__cbhandle *c = malloc(sizeof(*c));
    if (!c)
        return EVL_ENOMEM;
    c->h.next = c->h.prev = NULL;
    c->h.run = evl__cbhandle_run;
    c->loop = loop;
    c->cb = cb;
    c->arg = arg;
    evl__post(loop, &c->h);
    return 0;
}

/* Move what other threads posted to the back of the ready queue
 * (evl__drain_posted saw ts_pending set). */
void evl__drain_posted_locked(evl_loop *loop)
{
    pthread_mutex_lock(&loop->ts_lock);
    atomic_store_explicit(&loop->ts_pending, 0, memory_order_relaxed);
    evl__handle *h;
    while ((h = evl__queue_pop(&loop->ts_queue)))
        evl__queue_push(&loop->ready, h);
    pthread_mutex_unlock(&loop->ts_lock);
}

void evl_loop_hold(evl_loop *loop) { atomic_fetch_add(&loop->holds, 1); }

void evl_loop_release(evl_loop *loop)
{
    atomic_fetch_sub(&loop->holds, 1);
    evl__wakeup(loop);
}

/* ------------------------------------------------------------------ run */

/* The cached time, read once per iteration at its first use (evl__loop_now):
 * a loop object is never const itself. */
uint64_t evl_now(const evl_loop *loop) { return evl__loop_now((evl_loop *)loop); }
evl_loop *evl_loop_current(void) { return evl__tls_loop; }
uint64_t evl_loop_id(const evl_loop *loop) { return loop->id; }
void evl_stop(evl_loop *loop) { loop->stopping = 1; }

static bool evl__loop_alive(evl_loop *loop)
{
    return !evl__queue_empty(&loop->ready) || loop->timers.n || loop->io_waits ||
           loop->exec_inflight || atomic_load(&loop->holds) ||
           atomic_load_explicit(&loop->ts_pending, memory_order_acquire);
}

/* The poll's timeout: 0 if callbacks are ready, else until the first
 * timer (rounded up to whole milliseconds), else forever (-1). */
static inline __attribute__((always_inline)) int64_t
evl__poll_timeout(evl_loop *loop, bool virt, bool *have_timer, uint64_t *deadline)
{
    int64_t timeout = -1;
    *have_timer = evl__timers_next(loop, deadline);
    if (!evl__queue_empty(&loop->ready))
        timeout = 0;
    else if (*have_timer) {
        uint64_t now = evl__loop_now(loop);
        timeout = virt || *deadline <= now ? 0
                  : *deadline - now > (uint64_t)EVL_SEC(86400) ? (int64_t)EVL_SEC(86400)
                  : (int64_t)((*deadline - now + EVL_MS(1) - 1) / EVL_MS(1) * EVL_MS(1));
    }
    /* Virtual clock: time does not jump while executor jobs run (their
     * completion is real time); wait for them instead. */
    if (virt && timeout == 0 && evl__queue_empty(&loop->ready) && loop->exec_inflight)
        timeout = -1;
    return timeout;
}

/* loop/ORDERING.md rule 16: may this iteration's zero-timeout poll be
 * skipped although fds are awaited?  Only if everything run since the last
 * poll was fd-wait completions (no syscall, no user code: nothing on this
 * thread can have made an fd ready since), that poll saw every ready fd,
 * the previous poll was not skipped, callbacks are ready (the case:
 * a woken task about to run), and that batch ran at most
 * EVL__POLL_SKIP_MAX_WAKES completions (io_quiet counts them): the time
 * since that poll is bounded by that much work, no clock needed. */
static bool evl__poll_skippable(const evl_loop *loop)
{
    return loop->io_quiet && loop->poll_whole && !loop->spec && !evl__queue_empty(&loop->ready);
}

static void evl__iteration(evl_loop *loop)
{
    uint64_t deadline = 0;
    bool have_timer;
    bool virt = loop->flags & EVL_LOOP_VIRTUAL_CLOCK;

    int64_t timeout = evl__poll_timeout(loop, virt, &have_timer, &deadline);

    int n = 0;
    if (timeout == 0 && !loop->spec && (loop->io_waits == 0 || evl__poll_skippable(loop))) {
        /* Callbacks are ready and the poll could only report the wakeup
         * eventfd (no fd is awaited) or readiness that no handle run since
         * the last poll can have caused (rule 16): a poll that found
         * nothing, whose posts are taken directly.  Skipping it is not
         * observable; it is a syscall. */
        evl__drain_posted(loop);
        loop->io_quiet = 0;           /* never twice in a row */
        if (loop->io_waits)
            loop->polls_skipped++;
    } else {
        for (;;) {
            loop->pub.phase = EVL_PHASE_POLL;
            n = evl__poll(loop, evl__tr_poll_enter(loop, timeout));
            loop->pub.phase = EVL_PHASE_OTHER;
            if (n != EVL__POLL_SPEC_MISSED)
                break;
            /* A speculative read the poll did not confirm (rule 16): its
             * task goes on at once, as if the read had not waited; what
             * the poll saw was set aside and the next poll sees it again,
             * with whatever the task did since. */
            evl__tr_poll_exit(loop, 0);
            evl__poll_spec_resume(loop);
            if (loop->stopping || !evl__loop_alive(loop))
                return;               /* as after the batch it belongs to */
            /* The continuation saw the iteration's cached time; the next
             * poll's timeout counts from now (the first poll may have
             * slept). */
            loop->now_stale = !virt;
            timeout = evl__poll_timeout(loop, virt, &have_timer, &deadline);
        }
        evl__tr_poll_exit(loop, n);
        loop->io_quiet = 1;
    }

    /* After the poll, where a tracer may have attached, and before any
     * callback of the iteration runs (trace.h). */
    evl__trace_check_attach(loop);

    if (!virt)
        loop->now_stale = 1;          /* read at its first use: evl__loop_now */
    else if (n == 0 && have_timer && deadline > loop->now && evl__queue_empty(&loop->ready) &&
             !loop->exec_inflight && !atomic_load_explicit(&loop->ts_pending, memory_order_acquire))
        loop->now = deadline;         /* nothing else to do: jump */

    evl__timers_run_due(loop);

    /* Run exactly what is queued now: a marker ends this batch.  The batch
     * stays quiet (rule 16) while it runs only fd-wait completions. */
    evl__handle marker = { NULL, NULL, NULL };
    evl__queue_push(&loop->ready, &marker);
    loop->batch_end = &marker;
    bool quiet = loop->io_quiet;
    unsigned wakes = 0;
    evl__handle *h;
    while ((h = evl__queue_pop(&loop->ready)) != &marker) {
        quiet = quiet && h->run == evl__iowait_run && ++wakes <= EVL__POLL_SKIP_MAX_WAKES;
        h->run(h);
    }
    loop->batch_end = NULL;
    loop->io_quiet = quiet;
}

/* The overflow report runs on an alternate signal stack. */
static void evl__altstack_enter(stack_t *old, void **mem)
{
    *mem = NULL;
    if (sigaltstack(NULL, old) == 0 && !(old->ss_flags & SS_DISABLE))
        return;                       /* the thread has one already */
    size_t sz = 64 * 1024;
    stack_t ss = { .ss_sp = malloc(sz), .ss_size = sz, .ss_flags = 0 };
    if (ss.ss_sp && sigaltstack(&ss, NULL) == 0)
        *mem = ss.ss_sp;
    else
        free(ss.ss_sp);
}

static void evl__altstack_leave(stack_t *old, void *mem)
{
    if (!mem)
        return;
    stack_t off = { .ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE };
    sigaltstack(&off, NULL);
    free(mem);
}

int evl_run(evl_loop *loop)
{
    if (loop->running || (evl__tls_loop && evl__tls_loop != loop))
        return EVL_EBUSY;
    if (loop->closing)
        return EVL_ECLOSING;
    loop->running = 1;
    loop->stopping = 0;
    evl__tls_loop = loop;
    loop->tid = (uint32_t)gettid();
    stack_t old_ss;
    void *ss_mem;
    evl__altstack_enter(&old_ss, &ss_mem);
    if (!(loop->flags & EVL_LOOP_VIRTUAL_CLOCK))
        loop->now = evl__clock_now();
    loop->io_quiet = 0;               /* the program ran since the last poll */
    EVL_PROBE(loop_start, loop->id, loop->tid, (uintptr_t)&loop->pub,
              (uint32_t)sizeof(loop->pub));
    while (!loop->stopping && evl__loop_alive(loop))
        evl__iteration(loop);
    evl__trace_drain(loop);           /* the process may exit next */
    EVL_PROBE(loop_stop, loop->id, loop->tid);
    evl__altstack_leave(&old_ss, ss_mem);
    evl__tls_loop = NULL;
    loop->running = 0;
    return 0;
}

static void evl__stop_cb(evl_future *fut, void *arg)
{
    evl_stop(fut->loop);
}

intptr_t evl_run_until_complete(evl_loop *loop, evl_future *fut)
{
    if (!fut || fut->loop != loop)
        return EVL_EINVAL;
    if (fut->state == EVL_FUTURE_PENDING) {
        int rc = evl_future_add_done(fut, evl__stop_cb, NULL);
        if (rc < 0)
            return rc;
        rc = evl_run(loop);
        if (rc < 0) {
            evl_future_remove_done(fut, evl__stop_cb, NULL);
            return rc;
        }
        if (fut->state == EVL_FUTURE_PENDING) {
            evl_future_remove_done(fut, evl__stop_cb, NULL);
            return EVL_EDEADLK;
        }
    }
    return evl_future_result(fut);
}

/* ----------------------------------------------------------------- free */

/* evl_loop_free: release what is left in the ready queue without running
 * it; each kind of handle knows how to let go (releasing a gather's child
 * may complete the gather, which queues more: drain until empty). */
static void evl__discard_ready(evl_loop *loop)
{
    evl__handle *h;
    while ((h = evl__queue_pop(&loop->ready))) {
        if (h->run == evl__cbhandle_run)
            free(evl__container_of(h, evl__cbhandle, h));
        else if (!evl__future_discard(h))
            evl__timer_discard(h);    /* else: io waits live in dead frames */
    }
    while (loop->cb_free) {
        evl__cbhandle *c = loop->cb_free;
        loop->cb_free = (evl__cbhandle *)(void *)c->h.next;
        free(c);
    }
}

int evl_loop_free(evl_loop *loop)
{
    if (!loop)
        return 0;
    if (loop->running)
        return EVL_EBUSY;
    int leaked = (int)loop->ntasks;
    evl__debug_remove(loop);
    loop->closing = 1;
    evl__trace_check_attach(loop);    /* a tracer attached since the last iteration */
    evl__task_destroy_pending(loop);
    evl__trace_drain(loop);           /* the leak verdicts */
    evl__trace_end(loop, true);
    evl__executor_release(loop);     /* also moves posted handles to ready */
    evl__drain_posted(loop);
    evl__timers_release(loop);
    evl__discard_ready(loop);
    while (loop->task_free) {
        evl__task *t = loop->task_free;
        loop->task_free = t->next;
        free(t);
    }
    evl__stack_pool_release(loop);
    if (loop->wakefd >= 0)
        close(loop->wakefd);
    evl__poll_release(loop);
    pthread_mutex_destroy(&loop->ts_lock);
    /* Tasks the program still references keep a zombie loop struct alive
     * (evl__task_free frees it with the last of them). */
    loop->closing = 2;
    if (loop->task_structs == 0)
        free(loop);
    return leaked;
}
