/*
 * replay.c -- the one replay of task states (replay.h): spans, per-task
 * statistics, lifecycle transitions with their duration histograms, and
 * per-loop iteration histograms, from a stream of events.
 *
 * Everything it keeps is bounded whatever the events say: tasks by the
 * task table's max_live, loops by LS_REPLAY_LOOPS, transition edges by
 * LS_REPLAY_EDGES (codes are clamped to nodes below 1000, so a forged trace
 * cannot invent more than that many kinds of edge anyway).
 */
#include "replay.h"

#include <stdlib.h>
#include <string.h>

#define LS_REPLAY_LOOPS 1024
#define LS_REPLAY_EDGES 4096
#define LS_HIST_SLOTS 496       /* ls_hist_index: 8 exact + 8 per power of two from 8 */
#define LS_ITER_BUCKETS 40      /* power-of-two buckets, as the generic mode's */

typedef struct ls_rloop {
    uint64_t id;
    int64_t stopped;            /* loop_stop, or 0 */
    int64_t poll_exit;          /* the last poll_exit, or -1 while polling/before */
    uint64_t iter[LS_ITER_BUCKETS];
    int64_t iter_ns[LS_ITER_BUCKETS];
} ls_rloop;

typedef struct ls_redge {
    ls_edge_stats s;
    uint64_t *hist;             /* LS_HIST_SLOTS counts */
} ls_redge;

struct ls_replay {
    ls_replay_ops ops;
    ls_tasks *tasks;
    ls_rloop *loops;
    size_t nloops;
    ls_redge *edges;            /* open addressing, LS_REPLAY_EDGES * 2 slots */
    size_t nedges;
    /* per lifecycle node, the slot of the edge out of it seen last: a
     * task's next node is most often the one the last task went to from
     * there (checked, so only a hint; slot + 1, 0 for none) */
    uint16_t last_out[1000];
    bool ended;
};

#define LS_EDGE_SLOTS (2 * LS_REPLAY_EDGES)
_Static_assert(LS_EDGE_SLOTS < 65535, "last_out holds a slot + 1 in 16 bits");

ls_replay *ls_replay_new(const ls_replay_ops *ops, size_t max_live)
{
    ls_replay *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    if (ops)
        r->ops = *ops;
    r->tasks = ls_tasks_new(max_live ? max_live : LS_TASKS_MAX);
    r->edges = calloc(LS_EDGE_SLOTS, sizeof(*r->edges));
    if (!r->tasks || !r->edges) {
        ls_replay_free(r);
        return NULL;
    }
    return r;
}

void ls_replay_free(ls_replay *r)
{
    if (!r)
        return;
    ls_tasks_free(r->tasks);
    if (r->edges)
        for (size_t i = 0; i < LS_EDGE_SLOTS; i++)
            free(r->edges[i].hist);
    free(r->edges);
    free(r->loops);
    free(r);
}

/* ------------------------------------------------------------ histograms */

int ls_hist_index(int64_t ns)
{
    if (ns < 8)
        return ns < 0 ? 0 : (int)ns;
    int k = 63 - __builtin_clzll((unsigned long long)ns);      /* 3..62 */
    int sub = (int)((ns >> (k - 3)) & 7);
    return 8 + (k - 3) * 8 + sub;
}

void ls_hist_bounds(int i, int64_t *lo, int64_t *hi)
{
    if (i < 8) {
        *lo = i;
        *hi = i + 1;
        return;
    }
    int k = (i - 8) / 8 + 3, sub = (i - 8) % 8;
    *lo = (int64_t)(8 + sub) << (k - 3);
    *hi = k == 62 && sub == 7 ? INT64_MAX : (int64_t)(9 + sub) << (k - 3);
}

void ls_hist_bucket(int64_t ns, int64_t *lo, int64_t *hi)
{
    ls_hist_bounds(ls_hist_index(ns), lo, hi);
}

/* ------------------------------------------------------------------ loops */

static ls_rloop *loop_get(ls_replay *r, uint64_t id)
{
    for (size_t i = 0; i < r->nloops; i++)
        if (r->loops[i].id == id)
            return &r->loops[i];
    if (r->nloops >= LS_REPLAY_LOOPS)
        return NULL;
    if ((r->nloops & (r->nloops - 1)) == 0) {     /* 0, 1, 2, 4, ...: grow */
        size_t cap = r->nloops ? 2 * r->nloops : 1;
        ls_rloop *a = realloc(r->loops, cap * sizeof(*a));
        if (!a)
            return NULL;
        r->loops = a;
    }
    ls_rloop *l = &r->loops[r->nloops++];
    memset(l, 0, sizeof(*l));
    l->id = id;
    l->poll_exit = -1;
    return l;
}

/* poll_exit -> the next poll_enter is one iteration's busy time. */
static void loop_event(ls_replay *r, const ls_event *e)
{
    if (e->kind != EVL_PROBE_ID_poll_enter && e->kind != EVL_PROBE_ID_poll_exit)
        return;
    ls_rloop *l = loop_get(r, e->loop);
    if (!l)
        return;
    if (e->kind == EVL_PROBE_ID_poll_exit) {
        l->poll_exit = e->ts;
        return;
    }
    if (l->poll_exit >= 0 && e->ts >= l->poll_exit) {
        int64_t busy = ls_ns_sub(e->ts, l->poll_exit);
        int b = busy > 0 ? 63 - __builtin_clzll((unsigned long long)busy) : 0;
        if (b >= LS_ITER_BUCKETS)
            b = LS_ITER_BUCKETS - 1;
        l->iter[b]++;
        l->iter_ns[b] = busy > INT64_MAX - l->iter_ns[b] ? INT64_MAX : l->iter_ns[b] + busy;
    }
    l->poll_exit = -1;
}

/* ------------------------------------------------------------------ edges */

static int clamp_detail(int64_t v)
{
    return v >= 0 && v <= LS_NODE_DETAIL_MAX ? (int)v : LS_NODE_UNKNOWN_DETAIL;
}

static void count_edge(ls_replay *r, uint64_t loop, int from, int to, int64_t dur, bool timed)
{
    bool hint = from >= 0 && from < 1000;           /* nodes are; a guard all the same */
    ls_redge *x = hint && r->last_out[from] ? &r->edges[r->last_out[from] - 1] : NULL;
    if (x && x->s.loop == loop && x->s.from == from && x->s.to == to)
        goto found;
    uint64_t h = (loop * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)from * 1009 + (uint64_t)to);
    h *= 0xff51afd7ed558ccdull;
    size_t k = (size_t)(h >> 40) & (LS_EDGE_SLOTS - 1);
    for (;; k = (k + 1) & (LS_EDGE_SLOTS - 1)) {
        x = &r->edges[k];
        if (!x->hist) {
            if (r->nedges >= LS_REPLAY_EDGES)
                return;                              /* bounded: dropped */
            x->hist = calloc(LS_HIST_SLOTS, sizeof(*x->hist));
            if (!x->hist)
                return;
            x->s.loop = loop;
            x->s.from = from;
            x->s.to = to;
            r->nedges++;
            break;
        }
        if (x->s.loop == loop && x->s.from == from && x->s.to == to)
            break;
    }
    if (hint)
        r->last_out[from] = (uint16_t)(k + 1);
found:
    x->s.count++;
    if (!timed)
        return;
    if (dur < 0)
        dur = 0;
    x->s.total_ns = dur > INT64_MAX - x->s.total_ns ? INT64_MAX : x->s.total_ns + dur;
    if (dur > x->s.max_ns)
        x->s.max_ns = dur;
    x->hist[ls_hist_index(dur)]++;
}

/* A lifecycle node entered: an edge from the last one (if any). */
static void enter_node(ls_replay *r, ls_task *t, int node, int64_t ts)
{
    if (t->tnode >= 0 && !r->ops.spans_only)
        count_edge(r, t->loop, t->tnode, node, ls_ns_sub(ts, t->tsince), true);
    t->tnode = (int16_t)node;
    t->tsince = ts;
}

static bool node_final(int node)
{
    return node == LS_NODE_LEAKED ||
           (node >= LS_NODE_FINAL + EVL_FINAL_FINISHED && node < LS_NODE_FINAL + 100);
}

/* ------------------------------------------------------------------ tasks */

static void sat_add(int64_t *acc, int64_t d)
{
    *acc = d > INT64_MAX - *acc ? INT64_MAX : *acc + d;
}

/* End t's span at ts because of event e (NULL: the end of its loop or of
 * the recording). */
static void close_span(ls_replay *r, ls_task *t, int64_t ts, const ls_event *e)
{
    if (t->state == LS_TASK_NO_STATE)
        return;
    int state = t->state;
    if (t->node == LS_NODE_PREEXISTING)          /* what it was doing: its next event tells */
        state = e && e->kind == EVL_PROBE_ID_task_run ? EVL_FINAL_READY : EVL_FINAL_SUSPENDED;
    int64_t d = ls_ns_sub(ts, t->since);
    if (d >= 0) {
        switch (state) {
        case EVL_FINAL_RUNNING:
            sat_add(&t->busy, d);
            if (d > t->longest)
                t->longest = d;
            break;
        case EVL_FINAL_CREATED:
        case EVL_FINAL_READY:
            sat_add(&t->sched, d);
            break;
        case EVL_FINAL_SUSPENDED:
            sat_add(&t->idle, d);
            break;
        }
    }
    /* The slice: from a task_run to the next suspend or finish (other
     * events on the way do not end it); unended, to where the span ends.
     * Of equally long ones, the last. */
    if (state == EVL_FINAL_RUNNING && !t->in_slice) {
        t->in_slice = 1;
        t->slice_start = t->since;
    }
    if (t->in_slice && (!e || e->kind == EVL_PROBE_ID_task_suspend ||
                        e->kind == EVL_PROBE_ID_task_finish)) {
        int64_t len = ls_ns_sub(ts, t->slice_start);
        if (!t->has_slice || len >= t->slice_longest) {
            t->slice_longest = len;
            t->slice_at = t->slice_start;
            t->has_slice = 1;
        }
        t->in_slice = 0;
    }
    if (r->ops.on_span) {
        ls_span s = {
            .task = t->id, .loop = t->loop, .state = state, .node = t->node,
            .detail = t->detail, .object = t->object, .timeout = t->timeout,
            .start = t->since, .end = d >= 0 ? ts : t->since,
            .end_kind = e ? e->kind : 0, .end_reason = e ? e->reason : 0,
            .end_arg0 = e ? e->arg0 : 0,
        };
        r->ops.on_span(r->ops.ctx, &s);
    }
    t->state = LS_TASK_NO_STATE;
}

static void open_span(ls_task *t, int state, int node, const ls_event *e, int64_t detail,
                      int64_t object, int64_t timeout)
{
    t->state = (int8_t)state;
    t->seen = 1;
    t->node = (int16_t)node;
    t->since = e->ts;
    t->detail = detail;
    t->object = object;
    t->timeout = timeout;
}

/* Task id's entry, made with no state yet if new (*made set); NULL when
 * the table is full. */
static ls_task *task_get(ls_replay *r, uint64_t id, uint64_t loop, bool *made)
{
    ls_task *t = ls_tasks_get(r->tasks, id, loop, made);
    if (t && *made) {
        t->state = LS_TASK_NO_STATE;
        t->tnode = -1;
    }
    return t;
}

static void task_event(ls_replay *r, const ls_event *e)
{
    bool made = false;
    ls_task *t = task_get(r, e->task, e->loop, &made);
    if (!t)
        return;                       /* the table is full */
    if (t->done && e->kind != EVL_PROBE_ID_task_leak) {
        /* an id used again after its finish: a new task as far as we know */
        ls_tasks_remove(r->tasks, t);
        t = task_get(r, e->task, e->loop, &made);
        if (!t)
            return;
    }
    switch (e->kind) {
    case EVL_PROBE_ID_task_create: {
        bool pre = e->reason == 1;
        if (!made && (t->state != LS_TASK_NO_STATE || t->tnode >= 0))
            return;                   /* a late snapshot: its events told more */
        int node = pre ? LS_NODE_PREEXISTING : LS_NODE_CREATED;
        enter_node(r, t, node, e->ts);
        open_span(t, EVL_FINAL_CREATED, node, e, pre, 0, 0);
        return;
    }
    case EVL_PROBE_ID_task_run:
        close_span(r, t, e->ts, e);
        enter_node(r, t, LS_NODE_RUNNING, e->ts);
        open_span(t, EVL_FINAL_RUNNING, LS_NODE_RUNNING, e, 0, 0, 0);
        t->resumes++;
        return;
    case EVL_PROBE_ID_task_suspend: {
        close_span(r, t, e->ts, e);
        int node = LS_NODE_SUSPENDED + clamp_detail(e->reason);
        enter_node(r, t, node, e->ts);
        open_span(t, EVL_FINAL_SUSPENDED, node, e, e->reason, e->arg0, e->arg1);
        return;
    }
    case EVL_PROBE_ID_task_wake:
        close_span(r, t, e->ts, e);
        enter_node(r, t, LS_NODE_READY, e->ts);
        open_span(t, EVL_FINAL_READY, LS_NODE_READY, e, e->reason, e->arg0, 0);
        t->wakes++;
        return;
    case EVL_PROBE_ID_task_finish:
        close_span(r, t, e->ts, e);
        enter_node(r, t, LS_NODE_FINAL + clamp_detail(e->reason), e->ts);
        if (r->ops.on_task_done)
            r->ops.on_task_done(r->ops.ctx, t, true);
        /* A failed task may still get its "unretrieved" leak verdict: keep
         * its node until then (or the end); any other leaves now. */
        if (e->reason == EVL_FINAL_FAILED)
            t->done = 1;
        else
            ls_tasks_remove(r->tasks, t);
        return;
    case EVL_PROBE_ID_task_leak:
        enter_node(r, t, LS_NODE_LEAKED, e->ts);
        if (r->ops.on_mark)
            r->ops.on_mark(r->ops.ctx, e);
        if (t->done)
            ls_tasks_remove(r->tasks, t);
        return;
    case EVL_PROBE_ID_task_cancel:
        if (r->ops.on_mark)
            r->ops.on_mark(r->ops.ctx, e);
        return;
    }
}

void ls_replay_event(ls_replay *r, const ls_event *e)
{
    if (r->ended)
        return;
    if (e->kind >= EVL_PROBE_ID_task_create && e->kind <= EVL_PROBE_ID_task_leak) {
        if (e->task)
            task_event(r, e);
    } else if (!r->ops.spans_only) {
        loop_event(r, e);
    }
}

void ls_replay_loop_stop(ls_replay *r, uint64_t loop, int64_t ts)
{
    ls_rloop *l = loop_get(r, loop);
    if (l)
        l->stopped = ts;
}

struct ls_end_ctx {
    ls_replay *r;
    int64_t end;
};

static void end_task(ls_task *t, void *arg)
{
    struct ls_end_ctx *c = arg;
    ls_replay *r = c->r;
    if (t->done)
        return;
    int64_t end = c->end;
    for (size_t i = 0; i < r->nloops; i++)
        if (r->loops[i].id == t->loop && r->loops[i].stopped)
            end = r->loops[i].stopped;
    close_span(r, t, end, NULL);
    if (t->tnode >= 0 && !node_final(t->tnode) && !r->ops.spans_only)
        count_edge(r, t->loop, t->tnode, LS_NODE_END, 0, false);
    if (r->ops.on_task_done)
        r->ops.on_task_done(r->ops.ctx, t, false);
}

void ls_replay_end(ls_replay *r, int64_t end_ns)
{
    if (r->ended)
        return;
    struct ls_end_ctx c = { r, end_ns };
    ls_tasks_each(r->tasks, end_task, &c);
    r->ended = true;
}

void ls_replay_each_edge(ls_replay *r, void (*edge)(void *ctx, const ls_edge_stats *e),
                         void (*bucket)(void *ctx, const ls_edge_stats *e, int64_t lo,
                                        int64_t hi, uint64_t count),
                         void *ctx)
{
    for (size_t k = 0; k < LS_EDGE_SLOTS; k++) {
        const ls_redge *x = &r->edges[k];
        if (!x->hist)
            continue;
        if (edge)
            edge(ctx, &x->s);
        if (!bucket)
            continue;
        for (int i = 0; i < LS_HIST_SLOTS; i++) {
            if (!x->hist[i])
                continue;
            int64_t lo, hi;
            ls_hist_bounds(i, &lo, &hi);
            bucket(ctx, &x->s, lo, hi, x->hist[i]);
        }
    }
}

struct ls_each_task { void (*fn)(const ls_task *t, void *ctx); void *ctx; };

static void each_task_fn(ls_task *t, void *arg)
{
    struct ls_each_task *a = arg;
    a->fn(t, a->ctx);
}

void ls_replay_each_task(ls_replay *r, void (*fn)(const ls_task *t, void *ctx), void *ctx)
{
    struct ls_each_task a = { fn, ctx };
    ls_tasks_each(r->tasks, each_task_fn, &a);
}

void ls_replay_each_iteration_bucket(ls_replay *r,
                                     void (*bucket)(void *ctx, uint64_t loop, int64_t lo,
                                                    int64_t hi, uint64_t count, int64_t busy),
                                     void *ctx)
{
    for (size_t i = 0; i < r->nloops; i++)
        for (int b = 0; b < LS_ITER_BUCKETS; b++)
            if (r->loops[i].iter[b])
                bucket(ctx, r->loops[i].id, b ? 1ll << b : 0, 2ll << b, r->loops[i].iter[b],
                       r->loops[i].iter_ns[b]);
}
