/*
 * pystack_int.h -- private to pystack, the CPython stacks of the generic
 * loop mode (pystack.c, pystack_detect.c, pystack_tables.c; PYTHON.md):
 * the bounds, the handle (struct ls_py with its code-object cache) and the
 * functions one of these files calls in another.  Users include pystack.h
 * only.  Depends on pystack.h.
 */
#ifndef LOOPSCOPE_PYSTACK_INT_H
#define LOOPSCOPE_PYSTACK_INT_H

#include "pystack.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define LS_PY_STR_MAX 4095          /* bytes of a resolved string */
#define LS_PY_LINETABLE_MAX 65536   /* bytes of a line table read */
#define LS_PY_CACHE 4096            /* code objects cached (power of two) */
#define LS_PY_CACHE_BYTES (32u << 20) /* line-table bytes cached */
#define LS_PY_CODE_HDR 256          /* bytes of a code object read */

/* ---- the handle ---- */

struct ls_py_code {
    uint64_t addr;                  /* 0: empty slot */
    uint64_t name, filename, linetable;
    int32_t firstlineno;
    char *function, *file;
    uint8_t *lt;
    uint32_t lt_len;
};

/* What _Py_DebugOffsets publishes (3.13+) beyond struct ls_py_cfg's
 * fields, for the task census; 0 where the version does not publish it. */
struct ls_py_dbg {
    bool ok;                        /* read and checked */
    uint32_t imports_modules;       /* PyInterpreterState.imports.modules */
    uint32_t stackpointer;          /* _PyInterpreterFrame.stackpointer (3.14+) */
    uint32_t gi_iframe;             /* PyGenObject.gi_iframe (3.14+) */
    uint32_t gi_frame_state;        /* PyGenObject.gi_frame_state (3.14+) */
};

struct ls_py {
    pid_t pid;
    struct ls_py_cfg cfg;
    struct ls_py_dbg dbg;
    uint64_t asyncio_debug;         /* 3.14+: _asyncio's .AsyncioDebug section in the
                                     * interpreter's file (built in), 0: look in the
                                     * module's (ls_py_asyncio_debug) */
    uint64_t bytes_type;
    uint64_t hrun;                  /* Handle._run's code, once seen (user-space walks) */
    struct ls_py_code cache[LS_PY_CACHE];
    size_t ncached, cached_bytes;
    char function[LS_PY_STR_MAX + 1], file[LS_PY_STR_MAX + 1];
    char task[4 * LS_PY_TASK_NAME + 32];
};

/* pystack.c: size bytes at addr of process pid, with process_vm_readv;
 * -1 unless all were read (addr below 4096 or wrapping: -1). */
int ls_py_read(pid_t pid, void *dst, size_t size, uint64_t addr);

/* pystack_detect.c: one line of /proc/PID/maps; ls_py_maps calls fn for
 * each (at most 65536) until fn returns non-zero: that value (> 0), else 0;
 * -1 when the file cannot be opened. */
struct ls_py_map {
    uint64_t start, end, off;
    unsigned long ino;
    unsigned dmaj, dmin;
    char perms[8];                  /* "r-xp" */
    char path[PATH_MAX];            /* "" for an anonymous mapping */
};
int ls_py_maps(pid_t pid, int (*fn)(const struct ls_py_map *, void *), void *arg);

/* A path under which this process can open the file of mapping m of
 * process pid, whatever root or mount namespace pid has (maps names a
 * chrooted process's files from the reader's root, a container's from its
 * own): /proc/PID/map_files/START-END (needs CAP_SYS_ADMIN), else
 * /proc/PID/root/PATH, else PATH.  Into buf; -1 when none can be opened. */
int ls_py_map_file(pid_t pid, const struct ls_py_map *m, char *buf, size_t cap);

/* pystack_detect.c: the address of _asyncio's debug offsets (3.14+: its
 * .AsyncioDebug section) in the target, in the interpreter's file or in a
 * mapped _asyncio extension module; 0 when not (yet) mapped. */
uint64_t ls_py_asyncio_debug(ls_py *py);

/* pystack.c: the str object at addr as UTF-8 (malloc'd, at most
 * LS_PY_STR_MAX bytes), NULL if it is not a compact str of this process. */
char *ls_py_str(ls_py *py, uint64_t addr);

/* pystack_tables.c: the verified offsets of CPython 3.<minor> into *c
 * (the target's addresses left 0); -1 if the version has no table. */
int ls_py_table(unsigned minor, struct ls_py_cfg *c);

#endif
