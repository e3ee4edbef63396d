/*
 * pystack.c -- CPython stacks for the recorder's generic loop mode: finding
 * a supported CPython in a process (ls_py_detect, which fills the
 * struct ls_py_cfg that BPF's ls_py_capture walks with), resolving what
 * BPF captured (ls_py_frame: code object -> function, file, line;
 * ls_py_task_name), and the same walk from user space (ls_py_capture_user,
 * process_vm_readv).  The walk is pywalk.h, shared with BPF; the layout of
 * the captured stack is pystack.h; how each version is walked and how the
 * tables were verified: PYTHON.md.
 *
 * Supported: CPython 3.10, 3.11, 3.12, 3.13 (default builds, x86-64,
 * glibc), as a static interpreter or with libpython3.X.so.  One offset table
 * per minor version, read from the debug information of pyenv builds
 * (3.10.13, 3.11.7, 3.12.1, 3.13.0) with gdb and checked from inside each
 * interpreter with ctypes (tests/tracer/test_pystack.py); at detect time the
 * table is checked against the target's own data: the type objects' names,
 * the first thread state's back pointer and thread id, and in 3.13 the
 * _Py_DebugOffsets at the start of _PyRuntime.  Anything else is refused
 * with a reason.
 *
 * Detection: /proc/PID/exe, then the libpython3.X.so mappings of
 * /proc/PID/maps; the symbols (_PyRuntime, Py_Version, the type objects)
 * from .dynsym/.symtab with libelf, plus the mapping's load bias.  The
 * version is Py_Version (3.11+) or, for 3.10, the "3.10.N" string of
 * .rodata.
 *
 * The target is hostile: every pointer, length and string read from it is
 * checked; loops are bounded; a line table is at most 64 KiB; strings are
 * converted to valid UTF-8 of at most 4095 bytes; the code-object cache
 * holds at most 4096 entries and 32 MiB of line tables and is emptied when
 * full; a cached code object is re-read (type and fields) on every use, so
 * a code object freed or replaced since the capture gives "?", not another
 * one's name.
 */
#define _GNU_SOURCE
#include "pystack.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#define LS_PY_STR_MAX 4095          /* bytes of a resolved string */
#define LS_PY_LINETABLE_MAX 65536   /* bytes of a line table read */
#define LS_PY_CACHE 4096            /* code objects cached (power of two) */
#define LS_PY_CACHE_BYTES (32u << 20) /* line-table bytes cached */
#define LS_PY_CODE_HDR 256          /* bytes of a code object read */

/* ---- reading the target ---- */

static int ls_py_read(pid_t pid, void *dst, size_t size, uint64_t addr)
{
    if (!size)
        return 0;
    if (addr < 4096 || addr + size < addr)
        return -1;
    struct iovec l = { dst, size }, r = { (void *)(uintptr_t)addr, size };
    ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
    return n == (ssize_t)size ? 0 : -1;
}

struct ls_pyw_uctx {
    pid_t pid;
    const struct ls_py_cfg *cfg;
    uint64_t *hrun;
    struct ls_pyw_scratch *sc;
};

#define LS_PYW_INLINE inline
#define LS_PYW_CTX struct ls_pyw_uctx *
#define LS_PYW_READ(ctx, dst, size, addr) ls_py_read((ctx)->pid, (dst), (size), (addr))
#define LS_PYW_CFG(ctx) ((ctx)->cfg)
#define LS_PYW_SCRATCH(ctx) ((ctx)->sc)
#define LS_PYW_HRUN_GET(ctx) (*(ctx)->hrun)
#define LS_PYW_HRUN_SET(ctx, code) (*(ctx)->hrun = (code))
#define LS_PYW_TS_GET(ctx, tid) ((void)(tid), (__u64)0)
#define LS_PYW_TS_PUT(ctx, tid, ts) ((void)0)
#define LS_PYW_LOOP(nr, fn, arg) \
    do { for (__u32 i_ = 0; i_ < (nr); i_++) if ((fn)(i_, (arg))) break; } while (0)
#include "pywalk.h"

/* ---- the tables ---- */

#define N LS_PY_NONE

/* Offsets read with gdb from the DWARF of pyenv's libpython3.X.so builds
 * (ptype/offsetof on PyThreadState, _PyInterpreterFrame, PyCodeObject,
 * TaskObj of _asyncio.so, ...); see PYTHON.md. */
static int ls_py_table(unsigned minor, struct ls_py_cfg *c)
{
    struct ls_py_cfg t = {
        /* common to 3.10-3.13 */
        .interp_next = 0, .tstate_next = 8, .tstate_interp = 16,
        .bytes_size = 16, .bytes_sval = 32,
        .handle_callback = 24,      /* sorted __slots__: _args, _callback, ... */
        .callback_task = 16, .cfunc_self = 24, .type_basicsize = 32,
        .unicode_len = 16, .unicode_state = 32, .long_digit = 24,
        .code_filename = 112, .code_name = 120, .code_qualname = 128,
        .code_linetable = 136, .code_code = N, .pthread_tid = N,
        .cframe_current = N, .frame_owner = N, .frame_is_entry = N, .owner_cstack = N,
        .kind = LS_PY_KIND_IFRAME, .frame_localsplus = 72, .frame_read = 80,
    };
    switch (minor) {
    case 10:
        t.kind = LS_PY_KIND_FRAMEOBJ;
        t.runtime_interp_head = 32; t.interp_threads_head = 8;      /* tstate_head */
        t.tstate_tid = 176;                                         /* thread_id */
        t.pthread_tid = 720;                                        /* glibc 2.2x-2.3x x86-64 */
        t.tstate_frame = 24;
        t.frame_code = 32; t.frame_previous = 24; t.frame_instr = 96; /* f_lasti */
        t.frame_localsplus = 352; t.frame_read = 104;
        t.code_adaptive = N; t.code_code = 48;
        t.code_filename = 104; t.code_name = 112; t.code_qualname = N;
        t.code_linetable = 120; t.code_firstlineno = 40;
        t.task_name = 168;
        t.unicode_data = 48; t.unicode_cdata = 72;
        t.long_kind = LS_PY_LONG_SIZE;
        break;
    case 11:
        t.runtime_interp_head = 40; t.interp_threads_head = 16;
        t.tstate_tid = 160; t.tstate_frame = 56; t.cframe_current = 8;
        t.frame_code = 32; t.frame_previous = 48; t.frame_instr = 56;
        t.frame_is_entry = 68; t.frame_owner = 69;
        t.code_adaptive = 184; t.code_firstlineno = 72;
        t.task_name = 144;
        t.unicode_data = 48; t.unicode_cdata = 72;
        t.long_kind = LS_PY_LONG_SIZE;
        break;
    case 12:
        t.runtime_interp_head = 40; t.interp_threads_head = 72;
        t.tstate_tid = 144; t.tstate_frame = 56; t.cframe_current = 0;
        t.frame_code = 0; t.frame_previous = 8; t.frame_instr = 56;
        t.frame_owner = 70; t.owner_cstack = 3;
        t.code_adaptive = 192; t.code_firstlineno = 68;
        t.task_name = 144;
        t.unicode_data = 40; t.unicode_cdata = 56;
        t.long_kind = LS_PY_LONG_TAG;
        break;
    case 13:
        t.runtime_interp_head = 632; t.interp_threads_head = 7344; t.interp_next = 7264;
        t.tstate_tid = 160; t.tstate_frame = 72;                    /* current_frame */
        t.frame_code = 0; t.frame_previous = 8; t.frame_instr = 56;
        t.frame_owner = 70; t.owner_cstack = 3;
        t.code_adaptive = 200; t.code_firstlineno = 68;
        t.task_name = 128;
        t.unicode_data = 40; t.unicode_cdata = 56;
        t.long_kind = LS_PY_LONG_TAG;
        break;
    default:
        return -1;
    }
    t.version = 0x0300 | minor;
    *c = t;
    return 0;
}

#undef N

/* ---- the handle ---- */

struct ls_py_code {
    uint64_t addr;                  /* 0: empty slot */
    uint64_t name, filename, linetable;
    int32_t firstlineno;
    char *function, *file;
    uint8_t *lt;
    uint32_t lt_len;
};

struct ls_py {
    pid_t pid;
    struct ls_py_cfg cfg;
    uint64_t bytes_type;
    uint64_t hrun;                  /* Handle._run's code, once seen (user-space walks) */
    struct ls_py_code cache[LS_PY_CACHE];
    size_t ncached, cached_bytes;
    char function[LS_PY_STR_MAX + 1], file[LS_PY_STR_MAX + 1];
    char task[4 * LS_PY_TASK_NAME + 32];
};

/* ---- UTF-8 ---- */

/* Appends code point cp (U+FFFD if it is not a scalar value or is NUL) to
 * out[*n], never past cap - 1 bytes; false when it did not fit. */
static bool ls_py_put(char *out, size_t *n, size_t cap, uint32_t cp)
{
    unsigned char b[4];
    size_t k;
    if (cp == 0 || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        cp = 0xfffd;
    if (cp < 0x80) {
        b[0] = cp; k = 1;
    } else if (cp < 0x800) {
        b[0] = 0xc0 | cp >> 6; b[1] = 0x80 | (cp & 0x3f); k = 2;
    } else if (cp < 0x10000) {
        b[0] = 0xe0 | cp >> 12; b[1] = 0x80 | ((cp >> 6) & 0x3f); b[2] = 0x80 | (cp & 0x3f); k = 3;
    } else {
        b[0] = 0xf0 | cp >> 18; b[1] = 0x80 | ((cp >> 12) & 0x3f);
        b[2] = 0x80 | ((cp >> 6) & 0x3f); b[3] = 0x80 | (cp & 0x3f); k = 4;
    }
    if (*n + k > cap - 1)
        return false;
    memcpy(out + *n, b, k);
    *n += k;
    return true;
}

/* Characters of kind (1: ASCII/Latin-1, 2: UCS-2, 4: UCS-4) to UTF-8 in
 * out (cap bytes, NUL-terminated); ascii: bytes >= 0x80 are invalid. */
static void ls_py_units(const uint8_t *d, size_t nchars, unsigned kind, bool ascii,
                        char *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < nchars; i++) {
        uint32_t cp;
        if (kind == 1)
            cp = d[i];
        else if (kind == 2)
            cp = d[2 * i] | (uint32_t)d[2 * i + 1] << 8;
        else
            cp = d[4 * i] | (uint32_t)d[4 * i + 1] << 8 | (uint32_t)d[4 * i + 2] << 16 |
                 (uint32_t)d[4 * i + 3] << 24;
        if (ascii && cp >= 0x80)
            cp = 0xfffd;
        if (!ls_py_put(out, &n, cap, cp))
            break;
    }
    out[n] = 0;
}

/* The str object at addr as UTF-8 (malloc'd), NULL if it is not a
 * compact str of this process. */
static char *ls_py_str(ls_py *py, uint64_t addr)
{
    const struct ls_py_cfg *c = &py->cfg;
    uint8_t h[80];
    if (ls_py_read(py->pid, h, sizeof h, addr))
        return NULL;
    uint64_t type, len;
    uint32_t st;
    memcpy(&type, h + 8, 8);
    memcpy(&len, h + c->unicode_len, 8);
    memcpy(&st, h + c->unicode_state, 4);
    if (type != c->unicode_type || !(st & LS_PYW_U_COMPACT))
        return NULL;
    unsigned kind = LS_PYW_U_KIND(st);
    bool ascii = st & LS_PYW_U_ASCII;
    if ((kind != 1 && kind != 2 && kind != 4) || (ascii && kind != 1) || len > (1u << 30))
        return NULL;
    size_t nchars = len > LS_PY_STR_MAX ? LS_PY_STR_MAX : len;
    uint8_t *d = malloc(nchars * kind + 1);
    char *out = malloc(LS_PY_STR_MAX + 1);
    if (!d || !out || ls_py_read(py->pid, d, nchars * kind,
                                 addr + (ascii ? c->unicode_data : c->unicode_cdata))) {
        free(d);
        free(out);
        return NULL;
    }
    ls_py_units(d, nchars, kind, ascii, out, LS_PY_STR_MAX + 1);
    free(d);
    return out;
}

/* ---- line tables ---- */

/* 3.10 (PEP 626): pairs (bytecode bytes: unsigned, line delta: signed,
 * -128 = no line); addr in bytes. */
static int ls_py_line310(const uint8_t *t, size_t n, int first, long addr)
{
    if (addr < 0)
        return first;
    long line = first, end = 0;
    for (size_t i = 0; i + 1 < n; i += 2) {
        long start = end;
        end += t[i];
        int8_t ld = (int8_t)t[i + 1];
        long l = -1;
        if (ld != -128) {
            line += ld;
            l = line;
        }
        if (start <= addr && addr < end)
            return l > 0 && l < INT_MAX ? (int)l : 0;
    }
    return 0;
}

static uint32_t ls_py_varint(const uint8_t *t, size_t n, size_t *i)
{
    uint32_t v = 0;
    unsigned shift = 0;
    while (*i < n && shift < 32) {
        uint8_t b = t[(*i)++];
        v |= (uint32_t)(b & 63) << shift;
        shift += 6;
        if (!(b & 64))
            break;
    }
    return v;
}

static long ls_py_svarint(const uint8_t *t, size_t n, size_t *i)
{
    uint32_t v = ls_py_varint(t, n, i);
    return v & 1 ? -(long)(v >> 1) : (long)(v >> 1);
}

/* 3.11+ (Objects/locations.md): entries 1cccclll, l+1 code units;
 * c = 15 no location, 14 long form, 13 no column, 10-12 one line (delta
 * c - 10), 0-9 short form (same line).  addr in bytes. */
static int ls_py_line311(const uint8_t *t, size_t n, int first, long addr)
{
    if (addr < 0)
        return first;
    long line = first, end = 0;
    size_t i = 0;
    while (i < n) {
        uint8_t b = t[i++];
        if (!(b & 0x80))
            return 0;                       /* not an entry start: corrupt */
        unsigned code = (b >> 3) & 15;
        long start = end, l;
        end += ((b & 7) + 1) * 2;
        switch (code) {
        case 15:
            l = -1;
            break;
        case 14:
            line += ls_py_svarint(t, n, &i);
            l = line;
            ls_py_varint(t, n, &i);         /* end line delta */
            ls_py_varint(t, n, &i);         /* column + 1 */
            ls_py_varint(t, n, &i);         /* end column + 1 */
            break;
        case 13:
            line += ls_py_svarint(t, n, &i);
            l = line;
            break;
        case 10: case 11: case 12:
            line += code - 10;
            l = line;
            i += 2;
            break;
        default:
            l = line;
            i += 1;
            break;
        }
        if (line < INT_MIN || line > INT_MAX)
            return 0;
        if (start <= addr && addr < end)
            return l > 0 ? (int)l : 0;
    }
    return 0;
}

/* ---- code objects ---- */

static void ls_py_cache_clear(ls_py *py)
{
    for (size_t i = 0; i < LS_PY_CACHE; i++) {
        struct ls_py_code *e = &py->cache[i];
        if (e->addr) {
            free(e->function);
            free(e->file);
            free(e->lt);
        }
        memset(e, 0, sizeof *e);
    }
    py->ncached = 0;
    py->cached_bytes = 0;
}

struct ls_py_hdr {
    uint64_t name, qualname, filename, linetable;
    int32_t firstlineno;
};

/* Reads the code object at addr; -1 if it is not one (now). */
static int ls_py_code_hdr(ls_py *py, uint64_t addr, struct ls_py_hdr *h)
{
    const struct ls_py_cfg *c = &py->cfg;
    uint8_t b[LS_PY_CODE_HDR];
    if (ls_py_read(py->pid, b, sizeof b, addr))
        return -1;
    if (ls_pyw_u64(b, 8, sizeof b) != c->code_type || !c->code_type)
        return -1;
    h->name = ls_pyw_u64(b, c->code_name, sizeof b);
    h->qualname = c->code_qualname != LS_PY_NONE ? ls_pyw_u64(b, c->code_qualname, sizeof b) : 0;
    h->filename = ls_pyw_u64(b, c->code_filename, sizeof b);
    h->linetable = ls_pyw_u64(b, c->code_linetable, sizeof b);
    h->firstlineno = (int32_t)ls_pyw_u32(b, c->code_firstlineno, sizeof b);
    return 0;
}

static uint8_t *ls_py_bytes(ls_py *py, uint64_t addr, uint32_t *len)
{
    const struct ls_py_cfg *c = &py->cfg;
    uint8_t h[40];
    *len = 0;
    if (ls_py_read(py->pid, h, sizeof h, addr))
        return NULL;
    int64_t size;
    memcpy(&size, h + c->bytes_size, 8);
    if (ls_pyw_u64(h, 8, sizeof h) != py->bytes_type || size < 0)
        return NULL;
    if (size > LS_PY_LINETABLE_MAX)
        size = LS_PY_LINETABLE_MAX;         /* the first 64 KiB: lines of the start */
    uint8_t *d = malloc(size ? size : 1);
    if (!d || ls_py_read(py->pid, d, size, addr + c->bytes_sval)) {
        free(d);
        return NULL;
    }
    *len = size;
    return d;
}

static struct ls_py_code *ls_py_code(ls_py *py, uint64_t addr)
{
    struct ls_py_hdr h;
    if (!addr || ls_py_code_hdr(py, addr, &h))
        return NULL;
    size_t i = (addr >> 4) * 0x9E3779B97F4A7C15ull >> 52 & (LS_PY_CACHE - 1);
    for (size_t k = 0; k < LS_PY_CACHE; k++, i = (i + 1) & (LS_PY_CACHE - 1)) {
        struct ls_py_code *e = &py->cache[i];
        if (!e->addr)
            break;
        if (e->addr != addr)
            continue;
        if (e->name == (h.qualname ? h.qualname : h.name) && e->filename == h.filename &&
            e->linetable == h.linetable && e->firstlineno == h.firstlineno)
            return e;
        /* another code object at the same address: resolve it again */
        free(e->function);
        free(e->file);
        free(e->lt);
        py->cached_bytes -= e->lt_len;
        e->function = e->file = NULL;
        e->lt = NULL;
        e->lt_len = 0;
        goto fill;
    }
    if (py->ncached >= LS_PY_CACHE * 3 / 4 || py->cached_bytes > LS_PY_CACHE_BYTES) {
        ls_py_cache_clear(py);
        i = (addr >> 4) * 0x9E3779B97F4A7C15ull >> 52 & (LS_PY_CACHE - 1);
    }
    while (py->cache[i].addr)
        i = (i + 1) & (LS_PY_CACHE - 1);
    py->ncached++;
    struct ls_py_code *e;
fill:
    e = &py->cache[i];
    e->addr = addr;
    e->name = h.qualname ? h.qualname : h.name;
    e->filename = h.filename;
    e->linetable = h.linetable;
    e->firstlineno = h.firstlineno;
    e->function = ls_py_str(py, e->name);
    if (!e->function && h.qualname)
        e->function = ls_py_str(py, h.name);
    e->file = ls_py_str(py, h.filename);
    e->lt = ls_py_bytes(py, h.linetable, &e->lt_len);
    py->cached_bytes += e->lt_len;
    return e;
}

int ls_py_frame(ls_py *py, const struct ls_py_frame *f, const char **function,
                const char **file, int *line)
{
    *function = "?";
    *file = "?";
    *line = 0;
    if (!py || !f)
        return -1;
    struct ls_py_code *e = ls_py_code(py, f->code);
    if (!e)
        return -1;
    snprintf(py->function, sizeof py->function, "%s", e->function ? e->function : "?");
    snprintf(py->file, sizeof py->file, "%s", e->file ? e->file : "?");
    *function = py->function;
    *file = py->file;
    if (e->lt) {
        int first = e->firstlineno > 0 ? e->firstlineno : 0;
        *line = py->cfg.kind == LS_PY_KIND_FRAMEOBJ
                    ? ls_py_line310(e->lt, e->lt_len, first, f->instr)
                    : ls_py_line311(e->lt, e->lt_len, first, f->instr);
    }
    return 0;
}

const char *ls_py_task_name(ls_py *py, const struct ls_pystack *s)
{
    if (!py || !s || !s->task)
        return NULL;
    uint32_t n = s->task_name_len > LS_PY_TASK_NAME ? LS_PY_TASK_NAME : s->task_name_len;
    const uint8_t *d = (const uint8_t *)s->task_name;
    if (s->flags & LS_PYS_NAME_COUNTER) {
        uint64_t v = 0;
        if (n != 8)
            return NULL;
        memcpy(&v, d, 8);
        snprintf(py->task, sizeof py->task, "Task-%llu", (unsigned long long)v);
        return py->task;
    }
    if (s->flags & LS_PYS_NAME_UCS4)
        ls_py_units(d, n / 4, 4, false, py->task, sizeof py->task);
    else if (s->flags & LS_PYS_NAME_UCS2)
        ls_py_units(d, n / 2, 2, false, py->task, sizeof py->task);
    else
        ls_py_units(d, n, 1, !(s->flags & LS_PYS_NAME_LATIN1), py->task, sizeof py->task);
    return py->task;
}

int ls_py_capture_user(ls_py *py, __u32 tid, struct ls_pystack *out)
{
    struct ls_pyw_scratch sc;
    memset(out, 0, sizeof *out);
    if (!py)
        return -1;
    struct ls_pyw_uctx u = { py->pid, &py->cfg, &py->hrun, &sc };
    ls_pyw_walk(&u, tid, out);
    return out->flags & (LS_PYS_NO_THREAD | LS_PYS_READ_ERROR) && !out->nframes ? -1 : 0;
}

/* ---- detection ---- */

enum { S_RUNTIME, S_VERSION, S_CODE, S_UNICODE, S_LONG, S_CFUNC, S_CMETH, S_METHOD, S_BYTES, S_N };
static const char *const ls_py_syms[S_N] = {
    "_PyRuntime", "Py_Version", "PyCode_Type", "PyUnicode_Type", "PyLong_Type",
    "PyCFunction_Type", "PyCMethod_Type", "PyMethod_Type", "PyBytes_Type",
};

struct ls_py_elf {
    uint64_t sym[S_N];              /* link-time addresses, 0 = absent */
    bool found[S_N];
    int type;                       /* ET_EXEC / ET_DYN */
    uint64_t min_vaddr;             /* lowest PT_LOAD p_vaddr, page aligned */
    char rodata_version[32];        /* "3.10.13" found in .rodata, or "" */
};

static bool ls_py_is_version_str(const char *s, size_t n)
{
    /* 3.<minor>.<micro>, then optional [abc]N / rcN and "+" */
    size_t i = 0;
    if (n < 5 || n > 20 || s[0] != '3' || s[1] != '.')
        return false;
    i = 2;
    size_t d = i;
    while (i < n && isdigit((unsigned char)s[i]))
        i++;
    if (i == d || i - d > 2 || i >= n || s[i] != '.')
        return false;
    d = ++i;
    while (i < n && isdigit((unsigned char)s[i]))
        i++;
    if (i == d || i - d > 3)
        return false;
    while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '+'))
        i++;
    return i == n;
}

static int ls_py_elf_read(int fd, struct ls_py_elf *out)
{
    memset(out, 0, sizeof *out);
    elf_version(EV_CURRENT);
    Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (!e)
        return -1;
    GElf_Ehdr eh;
    size_t shstrndx, nph;
    if (!gelf_getehdr(e, &eh) || elf_getshdrstrndx(e, &shstrndx) || elf_getphdrnum(e, &nph)) {
        elf_end(e);
        return -1;
    }
    out->type = eh.e_type;
    out->min_vaddr = UINT64_MAX;
    for (size_t i = 0; i < nph; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(e, i, &ph) && ph.p_type == PT_LOAD && ph.p_vaddr < out->min_vaddr)
            out->min_vaddr = ph.p_vaddr & ~(uint64_t)4095;
    }
    if (out->min_vaddr == UINT64_MAX)
        out->min_vaddr = 0;
    for (Elf_Scn *scn = elf_nextscn(e, NULL); scn; scn = elf_nextscn(e, scn)) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh))
            continue;
        const char *sname = elf_strptr(e, shstrndx, sh.sh_name);
        if (sname && !strcmp(sname, ".rodata") && sh.sh_type == SHT_PROGBITS &&
            !out->rodata_version[0]) {
            Elf_Data *d = elf_getdata(scn, NULL);
            const char *p = d ? d->d_buf : NULL;
            size_t n = d && d->d_buf ? d->d_size : 0;
            /* NUL-delimited strings that look like "3.10.13" */
            for (size_t i = 0; i + 1 < n; i++) {
                /* a string of its own or the tail of another (the
                 * compiler merges "3.10.13" into ".../versions/3.10.13") */
                if (p[i] != '3' || p[i + 1] != '.' ||
                    (i && (isdigit((unsigned char)p[i - 1]) || p[i - 1] == '.')))
                    continue;
                size_t len = strnlen(p + i, n - i < 24 ? n - i : 24);
                if (ls_py_is_version_str(p + i, len)) {
                    memcpy(out->rodata_version, p + i, len);
                    out->rodata_version[len] = 0;
                    break;
                }
            }
        }
        if (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB)
            continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        if (!d || !sh.sh_entsize)
            continue;
        size_t nsym = sh.sh_size / sh.sh_entsize;
        for (size_t i = 0; i < nsym; i++) {
            GElf_Sym sym;
            if (!gelf_getsym(d, i, &sym) || !sym.st_value || sym.st_shndx == SHN_UNDEF)
                continue;
            const char *name = elf_strptr(e, sh.sh_link, sym.st_name);
            if (!name || (name[0] != '_' && name[0] != 'P'))
                continue;
            for (int k = 0; k < S_N; k++)
                if (!out->found[k] && !strcmp(name, ls_py_syms[k])) {
                    out->sym[k] = sym.st_value;
                    out->found[k] = true;
                }
        }
    }
    elf_end(e);
    return 0;
}

struct ls_py_map {
    uint64_t start, end, off;
    unsigned long ino;
    unsigned dmaj, dmin;
    char path[PATH_MAX];
};

/* Calls fn for each mapping of /proc/PID/maps (at most 65536). */
static int ls_py_maps(pid_t pid, int (*fn)(const struct ls_py_map *, void *), void *arg)
{
    char p[64], line[PATH_MAX + 256];
    snprintf(p, sizeof p, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(p, "re");
    if (!f)
        return -1;
    int rc = 0, n = 0;
    while (fgets(line, sizeof line, f) && n++ < 65536) {
        struct ls_py_map m;
        char perms[8];
        int pos = 0;
        memset(&m, 0, sizeof m);
        if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %lu %n", &m.start,
                   &m.end, perms, &m.off, &m.dmaj, &m.dmin, &m.ino, &pos) < 7)
            continue;
        size_t l = strcspn(line + pos, "\n");
        if (l >= sizeof m.path)
            l = sizeof m.path - 1;
        memcpy(m.path, line + pos, l);
        m.path[l] = 0;
        if ((rc = fn(&m, arg)))
            break;
    }
    fclose(f);
    return rc > 0 ? rc : 0;
}

struct ls_py_find {
    unsigned long ino;
    unsigned dmaj, dmin;
    uint64_t base;                  /* lowest start of a mapping at file offset 0 */
    bool found;
    /* libpython candidates */
    struct ls_py_map lib;
    bool lib_found;
};

static int ls_py_find_file(const struct ls_py_map *m, void *arg)
{
    struct ls_py_find *f = arg;
    if (m->ino == f->ino && m->dmaj == f->dmaj && m->dmin == f->dmin && m->off == 0 &&
        (!f->found || m->start < f->base)) {
        f->base = m->start;
        f->found = true;
    }
    return 0;
}

static int ls_py_find_lib(const struct ls_py_map *m, void *arg)
{
    struct ls_py_find *f = arg;
    const char *b = strrchr(m->path, '/');
    b = b ? b + 1 : m->path;
    if (!f->lib_found && m->off == 0 && !strncmp(b, "libpython3.", 11) && strstr(b, ".so")) {
        f->lib = *m;
        f->lib_found = true;
    }
    return 0;
}

static int ls_py_is_thread_of(pid_t pid, uint64_t tid)
{
    char p[64];
    struct stat st;
    if (!tid || tid > INT_MAX)
        return 0;
    snprintf(p, sizeof p, "/proc/%d/task/%llu", (int)pid, (unsigned long long)tid);
    return stat(p, &st) == 0;
}

static int ls_py_type_name_is(pid_t pid, uint64_t type, const char *want)
{
    char buf[32] = { 0 };
    uint64_t name = 0;
    size_t n = strlen(want) + 1;
    if (!type || ls_py_read(pid, &name, 8, type + 24) || n > sizeof buf ||
        ls_py_read(pid, buf, n, name))
        return 0;
    return !memcmp(buf, want, n);
}

/* 3.13: the runtime's own offsets (_Py_DebugOffsets, 8-byte words from the
 * start of _PyRuntime) against the table.  Word indexes follow the field
 * order of Include/internal/pycore_runtime.h in 3.13. */
static const char *ls_py_check_debug_offsets(pid_t pid, const struct ls_py_cfg *c, uint32_t hexver)
{
    uint64_t w[71];
    if (ls_py_read(pid, w, sizeof w, c->runtime))
        return "cannot read _Py_DebugOffsets";
    if (memcmp(&w[0], "xdebugpy", 8))
        return "no _Py_DebugOffsets cookie";
    if ((w[1] >> 16) != (hexver >> 16))
        return "_Py_DebugOffsets: another version";
    if (w[2])
        return "free-threaded build: unsupported";
    static const struct { int word; size_t off; } chk[] = {
        { 5, offsetof(struct ls_py_cfg, runtime_interp_head) },
        { 8, offsetof(struct ls_py_cfg, interp_next) },
        { 9, offsetof(struct ls_py_cfg, interp_threads_head) },
        { 21, offsetof(struct ls_py_cfg, tstate_next) },
        { 22, offsetof(struct ls_py_cfg, tstate_interp) },
        { 23, offsetof(struct ls_py_cfg, tstate_frame) },
        { 25, offsetof(struct ls_py_cfg, tstate_tid) },
        { 29, offsetof(struct ls_py_cfg, frame_previous) },
        { 30, offsetof(struct ls_py_cfg, frame_code) },
        { 31, offsetof(struct ls_py_cfg, frame_instr) },
        { 32, offsetof(struct ls_py_cfg, frame_localsplus) },
        { 33, offsetof(struct ls_py_cfg, frame_owner) },
        { 35, offsetof(struct ls_py_cfg, code_filename) },
        { 36, offsetof(struct ls_py_cfg, code_name) },
        { 37, offsetof(struct ls_py_cfg, code_qualname) },
        { 38, offsetof(struct ls_py_cfg, code_linetable) },
        { 39, offsetof(struct ls_py_cfg, code_firstlineno) },
        { 43, offsetof(struct ls_py_cfg, code_adaptive) },
        { 62, offsetof(struct ls_py_cfg, bytes_size) },     /* lv_tag: 16 as well */
        { 63, offsetof(struct ls_py_cfg, long_digit) },
        { 65, offsetof(struct ls_py_cfg, bytes_size) },
        { 66, offsetof(struct ls_py_cfg, bytes_sval) },
        { 68, offsetof(struct ls_py_cfg, unicode_state) },
        { 69, offsetof(struct ls_py_cfg, unicode_len) },
        { 70, offsetof(struct ls_py_cfg, unicode_data) },
    };
    for (size_t i = 0; i < sizeof chk / sizeof chk[0]; i++) {
        uint32_t v;
        memcpy(&v, (const char *)c + chk[i].off, 4);
        if (w[chk[i].word] != v)
            return "_Py_DebugOffsets differ from the verified table";
    }
    return NULL;
}

/* The first thread state: back pointer and thread id; 3.10 learns where
 * glibc keeps the tid in struct pthread if not at the usual place. */
static const char *ls_py_check_threads(pid_t pid, struct ls_py_cfg *c)
{
    uint64_t interp = 0, ts = 0, back = 0, tid = 0;
    if (ls_py_read(pid, &interp, 8, c->runtime + c->runtime_interp_head))
        return "cannot read _PyRuntime";
    if (!interp)
        return "CPython not initialized yet";
    if (ls_py_read(pid, &ts, 8, interp + c->interp_threads_head) || !ts)
        return "no thread state yet";
    if (ls_py_read(pid, &back, 8, ts + c->tstate_interp) || back != interp)
        return "thread state does not point back to its interpreter (wrong table?)";
    if (ls_py_read(pid, &tid, 8, ts + c->tstate_tid))
        return "cannot read a thread state";
    if (c->pthread_tid == LS_PY_NONE)
        return ls_py_is_thread_of(pid, tid) ? NULL : "native_thread_id is not a thread of the process";
    /* 3.10: tid is a pthread_t */
    uint32_t t = 0;
    if (!ls_py_read(pid, &t, 4, tid + c->pthread_tid) && ls_py_is_thread_of(pid, t))
        return NULL;
    uint32_t words[512];
    if (tid < 4096 || ls_py_read(pid, words, sizeof words, tid))
        return "cannot read the thread's struct pthread";
    for (unsigned i = 4; i < 512; i++)
        if (ls_py_is_thread_of(pid, words[i]) && words[i] > 1) {
            c->pthread_tid = i * 4;
            return NULL;
        }
    return "no thread id in the thread's struct pthread";
}

ls_py *ls_py_detect(pid_t pid, struct ls_py_cfg *cfg, char *desc, size_t desc_len,
                    const char **why)
{
    static const char *dummy;
    if (!why)
        why = &dummy;
    *why = NULL;
    if (desc && desc_len)
        desc[0] = 0;
    memset(cfg, 0, sizeof *cfg);

    char p[PATH_MAX + 64];
    struct stat st;
    snprintf(p, sizeof p, "/proc/%d/exe", (int)pid);
    if (stat(p, &st)) {
        *why = errno == ENOENT ? "no such process" : "cannot read /proc/PID/exe";
        return NULL;
    }
    struct ls_py_elf elf;
    struct ls_py_find find = { .ino = st.st_ino, .dmaj = major(st.st_dev), .dmin = minor(st.st_dev) };
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    int ok = fd >= 0 && !ls_py_elf_read(fd, &elf) && elf.found[S_RUNTIME];
    if (fd >= 0)
        close(fd);
    char fname[PATH_MAX] = "";
    if (ok) {
        ls_py_maps(pid, ls_py_find_file, &find);
        if (readlink(p, fname, sizeof fname - 1) < 0)
            fname[0] = 0;
    } else {
        /* the interpreter in a libpython3.X.so */
        ls_py_maps(pid, ls_py_find_lib, &find);
        if (!find.lib_found) {
            *why = "not CPython";
            return NULL;
        }
        snprintf(p, sizeof p, "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)pid,
                 find.lib.start, find.lib.end);
        fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            snprintf(p, sizeof p, "/proc/%d/root%s", (int)pid, find.lib.path);
            fd = open(p, O_RDONLY | O_CLOEXEC);
        }
        ok = fd >= 0 && !ls_py_elf_read(fd, &elf) && elf.found[S_RUNTIME];
        if (fd >= 0)
            close(fd);
        if (!ok) {
            *why = "not CPython (no _PyRuntime in libpython)";
            return NULL;
        }
        find.ino = find.lib.ino;
        find.dmaj = find.lib.dmaj;
        find.dmin = find.lib.dmin;
        find.found = false;
        ls_py_maps(pid, ls_py_find_file, &find);
        snprintf(fname, sizeof fname, "%s", find.lib.path);
    }
    uint64_t bias = 0;
    if (elf.type == ET_DYN) {
        if (!find.found) {
            *why = "CPython: no mapping of the interpreter's file";
            return NULL;
        }
        bias = find.base - elf.min_vaddr;
    }

    /* the version */
    uint32_t hex = 0;
    unsigned minor = 0, micro = 0;
    char extra[16] = "";
    if (elf.found[S_VERSION]) {
        if (ls_py_read(pid, &hex, 4, elf.sym[S_VERSION] + bias)) {
            *why = "CPython: cannot read Py_Version";
            return NULL;
        }
        if ((hex >> 24) != 3) {
            *why = "CPython: Py_Version is not 3.x";
            return NULL;
        }
        minor = hex >> 16 & 0xff;
        micro = hex >> 8 & 0xff;
        unsigned level = hex >> 4 & 0xf, serial = hex & 0xf;
        if (level != 0xf)
            snprintf(extra, sizeof extra, "%s%u",
                     level == 0xa ? "a" : level == 0xb ? "b" : level == 0xc ? "rc" : "?", serial);
    } else if (elf.rodata_version[0]) {
        if (sscanf(elf.rodata_version, "3.%u.%u", &minor, &micro) != 2) {
            *why = "CPython: version unknown";
            return NULL;
        }
        const char *x = elf.rodata_version + 2;
        x += strspn(x, "0123456789");
        x += 1 + strspn(x + 1, "0123456789");
        snprintf(extra, sizeof extra, "%s", x);
        hex = 0x03000000 | minor << 16 | micro << 8 | (extra[0] ? 0 : 0xf0);
        /* the file's name, where it has one, must agree */
        const char *b = strrchr(fname, '/');
        b = b ? b + 1 : fname;
        unsigned fm;
        if ((sscanf(b, "libpython3.%u", &fm) == 1 || sscanf(b, "python3.%u", &fm) == 1) && fm != minor) {
            *why = "CPython: version string and file name disagree";
            return NULL;
        }
    } else {
        *why = "CPython: version unknown";
        return NULL;
    }
    static char whybuf[96];
    if (minor < 10 || minor > 13) {
        snprintf(whybuf, sizeof whybuf, "CPython 3.%u: unsupported", minor);
        *why = whybuf;
        return NULL;
    }
    if (extra[0]) {
        snprintf(whybuf, sizeof whybuf, "CPython 3.%u.%u%s: pre-release, unsupported", minor,
                 micro, extra);
        *why = whybuf;
        return NULL;
    }
    struct ls_py_cfg c;
    ls_py_table(minor, &c);
    c.runtime = elf.sym[S_RUNTIME] + bias;
#define T(k) (elf.found[k] ? elf.sym[k] + bias : 0)
    c.code_type = T(S_CODE);
    c.unicode_type = T(S_UNICODE);
    c.long_type = T(S_LONG);
    c.cfunction_type = T(S_CFUNC);
    c.cmethod_type = T(S_CMETH);
    c.method_type = T(S_METHOD);
    uint64_t bytes_type = T(S_BYTES);
#undef T
    /* initialized (before: interpreters.head is NULL, and the loader may
     * not even have relocated the type objects yet)? */
    uint64_t head = 0;
    if (ls_py_read(pid, &head, 8, c.runtime + c.runtime_interp_head) || !head) {
        snprintf(whybuf, sizeof whybuf, "CPython 3.%u.%u: not initialized yet", minor, micro);
        *why = whybuf;
        return NULL;
    }
    /* the symbols against memory: their tp_name */
    if (!ls_py_type_name_is(pid, c.code_type, "code") ||
        !ls_py_type_name_is(pid, c.unicode_type, "str") ||
        !ls_py_type_name_is(pid, c.long_type, "int") ||
        !ls_py_type_name_is(pid, bytes_type, "bytes") ||
        !ls_py_type_name_is(pid, c.cfunction_type, "builtin_function_or_method") ||
        !ls_py_type_name_is(pid, c.method_type, "method") ||
        (c.cmethod_type && !ls_py_type_name_is(pid, c.cmethod_type, "builtin_method"))) {
        snprintf(whybuf, sizeof whybuf, "CPython 3.%u.%u: type objects not found in memory",
                 minor, micro);
        *why = whybuf;
        return NULL;
    }
    const char *bad = minor == 13 ? ls_py_check_debug_offsets(pid, &c, hex) : NULL;
    if (!bad)
        bad = ls_py_check_threads(pid, &c);
    if (bad) {
        snprintf(whybuf, sizeof whybuf, "CPython 3.%u.%u: %s", minor, micro, bad);
        *why = whybuf;
        return NULL;
    }
    ls_py *py = calloc(1, sizeof *py);
    if (!py) {
        *why = "out of memory";
        return NULL;
    }
    py->pid = pid;
    py->cfg = c;
    py->bytes_type = bytes_type;
    *cfg = c;
    if (desc && desc_len)
        snprintf(desc, desc_len, "CPython 3.%u.%u", minor, micro);
    return py;
}

void ls_py_free(ls_py *py)
{
    if (!py)
        return;
    ls_py_cache_clear(py);
    free(py);
}

/* For tests (pystack_walk --cfg-at): replace the walk's cfg. */
int ls_py_set_cfg_for_test(ls_py *py, const struct ls_py_cfg *cfg)
{
    if (!py || !cfg)
        return -1;
    py->cfg = *cfg;
    py->hrun = 0;
    ls_py_cache_clear(py);
    return 0;
}
