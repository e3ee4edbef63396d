/*
 * graph.h -- private to `loopscope graph` (cmd_graph.c: options and
 * dispatch; graph_blocking.c, graph_tasks.c, graph_lifecycle.c: one kind
 * each).  Depends on gv.h (Graphviz helpers), trace.h and output.h.
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

/* --------------------------------------------------- shared (cmd_graph.c) */

const char *graph_col_text(sqlite3_stmt *st, int i);
/* Run SQL that returns no rows (temp tables); false after an error line. */
bool graph_exec(ls_trace *t, const char *sql);
/* Grow *arr (of *cap elements of size sz) to hold n; false if out of memory. */
bool graph_grow(void **arr, size_t *cap, size_t n, size_t sz);

/* Names of a lookup table (states, suspend_reasons, leak_kinds), by id,
 * made fit for a label (they come from the trace too). */
#define LS_MAX_CODE 64
void graph_load_names(ls_trace *t, const char *table, char *names[LS_MAX_CODE]);
void graph_free_names(char *names[LS_MAX_CODE]);
const char *graph_name_of(char *names[LS_MAX_CODE], int64_t id, char *buf, size_t n);

#endif
