/*
 * scenarios_tasks.c -- the libevl side of the task-level scenarios
 * (cancelling/uncancel, shield, wait, as_completed, timeout scopes, task
 * groups): each sc_tasks_<name> is a line-by-line translation of
 * tests/diff/py/tasks_<name>.py.
 *
 * These functions have external linkage: scenarios.c's table (built from
 * scenario-list.h) sees their declarations through a header that
 * CMakeLists.txt generates from the `intptr_t sc_<name>(void *arg)` lines
 * of this file.  The helpers and output conventions all files share are
 * scenario_common.h's.
 */
#define _POSIX_C_SOURCE 200809L

#include "evl.h"
#include "scenario_common.h"
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- helpers */

/* The calling task's count of cancellation requests. */
static int cancelling(void)
{
    return evl_task_cancelling(NULL);
}

/* Named workers: sleep ms then return value (ok) or fail with -EIO (bad). */
struct worker {
    const char *name;
    int ms;
    intptr_t value;
};

static intptr_t ok(void *arg)
{
    const struct worker *w = arg;
    say("%s start", w->name);
    intptr_t r = evl_sleep(EVL_MS(w->ms));
    if (r < 0)
        return r;
    say("%s done", w->name);
    return w->value;
}

static intptr_t bad(void *arg)
{
    const struct worker *w = arg;
    say("%s start", w->name);
    intptr_t r = evl_sleep(EVL_MS(w->ms));
    if (r < 0)
        return r;
    say("%s fails", w->name);
    return -EIO;
}

/* Sleeps 1 s; prints and re-raises a cancellation. */
static intptr_t sibling(void *arg)
{
    const char *name = arg;
    say("%s start", name);
    if (evl_sleep(EVL_SEC(1)) == EVL_ECANCELED) {
        say("%s cancelled", name);
        return EVL_ECANCELED;
    }
    return 0;
}

/* " ".join(sorted(names)) or "-": the callers list futures in a fixed
 * order that is also the names' sorted order. */
static const char *names(evl_future *const *fs, size_t n)
{
    static char bufs[2][128];
    static unsigned next;
    char *b = bufs[next++ % 2];
    size_t len = 0;
    b[0] = 0;
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(b + len, sizeof bufs[0] - len, "%s%s", i ? " " : "",
                                evl_task_name(fs[i]));
    return n ? b : "-";
}

static void unref_all(evl_future *const *fs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        evl_future_unref(fs[i]);
}

/* ---------------------------------------------------- tasks_cancelling */

static intptr_t cn_child(void *arg)
{
    (void)arg;
    say("child start");
    intptr_t r = evl_sleep(EVL_SEC(1));
    if (r < 0)
        return r;
    say("child end");
    return 1;
}

static intptr_t cn_awaiter(void *arg)
{
    intptr_t r = evl_await(arg);
    if (r == EVL_ECANCELED) {
        say("awaiter cancelled, cancelling %d", cancelling());
        if (cancelling())
            return EVL_ECANCELED;
        return 2;
    }
    return 0;
}

intptr_t sc_tasks_cancelling(void *arg)
{
    (void)arg;
    evl_task *c1 = spawn("c1", cn_child, NULL);
    evl_task *a1 = spawn("a1", cn_awaiter, c1);
    evl_sleep(0);
    evl_sleep(0);
    say("cancel child -> %d", evl_cancel(c1));
    say("a1 -> %s", str_of(await_drop(a1)));
    say("c1 %s cancelling %d", tstate(c1), evl_task_cancelling(c1));
    int c = evl_cancel(c1);
    say("cancel done child -> %d cancelling %d", c, evl_task_cancelling(c1));
    evl_task *c2 = spawn("c2", cn_child, NULL);
    evl_task *a2 = spawn("a2", cn_awaiter, c2);
    evl_sleep(0);
    evl_sleep(0);
    say("cancel awaiter -> %d", evl_cancel(a2));
    say("a2 cancelling %d c2 cancelling %d", evl_task_cancelling(a2), evl_task_cancelling(c2));
    say("a2 -> %s", str_of(evl_await(a2)));
    say("c2 %s a2 %s", tstate(c2), tstate(a2));
    say("main cancelling %d", cancelling());
    evl_future_unref(c1);
    evl_future_unref(c2);
    evl_future_unref(a2);
    return 0;
}

/* ------------------------------------------------------ tasks_uncancel */

static intptr_t un_sleeper(void *arg)
{
    (void)arg;
    if (evl_sleep(EVL_SEC(1)) == EVL_ECANCELED) {
        say("sleeper cancelled, cancelling %d", cancelling());
        say("sleeper uncancel -> %d", evl_task_uncancel(NULL));
    }
    if (evl_sleep(EVL_SEC(1)) == EVL_ECANCELED)
        say("sleeper cancelled again, cancelling %d", cancelling());
    say("sleeper uncancel -> %d", evl_task_uncancel(NULL));
    say("sleeper uncancel -> %d", evl_task_uncancel(NULL));
    say("sleeper uncancel at 0 -> %d", evl_task_uncancel(NULL));
    return 3;
}

intptr_t sc_tasks_uncancel(void *arg)
{
    (void)arg;
    evl_task *t = spawn("sleeper", un_sleeper, NULL);
    evl_sleep(0);
    say("cancel -> %d", evl_cancel(t));
    say("cancel -> %d", evl_cancel(t));
    say("t cancelling %d", evl_task_cancelling(t));
    evl_sleep(0);
    evl_sleep(0);
    say("t cancelling %d", evl_task_cancelling(t));
    say("cancel -> %d", evl_cancel(t));
    say("t -> %s", str_of(evl_await(t)));
    say("t %s cancelling %d", tstate(t), evl_task_cancelling(t));
    evl_future_unref(t);
    return 0;
}

/* -------------------------------------------------- tasks_shield_outer */

static intptr_t sh_inner_work(void *arg)
{
    int ms = AINT(arg);
    say("inner start");
    intptr_t r = evl_sleep(EVL_MS(ms));
    if (r < 0)
        return r;
    say("inner done");
    return 5;
}

/* guarded(): re-raise (outer scenario) or swallow with 9 (inner one). */
struct guarded {
    evl_task *inner;
    int swallow;
};

static intptr_t sh_guarded(void *arg)
{
    struct guarded *g = arg;
    evl_future *s = must_ptr(evl_shield(g->inner), "evl_shield");
    intptr_t r = evl_await(s);
    evl_future_unref(s);
    if (r == EVL_ECANCELED) {
        say("guarded cancelled, cancelling %d", cancelling());
        return g->swallow ? 9 : EVL_ECANCELED;
    }
    say("guarded got %s", str_of(r));
    return r;
}

static intptr_t sh_quick(void *arg)
{
    (void)arg;
    say("quick start");
    evl_sleep(0);
    say("quick end");
    return 7;
}

intptr_t sc_tasks_shield_outer(void *arg)
{
    (void)arg;
    evl_task *inner = spawn("inner", sh_inner_work, IARG(20));
    struct guarded ga = {inner, 0};
    evl_task *g = spawn("guarded", sh_guarded, &ga);
    evl_sleep(EVL_MS(10));
    say("cancel guarded -> %d", evl_cancel(g));
    say("guarded -> %s", str_of(await_drop(g)));
    say("inner %s", tstate(inner));
    say("inner -> %s", str_of(evl_await(inner)));
    evl_future *s = must_ptr(evl_shield(inner), "evl_shield");
    say("shield of done is inner: %s", tf(s == inner));
    evl_future_unref(s);
    evl_task *tk = spawn("tk", ticker, IARG(6));
    evl_task *q = spawn("quick", sh_quick, NULL);
    s = must_ptr(evl_shield(q), "evl_shield");
    say("shielded quick -> %s", str_of(evl_await(s)));
    evl_future_unref(s);
    await_drop(tk);
    evl_future_unref(q);
    evl_future_unref(inner);
    return 0;
}

/* -------------------------------------------------- tasks_shield_inner */

intptr_t sc_tasks_shield_inner(void *arg)
{
    (void)arg;
    evl_task *inner = spawn("inner", sh_inner_work, IARG(50));
    struct guarded ga = {inner, 1};
    evl_task *g = spawn("guarded", sh_guarded, &ga);
    evl_sleep(EVL_MS(10));
    say("cancel inner -> %d", evl_cancel(inner));
    say("guarded -> %s", str_of(evl_await(g)));
    say("inner %s guarded %s", tstate(inner), tstate(g));
    evl_future_unref(g);
    evl_future_unref(inner);
    return 0;
}

/* ---------------------------------------------------- tasks_wait_modes */

/* asyncio.wait + the two sorted name lists. */
static void wait_say(const char *label, evl_future *const *fs, size_t n, int mode,
                     uint64_t timeout)
{
    evl_future *done[8], *pending[8];
    size_t nd, np;
    must(evl_wait(fs, n, mode, timeout, done, &nd, pending, &np), "evl_wait");
    say("%s done %s pending %s", label, names(done, nd), names(pending, np));
}

intptr_t sc_tasks_wait_modes(void *arg)
{
    (void)arg;
    static struct worker wa = {"a", 10, 1}, wb = {"b", 30, 2}, wc = {"c", 10, 3},
                         wd = {"d", 20, 0}, we = {"e", 40, 4}, wf = {"f", 10, 5},
                         wg = {"g", 20, 6}, wh = {"h", 30, 7}, wi = {"i", 20, 8},
                         wj = {"j", 10, 0};
    evl_future *ab[] = {spawn("a", ok, &wa), spawn("b", ok, &wb)};
    wait_say("first_completed", ab, 2, EVL_FIRST_COMPLETED, EVL_NO_TIMEOUT);
    say("b -> %s", str_of(evl_await(ab[1])));
    unref_all(ab, 2);

    evl_future *cde[] = {spawn("c", ok, &wc), spawn("d", bad, &wd), spawn("e", ok, &we)};
    wait_say("first_exception", cde, 3, EVL_FIRST_EXCEPTION, EVL_NO_TIMEOUT);
    say("d -> %s", str_of(evl_future_result(cde[1])));
    say("e -> %s", str_of(evl_await(cde[2])));
    unref_all(cde, 3);

    evl_future *fgh[] = {spawn("f", ok, &wf), spawn("g", ok, &wg), spawn("h", ok, &wh)};
    evl_sleep(0);
    say("cancel g -> %d", evl_cancel(fgh[1]));
    wait_say("first_exception no error", fgh, 3, EVL_FIRST_EXCEPTION, EVL_NO_TIMEOUT);
    unref_all(fgh, 3);

    evl_task *i = spawn("i", ok, &wi), *j = spawn("j", bad, &wj);
    evl_future *iji[] = {i, j, i};
    wait_say("all_completed", iji, 3, EVL_ALL_COMPLETED, EVL_NO_TIMEOUT);
    say("i -> %s j -> %s", str_of(evl_future_result(i)), str_of(evl_future_result(j)));
    evl_future_unref(i);
    evl_future_unref(j);

    evl_future *fut = must_ptr(evl_future_new(NULL), "evl_future_new");
    evl_future_set_result(fut, 9);
    evl_task *tk = spawn("tk", ticker, IARG(4));
    size_t nd, np;
    must(evl_wait(&fut, 1, EVL_ALL_COMPLETED, EVL_NO_TIMEOUT, NULL, &nd, NULL, &np), "evl_wait");
    say("already done: done %zu pending %zu", nd, np);
    await_drop(tk);
    evl_future_unref(fut);
    return 0;
}

/* --------------------------------------------------- tasks_wait_timeout */

static intptr_t wt_waiter(void *arg)
{
    evl_future **fs = arg;
    evl_future *done[1];
    size_t nd;
    int r = evl_wait(fs, 1, EVL_ALL_COMPLETED, EVL_NO_TIMEOUT, done, &nd, NULL, NULL);
    if (r == EVL_ECANCELED) {
        say("waiter cancelled");
        return r;
    }
    must(r, "evl_wait");
    say("waiter done %s", names(done, nd));
    return 0;
}

intptr_t sc_tasks_wait_timeout(void *arg)
{
    (void)arg;
    static struct worker wa = {"a", 30, 1}, wb = {"b", 10, 2}, wc = {"c", 10, 3},
                         wd = {"d", 30, 4};
    evl_future *ab[] = {spawn("a", ok, &wa), spawn("b", ok, &wb)};
    /* sorted names: print pending (a) and done (b) from arrays in that order */
    wait_say("timeout", ab, 2, EVL_ALL_COMPLETED, EVL_MS(20));
    say("a %s", tstate(ab[0]));
    say("a -> %s", str_of(evl_await(ab[0])));
    unref_all(ab, 2);

    evl_future *c[] = {spawn("c", ok, &wc)};
    wait_say("in time", c, 1, EVL_ALL_COMPLETED, EVL_MS(50));
    unref_all(c, 1);

    evl_future *d[] = {spawn("d", ok, &wd)};
    evl_task *w = spawn("waiter", wt_waiter, d);
    evl_sleep(EVL_MS(10));
    say("cancel waiter -> %d", evl_cancel(w));
    say("waiter -> %s", str_of(await_drop(w)));
    say("d %s", tstate(d[0]));
    say("d -> %s", str_of(evl_await(d[0])));
    unref_all(d, 1);
    return 0;
}

/* --------------------------------------------------- tasks_as_completed */

static void ac_finish(evl_loop *loop, void *arg)
{
    (void)loop;
    evl_future **f = arg;
    say("finish");
    evl_future_set_result(f[1], 22);
    evl_future_set_result(f[0], 11);
}

/* for aw in as_completed(fs, timeout): say(label -> outcome) */
static void ac_loop(const char *label, evl_future *const *fs, size_t n, uint64_t timeout)
{
    evl_as_completed *it = must_ptr(evl_as_completed_new(NULL, fs, n, timeout),
                                    "evl_as_completed_new");
    intptr_t r;
    while ((r = evl_as_completed_next(it, NULL)) != EVL_EDONE)
        say("%s -> %s", label, str_of(r));
    must(evl_as_completed_free(it), "evl_as_completed_free");
}

intptr_t sc_tasks_as_completed(void *arg)
{
    (void)arg;
    static struct worker wa = {"a", 30, 1}, wb = {"b", 10, 2}, wc = {"c", 20, 0},
                         wd = {"d", 10, 4}, we = {"e", 40, 5}, wf = {"f", 50, 6};
    evl_task *a = spawn("a", ok, &wa), *b = spawn("b", ok, &wb), *c = spawn("c", bad, &wc);
    evl_future *abcb[] = {a, b, c, b};
    ac_loop("next", abcb, 4, EVL_NO_TIMEOUT);
    evl_future_unref(a);
    evl_future_unref(b);
    evl_future_unref(c);

    evl_future *f[] = {must_ptr(evl_future_new(NULL), "evl_future_new"),
                       must_ptr(evl_future_new(NULL), "evl_future_new")};
    evl_task *tk = spawn("tk", ticker, IARG(5));
    must(evl_call_soon(evl_loop_current(), ac_finish, f), "evl_call_soon");
    ac_loop("futures next", f, 2, EVL_NO_TIMEOUT);
    await_drop(tk);
    unref_all(f, 2);

    evl_future *def[] = {spawn("d", ok, &wd), spawn("e", ok, &we), spawn("f", ok, &wf)};
    ac_loop("timed next", def, 3, EVL_MS(20));
    say("e -> %s", str_of(evl_await(def[1])));
    say("f -> %s", str_of(evl_await(def[2])));
    unref_all(def, 3);
    return 0;
}

/* ------------------------------------------------ tasks_timeout_expiry */

intptr_t sc_tasks_timeout_expiry(void *arg)
{
    (void)arg;
    evl_timeout cm;
    must(evl_timeout_enter(&cm, EVL_MS(10)), "evl_timeout_enter");
    intptr_t r;
    say("when set %s", tf(evl_timeout_when(&cm) != EVL_NO_TIMEOUT));
    r = evl_sleep(EVL_MS(50));
    if (r >= 0)
        say("not reached");
    if (evl_timeout_exit(&cm, r) == EVL_ETIMEDOUT)
        say("timeout caught");
    say("expired %s cancelling %d", tf(evl_timeout_expired(&cm)), cancelling());

    evl_timeout cm2;
    must(evl_timeout_enter(&cm2, EVL_MS(50)), "evl_timeout_enter");
    r = evl_sleep(EVL_MS(10));
    if (r >= 0)
        say("body done");
    must(evl_timeout_exit(&cm2, r), "evl_timeout_exit");
    say("expired %s", tf(evl_timeout_expired(&cm2)));

    evl_timeout cm3;
    must(evl_timeout_enter(&cm3, EVL_MS(10)), "evl_timeout_enter");
    if (evl_sleep(EVL_MS(50)) == EVL_ECANCELED)
        say("body swallowed, cancelling %d", cancelling());
    must(evl_timeout_exit(&cm3, 0), "evl_timeout_exit");
    say("after swallow expired %s cancelling %d", tf(evl_timeout_expired(&cm3)), cancelling());

    evl_task *tk = spawn("tk", ticker, IARG(4));
    evl_timeout z;
    must(evl_timeout_enter(&z, 0), "evl_timeout_enter");
    say("zero body");
    r = evl_sleep(0);
    if (r >= 0)
        say("not reached");
    if (evl_timeout_exit(&z, r) == EVL_ETIMEDOUT)
        say("zero timeout");
    await_drop(tk);

    evl_timeout cm4;
    must(evl_timeout_enter(&cm4, EVL_NO_TIMEOUT), "evl_timeout_enter");
    say("when none %s", tf(evl_timeout_when(&cm4) == EVL_NO_TIMEOUT));
    r = evl_sleep(EVL_MS(10));
    must(evl_timeout_exit(&cm4, r), "evl_timeout_exit");
    say("none expired %s", tf(evl_timeout_expired(&cm4)));
    return 0;
}

/* -------------------------------------------- tasks_timeout_reschedule */

intptr_t sc_tasks_timeout_reschedule(void *arg)
{
    (void)arg;
    evl_loop *loop = evl_loop_current();
    evl_timeout cm;
    must(evl_timeout_enter(&cm, EVL_MS(10)), "evl_timeout_enter");
    intptr_t r;
    must(evl_timeout_reschedule(&cm, evl_now(loop) + EVL_MS(30)), "reschedule");
    r = evl_sleep(EVL_MS(20));
    if (r >= 0) {
        say("past the first deadline");
        must(evl_timeout_reschedule(&cm, EVL_NO_TIMEOUT), "reschedule");
        say("when none %s", tf(evl_timeout_when(&cm) == EVL_NO_TIMEOUT));
        r = evl_sleep(EVL_MS(20));
    }
    if (r >= 0) {
        say("no deadline");
        must(evl_timeout_reschedule(&cm, evl_now(loop)), "reschedule");
        r = evl_sleep(EVL_SEC(1));
    }
    if (r >= 0)
        say("not reached");
    if (evl_timeout_exit(&cm, r) == EVL_ETIMEDOUT)
        say("rescheduled timeout, expired %s", tf(evl_timeout_expired(&cm)));
    if (evl_timeout_reschedule(&cm, EVL_NO_TIMEOUT) == EVL_EINVAL)
        say("reschedule after exit refused");
    else
        say("reschedule after exit accepted");

    evl_timeout cm2;
    must(evl_timeout_enter(&cm2, EVL_NO_TIMEOUT), "evl_timeout_enter");
    must(evl_timeout_reschedule(&cm2, evl_now(loop) + EVL_MS(50)), "reschedule");
    r = evl_sleep(EVL_MS(10));
    if (r >= 0)
        say("in time after reschedule");
    must(evl_timeout_exit(&cm2, r), "evl_timeout_exit");
    say("expired %s", tf(evl_timeout_expired(&cm2)));
    return 0;
}

/* ------------------------------------------------ tasks_timeout_nested */

intptr_t sc_tasks_timeout_nested(void *arg)
{
    (void)arg;
    evl_loop *loop = evl_loop_current();
    intptr_t r;

    evl_timeout outer, inner;
    must(evl_timeout_enter(&outer, EVL_MS(50)), "evl_timeout_enter");
    must(evl_timeout_enter(&inner, EVL_MS(10)), "evl_timeout_enter");
    r = evl_timeout_exit(&inner, evl_sleep(EVL_SEC(1)));
    if (r == EVL_ETIMEDOUT) {
        say("inner timeout, outer expired %s", tf(evl_timeout_expired(&outer)));
        r = evl_sleep(EVL_MS(10));
        if (r >= 0)
            say("outer body goes on");
    }
    must(evl_timeout_exit(&outer, r), "evl_timeout_exit");
    say("outer expired %s", tf(evl_timeout_expired(&outer)));

    evl_timeout outer2, inner2;
    must(evl_timeout_enter(&outer2, EVL_MS(10)), "evl_timeout_enter");
    must(evl_timeout_enter(&inner2, EVL_MS(50)), "evl_timeout_enter");
    r = evl_timeout_exit(&inner2, evl_sleep(EVL_SEC(1)));
    if (r == EVL_ECANCELED)
        say("inner2 passes the cancellation, expired %s", tf(evl_timeout_expired(&inner2)));
    if (evl_timeout_exit(&outer2, r) == EVL_ETIMEDOUT)
        say("outer2 timeout, expired %s cancelling %d", tf(evl_timeout_expired(&outer2)),
            cancelling());

    uint64_t when = evl_now(loop) + EVL_MS(10);
    evl_timeout o3, i3;
    must(evl_timeout_enter_at(&o3, when), "evl_timeout_enter_at");
    must(evl_timeout_enter_at(&i3, when), "evl_timeout_enter_at");
    r = evl_timeout_exit(&i3, evl_sleep(EVL_SEC(1)));
    if (r == EVL_ECANCELED)
        say("i3 expired %s, cancelling %d, passes it on", tf(evl_timeout_expired(&i3)),
            cancelling());
    if (evl_timeout_exit(&o3, r) == EVL_ETIMEDOUT)
        say("o3 timeout, expired %s cancelling %d", tf(evl_timeout_expired(&o3)), cancelling());
    return 0;
}

/* ------------------------------------------------ tasks_timeout_cancel */

static intptr_t tc_body(void *arg)
{
    evl_timeout cm;
    must(evl_timeout_enter(&cm, 0), "evl_timeout_enter");
    intptr_t r = evl_timeout_exit(&cm, evl_await(arg));
    if (r == EVL_ETIMEDOUT) {
        say("body timeout");
        return 1;
    }
    if (r == EVL_ECANCELED) {
        say("body cancellation kept, expired %s cancelling %d", tf(evl_timeout_expired(&cm)),
            cancelling());
        return r;
    }
    return 0;
}

intptr_t sc_tasks_timeout_cancel(void *arg)
{
    (void)arg;
    evl_future *fut = must_ptr(evl_future_new(NULL), "evl_future_new");
    evl_task *t = spawn("body", tc_body, fut);
    evl_sleep(0);
    say("cancel body -> %d", evl_cancel(t));
    say("body -> %s", str_of(evl_await(t)));
    say("body %s fut cancelled %s", tstate(t),
        tf(evl_future_state(fut) == EVL_FUTURE_CANCELLED));
    evl_future_unref(t);
    evl_future_unref(fut);
    return 0;
}

/* ------------------------------------------- tasks_timeout_cancelling */

/* Sleep until cancelled; catch it and do not uncancel. */
static void caught(const char *name)
{
    if (evl_sleep(EVL_SEC(1)) == EVL_ECANCELED)
        say("%s caught, cancelling %d", name, cancelling());
}

static intptr_t tcc_a(void *arg)
{
    (void)arg;
    caught("a");
    evl_timeout cm;
    must(evl_timeout_enter(&cm, EVL_MS(10)), "evl_timeout_enter");
    intptr_t r = evl_timeout_exit(&cm, evl_sleep(EVL_SEC(1)));
    if (r < 0)
        return r;
    say("a not reached");
    return 1;
}

static intptr_t tcc_b(void *arg)
{
    caught("b");
    evl_timeout cm;
    must(evl_timeout_enter(&cm, 0), "evl_timeout_enter");
    intptr_t r = evl_timeout_exit(&cm, evl_await(arg));
    if (r == EVL_ETIMEDOUT) {
        say("b timeout");
        return 2;
    }
    if (r == EVL_ECANCELED) {
        say("b cancellation kept, expired %s cancelling %d", tf(evl_timeout_expired(&cm)),
            cancelling());
        return r;
    }
    return 0;
}

static intptr_t tcc_c(void *arg)
{
    (void)arg;
    caught("c");
    uint64_t when = evl_now(evl_loop_current()) + EVL_MS(10);
    evl_timeout outer, inner;
    must(evl_timeout_enter_at(&outer, when), "evl_timeout_enter_at");
    must(evl_timeout_enter_at(&inner, when), "evl_timeout_enter_at");
    intptr_t r = evl_timeout_exit(&inner, evl_sleep(EVL_SEC(1)));
    if (r == EVL_ECANCELED)
        say("c inner expired %s cancelling %d, passes it on", tf(evl_timeout_expired(&inner)),
            cancelling());
    r = evl_timeout_exit(&outer, r);
    if (r == EVL_ETIMEDOUT)
        say("c outer timeout, expired %s cancelling %d", tf(evl_timeout_expired(&outer)),
            cancelling());
    else if (r < 0)
        return r;
    return 3;
}

intptr_t sc_tasks_timeout_cancelling(void *arg)
{
    (void)arg;
    evl_task *a = spawn("a", tcc_a, NULL);
    evl_sleep(0);
    say("cancel a -> %d", evl_cancel(a));
    const char *ra = str_of(evl_await(a));
    say("a -> %s, %s, cancelling %d", ra, tstate(a), evl_task_cancelling(a));
    evl_future_unref(a);

    evl_future *fut = must_ptr(evl_future_new(NULL), "evl_future_new");
    evl_task *b = spawn("b", tcc_b, fut);
    evl_sleep(0);
    say("cancel b -> %d", evl_cancel(b));
    evl_sleep(0);
    say("cancel b again -> %d", evl_cancel(b));
    const char *rb = str_of(evl_await(b));
    say("b -> %s, %s, fut cancelled %s", rb, tstate(b),
        tf(evl_future_state(fut) == EVL_FUTURE_CANCELLED));
    evl_future_unref(b);
    evl_future_unref(fut);

    evl_task *c = spawn("c", tcc_c, NULL);
    evl_sleep(0);
    say("cancel c -> %d", evl_cancel(c));
    const char *rc = str_of(evl_await(c));
    say("c -> %s, %s", rc, tstate(c));
    evl_future_unref(c);
    return 0;
}

/* ------------------------------------------------- tasks_taskgroup_ok */

static intptr_t tg_quick(void *arg)
{
    (void)arg;
    say("quick start");
    evl_sleep(0);
    say("quick end");
    return 7;
}

static intptr_t tg_spawner(void *arg)
{
    static struct worker late = {"late", 10, 3};
    evl_sleep(EVL_MS(10));
    evl_future_unref(must_ptr(evl_taskgroup_spawn(arg, "late", ok, &late), "spawn"));
    say("spawned late");
    return 0;
}

intptr_t sc_tasks_taskgroup_ok(void *arg)
{
    (void)arg;
    static struct worker wa = {"a", 20, 1}, wb = {"b", 10, 2}, never = {"never", 10, 0};
    evl_taskgroup *g = must_ptr(evl_taskgroup_new(), "evl_taskgroup_new");
    evl_task *a = must_ptr(evl_taskgroup_spawn(g, "a", ok, &wa), "spawn");
    evl_task *b = must_ptr(evl_taskgroup_spawn(g, "b", ok, &wb), "spawn");
    say("body end");
    must(evl_taskgroup_exit(g, 0), "evl_taskgroup_exit");
    evl_taskgroup_free(g);
    say("group done a %s b %s", str_of(evl_future_result(a)), str_of(evl_future_result(b)));
    evl_future_unref(a);
    evl_future_unref(b);

    evl_taskgroup *g2 = must_ptr(evl_taskgroup_new(), "evl_taskgroup_new");
    evl_future_unref(must_ptr(evl_taskgroup_spawn(g2, "spawner", tg_spawner, g2), "spawn"));
    say("body2 end");
    must(evl_taskgroup_exit(g2, 0), "evl_taskgroup_exit");
    say("group2 done");
    evl_task *n = evl_taskgroup_spawn(g2, "never", ok, &never);
    say("spawn after exit %s", n ? "accepted" : "refused");
    evl_future_unref(n);
    evl_taskgroup_free(g2);

    evl_task *tk = spawn("tk", ticker, IARG(6));
    evl_taskgroup *g3 = must_ptr(evl_taskgroup_new(), "evl_taskgroup_new");
    evl_future_unref(must_ptr(evl_taskgroup_spawn(g3, "quick", tg_quick, NULL), "spawn"));
    must(evl_taskgroup_exit(g3, 0), "evl_taskgroup_exit");
    evl_taskgroup_free(g3);
    say("group3 done");
    await_drop(tk);
    return 0;
}

/* ---------------------------------------------- tasks_taskgroup_error */

intptr_t sc_tasks_taskgroup_error(void *arg)
{
    (void)arg;
    static struct worker ww = {"w", 10, 1}, wf = {"f", 20, 0};
    evl_taskgroup *g = must_ptr(evl_taskgroup_new(), "evl_taskgroup_new");
    evl_task *w = must_ptr(evl_taskgroup_spawn(g, "w", ok, &ww), "spawn");
    evl_task *s = must_ptr(evl_taskgroup_spawn(g, "s", sibling, "s"), "spawn");
    evl_task *f = must_ptr(evl_taskgroup_spawn(g, "f", bad, &wf), "spawn");
    intptr_t body = evl_sleep(EVL_SEC(1));
    if (body == EVL_ECANCELED)
        say("body cancelled, cancelling %d", cancelling());
    intptr_t r = evl_taskgroup_exit(g, body);
    if (r != EVL_EGROUP) {
        say("not reached");
    } else {
        int errs[1];
        size_t n = evl_taskgroup_errors(g, errs, 1);
        say("group errors %zu first %s", n, str_of(errs[0]));
    }
    evl_taskgroup_free(g);
    say("after group cancelling %d", cancelling());
    say("w %s s %s f %s", tstate(w), tstate(s), tstate(f));
    evl_sleep(EVL_MS(10));
    say("main goes on");
    evl_future_unref(w);
    evl_future_unref(s);
    evl_future_unref(f);
    return 0;
}

/* --------------------------------------------- tasks_taskgroup_errors */

intptr_t sc_tasks_taskgroup_errors(void *arg)
{
    (void)arg;
    static struct worker f1 = {"f1", 10, 0}, f2 = {"f2", 10, 0};
    evl_taskgroup *g = must_ptr(evl_taskgroup_new(), "evl_taskgroup_new");
    evl_future_unref(must_ptr(evl_taskgroup_spawn(g, "f1", bad, &f1), "spawn"));
    evl_future_unref(must_ptr(evl_taskgroup_spawn(g, "f2", bad, &f2), "spawn"));
    intptr_t body = evl_sleep(EVL_SEC(1));
    if (body == EVL_ECANCELED) {
        say("body cancelled, cancelling %d, raises", cancelling());
        body = -EIO;
    }
    if (evl_taskgroup_exit(g, body) == EVL_EGROUP)
        say("group errors %zu", evl_taskgroup_errors(g, NULL, 0));
    evl_taskgroup_free(g);
    say("after group cancelling %d", cancelling());

    evl_taskgroup *g2 = must_ptr(evl_taskgroup_new(), "evl_taskgroup_new");
    evl_task *s = must_ptr(evl_taskgroup_spawn(g2, "s", sibling, "s"), "spawn");
    evl_sleep(0);
    evl_task *n = must_ptr(evl_taskgroup_spawn(g2, "n", sibling, "n"), "spawn");
    say("body raises");
    if (evl_taskgroup_exit(g2, -EIO) == EVL_EGROUP) {
        int errs[2];
        size_t k = evl_taskgroup_errors(g2, errs, 2);
        say("group2 errors %zu first %s", k, str_of(errs[0]));
    }
    say("s %s n %s", tstate(s), tstate(n));
    evl_task *x = evl_taskgroup_spawn(g2, "x", sibling, "x");
    if (!x)
        say("spawn after exit refused");
    evl_future_unref(x);
    evl_taskgroup_free(g2);
    evl_future_unref(s);
    evl_future_unref(n);
    return 0;
}

/* --------------------------------------------- tasks_taskgroup_cancel */

static intptr_t tgc_parent(void *arg)
{
    int wait_in_body = AINT(arg);
    evl_taskgroup *g = must_ptr(evl_taskgroup_new(), "evl_taskgroup_new");
    evl_task *c = must_ptr(evl_taskgroup_spawn(g, "c", sibling, "c"), "spawn");
    intptr_t body = 0;
    if (wait_in_body)
        body = evl_sleep(EVL_SEC(1));
    if (body >= 0)
        say("body end");
    intptr_t r = evl_taskgroup_exit(g, body);
    evl_taskgroup_free(g);
    if (r == EVL_ECANCELED)
        say("parent cancelled, cancelling %d, child %s", cancelling(), tstate(c));
    evl_future_unref(c);
    return r < 0 ? r : 1;
}

intptr_t sc_tasks_taskgroup_cancel(void *arg)
{
    (void)arg;
    for (int wait_in_body = 1; wait_in_body >= 0; wait_in_body--) {
        evl_task *p = spawn("parent", tgc_parent, IARG(wait_in_body));
        evl_sleep(EVL_MS(10));
        say("cancel parent -> %d", evl_cancel(p));
        say("parent -> %s", str_of(await_drop(p)));
    }
    return 0;
}

/* ----------------------------------------- tasks_taskgroup_exit_error */

intptr_t sc_tasks_taskgroup_exit_error(void *arg)
{
    (void)arg;
    static struct worker wf = {"f", 10, 0};
    evl_taskgroup *g = must_ptr(evl_taskgroup_new(), "evl_taskgroup_new");
    evl_future_unref(must_ptr(evl_taskgroup_spawn(g, "s", sibling, "s"), "spawn"));
    evl_future_unref(must_ptr(evl_taskgroup_spawn(g, "f", bad, &wf), "spawn"));
    say("body end");
    if (evl_taskgroup_exit(g, 0) == EVL_EGROUP)
        say("group errors %zu", evl_taskgroup_errors(g, NULL, 0));
    evl_taskgroup_free(g);
    say("after group cancelling %d", cancelling());
    if (evl_sleep(0) == 0)
        say("sleep(0) fine");
    say("uncancel -> %d", evl_task_uncancel(NULL));
    return 0;
}
