/*
 * meta.c -- a trace's meta values and the recorder's identity (meta.h).
 */
#include "meta.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t ls_db_meta_int(sqlite3 *db, const char *key, int64_t dflt)
{
    sqlite3_stmt *st = NULL;
    int64_t v = dflt;
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW) {
            const char *s = (const char *)sqlite3_column_text(st, 0);
            char *end;
            errno = 0;
            long long x = s ? strtoll(s, &end, 10) : 0;
            if (s && *s && !*end && !errno)
                v = x;
        }
    }
    sqlite3_finalize(st);
    return v;
}

bool ls_proc_stat(int pid, char *state, unsigned long long *start)
{
    char path[64], buf[1024];
    if (pid)
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    else
        snprintf(path, sizeof(path), "/proc/self/stat");
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');              /* comm may hold spaces and ')' */
    if (!p || p[1] != ' ' || !p[2])
        return false;
    *state = p[2];
    /* after ")": state is field 3, starttime field 22 */
    int field = 2;
    for (char *q = p + 1; *q; q++)
        if (*q == ' ' && ++field == 22) {
            *start = strtoull(q + 1, NULL, 10);
            return true;
        }
    return false;
}

bool ls_recorder_alive(sqlite3 *db)
{
    int64_t pid = ls_db_meta_int(db, LS_META_RECORDER_PID, -1);
    int64_t start = ls_db_meta_int(db, LS_META_RECORDER_START, -1);
    char state;
    unsigned long long st;
    if (pid <= 0 || pid > 4194304 || start < 0 || !ls_proc_stat((int)pid, &state, &st))
        return false;
    return state != 'Z' && state != 'X' && st == (unsigned long long)start;
}
