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
    XX(EDEADLK,     (-EDEADLK),     "nothing left that could complete the future") \
    XX(ENOTTASK,    (-4001),        "not called from inside a task")          \
    XX(ENOTDONE,    (-4002),        "future is not done yet")                 \
    XX(EDONE,       (-4003),        "future is already done")                 \
    XX(EWRONGLOOP,  (-4004),        "object belongs to another loop")         \
    XX(ECLOSING,    (-4005),        "loop is closing")                        \
    XX(EABANDONED,  (-4006),        "future abandoned: nothing can complete it")

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

/* The loop's cached time: read once per iteration after the poll (like
 * libuv's uv_now).  Deadlines are computed from it. */
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

/* Task only.  Suspend until fut is done; return its result or error.  An
 * already-done future returns at once without suspending.  Returns
 * EVL_ECANCELED if the calling task is cancelled meanwhile, EVL_EINVAL when
 * a task awaits itself, EVL_EWRONGLOOP across loops. */
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

/* ------------------------------------------------------------------- io */

enum evl_io_events {
    EVL_READABLE = 1u << 0,
    EVL_WRITABLE = 1u << 1,
};

/* Task only.  Wait until fd is readable and/or writable (level-triggered);
 * returns the ready mask (errors and hang-ups count as both) or an error.
 * One reader and one writer per fd at a time: EVL_EBUSY otherwise. */
int evl_wait_fd(int fd, unsigned events);

/* Task only.  Socket helpers: fd must be non-blocking; EAGAIN is handled by
 * awaiting readiness.  They return what the syscall returns, or -errno. */
ssize_t evl_recv(int fd, void *buf, size_t len, int flags);
ssize_t evl_send(int fd, const void *buf, size_t len, int flags);
ssize_t evl_read(int fd, void *buf, size_t len);
ssize_t evl_write(int fd, const void *buf, size_t len);
/* The accepted socket is non-blocking and close-on-exec. */
int evl_accept(int fd, struct sockaddr *addr, socklen_t *addrlen);
int evl_connect(int fd, const struct sockaddr *addr, socklen_t addrlen);

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

#ifdef __cplusplus
}
#endif
#endif /* EVL_H */
