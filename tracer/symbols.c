/*
 * symbols.c -- symbolization with libdwfl (see symbols.h).  Results are
 * cached per address in an open-addressing table: task functions and call
 * sites repeat.
 */
#define _GNU_SOURCE
#include "symbols.h"

#include <elfutils/libdwfl.h>
#include <stdlib.h>
#include <string.h>

#define LS_SYM_CACHE 4096     /* slots, power of two */

struct ls_syms {
    Dwfl *dwfl;
    pid_t pid;
    struct { uint64_t addr; ls_sym sym; int used; } cache[LS_SYM_CACHE];
};

static const Dwfl_Callbacks ls_proc_callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
};

static int ls_syms_report(ls_syms *s)
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
    s->dwfl = dwfl_begin(&ls_proc_callbacks);
    if (!s->dwfl || ls_syms_report(s) != 0) {
        ls_syms_free(s);
        return NULL;
    }
    return s;
}

void ls_syms_refresh(ls_syms *s)
{
    ls_syms_report(s);
}

static char *ls_dup(const char *p)
{
    return p ? strdup(p) : NULL;
}

static ls_sym ls_resolve(ls_syms *s, uint64_t addr)
{
    ls_sym r = { 0 };
    Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, addr);
    if (!mod)
        return r;
    const char *mname = dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
    r.module = ls_dup(mname);
    GElf_Off off;
    GElf_Sym sym;
    r.function = ls_dup(dwfl_module_addrinfo(mod, addr, &off, &sym, NULL, NULL, NULL));
    Dwfl_Line *line = dwfl_module_getsrc(mod, addr);
    if (line) {
        int lineno = 0;
        const char *file = dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL);
        r.file = ls_dup(file);
        r.line = lineno;
    }
    return r;
}

ls_sym ls_syms_lookup(ls_syms *s, uint64_t addr)
{
    size_t h = (size_t)((addr * 0x9E3779B97F4A7C15ull) >> 52) & (LS_SYM_CACHE - 1);
    for (size_t i = 0; i < LS_SYM_CACHE; i++) {
        size_t k = (h + i) & (LS_SYM_CACHE - 1);
        if (s->cache[k].used && s->cache[k].addr == addr)
            return s->cache[k].sym;
        if (!s->cache[k].used) {
            s->cache[k].used = 1;
            s->cache[k].addr = addr;
            s->cache[k].sym = ls_resolve(s, addr);
            return s->cache[k].sym;
        }
    }
    /* Full: evict the home slot. */
    free((char *)s->cache[h].sym.function);
    free((char *)s->cache[h].sym.file);
    free((char *)s->cache[h].sym.module);
    s->cache[h].addr = addr;
    s->cache[h].sym = ls_resolve(s, addr);
    return s->cache[h].sym;
}

void ls_syms_free(ls_syms *s)
{
    if (!s)
        return;
    for (size_t k = 0; k < LS_SYM_CACHE; k++) {
        if (!s->cache[k].used)
            continue;
        free((char *)s->cache[k].sym.function);
        free((char *)s->cache[k].sym.file);
        free((char *)s->cache[k].sym.module);
    }
    if (s->dwfl)
        dwfl_end(s->dwfl);
    free(s);
}
