/*
 * symbols.c -- symbolization with libdwfl (see symbols.h): the handle and
 * the symbol cache.  Results are cached per address in an open-addressing
 * table: task functions and call sites repeat.  Part of symbols, with
 * symbols_maps.c (the process's executable mappings: which code an address
 * is in, ELF or JIT), symbols_dwarf.c (ELF/DWARF lookups with libdw and
 * libdwfl; unwinding) and symbols_perfmap.c (JIT code named from the
 * process's perf map); what crosses them: symbols_int.h.  How JIT code
 * (Node.js and other V8 embedders) is named and unwound: JIT.md.
 */
#define _GNU_SOURCE
#include "symbols_int.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

__thread ls_syms *ls_cur;

/* A module's ELF file: the one the process maps, opened through
 * /proc/PID/map_files while it lives (the very file, even deleted or
 * replaced since, or in another mount namespace), mapped by libelf and
 * its descriptor closed (ELF_C_FDDONE: no descriptor held per file); the
 * vDSO and the rest as libdwfl does by itself (the vDSO from the
 * process's memory, a file by its path). */
static int find_elf(Dwfl_Module *mod, void **user, const char *name, Dwarf_Addr base,
                    char **file_name, Elf **elfp)
{
    ls_syms *s = ls_cur;
    Dwarf_Addr lo, hi;
    const struct ls_map *m;
    if (s && name && name[0] == '/' && s->elf_kept < LS_ELF_KEEP &&
        dwfl_module_info(mod, NULL, &lo, &hi, NULL, NULL, NULL, NULL) &&
        (m = ls_map_of(s, name, lo, hi))) {
        char path[96];
        snprintf(path, sizeof(path), "/proc/%d/map_files/%llx-%llx", (int)s->pid,
                 (unsigned long long)m->start, (unsigned long long)m->end);
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        struct stat st;
        if (fd >= 0) {
            Elf *e = fstat(fd, &st) == 0 && S_ISREG(st.st_mode)
                         ? elf_begin(fd, ELF_C_READ_MMAP, NULL) : NULL;
            char *fn = e ? strdup(name) : NULL;
            if (fn && elf_kind(e) == ELF_K_ELF && elf_cntl(e, ELF_C_FDDONE) == 0) {
                close(fd);
                s->elf_kept++;
                *file_name = fn;
                *elfp = e;
                return -1;
            }
            free(fn);
            if (e)
                elf_end(e);
            close(fd);
        }
    }
    return dwfl_linux_proc_find_elf(mod, user, name, base, file_name, elfp);
}

static const Dwfl_Callbacks ls_proc_callbacks = {
    .find_elf = find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
};

/* Open now the ELF file of every module the process executes code of
 * (and the vDSO, read from its memory), while it lives. */
static int open_cb(Dwfl_Module *mod, void **user, const char *name, Dwarf_Addr start, void *arg)
{
    (void)user, (void)start;
    ls_syms *s = arg;
    Dwarf_Addr lo, hi, bias;
    if (s->elf_kept >= LS_ELF_KEEP)
        return DWARF_CB_ABORT;
    if (!name || !dwfl_module_info(mod, NULL, &lo, &hi, NULL, NULL, NULL, NULL))
        return DWARF_CB_OK;
    if (strncmp(name, "[vdso", 5) == 0 || (name[0] == '/' && ls_map_of(s, name, lo, hi)))
        dwfl_module_getelf(mod, &bias);
    return DWARF_CB_OK;
}

static int count_cb(Dwfl_Module *mod, void **user, const char *name, Dwarf_Addr start, void *arg)
{
    (void)mod, (void)user, (void)name, (void)start;
    ++*(int *)arg;
    return DWARF_CB_OK;
}

/* libdwfl's view of the process made again from its maps, every ELF file
 * it executes opened now; swapped in only if the process still mapped
 * something (it may exit meanwhile: the old view stays). */
bool ls_dwfl_rebuild(ls_syms *s)
{
    Dwfl *d = dwfl_begin(&ls_proc_callbacks);
    if (!d)
        return false;
    dwfl_report_begin(d);
    int rc = dwfl_linux_proc_report(d, s->pid);
    dwfl_report_end(d, NULL, NULL);
    int nmods = 0;
    if (rc == 0)
        dwfl_getmodules(d, count_cb, &nmods, 0);
    if (rc != 0 || nmods == 0) {
        dwfl_end(d);
        return false;
    }
    Dwfl *old = s->dwfl;
    ls_syms *prev = ls_cur;
    s->dwfl = d;
    s->elf_kept = 0;
    ls_cur = s;
    dwfl_getmodules(d, open_cb, s, 0);
    ls_cur = prev;
    if (old)
        dwfl_end(old);
    s->attached = false;              /* dwfl_attach_state again, on this one */
    s->refreshes++;
    /* Names may differ now; the cache is emptied at the next lookup (the
     * caller of the last one may still read its result). */
    s->cache_stale = true;
    return true;
}

ls_syms *ls_syms_new(pid_t pid)
{
    ls_syms *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->pid = pid;
    s->pm.fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    ls_maps_read(s);
    if (!s->dwfl && !ls_dwfl_rebuild(s)) {
        ls_syms_free(s);
        return NULL;
    }
    return s;
}

/* ------------------------------------------------------------ the keeper */

/* What the process executes, cheaply: which executable file (exe: its
 * inode and device) and how much executable memory it maps (vm: VmExe,
 * VmLib, file and JIT code).  false: nothing to read (gone).  A zombie
 * has neither: both 1. */
static bool exec_signature(pid_t pid, uint64_t *exe, uint64_t *vm)
{
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    *vm = *exe = 1;
    const char *keys[] = { "\nVmExe:", "\nVmLib:" };
    for (int k = 0; k < 2; k++) {
        const char *p = strstr(buf, keys[k]);
        if (p)
            *vm = *vm * 1000003u + strtoull(p + strlen(keys[k]), NULL, 10) + 1;
    }
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
    if (stat(path, &st) == 0)
        *exe = ((uint64_t)st.st_ino * 1000003u + st.st_dev) | 2;
    return true;
}

/* A new executable (an exec: a command the recorder started runs its
 * program, which may be done in milliseconds) is read at once, and so is
 * the next change after it or after a read that found files mapped: the
 * kernel maps an exec's file after the exe link changes, ld.so its
 * libraries after that.  Changes of executable memory that map no file
 * (JIT code, all the time) are read at most every `gap`, doubling. */
static void *keeper(void *arg)
{
    ls_syms *s = arg;
    int64_t start = ls_mono_ns(), changed = start, last_read = 0, gap = 0;
    uint64_t exe = 0, vm = 0;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        int64_t now = ls_mono_ns();
        int64_t period = now - changed < LS_KEEP_FAST_FOR_NS || now - start < LS_KEEP_FAST_FOR_NS
                             ? LS_KEEP_FAST_NS : LS_KEEP_SLOW_NS;
        int64_t until = now + period;
        struct timespec ts = { until / 1000000000ll, until % 1000000000ll };
        while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &ts) != ETIMEDOUT)
            ;
        if (s->stop)
            break;
        pthread_mutex_unlock(&s->mu);
        uint64_t now_exe, now_vm;
        bool alive = exec_signature(s->pid, &now_exe, &now_vm);
        pthread_mutex_lock(&s->mu);
        if (!alive || s->gone)
            break;                    /* exited: what we have is what it had */
        now = ls_mono_ns();
        if (now_exe == exe && (now_vm == vm || now - last_read < gap))
            continue;
        bool exec = now_exe != exe;
        exe = now_exe;
        vm = now_vm;
        last_read = now;
        uint64_t before = s->refreshes;
        ls_maps_read(s);
        if (exec || s->refreshes != before) {
            /* a new program (seen before the kernel has mapped its file,
             * maybe) or files mapped: look often for a while, and read at
             * the next change */
            changed = now;
            gap = 0;
        } else {                      /* JIT code only: read ever more seldom */
            gap = gap ? gap * 2 : LS_KEEP_GAP_MIN_NS;
            if (gap > LS_KEEP_GAP_MAX_NS)
                gap = LS_KEEP_GAP_MAX_NS;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int ls_syms_watch(ls_syms *s)
{
    if (!s)
        return -1;
    pthread_mutex_lock(&s->mu);
    int rc = s->keeping ? 0 : pthread_create(&s->keeper, NULL, keeper, s);
    if (rc == 0)
        s->keeping = true;
    pthread_mutex_unlock(&s->mu);
    return rc ? -1 : 0;
}

void ls_syms_refresh(ls_syms *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    if (!s->gone)
        ls_maps_read(s);
    pthread_mutex_unlock(&s->mu);
}

uint64_t ls_syms_refreshes(ls_syms *s)
{
    return s ? s->refreshes : 0;
}

static void sym_release(ls_sym *r)
{
    free((char *)r->function);
    free((char *)r->file);
    free((char *)r->module);
    const ls_sym *c = r->inlined_into;
    while (c) {
        const ls_sym *next = c->inlined_into;
        free((char *)c->function);
        free((char *)c->file);
        free((char *)c->module);
        free((ls_sym *)c);
        c = next;
    }
}

/* Forget every cached symbol.  Nothing outside may hold a pointer into
 * the cache across lookups (symbols.h), so this is always safe. */
void ls_cache_clear(ls_syms *s)
{
    for (size_t k = 0; k < LS_SYM_CACHE; k++) {
        if (s->cache[k].used)
            sym_release(&s->cache[k].sym);
        s->cache[k].used = 0;
    }
    s->ncached = 0;
}

static const ls_sym *lookup(ls_syms *s, uint64_t addr)
{
    size_t h = (size_t)((addr * 0x9E3779B97F4A7C15ull) >> 52) & (LS_SYM_CACHE - 1);
    size_t k = h;
    for (;; k = (k + 1) & (LS_SYM_CACHE - 1)) {
        if (!s->cache[k].used)
            break;
        if (s->cache[k].addr == addr) {
            /* JIT code: named again if the perf map changed since (code
             * freed and new code at the same address). */
            if (s->cache[k].jit) {
                ls_pm_ensure(s);
                ls_pm_poll(s);
                if (s->cache[k].gen != s->pm.gen) {
                    sym_release(&s->cache[k].sym);
                    s->cache[k].sym = ls_resolve(s, addr, &s->cache[k].jit);
                    s->cache[k].gen = s->pm.gen;
                }
            }
            return &s->cache[k].sym;
        }
    }
    /* Bounded memory and short probe sequences whatever addresses the
     * target makes us resolve: start over when three quarters full. */
    if (s->ncached >= LS_SYM_CACHE / 4 * 3) {
        ls_cache_clear(s);
        k = h;
    }
    s->cache[k].used = 1;
    s->cache[k].addr = addr;
    s->cache[k].sym = ls_resolve(s, addr, &s->cache[k].jit);
    s->cache[k].gen = s->pm.gen;
    s->ncached++;
    return &s->cache[k].sym;
}

const ls_sym *ls_syms_lookup(ls_syms *s, uint64_t addr)
{
    pthread_mutex_lock(&s->mu);
    ls_syms *prev = ls_cur;
    ls_cur = s;
    if (s->cache_stale) {
        s->cache_stale = false;
        ls_cache_clear(s);
    }
    const ls_sym *r = lookup(s, addr);
    ls_cur = prev;
    pthread_mutex_unlock(&s->mu);
    return r;
}

void ls_syms_free(ls_syms *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    bool keeping = s->keeping;
    pthread_mutex_unlock(&s->mu);
    if (keeping)
        pthread_join(s->keeper, NULL);
    ls_cache_clear(s);
    if (s->dwfl)
        dwfl_end(s->dwfl);
    ls_pm_free(&s->pm);
    free(s->maps);
    free(s->maps_paths);
    free(s->next_maps);
    free(s->next_paths);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

