/*
 * stacks.c -- printing a trace's stacks, and finding an asyncio task's
 * await chains (stacks.h).
 */
#include "stacks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ls_stack_print(ls_trace *t, int64_t stack, ls_json *j, const char *key, bool generic,
                    enum ls_stack_order order)
{
    bool in_order = order == LS_STACK_IN_ORDER;
    sqlite3_stmt *st = ls_prepare(t, in_order ?
        "SELECT f.function, f.file, f.line, f.module,"
        "  EXISTS (SELECT 1 FROM app_frames a WHERE a.stack_id = f.stack_id AND a.depth = f.depth) AS app"
        " FROM frames f WHERE f.stack_id = ? ORDER BY f.depth" :
        "SELECT f.function, f.file, f.line, f.module,"
        "  EXISTS (SELECT 1 FROM app_frames a WHERE a.stack_id = f.stack_id AND a.depth = f.depth) AS app"
        " FROM frames f WHERE f.stack_id = ? ORDER BY app DESC, f.depth");
    if (!st)
        return;
    sqlite3_bind_int64(st, 1, stack);
    if (j) {
        ls_json_key(j, key);
        ls_json_begin_array(j);
    }
    /* An await chain's functions in one column: as wide as its longest
     * name (at most 60), 28 at least, as blocking's stacks */
    int width = 28;
    if (!j && in_order) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *fn = ls_col_text(st, 0);
            size_t w = fn ? strlen(ls_term(fn)) : 1;
            if (w > (size_t)width)
                width = w > 60 ? 60 : (int)w;
        }
        sqlite3_reset(st);
    }
    bool in_system = false;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *fn = ls_col_text(st, 0), *file = ls_col_text(st, 1), *mod = ls_col_text(st, 3);
        int line = sqlite3_column_int(st, 2), app = sqlite3_column_int(st, 4);
        if (j) {
            ls_json_begin_object(j);
            ls_json_key(j, "function"); ls_json_str(j, fn);
            ls_json_key(j, "file"); ls_json_str(j, file);
            ls_json_key(j, "line"); ls_json_int(j, line);
            ls_json_key(j, "module"); ls_json_str(j, mod);
            ls_json_key(j, "application"); ls_json_bool(j, app);
            ls_json_end_object(j);
            continue;
        }
        if (!in_order && !app && !in_system) {
            printf("      -- system and %s frames --\n", generic ? "runtime" : "libevl");
            in_system = true;
        }
        const char *indent = in_order && app ? "    > " : "      ";
        if (file)
            printf("%s%-*s %s:%d\n", indent, width, fn ? ls_term(fn) : "?",
                   ls_term(ls_short_path(file)), line);
        else
            printf("%s%-*s %s\n", indent, width, fn ? ls_term(fn) : "?",
                   mod ? ls_term(ls_short_path(mod)) : "");
    }
    sqlite3_finalize(st);
    if (j)
        ls_json_end_array(j);
}

const char *ls_await_none(ls_trace *t)
{
    switch (ls_lifecycle_source(t)) {
    case LS_LIFECYCLE_PROBES:
        return "this is a libevl trace (a census of an asyncio program's tasks records them)";
    case LS_LIFECYCLE_NONE:
        return "this trace has no census of asyncio tasks (meta task_source), which records them";
    case LS_LIFECYCLE_CENSUS:
        break;
    }
    if (!ls_has_table(t, "await_stacks"))
        return "this trace was recorded before loopscope kept them (no await_stacks table)";
    return NULL;
}

sqlite3_stmt *ls_await_prepare(ls_trace *t)
{
    return ls_prepare(t, "SELECT stack_id FROM await_stacks WHERE task_id = ?1 AND ts_ns = ?2");
}

int64_t ls_await_stack(sqlite3_stmt *st, int64_t task, int64_t ts)
{
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, task);
    sqlite3_bind_int64(st, 2, ts);
    int64_t id = -1;
    if (sqlite3_step(st) == SQLITE_ROW && !ls_col_null(st, 0))
        id = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return id;
}
