/*
 * diff_svg.c -- `loopscope diff --svg FILE`: the blocking call graph of
 * both traces in one picture, coloured by change.  Nodes are the
 * application functions on the stacks of blocking episodes (function and
 * file, the lines seen) and, below the sites, what the loop blocked in (a
 * syscall, or on-CPU); edges go from caller to callee.  Each carries the
 * blocked time through it before -> after: new red, gone grey and dashed,
 * worse orange, better green (diff_compare: 10% and 1ms).  Depends on
 * diff.h, gv.h (Graphviz, rendered in-process) and output.h.
 */
#define _GNU_SOURCE
#include "diff.h"
#include "gv.h"
#include "output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODE_LIMIT 60

/* Application frames of the stacks of the episodes compared, each stack
 * once with its episodes (n) and their blocked time: a stack's frames are
 * read once however many episodes share it (per episode, a deep stack
 * under many episodes was their product). */
static const char frames_cte[] =
    "WITH eps AS (SELECT stack_id AS st, count(*) AS n, total(dur_ns) AS dur FROM blocking"
    "   WHERE dur_ns >= ?1 AND stack_id IS NOT NULL GROUP BY stack_id),"
    " fr AS (SELECT e.st AS st, e.n AS n, e.dur AS dur, a.depth AS depth,"
    "   coalesce(a.function, '?') AS fn, a.file AS file, a.line AS line"
    "   FROM eps e JOIN app_frames a ON a.stack_id = e.st)";

/* Functions: episodes through them (once each, recursion or not), their
 * blocked time, the lines seen. */
static const char nodes_sql[] =
    " SELECT o.fn, o.file, sum(o.n), CAST(total(o.dur) AS INTEGER), l.lines"
    " FROM (SELECT fn, file, st, max(n) AS n, max(dur) AS dur FROM fr GROUP BY fn, file, st) o"
    " LEFT JOIN (SELECT fn, file, group_concat(line, ',') AS lines FROM"
    "   (SELECT DISTINCT fn, file, line FROM fr WHERE line IS NOT NULL ORDER BY fn, file, line)"
    "   GROUP BY fn, file) l ON l.fn = o.fn AND l.file IS o.file"
    " GROUP BY o.fn, o.file";

/* Caller -> callee: adjacent application frames of one stack. */
static const char edges_sql[] =
    ", e AS (SELECT st, n, dur, fn, file, lead(fn) OVER w AS cfn, lead(file) OVER w AS cfile"
    "   FROM fr WINDOW w AS (PARTITION BY st ORDER BY depth))"
    " SELECT cfn, cfile, fn, file, sum(n), CAST(total(dur) AS INTEGER)"
    " FROM (SELECT DISTINCT st, n, dur, cfn, cfile, fn, file FROM e WHERE cfn IS NOT NULL)"
    " GROUP BY cfn, cfile, fn, file";

/* Site (the innermost application frame of a stack) -> what each episode
 * on it blocked in. */
static const char calls_sql[] =
    ", s AS MATERIALIZED (SELECT st, fn, file, min(depth) FROM fr GROUP BY st)"
    " SELECT s.fn, s.file, coalesce(y.name, k.name, '?') AS call, count(*),"
    "   CAST(total(b.dur_ns) AS INTEGER)"
    /* CROSS: each episode looks its stack up in s (an automatic index);
     * the planner left to itself scanned blocking once per stack */
    " FROM blocking b CROSS JOIN s ON s.st = b.stack_id"
    " LEFT JOIN syscalls y ON y.nr = b.syscall LEFT JOIN blocking_kinds k ON k.id = b.kind"
    " WHERE b.dur_ns >= ?1 GROUP BY s.fn, s.file, call";

struct gnode {
    char *key;                /* "fn\x1f" short file, or "\x01" call */
    char *fn, *file, *lines;
    bool leaf;
    int64_t n[2], total[2];
    bool shown;
};

struct gedge {
    char *from, *to;          /* node keys */
    int64_t n[2], total[2];
};

struct graph {
    struct gnode *nodes;
    size_t nn, capn;
    struct gedge *edges;
    size_t ne, cape;
};

static char *node_key(const char *fn, const char *file)
{
    char *k = NULL;
    if (asprintf(&k, "%s\x1f%s", fn ? fn : "?", file ? ls_short_path(file) : "") < 0)
        return NULL;
    return k;
}

static bool add_node(struct graph *g, int k, char *key, const char *fn, const char *file,
                     const char *lines, bool leaf, int64_t n, int64_t total)
{
    if (!key || !ls_grow((void **)&g->nodes, &g->capn, g->nn + 1, sizeof(*g->nodes))) {
        free(key);
        return false;
    }
    struct gnode *x = &g->nodes[g->nn++];
    memset(x, 0, sizeof(*x));
    x->key = key;
    x->fn = strdup(fn ? fn : "?");
    x->file = file ? strdup(ls_short_path(file)) : NULL;
    x->lines = lines ? strdup(lines) : NULL;
    x->leaf = leaf;
    x->n[k] = diff_nonneg(n);
    x->total[k] = diff_nonneg(total);
    return true;
}

static bool add_edge(struct graph *g, int k, char *from, char *to, int64_t n, int64_t total)
{
    if (!from || !to || !ls_grow((void **)&g->edges, &g->cape, g->ne + 1, sizeof(*g->edges))) {
        free(from);
        free(to);
        return false;
    }
    struct gedge *x = &g->edges[g->ne++];
    memset(x, 0, sizeof(*x));
    x->from = from;
    x->to = to;
    x->n[k] = diff_nonneg(n);
    x->total[k] = diff_nonneg(total);
    return true;
}

static sqlite3_stmt *prep(struct diff_side *s, const char *tail, int64_t min_ns)
{
    char *sql = NULL;
    if (asprintf(&sql, "%s%s", frames_cte, tail) < 0)
        return NULL;
    sqlite3_stmt *st = ls_prepare(s->t, sql);
    free(sql);
    if (st)
        sqlite3_bind_int64(st, 1, min_ns);
    return st;
}

static bool read_side(struct diff_side *s, int k, int64_t min_ns, struct graph *g)
{
    int step;
    bool ok;
    sqlite3_stmt *st = prep(s, nodes_sql, min_ns);
    if (!st)
        return false;
    while ((step = sqlite3_step(st)) == SQLITE_ROW)
        add_node(g, k, node_key(ls_col_text(st, 0), ls_col_text(st, 1)), ls_col_text(st, 0),
                 ls_col_text(st, 1), ls_col_text(st, 4), false, sqlite3_column_int64(st, 2),
                 sqlite3_column_int64(st, 3));
    ok = ls_step_ok(s->t, st, step);
    sqlite3_finalize(st);
    if (!ok || !(st = prep(s, edges_sql, min_ns)))
        return false;
    while ((step = sqlite3_step(st)) == SQLITE_ROW)
        add_edge(g, k, node_key(ls_col_text(st, 0), ls_col_text(st, 1)),
                 node_key(ls_col_text(st, 2), ls_col_text(st, 3)), sqlite3_column_int64(st, 4),
                 sqlite3_column_int64(st, 5));
    ok = ls_step_ok(s->t, st, step);
    sqlite3_finalize(st);
    if (!ok || !(st = prep(s, calls_sql, min_ns)))
        return false;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        const char *call = ls_col_text(st, 2) ? ls_col_text(st, 2) : "?";
        char *leaf = NULL;
        if (asprintf(&leaf, "\x01%s", call) < 0)
            leaf = NULL;
        add_node(g, k, leaf ? strdup(leaf) : NULL, call, NULL, NULL, true,
                 sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 4));
        add_edge(g, k, node_key(ls_col_text(st, 0), ls_col_text(st, 1)), leaf,
                 sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 4));
    }
    ok = ls_step_ok(s->t, st, step);
    sqlite3_finalize(st);
    return ok;
}

static int cmp_node(const void *a, const void *b)
{
    return strcmp(((const struct gnode *)a)->key, ((const struct gnode *)b)->key);
}

static int cmp_edge(const void *a, const void *b)
{
    const struct gedge *x = a, *y = b;
    int c = strcmp(x->from, y->from);
    return c ? c : strcmp(x->to, y->to);
}

/* Sort and merge equal keys, summing both sides. */
static void merge(struct graph *g)
{
    size_t m = 0;
    if (g->nn)
        qsort(g->nodes, g->nn, sizeof(*g->nodes), cmp_node);
    for (size_t i = 0; i < g->nn; i++) {
        struct gnode *a = m ? &g->nodes[m - 1] : NULL, *b = &g->nodes[i];
        if (a && !cmp_node(a, b)) {
            for (int k = 0; k < 2; k++) {
                a->n[k] = ls_ts(a->n[k] + b->n[k]);
                a->total[k] = ls_ts(a->total[k] + b->total[k]);
            }
            if (!a->lines && b->lines) {
                a->lines = b->lines;
                b->lines = NULL;
            }
            free(b->key);
            free(b->fn);
            free(b->file);
            free(b->lines);
            continue;
        }
        g->nodes[m++] = *b;
    }
    g->nn = m;
    m = 0;
    if (g->ne)
        qsort(g->edges, g->ne, sizeof(*g->edges), cmp_edge);
    for (size_t i = 0; i < g->ne; i++) {
        struct gedge *a = m ? &g->edges[m - 1] : NULL, *b = &g->edges[i];
        if (a && !cmp_edge(a, b)) {
            for (int k = 0; k < 2; k++) {
                a->n[k] = ls_ts(a->n[k] + b->n[k]);
                a->total[k] = ls_ts(a->total[k] + b->total[k]);
            }
            free(b->from);
            free(b->to);
            continue;
        }
        g->edges[m++] = *b;
    }
    g->ne = m;
}

static void graph_free(struct graph *g)
{
    for (size_t i = 0; i < g->nn; i++) {
        free(g->nodes[i].key);
        free(g->nodes[i].fn);
        free(g->nodes[i].file);
        free(g->nodes[i].lines);
    }
    for (size_t i = 0; i < g->ne; i++) {
        free(g->edges[i].from);
        free(g->edges[i].to);
    }
    free(g->nodes);
    free(g->edges);
}

static enum diff_change change_of(const int64_t n[2], const int64_t total[2])
{
    return !n[0] ? DC_NEW : !n[1] ? DC_GONE : diff_compare(total[0], total[1], 1000000);
}

/* Fill, border and style per change. */
static const struct {
    const char *fill, *color, *style, *font;
} look[DC_N] = {
    [DC_SAME] = { "white", "#555555", "filled", "black" },
    [DC_NEW] = { "#ffcdd2", "#c62828", "filled", "black" },
    [DC_GONE] = { "#eeeeee", "#9e9e9e", "filled,dashed", "#757575" },
    [DC_WORSE] = { "#ffe0b2", "#ef6c00", "filled", "black" },
    [DC_BETTER] = { "#c8e6c9", "#2e7d32", "filled", "black" },
    [DC_NA] = { "white", "#555555", "filled", "black" },
};

static int64_t node_weight(const struct gnode *x)
{
    return x->total[0] > x->total[1] ? x->total[0] : x->total[1];
}

static int cmp_weight(const void *a, const void *b, void *ctx)
{
    const struct gnode *v = ctx;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int64_t wx = node_weight(&v[x]), wy = node_weight(&v[y]);
    return wx != wy ? (wx > wy ? -1 : 1) : (x < y ? -1 : x > y);
}

/* A side's time, "-" where it had no episode there. */
static const char *dur_or_dash(char *buf, size_t n, int64_t episodes, int64_t ns)
{
    if (!episodes) {
        snprintf(buf, n, "-");
        return buf;
    }
    return ls_fmt_dur(buf, n, ns);
}

static void draw(Agraph_t *gr, struct graph *g, struct diff_side s[2], int64_t min_ns)
{
    char d1[32], d2[32], d3[32];
    gv_buf b = { 0 };
    size_t *ix = malloc((g->nn ? g->nn : 1) * sizeof(*ix));
    if (!ix)
        return;
    for (size_t i = 0; i < g->nn; i++)
        ix[i] = i;
    qsort_r(ix, g->nn, sizeof(*ix), cmp_weight, g->nodes);
    for (size_t r = 0; r < g->nn && r < NODE_LIMIT; r++)
        g->nodes[ix[r]].shown = true;
    free(ix);

    gv_text(&b, s[0].target);
    gv_add(&b, " \xe2\x86\x92 ");
    gv_text(&b, s[1].target);
    gv_add(&b, "\\nblocking call graph, episodes of at least %s, before \xe2\x86\x92 after"
               "\\nred: new; grey, dashed: gone; orange: worse; green: better (total blocked "
               "time, 10%% and 1ms); ellipses: what the loop blocked in",
           ls_fmt_dur(d1, sizeof(d1), min_ns));
    gv_set(gr, "label", "%s", gv_str(&b));
    if (!g->nn) {
        gv_note(gr, "note", "no blocking episodes with application frames in either trace");
        free(b.s);
        return;
    }
    for (size_t i = 0; i < g->nn; i++) {
        struct gnode *x = &g->nodes[i];
        if (!x->shown)
            continue;
        enum diff_change ch = change_of(x->n, x->total);
        Agnode_t *n = gv_node(gr, "n%zu", i);
        gv_reset(&b);
        gv_text(&b, x->fn);
        if (x->file) {
            gv_add(&b, "\\n");
            gv_text(&b, x->file);
            if (x->lines) {
                gv_add(&b, ":");
                gv_text(&b, x->lines);
            }
        }
        gv_add(&b, "\\n%s \xe2\x86\x92 %s (%lld \xe2\x86\x92 %lld episodes)",
               dur_or_dash(d2, sizeof(d2), x->n[0], x->total[0]),
               dur_or_dash(d3, sizeof(d3), x->n[1], x->total[1]), (long long)x->n[0],
               (long long)x->n[1]);
        gv_add(&b, "\\n%s", diff_change_name[ch]);
        gv_set(n, "label", "%s", gv_str(&b));
        gv_set(n, "fillcolor", "%s", look[ch].fill);
        gv_set(n, "color", "%s", look[ch].color);
        gv_set(n, "fontcolor", "%s", look[ch].font);
        gv_set(n, "style", "%s", look[ch].style);
        gv_set(n, "penwidth", "%s", ch == DC_SAME ? "1" : "2");
        if (x->leaf)
            gv_set(n, "shape", "ellipse");
    }
    for (size_t i = 0; i < g->ne; i++) {
        struct gedge *e = &g->edges[i];
        struct gnode kf = { .key = e->from }, kt = { .key = e->to };
        struct gnode *f = bsearch(&kf, g->nodes, g->nn, sizeof(*g->nodes), cmp_node);
        struct gnode *t = bsearch(&kt, g->nodes, g->nn, sizeof(*g->nodes), cmp_node);
        if (!f || !t || !f->shown || !t->shown)
            continue;
        enum diff_change ch = change_of(e->n, e->total);
        Agedge_t *ed = agedge(gr, gv_node(gr, "n%zu", (size_t)(f - g->nodes)),
                              gv_node(gr, "n%zu", (size_t)(t - g->nodes)), NULL, 1);
        gv_set(ed, "label", " %s \xe2\x86\x92 %s", dur_or_dash(d1, sizeof(d1), e->n[0], e->total[0]),
               dur_or_dash(d2, sizeof(d2), e->n[1], e->total[1]));
        gv_set(ed, "color", "%s", look[ch].color);
        gv_set(ed, "fontcolor", "%s", look[ch].color);
        gv_set(ed, "penwidth", "%s", ch == DC_SAME ? "1" : "2");
        if (ch == DC_GONE)
            gv_set(ed, "style", "dashed");
    }
    if (g->nn > NODE_LIMIT) {
        char text[96];
        snprintf(text, sizeof(text), "%zu lighter nodes not shown", g->nn - NODE_LIMIT);
        gv_note(gr, "more", text);
    }
    free(b.s);
}

int diff_svg(struct diff_side s[2], int64_t min_ns, const char *path)
{
    struct graph g = { 0 };
    int rc = 1;
    for (int k = 0; k < 2; k++)
        if (!s[k].detection_off && !read_side(&s[k], k, min_ns, &g))
            goto out;
    merge(&g);
    agseterr(AGERR);                        /* Graphviz warnings would clutter stderr */
    Agraph_t *gr = gv_graph_new("TB");
    if (!gr) {
        ls_error("diff: out of memory");
        goto out;
    }
    draw(gr, &g, s, min_ns);
    rc = gv_write(gr, "diff", path, "svg");
    agclose(gr);
out:
    graph_free(&g);
    return rc;
}
