/*
 * trace.c -- open and validate a trace database (trace.h).
 */
#define _GNU_SOURCE
#include "trace.h"
#include "evchunk.h"
#include "meta.h"
#include "output.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int64_t pragma_int(sqlite3 *db, const char *pragma, int *rc)
{
    sqlite3_stmt *st = NULL;
    int64_t v = 0;
    *rc = sqlite3_prepare_v2(db, pragma, -1, &st, NULL);
    if (*rc == SQLITE_OK) {
        *rc = sqlite3_step(st);
        if (*rc == SQLITE_ROW) {
            v = sqlite3_column_int64(st, 0);
            *rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    return v;
}

static void drop_copy(ls_trace *t)
{
    if (!t->tmp_path)
        return;
    static const char *const side[] = { "", "-journal", "-wal", "-shm" };
    for (size_t i = 0; i < sizeof(side) / sizeof(side[0]); i++) {
        char p[4096];
        snprintf(p, sizeof(p), "%s%s", t->tmp_path, side[i]);
        unlink(p);
    }
    free(t->tmp_path);
    t->tmp_path = NULL;
}

/* One line on stderr (stdout stays the command's own output) when the
 * recording did not end cleanly, or has not ended yet. */
static void say_state(ls_trace *t)
{
    if (t->in_progress) {
        fprintf(stderr, "note: '%s' is still being recorded; showing what its recorder has "
                        "committed so far\n", ls_term(t->path));
        return;
    }
    if (ls_meta_int(t, LS_META_END_NS, INT64_MIN) != INT64_MIN)
        return;
    t->cut_short = true;
    int64_t start = ls_meta_ts(t, LS_META_START_NS, 0);
    int64_t last = ls_meta_ts(t, LS_META_DERIVED_END_NS, start);
    t->cut_at_ns = last > start ? last - start : 0;
    fprintf(stderr, "note: recording was cut short at +%.1f s (the recorder was killed or "
                    "could not write); counts after that are unknown\n", t->cut_at_ns / 1e9);
}

/* A read-only connection with the events table.  A lock someone else
 * holds for a moment (another viewer completing the file, a writer's
 * commit, a hot journal rolled back) is waited for, LS_TRACE_BUSY_MS at
 * most, rather than failing the command: viewers run side by side on one
 * file. */
#define LS_TRACE_BUSY_MS 5000
static int trace_connect(ls_trace *t, const char *path)
{
    int rc = sqlite3_open_v2(path, &t->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_busy_timeout(t->db, LS_TRACE_BUSY_MS);
    if (rc == SQLITE_OK)
        rc = ls_events_register(t->db);
    return rc;
}

int64_t ls_trace_pid;

/* --pid: the trace as that process's alone (trace.h, ls_trace_pid): a
 * temporary view of each table with a loop or a task in its rows, of the
 * same name (the temp schema is searched first), keeping the process's. */
static bool pid_views(ls_trace *t)
{
    static const struct { const char *table, *where; } views[] = {
        { "loops", "pid = %lld" },
        { "processes", "pid = %lld" },
        { "tasks", "loop_id IN (SELECT id FROM temp.loops)" },
        { "blocking", "loop_id IN (SELECT id FROM temp.loops)" },
        { "loop_windows", "loop_id IN (SELECT id FROM temp.loops)" },
        { "iteration_hist", "loop_id IN (SELECT id FROM temp.loops)" },
        { "syscall_stats", "loop_id IN (SELECT id FROM temp.loops)" },
        { "transitions", "loop_id IN (SELECT id FROM temp.loops)" },
        { "transition_hist", "loop_id IN (SELECT id FROM temp.loops)" },
        { "events", "loop_id IN (SELECT id FROM temp.loops)" },
        { "task_stats", "task_id IN (SELECT id FROM temp.tasks)" },
        { "task_marks", "task_id IN (SELECT id FROM temp.tasks)" },
        { "task_slices", "task_id IN (SELECT id FROM temp.tasks)" },
        { "late_timers", "task_id IN (SELECT id FROM temp.tasks)" },
        { "await_stacks", "task_id IN (SELECT id FROM temp.tasks)" },
        { "blocking_victims", "blocking_id IN (SELECT id FROM temp.blocking)" },
    };
    char sql[512], where[128];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM loops WHERE pid = %lld",
             (long long)ls_trace_pid);
    if (ls_query_int(t, sql) == 0) {
        char *all = NULL;
        sqlite3_stmt *st = ls_prepare(t, "SELECT group_concat(pid, ', ') FROM "
                                         "(SELECT DISTINCT pid FROM loops ORDER BY pid)");
        if (st && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
            all = strdup((const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        ls_error("no process %lld in trace '%s' (its loops are in: %s)", (long long)ls_trace_pid,
                 t->path, all ? all : "none");
        free(all);
        return false;
    }
    for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++) {
        if (!ls_has_table(t, views[i].table))
            continue;
        snprintf(where, sizeof(where), views[i].where, (long long)ls_trace_pid);
        /* events: its rowid is its place in store order, which readers use */
        snprintf(sql, sizeof(sql), "CREATE TEMP VIEW %s AS SELECT %s* FROM main.%s WHERE %s",
                 views[i].table, strcmp(views[i].table, "events") ? "" : "rowid AS rowid, ",
                 views[i].table, where);
        char *err = NULL;
        if (sqlite3_exec(t->db, sql, NULL, NULL, &err) != SQLITE_OK) {
            ls_error("cannot show process %lld of trace '%s' alone: %s", (long long)ls_trace_pid,
                     t->path, err ? err : "?");
            sqlite3_free(err);
            return false;
        }
    }
    return true;
}

bool ls_trace_group(ls_trace *t)
{
    return ls_has_table(t, "processes") &&
           ls_query_int(t, "SELECT count(DISTINCT pid) > 1 FROM processes") > 0;
}

ls_trace *ls_trace_open(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        ls_error("cannot open trace '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        ls_error("cannot open trace '%s': not a regular file", path);
        return NULL;
    }
    if (sb.st_size == 0) {
        ls_error("cannot open trace '%s': empty file, not a trace", path);
        return NULL;
    }
    ls_trace *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->path = path;
    int rc = trace_connect(t, path);
    if (rc != SQLITE_OK)
        goto sqlerr;
    int64_t app = pragma_int(t->db, "PRAGMA application_id", &rc);
    if (rc != SQLITE_OK)
        goto sqlerr;
    int64_t ver = pragma_int(t->db, "PRAGMA user_version", &rc);
    if (rc != SQLITE_OK)
        goto sqlerr;
    if (app != LS_TRACE_APP_ID) {
        ls_error("cannot open trace '%s': not a loopscope trace (application_id %lld, "
                 "user_version %lld)", path, (long long)app, (long long)ver);
        goto fail;
    }
    /* Schema 3 stores events in chunks (model/evchunk.h), schema 4 in
     * larger ones; an older trace would need its events table copied into
     * them: record it again. */
    if (ver < LS_SCHEMA_OLDEST_READ || ver > LS_SCHEMA_VERSION) {
        ls_error("cannot open trace '%s': schema version %lld is %s than this loopscope's (%d)%s",
                 path, (long long)ver, ver > LS_SCHEMA_VERSION ? "newer" : "older",
                 LS_SCHEMA_VERSION, ver > LS_SCHEMA_VERSION ? "; upgrade loopscope"
                 : "; this loopscope reads only the traces it records: record it again");
        goto fail;
    }
    /* Touch every table a command may read: a truncated file fails here,
     * with one clear line, rather than halfway through an output. */
    static const char *const probes =
        "SELECT (SELECT count(*) FROM meta), (SELECT count(*) FROM loops),"
        " (SELECT max(id) FROM tasks), (SELECT count(*) FROM (SELECT 1 FROM events LIMIT 1)),"
        " (SELECT count(*) FROM blocking), (SELECT count(*) FROM frames),"
        " (SELECT count(*) FROM task_stats)";
    sqlite3_stmt *st = NULL;
    rc = sqlite3_prepare_v2(t->db, probes, -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st) == SQLITE_ROW ? SQLITE_OK : sqlite3_errcode(t->db);
    sqlite3_finalize(st);
    if (rc != SQLITE_OK)
        goto sqlerr;
    const char *use = ls_trace_complete(t, &t->tmp_path);
    if (!use)
        goto fail;
    if (t->completed) {                        /* reopen what was completed */
        sqlite3_close(t->db);
        t->db = NULL;
        if ((rc = trace_connect(t, use)) != SQLITE_OK)
            goto sqlerr;
    }
    if (ls_trace_pid && !pid_views(t))
        goto fail;
    say_state(t);
    return t;
sqlerr:
    if (rc == SQLITE_NOTADB)
        ls_error("cannot open trace '%s': not a SQLite database", path);
    else if (rc == SQLITE_CORRUPT)
        ls_error("cannot open trace '%s': the file is damaged or truncated (%s)", path,
                 sqlite3_errmsg(t->db));
    else
        ls_error("cannot open trace '%s': %s", path, t->db ? sqlite3_errmsg(t->db) : sqlite3_errstr(rc));
fail:
    sqlite3_close(t->db);
    drop_copy(t);
    free(t);
    return NULL;
}

void ls_trace_close(ls_trace *t)
{
    if (!t)
        return;
    sqlite3_close(t->db);
    drop_copy(t);
    free(t);
}

sqlite3_stmt *ls_prepare(ls_trace *t, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(t->db, sql, -1, &st, NULL) != SQLITE_OK) {
        ls_error("reading trace '%s': %s", t->path, sqlite3_errmsg(t->db));
        return NULL;
    }
    return st;
}

bool ls_step_ok(ls_trace *t, sqlite3_stmt *st, int rc)
{
    if (rc == SQLITE_DONE || rc == SQLITE_ROW)
        return true;
    ls_error("reading trace '%s': %s", t->path, sqlite3_errmsg(t->db));
    return false;
}

char *ls_meta(ls_trace *t, const char *key)
{
    sqlite3_stmt *st = NULL;
    char *v = NULL;
    if (sqlite3_prepare_v2(t->db, "SELECT value FROM meta WHERE key = ?", -1, &st, NULL) != SQLITE_OK)
        return NULL;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        v = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return v;
}

int64_t ls_meta_int(ls_trace *t, const char *key, int64_t dflt)
{
    return ls_db_meta_int(t->db, key, dflt);
}

void ls_read_drops(ls_trace *t, ls_drops *d)
{
    d->messages = ls_meta_int(t, LS_META_DROPPED_MESSAGES, -1);
    d->bytes = ls_meta_int(t, LS_META_DROPPED_BYTES, -1);
    d->rejected = ls_meta_int(t, LS_META_REJECTED_RECORDS, -1);
    d->read_errors = ls_meta_int(t, LS_META_READ_ERRORS, -1);
    d->claimed = ls_meta_int(t, LS_META_DROPPED_EVENTS_CLAIMED, -1);
    if (d->claimed < 0)
        d->claimed = ls_meta_int(t, LS_META_DROPPED_EVENTS, -1);
    d->lost_episodes = ls_meta_int(t, LS_META_LOST_EPISODES, -1);
    d->loop_lost = ls_meta_int(t, LS_META_LOOP_LOST_RECORDS_CLAIMED, -1);
    int64_t *all[] = { &d->messages, &d->bytes, &d->rejected, &d->read_errors, &d->claimed,
                       &d->lost_episodes, &d->loop_lost };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (*all[i] < -1)
            *all[i] = -1;                 /* a negative count is no count */
}

bool ls_drops_lossy(const ls_drops *d)
{
    return d->messages > 0 || d->rejected > 0 || d->read_errors > 0 || d->claimed > 0 ||
           d->lost_episodes > 0 || d->loop_lost > 0;
}

int64_t ls_col_ts(sqlite3_stmt *st, int i)
{
    return ls_ts(sqlite3_column_int64(st, i));
}

const char *ls_col_text(sqlite3_stmt *st, int i)
{
    return (const char *)sqlite3_column_text(st, i);
}

bool ls_col_null(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL;
}

int64_t ls_meta_ts(ls_trace *t, const char *key, int64_t dflt)
{
    return ls_ts(ls_meta_int(t, key, dflt));
}

int64_t ls_parse_duration(const char *s)
{
    char *end;
    errno = 0;
    if (!s || !(*s >= '0' && *s <= '9') )
        return -1;                    /* no sign, no leading blanks */
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || !isfinite(v))
        return -1;
    double mul;
    if (!*end || !strcmp(end, "s"))
        mul = 1e9;
    else if (!strcmp(end, "ms"))
        mul = 1e6;
    else if (!strcmp(end, "us"))
        mul = 1e3;
    else if (!strcmp(end, "ns"))
        mul = 1;
    else
        return -1;
    if (v * mul >= 9.2e18)            /* beyond int64_t nanoseconds */
        return -1;
    return (int64_t)(v * mul + 0.5);
}

bool ls_is_generic(ls_trace *t)
{
    char *m = ls_meta(t, LS_META_MODE);
    bool g = m && !strcmp(m, "generic");
    free(m);
    return g;
}

ls_lifecycle ls_lifecycle_source(ls_trace *t)
{
    if (!ls_is_generic(t))
        return LS_LIFECYCLE_PROBES;
    char *src = ls_meta(t, LS_META_TASK_SOURCE);
    bool census = src && !strncmp(src, "census", 6);
    free(src);
    return census ? LS_LIFECYCLE_CENSUS : LS_LIFECYCLE_NONE;
}

bool ls_has_lifecycle(ls_trace *t)
{
    return ls_lifecycle_source(t) != LS_LIFECYCLE_NONE;
}

char *ls_lifecycle_text(ls_trace *t)
{
    if (ls_lifecycle_source(t) != LS_LIFECYCLE_CENSUS)
        return NULL;
    char *src = ls_meta(t, LS_META_TASK_SOURCE), *s = NULL;
    /* "census every 10 ms" -> "... from a census every 10 ms" */
    if (src && asprintf(&s, "asyncio task lifecycle from a %s", src) < 0)
        s = NULL;
    free(src);
    return s;
}

bool ls_has_table(ls_trace *t, const char *name)
{
    sqlite3_stmt *st = NULL;
    bool yes = false;
    if (sqlite3_prepare_v2(t->db, "SELECT 1 FROM sqlite_master WHERE name = ? AND type IN"
                                  " ('table', 'view')", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        yes = sqlite3_step(st) == SQLITE_ROW;
    }
    sqlite3_finalize(st);
    return yes;
}

/* Generic mode: the application is the Python code (module 'python') and
 * the JIT's JavaScript ('[jit]') but not the interpreter's own library code
 * (anything under a lib/pythonX.Y directory: the standard library and
 * installed packages, whose caller is the call site; frozen modules;
 * Node's internals, nor libpython and extension modules); native
 * frames count as application code only in a 'native' runtime, or outside
 * the interpreter's executable (meta target_binary: its C functions such as
 * time_sleep are the runtime, not the program). */
static const char generic_app_sql[] =
    "CREATE TEMP VIEW IF NOT EXISTS app_frames AS"
    " SELECT stack_id, depth, function, file, line, module FROM frames"
    " WHERE CASE WHEN module = 'python' THEN coalesce(file, '') NOT LIKE '%/lib/python%'"
    "     AND coalesce(file, '') NOT LIKE '<frozen %'"
    "   WHEN module = '[jit]' THEN coalesce(function, '') NOT LIKE '%node:%'"
    "   ELSE coalesce(module, '') NOT LIKE '/usr/lib/%'"
    "     AND coalesce(module, '') NOT LIKE '/lib/%'"
    "     AND coalesce(module, '') NOT LIKE '[%'"
    "     AND coalesce(module, '') NOT LIKE '%/libpython%'"
    "     AND coalesce(module, '') NOT LIKE '%/lib/python%'"
    "     AND (coalesce((SELECT value FROM meta WHERE key = '" LS_META_RUNTIME "'), 'native')"
    "          LIKE 'native%'"
    "       OR coalesce(module, '') IS NOT"
    "          coalesce((SELECT value FROM meta WHERE key = '" LS_META_TARGET_BINARY "'), ''))"
    " END;";

bool ls_create_app_frames(ls_trace *t)
{
    static const char libevl_app_sql[] =
        "CREATE TEMP VIEW IF NOT EXISTS app_frames AS"
        " SELECT stack_id, depth, function, file, line, module FROM frames"
        " WHERE coalesce(module, '') NOT LIKE '/usr/lib/%'"
        "   AND coalesce(module, '') NOT LIKE '/lib/%'"
        "   AND coalesce(module, '') NOT LIKE '[%'"
        "   AND coalesce(function, '') NOT LIKE 'evl\\_\\_%' ESCAPE '\\';";
    static const char sites_sql[] =
        "CREATE TEMP VIEW IF NOT EXISTS sites AS"
        " SELECT stack_id, function, file, line FROM"
        /* the bare columns come from the row of min(depth) (SQLite's
         * rule for min/max aggregates): one pass, not one per frame */
        " (SELECT stack_id, function, file, line, min(depth) FROM app_frames GROUP BY stack_id);";
    char *msg = NULL;
    const char *app = ls_is_generic(t) ? generic_app_sql : libevl_app_sql;
    if (sqlite3_exec(t->db, app, NULL, NULL, &msg) != SQLITE_OK ||
        sqlite3_exec(t->db, sites_sql, NULL, NULL, &msg) != SQLITE_OK) {
        ls_error("reading trace '%s': %s", t->path, msg ? msg : "?");
        sqlite3_free(msg);
        return false;
    }
    return true;
}

int64_t ls_query_int(ls_trace *t, const char *sql)
{
    sqlite3_stmt *st = ls_prepare(t, sql);
    int64_t v = 0;
    if (st && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

char *ls_name_pattern(const char *name)
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

const char *ls_short_path(const char *path)
{
    if (!path)
        return NULL;
    const char *last = strrchr(path, '/');
    if (!last)
        return path;
    const char *p = last;
    while (p > path && p[-1] != '/')
        p--;
    return p > path ? p : path;
}
