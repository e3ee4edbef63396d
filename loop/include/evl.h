/*
 * evl.h -- libevl, an asyncio-model event loop in C with stackful tasks.
 *
 * This header is the whole public contract of libevl.  Everything a program
 * may touch is declared here; everything else (prefix evl__) is internal.
 * The model and its ordering rules are CPython's asyncio; loop/README.md
 * explains them and the decisions this header takes where asyncio has no
 * direct C equivalent.
 *
 * Conventions used throughout:
 *
 *  - Results are intptr_t values.  A value >= 0 is a result; a value < 0 is
 *    an error code from EVL_ERRNO_MAP below (negative errno values, like
 *    libuv).  Pointers stored as results are positive on every supported
 *    ABI (user-space addresses live in the lower half).
 *  - Times are nanoseconds of CLOCK_MONOTONIC (or of the virtual clock, see
 *    EVL_LOOP_VIRTUAL_CLOCK).  Delays are relative nanoseconds.
 *  - Every function must be called on the thread that runs the loop unless
 *    its comment says "any thread".
 *  - Functions marked "task only" suspend the calling task; called outside a
 *    task they return EVL_ENOTTASK at once and never crash.
 *  - A call that returns an error never also runs its callback.
 */
#ifndef EVL_H
#define EVL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EVL_VERSION_MAJOR 0
#define EVL_VERSION_MINOR 1
#define EVL_VERSION_PATCH 0

/* ---------------------------------------------------------------- errors */

/*
 * XX(name, value, message).  System errors keep their errno value (negated);
 * libevl's own conditions live at -4000 and below so they never collide.
 */
#define EVL_ERRNO_MAP(XX)                                                     \
    XX(EAGAIN,      (-EAGAIN),      "resource temporarily unavailable")       \
    XX(EBADF,       (-EBADF),       "bad file descriptor")                    \
    XX(EBUSY,       (-EBUSY),       "resource busy")                          \
    XX(ECANCELED,   (-ECANCELED),   "operation canceled")                     \
    XX(EINVAL,      (-EINVAL),      "invalid argument")                       \
    XX(ENOMEM,      (-ENOMEM),      "not enough memory")                      \
    XX(ETIMEDOUT,   (-ETIMEDOUT),   "operation timed out")                    \
    XX(EOVERFLOW,   (-EOVERFLOW),   "value would overflow")                   \
    XX(EDEADLK,     (-EDEADLK),     "nothing left that could complete the future") \
    XX(ENOTTASK,    (-4001),        "not called from inside a task")          \
    XX(ENOTDONE,    (-4002),        "future is not done yet")                 \
    XX(EDONE,       (-4003),        "future is already done")                 \
    XX(EWRONGLOOP,  (-4004),        "object belongs to another loop")         \
    XX(ECLOSING,    (-4005),        "loop is closing")                        \
    XX(EABANDONED,  (-4006),        "future abandoned: nothing can complete it") \
    XX(EGROUP,      (-4007),        "unhandled errors in a task group")

enum evl_errno {
#define EVL__ERR_ENUM(name, value, msg) EVL_##name = value,
    EVL_ERRNO_MAP(EVL__ERR_ENUM)
#undef EVL__ERR_ENUM
    EVL_OK = 0
};

/* A static description of err ("operation canceled"); never NULL.  Any
 * negative errno value is accepted, not only those in the map.  Any thread. */
const char *evl_strerror(int err);
/* The symbolic name of err ("ECANCELED"); never NULL.  Any thread. */
const char *evl_err_name(int err);

/* ----------------------------------------------------------------- types */

typedef struct evl_loop evl_loop;
/* A one-shot result slot with done-callbacks.  Reference counted. */
typedef struct evl_future evl_future;
/* A task is a future whose result is its function's return value: every
 * evl_future_* call accepts an evl_task *. */
typedef struct evl_future evl_task;

/* A task body.  Its return value becomes the task's result (>= 0) or error
 * (< 0).  Returning EVL_ECANCELED ends the task in state CANCELLED. */
typedef intptr_t (*evl_task_fn)(void *arg);
/* A plain callback run by the loop (call_soon, call_later, timers). */
typedef void (*evl_callback)(evl_loop *loop, void *arg);
/* A done-callback; runs on the loop thread one iteration after fut is done. */
typedef void (*evl_done_fn)(evl_future *fut, void *arg);
/* A blocking function for the executor; runs on a pool thread. */
typedef intptr_t (*evl_work_fn)(void *arg);

#define EVL_NS(x)  ((uint64_t)(x))
#define EVL_US(x)  ((uint64_t)(x) * 1000ull)
#define EVL_MS(x)  ((uint64_t)(x) * 1000000ull)
#define EVL_SEC(x) ((uint64_t)(x) * 1000000000ull)

/* ------------------------------------------------------------------ loop */

enum evl_loop_flags {
    /* Time stands still while there is work and jumps to the next timer
     * deadline when the loop would otherwise sleep (tokio's time::pause()).
     * Time-based tests then run instantly and identically every run.  Fd
     * readiness and executor jobs stay real: time does not jump while an
     * executor job runs, the loop waits for it. */
    EVL_LOOP_VIRTUAL_CLOCK = 1u << 0,
    /* asyncio's debug mode: warn on stderr about steps longer than
     * slow_step_ns and about leaks.  Also enabled by EVL_DEBUG=1. */
    EVL_LOOP_DEBUG = 1u << 1,
};

typedef struct evl_loop_options {
    unsigned flags;            /* enum evl_loop_flags */
    size_t stack_size;         /* usable bytes per task stack; 0 = 128 KiB */
    uint64_t slow_step_ns;     /* debug-mode threshold; 0 = 100 ms */
    unsigned executor_threads; /* pool size, threads start lazily; 0 = 4 */
} evl_loop_options;

/* Fill opts with the defaults. */
void evl_loop_options_init(evl_loop_options *opts);

/* Create a loop.  opts may be NULL for the defaults.  Returns NULL with
 * errno set when memory or the epoll instance cannot be had.  A loop may be
 * run by one thread at a time; several loops may run on several threads. */
evl_loop *evl_loop_new(const evl_loop_options *opts);

/* Close and free a loop that is not running.  Tasks still pending get a
 * "pending at close" leak verdict (probe task_leak, stderr in debug mode);
 * their stacks are released without unwinding them.  Finished tasks and
 * futures that the program still holds references to stay valid until
 * unreferenced; no function but evl_future_unref may be called on them.
 * Returns the number of tasks that leaked, or EVL_EBUSY if running. */
int evl_loop_free(evl_loop *loop);

/* Run until there is nothing left to do (no ready callbacks, timers, fd
 * waits, executor jobs or evl_loop_hold()s) or until evl_stop().
 * Returns 0, or EVL_EBUSY if the loop is already running. */
int evl_run(evl_loop *loop);

/* Run until fut is done and return its result (marking it retrieved).
 * Returns EVL_EDEADLK if the loop runs out of work first. */
intptr_t evl_run_until_complete(evl_loop *loop, evl_future *fut);

/* Make evl_run return after the current iteration. */
void evl_stop(evl_loop *loop);

/* Keep the loop alive while something outside it (another thread) may still
 * call evl_call_soon_threadsafe.  Each hold needs one release.  Any thread. */
void evl_loop_hold(evl_loop *loop);
void evl_loop_release(evl_loop *loop);

/* The loop's cached time: read once per iteration after the poll, at its
 * first use (like libuv's uv_now).  Deadlines are computed from it.  Loop
 * thread only (the first use in an iteration stores the time it read). */
uint64_t evl_now(const evl_loop *loop);

/* The loop running on the calling thread, or NULL. */
evl_loop *evl_loop_current(void);

/* A process-unique id (the id the probes and traces use). */
uint64_t evl_loop_id(const evl_loop *loop);

/* Schedule cb(loop, arg) to run in the next run phase (FIFO).
 * Returns 0 or EVL_ENOMEM. */
int evl_call_soon(evl_loop *loop, evl_callback cb, void *arg);

/* Same, from any thread; wakes the loop.  Returns 0 or EVL_ENOMEM. */
int evl_call_soon_threadsafe(evl_loop *loop, evl_callback cb, void *arg);

/* Run cb(loop, arg) once, delay_ns from now.  Fire and forget; use an
 * evl_timer to be able to cancel.  Returns 0 or EVL_ENOMEM. */
int evl_call_later(evl_loop *loop, uint64_t delay_ns, evl_callback cb, void *arg);

/* --------------------------------------------------------------- timers */

/* A caller-owned timer.  The fields are private; zero-initialise or call
 * evl_timer_init before first use. */
typedef struct evl_timer {
    struct evl__handle {
        struct evl__handle *next, *prev; /* NULL when not queued */
        void (*run)(struct evl__handle *h);
    } evl__ready;           /* ready-queue link */
    evl_loop *evl__loop;
    uint64_t evl__deadline; /* absolute, loop clock */
    uint64_t evl__seq;      /* tie-breaker: scheduling order */
    uint32_t evl__index;    /* position in the heap, or UINT32_MAX */
    uint32_t evl__state;    /* idle, in heap, queued */
    evl_callback evl__cb;
    void *evl__arg;
} evl_timer;

void evl_timer_init(evl_timer *t);
/* Arm t to run cb(loop, arg) delay_ns after the loop's cached time.  An
 * armed timer is re-armed.  Returns 0 or EVL_ENOMEM. */
int evl_timer_start(evl_loop *loop, evl_timer *t, uint64_t delay_ns,
                    evl_callback cb, void *arg);
/* Disarm t, also when it is due and waiting in the ready queue.  Safe on an
 * idle timer.  t may be freed after this returns. */
void evl_timer_stop(evl_timer *t);
int evl_timer_active(const evl_timer *t);

/* -------------------------------------------------------------- futures */

enum evl_future_state {
    EVL_FUTURE_PENDING = 0,
    EVL_FUTURE_DONE = 1,      /* finished with a result or an error */
    EVL_FUTURE_CANCELLED = 2,
};

/* A new pending future with one reference owned by the caller. */
evl_future *evl_future_new(evl_loop *loop);
/* Add / drop a reference.  Dropping the last reference of a pending future
 * that tasks are awaiting gives each of them an "abandoned" leak verdict:
 * nothing can complete it any more.  Dropping the last reference of a task
 * that failed and whose error nobody read gives an "unretrieved" verdict. */
evl_future *evl_future_ref(evl_future *fut);
void evl_future_unref(evl_future *fut);

/* Complete fut with value (>= 0) or error (< 0).  Done-callbacks are
 * scheduled with call_soon in registration order, never invoked inline.
 * Returns 0, EVL_EDONE if already done, EVL_EINVAL if fut is a task. */
int evl_future_set_result(evl_future *fut, intptr_t value);
int evl_future_set_error(evl_future *fut, int err);

/* Request cancellation.  A pending future becomes CANCELLED; a task follows
 * asyncio's Task.cancel (see loop/README.md).  Returns 1 if the request was
 * taken, 0 if fut was already done. */
int evl_cancel(evl_future *fut);

int evl_future_state(const evl_future *fut);   /* enum evl_future_state */
int evl_future_done(const evl_future *fut);
/* The result (>= 0) or error (< 0) of a done future, marking it retrieved;
 * EVL_ENOTDONE if pending, EVL_ECANCELED if cancelled. */
intptr_t evl_future_result(evl_future *fut);

/* Register / remove a done-callback.  If fut is already done, cb is
 * scheduled with call_soon.  remove returns how many were removed. */
int evl_future_add_done(evl_future *fut, evl_done_fn cb, void *arg);
int evl_future_remove_done(evl_future *fut, evl_done_fn cb, void *arg);

evl_loop *evl_future_loop(const evl_future *fut);

/* ---------------------------------------------------------------- tasks */

enum evl_task_state {
    EVL_TASK_CREATED = 0,
    EVL_TASK_READY = 1,
    EVL_TASK_RUNNING = 2,
    EVL_TASK_SUSPENDED = 3,
    EVL_TASK_FINISHED = 4,
    EVL_TASK_FAILED = 5,
    EVL_TASK_CANCELLED = 6,
};

/* Create a task running fn(arg) on its own stack and schedule its first
 * step with call_soon; nothing runs until the loop reaches it.  name is
 * copied (truncated to 47 bytes); NULL gives "task".  loop NULL means the
 * current loop.  Returns a task with one reference owned by the caller
 * (unref it when done; the loop keeps its own while the task is pending),
 * or NULL with errno set (ENOMEM, EINVAL). */
evl_task *evl_spawn(evl_loop *loop, const char *name, evl_task_fn fn, void *arg);

/* The task running on this thread, or NULL outside tasks. */
evl_task *evl_current_task(void);
const char *evl_task_name(const evl_task *task);
uint64_t evl_task_id(const evl_task *task);          /* process-unique, > 0 */
int evl_task_state(const evl_task *task);            /* enum evl_task_state */
/* 1 if fut is a task (made by evl_spawn). */
int evl_is_task(const evl_future *fut);

/* asyncio.all_tasks(loop): the tasks of loop that are not done yet (the
 * calling task too, if it is one of them), oldest first.  The first
 * min(n, count) go to tasks[], each with a new reference (unref each);
 * returns the count, which may be more than n (call with n 0 to size the
 * array).  loop NULL means the current loop (0 outside one).  The graceful
 * shutdown of asyncio.Runner.close, once the main task is done:
 *
 *     size_t n = evl_all_tasks(loop, NULL, 0);
 *     evl_task **ts = malloc(n * sizeof(*ts));
 *     n = evl_all_tasks(loop, ts, n);
 *     for (size_t i = 0; i < n; i++)
 *         evl_cancel(ts[i]);
 *     evl_future *g = evl_gather_new(loop, ts, n, EVL_GATHER_COLLECT);
 *     evl_run_until_complete(loop, g);      (every one is done now)
 *     evl_future_unref(g);
 *     (evl_future_unref each ts[i], free(ts))
 *
 * (examples/http_server.c does this on SIGINT/SIGTERM.) */
size_t evl_all_tasks(evl_loop *loop, evl_task **tasks, size_t n);

/* Task only.  Suspend until fut is done; return its result or error.  An
 * already-done future returns at once without suspending.  Returns
 * EVL_ECANCELED if the calling task is cancelled meanwhile, EVL_EINVAL when
 * a task awaits itself, EVL_EWRONGLOOP across loops.
 *
 * EVL_ECANCELED also comes back when fut itself was cancelled (a task that
 * ended CANCELLED, a cancelled future), as CancelledError does in asyncio.
 * To tell "I was cancelled" from "what I awaited was cancelled" do what
 * asyncio code does: look at the calling task's own count of cancellation
 * requests, evl_task_cancelling(NULL) (below):
 *
 *     intptr_t r = evl_await(child);
 *     if (r == EVL_ECANCELED && evl_task_cancelling(NULL) > 0)
 *         return r;          (we are being cancelled: pass it on)
 *     if (r == EVL_ECANCELED)
 *         ...                (child was cancelled; we go on)
 *
 * The count goes down only by evl_task_uncancel: after a cancellation the
 * task caught and did not withdraw it stays above 0, so code that swallows
 * one should uncancel it (asyncio code must too), or compare with the
 * count taken before the await.  When both happen (fut cancelled, then the
 * caller before it resumed) the count is above 0: the caller's wins. */
intptr_t evl_await(evl_future *fut);

/* Task only.  Sleep for ns; 0 yields: the task goes to the back of the ready
 * queue.  Returns 0 or EVL_ECANCELED. */
int evl_sleep(uint64_t ns);
static inline int evl_yield(void) { return evl_sleep(0); }

/* Task only.  Await fut for at most timeout_ns (asyncio.wait_for): on
 * timeout fut is cancelled, awaited, and EVL_ETIMEDOUT returned. */
intptr_t evl_wait_for(evl_future *fut, uint64_t timeout_ns);

enum evl_gather_flags {
    /* Default: the first error completes the gather (the others keep
     * running).  COLLECT: wait for all, errors land in results[]. */
    EVL_GATHER_COLLECT = 1u << 0,
};

/* A future that completes when all n futures are done (asyncio.gather).
 * Holds references to them.  Cancelling it cancels the children.  The
 * result is 0; per-child results are read with evl_gather_results. */
evl_future *evl_gather_new(evl_loop *loop, evl_future *const *futs, size_t n,
                           unsigned flags);
/* Copy each child's result or error, in argument order, into results[n]. */
int evl_gather_results(evl_future *gather, intptr_t *results, size_t n);

/* Task only.  gather + await: returns 0 or the first error (or
 * EVL_ECANCELED); results (may be NULL) receive each child's result or
 * error in argument order, whatever the finishing order, when all are done. */
int evl_gather(evl_future *const *futs, size_t n, unsigned flags, intptr_t *results);

/* ------------------------------------------------- task-level asyncio API
 *
 * CPython 3.11.7's Task.cancelling/uncancel, shield, wait, as_completed,
 * timeout and TaskGroup, with their semantics and the same number of loop
 * iterations (loop/ORDERING.md rules 11-15; the timeout scopes' rule is
 * also that of 3.12 and later, not 3.11.2's).  As elsewhere, a raised
 * exception is a negative result: CancelledError is EVL_ECANCELED,
 * TimeoutError EVL_ETIMEDOUT. */

/* "No timeout" (asyncio's timeout=None) for the timeout arguments below. */
#define EVL_NO_TIMEOUT UINT64_MAX

/* Task.cancelling(): the number of cancellation requests made on task
 * (each evl_cancel of a pending task counts one, as Task.cancel does) minus
 * the evl_task_uncancel calls.  task NULL means the calling task: after an
 * await returned EVL_ECANCELED, evl_task_cancelling(NULL) > 0 says that the
 * caller itself is being cancelled, 0 that the awaited future was.
 * Returns the count, EVL_EINVAL if task is not a task, EVL_ENOTTASK for
 * NULL outside a task. */
int evl_task_cancelling(const evl_task *task);

/* Task.uncancel(): decrement the count (not below 0) and return what is
 * left; errors as evl_task_cancelling.  To be called by whoever made the
 * request and has handled it (timeout scopes and task groups do).  As in
 * 3.11 it changes only the count: a cancellation still pending in the task
 * is delivered at its next await all the same. */
int evl_task_uncancel(evl_task *task);

/* asyncio.shield(inner): a future that completes like inner, but whose
 * cancellation (evl_cancel, or cancelling a task that awaits it) does not
 * reach inner, which goes on.  If inner ends cancelled, so does the outer
 * future.  Awaiting it reports inner's suspend reason.  If inner is already
 * done, returns inner itself (asyncio's shortcut).  Returns a new reference
 * (unref it), or NULL with errno (EINVAL, ENOMEM).  The usual pattern:
 *
 *     evl_future *s = evl_shield(task);
 *     intptr_t r = s ? evl_await(s) : EVL_ENOMEM;
 *     evl_future_unref(s);       (EVL_ECANCELED: we were cancelled, or task
 *                                 was; task goes on in the first case) */
evl_future *evl_shield(evl_future *inner);

/* asyncio.wait's return_when. */
enum evl_wait_mode {
    EVL_ALL_COMPLETED = 0,    /* every future is done */
    EVL_FIRST_COMPLETED = 1,  /* any future is done */
    EVL_FIRST_EXCEPTION = 2,  /* any future fails (cancelled does not count),
                               * else all are done */
};

/* Task only.  asyncio.wait(futs, timeout=, return_when=): suspend (reason
 * "wait") until return_when is met or timeout_ns passed (EVL_NO_TIMEOUT:
 * no limit; 0: asyncio's timeout=0, the next iterations), then sort the
 * futures into done[] and pending[] (each may be NULL; each needs room for
 * n).  A future given twice is listed once; both arrays keep the order of
 * futs.  The pointers are the caller's own (no reference is added).  A
 * timeout is not an error: it returns 0 with futures pending.  Nothing is
 * cancelled.  Like asyncio it takes at least two iterations, even when
 * every future is already done (done-callbacks, then the wakeup).
 * Returns 0; EVL_ECANCELED if the calling task was cancelled (asyncio
 * raises; the counts are then 0); EVL_EINVAL for n == 0, a NULL future or
 * an unknown mode; EVL_EWRONGLOOP, EVL_ENOMEM, EVL_ENOTTASK. */
int evl_wait(evl_future *const *futs, size_t n, int return_when, uint64_t timeout_ns,
             evl_future **done, size_t *ndone, evl_future **pending, size_t *npending);

/* asyncio.as_completed(futs, timeout=) as an iterator:
 *
 *     evl_as_completed *it = evl_as_completed_new(NULL, futs, n, EVL_SEC(1));
 *     evl_future *f;
 *     intptr_t r;
 *     while ((r = evl_as_completed_next(it, &f)) != EVL_EDONE) {
 *         if (f)  ... r is f's result or error, in completion order
 *         else    ... r is EVL_ETIMEDOUT (or EVL_ECANCELED: we were cancelled)
 *     }
 *     evl_as_completed_free(it);
 *
 * new: loop NULL means the current loop.  Duplicates count once.  The
 * timeout (EVL_NO_TIMEOUT: none) runs from this call for the whole
 * iteration, as asyncio's does from the first next(): once it passes, every
 * future not yet done counts as timed out.  The iterator holds a reference
 * on each future until it is freed.  NULL with errno (EINVAL, ENOMEM). */
typedef struct evl_as_completed evl_as_completed;
evl_as_completed *evl_as_completed_new(evl_loop *loop, evl_future *const *futs, size_t n,
                                       uint64_t timeout_ns);
/* Task only.  The next future to complete: *done (may be NULL) receives it
 * (valid until evl_as_completed_free) and its outcome is returned (marked
 * retrieved).  Suspends (reason "wait") when none is ready, exactly as
 * awaiting asyncio's next item does; returns at once when one is.  Else
 * *done is NULL and the return is EVL_ETIMEDOUT (the timeout passed: once
 * for each future it left pending), EVL_EDONE (all n were returned),
 * EVL_ECANCELED (the calling task was cancelled; nothing is consumed: the
 * next call returns what this one would have), EVL_EBUSY (another task is
 * in next), EVL_ENOTTASK, EVL_EWRONGLOOP, EVL_EINVAL. */
intptr_t evl_as_completed_next(evl_as_completed *it, evl_future **done);
/* Stop watching (the futures go on), drop the references and free.
 * Returns 0, or EVL_EBUSY (nothing freed) while a task is in
 * evl_as_completed_next.  NULL is a no-op.  It may also be called after the
 * loop was freed (even if a task was in next then). */
int evl_as_completed_free(evl_as_completed *it);

/* A timeout scope, asyncio.timeout() / timeout_at() (current asyncio's
 * timeouts.py: CPython 3.11.7, 3.12+).
 * Caller-owned (usually on the task's stack), fields private; enter
 * initialises it.  The pattern, for `async with asyncio.timeout(d):`
 *
 *     evl_timeout tm;
 *     intptr_t r = evl_timeout_enter(&tm, EVL_MS(10));
 *     if (r == 0) {
 *         r = body();            (its awaits return EVL_ECANCELED on expiry)
 *         r = evl_timeout_exit(&tm, r);
 *     }
 *     (r == EVL_ETIMEDOUT: this scope expired and cancelled the body)
 *
 * On expiry the scope cancels its task (evl_cancel: one more request,
 * evl_task_cancelling counts it) from a loop callback: a timer at the
 * deadline, or call_soon when the deadline has already passed.  At exit,
 * an expired scope withdraws its request (evl_task_uncancel) and turns the
 * body's EVL_ECANCELED into EVL_ETIMEDOUT only when no request made since
 * the scope was entered is left (the count is back at what enter saw): in
 * nested scopes only the outermost expired one reports the timeout, a
 * cancellation from elsewhere stays a cancellation, and a scope entered
 * while the task was already being cancelled (a caught EVL_ECANCELED that
 * was not uncancelled) still reports its own timeout (CPython 3.11.2
 * compared the count with 0 and passed the cancellation on there). */
typedef struct evl_timeout {
    evl_timer evl__timer;             /* call_at(when) */
    void *evl__soon;                  /* call_soon's handle, when already due */
    evl_task *evl__task;
    uint64_t evl__when;
    uint32_t evl__state;
    uint32_t evl__cancelling;         /* the task's count at enter */
} evl_timeout;

/* Task only.  Enter the scope for the calling task with a deadline delay_ns
 * from the loop's cached time (evl_timeout_enter_at: the absolute loop time
 * `when`, asyncio's timeout_at).  EVL_NO_TIMEOUT: no deadline (until
 * rescheduled).  tm must not be in an active scope, and every successful
 * enter needs its exit before tm's storage goes (its timer is armed in it).
 * Returns 0, EVL_ENOMEM or EVL_ENOTTASK (tm is then not entered). */
int evl_timeout_enter(evl_timeout *tm, uint64_t delay_ns);
int evl_timeout_enter_at(evl_timeout *tm, uint64_t when);
/* Timeout.reschedule(when): a new absolute deadline (EVL_NO_TIMEOUT: none);
 * one at or before the loop's time expires the scope at the next
 * iteration.  Returns 0, EVL_ENOMEM, or EVL_EINVAL (asyncio's RuntimeError)
 * unless the scope is entered and has not expired. */
int evl_timeout_reschedule(evl_timeout *tm, uint64_t when);
/* Timeout.when(): the deadline (loop time), or EVL_NO_TIMEOUT. */
uint64_t evl_timeout_when(const evl_timeout *tm);
/* Timeout.expired(): 1 once the scope has cancelled its task. */
int evl_timeout_expired(const evl_timeout *tm);
/* Task only, by the task that entered.  Leave the scope (__aexit__): body
 * is what the body ends with (>= 0, or the error it "raises";
 * EVL_ECANCELED is CancelledError).  Returns EVL_ETIMEDOUT when this scope
 * expired, body is EVL_ECANCELED and, once this scope's request is
 * withdrawn, the task's count is no higher than at enter; otherwise body.
 * EVL_EINVAL if tm is not entered or belongs to another task (the scope is
 * then left as it is). */
intptr_t evl_timeout_exit(evl_timeout *tm, intptr_t body);

/* asyncio.TaskGroup (3.11 taskgroups.py).  The pattern, for
 * `async with asyncio.TaskGroup() as g:`
 *
 *     evl_taskgroup *g = evl_taskgroup_new();
 *     evl_future_unref(evl_taskgroup_spawn(g, "a", fn_a, arg));
 *     intptr_t body = ...;                     (the body's outcome)
 *     intptr_t r = evl_taskgroup_exit(g, body < 0 ? body : 0);
 *     int errs[4];                             (r == EVL_EGROUP: these)
 *     size_t nerr = evl_taskgroup_errors(g, errs, 4);
 *     evl_taskgroup_free(g);
 *
 * The first child that fails cancels the other children and the parent
 * (the task that made the group: its body's await returns EVL_ECANCELED);
 * exit withdraws that request (evl_task_uncancel) and waits (reason
 * "taskgroup") until every child is done.  A parent cancelled from
 * elsewhere, in the body or during exit, cancels the children and exit
 * returns EVL_ECANCELED when no child failed.  Children are cancelled in
 * spawn order (asyncio's order is that of a set).  Where asyncio raises
 * its ExceptionGroup (one error or more: failed children, the body's
 * error), exit returns EVL_EGROUP, never the error itself, so it cannot be
 * taken for an error of the body propagating on its own; the codes are in
 * evl_taskgroup_errors. */
typedef struct evl_taskgroup evl_taskgroup;
/* How many child error codes a group keeps (evl_taskgroup_errors). */
#define EVL_TASKGROUP_ERRORS 16

/* Task only.  A new group whose parent is the calling task (__aenter__).
 * NULL with errno EPERM outside a task, ENOMEM. */
evl_taskgroup *evl_taskgroup_new(void);
/* create_task(): spawn fn(arg) as evl_spawn does and make it a child.
 * Returns a new reference (unref it; the group keeps its own while the
 * child runs), or NULL with errno: EINVAL (g NULL, or the group has
 * finished: exit ran and no child is left), ECANCELED (the group is
 * shutting down: a child failed or the parent was cancelled), or
 * evl_spawn's. */
evl_task *evl_taskgroup_spawn(evl_taskgroup *g, const char *name, evl_task_fn fn, void *arg);
/* Task only, by the parent, once.  __aexit__: body is the body's outcome
 * (0 or >= 0: it completed; EVL_ECANCELED: it was cancelled; < 0: it
 * failed, which cancels the children).  Waits for every child.  Returns:
 *  - 0: nothing failed, nothing cancelled the parent (or the group's own
 *    request was its only one);
 *  - EVL_ECANCELED: the parent was cancelled from elsewhere and no child
 *    failed;
 *  - EVL_EGROUP: asyncio's BaseExceptionGroup, when a child failed or body
 *    is an error other than EVL_ECANCELED (also when that error is the
 *    only one); evl_taskgroup_errors has the count and the codes,
 *    children's errors in the order they ended, then body's.
 * EVL_EINVAL if called twice or by another task, EVL_ENOTTASK. */
intptr_t evl_taskgroup_exit(evl_taskgroup *g, intptr_t body);
/* The number of errors (failed children, then the body's error once exit
 * ran); the first min(n, count, EVL_TASKGROUP_ERRORS) codes go to errs. */
size_t evl_taskgroup_errors(const evl_taskgroup *g, int *errs, size_t n);
/* Free the group (normally after exit).  If children are still running
 * they go on, and the group lives until the last is done.  NULL: no-op. */
void evl_taskgroup_free(evl_taskgroup *g);

/* ------------------------------------------------------------------- io */

enum evl_io_events {
    EVL_READABLE = 1u << 0,
    EVL_WRITABLE = 1u << 1,
};

/* Task only.  Wait until fd is readable and/or writable (level-triggered);
 * returns the ready mask (errors and hang-ups count as both) or an error.
 * One reader and one writer per fd at a time: EVL_EBUSY otherwise. */
int evl_wait_fd(int fd, unsigned events);

/* Task only.  Socket helpers (asyncio's loop.sock_*): fd must be
 * non-blocking; EAGAIN is handled by awaiting readiness (the task suspends
 * with reason "io" on fd).  They return what the syscall returns, or -errno.
 * Like send(2), evl_send and evl_write may write fewer bytes than asked:
 * a stream that must go out whole wants evl_sendall.  Sends add
 * MSG_NOSIGNAL: a vanished peer is -EPIPE, never SIGPIPE. */
ssize_t evl_recv(int fd, void *buf, size_t len, int flags);
ssize_t evl_send(int fd, const void *buf, size_t len, int flags);
ssize_t evl_read(int fd, void *buf, size_t len);
ssize_t evl_write(int fd, const void *buf, size_t len);
/* UDP and other datagram sockets (asyncio's sock_recvfrom_into and
 * sock_sendto).  evl_recvfrom fills addr/addrlen (both may be NULL) like
 * recvfrom(2); a datagram longer than len is truncated, as there.  A
 * datagram goes out whole or not at all, so evl_sendto needs no "all". */
ssize_t evl_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr,
                     socklen_t *addrlen);
ssize_t evl_sendto(int fd, const void *buf, size_t len, int flags,
                   const struct sockaddr *addr, socklen_t addrlen);
/* The accepted socket is non-blocking and close-on-exec. */
int evl_accept(int fd, struct sockaddr *addr, socklen_t *addrlen);
/* Returns 0 or the connect error (-ECONNREFUSED ...).  It waits as long as
 * the kernel tries; for a deadline, await it through evl_wait_for, as
 * asyncio does with wait_for(loop.sock_connect(...), t):
 *
 *     struct conn { int fd; const struct sockaddr *sa; socklen_t len; };
 *     static intptr_t connect_task(void *arg)
 *     {
 *         struct conn *c = arg;
 *         return evl_connect(c->fd, c->sa, c->len);
 *     }
 *     ...
 *     struct conn c = { fd, sa, salen };
 *     evl_task *t = evl_spawn(NULL, "connect", connect_task, &c);
 *     intptr_t r = t ? evl_wait_for(t, EVL_SEC(5)) : EVL_ENOMEM;
 *     if (t)
 *         evl_future_unref(t);
 *     if (r < 0)
 *         evl_close(fd);            (EVL_ETIMEDOUT, or the connect error)
 *
 * On timeout the connect task is cancelled and has ended when evl_wait_for
 * returns, so `c` may live on the caller's stack (the task reads it only in
 * its first step, and a task cancelled before that never runs).  The
 * socket is then half-connected: close it.  No helper is needed for this;
 * tests/unit/test-io-helpers.c checks this exact pattern. */
int evl_connect(int fd, const struct sockaddr *addr, socklen_t addrlen);

/* Task only.  Send all len bytes (asyncio's loop.sock_sendall): send, and
 * after a short write or EAGAIN await writability and send the rest, until
 * all is sent or an error occurs.  Returns 0, or the first error: -EPIPE /
 * -ECONNRESET when the peer went away (MSG_NOSIGNAL is added: never
 * SIGPIPE), EVL_ECANCELED when the task was cancelled while it waited.
 *
 * An error or a cancellation mid-way leaves a prefix of buf sent.  asyncio
 * says nothing about its length; evl_sendall_sent tells it: *sent (if not
 * NULL) receives the number of bytes the kernel accepted, always (len on
 * success, 0 when nothing went out).  Accepted is not delivered: on
 * -ECONNRESET the peer may never see them.  A byte stream cut at *sent is
 * in the middle of a message: resume from buf + *sent, or close it. */
int evl_sendall(int fd, const void *buf, size_t len, int flags);
int evl_sendall_sent(int fd, const void *buf, size_t len, int flags, size_t *sent);

/* Task only.  Send count bytes of in_fd to the socket out_fd (asyncio's
 * loop.sock_sendfile): from *offset, advancing *offset and leaving in_fd's
 * position alone, or (offset NULL) from in_fd's position, advancing it.
 * count 0 means up to the end of the file (asyncio's count=None).  out_fd
 * must be a non-blocking socket (EVL_EINVAL otherwise: sendfile(2) has no
 * MSG_DONTWAIT and would block the loop).  Returns the bytes sent, fewer
 * than count only when in_fd ended first, or an error; waits are "io" on
 * out_fd.
 *
 * sendfile(2) is used when in_fd is a regular file; when it is not, or when
 * the first sendfile(2) call fails with EINVAL, ENOSYS, EOPNOTSUPP, ESPIPE
 * or EOVERFLOW (nothing sent yet), it falls back, as asyncio does, to
 * reading 64 KiB chunks and evl_sendall-ing them.  The fallback reads a
 * regular file directly (sendfile(2) reads it on the calling thread too;
 * asyncio's fallback reads in its executor) and any other fd (pipe,
 * socket) when it is readable, so a blocking pipe does not block the loop;
 * such an in_fd has then been awaited: close it with evl_close.
 *
 * An error or cancellation mid-way: *offset (or in_fd's position, for a
 * regular file) has advanced by exactly the bytes out_fd accepted, so pass
 * offset to know how many went out.  For a pipe without offset, bytes read
 * but not sent are lost.  A peer that went away gives -EPIPE or
 * -ECONNRESET, never SIGPIPE: SIGPIPE is blocked in the calling thread
 * around sendfile(2) and the one it raised discarded. */
ssize_t evl_sendfile(int out_fd, int in_fd, off_t *offset, size_t count);

/* Task only.  getaddrinfo(3) run in the loop's executor (asyncio's
 * loop.getaddrinfo), so a slow resolver never blocks the loop: the task
 * suspends with reason "executor".  host, service and hints as for
 * getaddrinfo(3) (they are copied: the caller's may go once this returns).
 * On success returns 0 and *res is the list, freed with freeaddrinfo(3).
 * Errors (*res is then NULL):
 *
 *   EAI_SYSTEM             -errno (the system error it stands for)
 *   EAI_MEMORY             EVL_ENOMEM
 *   any other EAI_* code   EVL_EAI_BASE + code: evl_is_eai(err) is true,
 *                          evl_eai_code(err) gives the EAI_* value back
 *                          (EAI_NONAME, EAI_AGAIN ...); evl_strerror
 *                          gives gai_strerror(3)'s text, evl_err_name "EAI"
 *   EVL_ECANCELED          the task was cancelled: the lookup still runs to
 *                          its end on its pool thread (getaddrinfo cannot
 *                          be interrupted), and its answer is freed there
 *
 * Like every executor job, a lookup takes one pool thread for its length. */
struct addrinfo;
int evl_getaddrinfo(const char *host, const char *service, const struct addrinfo *hints,
                    struct addrinfo **res);

/* evl_getaddrinfo's EAI_* errors: EVL_EAI_BASE + the (negative, on glibc
 * and musl) EAI_* code, between -3001 and -3999: apart from errno values
 * and from libevl's own codes (-4000 and below). */
#define EVL_EAI_BASE (-3000)
static inline int evl_is_eai(int err) { return err < EVL_EAI_BASE && err > EVL_EAI_BASE - 1000; }
static inline int evl_eai_code(int err) { return err - EVL_EAI_BASE; }

/* Close fd and make the current loop forget it.  The loop keeps epoll
 * interest armed between waits (it saves two syscalls per wait), so an fd
 * that was awaited must be closed with evl_close, not close(2): a reused fd
 * number would otherwise inherit stale state.  Tasks waiting on fd wake with
 * EVL_EBADF.  Call it on the loop's thread while the loop runs (from a task
 * or a callback): it forgets fd in the running loop.  Returns 0 or -errno. */
int evl_close(int fd);

/* ------------------------------------------------------------- executor */

/* Task only.  Run fn(arg) on the loop's thread pool and await its return
 * value.  If the task is cancelled the await returns EVL_ECANCELED at once;
 * a job that has not started yet is then skipped (like
 * concurrent.futures), one already running runs to its end and its result
 * is dropped. */
intptr_t evl_run_in_executor(evl_work_fn fn, void *arg);

/* The same as a future (one reference owned by the caller). */
evl_future *evl_executor_submit(evl_loop *loop, evl_work_fn fn, void *arg);

/* ------------------------------------------------------ synchronisation */

/*
 * asyncio's Lock, Event, Condition, Semaphore, BoundedSemaphore, Queue,
 * LifoQueue and PriorityQueue, transcribed from CPython 3.11.7's
 * asyncio/locks.py and queues.py: the same waiter queues, the same wakeups
 * (a woken waiter runs one iteration later, loop/ORDERING.md rule 4), the
 * same behaviour when a waiter is cancelled, so a program behaves the same
 * in both, iteration for iteration (loop/ORDERING.md rule 10).
 *
 * Common rules:
 *
 *  - The objects are caller-owned and their fields private.  A zeroed
 *    object is a valid initial one (an unlocked lock, an unset event, a
 *    semaphore at 0, an unbounded FIFO queue); the _init functions set one
 *    up explicitly.  Like asyncio's, an object takes no loop: it is bound
 *    to the loop of the first task that waits on it, and a wait from a task
 *    of another loop returns EVL_EWRONGLOOP.  Loop thread only.
 *  - The waits (acquire, wait, get, put, join) are task only.  They return
 *    0, or EVL_ECANCELED (CancelledError) when the task was cancelled while
 *    it waited (a cancelled waiter passes its wakeup on exactly as
 *    asyncio's does), or EVL_ENOTTASK / EVL_EWRONGLOOP as above.  The other calls (release, set, notify, put_nowait ...) never
 *    suspend and may also be called from callbacks.
 *  - RuntimeError and ValueError (releasing an unlocked lock, waiting on a
 *    condition whose lock is not held, releasing a bounded semaphore above
 *    its initial value, task_done called too often) are EVL_EINVAL;
 *    QueueFull and QueueEmpty are EVL_EAGAIN; a semaphore value that would
 *    pass INT64_MAX is EVL_EOVERFLOW.
 *  - Waiting tasks are linked into the object: do not move, copy or free
 *    an object while a task waits on it (a woken task unlinks itself when
 *    it resumes, so "waits" includes woken but not yet resumed).  After
 *    evl_loop_free with tasks still waiting on an object, initialise the
 *    object again before using it.
 *  - Tracing: each wait is a task_suspend with the reason EVL_SUSPEND_LOCK,
 *    _EVENT, _CONDITION, _SEMAPHORE, _QUEUE_GET, _QUEUE_PUT or _QUEUE_JOIN
 *    and the object's address as object; the wake that ends it has the
 *    waker kind EVL_WAKER_LOCK, _EVENT, _CONDITION, _SEMAPHORE or _QUEUE,
 *    and as waker_task the task that released, set, notified, put, got or
 *    called task_done (or the cancelled waiter that passed its wakeup on;
 *    0 from a callback), or EVL_WAKER_CANCEL when the wait was cancelled.
 */

struct evl__syncw;                     /* a waiting task's link, on its stack */
typedef struct evl__syncq {
    struct evl__syncw *evl__head, *evl__tail;
} evl__syncq;

/* asyncio.Lock: not owned (any code may release it), FIFO waiters, no
 * barging: while a released lock's first waiter has been woken but has not
 * run yet, a new acquire waits behind it. */
typedef struct evl_lock {
    evl__syncq evl__waiters;
    evl_loop *evl__loop;               /* bound at the first wait */
    uint64_t evl__holder;              /* id of the task that acquired it; 0 if unlocked */
    uint8_t evl__locked;
} evl_lock;

/* An unlocked lock. */
void evl_lock_init(evl_lock *lock);
/* Task only.  Acquire lock, waiting (reason "lock") behind the earlier
 * waiters.  Returns 0 (the lock is held) or EVL_ECANCELED (it is not; if
 * the lock was released to this task meanwhile, it passes it on to the
 * next waiter).  For a tracer the task_suspend's timeout_ns argument
 * carries the id of the task holding the lock (0 when the lock is free but
 * promised to a woken waiter): "task A waits for lock L held by task B". */
int evl_lock_acquire(evl_lock *lock);
/* Release lock and wake its first waiter, if that one is not already woken.
 * Any code may release a lock, not only its holder (as in asyncio).
 * Returns 0, or EVL_EINVAL if lock is not locked (RuntimeError). */
int evl_lock_release(evl_lock *lock);
/* 1 if locked. */
int evl_lock_locked(const evl_lock *lock);
/* The id (evl_task_id) of the task whose acquire took lock, 0 while it is
 * unlocked: the holder deadlock detection follows.  asyncio's locks have
 * no owner, so this names the acquirer whoever releases it. */
uint64_t evl_lock_holder(const evl_lock *lock);

/* asyncio.Event. */
typedef struct evl_event {
    evl__syncq evl__waiters;
    evl_loop *evl__loop;
    uint8_t evl__set;
} evl_event;

/* An unset event. */
void evl_event_init(evl_event *ev);
/* Task only.  Return 0 at once if ev is set, else wait (reason "event")
 * until evl_event_set.  Returns 0 or EVL_ECANCELED. */
int evl_event_wait(evl_event *ev);
/* Set ev and wake every waiter (in wait order).  Setting a set event does
 * nothing.  A waiter woken here returns 0 even if ev is cleared before it
 * resumes. */
void evl_event_set(evl_event *ev);
void evl_event_clear(evl_event *ev);
int evl_event_is_set(const evl_event *ev);

/* asyncio.Condition over an evl_lock. */
typedef struct evl_cond {
    evl__syncq evl__waiters;
    evl_loop *evl__loop;
    evl_lock *evl__lock;               /* NULL: evl__own */
    evl_lock evl__own;
} evl_cond;

/* A condition over lock, or (lock NULL) over a lock of its own. */
void evl_cond_init(evl_cond *cond, evl_lock *lock);
/* Its lock: acquire and release it with evl_lock_acquire / _release. */
evl_lock *evl_cond_lock(evl_cond *cond);
/* Task only.  The lock must be locked (by anyone, as in asyncio; else
 * EVL_EINVAL at once).  Release it, wait (reason "condition") until
 * notified, then re-acquire it (reason "lock"), also when cancelled: the
 * lock is held again when this returns 0 or EVL_ECANCELED.  (A lock bound
 * to another loop than the task's gives EVL_EWRONGLOOP, lock not held.) */
int evl_cond_wait(evl_cond *cond);
/* Task only.  asyncio's Condition.wait_for: while pred(arg) is 0,
 * evl_cond_wait.  Returns pred's last (non-zero) value, or EVL_EINVAL /
 * EVL_ECANCELED from evl_cond_wait (pred should then return values >= 0). */
int evl_cond_wait_for(evl_cond *cond, int (*pred)(void *arg), void *arg);
/* Wake up to n waiters not woken yet, in wait order (they then re-acquire
 * the lock, which the caller still holds).  The lock must be locked.
 * Returns the number woken, or EVL_EINVAL if the lock is not locked. */
int evl_cond_notify(evl_cond *cond, size_t n);
int evl_cond_notify_all(evl_cond *cond);

enum evl_sem_flags {
    /* asyncio.BoundedSemaphore: a release that would raise the value above
     * the initial value fails with EVL_EINVAL (ValueError). */
    EVL_SEM_BOUNDED = 1u << 0,
};

/* asyncio.Semaphore (3.11.7: a release wakes the first waiter and hands it
 * one unit at once, so a later acquire cannot overtake it). */
typedef struct evl_sem {
    evl__syncq evl__waiters;
    evl_loop *evl__loop;
    int64_t evl__value;
    int64_t evl__bound;                /* the initial value, if bounded */
    uint8_t evl__bounded;
} evl_sem;

/* A semaphore with value units.  Returns 0, or EVL_EINVAL if value < 0 or
 * flags has an unknown bit. */
int evl_sem_init(evl_sem *sem, int64_t value, unsigned flags);
/* Task only.  Take one unit, waiting (reason "semaphore") if none is free
 * or earlier waiters are still waiting.  Returns 0 or EVL_ECANCELED (no
 * unit taken; one handed to this task meanwhile is passed on). */
int evl_sem_acquire(evl_sem *sem);
/* Give one unit back and hand one to the first waiter not woken yet.
 * Returns 0; EVL_EINVAL for a bounded semaphore already at its initial
 * value (BoundedSemaphore's ValueError "released too many times");
 * EVL_EOVERFLOW when the value is INT64_MAX already (asyncio's integers
 * have no limit).  Nothing changes on an error. */
int evl_sem_release(evl_sem *sem);
/* 1 if an acquire would wait (asyncio's locked()). */
int evl_sem_locked(const evl_sem *sem);
/* The free units. */
int64_t evl_sem_value(const evl_sem *sem);

enum evl_queue_kind {
    EVL_QUEUE_FIFO = 0,                /* asyncio.Queue */
    EVL_QUEUE_LIFO = 1,                /* asyncio.LifoQueue */
    /* asyncio.PriorityQueue holding (key, item) tuples: the smallest key
     * first; equal keys give the smallest item first (tuples compare
     * element by element), not the first put.  For FIFO order among equal
     * priorities put a sequence number in the key, or in the item. */
    EVL_QUEUE_PRIORITY = 2,
};

struct evl__qent;
/* asyncio.Queue and its subclasses; items are intptr_t. */
typedef struct evl_queue {
    evl__syncq evl__getters, evl__putters;
    evl_event evl__finished;           /* set while nothing is unfinished */
    evl_loop *evl__loop;
    struct evl__qent *evl__buf;        /* ring (FIFO), stack (LIFO) or heap */
    size_t evl__cap, evl__head, evl__len;
    size_t evl__maxsize;
    uint64_t evl__unfinished;          /* put, not yet task_done */
    int evl__kind;
} evl_queue;

/* An empty queue of kind (enum evl_queue_kind) holding at most maxsize
 * items, 0 for no limit.  Storage grows as items come (up to maxsize).
 * Returns 0 or EVL_EINVAL (unknown kind). */
int evl_queue_init(evl_queue *q, int kind, size_t maxsize);
/* Free q's storage; the items still in it are dropped.  No task may wait
 * on q.  q may be initialised again afterwards. */
void evl_queue_destroy(evl_queue *q);
/* Task only.  Put item, waiting (reason "queue_put") while q is full.
 * Returns 0, EVL_ECANCELED (nothing put) or EVL_ENOMEM. */
int evl_queue_put(evl_queue *q, intptr_t item);
/* Put item if q is not full: 0, EVL_EAGAIN (QueueFull) or EVL_ENOMEM.
 * Wakes the first getter. */
int evl_queue_put_nowait(evl_queue *q, intptr_t item);
/* The same with a priority key (EVL_QUEUE_PRIORITY; other kinds ignore
 * it).  evl_queue_put uses key 0. */
int evl_queue_put_key(evl_queue *q, int64_t key, intptr_t item);
int evl_queue_put_key_nowait(evl_queue *q, int64_t key, intptr_t item);
/* Task only.  Take the next item into *item (item may be NULL), waiting
 * (reason "queue_get") while q is empty.  Returns 0 or EVL_ECANCELED
 * (nothing taken; a wakeup meant for this task is passed on). */
int evl_queue_get(evl_queue *q, intptr_t *item);
/* Take the next item if there is one: 0 or EVL_EAGAIN (QueueEmpty).
 * Wakes the first putter. */
int evl_queue_get_nowait(evl_queue *q, intptr_t *item);
/* One item put earlier has been processed; when none is left unfinished,
 * joiners wake.  Returns 0, or EVL_EINVAL if called more times than items
 * were put (ValueError). */
int evl_queue_task_done(evl_queue *q);
/* Task only.  Wait (reason "queue_join") until every item put has been
 * task_done; returns 0 at once if none is unfinished, or EVL_ECANCELED. */
int evl_queue_join(evl_queue *q);
size_t evl_queue_qsize(const evl_queue *q);
size_t evl_queue_maxsize(const evl_queue *q);
int evl_queue_empty(const evl_queue *q);
/* 1 if q holds maxsize items (never for maxsize 0). */
int evl_queue_full(const evl_queue *q);

#ifdef __cplusplus
}
#endif
#endif /* EVL_H */
