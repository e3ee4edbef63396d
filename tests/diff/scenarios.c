/*
 * scenarios.c -- the libevl side of the differential scenarios.
 *
 * Each sc_<name> below is the main task of one scenario and is a line-by-line
 * translation of tests/diff/py/<name>.py; run_diff.py runs both and compares
 * what they print.  The list of scenarios is scenario-list.h.
 *
 *   diff_scenarios NAME [--virtual]     run one scenario
 *   diff_scenarios --list               print the scenario names
 *
 * Output conventions (shared with py/common.py): one line per event, a
 * result prints as its number, an error as "error", a cancellation as
 * "cancelled", a timeout as "timeout".  A Python exception (Boom) is -EIO
 * here.  Exit status: 0, or 1 if the main task failed or tasks leaked.
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
#include <time.h>

/* ------------------------------------------------------------- helpers */

static evl_loop *L;

static evl_future *new_future(void)
{
    return must_ptr(evl_future_new(L), "evl_future_new");
}

/* A done-callback printing "<label> <outcome>". */
static void label_cb(evl_future *f, void *arg)
{
    say("%s %s", (const char *)arg, str_of(evl_future_result(f)));
}

/* A plain callback printing its label. */
static void cb_say(evl_loop *loop, void *arg)
{
    (void)loop;
    say("%s", (const char *)arg);
}

/* Shared task bodies: a named worker sleeping ms then returning value, and
 * one that fails with -EIO instead. */
struct worker {
    const char *name;
    int ms;
    intptr_t value;
};

static intptr_t worker(void *arg)
{
    const struct worker *w = arg;
    say("%s start", w->name);
    evl_sleep(EVL_MS(w->ms));
    say("%s done", w->name);
    return w->value;
}

static intptr_t bad_worker(void *arg)
{
    const struct worker *w = arg;
    say("%s start", w->name);
    evl_sleep(EVL_MS(w->ms));
    say("%s fails", w->name);
    return -EIO;
}

/* A named waiter on a future. */
struct waiter {
    const char *name;
    evl_future *fut;
};

/* ------------------------------------------------ create_task_vs_await */

static intptr_t cta_child(void *arg)
{
    const char *name = arg;
    say("%s start", name);
    evl_sleep(0);
    say("%s end", name);
    return (intptr_t)strlen(name);
}

static intptr_t sc_create_task_vs_await(void *arg)
{
    (void)arg;
    say("main start");
    evl_task *t = spawn("spawned", cta_child, "spawned");
    say("main created spawned");
    intptr_t r = cta_child("inline");
    say("main inline -> %s", str_of(r));
    r = await_drop(t);
    say("main spawned -> %s", str_of(r));
    r = cta_child("inline2");
    evl_task *t2 = spawn("spawned2", cta_child, "spawned2");
    say("main inline2 -> %s", str_of(r));
    r = await_drop(t2);
    say("main spawned2 -> %s", str_of(r));
    say("main end");
    return 0;
}

/* -------------------------------------------------------- equal_delays */

static intptr_t ed_sleeper(void *arg)
{
    const char *name = arg;
    say("%s sleep", name);
    evl_sleep(EVL_MS(10));
    say("%s woke", name);
    evl_sleep(0);
    say("%s after yield", name);
    evl_sleep(EVL_MS(10));
    say("%s woke again", name);
    return 0;
}

static intptr_t sc_equal_delays(void *arg)
{
    (void)arg;
    static const char *names[] = {"A", "B", "C"};
    evl_task *ts[3];
    for (int i = 0; i < 3; i++)
        ts[i] = spawn(names[i], ed_sleeper, (void *)names[i]);
    say("main spawned");
    evl_sleep(EVL_MS(10));
    say("main woke");
    for (int i = 0; i < 3; i++)
        await_drop(ts[i]);
    say("main end");
    return 0;
}

/* ---------------------------------------------------- different_delays */

struct dd_arg {
    const char *name;
    int first, second;
};

static intptr_t dd_sleeper(void *arg)
{
    const struct dd_arg *d = arg;
    say("%s sleep %d", d->name, d->first);
    evl_sleep(EVL_MS(d->first));
    say("%s woke at %d", d->name, d->first);
    evl_sleep(EVL_MS(d->second));
    say("%s woke at %d", d->name, d->first + d->second);
    return 0;
}

static intptr_t sc_different_delays(void *arg)
{
    (void)arg;
    static struct dd_arg args[] = {{"A", 30, 10}, {"B", 10, 50}, {"C", 20, 30}};
    evl_task *ts[3];
    for (int i = 0; i < 3; i++)
        ts[i] = spawn(args[i].name, dd_sleeper, &args[i]);
    for (int i = 0; i < 3; i++) {
        await_drop(ts[i]);
        say("main awaited one");
    }
    say("main end");
    return 0;
}

/* -------------------------------------------------------- gather_order */

static intptr_t sc_gather_order(void *arg)
{
    (void)arg;
    static struct worker w[] = {{"w30", 30, 1}, {"w10", 10, 2}, {"w20", 20, 3}};
    evl_future *ts[3];
    intptr_t res[3];
    for (int i = 0; i < 3; i++)
        ts[i] = spawn(w[i].name, worker, &w[i]);
    int rc = evl_gather(ts, 3, 0, res);
    if (rc == 0)
        say_results("gather -> ", res, 3);
    else
        say("gather -> %s", str_of(rc));
    for (int i = 0; i < 3; i++)
        evl_future_unref(ts[i]);
    return 0;
}

/* -------------------------------------------------- gather_first_error */

static intptr_t sc_gather_first_error(void *arg)
{
    (void)arg;
    static struct worker ok10 = {"ok10", 10, 1}, bad20 = {"bad20", 20, -EIO},
                         ok30 = {"ok30", 30, 3};
    evl_future *ts[3];
    intptr_t res[3];
    ts[0] = spawn("ok10", worker, &ok10);
    ts[1] = spawn("bad20", bad_worker, &bad20);
    ts[2] = spawn("ok30", worker, &ok30);
    int rc = evl_gather(ts, 3, 0, res);
    if (rc == 0)
        say_results("gather -> ", res, 3);
    else
        say("gather -> %s", str_of(rc));
    say("ok30 %s", evl_future_done(ts[2]) ? "done" : "pending");
    say("ok30 -> %s", str_of(await_drop(ts[2])));
    say("ok10 -> %s", str_of(await_drop(ts[0])));
    say("bad20 -> %s", str_of(await_drop(ts[1])));
    return 0;
}

/* ------------------------------------------------------ gather_collect */

static intptr_t gc_slow(void *arg)
{
    (void)arg;
    say("slow start");
    if (evl_sleep(EVL_SEC(1)) == EVL_ECANCELED) {
        say("slow cancelled");
        return EVL_ECANCELED;
    }
    return 4;
}

static intptr_t gc_canceller(void *arg)
{
    evl_sleep(EVL_MS(40));
    say("canceller: cancel slow -> %d", evl_cancel(arg));
    return 0;
}

static intptr_t sc_gather_collect(void *arg)
{
    (void)arg;
    static struct worker ok10 = {"ok10", 10, 1}, bad20 = {"bad20", 20, -EIO},
                         ok30 = {"ok30", 30, 3};
    evl_future *ts[4];
    intptr_t res[4];
    ts[0] = spawn("ok10", worker, &ok10);
    ts[1] = spawn("bad20", bad_worker, &bad20);
    ts[2] = spawn("ok30", worker, &ok30);
    ts[3] = spawn("slow", gc_slow, NULL);
    evl_task *c = spawn("canceller", gc_canceller, ts[3]);
    int rc = evl_gather(ts, 4, EVL_GATHER_COLLECT, res);
    if (rc == 0)
        say_results("gather -> ", res, 4);
    else
        say("gather -> %s", str_of(rc));
    say("canceller -> %s", str_of(await_drop(c)));
    for (int i = 0; i < 4; i++)
        evl_future_unref(ts[i]);
    return 0;
}

/* ------------------------------------------------- gather_wake_latency */

struct stepper_arg {
    const char *name;
    int n;
    intptr_t value;
};

static intptr_t stepper(void *arg)
{
    const struct stepper_arg *s = arg;
    for (int i = 0; i < s->n; i++) {
        say("%s step %d", s->name, i);
        evl_sleep(0);
    }
    say("%s done", s->name);
    return s->value;
}

static intptr_t sc_gather_wake_latency(void *arg)
{
    (void)arg;
    static struct stepper_arg a[] = {{"s1", 1, 1}, {"s3", 3, 3}, {"s2", 2, 2}};
    evl_task *tk = spawn("ticker", ticker, IARG(12));
    evl_future *ts[3];
    intptr_t res[3];
    for (int i = 0; i < 3; i++)
        ts[i] = spawn(a[i].name, stepper, &a[i]);
    int rc = evl_gather(ts, 3, 0, res);
    if (rc == 0)
        say_results("gather -> ", res, 3);
    else
        say("gather -> %s", str_of(rc));
    rc = evl_gather(ts, 3, 0, res);
    if (rc == 0)
        say_results("gather again -> ", res, 3);
    else
        say("gather again -> %s", str_of(rc));
    await_drop(tk);
    for (int i = 0; i < 3; i++)
        evl_future_unref(ts[i]);
    return 0;
}

/* -------------------------------------------------- sleep0_round_robin */

static intptr_t spinner(void *arg)
{
    const struct stepper_arg *s = arg;
    for (int i = 0; i < s->n; i++) {
        say("%s %d", s->name, i);
        evl_sleep(0);
    }
    say("%s done", s->name);
    return s->n;
}

static intptr_t sc_sleep0_round_robin(void *arg)
{
    (void)arg;
    static struct stepper_arg a[] = {{"A", 3, 0}, {"B", 5, 0}, {"C", 4, 0}};
    evl_task *ts[3];
    for (int i = 0; i < 3; i++)
        ts[i] = spawn(a[i].name, spinner, &a[i]);
    say("main yield");
    evl_sleep(0);
    say("main after yield");
    for (int i = 0; i < 3; i++)
        say("main awaited %s", str_of(await_drop(ts[i])));
    return 0;
}

/* ----------------------------------------------------- cancel_sleeping */

static intptr_t cs_sleeper(void *arg)
{
    (void)arg;
    say("sleeper start");
    if (evl_sleep(EVL_SEC(1)) == EVL_ECANCELED) {
        say("sleeper cancelled");
        return EVL_ECANCELED;
    }
    say("sleeper woke");
    return 0;
}

static intptr_t sc_cancel_sleeping(void *arg)
{
    (void)arg;
    evl_task *t = spawn("sleeper", cs_sleeper, NULL);
    evl_task *tk = spawn("ticker", ticker, IARG(6));
    evl_sleep(0);
    say("cancel -> %d", evl_cancel(t));
    say("cancel again -> %d", evl_cancel(t));
    say("sleeper state %s", tstate(t));
    say("sleeper -> %s", str_of(evl_await(t)));
    say("sleeper state %s", tstate(t));
    say("cancel done task -> %d", evl_cancel(t));
    evl_future_unref(t);
    await_drop(tk);
    return 0;
}

/* -------------------------------------------------- cancel_not_started */

static intptr_t cns_body(void *arg)
{
    (void)arg;
    say("body ran");
    return 1;
}

static intptr_t sc_cancel_not_started(void *arg)
{
    (void)arg;
    evl_task *tk = spawn("ticker", ticker, IARG(5));
    evl_task *t = spawn("body", cns_body, NULL);
    evl_future_add_done(t, label_cb, "done-callback");
    say("cancel -> %d", evl_cancel(t));
    say("state %s", tstate(t));
    evl_sleep(0);
    say("state %s", tstate(t));
    say("body -> %s", str_of(evl_await(t)));
    await_drop(tk);
    evl_future_unref(t);
    return 0;
}

/* ------------------------------------------------ cancel_awaiting_task */

static intptr_t cat_inner(void *arg)
{
    (void)arg;
    say("inner start");
    if (evl_sleep(EVL_SEC(1)) == EVL_ECANCELED) {
        say("inner cancelled");
        return EVL_ECANCELED;
    }
    return 1;
}

static intptr_t cat_outer(void *arg)
{
    say("outer start");
    intptr_t r = evl_await(arg);
    if (r == EVL_ECANCELED) {
        say("outer cancelled");
        return EVL_ECANCELED;
    }
    return r;
}

static intptr_t sc_cancel_awaiting_task(void *arg)
{
    (void)arg;
    evl_task *inn = spawn("inner", cat_inner, NULL);
    evl_task *out = spawn("outer", cat_outer, inn);
    evl_sleep(0);
    evl_task *tk = spawn("ticker", ticker, IARG(6));
    say("cancel outer -> %d", evl_cancel(out));
    say("outer -> %s", str_of(evl_await(out)));
    say("inner state %s", tstate(inn));
    await_drop(tk);
    evl_future_unref(out);
    evl_future_unref(inn);
    return 0;
}

/* ------------------------------------------------ cancel_woken_not_run */

struct cw_arg {
    evl_future *fut;
    evl_task *victim;
};

static intptr_t cw_waiter(void *arg)
{
    evl_future *fut = arg;
    say("B await fut");
    intptr_t r = evl_await(fut);
    if (r == EVL_ECANCELED)
        say("B cancelled after wake");
    else
        say("B got %s", str_of(r));
    r = evl_await(fut);
    say("B then got %s", str_of(r));
    return r;
}

static intptr_t cw_waker(void *arg)
{
    struct cw_arg *a = arg;
    say("A set result");
    evl_future_set_result(a->fut, 7);
    say("A cancel B -> %d", evl_cancel(a->victim));
    return 0;
}

static intptr_t cw_xsleep(void *arg)
{
    struct cw_arg *a = arg;
    say("X sleep");
    evl_sleep(EVL_MS(10));
    say("X woke, cancel Y -> %d", evl_cancel(a->victim));
    return 0;
}

static intptr_t cw_ysleep(void *arg)
{
    (void)arg;
    say("Y sleep");
    if (evl_sleep(EVL_MS(10)) == EVL_ECANCELED) {
        say("Y cancelled");
        return EVL_ECANCELED;
    }
    say("Y woke");
    return 0;
}

static intptr_t sc_cancel_woken_not_run(void *arg)
{
    (void)arg;
    static struct cw_arg ab, xy;
    ab.fut = new_future();
    evl_task *b = spawn("B", cw_waiter, ab.fut);
    ab.victim = b;
    evl_sleep(0);
    evl_task *a = spawn("A", cw_waker, &ab);
    say("B -> %s", str_of(await_drop(b)));
    say("A -> %s", str_of(await_drop(a)));
    evl_future_unref(ab.fut);

    evl_task *x = spawn("X", cw_xsleep, &xy);
    evl_task *y = spawn("Y", cw_ysleep, NULL);
    xy.victim = y;
    say("Y -> %s", str_of(await_drop(y)));
    say("X -> %s", str_of(await_drop(x)));
    return 0;
}

/* ------------------------------------------------------- cancel_gather */

static intptr_t cg_child(void *arg)
{
    const char *name = arg;
    say("%s start", name);
    if (evl_sleep(EVL_SEC(1)) == EVL_ECANCELED) {
        say("%s cancelled", name);
        return EVL_ECANCELED;
    }
    return 1;
}

static intptr_t cg_gatherer(void *arg)
{
    evl_future **ts = arg;
    say("gatherer await");
    int rc = evl_gather(ts, 2, 0, NULL);
    if (rc == EVL_ECANCELED) {
        say("gatherer cancelled");
        return EVL_ECANCELED;
    }
    return rc < 0 ? rc : 2;
}

static intptr_t sc_cancel_gather(void *arg)
{
    (void)arg;
    static evl_future *ts[2];
    ts[0] = spawn("c1", cg_child, "c1");
    ts[1] = spawn("c2", cg_child, "c2");
    evl_task *g = spawn("gatherer", cg_gatherer, ts);
    evl_sleep(0);
    evl_task *tk = spawn("ticker", ticker, IARG(7));
    say("cancel gatherer -> %d", evl_cancel(g));
    say("gatherer -> %s", str_of(evl_await(g)));
    say("states %s %s %s", tstate(ts[0]), tstate(ts[1]), tstate(g));
    await_drop(tk);
    evl_future_unref(g);
    evl_future_unref(ts[0]);
    evl_future_unref(ts[1]);
    return 0;
}

/* ------------------------------------------------ cancel_twice_swallow */

static intptr_t cts_stubborn(void *arg)
{
    (void)arg;
    say("stubborn start");
    if (evl_sleep(EVL_SEC(1)) == EVL_ECANCELED)
        say("stubborn caught 1");
    if (evl_sleep(0) == EVL_ECANCELED)
        say("stubborn caught 2");
    else
        say("stubborn yield ok");
    return 3;
}

static intptr_t sc_cancel_twice_swallow(void *arg)
{
    (void)arg;
    evl_task *t = spawn("stubborn", cts_stubborn, NULL);
    evl_sleep(0);
    say("cancel 1 -> %d", evl_cancel(t));
    say("cancel 2 -> %d", evl_cancel(t));
    say("stubborn -> %s", str_of(evl_await(t)));
    say("stubborn state %s", tstate(t));
    evl_future_unref(t);
    return 0;
}

/* ------------------------------------------------------ swallow_cancel */

static intptr_t sw_stubborn(void *arg)
{
    (void)arg;
    say("stubborn start");
    if (evl_sleep(EVL_SEC(1)) == EVL_ECANCELED)
        say("stubborn swallowed");
    else
        say("stubborn woke");
    evl_sleep(EVL_MS(10));
    say("stubborn slept again");
    return 42;
}

static intptr_t sc_swallow_cancel(void *arg)
{
    (void)arg;
    evl_task *t = spawn("stubborn", sw_stubborn, NULL);
    evl_sleep(0);
    say("cancel -> %d", evl_cancel(t));
    say("stubborn -> %s", str_of(evl_await(t)));
    say("stubborn state %s", tstate(t));
    evl_future_unref(t);
    return 0;
}

/* --------------------------------------------------------- self_cancel */

static intptr_t scl_quitter(void *arg)
{
    (void)arg;
    say("quitter start");
    say("quitter cancel self -> %d", evl_cancel(evl_current_task()));
    say("quitter returns 5");
    return 5;
}

static intptr_t scl_catcher(void *arg)
{
    (void)arg;
    say("catcher start");
    evl_cancel(evl_current_task());
    if (evl_sleep(0) == EVL_ECANCELED)
        say("catcher caught");
    else
        say("catcher not cancelled");
    evl_sleep(0);
    say("catcher returns 7");
    return 7;
}

static intptr_t sc_self_cancel(void *arg)
{
    (void)arg;
    evl_task *q = spawn("quitter", scl_quitter, NULL);
    evl_task *c = spawn("catcher", scl_catcher, NULL);
    say("quitter -> %s", str_of(evl_await(q)));
    say("catcher -> %s", str_of(evl_await(c)));
    say("states %s %s", tstate(q), tstate(c));
    evl_future_unref(q);
    evl_future_unref(c);
    return 0;
}

/* ---------------------------------------------------- self_cancel_fail */

static intptr_t scf_failer(void *arg)
{
    (void)arg;
    say("failer start");
    say("failer cancel self -> %d", evl_cancel(evl_current_task()));
    say("failer raises");
    return -EIO;
}

static intptr_t sc_self_cancel_fail(void *arg)
{
    (void)arg;
    evl_task *t = spawn("failer", scf_failer, NULL);
    say("failer -> %s", str_of(evl_await(t)));
    say("failer state %s", tstate(t));
    evl_future_unref(t);
    return 0;
}

/* ------------------------------------------------- future_many_waiters */

static intptr_t fmw_waiter(void *arg)
{
    const struct waiter *w = arg;
    say("%s wait", w->name);
    intptr_t r = evl_await(w->fut);
    say("%s got %s", w->name, str_of(r));
    evl_sleep(0);
    say("%s after yield", w->name);
    return 0;
}

static intptr_t fmw_setter(void *arg)
{
    say("setter start");
    evl_sleep(0);
    say("setter set");
    evl_future_set_result(arg, 7);
    say("setter after set");
    evl_sleep(0);
    say("setter after yield");
    return 0;
}

static intptr_t sc_future_many_waiters(void *arg)
{
    (void)arg;
    static struct waiter w[] = {{"W1", NULL}, {"W2", NULL}, {"W3", NULL}};
    evl_future *fut = new_future();
    evl_task *ts[4];
    for (int i = 0; i < 3; i++) {
        w[i].fut = fut;
        ts[i] = spawn(w[i].name, fmw_waiter, &w[i]);
    }
    ts[3] = spawn("setter", fmw_setter, fut);
    for (int i = 0; i < 4; i++)
        await_drop(ts[i]);
    say("main end");
    evl_future_unref(fut);
    return 0;
}

/* ---------------------------------------------------- future_cancelled */

static intptr_t fc_waiter(void *arg)
{
    say("waiter await");
    intptr_t r = evl_await(arg);
    if (r == EVL_ECANCELED)
        say("waiter saw cancelled");
    else
        say("waiter got %s", str_of(r));
    evl_sleep(0);
    say("waiter continues");
    return 1;
}

static intptr_t sc_future_cancelled(void *arg)
{
    (void)arg;
    evl_future *fut = new_future();
    evl_task *w = spawn("waiter", fc_waiter, fut);
    evl_sleep(0);
    say("cancel fut -> %d", evl_cancel(fut));
    say("cancel fut again -> %d", evl_cancel(fut));
    if (evl_future_set_result(fut, 1) == 0)
        say("set_result -> ok");
    else
        say("set_result -> already done");
    say("waiter -> %s", str_of(await_drop(w)));
    say("fut %s", evl_future_state(fut) == EVL_FUTURE_CANCELLED ? "cancelled" : "not cancelled");
    evl_future_unref(fut);
    return 0;
}

/* -------------------------------------------------------- future_error */

static intptr_t fe_waiter(void *arg)
{
    const struct waiter *w = arg;
    say("%s wait", w->name);
    say("%s -> %s", w->name, str_of(evl_await(w->fut)));
    return 0;
}

static void fe_fail(evl_loop *loop, void *arg)
{
    (void)loop;
    say("callback sets error");
    evl_future_set_error(arg, -EIO);
}

static intptr_t sc_future_error(void *arg)
{
    (void)arg;
    static struct waiter w[] = {{"W1", NULL}, {"W2", NULL}};
    evl_future *fut = new_future();
    w[0].fut = w[1].fut = fut;
    evl_task *w1 = spawn("W1", fe_waiter, &w[0]);
    evl_task *w2 = spawn("W2", fe_waiter, &w[1]);
    evl_call_soon(L, fe_fail, fut);
    await_drop(w1);
    await_drop(w2);
    say("main -> %s", str_of(evl_await(fut)));
    evl_future_unref(fut);
    return 0;
}

/* ------------------------------------------------ done_callbacks_order */

static intptr_t dco_waiter(void *arg)
{
    const struct waiter *w = arg;
    say("%s wait", w->name);
    intptr_t r = evl_await(w->fut);
    say("%s got %s", w->name, str_of(r));
    return r;
}

static intptr_t dco_short(void *arg)
{
    (void)arg;
    say("short run");
    return 5;
}

static intptr_t sc_done_callbacks_order(void *arg)
{
    (void)arg;
    static char cb1[] = "cb1", cb2[] = "cb2", cb3[] = "cb3", cb4[] = "cb4", cb5[] = "cb5";
    static struct waiter ww1 = {"W1", NULL}, ww2 = {"W2", NULL}, wtw = {"TW", NULL};
    evl_future *fut = new_future();
    ww1.fut = ww2.fut = fut;
    evl_task *w1 = spawn("W1", dco_waiter, &ww1);
    evl_sleep(0);
    evl_future_add_done(fut, label_cb, cb1);
    evl_task *w2 = spawn("W2", dco_waiter, &ww2);
    evl_future_add_done(fut, label_cb, cb2);
    evl_future_add_done(fut, label_cb, cb4);
    say("removed %d", evl_future_remove_done(fut, label_cb, cb4));
    evl_sleep(0);
    say("main set");
    evl_future_set_result(fut, 7);
    evl_future_add_done(fut, label_cb, cb3);
    say("main yield");
    evl_sleep(0);
    say("main after yield 1");
    evl_sleep(0);
    say("main after yield 2");
    await_drop(w1);
    await_drop(w2);

    evl_task *t = spawn("short", dco_short, NULL);
    wtw.fut = t;
    evl_task *tw = spawn("TW", dco_waiter, &wtw);
    evl_future_add_done(t, label_cb, cb5);
    intptr_t r = evl_await(t);
    say("main short -> %s", str_of(r));
    await_drop(tw);
    say("main end");
    evl_future_unref(t);
    evl_future_unref(fut);
    return 0;
}

/* ----------------------------------------------------- call_soon_later */

static void csl_nested(evl_loop *loop, void *arg)
{
    say("%s", (const char *)arg);
    evl_call_soon(loop, cb_say, "soon1-nested");
}

static intptr_t csl_task(void *arg)
{
    (void)arg;
    say("T run");
    evl_sleep(EVL_MS(40));
    say("T woke");
    return 1;
}

static intptr_t sc_call_soon_later(void *arg)
{
    (void)arg;
    evl_call_soon(L, csl_nested, "soon1");
    evl_task *t = spawn("T", csl_task, NULL);
    evl_call_soon(L, cb_say, "soon2");
    evl_call_later(L, EVL_MS(80), cb_say, "later80");
    evl_call_later(L, EVL_MS(40), cb_say, "later40a");
    evl_call_later(L, EVL_MS(40), cb_say, "later40b");
    say("main yield");
    evl_sleep(0);
    say("main after yield");
    evl_sleep(EVL_MS(120));
    say("main woke at 120");
    await_drop(t);
    say("main end");
    return 0;
}

/* ----------------------------------------------------- call_later_zero */

static intptr_t sc_call_later_zero(void *arg)
{
    (void)arg;
    evl_task *tk = spawn("ticker", ticker, IARG(4));
    evl_call_soon(L, cb_say, "soon a");
    evl_call_later(L, 0, cb_say, "later0 b");
    evl_call_soon(L, cb_say, "soon c");
    say("main yield");
    evl_sleep(0);
    say("main after yield");
    evl_call_later(L, 0, cb_say, "later0 d");
    evl_call_later(L, 0, cb_say, "later0 e");
    evl_sleep(0);
    say("main after yield 2");
    await_drop(tk);
    return 0;
}

/* ---------------------------------------------------- wait_for_timeout */

static intptr_t wft_slow(void *arg)
{
    (void)arg;
    say("slow start");
    if (evl_sleep(EVL_SEC(1)) == EVL_ECANCELED) {
        say("slow cancelled");
        return EVL_ECANCELED;
    }
    return 1;
}

static intptr_t sc_wait_for_timeout(void *arg)
{
    (void)arg;
    evl_task *t = spawn("slow", wft_slow, NULL);
    say("main wait_for 20ms");
    say("wait_for -> %s", str_of(evl_wait_for(t, EVL_MS(20))));
    say("slow state %s", tstate(t));
    evl_future_unref(t);
    return 0;
}

/* ------------------------------------------------------ wait_for_gather */

static intptr_t wfg_slow(void *arg)
{
    const char *name = arg;
    say("%s start", name);
    if (evl_sleep(EVL_SEC(1)) == EVL_ECANCELED) {
        say("%s cancelled", name);
        return EVL_ECANCELED;
    }
    return 1;
}

static intptr_t sc_wait_for_gather(void *arg)
{
    (void)arg;
    evl_task *a = spawn("a", wfg_slow, "a");
    evl_task *b = spawn("b", wfg_slow, "b");
    evl_future *both[] = { a, b };
    evl_future *g = evl_gather_new(NULL, both, 2, 0);
    say("main wait_for gather 20ms");
    say("wait_for -> %s", str_of(evl_wait_for(g, EVL_MS(20))));
    say("a state %s, b state %s", tstate(a), tstate(b));
    evl_future_unref(g);
    evl_future_unref(a);
    evl_future_unref(b);
    return 0;
}

/* ---------------------------------------------------- wait_for_swallow */

static intptr_t wfs_stubborn(void *arg)
{
    (void)arg;
    say("stubborn start");
    if (evl_sleep(EVL_SEC(1)) == EVL_ECANCELED)
        say("stubborn swallowed");
    return 9;
}

static intptr_t sc_wait_for_swallow(void *arg)
{
    (void)arg;
    evl_task *t = spawn("stubborn", wfs_stubborn, NULL);
    say("main wait_for 20ms");
    say("wait_for -> %s", str_of(evl_wait_for(t, EVL_MS(20))));
    say("stubborn state %s", tstate(t));
    evl_future_unref(t);
    return 0;
}

/* ------------------------------------------------- wait_for_no_timeout */

static intptr_t wfn_quick(void *arg)
{
    (void)arg;
    say("quick start");
    evl_sleep(EVL_MS(10));
    say("quick done");
    return 5;
}

static intptr_t sc_wait_for_no_timeout(void *arg)
{
    (void)arg;
    evl_task *t = spawn("quick", wfn_quick, NULL);
    say("wait_for -> %s", str_of(evl_wait_for(t, EVL_MS(500))));
    evl_future *fut = new_future();
    evl_future_set_result(fut, 3);
    evl_task *tk = spawn("ticker", ticker, IARG(6));
    evl_sleep(0);
    say("wait_for done future");
    say("wait_for -> %s", str_of(evl_wait_for(fut, EVL_MS(500))));
    await_drop(tk);
    evl_future_unref(fut);
    evl_future_unref(t);
    return 0;
}

/* ------------------------------------------------------- wait_for_zero */

static intptr_t sc_wait_for_zero(void *arg)
{
    (void)arg;
    evl_future *fut = new_future();
    evl_future_set_result(fut, 3);
    evl_task *tk = spawn("ticker", ticker, IARG(6));
    evl_sleep(0);
    say("wait_for done future -> %s", str_of(evl_wait_for(fut, 0)));
    evl_task *t = spawn("slow", wft_slow, NULL);
    say("wait_for pending task");
    say("wait_for -> %s", str_of(evl_wait_for(t, 0)));
    say("slow state %s", tstate(t));
    await_drop(tk);
    evl_future_unref(t);
    evl_future_unref(fut);
    return 0;
}

/* -------------------------------------------- wait_for_outer_cancelled */

static intptr_t wfo_stubborn(void *arg)
{
    (void)arg;
    say("inner start");
    if (evl_sleep(EVL_SEC(1)) == EVL_ECANCELED)
        say("inner swallowed");
    evl_sleep(0);
    say("inner returns 5");
    return 5;
}

static intptr_t wfo_waiter(void *arg)
{
    say("waiter wait_for");
    intptr_t r = evl_wait_for(arg, EVL_SEC(1));
    say("waiter wait_for -> %s", str_of(r));
    return 7;
}

static intptr_t sc_wait_for_outer_cancelled(void *arg)
{
    (void)arg;
    evl_task *inner = spawn("inner", wfo_stubborn, NULL);
    evl_task *w = spawn("waiter", wfo_waiter, inner);
    evl_sleep(0);
    evl_sleep(0);
    evl_task *tk = spawn("ticker", ticker, IARG(7));
    say("cancel waiter -> %d", evl_cancel(w));
    say("waiter -> %s", str_of(evl_await(w)));
    say("inner -> %s", str_of(evl_await(inner)));
    say("states %s %s", tstate(inner), tstate(w));
    await_drop(tk);
    evl_future_unref(w);
    evl_future_unref(inner);
    return 0;
}

/* ------------------------------------------------------ executor_order */

static intptr_t ex_work(void *arg)
{
    int ms = AINT(arg);
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    return ms;
}

static intptr_t ex_job(void *arg)
{
    int ms = AINT(arg);
    say("job %d submit", ms);
    intptr_t r = evl_run_in_executor(ex_work, arg);
    say("job %d done -> %s", ms, str_of(r));
    return r;
}

static void ex_callback(evl_future *f, void *arg)
{
    say("callback %d -> %s", AINT(arg), str_of(evl_future_result(f)));
}

static intptr_t sc_executor_order(void *arg)
{
    (void)arg;
    /* Real sleeps on pool threads, on either clock: 60 ms apart so that the
     * finishing order holds on a loaded machine (no retry hides a flip). */
    static const int ms[] = {180, 60, 120};
    evl_future *ts[3];
    intptr_t res[3];
    for (int i = 0; i < 3; i++)
        ts[i] = spawn("job", ex_job, IARG(ms[i]));
    int rc = evl_gather(ts, 3, 0, res);
    if (rc == 0)
        say_results("gather -> ", res, 3);
    else
        say("gather -> %s", str_of(rc));
    for (int i = 0; i < 3; i++)
        evl_future_unref(ts[i]);

    evl_future *futs[3];
    for (int i = 0; i < 3; i++) {
        futs[i] = evl_executor_submit(L, ex_work, IARG(ms[i]));
        if (!futs[i]) {
            perror("evl_executor_submit");
            exit(2);
        }
        evl_future_add_done(futs[i], ex_callback, IARG(ms[i]));
    }
    for (int i = 0; i < 3; i++) {
        say("awaited %s", str_of(evl_await(futs[i])));
        evl_future_unref(futs[i]);
    }
    return 0;
}

/* ----------------------------------------------- await_done_no_suspend */

static intptr_t adn_quick(void *arg)
{
    (void)arg;
    say("quick run");
    return 4;
}

static intptr_t sc_await_done_no_suspend(void *arg)
{
    (void)arg;
    evl_future *fut = new_future();
    evl_future_set_result(fut, 3);
    evl_task *q = spawn("quick", adn_quick, NULL);
    evl_sleep(0);
    evl_task *tk = spawn("ticker", ticker, IARG(4));
    evl_sleep(0);
    say("main resumed");
    say("fut -> %s", str_of(evl_await(fut)));
    say("quick -> %s", str_of(evl_await(q)));
    say("fut again -> %s", str_of(evl_await(fut)));
    evl_sleep(0);
    say("main after yield");
    await_drop(tk);
    evl_future_unref(q);
    evl_future_unref(fut);
    return 0;
}

/* -------------------------------------------------------- nested_spawn */

struct ns_mid {
    const char *name;
    int nkids;
    const char *kids[2];
};

static intptr_t ns_leaf(void *arg)
{
    const char *name = arg;
    say("%s start", name);
    evl_sleep(0);
    say("%s end", name);
    return 1;
}

static intptr_t ns_mid(void *arg)
{
    const struct ns_mid *m = arg;
    evl_task *ts[2];
    say("%s start", m->name);
    for (int i = 0; i < m->nkids; i++)
        ts[i] = spawn(m->kids[i], ns_leaf, (void *)m->kids[i]);
    say("%s spawned", m->name);
    intptr_t total = 0;
    for (int i = 0; i < m->nkids; i++)
        total += await_drop(ts[i]);
    say("%s end %s", m->name, str_of(total));
    return total;
}

static intptr_t ns_top(void *arg)
{
    (void)arg;
    static struct ns_mid a = {"A", 2, {"A1", "A2"}}, b = {"B", 1, {"B1", NULL}};
    say("top start");
    evl_task *ta = spawn("A", ns_mid, &a);
    evl_task *tb = spawn("B", ns_mid, &b);
    evl_sleep(0);
    say("top yielded");
    intptr_t r = await_drop(ta);
    r += await_drop(tb);
    say("top end %s", str_of(r));
    return r;
}

static intptr_t sc_nested_spawn(void *arg)
{
    (void)arg;
    evl_task *t = spawn("top", ns_top, NULL);
    evl_task *c = spawn("C", ns_leaf, "C");
    say("main top -> %s", str_of(await_drop(t)));
    say("main C -> %s", str_of(await_drop(c)));
    return 0;
}

/* ---------------------------------------------------------- task_error */

static intptr_t te_failer(void *arg)
{
    const struct worker *w = arg;
    say("%s start", w->name);
    if (w->ms)
        evl_sleep(EVL_MS(w->ms));
    say("%s raise", w->name);
    return -EIO;
}

static intptr_t te_watcher(void *arg)
{
    say("watcher await");
    say("watcher -> %s", str_of(evl_await(arg)));
    return 0;
}

static intptr_t sc_task_error(void *arg)
{
    (void)arg;
    static struct worker f1a = {"f1", 10, 0}, f2a = {"f2", 0, 0};
    evl_task *f1 = spawn("f1", te_failer, &f1a);
    evl_task *w = spawn("watcher", te_watcher, f1);
    evl_future_add_done(f1, label_cb, "callback f1");
    say("main f1 -> %s", str_of(evl_await(f1)));
    await_drop(w);
    evl_task *f2 = spawn("f2", te_failer, &f2a);
    evl_sleep(0);
    say("f2 state %s", tstate(f2));
    say("main f2 -> %s", str_of(evl_await(f2)));
    evl_future_unref(f1);
    evl_future_unref(f2);
    return 0;
}

/* ---------------------------------------------------------------- main */

static const struct scenario {
    const char *name;
    evl_task_fn main;
} scenarios[] = {
#define X(name) {#name, sc_##name},
#include "scenario-list.h"
#undef X
};

int main(int argc, char **argv)
{
    const char *name = NULL;
    int virtual_clock = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--virtual") == 0) {
            virtual_clock = 1;
        } else if (strcmp(argv[i], "--list") == 0) {
            for (size_t k = 0; k < sizeof scenarios / sizeof scenarios[0]; k++)
                printf("%s\n", scenarios[k].name);
            return 0;
        } else if (!name && argv[i][0] != '-') {
            name = argv[i];
        } else {
            name = NULL;
            break;
        }
    }
    const struct scenario *sc = NULL;
    for (size_t k = 0; name && k < sizeof scenarios / sizeof scenarios[0]; k++)
        if (strcmp(scenarios[k].name, name) == 0)
            sc = &scenarios[k];
    if (!sc) {
        fprintf(stderr, "usage: %s SCENARIO [--virtual] | --list\n", argv[0]);
        return 2;
    }

    evl_loop_options opts;
    evl_loop_options_init(&opts);
    if (virtual_clock)
        opts.flags |= EVL_LOOP_VIRTUAL_CLOCK;
    L = evl_loop_new(&opts);
    if (!L) {
        perror("evl_loop_new");
        return 2;
    }
    evl_task *t = evl_spawn(L, "main", sc->main, NULL);
    if (!t) {
        perror("evl_spawn");
        return 2;
    }
    intptr_t r = evl_run_until_complete(L, t);
    evl_future_unref(t);
    int leaked = evl_loop_free(L);
    int status = 0;
    if (r < 0) {
        fprintf(stderr, "%s: main task ended with %s (%s)\n", sc->name,
                evl_err_name((int)r), evl_strerror((int)r));
        status = 1;
    }
    if (leaked != 0) {
        fprintf(stderr, "%s: evl_loop_free reports %d leaked task(s)\n", sc->name, leaked);
        status = 1;
    }
    return status;
}
