/*
 * decode_asyncio.c -- the generic mode's asyncio task lifecycle, for an
 * unmodified CPython 3.10-3.15 target: a census of its task set
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
#include "pystack_int.h"           /* ls_py_maps */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the decoder remembers of a task between censuses. */
struct pyt_track {
    uint64_t addr, coro;
    uint64_t name_obj;              /* its name as its row has it (set_name changes it) */
    uint64_t id;
    int state, reason;
    int64_t arg0, arg1;
    int32_t cancels;
    bool unretrieved;
    bool finalized;                 /* its destruction was seen (tp_finalize) */
    int64_t born;                   /* made (tp_init) or first seen: an address and
                                     * a coroutine address are reused once freed */
    bool pre;                       /* there before the first census */
    int64_t gone_ts;                /* gone from the set at this census (in a->gone) */
};

#define PYT_INITS 4096              /* creations remembered until a census or the end */
#define PYT_GONE_MAX 65536          /* freed tasks waiting for their tp_finalize message */
#define PYT_GONE_TICKS 50           /* how long they wait (censuses) */
#define PYT_DEFER_MAX 65536         /* tp_finalize messages waiting for a census's diff */
#define PYT_DRAIN_NS 200000000      /* the ring taken between a census's read and its diff */

/* A tp_finalize message stamped after a census began, taken before its
 * diff: told after it. */
struct pyt_fin {
    int64_t ts;
    struct ls_pytask_ev e;
};

struct ls_asyncio {
    ls_pytasks *pt;
    struct ls_pyt_census c;
    struct pyt_track *prev, *cur;   /* sorted by addr */
    size_t nprev, ncur;
    uint64_t next_id;
    int64_t interval, due;
    uint64_t censuses, census_ns, truncated, read_errors;
    int64_t last_ts, max_gap;       /* the last census's start; the widest time from
                                     * one's start to the next one's end */
    bool first_done, warned, final_done;
    /* the uprobes at the Task type's tp_init and tp_finalize, while tasks
     * are made at most r->task_probe_rate a second */
    bool probes, probes_tried;
    int link_init, link_final;      /* their places in r->links */
    int64_t rate_start, probes_off_at;
    uint64_t rate_n, rate_seen;
    struct { uint64_t addr; int64_t ts; } inits[PYT_INITS];
    struct pyt_track *gone;         /* gone from the set, no tp_finalize yet */
    size_t ngone, capgone;
    bool reading;                   /* a census is read, its diff not done */
    struct pyt_fin *defer;
    size_t ndefer, capdefer;
    uint64_t short_lived, finals;
};

static int by_addr(const void *a, const void *b)
{
    uint64_t x = ((const struct ls_pytask *)a)->addr, y = ((const struct ls_pytask *)b)->addr;
    return x < y ? -1 : x > y;
}

static int track_by_addr(const void *a, const void *b)
{
    uint64_t x = ((const struct pyt_track *)a)->addr, y = ((const struct pyt_track *)b)->addr;
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

/* A task gone from the set, whose destruction was not seen: a verdict
 * from its last state (see the header). */
static void vanished(recorder *r, uint64_t loop, int64_t ts, const struct pyt_track *p)
{
    if (p->finalized)
        return;
    if (p->state == LS_PYT_FAILED && p->unretrieved)
        event(r, loop, ts, p->id, EVL_PROBE_ID_task_leak, EVL_LEAK_UNRETRIEVED, 0, 0);
    else if (p->state == LS_PYT_WAITING)
        event(r, loop, ts, p->id, EVL_PROBE_ID_task_leak, EVL_LEAK_ABANDONED, 0, 0);
    else
        return;
    ls_sink_task_leak(r, p->id, p->state == LS_PYT_WAITING ? EVL_LEAK_ABANDONED
                                                           : EVL_LEAK_UNRETRIEVED);
}

static size_t init_slot(uint64_t addr)
{
    return (addr >> 4) * 0x9E3779B97F4A7C15ull >> 52 & (PYT_INITS - 1);
}

/* When a task was made at addr (its tp_init) that no census has seen
 * yet, or 0. */
static int64_t init_peek(const struct ls_asyncio *a, uint64_t addr)
{
    size_t i = init_slot(addr);
    return a->inits[i].addr == addr ? a->inits[i].ts : 0;
}

/* When the task at addr was made (its tp_init), if the probe saw it
 * before this census; else ts. */
static int64_t init_ts(struct ls_asyncio *a, uint64_t addr, int64_t ts)
{
    size_t i = init_slot(addr);
    if (a->inits[i].addr != addr || a->inits[i].ts > ts)
        return ts;
    a->inits[i].addr = 0;
    return a->inits[i].ts;
}

/* A lock held, and by which task of the census (its index). */
struct pyt_hold {
    uint64_t lock;
    size_t task;
};

static int by_lock(const void *a, const void *b)
{
    uint64_t x = ((const struct pyt_hold *)a)->lock, y = ((const struct pyt_hold *)b)->lock;
    return x < y ? -1 : x > y;
}

/* The census's held locks, sorted: a lock waiter's holder in log time (a
 * target with many lock waiters must not make the census quadratic).
 * NULL when none (or out of memory: then holders are not named). */
static struct pyt_hold *holds_of(const struct ls_pyt_census *c, size_t *n)
{
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++)
        k += c->t[i].nheld;
    struct pyt_hold *h = k ? malloc(k * sizeof *h) : NULL;
    *n = 0;
    if (!h)
        return NULL;
    for (size_t i = 0; i < c->n; i++)
        for (uint32_t j = 0; j < c->t[i].nheld && j < 4; j++)
            h[(*n)++] = (struct pyt_hold){ c->t[i].held[j], i };
    qsort(h, *n, sizeof *h, by_lock);
    return h;
}

/* One census into events. */
static void diff(recorder *r, struct ls_asyncio *a)
{
    struct ls_pyt_census *c = &a->c;
    uint64_t loop = task_loop(r);
    /* what a census saw was so at the latest when it ended: its events
     * are stamped then (it began c->dur earlier) */
    int64_t ts = c->ts + c->dur;
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
        /* the same task: same address and coroutine, and no task made at
         * its address since it was first seen (a task being finalized is
         * still in the set while its finalizer logs) */
        int64_t made = init_peek(a, t->addr);
        if (p && p->coro == t->coro && !(made > p->born && made <= ts)) {
            cur[i] = *p;
            continue;
        }
        if (p && p->coro == t->coro)
            ls_pytasks_reread(a->pt, &c->t[i]);   /* the census kept p's name and chain */
        cur[i].id = ++a->next_id;
        cur[i].state = 0;             /* new */
    }
    /* the freed, in address order: with the probes, their tp_finalize
     * message says how they ended (it may come after this census).  A
     * census that left some out (unreadable, or past its bound) tells
     * nothing of the missing: they are kept as they were. */
    bool partial = c->flags & (LS_PYT_READ_ERROR | LS_PYT_TRUNCATED);
    size_t nkept = 0;
    for (size_t i = 0; i < a->nprev; i++) {
        const struct pyt_track *p = &a->prev[i], *q = find(cur, c->n, p->addr);
        if (q && q->id == p->id)
            continue;
        if (partial && !p->finalized && !q) {
            a->prev[nkept++] = *p;    /* below, after the census's own */
            continue;
        }
        if (!a->probes || p->finalized || a->ngone >= PYT_GONE_MAX) {
            vanished(r, loop, ts, p);
            continue;
        }
        if (a->ngone == a->capgone) {
            size_t cap = a->capgone ? 2 * a->capgone : 64;
            struct pyt_track *g = realloc(a->gone, cap * sizeof *g);
            if (!g) {
                vanished(r, loop, ts, p);
                continue;
            }
            a->gone = g;
            a->capgone = cap;
        }
        a->gone[a->ngone] = *p;
        a->gone[a->ngone++].gone_ts = ts;
    }
    size_t nholds;
    struct pyt_hold *holds = holds_of(c, &nholds);
    for (size_t i = 0; i < c->n; i++) {
        const struct ls_pytask *t = &c->t[i];
        struct pyt_track *k = &cur[i];
        if (k->finalized)
            continue;                 /* its end is told */
        bool fresh = !k->state, pre = fresh && !a->first_done;
        if (fresh) {
            int64_t made = init_ts(a, t->addr, ts);
            pre &= made == ts;
            k->born = made;
            k->pre = pre;
        }
        if (fresh || k->name_obj != t->name_obj) {
            /* its row, again when it was renamed (Task.set_name; up to
             * 3.13 create_task names a task factory's task after the
             * factory made it, and a census may fall in between) */
            ls_sink_task(r, &(ls_task_rec){ .task = k->id, .loop = loop, .name = t->name,
                                             .len = strlen(t->name), .created = k->born,
                                             .preexisting = k->pre });
            k->name_obj = t->name_obj;
        }
        if (fresh) {
            event(r, loop, k->born, k->id, EVL_PROBE_ID_task_create, pre, 0, 0);
            r->tasks_created++;
        }
        int64_t a0 = 0, a1 = 0;
        if (t->state == LS_PYT_WAITING) {
            a0 = (int64_t)t->object;
            if (t->reason == EVL_SUSPEND_TASK) {
                const struct pyt_track *w = find(cur, c->n, t->object);
                a0 = w ? (int64_t)w->id : 0;
            } else if (t->reason == EVL_SUSPEND_LOCK && holds) {
                struct pyt_hold key = { t->object, 0 };
                const struct pyt_hold *h = bsearch(&key, holds, nholds, sizeof key, by_lock);
                while (h && h > holds && h[-1].lock == t->object)
                    h--;              /* the first holder of it */
                for (; h && h < holds + nholds && h->lock == t->object && !a1; h++)
                    if (h->task != i)
                        a1 = (int64_t)cur[h->task].id;
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
                int64_t st = ls_chain_stack(r, t->frames, t->nframes);
                if (st)
                    ls_sink_await_stack(r, k->id, ts, st);
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
    free(holds);
    if (nkept) {
        struct pyt_track *all = realloc(a->cur, (a->ncur + nkept) * sizeof *all);
        if (all) {
            memcpy(all + a->ncur, a->prev, nkept * sizeof *all);
            a->cur = all;
            a->ncur += nkept;
            qsort(a->cur, a->ncur, sizeof *a->cur, track_by_addr);
        }
    }
    struct pyt_track *tmp = a->prev;
    a->prev = a->cur;
    a->nprev = a->ncur;
    a->cur = tmp;
    a->first_done = true;
}

/* Freed tasks whose tp_finalize message did not come: the verdict from
 * their last state, after PYT_GONE_TICKS censuses. */
static void age_gone(recorder *r, struct ls_asyncio *a, int64_t now, bool all)
{
    size_t n = 0;
    for (size_t i = 0; i < a->ngone; i++) {
        struct pyt_track *g = &a->gone[i];
        if (!g->finalized && !all && now - g->gone_ts < PYT_GONE_TICKS * a->interval) {
            a->gone[n++] = *g;
            continue;
        }
        vanished(r, task_loop(r), g->gone_ts, g);
    }
    a->ngone = n;
}

static void attach_probes(recorder *r, struct ls_asyncio *a);

/* The census read compared with the last (diff), then the tp_finalize
 * messages kept for after that. */
static void census_diff(recorder *r, struct ls_asyncio *a)
{
    a->reading = false;
    diff(r, a);
    size_t nd = a->ndefer;
    a->ndefer = 0;
    for (size_t i = 0; i < nd; i++)
        ls_asyncio_msg(r, (uint64_t)a->defer[i].ts, &a->defer[i].e);
}

static void census(recorder *r, struct ls_asyncio *a)
{
    age_gone(r, a, a->c.ts, false);
    int rc = ls_pytasks_census(a->pt, &a->c);
    /* how late a change can be stamped: made just after the last census
     * read it, it is seen by this one and stamped at its end (diff).  Only
     * a census that read every task counts: a failed or partial one sees
     * nothing of what it missed (those tasks are kept as they were). */
    int64_t end = a->c.ts + a->c.dur;
    if (rc >= 0 && !(a->c.flags & (LS_PYT_READ_ERROR | LS_PYT_TRUNCATED))) {
        if (a->last_ts && end - a->last_ts > a->max_gap)
            a->max_gap = end - a->last_ts;
        a->last_ts = a->c.ts;
    }
    a->censuses++;
    a->census_ns += (uint64_t)a->c.dur;
    a->truncated += !!(a->c.flags & LS_PYT_TRUNCATED);
    a->read_errors += !!(a->c.flags & LS_PYT_READ_ERROR);
    if (rc < 0 || (a->c.flags & LS_PYT_NO_ASYNCIO))
        return;
    /* A task's tp_init message is sent before the task is in the set, so
     * every one for a task this census read is in the ring now: taken
     * before the diff decides which tasks are new (one made at a freed
     * task's address, its coroutine at the freed one's, is told apart
     * only by it).  A tp_finalize stamped after the census began waits
     * for the diff, which may know the task.  A blocking episode taken in
     * this drain whose task is new has the diff done then
     * (ls_asyncio_task_id); from inside a drain, the diff goes without. */
    a->reading = true;
    ls_consume(r, PYT_DRAIN_NS);
    if (a->reading)
        census_diff(r, a);
    if (!a->probes_tried)
        attach_probes(r, a);
    /* the running task for stacks without Handle._run (uvloop) */
    uint64_t cur = ls_pytasks_current_dict(a->pt);
    if (r->skel && r->skel->bss->py_cfg.current_tasks != cur)
        __atomic_store_n(&r->skel->bss->py_cfg.current_tasks, cur, __ATOMIC_RELEASE);
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

/* The last census, before detaching (what the probes say of the tasks it
 * finds gone comes in the ring buffer's last drain): a task still pending
 * stays so. */
void ls_asyncio_detaching(recorder *r)
{
    struct ls_asyncio *a = r->asyncio;
    if (!a || r->target_gone || a->final_done)
        return;
    census(r, a);
    a->final_done = true;
}

/* The end, after the last drain: the gone whose tp_finalize never came. */
void ls_asyncio_end(recorder *r)
{
    struct ls_asyncio *a = r->asyncio;
    if (!a)
        return;
    ls_asyncio_detaching(r);
    age_gone(r, a, 0, true);
}

/* ---- the probes: where a task is made and destroyed ---- */

/* The file and file offset of address addr of the target: its
 * executable file mapping (pystack's ls_py_maps). */
struct where_arg {
    pid_t pid;
    uint64_t addr, off;
    char *path;
    size_t cap;
};

static int where_map(const struct ls_py_map *m, void *arg)
{
    struct where_arg *w = arg;
    if (w->addr < m->start || w->addr >= m->end || m->perms[2] != 'x' || m->path[0] != '/')
        return 0;
    if (ls_py_map_file(w->pid, m, w->path, w->cap))
        return -1;
    w->off = w->addr - m->start + m->off;
    return 1;
}

static int where(pid_t pid, uint64_t addr, char *path, size_t cap, uint64_t *off)
{
    struct where_arg w = { pid, addr, 0, path, cap };
    if (ls_py_maps(pid, where_map, &w) != 1)
        return -1;
    *off = w.off;
    return 0;
}

/* Once a census saw the Task type: uprobes at its tp_init and
 * tp_finalize.  Without them (an error is said once) the census alone. */
static void attach_probes(recorder *r, struct ls_asyncio *a)
{
    uint64_t init, fin, ioff, foff;
    char ipath[4200], fpath[4200];
    ls_pytasks_type_slots(a->pt, &init, &fin);
    if (!init || !fin)
        return;
    a->probes_tried = true;
    if (r->task_probe_rate <= 0)
        return;                       /* --task-probe-rate 0: the census alone */
    struct record_bpf *s = r->skel;
    if (!s || r->nlinks + 2 > LS_MAX_LINKS || !bpf_program__fd(s->progs.on_pytask_final) ||
        where(r->pid, init, ipath, sizeof ipath, &ioff) ||
        where(r->pid, fin, fpath, sizeof fpath, &foff))
        goto fail;
    struct ls_pyt_task_off o;
    ls_pytasks_task_off(a->pt, &o);
    s->bss->pyt_cfg = (struct ls_pyt_bpf_cfg){ 0, o.state, o.log_tb, o.log_tb_bit,
                                               o.log_destroy_pending, o.log_destroy_bit,
                                               o.exception, o.coro };
    struct bpf_link *li = bpf_program__attach_uprobe(s->progs.on_pytask_init, false, r->pid,
                                                     ipath, ioff);
    struct bpf_link *lf = li ? bpf_program__attach_uprobe(s->progs.on_pytask_final, false,
                                                          r->pid, fpath, foff) : NULL;
    if (!lf) {
        bpf_link__destroy(li);
        goto fail;
    }
    a->link_init = r->nlinks;
    r->links[r->nlinks++] = li;
    a->link_final = r->nlinks;
    r->links[r->nlinks++] = lf;
    __atomic_store_n(&s->bss->pyt_cfg.on, 1, __ATOMIC_RELEASE);
    a->probes = true;
    if (!r->quiet)
        fprintf(stderr, "asyncio tasks: a census every %d ms; task creation and destruction "
                        "probed\n", r->census_ms);
    return;
fail:
    if (!r->quiet)
        fprintf(stderr, "asyncio tasks: no probe at the Task type's tp_init/tp_finalize; "
                        "the census alone (tasks shorter than %d ms unseen)\n", r->census_ms);
}

/* Tasks made faster than r->task_probe_rate a second (a task per
 * request of a busy server): the two uprobe hits per task would cost the
 * target more than a debugging session should, so the probes go and the
 * census goes on alone (said once; meta task_source says when). */
static void probes_off(recorder *r, struct ls_asyncio *a, int64_t ts, uint64_t rate)
{
    if (!a->probes)
        return;
    __atomic_store_n(&r->skel->bss->pyt_cfg.on, 0, __ATOMIC_RELEASE);
    bpf_link__destroy(r->links[a->link_init]);
    bpf_link__destroy(r->links[a->link_final]);
    r->links[a->link_init] = r->links[a->link_final] = NULL;
    a->probes = false;
    a->probes_off_at = ts;
    a->rate_seen = rate;
    if (!r->quiet)
        fprintf(stderr, "asyncio tasks: %llu made a second, over --task-probe-rate %d: the "
                        "probes are off, the census goes on alone\n",
                (unsigned long long)rate, r->task_probe_rate);
}

/* A tp_finalize message kept for after the census's diff; false when
 * PYT_DEFER_MAX are kept (or out of memory): told now. */
static bool defer_final(struct ls_asyncio *a, int64_t ts, const struct ls_pytask_ev *e)
{
    if (a->ndefer == a->capdefer) {
        size_t cap = a->capdefer ? 2 * a->capdefer : 64;
        struct pyt_fin *d = cap <= PYT_DEFER_MAX ? realloc(a->defer, cap * sizeof *d) : NULL;
        if (!d)
            return false;
        a->defer = d;
        a->capdefer = cap;
    }
    a->defer[a->ndefer++] = (struct pyt_fin){ ts, *e };
    return true;
}

/* A task made (remembered until a census sees it) or destroyed: how it
 * ended, for a task the census knew (in the last census, or gone from
 * it), or a row of its own for one that lived between two censuses. */
void ls_asyncio_msg(recorder *r, uint64_t ts64, const struct ls_pytask_ev *e)
{
    struct ls_asyncio *a = r->asyncio;
    int64_t ts = (int64_t)ts64;
    if (!a || ts < r->attach_ns || ts64 > INT64_MAX)
        return;
    if (e->what == LS_PYT_EV_INIT) {
        if (ts - a->rate_start >= 1000000000) {
            a->rate_start = ts;
            a->rate_n = 0;
        }
        if (++a->rate_n > (uint64_t)r->task_probe_rate) {
            probes_off(r, a, ts, a->rate_n);
            return;
        }
        size_t i = init_slot(e->task);
        a->inits[i].addr = e->task;
        a->inits[i].ts = ts;
        return;
    }
    if (e->what != LS_PYT_EV_FINAL || e->state > 2)
        return;
    if (a->reading && ts > a->c.ts && defer_final(a, ts, e))
        return;
    a->finals++;
    uint64_t loop = task_loop(r);
    /* the task it was: made before this, not destroyed yet */
    struct pyt_track *k = (struct pyt_track *)find(a->prev, a->nprev, e->task);
    if (k && (k->coro != e->coro || k->finalized || k->born > ts))
        k = NULL;
    for (size_t i = 0; !k && i < a->ngone; i++)
        if (a->gone[i].addr == e->task && a->gone[i].coro == e->coro &&
            !a->gone[i].finalized && a->gone[i].born <= ts)
            k = &a->gone[i];
    int fin = e->state == 1 ? EVL_FINAL_CANCELLED
              : e->state == 2 ? (e->bits & LS_PYT_BIT_EXCEPTION ? EVL_FINAL_FAILED
                                                                : EVL_FINAL_FINISHED) : 0;
    uint64_t id;
    bool done;
    if (k) {
        id = k->id;
        done = k->state >= LS_PYT_FINISHED;
        k->finalized = true;
    } else {
        /* never in a census: made and destroyed between two */
        struct ls_pystack ps = { .task = e->task, .task_name_len = e->name_len,
                                 .flags = e->name_flags };
        memcpy(ps.task_name, e->name, sizeof ps.task_name);
        const char *name = e->name_len ? ls_py_task_name(r->py, &ps) : NULL;
        int64_t made = init_ts(a, e->task, ts);
        id = ++a->next_id;
        a->short_lived++;
        ls_sink_task(r, &(ls_task_rec){ .task = id, .loop = loop, .name = name ? name : "?",
                                         .len = strlen(name ? name : "?"), .created = made,
                                         .preexisting = made == ts });
        event(r, loop, made, id, EVL_PROBE_ID_task_create, made == ts, 0, 0);
        r->tasks_created++;
        done = false;
    }
    if (!done && fin) {
        event(r, loop, ts, id, EVL_PROBE_ID_task_finish, fin, 0, 0);
        ls_sink_task_finish(r, id, loop, ts, fin, 0);
        r->tasks_finished++;
    }
    int leak = !fin && (e->bits & LS_PYT_BIT_LOG_PENDING) ? EVL_LEAK_ABANDONED
               : fin == EVL_FINAL_FAILED && (e->bits & LS_PYT_BIT_LOG_TB) ? EVL_LEAK_UNRETRIEVED
               : 0;
    if (leak) {
        event(r, loop, ts, id, EVL_PROBE_ID_task_leak, leak, 0, 0);
        ls_sink_task_leak(r, id, leak);
    }
}

/* The id of the task at addr, for a blocking episode of it: a census now
 * if the last one did not know it (an episode is rare: one per stall). */
uint64_t ls_asyncio_task_id(recorder *r, uint64_t addr)
{
    struct ls_asyncio *a = r->asyncio;
    const struct pyt_track *p = a ? find(a->prev, a->nprev, addr) : NULL;
    if (!p && a && a->reading) {      /* in a census's drain: that census, compared now */
        census_diff(r, a);
        p = find(a->prev, a->nprev, addr);
    } else if (!p && a && !r->target_gone && !r->offline && !a->final_done) {
        census(r, a);
        p = find(a->prev, a->nprev, addr);
    }
    return p ? p->id : 0;
}

void ls_asyncio_meta(recorder *r)
{
    struct ls_asyncio *a = r->asyncio;
    if (!a) {
        ls_sink_meta(r, LS_META_TASK_SOURCE, "none");
        return;
    }
    if (a->probes_off_at)
        ls_sink_meta(r, LS_META_TASK_SOURCE, "census every %d ms, tp_init/tp_finalize probes "
                     "until +%.3fs (over %d tasks made a second)", r->census_ms,
                     (a->probes_off_at - r->attach_ns) / 1e9, r->task_probe_rate);
    else
        ls_sink_meta(r, LS_META_TASK_SOURCE, "census every %d ms%s", r->census_ms,
                     a->probes ? ", tp_init/tp_finalize probes" : "");
    ls_sink_meta(r, LS_META_CENSUSES, "%llu (mean %.3f ms; truncated %llu, read errors %llu)",
                 (unsigned long long)a->censuses,
                 a->censuses ? a->census_ns / 1e6 / (double)a->censuses : 0.0,
                 (unsigned long long)a->truncated, (unsigned long long)a->read_errors);
    ls_sink_meta(r, LS_META_CENSUS_MAX_GAP_NS, "%lld", (long long)a->max_gap);
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
    free(a->gone);
    free(a->defer);
    free(a);
    r->asyncio = NULL;
}
