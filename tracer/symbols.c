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

#include <stdlib.h>
#include <string.h>

static const Dwfl_Callbacks ls_proc_callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
};

static int syms_report(ls_syms *s)
{
    dwfl_report_begin(s->dwfl);
    int rc = dwfl_linux_proc_report(s->dwfl, s->pid);
    dwfl_report_end(s->dwfl, NULL, NULL);
    return rc;
}

ls_syms *ls_syms_new(pid_t pid)
{
    ls_syms *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->pid = pid;
    s->pm.fd = -1;
    s->dwfl = dwfl_begin(&ls_proc_callbacks);
    if (!s->dwfl || syms_report(s) != 0) {
        ls_syms_free(s);
        return NULL;
    }
    ls_maps_read(s);
    return s;
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

const ls_sym *ls_syms_lookup(ls_syms *s, uint64_t addr)
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

void ls_syms_free(ls_syms *s)
{
    if (!s)
        return;
    ls_cache_clear(s);
    if (s->dwfl)
        dwfl_end(s->dwfl);
    ls_pm_free(&s->pm);
    free(s->maps);
    free(s->maps_paths);
    free(s);
}

