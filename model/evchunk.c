/*
 * evchunk.c -- events in chunks (evchunk.h): the encoding and the writer.
 */
#include "evchunk.h"

#include "ls_sqlite.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- encoding */

static inline uint64_t zz(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int64_t unzz(uint64_t u) { return (int64_t)(u >> 1) ^ -(int64_t)(u & 1); }
/* a - b and a + b wrapping around, without signed overflow */
static inline int64_t wsub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static inline int64_t wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }

static inline uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* NULL when the varint runs past end or over 10 bytes. */
static inline const uint8_t *get_varint(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 70 && p < end; shift += 7) {
        uint8_t b = *p++;
        r |= (uint64_t)(b & 0x7f) << (shift < 64 ? shift : 63);
        if (!(b & 0x80)) {
            *v = r;
            return p;
        }
    }
    return NULL;
}

/* The columns that may be NULL or 0, in the order of the state byte. */
static const int ls_opt_cols[4] = { LS_EV_TASK, LS_EV_REASON, LS_EV_ARG0, LS_EV_ARG1 };
enum { LS_ST_NULL = 0, LS_ST_ZERO = 1, LS_ST_VALUE = 2 };

/* The state of optional column c of e (written without a loop: this and
 * encode() run once per event the recorder stores). */
static inline unsigned opt_state(const ls_ev *e, int c)
{
    return e->null & (1u << c) ? LS_ST_NULL : e->v[c] ? LS_ST_VALUE : LS_ST_ZERO;
}

/* prev: ts, loop, task of the previous event of the chunk (zero at its
 * start); updated. */
static uint8_t *encode(uint8_t *p, const ls_ev *e, int64_t prev[3])
{
    unsigned s_task = opt_state(e, LS_EV_TASK), s_reason = opt_state(e, LS_EV_REASON),
             s_arg0 = opt_state(e, LS_EV_ARG0), s_arg1 = opt_state(e, LS_EV_ARG1);
    *p++ = (uint8_t)(s_task + 3 * s_reason + 9 * s_arg0 + 27 * s_arg1);
    p = put_varint(p, zz(e->v[LS_EV_KIND]));
    p = put_varint(p, zz(wsub(e->v[LS_EV_TS], prev[0])));
    p = put_varint(p, zz(wsub(e->v[LS_EV_LOOP], prev[1])));
    prev[0] = e->v[LS_EV_TS];
    prev[1] = e->v[LS_EV_LOOP];
    if (s_task == LS_ST_VALUE) {
        p = put_varint(p, zz(wsub(e->v[LS_EV_TASK], prev[2])));
        prev[2] = e->v[LS_EV_TASK];
    }
    if (s_reason == LS_ST_VALUE)
        p = put_varint(p, zz(e->v[LS_EV_REASON]));
    if (s_arg0 == LS_ST_VALUE)
        p = put_varint(p, zz(e->v[LS_EV_ARG0]));
    if (s_arg1 == LS_ST_VALUE)
        p = put_varint(p, zz(e->v[LS_EV_ARG1]));
    return p;
}

/* Decode a chunk's data into out[0 .. max): the number of events, or -1
 * when the data is malformed (out holds what came before the fault). */
static int chunk_decode(const uint8_t *p, size_t len, ls_ev *out, int max)
{
    const uint8_t *end = p + len;
    int64_t prev[3] = { 0, 0, 0 };
    int n = 0;
    while (p < end && n < max) {
        unsigned st = *p++;
        if (st >= 81)
            return -1;
        ls_ev *e = &out[n];
        e->null = 0;
        uint64_t u;
        if (!(p = get_varint(p, end, &u)))
            return -1;
        e->v[LS_EV_KIND] = unzz(u);
        if (!(p = get_varint(p, end, &u)))
            return -1;
        e->v[LS_EV_TS] = prev[0] = wadd(prev[0], unzz(u));
        if (!(p = get_varint(p, end, &u)))
            return -1;
        e->v[LS_EV_LOOP] = prev[1] = wadd(prev[1], unzz(u));
        for (int i = 0; i < 4; i++, st /= 3) {
            int c = ls_opt_cols[i];
            switch (st % 3) {
            case LS_ST_NULL:
                e->null |= (uint8_t)(1u << c);
                e->v[c] = 0;
                break;
            case LS_ST_ZERO:
                e->v[c] = 0;
                break;
            default:
                if (!(p = get_varint(p, end, &u)))
                    return -1;
                e->v[c] = i == 0 ? (prev[2] = wadd(prev[2], unzz(u))) : unzz(u);
                break;
            }
        }
        n++;
    }
    return p == end ? n : -1;
}

int ls_chunk_load(struct sqlite3_stmt *st, int col, int64_t n, ls_ev *out)
{
    if (sqlite3_column_type(st, col) != SQLITE_BLOB)
        return -1;
    const void *data = sqlite3_column_blob(st, col);
    int len = sqlite3_column_bytes(st, col);
    int nev = chunk_decode(data, (size_t)len, out, LS_CHUNK_EVENTS);
    return nev >= 0 && nev == n ? nev : -1;
}

int ls_chunks_each(struct sqlite3 *db, void (*fn)(void *ctx, int64_t rowid, const ls_ev *e),
                   void *ctx, int64_t *bad)
{
    *bad = INT64_MIN;
    ls_ev *ev = malloc(LS_CHUNK_EVENTS * sizeof(*ev));
    sqlite3_stmt *st = NULL;
    int rc = ev ? sqlite3_prepare_v2(db, "SELECT c.id, c.n, d.data FROM event_chunks c"
                                         " LEFT JOIN event_chunk_data d ON d.id = c.id"
                                         " ORDER BY c.id", -1, &st, NULL)
                : SQLITE_NOMEM;
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0);
        int n = ls_chunk_load(st, 2, sqlite3_column_int64(st, 1), ev);
        if (n < 0) {
            *bad = id;
            rc = SQLITE_CORRUPT;
            break;
        }
        for (int i = 0; i < n; i++)
            fn(ctx, id + i, &ev[i]);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    free(ev);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* --------------------------------------------------------------- writer */

/* the pending events' tasks: open addressing, half full at most */
#define LS_TASK_BITS 13
#define LS_TASK_SLOTS (1u << LS_TASK_BITS)
_Static_assert(LS_TASK_SLOTS >= 2 * LS_CHUNK_EVENTS && LS_TASK_SLOTS <= 65536,
               "a chunk's tasks fill the table half at most; slots fit a uint16_t");

struct ls_chunkw {
    sqlite3 *db;
    char *schema;
    sqlite3_stmt *ins_chunk, *ins_data, *ins_task;
    int64_t run_max;          /* of the stored chunks */
    int64_t stored;           /* events in chunk rows */
    int n;                    /* pending events */
    int64_t prev[3];
    int64_t min_ts, max_ts;
    size_t len;
    uint8_t buf[LS_CHUNK_EVENTS * LS_EV_MAX_BYTES];
    /* the distinct task ids of the pending events, with the time range of
     * their events (id 0: free slot; task id 0 is kept aside in task0) */
    struct ls_ctask { int64_t id, min_ts, max_ts; } tasks[LS_TASK_SLOTS], task0;
    bool has_task0;
    int nused;                /* the slots in use, in the order of use: */
    uint16_t used[LS_CHUNK_EVENTS];   /* cleared one by one, not the table */
};

static int prepare_in(sqlite3 *db, const char *schema, const char *fmt, sqlite3_stmt **st)
{
    char *sql = sqlite3_mprintf(fmt, schema);
    int rc = sql ? sqlite3_prepare_v2(db, sql, -1, st, NULL) : SQLITE_NOMEM;
    sqlite3_free(sql);
    return rc;
}

/* How many events are stored, and the latest time of any. */
static int64_t stored_events(sqlite3 *db, const char *schema, int64_t *run_max)
{
    sqlite3_stmt *st = NULL;
    int64_t n = 0;
    *run_max = INT64_MIN;
    if (prepare_in(db, schema, "SELECT coalesce(max(id + n - 1), 0), max(run_max)"
                               " FROM \"%w\".event_chunks", &st) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        n = sqlite3_column_int64(st, 0);
        if (sqlite3_column_type(st, 1) == SQLITE_INTEGER)
            *run_max = sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    return n;
}

ls_chunkw *ls_chunkw_new(sqlite3 *db, const char *schema, char *err, size_t errlen)
{
    ls_chunkw *w = calloc(1, sizeof(*w));
    if (!w || !(w->schema = sqlite3_mprintf("%s", schema ? schema : "main"))) {
        snprintf(err, errlen, "out of memory");
        free(w);
        return NULL;
    }
    w->db = db;
    if (prepare_in(db, w->schema, "INSERT INTO \"%w\".event_chunks(id, n, min_ts, max_ts,"
                                  " run_max) VALUES(?,?,?,?,?)", &w->ins_chunk) != SQLITE_OK ||
        prepare_in(db, w->schema, "INSERT INTO \"%w\".event_chunk_data(id, data)"
                                  " VALUES(?,?)", &w->ins_data) != SQLITE_OK ||
        prepare_in(db, w->schema, "INSERT OR IGNORE INTO \"%w\".event_chunk_tasks(task_id,"
                                  " chunk_id, min_ts, max_ts) VALUES(?,?,?,?)", &w->ins_task) != SQLITE_OK) {
        snprintf(err, errlen, "cannot prepare the event writer: %s", sqlite3_errmsg(db));
        ls_chunkw_free(w);
        return NULL;
    }
    w->stored = stored_events(db, w->schema, &w->run_max);
    return w;
}

void ls_chunkw_free(ls_chunkw *w)
{
    if (!w)
        return;
    sqlite3_finalize(w->ins_chunk);
    sqlite3_finalize(w->ins_data);
    sqlite3_finalize(w->ins_task);
    sqlite3_free(w->schema);
    free(w);
}

static void note_task(ls_chunkw *w, int64_t id, int64_t ts)
{
    struct ls_ctask *t;
    if (id == 0) {
        t = &w->task0;
        if (!w->has_task0) {
            w->has_task0 = true;
            *t = (struct ls_ctask){ 0, ts, ts };
        }
    } else {
        size_t h = (size_t)(((uint64_t)id * 0x9e3779b97f4a7c15ull) >> (64 - LS_TASK_BITS));
        while (w->tasks[h].id && w->tasks[h].id != id)
            h = (h + 1) % LS_TASK_SLOTS;
        t = &w->tasks[h];
        if (!t->id) {
            *t = (struct ls_ctask){ id, ts, ts };
            w->used[w->nused++] = (uint16_t)h;
        }
    }
    if (ts < t->min_ts)
        t->min_ts = ts;
    if (ts > t->max_ts)
        t->max_ts = ts;
}

int ls_chunkw_add(ls_chunkw *w, const ls_ev *e)
{
    if (!w->n) {
        memset(w->prev, 0, sizeof(w->prev));
        w->min_ts = w->max_ts = e->v[LS_EV_TS];
    }
    w->len = (size_t)(encode(w->buf + w->len, e, w->prev) - w->buf);
    if (e->v[LS_EV_TS] < w->min_ts)
        w->min_ts = e->v[LS_EV_TS];
    if (e->v[LS_EV_TS] > w->max_ts)
        w->max_ts = e->v[LS_EV_TS];
    if (!(e->null & (1u << LS_EV_TASK)))
        note_task(w, e->v[LS_EV_TASK], e->v[LS_EV_TS]);
    return ++w->n == LS_CHUNK_EVENTS ? ls_chunkw_flush(w) : SQLITE_OK;
}

static int step_reset(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static void clear_pending(ls_chunkw *w)
{
    w->n = 0;
    w->len = 0;
    w->has_task0 = false;
    for (int i = 0; i < w->nused; i++)
        w->tasks[w->used[i]].id = 0;
    w->nused = 0;
}

int ls_chunkw_flush(ls_chunkw *w)
{
    if (!w->n)
        return SQLITE_OK;
    int64_t id = w->stored + 1;
    sqlite3_bind_int64(w->ins_chunk, 1, id);
    sqlite3_bind_int(w->ins_chunk, 2, w->n);
    sqlite3_bind_int64(w->ins_chunk, 3, w->min_ts);
    sqlite3_bind_int64(w->ins_chunk, 4, w->max_ts);
    int64_t run = w->max_ts > w->run_max ? w->max_ts : w->run_max;
    sqlite3_bind_int64(w->ins_chunk, 5, run);
    int rc = step_reset(w->ins_chunk);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(w->ins_data, 1, id);
        sqlite3_bind_blob(w->ins_data, 2, w->buf, (int)w->len, SQLITE_STATIC);
        rc = step_reset(w->ins_data);
        sqlite3_bind_null(w->ins_data, 2);
    }
    for (int i = 0; i <= w->nused && rc == SQLITE_OK; i++) {
        const struct ls_ctask *t = i < w->nused ? &w->tasks[w->used[i]] : &w->task0;
        if (i == w->nused && !w->has_task0)
            continue;
        sqlite3_bind_int64(w->ins_task, 1, t->id);
        sqlite3_bind_int64(w->ins_task, 2, id);
        sqlite3_bind_int64(w->ins_task, 3, t->min_ts);
        sqlite3_bind_int64(w->ins_task, 4, t->max_ts);
        rc = step_reset(w->ins_task);
    }
    if (rc == SQLITE_OK) {
        w->stored += w->n;
        w->run_max = run;
    }
    clear_pending(w);
    return rc;
}

int ls_chunkw_reset(ls_chunkw *w)
{
    clear_pending(w);
    w->stored = stored_events(w->db, w->schema, &w->run_max);
    return SQLITE_OK;
}

int64_t ls_chunkw_count(const ls_chunkw *w) { return w->stored + w->n; }
