/*
 * pystack.c -- CPython stacks for the recorder's generic loop mode,
 * resolving what BPF captured (ls_py_frame: code object -> function, file,
 * line; ls_py_task_name), and the same walk from user space
 * (ls_py_capture_user, process_vm_readv); the handle's end (ls_py_free).
 * Part of pystack, with pystack_detect.c (ls_py_detect: finding a
 * supported CPython in a process and filling the struct ls_py_cfg that
 * BPF's ls_py_capture walks with) and pystack_tables.c (the offsets of
 * each version); what crosses them: pystack_int.h.  The walk is pywalk.h,
 * shared with BPF; the layout of the captured stack is pystack.h; how each
 * version is walked and how the tables were verified: PYTHON.md.
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
#include "pystack_int.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

/* ---- reading the target ---- */

int ls_py_read(pid_t pid, void *dst, size_t size, uint64_t addr)
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

/* ---- UTF-8 ---- */

/* Appends code point cp (U+FFFD if it is not a scalar value or is NUL) to
 * out[*n], never past cap - 1 bytes; false when it did not fit. */
static bool py_put(char *out, size_t *n, size_t cap, uint32_t cp)
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
static void py_units(const uint8_t *d, size_t nchars, unsigned kind, bool ascii,
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
        if (!py_put(out, &n, cap, cp))
            break;
    }
    out[n] = 0;
}

char *ls_py_str(ls_py *py, uint64_t addr)
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
    py_units(d, nchars, kind, ascii, out, LS_PY_STR_MAX + 1);
    free(d);
    return out;
}

/* ---- line tables ---- */

/* 3.10 (PEP 626): pairs (bytecode bytes: unsigned, line delta: signed,
 * -128 = no line); addr in bytes. */
static int py_line310(const uint8_t *t, size_t n, int first, long addr)
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

static uint32_t py_varint(const uint8_t *t, size_t n, size_t *i)
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

static long py_svarint(const uint8_t *t, size_t n, size_t *i)
{
    uint32_t v = py_varint(t, n, i);
    return v & 1 ? -(long)(v >> 1) : (long)(v >> 1);
}

/* 3.11+ (Objects/locations.md): entries 1cccclll, l+1 code units;
 * c = 15 no location, 14 long form, 13 no column, 10-12 one line (delta
 * c - 10), 0-9 short form (same line).  addr in bytes. */
static int py_line311(const uint8_t *t, size_t n, int first, long addr)
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
            line += py_svarint(t, n, &i);
            l = line;
            py_varint(t, n, &i);         /* end line delta */
            py_varint(t, n, &i);         /* column + 1 */
            py_varint(t, n, &i);         /* end column + 1 */
            break;
        case 13:
            line += py_svarint(t, n, &i);
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

static void py_cache_clear(ls_py *py)
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
static int py_code_hdr(ls_py *py, uint64_t addr, struct ls_py_hdr *h)
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

static uint8_t *py_bytes(ls_py *py, uint64_t addr, uint32_t *len)
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

static struct ls_py_code *py_code(ls_py *py, uint64_t addr)
{
    struct ls_py_hdr h;
    if (!addr || py_code_hdr(py, addr, &h))
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
        py_cache_clear(py);
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
    e->lt = py_bytes(py, h.linetable, &e->lt_len);
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
    struct ls_py_code *e = py_code(py, f->code);
    if (!e)
        return -1;
    snprintf(py->function, sizeof py->function, "%s", e->function ? e->function : "?");
    snprintf(py->file, sizeof py->file, "%s", e->file ? e->file : "?");
    *function = py->function;
    *file = py->file;
    if (e->lt) {
        int first = e->firstlineno > 0 ? e->firstlineno : 0;
        *line = py->cfg.kind == LS_PY_KIND_FRAMEOBJ
                    ? py_line310(e->lt, e->lt_len, first, f->instr)
                    : py_line311(e->lt, e->lt_len, first, f->instr);
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
        py_units(d, n / 4, 4, false, py->task, sizeof py->task);
    else if (s->flags & LS_PYS_NAME_UCS2)
        py_units(d, n / 2, 2, false, py->task, sizeof py->task);
    else
        py_units(d, n, 1, !(s->flags & LS_PYS_NAME_LATIN1), py->task, sizeof py->task);
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

void ls_py_free(ls_py *py)
{
    if (!py)
        return;
    py_cache_clear(py);
    free(py);
}

/* For tests (pystack_walk --cfg-at): replace the walk's cfg. */
int ls_py_set_cfg_for_test(ls_py *py, const struct ls_py_cfg *cfg)
{
    if (!py || !cfg)
        return -1;
    py->cfg = *cfg;
    py->hrun = 0;
    py_cache_clear(py);
    return 0;
}
