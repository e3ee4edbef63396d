/*
 * graph_blocking.c -- `loopscope graph --kind blocking`: the call graph of
 * the blocking episodes' stacks, like pprof's: one node per function
 * (flat and cumulative blocked time), caller -> callee edges weighted by
 * the blocked time through them.  Reads tables blocking, frames and
 * app_frames (tracer/SCHEMA.md).  Depends on graph.h (gv.h), trace.h.
 */
#define _GNU_SOURCE
#include "graph.h"
#include "output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Light to dark red by share in [0, 1], like pprof's cumulative colouring. */
static void heat(char *buf, size_t n, double share)
{
    if (share < 0)
        share = 0;
    if (share > 1)
        share = 1;
    int r = (int)(255 - share * (255 - 165) + 0.5);
    int gb = (int)(238 - share * 238 + 0.5);
    snprintf(buf, n, "#%02x%02x%02x", r, gb, gb);
}

static const char blocking_setup[] =
    /* One row per stack: its episodes and their blocked time, so that a
     * stack's frames are read once however many episodes share it (per
     * episode, a deep stack under many episodes was their product). */
    "CREATE TEMP TABLE g_st AS"
    " SELECT stack_id AS st, count(*) AS n, sum(dur_ns) AS dur FROM blocking"
    " WHERE stack_id IS NOT NULL GROUP BY stack_id;"
    /* One row per frame of every stack of an episode. */
    "CREATE TEMP TABLE g_fr AS"
    " SELECT s.st AS st, s.n AS n, s.dur AS dur, f.depth AS depth,"
    "   coalesce(f.function, printf('0x%x', f.address)) AS fn, coalesce(f.module, '') AS module,"
    "   f.file AS file, f.line AS line,"
    "   EXISTS (SELECT 1 FROM app_frames a WHERE a.stack_id = f.stack_id AND a.depth = f.depth) AS app"
    " FROM g_st s JOIN frames f ON f.stack_id = s.st;"
    "CREATE INDEX temp.g_fr_fn ON g_fr(fn, module);"
    "CREATE INDEX temp.g_fr_st ON g_fr(st, depth);"
    /* One row per function, heaviest first: ids give the creation order.
     * cum counts an episode once however often the function is on its
     * stack (recursion); flat is the episodes where it is innermost. */
    "CREATE TEMP TABLE g_node AS"
    " WITH once AS (SELECT fn, module, st, max(n) AS n, max(dur) AS dur, max(depth = 0) AS leaf,"
    "   max(app) AS app FROM g_fr GROUP BY fn, module, st)"
    " SELECT row_number() OVER (ORDER BY sum(dur) DESC, sum(leaf * dur) DESC, fn, module) AS id,"
    "   fn, module, max(app) AS app, sum(dur) AS cum, sum(leaf * dur) AS flat, sum(n) AS episodes"
    " FROM once GROUP BY fn, module;"
    "CREATE UNIQUE INDEX temp.g_node_fn ON g_node(fn, module);";

static const char blocking_nodes_sql[] =
    "SELECT n.id, n.fn, n.module, n.app, n.cum, n.flat, n.episodes,"
    "  (SELECT min(file) FROM g_fr x WHERE x.fn = n.fn AND x.module = n.module),"
    "  (SELECT group_concat(line, ',') FROM (SELECT DISTINCT line FROM g_fr x"
    "     WHERE x.fn = n.fn AND x.module = n.module AND line IS NOT NULL ORDER BY line))"
    " FROM g_node n ORDER BY n.id";

/* Caller (one frame deeper) -> callee, each stack (its episodes) counted
 * once per pair. */
static const char blocking_edges_sql[] =
    "SELECT c.id, e.id, sum(p.dur) FROM"
    " (SELECT DISTINCT a.st, a.dur, b.fn AS cfn, b.module AS cmod, a.fn AS efn, a.module AS emod"
    "  FROM g_fr a JOIN g_fr b ON b.st = a.st AND b.depth = a.depth + 1) p"
    " JOIN g_node c ON c.fn = p.cfn AND c.module = p.cmod"
    " JOIN g_node e ON e.fn = p.efn AND e.module = p.emod"
    " WHERE c.id <= ?1 AND e.id <= ?1"
    " GROUP BY c.id, e.id ORDER BY c.id, e.id";

int graph_blocking(ls_trace *t, Agraph_t *g, const struct graph_opts *o, const char *target)
{
    long limit = o->limit ? o->limit : 60;
    char d1[32], d2[32], color[16];
    gv_buf b = { 0 };
    int rc = 1;

    if (!ls_create_app_frames(t) || !graph_exec(t, blocking_setup))
        return 1;
    sqlite3_stmt *st = ls_prepare(t,
        "SELECT count(*), coalesce(sum(dur_ns), 0),"
        "  (SELECT coalesce(sum(n), 0) FROM g_st WHERE st IN (SELECT st FROM g_fr)),"
        "  (SELECT count(*) FROM g_node) FROM blocking");
    if (!st)
        return 1;
    sqlite3_step(st);
    int64_t episodes = sqlite3_column_int64(st, 0), total = sqlite3_column_int64(st, 1);
    int64_t with_stack = sqlite3_column_int64(st, 2), nfn = sqlite3_column_int64(st, 3);
    sqlite3_finalize(st);
    int64_t threshold = ls_meta_int(t, LS_META_BLOCK_THRESHOLD_NS, 0);
    char *detect = ls_meta(t, LS_META_BLOCKING_DETECTION);

    gv_text(&b, target);
    if (episodes)
        gv_add(&b, " \xe2\x80\x94 blocking call graph: %lld episode%s, %s blocked in all",
               (long long)episodes, episodes == 1 ? "" : "s", ls_fmt_dur(d1, sizeof(d1), total));
    else
        gv_add(&b, " \xe2\x80\x94 blocking call graph: no episodes");
    if (threshold > 0)
        gv_add(&b, " (each at least %s)", ls_fmt_dur(d2, sizeof(d2), threshold));
    if (with_stack < episodes)
        gv_add(&b, "; %lld without a stack", (long long)(episodes - with_stack));
    if (with_stack > 0)
        gv_add(&b, "\\nsquare boxes: application code; dashed, rounded: system libraries "
                   "and %s\\ndarker red: larger share of the blocked time; wider edge: "
                   "more blocked time through the call", ls_is_generic(t) ? "the runtime" : "libevl");
    gv_set(g, "label", "%s", gv_str(&b));

    if (with_stack == 0) {
        if (detect && !strcmp(detect, "off"))
            gv_note(g, "note", "blocking detection was off for this recording\n"
                            "(record without --no-blocking)");
        else if (episodes == 0)
            gv_note(g, "note", "no blocking episodes in this trace");
        else
            gv_note(g, "note", "no stacks were captured for the blocking episodes");
        rc = 0;
        goto out;
    }

    st = ls_prepare(t, blocking_nodes_sql);
    if (!st)
        goto out;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0);
        if (id > limit)
            continue;                       /* sorted by id: only counting the rest */
        const char *fn = ls_col_text(st, 1), *mod = ls_col_text(st, 2), *file = ls_col_text(st, 7);
        const char *lines = ls_col_text(st, 8);
        bool app = sqlite3_column_int(st, 3);
        int64_t cum = sqlite3_column_int64(st, 4), flat = sqlite3_column_int64(st, 5);
        double cshare = total ? (double)cum / total : 0, fshare = total ? (double)flat / total : 0;
        Agnode_t *n = gv_node(g, "f%lld", (long long)id);

        gv_reset(&b);
        gv_text(&b, fn);
        if (file) {
            gv_add(&b, "\\n");
            gv_text(&b, ls_short_path(file));
            if (lines) {
                /* at most three lines, then an ellipsis */
                const char *p = lines;
                for (int k = 0; k < 3 && (p = strchr(p, ',')); k++)
                    p++;
                gv_add(&b, ":%.*s%s", p ? (int)(p - lines - 1) : (int)strlen(lines), lines,
                       p ? ",\xe2\x80\xa6" : "");
            }
        }
        if (!app && mod && *mod) {
            const char *base = strrchr(mod, '/');
            if (mod[0] == '[') {            /* already bracketed: [vdso: PID] */
                gv_add(&b, "\\n");
                gv_text(&b, mod);
            } else {
                gv_add(&b, "\\n[");
                gv_text(&b, base ? base + 1 : mod);
                gv_add(&b, "]");
            }
        }
        if (flat > 0)
            gv_add(&b, "\\nflat %s (%.1f%%)", ls_fmt_dur(d1, sizeof(d1), flat), 100 * fshare);
        gv_add(&b, "\\ncum %s (%.1f%%)", ls_fmt_dur(d2, sizeof(d2), cum), 100 * cshare);
        gv_set(n, "label", "%s", gv_str(&b));
        heat(color, sizeof(color), cshare);
        gv_set(n, "fillcolor", "%s", color);
        if (cshare > 0.55)
            gv_set(n, "fontcolor", "white");
        /* pprof: the font grows with the flat share */
        gv_set(n, "fontsize", "%.0f", 10 + 14 * fshare);
        if (app) {
            gv_set(n, "penwidth", "1.5");
        } else {
            gv_set(n, "style", "filled,rounded,dashed");
            gv_set(n, "color", "#555555");
        }
        gv_reset(&b);
        gv_text(&b, file ? file : mod);
        gv_set(n, "tooltip", "%s", gv_str(&b));
    }
    bool ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (!ok)
        goto out;

    st = ls_prepare(t, blocking_edges_sql);
    if (!st)
        goto out;
    sqlite3_bind_int64(st, 1, limit);
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t w = sqlite3_column_int64(st, 2);
        double share = total ? (double)w / total : 0;
        Agnode_t *caller = gv_node(g, "f%lld", (long long)sqlite3_column_int64(st, 0));
        Agnode_t *callee = gv_node(g, "f%lld", (long long)sqlite3_column_int64(st, 1));
        Agedge_t *e = agedge(g, caller, callee, NULL, 1);
        gv_set(e, "label", " %s", ls_fmt_dur(d1, sizeof(d1), w));
        gv_set(e, "penwidth", "%.2f", 1 + 5 * share);
        gv_set(e, "weight", "%d", 1 + (int)(100 * share));
        heat(color, sizeof(color), 0.3 + 0.7 * share);
        gv_set(e, "color", "%s", color);
    }
    ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (!ok)
        goto out;
    if (nfn > limit) {
        char text[128];
        snprintf(text, sizeof(text), "%lld lighter functions not shown (--limit %ld)",
                 (long long)(nfn - limit), limit);
        gv_note(g, "more", text);
    }
    rc = 0;
out:
    free(detect);
    free(b.s);
    return rc;
}
