/*
 * symbols_maps.c -- part of symbols (symbols.h): the process's executable
 * mappings and which code an address is in (ls_resolve), then named by
 * symbols_dwarf.c (ELF) or symbols_perfmap.c (JIT).  Depends on
 * symbols_int.h.
 *
 * Which addresses are ELF code is decided from the process's executable
 * mappings (/proc/PID/maps, bounded), not from libdwfl's module spans
 * alone: V8 remaps a copy of node's builtins next to its code space, so
 * libdwfl's module for /usr/bin/node spans from 0x400000 to that copy and
 * "contains" every JIT address in between.  A pc in a file mapping is
 * translated through its file offset to the module's address (which also
 * names the remapped builtins); a pc in anonymous executable memory is
 * JIT code.
 */
#define _GNU_SOURCE
#include "symbols_int.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------- executable mappings */

bool ls_hex(const char **p, const char *end, uint64_t *v)
{
    uint64_t x = 0;
    int n = 0;
    const char *q = *p;
    for (; q < end; q++, n++) {
        int d;
        if (*q >= '0' && *q <= '9')
            d = *q - '0';
        else if (*q >= 'a' && *q <= 'f')
            d = *q - 'a' + 10;
        else if (*q >= 'A' && *q <= 'F')
            d = *q - 'A' + 10;
        else
            break;
        if (n == 16)
            return false;
        x = x << 4 | (uint64_t)d;
    }
    if (n == 0)
        return false;
    *p = q;
    *v = x;
    return true;
}

/* One line of /proc/PID/maps: "start-end perms offset dev inode   path",
 * into the read in progress (next_*). */
static void maps_line(ls_syms *s, const char *l, size_t n)
{
    const char *e = l + n, *p = l;
    uint64_t start, end, off;
    if (!ls_hex(&p, e, &start) || p == e || *p++ != '-' || !ls_hex(&p, e, &end) ||
        e - p < 6 || p[0] != ' ' || p[3] != 'x')
        return;
    p += 5;                           /* " rwxp" */
    if (p == e || *p++ != ' ' || !ls_hex(&p, e, &off) || start >= end)
        return;
    /* dev, inode, then spaces, then the path (may be absent) */
    for (int f = 0; f < 2; f++) {
        while (p < e && *p == ' ')
            p++;
        while (p < e && *p != ' ')
            p++;
    }
    while (p < e && *p == ' ')
        p++;
    if (s->next_nmaps == LS_MAPS_MAX)
        return;
    struct ls_map *m = &s->next_maps[s->next_nmaps];
    m->start = start;
    m->end = end;
    m->off = off;
    m->path = LS_ANON_PATH;
    if (p < e && *p == '/') {
        size_t len = (size_t)(e - p);
        m->path = LS_NO_PATH;
        /* consecutive mappings of one file share its name */
        if (s->next_nmaps && s->next_maps[s->next_nmaps - 1].path < LS_ANON_PATH &&
            strlen(s->next_paths + s->next_maps[s->next_nmaps - 1].path) == len &&
            memcmp(s->next_paths + s->next_maps[s->next_nmaps - 1].path, p, len) == 0)
            m->path = s->next_maps[s->next_nmaps - 1].path;
        else if (s->next_paths_len + len + 1 <= LS_MAPS_PATHS && !memchr(p, 0, len)) {
            memcpy(s->next_paths + s->next_paths_len, p, len);
            s->next_paths[s->next_paths_len + len] = 0;
            m->path = (uint32_t)s->next_paths_len;
            s->next_paths_len += len + 1;
        }
    } else if (p < e && *p == '[') {
        /* [vdso], [vsyscall]: libdwfl knows the vDSO; named special mappings
         * are not JIT code (anon:NAME ones are: prctl-named anonymous memory) */
        if (!(e - p > 6 && memcmp(p, "[anon:", 6) == 0))
            m->path = LS_NO_PATH;
    }
    s->next_nmaps++;
}

/* Which files the executable mappings are: libdwfl's view is made again
 * only when this changes. */
static uint64_t files_hash(const ls_syms *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
#define LS_MIX(v) (h = (h ^ (uint64_t)(v)) * 0x100000001b3ull)
    for (size_t i = 0; i < s->nmaps; i++) {
        const struct ls_map *m = &s->maps[i];
        if (m->path >= LS_ANON_PATH)
            continue;
        LS_MIX(m->start);
        LS_MIX(m->end);
        LS_MIX(m->off);
        for (const char *c = s->maps_paths + m->path; *c; c++)
            LS_MIX((unsigned char)*c);
    }
#undef LS_MIX
    return h;
}

static bool maps_alloc(ls_syms *s)
{
    if (!s->maps && !(s->maps = malloc(LS_MAPS_MAX * sizeof(*s->maps))))
        return false;
    if (!s->next_maps && !(s->next_maps = malloc(LS_MAPS_MAX * sizeof(*s->next_maps))))
        return false;
    if (!s->maps_paths && !(s->maps_paths = malloc(LS_MAPS_PATHS)))
        return false;
    if (!s->next_paths && !(s->next_paths = malloc(LS_MAPS_PATHS)))
        return false;
    return true;
}

/* Read the executable mappings again.  Only a read that found some
 * replaces the last one: a process that has exited (a zombie's maps are
 * empty, a reaped one's gone) keeps the view it had while it lived, and
 * so does libdwfl's, which is made again (and its ELF files opened) only
 * when the files mapped changed. */
bool ls_maps_read(ls_syms *s)
{
    s->maps_read_ns = ls_mono_ns();
    if (!maps_alloc(s))
        return false;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)s->pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        s->gone = true;
        return false;
    }
    s->next_nmaps = 0;
    s->next_paths_len = 0;
    static __thread char buf[65536];
    size_t have = 0, total = 0;
    bool skipping = false;            /* the rest of a line too long to keep */
    for (;;) {
        ssize_t n = read(fd, buf + have, sizeof(buf) - have);
        if (n <= 0)
            break;
        total += (size_t)n;
        have += (size_t)n;
        size_t pos = 0;
        for (;;) {
            char *nl = memchr(buf + pos, '\n', have - pos);
            if (!nl)
                break;
            if (!skipping)
                maps_line(s, buf + pos, (size_t)(nl - (buf + pos)));
            skipping = false;
            pos = (size_t)(nl - buf) + 1;
        }
        memmove(buf, buf + pos, have - pos);
        have -= pos;
        if (have == sizeof(buf)) {    /* a line longer than the buffer */
            have = 0;
            skipping = true;
        }
        if (total >= LS_MAPS_READ)
            break;
    }
    close(fd);
    /* The kernel lists mappings sorted; keep the table sorted whatever. */
    for (size_t i = 1; i < s->next_nmaps; i++)
        if (s->next_maps[i].start < s->next_maps[i - 1].end) {
            s->next_nmaps = i;        /* not sorted: keep the sorted prefix */
            break;
        }
    if (s->next_nmaps == 0) {         /* exited (or maps nothing executable) */
        s->gone = true;
        return false;
    }
    s->gone = false;
    struct ls_map *tm = s->maps;
    s->maps = s->next_maps;
    s->next_maps = tm;
    s->nmaps = s->next_nmaps;
    char *tp = s->maps_paths;
    s->maps_paths = s->next_paths;
    s->next_paths = tp;
    s->maps_paths_len = s->next_paths_len;
    uint64_t h = files_hash(s);
    if (!s->dwfl || h != s->files_hash) {
        if (ls_dwfl_rebuild(s))
            s->files_hash = h;
    }
    return true;
}

/* An executable mapping of file `path` within [lo, hi) (a module's span). */
const struct ls_map *ls_map_of(const ls_syms *s, const char *path, uint64_t lo, uint64_t hi)
{
    size_t a = 0, b = s->nmaps;
    while (a < b) {                   /* the first mapping ending after lo */
        size_t mid = a + (b - a) / 2;
        if (s->maps[mid].end <= lo)
            a = mid + 1;
        else
            b = mid;
    }
    for (size_t i = a; i < s->nmaps && s->maps[i].start < hi; i++)
        if (s->maps[i].path < LS_ANON_PATH && strcmp(s->maps_paths + s->maps[i].path, path) == 0)
            return &s->maps[i];
    return NULL;
}

static const struct ls_map *map_find(const ls_syms *s, uint64_t addr)
{
    size_t lo = 0, hi = s->nmaps;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->maps[mid].end <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->nmaps && s->maps[lo].start <= addr ? &s->maps[lo] : NULL;
}

/* Which code addr is in, then its frame(s); *jit set when it is (or may
 * be) JIT code, whose name can change as the perf map grows. */
ls_sym ls_resolve(ls_syms *s, uint64_t addr, int *jit)
{
    ls_sym r = { 0 };
    *jit = 0;
    const struct ls_map *m = map_find(s, addr);
    if (!m && !s->gone && ls_mono_ns() - s->maps_read_ns > LS_MAPS_REREAD_NS) {
        ls_maps_read(s);              /* new code mapped since (while it lives) */
        m = map_find(s, addr);
    }
    if (m && m->path < LS_ANON_PATH) {
        /* A file: the module address of its file offset (the same address
         * but where the file is mapped again elsewhere, as V8's builtins). */
        const char *path = s->maps_paths + m->path;
        uint64_t off = addr - m->start + m->off, maddr;
        Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, addr);
        const char *mname = mod ? dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, NULL, NULL) : NULL;
        if (!mname || strcmp(mname, path) != 0 || !ls_mod_addr(mod, off, &maddr)) {
            struct ls_mod_find f = { path, NULL };
            dwfl_getmodules(s->dwfl, ls_mod_by_name_cb, &f, 0);
            mod = f.mod;
            if (!mod || !ls_mod_addr(mod, off, &maddr)) {
                r.module = ls_dup(path);
                return r;
            }
        }
        r = ls_resolve_mod(mod, maddr);
        /* V8's interpreter: a JS frame named only with
         * --interpreted-frames-native-stack (then it is JIT code) */
        if (r.function && strcmp(r.function, "Builtins_InterpreterEntryTrampoline") == 0) {
            s->jit_frames++;
            s->jit_unnamed++;
        }
        return r;
    }
    if (!m || m->path == LS_NO_PATH) {
        Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, addr);
        if (mod && ls_mod_contains(mod, addr))
            return ls_resolve_mod(mod, addr);
        if (m)
            return r;                 /* [vsyscall] or a path not kept */
    }
    /* Anonymous executable memory (or no mapping known): JIT code. */
    *jit = 1;
    if (m)
        s->jit_frames++;
    ls_pm_ensure(s);
    const char *name = ls_pm_name(s, addr);
    if (!name && ls_pm_poll(s))
        name = ls_pm_name(s, addr);
    if (name) {
        ls_jit_name(name, &r);
    } else if (m) {
        s->jit_unnamed++;
        r.module = ls_dup("[anon]");
    }
    return r;
}

