/*
 * export_model.c -- what `loopscope export` exports (export_model.h),
 * walking the trace once: the events in rowid order (the order the loop
 * made them, per task) are fed to the one replay of task states
 * (model/replay.h), whose spans become the task tracks' slices -- "running"
 * (a step), "suspended: REASON" (until the wake), "ready" (woken or
 * created, until it runs) -- and loop-level events to export_loops.c.
 * Around the spans: a flow from the waker (the task running when the wake
 * happened, or for a wake by task completion the end of the awaited task)
 * to the woken task's next step; the blocking episodes of a step nested in
 * it; instants for cancel requests, failures and leak verdicts.
 *
 * Memory: per task ever seen a small entry (its loop, rank, end); per live
 * task its track and pending episodes; the episodes are read by start time
 * alongside the events, so only those of open steps are held.
 */
#define _GNU_SOURCE
#include "export_model.h"
#include "replay.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char *const suspend_names[] = {
    "suspended: ?",
#define XX(n, v, s) [v] = "suspended: " s,
    EVL_SUSPEND_LIST(XX)
#undef XX
};
static const char *const waker_names[] = {
    "?",
#define XX(n, v, s) [v] = s,
    EVL_WAKER_LIST(XX)
#undef XX
};
static const char *const state_names[] = {
#define XX(n, v, s) [v] = s,
    EVL_STATE_LIST(XX)
#undef XX
};
static const char *const leak_names[] = {
    "?",
#define XX(n, v, s) [v] = s,
    EVL_LEAK_LIST(XX)
#undef XX
};
#define NAME_OF(tab, i) \
    ((i) >= 0 && (size_t)(i) < sizeof(tab) / sizeof(tab[0]) && tab[i] ? tab[i] : tab[0])

/* A live task's export state. */
typedef struct xlive {
    ls_xtrack track;
    int64_t step;              /* running spans so far */
    int64_t blk_prev;          /* end of the last episode written */
    episode *blk, *blk_tail;   /* its episodes not yet written, by start */
    int64_t susp_reason, susp_obj;   /* of its last suspended span */
    uint64_t flow_from;        /* a wake arrow to its next step: from task */
    int64_t flow_ts;
    const char *flow_via;
} xlive;

/* Every task seen (open addressing by id). */
typedef struct xtask {
    uint64_t id;               /* 0: free */
    uint64_t loop;
    int64_t rank;              /* order of first appearance */
    int64_t end;               /* task_finish, or -1 */
    bool declared;
    xlive *lv;
} xtask;

#define RECENT 4096           /* finished tasks remembered (direct-mapped) */

typedef struct walk {
    exporter *x;
    ls_replay *r;
    xtask *tasks;              /* tasks not finished */
    size_t cap, n;
    int64_t ranks;
    xtask recent[RECENT];
    uint64_t flows;
    sqlite3_stmt *tq, *tone;   /* names: by id in order, and one by id */
    int tq_rc;
    sqlite3_stmt *blk;         /* task episodes by start */
    int blk_rc;
    episode *blk_row;          /* read but not yet due */
    ls_xtrack scratch;         /* the track of a task no longer live */
} walk;

static size_t task_home(uint64_t id, size_t cap)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
}

/* The entry of task id: a task not finished, or one finished lately. */
static xtask *task_find(walk *k, uint64_t id)
{
    if (!id)
        return NULL;
    for (size_t i = k->cap ? task_home(id, k->cap) : 0; k->cap; i = (i + 1) & (k->cap - 1)) {
        if (k->tasks[i].id == id)
            return &k->tasks[i];
        if (!k->tasks[i].id)
            break;
    }
    xtask *r = &k->recent[task_home(id, RECENT)];
    return r->id == id ? r : NULL;
}

static xtask *task_get(walk *k, uint64_t id, uint64_t loop)
{
    xtask *t = task_find(k, id);
    if (t || !id)
        return t;
    if ((k->n + 1) * 2 > k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 1024;
        xtask *a = calloc(cap, sizeof(*a));
        if (!a)
            return NULL;
        for (size_t i = 0; i < k->cap; i++) {
            if (!k->tasks[i].id)
                continue;
            size_t j = task_home(k->tasks[i].id, cap);
            while (a[j].id)
                j = (j + 1) & (cap - 1);
            a[j] = k->tasks[i];
        }
        free(k->tasks);
        k->tasks = a;
        k->cap = cap;
    }
    size_t j = task_home(id, k->cap);
    while (k->tasks[j].id)
        j = (j + 1) & (k->cap - 1);
    k->n++;
    k->tasks[j] = (xtask){ .id = id, .loop = loop, .rank = ++k->ranks, .end = -1 };
    return &k->tasks[j];
}

/* A finished task leaves the table for the small one of recent finishes
 * (kept for the arrows from it and its late leak verdict), so memory
 * follows the live tasks, not all of them.  Backward-shift deletion. */
static void task_retire(walk *k, xtask *t)
{
    if (t < k->tasks || t >= k->tasks + k->cap)
        return;                          /* already in recent */
    k->recent[task_home(t->id, RECENT)] = *t;
    k->recent[task_home(t->id, RECENT)].lv = NULL;
    size_t i = (size_t)(t - k->tasks), j = i;
    k->tasks[i] = (xtask){ 0 };
    k->n--;
    for (;;) {
        j = (j + 1) & (k->cap - 1);
        if (!k->tasks[j].id)
            return;
        size_t h = task_home(k->tasks[j].id, k->cap);
        if ((j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j))) {
            k->tasks[i] = k->tasks[j];
            k->tasks[j] = (xtask){ 0 };   /* its live state moved too: one owner */
            i = j;
        }
    }
}

static xlive *task_live(xtask *t)
{
    if (!t->lv && (t->lv = calloc(1, sizeof(*t->lv))))
        t->lv->blk_prev = INT64_MIN;
    return t->lv;
}

/* The task's name from the tasks table: a cursor by id (tasks appear in
 * id order, mostly), else a lookup by id. */
static char *task_name(walk *k, uint64_t id)
{
    sqlite3_stmt *st = k->tq;
    while (k->tq_rc == SQLITE_ROW && (uint64_t)sqlite3_column_int64(st, 0) < id)
        k->tq_rc = sqlite3_step(st);
    if (k->tq_rc != SQLITE_ROW || (uint64_t)sqlite3_column_int64(st, 0) != id) {
        st = k->tone;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, (int64_t)id);
        if (sqlite3_step(st) != SQLITE_ROW)
            return NULL;
    }
    const unsigned char *s = sqlite3_column_text(st, 1);
    return s ? strdup((const char *)s) : NULL;
}

/* The track of task t, declared (named "NAME (id N)") the first time
 * something on it shows in the window; NULL when [a, b] does not. */
static ls_xtrack *task_track(walk *k, xtask *t, int64_t a, int64_t b)
{
    exporter *x = k->x;
    if (!x_in_window(x, a, b < a ? a : b))
        return NULL;
    ls_xtrack *tr = t->lv ? &t->lv->track : &k->scratch;
    if (tr == &k->scratch || !tr->uuid) {
        xloop *l = x_loop(x, (int64_t)t->loop);
        *tr = (ls_xtrack){ LS_XT_TASK, t->id * 8 + 7, l ? l->proc.uuid : 0, (int64_t)t->loop,
                           (int64_t)t->id, t->rank, 0, { 0 } };
    }
    if (!t->declared) {
        t->declared = true;
        char *name = task_name(k, t->id), *label = NULL;
        if (asprintf(&label, "%s (id %" PRIu64 ")", name ? name : "?", t->id) < 0)
            label = NULL;
        x->w->ops->track(x->w, tr, label ? label : "?");
        free(label);
        free(name);
    }
    return tr;
}

void x_slice(exporter *x, ls_xtrack *t, int64_t a, int64_t b, const ls_xev *e)
{
    if (!t)
        return;
    if (b < a)
        b = a;
    if (!x_in_window(x, a, b))
        return;
    x->w->ops->slice(x->w, t, a < x->from ? x->from : a, b > x->to ? x->to : b, e);
}

void x_instant(exporter *x, ls_xtrack *t, int64_t ts, const ls_xev *e)
{
    if (t && ts >= x->from && ts <= x->to)
        x->w->ops->instant(x->w, t, ts, e);
}

/* ------------------------------------------------------------ episodes */

/* The live task's episodes starting before hi, clipped to the step [lo, hi]. */
static void drain_blocking(walk *k, xtask *t, int64_t lo, int64_t hi)
{
    xlive *lv = t->lv;
    while (lv->blk && lv->blk->start < hi) {
        episode *e = lv->blk;
        if (!(lv->blk = e->next))
            lv->blk_tail = NULL;
        if (lv->blk_prev < lo)
            lv->blk_prev = lo;
        x_episode_write(k->x, e, task_track(k, t, e->start, e->start + e->dur), lo, hi,
                        &lv->blk_prev);
        x_episode_free(e);
        free(e);
    }
}

/* Hand the episodes that started before ts to their tasks (or write them,
 * for a task that is not live). */
static void route_blocking(walk *k, int64_t ts)
{
    while (k->blk_rc == SQLITE_ROW) {
        if (!k->blk_row) {
            if (!(k->blk_row = malloc(sizeof(episode))))
                return;
            x_episode_read(k->blk, k->blk_row);
        }
        episode *e = k->blk_row;
        if (e->start >= ts)
            return;
        k->blk_row = NULL;
        k->blk_rc = sqlite3_step(k->blk);
        xtask *t = task_get(k, (uint64_t)e->task_id, (uint64_t)e->loop_id);
        if (t && t->lv) {
            *(t->lv->blk_tail ? &t->lv->blk_tail->next : &t->lv->blk) = e;
            t->lv->blk_tail = e;
            continue;
        }
        int64_t prev = INT64_MIN;
        if (t)
            x_episode_write(k->x, e, task_track(k, t, e->start, e->start + e->dur), INT64_MIN,
                            INT64_MAX, &prev);
        x_episode_free(e);
        free(e);
    }
}

/* --------------------------------------------------------- the replay */

static void on_span(void *ctx, const ls_span *s)
{
    walk *k = ctx;
    exporter *x = k->x;
    xtask *t = task_get(k, s->task, s->loop);
    xlive *lv = t ? task_live(t) : NULL;
    if (!lv)
        return;
    ls_xarg a[8];
    int n = 0;
    ls_xev e = { 0 };
    bool pre = s->node == LS_NODE_PREEXISTING;
    switch (s->state) {
    case EVL_FINAL_RUNNING:
        lv->step++;
        e = (ls_xev){ .name = "running", .cat = "running", .cname = "thread_state_running" };
        a[n++] = (ls_xarg){ "step", LS_XA_INT, .i = lv->step };
        break;
    case EVL_FINAL_CREATED:
    case EVL_FINAL_READY:
        e = (ls_xev){ .name = "ready", .cat = "ready", .cname = "thread_state_runnable" };
        if (s->node != LS_NODE_READY)
            a[n++] = (ls_xarg){ "since", LS_XA_NAME, .s = "created" };
        else
            /* waker kind 0: not known (a census of asyncio tasks cannot tell) */
            a[n++] = (ls_xarg){ "woken_by", LS_XA_NAME,
                                .s = s->detail ? NAME_OF(waker_names, s->detail) : "unknown" };
        if (s->node == LS_NODE_READY && s->object > 0)
            a[n++] = (ls_xarg){ "waker_task", LS_XA_INT, .i = s->object };
        break;
    case EVL_FINAL_SUSPENDED: {
        int64_t r = pre ? 0 : s->detail;
        e = (ls_xev){ .name = NAME_OF(suspend_names, r), .cat = "suspended",
                      .cname = r == EVL_SUSPEND_IO ? "thread_state_iowait"
                                                   : "thread_state_sleeping" };
        switch (r) {
        case 0: break;
        case EVL_SUSPEND_SLEEP: a[n++] = (ls_xarg){ "sleep_ms", LS_XA_MS, .i = s->timeout }; break;
        case EVL_SUSPEND_IO: a[n++] = (ls_xarg){ "fd", LS_XA_INT, .i = s->object }; break;
        case EVL_SUSPEND_TASK: a[n++] = (ls_xarg){ "awaits_task", LS_XA_INT, .i = s->object }; break;
        case EVL_SUSPEND_YIELD: break;
        default: a[n++] = (ls_xarg){ "future", LS_XA_HEX, .i = s->object }; break;
        }
        lv->susp_reason = r;
        lv->susp_obj = s->object;
        break;
    }
    default:
        return;
    }
    const char *ends = NULL;
    bool finish = s->end_kind == EVL_PROBE_ID_task_finish;
    if (finish) {
        ends = NAME_OF(state_names, s->end_reason);
    } else if (!s->end_kind) {
        xloop *l = x_loop(x, (int64_t)s->loop);
        ends = l && l->stopped > 0 && s->end >= l->stopped ? "loop stopped" : "end of recording";
    }
    if (ends)
        a[n++] = (ls_xarg){ "ends", LS_XA_NAME, .s = ends };
    if (finish && s->end_arg0)
        n += x_error_args(&a[n], s->end_arg0);
    e.args = a;
    e.nargs = n;

    ls_xtrack *tr = task_track(k, t, s->start, s->end);
    if (s->state == EVL_FINAL_RUNNING) {
        if (lv->flow_from && lv->flow_ts >= x->from && s->start <= x->to &&
            lv->flow_ts <= s->start && tr) {
            xtask *w = task_find(k, lv->flow_from);
            ls_xtrack *wt = w && w != t ? task_track(k, w, lv->flow_ts, lv->flow_ts) : NULL;
            if (wt) {
                e.flow_in = ++k->flows;
                e.flow_via = lv->flow_via;
                x->w->ops->flow_start(x->w, wt, lv->flow_ts, e.flow_in, lv->flow_via);
            }
        }
        lv->flow_from = 0;
        x_slice(x, tr, s->start, s->end, &e);
        drain_blocking(k, t, s->start, s->end);
    } else {
        x_slice(x, tr, s->start, s->end, &e);
    }
    if (s->state == EVL_FINAL_READY && s->node == LS_NODE_READY) {
        /* The arrow to its next step: from the waker, or from the end of
         * the awaited task's last step (1 ns before its finish). */
        lv->flow_from = 0;
        xtask *aw;
        if (s->object > 0 && (uint64_t)s->object != t->id) {
            lv->flow_from = (uint64_t)s->object;
            lv->flow_ts = s->start;
            lv->flow_via = NAME_OF(waker_names, s->detail);
        } else if (s->detail == EVL_WAKER_TASK && lv->susp_reason == EVL_SUSPEND_TASK &&
                   (aw = task_find(k, (uint64_t)lv->susp_obj)) && aw != t && aw->end > 0 &&
                   aw->end <= s->start) {
            lv->flow_from = aw->id;
            lv->flow_ts = aw->end - 1;
            lv->flow_via = "task completion";
        }
    }
    if (finish && s->end_reason != EVL_FINAL_FINISHED) {
        n = x_error_args(a, s->end_arg0);
        ls_xev fe = { .name = NAME_OF(state_names, s->end_reason), .cat = "finish",
                      .cname = s->end_reason == EVL_FINAL_FAILED ? "bad" : NULL, .args = a,
                      .nargs = n };
        x_instant(x, task_track(k, t, s->end, s->end), s->end, &fe);
    }
}

/* The task is over: what is left of it is written, its live state freed. */
static void on_task_done(void *ctx, const ls_task *task, bool finished)
{
    walk *k = ctx;
    xtask *t = task_find(k, task->id);
    if (!t)
        return;
    if (!t->lv) {
        if (finished)
            task_retire(k, t);
        return;
    }
    if (t->lv->blk)
        drain_blocking(k, t, INT64_MIN, INT64_MAX);
    if (t->declared)
        k->x->w->ops->track_end(k->x->w, &t->lv->track);
    free(t->lv);
    t->lv = NULL;
    if (finished)
        task_retire(k, t);
}

static void on_mark(void *ctx, const ls_event *ev)
{
    walk *k = ctx;
    xtask *t = task_get(k, ev->task, ev->loop);
    if (!t)
        return;
    ls_xarg a;
    ls_xev e = { .args = &a };
    char name[64];
    if (ev->kind == EVL_PROBE_ID_task_cancel) {
        e.name = "cancel requested";
        e.cat = "cancel";
        if (ev->arg0 > 0) {
            a = (ls_xarg){ "by_task", LS_XA_INT, .i = ev->arg0 };
            e.nargs = 1;
        }
    } else {
        snprintf(name, sizeof(name), "LEAK: %s", NAME_OF(leak_names, ev->reason));
        e.name = name;
        e.name_tmp = true;
        e.cat = "leak";
        e.cname = "terrible";
        a = (ls_xarg){ "verdict", LS_XA_NAME, .s = NAME_OF(leak_names, ev->reason) };
        e.nargs = 1;
    }
    x_instant(k->x, task_track(k, t, ev->ts, ev->ts), ev->ts, &e);
}

/* ----------------------------------------------------------- the walk */

static bool walk_events(walk *k)
{
    exporter *x = k->x;
    sqlite3_stmt *ev = ls_prepare(x->t, "SELECT ts_ns, loop_id, task_id, kind, reason, arg0,"
                                        " arg1 FROM events ORDER BY rowid");
    if (!ev)
        return false;
    int rc;
    int64_t seen = INT64_MIN;
    while ((rc = sqlite3_step(ev)) == SQLITE_ROW) {
        ls_event e = {
            .ts = ls_col_ts(ev, 0), .loop = (uint64_t)sqlite3_column_int64(ev, 1),
            .task = (uint64_t)sqlite3_column_int64(ev, 2), .kind = sqlite3_column_int(ev, 3),
            .reason = sqlite3_column_int64(ev, 4), .arg0 = sqlite3_column_int64(ev, 5),
            .arg1 = sqlite3_column_int64(ev, 6),
        };
        if (e.ts > seen) {
            seen = e.ts;
            route_blocking(k, seen);
        }
        if (sqlite3_column_type(ev, 2) == SQLITE_NULL) {
            xloop *l = x_loop(x, (int64_t)e.loop);
            if (l)
                x_loop_event(x, l, e.ts, e.kind, e.reason, e.arg0);
            if (e.kind == EVL_PROBE_ID_loop_stop)
                ls_replay_loop_stop(k->r, e.loop, e.ts);
            e.task = 0;
        } else if (e.task) {
            xtask *t = task_get(k, e.task, e.loop);
            if (t && e.kind == EVL_PROBE_ID_task_finish)
                t->end = e.ts;
            else if (t && e.kind >= EVL_PROBE_ID_task_create && e.kind <= EVL_PROBE_ID_task_wake)
                task_live(t);             /* holds its episodes from its first step */
        }
        ls_replay_event(k->r, &e);
        if (ferror(x->w->f))
            break;
    }
    bool ok = ls_step_ok(x->t, ev, rc);
    sqlite3_finalize(ev);
    return ok;
}

bool ls_export_run(ls_trace *tr, ls_xwriter *w, int64_t from, int64_t to, int64_t end)
{
    exporter x = { .t = tr, .w = w, .from = from, .to = to, .end = end,
                   .generic = ls_is_generic(tr) };
    static walk k;              /* 200 KB: not on the stack */
    k = (walk){ .x = &x };
    ls_replay_ops ops = { on_span, on_task_done, on_mark, &k, .spans_only = true };
    bool ok = x_loops_load(&x);
    char sql[1024];             /* x_episodes_sql filled in */
    snprintf(sql, sizeof(sql), x_episodes_sql, x.generic ? "0" : "b.task_id IS NOT NULL", "");
    if (ok) {
        k.tq = ls_prepare(tr, "SELECT id, name FROM tasks ORDER BY id");
        k.tone = k.tq ? ls_prepare(tr, "SELECT id, name FROM tasks WHERE id = ?") : NULL;
        k.blk = k.tone ? ls_prepare(tr, sql) : NULL;
        k.r = k.blk ? ls_replay_new(&ops, SIZE_MAX / 2) : NULL; /* every task, as derive */
        ok = k.r != NULL;
    }
    if (ok) {
        k.tq_rc = sqlite3_step(k.tq);
        k.blk_rc = sqlite3_step(k.blk);
        ok = walk_events(&k);
        route_blocking(&k, INT64_MAX);
        for (size_t i = 0; i < x.nloops; i++)
            if (x.loops[i].stopped > 0)
                ls_replay_loop_stop(k.r, (uint64_t)x.loops[i].id, x.loops[i].stopped);
        ls_replay_end(k.r, x.end);
        ok = ok && (k.blk_rc == SQLITE_DONE || ls_step_ok(tr, k.blk, k.blk_rc));
        x_loops_finish(&x);
        ok = ok && x_window_counters(&x);
    }
    if (k.blk_row) {
        x_episode_free(k.blk_row);
        free(k.blk_row);
    }
    for (size_t i = 0; i < k.cap; i++)
        if (k.tasks[i].lv) {
            for (episode *e = k.tasks[i].lv->blk, *nx; e; e = nx) {
                nx = e->next;
                x_episode_free(e);
                free(e);
            }
            free(k.tasks[i].lv);
        }
    free(k.tasks);
    ls_replay_free(k.r);
    sqlite3_finalize(k.tq);
    sqlite3_finalize(k.tone);
    sqlite3_finalize(k.blk);
    x_loops_free(&x);
    return ok;
}
