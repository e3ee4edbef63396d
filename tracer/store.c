/*
 * store.c -- writes a trace database (schema.sql, SCHEMA.md).
 *
 * Capture speed comes from: one long transaction committed every
 * LS_COMMIT_NS (so a killed recorder still leaves a consistent database up
 * to the last commit: WAL), prepared statements, events written in chunks
 * of LS_CHUNK_EVENTS, 4096 (model/evchunk.h: one row per chunk, not per
 * event), and
 * indexes built only at the end.
 */
#define _GNU_SOURCE
#include "store.h"
#include "sink.h"
#include "evl-probes.h"
#include "evchunk.h"
#include "ls_schema.h"
#include "meta.h"
#include "symbols.h"
#include "syscalls.h"
#include "record.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LS_COMMIT_NS 250000000ll

struct ls_store {
    sqlite3 *db;
    char *path;               /* final name */
    char *tmp;                /* written here when replacing (--force) */
    ls_chunkw *events;        /* the event chunks being written */
    sqlite3_stmt *ins_task, *fin_task, *ins_loop, *stop_loop, *ins_meta, *ins_proc;
    sqlite3_stmt *ins_stack, *ins_frame, *ins_block, *leak_task, *ins_unknown;
    sqlite3_stmt *ins_named, *ins_window, *ins_hist, *ins_await;
    int64_t last_commit;
    char err[256];
};

static int exec(ls_store *s, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(s->err, sizeof(s->err), "%s", msg ? msg : sqlite3_errmsg(s->db));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static sqlite3_stmt *store_prepare(ls_store *s, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK)
        snprintf(s->err, sizeof(s->err), "%s", sqlite3_errmsg(s->db));
    return st;
}

static int step(ls_store *s, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE && !s->err[0])
        snprintf(s->err, sizeof(s->err), "%s", sqlite3_errmsg(s->db));
    return rc == SQLITE_DONE ? 0 : -1;
}

/* Lookup tables from the X-macro lists of evl-probes.h. */
static int fill_names(ls_store *s)
{
    sqlite3_stmt *st;
    static const struct { const char *table; int v; const char *name; } rows[] = {
#define LS_KIND(n, nargs, doc) { "event_kinds", EVL_PROBE_ID_##n, #n },
        EVL_PROBE_LIST(LS_KIND)
#define LS_SUSP(n, v, name) { "suspend_reasons", v, name },
        EVL_SUSPEND_LIST(LS_SUSP)
#define LS_WAKE(n, v, name) { "waker_kinds", v, name },
        EVL_WAKER_LIST(LS_WAKE)
#define LS_STATE(n, v, name) { "states", v, name },
        EVL_STATE_LIST(LS_STATE)
#define LS_LEAK(n, v, name) { "leak_kinds", v, name },
        EVL_LEAK_LIST(LS_LEAK)
#define LS_BKIND(n, v, name) { "blocking_kinds", v, name },
        LS_BLOCKING_KIND_LIST(LS_BKIND)
    };
    for (size_t nr = 0; nr < sizeof(ls_syscall_names) / sizeof(ls_syscall_names[0]); nr++) {
        if (!ls_syscall_names[nr])
            continue;
        if (sqlite3_prepare_v2(s->db, "INSERT INTO syscalls(nr, name) VALUES(?, ?)", -1, &st,
                               NULL) != SQLITE_OK)
            return -1;
        sqlite3_bind_int64(st, 1, (int64_t)nr);
        sqlite3_bind_text(st, 2, ls_syscall_names[nr], -1, SQLITE_STATIC);
        int rc = sqlite3_step(st);
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE)
            return -1;
    }
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char sql[96];
        snprintf(sql, sizeof(sql), "INSERT INTO %s(id, name) VALUES(?, ?)", rows[i].table);
        if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
            return -1;
        sqlite3_bind_int(st, 1, rows[i].v);
        sqlite3_bind_text(st, 2, rows[i].name, -1, SQLITE_STATIC);
        int rc = sqlite3_step(st);
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE)
            return -1;
    }
    return 0;
}

int ls_store_check(const char *path, bool force, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return 0;
    if (!force) {
        snprintf(err, errlen, "trace '%s' already exists (use --force to replace it)", path);
        return -1;
    }
    /* --force renames a finished trace over the old one: only ever over a
     * regular file (never /dev/null, a fifo, a symlink, a directory). */
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "refusing to replace '%s': not a regular file", path);
        return -1;
    }
    return 0;
}

/* Remove a trace file and what SQLite keeps beside it. */
static void unlink_trace(const char *path)
{
    char side[PATH_MAX + 8];
    unlink(path);
    snprintf(side, sizeof(side), "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof(side), "%s-shm", path);
    unlink(side);
}

ls_store *ls_store_create(const char *path, bool force, char *err, size_t errlen)
{
    struct stat st;
    if (ls_store_check(path, force, err, errlen) < 0)
        return NULL;
    bool exists = lstat(path, &st) == 0;
    ls_store *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->path = strdup(path);
    if (exists && asprintf(&s->tmp, "%s.tmp-%d", path, (int)getpid()) < 0)
        s->tmp = NULL;
    const char *target = s->tmp ? s->tmp : path;
    /* O_EXCL: two recorders never write one file. */
    int fd = open(target, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create trace '%s': %s", target, strerror(errno));
        goto fail;
    }
    close(fd);
    /* The file is new: a -wal or -shm beside it is left from an earlier
     * file of that name (a killed writer) and would be taken for its own. */
    char side[PATH_MAX + 8];
    snprintf(side, sizeof(side), "%s-wal", target);
    unlink(side);
    snprintf(side, sizeof(side), "%s-shm", target);
    unlink(side);
    if (sqlite3_open_v2(target, &s->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot open trace '%s': %s", target, sqlite3_errmsg(s->db));
        goto fail_unlink;
    }
    ls_events_register(s->db);
    /* 16 KiB pages (before the first write fixes the size): the recorder's
     * writes are appends, and SQLite's cost per page -- a WAL frame, a
     * checkpoint write, an overflow page of a 35 KB chunk -- is most of
     * theirs (tracer/README.md). */
    if (exec(s, "PRAGMA page_size=16384; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;") < 0 ||
        exec(s, ls_schema_sql) < 0 || exec(s, ls_derived_sql) < 0 || exec(s, "BEGIN") < 0 ||
        fill_names(s) < 0)
        goto fail_db;
    char werr[256];
    s->events = ls_chunkw_new(s->db, "main", werr, sizeof(werr));
    if (!s->events)
        snprintf(s->err, sizeof(s->err), "%s", werr);
    /* A snapshot record (preexisting) never overwrites a task whose
     * creation is known; it does fill in a placeholder row (created_ns
     * NULL) made for a task seen before its snapshot. */
    s->ins_task = store_prepare(s,
        "INSERT INTO tasks(id,loop_id,parent_id,name,function,function_addr,created_ns,preexisting) "
        "VALUES(?,?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET name=excluded.name, "
        "parent_id=excluded.parent_id, function=excluded.function, "
        "function_addr=excluded.function_addr, created_ns=excluded.created_ns, "
        "preexisting=excluded.preexisting "
        "WHERE NOT (excluded.preexisting AND tasks.created_ns IS NOT NULL)");
    s->ins_unknown = store_prepare(s,
        "INSERT OR IGNORE INTO tasks(id,loop_id,name,preexisting) VALUES(?,?,'?',1)");
    s->ins_named = store_prepare(s,
        "INSERT OR IGNORE INTO tasks(id,loop_id,name,preexisting) VALUES(?,?,?,0)");
    s->ins_window = store_prepare(s,
        "INSERT OR REPLACE INTO loop_windows(loop_id,start_ns,end_ns,"
        "iterations,wait_ns,busy_ns,max_busy_ns) VALUES(?,?,?,?,?,?,?)");
    s->ins_hist = store_prepare(s,
        "INSERT OR REPLACE INTO iteration_hist(loop_id,lo_ns,hi_ns,count,"
        "busy_ns) VALUES(?,?,?,?,?)");
    s->fin_task = store_prepare(s,
        "INSERT INTO tasks(id,loop_id,name,ended_ns,final_state,error,preexisting) "
        "VALUES(?,?,'?',?,?,?,1) ON CONFLICT(id) DO UPDATE SET ended_ns=excluded.ended_ns, "
        "final_state=excluded.final_state, error=excluded.error");
    s->ins_loop = store_prepare(s,
        "INSERT OR IGNORE INTO loops(id,pid,tid,started_ns) VALUES(?,?,?,?)");
    s->stop_loop = store_prepare(s, "UPDATE loops SET stopped_ns=? WHERE id=?");
    s->ins_meta = store_prepare(s, "INSERT OR REPLACE INTO meta(key,value) VALUES(?,?)");
    s->ins_proc = store_prepare(s,
        "INSERT OR REPLACE INTO processes(id,pid,parent_pid,binary,mode,runtime,attached_ns,"
        "ended_ns,end_reason) VALUES(?,?,?,?,?,?,?,?,?)");
    s->ins_stack = store_prepare(s, "INSERT INTO stacks(id, depth) VALUES(?,?)");
    s->ins_frame = store_prepare(s,
        "INSERT INTO frames(stack_id,depth,address,function,file,line,module) "
        "VALUES(?,?,?,?,?,?,?)");
    s->ins_block = store_prepare(s,
        "INSERT INTO blocking(loop_id,task_id,start_ns,dur_ns,kind,syscall,"
        "stack_id) VALUES(?,?,?,?,?,?,?)");
    s->leak_task = store_prepare(s, "UPDATE tasks SET leak = ? WHERE id = ?");
    s->ins_await = store_prepare(s,
        "INSERT OR REPLACE INTO await_stacks(task_id,ts_ns,stack_id) VALUES(?,?,?)");
    if (!s->ins_await ||!s->events || !s->ins_task || !s->fin_task || !s->ins_loop ||
        !s->stop_loop || !s->ins_meta || !s->ins_stack || !s->ins_frame || !s->ins_block ||
        !s->leak_task || !s->ins_unknown || !s->ins_named || !s->ins_window ||
        !s->ins_hist || !s->ins_proc)
        goto fail_db;
    /* Who writes it: while this process lives, a viewer leaves the trace
     * as it is (viewer/complete.c); once it is gone without end_ns, the
     * recording was cut short. */
    ls_store_meta(s, LS_META_RECORDER_PID, "%d", (int)getpid());
    char state;
    unsigned long long start = 0;
    ls_proc_stat(0, &state, &start);
    ls_store_meta(s, LS_META_RECORDER_START, "%llu", start);
    return s;
fail_db:
    snprintf(err, errlen, "cannot initialise trace '%s': %s", target, s->err);
fail_unlink:
    sqlite3_close(s->db);
    s->db = NULL;
    unlink_trace(target);             /* a full disk leaves its -wal and -shm */
fail:
    free(s->path);
    free(s->tmp);
    free(s);
    return NULL;
}

/* Bind a string the target chose (task names, symbols, paths, command
 * lines): stored as valid UTF-8 of at most LS_TEXT_MAX bytes, each invalid
 * byte (and NUL) replaced by U+FFFD, so every reader gets well-formed text. */
#define LS_TEXT_MAX 4096
static void bind_text(sqlite3_stmt *st, int i, const char *v, size_t n)
{
    uint8_t out[LS_TEXT_MAX + 4];
    size_t o = 0;
    const uint8_t *p = (const uint8_t *)v;
    for (size_t k = 0; k < n && o + 4 <= LS_TEXT_MAX;) {
        uint8_t c = p[k];
        size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
                   : (c & 0xf8) == 0xf0 ? 4 : 0;
        bool ok = c != 0 && len > 0 && k + len <= n;
        for (size_t j = 1; ok && j < len; j++)
            ok = (p[k + j] & 0xc0) == 0x80;
        if (ok && len > 1) {          /* no overlong forms, surrogates, > U+10FFFF */
            uint32_t cp = c & (0x7f >> len);
            for (size_t j = 1; j < len; j++)
                cp = cp << 6 | (p[k + j] & 0x3f);
            ok = cp >= (len == 2 ? 0x80u : len == 3 ? 0x800u : 0x10000u) && cp <= 0x10ffff &&
                 (cp < 0xd800 || cp > 0xdfff);
        }
        if (ok) {
            memcpy(out + o, p + k, len);
            o += len;
            k += len;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            k++;
        }
    }
    sqlite3_bind_text(st, i, (const char *)out, (int)o, SQLITE_TRANSIENT);
}

static void bind_text_or_null(sqlite3_stmt *st, int i, const char *v)
{
    if (v)
        bind_text(st, i, v, strlen(v));
    else
        sqlite3_bind_null(st, i);
}

void ls_store_meta(ls_store *s, const char *key, const char *fmt, ...)
{
    if (!s)
        return;
    char *v = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&v, fmt, ap) < 0)
        v = NULL;
    va_end(ap);
    sqlite3_bind_text(s->ins_meta, 1, key, -1, SQLITE_TRANSIENT);
    bind_text_or_null(s->ins_meta, 2, v ? v : "");
    step(s, s->ins_meta);
    free(v);
}

/* The chunk writer failed: its error, once. */
static void events_failed(ls_store *s, int rc)
{
    if (rc != SQLITE_OK && !s->err[0])
        snprintf(s->err, sizeof(s->err), "%s", sqlite3_errmsg(s->db));
}

void ls_store_event(ls_store *s, int64_t ts, uint64_t loop, uint64_t task, int kind,
                    int64_t reason, int64_t arg0, int64_t arg1)
{
    if (!s)
        return;
    /* task_id 0 means "no task": NULL */
    ls_ev e = { .v = { ts, (int64_t)loop, (int64_t)task, kind, reason, arg0, arg1 },
                .null = task ? 0 : 1u << LS_EV_TASK };
    events_failed(s, ls_chunkw_add(s->events, &e));
}

void ls_store_loop(ls_store *s, uint64_t loop, uint32_t pid, uint32_t tid, int64_t started)
{
    if (!s)
        return;
    sqlite3_bind_int64(s->ins_loop, 1, (int64_t)loop);
    sqlite3_bind_int64(s->ins_loop, 2, pid);
    sqlite3_bind_int64(s->ins_loop, 3, tid);
    sqlite3_bind_int64(s->ins_loop, 4, started);
    step(s, s->ins_loop);
}

void ls_store_process(ls_store *s, const ls_proc_rec *p)
{
    if (!s)
        return;
    sqlite3_stmt *st = s->ins_proc;
    sqlite3_bind_int64(st, 1, p->id);
    sqlite3_bind_int64(st, 2, p->pid);
    if (p->parent)
        sqlite3_bind_int64(st, 3, p->parent);
    else
        sqlite3_bind_null(st, 3);
    bind_text_or_null(st, 4, p->binary);
    bind_text_or_null(st, 5, p->mode);
    bind_text_or_null(st, 6, p->runtime);
    sqlite3_bind_int64(st, 7, p->attached);
    if (p->ended)
        sqlite3_bind_int64(st, 8, p->ended);
    else
        sqlite3_bind_null(st, 8);
    bind_text_or_null(st, 9, p->end_reason);
    step(s, st);
}

void ls_store_loop_stop(ls_store *s, uint64_t loop, int64_t stopped)
{
    if (!s)
        return;
    sqlite3_bind_int64(s->stop_loop, 1, stopped);
    sqlite3_bind_int64(s->stop_loop, 2, (int64_t)loop);
    step(s, s->stop_loop);
}

void ls_store_task_create(ls_store *s, uint64_t task, uint64_t loop, uint64_t parent,
                          const char *name, size_t name_len, const char *function,
                          uint64_t fn_addr, int64_t created, bool preexisting)
{
    if (!s)
        return;
    sqlite3_stmt *st = s->ins_task;
    sqlite3_bind_int64(st, 1, (int64_t)task);
    sqlite3_bind_int64(st, 2, (int64_t)loop);
    if (parent)
        sqlite3_bind_int64(st, 3, (int64_t)parent);
    else
        sqlite3_bind_null(st, 3);
    bind_text(st, 4, name, name_len);
    bind_text_or_null(st, 5, function);
    sqlite3_bind_int64(st, 6, (int64_t)fn_addr);
    sqlite3_bind_int64(st, 7, created);
    sqlite3_bind_int(st, 8, preexisting);
    step(s, st);
}

void ls_store_task_unknown(ls_store *s, uint64_t task, uint64_t loop)
{
    if (!s)
        return;
    sqlite3_bind_int64(s->ins_unknown, 1, (int64_t)task);
    sqlite3_bind_int64(s->ins_unknown, 2, (int64_t)loop);
    step(s, s->ins_unknown);
}

void ls_store_task_named(ls_store *s, uint64_t task, uint64_t loop, const char *name,
                         size_t name_len)
{
    if (!s)
        return;
    sqlite3_bind_int64(s->ins_named, 1, (int64_t)task);
    sqlite3_bind_int64(s->ins_named, 2, (int64_t)loop);
    bind_text(s->ins_named, 3, name, name_len);
    step(s, s->ins_named);
}

/* Bind n integers to st's parameters 1..n and run it. */
static void step_ints(ls_store *s, sqlite3_stmt *st, const int64_t *v, int n)
{
    for (int i = 0; i < n; i++)
        sqlite3_bind_int64(st, i + 1, v[i]);
    step(s, st);
}

void ls_store_window(ls_store *s, uint64_t loop, int64_t start, int64_t end, uint64_t iterations,
                     uint64_t wait_ns, uint64_t busy_ns, uint64_t max_busy_ns)
{
    if (!s)
        return;
    int64_t v[] = { (int64_t)loop, start, end, (int64_t)iterations, (int64_t)wait_ns,
                    (int64_t)busy_ns, (int64_t)max_busy_ns };
    step_ints(s, s->ins_window, v, 7);
}

void ls_store_hist(ls_store *s, uint64_t loop, int64_t lo, int64_t hi, uint64_t count,
                   uint64_t busy_ns)
{
    if (!s)
        return;
    int64_t v[] = { (int64_t)loop, lo, hi, (int64_t)count, (int64_t)busy_ns };
    step_ints(s, s->ins_hist, v, 5);
}

void ls_store_task_leak(ls_store *s, uint64_t task, int kind)
{
    if (!s)
        return;
    sqlite3_bind_int(s->leak_task, 1, kind);
    sqlite3_bind_int64(s->leak_task, 2, (int64_t)task);
    step(s, s->leak_task);
}

void ls_store_task_finish(ls_store *s, uint64_t task, uint64_t loop, int64_t ended, int state,
                          int64_t error)
{
    if (!s)
        return;
    sqlite3_stmt *st = s->fin_task;
    sqlite3_bind_int64(st, 1, (int64_t)task);
    sqlite3_bind_int64(st, 2, (int64_t)loop);
    sqlite3_bind_int64(st, 3, ended);
    sqlite3_bind_int(st, 4, state);
    sqlite3_bind_int64(st, 5, error);
    step(s, st);
}

void ls_store_await_stack(ls_store *s, uint64_t task, int64_t ts, int64_t stack)
{
    if (!s)
        return;
    int64_t v[] = { (int64_t)task, ts, stack };
    step_ints(s, s->ins_await, v, 3);
}

void ls_store_stack(ls_store *s, int64_t id, int depth)
{
    if (!s)
        return;
    sqlite3_bind_int64(s->ins_stack, 1, id);
    sqlite3_bind_int(s->ins_stack, 2, depth);
    step(s, s->ins_stack);
}

void ls_store_frame(ls_store *s, int64_t stack_id, int depth, uint64_t pc,
                    const struct ls_sym *sym)
{
    if (!s)
        return;
    sqlite3_stmt *st = s->ins_frame;
    sqlite3_bind_int64(st, 1, stack_id);
    sqlite3_bind_int(st, 2, depth);
    sqlite3_bind_int64(st, 3, (int64_t)pc);
    bind_text_or_null(st, 4, sym->function);
    bind_text_or_null(st, 5, sym->file);
    if (sym->line)
        sqlite3_bind_int(st, 6, sym->line);
    else
        sqlite3_bind_null(st, 6);
    bind_text_or_null(st, 7, sym->module);
    step(s, st);
}

void ls_store_blocking(ls_store *s, uint64_t loop, uint64_t task, int64_t start, int64_t dur,
                       int kind, int64_t syscall, int64_t stack_id)
{
    if (!s)
        return;
    sqlite3_stmt *st = s->ins_block;
    sqlite3_bind_int64(st, 1, (int64_t)loop);
    if (task)
        sqlite3_bind_int64(st, 2, (int64_t)task);
    else
        sqlite3_bind_null(st, 2);
    sqlite3_bind_int64(st, 3, start);
    sqlite3_bind_int64(st, 4, dur);
    sqlite3_bind_int(st, 5, kind);
    if (syscall >= 0)
        sqlite3_bind_int64(st, 6, syscall);
    else
        sqlite3_bind_null(st, 6);
    if (stack_id > 0)
        sqlite3_bind_int64(st, 7, stack_id);
    else
        sqlite3_bind_null(st, 7);
    step(s, st);
}

void ls_store_syscall_stat(ls_store *s, uint64_t loop, uint32_t tid, uint32_t nr, uint64_t count,
                           uint64_t total_ns, uint64_t max_ns)
{
    if (!s)
        return;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO syscall_stats(loop_id,tid,nr,count,"
                                  "total_ns,max_ns) VALUES(?,?,?,?,?,?)", -1, &st, NULL) != SQLITE_OK)
        return;
    if (loop)
        sqlite3_bind_int64(st, 1, (int64_t)loop);
    else
        sqlite3_bind_null(st, 1);
    sqlite3_bind_int64(st, 2, tid);
    sqlite3_bind_int64(st, 3, nr);
    sqlite3_bind_int64(st, 4, (int64_t)count);
    sqlite3_bind_int64(st, 5, (int64_t)total_ns);
    sqlite3_bind_int64(st, 6, (int64_t)max_ns);
    step(s, st);
    sqlite3_finalize(st);
}

int ls_store_tick(ls_store *s, int64_t now)
{
    if (!s || now - s->last_commit < LS_COMMIT_NS)
        return 0;
    s->last_commit = now;
    events_failed(s, ls_chunkw_flush(s->events));
    return exec(s, "COMMIT; BEGIN");
}

sqlite3 *ls_store_db(ls_store *s) { return s ? s->db : NULL; }
void ls_store_flush(ls_store *s)
{
    if (s)
        events_failed(s, ls_chunkw_flush(s->events));
}
const char *ls_store_error(const ls_store *s) { return s->err; }

uint64_t ls_store_size(const ls_store *s)
{
    if (!s)
        return 0;
    const char *target = s->tmp ? s->tmp : s->path;
    char wal[PATH_MAX + 8];
    struct stat st;
    uint64_t n = 0;
    if (stat(target, &st) == 0)
        n += (uint64_t)st.st_size;
    snprintf(wal, sizeof(wal), "%s-wal", target);
    if (stat(wal, &st) == 0)
        n += (uint64_t)st.st_size;
    return n;
}

static void finalize_all(ls_store *s)
{
    ls_chunkw_free(s->events);
    s->events = NULL;
    sqlite3_stmt *sts[] = { s->ins_task, s->fin_task,
                            s->ins_loop, s->stop_loop, s->ins_meta, s->ins_stack,
                            s->ins_frame, s->ins_block, s->leak_task,
                            s->ins_unknown, s->ins_named, s->ins_window, s->ins_hist,
                            s->ins_await, s->ins_proc };
    for (size_t i = 0; i < sizeof(sts) / sizeof(sts[0]); i++)
        sqlite3_finalize(sts[i]);
}

void ls_store_abort(ls_store *s)
{
    if (!s)
        return;
    const char *target = s->tmp ? s->tmp : s->path;
    finalize_all(s);
    sqlite3_close(s->db);
    unlink_trace(target);
    free(s->path);
    free(s->tmp);
    free(s);
}

int ls_store_finish(ls_store *s, char *err, size_t errlen)
{
    int rc = 0;
    ls_store_flush(s);
    if (exec(s, "COMMIT") < 0)     /* derived tables: model/derive.c, done by the caller */
        rc = -1;
    finalize_all(s);
    /* A plain rollback-journal file: readable from read-only places. */
    if (rc == 0 && exec(s, "PRAGMA journal_mode=DELETE") < 0)
        rc = -1;
    if (rc < 0)
        snprintf(err, errlen, "cannot finish trace '%s': %s", s->tmp ? s->tmp : s->path, s->err);
    if (sqlite3_close(s->db) != SQLITE_OK && rc == 0) {
        snprintf(err, errlen, "cannot close trace '%s'", s->path);
        rc = -1;
    }
    if (rc == 0 && s->tmp && rename(s->tmp, s->path) < 0) {
        snprintf(err, errlen, "cannot replace '%s': %s (the new trace is '%s')", s->path,
                 strerror(errno), s->tmp);
        rc = -1;
    }
    free(s->path);
    free(s->tmp);
    free(s);
    return rc;
}
