/*
 * cmd_graph.c -- `loopscope graph TRACE --kind KIND -o FILE`: pictures of a
 * trace drawn with Graphviz, in-process: the graph is built with cgraph
 * (agopen/agnode/agedge/agsafeset), laid out with libgvc's "dot" layout and
 * rendered by libgvc's plugins (gv.c); nothing is shelled out.  The
 * tables read: tracer/SCHEMA.md.  This file holds the options, the
 * dispatch and the helpers the kinds share (graph.h); each kind is its own
 * file:
 *
 *   blocking   (graph_blocking.c) call graph of the blocking episodes' stacks, like pprof's:
 *              functions weighted by blocked time, caller -> callee edges
 *   tasks      (graph_tasks.c) task tree: spawn edges, await edges, wait-for cycles
 *   lifecycle  (graph_lifecycle.c) the state diagram every task went through, with counts and
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
#include "graph.h"
#include "output.h"
#include "trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    "                     time spent in the state before it, from the trace's\n"
    "                     latency histograms: \"p50 \xe2\x89\xa4" "1.2ms\" is at most 1.2ms (the\n"
    "                     bucket's bound, within 1/8 of a power of two, or the\n"
    "                     longest); a value without \xe2\x89\xa4 is exact\n"
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
    "(task_suspend, reason task) or a lock it holds (reason lock) at the same\n"
    "moment of the trace: a deadlock unless something cancels one of them.\n"
    "\n"
    "A generic loop mode trace has tasks and a lifecycle to draw when its\n"
    "asyncio tasks were read by a census every few ms: states at the censuses'\n"
    "times, no spawn edges, and the ready state says its waker is unknown (a\n"
    "census does not see who woke a task); without one, tasks and lifecycle\n"
    "draw a note.\n"
    "\n"

    "examples:\n"
    "  loopscope graph trace.db --kind blocking -o blocking.svg\n"
    "  loopscope graph trace.db --kind tasks -o tasks.png --collapse 10\n"
    "  loopscope graph trace.db --kind lifecycle -o lifecycle.svg\n"
    "  loopscope graph trace.db --kind lifecycle --task 7 -o task7.pdf\n";

/* ------------------------------------------------------------- options */

static int parse_long(const char *arg, long *v)
{
    char *end;
    errno = 0;
    *v = strtol(arg, &end, 10);
    return (*arg && !*end && !errno && *v >= 0) ? 0 : -1;
}

static int on_opt(int c, const char *arg, void *ctx)
{
    struct graph_opts *o = ctx;
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
        o->format = gv_format_of(arg);
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

/* ------------------------------------------------------ shared helpers */

/* What was traced, for titles: the target command's file name. */
static char *target_name(ls_trace *t)
{
    char *cmd = ls_meta(t, LS_META_TARGET_CMDLINE);
    if (!cmd || !*cmd) {
        free(cmd);
        cmd = ls_meta(t, LS_META_TARGET_BINARY);
    }
    if (!cmd)
        return strdup("trace");
    cmd[strcspn(cmd, " ")] = '\0';
    const char *base = strrchr(cmd, '/');
    char *r = strdup(base && base[1] ? base + 1 : cmd);
    free(cmd);
    return r;
}

bool graph_exec(ls_trace *t, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(t->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        ls_error("reading trace '%s': %s", t->path, msg ? msg : "?");
        sqlite3_free(msg);
        return false;
    }
    return true;
}

void graph_load_names(ls_trace *t, const char *table, char *names[LS_MAX_CODE])
{
    char sql[96];
    snprintf(sql, sizeof(sql), "SELECT id, name FROM %s", table);
    sqlite3_stmt *st = ls_prepare(t, sql);
    while (st && sqlite3_step(st) == SQLITE_ROW) {
        int id = sqlite3_column_int(st, 0);
        if (id >= 0 && id < LS_MAX_CODE && ls_col_text(st, 1) && !names[id])
            names[id] = ls_dot_text(ls_col_text(st, 1), false);
    }
    sqlite3_finalize(st);
}

void graph_free_names(char *names[LS_MAX_CODE])
{
    for (int i = 0; i < LS_MAX_CODE; i++)
        free(names[i]);
}

const char *graph_name_of(char *names[LS_MAX_CODE], int64_t id, char *buf, size_t n)
{
    if (id >= 0 && id < LS_MAX_CODE && names[id])
        return names[id];
    snprintf(buf, n, "#%lld", (long long)id);
    return buf;
}

/* ===================================================== generic loop mode */

/* Tasks and lifecycle of a generic trace without a census of its tasks
 * (ls_has_lifecycle): there is no lifecycle to draw. */
static int graph_generic_note(Agraph_t *g, const char *target)
{
    gv_buf b = { 0 };
    gv_text(&b, target);
    gv_add(&b, " \xe2\x80\x94 generic loop mode");
    gv_set(g, "label", "%s", gv_str(&b));
    free(b.s);
    gv_note(g, "note", "no task lifecycle in this trace: the process is not built on libevl\n"
                    "(loopscope graph --kind blocking draws its blocking stacks)");
    return 0;
}

/* ================================================================= main */

int cmd_graph(int argc, char **argv)
{
    struct graph_opts o = { .kind = KIND_NONE, .task = -1, .collapse = 5 };
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
    if (gv_check_writable("graph", o.out))
        return 1;
    ls_trace *t = ls_trace_open(path);
    if (!t)
        return 1;
    agseterr(AGERR);                        /* Graphviz warnings would clutter stderr */
    char *target = target_name(t);
    Agraph_t *g = gv_graph_new(o.kind == KIND_TASKS ? "LR" : "TB");
    if (!g || !target) {
        rc = ls_error("graph: out of memory");
    } else {
        rc = o.kind == KIND_BLOCKING ? graph_blocking(t, g, &o, target)
           : !ls_has_lifecycle(t) ? graph_generic_note(g, target)
           : o.kind == KIND_TASKS ? graph_tasks(t, g, &o, target)
           : graph_lifecycle(t, g, &o, target);
        if (rc == 0)
            rc = gv_write(g, "graph", o.out, o.format);
    }
    if (g)
        agclose(g);
    free(target);
    ls_trace_close(t);
    return rc;
}
