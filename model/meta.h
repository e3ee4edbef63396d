/*
 * meta.h -- reading a trace's meta table, and the recorder's identity in it.
 *
 * The recorder writes meta recorder_pid and recorder_start (the start time
 * of its process, field 22 of /proc/PID/stat) so that a reader can tell a
 * trace still being recorded from one whose recorder is gone (cut short).
 * Both sides use these functions on a raw connection.
 */
#ifndef LS_MODEL_META_H
#define LS_MODEL_META_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

/* meta value of key as an integer; dflt when absent, empty, not a whole
 * number, or out of range. */
int64_t ls_db_meta_int(sqlite3 *db, const char *key, int64_t dflt);

/* Process pid's state letter (field 3) and start time (field 22, clock
 * ticks since boot) from /proc/PID/stat; pid 0 is this process.  False if
 * it cannot be read (gone, or not ours to see). */
bool ls_proc_stat(int pid, char *state, unsigned long long *start);

/* The trace's recorder still runs: meta recorder_pid names a live process
 * (not a zombie: killed, not yet reaped) that started at recorder_start,
 * so a reused pid does not count. */
bool ls_recorder_alive(sqlite3 *db);

#endif
