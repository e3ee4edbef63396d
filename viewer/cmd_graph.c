/*
 * cmd_graph.c -- `loopscope graph TRACE --kind KIND -o FILE`: pictures of a
 * trace drawn with Graphviz, in-process: the graph is built with cgraph
 * (agopen/agnode/agedge/agsafeset), laid out with libgvc's "dot" layout and
 * rendered by libgvc's plugins; nothing is shelled out.  Overview:
 * shared/DESIGN.md ("Viewer"); the tables read: tracer/SCHEMA.md.
 *
 *   blocking   call graph of the blocking episodes' stacks, like pprof's:
 *              functions weighted by blocked time, caller -> callee edges
 *   tasks      task tree: spawn edges, await edges, wait-for cycles
 *   lifecycle  the state diagram every task went through, with counts and
 *              latencies per transition; --task ID for one task's path
 *
 * The format comes from the output's extension.  A .dot file is the graph as
 * built (agwrite, no layout), so it is the same on every Graphviz version
 * and serves as the golden copy in tests; .svg/.png/.pdf are laid out and
 * rendered.  Nodes and edges are created in a sorted order (SQL ORDER BY,
 * or qsort with full tie-breaks), which is what makes the .dot stable.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "output.h"
#include "trace.h"

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage[] =
    "usage: loopscope graph TRACE --kind KIND -o FILE [--task ID] [--limit N] [--collapse N]\n"
    "\n"
    "Draw a graph of the trace with Graphviz.  The format follows FILE's\n"
    "extension: .svg, .png, .pdf, or .dot (the graph source, not laid out).\n"
    "\n"
    "  --kind blocking    call graph of the blocking episodes' stacks: one node per\n"
    "                     function (flat and cumulative blocked time, darker red =\n"
    "                     larger cumulative share), caller -> callee edges as thick\n"
    "                     as the blocked time through them; application frames are\n"
    "                     square boxes, system and libevl frames dashed and rounded\n"
    "  --kind tasks       task tree: spawned (solid) and awaited (dashed) edges,\n"
    "                     coloured by final state; wait-for cycles in bold red\n"
    "  --kind lifecycle   state diagram of all tasks: created, ready, running,\n"
    "                     suspended(reason), finished/failed/cancelled, leaked;\n"
    "                     each transition with its count and the median and p99\n"
    "                     time spent in the state before it\n"
    "  -o, --output FILE  where to write the graph (required)\n"
    "  --task ID          lifecycle: the path of one task, transitions numbered\n"
    "  --limit N          blocking: at most N functions, the heaviest (default 60);\n"
    "                     tasks: at most N nodes (default 300); lifecycle: at most\n"
    "                     N transitions, the most frequent (default 60), or with\n"
    "                     --task the first N (default 100)\n"
    "  --collapse N       tasks: merge N or more sibling tasks with the same parent,\n"
    "                     final state and name pattern (digits replaced by '*') into\n"
    "                     one node, e.g. \"worker-* x120\" (default 5; 0 = never)\n"
    "\n"
    "A wait-for cycle is a set of tasks each suspended awaiting the next one\n"
    "(task_suspend, reason task) at the same moment of the trace: a deadlock\n"
    "unless something cancels one of them.\n"
    "\n"

    "examples:\n"
    "  loopscope graph trace.db --kind blocking -o blocking.svg\n"
    "  loopscope graph trace.db --kind tasks -o tasks.png --collapse 10\n"
    "  loopscope graph trace.db --kind lifecycle -o lifecycle.svg\n"
    "  loopscope graph trace.db --kind lifecycle --task 7 -o task7.pdf\n";

/* ------------------------------------------------------------- options */

enum kind { KIND_NONE, KIND_BLOCKING, KIND_TASKS, KIND_LIFECYCLE };

struct opts {
    enum kind kind;
    const char *out;          /* -o FILE */
    const char *format;       /* Graphviz output format, from out's extension */
    int64_t task;             /* --task; -1 when not given */
    long limit;               /* --limit; 0 = the kind's default */
    long collapse;            /* --collapse; siblings merged at this count */
};

/* Extension -> Graphviz format; "dot" means agwrite of the unlaid graph. */
static const char *format_of(const char *path)
{
    static const char *const map[][2] = {
        { ".svg", "svg" }, { ".png", "png" }, { ".pdf", "pdf" }, { ".dot", "dot" }, { ".gv", "dot" },
    };
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && slash > dot))
        return NULL;
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcasecmp(dot, map[i][0]))
            return map[i][1];
    return NULL;
}

static int parse_long(const char *arg, long *v)
{
    char *end;
    errno = 0;
    *v = strtol(arg, &end, 10);
    return (*arg && !*end && !errno && *v >= 0) ? 0 : -1;
}

static int on_opt(int c, const char *arg, void *ctx)
{
    struct opts *o = ctx;
    long v;
    switch (c) {
    case 'k':
        if (!strcmp(arg, "blocking"))
            o->kind = KIND_BLOCKING;
        else if (!strcmp(arg, "tasks"))
            o->kind = KIND_TASKS;
        else if (!strcmp(arg, "lifecycle"))
            o->kind = KIND_LIFECYCLE;
        else
            return ls_error("graph: unknown kind '%s': use blocking, tasks or lifecycle "
                            "(see 'loopscope graph --help')", arg);
        return 0;
    case 'o':
        o->format = format_of(arg);
        if (!o->format)
            return ls_error("graph: cannot tell the format of '%s': use a .svg, .png, .pdf or "
                            ".dot file name", arg);
        o->out = arg;
        return 0;
    case 't':
        if (parse_long(arg, &v))
            return ls_error("graph: invalid task id '%s'", arg);
        o->task = v;
        return 0;
    case 'l':
        if (parse_long(arg, &v) || v == 0)
            return ls_error("graph: invalid --limit '%s'", arg);
        o->limit = v;
        return 0;
    case 'c':
        if (parse_long(arg, &v))
            return ls_error("graph: invalid --collapse '%s'", arg);
        o->collapse = v;
        return 0;
    }
    return 0;
}

/* Fail before the work, not after it: the output's directory must exist
 * and be writable (or the file itself writable). */
static int check_writable(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode))
            return ls_error("graph: cannot write '%s': is a directory", path);
        if (access(path, W_OK) != 0)
            return ls_error("graph: cannot write '%s': %s", path, strerror(errno));
        return 0;
    }
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    int rc = 0;
    if (!dir || access(dir, W_OK | X_OK) != 0)
        rc = ls_error("graph: cannot write '%s': %s", path, strerror(dir ? errno : ENOMEM));
    free(dir);
    return rc;
}

/* ------------------------------------------------------- string builder */

typedef struct sbuf {
    char *s;                  /* NUL-terminated; NULL until the first add */
    size_t len, cap;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = (b->len + (size_t)n + 1) * 2;
        char *s = realloc(b->s, cap);
        if (!s)
            return;
        b->s = s;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Text from the trace (task names, functions) inside a DOT label, or an
 * HTML-like one: output.c's ls_dot_text (valid UTF-8, no controls, which
 * Graphviz would copy into the SVG; backslashes, which start escapes such
 * as \N or \l, doubled). */
static void sb_text(sbuf *b, const char *s)
{
    char *t = ls_dot_text(s ? s : "?", false);
    sb_add(b, "%s", t ? t : "?");
    free(t);
}

static void sb_html(sbuf *b, const char *s)
{
    char *t = ls_dot_text(s ? s : "?", true);
    sb_add(b, "%s", t ? t : "?");
    free(t);
}

static const char *sb_str(sbuf *b)
{
    return b->s ? b->s : "";
}

static void sb_reset(sbuf *b)
{
    b->len = 0;
    if (b->s)
        b->s[0] = '\0';
}

/* --------------------------------------------------------- graph helpers */

/* Set one attribute, declaring it (default "") on first use. */
static void set(void *obj, const char *attr, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set(void *obj, const char *attr, const char *fmt, ...)
{
    char *v = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&v, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    agsafeset(obj, (char *)attr, v, (char *)"");
    free(v);
}

/* An HTML-like label (graph title with a colour legend). */
static void set_html_label(void *obj, Agraph_t *g, const char *html)
{
    char *h = agstrdup_html(g, (char *)html);
    agsafeset(obj, (char *)"label", h, (char *)"");   /* shares h's refstr: stays HTML */
    agstrfree(g, h);
}

static Agraph_t *graph_new(const char *rankdir)
{
    Agraph_t *g = agopen((char *)"loopscope", Agdirected, NULL);
    if (!g)
        return NULL;
    agattr(g, AGRAPH, (char *)"rankdir", (char *)rankdir);
    agattr(g, AGRAPH, (char *)"fontname", (char *)"Helvetica");
    agattr(g, AGRAPH, (char *)"labelloc", (char *)"t");
    agattr(g, AGRAPH, (char *)"nodesep", (char *)"0.3");
    agattr(g, AGNODE, (char *)"fontname", (char *)"Helvetica");
    agattr(g, AGNODE, (char *)"fontsize", (char *)"11");
    agattr(g, AGNODE, (char *)"shape", (char *)"box");
    agattr(g, AGNODE, (char *)"style", (char *)"filled");
    agattr(g, AGNODE, (char *)"fillcolor", (char *)"white");
    agattr(g, AGEDGE, (char *)"fontname", (char *)"Helvetica");
    agattr(g, AGEDGE, (char *)"fontsize", (char *)"9");
    return g;
}

static Agnode_t *node(Agraph_t *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static Agnode_t *node(Agraph_t *g, const char *fmt, ...)
{
    char name[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    return agnode(g, name, 1);
}

/* A note node: an empty trace, or what --limit left out. */
static Agnode_t *note(Agraph_t *g, const char *name, const char *text)
{
    Agnode_t *n = agnode(g, (char *)name, 1);
    sbuf b = { 0 };
    sb_text(&b, text);
    set(n, "shape", "note");
    set(n, "fillcolor", "#fffde7");
    set(n, "label", "%s", sb_str(&b));
    free(b.s);
    return n;
}

/* What was traced, for titles: the target command's file name. */
static char *target_name(ls_trace *t)
{
    char *cmd = ls_meta(t, "target_cmdline");
    if (!cmd || !*cmd) {
        free(cmd);
        cmd = ls_meta(t, "target_binary");
    }
    if (!cmd)
        return strdup("trace");
    cmd[strcspn(cmd, " ")] = '\0';
    const char *base = strrchr(cmd, '/');
    char *r = strdup(base && base[1] ? base + 1 : cmd);
    free(cmd);
    return r;
}

/* Write g to o->out: agwrite for .dot, else layout with "dot" and render.
 * Graphviz's own diagnostics are limited to errors (agseterr). */
static int graph_write(Agraph_t *g, const struct opts *o)
{
    FILE *f = fopen(o->out, "w");
    if (!f)
        return ls_error("graph: cannot write '%s': %s", o->out, strerror(errno));
    bool render_failed = false;
    if (!strcmp(o->format, "dot")) {
        agwrite(g, f);
    } else {
        GVC_t *gvc = gvContext();
        if (!gvc || gvLayout(gvc, g, "dot") != 0) {
            render_failed = true;
        } else {
            render_failed = gvRender(gvc, g, o->format, f) != 0;
            gvFreeLayout(gvc, g);
        }
        if (gvc)
            gvFreeContext(gvc);
    }
    int err = ferror(f) ? (errno ? errno : EIO) : 0;
    if (fclose(f) != 0 && !err)
        err = errno;
    if (render_failed || err) {
        remove(o->out);
        if (render_failed)
            return ls_error("graph: Graphviz could not render '%s' as %s", o->out, o->format);
        return ls_error("graph: cannot write '%s': %s", o->out, strerror(err));
    }
    return 0;
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    return (const char *)sqlite3_column_text(st, i);
}

/* Run SQL that returns no rows (temp tables); false after an error line. */
static bool exec(ls_trace *t, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(t->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        ls_error("reading trace '%s': %s", t->path, msg ? msg : "?");
        sqlite3_free(msg);
        return false;
    }
    return true;
}

/* Names of a lookup table (states, suspend_reasons, leak_kinds), by id,
 * made fit for a label (they come from the trace too). */
#define LS_MAX_CODE 64
static void load_names(ls_trace *t, const char *table, char *names[LS_MAX_CODE])
{
    char sql[96];
    snprintf(sql, sizeof(sql), "SELECT id, name FROM %s", table);
    sqlite3_stmt *st = ls_prepare(t, sql);
    while (st && sqlite3_step(st) == SQLITE_ROW) {
        int id = sqlite3_column_int(st, 0);
        if (id >= 0 && id < LS_MAX_CODE && col_text(st, 1) && !names[id])
            names[id] = ls_dot_text(col_text(st, 1), false);
    }
    sqlite3_finalize(st);
}

static void free_names(char *names[LS_MAX_CODE])
{
    for (int i = 0; i < LS_MAX_CODE; i++)
        free(names[i]);
}

static const char *name_of(char *names[LS_MAX_CODE], int64_t id, char *buf, size_t n)
{
    if (id >= 0 && id < LS_MAX_CODE && names[id])
        return names[id];
    snprintf(buf, n, "#%lld", (long long)id);
    return buf;
}

/* ============================================================= blocking */

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
    /* One row per frame of every episode that has a stack. */
    "CREATE TEMP TABLE g_fr AS"
    " SELECT b.id AS ep, b.dur_ns AS dur, f.depth AS depth,"
    "   coalesce(f.function, printf('0x%x', f.address)) AS fn, coalesce(f.module, '') AS module,"
    "   f.file AS file, f.line AS line,"
    "   EXISTS (SELECT 1 FROM app_frames a WHERE a.stack_id = f.stack_id AND a.depth = f.depth) AS app"
    " FROM blocking b JOIN frames f ON f.stack_id = b.stack_id;"
    "CREATE INDEX temp.g_fr_fn ON g_fr(fn, module);"
    "CREATE INDEX temp.g_fr_ep ON g_fr(ep, depth);"
    /* One row per function, heaviest first: ids give the creation order.
     * cum counts an episode once however often the function is on its
     * stack (recursion); flat is the episodes where it is innermost. */
    "CREATE TEMP TABLE g_node AS"
    " WITH once AS (SELECT fn, module, ep, max(dur) AS dur, max(depth = 0) AS leaf, max(app) AS app"
    "   FROM g_fr GROUP BY fn, module, ep)"
    " SELECT row_number() OVER (ORDER BY sum(dur) DESC, sum(leaf * dur) DESC, fn, module) AS id,"
    "   fn, module, max(app) AS app, sum(dur) AS cum, sum(leaf * dur) AS flat, count(*) AS episodes"
    " FROM once GROUP BY fn, module;"
    "CREATE UNIQUE INDEX temp.g_node_fn ON g_node(fn, module);";

static const char blocking_nodes_sql[] =
    "SELECT n.id, n.fn, n.module, n.app, n.cum, n.flat, n.episodes,"
    "  (SELECT min(file) FROM g_fr x WHERE x.fn = n.fn AND x.module = n.module),"
    "  (SELECT group_concat(line, ',') FROM (SELECT DISTINCT line FROM g_fr x"
    "     WHERE x.fn = n.fn AND x.module = n.module AND line IS NOT NULL ORDER BY line))"
    " FROM g_node n ORDER BY n.id";

/* Caller (one frame deeper) -> callee, each episode counted once per pair. */
static const char blocking_edges_sql[] =
    "SELECT c.id, e.id, sum(p.dur) FROM"
    " (SELECT DISTINCT a.ep, a.dur, b.fn AS cfn, b.module AS cmod, a.fn AS efn, a.module AS emod"
    "  FROM g_fr a JOIN g_fr b ON b.ep = a.ep AND b.depth = a.depth + 1) p"
    " JOIN g_node c ON c.fn = p.cfn AND c.module = p.cmod"
    " JOIN g_node e ON e.fn = p.efn AND e.module = p.emod"
    " WHERE c.id <= ?1 AND e.id <= ?1"
    " GROUP BY c.id, e.id ORDER BY c.id, e.id";

static int graph_blocking(ls_trace *t, Agraph_t *g, const struct opts *o, const char *target)
{
    long limit = o->limit ? o->limit : 60;
    char d1[32], d2[32], color[16];
    sbuf b = { 0 };
    int rc = 1;

    if (!ls_create_app_frames(t) || !exec(t, blocking_setup))
        return 1;
    sqlite3_stmt *st = ls_prepare(t,
        "SELECT count(*), coalesce(sum(dur_ns), 0),"
        "  (SELECT count(DISTINCT ep) FROM g_fr), (SELECT count(*) FROM g_node) FROM blocking");
    if (!st)
        return 1;
    sqlite3_step(st);
    int64_t episodes = sqlite3_column_int64(st, 0), total = sqlite3_column_int64(st, 1);
    int64_t with_stack = sqlite3_column_int64(st, 2), nfn = sqlite3_column_int64(st, 3);
    sqlite3_finalize(st);
    int64_t threshold = ls_meta_int(t, "block_threshold_ns", 0);
    char *detect = ls_meta(t, "blocking_detection");

    sb_text(&b, target);
    if (episodes)
        sb_add(&b, " \xe2\x80\x94 blocking call graph: %lld episode%s, %s blocked in all",
               (long long)episodes, episodes == 1 ? "" : "s", ls_fmt_dur(d1, sizeof(d1), total));
    else
        sb_add(&b, " \xe2\x80\x94 blocking call graph: no episodes");
    if (threshold > 0)
        sb_add(&b, " (each at least %s)", ls_fmt_dur(d2, sizeof(d2), threshold));
    if (with_stack < episodes)
        sb_add(&b, "; %lld without a stack", (long long)(episodes - with_stack));
    if (with_stack > 0)
        sb_add(&b, "\\nsquare boxes: application code; dashed, rounded: system libraries "
                   "and %s\\ndarker red: larger share of the blocked time; wider edge: "
                   "more blocked time through the call", ls_is_generic(t) ? "the runtime" : "libevl");
    set(g, "label", "%s", sb_str(&b));

    if (with_stack == 0) {
        if (detect && !strcmp(detect, "off"))
            note(g, "note", "blocking detection was off for this recording\n"
                            "(record without --no-blocking)");
        else if (episodes == 0)
            note(g, "note", "no blocking episodes in this trace");
        else
            note(g, "note", "no stacks were captured for the blocking episodes");
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
        const char *fn = col_text(st, 1), *mod = col_text(st, 2), *file = col_text(st, 7);
        const char *lines = col_text(st, 8);
        bool app = sqlite3_column_int(st, 3);
        int64_t cum = sqlite3_column_int64(st, 4), flat = sqlite3_column_int64(st, 5);
        double cshare = total ? (double)cum / total : 0, fshare = total ? (double)flat / total : 0;
        Agnode_t *n = node(g, "f%lld", (long long)id);

        sb_reset(&b);
        sb_text(&b, fn);
        if (file) {
            sb_add(&b, "\\n");
            sb_text(&b, ls_short_path(file));
            if (lines) {
                /* at most three lines, then an ellipsis */
                const char *p = lines;
                for (int k = 0; k < 3 && (p = strchr(p, ',')); k++)
                    p++;
                sb_add(&b, ":%.*s%s", p ? (int)(p - lines - 1) : (int)strlen(lines), lines,
                       p ? ",\xe2\x80\xa6" : "");
            }
        }
        if (!app && mod && *mod) {
            const char *base = strrchr(mod, '/');
            if (mod[0] == '[') {            /* already bracketed: [vdso: PID] */
                sb_add(&b, "\\n");
                sb_text(&b, mod);
            } else {
                sb_add(&b, "\\n[");
                sb_text(&b, base ? base + 1 : mod);
                sb_add(&b, "]");
            }
        }
        if (flat > 0)
            sb_add(&b, "\\nflat %s (%.1f%%)", ls_fmt_dur(d1, sizeof(d1), flat), 100 * fshare);
        sb_add(&b, "\\ncum %s (%.1f%%)", ls_fmt_dur(d2, sizeof(d2), cum), 100 * cshare);
        set(n, "label", "%s", sb_str(&b));
        heat(color, sizeof(color), cshare);
        set(n, "fillcolor", "%s", color);
        if (cshare > 0.55)
            set(n, "fontcolor", "white");
        /* pprof: the font grows with the flat share */
        set(n, "fontsize", "%.0f", 10 + 14 * fshare);
        if (app) {
            set(n, "penwidth", "1.5");
        } else {
            set(n, "style", "filled,rounded,dashed");
            set(n, "color", "#555555");
        }
        sb_reset(&b);
        sb_text(&b, file ? file : mod);
        set(n, "tooltip", "%s", sb_str(&b));
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
        Agnode_t *caller = node(g, "f%lld", (long long)sqlite3_column_int64(st, 0));
        Agnode_t *callee = node(g, "f%lld", (long long)sqlite3_column_int64(st, 1));
        Agedge_t *e = agedge(g, caller, callee, NULL, 1);
        set(e, "label", " %s", ls_fmt_dur(d1, sizeof(d1), w));
        set(e, "penwidth", "%.2f", 1 + 5 * share);
        set(e, "weight", "%d", 1 + (int)(100 * share));
        heat(color, sizeof(color), 0.3 + 0.7 * share);
        set(e, "color", "%s", color);
    }
    ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (!ok)
        goto out;
    if (nfn > limit) {
        char text[128];
        snprintf(text, sizeof(text), "%lld lighter functions not shown (--limit %ld)",
                 (long long)(nfn - limit), limit);
        note(g, "more", text);
    }
    rc = 0;
out:
    free(detect);
    free(b.s);
    return rc;
}

/* ================================================================ tasks */

/* Final-state classes; the first three in the order of states.id 4, 5, 6. */
enum tstate { TS_FINISHED, TS_FAILED, TS_CANCELLED, TS_PENDING, TS_LEAKED, TS_N };

static const struct {
    const char *name;
    const char *fill;
    const char *border;
} tstyle[TS_N] = {
    [TS_FINISHED] = { "finished", "#d8f0d8", "#2e7d32" },
    [TS_FAILED] = { "failed", "#f8c8c8", "#c62828" },
    [TS_CANCELLED] = { "cancelled", "#e4e4e4", "#616161" },
    [TS_PENDING] = { "pending", "#fff0b3", "#b08800" },
    [TS_LEAKED] = { "leaked", "#ecd2f5", "#7b1fa2" },
};

struct gtask {
    int64_t id;
    int64_t parent_id;        /* -1: none */
    char *name;
    char *pattern;            /* name with each run of digits replaced by '*' */
    int parent;               /* index in the sorted array, -1 if none/unknown */
    int depth;                /* 0 for roots; parents precede children */
    int64_t pkey;             /* grouping key of the parent: its node, or unique */
    int final;                /* tasks.final_state, -1 if NULL */
    int leak;                 /* leak_kinds.id of its task_leak, 0 if none */
    enum tstate state;
    int wait;                 /* cycle scan: index of the task it awaits now, -1 */
    int64_t wait_id;          /* cycle scan: id of that task (may be unknown) */
    bool in_cycle;            /* was part of a wait-for cycle at some moment */
    int node;                 /* index in the node array */
};

struct gnode {
    int first;                /* task index of its first (lowest id) member */
    int count;                /* members: 1, or >= --collapse */
    int64_t min_id, max_id;
    bool shown;               /* within --limit */
};

struct gedge {
    int tail, head;           /* node indexes */
    int kind;                 /* 0 spawn, 1 await */
    int64_t count;            /* children, or awaits */
    bool cycle;               /* an await edge that was part of a wait-for cycle */
};

struct pair {
    int a, b;
};

static int task_by_id(const struct gtask *tk, int n, int64_t id)
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

static char *name_pattern(const char *name)
{
    char *p = malloc(strlen(name) + 1), *q = p;
    if (!p)
        return NULL;
    for (const char *s = name; *s;) {
        if (*s >= '0' && *s <= '9') {
            *q++ = '*';
            while (*s >= '0' && *s <= '9')
                s++;
        } else {
            *q++ = *s++;
        }
    }
    *q = '\0';
    return p;
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
    return a->kind - b->kind;
}

static int cmp_pair(const void *x, const void *y)
{
    const struct pair *a = x, *b = y;
    return a->a != b->a ? (a->a < b->a ? -1 : 1) : (a->b > b->b) - (a->b < b->b);
}

/* Grow *arr (of *cap elements of size sz) to hold n; false if out of memory. */
static bool grow(void **arr, size_t *cap, size_t n, size_t sz)
{
    if (n <= *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < n)
        c *= 2;
    void *p = realloc(*arr, c * sz);
    if (!p)
        return false;
    *arr = p;
    *cap = c;
    return true;
}

/*
 * Wait-for cycles.  Replays, in trace order, the events of the tasks that
 * ever awaited a task: a task_suspend with reason task sets its wait edge
 * (waiter -> arg0), any later run, wake, finish or other suspend clears it.
 * Each task has at most one wait edge, so right after one is set, following
 * the edges from the awaited task either ends or comes back to the waiter
 * (a cycle: every task on it is suspended awaiting the next) -- or runs into
 * an older cycle not through the waiter, which the step bound cuts off.
 * Cycle edges are appended to *cyc as (waiter, awaited) task indexes.
 */
static bool find_cycles(ls_trace *t, struct gtask *tk, int n, struct pair **cyc, size_t *ncyc)
{
    size_t cap = 0;
    sqlite3_stmt *st = ls_prepare(t,
        "SELECT task_id, kind, reason, arg0 FROM events"
        " WHERE task_id IN (SELECT id FROM g_waiter) AND kind IN (4, 5, 6, 7)"
        " ORDER BY ts_ns, rowid");
    if (!st)
        return false;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int i = task_by_id(tk, n, sqlite3_column_int64(st, 0));
        if (i < 0)
            continue;
        if (sqlite3_column_int(st, 1) != 5 || sqlite3_column_int(st, 2) != 4) {
            tk[i].wait = -1;
            tk[i].wait_id = -1;
            continue;
        }
        tk[i].wait_id = sqlite3_column_int64(st, 3);
        tk[i].wait = task_by_id(tk, n, tk[i].wait_id);
        int k = tk[i].wait;
        for (int steps = 0; k >= 0 && k != i && steps < n; steps++)
            k = tk[k].wait;
        if (k != i)
            continue;
        int m = i;
        do {
            if (!grow((void **)cyc, &cap, *ncyc + 1, sizeof(**cyc)))
                break;
            (*cyc)[(*ncyc)++] = (struct pair){ m, tk[m].wait };
            tk[m].in_cycle = true;
            m = tk[m].wait;
        } while (m != i);
    }
    bool ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (*ncyc)
        qsort(*cyc, *ncyc, sizeof(**cyc), cmp_pair);
    return ok;
}

static int graph_tasks(ls_trace *t, Agraph_t *g, const struct opts *o, const char *target)
{
    long limit = o->limit ? o->limit : 300;
    struct gtask *tk = NULL;
    struct gnode *nodes = NULL;
    struct gedge *edges = NULL;
    struct gtask **order = NULL;
    struct pair *cyc = NULL;
    size_t ntk = 0, captk = 0, nnodes = 0, capnodes = 0, nedges = 0, capedges = 0, ncyc = 0;
    char *leak_names[LS_MAX_CODE] = { 0 };
    sbuf b = { 0 };
    int rc = 1, step;
    bool ok;

    /* Tasks, sorted by id (task_by_id relies on it). */
    sqlite3_stmt *st = ls_prepare(t, "SELECT id, parent_id, name, final_state FROM tasks ORDER BY id");
    if (!st)
        goto out;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (!grow((void **)&tk, &captk, ntk + 1, sizeof(*tk)))
            break;
        struct gtask *x = &tk[ntk++];
        memset(x, 0, sizeof(*x));
        x->id = sqlite3_column_int64(st, 0);
        x->parent_id = sqlite3_column_type(st, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 1);
        x->name = strdup(col_text(st, 2) ? col_text(st, 2) : "?");
        x->pattern = name_pattern(x->name ? x->name : "?");
        x->final = sqlite3_column_type(st, 3) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 3);
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

    /* Leaks and await edges in one pass over events; the waiters go to a
     * temp table for the cycle scan.  Rows come sorted (waiter, kind, arg). */
    if (!exec(t, "CREATE TEMP TABLE g_waiter(id INTEGER PRIMARY KEY);"
                 "CREATE TEMP TABLE g_await AS SELECT task_id AS waiter, kind,"
                 "  CASE kind WHEN 9 THEN reason ELSE arg0 END AS arg, count(*) AS n FROM events"
                 "  WHERE task_id IS NOT NULL AND (kind = 9 OR (kind = 5 AND reason = 4))"
                 "  GROUP BY 1, 2, 3;"
                 "INSERT INTO g_waiter SELECT DISTINCT waiter FROM g_await WHERE kind = 5;"))
        goto out;
    st = ls_prepare(t, "SELECT waiter, kind, arg FROM g_await WHERE kind = 9 ORDER BY 1, 3");
    if (!st)
        goto out;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int i = task_by_id(tk, n, sqlite3_column_int64(st, 0));
        if (i >= 0 && !tk[i].leak)
            tk[i].leak = sqlite3_column_int(st, 2) ? sqlite3_column_int(st, 2) : -1;
    }
    ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (!ok || !find_cycles(t, tk, n, &cyc, &ncyc))
        goto out;
    load_names(t, "leak_kinds", leak_names);

    /* State, parent and depth; ids grow with creation, so a parent has a
     * smaller id and a smaller index.  A parent_id pointing forward or to an
     * unknown task makes the task a root. */
    for (int i = 0; i < n; i++) {
        struct gtask *x = &tk[i];
        x->state = x->leak ? TS_LEAKED : x->final == 4 ? TS_FINISHED : x->final == 5 ? TS_FAILED
                 : x->final == 6 ? TS_CANCELLED : TS_PENDING;
        x->parent = x->parent_id >= 0 ? task_by_id(tk, n, x->parent_id) : -1;
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
                    if (!grow((void **)&nodes, &capnodes, nnodes + 1, sizeof(*nodes)))
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
        if (!grow((void **)&edges, &capedges, nedges + 1, sizeof(*edges)))
            goto out;
        edges[nedges++] = (struct gedge){ tk[tk[i].parent].node, tk[i].node, 0, 1, false };
    }
    st = ls_prepare(t, "SELECT waiter, arg, n FROM g_await WHERE kind = 5 ORDER BY 1, 2");
    if (!st)
        goto out;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int w = task_by_id(tk, n, sqlite3_column_int64(st, 0));
        int a = task_by_id(tk, n, sqlite3_column_int64(st, 1));
        if (w < 0 || a < 0)
            continue;                       /* awaited an id not in tasks: nothing to draw */
        if (!grow((void **)&edges, &capedges, nedges + 1, sizeof(*edges)))
            break;
        struct pair key = { w, a };
        bool c = ncyc && bsearch(&key, cyc, ncyc, sizeof(*cyc), cmp_pair);
        edges[nedges++] = (struct gedge){ tk[w].node, tk[a].node, 1, sqlite3_column_int64(st, 2), c };
    }
    ok = ls_step_ok(t, st, step);
    sqlite3_finalize(st);
    if (!ok)
        goto out;
    if (nedges)
        qsort(edges, nedges, sizeof(*edges), cmp_edge);

    /* Title with a colour legend of the states present. */
    int count[TS_N] = { 0 }, ncycle_tasks = 0, deadlocked = 0;
    for (int i = 0; i < n; i++) {
        count[tk[i].state]++;
        ncycle_tasks += tk[i].in_cycle;
        deadlocked += tk[i].in_cycle && tk[i].wait >= 0 && tk[i].state == TS_PENDING;
    }
    sb_add(&b, "<table border=\"0\" cellspacing=\"4\"><tr><td colspan=\"%d\"><font point-size=\"14\">",
           TS_N);
    sb_html(&b, target);
    sb_add(&b, " \xe2\x80\x94 task tree: %d task%s", n, n == 1 ? "" : "s");
    if (ncycle_tasks)
        sb_add(&b, ", <font color=\"#d00000\"><b>%d in wait-for cycles%s</b></font>", ncycle_tasks,
               deadlocked ? " (deadlocked at the end)" : "");
    sb_add(&b, "</font></td></tr><tr><td colspan=\"%d\">solid: spawned; dashed: awaited; "
               "bold red: wait-for cycle</td></tr>", TS_N);
    if (n > 0) {                            /* an empty <tr> is a syntax error */
        sb_add(&b, "<tr>");
        for (int s = 0; s < TS_N; s++)
            if (count[s])
                sb_add(&b, "<td bgcolor=\"%s\" border=\"1\" color=\"%s\"> %s %d </td>",
                       tstyle[s].fill, tstyle[s].border, tstyle[s].name, count[s]);
        sb_add(&b, "</tr>");
    }
    sb_add(&b, "</table>");
    set_html_label(g, g, sb_str(&b));

    if (n == 0) {
        note(g, "note", "no tasks in this trace");
        rc = 0;
        goto out;
    }

    char buf[32];
    for (size_t i = 0; i < nnodes; i++) {
        struct gnode *gn = &nodes[i];
        struct gtask *x = &tk[gn->first];
        if (!gn->shown)
            continue;
        Agnode_t *nd = gn->count > 1 ? node(g, "g%lld", (long long)gn->min_id)
                                     : node(g, "t%lld", (long long)x->id);
        sb_reset(&b);
        if (gn->count > 1) {
            bool same = !strcmp(x->pattern, x->name);   /* no digits: identical names */
            sb_text(&b, same ? x->name : x->pattern);
            sb_add(&b, " \xc3\x97%d\\n#%lld..#%lld", gn->count, (long long)gn->min_id,
                   (long long)gn->max_id);
        } else {
            sb_text(&b, x->name);
            sb_add(&b, "#%lld", (long long)x->id);
        }
        /* a leaked task that did end (failed, error never read) says both */
        if (x->state == TS_LEAKED && x->final >= 4 && x->final <= 6)
            sb_add(&b, "\\n%s, leaked", tstyle[x->final - 4].name);
        else
            sb_add(&b, "\\n%s", tstyle[x->state].name);
        if (x->leak > 0)
            sb_add(&b, " (%s)", name_of(leak_names, x->leak, buf, sizeof(buf)));
        if (gn->count == 1 && x->wait_id >= 0 && x->final < 0)
            sb_add(&b, "\\nawaits #%lld", (long long)x->wait_id);
        set(nd, "label", "%s", sb_str(&b));
        set(nd, "fillcolor", "%s", tstyle[x->state].fill);
        set(nd, "color", "%s", tstyle[x->state].border);
        if (gn->count > 1)
            set(nd, "peripheries", "2");
        if (x->in_cycle) {
            set(nd, "color", "#d00000");
            set(nd, "penwidth", "3");
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
        tn = a->count > 1 ? node(g, "g%lld", (long long)a->min_id) : node(g, "t%lld", (long long)a->min_id);
        hn = h->count > 1 ? node(g, "g%lld", (long long)h->min_id) : node(g, "t%lld", (long long)h->min_id);
        Agedge_t *ed = agedge(g, tn, hn, NULL, 1);
        if (e.kind == 0) {
            set(ed, "color", "#555555");
            continue;
        }
        /* awaits: off the tree's ranking, so a sibling await does not bend it */
        set(ed, "style", "dashed");
        set(ed, "constraint", "false");
        set(ed, "color", "%s", e.cycle ? "#d00000" : "#1565c0");
        /* An xlabel, placed after the layout: a label makes an await
         * between nodes of one rank a labelled flat edge, which crashes
         * Graphviz 2.43 (gvFreeLayout double-frees it). */
        if (e.count > 1)
            set(ed, "xlabel", " \xc3\x97%lld", (long long)e.count);
        if (e.cycle) {
            set(ed, "style", "bold");
            set(ed, "penwidth", "3");
        }
    }
    if (hidden_nodes) {
        char text[160];
        snprintf(text, sizeof(text), "%lld more tasks in %lld nodes not shown (--limit %ld)",
                 (long long)hidden_tasks, (long long)hidden_nodes, limit);
        note(g, "more", text);
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
    free(b.s);
    free_names(leak_names);
    return rc;
}

/* ============================================================ lifecycle */

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
        snprintf(buf, n, "suspended(%s)", name_of(nm->reasons, code - 500, tmp, sizeof(tmp)));
    else if (code == 600)
        snprintf(buf, n, "ready");
    else if (code == 799)
        snprintf(buf, n, "unknown final state");
    else if (code >= 700 && code < 800)
        snprintf(buf, n, "%s", name_of(nm->states, code - 700, tmp, sizeof(tmp)));
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
        set(n, "label", "%s\\n%lld\xc3\x97", label, (long long)entered);
    else
        set(n, "label", "%s", label);
    set(n, "fillcolor", "%s", fill);
    set(n, "style", "filled,rounded");
    if (code == 0) {
        set(n, "style", "dashed");
        set(n, "shape", "plaintext");
        set(n, "fontcolor", "#757575");
    }
    if (terminal(code))
        set(n, "peripheries", "2");
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

static int lifecycle_all(ls_trace *t, Agraph_t *g, const struct opts *o, struct lnames *nm,
                         const char *target)
{
    long limit = o->limit ? o->limit : 60;
    char d1[32], d2[32];
    sbuf b = { 0 };
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

    if (!exec(t, lifecycle_setup))
        goto out;
    sqlite3_stmt *st = ls_prepare(t, lifecycle_sql);
    if (!st)
        goto out;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t s = sqlite3_column_int64(st, 0), tt = sqlite3_column_int64(st, 1);
        if (s < 1 || s >= 1000 || tt < 0 || tt >= 1000)
            continue;                       /* not a code STATE_CODE makes */
        if (!grow((void **)&ed, &caped, ned + 1, sizeof(*ed)))
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

    sb_text(&b, target);
    sb_add(&b, " \xe2\x80\x94 task lifecycle: %lld task%s, %lld state changes\\n"
               "each transition: how often, and the median and p99 time spent in the state "
               "before it", (long long)ntasks, ntasks == 1 ? "" : "s", (long long)total);
    set(g, "label", "%s", sb_str(&b));
    if (ned == 0) {
        note(g, "note", "no task lifecycle events in this trace");
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
            set(e, "label", " %lld\xc3\x97 at the end", (long long)ed[i].n);
            set(e, "style", "dashed");
            set(e, "color", "#9e9e9e");
            set(e, "fontcolor", "#757575");
            continue;
        }
        if (ed[i].n == 1)
            set(e, "label", " 1\xc3\x97\\n %s", ls_fmt_dur(d1, sizeof(d1), ed[i].p50));
        else
            set(e, "label", " %lld\xc3\x97\\n p50 %s\\n p99 %s", (long long)ed[i].n,
                ls_fmt_dur(d1, sizeof(d1), ed[i].p50), ls_fmt_dur(d2, sizeof(d2), ed[i].p99));
        set(e, "penwidth", "%.2f", 1 + 3 * (double)ed[i].n / maxn);
        if (ed[i].t >= 705 && ed[i].t < 800)
            set(e, "color", "%s", tstyle[ed[i].t == 705 ? TS_FAILED : TS_CANCELLED].border);
        else if (ed[i].t == 900)
            set(e, "color", "%s", tstyle[TS_LEAKED].border);
    }
    if (hidden) {
        char text[160];
        snprintf(text, sizeof(text), "%zu rarer transitions (%lld state changes) not shown "
                 "(--limit %ld)", hidden, (long long)hidden_n, limit);
        note(g, "more", text);
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
static int lifecycle_task(ls_trace *t, Agraph_t *g, const struct opts *o, struct lnames *nm,
                          const char *target)
{
    long limit = o->limit ? o->limit : 100;
    char d1[32], d2[32];
    sbuf b = { 0 };
    int rc = 1, step;
    sqlite3_stmt *st = ls_prepare(t, "SELECT name, final_state, created_ns FROM tasks WHERE id = ?");
    if (!st)
        return 1;
    sqlite3_bind_int64(st, 1, o->task);
    if (sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_finalize(st);
        return ls_error("graph: no task with id %lld in trace '%s'", (long long)o->task, t->path);
    }
    char *name = strdup(col_text(st, 0) ? col_text(st, 0) : "?");
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
            grow((void **)&steps, &capsteps, nsteps + 1, sizeof(*steps)))
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
        grow((void **)&steps, &capsteps, nsteps + 1, sizeof(*steps)))
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
        sb_reset(&b);
        for (size_t k = i; k < j; k++) {
            if (k - i == 8 && j - i > 9) {
                sb_add(&b, " \xe2\x80\xa6 %zu more\\l", j - k);
                break;
            }
            sb_add(&b, " %lld. %s", (long long)steps[k].num,
                   ls_fmt_dur(d1, sizeof(d1), steps[k].dur));
            if (steps[k].cancel_by >= 0)
                sb_add(&b, " (cancel requested by #%lld)", (long long)steps[k].cancel_by);
            sb_add(&b, "\\l");
        }
        set(e, "label", "%s", sb_str(&b));
        if (j - i > 1)
            set(e, "penwidth", "%.2f", j - i > 5 ? 3.0 : 1 + 0.4 * (double)(j - i));
        if (steps[i].to == 0) {
            set(e, "style", "dashed");
            set(e, "color", "#9e9e9e");
        }
        i = j;
    }
    free(steps);

    sb_reset(&b);
    sb_text(&b, target);
    sb_add(&b, " \xe2\x80\x94 lifecycle of task ");
    sb_text(&b, name);
    sb_add(&b, "#%lld: %lld transition%s", (long long)o->task, (long long)ntrans,
           ntrans == 1 ? "" : "s");
    if (!first)
        sb_add(&b, ", from +%s, over %s", ls_fmt_dur(d1, sizeof(d1), first_ts - start),
               ls_fmt_dur(d2, sizeof(d2), prev_ts - first_ts));
    sb_add(&b, "\\nedges: step number, time spent in the state before the transition");
    set(g, "label", "%s", sb_str(&b));
    if (prev < 0)
        note(g, "note", "no lifecycle events for this task");
    if (ntrans > limit) {
        char text[128];
        snprintf(text, sizeof(text), "first %ld of %lld transitions shown (--limit)", limit,
                 (long long)ntrans);
        note(g, "more", text);
    }
    rc = 0;
out:
    free(name);
    free(b.s);
    return rc;
}

static int graph_lifecycle(ls_trace *t, Agraph_t *g, const struct opts *o, const char *target)
{
    struct lnames nm = { { 0 }, { 0 } };
    load_names(t, "states", nm.states);
    load_names(t, "suspend_reasons", nm.reasons);
    int rc = o->task >= 0 ? lifecycle_task(t, g, o, &nm, target) : lifecycle_all(t, g, o, &nm, target);
    free_names(nm.states);
    free_names(nm.reasons);
    return rc;
}

/* ===================================================== generic loop mode */

/* Tasks and lifecycle of a generic trace: there is no lifecycle to draw. */
static int graph_generic_note(Agraph_t *g, const char *target)
{
    sbuf b = { 0 };
    sb_text(&b, target);
    sb_add(&b, " \xe2\x80\x94 generic loop mode");
    set(g, "label", "%s", sb_str(&b));
    free(b.s);
    note(g, "note", "no task lifecycle in this trace: the process is not built on libevl\n"
                    "(loopscope graph --kind blocking draws its blocking stacks)");
    return 0;
}

/* ================================================================= main */

int cmd_graph(int argc, char **argv)
{
    struct opts o = { .kind = KIND_NONE, .task = -1, .collapse = 5 };
    static const struct option longopts[] = {
        { "kind", required_argument, NULL, 'k' },
        { "output", required_argument, NULL, 'o' },
        { "task", required_argument, NULL, 't' },
        { "limit", required_argument, NULL, 'l' },
        { "collapse", required_argument, NULL, 'c' },
        { 0 },
    };
    ls_optspec spec = { longopts, "o:k:", on_opt, &o };
    const char *path;
    int rc = ls_parse_common(argc, argv, usage, &path, NULL, &spec, NULL);
    if (rc)
        return rc;
    if (o.kind == KIND_NONE) {
        ls_error("graph: no --kind given: blocking, tasks or lifecycle (see 'loopscope graph --help')");
        return 2;
    }
    if (!o.out) {
        ls_error("graph: no output file given: -o FILE.svg, .png, .pdf or .dot "
                 "(see 'loopscope graph --help')");
        return 2;
    }
    if (o.task >= 0 && o.kind != KIND_LIFECYCLE) {
        ls_error("graph: --task applies to --kind lifecycle only");
        return 2;
    }
    if (check_writable(o.out))
        return 1;
    ls_trace *t = ls_trace_open(path);
    if (!t)
        return 1;
    agseterr(AGERR);                        /* Graphviz warnings would clutter stderr */
    char *target = target_name(t);
    Agraph_t *g = graph_new(o.kind == KIND_TASKS ? "LR" : "TB");
    if (!g || !target) {
        rc = ls_error("graph: out of memory");
    } else {
        rc = o.kind == KIND_BLOCKING ? graph_blocking(t, g, &o, target)
           : ls_is_generic(t) ? graph_generic_note(g, target)
           : o.kind == KIND_TASKS ? graph_tasks(t, g, &o, target)
           : graph_lifecycle(t, g, &o, target);
        if (rc == 0)
            rc = graph_write(g, &o);
    }
    if (g)
        agclose(g);
    free(target);
    ls_trace_close(t);
    return rc;
}
