/*
 * evchunk.h -- how a trace stores its events: in chunks.
 *
 * A trace holds millions of events, 4 to 8 per request of a busy server.
 * One SQLite row each cost the recorder some 0.5 us and the file 55 bytes
 * per event with its two indexes; so events are stored in chunks of up to
 * LS_CHUNK_EVENTS, one row of event_chunks each (tracer/SCHEMA.md):
 *
 *   event_chunks(id = the rowid of its first event, n, min_ts, max_ts,
 *                run_max = the greatest max_ts of this chunk and all before)
 *   event_chunk_data(id, data)             the encoded events
 *   event_chunk_tasks(task_id, chunk_id, min_ts, max_ts)
 *                which chunks hold a task's events, and their time range
 *
 * (the blobs apart, so that a scan of event_chunks reads a few pages)
 *
 * and read back through the virtual table `events` (events_vtab.c), which
 * has the columns and the rowids the events table had: events are numbered
 * 1, 2, ... in the order they were stored.
 *
 * data is the chunk's events one after another, each
 *
 *   state byte   for task_id, reason, arg0, arg1: NULL, 0 or a value
 *                (3 states each: s_task + 3 s_reason + 9 s_arg0 + 27 s_arg1)
 *   kind         zigzag varint
 *   ts_ns        zigzag varint of the difference to the previous event's
 *   loop_id      zigzag varint of the difference to the previous event's
 *   task_id      if a value: zigzag varint of the difference to the
 *                previous task id stored in the chunk
 *   reason, arg0, arg1   if a value: zigzag varint
 *
 * (differences wrap around: any 64-bit values round-trip).  The varints are
 * SQLite's own format-free LEB128: 7 bits a byte, low first, at most 10
 * bytes.  A chunk is decoded as a whole, and any byte string is safe to
 * decode: a malformed one is reported, never read past.
 */
#ifndef LS_MODEL_EVCHUNK_H
#define LS_MODEL_EVCHUNK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sqlite3;
struct sqlite3_stmt;

#define LS_CHUNK_EVENTS 4096       /* 1024 in schema 3 */
/* The oldest schema version whose events this encoding reads: a schema 3
 * trace differs only in holding chunks of 1024 at most. */
#define LS_SCHEMA_OLDEST_READ 3
#define LS_EV_MAX_BYTES (1 + 7 * 10)      /* one encoded event, at most */

/* The columns of events, in order. */
enum { LS_EV_TS, LS_EV_LOOP, LS_EV_TASK, LS_EV_KIND, LS_EV_REASON, LS_EV_ARG0, LS_EV_ARG1,
       LS_EV_NCOLS };

/* One event: v[] by the enum above; bit c of null set when column c is
 * NULL (only task_id, reason, arg0 and arg1 may be). */
typedef struct ls_ev {
    int64_t v[LS_EV_NCOLS];
    uint8_t null;
} ls_ev;

/* The chunk in column col of st's current row, which says it holds n
 * events, decoded into out[0 .. LS_CHUNK_EVENTS): n, or -1 unless the
 * column is a blob of exactly n well-formed events. */
int ls_chunk_load(struct sqlite3_stmt *st, int col, int64_t n, ls_ev *out);

/* Every event of db's main schema in rowid order, straight from the
 * chunks (no SQL per event): fn(ctx, rowid, e) for each.  SQLITE_OK,
 * SQLite's error, or SQLITE_CORRUPT with *bad the id of the first
 * malformed chunk (fn has seen the events before it); *bad is INT64_MIN
 * unless a chunk was malformed. */
int ls_chunks_each(struct sqlite3 *db, void (*fn)(void *ctx, int64_t rowid, const ls_ev *e),
                   void *ctx, int64_t *bad);

/* The writer of a trace's chunks: events are encoded as they come and a
 * chunk row is written when LS_CHUNK_EVENTS are in it, or at a flush. */
typedef struct ls_chunkw ls_chunkw;

/* The writer of the chunks of database `schema` ("main", ...) of db.  NULL
 * when out of memory or the statements cannot be prepared (message in
 * err).  The first event gets rowid (events stored so far) + 1. */
ls_chunkw *ls_chunkw_new(struct sqlite3 *db, const char *schema, char *err, size_t errlen);
void ls_chunkw_free(ls_chunkw *w);
/* Append one event; SQLite's result code (SQLITE_OK, or the error of
 * writing a full chunk). */
int ls_chunkw_add(ls_chunkw *w, const ls_ev *e);
/* Write the events still pending as a (short) chunk. */
int ls_chunkw_flush(ls_chunkw *w);
/* Forget the pending events (a rolled-back transaction), and count the
 * stored ones again. */
int ls_chunkw_reset(ls_chunkw *w);
/* Events stored and pending: the rowid of the last one. */
int64_t ls_chunkw_count(const ls_chunkw *w);

/* SQL for what used to take a scan or an index of events: their number (=
 * the last rowid) and their time range (NULL when there are none). */
#define LS_SQL_EVENTS_COUNT "(SELECT coalesce(max(id + n - 1), 0) FROM event_chunks)"
#define LS_SQL_EVENTS_MIN_TS "(SELECT min(min_ts) FROM event_chunks)"
#define LS_SQL_EVENTS_MAX_TS "(SELECT max(max_ts) FROM event_chunks)"

/* The virtual table module `loopscope_events` behind events
 * (events_vtab.c): register it on a connection.  SQLite's result code. */
int ls_events_register(struct sqlite3 *db);

#endif
