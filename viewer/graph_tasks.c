/*
 * graph_tasks.c -- `loopscope graph --kind tasks`: the task tree (spawn
 * edges), await edges and wait-for cycles (graph_waits.c finds those),
 * siblings collapsed by name pattern.  Reads table tasks (tracer/SCHEMA.md).
 * Depends on graph.h (gv.h), trace.h, evl-probes.h.
 */
#define _GNU_SOURCE
#include "graph.h"
#include "evl-probes.h"
#include "output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Final-state classes, their names and colours. */
const struct tstyle tstyle[TS_N] = {
    [TS_FINISHED] = { "finished", "#d8f0d8", "#2e7d32" },
    [TS_FAILED] = { "failed", "#f8c8c8", "#c62828" },
    [TS_CANCELLED] = { "cancelled", "#e4e4e4", "#616161" },
    [TS_PENDING] = { "pending", "#fff0b3", "#b08800" },
    [TS_LEAKED] = { "leaked", "#ecd2f5", "#7b1fa2" },
};

/* The class of a final state (tasks.final_state, -1 if none). */
static enum tstate final_class(int final)
{
    return final == EVL_FINAL_FINISHED ? TS_FINISHED : final == EVL_FINAL_FAILED ? TS_FAILED
         : final == EVL_FINAL_CANCELLED ? TS_CANCELLED : TS_PENDING;
}

/* Grouping order within one depth: parent, pattern, state; cycle members
 * never group (they sort by id, apart); then id. */
static int cmp_group(const void *x, const void *y)
{
    const struct gtask *a = *(struct gtask *const *)x, *b = *(struct gtask *const *)y;
    if (a->depth != b->depth)
        return a->depth < b->depth ? -1 : 1;
    if (a->pkey != b->pkey)
        return a->pkey < b->pkey ? -1 : 1;
    if (a->in_cycle != b->in_cycle)
        return a->in_cycle ? 1 : -1;
    if (!a->in_cycle) {
        int c = strcmp(a->pattern, b->pattern);
        if (c)
            return c;
        if (a->state != b->state)
            return a->state < b->state ? -1 : 1;
    }
    return a->id < b->id ? -1 : a->id > b->id;
}

static bool same_group(const struct gtask *a, const struct gtask *b)
{
    return a->depth == b->depth && a->pkey == b->pkey && !a->in_cycle && !b->in_cycle &&
           !strcmp(a->pattern, b->pattern) && a->state == b->state;
}

static int cmp_edge(const void *x, const void *y)
{
    const struct gedge *a = x, *b = y;
    if (a->tail != b->tail)
        return a->tail < b->tail ? -1 : 1;
    if (a->head != b->head)
        return a->head < b->head ? -1 : 1;
    if (a->kind != b->kind)
        return a->kind - b->kind;
    return a->reason - b->reason;
}

int graph_tasks(ls_trace *t, Agraph_t *g, const struct graph_opts *o, const char *target)
{
    long limit = o->limit ? o->limit : 300;
    struct gtask *tk = NULL;
    struct gnode *nodes = NULL;
    struct gedge *edges = NULL;
    struct gtask **order = NULL;
    struct pair *cyc = NULL;
    struct await *aw = NULL, *rel = NULL;
    size_t naw = 0, nrel = 0;
    size_t ntk = 0, captk = 0, nnodes = 0, capnodes = 0, nedges = 0, capedges = 0, ncyc = 0;
    size_t nlock = 0;                       /* lock wait edges */
    char *leak_names[LS_MAX_CODE] = { 0 }, *reason_names[LS_MAX_CODE] = { 0 };
    gv_buf b = { 0 };
    int rc = 1, step;
    bool ok;
    char *source = ls_lifecycle_text(t);    /* a census lifecycle (trace.h), or NULL */

    /* Tasks, sorted by id (task_by_id relies on it). */
    sqlite3_stmt *st = ls_prepare(t, "SELECT id, parent_id, name, final_state, leak FROM tasks ORDER BY id");
    if (!st)
        goto out;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (!ls_grow((void **)&tk, &captk, ntk + 1, sizeof(*tk)))
            break;
        struct gtask *x = &tk[ntk++];
        memset(x, 0, sizeof(*x));
        x->id = sqlite3_column_int64(st, 0);
        x->parent_id = sqlite3_column_type(st, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 1);
        x->name = strdup(ls_col_text(st, 2) ? ls_col_text(st, 2) : "?");
        x->pattern = ls_name_pattern(x->name ? x->name : "?");
        x->final = sqlite3_column_type(st, 3) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 3);
        /* the leak verdict's kind; -1: leaked, of a kind out of range */
        if (sqlite3_column_type(st, 4) != SQLITE_NULL) {
            int64_t k = sqlite3_column_int64(st, 4);
            x->leak = k > 0 && k < LS_MAX_CODE ? (int)k : -1;
        }
        x->wait = -1;
        x->wait_id = -1;
        if (!x->name || !x->pattern) {
            ntk--;
            free(x->name);
            free(x->pattern);
            break;
        }
    }
    ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (!ok)
        goto out;
    int n = (int)ntk;

    /* Await edges; wait-for cycles among the candidates; what the other
     * pending waiters await at the end. */
    if (!graph_task_waits(t, tk, n, &aw, &naw, &cyc, &ncyc) ||
        !graph_task_releases(t, tk, n, &rel, &nrel))
        goto out;
    graph_load_names(t, "leak_kinds", leak_names);
    graph_load_names(t, "suspend_reasons", reason_names);

    /* State, parent and depth; ids grow with creation, so a parent has a
     * smaller id and a smaller index.  A parent_id pointing forward or to an
     * unknown task makes the task a root. */
    for (int i = 0; i < n; i++) {
        struct gtask *x = &tk[i];
        x->state = x->leak ? TS_LEAKED : final_class(x->final);
        x->parent = x->parent_id >= 0 ? graph_task_by_id(tk, n, x->parent_id) : -1;
        if (x->parent >= i)
            x->parent = -1;
        x->depth = x->parent >= 0 ? tk[x->parent].depth + 1 : 0;
    }

    /* Nodes, one depth at a time so that a task's group key can use its
     * parent's node: siblings (same parent node) with the same name pattern
     * and state become one node when there are at least --collapse of them. */
    order = malloc((size_t)(n > 0 ? n : 1) * sizeof(*order));
    if (!order)
        goto out;
    for (int i = 0; i < n; i++)
        order[i] = &tk[i];
    /* sort by depth only first (pkey is not known below depth 0 yet) */
    for (int i = 0; i < n; i++)
        tk[i].pkey = 0;
    qsort(order, n, sizeof(*order), cmp_group);
    for (int lo = 0; lo < n;) {
        int hi = lo;
        while (hi < n && order[hi]->depth == order[lo]->depth)
            hi++;
        for (int k = lo; k < hi; k++)
            order[k]->pkey = order[k]->parent >= 0 ? tk[order[k]->parent].node : -1;
        qsort(order + lo, hi - lo, sizeof(*order), cmp_group);
        for (int k = lo; k < hi;) {
            int run = k + 1;
            while (run < hi && same_group(order[k], order[run]))
                run++;
            bool merge = o->collapse > 0 && run - k >= o->collapse;
            for (int m = k; m < run; m++) {
                if (m == k || !merge) {
                    if (!ls_grow((void **)&nodes, &capnodes, nnodes + 1, sizeof(*nodes)))
                        goto out;
                    nodes[nnodes++] = (struct gnode){ (int)(order[m] - tk), 0, order[m]->id,
                                                      order[m]->id, false };
                }
                struct gnode *gn = &nodes[nnodes - 1];
                gn->count++;
                if (order[m]->id < gn->min_id) {
                    gn->min_id = order[m]->id;
                    gn->first = (int)(order[m] - tk);
                }
                if (order[m]->id > gn->max_id)
                    gn->max_id = order[m]->id;
                order[m]->node = (int)nnodes - 1;
            }
            k = run;
        }
        lo = hi;
    }

    /* --limit: nodes in creation order; cycle members always shown. */
    long shown = 0;
    int64_t hidden_tasks = 0, hidden_nodes = 0;
    for (size_t i = 0; i < nnodes; i++) {
        nodes[i].shown = tk[nodes[i].first].in_cycle || shown < limit;
        if (nodes[i].shown && !tk[nodes[i].first].in_cycle)
            shown++;
        if (!nodes[i].shown) {
            hidden_tasks += nodes[i].count;
            hidden_nodes++;
        }
    }

    /* Edges: spawn (parent -> child) and await (waiter -> awaited), merged
     * per node pair and sorted. */
    for (int i = 0; i < n; i++) {
        if (tk[i].parent < 0)
            continue;
        if (!ls_grow((void **)&edges, &capedges, nedges + 1, sizeof(*edges)))
            goto out;
        edges[nedges++] = (struct gedge){ tk[tk[i].parent].node, tk[i].node, GEDGE_SPAWN, 0, 1,
                                          false };
    }
    for (size_t e = 0; e < naw; e++) {
        if (!ls_grow((void **)&edges, &capedges, nedges + 1, sizeof(*edges)))
            goto out;
        struct pair key = { aw[e].w, aw[e].a };
        bool c = ncyc && bsearch(&key, cyc, ncyc, sizeof(*cyc), graph_cmp_pair);
        int kind = aw[e].reason == EVL_SUSPEND_LOCK ? GEDGE_LOCK : GEDGE_AWAIT;
        nlock += kind == GEDGE_LOCK;
        edges[nedges++] = (struct gedge){ tk[aw[e].w].node, tk[aw[e].a].node, kind, 0, aw[e].n, c };
    }
    for (size_t e = 0; e < nrel; e++) {
        if (!ls_grow((void **)&edges, &capedges, nedges + 1, sizeof(*edges)))
            goto out;
        edges[nedges++] = (struct gedge){ tk[rel[e].w].node, tk[rel[e].a].node, GEDGE_WOKEN,
                                          rel[e].reason, rel[e].n, false };
    }
    if (nedges)
        qsort(edges, nedges, sizeof(*edges), cmp_edge);

    /* Title with a colour legend of the states present. */
    int count[TS_N] = { 0 }, ncycle_tasks = 0, deadlocked = 0;
    for (int i = 0; i < n; i++) {
        count[tk[i].state]++;
        ncycle_tasks += tk[i].in_cycle;
        deadlocked += tk[i].in_cycle && tk[i].wait >= 0 && tk[i].state == TS_PENDING;
    }
    gv_add(&b, "<table border=\"0\" cellspacing=\"4\"><tr><td colspan=\"%d\"><font point-size=\"14\">",
           TS_N);
    gv_html(&b, target);
    gv_add(&b, " \xe2\x80\x94 task tree: %d task%s", n, n == 1 ? "" : "s");
    if (ncycle_tasks)
        gv_add(&b, ", <font color=\"#d00000\"><b>%d in wait-for cycles%s</b></font>", ncycle_tasks,
               deadlocked ? " (deadlocked at the end)" : "");
    gv_add(&b, "</font></td></tr><tr><td colspan=\"%d\">%sdashed: awaited; %s%s"
               "bold red: wait-for cycle</td></tr>", TS_N, source ? "" : "solid: spawned; ",
           nlock ? "dotted: waits for a lock the other holds; " : "",
           nrel ? "green: woken by (event, queue ...); " : "");
    if (source) {                           /* a census: no parents, no wakers */
        gv_add(&b, "<tr><td colspan=\"%d\">", TS_N);
        gv_html(&b, source);
        gv_add(&b, ": who spawned or woke a task is not known</td></tr>");
    }
    if (n > 0) {                            /* an empty <tr> is a syntax error */
        gv_add(&b, "<tr>");
        for (int s = 0; s < TS_N; s++)
            if (count[s])
                gv_add(&b, "<td bgcolor=\"%s\" border=\"1\" color=\"%s\"> %s %d </td>",
                       tstyle[s].fill, tstyle[s].border, tstyle[s].name, count[s]);
        gv_add(&b, "</tr>");
    }
    gv_add(&b, "</table>");
    gv_set_html_label(g, g, gv_str(&b));

    if (n == 0) {
        gv_note(g, "note", "no tasks in this trace");
        rc = 0;
        goto out;
    }

    char buf[32];
    for (size_t i = 0; i < nnodes; i++) {
        struct gnode *gn = &nodes[i];
        struct gtask *x = &tk[gn->first];
        if (!gn->shown)
            continue;
        Agnode_t *nd = gn->count > 1 ? gv_node(g, "g%lld", (long long)gn->min_id)
                                     : gv_node(g, "t%lld", (long long)x->id);
        gv_reset(&b);
        if (gn->count > 1) {
            bool same = !strcmp(x->pattern, x->name);   /* no digits: identical names */
            gv_text(&b, same ? x->name : x->pattern);
            gv_add(&b, " \xc3\x97%d\\n#%lld..#%lld", gn->count, (long long)gn->min_id,
                   (long long)gn->max_id);
        } else {
            gv_text(&b, x->name);
            gv_add(&b, "#%lld", (long long)x->id);
        }
        /* a leaked task that did end (failed, error never read) says both */
        if (x->state == TS_LEAKED && final_class(x->final) != TS_PENDING)
            gv_add(&b, "\\n%s, leaked", tstyle[final_class(x->final)].name);
        else
            gv_add(&b, "\\n%s", tstyle[x->state].name);
        if (x->leak > 0)
            gv_add(&b, " (%s)", graph_name_of(leak_names, x->leak, buf, sizeof(buf)));
        if (gn->count == 1 && x->wait_id >= 0 && x->final < 0)
            gv_add(&b, x->wait_reason == EVL_SUSPEND_LOCK ? "\\nwaits for a lock #%lld holds"
                                                          : "\\nawaits #%lld",
                   (long long)x->wait_id);
        gv_set(nd, "label", "%s", gv_str(&b));
        gv_set(nd, "fillcolor", "%s", tstyle[x->state].fill);
        gv_set(nd, "color", "%s", tstyle[x->state].border);
        if (gn->count > 1)
            gv_set(nd, "peripheries", "2");
        if (x->in_cycle) {
            gv_set(nd, "color", "#d00000");
            gv_set(nd, "penwidth", "3");
        }
    }
    for (size_t i = 0; i < nedges;) {
        struct gedge e = edges[i++];
        while (i < nedges && !cmp_edge(&e, &edges[i])) {
            e.count += edges[i].count;
            e.cycle |= edges[i].cycle;
            i++;
        }
        if (!nodes[e.tail].shown || !nodes[e.head].shown)
            continue;
        const struct gnode *a = &nodes[e.tail], *h = &nodes[e.head];
        Agnode_t *tn, *hn;
        tn = a->count > 1 ? gv_node(g, "g%lld", (long long)a->min_id) : gv_node(g, "t%lld", (long long)a->min_id);
        hn = h->count > 1 ? gv_node(g, "g%lld", (long long)h->min_id) : gv_node(g, "t%lld", (long long)h->min_id);
        Agedge_t *ed = agedge(g, tn, hn, NULL, 1);
        if (e.kind == GEDGE_SPAWN) {
            gv_set(ed, "color", "#555555");
            continue;
        }
        if (e.kind == GEDGE_WOKEN) {  /* woken by: history, off the ranking */
            gv_set(ed, "style", "dashed");
            gv_set(ed, "constraint", "false");
            gv_set(ed, "color", "#2e7d32");
            char rb[32];
            const char *r = graph_name_of(reason_names, e.reason, rb, sizeof(rb));
            if (e.count > 1)
                gv_set(ed, "xlabel", " %s \xc3\x97%lld", r, (long long)e.count);
            else
                gv_set(ed, "xlabel", " %s", r);
            continue;
        }
        /* awaits: off the tree's ranking, so a sibling await does not bend it */
        gv_set(ed, "style", e.kind == GEDGE_LOCK ? "dotted" : "dashed");
        gv_set(ed, "constraint", "false");
        gv_set(ed, "color", "%s", e.cycle ? "#d00000" : "#1565c0");
        /* An xlabel, placed after the layout: a label makes an await
         * between nodes of one rank a labelled flat edge, which crashes
         * Graphviz 2.43 (gvFreeLayout double-frees it). */
        if (e.count > 1)
            gv_set(ed, "xlabel", " \xc3\x97%lld", (long long)e.count);
        if (e.cycle) {
            gv_set(ed, "style", e.kind == GEDGE_LOCK ? "bold,dotted" : "bold");
            gv_set(ed, "penwidth", "3");
        }
    }
    if (hidden_nodes) {
        char text[160];
        snprintf(text, sizeof(text), "%lld more tasks in %lld nodes not shown (--limit %ld)",
                 (long long)hidden_tasks, (long long)hidden_nodes, limit);
        gv_note(g, "more", text);
    }
    rc = 0;
out:
    for (size_t i = 0; i < ntk; i++) {
        free(tk[i].name);
        free(tk[i].pattern);
    }
    free(tk);
    free(order);
    free(nodes);
    free(edges);
    free(cyc);
    free(aw);
    free(rel);
    free(b.s);
    free(source);
    graph_free_names(leak_names);
    graph_free_names(reason_names);
    return rc;
}
