/*
 * graph.h -- private to `loopscope graph` (cmd_graph.c: options and
 * dispatch; graph_blocking.c, graph_tasks.c with graph_waits.c,
 * graph_lifecycle.c: one kind each).  Depends on gv.h (Graphviz helpers), trace.h and output.h.
 */
#ifndef LOOPSCOPE_GRAPH_H
#define LOOPSCOPE_GRAPH_H

#include "gv.h"
#include "trace.h"

#include <stdbool.h>
#include <stdint.h>

enum graph_kind { KIND_NONE, KIND_BLOCKING, KIND_TASKS, KIND_LIFECYCLE };

struct graph_opts {
    enum graph_kind kind;
    const char *out;          /* -o FILE */
    const char *format;       /* Graphviz output format, from out's extension */
    int64_t task;             /* --task; -1 when not given */
    long limit;               /* --limit; 0 = the kind's default */
    long collapse;            /* --collapse; siblings merged at this count */
};

/* Each draws its kind into g; target names the traced program for the
 * title.  0, or 1 after an error line. */
int graph_blocking(ls_trace *t, Agraph_t *g, const struct graph_opts *o, const char *target);
int graph_tasks(ls_trace *t, Agraph_t *g, const struct graph_opts *o, const char *target);
int graph_lifecycle(ls_trace *t, Agraph_t *g, const struct graph_opts *o, const char *target);

/* Final-state classes of a task, their colours (graph_tasks.c; the
 * lifecycle diagram uses them too). */
enum tstate { TS_FINISHED, TS_FAILED, TS_CANCELLED, TS_PENDING, TS_LEAKED, TS_N };
struct tstyle {
    const char *name;
    const char *fill;
    const char *border;
};
extern const struct tstyle tstyle[TS_N];

/* ------------------------------------------- tasks (graph_tasks.c, graph_waits.c) */

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
    int wait;                 /* cycle scan: index of the task it waits for now, -1 */
    int64_t wait_id;          /* cycle scan: id of that task (may be unknown); after
                                 it, for pending tasks: what it waits for at the end */
    int wait_reason;          /* EVL_SUSPEND_TASK or _LOCK: how it waits for wait_id */
    int64_t wait_ts;          /* cycle scan: when the suspend that set wait was */
    bool cand;                /* on a cycle of the wait graph (all edges ever) */
    bool in_cycle;            /* was part of a wait-for cycle at some moment */
    /* The first wait-for cycle it was part of: its number (1, 2, ... in
     * the order they formed; 0: none), when it formed, and how this task
     * waited in it (reason, object: the awaited task or the lock). */
    int cycle_no;
    int cycle_next;           /* the task it waited for in that cycle */
    int64_t cycle_end;        /* when that wait ended (0: not in the trace) */
    int64_t cycle_ts, cycle_obj;
    int64_t cycle_since;      /* the time of its suspend that made its wait there
                                 (an asyncio trace's await_stacks key) */
    int cycle_reason;
    int node;                 /* index in the node array */
};

struct gnode {
    int first;                /* task index of its first (lowest id) member */
    int count;                /* members: 1, or >= --collapse */
    int64_t min_id, max_id;
    bool shown;               /* within --limit */
};

/* What an edge of the task tree says (its order: how edges sort). */
enum gedge_kind {
    GEDGE_SPAWN,              /* tail created head */
    GEDGE_AWAIT,              /* tail awaits head */
    GEDGE_LOCK,               /* tail waits for a lock head holds */
    GEDGE_WOKEN,              /* tail was woken by head (event, queue ...: reason) */
};

struct gedge {
    int tail, head;           /* node indexes */
    int kind;                 /* enum gedge_kind */
    int reason;               /* GEDGE_WOKEN: the suspend reason */
    int64_t count;            /* children, or awaits */
    bool cycle;               /* an await edge that was part of a wait-for cycle */
};

struct pair {
    int a, b;
};

/* Wait-for edges ever seen: waiter -> the task that can end the wait
 * (task indexes): the awaited task, or the holder of the lock it waits
 * for.  How often, and by which reason (one edge per pair and reason). */
struct await {
    int w, a;
    int reason;               /* EVL_SUSPEND_TASK or EVL_SUSPEND_LOCK */
    int64_t n;
};

/* The index of task id in tk (sorted by id), or -1. */
int graph_task_by_id(const struct gtask *tk, int n, int64_t id);
int graph_cmp_pair(const void *x, const void *y);
/* The wait-for edges (sorted by waiter, awaited, reason), the wait-for
 * cycles' edges (sorted; their tasks' in_cycle and cycle_* set) and, for
 * pending tasks, what they wait for at the end (wait_id, wait_reason).
 * Also used by `lint` (lint_deadlock.c).  false after an error line. */
bool graph_task_waits(ls_trace *t, struct gtask *tk, int n, struct await **aw, size_t *naw,
                      struct pair **cyc, size_t *ncyc);
/* Who let whom go on: for each suspend on an event, a condition, a
 * semaphore or a queue, the task that woke it (the wake's waker), as
 * edges waiter -> waker with the suspend's reason and a count, sorted.
 * History, not part of the cycles.  false after an error line. */
bool graph_task_releases(ls_trace *t, const struct gtask *tk, int n, struct await **rel,
                         size_t *nrel);

/* --------------------------------------------------- shared (cmd_graph.c) */

/* Run SQL that returns no rows (temp tables); false after an error line. */
bool graph_exec(ls_trace *t, const char *sql);

/* Names of a lookup table (states, suspend_reasons, leak_kinds), by id,
 * made fit for a label (they come from the trace too). */
#define LS_MAX_CODE 64
void graph_load_names(ls_trace *t, const char *table, char *names[LS_MAX_CODE]);
void graph_free_names(char *names[LS_MAX_CODE]);
const char *graph_name_of(char *names[LS_MAX_CODE], int64_t id, char *buf, size_t n);

#endif
