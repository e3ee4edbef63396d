/*
 * derive.c -- the derived tables of a trace (derive.h), written from the
 * one replay of task states (replay.c) and, for what needs the blocking
 * table as well, by SQL over the indexed events.
 */
#include "derive.h"
#include "evchunk.h"
#include "codes.h"
#include "ls_codes.h"
#include "ls_schema.h"
#include "meta.h"

#include <stdio.h>
#include <stdlib.h>

#define LS_STR2(x) #x
#define LS_STR(x) LS_STR2(x)

typedef struct ls_derive {
    sqlite3 *db;
    sqlite3_stmt *stat, *stat_new, *edge, *bucket, *iter, *mark, *slice, *late;
    int64_t late_floor;       /* late_timers keeps sleeps at least this late */
    int rc;                   /* first SQLite error, or SQLITE_OK */
} ls_derive;

static void derive_free(ls_derive *d);

#define LS_GENERIC \
    "EXISTS (SELECT 1 FROM meta WHERE key = '" LS_META_MODE "' AND value = 'generic')"

static int sql_fail(sqlite3 *db, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s", what, sqlite3_errmsg(db));
    return -1;
}

/* 1 ms, or the blocking threshold if lower (meta block_threshold_ns): lint's
 * default late-timer threshold is that threshold, so late_timers holds
 * what it asks for; written to meta late_timer_floor_ns. */
static int64_t late_floor(sqlite3 *db)
{
    int64_t floor = LS_LATE_TIMER_FLOOR_NS;
    int64_t thr = ls_db_meta_int(db, LS_META_BLOCK_THRESHOLD_NS, 0);
    if (thr > 0 && thr < floor)
        floor = thr;
    char sql[128];
    snprintf(sql, sizeof(sql), "INSERT OR REPLACE INTO meta(key, value)"
             " VALUES('" LS_META_LATE_TIMER_FLOOR_NS "', '%lld')", (long long)floor);
    sqlite3_exec(db, sql, NULL, NULL, NULL);
    return floor;
}

static ls_derive *derive_new(sqlite3 *db, char *err, size_t errlen)
{
    ls_derive *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    d->db = db;
    if (sqlite3_exec(db, ls_derived_sql, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO task_stats(task_id, busy_ns, scheduled_ns,"
                               " idle_ns, resumes, wakes, longest_step_ns, blocking, blocked_ns)"
                               " VALUES(?,?,?,?,?,?,?,0,0)", -1, &d->stat, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT OR IGNORE INTO task_stats(task_id, busy_ns, scheduled_ns,"
                               " idle_ns, resumes, wakes, longest_step_ns, blocking, blocked_ns)"
                               " VALUES(?,?,?,?,?,?,?,0,0)", -1, &d->stat_new, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO transitions(loop_id, from_node, to_node,"
                               " count, total_ns, max_ns) VALUES(?,?,?,?,?,?)", -1, &d->edge,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO transition_hist(loop_id, from_node, to_node,"
                               " lo_ns, hi_ns, count) VALUES(?,?,?,?,?,?)", -1, &d->bucket,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO iteration_hist(loop_id, lo_ns, hi_ns, count,"
                               " busy_ns) VALUES(?,?,?,?,?)", -1, &d->iter, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT INTO task_marks(rid, ts_ns, task_id, kind, reason, arg0)"
                               " VALUES(?,?,?,?,?,?)", -1, &d->mark, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO task_slices(task_id, longest_ns,"
                               " longest_at_ns) VALUES(?,?,?)", -1, &d->slice, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT INTO late_timers(task_id, deadline_ns, fired_ns, late_ns)"
                               " VALUES(?,?,?,?)", -1, &d->late, NULL) != SQLITE_OK) {
        sql_fail(db, "cannot prepare the derived tables", err, errlen);
        derive_free(d);
        return NULL;
    }
    d->late_floor = late_floor(db);
    return d;
}

static void derive_free(ls_derive *d)
{
    if (!d)
        return;
    sqlite3_finalize(d->stat);
    sqlite3_finalize(d->stat_new);
    sqlite3_finalize(d->edge);
    sqlite3_finalize(d->bucket);
    sqlite3_finalize(d->iter);
    sqlite3_finalize(d->mark);
    sqlite3_finalize(d->slice);
    sqlite3_finalize(d->late);
    free(d);
}

static void run_stmt(ls_derive *d, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE && d->rc == SQLITE_OK)
        d->rc = rc;
    sqlite3_reset(st);
}

static void on_task_done(void *ctx, const ls_task *t, bool finished)
{
    ls_derive *d = ctx;
    /* Named only by a mark: a row of zeros, unless the id has one already
     * (a task that finished before, named again by a forged record). */
    sqlite3_stmt *st = finished || t->seen ? d->stat : d->stat_new;
    sqlite3_bind_int64(st, 1, (int64_t)t->id);
    sqlite3_bind_int64(st, 2, t->busy);
    sqlite3_bind_int64(st, 3, t->sched);
    sqlite3_bind_int64(st, 4, t->idle);
    sqlite3_bind_int64(st, 5, (int64_t)t->resumes);
    sqlite3_bind_int64(st, 6, (int64_t)t->wakes);
    sqlite3_bind_int64(st, 7, t->longest);
    run_stmt(d, st);
    if (t->has_slice) {
        sqlite3_bind_int64(d->slice, 1, (int64_t)t->id);
        sqlite3_bind_int64(d->slice, 2, t->slice_longest);
        sqlite3_bind_int64(d->slice, 3, t->slice_at);
        run_stmt(d, d->slice);
    }
}

static void put_mark(ls_derive *d, int64_t rid, int64_t ts, uint64_t task, int kind,
                     int64_t reason, int64_t arg0)
{
    sqlite3_stmt *st = d->mark;
    if (rid > 0)
        sqlite3_bind_int64(st, 1, rid);
    else
        sqlite3_bind_null(st, 1);
    sqlite3_bind_int64(st, 2, ts);
    sqlite3_bind_int64(st, 3, (int64_t)task);
    sqlite3_bind_int(st, 4, kind);
    sqlite3_bind_int64(st, 5, reason);
    sqlite3_bind_int64(st, 6, arg0);
    run_stmt(d, st);
}

/* task_marks from spans: suspends on a task or gather, self-wakes; and
 * late_timers. */
static void on_span(void *ctx, const ls_span *s)
{
    ls_derive *d = ctx;
    if (s->node == LS_NODE_PREEXISTING)
        return;                       /* its detail is not a reason */
    if (s->state == EVL_FINAL_SUSPENDED) {
        if (s->detail == EVL_SUSPEND_TASK || s->detail == EVL_SUSPEND_GATHER)
            put_mark(d, 0, s->start, s->task, EVL_PROBE_ID_task_suspend, s->detail, s->object);
        if (s->detail == EVL_SUSPEND_SLEEP && s->end_kind == EVL_PROBE_ID_task_wake &&
            s->end_reason == EVL_WAKER_TIMER && s->object != 0) {
            int64_t late = ls_ns_sub(s->end, s->object);
            if (late >= d->late_floor) {
                sqlite3_bind_int64(d->late, 1, (int64_t)s->task);
                sqlite3_bind_int64(d->late, 2, s->object);
                sqlite3_bind_int64(d->late, 3, s->end);
                sqlite3_bind_int64(d->late, 4, late);
                run_stmt(d, d->late);
            }
        }
    } else if (s->node == LS_NODE_READY && s->object == (int64_t)s->task &&
               s->detail != EVL_WAKER_YIELD) {
        put_mark(d, 0, s->start, s->task, EVL_PROBE_ID_task_wake, s->detail, s->object);
    }
}

/* task_marks: cancel requests and leak verdicts, with their rowid. */
static void on_mark(void *ctx, const ls_event *e)
{
    put_mark(ctx, e->rowid, e->ts, e->task, e->kind, e->reason, e->arg0);
}

static ls_replay_ops derive_ops(ls_derive *d)
{
    return (ls_replay_ops){ .on_span = on_span, .on_task_done = on_task_done,
                            .on_mark = on_mark, .ctx = d };
}

static void on_edge(void *ctx, const ls_edge_stats *e)
{
    ls_derive *d = ctx;
    sqlite3_stmt *st = d->edge;
    sqlite3_bind_int64(st, 1, (int64_t)e->loop);
    sqlite3_bind_int(st, 2, e->from);
    sqlite3_bind_int(st, 3, e->to);
    sqlite3_bind_int64(st, 4, (int64_t)e->count);
    sqlite3_bind_int64(st, 5, e->total_ns);
    sqlite3_bind_int64(st, 6, e->max_ns);
    run_stmt(d, st);
}

static void on_bucket(void *ctx, const ls_edge_stats *e, int64_t lo, int64_t hi, uint64_t n)
{
    ls_derive *d = ctx;
    sqlite3_stmt *st = d->bucket;
    sqlite3_bind_int64(st, 1, (int64_t)e->loop);
    sqlite3_bind_int(st, 2, e->from);
    sqlite3_bind_int(st, 3, e->to);
    sqlite3_bind_int64(st, 4, lo);
    sqlite3_bind_int64(st, 5, hi);
    sqlite3_bind_int64(st, 6, (int64_t)n);
    run_stmt(d, st);
}

static void on_iter(void *ctx, uint64_t loop, int64_t lo, int64_t hi, uint64_t n, int64_t busy)
{
    ls_derive *d = ctx;
    sqlite3_stmt *st = d->iter;
    sqlite3_bind_int64(st, 1, (int64_t)loop);
    sqlite3_bind_int64(st, 2, lo);
    sqlite3_bind_int64(st, 3, hi);
    sqlite3_bind_int64(st, 4, (int64_t)n);
    sqlite3_bind_int64(st, 5, busy);
    run_stmt(d, st);
}

/*
 * What needs the blocking table and the indexed events, in SQL:
 *  - on-CPU episodes of libevl loops last until their step ended (the
 *    task's next suspend or finish, or the callback's end), minus the
 *    off-CPU episodes inside them (the generic mode's BPF side measured
 *    its own);
 *  - victims (victims.c, in C: one pass over the events);
 *  - per task, its blocking episodes and their time.
 * Every statement recomputes from the base tables, so running it again
 * gives the same rows.
 */
static const char ls_post_sql[] =
    "CREATE INDEX IF NOT EXISTS tasks_loop ON tasks(loop_id);"
    "CREATE INDEX IF NOT EXISTS task_marks_task ON task_marks(task_id, kind, reason, ts_ns);"
    "CREATE INDEX IF NOT EXISTS task_marks_arg ON task_marks(kind, arg0);"
    "CREATE INDEX IF NOT EXISTS late_timers_task ON late_timers(task_id, late_ns);"
    "CREATE INDEX IF NOT EXISTS blocking_loop_start ON blocking(loop_id, start_ns);"
    /* one statement per case: a task's next suspend or finish (the
     * events of one task or one loop come in time order, and LIMIT 1
     * stops at the first: model/events_vtab.c), a callback's end */
    "UPDATE blocking SET dur_ns = coalesce(("
    "  SELECT e.ts_ns FROM events e WHERE e.task_id = blocking.task_id"
    "   AND e.ts_ns > blocking.start_ns"
    "   AND e.kind IN (" LS_SQL_KIND_task_suspend ", " LS_SQL_KIND_task_finish ")"
    "   ORDER BY e.ts_ns LIMIT 1),"
    "  (SELECT CAST(value AS INTEGER) FROM meta WHERE key = '" LS_META_END_NS "'),"
    "  (SELECT CAST(value AS INTEGER) FROM meta WHERE key = '" LS_META_DERIVED_END_NS "'))"
    " - start_ns"
    " WHERE kind = " LS_SQL_BLOCK_ONCPU " AND task_id IS NOT NULL AND NOT " LS_GENERIC ";"
    "UPDATE blocking SET dur_ns = coalesce(("
    "  SELECT e.ts_ns FROM events e WHERE e.loop_id = blocking.loop_id"
    "   AND e.kind = " LS_SQL_KIND_callback_end " AND e.ts_ns > blocking.start_ns"
    "   ORDER BY e.ts_ns LIMIT 1),"
    "  (SELECT CAST(value AS INTEGER) FROM meta WHERE key = '" LS_META_END_NS "'),"
    "  (SELECT CAST(value AS INTEGER) FROM meta WHERE key = '" LS_META_DERIVED_END_NS "'))"
    " - start_ns"
    " WHERE kind = " LS_SQL_BLOCK_ONCPU " AND task_id IS NULL AND NOT " LS_GENERIC ";"
    "UPDATE blocking SET dur_ns = dur_ns - coalesce((SELECT sum(o.dur_ns) FROM blocking o"
    "  WHERE o.kind = " LS_SQL_BLOCK_OFFCPU " AND o.loop_id = blocking.loop_id"
    "  AND o.start_ns >= blocking.start_ns AND o.start_ns < blocking.start_ns + blocking.dur_ns), 0)"
    " WHERE kind = " LS_SQL_BLOCK_ONCPU " AND NOT " LS_GENERIC ";"
    ;
/* After the victims (victims.c): */
static const char ls_post_after_sql[] =
    "UPDATE blocking SET delayed_tasks = (SELECT count(*) FROM blocking_victims v"
    "  WHERE v.blocking_id = blocking.id);"
    "UPDATE task_stats SET blocking = (SELECT count(*) FROM blocking b"
    "  WHERE b.task_id = task_stats.task_id), blocked_ns = (SELECT coalesce(sum(dur_ns), 0)"
    "  FROM blocking b WHERE b.task_id = task_stats.task_id)"
    " WHERE task_id IN (SELECT task_id FROM blocking);"
    "INSERT OR REPLACE INTO meta(key, value) VALUES('" LS_META_MODEL_VERSION "', '"
    LS_STR(LS_MODEL_VERSION) "');";

static int derive_finish(ls_derive *d, ls_replay *r, char *err, size_t errlen)
{
    if (sqlite3_exec(d->db, "DELETE FROM transitions; DELETE FROM transition_hist;"
                            "DELETE FROM iteration_hist WHERE NOT " LS_GENERIC ";",
                     NULL, NULL, NULL) != SQLITE_OK)
        return sql_fail(d->db, "cannot empty the derived tables", err, errlen);
    ls_replay_each_edge(r, on_edge, on_bucket, d);
    /* A generic trace's iteration_hist comes from its wait calls. */
    sqlite3_stmt *q = NULL;
    int generic = 0;
    if (sqlite3_prepare_v2(d->db, "SELECT " LS_GENERIC, -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        generic = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    if (!generic)
        ls_replay_each_iteration_bucket(r, on_iter, d);
    if (d->rc != SQLITE_OK)
        return sql_fail(d->db, "cannot write the derived tables", err, errlen);
    if (sqlite3_exec(d->db, ls_post_sql, NULL, NULL, NULL) != SQLITE_OK ||
        ls_derive_victims(d->db) != SQLITE_OK ||
        sqlite3_exec(d->db, ls_post_after_sql, NULL, NULL, NULL) != SQLITE_OK)
        return sql_fail(d->db, "cannot derive blocking and indexes", err, errlen);
    return 0;
}

int64_t ls_derive_last_time(sqlite3 *db)
{
    static const char sql[] =
        "SELECT max(coalesce(" LS_SQL_EVENTS_MAX_TS ", -9223372036854775807),"
        " coalesce((SELECT max(start_ns + max(dur_ns, 0)) FROM blocking), -9223372036854775807),"
        " coalesce((SELECT max(end_ns) FROM loop_windows), -9223372036854775807))";
    sqlite3_stmt *st = NULL;
    int64_t t = INT64_MIN;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
        sqlite3_column_type(st, 0) == SQLITE_INTEGER)
        t = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return t == -INT64_MAX ? INT64_MIN : t;
}

static void replay_ev(void *ctx, int64_t rowid, const ls_ev *v)
{
    ls_event e = { .ts = v->v[LS_EV_TS], .loop = (uint64_t)v->v[LS_EV_LOOP],
                   .task = (uint64_t)v->v[LS_EV_TASK], .kind = (int)v->v[LS_EV_KIND],
                   .reason = v->v[LS_EV_REASON], .arg0 = v->v[LS_EV_ARG0],
                   .arg1 = v->v[LS_EV_ARG1], .rowid = rowid };   /* NULL columns decode as 0 */
    ls_replay_event(ctx, &e);
}

int ls_derive_all(sqlite3 *db, int64_t end_ns, size_t max_live, char *err, size_t errlen)
{
    ls_derive *d = derive_new(db, err, errlen);
    if (!d)
        return -1;
    int rc = -1;
    ls_replay *r = NULL;
    sqlite3_stmt *lp = NULL;
    char sql[256];
    snprintf(sql, sizeof(sql), "INSERT OR REPLACE INTO meta(key, value)"
             " VALUES('" LS_META_DERIVED_END_NS "', '%lld');"
             " DELETE FROM task_stats; DELETE FROM task_marks; DELETE FROM task_slices;"
             " DELETE FROM late_timers", (long long)end_ns);
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        sql_fail(db, "cannot empty task_stats", err, errlen);
        goto out;
    }
    ls_replay_ops ops = derive_ops(d);
    r = ls_replay_new(&ops, max_live);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (sqlite3_prepare_v2(db, "SELECT id, stopped_ns FROM loops WHERE stopped_ns IS NOT NULL",
                           -1, &lp, NULL) != SQLITE_OK) {
        sql_fail(db, "cannot read loops", err, errlen);
        goto out;
    }
    while (sqlite3_step(lp) == SQLITE_ROW)
        ls_replay_loop_stop(r, (uint64_t)sqlite3_column_int64(lp, 0), sqlite3_column_int64(lp, 1));
    int64_t bad;
    int step = ls_chunks_each(db, replay_ev, r, &bad);
    if (bad != INT64_MIN) {
        snprintf(err, errlen, "cannot read events: the chunk at rowid %lld is malformed",
                 (long long)bad);
        goto out;
    }
    if (step != SQLITE_OK) {
        sql_fail(db, "cannot read events", err, errlen);
        goto out;
    }
    ls_replay_end(r, end_ns);
    if (d->rc != SQLITE_OK) {
        sql_fail(db, "cannot write task_stats", err, errlen);
        goto out;
    }
    rc = derive_finish(d, r, err, errlen);
out:
    sqlite3_finalize(lp);
    ls_replay_free(r);
    derive_free(d);
    return rc;
}
