/*
 * graph_lifecycle.c -- `loopscope graph --kind lifecycle`: the state
 * diagram every task went through, with counts and latencies per
 * transition, or (--task ID) one task's path.
 *
 * The diagram of all tasks reads the derived tables transitions and
 * transition_hist (model/derived.sql), which the one replay of task states
 * (model/replay.h) fills when the recording ends or when the viewer first
 * opens the trace: the work is a few hundred rows, whatever the trace's
 * size.  One task's path reads that task's events through the index
 * events(task_id, ts_ns) and feeds them to the same replay; its spans give
 * the state sequence.  Nodes are the replay's lifecycle nodes (LS_NODE_*:
 * 100 * event kind + detail).
 *
 * Depends on graph.h (gv.h), trace.h, model/replay.h and ls_codes.h.
 * One file of a little over 600 lines: both views draw the same nodes
 * (labels, shapes, the start and end states), and splitting them would
 * only export that drawing to a header of its own.
 */
#define _GNU_SOURCE
#include "graph.h"
#include "ls_codes.h"
#include "output.h"
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Nodes index arrays of this size (replay.h: details are clamped). */
#define NODES 1000

struct lnames {
    char *states[LS_MAX_CODE];
    char *reasons[LS_MAX_CODE];
    /* A census lifecycle (trace.h): a wake's waker is never known (waker
     * kind 0), so the ready state says so; libevl's wakes always name one. */
    bool wakers_unknown;
    char *source;             /* ls_lifecycle_text, or NULL */
};

static bool valid_node(int64_t code)
{
    return code >= 0 && code < NODES;
}

static void state_label(char *buf, size_t n, int code, struct lnames *nm)
{
    char tmp[32];
    if (code == LS_NODE_END)
        snprintf(buf, n, "end of trace");
    else if (code == LS_NODE_CREATED)
        snprintf(buf, n, "created");
    else if (code == LS_NODE_PREEXISTING)
        snprintf(buf, n, "pre-existing");
    else if (code == LS_NODE_RUNNING)
        snprintf(buf, n, "running");
    else if (code == LS_NODE_SUSPENDED + LS_NODE_UNKNOWN_DETAIL)
        snprintf(buf, n, "suspended(unknown reason)");
    else if (code >= LS_NODE_SUSPENDED && code < LS_NODE_SUSPENDED + 100)
        snprintf(buf, n, "suspended(%s)",
                 graph_name_of(nm->reasons, code - LS_NODE_SUSPENDED, tmp, sizeof(tmp)));
    else if (code == LS_NODE_READY && nm->wakers_unknown)
        snprintf(buf, n, "ready\\n(woken, waker unknown)");
    else if (code == LS_NODE_READY)
        snprintf(buf, n, "ready");
    else if (code == LS_NODE_FINAL + LS_NODE_UNKNOWN_DETAIL)
        snprintf(buf, n, "unknown final state");
    else if (code >= LS_NODE_FINAL && code < LS_NODE_FINAL + 100)
        snprintf(buf, n, "%s", graph_name_of(nm->states, code - LS_NODE_FINAL, tmp, sizeof(tmp)));
    else if (code == LS_NODE_LEAKED)
        snprintf(buf, n, "leaked");
    else
        snprintf(buf, n, "state %d", code);
}

/* A final state or a leak verdict: nothing follows (the replay's rule). */
static bool terminal(int code)
{
    return (code >= LS_NODE_FINAL + EVL_FINAL_FINISHED && code < LS_NODE_FINAL + 100) ||
           code == LS_NODE_LEAKED;
}

static bool starting(int code)
{
    return code == LS_NODE_CREATED || code == LS_NODE_PREEXISTING;
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
    if (starting(code))
        fill = "#e3f2fd";
    else if (code == LS_NODE_RUNNING)
        fill = "#c8e6c9";
    else if (code == LS_NODE_READY)
        fill = "#fff8e1";
    else if (code == LS_NODE_FINAL + EVL_FINAL_FINISHED)
        fill = tstyle[TS_FINISHED].fill;
    else if (code == LS_NODE_FINAL + EVL_FINAL_FAILED)
        fill = tstyle[TS_FAILED].fill;
    else if (code == LS_NODE_FINAL + EVL_FINAL_CANCELLED)
        fill = tstyle[TS_CANCELLED].fill;
    else if (code == LS_NODE_LEAKED)
        fill = tstyle[TS_LEAKED].fill;
    if (entered >= 0)
        gv_set(n, "label", "%s\\n%lld\xc3\x97", label, (long long)entered);
    else
        gv_set(n, "label", "%s", label);
    gv_set(n, "fillcolor", "%s", fill);
    gv_set(n, "style", "filled,rounded");
    if (code == LS_NODE_END) {
        gv_set(n, "style", "dashed");
        gv_set(n, "shape", "plaintext");
        gv_set(n, "fontcolor", "#757575");
    }
    if (terminal(code))
        gv_set(n, "peripheries", "2");
    /* Starting states on top.  Final states are not forced to the bottom
     * (rank=max): an edge between two of them (failed -> leaked) would be a
     * labelled flat edge, which Graphviz 2.43's gvFreeLayout double-frees. */
    if (starting(code)) {
        Agraph_t *sg = agsubg(g, (char *)"start", 1);
        agsafeset(sg, (char *)"rank", (char *)"min", (char *)"");
        agsubnode(sg, n, 1);
    }
    return n;
}

/* Under the title of a census lifecycle: where it comes from, what that
 * means for the times and the wakes. */
static void census_note(gv_buf *b, const struct lnames *nm)
{
    if (!nm->source)
        return;
    gv_add(b, "\\n");
    gv_text(b, nm->source);
    gv_add(b, ": states and times as the censuses saw them; who woke a task is not known");
}

/* ================================================= the diagram of all tasks */

/* One edge, summed over the loops. */
struct ledge {
    int s, t;                 /* nodes */
    int64_t n, max;           /* count; the longest time in s before it */
    int64_t p[2];             /* p50, p99: see percentile(); -1 unknown */
    bool exact[2];            /* p[i] is the value, not its bucket's bound */
    int64_t cum;              /* histogram rows summed so far */
};

static const int64_t pct[2] = { 50, 99 };

/* Nearest rank of percentile q among n values (1-based). */
static int64_t rank_of(int64_t n, int64_t q)
{
    return (n * q + 99) / 100;
}

/* Feed one histogram row [lo, hi) of count c (rows of an edge come sorted
 * by lo).  A percentile whose rank falls in the row is reported as the
 * row's upper bound clamped to the edge's max: "at most" that, within an
 * eighth of a power of two (model/replay.h, ls_hist_bucket).  It is exact
 * in a one-nanosecond bucket, and when the rank is the last (the max). */
static void percentile(struct ledge *e, int64_t lo, int64_t hi, int64_t c)
{
    int64_t before = e->cum;
    e->cum += c > 0 ? c : 0;
    for (int i = 0; i < 2; i++) {
        int64_t r = rank_of(e->n, pct[i]);
        if (e->p[i] >= 0 || r <= before || r > e->cum)
            continue;
        if (r == e->n) {
            e->p[i] = e->max;
            e->exact[i] = true;
        } else {
            e->p[i] = hi - 1 < e->max ? hi - 1 : e->max;
            e->exact[i] = hi - lo <= 1 || e->p[i] == lo;
        }
    }
}

/* A percentile for a label: "<=1.2ms" for a bucket's bound. */
static const char *pct_text(char *buf, size_t n, const struct ledge *e, int i)
{
    char d[32];
    if (e->p[i] < 0)
        return "?";
    snprintf(buf, n, "%s%s", e->exact[i] ? "" : "\xe2\x89\xa4", ls_fmt_dur(d, sizeof(d), e->p[i]));
    return buf;
}

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

static bool table_exists(ls_trace *t, const char *name)
{
    sqlite3_stmt *st = ls_prepare(t, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
    bool yes = false;
    if (st) {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        yes = sqlite3_step(st) == SQLITE_ROW;
    }
    sqlite3_finalize(st);
    return yes;
}

/* The edges from transitions, sorted by (s, t), with their percentiles from
 * transition_hist.  false after an error line. */
static bool read_edges(ls_trace *t, struct ledge **ed, size_t *ned)
{
    size_t cap = 0;
    int step;
    sqlite3_stmt *st = ls_prepare(t,
        "SELECT from_node, to_node, sum(count), max(max_ns) FROM transitions"
        " GROUP BY 1, 2 ORDER BY 1, 2");
    if (!st)
        return false;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t s = sqlite3_column_int64(st, 0), tt = sqlite3_column_int64(st, 1);
        int64_t n = sqlite3_column_int64(st, 2);
        if (!valid_node(s) || s == LS_NODE_END || !valid_node(tt) || n <= 0)
            continue;                       /* not a node the replay makes */
        if (!ls_grow((void **)ed, &cap, *ned + 1, sizeof(**ed)))
            break;
        (*ed)[(*ned)++] = (struct ledge){ (int)s, (int)tt, n, ls_col_ts(st, 3), { -1, -1 },
                                          { false, false }, 0 };
    }
    bool ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (!ok)
        return false;

    st = ls_prepare(t,
        "SELECT from_node, to_node, lo_ns, max(hi_ns), sum(count) FROM transition_hist"
        " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3");
    if (!st)
        return false;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        struct ledge key = { .s = (int)sqlite3_column_int(st, 0), .t = (int)sqlite3_column_int(st, 1) };
        struct ledge *e = bsearch(&key, *ed, *ned, sizeof(**ed), cmp_ledge_code);
        if (e && e->t != LS_NODE_END)
            percentile(e, ls_col_ts(st, 2), ls_col_ts(st, 3), sqlite3_column_int64(st, 4));
    }
    ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    return ok;
}

static int lifecycle_all(ls_trace *t, Agraph_t *g, const struct graph_opts *o, struct lnames *nm,
                         const char *target)
{
    long limit = o->limit ? o->limit : 60;
    char d1[48], d2[48];
    gv_buf b = { 0 };
    /* Times each state was entered: every entry of a non-final state has
     * one outgoing transition (or the end of the trace), and every entry
     * but a task's first has one incoming; max() covers both the starting
     * states (no incoming) and the final ones (no outgoing). */
    int64_t *out_n = calloc(NODES, sizeof(*out_n)), *in_n = calloc(NODES, sizeof(*in_n));
    int64_t *entered = calloc(NODES, sizeof(*entered)), maxn = 1, total = 0;
    int rc = 1;
    struct ledge *ed = NULL;
    size_t ned = 0;
    int64_t hidden_n = 0;
    size_t hidden = 0;
    if (!out_n || !in_n || !entered) {
        rc = ls_error("graph: out of memory");
        goto out;
    }
    bool derived = table_exists(t, "transitions") && table_exists(t, "transition_hist");
    if (derived && !read_edges(t, &ed, &ned))
        goto out;
    for (size_t i = 0; i < ned; i++) {
        out_n[ed[i].s] += ed[i].n;
        if (ed[i].t != LS_NODE_END)
            in_n[ed[i].t] += ed[i].n;
        if (ed[i].t != LS_NODE_END && ed[i].n > maxn)
            maxn = ed[i].n;
        total += ed[i].n;
    }
    for (int i = 0; i < NODES; i++)
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

    int64_t ntasks = 0;
    sqlite3_stmt *st = ls_prepare(t, "SELECT count(*) FROM tasks");
    if (st && sqlite3_step(st) == SQLITE_ROW)
        ntasks = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);

    gv_text(&b, target);
    gv_add(&b, " \xe2\x80\x94 task lifecycle: %lld task%s, %lld state changes\\n"
               "each transition: how often, and the median and p99 time spent in the state "
               "before it\\n(\xe2\x89\xa4: at most, from a histogram bucket, within 1/8 of a "
               "power of two)", (long long)ntasks, ntasks == 1 ? "" : "s", (long long)total);
    census_note(&b, nm);
    gv_set(g, "label", "%s", gv_str(&b));
    if (ned == 0) {
        gv_note(g, "note", t->in_progress || !derived
                    ? "the lifecycle diagram is derived when the recording ends"
                    : "no task lifecycle events in this trace");
        rc = 0;
        goto out;
    }
    /* Nodes in code order (the edges are sorted by s, then t). */
    for (size_t i = 0; i < ned; i++)
        state_node(g, ed[i].s, nm, entered[ed[i].s]);
    for (size_t i = 0; i < ned; i++) {
        Agnode_t *from = state_node(g, ed[i].s, nm, entered[ed[i].s]);
        Agnode_t *to = state_node(g, ed[i].t, nm, ed[i].t != LS_NODE_END ? entered[ed[i].t] : -1);
        Agedge_t *e = agedge(g, from, to, NULL, 1);
        if (ed[i].t == LS_NODE_END) {
            gv_set(e, "label", " %lld\xc3\x97 at the end", (long long)ed[i].n);
            gv_set(e, "style", "dashed");
            gv_set(e, "color", "#9e9e9e");
            gv_set(e, "fontcolor", "#757575");
            continue;
        }
        if (ed[i].n == 1)
            gv_set(e, "label", " 1\xc3\x97\\n %s", pct_text(d1, sizeof(d1), &ed[i], 0));
        else
            gv_set(e, "label", " %lld\xc3\x97\\n p50 %s\\n p99 %s", (long long)ed[i].n,
                   pct_text(d1, sizeof(d1), &ed[i], 0), pct_text(d2, sizeof(d2), &ed[i], 1));
        gv_set(e, "penwidth", "%.2f", 1 + 3 * (double)ed[i].n / maxn);
        if (ed[i].t >= LS_NODE_FINAL + EVL_FINAL_FAILED && ed[i].t < LS_NODE_FINAL + 100)
            gv_set(e, "color", "%s",
                   tstyle[ed[i].t == LS_NODE_FINAL + EVL_FINAL_FAILED ? TS_FAILED : TS_CANCELLED].border);
        else if (ed[i].t == LS_NODE_LEAKED)
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

/* ===================================================== one task's path */

/* A node the task entered, in order. */
struct entry {
    int node;
    int64_t ts;
    int64_t cancel_by;        /* a cancel request came before this entry, or -1 */
};

/* The replay's callbacks collect the task's entries: each span is the
 * entry of its node; a span ended by task_finish is followed by the final
 * node (on_task_done: the replay's last node); a leak verdict is a node
 * too, after the span it came in (spans are reported when they end, marks
 * as they come, so a verdict waits for its span). */
struct tpath {
    struct entry *e;
    size_t n, cap;
    int64_t leak_ts[4];       /* leak verdicts waiting for their span */
    int nleaks;
    int64_t cancel_open;      /* a cancel request while the open span lasted */
    int64_t cancel_next;      /* one while the last reported span lasted: goes
                                 on the entry after it */
    int64_t end_ts;           /* the span still open at the end ended here */
    bool oom;
};

static void path_add(struct tpath *p, int node, int64_t ts)
{
    if (!ls_grow((void **)&p->e, &p->cap, p->n + 1, sizeof(*p->e))) {
        p->oom = true;
        return;
    }
    p->e[p->n++] = (struct entry){ node, ts, p->cancel_next };
    p->cancel_next = -1;
}

static void path_flush_leaks(struct tpath *p)
{
    for (int i = 0; i < p->nleaks; i++)
        path_add(p, LS_NODE_LEAKED, p->leak_ts[i]);
    p->nleaks = 0;
}

static void on_span(void *ctx, const ls_span *s)
{
    struct tpath *p = ctx;
    path_add(p, s->node, s->start);
    /* a cancel request while this span lasted goes on what follows it */
    p->cancel_next = p->cancel_open;
    p->cancel_open = -1;
    path_flush_leaks(p);
    if (s->end_kind == EVL_PROBE_ID_NONE)
        p->end_ts = s->end;
}

static void on_task_done(void *ctx, const ls_task *t, bool finished)
{
    struct tpath *p = ctx;
    if (finished && valid_node(t->tnode) && t->tnode != LS_NODE_END)
        path_add(p, t->tnode, t->tsince);
}

static void on_mark(void *ctx, const ls_event *e)
{
    struct tpath *p = ctx;
    if (e->kind == EVL_PROBE_ID_task_cancel)
        p->cancel_open = e->arg0;   /* noted on the transition out of the span */
    else if (e->kind == EVL_PROBE_ID_task_leak && p->nleaks < 4)
        p->leak_ts[p->nleaks++] = e->ts;
}

/* One transition of a task's path. */
struct tstep {
    int64_t num;              /* 1, 2, ... in the task's order */
    int from, to;             /* nodes */
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

/* Feed the task's lifecycle events to the replay: its entries in *p.
 * false after an error line. */
static bool replay_task(ls_trace *t, int64_t task, int64_t end, struct tpath *p)
{
    ls_replay_ops ops = { on_span, on_task_done, on_mark, p, .spans_only = false };
    ls_replay *r = ls_replay_new(&ops, 4);
    if (!r) {
        ls_error("graph: out of memory");
        return false;
    }
    sqlite3_stmt *st = ls_prepare(t,
        "SELECT ts_ns, loop_id, kind, reason, arg0, arg1 FROM events"
        " WHERE task_id = ?1 AND kind BETWEEN " LS_SQL_KIND_task_create " AND " LS_SQL_KIND_task_leak
        " ORDER BY ts_ns, rowid");
    bool ok = false;
    int64_t last = INT64_MIN;
    if (st) {
        int step;
        sqlite3_bind_int64(st, 1, task);
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            ls_event e = {
                .ts = ls_col_ts(st, 0), .loop = (uint64_t)sqlite3_column_int64(st, 1),
                .task = (uint64_t)task, .kind = sqlite3_column_int(st, 2),
                .reason = sqlite3_column_int64(st, 3), .arg0 = sqlite3_column_int64(st, 4),
                .arg1 = sqlite3_column_int64(st, 5),
            };
            last = e.ts;
            ls_replay_event(r, &e);
        }
        ok = ls_step_ok(t, st, step);
        sqlite3_finalize(st);
    }
    ls_replay_end(r, end >= 0 ? end : last);
    ls_replay_free(r);
    path_flush_leaks(p);
    if (p->oom) {
        ls_error("graph: out of memory");
        return false;
    }
    return ok;
}

/* One task's path: its transitions in order, numbered. */
static int lifecycle_task(ls_trace *t, Agraph_t *g, const struct graph_opts *o, struct lnames *nm,
                          const char *target)
{
    long limit = o->limit ? o->limit : 100;
    char d1[32], d2[32];
    gv_buf b = { 0 };
    int rc = 1;
    struct tpath p = { .cancel_open = -1, .cancel_next = -1, .end_ts = -1 };
    struct tstep *steps = NULL;
    size_t nsteps = 0, capsteps = 0;
    sqlite3_stmt *st = ls_prepare(t, "SELECT name FROM tasks WHERE id = ?");
    if (!st)
        return 1;
    sqlite3_bind_int64(st, 1, o->task);
    if (sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_finalize(st);
        return ls_error("graph: no task with id %lld in trace '%s'", (long long)o->task, t->path);
    }
    char *name = strdup(ls_col_text(st, 0) ? ls_col_text(st, 0) : "?");
    sqlite3_finalize(st);
    int64_t start = ls_meta_ts(t, LS_META_START_NS, 0), end = ls_meta_ts(t, LS_META_END_NS, -1);
    if (!replay_task(t, o->task, end, &p))
        goto out;

    /* Transitions between consecutive entries; still in a non-final state
     * when the recording ended: one more, to its end (time unknown when
     * the trace has no end). */
    int64_t ntrans = 0;
    for (size_t i = 0; i < p.n; i++) {
        const struct entry *x = &p.e[i];
        struct tstep s;
        if (i + 1 < p.n)
            s = (struct tstep){ ntrans + 1, x->node, p.e[i + 1].node, p.e[i + 1].ts - x->ts,
                                p.e[i + 1].cancel_by };
        else if (!terminal(x->node))
            s = (struct tstep){ ntrans + 1, x->node, LS_NODE_END,
                                end >= x->ts && p.end_ts >= x->ts ? p.end_ts - x->ts : -1, -1 };
        else
            break;
        if (++ntrans <= limit && ls_grow((void **)&steps, &capsteps, nsteps + 1, sizeof(*steps)))
            steps[nsteps++] = s;
    }
    if (p.n)
        state_node(g, p.e[0].node, nm, -1);

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
            if (steps[k].cancel_by > 0)
                gv_add(&b, " (cancel requested by #%lld)", (long long)steps[k].cancel_by);
            else if (steps[k].cancel_by == 0)   /* by no task, or one not known (a census) */
                gv_add(&b, " (cancel requested)");
            gv_add(&b, "\\l");
        }
        gv_set(e, "label", "%s", gv_str(&b));
        if (j - i > 1)
            gv_set(e, "penwidth", "%.2f", j - i > 5 ? 3.0 : 1 + 0.4 * (double)(j - i));
        if (steps[i].to == LS_NODE_END) {
            gv_set(e, "style", "dashed");
            gv_set(e, "color", "#9e9e9e");
        }
        i = j;
    }

    gv_reset(&b);
    gv_text(&b, target);
    gv_add(&b, " \xe2\x80\x94 lifecycle of task ");
    gv_text(&b, name);
    gv_add(&b, "#%lld: %lld transition%s", (long long)o->task, (long long)ntrans,
           ntrans == 1 ? "" : "s");
    if (p.n)
        gv_add(&b, ", from +%s, over %s", ls_fmt_dur(d1, sizeof(d1), p.e[0].ts - start),
               ls_fmt_dur(d2, sizeof(d2), p.e[p.n - 1].ts - p.e[0].ts));
    gv_add(&b, "\\nedges: step number, time spent in the state before the transition");
    census_note(&b, nm);
    gv_set(g, "label", "%s", gv_str(&b));
    if (!p.n)
        gv_note(g, "note", "no lifecycle events for this task");
    if (ntrans > limit) {
        char text[128];
        snprintf(text, sizeof(text), "first %ld of %lld transitions shown (--limit)", limit,
                 (long long)ntrans);
        gv_note(g, "more", text);
    }
    rc = 0;
out:
    free(p.e);
    free(steps);
    free(name);
    free(b.s);
    return rc;
}

int graph_lifecycle(ls_trace *t, Agraph_t *g, const struct graph_opts *o, const char *target)
{
    struct lnames nm = { { 0 }, { 0 }, false, NULL };
    nm.source = ls_lifecycle_text(t);
    nm.wakers_unknown = nm.source != NULL;
    graph_load_names(t, "states", nm.states);
    graph_load_names(t, "suspend_reasons", nm.reasons);
    int rc = o->task >= 0 ? lifecycle_task(t, g, o, &nm, target) : lifecycle_all(t, g, o, &nm, target);
    graph_free_names(nm.states);
    graph_free_names(nm.reasons);
    free(nm.source);
    return rc;
}
