/*
 * graph_lifecycle.c -- `loopscope graph --kind lifecycle`: the state
 * diagram every task went through, with counts and latencies per
 * transition, or (--task ID) one task's path.  Reads table events
 * (tracer/SCHEMA.md).  Depends on graph.h (gv.h), trace.h.
 */
#define _GNU_SOURCE
#include "graph.h"
#include "output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/*
 * A task's state after each lifecycle event, as one integer so that SQL
 * groups and sorts cheaply: 300 created, 301 pre-existing (created before
 * the recording began; its state then is unknown), 400 running, 500+reason suspended(reason),
 * 600 ready, 700+state finished/failed/cancelled, 900 leaked; 0 is the end
 * of the trace.  task_cancel (8) is a request, not a state: it is left out
 * (the task moves when it is woken or finishes).  A reason or state outside
 * 0..LS_MAX_CODE-1 (a damaged or forged trace) becomes 99, "unknown", so
 * codes stay in 300..900 and index arrays of 1000 safely.
 */
#define CODE_ARG(r) "CASE WHEN coalesce(" r ", 0) BETWEEN 0 AND 63 THEN coalesce(" r ", 0) ELSE 99 END"
#define STATE_CODE(k, r) \
    "CASE " k " WHEN 5 THEN 500 + " CODE_ARG(r) " WHEN 7 THEN 700 + " CODE_ARG(r) \
    " WHEN 3 THEN 300 + (coalesce(" r ", 0) = 1) WHEN 4 THEN 400 WHEN 6 THEN 600" \
    " WHEN 9 THEN 900 ELSE 0 END"

/*
 * Every transition (state, next state, time in the state) comes from LEAD
 * over each task's events, in the order of index events_task_ts, into a
 * temp table indexed by (s, t, dur): the counts are a GROUP BY over that
 * index, and each edge's nearest-rank median and p99 one LIMIT 1 OFFSET
 * query on it.  A task's last event leads to the end of the trace (t = 0,
 * no duration) unless it is a final state.  The temp table and the index's
 * sort live in SQLite's temp store, which spills to files, so memory stays
 * bounded on a trace of millions of events (one window sort per edge would
 * cost twice the time).
 */
static const char lifecycle_setup[] =
    "CREATE TEMP TABLE g_tr AS"
    " SELECT s, t, dur FROM ("
    "  SELECT " STATE_CODE("kind", "reason") " AS s,"
    "    coalesce(LEAD(" STATE_CODE("kind", "reason") ") OVER w, 0) AS t,"
    "    LEAD(ts_ns) OVER w - ts_ns AS dur"
    "  FROM events WHERE task_id IS NOT NULL AND kind IN (3, 4, 5, 6, 7, 9)"
    "  WINDOW w AS (PARTITION BY task_id ORDER BY ts_ns, rowid))"
    " WHERE t != 0 OR NOT (s BETWEEN 704 AND 799 OR s = 900);"
    "CREATE INDEX temp.g_tr_std ON g_tr(s, t, dur);";

static const char lifecycle_sql[] = "SELECT s, t, count(*) FROM g_tr GROUP BY s, t ORDER BY s, t";

/* The value at nearest rank `rank` (1-based) of an edge's durations. */
static int64_t edge_rank(sqlite3_stmt *q, int s, int t, int64_t rank)
{
    int64_t v = -1;
    sqlite3_reset(q);
    sqlite3_bind_int(q, 1, s);
    sqlite3_bind_int(q, 2, t);
    sqlite3_bind_int64(q, 3, rank - 1);
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL)
        v = sqlite3_column_int64(q, 0);
    return v;
}

struct lnames {
    char *states[LS_MAX_CODE];
    char *reasons[LS_MAX_CODE];
};

static void state_label(char *buf, size_t n, int code, struct lnames *nm)
{
    char tmp[32];
    if (code == 0)
        snprintf(buf, n, "end of trace");
    else if (code == 300)
        snprintf(buf, n, "created");
    else if (code == 301)
        snprintf(buf, n, "pre-existing");
    else if (code == 400)
        snprintf(buf, n, "running");
    else if (code == 599)
        snprintf(buf, n, "suspended(unknown reason)");
    else if (code >= 500 && code < 600)
        snprintf(buf, n, "suspended(%s)", graph_name_of(nm->reasons, code - 500, tmp, sizeof(tmp)));
    else if (code == 600)
        snprintf(buf, n, "ready");
    else if (code == 799)
        snprintf(buf, n, "unknown final state");
    else if (code >= 700 && code < 800)
        snprintf(buf, n, "%s", graph_name_of(nm->states, code - 700, tmp, sizeof(tmp)));
    else if (code == 900)
        snprintf(buf, n, "leaked");
    else
        snprintf(buf, n, "state %d", code);
}

static bool terminal(int code)
{
    return (code >= 704 && code < 800) || code == 900;
}

/* A state node, created (and styled) on first use. */
static Agnode_t *state_node(Agraph_t *g, int code, struct lnames *nm, int64_t entered)
{
    char name[16], label[96];
    snprintf(name, sizeof(name), "s%d", code);
    Agnode_t *n = agnode(g, name, 0);
    if (n)
        return n;
    n = agnode(g, name, 1);
    state_label(label, sizeof(label), code, nm);
    const char *fill = "#eceff1";
    if (code == 300 || code == 301)
        fill = "#e3f2fd";
    else if (code == 400)
        fill = "#c8e6c9";
    else if (code == 600)
        fill = "#fff8e1";
    else if (code == 704)
        fill = tstyle[TS_FINISHED].fill;
    else if (code == 705)
        fill = tstyle[TS_FAILED].fill;
    else if (code == 706)
        fill = tstyle[TS_CANCELLED].fill;
    else if (code == 900)
        fill = tstyle[TS_LEAKED].fill;
    if (entered >= 0)
        gv_set(n, "label", "%s\\n%lld\xc3\x97", label, (long long)entered);
    else
        gv_set(n, "label", "%s", label);
    gv_set(n, "fillcolor", "%s", fill);
    gv_set(n, "style", "filled,rounded");
    if (code == 0) {
        gv_set(n, "style", "dashed");
        gv_set(n, "shape", "plaintext");
        gv_set(n, "fontcolor", "#757575");
    }
    if (terminal(code))
        gv_set(n, "peripheries", "2");
    /* Starting states on top.  Final states are not forced to the bottom
     * (rank=max): an edge between two of them (failed -> leaked) would be a
     * labelled flat edge, which Graphviz 2.43's gvFreeLayout double-frees. */
    if (code == 300 || code == 301) {
        Agraph_t *sg = agsubg(g, (char *)"start", 1);
        agsafeset(sg, (char *)"rank", (char *)"min", (char *)"");
        agsubnode(sg, n, 1);
    }
    return n;
}

/* The aggregate diagram over all tasks. */
struct ledge {
    int s, t;                 /* state codes */
    int64_t n, p50, p99;      /* count; nearest-rank percentiles of time in s */
};

/* Edges by count, most frequent first, then in code order. */
static int cmp_ledge_n(const void *x, const void *y)
{
    const struct ledge *a = x, *b = y;
    if (a->n != b->n)
        return a->n > b->n ? -1 : 1;
    if (a->s != b->s)
        return a->s < b->s ? -1 : 1;
    return (a->t > b->t) - (a->t < b->t);
}

static int cmp_ledge_code(const void *x, const void *y)
{
    const struct ledge *a = x, *b = y;
    if (a->s != b->s)
        return a->s < b->s ? -1 : 1;
    return (a->t > b->t) - (a->t < b->t);
}

static int lifecycle_all(ls_trace *t, Agraph_t *g, const struct graph_opts *o, struct lnames *nm,
                         const char *target)
{
    long limit = o->limit ? o->limit : 60;
    char d1[32], d2[32];
    gv_buf b = { 0 };
    /* Times each state was entered: every event of a non-final state has
     * one outgoing row (its transition, or the end of the trace), and every
     * event but a task's first has one incoming row; max() covers both the
     * starting states (no incoming) and the final ones (no outgoing). */
    int64_t *out_n = calloc(1000, sizeof(*out_n)), *in_n = calloc(1000, sizeof(*in_n));
    int64_t *entered = calloc(1000, sizeof(*entered)), maxn = 1, total = 0;
    int step, rc = 1;
    struct ledge *ed = NULL;
    size_t ned = 0, caped = 0;
    int64_t hidden_n = 0;
    size_t hidden = 0;
    if (!out_n || !in_n || !entered) {
        rc = ls_error("graph: out of memory");
        goto out;
    }

    if (!graph_exec(t, lifecycle_setup))
        goto out;
    sqlite3_stmt *st = ls_prepare(t, lifecycle_sql);
    if (!st)
        goto out;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t s = sqlite3_column_int64(st, 0), tt = sqlite3_column_int64(st, 1);
        if (s < 1 || s >= 1000 || tt < 0 || tt >= 1000)
            continue;                       /* not a code STATE_CODE makes */
        if (!graph_grow((void **)&ed, &caped, ned + 1, sizeof(*ed)))
            break;
        struct ledge *e = &ed[ned++];
        e->s = (int)s;
        e->t = (int)tt;
        e->n = sqlite3_column_int64(st, 2);
        e->p50 = e->p99 = -1;
        out_n[e->s] += e->n;
        if (e->t > 0)
            in_n[e->t] += e->n;
        if (e->t && e->n > maxn)
            maxn = e->n;
        total += e->n;
    }
    bool ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (!ok)
        goto out;
    for (int i = 0; i < 1000; i++)
        entered[i] = out_n[i] > in_n[i] ? out_n[i] : in_n[i];
    /* --limit: the most frequent transitions (a forged trace can make
     * hundreds, which Graphviz takes minutes to lay out). */
    if (ned > (size_t)limit) {
        qsort(ed, ned, sizeof(*ed), cmp_ledge_n);
        for (size_t i = (size_t)limit; i < ned; i++)
            hidden_n += ed[i].n;
        hidden = ned - (size_t)limit;
        ned = (size_t)limit;
        qsort(ed, ned, sizeof(*ed), cmp_ledge_code);
    }
    st = ls_prepare(t, "SELECT dur FROM g_tr WHERE s = ?1 AND t = ?2 ORDER BY dur LIMIT 1 OFFSET ?3");
    if (!st)
        goto out;
    for (size_t i = 0; i < ned; i++) {
        if (ed[i].t == 0)
            continue;                       /* still in the state: no duration */
        ed[i].p50 = edge_rank(st, ed[i].s, ed[i].t, (ed[i].n + 1) / 2);
        ed[i].p99 = edge_rank(st, ed[i].s, ed[i].t, (ed[i].n * 99 + 99) / 100);
    }
    sqlite3_finalize(st);

    int64_t ntasks = 0;
    st = ls_prepare(t, "SELECT count(*) FROM tasks");
    if (st && sqlite3_step(st) == SQLITE_ROW)
        ntasks = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);

    gv_text(&b, target);
    gv_add(&b, " \xe2\x80\x94 task lifecycle: %lld task%s, %lld state changes\\n"
               "each transition: how often, and the median and p99 time spent in the state "
               "before it", (long long)ntasks, ntasks == 1 ? "" : "s", (long long)total);
    gv_set(g, "label", "%s", gv_str(&b));
    if (ned == 0) {
        gv_note(g, "note", "no task lifecycle events in this trace");
        rc = 0;
        goto out;
    }
    /* Nodes in code order (the rows are sorted by s, then t). */
    for (size_t i = 0; i < ned; i++) {
        state_node(g, ed[i].s, nm, entered[ed[i].s]);
    }
    for (size_t i = 0; i < ned; i++) {
        Agnode_t *from = state_node(g, ed[i].s, nm, entered[ed[i].s]);
        Agnode_t *to = state_node(g, ed[i].t, nm, ed[i].t ? entered[ed[i].t] : -1);
        Agedge_t *e = agedge(g, from, to, NULL, 1);
        if (ed[i].t == 0) {
            gv_set(e, "label", " %lld\xc3\x97 at the end", (long long)ed[i].n);
            gv_set(e, "style", "dashed");
            gv_set(e, "color", "#9e9e9e");
            gv_set(e, "fontcolor", "#757575");
            continue;
        }
        if (ed[i].n == 1)
            gv_set(e, "label", " 1\xc3\x97\\n %s", ls_fmt_dur(d1, sizeof(d1), ed[i].p50));
        else
            gv_set(e, "label", " %lld\xc3\x97\\n p50 %s\\n p99 %s", (long long)ed[i].n,
                ls_fmt_dur(d1, sizeof(d1), ed[i].p50), ls_fmt_dur(d2, sizeof(d2), ed[i].p99));
        gv_set(e, "penwidth", "%.2f", 1 + 3 * (double)ed[i].n / maxn);
        if (ed[i].t >= 705 && ed[i].t < 800)
            gv_set(e, "color", "%s", tstyle[ed[i].t == 705 ? TS_FAILED : TS_CANCELLED].border);
        else if (ed[i].t == 900)
            gv_set(e, "color", "%s", tstyle[TS_LEAKED].border);
    }
    if (hidden) {
        char text[160];
        snprintf(text, sizeof(text), "%zu rarer transitions (%lld state changes) not shown "
                 "(--limit %ld)", hidden, (long long)hidden_n, limit);
        gv_note(g, "more", text);
    }
    rc = 0;
out:
    free(ed);
    free(out_n);
    free(in_n);
    free(entered);
    free(b.s);
    return rc;
}

/* One transition of a task's path. */
struct tstep {
    int64_t num;              /* 1, 2, ... in the task's order */
    int from, to;             /* state codes */
    int64_t dur;              /* time in `from` before it; -1 unknown */
    int64_t cancel_by;        /* a task_cancel came before it from this task, or -1 */
};

static int cmp_tstep(const void *x, const void *y)
{
    const struct tstep *a = x, *b = y;
    if (a->from != b->from)
        return a->from < b->from ? -1 : 1;
    if (a->to != b->to)
        return a->to < b->to ? -1 : 1;
    return (a->num > b->num) - (a->num < b->num);
}

/* One task's path: its transitions in order, numbered. */
static int lifecycle_task(ls_trace *t, Agraph_t *g, const struct graph_opts *o, struct lnames *nm,
                          const char *target)
{
    long limit = o->limit ? o->limit : 100;
    char d1[32], d2[32];
    gv_buf b = { 0 };
    int rc = 1, step;
    sqlite3_stmt *st = ls_prepare(t, "SELECT name, final_state, created_ns FROM tasks WHERE id = ?");
    if (!st)
        return 1;
    sqlite3_bind_int64(st, 1, o->task);
    if (sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_finalize(st);
        return ls_error("graph: no task with id %lld in trace '%s'", (long long)o->task, t->path);
    }
    char *name = strdup(graph_col_text(st, 0) ? graph_col_text(st, 0) : "?");
    sqlite3_finalize(st);
    int64_t start = ls_meta_ts(t, "start_ns", 0), end = ls_meta_ts(t, "end_ns", -1);

    st = ls_prepare(t,
        "SELECT ts_ns, kind, arg0, " STATE_CODE("kind", "reason") " FROM events"
        " WHERE task_id = ?1 AND kind IN (3, 4, 5, 6, 7, 8, 9) ORDER BY ts_ns, rowid");
    if (!st)
        goto out;
    sqlite3_bind_int64(st, 1, o->task);
    int prev = -1;
    int64_t prev_ts = 0, first_ts = 0, ntrans = 0, cancel_by = -1;
    bool first = true;
    struct tstep *steps = NULL;
    size_t nsteps = 0, capsteps = 0;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t ts = ls_col_ts(st, 0);
        int kind = sqlite3_column_int(st, 1), code = sqlite3_column_int(st, 3);
        if (kind == 8) {                    /* noted on the next transition */
            cancel_by = sqlite3_column_int64(st, 2);
            continue;
        }
        if (first) {
            first = false;
            first_ts = ts;
            state_node(g, code, nm, -1);
        }
        if (prev >= 0 && ++ntrans <= limit &&
            graph_grow((void **)&steps, &capsteps, nsteps + 1, sizeof(*steps)))
            steps[nsteps++] = (struct tstep){ ntrans, prev, code, ts - prev_ts, cancel_by };
        if (prev >= 0)
            cancel_by = -1;
        prev = code;
        prev_ts = ts;
    }
    bool ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (!ok) {
        free(steps);
        goto out;
    }
    /* Still in a non-final state when the recording ended. */
    if (prev >= 0 && !terminal(prev) && ++ntrans <= limit &&
        graph_grow((void **)&steps, &capsteps, nsteps + 1, sizeof(*steps)))
        steps[nsteps++] = (struct tstep){ ntrans, prev, 0, end >= prev_ts ? end - prev_ts : -1, -1 };

    /* One edge per pair of states, its steps listed in order: parallel
     * edges, one per step, would be unreadable for a task that loops. */
    if (nsteps)
        qsort(steps, nsteps, sizeof(*steps), cmp_tstep);
    for (size_t i = 0; i < nsteps;) {
        size_t j = i;
        while (j < nsteps && steps[j].from == steps[i].from && steps[j].to == steps[i].to)
            j++;
        Agedge_t *e = agedge(g, state_node(g, steps[i].from, nm, -1),
                             state_node(g, steps[i].to, nm, -1), NULL, 1);
        gv_reset(&b);
        for (size_t k = i; k < j; k++) {
            if (k - i == 8 && j - i > 9) {
                gv_add(&b, " \xe2\x80\xa6 %zu more\\l", j - k);
                break;
            }
            gv_add(&b, " %lld. %s", (long long)steps[k].num,
                   ls_fmt_dur(d1, sizeof(d1), steps[k].dur));
            if (steps[k].cancel_by >= 0)
                gv_add(&b, " (cancel requested by #%lld)", (long long)steps[k].cancel_by);
            gv_add(&b, "\\l");
        }
        gv_set(e, "label", "%s", gv_str(&b));
        if (j - i > 1)
            gv_set(e, "penwidth", "%.2f", j - i > 5 ? 3.0 : 1 + 0.4 * (double)(j - i));
        if (steps[i].to == 0) {
            gv_set(e, "style", "dashed");
            gv_set(e, "color", "#9e9e9e");
        }
        i = j;
    }
    free(steps);

    gv_reset(&b);
    gv_text(&b, target);
    gv_add(&b, " \xe2\x80\x94 lifecycle of task ");
    gv_text(&b, name);
    gv_add(&b, "#%lld: %lld transition%s", (long long)o->task, (long long)ntrans,
           ntrans == 1 ? "" : "s");
    if (!first)
        gv_add(&b, ", from +%s, over %s", ls_fmt_dur(d1, sizeof(d1), first_ts - start),
               ls_fmt_dur(d2, sizeof(d2), prev_ts - first_ts));
    gv_add(&b, "\\nedges: step number, time spent in the state before the transition");
    gv_set(g, "label", "%s", gv_str(&b));
    if (prev < 0)
        gv_note(g, "note", "no lifecycle events for this task");
    if (ntrans > limit) {
        char text[128];
        snprintf(text, sizeof(text), "first %ld of %lld transitions shown (--limit)", limit,
                 (long long)ntrans);
        gv_note(g, "more", text);
    }
    rc = 0;
out:
    free(name);
    free(b.s);
    return rc;
}

int graph_lifecycle(ls_trace *t, Agraph_t *g, const struct graph_opts *o, const char *target)
{
    struct lnames nm = { { 0 }, { 0 } };
    graph_load_names(t, "states", nm.states);
    graph_load_names(t, "suspend_reasons", nm.reasons);
    int rc = o->task >= 0 ? lifecycle_task(t, g, o, &nm, target) : lifecycle_all(t, g, o, &nm, target);
    graph_free_names(nm.states);
    graph_free_names(nm.reasons);
    return rc;
}
