/*
 * events_vtab.c -- the virtual table `events` over a trace's event chunks
 * (evchunk.h): the columns and rowids of the events table of earlier
 * schemas, for every reader and for SQL typed by users.
 *
 * A query is answered by visiting only the chunks that can hold its rows
 * (the constraints SQLite hands over; it checks every row again itself):
 *
 *   rowid = | > | >= | < | <=    the chunks holding that range of rowids
 *   task_id =                    the chunks event_chunk_tasks lists
 *   ts_ns = | > | >= | < | <=    chunks whose [min_ts, max_ts] meets it
 *   loop_id =, kind =            filters
 *
 * Rows come in rowid order, or in reverse when SQLite asks for ORDER BY
 * rowid DESC.  A loop's records are stored in time order (the recorder
 * refuses a record older than its loop's last, tracer/decode_evl.c), and a
 * task's events are its loop's, so with task_id = (or loop_id = and kind =)
 * given, rowid order is also ts_ns order: ORDER BY ts_ns [, rowid] (both
 * ASC or both DESC) costs no sort, and `... ORDER BY ts_ns LIMIT 1` stops
 * at the first row found.  (Not so for loop_start and loop_stop, stored
 * when their probe fires; and in a forged trace that breaks the rule, such
 * rows come out of time order; nothing worse.)
 *
 * Rows can be inserted (fixtures, tests, users): they are encoded into a
 * chunk kept in memory and written at the end of the transaction (or when
 * full, or before the table is read).  Rows cannot be updated or deleted.
 *
 * One file of a little over 600 lines, as SQLite's own virtual tables
 * are: the plan xBestIndex encodes is read back by xFilter and the cursor,
 * and the module's methods are its one interface.
 */
#include "evchunk.h"
#include "ls_sqlite.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LS_SQLITE_EXTENSION
SQLITE_EXTENSION_INIT1
#endif

/* The constraints used, one bit each; their values come in this order. */
enum {
    LS_C_RID_EQ, LS_C_RID_GT, LS_C_RID_GE, LS_C_RID_LT, LS_C_RID_LE,
    LS_C_TS_EQ, LS_C_TS_GT, LS_C_TS_GE, LS_C_TS_LT, LS_C_TS_LE,
    LS_C_LOOP_EQ, LS_C_TASK_EQ, LS_C_KIND_EQ,
    LS_C_COUNT,
};
#define LS_C_DESC (1 << LS_C_COUNT)     /* idxNum: visit in reverse */

/* What a cursor needs besides its position: statements and a decoded
 * chunk.  Kept in a pool by the table when a cursor closes: SQLite opens a
 * fresh cursor each time it runs a correlated subquery, which asks again
 * and again of the same chunk, and preparing and decoding each time would
 * cost more than the answer. */
typedef struct ls_evres {
    struct ls_evres *next;    /* in the pool */
    sqlite3_stmt *q[4];       /* chunk lists: [by task][desc], prepared once */
    sqlite3_stmt *data;       /* a chunk's data */
    int64_t loaded;           /* the chunk ev[] holds, 0 if none */
    int nloaded;
    bool sorted;              /* ev[] in ts_ns order (one loop's events) */
    ls_ev ev[LS_CHUNK_EVENTS];
} ls_evres;

typedef struct ls_evtab {
    sqlite3_vtab base;
    sqlite3 *db;
    char *schema;
    ls_chunkw *w;             /* made at the first insert */
    ls_evres *pool;
} ls_evtab;

typedef struct ls_evcur {
    sqlite3_vtab_cursor base;
    ls_evres *res;
    sqlite3_stmt *cur;        /* the chunk list being stepped */
    bool desc, eof;
    /* the bounds (inclusive) and filters of this scan */
    int64_t rid_lo, rid_hi, ts_lo, ts_hi, loop, task, kind;
    bool has_loop, has_task, has_kind;
    int64_t chunk;            /* rowid of the first event of the chunk res->ev holds */
    int nev, i;               /* its events; the position */
} ls_evcur;

static void res_free(ls_evres *r)
{
    for (int i = 0; i < 4; i++)
        sqlite3_finalize(r->q[i]);
    sqlite3_finalize(r->data);
    sqlite3_free(r);
}

static const char ls_decl[] =
    "CREATE TABLE x(ts_ns INTEGER NOT NULL, loop_id INTEGER NOT NULL, task_id INTEGER,"
    " kind INTEGER NOT NULL, reason INTEGER, arg0 INTEGER, arg1 INTEGER)";

static int ev_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                      sqlite3_vtab **out, char **err)
{
    (void)aux;
    (void)argc;
    int rc = sqlite3_declare_vtab(db, ls_decl);
    if (rc != SQLITE_OK)
        return rc;
    ls_evtab *t = sqlite3_malloc(sizeof(*t));
    if (!t)
        return SQLITE_NOMEM;
    memset(t, 0, sizeof(*t));
    t->db = db;
    t->schema = sqlite3_mprintf("%s", argv[1]);
    if (!t->schema) {
        sqlite3_free(t);
        return SQLITE_NOMEM;
    }
    (void)err;
    *out = &t->base;
    return SQLITE_OK;
}

static int ev_disconnect(sqlite3_vtab *vt)
{
    ls_evtab *t = (ls_evtab *)vt;
    while (t->pool) {
        ls_evres *r = t->pool;
        t->pool = r->next;
        res_free(r);
    }
    ls_chunkw_free(t->w);
    sqlite3_free(t->schema);
    sqlite3_free(t);
    return SQLITE_OK;
}

static int constraint_slot(int col, unsigned char op)
{
    int base;
    switch (col) {
    case -1: base = LS_C_RID_EQ; break;
    case LS_EV_TS: base = LS_C_TS_EQ; break;
    case LS_EV_LOOP: return op == SQLITE_INDEX_CONSTRAINT_EQ ? LS_C_LOOP_EQ : -1;
    case LS_EV_TASK: return op == SQLITE_INDEX_CONSTRAINT_EQ ? LS_C_TASK_EQ : -1;
    case LS_EV_KIND: return op == SQLITE_INDEX_CONSTRAINT_EQ ? LS_C_KIND_EQ : -1;
    default: return -1;
    }
    switch (op) {
    case SQLITE_INDEX_CONSTRAINT_EQ: return base;
    case SQLITE_INDEX_CONSTRAINT_GT: return base + 1;
    case SQLITE_INDEX_CONSTRAINT_GE: return base + 2;
    case SQLITE_INDEX_CONSTRAINT_LT: return base + 3;
    case SQLITE_INDEX_CONSTRAINT_LE: return base + 4;
    default: return -1;
    }
}

#define LS_BIT(c) (1u << (c))
#define LS_RID_RANGE (LS_BIT(LS_C_RID_GT) | LS_BIT(LS_C_RID_GE) | LS_BIT(LS_C_RID_LT) | \
                      LS_BIT(LS_C_RID_LE))
#define LS_TS_LOWER (LS_BIT(LS_C_TS_EQ) | LS_BIT(LS_C_TS_GT) | LS_BIT(LS_C_TS_GE))
#define LS_TS_UPPER (LS_BIT(LS_C_TS_EQ) | LS_BIT(LS_C_TS_LT) | LS_BIT(LS_C_TS_LE))

static int ev_best_index(sqlite3_vtab *vt, sqlite3_index_info *ii)
{
    (void)vt;
    int which[LS_C_COUNT];
    unsigned used = 0;
    for (int i = 0; i < ii->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &ii->aConstraint[i];
        int s = c->usable ? constraint_slot(c->iColumn, c->op) : -1;
        /* x IN (...) comes as x = v, one value per xFilter: each value's
         * rows would be in order, not all of them; SQLite checks it. */
        if (s >= 0 && c->op == SQLITE_INDEX_CONSTRAINT_EQ && sqlite3_vtab_in(ii, i, -1))
            s = -1;
        if (s >= 0 && !(used & LS_BIT(s))) {
            used |= LS_BIT(s);
            which[s] = i;
        }
    }
    int arg = 0;
    for (int s = 0; s < LS_C_COUNT; s++)
        if (used & LS_BIT(s))
            ii->aConstraintUsage[which[s]].argvIndex = ++arg;   /* omit 0: SQLite checks too */

    /* The order the rows come in: rowid, and ts_ns too within one task, or
     * one kind of one loop (loop_start and loop_stop are stored when their
     * probe fires, not in the order of the records around them). */
    bool one_loop = (used & LS_BIT(LS_C_TASK_EQ)) ||
                    (used & (LS_BIT(LS_C_LOOP_EQ) | LS_BIT(LS_C_KIND_EQ))) ==
                        (LS_BIT(LS_C_LOOP_EQ) | LS_BIT(LS_C_KIND_EQ));
    const struct sqlite3_index_orderby *o = ii->aOrderBy;
    bool consumed = false, desc = false;
    if (ii->nOrderBy == 1 && (o[0].iColumn == -1 || (o[0].iColumn == LS_EV_TS && one_loop)))
        consumed = true;
    else if (ii->nOrderBy == 2 && o[0].iColumn == LS_EV_TS && one_loop && o[1].iColumn == -1 &&
             o[1].desc == o[0].desc)
        consumed = true;
    if (consumed) {
        desc = o[0].desc;
        ii->orderByConsumed = 1;
    }
    ii->idxNum = (int)(used | (desc ? LS_C_DESC : 0));

    double rows = 1e7;
    if (used & LS_BIT(LS_C_RID_EQ)) {
        rows = 1;
        ii->idxFlags = SQLITE_INDEX_SCAN_UNIQUE;
    } else if (used & LS_BIT(LS_C_TASK_EQ)) {
        rows = 1e3;
    } else if ((used & LS_RID_RANGE) || ((used & LS_TS_LOWER) && (used & LS_TS_UPPER))) {
        rows = 1e4;
    } else if (used & (LS_TS_LOWER | LS_TS_UPPER)) {
        rows = 5e5;
    }
    if (used & (LS_BIT(LS_C_LOOP_EQ) | LS_BIT(LS_C_KIND_EQ)))
        rows *= 0.5;
    ii->estimatedRows = (sqlite3_int64)rows;
    ii->estimatedCost = rows > 1 ? rows : 1;
    return SQLITE_OK;
}

static int ev_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out)
{
    ls_evtab *t = (ls_evtab *)vt;
    ls_evcur *c = sqlite3_malloc(sizeof(*c));
    if (!c)
        return SQLITE_NOMEM;
    memset(c, 0, sizeof(*c));
    if (t->pool) {
        c->res = t->pool;
        t->pool = c->res->next;
    } else if ((c->res = sqlite3_malloc(sizeof(*c->res)))) {
        memset(c->res, 0, offsetof(ls_evres, ev));
    } else {
        sqlite3_free(c);
        return SQLITE_NOMEM;
    }
    c->eof = true;
    *out = &c->base;
    return SQLITE_OK;
}

static int ev_close(sqlite3_vtab_cursor *vc)
{
    ls_evcur *c = (ls_evcur *)vc;
    ls_evtab *t = (ls_evtab *)vc->pVtab;
    if (c->cur)
        sqlite3_reset(c->cur);
    c->res->next = t->pool;
    t->pool = c->res;
    sqlite3_free(c);
    return SQLITE_OK;
}

static int vt_fail(sqlite3_vtab *vt, int rc, const char *msg)
{
    sqlite3_free(vt->zErrMsg);
    vt->zErrMsg = sqlite3_mprintf("%s", msg);
    return rc;
}

static int cursor_fail(ls_evcur *c, int rc, const char *msg)
{
    c->eof = true;
    return vt_fail(c->base.pVtab, rc, msg);
}

static bool row_matches(const ls_evcur *c, const ls_ev *e, int64_t rowid)
{
    if (rowid < c->rid_lo || rowid > c->rid_hi)
        return false;
    if (e->v[LS_EV_TS] < c->ts_lo || e->v[LS_EV_TS] > c->ts_hi)
        return false;
    if (c->has_loop && e->v[LS_EV_LOOP] != c->loop)
        return false;
    if (c->has_kind && e->v[LS_EV_KIND] != c->kind)
        return false;
    if (c->has_task && ((e->null & (1u << LS_EV_TASK)) || e->v[LS_EV_TASK] != c->task))
        return false;
    return true;
}

/* Where a scan of the chunk just loaded starts: its first (last) event,
 * or when the chunk is in time order, the first (last) one inside the
 * time bounds, found by bisection. */
static int scan_start(const ls_evcur *c)
{
    const ls_evres *r = c->res;
    int lo = 0, hi = c->nev;
    if (!r->sorted)
        return c->desc ? c->nev - 1 : 0;
    if (!c->desc) {                   /* the first with ts >= ts_lo */
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (r->ev[mid].v[LS_EV_TS] < c->ts_lo)
                lo = mid + 1;
            else
                hi = mid;
        }
        return lo;
    }
    while (lo < hi) {                 /* the last with ts <= ts_hi */
        int mid = lo + (hi - lo) / 2;
        if (r->ev[mid].v[LS_EV_TS] <= c->ts_hi)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1;
}

/* Step to the next matching row (from the current position c->i, which
 * has not been looked at), loading chunks as needed. */
static int cursor_seek(ls_evcur *c)
{
    for (;;) {
        while (c->i >= 0 && c->i < c->nev) {
            if (row_matches(c, &c->res->ev[c->i], c->chunk + c->i))
                return SQLITE_OK;
            c->i += c->desc ? -1 : 1;
        }
        int rc = sqlite3_step(c->cur);
        if (rc == SQLITE_DONE) {
            c->eof = true;
            return SQLITE_OK;
        }
        if (rc != SQLITE_ROW)
            return cursor_fail(c, rc, sqlite3_errmsg(sqlite3_db_handle(c->cur)));
        c->chunk = sqlite3_column_int64(c->cur, 0);
        int64_t n = sqlite3_column_int64(c->cur, 1);
        ls_evres *r = c->res;
        if (c->chunk != r->loaded || !r->loaded) {
            r->loaded = 0;
            sqlite3_reset(r->data);
            sqlite3_bind_int64(r->data, 1, c->chunk);
            rc = sqlite3_step(r->data);
            if (rc != SQLITE_ROW && rc != SQLITE_DONE)
                return cursor_fail(c, rc, sqlite3_errmsg(sqlite3_db_handle(c->cur)));
            int nev = rc == SQLITE_ROW ? ls_chunk_load(r->data, 0, n, r->ev) : -1;
            sqlite3_reset(r->data);
            if (nev < 0) {
                char msg[96];
                snprintf(msg, sizeof(msg), "events: the chunk at rowid %lld is malformed",
                         (long long)c->chunk);
                return cursor_fail(c, SQLITE_CORRUPT, msg);
            }
            r->loaded = c->chunk;
            r->nloaded = nev;
            r->sorted = true;
            for (int k = 1; k < nev && r->sorted; k++)
                r->sorted = r->ev[k].v[LS_EV_TS] >= r->ev[k - 1].v[LS_EV_TS];
        }
        c->nev = r->nloaded;
        c->i = scan_start(c);
    }
}

/* The chunk lists: the chunks that may hold rowids in [?1, ?2] and times
 * in [?3, ?4] -- or those of task ?5 -- in rowid order or its reverse.
 * None before the first whose max_ts reaches ?3: run_max grows with the
 * rowid, so its index finds that one. */
#define LS_FROM_TS " (SELECT id FROM \"%w\".event_chunks WHERE run_max >= ?3 ORDER BY run_max LIMIT 1)"
/* A task's events are in time order: its last chunk with events up to ?4
 * is the one with the latest min_ts <= ?4. */
#define LS_TASK_TO_TS " (SELECT chunk_id FROM \"%w\".event_chunk_tasks WHERE task_id = ?5" \
                      " AND min_ts <= ?4 ORDER BY min_ts DESC LIMIT 1)"
static const char *const ls_chunk_sql[4] = {
    "SELECT id, n FROM \"%w\".event_chunks"
    " WHERE id >= coalesce((SELECT max(id) FROM \"%w\".event_chunks WHERE id <= ?1), ?1)"
    " AND id >= coalesce(" LS_FROM_TS ", 9223372036854775807)"
    " AND id <= ?2 AND max_ts >= ?3 AND min_ts <= ?4 ORDER BY id",
    "SELECT id, n FROM \"%w\".event_chunks"
    " WHERE id >= coalesce((SELECT max(id) FROM \"%w\".event_chunks WHERE id <= ?1), ?1)"
    " AND id >= coalesce(" LS_FROM_TS ", 9223372036854775807)"
    " AND id <= ?2 AND max_ts >= ?3 AND min_ts <= ?4 ORDER BY id DESC",
    "SELECT c.id, c.n FROM \"%w\".event_chunk_tasks t JOIN \"%w\".event_chunks c"
    " ON c.id = t.chunk_id WHERE t.task_id = ?5 AND c.id <= ?2 AND c.id + c.n > ?1"
    " AND t.chunk_id >= coalesce(" LS_FROM_TS ", 9223372036854775807)"
    " AND t.chunk_id <= coalesce(" LS_TASK_TO_TS ", -9223372036854775807)"
    " AND t.max_ts >= ?3 AND t.min_ts <= ?4 ORDER BY t.chunk_id",
    "SELECT c.id, c.n FROM \"%w\".event_chunk_tasks t JOIN \"%w\".event_chunks c"
    " ON c.id = t.chunk_id WHERE t.task_id = ?5 AND c.id <= ?2 AND c.id + c.n > ?1"
    " AND t.chunk_id >= coalesce(" LS_FROM_TS ", 9223372036854775807)"
    " AND t.chunk_id <= coalesce(" LS_TASK_TO_TS ", -9223372036854775807)"
    " AND t.max_ts >= ?3 AND t.min_ts <= ?4 ORDER BY t.chunk_id DESC",
};
static const char ls_data_sql[] = "SELECT data FROM \"%w\".event_chunk_data WHERE id = ?1";

/* An integer bound from a constraint value; false when it is not an
 * integer (SQLite then filters the rows itself, and so do we not). */
static bool value_int(sqlite3_value *v, int64_t *out)
{
    if (sqlite3_value_type(v) != SQLITE_INTEGER)
        return false;
    *out = sqlite3_value_int64(v);
    return true;
}

/* Narrow [lo, hi] by a constraint of kind s - base (0 EQ, 1 GT, 2 GE, 3 LT,
 * 4 LE) with integer value x; false when nothing can match. */
static bool narrow(int k, int64_t x, int64_t *lo, int64_t *hi)
{
    switch (k) {
    case 0: if (x > *lo) *lo = x; if (x < *hi) *hi = x; break;
    case 1: if (x == INT64_MAX) return false; if (x + 1 > *lo) *lo = x + 1; break;
    case 2: if (x > *lo) *lo = x; break;
    case 3: if (x == INT64_MIN) return false; if (x - 1 < *hi) *hi = x - 1; break;
    case 4: if (x < *hi) *hi = x; break;
    }
    return *lo <= *hi;
}

/* sql with the table's schema name in every %w. */
static int prepare_in_schema(ls_evtab *t, const char *sql, sqlite3_stmt **st)
{
    char *q = sqlite3_mprintf(sql, t->schema, t->schema, t->schema, t->schema);
    int rc = q ? sqlite3_prepare_v2(t->db, q, -1, st, NULL) : SQLITE_NOMEM;
    sqlite3_free(q);
    return rc;
}

static int ev_filter(sqlite3_vtab_cursor *vc, int idx, const char *idxstr, int argc,
                     sqlite3_value **argv)
{
    (void)idxstr;
    ls_evcur *c = (ls_evcur *)vc;
    ls_evtab *t = (ls_evtab *)vc->pVtab;
    if (t->w) {                       /* rows inserted in this transaction */
        int rc = ls_chunkw_flush(t->w);
        if (rc != SQLITE_OK)
            return cursor_fail(c, rc, sqlite3_errmsg(t->db));
    }
    c->desc = idx & LS_C_DESC;
    c->rid_lo = c->ts_lo = INT64_MIN;
    c->rid_hi = c->ts_hi = INT64_MAX;
    c->has_loop = c->has_task = c->has_kind = false;
    c->nev = c->i = 0;
    c->eof = false;
    bool empty = false;
    int a = 0;
    for (int s = 0; s < LS_C_COUNT && a < argc; s++) {
        if (!(idx & LS_BIT(s)))
            continue;
        int64_t x;
        bool isint = value_int(argv[a], &x);
        bool isnull = sqlite3_value_type(argv[a++]) == SQLITE_NULL;
        if (isnull)
            empty = true;             /* a comparison with NULL is never true */
        if (!isint)
            continue;
        if (s <= LS_C_RID_LE)
            empty |= !narrow(s - LS_C_RID_EQ, x, &c->rid_lo, &c->rid_hi);
        else if (s <= LS_C_TS_LE)
            empty |= !narrow(s - LS_C_TS_EQ, x, &c->ts_lo, &c->ts_hi);
        else if (s == LS_C_LOOP_EQ)
            c->has_loop = true, c->loop = x;
        else if (s == LS_C_TASK_EQ)
            c->has_task = true, c->task = x;
        else
            c->has_kind = true, c->kind = x;
    }
    if (empty) {
        c->eof = true;
        return SQLITE_OK;
    }
    int q = (c->has_task ? 2 : 0) + (c->desc ? 1 : 0);
    ls_evres *r = c->res;
    if (!r->q[q]) {
        int rc = prepare_in_schema(t, ls_chunk_sql[q], &r->q[q]);
        if (rc == SQLITE_OK && !r->data)
            rc = prepare_in_schema(t, ls_data_sql, &r->data);
        if (rc != SQLITE_OK)
            return cursor_fail(c, rc, sqlite3_errmsg(t->db));
    }
    if (c->cur)
        sqlite3_reset(c->cur);
    c->cur = r->q[q];
    sqlite3_reset(c->cur);
    sqlite3_bind_int64(c->cur, 1, c->rid_lo);
    sqlite3_bind_int64(c->cur, 2, c->rid_hi);
    sqlite3_bind_int64(c->cur, 3, c->ts_lo);
    sqlite3_bind_int64(c->cur, 4, c->ts_hi);
    if (c->has_task)
        sqlite3_bind_int64(c->cur, 5, c->task);
    return cursor_seek(c);
}

static int ev_next(sqlite3_vtab_cursor *vc)
{
    ls_evcur *c = (ls_evcur *)vc;
    c->i += c->desc ? -1 : 1;
    return cursor_seek(c);
}

static int ev_eof(sqlite3_vtab_cursor *vc) { return ((ls_evcur *)vc)->eof; }

static int ev_column(sqlite3_vtab_cursor *vc, sqlite3_context *ctx, int col)
{
    ls_evcur *c = (ls_evcur *)vc;
    const ls_ev *e = &c->res->ev[c->i];
    if (col < 0 || col >= LS_EV_NCOLS || (e->null & (1u << col)))
        sqlite3_result_null(ctx);
    else
        sqlite3_result_int64(ctx, e->v[col]);
    return SQLITE_OK;
}

static int ev_rowid(sqlite3_vtab_cursor *vc, sqlite3_int64 *rowid)
{
    ls_evcur *c = (ls_evcur *)vc;
    *rowid = c->chunk + c->i;
    return SQLITE_OK;
}

/* INSERT only: the value of each column must be an integer (or NULL where
 * the column allows it). */
static int ev_update(sqlite3_vtab *vt, int argc, sqlite3_value **argv, sqlite3_int64 *rowid)
{
    ls_evtab *t = (ls_evtab *)vt;
    if (argc == 1 || sqlite3_value_type(argv[0]) != SQLITE_NULL)
        return vt_fail(vt, SQLITE_READONLY, "events: rows can be added, not changed or deleted");
    if (!t->w) {
        char err[256];
        if (!(t->w = ls_chunkw_new(t->db, t->schema, err, sizeof(err))))
            return vt_fail(vt, SQLITE_ERROR, err);
    }
    int64_t next = ls_chunkw_count(t->w) + 1;
    if (sqlite3_value_type(argv[1]) != SQLITE_NULL &&
        (sqlite3_value_type(argv[1]) != SQLITE_INTEGER || sqlite3_value_int64(argv[1]) != next))
        return vt_fail(vt, SQLITE_CONSTRAINT, "events: rowids are given in order (1, 2, ...)");
    ls_ev e = { .null = 0 };
    for (int col = 0; col < LS_EV_NCOLS; col++) {
        sqlite3_value *v = argv[2 + col];
        int type = sqlite3_value_numeric_type(v);
        if (type == SQLITE_NULL && (col == LS_EV_TASK || col >= LS_EV_REASON)) {
            e.null |= (uint8_t)(1u << col);
        } else if (type == SQLITE_INTEGER) {
            e.v[col] = sqlite3_value_int64(v);
        } else if (type == SQLITE_FLOAT && sqlite3_value_double(v) == (double)(int64_t)
                                                   sqlite3_value_double(v)) {
            e.v[col] = (int64_t)sqlite3_value_double(v);
        } else {
            return vt_fail(vt, SQLITE_CONSTRAINT,
                           type == SQLITE_NULL ? "events: ts_ns, loop_id and kind are NOT NULL"
                                               : "events: every column holds integers");
        }
    }
    int rc = ls_chunkw_add(t->w, &e);
    if (rc != SQLITE_OK)
        return vt_fail(vt, rc, sqlite3_errmsg(t->db));
    *rowid = next;
    return SQLITE_OK;
}

static int ev_sync(sqlite3_vtab *vt)
{
    ls_evtab *t = (ls_evtab *)vt;
    int rc = t->w ? ls_chunkw_flush(t->w) : SQLITE_OK;
    return rc == SQLITE_OK ? rc : vt_fail(vt, rc, sqlite3_errmsg(t->db));
}

static int ev_begin(sqlite3_vtab *vt)
{
    (void)vt;
    return SQLITE_OK;
}

static int ev_rollback(sqlite3_vtab *vt)
{
    ls_evtab *t = (ls_evtab *)vt;
    for (ls_evres *r = t->pool; r; r = r->next)
        r->loaded = 0;            /* chunks written since may be gone, their ids reused */
    return t->w ? ls_chunkw_reset(t->w) : SQLITE_OK;
}

static const sqlite3_module ls_events_module = {
    .iVersion = 1,
    .xCreate = ev_connect,
    .xConnect = ev_connect,
    .xBestIndex = ev_best_index,
    .xDisconnect = ev_disconnect,
    .xDestroy = ev_disconnect,
    .xOpen = ev_open,
    .xClose = ev_close,
    .xFilter = ev_filter,
    .xNext = ev_next,
    .xEof = ev_eof,
    .xColumn = ev_column,
    .xRowid = ev_rowid,
    .xUpdate = ev_update,
    .xBegin = ev_begin,
    .xSync = ev_sync,
    .xCommit = ev_begin,
    .xRollback = ev_rollback,
};

int ls_events_register(sqlite3 *db)
{
    return sqlite3_create_module_v2(db, "loopscope_events", &ls_events_module, NULL, NULL);
}

#ifdef LS_SQLITE_EXTENSION
/* The loadable extension's entry point: `.load loopscope_events` in the
 * sqlite3 shell, load_extension() in Python's sqlite3. */
__attribute__((visibility("default"))) int sqlite3_extension_init(
    sqlite3 *db, char **err, const sqlite3_api_routines *api);
int sqlite3_extension_init(sqlite3 *db, char **err, const sqlite3_api_routines *api)
{
    (void)err;
    SQLITE_EXTENSION_INIT2(api);
    return ls_events_register(db);
}
#endif
