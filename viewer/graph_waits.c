/*
 * graph_waits.c -- the wait-for edges and cycles of `loopscope graph --kind
 * tasks` (graph_tasks.c draws them) and of `lint`'s deadlock rule.
 *
 * A suspended task waits for another task when it awaits that task
 * (reason task, object: the task's id) or waits for a lock that task holds
 * (reason lock, timeout argument: the holder's id, loop/include/
 * evl-probes.h).  A wait-for cycle is a moment when each task of a cycle
 * is suspended waiting for the next: none can go on unless something
 * outside the cycle cancels one (a deadlock).
 *
 * Cost on a large trace: the wait-for edges are one sequential scan of
 * events (no index of a trace holds suspends by reason), skipped when the
 * derived transitions (model/derived.sql) show no such suspend.  Only
 * tasks on a cycle of the wait graph (every edge ever seen) can be in a
 * wait-for cycle, so only their events are replayed in trace order; what
 * the other pending waiters await at the end is one index probe each.
 *
 * Depends on graph.h, trace.h, model/replay.h (LS_NODE_*), ls_codes.h.
 */
#define _GNU_SOURCE
#include "graph.h"
#include "evchunk.h"
#include "output.h"
#include "ls_codes.h"
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int graph_task_by_id(const struct gtask *tk, int n, int64_t id)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (tk[mid].id == id)
            return mid;
        if (tk[mid].id < id)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

int graph_cmp_pair(const void *x, const void *y)
{
    const struct pair *a = x, *b = y;
    return a->a != b->a ? (a->a < b->a ? -1 : 1) : (a->b > b->b) - (a->b < b->b);
}

/* Whether the trace may hold a suspend for one of the reasons `which`
 * accepts: the derived transitions count every tracked task's entries into
 * each suspended(reason) node.  true when they cannot tell (not derived
 * yet, recording in progress, tasks the replay could not track). */
static bool may_suspend(ls_trace *t, bool (*which)(int64_t reason))
{
    char *mv = ls_meta(t, LS_META_MODEL_VERSION);
    bool derived = mv != NULL;
    free(mv);
    if (!derived || t->in_progress || ls_meta_int(t, LS_META_UNTRACKED_TASKS, 0) != 0)
        return true;
    bool any = false;
    int step = SQLITE_ERROR;          /* until the statement runs */
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(t->db, "SELECT to_node - ?1 FROM transitions WHERE to_node BETWEEN ?1"
                                  " AND ?1 + ?2 GROUP BY to_node HAVING sum(count) > 0",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int(st, 1, LS_NODE_SUSPENDED);
        sqlite3_bind_int(st, 2, LS_NODE_DETAIL_MAX);
        while (!any && (step = sqlite3_step(st)) == SQLITE_ROW)
            any = which(sqlite3_column_int64(st, 0));
    }
    sqlite3_finalize(st);
    return any || (step != SQLITE_DONE && step != SQLITE_ROW);   /* unreadable: cannot tell */
}

/* Suspends that wait for one task: awaiting it, or a lock it holds. */
static bool is_wait_reason(int64_t r)
{
    return r == EVL_SUSPEND_TASK || r == EVL_SUSPEND_LOCK;
}

/* The task a suspend waits for (WAIT_FOR_SQL in SQL), or 0: none. */
static int64_t wait_for(int64_t reason, int64_t arg0, int64_t arg1)
{
    return reason == EVL_SUSPEND_TASK ? arg0 : reason == EVL_SUSPEND_LOCK ? arg1 : 0;
}
#define WAIT_REASONS LS_SQL_SUSPEND_TASK ", " LS_SQL_SUSPEND_LOCK
#define WAIT_FOR_SQL "CASE reason WHEN " LS_SQL_SUSPEND_TASK " THEN arg0 ELSE arg1 END"

/*
 * The wait-for edges: suspends with reason task or lock, per (waiter,
 * awaited or holder, reason), sorted.  No index of the trace holds them,
 * so this is one sequential scan of events (the '+' keeps them out of the
 * virtual table's lookup by task, model/events_vtab.c, whose chunk-by-chunk
 * reads per task would cost more).
 */
static bool read_awaits(ls_trace *t, const struct gtask *tk, int n, struct await **aw, size_t *naw)
{
    size_t cap = 0;
    if (!may_suspend(t, is_wait_reason))
        return true;
    sqlite3_stmt *st = ls_prepare(t,
        "SELECT task_id, " WAIT_FOR_SQL ", reason, count(*) FROM events"
        " WHERE kind = " LS_SQL_KIND_task_suspend " AND reason IN (" WAIT_REASONS ")"
        " GROUP BY +task_id, 2, +reason ORDER BY 1, 2, 3");
    if (!st)
        return false;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) == SQLITE_NULL || sqlite3_column_type(st, 1) == SQLITE_NULL)
            continue;
        int w = graph_task_by_id(tk, n, sqlite3_column_int64(st, 0));
        int a = graph_task_by_id(tk, n, sqlite3_column_int64(st, 1));
        if (w < 0 || a < 0)
            continue;                       /* awaited an id not in tasks: nothing to draw */
        if (!ls_grow((void **)aw, &cap, *naw + 1, sizeof(**aw)))
            break;
        (*aw)[(*naw)++] = (struct await){ w, a, sqlite3_column_int(st, 2),
                                          sqlite3_column_int64(st, 3) };
    }
    bool ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    return ok;
}

/*
 * Tasks on a cycle of the await graph (every await edge ever seen): only
 * they can be in a wait-for cycle at some moment, so only their events are
 * scanned for one.  Tarjan's strongly connected components, iteratively;
 * aw is sorted by waiter.  Returns the number marked (tk[].cand), -1 when
 * out of memory.
 */
static int mark_candidates(struct gtask *tk, int n, const struct await *aw, size_t naw)
{
    size_t sz = (size_t)(n > 0 ? n : 1);
    int *off = calloc(sz + 1, sizeof(int)), *idx = malloc(sz * sizeof(int));
    int *low = malloc(sz * sizeof(int)), *stk = malloc(sz * sizeof(int));
    int *cs = malloc(sz * sizeof(int)), *pos = malloc(sz * sizeof(int));
    bool *on = calloc(sz, sizeof(bool));
    int marked = -1;
    if (!off || !idx || !low || !stk || !cs || !pos || !on)
        goto out;
    for (size_t e = 0; e < naw; e++)
        off[aw[e].w + 1]++;
    for (int i = 0; i < n; i++) {
        off[i + 1] += off[i];
        idx[i] = -1;
    }
    marked = 0;
    int counter = 0, sp = 0, csp = 0;
    for (int r = 0; r < n; r++) {
        if (idx[r] >= 0 || off[r] == off[r + 1])
            continue;
        idx[r] = low[r] = counter++;
        stk[sp++] = r;
        on[r] = true;
        cs[csp++] = r;
        pos[r] = off[r];
        while (csp) {
            int v = cs[csp - 1];
            if (pos[v] < off[v + 1]) {
                int w = aw[pos[v]++].a;
                if (idx[w] < 0) {
                    idx[w] = low[w] = counter++;
                    stk[sp++] = w;
                    on[w] = true;
                    cs[csp++] = w;
                    pos[w] = off[w];
                } else if (on[w] && idx[w] < low[v]) {
                    low[v] = idx[w];
                }
                continue;
            }
            if (--csp && low[v] < low[cs[csp - 1]])
                low[cs[csp - 1]] = low[v];
            if (low[v] != idx[v])
                continue;
            int top = sp;
            while (stk[--sp] != v)
                on[stk[sp]] = false;
            on[v] = false;
            bool self = false;
            for (int e = off[v]; e < off[v + 1]; e++)
                self |= aw[e].a == v;
            if (top - sp > 1 || self)
                for (int k = sp; k < top; k++, marked++)
                    tk[stk[k]].cand = true;
        }
    }
out:
    free(off);
    free(idx);
    free(low);
    free(stk);
    free(cs);
    free(pos);
    free(on);
    return marked;
}

/* What each pending task that waited for a task, and is not a cycle
 * candidate (the cycle scan tells those), waits for at the end: its last
 * state event, if that is such a suspend.  One lookup by task of the
 * events table (model/events_vtab.c) per such task. */
static bool waits_at_end(ls_trace *t, struct gtask *tk, int n, const struct await *aw, size_t naw)
{
    sqlite3_stmt *st = ls_prepare(t,
        "SELECT kind, reason, arg0, arg1 FROM events WHERE task_id = ?1 AND kind IN ("
        LS_SQL_KIND_task_run ", " LS_SQL_KIND_task_suspend ", " LS_SQL_KIND_task_wake ", "
        LS_SQL_KIND_task_finish ") ORDER BY ts_ns DESC, rowid DESC LIMIT 1");
    if (!st)
        return false;
    bool ok = true;
    for (size_t e = 0; e < naw && ok; e++) {
        struct gtask *x = &tk[aw[e].w];
        if ((e > 0 && aw[e - 1].w == aw[e].w) || x->cand || x->final >= 0)
            continue;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, x->id);
        int step = sqlite3_step(st);
        int64_t reason = sqlite3_column_int64(st, 1);
        int64_t to = wait_for(reason, sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3));
        if (step == SQLITE_ROW && sqlite3_column_int(st, 0) == EVL_PROBE_ID_task_suspend && to) {
            x->wait_id = to;
            x->wait_reason = (int)reason;
            x->wait = graph_task_by_id(tk, n, x->wait_id);
        }
        ok = step == SQLITE_ROW || ls_step_ok(t, st, step);
    }
    sqlite3_finalize(st);
    return ok;
}

/* The candidates into temp table g_cand, for the cycle scan. */
static bool store_candidates(ls_trace *t, const struct gtask *tk, int n)
{
    if (!graph_exec(t, "CREATE TEMP TABLE g_cand(id INTEGER PRIMARY KEY)"))
        return false;
    sqlite3_stmt *st = ls_prepare(t, "INSERT INTO g_cand(id) VALUES(?1)");
    if (!st)
        return false;
    bool ok = graph_exec(t, "BEGIN");
    for (int i = 0; i < n && ok; i++) {
        if (!tk[i].cand)
            continue;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, tk[i].id);
        ok = ls_step_ok(t, st, sqlite3_step(st));
    }
    sqlite3_finalize(st);
    return graph_exec(t, ok ? "COMMIT" : "ROLLBACK") && ok;
}

/* One integer from SQL (that may fail: a table an older trace lacks), or -1. */
/*
 * Wait-for cycles.  Replays, in the events table's order (rowid: the
 * order each loop made them, model/replay.h), the events of the candidate
 * tasks (mark_candidates): a task_suspend waiting for a task (wait_for) sets
 * its wait edge, any later run, wake, finish or other suspend clears it.
 * Each task has at most one wait edge, so right after one is set, following
 * the edges from the awaited task either ends or comes back to the waiter
 * (a cycle: every task on it is suspended awaiting the next) -- or runs into
 * an older cycle not through the waiter, which the step bound cuts off.
 * Cycle edges are appended to *cyc as (waiter, awaited) task indexes.
 */
static bool find_cycles(ls_trace *t, struct gtask *tk, int n, struct pair **cyc, size_t *ncyc)
{
    size_t cap = 0;
    int cycles = 0;
    /* One sequential scan: the virtual table takes task_id = only, an IN
     * list is checked by SQLite (model/events_vtab.c). */
    sqlite3_stmt *st = ls_prepare(t,
        "SELECT task_id, kind, reason, arg0, arg1, ts_ns FROM events"
        " WHERE task_id IN (SELECT id FROM g_cand) AND kind IN (" LS_SQL_KIND_task_run ", "
        LS_SQL_KIND_task_suspend ", " LS_SQL_KIND_task_wake ", " LS_SQL_KIND_task_finish ")"
        " ORDER BY rowid");
    if (!st)
        return false;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int i = graph_task_by_id(tk, n, sqlite3_column_int64(st, 0));
        if (i < 0)
            continue;
        int64_t reason = sqlite3_column_int64(st, 2), arg0 = sqlite3_column_int64(st, 3);
        int64_t to = wait_for(reason, arg0, sqlite3_column_int64(st, 4));
        /* The first wait that put it in a cycle ends: that cycle is broken. */
        if (tk[i].cycle_no && !tk[i].cycle_end && tk[i].wait == tk[i].cycle_next)
            tk[i].cycle_end = sqlite3_column_int64(st, 5);
        if (sqlite3_column_int(st, 1) != EVL_PROBE_ID_task_suspend || !to) {
            tk[i].wait = -1;
            tk[i].wait_id = -1;
            continue;
        }
        tk[i].wait_id = to;
        tk[i].wait_reason = (int)reason;
        tk[i].wait = graph_task_by_id(tk, n, tk[i].wait_id);
        tk[i].wait_ts = sqlite3_column_int64(st, 5);
        if (!tk[i].cycle_no)
            tk[i].cycle_obj = arg0;   /* kept for the cycle's report below */
        int k = tk[i].wait;
        for (int steps = 0; k >= 0 && k != i && steps < n; steps++)
            k = tk[k].wait;
        if (k != i)
            continue;
        int m = i;
        cycles++;
        do {
            if (!ls_grow((void **)cyc, &cap, *ncyc + 1, sizeof(**cyc)))
                break;
            (*cyc)[(*ncyc)++] = (struct pair){ m, tk[m].wait };
            tk[m].in_cycle = true;
            m = tk[m].wait;
        } while (m != i);
        /* The first cycle of each member: how it waits in it.  Its object
         * is the argument of its last suspend, kept in cycle_obj above
         * (until it is in a cycle). */
        m = i;
        do {
            if (!tk[m].cycle_no) {
                tk[m].cycle_no = cycles;
                tk[m].cycle_ts = sqlite3_column_int64(st, 5);
                tk[m].cycle_reason = tk[m].wait_reason;
                tk[m].cycle_since = tk[m].wait_ts;
                tk[m].cycle_next = tk[m].wait;
            }
            m = tk[m].wait;
        } while (m != i);
    }
    bool ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (*ncyc)
        qsort(*cyc, *ncyc, sizeof(**cyc), graph_cmp_pair);
    return ok;
}

/* ------------------------------------------------------------ releases
 *
 * A task that waits on an event, a condition, a semaphore or a queue waits
 * for no one task in particular: whoever sets, notifies, releases, puts or
 * gets next lets it go on.  The trace says who did, afterwards: the wake
 * that ends such a suspend names the waker task.  These edges (waiter ->
 * waker, by the suspend's reason) show who fed whom; they are history, not
 * a wait at one moment, so they take no part in the cycles above. */

static bool is_sync_reason(int64_t r)
{
    return r == EVL_SUSPEND_EVENT || r == EVL_SUSPEND_CONDITION || r == EVL_SUSPEND_SEMAPHORE ||
           r == EVL_SUSPEND_QUEUE_GET || r == EVL_SUSPEND_QUEUE_PUT || r == EVL_SUSPEND_QUEUE_JOIN;
}

static int cmp_await(const void *x, const void *y)
{
    const struct await *a = x, *b = y;
    if (a->w != b->w)
        return a->w < b->w ? -1 : 1;
    if (a->a != b->a)
        return a->a < b->a ? -1 : 1;
    return (a->reason > b->reason) - (a->reason < b->reason);
}

bool graph_task_releases(ls_trace *t, const struct gtask *tk, int n, struct await **rel,
                         size_t *nrel)
{
    size_t cap = 0;
    if (n == 0 || !may_suspend(t, is_sync_reason))
        return true;
    int *pend = calloc((size_t)n, sizeof(int));  /* per task: the reason it waits for, or 0 */
    if (!pend) {
        ls_error("graph: out of memory");
        return false;
    }
    sqlite3_stmt *st = ls_prepare(t,
        "SELECT task_id, kind, reason, arg0 FROM events WHERE kind IN ("
        LS_SQL_KIND_task_suspend ", " LS_SQL_KIND_task_wake ") ORDER BY rowid");
    bool ok = st != NULL;
    int step = SQLITE_DONE;
    while (ok && (step = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) == SQLITE_NULL)
            continue;
        int w = graph_task_by_id(tk, n, sqlite3_column_int64(st, 0));
        if (w < 0)
            continue;
        int64_t reason = sqlite3_column_int64(st, 2);
        if (sqlite3_column_int(st, 1) == EVL_PROBE_ID_task_suspend) {
            pend[w] = is_sync_reason(reason) ? (int)reason : 0;
            continue;
        }
        /* Woken by a set, notify, release, put or get; not by a
         * cancellation (its waker is the canceller, or none). */
        bool fed = reason == EVL_WAKER_EVENT || reason == EVL_WAKER_CONDITION ||
                   reason == EVL_WAKER_SEMAPHORE || reason == EVL_WAKER_QUEUE;
        int a = pend[w] && fed ? graph_task_by_id(tk, n, sqlite3_column_int64(st, 3)) : -1;
        if (a >= 0 && a != w) {
            if (!ls_grow((void **)rel, &cap, *nrel + 1, sizeof(**rel))) {
                ok = !ls_error("graph: out of memory");
                break;
            }
            (*rel)[(*nrel)++] = (struct await){ w, a, pend[w], 1 };
        }
        pend[w] = 0;
    }
    if (st)
        ok = ok && ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    free(pend);
    /* One edge per (waiter, waker, reason), with its count. */
    if (*nrel) {
        qsort(*rel, *nrel, sizeof(**rel), cmp_await);
        size_t k = 0;
        for (size_t i = 1; i < *nrel; i++) {
            if (!cmp_await(&(*rel)[k], &(*rel)[i]))
                (*rel)[k].n += (*rel)[i].n;
            else
                (*rel)[++k] = (*rel)[i];
        }
        *nrel = k + 1;
    }
    return ok;
}

bool graph_task_waits(ls_trace *t, struct gtask *tk, int n, struct await **aw, size_t *naw,
                      struct pair **cyc, size_t *ncyc)
{
    if (!read_awaits(t, tk, n, aw, naw))
        return false;
    int ncand = mark_candidates(tk, n, *aw, *naw);
    if (ncand < 0) {
        ls_error("graph: out of memory");
        return false;
    }
    if (ncand > 0 && (!store_candidates(t, tk, n) || !find_cycles(t, tk, n, cyc, ncyc)))
        return false;
    return waits_at_end(t, tk, n, *aw, *naw);
}
