/*
 * complete.c -- a trace is completed on first read (trace.h,
 * ls_trace_complete).
 *
 * The recorder derives a trace's derived tables (model/derived.sql) and
 * its indexes when it stops cleanly.  A trace without them -- the recorder
 * was killed, crashed or ran out of disk, or an older loopscope wrote it --
 * is derived here, once, from its events, by the same code
 * (model/derive.h), and the result is written into the file so the next
 * command finds it done.  A file this user cannot write is completed in a
 * temporary copy instead, each time.  A trace whose recorder is still
 * running (meta recorder_pid, recorder_start) is left alone: the commands
 * read what it has committed so far.
 *
 * Two viewers completing the same file at once take turns (flock on the
 * file, independent of SQLite's own locks), and the second finds the work
 * done.
 */
#define _GNU_SOURCE
#include "trace.h"
#include "evchunk.h"
#include "output.h"
#include "derive.h"
#include "meta.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
    struct stat sb;
    if (in < 0 || fstat(in, &sb) < 0)
        goto out;
    out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0)
        goto out;
    for (off_t off = 0; off < sb.st_size;) {
        ssize_t k = sendfile(out, in, &off, (size_t)(sb.st_size - off));
        if (k <= 0)
            goto out;
    }
    rc = 0;
out:
    if (in >= 0)
        close(in);
    if (out >= 0 && close(out) < 0)
        rc = -1;
    return rc;
}

/* Derive the trace at path in place (it must be writable). */
static int derive_file(const char *path, char *err, size_t errlen)
{
    sqlite3 *db = NULL;
    int rc = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
        ls_events_register(db) != SQLITE_OK) {
        snprintf(err, errlen, "%s", sqlite3_errmsg(db));
        goto out;
    }
    sqlite3_busy_timeout(db, 5000);
    /* The derivation's lookups jump around the file: a page cache of up
     * to 64 MiB keeps them off the disk (SQLite's default is 2 MiB). */
    sqlite3_exec(db, "PRAGMA cache_size = -65536", NULL, NULL, NULL);
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "%s", sqlite3_errmsg(db));
        goto out;
    }
    /* Done meanwhile by another viewer? */
    if (ls_db_meta_int(db, LS_META_MODEL_VERSION, -1) == LS_MODEL_VERSION) {
        rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
        goto out;
    }
    int64_t end = ls_db_meta_int(db, LS_META_END_NS, INT64_MIN);
    if (end == INT64_MIN)
        end = ls_derive_last_time(db);
    if (ls_derive_all(db, end, SIZE_MAX / 2, err, errlen) < 0) {
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        goto out;
    }
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(db, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "%s", sqlite3_errmsg(db));
        goto out;
    }
    rc = 0;
out:
    if (db && sqlite3_close(db) != SQLITE_OK && rc == 0) {
        snprintf(err, errlen, "cannot close it");
        rc = -1;
    }
    return rc;
}

const char *ls_trace_complete(ls_trace *t, char **tmp_path)
{
    *tmp_path = NULL;
    if (ls_db_meta_int(t->db, LS_META_MODEL_VERSION, -1) == LS_MODEL_VERSION)
        return t->path;
    if (ls_recorder_alive(t->db)) {
        t->in_progress = true;
        return t->path;
    }
    char err[512] = "";
    /* Our reading connection goes first: after a crashed writer it holds
     * the WAL's recovery, and the deriving connection would find the
     * database locked.  ls_trace_open reopens what was completed. */
    sqlite3_close(t->db);
    t->db = NULL;
    int fd = open(t->path, O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        int rc = flock(fd, LOCK_EX);
        if (rc == 0)
            rc = derive_file(t->path, err, sizeof(err));
        close(fd);                            /* and the lock with it */
        if (rc < 0) {
            ls_error("cannot complete trace '%s': %s", t->path, err);
            return NULL;
        }
        t->completed = true;
        return t->path;
    }
    if (errno != EACCES && errno != EROFS && errno != EPERM) {
        ls_error("cannot complete trace '%s': %s", t->path, strerror(errno));
        return NULL;
    }
    /* Not ours to write: complete a private copy. */
    const char *dir = getenv("TMPDIR");
    char *copy = NULL;
    if (asprintf(&copy, "%s/loopscope-XXXXXX", dir && *dir ? dir : "/tmp") < 0)
        return NULL;
    int cfd = mkstemp(copy);
    char wal_from[4096], wal_to[4096];
    snprintf(wal_from, sizeof(wal_from), "%s-wal", t->path);
    snprintf(wal_to, sizeof(wal_to), "%s-wal", copy);
    /* A killed recorder's last commits may be in the -wal file still. */
    if (cfd < 0 || (close(cfd), unlink(copy), copy_file(t->path, copy)) < 0 ||
        (access(wal_from, F_OK) == 0 && copy_file(wal_from, wal_to) < 0) ||
        derive_file(copy, err, sizeof(err)) < 0) {
        unlink(wal_to);
        ls_error("cannot complete a copy of read-only trace '%s' in '%s': %s", t->path, copy,
                 err[0] ? err : strerror(errno));
        unlink(copy);
        free(copy);
        return NULL;
    }
    *tmp_path = copy;
    t->completed = true;
    return copy;
}
