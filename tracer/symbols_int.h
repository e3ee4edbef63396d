/*
 * symbols_int.h -- private to symbols, the symbolization of symbols.h
 * (symbols.c, symbols_maps.c, symbols_dwarf.c, symbols_perfmap.c): the
 * bounds, the handle (struct ls_syms: the cache, the executable mappings,
 * the perf map), two small helpers, and the functions one of these files
 * calls in another.  Users include symbols.h only.  Depends on symbols.h
 * and elfutils' libdwfl.
 */
#ifndef LOOPSCOPE_SYMBOLS_INT_H
#define LOOPSCOPE_SYMBOLS_INT_H

#include "symbols.h"

#include <elfutils/libdwfl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#define LS_SYM_CACHE 4096     /* slots, power of two */

/* Executable mappings kept from /proc/PID/maps. */
#define LS_MAPS_MAX 16384
#define LS_MAPS_PATHS (4u << 20)        /* bytes of path names kept */
#define LS_MAPS_READ (64u << 20)        /* bytes of /proc/PID/maps read */
#define LS_MAPS_REREAD_NS 100000000ll   /* at most every 100 ms on a miss */
/* ELF files opened while the process lives, through its
 * /proc/PID/map_files (the very file it maps, deleted or replaced since,
 * in its mount namespace or not) and held by libdwfl: a name is found
 * after the process has gone.  Past this many, the others are opened by
 * path when first needed. */
#define LS_ELF_KEEP 512
/* The keeper thread (symbols.c, ls_syms_watch): how often it looks at
 * the process's executable memory size (/proc/PID/status), fast for a
 * while after it starts and after a change (a program starting maps its
 * libraries), and the least and most time between two reads of its maps
 * the keeper makes while reads find no file mapping changed (doubling
 * from the least: JIT code alone changes that size all the time).  An
 * exec, and the first change after a read that found one, are read at
 * once. */
#define LS_KEEP_FAST_NS 2000000ll        /* 2 ms */
#define LS_KEEP_FAST_FOR_NS 1000000000ll /* for 1 s */
#define LS_KEEP_SLOW_NS 200000000ll      /* 200 ms: an agent keeps one per process */
#define LS_KEEP_GAP_MIN_NS 20000000ll
#define LS_KEEP_GAP_MAX_NS 1000000000ll

/* The perf map (hostile input: every bound here). */
#define LS_PM_READ_MAX (64ull << 20)    /* bytes read per process */
#define LS_PM_ENTRIES_MAX 1000000u      /* entries accepted per process */
#define LS_PM_NAME_MAX 4096             /* bytes of a name, NUL included */
#define LS_PM_LINE_MAX (LS_PM_NAME_MAX + 64)
#define LS_PM_SIZE_MAX (256ull << 20)   /* one code object */
#define LS_PM_ADDR_END 0x0000800000000000ull   /* x86-64 user space */
#define LS_PM_RECENT_MAX 16384          /* recent segments before a merge */
#define LS_PM_CHUNK (256u << 10)
#define LS_PM_REOPEN_NS 1000000000ll    /* retry a missing map once a second */

struct ls_map {
    uint64_t start, end, off;
    uint32_t path;                      /* offset in maps_paths, or LS_NO_PATH */
};
#define LS_NO_PATH UINT32_MAX           /* anonymous (or path not kept) */
#define LS_ANON_PATH (UINT32_MAX - 1)

struct ls_seg {
    uint64_t start, end;
    uint32_t name;                      /* offset in the name pool */
};

struct ls_perfmap {
    int fd;
    int state;                          /* LS_PERFMAP_* */
    bool tried;
    int64_t last_try_ns;
    char path[128];
    char why[160];                      /* one line, for the status */
    uint64_t off;                       /* file offset read up to */
    uint64_t bytes_read;
    uint32_t entries, skipped;
    bool budget_hit;
    uint32_t gen;                       /* bumped when segments change */
    /* the line being read (carried over between reads) */
    char line[LS_PM_LINE_MAX];
    size_t line_len;
    bool line_long;
    /* names, NUL-terminated */
    char *pool;
    size_t pool_len, pool_cap;
    /* newest entries first: recent (small) then main, each sorted, disjoint */
    struct ls_seg *recent, *main;
    size_t nrecent, nmain;
    /* entries parsed from the current read, in file order */
    struct ls_seg *batch;
    size_t nbatch, batch_cap;
    char *chunk;
    char *override;                     /* ls_syms_set_perfmap */
};

struct ls_syms {
    Dwfl *dwfl;
    pid_t pid;
    bool attached;            /* dwfl_attach_state done */
    /* Taken by every entry point (symbols.h) and by the keeper thread,
     * which refreshes what is below while the recorder's thread (idle
     * priority, maybe starved) cannot. */
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* the keeper's sleep, cut short to stop */
    pthread_t keeper;
    bool keeping, stop;
    uint64_t refreshes;       /* libdwfl's view made again (files mapped or unmapped) */
    unsigned elf_kept;        /* ELF files opened through map_files in this view */
    uint64_t files_hash;      /* of the file-backed executable mappings it was made from */
    bool gone;                /* the last read found nothing mapped: exited */
    bool cache_stale;         /* emptied at the next lookup */
    /* the sample being unwound */
    pid_t tid;
    const uint64_t *regs;
    const uint8_t *stack;
    size_t stack_len;
    uint64_t *pcs;
    int npcs, max;
    /* executable mappings, sorted by start */
    struct ls_map *maps;
    size_t nmaps;
    char *maps_paths;
    size_t maps_paths_len;
    int64_t maps_read_ns;
    /* the read in progress, swapped in only if it found mappings (a
     * zombie's maps are empty: the last view of the living is kept) */
    struct ls_map *next_maps;
    size_t next_nmaps;
    char *next_paths;
    size_t next_paths_len;
    struct ls_perfmap pm;
    uint64_t jit_frames, jit_unnamed;
    struct {
        uint64_t addr;
        ls_sym sym;
        int used;
        int jit;              /* resolved from the perf map (or unnamed anon code) */
        uint32_t gen;         /* pm.gen then */
    } cache[LS_SYM_CACHE];
    size_t ncached;           /* used slots */
};

enum { LS_PERFMAP_UNTRIED, LS_PERFMAP_OK, LS_PERFMAP_MISSING, LS_PERFMAP_REFUSED };

static inline int64_t ls_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static inline char *ls_dup(const char *p)
{
    return p ? strdup(p) : NULL;
}

/* symbols.c: forget every cached symbol; libdwfl's view of the process
 * made again (modules from its maps, their ELF files opened now); the
 * handle whose lookup runs in this thread (for the find_elf callback). */
void ls_cache_clear(ls_syms *s);
bool ls_dwfl_rebuild(ls_syms *s);
extern __thread ls_syms *ls_cur;

/* symbols_maps.c: the process's executable mappings and which code an
 * address is in.  ls_maps_read: read them again (false: nothing mapped,
 * the process gone; the last view is kept) and, if its file mappings
 * changed, libdwfl's view too.  ls_map_of: an executable mapping of file
 * `path` within [lo, hi). */
bool ls_hex(const char **p, const char *end, uint64_t *v);
bool ls_maps_read(ls_syms *s);
const struct ls_map *ls_map_of(const ls_syms *s, const char *path, uint64_t lo, uint64_t hi);
ls_sym ls_resolve(ls_syms *s, uint64_t addr, int *jit);

/* symbols_dwarf.c: ELF and DWARF lookups in one module (libdwfl). */
ls_sym ls_resolve_mod(Dwfl_Module *mod, uint64_t addr);
bool ls_mod_addr(Dwfl_Module *mod, uint64_t off, uint64_t *maddr);
bool ls_mod_contains(Dwfl_Module *mod, uint64_t addr);
struct ls_mod_find { const char *name; Dwfl_Module *mod; };

int ls_mod_by_name_cb(Dwfl_Module *mod, void **user, const char *name, Dwarf_Addr start,
                      void *arg);

/* symbols_perfmap.c: the perf map of JIT code. */
void ls_pm_open(ls_syms *s);
bool ls_pm_poll(ls_syms *s);
void ls_pm_ensure(ls_syms *s);
const char *ls_pm_name(ls_syms *s, uint64_t addr);
void ls_pm_free(struct ls_perfmap *pm);
void ls_jit_name(const char *raw, ls_sym *r);

#endif
