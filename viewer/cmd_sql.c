/*
 * cmd_sql.c -- `loopscope sql TRACE "SELECT ..."`: run queries on a trace
 * (read-only) and print each result as a table, or as JSON.
 */
#include "commands.h"
#include "output.h"
#include "trace.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: loopscope sql TRACE QUERY [--json]\n"
    "\n"
    "Run SQL on the trace (opened read-only) and print the rows.  Several\n"
    "statements separated by ';' print one table each.  The schema is in\n"
    "tracer/SCHEMA.md; the view events_named shows events with names.\n"
    "\n"
    "example: loopscope sql trace.db \"SELECT name, final_state FROM tasks LIMIT 5\"\n";

int cmd_sql(int argc, char **argv)
{
    const char *path, *query;
    bool json = false;
    int rc = ls_parse_common(argc, argv, usage, &path, &json, NULL, &query);
    if (rc)
        return rc;
    if (!query) {
        fprintf(stderr, "error: sql: no query given\nsee 'loopscope sql --help'\n");
        return 2;
    }
    ls_trace *t = ls_trace_open(path);
    if (!t)
        return 1;
    const char *sql = query;
    bool ok = true, first = true;
    while (ok && sql && *sql) {
        sqlite3_stmt *st = NULL;
        const char *tail = NULL;
        if (sqlite3_prepare_v2(t->db, sql, -1, &st, &tail) != SQLITE_OK) {
            ls_error("sql: %s", sqlite3_errmsg(t->db));
            ok = false;
            break;
        }
        sql = tail;
        if (!st)                      /* whitespace or a comment */
            continue;
        int ncols = sqlite3_column_count(st);
        ls_col cols[64];
        if (ncols > 64)
            ncols = 64;
        for (int c = 0; c < ncols; c++)
            cols[c] = (ls_col){ sqlite3_column_name(st, c), NULL, false };
        ls_table *tab = ncols ? ls_table_new(cols, ncols) : NULL;
        int step;
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            for (int c = 0; c < ncols; c++) {
                switch (sqlite3_column_type(st, c)) {
                case SQLITE_INTEGER:
                    ls_table_int(tab, sqlite3_column_int64(st, c));
                    break;
                case SQLITE_NULL:
                    ls_table_null(tab);
                    break;
                default:
                    ls_table_str(tab, (const char *)sqlite3_column_text(st, c));
                }
            }
        }
        if (step != SQLITE_DONE) {
            ls_error("sql: %s", sqlite3_errmsg(t->db));
            ok = false;
        }
        if (tab) {
            /* numbers right-aligned */
            if (!first && !json)
                putchar('\n');
            first = false;
            if (ok)
                ls_table_print(tab, stdout, json);
            else
                ls_table_free(tab);
        }
        sqlite3_finalize(st);
    }
    ls_trace_close(t);
    return ok ? 0 : 1;
}
