/*
 * pystack_tasks.c -- part of pystack (CPython, PYTHON.md): the asyncio
 * task census (pytasks.h).  From _PyRuntime (ls_py_detect): the first
 * interpreter's sys.modules -> the module asyncio.tasks -> the set of all
 * tasks (3.10/3.11 `_all_tasks`, 3.12/3.13 `_scheduled_tasks` and
 * `_eager_tasks`: the C module's own objects, which asyncio.tasks imports)
 * and the running tasks (`_current_tasks`, {loop: task}).  Each task's
 * fields, then its await chain: the coroutine's frame, the object on top of
 * its value stack while it is suspended in an await (what _PyGen_yf
 * returns), down to a future.  Why it waits: the awaited object's type
 * (Task, _GatheringFuture), else the innermost frame of asyncio's own
 * modules (Lock.acquire, Queue.get, sleep, ...), else the future's first
 * callback (an executor's future), else "future".
 *
 * The target runs while this reads: every object is type-checked (types
 * are classified once by address from their tp_name and cached), every
 * count is bounded (dict entries, set slots, tasks, frames), an await chain
 * that comes back to itself ends, and nothing read is trusted beyond the
 * one census.  Reads are batched: process_vm_readv with up to 1024 pieces.
 */
#define _GNU_SOURCE
#include "pytasks.h"
#include "pystack_int.h"
#include "evl-probes.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#define PYT_DICT_MAX 65536          /* entries of a dict scanned */
#define PYT_SET_MAX (1u << 18)      /* slots of a set read */
#define PYT_TYPES 256               /* types classified (cache, power of two) */
#define PYT_TASK_READ 192           /* bytes of a Task read (3.10: sizeof(TaskObj)) */
#define PYT_IOV 1024
#define PYT_THREADS 4096            /* 3.14+: thread states whose task lists are read */
#define PYT_CORO_WIN (64 + 128 + 8 * LS_PYT_SLOTS) /* bytes of a coroutine read at once */
/* Steps of all the await chains of one census (a coroutine or FutureIter
 * each, ~7 reads), each task allowed its share of what is left: tasks that
 * all lead into one long or looping chain cost PYT_CENSUS_STEPS steps (a
 * few seconds), not LS_PYT_MAX_TASKS x LS_PYT_WALK (an hour); each of
 * 65536 tasks still walks at least 8 coroutines. */
#define PYT_CENSUS_STEPS (1u << 19)

/* type offsets, the same in 3.10-3.13 (x86-64) */
enum {
    TP_NAME = 24, TP_BASICSIZE = 32, TP_FLAGS = 168, TP_BASE = 256, TP_DICTOFFSET = 288,
    TP_INIT = 296, TP_FINALIZE = 392, FUNC_CODE = 48, WR_OBJECT = 16, FUTITER_FUTURE = 16,
    SET_MASK = 32, SET_TABLE = 40, MD_DICT = 16, DICT_KEYS = 32, DICT_VALUES = 40,
};
#define TPF_INLINE_VALUES (1ul << 2)    /* 3.13 */
#define TPF_MANAGED_DICT (1ul << 4)     /* 3.11+ */

/* What a type is, for the census. */
enum { T_UNKNOWN, T_OTHER, T_TASK, T_FUTURE, T_GATHER, T_FUTITER, T_CORO, T_GEN, T_WEAKREF,
       T_SET, T_DICT, T_STR, T_INT, T_FUNC, T_MODULE };

/* Where one minor version keeps what the census reads (gdb on pyenv's
 * DWARF, like pystack_tables.c; checked by test_pytasks.py). */
struct pyt_layout {
    uint32_t interp_modules;        /* PyInterpreterState.modules / .imports.modules */
    unsigned minor;
    uint32_t ht_cached_keys;
    uint32_t values_off;            /* PyDictValues.values */
    /* FutureObj / TaskObj */
    uint32_t t_loop, t_callback0, t_exception, t_state, t_log_tb, t_log_tb_bit, t_waiter,
        t_coro, t_name, t_must_cancel, t_must_cancel_bit, t_ncancels, t_log_destroy,
        t_log_destroy_bit;
    /* coroutines and their frames */
    uint32_t cr_frame;              /* 3.10: cr_frame (a pointer); 3.11+: cr_iframe (inline) */
    uint32_t cr_state;              /* 3.11+: cr_frame_state (int8) */
    int8_t susp_lo, susp_hi;        /* suspended frame states */
    int8_t st_done;                 /* 3.11+: the first state of a finished frame */
    uint8_t yf_depth;               /* 3.11+: the awaited object's slot from the stack's top
                                     * (3.15 keeps the value sent on top of it) */
    uint32_t f_code, f_instr, f_localsplus, f_stacktop, f_valuestack, f_stackdepth, f_state;
    uint32_t f_stackptr;            /* 3.14+: stackpointer (a pointer), not a count */
    /* 3.14+: the task set is a list per thread (llist_node task_node) */
    uint32_t t_node, ts_tasks_head, ts_running_task, interp_tasks_head;
};

#define N LS_PY_NONE
static int pyt_layout(unsigned minor, struct pyt_layout *l)
{
    struct pyt_layout t = {
        .minor = minor, .ht_cached_keys = 880, .values_off = 0,
        .t_loop = 16, .t_callback0 = 24, .t_exception = 48, .t_state = 88, .t_log_tb = 92,
        .t_log_tb_bit = N, .t_waiter = 128, .t_coro = 136, .t_name = 144, .t_must_cancel = 160,
        .t_must_cancel_bit = N, .t_ncancels = 168, .t_log_destroy = 164, .t_log_destroy_bit = N,
        .cr_frame = 72, .cr_state = 67, .susp_lo = -1, .susp_hi = -1, .st_done = 1,
        .yf_depth = 1,
        .f_code = 0, .f_instr = 56, .f_localsplus = 72, .f_stacktop = 64,
        .f_valuestack = N, .f_stackdepth = N, .f_state = N, .f_stackptr = N,
        .t_node = N, .ts_tasks_head = N, .ts_running_task = N, .interp_tasks_head = N,
    };
    switch (minor) {
    case 10:
        t.interp_modules = 0x358; t.ht_cached_keys = 872;
        t.t_waiter = 152; t.t_coro = 160; t.t_name = 168; t.t_must_cancel = 184;
        t.t_log_destroy = 188; t.t_ncancels = N;
        t.cr_frame = 16; t.cr_state = N;
        t.f_code = 32; t.f_instr = 96; t.f_localsplus = 352; t.f_stacktop = N;
        t.f_valuestack = 64; t.f_stackdepth = 80; t.f_state = 108;
        break;
    case 11:
        t.interp_modules = 0x378; t.ht_cached_keys = 872;
        t.cr_frame = 80; t.cr_state = 75; t.f_code = 32;
        break;
    case 12:
        t.interp_modules = 0x3b0;
        break;
    case 13:
        t.interp_modules = 0x1de8; t.values_off = 8;
        t.t_state = 96; t.t_log_tb = 100; t.t_log_tb_bit = 0; t.t_must_cancel = 100;
        t.t_must_cancel_bit = 2; t.t_log_destroy = 100; t.t_log_destroy_bit = 3;
        t.t_ncancels = 104; t.t_waiter = 112; t.t_coro = 120; t.t_name = 128;
        t.susp_lo = -2;
        break;
    case 14:
    case 15:
        /* Debian's 3.14.10 and 3.15.2 (the same TaskObj); ls_pytasks_new
         * takes what _Py_DebugOffsets and _asyncio's AsyncioDebug publish
         * over these */
        t.interp_modules = minor == 14 ? 0x1e08 : 0x1da8;
        t.ht_cached_keys = minor == 14 ? 0x370 : 0x378; t.values_off = 8;
        t.t_state = 104; t.t_log_tb = 110; t.t_log_tb_bit = 0; t.t_must_cancel = 110;
        t.t_must_cancel_bit = 2; t.t_log_destroy = 110; t.t_log_destroy_bit = 3;
        t.t_ncancels = 112; t.t_waiter = 120; t.t_coro = 128; t.t_name = 136;
        t.t_node = 152;
        t.ts_tasks_head = minor == 14 ? 880 : 1048;
        t.interp_tasks_head = minor == 14 ? 0x2a80 : 0x2a68;
        t.f_localsplus = 80; t.f_stacktop = N; t.f_stackptr = 64;
        if (minor == 14) {
            t.susp_lo = -2;               /* FRAME_SUSPENDED, _YIELD_FROM */
        } else {
            t.susp_lo = 1; t.susp_hi = 3; /* ..._YIELD_FROM_LOCKED */
            t.st_done = 5;                /* FRAME_CLEARED */
            t.yf_depth = 2;
        }
        break;
    default:
        return -1;
    }
    *l = t;
    return 0;
}
#undef N

struct pyt_type {
    uint64_t addr;
    int kind;
    char name[48];                  /* tp_name after its last dot */
};

struct ls_pytasks {
    ls_py *py;
    pid_t pid;
    struct pyt_layout l;
    struct pyt_type types[PYT_TYPES];
    size_t ntypes;
    /* found once, re-checked by type on every census */
    uint64_t all, eager, current;   /* the WeakSet's set, the eager set, the current-task dict */
    unsigned misses;                /* censuses since asyncio.tasks was looked for */
    uint64_t task_type;             /* _asyncio.Task */
    bool bad_offsets;               /* 3.14+: _asyncio's debug offsets do not hold */
    bool gone;
    uint64_t steps_left;            /* of PYT_CENSUS_STEPS, in this census */
    size_t chains_left;             /* tasks it is shared by (this one included) */
    /* the census before, sorted by address: a task still parked on the
     * same future has not run since, so its name, chain and holds are
     * taken from there instead of read again */
    struct ls_pytask *prev;
    size_t nprev, capprev;
    uint64_t running[64];           /* the census's running tasks, sorted */
    size_t nrunning;
    /* scratch, reused */
    uint64_t ts[PYT_THREADS];       /* 3.14+: the thread states */
    uint64_t *objs;
    size_t nobjs, capobjs;
};

/* ---- batched reads ---- */

struct pyt_rd {
    uint64_t addr;
    void *dst;
    size_t len;
    bool ok;
};

/* Reads every piece it can; a piece is ok only when read whole.  A
 * process_vm_readv stops at the first piece it cannot read: the pieces
 * before it are in, the rest is tried again after it. */
static void pyt_readv(ls_pytasks *pt, struct pyt_rd *rd, size_t n)
{
    struct iovec li[PYT_IOV], ri[PYT_IOV];
    size_t idx[PYT_IOV];
    size_t i = 0;
    while (i < n && !pt->gone) {
        size_t k = 0;
        for (; i < n && k < PYT_IOV; i++) {
            rd[i].ok = false;
            if (rd[i].addr < 4096 || rd[i].addr + rd[i].len < rd[i].addr || !rd[i].len)
                continue;
            li[k] = (struct iovec){ rd[i].dst, rd[i].len };
            ri[k] = (struct iovec){ (void *)(uintptr_t)rd[i].addr, rd[i].len };
            idx[k++] = i;
        }
        if (!k)
            return;
        ssize_t got = process_vm_readv(pt->pid, li, k, ri, k, 0);
        if (got < 0 && errno == ESRCH) {
            pt->gone = true;
            return;
        }
        size_t done = 0, m = 0;
        for (; m < k && got > 0 && done + rd[idx[m]].len <= (size_t)got; m++) {
            rd[idx[m]].ok = true;
            done += rd[idx[m]].len;
        }
        if (m < k)
            i = idx[m] + 1;               /* piece m failed: go on after it */
    }
}

static int pyt_read(ls_pytasks *pt, void *dst, size_t len, uint64_t addr)
{
    if (ls_py_read(pt->pid, dst, len, addr) == 0)
        return 0;
    if (errno == ESRCH)
        pt->gone = true;
    return -1;
}

static uint64_t pyt_ptr(ls_pytasks *pt, uint64_t addr)
{
    uint64_t v = 0;
    return pyt_read(pt, &v, 8, addr) ? 0 : v;
}

static inline uint64_t u64at(const uint8_t *b, size_t off)
{
    uint64_t v;
    memcpy(&v, b + off, 8);
    return v;
}

static inline uint32_t u32at(const uint8_t *b, size_t off)
{
    uint32_t v;
    memcpy(&v, b + off, 4);
    return v;
}

/* ---- types ---- */

static int pyt_kind_of(const char *n)
{
    static const struct { const char *name; int kind; } k[] = {
        { "_asyncio.Task", T_TASK }, { "_asyncio.Future", T_FUTURE },
        { "_GatheringFuture", T_GATHER }, { "_asyncio.FutureIter", T_FUTITER },
        { "coroutine", T_CORO }, { "generator", T_GEN }, { "weakref", T_WEAKREF },
        { "weakref.ReferenceType", T_WEAKREF }, { "set", T_SET }, { "dict", T_DICT },
        { "str", T_STR }, { "int", T_INT }, { "function", T_FUNC }, { "module", T_MODULE },
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(n, k[i].name))
            return k[i].kind;
    return T_OTHER;
}

/* The type at addr, classified: by its name, or (a subclass of Task or
 * Future made in Python) by its bases', at most 8 levels up. */
static struct pyt_type *pyt_type(ls_pytasks *pt, uint64_t addr)
{
    static struct pyt_type none = { 0, T_UNKNOWN, "?" };
    if (addr < 4096)
        return &none;
    size_t h = (addr >> 4) * 0x9E3779B97F4A7C15ull >> 56 & (PYT_TYPES - 1);
    for (size_t k = 0; k < PYT_TYPES; k++, h = (h + 1) & (PYT_TYPES - 1)) {
        if (pt->types[h].addr == addr)
            return &pt->types[h];
        if (!pt->types[h].addr)
            break;
    }
    struct pyt_type t = { addr, T_UNKNOWN, "?" };
    uint64_t cur = addr;
    for (int depth = 0; depth < 8 && cur; depth++) {
        char n[64] = "";
        uint64_t np = pyt_ptr(pt, cur + TP_NAME);
        /* a C string: read up to the end of its page first */
        size_t first = np ? 4096 - (np & 4095) : 0;
        if (first > sizeof n - 1)
            first = sizeof n - 1;
        if (!np || pyt_read(pt, n, first, np) ||
            (first < sizeof n - 1 && !memchr(n, 0, first) &&
             pyt_read(pt, n + first, sizeof n - 1 - first, np + first)))
            return &none;                 /* not a type (now): not cached */
        n[sizeof n - 1] = 0;
        int kind = pyt_kind_of(n);
        if (!depth) {
            const char *dot = strrchr(n, '.');
            snprintf(t.name, sizeof t.name, "%s", dot ? dot + 1 : n);
            t.kind = kind;
        }
        if (kind == T_TASK || kind == T_FUTURE || kind == T_GATHER) {
            if (depth)
                t.kind = kind;
            break;
        }
        if (!depth && kind != T_OTHER)
            break;
        cur = pyt_ptr(pt, cur + TP_BASE);
    }
    if (pt->ntypes >= PYT_TYPES * 3 / 4) {
        memset(pt->types, 0, sizeof pt->types);
        pt->ntypes = 0;
        h = (addr >> 4) * 0x9E3779B97F4A7C15ull >> 56 & (PYT_TYPES - 1);
    }
    while (pt->types[h].addr)
        h = (h + 1) & (PYT_TYPES - 1);
    pt->types[h] = t;
    pt->ntypes++;
    return &pt->types[h];
}

static int pyt_kind(ls_pytasks *pt, uint64_t obj)
{
    return pyt_type(pt, pyt_ptr(pt, obj + 8))->kind;
}

/* ---- strings, dicts, attributes ---- */

/* Does the str at addr equal key (ASCII)? */
static bool pyt_str_is(ls_pytasks *pt, uint64_t addr, const char *key)
{
    const struct ls_py_cfg *c = &pt->py->cfg;
    uint8_t h[128];
    size_t kl = strlen(key);
    if (kl > 64 || pyt_read(pt, h, c->unicode_data + kl, addr))
        return false;
    uint32_t st = u32at(h, c->unicode_state);
    return u64at(h, 8) == c->unicode_type && u64at(h, c->unicode_len) == kl &&
           (st & LS_PYW_U_COMPACT) && (st & LS_PYW_U_ASCII) &&
           !memcmp(h + c->unicode_data, key, kl);
}

/* The value of str key in a dict's keys object (values: a split table's
 * values, 0 for a combined one); 0 when absent or unreadable. */
static uint64_t pyt_keys_get(ls_pytasks *pt, uint64_t keys, uint64_t values, const char *key)
{
    uint8_t h[40];
    if (pyt_read(pt, h, sizeof h, keys))
        return 0;
    uint64_t nent, entries;
    size_t esize, koff, voff;
    if (pt->l.minor == 10) {
        uint64_t size = u64at(h, 8);
        nent = u64at(h, 32);
        if (size < 8 || size > (1u << 30) || (size & (size - 1)))
            return 0;
        unsigned ix = size <= 0xff ? 1 : size <= 0xffff ? 2 : 4;
        entries = keys + 40 + size * ix;
        esize = 24; koff = 8; voff = 16;
    } else {
        unsigned log2 = h[8], log2ix = h[9], kind = h[10];
        nent = u64at(h, 24);
        if (log2 < 3 || log2 > 30 || log2ix > 33 || kind > 2)
            return 0;
        entries = keys + 32 + (1ull << log2ix);
        if (kind == 0) {
            esize = 24; koff = 8; voff = 16;
        } else {
            esize = 16; koff = 0; voff = 8;
        }
    }
    if (nent > PYT_DICT_MAX)
        nent = PYT_DICT_MAX;
    if (!nent)
        return 0;
    uint8_t *e = malloc(nent * esize);
    if (!e || pyt_read(pt, e, nent * esize, entries)) {
        free(e);
        return 0;
    }
    uint64_t found = 0;
    for (uint64_t i = 0; i < nent && !found; i++) {
        uint64_t k = u64at(e, i * esize + koff);
        if (!k || !pyt_str_is(pt, k, key))
            continue;
        if (values)
            found = pyt_ptr(pt, values + pt->l.values_off + 8 * i);
        else
            found = u64at(e, i * esize + voff);
        if (!found)
            break;
    }
    free(e);
    return found;
}

static uint64_t pyt_dict_get(ls_pytasks *pt, uint64_t dict, const char *key)
{
    uint8_t d[48];
    if (pyt_kind(pt, dict) != T_DICT || pyt_read(pt, d, sizeof d, dict))
        return 0;
    return pyt_keys_get(pt, u64at(d, DICT_KEYS), u64at(d, DICT_VALUES), key);
}

/* An attribute in an instance's __dict__ (a Python class's instance),
 * wherever this version keeps it. */
static uint64_t pyt_attr(ls_pytasks *pt, uint64_t obj, const char *key)
{
    uint64_t type = pyt_ptr(pt, obj + 8);
    uint8_t t[400];
    if (!type || pyt_read(pt, t, sizeof t, type))
        return 0;
    uint64_t flags = u64at(t, TP_FLAGS), basic = u64at(t, TP_BASICSIZE);
    int64_t dictoff = (int64_t)u64at(t, TP_DICTOFFSET);
    uint64_t cached = pyt_ptr(pt, type + pt->l.ht_cached_keys);
    unsigned m = pt->l.minor;
    if (m >= 13 && (flags & TPF_INLINE_VALUES) && basic < (1u << 20)) {
        uint8_t valid = 0;
        if (!pyt_read(pt, &valid, 1, obj + basic + 3) && valid && cached)
            return pyt_keys_get(pt, cached, obj + basic, key);
    }
    if (m >= 11 && (flags & TPF_MANAGED_DICT)) {
        uint64_t p = pyt_ptr(pt, obj - 24);
        if (m == 12 && (p & 1))
            return cached ? pyt_keys_get(pt, cached, p + 1, key) : 0;  /* stored as values - 1 */
        if (p)
            return pyt_dict_get(pt, p, key);
        if (m == 11) {
            uint64_t values = pyt_ptr(pt, obj - 32);
            return values && cached ? pyt_keys_get(pt, cached, values, key) : 0;
        }
        return 0;
    }
    if (dictoff > 0 && dictoff < (1 << 20))
        return pyt_dict_get(pt, pyt_ptr(pt, obj + (uint64_t)dictoff), key);
    return 0;
}

/* 3.14+: where _asyncio's own debug offsets (its AsyncioDebug section:
 * the Task's name, coroutine and list node, the thread state's running
 * task and task list, the interpreter's list) say these are, taken over
 * the layout's once each is checked against the sizes it gives and the
 * bytes the census reads.  -1 while _asyncio is not loaded (or its
 * section unreadable), -2 when what it says does not hold. */
static int pyt_asyncio_debug(ls_pytasks *pt)
{
    uint64_t at = ls_py_asyncio_debug(pt->py), w[13];
    if (!at || pyt_read(pt, w, sizeof w, at))
        return -1;
    /* task object: size, name, awaited_by, is_task, awaited_by_is_set,
     * coro, node; interpreter: size, tasks head; thread state: size,
     * running loop, running task, tasks head */
    if (w[0] < 64 || w[0] > PYT_TASK_READ || w[1] + 8 > w[0] || w[5] + 8 > w[0] ||
        w[6] + 16 > w[0] || w[8] >= (1u << 16) || w[9] < 64 || w[9] >= (1u << 16) ||
        w[11] + 8 > w[9] || w[12] + 16 > w[9])
        return -2;
    struct pyt_layout *l = &pt->l;
    l->t_name = (uint32_t)w[1];
    l->t_coro = (uint32_t)w[5];
    l->t_node = (uint32_t)w[6];
    l->interp_tasks_head = (uint32_t)w[8];
    l->ts_running_task = (uint32_t)w[11];
    l->ts_tasks_head = (uint32_t)w[12];
    return 0;
}

/* sys.modules["asyncio.tasks"]: the task set, the eager set, the
 * current-task dict (3.14+: the module only, and _asyncio's offsets).
 * -1 when asyncio is not imported. */
static int pyt_find(ls_pytasks *pt)
{
    const struct ls_py_cfg *c = &pt->py->cfg;
    pt->all = pt->eager = pt->current = 0;
    uint64_t interp = pyt_ptr(pt, c->runtime + c->runtime_interp_head);
    uint64_t modules = interp ? pyt_ptr(pt, interp + pt->l.interp_modules) : 0;
    uint64_t mod = modules ? pyt_dict_get(pt, modules, "asyncio.tasks") : 0;
    if (!mod || pyt_kind(pt, mod) != T_MODULE)
        return -1;
    uint64_t md = pyt_ptr(pt, mod + MD_DICT);
    /* the C Task type (asyncio.tasks._CTask), before any task exists */
    uint64_t ty = pyt_dict_get(pt, md, "_CTask");
    if (ty && pyt_type(pt, ty)->kind == T_TASK && !pt->task_type)
        pt->task_type = ty;
    if (pt->l.t_node != LS_PY_NONE) {
        int e = pyt_asyncio_debug(pt);
        pt->bad_offsets = e == -2;
        if (e)
            return -1;
        pt->all = mod;                    /* the tasks are in lists: see pyt_lists */
        return 0;
    }
    uint64_t ws = pyt_dict_get(pt, md, pt->l.minor >= 12 ? "_scheduled_tasks" : "_all_tasks");
    uint64_t data = ws ? pyt_attr(pt, ws, "data") : 0;
    if (!data || pyt_kind(pt, data) != T_SET)
        return -1;
    pt->all = data;
    if (pt->l.minor >= 12) {
        uint64_t e = pyt_dict_get(pt, md, "_eager_tasks");
        pt->eager = e && pyt_kind(pt, e) == T_SET ? e : 0;
    }
    uint64_t cur = pyt_dict_get(pt, md, "_current_tasks");
    pt->current = cur && pyt_kind(pt, cur) == T_DICT ? cur : 0;
    return 0;
}

static int pyt_push(ls_pytasks *pt, uint64_t v);

/* 3.14+: the thread states of the first interpreter, at most
 * PYT_THREADS (newest first: the main thread is the last; past the bound,
 * TRUNCATED), into pt->ts. */
static size_t pyt_threads(ls_pytasks *pt, uint64_t *interp, uint32_t *flags)
{
    const struct ls_py_cfg *c = &pt->py->cfg;
    size_t n = 0;
    *interp = pyt_ptr(pt, c->runtime + c->runtime_interp_head);
    uint64_t t = *interp ? pyt_ptr(pt, *interp + c->interp_threads_head) : 0;
    for (; t && n < PYT_THREADS; t = pyt_ptr(pt, t + c->tstate_next))
        pt->ts[n++] = t;
    if (t)
        *flags |= LS_PYT_TRUNCATED;
    return n;
}

/* 3.14+: the tasks of one list (a circular doubly linked list through
 * each task's task_node, from a head in a thread state or the
 * interpreter), appended to pt->objs.  A list that comes back to a node
 * rather than to its head (Brent's cycle check: a mark moved to the
 * current node at each power of two) ends there, READ_ERROR; every list
 * ends at LS_PYT_MAX_TASKS tasks in all, TRUNCATED. */
static void pyt_list(ls_pytasks *pt, uint64_t head, uint32_t *flags)
{
    uint64_t node = pyt_ptr(pt, head), mark = 0, power = 1, steps = 0;
    while (node != head) {
        if (node == mark) {
            *flags |= LS_PYT_READ_ERROR;  /* a loop that misses the head */
            return;
        }
        if (++steps == power) {
            mark = node;
            power *= 2;
        }
        if (node < 4096 || node - pt->l.t_node < 4096) {
            *flags |= LS_PYT_READ_ERROR;
            return;
        }
        if (pt->nobjs >= LS_PYT_MAX_TASKS) {
            *flags |= LS_PYT_TRUNCATED;
            return;
        }
        if (pyt_push(pt, node - pt->l.t_node))
            return;
        uint64_t next = 0;
        if (pyt_read(pt, &next, 8, node)) {
            *flags |= LS_PYT_READ_ERROR;
            return;
        }
        node = next;
    }
}

/* 3.14+: every thread's list and the interpreter's (the tasks of threads
 * that ended), and the running task of each thread. */
static size_t pyt_lists(ls_pytasks *pt, uint32_t *flags, uint64_t *running, size_t max)
{
    uint64_t interp;
    size_t nts = pyt_threads(pt, &interp, flags), nrunning = 0;
    if (!interp)
        return 0;
    pyt_list(pt, interp + pt->l.interp_tasks_head, flags);
    for (size_t i = 0; i < nts; i++) {
        pyt_list(pt, pt->ts[i] + pt->l.ts_tasks_head, flags);
        uint64_t r = pyt_ptr(pt, pt->ts[i] + pt->l.ts_running_task);
        if (r && nrunning < max)
            running[nrunning++] = r;
    }
    return nrunning;
}

/* ---- reading the sets ---- */

static int pyt_push(ls_pytasks *pt, uint64_t v)
{
    if (pt->nobjs == pt->capobjs) {
        size_t cap = pt->capobjs ? 2 * pt->capobjs : 1024;
        uint64_t *o = realloc(pt->objs, cap * sizeof *o);
        if (!o)
            return -1;
        pt->objs = o;
        pt->capobjs = cap;
    }
    pt->objs[pt->nobjs++] = v;
    return 0;
}

/* The keys in set's slots, appended to pt->objs (at most max of them);
 * -1 if it is not a set now. */
static int pyt_set_keys(ls_pytasks *pt, uint64_t set, size_t max, uint32_t *flags)
{
    uint8_t h[48];
    if (pyt_kind(pt, set) != T_SET || pyt_read(pt, h, sizeof h, set))
        return -1;
    uint64_t mask = u64at(h, SET_MASK), table = u64at(h, SET_TABLE);
    if (mask >= (1ull << 40) || ((mask + 1) & mask))
        return -1;
    uint64_t slots = mask + 1;
    if (slots > PYT_SET_MAX) {
        slots = PYT_SET_MAX;
        *flags |= LS_PYT_TRUNCATED;
    }
    enum { CHUNK = 4096 };
    uint64_t buf[2 * CHUNK];
    for (uint64_t i = 0; i < slots; i += CHUNK) {
        uint64_t n = slots - i < CHUNK ? slots - i : CHUNK;
        if (pyt_read(pt, buf, n * 16, table + i * 16))
            return -1;
        for (uint64_t j = 0; j < n; j++) {
            if (!buf[2 * j])
                continue;
            if (pt->nobjs >= max) {
                *flags |= LS_PYT_TRUNCATED;
                return 0;
            }
            if (pyt_push(pt, buf[2 * j]))
                return -1;
        }
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The running tasks: the values of the current-task dict (a few loops). */
static size_t pyt_current(ls_pytasks *pt, uint64_t *out, size_t max)
{
    uint8_t d[48], h[40];
    if (!pt->current || pyt_read(pt, d, sizeof d, pt->current))
        return 0;
    uint64_t keys = u64at(d, DICT_KEYS);
    if (pyt_read(pt, h, sizeof h, keys) || u64at(d, DICT_VALUES))
        return 0;
    uint64_t nent, entries;
    size_t esize = 24, voff = 16;
    if (pt->l.minor == 10) {
        uint64_t size = u64at(h, 8);
        if (size < 8 || size > (1u << 20) || (size & (size - 1)))
            return 0;
        nent = u64at(h, 32);
        entries = keys + 40 + size * (size <= 0xff ? 1 : size <= 0xffff ? 2 : 4);
    } else {
        if (h[8] < 3 || h[8] > 20 || h[9] > 23 || h[10] != 0)
            return 0;                   /* the loops are keys: a general table */
        nent = u64at(h, 24);
        entries = keys + 32 + (1ull << h[9]);
    }
    uint8_t e[24 * 64];
    if (nent > 64)
        nent = 64;
    if (!nent || pyt_read(pt, e, nent * esize, entries))
        return 0;
    size_t n = 0;
    for (uint64_t i = 0; i < nent && n < max; i++)
        if (u64at(e, i * esize + voff))
            out[n++] = u64at(e, i * esize + voff);
    return n;
}

/* ---- one task ---- */

static void pyt_name(ls_pytasks *pt, uint64_t name, char *out, size_t cap)
{
    snprintf(out, cap, "?");
    int kind = pyt_kind(pt, name);
    if (kind == T_STR) {
        char *s = ls_py_str(pt->py, name);
        if (s) {
            size_t n = strlen(s);
            if (n > cap - 1) {            /* cut at a character's start */
                n = cap - 1;
                while (n && ((unsigned char)s[n] & 0xc0) == 0x80)
                    n--;
            }
            memcpy(out, s, n);
            out[n] = 0;
        }
        free(s);
    } else if (kind == T_INT) {
        /* 3.12+: an unnamed task's name is its counter until asked for */
        uint8_t b[32];
        if (pyt_read(pt, b, sizeof b, name))
            return;
        uint64_t tag = u64at(b, 16), nd;
        uint32_t d0 = u32at(b, 24), d1 = u32at(b, 28);
        bool neg;
        if (pt->py->cfg.long_kind == LS_PY_LONG_TAG) {
            nd = tag >> 3;
            neg = (tag & 3) == 2;
        } else {
            neg = (int64_t)tag < 0;
            nd = neg ? -tag : tag;
        }
        if (neg || nd > 2)
            return;
        uint64_t v = nd == 0 ? 0 : nd == 1 ? d0 : d0 | (uint64_t)d1 << 30;
        snprintf(out, cap, "Task-%llu", (unsigned long long)v);
    }
}

/* The name of a function object's code (a future's first callback). */
static bool pyt_func_is(ls_pytasks *pt, uint64_t fn, const char *name)
{
    if (pyt_kind(pt, fn) != T_FUNC)
        return false;
    struct ls_py_frame f = { pyt_ptr(pt, fn + FUNC_CODE), -1, 0 };
    const char *func, *file;
    int line;
    if (ls_py_frame(pt->py, &f, &func, &file, &line))
        return false;
    const char *dot = strrchr(func, '.');
    return !strcmp(dot ? dot + 1 : func, name);
}

/* Why a task waits: the innermost frame in asyncio's own modules decides;
 * self is its first local (the Lock, the Queue...). */
static int pyt_reason_of(ls_pytasks *pt, struct ls_pytask *t, const uint64_t *selfs)
{
    static const struct { const char *file, *func; int reason; } rule[] = {
        { "locks.py", "acquire", EVL_SUSPEND_LOCK },     /* Semaphore: by self's type */
        { "locks.py", "wait", EVL_SUSPEND_EVENT },       /* Condition: by self's type */
        { "queues.py", "get", EVL_SUSPEND_QUEUE_GET },
        { "queues.py", "put", EVL_SUSPEND_QUEUE_PUT },
        { "queues.py", "join", EVL_SUSPEND_QUEUE_JOIN },
        { "tasks.py", "sleep", EVL_SUSPEND_SLEEP },
        { "tasks.py", "__sleep0", EVL_SUSPEND_YIELD },
        { "tasks.py", "_wait", EVL_SUSPEND_WAIT },
        { "tasks.py", "wait", EVL_SUSPEND_WAIT },
        { "tasks.py", "_wait_for_one", EVL_SUSPEND_WAIT },
        { "streams.py", NULL, EVL_SUSPEND_IO },        /* reads, drain, wait_closed */
        { "taskgroups.py", "__aexit__", EVL_SUSPEND_TASKGROUP },
        { "taskgroups.py", "_aexit", EVL_SUSPEND_TASKGROUP },
    };
    for (uint32_t k = t->nframes; k-- > 0;) {
        const char *func, *file;
        int line;
        if (ls_py_frame(pt->py, &t->frames[k], &func, &file, &line))
            continue;
        const char *slash = strrchr(file, '/');
        if (!slash || slash - file < 8 || strncmp(slash - 8, "/asyncio", 8))
            continue;
        const char *dot = strrchr(func, '.');
        const char *fn = dot ? dot + 1 : func;
        for (size_t i = 0; i < sizeof rule / sizeof rule[0]; i++) {
            if (strcmp(slash + 1, rule[i].file) || (rule[i].func && strcmp(fn, rule[i].func)))
                continue;
            int reason = rule[i].reason;
            const char *self = pyt_type(pt, pyt_ptr(pt, selfs[k] + 8))->name;
            if (reason == EVL_SUSPEND_LOCK && strstr(self, "Semaphore"))
                reason = EVL_SUSPEND_SEMAPHORE;
            if (reason == EVL_SUSPEND_EVENT && strstr(self, "Condition"))
                reason = EVL_SUSPEND_CONDITION;
            if (reason != EVL_SUSPEND_SLEEP && reason != EVL_SUSPEND_YIELD &&
                reason != EVL_SUSPEND_WAIT && reason != EVL_SUSPEND_IO)
                t->object = selfs[k];
            return reason;
        }
        return 0;                       /* asyncio, but not a primitive we know */
    }
    return 0;
}

/* Locks held along a chain: which, and in which frame (its depth from
 * the task's coroutine). */
struct pyt_holds {
    uint32_t n;
    uint64_t lock[16];
    uint32_t depth[16];
};

static bool pyt_func_is(ls_pytasks *pt, uint64_t fn, const char *name);

static bool pyt_is_lock(ls_pytasks *pt, uint64_t obj)
{
    const char *ty = pyt_type(pt, pyt_ptr(pt, obj + 8))->name;
    return !strcmp(ty, "Lock") || strstr(ty, "Semaphore") || !strcmp(ty, "Condition");
}

/* The locks a suspended frame holds: `async with lock` keeps lock's
 * __aexit__ on the frame's value stack for the whole block, so a slot
 * holding it is one held: bound (a method whose self is a Lock, Semaphore
 * or Condition, 3.10-3.13), or, 3.14+, unbound (the function __aexit__,
 * the lock in the slot after it).  slots: n words at addr (3.10: the value
 * stack; 3.11+: localsplus, locals then stack).  A lock taken with a bare
 * `await lock.acquire()` leaves nothing there: not seen. */
static void pyt_held_in(ls_pytasks *pt, struct pyt_holds *h, uint32_t depth, uint64_t *slot,
                        int32_t n)
{
    uint8_t obj[LS_PYT_SLOTS][32];
    struct pyt_rd rd[LS_PYT_SLOTS];
    if (n <= 0 || h->n == 16)
        return;
    if (n > LS_PYT_SLOTS)
        n = LS_PYT_SLOTS;
    for (int32_t i = 0; i < n; i++) {
        slot[i] &= ~7ull;                 /* 3.14+: stackrefs */
        rd[i] = (struct pyt_rd){ slot[i], obj[i], 32, false };
    }
    pyt_readv(pt, rd, (size_t)n);
    for (int32_t i = 0; i < n && h->n < 16; i++) {
        if (!rd[i].ok)
            continue;
        uint64_t self;
        if (u64at(obj[i], 8) == pt->py->cfg.method_type)
            self = u64at(obj[i], 24);
        else if (pt->l.minor >= 14 && i + 1 < n && rd[i + 1].ok &&
                 pyt_type(pt, u64at(obj[i], 8))->kind == T_FUNC &&
                 pyt_func_is(pt, slot[i], "__aexit__"))
            self = slot[i + 1];
        else
            continue;
        if (!pyt_is_lock(pt, self))
            continue;
        h->lock[h->n] = self;
        h->depth[h->n++] = depth;
    }
}

/* The same, the slots read from n words at addr. */
static void pyt_held(ls_pytasks *pt, struct pyt_holds *h, uint32_t depth, uint64_t addr,
                     int32_t n)
{
    uint64_t slot[LS_PYT_SLOTS];
    if (n <= 0 || h->n == 16)
        return;
    if (n > LS_PYT_SLOTS)
        n = LS_PYT_SLOTS;
    if (!pyt_read(pt, slot, 8 * (size_t)n, addr))
        pyt_held_in(pt, h, depth, slot, n);
}

/* One coroutine (or generator) of a chain: its frame into *f and self,
 * what it awaits (0: nothing, it is not suspended in an await), the locks
 * its frame holds; -1 when it is done or unreadable. */
static int pyt_coro(ls_pytasks *pt, uint64_t obj, struct ls_py_frame *f, uint64_t *self,
                    uint64_t *yf, struct pyt_holds *h, uint32_t depth)
{
    const struct pyt_layout *l = &pt->l;
    const struct ls_py_cfg *c = &pt->py->cfg;
    uint8_t fb[120];
    *yf = 0;
    if (l->minor == 10) {
        uint64_t fr = pyt_ptr(pt, obj + l->cr_frame);
        if (!fr || pyt_read(pt, fb, sizeof fb, fr))
            return -1;
        int32_t lasti = (int32_t)u32at(fb, l->f_instr);
        int8_t st = (int8_t)fb[l->f_state];
        int32_t n = (int32_t)u32at(fb, l->f_stackdepth);
        /* f_lasti counts code units (2 bytes): a hostile one would overflow */
        *f = (struct ls_py_frame){ u64at(fb, l->f_code),
                                   lasti < 0 || lasti > INT32_MAX / 2 ? -1 : lasti * 2, 0 };
        *self = pyt_ptr(pt, fr + l->f_localsplus);
        if (st == -1 && n > 0 && n < 4096) {
            *yf = pyt_ptr(pt, u64at(fb, l->f_valuestack) + 8 * (uint64_t)(n - 1));
            pyt_held(pt, h, depth, u64at(fb, l->f_valuestack), n - 1);
        }
        return 0;
    }
    /* 3.11+: one read from the state byte over the inline frame to its
     * first LS_PYT_SLOTS slots (locals, then the stack: most frames
     * whole); small reads when that runs into unmapped memory */
    uint8_t w[PYT_CORO_WIN];
    uint32_t fo = l->cr_frame - l->cr_state, lo = fo + l->f_localsplus;
    uint32_t nw = 0;                      /* slots in w */
    uint64_t fr = obj + l->cr_frame, lp = fr + l->f_localsplus;
    if (!pyt_read(pt, w, lo + 8 * LS_PYT_SLOTS, obj + l->cr_state)) {
        nw = LS_PYT_SLOTS;
    } else if (pt->gone || pyt_read(pt, w, 1, obj + l->cr_state) ||
               (int8_t)w[0] >= l->st_done || pyt_read(pt, w + fo, 80, fr)) {
        return -1;                            /* gone or unreadable */
    }
    int8_t st = (int8_t)w[0];
    if (st >= l->st_done)
        return -1;                            /* completed or cleared */
    const uint8_t *hdr = w + fo;
    /* 3.14+: f_executable and the stack slots are _PyStackRefs: tag bits */
    uint64_t code = u64at(hdr, l->f_code) & ~7ull, ip = u64at(hdr, l->f_instr);
    uint64_t base = code + c->code_adaptive;
    int32_t top = -1;
    if (l->f_stackptr == LS_PY_NONE) {
        top = (int32_t)u32at(hdr, l->f_stacktop);
    } else {
        uint64_t sp = u64at(hdr, l->f_stackptr);
        if (sp >= lp && sp - lp < 8 * 4096 && !(sp & 7))
            top = (int32_t)((sp - lp) / 8);
    }
    *f = (struct ls_py_frame){ code, ip >= base && ip - base < (1u << 24) ? (int32_t)(ip - base)
                                                                          : -1, 0 };
    *self = (nw ? u64at(w, lo) : pyt_ptr(pt, lp)) & ~7ull;
    if (st >= l->susp_lo && st <= l->susp_hi && top >= l->yf_depth && top < 4096) {
        uint32_t k = (uint32_t)(top - l->yf_depth);
        *yf = (k < nw ? u64at(w, lo + 8 * k) : pyt_ptr(pt, lp + 8 * (uint64_t)k)) & ~7ull;
        if (nw) {
            uint64_t slot[LS_PYT_SLOTS];
            memcpy(slot, w + lo, sizeof slot);
            pyt_held_in(pt, h, depth, slot, top - 1);
        } else {
            pyt_held(pt, h, depth, lp, top - 1);
        }
    }
    return 0;
}

/* The await chain from the task's coroutine: its innermost
 * LS_PYT_MAX_DEPTH frames (outermost first; chain_cut when there were
 * more, or it came back to itself: LS_PYT_WALK coroutines at most), the
 * awaitable at its end, the locks held; then why it waits. */
static void pyt_chain(ls_pytasks *pt, struct ls_pytask *t)
{
    const struct pyt_layout *l = &pt->l;
    uint64_t selfs[LS_PYT_MAX_DEPTH];
    struct pyt_holds h = { 0 };
    uint64_t obj = t->coro, awaitable = 0, first = 0;
    uint32_t depth = 0;
    t->nframes = 0;
    uint64_t share = pt->steps_left / (pt->chains_left ? pt->chains_left : 1);
    int limit = share < 2 * LS_PYT_WALK ? (int)share : 2 * LS_PYT_WALK, steps = 0;
    for (; obj && steps < limit; steps++) {
        struct pyt_type *ty = pyt_type(pt, pyt_ptr(pt, obj + 8));
        if (ty->kind == T_FUTITER) {
            obj = pyt_ptr(pt, obj + FUTITER_FUTURE);
            continue;
        }
        if (ty->kind != T_CORO && ty->kind != T_GEN) {
            awaitable = obj;
            snprintf(t->awaits, sizeof t->awaits, "%s", ty->name);
            break;
        }
        if ((depth && obj == first) || depth == LS_PYT_WALK) {
            t->chain_cut = true;              /* it awaits itself, or too deep */
            break;
        }
        if (!depth)
            first = obj;
        if (t->nframes == LS_PYT_MAX_DEPTH) { /* keep the innermost */
            memmove(t->frames, t->frames + 1, (LS_PYT_MAX_DEPTH - 1) * sizeof t->frames[0]);
            memmove(selfs, selfs + 1, (LS_PYT_MAX_DEPTH - 1) * sizeof selfs[0]);
            t->nframes--;
            t->chain_cut = true;
        }
        uint64_t yf;
        if (pyt_coro(pt, obj, &t->frames[t->nframes], &selfs[t->nframes], &yf, &h, depth))
            break;
        t->nframes++;
        depth++;
        obj = yf;
    }
    if (obj && steps == limit)
        t->chain_cut = true;                  /* its share of the census's steps */
    pt->steps_left -= (uint64_t)steps;        /* steps <= share <= steps_left */
    if (t->state == LS_PYT_WAITING) {
        if (!awaitable)
            awaitable = t->waiter;
        int kind = pyt_type(pt, pyt_ptr(pt, awaitable + 8))->kind;
        t->object = awaitable;
        t->reason = kind == T_TASK ? EVL_SUSPEND_TASK
                    : kind == T_GATHER ? EVL_SUSPEND_GATHER : pyt_reason_of(pt, t, selfs);
        if (!t->reason) {
            /* run_in_executor's future: wrap_future chains it with
             * _call_check_cancel as its first callback */
            uint64_t cb0 = kind == T_FUTURE ? pyt_ptr(pt, awaitable + l->t_callback0) : 0;
            t->reason = cb0 && pyt_func_is(pt, cb0, "_call_check_cancel") ? EVL_SUSPEND_EXECUTOR
                                                                           : EVL_SUSPEND_FUTURE;
        }
        /* `async with lock` puts lock.__aexit__ on the stack before it
         * awaits the acquire: the innermost hold of the lock it waits for
         * is that one (an outer one is held: a task waiting for itself) */
        int inner = -1;
        for (uint32_t k = 0; k < h.n; k++)
            if (h.lock[k] == t->object && (inner < 0 || h.depth[k] >= h.depth[inner]))
                inner = (int)k;
        if (inner >= 0)
            h.lock[inner] = 0;
    }
    for (uint32_t k = 0; k < h.n && t->nheld < 4; k++) {
        bool dup = !h.lock[k];
        for (uint32_t j = 0; j < t->nheld; j++)
            dup |= t->held[j] == h.lock[k];
        if (!dup)
            t->held[t->nheld++] = h.lock[k];
    }
}

static bool pyt_bit(const uint8_t *b, uint32_t off, uint32_t bit)
{
    uint32_t v = u32at(b, off);
    return bit == LS_PY_NONE ? v != 0 : (v >> bit) & 1;
}

/* Fills t from the Task's bytes b; false if they are not a task's. */
static bool pyt_task(ls_pytasks *pt, struct ls_pytask *t, uint64_t addr, const uint8_t *b,
                     const uint64_t *running, size_t nrunning, bool use_prev)
{
    const struct pyt_layout *l = &pt->l;
    memset(t, 0, offsetof(struct ls_pytask, frames));
    t->addr = addr;
    t->coro = u64at(b, l->t_coro);
    t->loop = u64at(b, l->t_loop);
    t->waiter = u64at(b, l->t_waiter);
    uint32_t fs = u32at(b, l->t_state);
    if (fs > 2)
        return false;
    if (fs == 1)
        t->state = LS_PYT_CANCELLED;
    else if (fs == 2)
        t->state = u64at(b, l->t_exception) ? LS_PYT_FAILED : LS_PYT_FINISHED;
    else if (bsearch(&addr, running, nrunning, 8, cmp_u64))
        t->state = LS_PYT_RUNNING;
    else
        t->state = t->waiter ? LS_PYT_WAITING : LS_PYT_READY;
    t->unretrieved = t->state == LS_PYT_FAILED && pyt_bit(b, l->t_log_tb, l->t_log_tb_bit);
    t->cancels = l->t_ncancels != LS_PY_NONE ? (int32_t)u32at(b, l->t_ncancels)
                                              : pyt_bit(b, l->t_must_cancel, l->t_must_cancel_bit);
    if (t->cancels < 0)
        t->cancels = 0;
    t->name_obj = u64at(b, l->t_name);
    const struct ls_pytask *p = use_prev && pt->nprev ? bsearch(&addr, pt->prev, pt->nprev,
                                                                sizeof *p, cmp_u64) : NULL;
    if (p && p->coro == t->coro && p->name_obj == t->name_obj)
        memcpy(t->name, p->name, sizeof t->name);
    else
        pyt_name(pt, t->name_obj, t->name, sizeof t->name);
    if (p && t->state == LS_PYT_WAITING && p->state == LS_PYT_WAITING && p->coro == t->coro &&
        p->waiter == t->waiter) {
        /* parked on the same future since the census before: not run */
        t->reason = p->reason;
        t->object = p->object;
        memcpy(t->awaits, p->awaits, sizeof t->awaits);
        t->nheld = p->nheld;
        memcpy(t->held, p->held, sizeof t->held);
        t->chain_cut = p->chain_cut;
        t->nframes = p->nframes;
        memcpy(t->frames, p->frames, p->nframes * sizeof t->frames[0]);
        return true;
    }
    if (t->state != LS_PYT_WAITING) {
        if (t->state <= LS_PYT_WAITING)
            pyt_chain(pt, t);
        return true;
    }
    /* the task runs on while its chain is read: if it parked elsewhere
     * meanwhile (another waiter), read the chain again, once */
    for (int again = 0; again < 2; again++) {
        t->nheld = 0;
        t->chain_cut = false;
        pyt_chain(pt, t);
        uint64_t w = pyt_ptr(pt, addr + l->t_waiter);
        if (w == t->waiter)
            break;
        t->waiter = w;
        t->reason = 0;
        t->object = 0;
        t->awaits[0] = 0;
        if (!w) {
            t->state = LS_PYT_READY;
            t->nframes = 0;
            pyt_chain(pt, t);
            break;
        }
    }
    return true;
}

/* ---- the census ---- */

int ls_pytasks_census(ls_pytasks *pt, struct ls_pyt_census *c)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    c->n = 0;
    c->flags = 0;
    c->ts = (int64_t)t0.tv_sec * 1000000000 + t0.tv_nsec;
    c->dur = 0;
    if (pt->gone) {
        c->flags = LS_PYT_GONE;
        return -1;
    }
    /* the sets: found again if they are not sets any more, and while
     * asyncio is not imported, at most every 16th census */
    bool lists = pt->l.t_node != LS_PY_NONE;
    if (pt->all && pyt_kind(pt, pt->all) != (lists ? T_MODULE : T_SET))
        pt->all = 0;
    if (!pt->all && pt->misses++ % 16 == 0)
        pyt_find(pt);
    if (!pt->all) {
        if (pt->bad_offsets && !pt->gone) {
            c->flags |= LS_PYT_READ_ERROR;   /* asyncio is there, but unreadable */
            return -1;
        }
        c->flags |= pt->gone ? LS_PYT_GONE : LS_PYT_NO_ASYNCIO;
        return pt->gone ? -1 : 0;
    }
    pt->misses = 0;
    pt->nobjs = 0;
    uint32_t fl = 0;
    uint64_t *running = pt->running;
    size_t nrunning = 0;
    if (lists) {
        nrunning = pyt_lists(pt, &fl, running, 64);
        /* a task leaves the lists when it is done, not when it is freed:
         * the pending tasks of the census before that left them are read
         * once more (marked: the low bit), to be told done */
        for (size_t i = 0; i < pt->nprev; i++)
            if (pt->prev[i].state <= LS_PYT_WAITING)
                pyt_push(pt, pt->prev[i].addr | 1);
        goto gathered;
    }
    /* weakrefs of the task set -> their objects (a table being resized
     * as it is read: once more) */
    if (pyt_set_keys(pt, pt->all, LS_PYT_MAX_TASKS, &fl) < 0 &&
        (pt->nobjs = 0, pyt_set_keys(pt, pt->all, LS_PYT_MAX_TASKS, &fl) < 0)) {
        c->flags |= pt->gone ? LS_PYT_GONE : LS_PYT_READ_ERROR;
        return -1;
    }
    size_t nref = pt->nobjs;
    struct pyt_rd *rd = calloc(nref ? nref : 1, sizeof *rd);
    uint8_t (*wr)[24] = calloc(nref ? nref : 1, 24);
    if (!rd || !wr) {
        free(rd);
        free(wr);
        return -1;
    }
    for (size_t i = 0; i < nref; i++)
        rd[i] = (struct pyt_rd){ pt->objs[i], wr[i], 24, false };
    pyt_readv(pt, rd, nref);
    pt->nobjs = 0;
    for (size_t i = 0; i < nref; i++) {
        if (!rd[i].ok)
            continue;
        uint64_t type = u64at(wr[i], 8), obj = u64at(wr[i], WR_OBJECT);
        if (pyt_type(pt, type)->kind == T_WEAKREF && obj)
            pyt_push(pt, obj);
    }
    free(wr);
    free(rd);
    if (pt->eager)
        pyt_set_keys(pt, pt->eager, LS_PYT_MAX_TASKS, &fl);
    nrunning = pyt_current(pt, running, 64);
gathered:
    /* one of each (a task in the lists before its mark) */
    qsort(pt->objs, pt->nobjs, 8, cmp_u64);
    size_t n = 0;
    for (size_t i = 0; i < pt->nobjs; i++)
        if (!n || (pt->objs[n - 1] | 1) != (pt->objs[i] | 1))
            pt->objs[n++] = pt->objs[i];
    if (n > LS_PYT_MAX_TASKS) {
        n = LS_PYT_MAX_TASKS;
        fl |= LS_PYT_TRUNCATED;
    }
    qsort(running, nrunning, 8, cmp_u64);
    pt->nrunning = nrunning;
    /* the tasks' fields */
    struct pyt_rd *rt = calloc(n ? n : 1, sizeof *rt);
    uint8_t (*tb)[PYT_TASK_READ] = calloc(n ? n : 1, PYT_TASK_READ);
    if (!rt || !tb || (c->cap < n && !(c->t = realloc(c->t, n * sizeof *c->t)))) {
        free(rt);
        free(tb);
        c->cap = 0;
        return -1;
    }
    if (c->cap < n)
        c->cap = n;
    for (size_t i = 0; i < n; i++)
        rt[i] = (struct pyt_rd){ pt->objs[i] & ~1ull, tb[i], PYT_TASK_READ, false };
    pyt_readv(pt, rt, n);
    pt->steps_left = PYT_CENSUS_STEPS;
    for (size_t i = 0; i < n && !pt->gone; i++) {
        pt->chains_left = n - i;
        if (!rt[i].ok) {
            fl |= LS_PYT_READ_ERROR;
            continue;
        }
        struct pyt_type *ty = pyt_type(pt, u64at(tb[i], 8));
        if (ty->kind != T_TASK)
            continue;                   /* pure-Python tasks and anything else */
        if (!pt->task_type)
            pt->task_type = u64at(tb[i], 8);
        if (pt->objs[i] & 1) {
            /* gone from the lists: the same task (its coroutine), done */
            const struct ls_pytask *p = bsearch(&rt[i].addr, pt->prev, pt->nprev, sizeof *p,
                                                cmp_u64);
            uint32_t fs = u32at(tb[i], pt->l.t_state);
            if (!p || p->coro != u64at(tb[i], pt->l.t_coro) || fs < 1 || fs > 2)
                continue;
        }
        if (pyt_task(pt, &c->t[c->n], rt[i].addr, tb[i], running, nrunning, true))
            c->n++;
    }
    free(rt);
    free(tb);
    /* in address order (pt->objs was), kept for the next census */
    pt->nprev = 0;
    if (c->n && pt->capprev < c->n) {
        struct ls_pytask *p = realloc(pt->prev, c->n * sizeof *p);
        if (p) {
            pt->prev = p;
            pt->capprev = c->n;
        }
    }
    if (c->n && pt->capprev >= c->n) {
        memcpy(pt->prev, c->t, c->n * sizeof *c->t);
        pt->nprev = c->n;
    }
    c->flags |= fl | (pt->gone ? LS_PYT_GONE : 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    c->dur = ((int64_t)t1.tv_sec * 1000000000 + t1.tv_nsec) - c->ts;
    return pt->gone ? -1 : 0;
}

bool ls_pytasks_reread(ls_pytasks *pt, struct ls_pytask *t)
{
    uint8_t b[PYT_TASK_READ];
    if (pt->gone || pyt_read(pt, b, sizeof b, t->addr) ||
        pyt_type(pt, u64at(b, 8))->kind != T_TASK || u64at(b, pt->l.t_coro) != t->coro)
        return false;
    struct ls_pytask *n = malloc(sizeof *n);
    if (!n)
        return false;
    pt->chains_left = 1;            /* what the census left of its steps: a target whose
                                     * every new task is read again costs no more */
    bool ok = pyt_task(pt, n, t->addr, b, pt->running, pt->nrunning, false);
    if (ok) {
        memcpy(t, n, sizeof *n);
        struct ls_pytask *p = pt->nprev ? bsearch(&t->addr, pt->prev, pt->nprev, sizeof *p,
                                                  cmp_u64) : NULL;
        if (p)
            memcpy(p, n, sizeof *n);  /* the next census's cache */
    }
    free(n);
    return ok;
}

ls_pytasks *ls_pytasks_new(ls_py *py, const char **why)
{
    static const char *dummy;
    if (!why)
        why = &dummy;
    *why = NULL;
    if (!py) {
        *why = "not CPython";
        return NULL;
    }
    struct pyt_layout l;
    if (pyt_layout(py->cfg.version & 0xff, &l)) {
        *why = "no asyncio layout for this CPython";
        return NULL;
    }
    ls_pytasks *pt = calloc(1, sizeof *pt);
    if (!pt) {
        *why = "out of memory";
        return NULL;
    }
    pt->py = py;
    pt->pid = py->pid;
    pt->l = l;
    /* 3.13+: what the interpreter publishes (_Py_DebugOffsets, checked
     * by ls_py_detect), over the layout: where sys.modules is; 3.14+ the
     * coroutine's frame and state and the frame's fields, each within
     * the bytes pyt_coro reads (a frame header of 80 bytes, its slots
     * from at most 128 on, the frame at most 64 bytes after the state:
     * PYT_CORO_WIN) */
    const struct ls_py_dbg *d = &py->dbg;
    const struct ls_py_cfg *c = &py->cfg;
    if (l.minor >= 13 && d->ok && d->imports_modules)
        pt->l.interp_modules = d->imports_modules;
    if (l.minor >= 14) {
        if (!d->ok || c->frame_code > 72 || c->frame_instr > 72 || d->stackpointer > 72 ||
            c->frame_localsplus < 80 || c->frame_localsplus > 128 ||
            d->gi_frame_state >= d->gi_iframe || d->gi_iframe - d->gi_frame_state > 64) {
            free(pt);
            *why = "CPython's debug offsets do not fit the census";
            return NULL;
        }
        pt->l.f_code = c->frame_code;
        pt->l.f_instr = c->frame_instr;
        pt->l.f_localsplus = c->frame_localsplus;
        pt->l.f_stackptr = d->stackpointer;
        pt->l.cr_frame = d->gi_iframe;
        pt->l.cr_state = d->gi_frame_state;
        pt->l.ts_running_task = c->tstate_running_task;   /* pystack_tables.c's */
    }
    return pt;
}

uint64_t ls_pytasks_current_dict(const ls_pytasks *pt)
{
    return pt ? pt->current : 0;
}

void ls_pytasks_type_slots(ls_pytasks *pt, uint64_t *tp_init, uint64_t *tp_finalize)
{
    *tp_init = *tp_finalize = 0;
    if (!pt || !pt->task_type)
        return;
    *tp_init = pyt_ptr(pt, pt->task_type + TP_INIT);
    *tp_finalize = pyt_ptr(pt, pt->task_type + TP_FINALIZE);
}

void ls_pytasks_task_off(ls_pytasks *pt, struct ls_pyt_task_off *o)
{
    const struct pyt_layout *l = &pt->l;
    *o = (struct ls_pyt_task_off){ l->t_state, l->t_log_tb, l->t_log_tb_bit, l->t_must_cancel,
                                    l->t_must_cancel_bit, l->t_ncancels, l->t_log_destroy,
                                    l->t_log_destroy_bit, l->t_exception, l->t_coro };
}

const char *ls_pyt_state_name(int state)
{
    static const char *const names[] = { "?", "ready", "running", "waiting", "finished",
                                         "failed", "cancelled" };
    return state >= 1 && state <= 6 ? names[state] : "?";
}

void ls_pyt_census_free(struct ls_pyt_census *c)
{
    free(c->t);
    memset(c, 0, sizeof *c);
}

void ls_pytasks_free(ls_pytasks *pt)
{
    if (!pt)
        return;
    free(pt->objs);
    free(pt->prev);
    free(pt);
}
