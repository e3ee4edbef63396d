/*
 * pystack_detect.c -- part of pystack (CPython stacks, PYTHON.md): finding
 * a supported CPython in a process (ls_py_detect), which fills the struct
 * ls_py_cfg that BPF's ls_py_capture walks with and returns the handle
 * pystack.c resolves with.  Depends on pystack_int.h (the handle,
 * ls_py_read, ls_py_table of pystack_tables.c) and libelf.
 *
 * Detection: /proc/PID/exe, then the libpython3.X.so mappings of
 * /proc/PID/maps; the symbols (_PyRuntime, Py_Version, the type objects)
 * from .dynsym/.symtab with libelf, plus the mapping's load bias.  The
 * version is Py_Version (3.11+) or, for 3.10, the "3.10.N" string of
 * .rodata.
 *
 * The table of the version found is checked against the target's own
 * data: the type objects' names, the first thread state's back pointer and
 * thread id, and in 3.13 the _Py_DebugOffsets at the start of _PyRuntime.
 * Anything else is refused with a reason.  The target is hostile: every
 * pointer and string read from it is checked, loops are bounded.
 */
#define _GNU_SOURCE
#include "pystack_int.h"

#include <ctype.h>
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
#include <unistd.h>

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
    uint64_t asyncio_debug;         /* 3.14+: link-time address of .AsyncioDebug, 0 = none */
};

static bool py_is_version_str(const char *s, size_t n)
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

static int py_elf_read(int fd, struct ls_py_elf *out)
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
                if (py_is_version_str(p + i, len)) {
                    memcpy(out->rodata_version, p + i, len);
                    out->rodata_version[len] = 0;
                    break;
                }
            }
        }
        if (sname && !strcmp(sname, ".AsyncioDebug") && sh.sh_type == SHT_PROGBITS)
            out->asyncio_debug = sh.sh_addr;
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

int ls_py_maps(pid_t pid, int (*fn)(const struct ls_py_map *, void *), void *arg)
{
    char p[64], line[PATH_MAX + 256];
    snprintf(p, sizeof p, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(p, "re");
    if (!f)
        return -1;
    int rc = 0, n = 0;
    while (fgets(line, sizeof line, f) && n++ < 65536) {
        struct ls_py_map m;
        int pos = 0;
        memset(&m, 0, sizeof m);
        if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %lu %n", &m.start,
                   &m.end, m.perms, &m.off, &m.dmaj, &m.dmin, &m.ino, &pos) < 7)
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

static int py_find_file(const struct ls_py_map *m, void *arg)
{
    struct ls_py_find *f = arg;
    if (m->ino == f->ino && m->dmaj == f->dmaj && m->dmin == f->dmin && m->off == 0 &&
        (!f->found || m->start < f->base)) {
        f->base = m->start;
        f->found = true;
    }
    return 0;
}

static int py_find_lib(const struct ls_py_map *m, void *arg)
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

static int py_is_thread_of(pid_t pid, uint64_t tid)
{
    char p[64];
    struct stat st;
    if (!tid || tid > INT_MAX)
        return 0;
    snprintf(p, sizeof p, "/proc/%d/task/%llu", (int)pid, (unsigned long long)tid);
    return stat(p, &st) == 0;
}

static int py_type_name_is(pid_t pid, uint64_t type, const char *want)
{
    char buf[32] = { 0 };
    uint64_t name = 0;
    size_t n = strlen(want) + 1;
    if (!type || ls_py_read(pid, &name, 8, type + 24) || n > sizeof buf ||
        ls_py_read(pid, buf, n, name))
        return 0;
    return !memcmp(buf, want, n);
}

/* 3.13+: the runtime's own offsets (_Py_DebugOffsets, 8-byte words from
 * the start of _PyRuntime) taken over the table's wherever it publishes one
 * (the table keeps the rest: asyncio's objects, code details); a published
 * offset beyond any structure's size refuses the target.  Word indexes
 * follow the field order of Include/internal/pycore_debug_offsets.h (3.14,
 * 3.15; pycore_runtime.h in 3.13), one column per version, checked by
 * compiling offsetof() against each version's header (PYTHON.md). */
enum { DBG_13, DBG_14, DBG_15, DBG_N };
static const struct py_dbg_word {
    size_t off;                     /* in struct ls_py_cfg, or ~0: only in struct ls_py_dbg */
    size_t dbg;                     /* in struct ls_py_dbg, or ~0 */
    uint8_t word[DBG_N];
} py_dbg_words[] = {
#define C(f) offsetof(struct ls_py_cfg, f), ~(size_t)0
#define D(f) ~(size_t)0, offsetof(struct ls_py_dbg, f)
    { C(runtime_interp_head), { 5, 5, 5 } },
    { C(interp_next), { 8, 8, 8 } },
    { C(interp_threads_head), { 9, 9, 9 } },
    { D(imports_modules), { 11, 12, 12 } },
    { C(tstate_next), { 21, 24, 24 } },
    { C(tstate_interp), { 22, 25, 25 } },
    { C(tstate_frame), { 23, 26, 26 } },
    { C(tstate_tid), { 25, 28, 31 } },
    { C(frame_previous), { 29, 32, 40 } },
    { C(frame_code), { 30, 33, 41 } },
    { C(frame_instr), { 31, 34, 42 } },
    { C(frame_localsplus), { 32, 35, 43 } },
    { C(frame_owner), { 33, 36, 44 } },
    { D(stackpointer), { 0, 37, 45 } },
    { C(code_filename), { 35, 40, 48 } },
    { C(code_name), { 36, 41, 49 } },
    { C(code_qualname), { 37, 42, 50 } },
    { C(code_linetable), { 38, 43, 51 } },
    { C(code_firstlineno), { 39, 44, 52 } },
    { C(code_adaptive), { 43, 48, 56 } },
    { C(long_digit), { 63, 73, 85 } },
    { C(bytes_size), { 65, 75, 87 } },
    { C(bytes_sval), { 66, 76, 88 } },
    { C(unicode_state), { 68, 78, 90 } },
    { C(unicode_len), { 69, 79, 91 } },
    { C(unicode_data), { 70, 80, 92 } },
    { D(gi_iframe), { 0, 85, 101 } },
    { D(gi_frame_state), { 0, 86, 102 } },
#undef C
#undef D
};

static const char *py_check_debug_offsets(pid_t pid, unsigned minor, struct ls_py_cfg *c,
                                          struct ls_py_dbg *dbg, uint32_t hexver)
{
    uint64_t w[112];
    unsigned col = minor - 13;
    if (col >= DBG_N)
        return "no _Py_DebugOffsets layout for this version";
    if (ls_py_read(pid, w, sizeof w, c->runtime))
        return "cannot read _Py_DebugOffsets";
    if (memcmp(&w[0], "xdebugpy", 8))
        return "no _Py_DebugOffsets cookie";
    if ((w[1] >> 16) != (hexver >> 16))
        return "_Py_DebugOffsets: another version";
    if (w[2])
        return "free-threaded build: unsupported";
    size_t n = sizeof py_dbg_words / sizeof py_dbg_words[0];
    for (size_t i = 0; i < n; i++) {
        unsigned k = py_dbg_words[i].word[col];
        if (k && w[k] >= (1u << 16))
            return "_Py_DebugOffsets: an offset out of range";
    }
    for (size_t i = 0; i < n; i++) {
        unsigned k = py_dbg_words[i].word[col];
        uint32_t v = (uint32_t)w[k];
        if (!k)
            continue;
        if (py_dbg_words[i].off != ~(size_t)0)
            memcpy((char *)c + py_dbg_words[i].off, &v, 4);
        else
            memcpy((char *)dbg + py_dbg_words[i].dbg, &v, 4);
    }
    dbg->ok = true;
    return NULL;
}

/* The first thread state: back pointer and thread id; 3.10 learns where
 * glibc keeps the tid in struct pthread if not at the usual place. */
static const char *py_check_threads(pid_t pid, struct ls_py_cfg *c)
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
        return py_is_thread_of(pid, tid) ? NULL : "native_thread_id is not a thread of the process";
    /* 3.10: tid is a pthread_t */
    uint32_t t = 0;
    if (!ls_py_read(pid, &t, 4, tid + c->pthread_tid) && py_is_thread_of(pid, t))
        return NULL;
    uint32_t words[512];
    if (tid < 4096 || ls_py_read(pid, words, sizeof words, tid))
        return "cannot read the thread's struct pthread";
    for (unsigned i = 4; i < 512; i++)
        if (py_is_thread_of(pid, words[i]) && words[i] > 1) {
            c->pthread_tid = i * 4;
            return NULL;
        }
    return "no thread id in the thread's struct pthread";
}

/* A mapping of a file named _asyncio.*.so (its first, at offset 0). */
static int py_find_asyncio_so(const struct ls_py_map *m, void *arg)
{
    struct ls_py_map *out = arg;
    const char *b = strrchr(m->path, '/');
    b = b ? b + 1 : m->path;
    size_t n = strlen(b);
    if (strncmp(b, "_asyncio.", 9) || n < 12 || strcmp(b + n - 3, ".so") || m->off)
        return 0;
    *out = *m;
    return 1;
}

int ls_py_map_file(pid_t pid, const struct ls_py_map *m, char *buf, size_t cap)
{
    if (m->path[0] != '/')
        return -1;
    snprintf(buf, cap, "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)pid, m->start, m->end);
    if (!access(buf, R_OK))
        return 0;
    if ((size_t)snprintf(buf, cap, "/proc/%d/root%s", (int)pid, m->path) < cap &&
        !access(buf, R_OK))
        return 0;
    if ((size_t)snprintf(buf, cap, "%s", m->path) < cap && !access(buf, R_OK))
        return 0;
    return -1;
}

uint64_t ls_py_asyncio_debug(ls_py *py)
{
    if (py->asyncio_debug)
        return py->asyncio_debug;
    struct ls_py_map m;
    char p[PATH_MAX + 64];
    if (ls_py_maps(py->pid, py_find_asyncio_so, &m) <= 0 ||
        ls_py_map_file(py->pid, &m, p, sizeof p))
        return 0;
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    struct ls_py_elf elf;
    int ok = fd >= 0 && !py_elf_read(fd, &elf) && elf.type == ET_DYN && elf.asyncio_debug;
    if (fd >= 0)
        close(fd);
    if (!ok || elf.asyncio_debug < elf.min_vaddr)
        return 0;
    py->asyncio_debug = m.start + (elf.asyncio_debug - elf.min_vaddr);
    return py->asyncio_debug;
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
    int ok = fd >= 0 && !py_elf_read(fd, &elf) && elf.found[S_RUNTIME];
    if (fd >= 0)
        close(fd);
    char fname[PATH_MAX] = "";
    if (ok) {
        ls_py_maps(pid, py_find_file, &find);
        if (readlink(p, fname, sizeof fname - 1) < 0)
            fname[0] = 0;
    } else {
        /* the interpreter in a libpython3.X.so */
        ls_py_maps(pid, py_find_lib, &find);
        if (!find.lib_found) {
            *why = "not CPython";
            return NULL;
        }
        fd = ls_py_map_file(pid, &find.lib, p, sizeof p) ? -1 : open(p, O_RDONLY | O_CLOEXEC);
        ok = fd >= 0 && !py_elf_read(fd, &elf) && elf.found[S_RUNTIME];
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
        ls_py_maps(pid, py_find_file, &find);
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
            /* Py_Version is constant data, readable from the moment the
             * file is mapped; failing that, the process is between fork
             * and exec, or exiting: what was read of /proc/PID/exe and
             * maps belongs to another image. */
            *why = "CPython not initialized yet (Py_Version unreadable)";
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
    if (minor < 10 || minor > 15) {
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
    /* the published offsets (constant data: readable before initialization) */
    struct ls_py_dbg dbg = { 0 };
    const char *bad = minor >= 13 ? py_check_debug_offsets(pid, minor, &c, &dbg, hex) : NULL;
    if (bad) {
        snprintf(whybuf, sizeof whybuf, "CPython 3.%u.%u: %s", minor, micro, bad);
        *why = whybuf;
        return NULL;
    }
    /* initialized (before: interpreters.head is NULL, and the loader may
     * not even have relocated the type objects yet)? */
    uint64_t head = 0;
    if (ls_py_read(pid, &head, 8, c.runtime + c.runtime_interp_head) || !head) {
        snprintf(whybuf, sizeof whybuf, "CPython 3.%u.%u: not initialized yet", minor, micro);
        *why = whybuf;
        return NULL;
    }
    /* the symbols against memory: their tp_name */
    if (!py_type_name_is(pid, c.code_type, "code") ||
        !py_type_name_is(pid, c.unicode_type, "str") ||
        !py_type_name_is(pid, c.long_type, "int") ||
        !py_type_name_is(pid, bytes_type, "bytes") ||
        !py_type_name_is(pid, c.cfunction_type, "builtin_function_or_method") ||
        !py_type_name_is(pid, c.method_type, "method") ||
        (c.cmethod_type && !py_type_name_is(pid, c.cmethod_type, "builtin_method"))) {
        snprintf(whybuf, sizeof whybuf, "CPython 3.%u.%u: type objects not found in memory",
                 minor, micro);
        *why = whybuf;
        return NULL;
    }
    bad = py_check_threads(pid, &c);
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
    py->dbg = dbg;
    py->asyncio_debug = elf.asyncio_debug ? elf.asyncio_debug + bias : 0;
    py->bytes_type = bytes_type;
    *cfg = c;
    if (desc && desc_len)
        snprintf(desc, desc_len, "CPython 3.%u.%u", minor, micro);
    return py;
}
