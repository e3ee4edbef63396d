/*
 * decode_asyncio.c -- the generic mode's asyncio task lifecycle, for an
 * unmodified CPython 3.10-3.13 target: a census of its task set
 * (pytasks.h) every --census-ms (10 ms by default), diffed against the one
 * before into the model's lifecycle events, so that `tasks`, `timeline`,
 * `graph --kind tasks|lifecycle`, `lint` and `export` read these traces as
 * they read libevl's.  Called by decode_generic.c (tick, end, the task of
 * a blocking episode).  Part of the recorder (recorder.h).
 *
 * What a census gives, and so what the trace says (tracer/SCHEMA.md,
 * "asyncio traces"): a task that lives past one census has its row, its
 * name, a create event at the first census that saw it (or at the start,
 * pre-existing), and from then on one event per change of state seen by a
 * census -- run, suspend with asyncio's reason and object (the awaited
 * task's id; the lock, whose holder's id is the second argument, as in
 * libevl's traces), wake (waker unknown: 0), cancel requests, finish with
 * its final state -- all stamped with the census's time.  Between two
 * censuses a task may run and park again many times: a census sees
 * states, not steps.  A task gone from the set was freed: if its last
 * state was done, nothing more; failed with its error unretrieved, an
 * `unretrieved` leak verdict; still pending, an `abandoned` leak verdict
 * (a pending task is freed only when nothing can wake it: asyncio logs
 * "Task was destroyed but it is pending!"), unless it was seen running or
 * ready (it may have finished in between: no verdict, no finish).
 */
#define _GNU_SOURCE
#include "recorder.h"
#include "pytasks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the decoder remembers of a task between censuses. */
struct pyt_track {
    uint64_t addr, coro;
    uint64_t id;
    int state, reason;
    int64_t arg0, arg1;
    int32_t cancels;
    bool unretrieved;
};

struct ls_asyncio {
    ls_pytasks *pt;
    struct ls_pyt_census c;
    struct pyt_track *prev, *cur;   /* sorted by addr */
    size_t nprev, ncur;
    uint64_t next_id;
    int64_t interval, due;
    uint64_t censuses, census_ns, truncated, read_errors;
    bool first_done, warned;
};

static int by_addr(const void *a, const void *b)
{
    uint64_t x = ((const struct ls_pytask *)a)->addr, y = ((const struct ls_pytask *)b)->addr;
    return x < y ? -1 : x > y;
}

static const struct pyt_track *find(const struct pyt_track *v, size_t n, uint64_t addr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo].addr == addr ? &v[lo] : NULL;
}

/* The loop the tasks are put in: the main thread if it is a loop thread,
 * else the first loop thread, else the main thread's id. */
static uint64_t task_loop(recorder *r)
{
    for (size_t i = 0; i < r->nloops; i++)
        if (r->loops[i].id == (uint64_t)r->pid)
            return r->loops[i].id;
    return r->nloops ? r->loops[0].id : (uint64_t)r->pid;
}

static void event(recorder *r, uint64_t loop, int64_t ts, uint64_t task, int kind, int64_t reason,
                  int64_t a0, int64_t a1)
{
    ls_sink_event(r, &(ls_event){ .ts = ts, .loop = loop, .task = task, .kind = kind,
                                  .reason = reason, .arg0 = a0, .arg1 = a1 });
    r->records++;
}

static int final_of(int state)
{
    return state == LS_PYT_FINISHED ? EVL_FINAL_FINISHED
           : state == LS_PYT_FAILED ? EVL_FINAL_FAILED : EVL_FINAL_CANCELLED;
}

/* A task gone from the set since the last census. */
static void vanished(recorder *r, uint64_t loop, int64_t ts, const struct pyt_track *p)
{
    if (p->state == LS_PYT_FAILED && p->unretrieved)
        event(r, loop, ts, p->id, EVL_PROBE_ID_task_leak, EVL_LEAK_UNRETRIEVED, 0, 0);
    else if (p->state == LS_PYT_WAITING)
        event(r, loop, ts, p->id, EVL_PROBE_ID_task_leak, EVL_LEAK_ABANDONED, 0, 0);
    else
        return;
    ls_sink_task_leak(r, p->id, p->state == LS_PYT_WAITING ? EVL_LEAK_ABANDONED
                                                           : EVL_LEAK_UNRETRIEVED);
}

/* One census into events. */
static void diff(recorder *r, struct ls_asyncio *a)
{
    struct ls_pyt_census *c = &a->c;
    uint64_t loop = task_loop(r);
    int64_t ts = c->ts;
    qsort(c->t, c->n, sizeof *c->t, by_addr);
    struct pyt_track *cur = realloc(a->cur, (c->n ? c->n : 1) * sizeof *cur);
    if (!cur)
        return;
    a->cur = cur;
    a->ncur = c->n;
    /* ids first: a wait names the awaited task's id */
    for (size_t i = 0; i < c->n; i++) {
        const struct ls_pytask *t = &c->t[i];
        const struct pyt_track *p = find(a->prev, a->nprev, t->addr);
        cur[i] = (struct pyt_track){ .addr = t->addr, .coro = t->coro };
        if (p && p->coro == t->coro) {
            cur[i] = *p;
            continue;
        }
        cur[i].id = ++a->next_id;
        cur[i].state = 0;             /* new */
    }
    /* the freed, in address order */
    for (size_t i = 0; i < a->nprev; i++) {
        const struct pyt_track *p = &a->prev[i], *q = find(cur, c->n, p->addr);
        if (!q || q->id != p->id)
            vanished(r, loop, ts, p);
    }
    for (size_t i = 0; i < c->n; i++) {
        const struct ls_pytask *t = &c->t[i];
        struct pyt_track *k = &cur[i];
        bool fresh = !k->state, pre = fresh && !a->first_done;
        if (fresh) {
            ls_sink_task(r, &(ls_task_rec){ .task = k->id, .loop = loop, .name = t->name,
                                             .len = strlen(t->name), .created = ts,
                                             .preexisting = !a->first_done });
            event(r, loop, ts, k->id, EVL_PROBE_ID_task_create, !a->first_done, 0, 0);
            r->tasks_created++;
        }
        int64_t a0 = 0, a1 = 0;
        if (t->state == LS_PYT_WAITING) {
            a0 = (int64_t)t->object;
            if (t->reason == EVL_SUSPEND_TASK) {
                const struct pyt_track *w = find(cur, c->n, t->object);
                a0 = w ? (int64_t)w->id : 0;
            } else if (t->reason == EVL_SUSPEND_LOCK) {
                for (size_t j = 0; j < c->n && !a1; j++)
                    for (uint32_t h = 0; h < c->t[j].nheld; h++)
                        if (j != i && c->t[j].held[h] == t->object)
                            a1 = (int64_t)cur[j].id;
            }
        }
        if (t->cancels > k->cancels)
            event(r, loop, ts, k->id, EVL_PROBE_ID_task_cancel, 0, 0, 0);
        bool same = k->state == t->state && k->reason == t->reason && k->arg0 == a0 &&
                    k->arg1 == a1;
        if (!same) {
            int was = k->state;
            switch (t->state) {
            case LS_PYT_RUNNING:
                if (was == LS_PYT_WAITING)
                    event(r, loop, ts, k->id, EVL_PROBE_ID_task_wake, 0, 0, 0);
                event(r, loop, ts, k->id, EVL_PROBE_ID_task_run, 0, 0, 0);
                break;
            case LS_PYT_READY:
                if (was == LS_PYT_WAITING)
                    event(r, loop, ts, k->id, EVL_PROBE_ID_task_wake, 0, 0, 0);
                else if (was == LS_PYT_RUNNING)   /* it ran, parked, was woken */
                    event(r, loop, ts, k->id, EVL_PROBE_ID_task_wake, 0, 0, 0);
                break;
            case LS_PYT_WAITING:
                if (was != LS_PYT_RUNNING && !pre)  /* it ran in between */
                    event(r, loop, ts, k->id, EVL_PROBE_ID_task_run, 0, 0, 0);
                event(r, loop, ts, k->id, EVL_PROBE_ID_task_suspend, t->reason, a0, a1);
                break;
            default:                              /* done */
                if (!pre && (was == 0 || was == LS_PYT_WAITING || was == LS_PYT_READY))
                    event(r, loop, ts, k->id, EVL_PROBE_ID_task_run, 0, 0, 0);
                event(r, loop, ts, k->id, EVL_PROBE_ID_task_finish, final_of(t->state), 0, 0);
                ls_sink_task_finish(r, k->id, loop, ts, final_of(t->state), 0);
                r->tasks_finished++;
                break;
            }
        }
        k->state = t->state;
        k->reason = t->reason;
        k->arg0 = a0;
        k->arg1 = a1;
        k->cancels = t->cancels;
        k->unretrieved = t->unretrieved;
    }
    struct pyt_track *tmp = a->prev;
    a->prev = a->cur;
    a->nprev = a->ncur;
    a->cur = tmp;
    a->first_done = true;
}

static void census(recorder *r, struct ls_asyncio *a)
{
    int rc = ls_pytasks_census(a->pt, &a->c);
    a->censuses++;
    a->census_ns += (uint64_t)a->c.dur;
    a->truncated += !!(a->c.flags & LS_PYT_TRUNCATED);
    a->read_errors += !!(a->c.flags & LS_PYT_READ_ERROR);
    if (rc < 0 || (a->c.flags & LS_PYT_NO_ASYNCIO))
        return;
    diff(r, a);
    /* a census costs the recorder's CPU, not the target's: at most about
     * a tenth of it */
    if (a->c.dur * 9 > a->interval)
        a->due = a->c.ts + a->c.dur * 10;
}

void ls_asyncio_tick(recorder *r, int64_t now)
{
    if (!r->py || r->no_tasks || r->offline || r->census_ms <= 0)
        return;
    struct ls_asyncio *a = r->asyncio;
    if (!a) {
        const char *why = NULL;
        a = calloc(1, sizeof *a);
        if (!a || !(a->pt = ls_pytasks_new(r->py, &why))) {
            if (!r->quiet && !r->asyncio_refused)
                fprintf(stderr, "asyncio tasks: %s (blocking episodes only)\n",
                        why ? why : "out of memory");
            r->asyncio_refused = true;
            r->no_tasks = true;
            free(a);
            return;
        }
        a->interval = (int64_t)r->census_ms * 1000000;
        r->asyncio = a;
    }
    if (now < a->due)
        return;
    a->due = now + a->interval;
    census(r, a);
}

/* The last census, at the end: a task still pending stays so. */
void ls_asyncio_end(recorder *r)
{
    struct ls_asyncio *a = r->asyncio;
    if (!a || r->target_gone)
        return;
    census(r, a);
}

uint64_t ls_asyncio_task_id(recorder *r, uint64_t addr)
{
    struct ls_asyncio *a = r->asyncio;
    const struct pyt_track *p = a ? find(a->prev, a->nprev, addr) : NULL;
    return p ? p->id : 0;
}

void ls_asyncio_meta(recorder *r)
{
    struct ls_asyncio *a = r->asyncio;
    if (!a) {
        ls_sink_meta(r, LS_META_TASK_SOURCE, "none");
        return;
    }
    ls_sink_meta(r, LS_META_TASK_SOURCE, "census every %d ms", r->census_ms);
    ls_sink_meta(r, LS_META_CENSUSES, "%llu (mean %.3f ms; truncated %llu, read errors %llu)",
                 (unsigned long long)a->censuses,
                 a->censuses ? a->census_ns / 1e6 / (double)a->censuses : 0.0,
                 (unsigned long long)a->truncated, (unsigned long long)a->read_errors);
}

void ls_asyncio_free(recorder *r)
{
    struct ls_asyncio *a = r->asyncio;
    if (!a)
        return;
    ls_pytasks_free(a->pt);
    ls_pyt_census_free(&a->c);
    free(a->prev);
    free(a->cur);
    free(a);
    r->asyncio = NULL;
}
