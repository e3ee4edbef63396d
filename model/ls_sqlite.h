/*
 * ls_sqlite.h -- SQLite's API for the files of model/ that the loadable
 * extension (loopscope_events.so, model/CMakeLists.txt) is built from too:
 * in the extension every call goes through the table SQLite hands it.
 */
#ifndef LS_MODEL_SQLITE_H
#define LS_MODEL_SQLITE_H
#ifdef LS_SQLITE_EXTENSION
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT3
#else
#include <sqlite3.h>
#endif
#endif
